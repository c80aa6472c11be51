"""Records claude's activity fixtures, ``fixtures/activity/<case>/`` (:mod:`muxhost.testing.recording`):
the pinned claude in a real tmux pane against conftest's FakeAnthropic, in each state — idle, a reply
streaming, a permission asked, a sub-agent at work — its screen, its live registry entry and its
transcript. Not collected by the suite (its name); after a claude upgrade, record again and commit::

    ./dev test plugins/claude/tests/record_activity.py

Each case is replayed through the hook as it is written (what the contract suite does)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from muxhost.testing import wait_for
from muxhost.testing.recording import CWD, record
from muxhost_claude import ClaudeAgent, project_folder_name

FIXTURES = Path(__file__).parent / "fixtures" / "activity"
SLOW, ASK_BASH, SPAWN_CHILD = "MUXHOST_SLOW", "MUXHOST_ASK_BASH", "MUXHOST_SPAWN_CHILD"


def _send(w, pane: str, text: str) -> None:
    w.mux.type(pane, text, enter=False)
    w.mux.wait_screen(pane, text, timeout=30)
    w.mux.type(pane, "", enter=True, pause=0)


def test_record(claude_world, tmp_path):
    w = claude_world
    mux = w.mux
    cwd = w.work / "rec"
    cwd.mkdir()
    # Bash asks (the default mode, not allowed); the sub-agent tool does not
    (w.config_dir / "settings.json").write_text(json.dumps({"permissions": {"allow": ["Read", "Agent", "Task"],
                                                                            "defaultMode": "default"}}))
    rec = mux.ok("launch", "claude", "--cwd", str(cwd), "--json")
    pane = rec["pane"]
    mux.wait_screen(pane, "? for shortcuts", timeout=60)
    pid = next(r for r in mux.ok("ls", "--json") if r["id"] == rec["id"])["pids"][0]
    registry = w.config_dir / "sessions" / f"{pid}.json"
    w.say(pane, "hello", "hello, I am a fake model")
    rewrite = {str(cwd): CWD, project_folder_name(str(cwd)): project_folder_name(CWD), str(w.home): "@HOME@",
               str(tmp_path): "/muxhost-fixture"}
    agent = ClaudeAgent()

    def take():
        entry = json.loads(registry.read_text())
        cid = entry["sessionId"]
        text = json.dumps(entry, indent=1).replace(f'"pid": {pid}', '"pid": @PID@')
        text = text.replace(f'"procStart": "{entry["procStart"]}"', '"procStart": "@PID_START@"')
        transcript = w.config_dir / "projects" / project_folder_name(str(cwd)) / f"{cid}.jsonl"
        files = {".claude/sessions/@PID@.json": text.encode(),
                 str(transcript.relative_to(w.home)): transcript.read_bytes()}
        screen = re.sub(r"/\S*?/work/rec\b", CWD, mux.capture(pane))  # (the header shows the cwd, elided)
        return screen, files, {"conversation_id": cid, "cwd": CWD}

    def case(name: str, state: str) -> None:
        record(agent, FIXTURES / name, state, take, rewrite)

    case("idle", "idle")
    since = len(w.server.requests)
    _send(w, pane, f"{SLOW} 8")
    wait_for(lambda: any(SLOW in json.dumps(r["body"].get("messages")) and r["sent"] is None
                         for r in w.server.requests[since:]), timeout=30, what="the slow answer streaming")
    mux.wait_screen(pane, "streaming streaming", timeout=30)
    case("working-reply-streams", "working")
    mux.wait_screen(pane, "slow done", timeout=60)

    _send(w, pane, f"please {ASK_BASH}")
    mux.wait_screen(pane, "Do you want to proceed?", timeout=60)
    case("waiting-permission", "waiting")
    mux.type(pane, "1", enter=False)
    mux.wait_screen(pane, "bash done", timeout=60)

    _send(w, pane, f"{SPAWN_CHILD} {(SLOW + ' 10')[::-1]}")
    wait_for(lambda: list((w.config_dir / "projects").glob("*/*/subagents/agent-*.jsonl")), timeout=60,
             what="the sub-agent's transcript")
    time.sleep(2)  # the sub-agent's answer streams
    case("subagent-working", "working")
    mux.wait_screen(pane, "child done", timeout=60)
    case("idle-after-subagent", "idle")
