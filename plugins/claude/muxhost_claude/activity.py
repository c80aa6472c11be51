"""What claude is doing, from its own words: the live registry entry's ``status``, else the end of
the conversation's transcript (:meth:`muxhost_claude.ClaudeAgent.activity` picks the source)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from muxhost.api import kit

__all__ = ["registry_activity", "transcript_activity", "transcript_stalled"]


#: the registry's ``status`` (claude's own word, rewritten as its UI changes) -> muxhost's
_STATUS = {"busy": "working", "waiting": "waiting", "idle": "idle", "shell": "idle"}  # shell: idle, a background shell runs
_TAIL = 256 * 1024  # the bytes of a transcript's end that are read


def registry_activity(entry: dict) -> str | None:
    """What a live registry entry's ``status`` says: ``busy`` (a request, a tool or a sub-agent in
    flight) is working; ``waiting`` is waiting, unless it is only a dialog the user opened (a slash
    command's: claude asks nothing, ``waitingFor: "dialog open"``); ``idle`` and ``shell`` are idle."""
    status = entry.get("status")
    if status == "waiting" and entry.get("waitingFor") == "dialog open":
        return "idle"
    return _STATUS.get(status) if isinstance(status, str) else None


def transcript_activity(path: Path) -> str | None:
    """What the end of a transcript says (when the registry says nothing): the last complete line
    of the conversation's own turn, read back from the end of the file (its last :data:`_TAIL` bytes;
    a half-written last line is left out). A prompt or a tool result is an open turn (``working``),
    so is an answer that calls a tool; an answer that stops otherwise, an interrupt or
    ``turn_duration`` is ``idle``. Sub-agents' lines (``isSidechain``) and bookkeeping lines are
    skipped: a sub-agent that ends never closes the parent's turn. Nothing decisive: None."""
    try:
        lines, _mark = kit.jsonl.tail(path, _TAIL)
    except OSError:
        return None
    for e in _entries(lines):
        kind, msg = e.get("type"), e.get("message") if isinstance(e.get("message"), dict) else {}
        content = msg.get("content")
        blocks = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
        if kind == "system" and e.get("subtype") == "turn_duration":
            return "idle"
        if kind == "assistant":
            if msg.get("stop_reason") == "tool_use" or any(b.get("type") == "tool_use" for b in blocks):
                return "working"
            return "idle" if isinstance(msg.get("stop_reason"), str) or e.get("isApiErrorMessage") else None
        if kind == "user":
            text = content if isinstance(content, str) else next(
                (b["text"] for b in blocks if b.get("type") == "text" and isinstance(b.get("text"), str)), "")
            if text.startswith(("<command-name>", "<local-command-")):
                continue  # a local slash command's lines (its output, the caveat): no turn
            return "idle" if text.startswith("[Request interrupted by user") else "working"
    return None


def _entries(lines: list[bytes]):
    """A transcript's entries (dicts), last first; sub-agents' (``isSidechain``) left out."""
    for raw in reversed(lines):
        try:
            e = json.loads(raw)
        except ValueError:
            continue
        if isinstance(e, dict) and not e.get("isSidechain"):
            yield e


def transcript_stalled(path: Path | None, ctx, now: float | None = None):
    """``stalled`` (an Activity with its reason) when claude's turn waits on the model and nothing
    comes: the transcript's last entry of the turn is a prompt, a tool result or an answer's text
    (not a tool call: a tool that runs long and quietly is no stall), the file has not grown for
    ``ctx.stall_after`` and claude received no byte for as long (:func:`muxhost.kit.net.stalled`:
    claude writes an answer's text only once its block ends, so a reply that streams for minutes
    leaves the transcript still). Else None."""
    try:
        changed = path.stat().st_mtime if path is not None else None
        if changed is None or (time.time() if now is None else now) - changed < ctx.stall_after:
            return None  # (it grew lately: not read, every pass of a turn)
        lines, _mark = kit.jsonl.tail(path, _TAIL)
    except OSError:
        return None
    for e in _entries(lines):
        if e.get("type") in ("user", "assistant"):
            content = (e.get("message") if isinstance(e.get("message"), dict) else {}).get("content")
            if isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_use" for b in content):
                return None  # a tool runs
            return kit.net.stalled(ctx, changed, "transcript", now)
    return None
