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
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Union

__all__ = ["raw", "contains", "matcher", "count_lines", "matching_lines", "drop_lines"]


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
