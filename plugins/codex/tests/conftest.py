"""Fixtures for the codex plugin tests: a fake OpenAI Responses server and a private CODEX_HOME.

The fake server answers ``POST /v1/responses`` with a streamed (SSE) reply. What it answers depends
on the newest input item of the request:

- a user message containing ``SPAWN-CHILD``: a ``multi_agent_v1.spawn_agent`` tool call (a namespaced
  Responses function call), so the real codex starts a sub-agent thread; its task is ``CHILD_TASK``
  followed by the text after ``SPAWN-CHILD`` (so the child's thread holds that text too);
- a user message containing ``CREATE-GOAL``: a ``create_goal`` tool call (a ``thread_goals`` row);
- a user message containing ``SLOW-REPLY``: an assistant message streamed in pieces over
  ``SLOW_SECONDS``;
- a user message containing ``RUN-TOOL``: an ``exec_command`` call of ``TOOL_COMMAND`` asking to
  run outside the sandbox (``require_escalated``): with ``approval_policy = "on-request"`` and a
  sandbox (``configure(approval=..., sandbox="workspace-write")``) codex asks the user first; its
  output gets a reply;
- a user message containing ``ASK-USER``: a ``request_user_input`` call asking ``ASK_QUESTION``
  (codex offers that tool in Plan mode only);
- a user message containing ``SPAWN-SLOW``: a ``spawn_agent`` call whose sub-agent answers after
  ``CHILD_DELAY``, while the parent's next answer (to the spawn call's output) streams over
  ``SLOW_SECONDS``: the child's turn ends while the parent's is still open;
- a user message containing ``SPAWN-BG``: a ``spawn_agent`` call whose sub-agent answers after
  ``CHILD_BG_DELAY``, while the parent answers the spawn call's output at once: the parent's turn
  ends while the child's is still open;
- a user message containing ``HANG-REPLY``: the response headers, then not one byte, the request
  held open until the server stops (a model that hangs);
- anything else (including a tool call's output, and the thread-title and sub-agent turns, told by
  the ``x-codex-turn-metadata`` header): an assistant message ``fake reply N``.

Every request is kept in ``server.requests`` (path, headers, JSON body, ``at``: when it came;
``server.done`` has (time, thread-id header) of each reply fully sent); a float in a reply's
events is a pause (seconds) in the stream.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import sqlite3
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from muxhost.testing import needs_agent_cli

SPAWN_WORD = "SPAWN-CHILD"
CHILD_TASK = "child task: reply with one word"
GOAL_WORD = "CREATE-GOAL"
GOAL_TEXT = "the fake goal objective"
SLOW_WORD = "SLOW-REPLY"
SLOW_SECONDS = 6.0
TOOL_WORD = "RUN-TOOL"
TOOL_COMMAND = "touch tool-ran.txt"
TOOL_WHY = "May the fake model touch a file?"
ASK_WORD = "ASK-USER"
ASK_QUESTION = "Which colour should the fake model pick?"
SPAWN_SLOW_WORD = "SPAWN-SLOW"
CHILD_DELAY = 1.5
SPAWN_BG_WORD = "SPAWN-BG"
CHILD_BG_DELAY = 6.0
HANG_WORD = "HANG-REPLY"


def _sse(event: dict) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


def _text_of(item: dict) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    out = []
    for part in content or ():
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            out.append(part["text"])
    return "\n".join(out)


class FakeResponses:
    """A threaded fake of the Responses API on 127.0.0.1 (port 0: the OS picks one)."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.spawned: list[str] = []  # call ids of spawn_agent calls handed out
        self.slow_spawns: set[str] = set()  # call ids of SPAWN-SLOW calls (their output gets a slow reply)
        self.done: list[tuple[float, str]] = []  # (time.time(), thread-id header) of every reply fully sent
        self._lock = threading.Lock()
        self._seq = itertools.count(1)
        self.release = threading.Event()  # set by stop(): a held (HANG-REPLY) request ends
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep pytest output clean
                pass

            def do_GET(self):
                body = b'{"data": [], "models": []}'
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {}
                with fake._lock:
                    fake.requests.append({"path": self.path, "headers": dict(self.headers), "body": body,
                                          "at": time.time()})
                if not self.path.rstrip("/").endswith("/responses"):
                    self.send_response(404)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                events = fake.reply(body, dict(self.headers))
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("connection", "close")
                self.end_headers()
                self.close_connection = True
                try:
                    for event in events:
                        if event is None:  # hold the reply open, not a byte, until the server stops
                            self.wfile.flush()
                            fake.release.wait()
                            return
                        if isinstance(event, float):
                            time.sleep(event)
                            continue
                        self.wfile.write(_sse(event))
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    return  # codex went (stopped or interrupted) mid-stream
                with fake._lock:
                    fake.done.append((time.time(), self.headers.get("thread-id") or ""))

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="fake-responses", daemon=True)

    def start(self) -> "FakeResponses":
        self._thread.start()
        return self

    def stop(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- the model ------------------------------------------------------------------------------

    def reply(self, body: dict, headers: dict | None = None) -> list[dict]:
        n = next(self._seq)
        items = [i for i in body.get("input") or () if isinstance(i, dict)]
        last = items[-1] if items else {}
        try:
            meta = json.loads((headers or {}).get("x-codex-turn-metadata") or "{}")
        except ValueError:
            meta = {}
        user_turn = meta.get("thread_source", "user") == "user"  # not the title or a sub-agent turn
        typed = user_turn and last.get("type", "message") == "message" and last.get("role") == "user"
        said = _text_of(last) if typed else ""  # what the user typed ("" for anything else)
        if SPAWN_SLOW_WORD in said or SPAWN_BG_WORD in said:
            call_id = f"call_spawn_{n}"
            how = "slowly" if SPAWN_SLOW_WORD in said else "in the background"
            with self._lock:
                self.spawned.append(call_id)
                if how == "slowly":
                    self.slow_spawns.add(call_id)
            item = {"type": "function_call", "id": f"fc_{n}", "call_id": call_id, "name": "spawn_agent",
                    "namespace": "multi_agent_v1", "arguments": json.dumps({"message": f"{CHILD_TASK}: {how}"})}
            return self._events(n, item)
        if not user_turn and CHILD_TASK in _text_of(last):  # a sub-agent's turn
            if _text_of(last).endswith("slowly"):
                return [CHILD_DELAY, *self._message(n)]
            if _text_of(last).endswith("in the background"):
                return [CHILD_BG_DELAY, *self._message(n)]
        if last.get("type") == "function_call_output" and last.get("call_id") in self.slow_spawns:
            return self._message(n, slow=True)
        if SLOW_WORD in said:
            return self._message(n, slow=True)
        if HANG_WORD in said:
            return [None]
        if TOOL_WORD in said:
            item = {"type": "function_call", "id": f"fc_{n}", "call_id": f"call_tool_{n}", "name": "exec_command",
                    "arguments": json.dumps({"cmd": TOOL_COMMAND, "sandbox_permissions": "require_escalated",
                                             "justification": TOOL_WHY})}
            return self._events(n, item)
        if ASK_WORD in said:
            questions = [{"id": "colour", "header": "Colour", "question": ASK_QUESTION,
                          "options": [{"label": "Red (Recommended)", "description": "The red one."},
                                      {"label": "Blue", "description": "The blue one."}]}]
            item = {"type": "function_call", "id": f"fc_{n}", "call_id": f"call_ask_{n}", "name": "request_user_input",
                    "arguments": json.dumps({"questions": questions})}
            return self._events(n, item)
        if SPAWN_WORD in said:
            call_id = f"call_spawn_{n}"
            with self._lock:
                self.spawned.append(call_id)
            extra = _text_of(last).split(SPAWN_WORD, 1)[1].strip()
            task = f"{CHILD_TASK}: {extra}" if extra else CHILD_TASK
            item = {"type": "function_call", "id": f"fc_{n}", "call_id": call_id, "name": "spawn_agent",
                    "namespace": "multi_agent_v1", "arguments": json.dumps({"message": task})}
            return self._events(n, item)
        if GOAL_WORD in said:
            item = {"type": "function_call", "id": f"fc_{n}", "call_id": f"call_goal_{n}", "name": "create_goal",
                    "arguments": json.dumps({"objective": GOAL_TEXT})}
            return self._events(n, item)
        return self._message(n)

    def _message(self, n: int, slow: bool = False) -> list:
        """An assistant message ``fake reply N``; ``slow``: in pieces over :data:`SLOW_SECONDS`."""
        words = [f"fake reply {n}"] if not slow else [f"slow part {i} " for i in range(1, 13)] + [f"fake reply {n}"]
        text = "".join(words)
        item = {"type": "message", "role": "assistant", "id": f"msg_{n}", "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}]}
        return self._events(n, item, deltas=words, pause=SLOW_SECONDS / len(words) if slow else 0.0)

    @staticmethod
    def _events(n: int, item: dict, deltas: list[str] = (), pause: float = 0.0) -> list:
        rid = f"resp_{n}"
        events: list = [{"type": "response.created", "response": {"id": rid}},
                        {"type": "response.output_item.added", "output_index": 0,
                         "item": {**item, "content": []} if item["type"] == "message" else item}]
        for delta in deltas:
            if pause:
                events.append(pause)
            events.append({"type": "response.output_text.delta", "output_index": 0, "content_index": 0,
                           "item_id": item["id"], "delta": delta})
        events.append({"type": "response.output_item.done", "output_index": 0, "item": item})
        events.append({"type": "response.completed", "response": {
            "id": rid, "usage": {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
                                 "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
                                 "total_tokens": 15}}})
        return events

    def threads_asked(self) -> list[str]:
        """The ``thread-id`` header of every request, in order."""
        return [r["headers"].get("thread-id") or r["headers"].get("Thread-Id") or "" for r in list(self.requests)]

    def user_texts(self) -> list[str]:
        out = []
        for r in list(self.requests):
            for i in r["body"].get("input") or ():
                if isinstance(i, dict) and i.get("role") == "user":
                    out.append(_text_of(i))
        return out


def write_codex_config(codex_home: Path, base_url: str, trusted: list[str], daemon: bool = False,
                       approval: str = "never", sandbox: str = "danger-full-access") -> Path:
    """A config.toml that points codex at the fake server (AGENTS.md lists the keys). ``approval``
    and ``sandbox`` are its ``approval_policy`` and ``sandbox_mode`` (codex 0.171 refuses
    ``"untrusted"``; ``"on-request"`` with a sandbox asks before a command that leaves it)."""
    codex_home.mkdir(parents=True, exist_ok=True)
    lines = [
        'model = "fake-model"',
        'model_provider = "fake"',
        f'approval_policy = "{approval}"',
        f'sandbox_mode = "{sandbox}"',
        "check_for_update_on_startup = false",
        "",
        "[model_providers.fake]",
        'name = "fake"',
        f'base_url = "{base_url}"',
        'wire_api = "responses"',
        'env_key = "FAKE_API_KEY"',
        "request_max_retries = 0",
        "stream_max_retries = 0",
        "",
        "[analytics]",
        "enabled = false",
        "",
        "[feedback]",
        "enabled = false",
        "",
        "[features]",
        "in_app_updates = false",
    ]
    if not daemon:
        lines.append("daemon_auto_start = false")
    for d in trusted:
        lines += ["", f"[projects.{json.dumps(os.path.realpath(d))}]", 'trust_level = "trusted"']
    path = codex_home / "config.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def fake_responses():
    server = FakeResponses().start()
    yield server
    server.stop()


# -----------------------------------------------------------------------------------------------
# a private codex setup: CODEX_HOME, the fake server, the real binary


class Codex:
    """The real codex binary against the fake server, with its own CODEX_HOME under ``home``."""

    def __init__(self, binary: str, home: Path, server: FakeResponses, base_env: dict[str, str]):
        self.binary = binary
        self.home = home
        self.codex_home = home / ".codex"
        self.server = server
        self.env = dict(base_env)
        self.env.update(HOME=str(home), CODEX_HOME=str(self.codex_home), FAKE_API_KEY="dummy",
                        PATH=os.path.dirname(binary) + os.pathsep + base_env.get("PATH", os.defpath))
        for k in list(self.env):
            if k.startswith("TMUX"):
                del self.env[k]
        self.trusted: list[str] = []

    def configure(self, *dirs: Path, daemon: bool = False, approval: str = "never",
                  sandbox: str = "danger-full-access") -> None:
        self.trusted = [str(d) for d in dirs]
        write_codex_config(self.codex_home, self.server.base_url, self.trusted, daemon=daemon, approval=approval,
                           sandbox=sandbox)

    def exec(self, prompt: str, cwd: Path, timeout: float = 60, resume: str | None = None) -> str:
        """``codex exec`` one prompt (in thread ``resume`` when given); returns the thread id."""
        how = ["resume", resume] if resume else []
        p = subprocess.run([self.binary, "exec", "--skip-git-repo-check", *how, prompt], cwd=str(cwd), env=self.env,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
        assert p.returncode == 0, f"codex exec -> {p.returncode}\n{p.stdout}\n{p.stderr}"
        m = re.search(r"session id: (\S+)", p.stdout + p.stderr)
        assert m, p.stdout + p.stderr
        return m.group(1)

    def queue(self, thread: str, message: str, cwd: Path) -> None:
        """``codex queue``: a message waiting for the thread (rows in queue_1.sqlite)."""
        p = subprocess.run([self.binary, "queue", "-c", "features.daemon_auto_start=false", "--thread", thread,
                            "--message", message], cwd=str(cwd), env=self.env, stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, f"codex queue -> {p.returncode}\n{p.stdout}\n{p.stderr}"

    # -- looking at CODEX_HOME (read-only) -----------------------------------------------------

    def databases(self) -> list[Path]:
        return sorted(self.codex_home.glob("*.sqlite"))

    def query(self, db: str, sql: str, args: tuple = ()) -> list[tuple]:
        path = self.codex_home / db
        if not path.exists():
            return []
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1)
        try:
            return con.execute(sql, args).fetchall()
        finally:
            con.close()

    def rows(self) -> dict[str, set[tuple]]:
        """Every row of every table of every database: {"db/table": {row, …}}."""
        out: dict[str, set[tuple]] = {}
        for db in self.databases():
            con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)
            try:
                for (table,) in con.execute("select name from sqlite_master where type='table'"):
                    out[f"{db.name}/{table}"] = set(con.execute(f'select * from "{table}"').fetchall())
            finally:
                con.close()
        return out

    def files(self) -> dict[str, str]:
        """{path relative to CODEX_HOME: sha256} of every file but the databases and codex's own tmp."""
        out = {}
        for p in sorted(self.codex_home.rglob("*")):
            rel = p.relative_to(self.codex_home).as_posix()
            if not p.is_file() or ".sqlite" in p.name or rel.startswith((".tmp/", "skills/", "packages/")):
                continue
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
        return out

    def lines(self, name: str) -> list[bytes]:
        try:
            return (self.codex_home / name).read_bytes().splitlines()
        except FileNotFoundError:
            return []

    def snapshot(self, ids: set[str]) -> dict:
        """Everything in CODEX_HOME that does NOT name one of ``ids``: rows, files, jsonl lines."""
        def names(value) -> bool:
            text = value if isinstance(value, str) else (value.decode("latin-1") if isinstance(value, bytes) else "")
            return any(i in text for i in ids)

        # sqlite_sequence holds AUTOINCREMENT counters: deleting (and codex's own triggers) move them on
        rows = {t: {r for r in rs if not any(names(v) for v in r)} for t, rs in self.rows().items()
                if not t.endswith("/sqlite_sequence")}
        files = {k: v for k, v in self.files().items()
                 if not any(i in k for i in ids) and k not in ("history.jsonl", "session_index.jsonl")
                 and not k.startswith("thread-writer-locks/")}
        jsonl = {n: [ln for ln in self.lines(n) if not names(ln)] for n in ("history.jsonl", "session_index.jsonl")}
        return {"rows": rows, "files": files, "jsonl": jsonl}

    @staticmethod
    def assert_intact(before: dict, after: dict) -> None:
        """Every unrelated row, file and line of ``before`` (a :meth:`snapshot`) is still there, unchanged
        (codex may have added rows meanwhile, e.g. log lines of `codex delete` itself)."""
        for table, rows in before["rows"].items():
            lost = rows - after["rows"].get(table, set())
            assert not lost, f"{table}: {len(lost)} unrelated rows changed or went: {sorted(lost, key=repr)[:3]!r:.600}"
        assert before["files"] == {k: v for k, v in after["files"].items() if k in before["files"]}
        assert before["jsonl"] == after["jsonl"]

    def mentions(self, ids: set[str]) -> list[str]:
        """Every place in CODEX_HOME that still names one of ``ids``: a row, a file name, file bytes."""
        out = []
        for table, rs in self.rows().items():
            for r in rs:
                for v in r:
                    text = v if isinstance(v, str) else (v.decode("latin-1") if isinstance(v, bytes) else "")
                    if any(i in text for i in ids):
                        out.append(f"row {table} {r!r:.120}")
        for p in self.codex_home.rglob("*"):
            rel = p.relative_to(self.codex_home).as_posix()
            if any(i in rel for i in ids):
                out.append(f"path {rel}")
            elif p.is_file() and not rel.startswith(("skills/", "packages/")):
                data = p.read_bytes()
                if any(i.encode() in data for i in ids):
                    out.append(f"bytes of {rel}")
        return out


@pytest.fixture
@needs_agent_cli
def codex(tmp_path, fake_responses):
    """A :class:`Codex` with its own HOME (``tmp_path/chome``) and the fake server; the real binary."""
    from muxhost.testing import agent_binary, clean_env

    binary = agent_binary("codex")
    home = tmp_path / "chome"
    home.mkdir()
    return Codex(binary, home, fake_responses, clean_env(home))


@pytest.fixture
@needs_agent_cli
def mux_codex(mux, fake_responses):
    """A :class:`Codex` whose HOME is the ``mux`` fixture's HOME; ``mux.run`` gets its environment
    (the binary's folder on PATH, CODEX_HOME, FAKE_API_KEY), so agents launched by the CLI use it."""
    from muxhost.testing import agent_binary

    cx = Codex(agent_binary("codex"), mux.home, fake_responses, mux.env)
    mux.env.update({k: cx.env[k] for k in ("PATH", "CODEX_HOME", "FAKE_API_KEY")})
    return cx
