"""Shared test code for muxhost-opencode: a fake OpenAI-compatible server that scripts sub-agents,
an opencode config pointing at it, and helpers to read the database. Loaded by pytest as a conftest;
the test modules get everything through fixtures (pytest runs with ``--import-mode=importlib``)."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import select
import shutil
import socket
import sqlite3
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from muxhost.testing import needs_agent_cli

from muxhost.testing import agent_binary

# Words the scripted model reacts to (typed into the TUI or given to `opencode run`).
SPAWN = "MUXHOST_SPAWN"            # the parent calls the task tool: a sub-agent
CHILD = "MUXHOST_CHILD_TASK"       # the sub-agent calls the task tool again: a grandchild
GRANDCHILD = "MUXHOST_GRANDCHILD"  # the grandchild just answers
SLOW = "MUXHOST_SLOW"              # a text reply that streams for SLOW_SECONDS
ASK = "MUXHOST_ASK"                # a bash call (`echo ASKED`): asks when bash is "ask"
QUESTION = "MUXHOST_QUESTION"      # a question tool call (two options)
DELEGATE = "MUXHOST_DELEGATE"      # a sub-agent (PONDER_SECONDS) and a bash `sleep` at once, then a SLOW reply
PONDER = "MUXHOST_PONDER"          # (the sub-agent's prompt) a text reply that streams for PONDER_SECONDS
HANG = "MUXHOST_HANG"              # the reply's headers, then not a byte while opencode holds the connection
SUB_SLOW = "MUXHOST_SUB_SLOW"      # a sub-agent (task) whose reply streams for SLOW_SECONDS
DONE = "All done here."
ASKED = "muxhost-asked-and-ran"    # what the ASK call prints
SLOW_DONE = "Slow reply finished."  # the last words of a slow reply
SLOW_SECONDS = 8.0
PONDER_SECONDS = 3.0
NAP_SECONDS = 7.0                  # the DELEGATE call's `sleep`: it outlasts the sub-agent
CONTRACT_TEXT = r"muxhost contract [^\n\"]*?[0-9a-f]{32}"  # what muxhost.testing.unique_text makes


def noted(text: str) -> str:
    """The fake model's answer to a prompt holding ``text`` (it does not repeat the text)."""
    return "Noted " + hashlib.sha1(text.encode()).hexdigest()[:12]


OPENCODE_ENV = {
    "OPENCODE_DISABLE_MODELS_FETCH": "1",
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    "OPENCODE_DISABLE_SHARE": "1",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
    "OPENCODE_DISABLE_CLAUDE_CODE": "1",
    "OPENCODE_DISABLE_EXTERNAL_SKILLS": "1",
}


# --------------------------------------------------------------------------------------------------
# fake OpenAI-compatible server

def _text(msg: dict) -> str:
    c = msg.get("content")
    if isinstance(c, list):
        return " ".join(x.get("text", "") for x in c if isinstance(x, dict))
    return c or ""


class FakeOpenAI:
    """``POST /v1/chat/completions`` answered as a stream, with a scripted model:

    - no tools offered (the title request): a title;
    - the last message is a tool result: a SLOW reply when the prompt names MUXHOST_DELEGATE, else
      "All done here.";
    - the prompt names MUXHOST_SLOW (or MUXHOST_PONDER): a text streamed over SLOW_SECONDS
      (PONDER_SECONDS), ending "Slow reply finished.";
    - the prompt names MUXHOST_HANG: the response headers, then not one byte, held open until the
      client closes the connection or the server stops (a model that hangs);
    - the prompt names MUXHOST_ASK: a ``bash`` call that echoes "muxhost-asked-and-ran";
    - the prompt names MUXHOST_QUESTION: a ``question`` call (pick a colour: red or blue);
    - the prompt names MUXHOST_DELEGATE: two calls at once, ``task`` with the prompt MUXHOST_PONDER
      and ``bash`` ``sleep NAP_SECONDS`` (the sub-agent ends while its parent's own tool still runs);
    - the prompt names MUXHOST_SUB_SLOW: a ``task`` call whose prompt names MUXHOST_SLOW (a
      sub-agent that streams its reply for SLOW_SECONDS), then "All done here.";
    - the prompt names MUXHOST_SPAWN: a ``task`` call whose prompt is MUXHOST_CHILD_TASK (a sub-agent;
      followed by the contract suite's text when the prompt holds one, else "start another one"),
      which answers with a ``task`` call whose prompt is MUXHOST_GRANDCHILD (a grandchild);
    - a prompt holding a text of the contract suite (:func:`muxhost.testing.unique_text`):
      :func:`noted` of it, which the suite's ``converse`` waits for on the screen;
    - anything else: a short text.
    Every request body is kept in ``self.requests``."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self._ids = itertools.count(1)
        self.release = threading.Event()  # set by close(): a held (HANG) request ends
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(n) or b"{}")
                except ValueError:
                    body = {}
                outer.requests.append(body)
                try:
                    outer._answer(self, body)
                except OSError:  # the client went away mid-stream (an interrupted reply)
                    self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @staticmethod
    def decide(body: dict) -> tuple[str, str]:
        msgs = body.get("messages") or []
        tools = [t.get("function", {}).get("name") for t in body.get("tools") or []]
        if not tools:
            return "text", "Fake title"
        users = [_text(m) for m in msgs if m.get("role") == "user"]
        last = users[-1] if users else ""
        if msgs and msgs[-1].get("role") == "tool":
            return ("slow", str(SLOW_SECONDS)) if DELEGATE in last else ("text", DONE)
        if HANG in last:
            return "hang", ""
        if SUB_SLOW in last and "task" in tools:
            return "task", f"{SLOW}: take your time"
        if SLOW in last or PONDER in last:
            return "slow", str(SLOW_SECONDS if SLOW in last else PONDER_SECONDS)
        if ASK in last and "bash" in tools:
            return "bash", f"echo {ASKED}"
        if QUESTION in last and "question" in tools:
            return "question", "Which colour?"
        if DELEGATE in last and "task" in tools and "bash" in tools:
            return "delegate", f"{PONDER}: think it over"
        if GRANDCHILD in last:
            return "text", "grandchild finished"
        if CHILD in last and "task" in tools:
            return "task", f"{GRANDCHILD}: say hello"
        text = re.search(CONTRACT_TEXT, last)
        if SPAWN in last and "task" in tools:
            return "task", f"{CHILD}: {text.group(0) if text else 'start another one'}"
        if text:
            return "text", noted(text.group(0))
        return "text", "Hello from the fake model."

    def _answer(self, h: BaseHTTPRequestHandler, body: dict) -> None:
        kind, payload = self.decide(body)
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Cache-Control", "no-cache")
        h.send_header("Connection", "close")
        h.end_headers()
        if kind == "hang":
            return self._hold(h)
        cid = f"chatcmpl-{next(self._ids)}"

        def chunk(delta: dict | None, finish: str | None = None, usage: dict | None = None) -> None:
            d: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()),
                                 "model": "fake-model",
                                 "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]}
            if usage:
                d["usage"] = usage
            h.wfile.write(b"data: " + json.dumps(d).encode() + b"\n\n")

        chunk({"role": "assistant", "content": ""})
        if kind == "text":
            chunk({"content": payload})
            chunk({}, "stop")
        elif kind == "slow":  # words every 0.25 s over the seconds asked
            steps = max(1, int(float(payload) / 0.25))
            for i in range(steps):
                chunk({"content": f"word{i} "})
                h.wfile.flush()
                time.sleep(0.25)
            chunk({"content": SLOW_DONE})
            chunk({}, "stop")
        else:
            task = ("task", {"description": "sub task", "prompt": payload, "subagent_type": "general"})
            options = [{"label": c, "description": f"the colour {c}"} for c in ("red", "blue")]
            calls = {"bash": [("bash", {"command": payload, "description": "echo a word"})],
                     "question": [("question", {"questions": [{"question": payload, "header": "Colour",
                                                              "options": options}]})],
                     "delegate": [task, ("bash", {"command": f"sleep {NAP_SECONDS:g}", "description": "take a nap"})]
                     }.get(kind, [task])
            chunk({"tool_calls": [{"index": i, "id": f"call_{next(self._ids)}", "type": "function",
                                   "function": {"name": name, "arguments": json.dumps(args)}}
                                  for i, (name, args) in enumerate(calls)]})
            chunk({}, "tool_calls")
        chunk(None, usage={"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15})
        h.wfile.write(b"data: [DONE]\n\n")
        h.wfile.flush()
        h.close_connection = True

    def _hold(self, h: BaseHTTPRequestHandler) -> None:
        """Send nothing until the client closes the connection (a test ended: its opencode went) or
        the server closes."""
        h.close_connection = True
        while not self.release.wait(0.5):
            if select.select([h.connection], [], [], 0)[0] and not h.connection.recv(1, socket.MSG_PEEK):
                return

    @property
    def config(self) -> dict:
        """An opencode.json that points opencode at this server."""
        return opencode_config(self.port)

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="session")
def fake_llm():
    srv = FakeOpenAI()
    yield srv
    srv.close()


def opencode_config(port: int) -> dict:
    return {
        "$schema": "https://opencode.ai/config.json",
        "provider": {"fake": {"npm": "@ai-sdk/openai-compatible",
                              "options": {"baseURL": f"http://127.0.0.1:{port}/v1", "apiKey": "dummy"},
                              "models": {"fake-model": {"tool_call": True, "limit": {"context": 100000, "output": 4096}}}}},
        "model": "fake/fake-model", "small_model": "fake/fake-model", "enabled_providers": ["fake"],
        "autoupdate": False, "share": "disabled",
        # a sub-agent may start its own sub-agent (opencode's default depth is 1)
        "subagent_depth": 3,
        "agent": {"general": {"permission": {"task": "allow"}}},
    }


@pytest.fixture(scope="session")
@needs_agent_cli
def opencode_bin() -> str:
    return agent_binary("opencode")


@pytest.fixture(scope="session")
def npm_cache(tmp_path_factory) -> str:
    """One npm cache for the whole session (opencode may npm-install its plugin package at start-up):
    the caller's when set, else ~/.npm (warm on CI machines), never a cold per-test one."""
    return os.environ.get("npm_config_cache") or os.path.join(os.path.expanduser("~"), ".npm")


# --------------------------------------------------------------------------------------------------
# an environment for running opencode directly (no tmux)

class OpenCodeHome:
    """A temp HOME with an opencode config for the fake server, and the env to run opencode with."""

    def __init__(self, root: Path, port: int, binary: str, npm_cache: str, create: bool = True):
        self.root = root
        self.home = root / "home"
        self.cwd = root / "work"
        self.binary = binary
        self.bin_dir = root / "bin"  # a PATH entry of our own, so a test can take the binary away
        if create:
            self.cwd.mkdir(parents=True)
            self.bin_dir.mkdir()
            os.symlink(binary, self.bin_dir / "opencode")
            cfg = self.home / ".config" / "opencode" / "opencode.json"
            cfg.parent.mkdir(parents=True)
            cfg.write_text(json.dumps(opencode_config(port), indent=1))
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("TMUX", "XDG_", "MUXHOST_", "OPENCODE", "CLAUDE", "CODEX")) and k != "PWD"}
        self.env.update(OPENCODE_ENV, HOME=str(self.home), npm_config_cache=npm_cache,
                        PATH=f"{self.bin_dir}:{os.environ.get('PATH', os.defpath)}")
        self.made_cwd = str(self.cwd)  # the directory the sessions in the database were made in

    @property
    def db(self) -> Path:
        return Path(self.env.get("OPENCODE_DB") or self.home / ".local/share/opencode/opencode.db")

    def run(self, prompt: str, timeout: float = 60) -> None:
        env = dict(self.env, PWD=str(self.cwd))  # opencode files a session under $PWD
        p = subprocess.run([self.binary, "run", prompt], env=env, cwd=self.cwd, stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=timeout)
        assert p.returncode == 0, f"opencode run -> {p.returncode}\n{p.stdout}\n{p.stderr}"

    def remove_binary(self) -> None:
        (self.bin_dir / "opencode").unlink()


@pytest.fixture
def ochome(tmp_path, fake_llm, opencode_bin, npm_cache) -> OpenCodeHome:
    return OpenCodeHome(tmp_path, fake_llm.port, opencode_bin, npm_cache)


@pytest.fixture(scope="session")
def _made_template(tmp_path_factory, fake_llm, opencode_bin, npm_cache):
    """One HOME where the real opencode made two conversations, each with a sub-agent that started
    a grandchild: ``other`` first, then ``target`` (made once per session; tests get copies)."""
    oc = OpenCodeHome(tmp_path_factory.mktemp("opencode-made"), fake_llm.port, opencode_bin, npm_cache)
    oc.run(f"{SPAWN} other")
    t0 = time.time()
    oc.run(f"{SPAWN} target")
    return oc, t0


@pytest.fixture
def made(_made_template, tmp_path, fake_llm, opencode_bin, npm_cache):
    """A private copy of the template HOME: ``(home, other_root, target_root, t0)`` where t0 is a time
    between the two conversations."""
    src, t0 = _made_template
    dst = tmp_path / "made"
    shutil.copytree(src.root, dst, symlinks=False, ignore=shutil.ignore_patterns("bin"))
    oc = OpenCodeHome(dst, fake_llm.port, opencode_bin, npm_cache, create=False)
    oc.bin_dir.mkdir()
    os.symlink(opencode_bin, oc.bin_dir / "opencode")
    oc.made_cwd = str(src.cwd)
    roots = DB(oc.db).roots()
    assert len(roots) == 2, roots
    return oc, roots[0], roots[1], t0


# --------------------------------------------------------------------------------------------------
# reading the database the way a test checks it

class DB:
    """Read-only views of an opencode database for assertions."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def _con(self) -> sqlite3.Connection:
        return sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=5)

    def query(self, sql: str, params: tuple = ()) -> list[tuple]:
        con = self._con()
        try:
            return con.execute(sql, params).fetchall()
        finally:
            con.close()

    def roots(self) -> list[str]:
        return [r[0] for r in self.query("select id from session where parent_id is null order by time_created")]

    def family(self, root: str) -> list[str]:
        out, frontier = [root], [root]
        while frontier:
            marks = ",".join("?" * len(frontier))
            frontier = [r[0] for r in self.query(f"select id from session where parent_id in ({marks})", tuple(frontier))]
            out += frontier
        return out

    def counts(self, ids: list[str]) -> dict[str, int]:
        """Rows per table that belong to the sessions ``ids`` (every table of the schema)."""
        con = self._con()
        try:
            marks = ",".join("?" * len(ids))
            tables = [r[0] for r in con.execute("select name from sqlite_master where type='table' and name not like 'sqlite_%'")]
            out = {}
            for t in tables:
                cols = [c[1] for c in con.execute(f'pragma table_info("{t}")')]
                if t == "session":
                    col = "id"
                elif "session_id" in cols:
                    col = "session_id"
                elif "aggregate_id" in cols:
                    col = "aggregate_id"
                else:
                    continue
                out[t] = con.execute(f'select count(*) from "{t}" where "{col}" in ({marks})', ids).fetchone()[0]
            return out
        finally:
            con.close()

    def all_counts(self) -> dict[str, int]:
        con = self._con()
        try:
            tables = [r[0] for r in con.execute("select name from sqlite_master where type='table' and name not like 'sqlite_%'")]
            return {t: con.execute(f'select count(*) from "{t}"').fetchone()[0] for t in tables}
        finally:
            con.close()

    def mentions(self, ids: list[str]) -> dict[str, int]:
        """Rows anywhere (any text column of any table) that mention one of ``ids``."""
        con = self._con()
        try:
            tables = [r[0] for r in con.execute("select name from sqlite_master where type='table' and name not like 'sqlite_%'")]
            out = {}
            for t in tables:
                cols = [c[1] for c in con.execute(f'pragma table_info("{t}")')]
                where = " or ".join(f'instr(cast("{c}" as text), ?) > 0' for c in cols for _ in ids)
                params = [i for _c in cols for i in ids]
                n = con.execute(f'select count(*) from "{t}" where {where}', params).fetchone()[0]
                if n:
                    out[t] = n
            return out
        finally:
            con.close()


@pytest.fixture
def opencode_db():
    return DB


@pytest.fixture
def tui_setup(mux, tmp_path, fake_llm, opencode_bin, npm_cache, scripted):
    """A function that readies ``mux`` for the opencode TUI with ``permission`` (opencode.json's):
    the binary on PATH, the fake model configured, the shared npm cache; returns a new ``work``
    folder to launch it in."""
    def setup(permission: dict) -> Path:
        work = tmp_path / "work"
        work.mkdir()
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        os.symlink(opencode_bin, bin_dir / "opencode")
        mux.env.update(scripted["env"], npm_config_cache=npm_cache, PATH=f"{bin_dir}:{mux.env.get('PATH', os.defpath)}")
        cfg = mux.home / ".config" / "opencode" / "opencode.json"
        cfg.parent.mkdir(parents=True, exist_ok=True)
        cfg.write_text(json.dumps({**fake_llm.config, "permission": permission}, indent=1))
        return work
    return setup


@pytest.fixture
def scripted():
    """The words the fake model reacts to."""
    return {"spawn": SPAWN, "child": CHILD, "grandchild": GRANDCHILD, "done": DONE, "env": dict(OPENCODE_ENV),
            "noted": noted, "slow": SLOW, "ask": ASK, "question": QUESTION, "delegate": DELEGATE, "asked": ASKED,
            "slow_done": SLOW_DONE, "hang": HANG, "sub_slow": SUB_SLOW}
