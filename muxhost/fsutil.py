"""File helpers for purges: in-place rewrites that keep every other byte, careful removal,
SQLite compaction (now :func:`muxhost.kit.sqlite.compact`; JSONL matching on top of
:func:`drop_lines` is :mod:`muxhost.kit.jsonl`)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable


def _lock(f, timeout: float) -> None:
    """An exclusive flock on the open file, waiting up to ``timeout`` seconds."""
    from muxhost.kit.flock import wait_lock

    if not wait_lock(f.fileno(), timeout):
        raise OSError(f"{f.name} stayed locked by another process for {timeout:.0f}s; left as it was")


def rewrite(path: str | os.PathLike, transform: Callable[[bytes], bytes], attempts: int = 5,
            lock_timeout: float = 10.0) -> bool:
    """Rewrite a file shared with running agents through ``transform``, keeping every write of theirs.

    The file is rewritten IN PLACE (a symlink stays a symlink, and a writer holding it open in append
    mode keeps writing into the live file, not into an unlinked copy, as a rename would make it), under
    an exclusive ``flock`` on the file itself (what agents that lock their shared files take). A writer
    that does not lock and appends meanwhile makes us start again from the new content. A copy of the
    original is kept beside it until the new content is on disk, so a crash midway loses nothing.
    Returns True when the file changed."""
    path = Path(path)
    try:
        f = open(path, "r+b")
    except FileNotFoundError:
        return False
    with f:
        _lock(f, lock_timeout)
        for _ in range(attempts):
            f.seek(0)
            before = f.read()
            after = transform(before)
            if after == before:
                return False
            if os.fstat(f.fileno()).st_size != len(before):
                continue  # someone appended meanwhile: redo from the new content
            import tempfile

            fd, backup = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".muxhost-backup", dir=path.parent)
            try:
                with os.fdopen(fd, "wb") as b:
                    b.write(before)
                    b.flush()
                    os.fsync(b.fileno())
                f.seek(0)
                f.write(after)
                f.truncate()
                f.flush()
                os.fsync(f.fileno())
            finally:
                os.unlink(backup)
            return True
    raise OSError(f"{path} kept changing while it was rewritten; left as it was")


def drop_lines(path: str | os.PathLike, match: Callable[[bytes], bool]) -> int:
    """Remove the lines for which ``match(line)`` is true (line without its newline); every other
    byte is kept. Returns how many lines went."""
    removed = 0

    def transform(data: bytes) -> bytes:
        nonlocal removed
        removed = 0
        kept = []
        for line in data.splitlines(keepends=True):
            if match(line.rstrip(b"\r\n")):
                removed += 1
            else:
                kept.append(line)
        return b"".join(kept)

    rewrite(path, transform)
    return removed


def remove(path: str | os.PathLike) -> bool:
    """Remove a file, symlink or folder tree. True when something was there."""
    path = Path(path)
    if path.is_symlink() or path.is_file():
        path.unlink()
        return True
    if path.is_dir():
        shutil.rmtree(path)
        return True
    if os.path.lexists(path):
        os.unlink(path)
        return True
    return False


def compact_sqlite(db: str | os.PathLike, timeout: float = 5.0) -> str | None:
    """After deleting rows: checkpoint the WAL, VACUUM, and truncate the WAL, so the deleted text is
    gone from the file's bytes too. Returns None when done, else one line saying what may linger.
    Kept for existing callers: see :func:`muxhost.kit.sqlite.compact`."""
    from muxhost.kit.sqlite import compact

    return compact(db, timeout=timeout)
