"""File helpers for purges: atomic rewrites that keep every other byte, careful removal."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable


def atomic_write(path: str | os.PathLike, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically (temp file in the same folder, fsync, rename),
    keeping the file's mode."""
    path = Path(path)
    st = path.stat() if path.exists() else None
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".muxhost-tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if st is not None:
            os.chmod(tmp, st.st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def rewrite(path: str | os.PathLike, transform: Callable[[bytes], bytes], attempts: int = 5) -> bool:
    """Rewrite ``path`` through ``transform`` atomically. If another process appends to the file
    while we work, start again from its new content, so no concurrent write is lost.
    Returns True when the file changed."""
    path = Path(path)
    for _ in range(attempts):
        try:
            before = path.read_bytes()
            st = path.stat()
        except FileNotFoundError:
            return False
        after = transform(before)
        if after == before:
            return False
        try:
            now = path.stat()
        except FileNotFoundError:
            return False
        if (now.st_size, now.st_mtime_ns, now.st_ino) != (st.st_size, st.st_mtime_ns, st.st_ino):
            continue  # someone wrote meanwhile: redo from the new content
        atomic_write(path, after)
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
