"""What opencode is doing: a dialog that waits for the user at the bottom of its screen, else what
the session's last message in its database says (:meth:`muxhost_opencode.OpenCodeAgent.activity`
opens the database)."""

from __future__ import annotations

import re
import sqlite3
import time

from muxhost.api import kit

__all__ = ["ACTIVITY_TIMEOUT", "NEXT_STEP_MS", "asks_user", "session_stalled", "turn_state"]

#: seconds the activity hook's read waits for a lock (it runs every second)
ACTIVITY_TIMEOUT = 0.2
#: ms a step that ended with tool calls may go without a next message before its turn counts as over
#: (opencode writes the next within milliseconds)
NEXT_STEP_MS = 10_000
#: the bottom lines of opencode's dialogs that wait for the user: a permission, its "Always allow"
#: confirmation, a question
_ASKING = (("Allow once", "Reject"), ("Confirm", "Cancel", "enter confirm"), ("enter submit", "esc dismiss"))
#: a tool error that ends the turn: a permission rejected, a question dismissed
_STOPPED_RE = re.compile(r"rejected permission|dismissed this question")
_LAST_MESSAGE = (  # the session's creation; its last message's id, creation, role, completed, finish, error
    "select s.time_created, m.id, m.time_created, json_extract(m.data, '$.role'),"
    " json_extract(m.data, '$.time.completed'), json_extract(m.data, '$.finish'),"
    " json_type(m.data, '$.error') from session s left join message m on m.id = ("
    "select id from message where session_id = s.id order by time_created desc, id desc limit 1) where s.id = ?")
_LAST_ID = "(select id from message where session_id = ? order by time_created desc, id desc limit 1)"
_NEWEST = (f"select max(t) from (select time_updated t from message where id = {_LAST_ID}"
           f" union all select max(time_updated) from part where message_id = {_LAST_ID})")
_TOOL_RUNS = (f"select 1 from part where message_id = {_LAST_ID} and json_extract(data, '$.type') = 'tool'"
              " and json_extract(data, '$.state.status') in ('pending', 'running') limit 1")
_TOOL_PARTS = ("select json_extract(data, '$.tool'), json_extract(data, '$.state.status'),"
               " substr(json_extract(data, '$.state.error'), 1, 200) from part"
               " where message_id = ? and json_extract(data, '$.type') = 'tool'")


def asks_user(screen: str) -> bool:
    """True when the last three lines with text (box borders aside) of an opencode screen are a
    dialog's that waits for the user: ``Allow once   Allow always   Reject`` (a permission; then
    ``Confirm   Cancel`` … ``enter confirm`` for "Always allow") or ``↑↓ select  enter submit  esc
    dismiss`` (a question). A narrow pane wraps the footer onto its own line: still the last three."""
    bottom = "\n".join([text for text in (ln.strip(" \t┃│") for ln in screen.splitlines()) if text][-3:])
    return any(all(w in bottom for w in words) for words in _ASKING)


def turn_state(con: sqlite3.Connection, sid: str, since_ms: int = 0, now_ms: int | None = None) -> str | None:
    """What session ``sid``'s last message says (``since_ms``: the agent's launch, epoch ms): from
    before ``since_ms`` (a killed opencode leaves its turn open): ``idle``; a prompt, or none yet in
    a new session: ``working``; an assistant's not completed (a reply streams, a tool or a sub-agent
    runs: the parent's stays open until its ``task`` ends): ``working``, ``waiting`` while its
    ``question`` tool runs; completed with an error (interrupted): ``idle``; with finish
    ``tool-calls``/``unknown``/none (opencode's loop goes on): ``working``, unless a tool of it was
    rejected or dismissed or ``NEXT_STEP_MS`` passed; any other finish: ``idle``. None for no such
    session or an unknown role. Raises :class:`sqlite3.Error`."""
    row = con.execute(_LAST_MESSAGE, (sid,)).fetchone()
    if row is None:
        return None
    created, mid, m_created, role, completed, finish, error = tuple(row)
    if mid is None:
        return "working" if (created or 0) >= since_ms else "idle"
    if (m_created or 0) < since_ms:
        return "idle"
    if role == "user":
        return "working"
    if role != "assistant":
        return None
    if error not in (None, "null"):
        return "idle"
    if completed is None or finish in (None, "tool-calls", "unknown"):
        tools = con.execute(_TOOL_PARTS, (mid,)).fetchall()
        if completed is None:
            return "waiting" if any(t[0] == "question" and t[1] == "running" for t in tools) else "working"
        if any(t[1] == "error" and _STOPPED_RE.search(t[2] or "") for t in tools):
            return "idle"
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        return "working" if now_ms - completed < NEXT_STEP_MS else "idle"
    return "idle"


def session_stalled(con: sqlite3.Connection, sid: str, ctx, now: float | None = None):
    """``stalled`` (an Activity with its reason) when session ``sid``'s open turn waits on the model
    and nothing comes: its last message and that message's parts have not changed for
    ``ctx.stall_after`` (their ``time_updated``), no tool of it is pending or running (a tool that runs long and
    quietly — a sub-agent's ``task`` too — is no stall), and opencode received no byte for as long
    (:func:`muxhost.kit.net.stalled`). Else None. Raises :class:`sqlite3.Error`."""
    now = time.time() if now is None else now
    newest = con.execute(_NEWEST, (sid, sid)).fetchone()[0]
    if not isinstance(newest, (int, float)) or now - newest / 1000 < ctx.stall_after:
        return None
    if con.execute(_TOOL_RUNS, (sid,)).fetchone():
        return None  # a tool runs
    return kit.net.stalled(ctx, newest / 1000, "database", now)
