"""Records opencode's activity fixtures, ``fixtures/activity/<case>/`` (:mod:`muxhost.testing.recording`):
the pinned opencode TUI in a real tmux pane against conftest's FakeOpenAI, in each state — idle, a
reply streaming, a permission asked, a question asked, a sub-agent at work — its screen and a small
copy of its database (the sessions, messages and parts). Not collected by the suite (its name);
after an opencode upgrade, record again and commit::

    ./dev test plugins/opencode/tests/record_activity.py

Each case is replayed through the hook as it is written (what the contract suite does)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from muxhost.testing import wait_for
from muxhost.testing.recording import CWD, record, sqlite_subset
from muxhost_opencode import OpenCodeAgent

FIXTURES = Path(__file__).parent / "fixtures" / "activity"
READY = "ctrl+p commands"
DB = ".local/share/opencode/opencode.db"


def test_record(mux, tmp_path, tui_setup, fake_llm, scripted):
    work = tui_setup({"bash": "ask"})
    rec = mux.ok("launch", "opencode", "--cwd", str(work), "--json")
    pane = rec["pane"]
    mux.wait_screen(pane, READY, timeout=90)
    mux.type(pane, "hello")
    mux.wait_screen(pane, "Hello from the fake model.", timeout=90)  # (the first waits for opencode's npm install)
    sid = wait_for(lambda: next(r for r in mux.ok("ls", "--json") if r["id"] == rec["id"])["conversation_id"],
                   timeout=30, what="the session id")
    rewrite = {str(work): CWD, str(work)[1:]: CWD[1:],  # (a session's path is also kept without its first /)
               str(mux.home): "@HOME@", str(tmp_path): "/muxhost-fixture"}
    agent = OpenCodeAgent()

    def take():
        db = sqlite_subset(mux.home / DB, {t: ("1", ()) for t in ("session", "message", "part")}, rewrite)
        screen = re.sub(r"/tmp/pytest-of-\S*", "/muxhost-fixture/", mux.capture(pane))  # (the footer wraps the cwd)
        screen = re.sub(r"test_record\d*/", "", screen)
        return screen, {DB: db}, {"conversation_id": sid, "cwd": CWD}

    def case(name: str, state: str) -> None:
        record(agent, FIXTURES / name, state, take, rewrite)

    def prompt(text: str) -> None:
        """Type ``text`` once the turn before is over (``ls`` says idle)."""
        wait_for(lambda: next(r for r in mux.ok("ls", "--json") if r["id"] == rec["id"])["activity"] == "idle",
                 timeout=60, what="opencode idle")
        mux.type(pane, text)

    case("idle", "idle")
    prompt(f"{scripted['slow']} please")
    mux.wait_screen(pane, "word3 ", timeout=60)
    case("working-reply-streams", "working")
    mux.wait_screen(pane, scripted["slow_done"], timeout=60)

    prompt(f"{scripted['ask']} please")
    mux.wait_screen(pane, "Allow once", timeout=60)
    case("waiting-permission", "waiting")
    mux.tmux("send-keys", "-t", pane, "Enter")  # Allow once
    mux.wait_screen(pane, scripted["asked"], timeout=60)

    prompt(f"{scripted['question']} please")
    mux.wait_screen(pane, "esc dismiss", timeout=60)
    case("waiting-question", "waiting")
    mux.tmux("send-keys", "-t", pane, "Enter")  # the first option

    prompt(f"{scripted['sub_slow']} please")
    wait_for(lambda: len(fake_llm.requests) and any("take your time" in json.dumps(r) for r in fake_llm.requests),
             timeout=60, what="the sub-agent's request")
    time.sleep(2)  # its reply streams
    case("subagent-working", "working")
    case("idle-after-subagent", "idle")
    assert not [p for p in FIXTURES.rglob("*") if p.is_file() and b"pytest-of" in p.read_bytes()], "a machine's path was recorded"
