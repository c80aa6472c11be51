"""Locks with a deadline: ``flock`` on a file, and the per-conversation lock that keeps a purge
and a resume (or a launch into that conversation) from overlapping.

A purge holds its conversation's lock from the in-use check until the residual is read; a resume
or launch of that conversation holds it until its pane runs (so the purge's in-use check sees it).
Whoever comes second waits a little, then is refused (exit 4) with what holds the lock.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from pathlib import Path
from typing import Iterator

#: how long a second purge, resume or launch of one conversation waits before it is refused
CONVERSATION_WAIT = 2.0


class LockTimeout(Exception):
    """The lock stayed taken until the deadline; ``holder`` is what its holder wrote into the file."""

    def __init__(self, path: Path, holder: str):
        super().__init__(f"{path} is locked" + (f" by {holder}" if holder else ""))
        self.path, self.holder = path, holder


@contextlib.contextmanager
def flock(path: str | os.PathLike, timeout: float, *, shared: bool = False,
          label: str | None = None) -> Iterator[int]:
    """Hold ``flock`` on ``path`` (created 0600 if missing) within ``timeout`` seconds, else raise
    :class:`LockTimeout`. With ``label``, an exclusive holder writes it into the file (``purge pid
    812``) so that a waiter can say who holds it. Yields the file descriptor."""
    import fcntl

    path = Path(path)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    try:
                        holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
                    except OSError:
                        holder = ""
                    raise LockTimeout(path, holder) from None
                time.sleep(0.05)
        if label is not None and not shared:
            os.ftruncate(fd, 0)
            os.pwrite(fd, label.encode() + b"\n", 0)
        yield fd
    finally:
        os.close(fd)  # releases the lock


def conversation_lock_path(lock_dir: str | os.PathLike, agent: str, conversation_id: str) -> Path:
    """The lock file of one conversation (named by a hash: ids are the plugins' to define)."""
    digest = hashlib.sha256(f"{agent}\0{conversation_id}".encode()).hexdigest()[:32]
    return Path(lock_dir) / f"{digest}.lock"


@contextlib.contextmanager
def conversation(lock_dir: str | os.PathLike, agent: str, conversation_id: str, purpose: str,
                 timeout: float = CONVERSATION_WAIT) -> Iterator[None]:
    """Hold the lock of ``agent``'s conversation for ``purpose`` (``purge``, ``resume``, ``launch``);
    refused (exit 4) when another muxhost holds it past ``timeout``."""
    from muxhost.errors import Refused

    lock_dir = Path(lock_dir)
    lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        with flock(conversation_lock_path(lock_dir, agent, conversation_id), timeout,
                   label=f"{purpose} pid {os.getpid()}"):
            yield
    except LockTimeout as e:
        what = e.holder.split()[0] if e.holder else ""
        if what == "purge":
            raise Refused(f"a purge of conversation {conversation_id} is in progress ({e.holder}); try again when it ends") from None
        raise Refused(f"conversation {conversation_id} is busy ({e.holder or 'another muxhost'}): "
                      "a purge of it may be in progress; try again") from None
