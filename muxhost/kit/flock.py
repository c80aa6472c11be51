"""Locks with a deadline: ``flock(2)`` on a file, and the mkdir lock node tools use.

Agents guard the files they share between their processes with a lock of their own; a purge that
rewrites such a file takes the same lock first, so the agent never writes between our read and our
write. Which lock depends on the agent:

- :func:`flock`: ``flock(2)`` on the file itself or on a lock file beside it (codex's
  ``session_index.jsonl.lock``; muxhost's own per-conversation locks);
- :func:`dirlock`: the folder ``<file>.lock`` made with ``mkdir`` (npm ``proper-lockfile``, which
  claude takes before it writes ``history.jsonl`` or ``.claude.json``).

Both wait at most ``timeout`` seconds and then raise :class:`LockTimeout`, an :class:`OSError`, so a
purge step that catches ``OSError`` notes "left as it was" and goes on.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from pathlib import Path
from typing import Iterator

__all__ = ["LockTimeout", "wait_lock", "flock", "dirlock"]

_POLL = 0.05  # seconds between two attempts


class LockTimeout(OSError):
    """The lock stayed taken until the deadline; ``holder`` is what its holder wrote into the file
    (``purge pid 812``), or ``""``."""

    def __init__(self, path: str | os.PathLike, holder: str = ""):
        super().__init__(f"{path} is locked" + (f" by {holder}" if holder else ""))
        self.path, self.holder = Path(path), holder


def wait_lock(fd: int, timeout: float, *, shared: bool = False) -> bool:
    """Take ``flock`` on the open descriptor ``fd``, trying until ``timeout`` seconds have passed.
    True when taken, False at the deadline (the descriptor is left open and unlocked)."""
    import fcntl

    mode = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, mode)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(_POLL)


@contextlib.contextmanager
def flock(path: str | os.PathLike, timeout: float, *, shared: bool = False, label: str | None = None,
          create: bool = True, private: bool = False) -> Iterator[int | None]:
    """Hold ``flock`` on ``path`` within ``timeout`` seconds, else raise :class:`LockTimeout`.

    A missing file is created (mode 0600), unless ``create`` is false: then nothing is locked and
    ``None`` is yielded (an agent's lock file that does not exist is not ours to make). ``private``
    (muxhost's own locks in its state folder): created ``O_EXCL``, never opened through a symbolic
    link, and one that is not a regular file of yours, or that group or others can write, is
    refused (:class:`~muxhost.errors.MuxhostError`, exit 1: another user could hold or redirect it).
    With ``label``, an exclusive holder writes it into the file so that a waiter can say who holds it.
    Yields the file descriptor; closing it on exit releases the lock."""
    path = Path(path)
    try:
        if private:
            fd = _own(path)
        else:
            fd = os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0) | (os.O_CREAT if create else 0), 0o600)
    except FileNotFoundError:
        if create or private:
            raise
        yield None
        return
    try:
        if not wait_lock(fd, timeout, shared=shared):
            try:
                holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
            except OSError:
                holder = ""
            raise LockTimeout(path, holder)
        if label is not None and not shared:
            os.ftruncate(fd, 0)
            os.pwrite(fd, label.encode() + b"\n", 0)
        yield fd
    finally:
        os.close(fd)


def _own(path: Path) -> int:
    """Open (or create, 0600) the lock file ``path`` of one's own; refused when another user could
    change it (see :func:`flock`)."""
    from muxhost.store import check_private

    flags = os.O_RDWR | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    while True:
        try:
            return os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        try:
            fd = os.open(path, flags | getattr(os, "O_NONBLOCK", 0))
        except FileNotFoundError:
            continue  # removed meanwhile: create it
        except OSError as e:
            if os.path.islink(path):
                check_private(path)  # refused: a symbolic link
            raise e
        try:
            st = os.fstat(fd)
            check_private(path, st)
            if not stat.S_ISREG(st.st_mode):
                from muxhost.errors import MuxhostError

                raise MuxhostError(f"{path}: not a regular file where muxhost keeps a lock of its own; remove it")
        except BaseException:
            os.close(fd)
            raise
        return fd


@contextlib.contextmanager
def dirlock(target: str | os.PathLike, timeout: float = 5.0, *, stale: float = 10.0) -> Iterator[Path]:
    """Hold the ``proper-lockfile`` lock of ``target``: the folder ``<target>.lock``, made with
    ``mkdir`` (atomic), removed on exit. A lock folder whose mtime is older than ``stale`` seconds
    was left by a dead holder and is taken over, as proper-lockfile does (a live holder touches it
    every ``stale / 2`` seconds; we hold it only for one quick rewrite). Raises :class:`LockTimeout`
    after ``timeout`` seconds. Yields the lock folder's path.

    Lock the path the agent locks: proper-lockfile resolves symlinks first, so pass
    ``os.path.realpath(file)`` for a file that may be a symlink."""
    lock = Path(f"{target}.lock")
    deadline = time.monotonic() + timeout
    while True:
        try:
            os.mkdir(lock)
            break
        except FileExistsError:
            try:
                if time.time() - os.stat(lock).st_mtime > stale:
                    os.rmdir(lock)
                    continue
            except FileNotFoundError:
                continue  # its holder let go meanwhile: try again at once
            except OSError:
                pass  # not an empty folder: not ours to take over, wait for it
        if time.monotonic() >= deadline:
            raise LockTimeout(lock, "another process (it is writing the file)")
        time.sleep(_POLL)
    try:
        yield lock
    finally:
        try:
            os.rmdir(lock)
        except OSError:
            pass
