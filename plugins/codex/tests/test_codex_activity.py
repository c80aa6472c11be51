"""Activity of the real codex TUI, as `muxhost watch` publishes it: a reply streaming is
``working``, an approval prompt or a question is ``waiting``, the answer done is ``idle``, and a
sub-agent whose turn ends while its parent still works leaves the parent ``working`` (one still
working after its parent's turn ended keeps it ``working``). Each state is seen within 3 s of its
cause. Then the hook itself on rollout files: half-written lines, missing files, stale turns."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

from datetime import datetime

import pytest

import muxhost_codex
from muxhost import AgentContext
from muxhost.testing import Watching, quiet_connection, wait_for
from muxhost_codex import CodexAgent, asks_user, last_turn, rollout_stalled

SOON = 3.0  # seconds within which the watch must show a state after its cause
READY = ("? for shortcuts", "Ask Codex to do anything")


def enter(mux, pane: str, text: str) -> float:
    """Type ``text``, then Enter (codex takes text followed at once by Enter as a paste); returns
    the time of the Enter."""
    mux.type(pane, text, enter=False)
    time.sleep(0.6)
    mux.server.cmd("send-keys", "-t", pane, "Enter")
    return time.time()


def seen(w: Watching, pane: str, state: str, cause: float, timeout: float = 30) -> float:
    """Wait for ``state`` on the pane; assert it came within :data:`SOON` of ``cause`` (a time)."""
    w.wait(pane, state, timeout=timeout)
    late = time.time() - cause
    assert late <= SOON, f"{state} was seen {late:.1f}s after its cause (changes: {w.changes})"
    return late


def stays(w: Watching, pane: str, state: str, seconds: float) -> None:
    """The pane shows ``state`` at every look for ``seconds``."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        assert w.activity(pane) == state, w.changes
        time.sleep(0.1)


def request(cx, text: str) -> dict:
    """The first request whose newest input item is a user message containing ``text``."""
    def find():
        for r in list(cx.server.requests):
            items = [i for i in r["body"].get("input") or () if isinstance(i, dict)]
            if items and items[-1].get("role") == "user" and text in json.dumps(items[-1]):
                return r
        return None
    return wait_for(find, timeout=30, what=f"the model asked {text!r}")


def thread_of(r: dict) -> str:
    return r["headers"].get("thread-id") or r["headers"].get("Thread-Id") or ""


def done(cx, thread: str, after: float, timeout: float = 60) -> float:
    """When the server finished sending a reply on ``thread`` after time ``after``."""
    return wait_for(lambda: next((t for t, th in list(cx.server.done) if th == thread and t > after), None),
                    timeout=timeout, what=f"a reply on thread {thread} to end")


def steps(w: Watching, rid: str, cause: float | None = None) -> list[tuple[float, str]]:
    """``(since, state)`` of the record's changes (with ``cause``: those since it, give or take 0.5 s)."""
    return [(c["since"], c["new"]) for c in list(w.changes)
            if c["record"] == rid and (cause is None or c["since"] >= cause - 0.5)]


def working_then_idle(w: Watching, rid: str, cause: float, end: float) -> None:
    """Since ``cause`` the record went ``working``, then ``idle`` no earlier than ``end``."""
    after = steps(w, rid, cause)
    assert [s for _, s in after] == ["working", "idle"], (after, w.changes)
    assert after[1][0] >= end - 0.5


def spawn(mux, cx, w: Watching, pane: str, word: str, task: str) -> tuple[float, str, str]:
    """Once the pane is ``idle``, type a prompt with ``word`` (a ``spawn_agent`` call, conftest) and
    see ``working`` within :data:`SOON`; returns the time of the Enter, the parent's thread and the
    sub-agent's (the other thread whose input names ``task``, the tail of its task)."""
    w.wait(pane, "idle", timeout=30)
    t = enter(mux, pane, f"go {word}")
    seen(w, pane, "working", t)
    parent = thread_of(request(cx, word))
    child = thread_of(wait_for(lambda: next((r for r in list(cx.server.requests) if thread_of(r) not in ("", parent)
                                             and task in json.dumps(r["body"].get("input"))), None),
                               timeout=30, what="the sub-agent to ask the model"))
    return t, parent, child


def ready(mux, cx, tmp_path: Path, **config) -> tuple[Path, str, str]:
    """A codex TUI launched by muxhost in a new ``work`` folder (``cx.configure(work, **config)``),
    its first prompt answered (so its rollout exists); returns the folder, the record and the pane."""
    work = tmp_path / "work"
    work.mkdir()
    cx.configure(work, **config)
    rec = mux.ok("launch", "codex", "--cwd", str(work), "--json")
    rid, pane = rec["id"], rec["pane"]
    wait_for(lambda: any(r in mux.capture(pane) for r in READY), timeout=30, what="codex ready")
    enter(mux, pane, "hello")
    mux.wait_screen(pane, "fake reply")
    return work, rid, pane


def test_a_slow_reply_is_working_then_idle(mux, mux_codex, tmp_path):
    cx = mux_codex
    _, rid, pane = ready(mux, cx, tmp_path)
    assert mux.ok("ls", "--json")[0]["conversation_id"]  # the watch reads the record's thread
    with Watching(mux) as w:
        w.wait(pane, "idle", timeout=30)
        t = enter(mux, pane, "please SLOW-REPLY")
        seen(w, pane, "working", t)
        mux.wait_screen(pane, "slow part 3")
        stays(w, pane, "working", 1.0)  # mid-stream: nothing of the reply is in the rollout yet
        end = done(cx, thread_of(request(cx, "SLOW-REPLY")), t)
        seen(w, pane, "idle", end)
        mux.wait_screen(pane, "fake reply")
    assert [s for _, s in steps(w, rid, t)] == ["working", "idle"], w.changes


def test_explain_after_one_turn_says_idle_and_names_the_rollout(mux, mux_codex, tmp_path):
    """``muxhost explain`` after one turn: idle, from the closed last turn of the thread's rollout."""
    _, rid, _ = ready(mux, mux_codex, tmp_path)
    doc = wait_for(lambda: (lambda d: d if d["activity"] == "idle" and d["look"]["plugin"]["answer"] else None)(
        mux.ok("explain", rid, "--json")), timeout=30, what="explain says idle from the rollout")
    plugin = doc["look"]["plugin"]
    assert plugin["answer"] == "idle" and plugin["reason"].startswith("rollout: the last turn of ") and \
        plugin["reason"].endswith(" closed"), plugin
    assert doc["look"]["rule"] == "the plugin says idle, and no non-resident child used CPU"
    assert doc["look"]["output"]["reads_screen"] and doc["conversation_id"]


def test_an_approval_and_a_question_are_waiting(mux, mux_codex, tmp_path):
    cx = mux_codex
    work, rid, pane = ready(mux, cx, tmp_path, approval="on-request", sandbox="workspace-write")
    with Watching(mux) as w:
        w.wait(pane, "idle", timeout=30)
        t = enter(mux, pane, "now RUN-TOOL")
        mux.wait_screen(pane, "Would you like to run the following command?")
        seen(w, pane, "waiting", t)
        stays(w, pane, "waiting", 1.5)  # however long the user takes
        assert not (work / "tool-ran.txt").exists()
        thread = thread_of(request(cx, "RUN-TOOL"))
        mux.type(pane, "y", enter=False)
        approved = time.time()
        wait_for(lambda: (work / "tool-ran.txt").exists(), timeout=30, what="the approved command to run")
        seen(w, pane, "idle", done(cx, thread, approved))  # the reply to the command's output

        # a question (request_user_input, offered in Plan mode only)
        enter(mux, pane, "/plan")
        mux.wait_screen(pane, "Plan mode")
        t = enter(mux, pane, "please ASK-USER")
        mux.wait_screen(pane, "Question 1/1")
        seen(w, pane, "waiting", t)
        mux.server.cmd("send-keys", "-t", pane, "Enter")  # the first option
        seen(w, pane, "idle", done(cx, thread, time.time()))  # the reply to the answer
    states = [s for _, s in steps(w, rid)]
    assert states.count("waiting") == 2 and states[-1] == "idle", w.changes


def test_ls_without_a_watch_sees_the_approval_on_the_screen(mux, mux_codex, tmp_path):
    """Codex writes nothing while it asks: `ls` (no watch) asks again with the screen."""
    cx = mux_codex
    _, rid, pane = ready(mux, cx, tmp_path, approval="on-request", sandbox="workspace-write")
    enter(mux, pane, "now RUN-TOOL")
    mux.wait_screen(pane, "Would you like to run the following command?")
    row = next(r for r in mux.ok("ls", "--json") if r["id"] == rid)
    assert row["activity"] == "waiting", row


def test_a_sub_agent_ending_while_its_parent_works_leaves_it_working(mux, mux_codex, tmp_path):
    """The child answers after 1.5 s while the parent's reply streams for 6 s (conftest).
    No `ls` runs first: the watch's refresh finds the thread (discover: the parent's, never the
    child's, though the TUI holds both)."""
    cx = mux_codex
    _, rid, pane = ready(mux, cx, tmp_path)
    with Watching(mux) as w:
        t, parent, child = spawn(mux, cx, w, pane, "SPAWN-SLOW", "slowly")
        child_end = done(cx, child, t)
        parent_end = done(cx, parent, child_end)
        assert parent_end - child_end > 2.0, "the child did not end well before its parent"
        seen(w, pane, "idle", parent_end)
    working_then_idle(w, rid, t, parent_end)  # idle only once the parent's reply ended
    assert mux.ok("ls", "--json")[0]["conversation_id"] == parent


def test_a_sub_agent_still_working_after_its_parent_keeps_it_working(mux, mux_codex, tmp_path):
    """The parent's turn ends at once; its sub-agent answers 6 s later (conftest): working until then."""
    cx = mux_codex
    _, rid, pane = ready(mux, cx, tmp_path)
    assert mux.ok("ls", "--json")[0]["conversation_id"]
    with Watching(mux) as w:
        t, parent, child = spawn(mux, cx, w, pane, "SPAWN-BG", "in the background")
        parent_end = done(cx, parent, t)
        child_end = done(cx, child, t)
        assert child_end - parent_end > 3.0, "the parent's turn did not end well before its child's"
        seen(w, pane, "idle", child_end)
    working_then_idle(w, rid, t, child_end)


# -- the hook on files ----------------------------------------------------------------------------

APPROVAL = """\
› now RUN-TOOL

• Running touch tool-ran.txt

  Would you like to run the following command?

  Reason: May the fake model touch a file?

  $ touch tool-ran.txt

› 1. Yes, proceed (y)
  2. Yes, and don't ask again for commands that start with `touch tool-ran.txt`
  3. No, and tell Codex what to do differently (esc)

  Press enter to confirm or esc to cancel
"""
QUESTION = """\
› please ASK-USER

  Question 1/1 (1 unanswered)
  Which colour should the fake model pick?

  › 1. Red (Recommended)  The red one.
    2. Blue               The blue one.

  tab to add notes | enter to submit answer | esc to interrupt
"""
AT_PROMPT = """\
• The TUI asked: Would you like to run the following command? Yes, proceed (y)

  Press enter to confirm or esc to cancel
  Worked for 1s

› Ask Codex to do anything

  fake-model default · /tmp/work
"""
MODEL_POPUP = """\
  Select Model and Effort

› 1. GPT-6.2-Sol    Fast, go-to model for coding and everyday work.

  enter select · esc back
"""


def test_asks_user_on_screens():
    assert asks_user(APPROVAL) and asks_user(QUESTION)
    assert not asks_user(AT_PROMPT) and not asks_user(MODEL_POPUP) and not asks_user("")


T0 = "2026-12-01T11:40:51.506Z"


def epoch(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def event(kind: str, ts: str = T0) -> bytes:
    return json.dumps({"timestamp": ts, "type": "event_msg", "payload": {"type": kind, "turn_id": "t1"}}).encode() + b"\n"


def item(text: str) -> bytes:
    return json.dumps({"timestamp": "2026-12-01T11:40:52.000Z", "type": "response_item",
                       "payload": {"type": "message", "role": "assistant", "content": [{"text": text}]}}).encode() + b"\n"


T1 = "2026-12-01T11:40:53.000Z"


def test_last_turn_reads_complete_lines_and_what_was_appended(tmp_path):
    path = tmp_path / "rollout.jsonl"
    assert last_turn(path) is None  # missing
    path.write_bytes(b'{"type":"session_meta","payload":{}}\n' + item("no turn yet"))
    assert last_turn(path) is None  # no turn event
    with open(path, "ab") as f:
        f.write(event("task_started"))
    assert last_turn(path) == (True, epoch(T0))
    with open(path, "ab") as f:  # a reply that quotes an event's words is not one
        f.write(item('{"type":"event_msg","payload":{"type":"task_complete"}}'))
        whole = event("task_complete", T1)
        f.write(whole[:30])  # codex is still writing this line
    assert last_turn(path) == (True, epoch(T0))
    with open(path, "ab") as f:
        f.write(whole[30:])
    assert last_turn(path) == (False, epoch(T1))
    muxhost_codex._turns.clear()  # a fresh process (`ls`) reads back from the end
    assert last_turn(path) == (False, epoch(T1))
    with open(path, "ab") as f:
        f.write(event("task_started") + item("x" * 300_000) + item("y" * 300_000) + b"garbage\n")
    muxhost_codex._turns.clear()  # the turn event is far from the end: it reads further back
    assert last_turn(path)[0] is True
    with open(path, "ab") as f:
        f.write(event("turn_aborted"))
    assert last_turn(path)[0] is False
    path.write_bytes(b"\x00\xff not json\n{\"half")  # rewritten: read again, nothing in it
    assert last_turn(path) is None
    path.unlink()
    assert last_turn(path) is None


def fake_home(tmp_path, threads: dict[str, list[bytes]], edges=()) -> Path:
    """A CODEX_HOME with one rollout per thread (lines given) and a state database naming them."""
    home = tmp_path / ".codex"
    day = home / "sessions" / "2026" / "12" / "01"
    day.mkdir(parents=True)
    con = sqlite3.connect(home / "state_5.sqlite")
    con.execute("create table threads (id text primary key, rollout_path text not null)")
    con.execute("create table thread_spawn_edges (parent_thread_id text, child_thread_id text primary key, status text)")
    for tid, lines in threads.items():
        path = day / f"rollout-2026-12-01T11-40-51-{tid}.jsonl"
        path.write_bytes(b"".join(lines))
        con.execute("insert into threads values (?, ?)", (tid, str(path)))
    con.executemany("insert into thread_spawn_edges values (?, ?, 'open')", edges)
    con.commit()
    con.close()
    return home


PARENT = "01a23168-5745-7261-bf26-946a7c445f8d"
CHILD = "01a23168-5876-7953-9130-7a725103e0ee"
OTHER = "01a23168-5876-7953-9130-7a725103e0ff"


@pytest.mark.parametrize("parent, child, launched, expected", [
    ([event("task_started")], [], 0, "working"),
    ([event("task_started"), event("task_complete")], [], 0, "idle"),
    ([event("task_started"), event("turn_aborted")], [], 0, "idle"),
    ([event("task_started"), event("task_complete")], [event("task_started")], 0, "working"),  # its sub-agent works
    ([event("task_started")], [event("task_started"), event("task_complete")], 0, "working"),  # one that ended
    ([event("task_started", T1)], [], epoch(T0), "working"),  # opened after this launch
    ([event("task_started")], [], epoch(T0) + 5, "idle"),  # opened before this launch: a killed codex left it
    ([item("no turn event")], [], 0, None),
    ([event("token_count"), event("some_later_event")], [], 0, None),  # events that say nothing of a turn
    ([b'{"timestamp":"2026-12-01T11:40:51.506Z","type":"event_msg","payload":{"type":"task_sta'], [], 0, None),
])
def test_activity_from_the_threads_rollout(tmp_path, parent, child, launched, expected):
    muxhost_codex._turns.clear()
    muxhost_codex._rollout_paths.clear()
    home = fake_home(tmp_path, {PARENT: parent, CHILD: child}, edges=[(PARENT, CHILD)])
    ctx = AgentContext(home=str(tmp_path), env={"CODEX_HOME": str(home)}, conversation_id=PARENT, launched_at=launched)
    agent = CodexAgent()
    assert agent.activity(ctx, None) == expected
    assert agent.activity(ctx, APPROVAL) == "waiting"
    assert agent.activity(ctx, AT_PROMPT) == expected


def test_activity_without_a_rollout_or_a_thread_is_no_opinion(tmp_path):
    home = fake_home(tmp_path, {})
    agent = CodexAgent()
    for cid in (OTHER, None):  # a thread before its first prompt; no thread known, no process
        ctx = AgentContext(home=str(tmp_path), env={"CODEX_HOME": str(home)}, conversation_id=cid)
        assert agent.activity(ctx, None) is None
        assert agent.activity(ctx, QUESTION) == "waiting"
    ctx = AgentContext(home=str(tmp_path), env={"CODEX_HOME": str(tmp_path / "nowhere")}, conversation_id=OTHER)
    assert agent.activity(ctx, AT_PROMPT) is None


def test_a_hung_model_is_stalled_a_slow_one_never(mux, mux_codex, tmp_path):
    """``watch.stall_after`` 4 s: a reply that streams for 6 s (nothing of it in the rollout until
    it ends) stays ``working``; a model that sends the headers and then nothing makes the open turn
    ``stalled`` a few seconds after ``stall_after`` (the TUI's spinner still moves), for the watch
    and for ``ls`` without one."""
    cx = mux_codex
    mux.config.write_text("watch:\n  interval: 0.5\n  stall_after: 4\n")
    _, rid, pane = ready(mux, cx, tmp_path)
    with Watching(mux) as w:
        w.wait(pane, "idle", timeout=30)
        t = enter(mux, pane, "please SLOW-REPLY")
        seen(w, pane, "working", t)
        end = done(cx, thread_of(request(cx, "SLOW-REPLY")), t)
        seen(w, pane, "idle", end)
        assert [s for _, s in steps(w, rid, t)] == ["working", "idle"], w.changes
        t = enter(mux, pane, "please HANG-REPLY")
        held = request(cx, "HANG-REPLY")["at"]
        w.wait(pane, "stalled", timeout=30)
        late = time.time() - held
        assert 4 <= late < 4 + SOON + 1, f"stalled {late:.1f}s after the request was held"
        assert [s for _, s in steps(w, rid, t)] == ["working", "stalled"], w.changes
    assert next(r for r in mux.ok("ls", "--json") if r["id"] == rid)["activity"] == "stalled"


def test_rollout_stalled_only_while_an_open_turn_awaits_the_model_and_nothing_comes(tmp_path):
    """``rollout_stalled``: the rollout still for ``stall_after`` and no byte from the network for
    as long, after the prompt or a tool's output; never while a tool call is the last item, never
    while the rollout just grew or a byte just came."""
    import os

    f = tmp_path / "rollout.jsonl"
    prompt = event("task_started") + item("HANG-REPLY")
    call = json.dumps({"timestamp": T0, "type": "response_item",
                       "payload": {"type": "function_call", "name": "exec_command", "call_id": "c"}}).encode() + b"\n"
    output = json.dumps({"timestamp": T0, "type": "response_item",
                         "payload": {"type": "function_call_output", "call_id": "c"}}).encode() + b"\n"
    with quiet_connection(1.1) as pids:
        ctx = AgentContext(home=str(tmp_path), pids=pids, stall_after=1.0)

        def still(data: bytes):
            f.write_bytes(data)
            old = time.time() - 30
            os.utime(f, (old, old))
            return rollout_stalled(f, ctx)

        assert still(prompt) == "stalled" and still(prompt).reason.startswith("rollout: no change for 30 s")
        assert still(prompt + call + output) == "stalled"
        assert still(prompt + call) is None  # a tool runs
        f.write_bytes(prompt)
        assert rollout_stalled(f, ctx) is None  # it just grew
        pids.poke()
        assert still(prompt) is None  # a byte just came
