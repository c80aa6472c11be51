"""Every conversation on disk, for :meth:`Agent.conversations`: read-only and cheap, for the three
storage kinds agents use — a folder of JSONL transcripts (one file per conversation), rollout files
in dated folders (the id in the file name), and a sessions table in SQLite.

Nothing here reads a whole transcript: a title comes from the first lines (:func:`head`: at most
:data:`HEAD_BYTES`), times and sizes from ``stat``. Nothing is written, no file is created (SQLite
through :func:`muxhost.kit.sqlite.rows`, ``mode=ro``). A file that vanishes while it is read is left
out; ids are the plugin's to check (the host drops every id :meth:`Agent.valid_id` refuses).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from muxhost.agent import Conversation

__all__ = ["HEAD_BYTES", "TITLE_WIDTH", "head", "title", "size", "transcripts", "folder", "rollouts", "table"]

#: bytes of a transcript's start read for its title, cwd and creation time, at most
HEAD_BYTES = 64 * 1024
#: characters of a title, at most
TITLE_WIDTH = 80

#: what a plugin tells of one transcript from its first entries: Conversation fields (cwd, title,
#: created, children, id) and ``also``: more paths whose bytes count in its size (its own folder)
Describe = Callable[[Path, list[dict]], dict[str, Any]]


def head(path: str | os.PathLike, most: int = 50, limit: int = HEAD_BYTES) -> list[dict]:
    """The JSON objects on the first complete lines of ``path`` (at most ``most`` of them, from its
    first ``limit`` bytes); a line that is no JSON object is skipped. Raises OSError as ``open`` does."""
    with open(path, "rb") as f:
        data = f.read(limit)
    lines = data.split(b"\n")
    if len(data) == limit:
        lines = lines[:-1]  # (the last one may be cut)
    out = []
    for line in lines[:most]:
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def title(text: Any, width: int = TITLE_WIDTH) -> str:
    """``text`` as one short line: whitespace runs made one space, cut to ``width`` with ``…``;
    a list of content blocks (``[{"type": "text", "text": …}]``) gives its text; anything else ""."""
    if isinstance(text, list):
        text = " ".join(b.get("text", "") for b in text if isinstance(b, dict) and isinstance(b.get("text"), str))
    if not isinstance(text, str):
        return ""
    one = " ".join(text.split())
    return one if len(one) <= width else one[:width - 1].rstrip() + "…"


def size(*paths: str | os.PathLike) -> int:
    """Bytes on disk of files and folders (walked; symlinks not followed, counted as themselves);
    a path that is not there is 0."""
    total = 0
    for p in paths:
        try:
            st = os.lstat(p)
        except OSError:
            continue
        if not os.path.isdir(p) or os.path.islink(p):
            total += st.st_size
            continue
        for root, dirs, files in os.walk(p):
            for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
                try:
                    total += os.lstat(os.path.join(root, name)).st_size
                except OSError:
                    pass
    return total


def transcripts(files: Iterable[tuple[str, Path]], describe: Describe | None = None,
                limit: int = HEAD_BYTES) -> Iterator[Conversation]:
    """A :class:`Conversation` for each ``(id, path)`` of a JSONL transcript: ``updated`` is its
    mtime, ``created`` the earliest of its ctime and mtime unless ``describe`` says, ``size`` its
    bytes (plus those of the paths ``describe`` returns as ``also``), and ``describe(path,
    head(path, limit=limit))``'s fields. A file gone meanwhile is left out."""
    for cid, path in files:
        try:
            st = path.stat()
            fields = dict(describe(path, head(path, limit=limit))) if describe else {}
        except OSError:
            continue
        also = fields.pop("also", ())
        conv = Conversation(id=cid, created=min(st.st_ctime, st.st_mtime), updated=st.st_mtime,
                            size=st.st_size + size(*also))
        for key, value in fields.items():
            if value is not None:
                setattr(conv, key, value)
        yield conv


def folder(path: str | os.PathLike, describe: Describe | None = None, pattern: str = "*.jsonl",
           limit: int = HEAD_BYTES) -> Iterator[Conversation]:
    """A folder of transcripts named ``<id>.jsonl`` (``pattern``): :func:`transcripts` of each."""
    base = Path(path)
    if not base.is_dir():
        return iter(())
    found = ((p.name.split(".", 1)[0], p) for p in sorted(base.glob(pattern)) if p.is_file())
    return transcripts(found, describe, limit)


def rollouts(root: str | os.PathLike, id_re: str, describe: Describe | None = None,
             pattern: str = "**/rollout-*.jsonl", limit: int = HEAD_BYTES) -> Iterator[Conversation]:
    """Rollout files under ``root`` (dated folders: ``YYYY/MM/DD/rollout-<ts>-<id>.jsonl``) whose
    name ends with an id ``id_re`` matches: :func:`transcripts` of each."""
    base = Path(root)
    if not base.is_dir():
        return iter(())
    rx = re.compile(rf"({id_re})\.jsonl$")
    found = [(m.group(1), p) for p in sorted(base.glob(pattern)) if (m := rx.search(p.name)) and p.is_file()]
    return transcripts(found, describe, limit)


def table(db: str | os.PathLike, sql: str, params: Any = ()) -> list[dict[str, Any]]:
    """The rows of a read-only query over a sessions table, as dicts (``[]`` when there is no
    database; :class:`muxhost.kit.sqlite.DatabaseError` when it cannot be read)."""
    from muxhost.kit import sqlite

    return [dict(r) for r in sqlite.rows(db, sql, params)]
