"""File helpers for purges: in-place rewrites that keep every other byte, careful removal,
SQLite compaction (now :func:`muxhost.kit.sqlite.compact`; JSONL matching on top of
:func:`drop_lines` is :mod:`muxhost.kit.jsonl`)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import shutil
import stat
import time
from pathlib import Path
from typing import Callable


def _lock(f, timeout: float, name=None) -> None:
    """An exclusive flock on the open file, waiting up to ``timeout`` seconds."""
    from muxhost.kit.flock import wait_lock

    if not wait_lock(f.fileno(), timeout):
        raise OSError(f"{name or f.name} stayed locked by another process for {timeout:.0f}s; left as it was")


#: what muxhost names the copy of a shared file it keeps while it rewrites it: ``.<name>.<8 chars>.muxhost-backup``
BACKUP_SUFFIX = ".muxhost-backup"
_HEAD = b"muxhost-backup 2 "  # then: <old length> <old sha256> <new length> <new sha256>, a newline, old, new


def _step(name: str) -> None:
    """Test hook: ``MUXHOST_TEST_REWRITE_PAUSE=<step>`` makes a rewrite stop at that step (for a kill -9)."""
    if os.environ.get("MUXHOST_TEST_REWRITE_PAUSE") == name:
        os.write(1, f"paused {name}\n".encode())
        time.sleep(600)


def backups(folder: str | os.PathLike, name: str) -> list[str]:
    """The names of the backups muxhost left beside the file ``name`` in ``folder`` (a rewrite that
    was interrupted: :func:`rewrite` restores or removes them the next time it runs on the file)."""
    pattern = re.compile(re.escape(f".{name}.") + r"[0-9a-z_]{8}" + re.escape(BACKUP_SUFFIX))
    try:
        return sorted(n for n in os.listdir(folder) if pattern.fullmatch(n))
    except (FileNotFoundError, NotADirectoryError):
        return []


def open_dir(path: str | os.PathLike, expect: tuple | None = None) -> int:
    """A descriptor of the folder ``path``; with ``expect`` (its ``(st_dev, st_ino)`` when a plan
    was checked), OSError unless it is still that folder: a path is resolved once, when checked."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    if expect is not None:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != tuple(expect):
            os.close(fd)
            raise OSError(f"{path} is no longer the folder that was checked (something was moved or linked "
                          "in its place); left as it was")
    return fd


def remove_in(folder: str, name: str, expect: tuple | None = None, *, tree: bool = False) -> None:
    """Remove ``name`` from the folder ``folder`` (which must be the folder ``expect`` names): the
    entry itself, relative to that folder's descriptor, no symlink followed. Without ``tree`` only
    a file or a link (a folder raises); with it, a folder's tree too."""
    dfd = open_dir(folder, expect)
    try:
        if tree and stat.S_ISDIR(os.lstat(name, dir_fd=dfd).st_mode):
            try:
                shutil.rmtree(name, dir_fd=dfd)
            except TypeError:  # Python 3.10: no dir_fd (rmtree itself never follows a symlink)
                shutil.rmtree(os.path.join(folder, name))
        else:
            os.unlink(name, dir_fd=dfd)
    finally:
        os.close(dfd)


def _sha(data: bytes) -> bytes:
    return hashlib.sha256(data).hexdigest().encode()


def _pwrite_all(fd: int, data: bytes) -> None:
    done = 0
    while done < len(data):
        done += os.pwrite(fd, data[done:], done)


def _put(fd: int, data: bytes, length: int | None = None) -> None:
    """``data`` in place of the file's bytes: ONE write of ``data`` padded with newlines to the old
    length (so a kill at any point leaves the old bytes or the new ones, the padding being blank
    lines / JSON whitespace), then the file cut to its new length, then fsync."""
    pad = max(0, (os.fstat(fd).st_size if length is None else length) - len(data))
    _pwrite_all(fd, data + b"\n" * pad)
    _step("written")
    os.ftruncate(fd, len(data))
    os.fsync(fd)


def _torn(current: bytes, written: bytes, old: bytes) -> bool:
    """True when ``current`` is what a write of ``written`` over ``old`` that stopped partway left:
    ``written[:k]`` then the old bytes from ``k`` on, for some ``k`` short of the whole."""
    k = 0
    limit = min(len(current), len(written))
    while k < limit and current[k] == written[k]:
        k += 1
    if k >= len(written):
        return False
    return current == written[:k] + old[k:] if k < len(old) else current == written[:k]


def _recover(fd: int, dfd: int, name: str, folder: str) -> None:
    """Under the file's lock: each backup an interrupted rewrite left beside it goes, after the
    file is put right: the original back when the write of the new bytes was torn (the file is
    exactly part new, part old), the cut made when the write was whole but the cut not made. A
    file that begins with its original bytes (nothing was written; an agent may have appended
    since), that holds the new bytes (and an agent's appends), or that is neither (an agent wrote
    it anew since: never overwritten with an old copy) is left as it is. A backup that is not
    whole, or has no header, cannot say what was written: it only goes."""
    for b in backups(folder, name):
        try:
            bfd = os.open(b, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), dir_fd=dfd)
        except FileNotFoundError:
            continue
        except OSError:  # not a file muxhost wrote (a symlink named like one): it goes, never followed
            if not stat.S_ISREG(os.lstat(b, dir_fd=dfd).st_mode):
                os.unlink(b, dir_fd=dfd)
                continue
            raise
        with os.fdopen(bfd, "rb") as bf:
            data = bf.read()
        head, _, body = data.partition(b"\n")
        fields = head[len(_HEAD):].split() if head.startswith(_HEAD) else []
        if len(fields) == 4 and fields[0].isdigit() and fields[2].isdigit():
            old, new = body[:int(fields[0])], body[int(fields[0]):]
            if (len(old), _sha(old), len(new), _sha(new)) == (int(fields[0]), fields[1], int(fields[2]), fields[3]):
                current = os.pread(fd, max(os.fstat(fd).st_size, 1), 0)
                written = new + b"\n" * max(0, len(old) - len(new))  # what _put writes
                # (what an agent appended since the crash follows the bytes the write covered: kept)
                covered, tail = current[:len(written)], current[len(written):]
                if current.startswith(old):
                    pass  # the new bytes were never written
                elif covered == written:
                    _put(fd, new + tail, len(current))  # it finished but for the cut
                elif _torn(covered, written, old):
                    _put(fd, old + tail, len(current))  # torn: the original back
        # (a backup whose header does not check was not whole yet: the file was not touched)
        os.unlink(b, dir_fd=dfd)
        os.fsync(dfd)


def _backup(dfd: int, name: str, before: bytes, after: bytes) -> str:
    """The crash-safe copy of a file about to be rewritten, beside it in folder ``dfd``: a header with
    both contents' lengths and hashes, the old bytes, then the new ones; fsynced, the folder too.
    Returns its name."""
    backup = f".{name}.{secrets.token_hex(4)}{BACKUP_SUFFIX}"
    bfd = os.open(backup, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                  | getattr(os, "O_CLOEXEC", 0), 0o600, dir_fd=dfd)
    _step("backup-created")
    with os.fdopen(bfd, "wb") as b:
        b.write(b"%s%d %s %d %s\n" % (_HEAD, len(before), _sha(before), len(after), _sha(after)))
        b.write(before)
        b.write(after)  # (the purged content: it says exactly what a torn write looks like)
        b.flush()
        os.fsync(b.fileno())
    os.fsync(dfd)
    _step("backup-written")
    return backup


def _swap(fd: int, dfd: int, backup: str, before: bytes, after: bytes) -> None:
    """``after`` into the file ``fd`` in one write, then its backup removed; on a failure the
    original goes back (else the backup is the way back)."""
    try:
        _put(fd, after, len(before))
    except BaseException:
        with contextlib.suppress(OSError):
            _put(fd, before, len(after))  # the original back; else the backup is the way back
            os.unlink(backup, dir_fd=dfd)
        raise
    _step("truncated")
    os.unlink(backup, dir_fd=dfd)


def rewrite(path: str | os.PathLike, transform: Callable[[bytes], bytes], attempts: int = 5,
            lock_timeout: float = 10.0, *, checked: tuple | None = None) -> bool:
    """Rewrite a file shared with running agents through ``transform``, keeping every write of theirs.

    The file is rewritten IN PLACE (a symlink stays a symlink, and a writer holding it open in append
    mode keeps writing into the live file, not into an unlinked copy, as a rename would make it), under
    an exclusive ``flock`` on the file itself (what agents that lock their shared files take). A writer
    that does not lock and appends meanwhile makes us start again from the new content.

    Crash-safe: the original is first copied beside it (``.<name>.<rand>.muxhost-backup``, with a
    header naming both contents' lengths and hashes, and the new content after it, fsynced), then the new bytes go in with ONE
    write (padded with newlines to the old length, then cut), then the copy goes. A kill at any
    point leaves the old bytes or the new ones; a backup left behind is restored or removed the
    next time a rewrite of the file runs (:func:`backups` finds them for a plan).

    ``checked``: ``path`` is the path a plan checked (its folder's symlinks resolved) and this is its
    folder's ``(st_dev, st_ino)``: the file is opened in that folder, never through a symlink, and
    refused when it has other hard links (they would change too). Returns True when the file changed."""
    real = os.fspath(path) if checked is not None else os.path.realpath(path)  # backups sit beside the target
    folder, name = os.path.split(real)
    try:
        dfd = open_dir(folder, checked)
    except FileNotFoundError:
        return False
    try:
        try:
            fd = os.open(name, os.O_RDWR | getattr(os, "O_CLOEXEC", 0) | (os.O_NOFOLLOW if checked else 0),
                         dir_fd=dfd)
        except FileNotFoundError:
            for b in backups(folder, name):  # the file is gone: nothing to restore into
                os.unlink(b, dir_fd=dfd)
            return False
        with os.fdopen(fd, "r+b") as f:
            _lock(f, lock_timeout, path)
            links = os.fstat(fd).st_nlink
            if checked is not None and links > 1:
                raise OSError(f"{path} has {links - 1} other hard link{'s' if links > 2 else ''}; left as it was")
            _recover(fd, dfd, name, folder)
            for _ in range(attempts):
                f.seek(0)
                before = f.read()
                after = transform(before)
                if after == before:
                    return False
                if os.fstat(fd).st_size != len(before):
                    continue  # someone appended meanwhile: redo from the new content
                backup = _backup(dfd, name, before, after)
                if os.fstat(fd).st_size != len(before):  # someone appended while the backup was written
                    os.unlink(backup, dir_fd=dfd)
                    continue
                _swap(fd, dfd, backup, before, after)
                return True
    finally:
        os.close(dfd)
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
