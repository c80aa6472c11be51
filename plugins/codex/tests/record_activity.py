"""Records codex's activity fixtures, ``fixtures/activity/<case>/`` (:mod:`muxhost.testing.recording`):
the pinned codex TUI in a real tmux pane against conftest's FakeResponses, in each state — idle, a
reply streaming, a command's approval asked, a question asked, a sub-agent at work after its
parent's turn ended — its screen, its rollouts (settings and token counts left out, long strings cut short) and a
small state database (the spawn edges). Not collected by the suite (its name); after a codex
upgrade, record again and commit::

    ./dev test plugins/codex/tests/record_activity.py

Each case is replayed through the hook as it is written (what the contract suite does)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from muxhost.testing import wait_for
from muxhost.testing.recording import CWD, record, sqlite_subset
from muxhost_codex import CodexAgent

FIXTURES = Path(__file__).parent / "fixtures" / "activity"
READY = ("? for shortcuts", "Ask Codex to do anything")


def enter(mux, pane: str, text: str) -> None:
    mux.type(pane, text, enter=False)
    time.sleep(0.6)  # (text followed at once by Enter is a paste to codex)
    mux.server.cmd("send-keys", "-t", pane, "Enter")


def _cut(value):
    """``value`` with every string over 120 characters cut short (codex's instructions, its tools)."""
    if isinstance(value, str):
        return value if len(value) <= 120 else value[:120] + "…"
    if isinstance(value, list):
        return [_cut(v) for v in value]
    if isinstance(value, dict):
        return {k: _cut(v) for k, v in value.items()}
    return value


#: rollout lines of settings and accounting, left out (no turn, no item; kilobytes each)
_BOOKKEEPING = ("turn_context", "token_usage_record", "token_count", "thread_settings_applied", "world_state")


def _short(lines: bytes) -> bytes:
    """A rollout's lines, bookkeeping left out and long strings cut short (a line codex is still
    writing: as it is)."""
    out = []
    for line in lines.split(b"\n"):
        try:
            d = json.loads(line)
        except ValueError:
            out.append(line)
            continue
        kind = d.get("payload", {}).get("type") if d.get("type") == "event_msg" else d.get("type")
        if kind not in _BOOKKEEPING:
            out.append(json.dumps(_cut(d), ensure_ascii=False).encode())
    return b"\n".join(out)


def test_record(mux, mux_codex, tmp_path):
    cx = mux_codex
    work = tmp_path / "work"
    work.mkdir()
    cx.configure(work, approval="on-request", sandbox="workspace-write")
    rec = mux.ok("launch", "codex", "--cwd", str(work), "--json")
    pane = rec["pane"]
    wait_for(lambda: any(r in mux.capture(pane) for r in READY), timeout=30, what="codex ready")
    enter(mux, pane, "hello")
    mux.wait_screen(pane, "fake reply")
    tid = wait_for(lambda: next(r for r in mux.ok("ls", "--json") if r["id"] == rec["id"])["conversation_id"],
                   timeout=30, what="the thread id")
    rewrite = {str(work): CWD, str(mux.home): "@HOME@", str(tmp_path): "/muxhost-fixture"}
    agent = CodexAgent()

    def take():
        files = {str(p.relative_to(mux.home)): _short(p.read_bytes())
                 for p in (cx.codex_home / "sessions").rglob("rollout-*.jsonl")}
        dbs = sorted(cx.codex_home.glob("state_*.sqlite"))
        if dbs:
            files[str(dbs[-1].relative_to(mux.home))] = sqlite_subset(dbs[-1], {"thread_spawn_edges": ("1", ())})
        screen = re.sub(r"(/|~)\S*?/work\b", CWD, mux.capture(pane))  # (the footer shows the cwd, elided)
        return screen, files, {"conversation_id": tid, "cwd": CWD}

    def case(name: str, state: str) -> None:
        record(agent, FIXTURES / name, state, take, rewrite)

    case("idle", "idle")
    enter(mux, pane, "please SLOW-REPLY")
    mux.wait_screen(pane, "slow part 3")
    case("working-reply-streams", "working")
    mux.wait_screen(pane, "fake reply", timeout=60)

    enter(mux, pane, "now RUN-TOOL")
    mux.wait_screen(pane, "Would you like to run the following command?")
    case("waiting-approval", "waiting")
    mux.type(pane, "y", enter=False)
    wait_for(lambda: (work / "tool-ran.txt").exists(), timeout=30, what="the approved command to run")

    enter(mux, pane, "/plan")
    mux.wait_screen(pane, "Plan mode")
    enter(mux, pane, "please ASK-USER")
    mux.wait_screen(pane, "Question 1/1")
    case("waiting-question", "waiting")
    mux.server.cmd("send-keys", "-t", pane, "Enter")  # the first option
    time.sleep(2)
    enter(mux, pane, "/plan")  # (back to the default mode)

    t = time.time()
    enter(mux, pane, "please SPAWN-BG")
    wait_for(lambda: cx.server.spawned, timeout=30, what="the spawn call")
    wait_for(lambda: any(th == tid and at > t for at, th in list(cx.server.done)) and len(list(
        (cx.codex_home / "sessions").rglob("rollout-*.jsonl"))) >= 2, timeout=30, what="the parent's turn to end")
    case("subagent-working", "working")
    wait_for(lambda: sum(1 for at, _ in list(cx.server.done) if at > t) >= 3, timeout=30, what="the sub-agent's answer")
    case("idle-after-subagent", "idle")
