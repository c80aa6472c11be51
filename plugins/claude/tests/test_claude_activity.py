"""Activity of claude (issue 12): the ``activity`` hook on fixture files, and what ``muxhost watch``
publishes for the real claude in a real tmux pane — each state seen within 3 s of its cause.

The real-binary tests need the ``claude`` CLI (``$MUXHOST_AGENT_BIN_DIR``): in CI a missing binary
fails, elsewhere they skip and say why (the ``claude_world`` fixture: ``muxhost.testing.agent_binary``).
The model is conftest's FakeAnthropic: ``MUXHOST_SLOW <s>`` streams its answer over <s> seconds,
``MUXHOST_ASK_BASH`` calls Bash (which the default permission mode asks about),
``MUXHOST_SUB_THEN_SLOW <s>`` runs a sub-agent that answers at once, then streams its own answer.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from muxhost import AgentContext
from muxhost.testing import Watching, quiet_connection, wait_for
from muxhost_claude import ClaudeAgent, project_folder_name, registry_activity, transcript_activity, transcript_stalled

# the words conftest.FakeAnthropic reacts to (conftest is not importable by name)
SLOW = "MUXHOST_SLOW"
ASK_BASH = "MUXHOST_ASK_BASH"
SUB_THEN_SLOW = "MUXHOST_SUB_THEN_SLOW"
ASKED_FILE = "asked-for.txt"
WITHIN = 3.0  # seconds from a cause to the state the watch publishes
WATCH = "watch:\n  interval: 0.5\n"
ASKS = "Do you want to proceed?"  # claude's permission prompt for a Bash command
A = str(uuid.uuid4())


# --------------------------------------------------------------------------------------------------
# the hook on fixture files (no binary, no tmux)

def _line(kind: str, sidechain: bool = False, **fields) -> str:
    return json.dumps({"type": kind, "isSidechain": sidechain, "sessionId": A, **fields}) + "\n"


def _user(content) -> str:
    return _line("user", message={"role": "user", "content": content})


def _assistant(stop: str | None, *blocks: dict, **extra) -> str:
    return _line("assistant", message={"role": "assistant", "content": list(blocks), "stop_reason": stop}, **extra)


TEXT = {"type": "text", "text": "calling Bash"}
TOOL = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "true"}}
RESULT = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}
HEAD = (json.dumps({"type": "permission-mode", "permissionMode": "default", "sessionId": A}) + "\n"
        + json.dumps({"type": "file-history-snapshot", "messageId": "m", "snapshot": {}}) + "\n")
PROMPT = _user("hello") + _line("attachment", attachment={"type": "skill_listing"})
TURN_DONE = _line("system", subtype="turn_duration", durationMs=1200)


@pytest.mark.parametrize("lines, state", [
    (PROMPT, "working"),                                                     # asked; the answer streams
    (PROMPT + _assistant("tool_use", TEXT), "working"),                      # (claude writes a block at a time)
    (PROMPT + _assistant("tool_use", TEXT) + _assistant("tool_use", TOOL), "working"),  # a tool runs
    (PROMPT + _assistant("tool_use", TOOL) + _user([RESULT]), "working"),     # the tool ended: the turn goes on
    (PROMPT + _assistant("end_turn", {"type": "text", "text": "done"}), "idle"),
    (PROMPT + _assistant("end_turn", {"type": "text", "text": "done"}) + TURN_DONE, "idle"),
    (PROMPT + _assistant("stop_sequence", TEXT) + _user([{"type": "text", "text": "[Request interrupted by user]"}]),
     "idle"),                                                                # Esc
    (PROMPT + _assistant(None, TEXT, isApiErrorMessage=True), "idle"),       # the request failed for good
    (PROMPT + TURN_DONE + _user("<local-command-caveat>Caveat: …</local-command-caveat>")
     + _user("<command-name>/config</command-name>") + _user("<local-command-stdout>Set</local-command-stdout>"),
     "idle"),                                                                # a local slash command: no turn
    # a sub-agent's lines (isSidechain) ending never close the parent's turn, in either order
    (PROMPT + _assistant("tool_use", TOOL) + _line("assistant", True, message={"role": "assistant", "stop_reason": "end_turn",
                                                                             "content": [{"type": "text", "text": "sub done"}]}),
     "working"),
    (PROMPT + _assistant("end_turn", TEXT) + _line("user", True, message={"role": "user", "content": "sub prompt"}), "idle"),
    ("", None),                                                              # nothing said yet
    (_line("assistant", message=[]) + "[1]\n", None),                       # odd lines: no opinion, no raise
    (_line("user", message={"content": 7}) + "[1]\n", "working"),
])
def test_transcript_tail(tmp_path, lines, state):
    f = tmp_path / f"{A}.jsonl"
    f.write_text(HEAD + lines)
    assert transcript_activity(f) == state


def test_transcript_half_written_huge_or_missing(tmp_path):
    f = tmp_path / f"{A}.jsonl"
    assert transcript_activity(f) is None  # missing
    f.write_text("")
    assert transcript_activity(f) is None
    done = PROMPT + _assistant("end_turn", TEXT)
    # a half-written last line (no newline yet): the last complete line says
    f.write_text(done + _user("next")[:25])
    assert transcript_activity(f) == "idle"
    f.write_text(done + _user("next"))
    assert transcript_activity(f) == "working"
    # only the end is read: a first line of 2 MB that is not JSON does not matter
    f.write_text("x" * (2 << 20) + "\n" + done)
    t0 = time.perf_counter()
    assert transcript_activity(f) == "idle"
    assert time.perf_counter() - t0 < 0.05
    # ...and a tail that holds only the end of one huge line is no opinion, not a guess
    f.write_text(PROMPT + _user([{"type": "tool_result", "tool_use_id": "t", "content": "y" * (1 << 20)}]))
    assert transcript_activity(f) is None


@pytest.mark.parametrize("entry, state", [
    ({"status": "busy"}, "working"), ({"status": "idle"}, "idle"), ({"status": "shell"}, "idle"),
    ({"status": "waiting", "waitingFor": "permission prompt"}, "waiting"),
    ({"status": "waiting", "waitingFor": "worker request"}, "waiting"),
    ({"status": "waiting", "waitingFor": "dialog open"}, "idle"),  # the user opened /config: nothing is asked
    ({"status": "napping"}, None), ({"status": 3}, None), ({}, None),
])
def test_registry_status(entry, state):
    assert registry_activity(entry) == state


@pytest.fixture
def sleeper():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield p
    p.kill()
    p.wait()


def _proc_start(pid: int) -> str:
    data = Path(f"/proc/{pid}/stat").read_text()
    return data[data.rfind(")") + 2:].split()[19]


def test_the_hook_takes_the_live_registry_then_the_transcript(tmp_path, sleeper):
    agent, home, cwd = ClaudeAgent(), tmp_path / "home", tmp_path / "w"
    cwd.mkdir()
    sessions = home / ".claude" / "sessions"
    sessions.mkdir(parents=True)
    folder = home / ".claude" / "projects" / project_folder_name(str(cwd))
    folder.mkdir(parents=True)
    ctx = AgentContext(home=str(home), cwd=str(cwd), pids=[sleeper.pid, 4_000_000], conversation_id=A)
    assert agent.activity(ctx, None) == "idle"  # no registry, no transcript yet: asked nothing yet
    assert agent.activity(AgentContext(home=str(home), cwd=str(cwd), pids=[sleeper.pid]), None) is None  # no id
    assert agent.activity_reads_screen is False
    elsewhere = home / ".claude" / "projects" / "-somewhere-else"
    elsewhere.mkdir()
    (elsewhere / f"{A}.jsonl").write_text(HEAD + PROMPT)
    assert agent.activity(ctx, None) is None  # its transcript, in another folder: not known to be idle
    (elsewhere / f"{A}.jsonl").unlink()
    (folder / f"{A}.jsonl").write_text(HEAD + PROMPT + _assistant("tool_use", TOOL))
    assert agent.activity(ctx, None) == "working"  # the transcript (it cannot see a permission prompt)

    reg = sessions / f"{sleeper.pid}.json"
    entry = {"pid": sleeper.pid, "sessionId": A, "cwd": str(cwd), "procStart": _proc_start(sleeper.pid),
             "kind": "interactive", "status": "waiting", "waitingFor": "permission prompt"}
    reg.write_text(json.dumps(entry))
    assert agent.activity(ctx, None) == "waiting"  # claude's own word first
    reg.write_text(json.dumps(entry)[:40])  # caught half-written (claude rewrites it in place)
    assert agent.activity(ctx, None) == "working"
    reg.write_text(json.dumps({**entry, "procStart": "1"}))  # a dead claude's entry, its pid reused
    assert agent.activity(ctx, None) == "working"
    # no status yet (claude writes it a moment after start): the transcript of the entry's conversation
    other = str(uuid.uuid4())
    (folder / f"{other}.jsonl").write_text(HEAD + PROMPT + TURN_DONE)
    reg.write_text(json.dumps({k: v for k, v in entry.items() if k not in ("status", "waitingFor")} | {"sessionId": other}))
    assert agent.activity(ctx, None) == "idle"
    (folder / f"{other}.jsonl").unlink()
    assert agent.activity(ctx, None) == "idle"


# --------------------------------------------------------------------------------------------------
# the real claude, watched

def _steps(changes: list[dict], rid: str) -> list[tuple]:
    return [(c["old"], c["new"]) for c in changes if c["record"] == rid]


def _send(w, pane: str, text: str) -> None:
    """Type a prompt, see it in the input box, press Enter (again while no request carries it: a
    TUI busy starting may drop the key)."""
    asked_before = len(w.server.requests)
    w.mux.type(pane, text, enter=False)
    w.mux.wait_screen(pane, text, timeout=30)
    for _ in range(3):
        w.mux.type(pane, "", enter=True, pause=0)
        try:
            _request(w, lambda r: text in json.dumps(r["body"].get("messages")), f"a request carrying {text!r}",
                     since=asked_before, timeout=5)
            return
        except AssertionError:
            continue
    raise AssertionError(f"claude never sent {text!r}")


def _request(w, match, what: str, since: int = 0, timeout: float = 60) -> dict:
    """The first request (from index ``since``) that ``match`` picks."""
    def find():
        with w.server.lock:
            return next((r for r in w.server.requests[since:] if match(r)), None)
    return wait_for(find, timeout=timeout, what=what)


def _answered(w, text: str, since: int, stop: str = "end_turn") -> dict:
    """The request (from ``since``) whose answer ends with ``text`` (``stop``: its stop reason)."""
    return _request(w, lambda r: r.get("stop") == stop and r.get("answer", "").rstrip().endswith(text),
                    f"the answer {text!r}", since=since)


def _sent(r: dict, timeout: float = 60) -> float:
    return wait_for(lambda: r["sent"], timeout=timeout, what="the end of the answer")


def _states_until(watch: Watching, pane: str, r: dict) -> set[str]:
    """Every state the watch shows for the pane (looked at every 0.1 s) until request ``r``'s answer is sent."""
    states = set()
    while r["sent"] is None:
        states.add(watch.activity(pane))
        time.sleep(0.1)
    return states


def _slow_turn(w, watch: Watching, pane: str, seconds: float, since: int) -> None:
    """A slow answer (``MUXHOST_SLOW <seconds>``): working within 3 s of the request, all along
    while it streams, idle within 3 s of its end."""
    _send(w, pane, f"{SLOW} {seconds}")
    slow = _answered(w, "slow done", since)
    _seen(watch, pane, "working", slow["t"])
    states = _states_until(watch, pane, slow)
    assert states == {"working"}, f"the answer streaming was {states}"
    _seen(watch, pane, "idle", slow["sent"])


def _seen(watch: Watching, pane: str, state: str, cause: float, timeout: float = 30) -> None:
    """Wait for ``state`` on the pane; it must show within :data:`WITHIN` s of ``cause`` (monotonic)."""
    watch.wait(pane, state, timeout=timeout)
    late = time.monotonic() - cause
    assert late < WITHIN, f"{state} seen {late:.1f}s after its cause"


def test_working_waiting_idle(claude_world):
    """A slow answer in flight is ``working``, its end ``idle``; a Bash call that claude asks
    permission for is ``waiting`` (and ``ls`` says so, with a watch and without one) until answered."""
    w = claude_world
    mux = w.mux
    mux.config.write_text(WATCH)
    cwd = w.work / "asks"
    cwd.mkdir()
    # the default permission mode, Bash not allowed: claude asks before it runs a command
    (w.config_dir / "settings.json").write_text(json.dumps({"permissions": {"allow": ["Read"], "defaultMode": "default"}}))
    rec = mux.ok("launch", "claude", "--cwd", str(cwd), "--json")
    pane, rid = rec["pane"], rec["id"]
    mux.wait_screen(pane, "? for shortcuts", timeout=60)

    with Watching(mux) as watch:
        watch.wait(pane, "idle", timeout=30)
        # a slow answer: working within 3 s of the request, all along, idle within 3 s of its end
        mark, since = len(watch.changes), len(w.server.requests)
        _slow_turn(w, watch, pane, 7, since)
        assert _steps(watch.changes_of(rid, mark, until="idle"), rid) == [("idle", "working"), ("working", "idle")]

        # a tool call that needs the user's permission: waiting within 3 s of the call
        mark, since = len(watch.changes), len(w.server.requests)
        _send(w, pane, f"please {ASK_BASH}")
        call = _answered(w, "calling Bash", since, stop="tool_use")
        _seen(watch, pane, "waiting", _sent(call))
        assert ASKS in mux.capture(pane)
        assert next(r for r in mux.ok("ls", "--json") if r["id"] == rid)["activity"] == "waiting"
        assert {s for _, s in _steps(watch.changes[mark:], rid)} <= {"working", "waiting"}
        time.sleep(1.5)  # it stays waiting while the question is on screen
        assert watch.activity(pane) == "waiting"
        # yes: the command runs, the answer ends, idle
        mark, since = len(watch.changes), len(w.server.requests)
        mux.type(pane, "1", enter=False)
        done = _answered(w, "bash done", since)
        _seen(watch, pane, "idle", _sent(done))
        assert (cwd / ASKED_FILE).exists()
        after = [new for _, new in _steps(watch.changes_of(rid, mark, until="idle"), rid)]
        assert after[-1] == "idle" and set(after) <= {"working", "idle"}, after

    # no watch: ls looks once, and the hook answers from claude's registry alone
    row = lambda: next(r for r in mux.ok("ls", "--json") if r["id"] == rid)["activity"]  # noqa: E731
    assert row() == "idle"
    since = len(w.server.requests)
    _send(w, pane, f"again {ASK_BASH}")
    mux.wait_screen(pane, ASKS, timeout=60)
    assert row() == "waiting"
    mux.type(pane, "3", enter=False)  # no: the turn ends there
    wait_for(lambda: row() == "idle", timeout=30, what="ls says idle after the refusal")
    assert not any(r.get("answer") == "bash done" for r in w.server.requests[since:])


def test_explain_after_one_turn_says_idle_and_names_the_registry(claude_world):
    """``muxhost explain`` after one turn: idle, from claude's live registry, and the rule that decided."""
    w = claude_world
    cwd = w.work / "why"
    cwd.mkdir()
    rec = w.launch(cwd)
    w.say(rec["pane"], "hello there", "hello, I am a fake model")
    doc = wait_for(lambda: (lambda d: d if d["activity"] == "idle" else None)(w.mux.ok("explain", rec["id"], "--json")),
                   timeout=30, what="explain says idle")
    plugin = doc["look"]["plugin"]
    assert plugin["answer"] == "idle" and plugin["reason"].startswith("registry: sessions/"), plugin
    assert doc["look"]["rule"] == "the plugin says idle, and no non-resident child used CPU"
    assert doc["look"]["processes"][0]["role"] == "agent" and doc["conversation_id"]
    text = w.mux.ok("explain", rec["id"])
    assert "plugin:       idle (registry: sessions/" in text, text


@pytest.mark.parametrize("source", ["registry", "transcript"])
def test_a_sub_agent_ending_keeps_the_parent_working(claude_world, source):
    """A sub-agent ends while its parent still works (its next answer streams for 6 s): the parent
    stays ``working`` from the sub-agent's end to its own, then is ``idle`` within 3 s. From claude's
    registry, and from the transcript alone (the registry file removed: claude rewrites it only when
    it exists, so the hook has the transcript only)."""
    w = claude_world
    mux = w.mux
    mux.config.write_text(WATCH)
    cwd = w.work / f"sub-{source}"
    cwd.mkdir()
    rec = w.launch(cwd)
    pane, rid = rec["pane"], rec["id"]
    pid = next(r for r in mux.ok("ls", "--json") if r["id"] == rid)["pids"][0]
    registry = w.config_dir / "sessions" / f"{pid}.json"
    wait_for(registry.exists, timeout=30, what="claude's registry file")
    if source == "transcript":
        registry.unlink()

    with Watching(mux) as watch:
        watch.wait(pane, "idle", timeout=30)
        mark, since = len(watch.changes), len(w.server.requests)
        _send(w, pane, f"{SUB_THEN_SLOW} 6")
        first = _request(w, lambda r: SUB_THEN_SLOW in json.dumps(r["body"].get("messages")), "the prompt", since)
        _seen(watch, pane, "working", first["t"])
        sub = _answered(w, "sub-agent done", since)
        parent = _answered(w, "parent done", since)
        sub_end = _sent(sub)
        states = _states_until(watch, pane, parent)  # from the sub-agent's end to the parent's
        assert parent["sent"] - sub_end > 4, "the parent still worked a while after the sub-agent ended"
        assert states == {"working"}, f"the parent was {states} after its sub-agent ended"
        _seen(watch, pane, "idle", parent["sent"])
        assert _steps(watch.changes_of(rid, mark, until="idle"), rid) == [("idle", "working"), ("working", "idle")]
    assert list((w.config_dir / "projects" / project_folder_name(str(cwd)) / rec["conversation_id"] / "subagents")
                .glob("agent-*.jsonl")), "the sub-agent has a transcript of its own (which ended first)"
    assert registry.exists() == (source == "registry")


HANG = "MUXHOST_HANG"  # conftest.FakeAnthropic: the answer's headers, then not a byte


def test_a_hung_model_is_stalled_a_slow_one_never(claude_world):
    """``watch.stall_after`` 5 s: an answer that streams a word every 0.25 s for 9 s stays
    ``working`` all along (claude's transcript does not grow while it streams: the bytes arriving
    say it works); a model that sends the headers and then nothing is ``stalled`` within a few
    seconds of ``stall_after`` — claude's registry still says busy and its spinner still moves —
    for the watch and for ``ls`` without one."""
    w = claude_world
    mux = w.mux
    mux.config.write_text("watch:\n  interval: 0.5\n  stall_after: 5\n")
    cwd = w.work / "hang"
    cwd.mkdir()
    rec = w.launch(cwd)
    pane, rid = rec["pane"], rec["id"]
    with Watching(mux) as watch:
        watch.wait(pane, "idle", timeout=30)
        since = len(w.server.requests)
        _slow_turn(w, watch, pane, 9, since)

        since = len(w.server.requests)
        _send(w, pane, HANG)
        held = _request(w, lambda r: r.get("stop") == "hang", "the held request", since)
        watch.wait(pane, "stalled", timeout=30)
        late = time.monotonic() - held["t"]
        assert 5 <= late < 5 + WITHIN + 1, f"stalled {late:.1f}s after the request was held"
        assert registry_activity(json.loads(next((w.config_dir / "sessions").glob("*.json")).read_text())) == "working"
        assert _steps(watch.changes, rid)[-2:] == [("idle", "working"), ("working", "stalled")]
    row = next(r for r in mux.ok("ls", "--json") if r["id"] == rid)
    assert row["activity"] == "stalled", row


def test_transcript_stalled_only_while_a_reply_is_awaited_and_nothing_comes(tmp_path):
    """``transcript_stalled``: the transcript still for ``stall_after`` and no byte from the network
    for as long — after a prompt or a tool result; never while a tool call is the last entry (a
    quiet tool runs), never while the file just grew or a byte just came, never with no connection."""
    import os

    f = tmp_path / f"{A}.jsonl"
    with quiet_connection(1.1) as pids:
        ctx = AgentContext(home=str(tmp_path), pids=pids, stall_after=1.0)

        def still(text: str, c: AgentContext = ctx):
            f.write_text(HEAD + text)
            old = time.time() - 30
            os.utime(f, (old, old))
            return transcript_stalled(f, c)

        assert still(PROMPT) == "stalled" and "transcript: no change for 30 s" in still(PROMPT).reason
        assert still(PROMPT + _assistant("tool_use", TOOL) + _user([RESULT])) == "stalled"
        assert still(PROMPT + _assistant("tool_use", TOOL)) is None  # a tool runs
        assert still(PROMPT, AgentContext(home=str(tmp_path), pids=[], stall_after=1.0)) is None
        f.write_text(HEAD + PROMPT)
        assert transcript_stalled(f, ctx) is None  # it just grew
        assert transcript_stalled(tmp_path / "gone.jsonl", ctx) is None
        pids.poke()
        assert still(PROMPT) is None  # a byte just came: the reply streams
