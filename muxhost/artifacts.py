"""Typed artifacts: a purge plan as data, which the host carries out (CONTRACT §2, §6).

A plugin's ``artifacts(ctx, conversation_id)`` may return these instead of strings. Each says where
a conversation's bytes are; the host then does everything else, the same way for every plugin:

- prints the plan (``--dry-run`` stops there, having changed nothing);
- checks every path, after symlinks, lies inside the agent's roots (``Agent.roots(ctx)``: its data,
  config, state and cache homes unless the plugin says more) and that what is removed is no root
  itself, that a :class:`File` is not a folder, and that table and column names are plain
  identifiers — a plan that breaks a rule is refused before anything runs;
- removes in one fixed order: the agent's own :class:`Command`, then :class:`Rows` (one transaction
  per database, ``secure_delete`` on, then a VACUUM so deleted text does not stay in free pages), then
  shared files in place under lock (:class:`Lines`, :class:`JsonMember`), then :class:`File` and
  :class:`Dir`;
- asks ``artifacts`` again: what is still there is the residual (exit 5), the rest was removed.

Only what is there counts: the host checks each item's presence (a file that does not exist, rows
that count zero, lines that match nothing are not in the plan), so a plugin may return every place a
conversation *can* leave something. ``conversation`` says which conversation an item belongs to (the
host fills in the one it asked about when it is None); items of a child are labelled with it.

Values are matched exactly and passed to SQL as parameters; no artifact carries code.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Union

PathLike = Union[str, "os.PathLike[str]"]


def _many(values: Any) -> tuple:
    """A collection of values as a tuple; one string is one value (never its characters)."""
    return (values,) if isinstance(values, (str, bytes)) else tuple(values)


def _names(keys: Any) -> tuple:
    """A key path as a tuple of names; one string is a path of one name."""
    return (keys,) if isinstance(keys, str) else tuple(keys)


@dataclass(frozen=True)
class FlockFile:
    """While a shared file is rewritten, also hold ``flock`` on this other file (an agent's own lock
    file, e.g. codex's ``session_index.jsonl.lock``)."""

    path: PathLike


@dataclass(frozen=True)
class MkdirLock:
    """While a shared file is rewritten, also hold the lock an agent takes by making the folder
    ``path`` (proper-lockfile, as claude does), taken over when older than ``stale`` seconds."""

    path: PathLike
    stale: float = 10.0


Lock = Union[FlockFile, MkdirLock]


@dataclass(frozen=True)
class Artifact:
    """Base of every artifact. ``conversation``: the conversation it belongs to (None: the one asked about)."""

    @property
    def kind(self) -> str:
        return type(self).__name__.lower()


@dataclass(frozen=True)
class File(Artifact):
    """A file (or a symlink: the link goes, not its target). Never a folder."""

    path: PathLike
    conversation: str | None = None


@dataclass(frozen=True)
class Dir(Artifact):
    """A folder and everything in it (symlinks inside are removed, never followed)."""

    path: PathLike
    conversation: str | None = None


@dataclass(frozen=True)
class Rows(Artifact):
    """The rows of ``table`` in the SQLite database ``db`` whose ``column`` equals ``value`` (or any
    of ``values``)."""

    db: PathLike
    table: str
    column: str
    value: Any = None
    values: tuple = ()
    conversation: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", _many(self.values))

    def all_values(self) -> tuple:
        return tuple(self.values) if self.values else (self.value,)


@dataclass(frozen=True)
class Lines(Artifact):
    """The lines of a shared line file (JSONL, a log) that belong to the conversation: those whose
    JSON object has ``key`` (a name, or a tuple of names for a nested member) equal to ``value`` or
    to one of ``values``; or, with ``contains``, those that contain that text. Every other byte of
    the file is kept; it is rewritten in place under ``flock`` (and ``lock``, when given)."""

    path: PathLike
    key: str | tuple[str, ...] | None = None
    value: Any = None
    values: frozenset = frozenset()
    contains: str | None = None
    lock: Lock | None = None
    conversation: str | None = None

    def __post_init__(self) -> None:
        if self.key is not None and not isinstance(self.key, str):
            object.__setattr__(self, "key", _names(self.key))
        object.__setattr__(self, "values", frozenset(_many(self.values)))


@dataclass(frozen=True)
class JsonMember(Artifact):
    """A member of a JSON document, by its key path (``("projects", "/src/app", "lastSessionId")``),
    removed only while its value equals ``equals`` (when given). The rest of the document keeps its
    bytes where it can (else it is written back with the indentation it had)."""

    path: PathLike
    keys: tuple[str, ...] = ()
    equals: Any = None
    lock: Lock | None = None
    conversation: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", _names(self.keys))


@dataclass(frozen=True)
class Command(Artifact):
    """The agent's own delete command (``codex delete --force ID``), run first, with the agent's
    environment plus ``env`` (never ``MUXHOST_RECORD``: a stop of the record must not take it), in
    ``cwd`` (default: the agent's cwd, else its HOME). A failure is a note, not an error: the rest of
    the plan removes what it leaves."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    cwd: PathLike | None = None
    timeout: float = 60.0
    conversation: str | None = None

    def __init__(self, argv, env=None, cwd=None, timeout: float = 60.0, conversation: str | None = None):
        if isinstance(argv, (str, bytes)):
            raise TypeError(f"Command takes an argv list, never a shell string: {argv!r}")
        object.__setattr__(self, "argv", tuple(argv))
        object.__setattr__(self, "env", tuple(sorted((env or {}).items())) if isinstance(env, dict) else tuple(env or ()))
        object.__setattr__(self, "cwd", cwd)
        object.__setattr__(self, "timeout", timeout)
        object.__setattr__(self, "conversation", conversation)


@dataclass(frozen=True)
class Leftover(Artifact):
    """Something that holds (or may hold) the conversation and that the plugin will not or cannot
    remove: a database it could not read, another mention of the id. Shown in the plan; while it is
    there the purge is incomplete (exit 5)."""

    path: PathLike
    what: str = ""
    conversation: str | None = None


TYPES = (File, Dir, Rows, Lines, JsonMember, Command, Leftover)


@dataclass
class Item:
    """An artifact as the host handles it: its label for reports, the conversation it belongs to,
    and an identity that does not change when only a count does."""

    artifact: Artifact
    conversation: str
    label: str
    key: tuple
    count: int = 1
    extra: dict = field(default_factory=dict)
