"""Line files shared by every conversation of an agent (``history.jsonl``, ``session_index.jsonl``,
logs): find, count and drop the lines of one conversation, keeping every other byte.

A ``match`` says which lines are the conversation's. It is one of:

- ``(key, value)``: a JSON object line whose ``key`` equals ``value`` (``("sessionId", cid)``);
  ``key`` may be a path into nested objects (``("payload", "id")``), ``value`` a set or frozenset
  of values (any of them: a whole family at once);
- a callable on the parsed line, called only for lines that are JSON objects (dicts);
- :func:`raw` (a callable on the line's bytes) or :func:`contains` (bytes or text it contains),
  for files that are not JSON (logs).

Lines that are not JSON objects never match a JSON spec: they are never counted and never dropped.
Lines are handed over without their line ending; the last line needs none. :func:`drop_lines`
rewrites the file in place under ``flock`` on the file (:func:`muxhost.fsutil.rewrite`): a symlink
stays a symlink, and lines an agent appends meanwhile are kept. Hold the agent's own lock around
it when the agent has one (:mod:`muxhost.kit.flock`).

Reading a line file an agent is appending to (its transcript, its rollout) for its last events:
:func:`tail` gives the complete lines at its end, :func:`since` only the lines appended since the
last call. Complete lines only: a last line the agent is still writing waits for the next call, and
the first line of a window that starts inside a line is left out, so a line is never seen cut.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, NamedTuple, Union

__all__ = ["raw", "contains", "matcher", "count_lines", "matching_lines", "drop_lines", "Mark", "tail", "since"]


class raw:
    """A match on the line's bytes (without its line ending), for files that are not JSON."""

    def __init__(self, test: Callable[[bytes], bool]):
        self.test = test

    def __call__(self, line: bytes) -> bool:
        return bool(self.test(line))


def contains(*needles: str | bytes) -> raw:
    """A :class:`raw` match: lines containing any of ``needles`` (text is encoded as UTF-8)."""
    wanted = [n.encode() if isinstance(n, str) else bytes(n) for n in needles]
    if not all(wanted):
        raise ValueError("contains() needs non-empty needles")
    return raw(lambda line: any(n in line for n in wanted))


Match = Union[tuple[Any, Any], Callable[[dict], bool], raw]


def _equal(a: Any, b: Any) -> bool:
    return a == b and isinstance(a, bool) == isinstance(b, bool)  # JSON true is not 1


def _lookup(obj: Any, path: tuple) -> tuple[bool, Any]:
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return False, None
        obj = obj[key]
    return True, obj


def matcher(match: Match) -> Callable[[bytes], bool]:
    """The test on a line's bytes that ``match`` stands for (see the module's docstring)."""
    if isinstance(match, raw):
        return match
    if isinstance(match, tuple):
        if len(match) != 2:
            raise ValueError("a match spec is (key or key path, value)")
        key, value = match
        path = tuple(key) if isinstance(key, (tuple, list)) else (key,)
        if not path or not all(isinstance(k, str) for k in path):
            raise ValueError(f"not a key or key path: {key!r}")
        choices = list(value) if isinstance(value, (set, frozenset)) else [value]
        # a cheap first look: the value's text is in the line, or the line escapes something
        needles = [c.encode() for c in choices if isinstance(c, str)]
        quick = needles if len(needles) == len(choices) and all(needles) else None

        def test(obj: dict) -> bool:
            ok, got = _lookup(obj, path)
            return ok and any(_equal(got, c) for c in choices)

        def spec(line: bytes) -> bool:
            if quick is not None and b"\\" not in line and not any(n in line for n in quick):
                return False
            return _parsed(line, test)

        return spec
    if callable(match):
        return lambda line: _parsed(line, match)
    raise TypeError(f"not a line match: {match!r}")


def _parsed(line: bytes, test: Callable[[dict], Any]) -> bool:
    if not line.strip():
        return False
    try:
        obj = json.loads(line)
    except ValueError:  # not JSON, not UTF-8
        return False
    return isinstance(obj, dict) and bool(test(obj))


def _lines(path: str | os.PathLike):
    with open(path, "rb") as f:
        for line in f:
            yield line.rstrip(b"\r\n")


def matching_lines(path: str | os.PathLike, match: Match) -> list[bytes]:
    """The lines of ``path`` that match (without their line endings); ``[]`` when there is no file.
    Any other error reading it raises (it cannot be called free of the conversation)."""
    test = matcher(match)
    try:
        return [line for line in _lines(path) if test(line)]
    except FileNotFoundError:
        return []


def count_lines(path: str | os.PathLike, match: Match) -> int:
    """How many lines of ``path`` match; 0 when there is no file. Other read errors raise."""
    test = matcher(match)
    try:
        return sum(1 for line in _lines(path) if test(line))
    except FileNotFoundError:
        return 0


def drop_lines(path: str | os.PathLike, match: Match) -> int:
    """Remove the matching lines from ``path`` in place, keeping every other byte (other lines,
    line endings, a last line without one); returns how many went (0 when there is no file).
    Raises :class:`OSError` when the file stays locked or keeps changing (then it is left as it
    was)."""
    from muxhost.fsutil import drop_lines as drop

    if not os.path.lexists(path):
        return 0
    return drop(path, matcher(match))


# -- the end of a line file that grows ---------------------------------------------------------------
class Mark(NamedTuple):
    """How far a file was read: its inode and size then, and the offset after its last complete line."""

    inode: int
    size: int
    end: int


def _complete(data: bytes, cut: bool) -> tuple[list[bytes], int]:
    """The complete lines of ``data`` and the length they take; ``cut``: its first piece may be the
    end of a line (a window that does not start at the file's start), so it is left out."""
    end = data.rfind(b"\n") + 1
    lines = data[:end].split(b"\n")[:-1]
    return (lines[1:] if cut else lines), end


def _tail(f, st: os.stat_result, size: int, most: int, until: Callable[[list[bytes]], Any] | None):
    while True:
        start = max(0, st.st_size - size)
        f.seek(start)
        lines, end = _complete(f.read(st.st_size - start), cut=start > 0)
        if start == 0 or size >= most or until is None or until(lines):
            return lines, Mark(st.st_ino, st.st_size, start + end)
        size = min(size * 4, most)


def tail(path: str | os.PathLike, size: int, *, most: int | None = None,
         until: Callable[[list[bytes]], Any] | None = None) -> tuple[list[bytes], Mark]:
    """The complete lines (oldest first, without their line endings) in the last ``size`` bytes of
    ``path``, and the :class:`Mark` of that read. With ``until``: while ``until(lines)`` is false,
    read back further (four times as much each time, at most ``most`` bytes). A line longer than
    the window is not in it. Raises :class:`OSError`."""
    with open(path, "rb") as f:
        return _tail(f, os.fstat(f.fileno()), size, most or size, until)


def since(path: str | os.PathLike, mark: Mark | None, size: int, *, most: int | None = None,
          until: Callable[[list[bytes]], Any] | None = None) -> tuple[list[bytes] | None, Mark, bool]:
    """The complete lines appended to ``path`` after ``mark`` (the one the last call returned):
    ``(lines, mark, fresh)``. ``lines`` is None when nothing changed (one ``stat``, the file is not
    opened). With no mark, another file at the path (inode) or one that shrank below the mark:
    :func:`tail` (``size``, ``most``, ``until``) and ``fresh`` True. Raises :class:`OSError`."""
    if mark is not None and mark.end == mark.size:
        st = os.stat(path)
        if (st.st_ino, st.st_size) == (mark.inode, mark.size):
            return None, mark, False
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        if mark is None or st.st_ino != mark.inode or st.st_size < mark.end:
            lines, new = _tail(f, st, size, most or size, until)
            return lines, new, True
        f.seek(mark.end)
        lines, end = _complete(f.read(st.st_size - mark.end), cut=False)
        return lines, Mark(st.st_ino, st.st_size, mark.end + end), False
