"""The activity hook: the real opencode TUI in a real tmux pane launched by muxhost, under a real
``muxhost watch`` (a slow reply, a permission, a question, a sub-agent that ends while its parent
still works), and the hook itself on databases the real ``opencode run`` wrote, edited into each
state (an open turn, a question, a rejected permission, a turn a killed process left open, a row
that cannot be parsed, no database) and on screens the real TUI showed."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

import pytest

from muxhost.agent import AgentContext
from muxhost.testing import Watching, quiet_connection, wait_for
from muxhost_opencode import NEXT_STEP_MS, OpenCodeAgent, asks_user, turn_state

READY = "ctrl+p commands"
PERMISSION = "Allow once"      # the permission dialog's buttons
QUESTION = "esc dismiss"       # the question dialog's footer
LIMIT = 3.0                    # a state is published within this many seconds of its cause
SCREENS = Path(__file__).parent / "screens"


# --------------------------------------------------------------------------------------------------
# the real TUI under a real watch

class TUI:
    """One opencode TUI launched by ``muxhost launch`` in the test's tmux server, its database, and
    a watch on that server."""

    def __init__(self, mux, cwd: Path):
        self.mux = mux
        self.cwd = cwd
        self.db_path = mux.home / ".local/share/opencode/opencode.db"
        self.rec = mux.ok("launch", "opencode", "--cwd", str(self.cwd), "--json")
        self.pane = self.rec["pane"]
        mux.wait_screen(self.pane, READY, timeout=90)

    def query(self, sql: str, params: tuple = ()) -> list[tuple]:
        con = sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True, timeout=5)
        try:
            return con.execute(sql, params).fetchall()
        finally:
            con.close()

    def prompt(self, w: Watching, text: str) -> float:
        """Type ``text`` once the watch says the TUI is idle; returns when Enter was pressed (monotonic)."""
        w.wait(self.pane, "idle", timeout=60)
        self.mux.type(self.pane, text)
        return time.monotonic()

    def screen_shows(self, text: str, timeout: float = 90) -> float:
        """Wait until the pane shows ``text``; returns when it was first seen (monotonic)."""
        wait_for(lambda: text in self.mux.capture(self.pane), timeout=timeout, interval=0.1, what=f"{text!r} on screen")
        return time.monotonic()

    def key(self, *keys: str) -> None:
        self.mux.tmux("send-keys", "-t", self.pane, *keys)

    def changes(self, w: Watching) -> list[dict]:
        return [c for c in w.changes if c["record"] == self.rec["id"]]


@pytest.fixture
def tui(mux, tui_setup):
    def start(permission: dict | None = None) -> TUI:
        return TUI(mux, tui_setup(permission or {"bash": "allow"}))
    return start


def within(w: Watching, t: TUI, state: str, cause: float, timeout: float = 90) -> float:
    """Wait for the watch to publish ``state`` for the TUI's pane; it must come within LIMIT s of
    ``cause`` (monotonic). Returns the seconds it took."""
    w.wait(t.pane, state, timeout=timeout)
    took = time.monotonic() - cause
    assert took <= LIMIT, f"{state} came {took:.1f}s after its cause (changes: {t.changes(w)})"
    return took


def test_a_slow_reply_is_working_then_idle(tui, scripted):
    t = tui()
    with Watching(t.mux) as w:
        sent = t.prompt(w, f"{scripted['slow']} please")
        within(w, t, "working", sent)
        # still working half way through the reply, the words streaming
        wait_for(lambda: "word8 " in t.mux.capture(t.pane), timeout=90, interval=0.1, what="the reply streaming")
        assert w.activity(t.pane) == "working"
        within(w, t, "idle", t.screen_shows(scripted["slow_done"]))
    assert [c["new"] for c in t.changes(w)][-2:] == ["working", "idle"], t.changes(w)  # (every line read)


def test_explain_after_one_turn_says_idle_and_names_the_database(tui):
    """``muxhost explain`` after one turn: idle, from the session's last message in the database."""
    t = tui()
    t.mux.type(t.pane, "hello MUXHOST_EXPLAIN")
    wait_for(lambda: t.query("select count(*) from message")[0][0] >= 2, timeout=90, what="one turn in the database")
    doc = wait_for(lambda: (lambda d: d if d["activity"] == "idle" and d["conversation_id"] else None)(
        t.mux.ok("explain", t.rec["id"], "--json")), timeout=60, what="explain says idle")
    plugin = doc["look"]["plugin"]
    assert plugin["answer"] == "idle" and plugin["reason"] == f"database: the last message of session {doc['conversation_id']}"
    assert doc["look"]["rule"] == "the plugin says idle, and no non-resident child used CPU"
    assert doc["look"]["output"]["reads_screen"] and doc["look"]["output"]["last_lines"]


def test_a_permission_asked_is_waiting(tui, scripted):
    t = tui({"bash": "ask"})
    with Watching(t.mux) as w:
        sent = t.prompt(w, f"{scripted['ask']} please")
        within(w, t, "working", sent)
        within(w, t, "waiting", t.screen_shows(PERMISSION))
        assert w.option("@muxhost_waiting") == t.pane
        t.key("Enter")  # Allow once
        within(w, t, "idle", t.screen_shows(scripted["done"]))
        assert scripted["asked"] in t.mux.capture(t.pane)  # the command ran: it was allowed


def test_a_question_is_waiting(tui, scripted):
    t = tui()
    with Watching(t.mux) as w:
        sent = t.prompt(w, f"{scripted['question']} please")
        within(w, t, "working", sent)
        within(w, t, "waiting", t.screen_shows(QUESTION))
        t.key("Enter")  # the first option
        within(w, t, "idle", t.screen_shows(scripted["done"]))


def test_a_sub_agent_ending_keeps_its_parent_working(tui, scripted):
    """The parent starts a sub-agent and a `sleep` at once: the sub-agent's turn ends seconds before
    the parent's own tool does, and the parent then streams a slow reply. Never idle in between."""
    t = tui()
    with Watching(t.mux) as w:
        sent = t.prompt(w, f"{scripted['delegate']} please")
        start = time.time()
        within(w, t, "working", sent)
        within(w, t, "idle", t.screen_shows(scripted["slow_done"], timeout=120))
        parent, child = wait_for(lambda: t.query("select id, parent_id from session order by parent_id nulls first")
                                 if len(t.query("select id from session")) == 2 else None, timeout=10, what="two sessions")
        assert child[1] == parent[0]
        ends = {sid: t.query("select max(json_extract(data, '$.time.completed')) from message where session_id = ?",
                             (sid,))[0][0] for sid in (parent[0], child[0])}
    # the sub-agent really ended while its parent worked on (its own tool, then its reply)
    assert ends[parent[0]] - ends[child[0]] > 4000, ends
    states = [(c["new"], c["since"]) for c in t.changes(w) if c["since"] >= start]  # (every line read)
    assert states[0][0] == "working", states
    idle = [(new, since) for new, since in states if new != "working"]
    assert [new for new, _since in idle] == ["idle"], (states, ends)  # once, at the end
    assert idle[0][1] * 1000 >= ends[parent[0]] - 500, (states, ends)


def test_a_hung_model_is_stalled_a_slow_one_never(tui, scripted):
    """``watch.stall_after`` 5 s: a reply that streams a word every 0.25 s for 8 s stays
    ``working``; a model that sends the headers and then nothing makes the open turn ``stalled``
    a few seconds after ``stall_after`` (the TUI's spinner still moves), for the watch and for
    ``ls`` without one."""
    t = tui()
    t.mux.config.write_text("watch:\n  interval: 0.5\n  stall_after: 5\n")
    with Watching(t.mux) as w:
        t.prompt(w, "hello")  # the first prompt waits for opencode's start-up plugin install (npm)
        t.screen_shows("Hello from the fake model.")
        sent = t.prompt(w, f"{scripted['slow']} please")
        within(w, t, "working", sent)
        states = set()
        while scripted["slow_done"] not in t.mux.capture(t.pane):
            states.add(w.activity(t.pane))
            time.sleep(0.1)
        assert states == {"working"}, f"a slow reply streaming was {states}"
        within(w, t, "idle", time.monotonic())
        sent = t.prompt(w, f"{scripted['hang']} please")
        within(w, t, "working", sent)
        w.wait(t.pane, "stalled", timeout=30)
        late = time.monotonic() - sent
        assert 5 <= late < 5 + LIMIT + 2, f"stalled {late:.1f}s after the prompt"
        assert [c["new"] for c in t.changes(w)][-2:] == ["working", "stalled"], t.changes(w)
    assert next(r for r in t.mux.ok("ls", "--json") if r["id"] == t.rec["id"])["activity"] == "stalled"


# --------------------------------------------------------------------------------------------------
# the hook on databases the real opencode wrote

@pytest.fixture
def ran(made):
    """The database of two `opencode run` conversations (a private copy: the template is never
    opened); ``(db, root)``: root is the newer top-level session, its last message the final answer."""
    oc, _other, target, _t0 = made
    return oc.db, target


def edit(db: Path, sql: str, params: tuple = ()) -> None:
    con = sqlite3.connect(db)
    try:
        con.execute(sql, params)
        con.commit()
    finally:
        con.close()


def last_message(db: Path, sid: str) -> str:
    con = sqlite3.connect(db)
    try:
        return con.execute("select id from message where session_id = ? order by time_created desc, id desc",
                           (sid,)).fetchone()[0]
    finally:
        con.close()


def state(db: Path, sid: str, since_ms: int = 0, now_ms: int | None = None) -> str | None:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return turn_state(con, sid, since_ms, now_ms)
    finally:
        con.close()


def set_message(db: Path, mid: str, **fields) -> None:
    """Set (or, with None, remove) top-level fields of a message's JSON (``time`` replaced whole)."""
    con = sqlite3.connect(db)
    try:
        data = json.loads(con.execute("select data from message where id = ?", (mid,)).fetchone()[0])
        for k, v in fields.items():
            if v is None:
                data.pop(k, None)
            else:
                data[k] = v
        con.execute("update message set data = ? where id = ?", (json.dumps(data), mid))
        con.commit()
    finally:
        con.close()


def add_tool(db: Path, mid: str, sid: str, tool: str, status: str, error: str | None = None) -> None:
    st = {"status": status, "input": {}, "time": {"start": 1}}
    if error:
        st["error"] = error
    edit(db, "insert into part (id, message_id, session_id, time_created, time_updated, data) values (?, ?, ?, 1, 1, ?)",
         (f"prt_test{tool}{status}", mid, sid, json.dumps({"type": "tool", "tool": tool, "callID": "c", "state": st})))


def test_turn_state_of_each_kind_of_last_message(ran):
    db, sid = ran
    mid = last_message(db, sid)
    assert state(db, sid) == "idle"  # the answer, finish "stop"
    created = {"created": 1}
    set_message(db, mid, time=created, finish=None)
    assert state(db, sid) == "working"  # the reply streams
    add_tool(db, mid, sid, "bash", "running")
    assert state(db, sid) == "working"  # a tool runs (or waits for a permission: only the screen shows it)
    add_tool(db, mid, sid, "question", "running")
    assert state(db, sid) == "waiting"
    edit(db, "delete from part where id like 'prt_test%'")
    set_message(db, mid, time={"created": 1, "completed": 1000}, finish="tool-calls")
    assert state(db, sid, now_ms=1000 + NEXT_STEP_MS - 1) == "working"  # the next step comes
    assert state(db, sid, now_ms=1000 + NEXT_STEP_MS + 1) == "idle"     # none came: the turn is over
    add_tool(db, mid, sid, "bash", "error", "The user rejected permission to use this specific tool call.")
    assert state(db, sid, now_ms=1001) == "idle"
    edit(db, "delete from part where id like 'prt_test%'")
    add_tool(db, mid, sid, "read", "error", "File not found")  # an ordinary tool error: the loop goes on
    assert state(db, sid, now_ms=1001) == "working"
    set_message(db, mid, error={"name": "MessageAbortedError"})
    assert state(db, sid) == "idle"  # interrupted


def test_turn_state_of_a_prompt_an_old_turn_a_new_session(ran):
    db, sid = ran
    mid = last_message(db, sid)
    set_message(db, mid, role="user")
    assert state(db, sid) == "working"  # the prompt is in, the model request to come
    set_message(db, mid, role="system")
    assert state(db, sid) is None  # a role it does not know
    set_message(db, mid, role="assistant", time={"created": 1}, finish=None)
    con = sqlite3.connect(db)
    m_created = con.execute("select time_created from message where id = ?", (mid,)).fetchone()[0]
    con.close()
    assert state(db, sid, since_ms=m_created) == "working"
    assert state(db, sid, since_ms=m_created + 1) == "idle"  # a turn a killed opencode left open
    edit(db, "delete from message where session_id = ?", (sid,))
    assert state(db, sid) == "working"  # the first prompt's session, its message to come
    assert state(db, sid, since_ms=2 ** 50) == "idle"  # an empty session from before the launch
    assert state(db, "ses_" + "0" * 26) is None  # no such session


def test_an_open_turn_with_no_sign_of_life_is_stalled(ran):
    """The hook: the session's open turn (its reply not completed), none of its messages or parts
    changed for ``stall_after`` and nothing came over the network for as long: ``stalled``; not
    while a tool of it runs, not once a part changed lately, not once a byte came."""
    db, sid = ran
    mid = last_message(db, sid)
    set_message(db, mid, time={"created": 1}, finish=None)  # the reply streams (or hangs)
    agent = OpenCodeAgent()
    with quiet_connection(1.1) as pids:
        c = ctx(db, sid, pids=pids, stall_after=1.0)
        answer = agent.activity(c, None)
        assert answer == "stalled" and answer.reason.startswith("database: no change for "), repr(answer)
        add_tool(db, mid, sid, "bash", "running")
        assert agent.activity(c, None) == "working"  # a tool runs: no stall
        edit(db, "delete from part where id like 'prt_test%'")
        edit(db, "update part set time_updated = ? where message_id = ?", (int(time.time() * 1000), mid))
        assert agent.activity(c, None) == "working"  # a part changed just now
        edit(db, "update part set time_updated = 1 where session_id = ?", (sid,))
        assert agent.activity(c, None) == "stalled"
        pids.poke()
        assert agent.activity(c, None) == "working"  # a byte of the reply came


def ctx(db: Path, sid: str | None, **kw) -> AgentContext:
    return AgentContext(home=str(db.parent), env={"OPENCODE_DB": str(db)}, cwd=str(db.parent), conversation_id=sid, **kw)


def test_the_hook_never_raises_and_has_no_opinion_on_what_it_cannot_read(ran, tmp_path):
    db, sid = ran
    agent = OpenCodeAgent()
    assert agent.activity(ctx(db, sid), None) == "idle"
    assert agent.activity(ctx(tmp_path / "missing.db", sid), None) is None  # no database
    # no session in its folder since the launch: a TUI not prompted yet, at its prompt
    assert agent.activity(ctx(db, None), None) == "idle"
    assert agent.activity(ctx(tmp_path / "missing.db", None), None) == "idle"
    mid = last_message(db, sid)
    set_message(db, mid, time={"created": 1, "completed": "soon"}, finish="tool-calls")
    assert agent.activity(ctx(db, sid), None) is None  # a value of another type
    edit(db, "update message set data = ? where id = ?", ('{"role":"assistant","time":{"crea', mid))
    assert agent.activity(ctx(db, sid), None) is None  # a row it cannot parse
    half = tmp_path / "half.db"
    half.write_bytes(db.read_bytes()[:3000])
    assert agent.activity(ctx(half, sid), None) is None  # a database cut short
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"SQLite format 3\x00" + os.urandom(4096))
    assert agent.activity(ctx(garbage, sid), None) is None


def test_before_the_host_knows_the_session_the_hook_says_idle_only_while_none_was_made(ran, tmp_path):
    """Which session is this agent's is for ``discover`` (every other record's claimed): the hook
    never takes one itself. No session in the folder since the launch: idle; one: no opinion."""
    db, sid = ran
    con = sqlite3.connect(db)
    folder, created = con.execute("select directory, time_created from session where id = ?", (sid,)).fetchone()
    con.close()
    agent = OpenCodeAgent()
    set_message(db, last_message(db, sid), time={"created": 1}, finish=None)  # that session works
    c = AgentContext(home=str(tmp_path), env={"OPENCODE_DB": str(db)}, cwd=folder, launched_at=created / 1000 - 1,
                     record_id="r1")
    assert agent.activity(c, None) is None
    c.launched_at = created / 1000 + 60  # launched after it: not prompted yet
    assert agent.activity(c, None) == "idle"


def screen(name: str) -> str:
    return (SCREENS / name).read_text()


@pytest.mark.parametrize("name, asking", [
    ("permission-100x30.txt", True), ("permission-60x20.txt", True), ("permission-always-100x30.txt", True),
    ("permission-always-60x20.txt", True), ("question-100x30.txt", True), ("question-60x20.txt", True),
    ("working-100x30.txt", False), ("idle-100x30.txt", False),
    ("tool-output-100x30.txt", False),  # a command printed the dialogs' words: above the prompt box
])
def test_the_screen_marks_of_a_dialog(name, asking):
    assert asks_user(screen(name)) is asking


def test_a_dialog_on_screen_is_waiting_whatever_the_database_says(ran):
    db, sid = ran
    agent = OpenCodeAgent()
    assert agent.activity(ctx(db, sid), screen("idle-100x30.txt")) == "idle"
    assert agent.activity(ctx(db, sid), screen("permission-60x20.txt")) == "waiting"
    assert agent.activity(ctx(db.parent / "missing.db", None), screen("question-100x30.txt")) == "waiting"
