"""What codex is doing: an approval prompt or a question on its screen (codex writes neither to its
rollout), else the last turn event of the thread's rollout (:meth:`muxhost_codex.CodexAgent.activity`
finds the rollout and asks about sub-agents)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from muxhost.api import kit

__all__ = ["TURN_OPEN", "TURN_CLOSED", "APPROVAL_FOOTER", "APPROVAL_WORDS", "QUESTION_FOOTER", "asks_user",
           "last_turn", "parse_ts_ms", "rollout_stalled"]

#: rollout ``event_msg`` types that open a turn, and that close one
TURN_OPEN = ("task_started", "turn_started")
TURN_CLOSED = ("task_complete", "turn_complete", "turn_aborted")
_TURN_TYPES = tuple(f'"{t}"'.encode() for t in TURN_OPEN + TURN_CLOSED)
#: the last line of the TUI's approval prompts (command, edits, permissions, MCP), and words one
#: of them shows above it; the last line of its questions (``request_user_input``)
APPROVAL_FOOTER = "Press enter to confirm or esc to cancel"
APPROVAL_WORDS = ("Would you like to ", "needs your approval", "Yes, proceed (y)")
QUESTION_FOOTER = re.compile(r"enter to submit (answer|all)")
#: the rollout items of a tool call (its output comes in an item of its own once the tool ends)
_TOOL_CALLS = ("function_call", "custom_tool_call", "local_shell_call")
_TAIL = 1 << 16       # bytes read back from a rollout's end at first, looking for its last turn event
_TAIL_MAX = 1 << 24   # and at most
_turns: dict[str, tuple[kit.jsonl.Mark, tuple[bool, float] | None]] = {}  # path -> how far it was read, its turn


def asks_user(screen: str) -> bool:
    """True when the TUI's screen ends in an approval prompt or a question for the user."""
    last = next((ln.strip() for ln in reversed(screen.splitlines()) if ln.strip()), "")
    return bool(QUESTION_FOOTER.search(last)) or (APPROVAL_FOOTER in last and any(w in screen for w in APPROVAL_WORDS))


def last_turn(path: Path) -> tuple[bool, float] | None:
    """``(open, when)`` of the last turn event of a rollout: open after ``task_started``, closed
    after ``task_complete`` / ``turn_aborted``; None when it has none or cannot be read. Cheap to
    call every second: complete lines only (a line codex is still writing waits for the next call),
    and only what was appended since the last call (the first time, back from the end until a
    turn event, at most :data:`_TAIL_MAX` bytes): :func:`muxhost.kit.jsonl.since`."""
    key = str(path)
    mark, turn = _turns.get(key, (None, None))
    try:
        lines, mark, fresh = kit.jsonl.since(path, mark, _TAIL, most=_TAIL_MAX,
                                             until=lambda lines: _turn_in(lines) is not None)
    except OSError:
        return None
    if lines is not None:
        turn = _turn_in(lines) if fresh else (_turn_in(lines) or turn)
    _turns[key] = (mark, turn)
    return turn


def _turn_in(lines: list[bytes]) -> tuple[bool, float] | None:
    for line in reversed(lines):
        if b"event_msg" not in line or not any(t in line for t in _TURN_TYPES):
            continue
        try:
            d = json.loads(line)
            kind = d["payload"]["type"] if d.get("type") == "event_msg" else None
        except (ValueError, TypeError, KeyError, AttributeError):
            continue  # a line cut short, or not an event
        if kind in TURN_OPEN or kind in TURN_CLOSED:
            return kind in TURN_OPEN, (parse_ts_ms(d.get("timestamp")) or 0) / 1000
    return None


def parse_ts_ms(value: object) -> int | None:
    from datetime import datetime

    try:  # (not a string: AttributeError)
        return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)  # type: ignore[union-attr]
    except (AttributeError, ValueError):
        return None


def rollout_stalled(path: Path, ctx, now: float | None = None):
    """``stalled`` (an Activity with its reason) when codex's open turn waits on the model and
    nothing comes: the rollout's last response item is not a tool call (a tool that runs long and
    quietly is no stall), the rollout has not grown for ``ctx.stall_after`` and codex received no
    byte for as long (:func:`muxhost.kit.net.stalled`: codex writes a reply's item only once it is
    whole). Else None."""
    try:
        changed = path.stat().st_mtime
        if (time.time() if now is None else now) - changed < ctx.stall_after:
            return None  # (it grew lately: not read, every pass of a turn)
        lines, _mark = kit.jsonl.tail(path, _TAIL)
    except OSError:
        return None
    for line in reversed(lines):
        if b'"response_item"' not in line:
            continue
        try:
            kind = json.loads(line)["payload"]["type"]
        except (ValueError, TypeError, KeyError):
            continue
        if kind in _TOOL_CALLS:
            return None  # a tool runs
        break
    return kit.net.stalled(ctx, changed, "rollout", now)
