"""Purge archives: one file that keeps exactly what a checked purge plan removes, and reads it back.

An archive is a plain tar (``<stamp>-<agent>-<id8>.muxarchive``, 0600, in ``<state dir>/archive/``,
0700): a member per payload (a file's bytes, a folder's files, the rows of one table as JSON, the
lines taken from a shared file with their neighbours, a JSON member with the text around it), then
``manifest.json`` (format, muxhost version, agent, conversation and children, HOME, when, and each
item: kind, place, sha256 of its payload, modes and times), then ``manifest.sha256``. It is written
to a temp name in that folder, fsynced, renamed and the folder fsynced, before the first removal
(:meth:`Writer.write`); any error removes the temp file and nothing else. :func:`load` reads one
back and checks every sum (a mismatch: refused). Restoring it is :mod:`muxhost.unpurging`.

Bytes are taken from the places the plan checked (its folders' identities, no symlink followed), so
the archive holds what the removal then removes. Nothing here names an agent.
"""

from __future__ import annotations

import base64
import datetime as _dt
import hashlib
import io
import json
import os
import re
import stat
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from muxhost import fsutil
from muxhost.artifacts import Command, Dir, File, FlockFile, Item, JsonMember, Lines, MkdirLock, Rows
from muxhost.errors import MuxhostError, NotFound, Refused, UsageError

FORMAT = 1
SUFFIX = ".muxarchive"
MANIFEST = "manifest.json"
MANIFEST_SUM = "manifest.sha256"
CONTEXT = 80  # bytes of text kept on each side of a JSON member, to find its place again
_NAME = re.compile(r"(\d{8}T\d{6}Z)-([A-Za-z0-9_.-]+?)-([A-Za-z0-9]{1,8})(-\d+)?" + re.escape(SUFFIX))


def folder(store_path: str | os.PathLike) -> Path:
    """``<state dir>/archive``: made 0700, or refused when another user could change it (the state
    folder's rules, :func:`muxhost.store.private_folder`)."""
    from muxhost.store import private_folder

    return private_folder(os.path.join(os.path.dirname(os.fspath(store_path)), "archive"))


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def encode_value(v: Any) -> Any:
    """A SQLite value as JSON (a blob as ``{"b64": …}``, kept exact)."""
    return {"b64": b64(v)} if isinstance(v, (bytes, bytearray, memoryview)) else v


def decode_value(v: Any) -> Any:
    return unb64(v["b64"]) if isinstance(v, dict) else v


class _Hashing(io.RawIOBase):
    """A reader that hashes what tar reads through it."""

    def __init__(self, f):
        self.f, self.sha = f, hashlib.sha256()

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n)
        self.sha.update(data)
        return data


@dataclass
class Writer:
    """One archive being written: ``add_*`` a payload per item of a checked plan, then :meth:`write`."""

    tar: tarfile.TarFile
    items: list = field(default_factory=list)

    def _member(self, data: bytes | None = None, f=None, size: int = 0, mode: int = 0o600,
                mtime: float | None = None, name: str | None = None) -> tuple[str, str]:
        info = tarfile.TarInfo(name or f"m/{len(self.tar.getmembers())}")
        info.size = len(data) if data is not None else size
        info.mode, info.mtime = mode & 0o7777, time.time() if mtime is None else mtime
        reader = _Hashing(io.BytesIO(data) if data is not None else f)
        self.tar.addfile(info, reader)
        got = reader.sha.hexdigest()
        return info.name, got

    def _file_entry(self, dfd: int, name: str, rel: str) -> dict:
        """One entry (a file, a link, a folder) read in the folder ``dfd``, never through a symlink."""
        st = os.lstat(name, dir_fd=dfd)
        entry = {"rel": rel, "mode": stat.S_IMODE(st.st_mode), "mtime_ns": st.st_mtime_ns}
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(name, dir_fd=dfd)
            entry.update(type="symlink", target=target, sha256=hashlib.sha256(os.fsencode(target)).hexdigest())
        elif stat.S_ISDIR(st.st_mode):
            entry["type"] = "dir"
        elif stat.S_ISREG(st.st_mode):
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), dir_fd=dfd)
            with os.fdopen(fd, "rb") as f:
                size = os.fstat(fd).st_size
                entry["member"], entry["sha256"] = self._member(f=f, size=size, mode=entry["mode"],
                                                                mtime=st.st_mtime)
                now = os.fstat(fd)
                if (now.st_size, now.st_mtime_ns) != (size, st.st_mtime_ns) or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                    raise OSError(f"{rel if rel != '.' else name} changed while it was archived")
            entry["type"] = "file"
        else:
            raise OSError(f"{rel or name} is neither a file, a folder nor a link: it cannot be archived")
        return entry

    def add_path(self, item: Item) -> None:
        """A File or a Dir, from the folder the plan checked (its identity), no symlink followed."""
        path = item.extra.get("path") or os.path.abspath(os.fspath(item.artifact.path))
        parent, name = os.path.split(path)
        dfd = fsutil.open_dir(parent, item.extra.get("folder"))
        try:
            top = self._file_entry(dfd, name, ".")
            entries = [top]
            if top["type"] == "dir":
                entries = self._tree(dfd, name)
        finally:
            os.close(dfd)
        self.items.append({"kind": "dir" if top["type"] == "dir" else "file", "place": path,
                           "conversation": item.conversation, "label": item.label, "entries": entries})

    def _tree(self, dfd: int, name: str) -> list[dict]:
        entries = []
        for top, dirs, files, tfd in os.fwalk(name, dir_fd=dfd, follow_symlinks=False):
            rel = os.path.relpath(top, name)
            st = os.fstat(tfd)
            entries.append({"rel": rel, "type": "dir", "mode": stat.S_IMODE(st.st_mode), "mtime_ns": st.st_mtime_ns})
            for n in sorted(files + dirs):
                if not stat.S_ISDIR(os.lstat(n, dir_fd=tfd).st_mode):
                    entries.append(self._file_entry(tfd, n, os.path.normpath(os.path.join(rel, n))))
        return entries

    def add_rows(self, item: Item) -> None:
        """The rows a Rows item names: table, column names, primary key, values (blobs exact)."""
        from muxhost.kit import sqlite as ksql

        art: Rows = item.artifact  # type: ignore[assignment]
        db = item.extra.get("path") or os.fspath(art.db)
        os.close(fsutil.open_dir(os.path.dirname(db), item.extra.get("folder")))  # still the folder checked
        info = ksql.rows(db, f"pragma table_info({ksql.ident(art.table)})")
        columns = [r[1] for r in info]
        key = [r[1] for r in sorted(info, key=lambda r: r[5]) if r[5] > 0]
        values = list(art.all_values())
        found = []
        for i in range(0, len(values), 500):
            chunk = values[i:i + 500]
            found += ksql.rows(db, f"select * from {ksql.ident(art.table)} where {ksql.ident(art.column)} "
                                   f"in ({','.join('?' * len(chunk))})", chunk)
        body = json.dumps([[encode_value(v) for v in tuple(r)] for r in found]).encode()
        member, sha = self._member(body)
        self.items.append({"kind": "rows", "place": db, "conversation": item.conversation, "label": item.label,
                           "table": art.table, "column": art.column, "values": [encode_value(v) for v in values],
                           "columns": columns, "key": key, "count": len(found), "member": member, "sha256": sha})

    def add_shared(self, path: str, group: list[Item]) -> None:
        """The lines and JSON members the plan takes from one shared file, each with what is around it,
        computed as the removal's rewrite computes them (lines first, then each member in turn)."""
        from muxhost import plans

        dfd = fsutil.open_dir(os.path.dirname(path), group[0].extra.get("folder"))
        try:
            fd = os.open(os.path.basename(path), os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0),
                         dir_fd=dfd)
        finally:
            os.close(dfd)
        with os.fdopen(fd, "rb") as f:
            data = f.read()
        lines = [i for i in group if isinstance(i.artifact, Lines)]
        if lines:
            matchers = [plans.line_matcher(i.artifact) for i in lines]
            data = self._lines(path, lines, data, lambda ln: any(m(ln.rstrip(b"\r\n")) for m in matchers))
        for i in group:
            if isinstance(i.artifact, JsonMember):
                data = self._json(path, i, data)

    def _lines(self, path: str, group: list[Item], data: bytes, match) -> bytes:
        from muxhost import plans

        all_lines = plans.split_lines(data)
        gone = [n for n, ln in enumerate(all_lines) if match(ln)]
        runs: list[dict] = []
        for n in gone:
            if runs and runs[-1]["index"] + len(runs[-1]["lines"]) == n:
                runs[-1]["lines"].append(b64(all_lines[n]))
                continue
            runs.append({"index": n, "lines": [b64(all_lines[n])], "before": b64(all_lines[n - 1]) if n else None})
        for run in runs:
            end = run["index"] + len(run["lines"])
            run["after"] = b64(all_lines[end]) if end < len(all_lines) else None
        member, sha = self._member(json.dumps(runs).encode())
        self.items.append({"kind": "lines", "place": path, "conversation": group[0].conversation,
                           "label": "; ".join(i.label for i in group), "count": len(gone), "member": member,
                           "sha256": sha, "lock": _lock_of(group)})
        gone_set = set(gone)
        return b"".join(ln for n, ln in enumerate(all_lines) if n not in gone_set)

    def _json(self, path: str, item: Item, data: bytes) -> bytes:
        from muxhost import plans

        art: JsonMember = item.artifact  # type: ignore[assignment]
        after = plans.drop_member(data, tuple(art.keys), art.equals)
        if after == data:
            return data
        p = 0
        while p < min(len(data), len(after)) and data[p] == after[p]:
            p += 1
        s = 0
        while s < min(len(data), len(after)) - p and data[-1 - s] == after[-1 - s]:
            s += 1
        cut = data[p:len(data) - s]
        doc = {"value": _value_at(data, tuple(art.keys)), "offset": p, "fragment": b64(cut),
               "before": b64(data[max(0, p - CONTEXT):p]), "after": b64(data[len(data) - s:len(data) - s + CONTEXT]),
               "textual": after == data[:p] + data[len(data) - s:]}
        member, sha = self._member(json.dumps(doc).encode())
        self.items.append({"kind": "json", "place": path, "conversation": item.conversation, "label": item.label,
                           "keys": list(art.keys), "member": member, "sha256": sha, "lock": _lock_of([item])})
        return after


def _value_at(data: bytes, keys: tuple[str, ...]) -> Any:
    obj: Any = json.loads(data)
    for k in keys:
        obj = obj[k]
    return obj


def _lock_of(group: list[Item]) -> dict | None:
    """The agent's own lock of a shared file (where the plan checked it), to hold again on restore."""
    for i in group:
        lock = getattr(i.artifact, "lock", None)
        where = i.extra.get("lock") or (os.fspath(lock.path) if lock is not None else None)
        if isinstance(lock, FlockFile):
            return {"kind": "flock", "path": where}
        if isinstance(lock, MkdirLock):
            return {"kind": "mkdir", "path": where, "stale": lock.stale}
    return None


def refuse_unnamed_commands(items: list[Item]) -> None:
    """A Command (the agent's own delete) is archived through what the plan names beside it: a
    conversation whose plan has a Command but no File, Dir or Rows of its own is refused (exit 4):
    the archive would hold less than is removed. So is an older plugin's plan of strings (its own
    ``purge`` removes what it likes)."""
    if any(i.artifact.kind == "legacy" for i in items):
        raise Refused("cannot archive: this agent's plugin removes its conversations with its own code (its "
                      "plan is strings, not typed artifacts), so what goes cannot be known first; nothing was "
                      "removed (purge without --archive)")
    named = {i.conversation for i in items if isinstance(i.artifact, (File, Dir, Rows))}
    for i in items:
        if isinstance(i.artifact, Command) and i.conversation not in named:
            raise Refused(f"cannot archive: the plan runs `{i.label[5:]}` for conversation {i.conversation} but "
                          "names none of the files or rows it deletes; nothing was removed (purge without "
                          "--archive, or ask the plugin to name them)")


def archive_name(agent: str, conversation_id: str, when: float) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(when))
    short = re.sub(r"[^A-Za-z0-9]", "", conversation_id)[:8] or "x"
    return f"{stamp}-{agent}-{short}{SUFFIX}"


def write(where: Path, items: list[Item], head: dict) -> Path:
    """The archive of ``items`` (a checked plan) in the folder ``where``: written to a temp name,
    fsynced, renamed, the folder fsynced. ``head``: the manifest's other fields (agent,
    conversation, members, home). Any error: no file left, MuxhostError (exit 1) naming it."""
    refuse_unnamed_commands(items)
    now = time.time()
    base = archive_name(head["agent"], head["conversation"], now)[: -len(SUFFIX)]
    name, n = base + SUFFIX, 1
    while os.path.lexists(where / name):
        n += 1
        name = f"{base}-{n}{SUFFIX}"
    _sweep(where)
    tmp = where / f".{name}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
        with os.fdopen(fd, "wb") as f:
            with tarfile.open(fileobj=f, mode="w", format=tarfile.PAX_FORMAT) as tar:
                w = Writer(tar)
                _add_all(w, items)
                _pause("writing")
                manifest = {"format": FORMAT, "muxhost": _version(), **head,
                            "created": _dt.datetime.fromtimestamp(now, _dt.timezone.utc).isoformat(timespec="seconds"),
                            "items": w.items}
                body = json.dumps(manifest, indent=1).encode()
                w._member(body, name=MANIFEST)
                w._member(hashlib.sha256(body).hexdigest().encode() + b"\n", name=MANIFEST_SUM)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, where / name)
        dfd = os.open(where, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        _pause("written")
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, MuxhostError):
            raise
        if isinstance(e, (OSError, ValueError, tarfile.TarError)):
            why = getattr(e, "strerror", None) or str(e)
            raise MuxhostError(f"could not write the archive in {where}: {why}; nothing was removed") from None
        raise
    return where / name


def _pause(step: str) -> None:
    """Test hook: ``MUXHOST_TEST_ARCHIVE_PAUSE=<step>`` (``writing``, ``written``) stops a purge there,
    for a kill -9."""
    if os.environ.get("MUXHOST_TEST_ARCHIVE_PAUSE") == step:
        os.write(1, f"paused {step}\n".encode())
        time.sleep(600)


def _sweep(where: Path) -> None:
    """Remove the temp files of archives whose writer died (a kill while it wrote): never a live one's."""
    for n in os.listdir(where):
        m = re.fullmatch(r"\..+\.(\d+)\.tmp", n)
        if not m or int(m.group(1)) == os.getpid():
            continue
        try:
            os.kill(int(m.group(1)), 0)
        except ProcessLookupError:
            try:
                os.unlink(where / n)
            except FileNotFoundError:
                pass
        except OSError:
            pass  # (another user's pid: alive)


def _add_all(w: Writer, items: list[Item]) -> None:
    shared: dict[str, list[Item]] = {}
    for item in items:
        art = item.artifact
        if "backup_of" in item.extra:
            continue  # muxhost's own backup of an interrupted rewrite: not the conversation's data
        if isinstance(art, (File, Dir)):
            w.add_path(item)
        elif isinstance(art, Rows):
            w.add_rows(item)
        elif isinstance(art, (Lines, JsonMember)):
            shared.setdefault(item.extra.get("path") or os.path.realpath(os.fspath(art.path)), []).append(item)
    for path, group in shared.items():
        w.add_shared(path, group)


def _version() -> str:
    from muxhost import __version__

    return __version__


# -- reading ---------------------------------------------------------------------------------------
@dataclass
class Archive:
    """An archive read back: its path, its manifest, and its open tar (close it when done)."""

    path: Path
    manifest: dict
    tar: tarfile.TarFile

    def open(self, member: str):
        """A payload as a file to read (never all in memory: a transcript may be gigabytes)."""
        f = self.tar.extractfile(member)
        if f is None:
            raise MuxhostError(f"{self.path}: {member} is not a file in the archive")
        return f

    def read(self, member: str) -> bytes:
        return self.open(member).read()

    def sha256(self, member: str) -> str:
        h, f = hashlib.sha256(), self.open(member)
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
        return h.hexdigest()

    def json(self, member: str) -> Any:
        return json.loads(self.read(member))

    def close(self) -> None:
        self.tar.close()



def sums_of(manifest: dict) -> set[tuple]:
    """What an archive holds, as ``(kind, place, entry, sha256)`` per payload: archives compared by content."""
    return {(it["kind"], it["place"], e.get("rel", ""), e.get("sha256"))
            for it in manifest["items"] for e in (it.get("entries") or [it])}


def holding(where: Path, new: Path) -> Path | None:
    """An earlier archive in ``where`` of the same agent, conversation and HOME that holds everything
    the archive ``new`` holds (a purge cut short and run again), else None."""
    mine = manifest_of(new)
    wanted = sums_of(mine)
    for name in reversed(names(where)):
        path = where / name
        if path == new:
            continue
        try:
            m = manifest_of(path)
        except (OSError, tarfile.TarError, ValueError, KeyError):
            continue
        same = all(m.get(k) == mine.get(k) for k in ("agent", "conversation", "home"))
        if same and wanted <= sums_of(m):
            return path
    return None


def manifest_of(path: str | os.PathLike) -> dict:
    """The manifest alone (for ``archives ls``): no sum checked."""
    with tarfile.open(path, "r:") as tar:
        f = tar.extractfile(MANIFEST)
        if f is None:
            raise tarfile.TarError("no manifest")
        return json.loads(f.read())


def load(path: str | os.PathLike) -> Archive:
    """The archive at ``path`` with every sum checked first: the manifest's own, then each payload's.
    A mismatch (an archive edited by hand, a torn copy) is refused (exit 4): nothing is restored."""
    path = Path(path)
    try:
        tar = tarfile.open(path, "r:")
    except (OSError, tarfile.TarError) as e:
        raise MuxhostError(f"{path}: not a muxhost archive ({getattr(e, 'strerror', None) or e})") from None
    try:
        arc = Archive(path, {}, tar)
        body = arc.read(MANIFEST)
        if arc.read(MANIFEST_SUM).strip().decode() != hashlib.sha256(body).hexdigest():
            raise Refused(f"{path}: the manifest does not match its sha256 (the archive was changed since "
                          "it was written); nothing was restored")
        arc.manifest = json.loads(body)
        if arc.manifest.get("format") != FORMAT:
            raise UsageError(f"{path}: archive format {arc.manifest.get('format')!r}; this muxhost reads {FORMAT}")
        for it in arc.manifest["items"]:
            for e in it.get("entries") or [it]:
                if e.get("member") and arc.sha256(e["member"]) != e["sha256"]:
                    raise Refused(f"{path}: {_place(it, e)} does not match its sha256 in the manifest (the "
                                  "archive was changed since it was written); nothing was restored")
        return arc
    except KeyError as e:
        tar.close()
        raise Refused(f"{path}: {e.args[0]} is missing from the archive; nothing was restored") from None
    except (tarfile.TarError, ValueError, OSError) as e:
        tar.close()
        raise MuxhostError(f"{path}: the archive cannot be read ({e}); nothing was restored") from None
    except BaseException:
        tar.close()
        raise


def _place(item: dict, entry: dict) -> str:
    rel = entry.get("rel")
    return item["place"] if rel in (None, ".") else os.path.join(item["place"], rel)


def resolve(where: Path, ref: str) -> Path:
    """An archive by path, or by its name (or a unique prefix of it) in the archive folder."""
    if os.sep in ref or ref.endswith(SUFFIX) and os.path.exists(ref):
        if not os.path.isfile(ref):
            raise NotFound(f"no archive {ref}")
        return Path(os.path.abspath(ref))
    names = sorted(n for n in os.listdir(where) if n.endswith(SUFFIX) and n.startswith(ref))
    if len(names) != 1:
        if not names:
            raise NotFound(f"no archive {ref!r} in {where} (`muxhost archives` lists them)")
        raise UsageError(f"{ref!r} names {len(names)} archives ({', '.join(names[:3])}…): say more of the name")
    return where / names[0]


def names(where: Path) -> list[str]:
    """The archives in the folder, oldest first (their names sort by time)."""
    return sorted(n for n in os.listdir(where) if n.endswith(SUFFIX) and not n.startswith("."))


def created(name: str, path: Path) -> float:
    """When an archive was written: from its name, else its file's mtime."""
    m = _NAME.fullmatch(name)
    if m:
        return _dt.datetime.strptime(m.group(1), "%Y%m%dT%H%M%SZ").replace(tzinfo=_dt.timezone.utc).timestamp()
    return path.stat().st_mtime
