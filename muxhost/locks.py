"""The host's locks: the per-conversation lock that keeps a purge and a resume (or a launch into that conversation)
from overlapping, and the per-record lock that keeps a stop, a sleep, a resume (a wake) and an
``rm`` of one record from overlapping. ``flock`` with a deadline and :class:`LockTimeout` live in
:mod:`muxhost.kit.flock` and are importable from here too.

A purge holds its conversation's lock from the in-use check until the residual is read; a resume
or launch of that conversation holds it until its pane runs (so the purge's in-use check sees it).
Whoever comes second waits a little, then is refused (exit 4) with what holds the lock.

A stop or sleep holds its records' locks for the whole ladder (and the stub), a resume from its
"changed meanwhile?" check until the pane runs, an ``rm`` while it removes: whoever comes second
waits (a ladder takes seconds) and then judges the record as it is now — a stop that waited for a
sleep ends the stub; a wake that waited for a stop finds the record stopped and starts nothing.
Order, where both are held: the conversation's lock first, then the record's.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from muxhost.errors import MuxhostError, NotFound, Refused
from muxhost.kit.flock import LockTimeout, flock
from muxhost.store import Record, private_folder

if TYPE_CHECKING:
    from muxhost.core import Core

__all__ = ["CONVERSATION_WAIT", "RECORD_WAIT", "LockTimeout", "flock", "conversation_lock_path", "conversation",
           "record_lock_path", "records", "Locks"]

#: how long a second purge, resume or launch of one conversation waits before it is refused
CONVERSATION_WAIT = 2.0
#: how long a stop, sleep, resume or rm of a record waits for another one's (a whole ladder) first
RECORD_WAIT = 60.0


def conversation_lock_path(lock_dir: str | os.PathLike, agent: str, conversation_id: str) -> Path:
    """The lock file of one conversation (named by a hash: ids are the plugins' to define)."""
    import hashlib  # (start-up: hashlib loads OpenSSL, and `ls` takes no lock)

    digest = hashlib.sha256(f"{agent}\0{conversation_id}".encode()).hexdigest()[:32]
    return Path(lock_dir) / f"{digest}.lock"


@contextlib.contextmanager
def conversation(lock_dir: str | os.PathLike, agent: str, conversation_id: str, purpose: str,
                 timeout: float = CONVERSATION_WAIT) -> Iterator[None]:
    """Hold the lock of ``agent``'s conversation for ``purpose`` (``purge``, ``resume``, ``launch``);
    refused (exit 4) when another muxhost holds it past ``timeout``."""
    lock_dir = private_folder(lock_dir)
    path = conversation_lock_path(lock_dir, agent, conversation_id)
    try:
        with flock(path, timeout, private=True, label=f"{purpose} pid {os.getpid()}"):
            yield
    except LockTimeout as e:
        if e.path != path:
            raise  # another lock timed out inside the body (a plugin's): not this conversation's
        what = e.holder.split()[0] if e.holder else ""
        if what == "purge":
            raise Refused(f"a purge of conversation {conversation_id} is in progress ({e.holder}); try again when it ends") from None
        raise Refused(f"conversation {conversation_id} is busy ({e.holder or 'another muxhost'}): "
                      "another muxhost is purging, resuming or launching it; try again") from None


def record_lock_path(lock_dir: str | os.PathLike, record_id: str) -> Path:
    import hashlib  # (start-up: as above)

    digest = hashlib.sha256(f"record\0{record_id}".encode()).hexdigest()[:32]
    return Path(lock_dir) / f"record-{digest}.lock"


@contextlib.contextmanager
def records(lock_dir: str | os.PathLike, record_ids: list[str], purpose: str,
            timeout: float | None = None) -> Iterator[dict[str, Refused]]:
    """Hold the lock of each record in ``record_ids`` for ``purpose`` (``stop``, ``sleep``,
    ``resume``, ``rm``), taken in sorted order (two muxhosts never each hold one the other waits
    for), all within one deadline ``timeout`` seconds away (default :data:`RECORD_WAIT`). Yields the records whose lock another
    muxhost held past the deadline, each with its refusal (exit 4): the caller leaves those alone
    and does the rest (one busy record never keeps a `stop --all` from stopping the others)."""
    lock_dir = private_folder(lock_dir)
    deadline = time.monotonic() + (RECORD_WAIT if timeout is None else timeout)
    busy: dict[str, Refused] = {}
    with contextlib.ExitStack() as stack:
        for rid in sorted(set(record_ids)):
            path = record_lock_path(lock_dir, rid)
            try:
                stack.enter_context(flock(path, max(deadline - time.monotonic(), 0.0), private=True, label=f"{purpose} pid {os.getpid()}"))
            except LockTimeout as e:
                busy[rid] = Refused(f"record {rid} is busy ({e.holder or 'another muxhost'}): another muxhost is "
                                    "stopping, putting to sleep, waking or removing it; try again")
        yield busy


class Locks:
    """The locks above, in the state dir beside the store (``<state>/locks``), for records."""

    def __init__(self, core: "Core"):
        self.core = core

    @property
    def folder(self) -> Path:
        return Path(self.core.store.path).parent / "locks"

    def conversation(self, agent: str, conversation_id: str, purpose: str):
        """The per-conversation lock (:func:`conversation`)."""
        return conversation(self.folder, agent, conversation_id, purpose)

    @contextlib.contextmanager
    def records(self, recs: list[Record], purpose: str,
                timeout: float | None = None) -> Iterator[dict[str, MuxhostError]]:
        """Hold the per-record locks (:func:`records`) of ``recs``, each record then read again (into
        the caller's objects: it prints them) as whoever held the lock before left it. Yields those
        left alone, with their error: another muxhost held the lock too long (exit 4; ``timeout``:
        the wait, default :data:`RECORD_WAIT`), or removed the record meanwhile (exit 3)."""
        store = self.core.store
        with records(self.folder, [r.id for r in recs], purpose, timeout) as busy:
            left: dict[str, MuxhostError] = dict(busy)
            for r in recs:
                if r.id in left:
                    continue
                now = store.get(r.id)
                if now is None:
                    left[r.id] = NotFound(f"record {r.id} ({r.name}) is gone: another muxhost removed it")
                elif now.updated_at != r.updated_at:
                    vars(r).update(vars(now))
            yield left

    @contextlib.contextmanager
    def record(self, rec: Record, purpose: str) -> Iterator[None]:
        """One record's lock, refused (exit 4) when another muxhost holds it too long; ``rec`` is
        left as the caller read it (to compare it with the store's)."""
        with records(self.folder, [rec.id], purpose) as busy:
            if busy:
                raise busy[rec.id]
            yield
