"""Shared test code for muxhost-claude: a fake Anthropic Messages API server, a seeded HOME for the
real ``claude`` TUI, and small helpers (tree hashes). Loaded by pytest as a conftest; nothing here is
imported by name from the test modules (pytest runs with ``--import-mode=importlib``)."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from muxhost.testing import needs_agent_cli

from muxhost.testing import tree_hash  # noqa: F401  (also a ClaudeWorld method)

API_KEY = "sk-ant-muxhost-test-key-0123456789abcdef"

# Words the scripted model reacts to (typed into the TUI by the tests).
MAKE_STUFF = "MUXHOST_MAKE_STUFF"
SUBAGENT_PROMPT = "MUXHOST_SUBAGENT_WORK"
BACKGROUND = "MUXHOST_BACKGROUND"
SPAWN_CHILD = "MUXHOST_SPAWN_CHILD"
SLOW = "MUXHOST_SLOW"                    # "MUXHOST_SLOW <s>": a text answer streamed over <s> seconds
ASK_BASH = "MUXHOST_ASK_BASH"            # a Bash call (asks for permission unless settings allow Bash)
SUB_THEN_SLOW = "MUXHOST_SUB_THEN_SLOW"  # "… <s>": a quick sub-agent, then an answer streamed over <s> s
QUICK_SUB = "MUXHOST_QUICK_SUB"          # a sub-agent that answers at once
HANG = "MUXHOST_HANG"                    # the answer's headers, then not a byte until the server stops
ASKED_FILE = "asked-for.txt"
CREATED_FILE = "made-by-claude.txt"
SUB_FILE = "made-by-subagent.txt"


# --------------------------------------------------------------------------------------------------
# fake Anthropic server

def _sse(event: str, data: dict) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    out = []
    for block in content or ():
        if isinstance(block, dict):
            if block.get("type") == "text":
                out.append(block.get("text", ""))
            elif block.get("type") == "tool_result":
                out.append(_text_of(block.get("content")))
    return "\n".join(out)


def _is_tool_result(msg: dict) -> bool:
    c = msg.get("content")
    return isinstance(c, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in c)


class FakeAnthropic:
    """A threaded HTTP server on 127.0.0.1 (port 0) that answers ``POST /v1/messages`` the way the
    Messages API streams, with a scripted model:

    - a conversation whose first real prompt contains ``MUXHOST_SUBAGENT_WORK`` is a sub-agent: it
      writes ``made-by-subagent.txt`` once, then answers "sub-agent done" (with ``MUXHOST_SLOW <s>``
      in that prompt too: it streams "sub-agent done" over ``<s>`` seconds instead);
    - a turn whose prompt contains ``MUXHOST_MAKE_STUFF`` calls, one per response: ``Write`` (a file in
      the cwd), the task tool (``TaskCreate`` when offered, else ``TodoWrite``), the sub-agent tool
      (``Agent`` or ``Task``), then answers "all done";
    - a turn whose prompt is ``MUXHOST_SPAWN_CHILD <text reversed>`` runs a sub-agent whose prompt holds
      the text (the right way round: only the sub-agent's files and the call itself hold it), then
      answers "child done";
    - ``MUXHOST_SLOW <s>``: a text answer streamed over ``<s>`` seconds, ending "slow done";
    - ``MUXHOST_ASK_BASH``: calls ``Bash`` (``touch asked-for.txt``), then answers "bash done";
    - ``MUXHOST_SUB_THEN_SLOW <s>``: runs a sub-agent that answers at once ("sub-agent done"), then
      streams its own answer over ``<s>`` seconds, ending "parent done";
    - ``MUXHOST_HANG``: the response headers, then not one byte, the request held open until
      :meth:`stop` (a model that hangs: the turn stays open with nothing written anywhere);
    - anything else (titles, plain prompts) gets a short text answer.

    Every request is kept in ``self.requests`` (path, headers, body; ``answer`` and ``stop``: the text and
    the stop reason it is given; ``t``: its arrival, ``sent``: the end of its answer, None until then, both
    ``time.monotonic()``); every finished turn in ``self.turns``.
    """

    def __init__(self, cwd_hint: str | None = None):
        self.requests: list[dict] = []
        self.turns: list[dict] = []  # every finished answer: {"prompt": last prompt, "text": answer}
        self.lock = threading.Lock()
        self.cwd_hint = cwd_hint
        self.release = threading.Event()  # set by stop(): a held (HANG) request ends
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):  # quiet
                pass

            def _body(self) -> bytes:
                n = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(n) if n else b""

            def do_GET(self):
                self._json(200, {})

            def do_HEAD(self):
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self):
                raw = self._body()
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                path = self.path.split("?")[0]
                entry = {"path": self.path, "headers": dict(self.headers), "body": body, "t": time.monotonic(),
                         "sent": None}
                with outer.lock:
                    outer.requests.append(entry)
                if path.endswith("/count_tokens"):
                    return self._json(200, {"input_tokens": 10})
                if not path.endswith("/v1/messages"):
                    return self._json(200, {})
                blocks, stop = outer.answer(body)
                entry["answer"], entry["stop"] = "".join(b.get("text", "") for b in blocks), stop
                if stop == "hang":
                    return self._hang()
                try:
                    if body.get("stream"):
                        self._stream(body, blocks, stop)
                    else:
                        self._json(200, outer.message(body, blocks, stop))
                except (BrokenPipeError, ConnectionResetError):  # the client went away mid-answer
                    return
                entry["sent"] = time.monotonic()
                if stop == "end_turn":
                    prompts = [m for m in body.get("messages") or () if m.get("role") == "user" and not _is_tool_result(m)]
                    with outer.lock:
                        outer.turns.append({"prompt": _text_of(prompts[-1].get("content")) if prompts else "",
                                            "text": "".join(b.get("text", "") for b in blocks),
                                            "t": entry["sent"]})

            def _json(self, code: int, obj: Any):
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _hang(self):
                """Headers of a stream, then nothing until the server stops (then the connection closes)."""
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self.wfile.flush()
                outer.release.wait()
                self.close_connection = True

            def _stream(self, body: dict, blocks: list[dict], stop: str):
                """The events of one answer; a text block with ``pace`` streams its words one delta
                every ``pace`` seconds (chunked, flushed as they go), the rest in one write."""
                paced = any(b.get("pace") for b in blocks)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                if paced:
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                out = [_sse("message_start", {"type": "message_start", "message": outer.message(body, [], None)})]

                def flush():
                    data = b"".join(out)
                    out.clear()
                    if data:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                        self.wfile.flush()

                for i, b in enumerate(blocks):
                    if b["type"] == "text":
                        out.append(_sse("content_block_start", {"type": "content_block_start", "index": i,
                                                                "content_block": {"type": "text", "text": ""}}))
                        pieces = [w + " " for w in b["text"].split(" ")] if b.get("pace") else [b["text"]]
                        for piece in pieces:
                            out.append(_sse("content_block_delta", {"type": "content_block_delta", "index": i,
                                                                    "delta": {"type": "text_delta", "text": piece}}))
                            if b.get("pace"):
                                flush()
                                time.sleep(b["pace"])
                    else:
                        out.append(_sse("content_block_start", {"type": "content_block_start", "index": i,
                                                                "content_block": {"type": "tool_use", "id": b["id"],
                                                                                  "name": b["name"], "input": {}}}))
                        out.append(_sse("content_block_delta", {"type": "content_block_delta", "index": i,
                                                                "delta": {"type": "input_json_delta",
                                                                          "partial_json": json.dumps(b["input"])}}))
                    out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": i}))
                out.append(_sse("message_delta", {"type": "message_delta",
                                                  "delta": {"stop_reason": stop, "stop_sequence": None},
                                                  "usage": {"output_tokens": 12}}))
                out.append(_sse("message_stop", {"type": "message_stop"}))
                if paced:
                    flush()
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                    return
                data = b"".join(out)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    # -- lifecycle
    def start(self) -> "FakeAnthropic":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    # -- the scripted model
    @staticmethod
    def message(body: dict, content: list[dict], stop: str | None) -> dict:
        return {"id": "msg_" + uuid.uuid4().hex[:20], "type": "message", "role": "assistant",
                "model": body.get("model") or "claude-fake", "content": content, "stop_reason": stop,
                "stop_sequence": None,
                "usage": {"input_tokens": 10, "output_tokens": 1, "cache_creation_input_tokens": 0,
                          "cache_read_input_tokens": 0}}

    @staticmethod
    def tool_names(body: dict) -> list[str]:
        return [t.get("name") for t in body.get("tools") or () if isinstance(t, dict)]

    def answer(self, body: dict) -> tuple[list[dict], str]:
        msgs = body.get("messages") or []
        tools = self.tool_names(body)
        # the prompts of this conversation (user messages that are not tool results)
        prompts = [i for i, m in enumerate(msgs) if m.get("role") == "user" and not _is_tool_result(m)]
        if not prompts or not tools:
            return [{"type": "text", "text": "ok"}], "end_turn"
        first_prompt = _text_of(msgs[prompts[0]].get("content"))
        last = prompts[-1]
        last_prompt = _text_of(msgs[last].get("content"))
        steps_done = sum(1 for m in msgs[last + 1:] if m.get("role") == "user" and _is_tool_result(m))
        cwd = self._cwd(body)

        def tool(name: str, inp: dict) -> tuple[list[dict], str]:
            return [{"type": "text", "text": f"calling {name}"},
                    {"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:20], "name": name, "input": inp}], "tool_use"

        def slow(seconds: float, last_words: str) -> tuple[list[dict], str]:
            words = max(int(seconds / 0.25), 1)  # a word every 0.25 s
            return [{"type": "text", "text": " ".join(["streaming"] * words + [last_words]), "pace": seconds / words}], "end_turn"

        if QUICK_SUB in first_prompt:
            return [{"type": "text", "text": "sub-agent done"}], "end_turn"
        if SUBAGENT_PROMPT in first_prompt and SLOW in first_prompt:
            return slow(_seconds(first_prompt, SLOW), "sub-agent done")
        if SUBAGENT_PROMPT in first_prompt:
            if steps_done == 0 and cwd:
                return tool("Write", {"file_path": os.path.join(cwd, SUB_FILE), "content": "sub-agent was here\n"})
            return [{"type": "text", "text": "sub-agent done"}], "end_turn"
        if BACKGROUND in last_prompt:
            if steps_done == 0:
                return tool("Bash", {"command": "sleep 300", "description": "sleep in the background",
                                     "run_in_background": True})
            return [{"type": "text", "text": "background started"}], "end_turn"
        agent_tool = "Agent" if "Agent" in tools else ("Task" if "Task" in tools else None)
        if SPAWN_CHILD in last_prompt and agent_tool:
            if steps_done == 0:
                text = last_prompt.split(SPAWN_CHILD, 1)[1].split("\n")[0].strip()[::-1]
                return tool(agent_tool, {"description": "muxhost child", "subagent_type": "general-purpose",
                                         "prompt": f"{SUBAGENT_PROMPT}: {text}"})
            return [{"type": "text", "text": "child done"}], "end_turn"
        if SUB_THEN_SLOW in last_prompt and agent_tool:
            if steps_done == 0:
                return tool(agent_tool, {"description": "muxhost quick child", "subagent_type": "general-purpose",
                                         "prompt": f"{QUICK_SUB}: answer at once"})
            return slow(_seconds(last_prompt, SUB_THEN_SLOW), "parent done")
        if HANG in last_prompt:
            return [], "hang"
        if SLOW in last_prompt:
            return slow(_seconds(last_prompt, SLOW), "slow done")
        if ASK_BASH in last_prompt:
            if steps_done == 0:
                return tool("Bash", {"command": f"touch {ASKED_FILE}", "description": "make the asked-for file"})
            return [{"type": "text", "text": "bash done"}], "end_turn"
        if MAKE_STUFF in last_prompt:
            plan = []
            if cwd:
                plan.append(("Write", {"file_path": os.path.join(cwd, CREATED_FILE), "content": "hello from claude\n"}))
            if "TaskCreate" in tools:
                plan.append(("TaskCreate", {"subject": "muxhost test task", "description": "a task made by the fake model",
                                            "activeForm": "Making a task"}))
            elif "TodoWrite" in tools:
                plan.append(("TodoWrite", {"todos": [{"content": "muxhost test task", "status": "in_progress",
                                                      "activeForm": "Making a task"}]}))
            if agent_tool:
                plan.append((agent_tool, {"description": "muxhost sub-agent", "subagent_type": "general-purpose",
                                          "prompt": f"{SUBAGENT_PROMPT}: write a file"}))
            if steps_done < len(plan):
                return tool(*plan[steps_done])
            return [{"type": "text", "text": "all done"}], "end_turn"
        return [{"type": "text", "text": "hello, I am a fake model"}], "end_turn"

    def _cwd(self, body: dict) -> str | None:
        """The working directory, as claude states it in the system prompt ("Primary working directory: …")."""
        import re

        texts = [_text_of(body.get("system") if isinstance(body.get("system"), list) else [{"type": "text", "text": body.get("system") or ""}])]
        for m in body.get("messages") or ():
            texts.append(_text_of(m.get("content")))
        for t in texts:
            m = re.search(r"(?:Primary working directory|Working directory):[ \t]*([^\n]+?)[ \t]*$", t, re.M)
            if m:
                return m.group(1)
        return self.cwd_hint


def _seconds(prompt: str, word: str, default: float = 6.0) -> float:
    """The number after ``word`` in ``prompt`` (``MUXHOST_SLOW 8`` -> 8.0), else ``default``."""
    rest = prompt.split(word, 1)[1].split()
    try:
        return float(rest[0]) if rest else default
    except ValueError:
        return default


# --------------------------------------------------------------------------------------------------
# a HOME seeded for the claude TUI (AGENTS.md: onboarding, trust, approved key)

def claude_env(url: str) -> dict[str, str]:
    return {
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": API_KEY,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL": "1",
    }


def seed_home(home: Path, trusted: list[str], config_dir: Path | None = None) -> None:
    """Write ``.claude.json`` (onboarding done, key approved, ``trusted`` dirs trusted) and a
    ``settings.json`` that allows the tools the scripted model calls, without prompts."""
    home.mkdir(parents=True, exist_ok=True)
    cfg_dir = config_dir or home / ".claude"
    cfg_dir.mkdir(parents=True, exist_ok=True)
    global_cfg = (config_dir / ".claude.json") if config_dir else home / ".claude.json"
    data = {
        "hasCompletedOnboarding": True,
        "lastOnboardingVersion": "2.1.197",
        "theme": "dark",
        "numStartups": 5,
        "customApiKeyResponses": {"approved": [API_KEY[-20:]], "rejected": []},
        "projects": {os.path.realpath(t): {"hasTrustDialogAccepted": True, "allowedTools": []} for t in trusted},
    }
    global_cfg.write_text(json.dumps(data, indent=2) + "\n")
    settings = {"permissions": {"allow": ["Write", "Edit", "Read", "TodoWrite", "TaskCreate", "TaskUpdate",
                                          "Task", "Agent", "Bash"],
                                "defaultMode": "acceptEdits"}}
    (cfg_dir / "settings.json").write_text(json.dumps(settings, indent=2) + "\n")


@pytest.fixture
def fake_anthropic():
    srv = FakeAnthropic().start()
    yield srv
    srv.stop()


class ClaudeWorld:
    """The ``mux`` fixture set up for the real claude: HOME seeded, the fake server's env, the binary's
    folder first on PATH, ``CLAUDE_CODE_TMPDIR`` private to the test (so ``claude-<uid>/`` is ours)."""

    READY = "shift+tab to cycle"
    tree_hash = staticmethod(tree_hash)

    def __init__(self, mux, server: FakeAnthropic, tmp_path: Path, binary: str):
        self.mux = mux
        self.server = server
        self.binary = binary
        self.home = Path(mux.home)
        self.work = tmp_path / "work"
        self.work.mkdir()
        self.tmpdir = tmp_path / "ctmp"
        self.tmpdir.mkdir()
        self.seed()
        mux.env.update(claude_env(server.url))
        mux.env["PATH"] = os.path.dirname(binary) + os.pathsep + mux.env.get("PATH", "")
        mux.env["CLAUDE_CODE_TMPDIR"] = str(self.tmpdir)
        self.config_dir = self.home / ".claude"

    def seed(self, config_dir: Path | None = None) -> None:
        """Seed HOME (or ``config_dir``, a ``CLAUDE_CONFIG_DIR``) so the TUI starts without questions."""
        seed_home(self.home, [str(self.work)], config_dir=config_dir)

    def quiet_hash(self, *roots, settle: float = 1.0, timeout: float = 20.0,
                   skip: tuple[str, ...] = ()) -> dict[str, str]:
        """A tree hash (without paths containing one of ``skip``) once nothing has changed for ``settle``
        seconds (a running claude appends to its transcript a moment after a turn ends)."""
        import time

        deadline = time.monotonic() + timeout
        last = tree_hash(*roots, skip=skip)
        while True:
            time.sleep(settle)
            now = tree_hash(*roots, skip=skip)
            if now == last or time.monotonic() > deadline:
                return now
            last = now

    def ctx(self, cwd: str | os.PathLike = ""):
        from muxhost import AgentContext

        return AgentContext(home=str(self.home), env=dict(self.mux.env), cwd=str(cwd))

    def launch(self, cwd: Path, *extra: str) -> dict:
        rec = self.mux.ok("launch", "claude", "--cwd", str(cwd), "--json", *extra)
        self.wait_ready(rec["pane"])
        return rec

    def one_turn(self, cwd: Path, text: str, expect: str) -> dict:
        """A whole short conversation: launch in ``cwd``, one prompt, a clean stop. Returns the record."""
        rec = self.launch(cwd)
        self.say(rec["pane"], text, expect)
        stopped = self.mux.ok("stop", rec["id"], "--json")
        assert stopped["outcome"] == "exit", stopped
        return rec

    def wait_ready(self, pane: str, timeout: float = 30) -> str:
        return self.mux.wait_screen(pane, self.READY, timeout=timeout)

    def say(self, pane: str, text: str, expect: str, timeout: float = 60) -> str:
        """Type a prompt; wait until the fake model has given the turn's last answer (``expect``) and
        the screen shows it. The text is typed, seen in the input box, then sent with Enter, and Enter
        is pressed again while no request carries it (a busy TUI may drop a key as it starts)."""
        from muxhost.testing import wait_for

        seen, asked_before = len(self.server.turns), len(self.server.requests)

        def answered():
            with self.server.lock:
                new = self.server.turns[seen:]
            return any(text in t["prompt"] and expect in t["text"] for t in new)

        def asked():
            with self.server.lock:
                new = self.server.requests[asked_before:]
            return any(text in json.dumps(r["body"].get("messages"), ensure_ascii=False) for r in new)

        self.mux.type(pane, text, enter=False)
        self.mux.wait_screen(pane, text, timeout=timeout)
        for _ in range(3):  # (Enter in an empty input box does nothing)
            self.mux.type(pane, "", enter=True, pause=0)
            try:
                wait_for(asked, timeout=5, what=f"a request carrying {text!r}")
                break
            except AssertionError:
                continue
        wait_for(answered, timeout=timeout, what=f"the answer {expect!r} to {text!r}")
        return self.mux.wait_screen(pane, expect, timeout=timeout)

    def record(self, ref: str) -> dict:
        return next(r for r in self.mux.ok("ls", "--all", "--json") if r["id"] == ref)


@pytest.fixture
@needs_agent_cli
def claude_world(mux, fake_anthropic, tmp_path):
    from muxhost.testing import agent_binary

    return ClaudeWorld(mux, fake_anthropic, tmp_path, agent_binary("claude"))
