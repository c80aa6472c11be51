"""Unpurge and archives: a purge archive (:mod:`muxhost.archive`) put back, and the archive folder kept.

``unpurge``: every sum checked → the agent and its roots (every place inside them) → refused while
the conversation is in use → under the conversation's lock, each item judged (missing: restored;
still there identical: in place; anything else there: refused, nothing restored) → files and folders
back with their modes and times, rows in one transaction per database (refused when the table's
columns changed or a row with the same key differs), lines and JSON members back where the text
around them says (refused when it is ambiguous). The archive stays until ``archives rm``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import time
from typing import TYPE_CHECKING, Any

from muxhost import archive as arc_mod
from muxhost.agent import AgentContext
from muxhost.errors import MuxhostError, Refused

if TYPE_CHECKING:
    from muxhost.archive import Archive
    from muxhost.core import Core
    from muxhost.launching import Launching
    from muxhost.locks import Locks
    from muxhost.refusals import Refusals

SQL_TIMEOUT = 10.0


def _sha_file(path: str) -> str | None:
    h = hashlib.sha256()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def entry_state(target: str, e: dict) -> str:
    """``missing``, ``same`` (what the archive holds stands there) or ``other``."""
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return "missing"
    import stat

    if e["type"] == "dir":
        return "same" if stat.S_ISDIR(st.st_mode) else "other"
    if e["type"] == "symlink":
        return "same" if stat.S_ISLNK(st.st_mode) and os.readlink(target) == e["target"] else "other"
    return "same" if stat.S_ISREG(st.st_mode) and _sha_file(target) == e["sha256"] else "other"


def put_lines(cur: bytes, runs: list[dict]) -> bytes:
    """``cur`` with the archived runs of lines back in their places (unchanged when they are all
    still there); ValueError when the lines around a run do not say where it goes."""
    from muxhost.plans import split_lines

    lines = split_lines(cur)
    if all(r["index"] + k < len(lines) and lines[r["index"] + k] == arc_mod.unb64(ln)
           for r in runs for k, ln in enumerate(r["lines"])):
        return cur
    for r in runs:
        body = [arc_mod.unb64(ln) for ln in r["lines"]]
        before, after = arc_mod.unb64(r["before"]), arc_mod.unb64(r["after"])

        def fits(j: int, strict: bool) -> bool:
            ok_before = j == 0 if before is None else 0 < j <= len(lines) and lines[j - 1] == before
            if after is None:
                return ok_before and (not strict or j == len(lines))
            return ok_before and j < len(lines) and lines[j] == after

        j = r["index"]
        if not fits(j, False):
            found = [k for k in range(len(lines) + 1) if fits(k, True)]
            if len(found) != 1:
                raise ValueError(f"the lines around line {j + 1} changed ({'no' if not found else len(found)} "
                                 "places fit): where they go is ambiguous")
            j = found[0]
        if lines and j == len(lines) and not lines[-1].endswith(b"\n"):
            lines[-1] += b"\n"
        lines[j:j] = body
    return b"".join(lines)


def put_member(cur: bytes, keys: list[str], doc: dict) -> bytes:
    """``cur`` (a JSON document) with the archived member back: its text where it was when the text
    around it says so, else the document written again with it (the indentation it had); unchanged
    when it is there already; ValueError when another value holds its place."""
    from muxhost.plans import dump_like

    obj = json.loads(cur)
    parent: Any = obj
    for k in keys[:-1]:
        if not isinstance(parent, dict):
            raise ValueError(f"{'.'.join(keys[:-1])} is no object now: where it goes is ambiguous")
        parent = parent.setdefault(k, {})
    if not isinstance(parent, dict):
        raise ValueError(f"{'.'.join(keys[:-1])} is no object now: where it goes is ambiguous")
    if keys[-1] in parent:
        if parent[keys[-1]] == doc["value"]:
            return cur
        raise ValueError(f"{'.'.join(keys)} holds another value now")
    parent[keys[-1]] = doc["value"]
    frag, before, after = (arc_mod.unb64(doc[k]) for k in ("fragment", "before", "after"))
    if doc.get("textual"):
        at = doc["offset"]
        spots = [at] if cur[at - len(before):at] == before and cur[at:at + len(after)] == after else []
        if not spots and cur.count(before + after) == 1:
            spots = [cur.index(before + after) + len(before)]
        for p in spots:
            new = cur[:p] + frag + cur[p:]
            try:
                if json.loads(new) == obj:
                    return new
            except ValueError:
                pass
    return dump_like(cur.decode("utf-8"), obj)


class Unpurging:
    """``unpurge`` and ``archives``: the archive folder of this muxhost's state dir."""

    def __init__(self, core: "Core", locks: "Locks", refusals: "Refusals", launching: "Launching"):
        self.core, self.locks, self.refusals, self.launching = core, locks, refusals, launching

    def folder(self):
        return arc_mod.folder(self.core.store.path)

    def resolve(self, ref: str):
        return arc_mod.resolve(self.folder(), ref)

    # -- unpurge -----------------------------------------------------------------------------------
    def unpurge(self, ref: str, dry_run: bool = False) -> dict[str, Any]:
        """Put the archive ``ref`` back; returns what was restored and what was in place already."""
        arc = arc_mod.load(self.resolve(ref))
        try:
            m = arc.manifest
            agent = self.core.registry.agent(m["agent"])
            home, env = self.launching.agent_env(dict(os.environ), m.get("home"), agent.name)
            ctx = AgentContext(home=home, env=env, cwd=os.getcwd(), config=self.core.config.agent(agent.name))
            self._inside(agent, ctx, m["items"])
            members = list(m.get("members") or [m["conversation"]])
            self.refusals.refuse_held(agent, ctx, m["conversation"], members)
            with self.locks.conversation(agent.name, m["conversation"], "unpurge"):
                judged = [(it, self._judge(arc, it)) for it in m["items"]]
                bad = [f"{it['label']}: {why}" for it, (state, why) in judged if state == "refused"]
                if bad:
                    raise Refused(f"cannot unpurge {arc.path.name}: {bad[0]}"
                                  f"{f' (and {len(bad) - 1} more)' if len(bad) > 1 else ''}; nothing was restored")
                todo = [it for it, (state, _) in judged if state == "restore"]
                if not dry_run:
                    try:
                        self._restore(arc, todo)
                    except OSError as e:  # (a full disk): what came back stays, a second unpurge finishes
                        raise MuxhostError(f"unpurge of {arc.path.name} stopped: {e.strerror or e}; what came "
                                           "back stays, and `muxhost unpurge` again finishes it") from None
            return {"archive": str(arc.path), "agent": agent.name, "conversation_id": m["conversation"],
                    "home": m.get("home"), "dry_run": dry_run, "restored": [it["label"] for it in todo],
                    "in_place": [it["label"] for it, (state, _) in judged if state == "same"]}
        finally:
            arc.close()

    def _inside(self, agent, ctx: AgentContext, items: list[dict]) -> None:
        """Every place of the archive lies in the agent's roots, as a plan's must (a hand-made
        archive cannot write anywhere else)."""
        from muxhost import plans
        from muxhost.artifacts import Dir, File, Lines, Rows

        roots = [os.path.realpath(r) for r in agent.roots(ctx)]
        for it in items:
            kind = it["kind"]
            art = (Rows(it["place"], it["table"], it["column"]) if kind == "rows" else
                   Lines(it["place"], contains="") if kind in ("lines", "json") else
                   (Dir if kind == "dir" else File)(it["place"]))
            plans.check(art, roots, ctx)
            for e in it.get("entries") or []:
                if os.path.isabs(e["rel"]) or ".." in e["rel"].split(os.sep):
                    raise Refused(f"{it['place']}: the archive names {e['rel']!r} inside it; nothing was restored")

    def _judge(self, arc: "Archive", it: dict) -> tuple[str, str]:
        """``("restore" | "same" | "refused", why)`` for one item of the archive, as things are now."""
        kind, place = it["kind"], it["place"]
        if kind in ("file", "dir"):
            states = [(e, entry_state(_target(it, e), e)) for e in it["entries"]]
            other = [_target(it, e) for e, s in states if s == "other"]
            if other:
                return "refused", f"something else stands at {other[0]} now"
            return ("same", "") if all(s == "same" for _, s in states) else ("restore", "")
        if kind == "rows":
            return self._judge_rows(arc, it)
        try:
            with open(place, "rb") as f:
                cur = f.read()
        except FileNotFoundError:
            return "refused", f"{place} is gone: nothing to put it back into"
        try:
            new = self._transform(arc, it)(cur)
        except (ValueError, UnicodeDecodeError) as e:
            return "refused", str(e)
        return ("same", "") if new == cur else ("restore", "")

    def _transform(self, arc: "Archive", it: dict):
        doc = arc.json(it["member"])
        if it["kind"] == "lines":
            return lambda cur: put_lines(cur, doc)
        return lambda cur: put_member(cur, it["keys"], doc)

    def _judge_rows(self, arc: "Archive", it: dict) -> tuple[str, str]:
        from muxhost.kit import sqlite as ksql

        if not os.path.exists(it["place"]):
            return "refused", f"the database {it['place']} is gone"
        try:
            cols = [r[1] for r in ksql.rows(it["place"], f"pragma table_info({ksql.ident(it['table'])})")]
            if cols != it["columns"]:
                return "refused", f"the columns of table {it['table']} changed ({', '.join(cols) or 'no table'})"
            con = ksql.connect_ro(it["place"])
            try:
                states = [_row_state(con, it, [arc_mod.decode_value(v) for v in row]) for row in arc.json(it["member"])]
            finally:
                con.close()
        except (sqlite3.Error, ksql.DatabaseError) as e:
            return "refused", f"{it['place']}: {e}"
        if "other" in states:
            return "refused", f"a row of table {it['table']} with the same key holds other values now"
        return ("same", "") if all(s == "same" for s in states) else ("restore", "")

    def _restore(self, arc: "Archive", todo: list[dict]) -> None:
        """Put the items back: folders and files, then rows (one transaction per database, the plan's
        order reversed: a parent row before its children), then shared files (last taken, first back)."""
        for it in todo:
            if it["kind"] in ("file", "dir"):
                _put_tree(arc, it)
        by_db: dict[str, list[dict]] = {}
        for it in reversed(todo):
            if it["kind"] == "rows":
                by_db.setdefault(it["place"], []).append(it)
        for db, group in by_db.items():
            _insert_rows(arc, db, group)
        for it in reversed(todo):
            if it["kind"] in ("lines", "json"):
                self._rewrite(arc, it)

    def _rewrite(self, arc: "Archive", it: dict) -> None:
        import contextlib

        from muxhost import fsutil, plans
        from muxhost.artifacts import FlockFile, MkdirLock

        lock = it.get("lock")
        held = None if lock is None else (FlockFile(lock["path"]) if lock["kind"] == "flock"
                                          else MkdirLock(lock["path"], lock.get("stale", 10.0)))
        transform = self._transform(arc, it)
        try:
            with plans.held(held, plans.LOCK_TIMEOUT, lock["path"] if lock else None) if held \
                    else contextlib.nullcontext():
                fsutil.rewrite(it["place"], transform, lock_timeout=plans.LOCK_TIMEOUT)
        except (OSError, ValueError) as e:
            raise MuxhostError(f"could not put back {it['label']}: {e}") from None

    # -- archives ----------------------------------------------------------------------------------
    def archives(self) -> list[dict[str, Any]]:
        """Every archive in the folder, oldest first: name, path, size, created, agent, conversation."""
        where = self.folder()
        out = []
        for name in arc_mod.names(where):
            path = where / name
            row: dict[str, Any] = {"name": name, "path": str(path), "size": path.stat().st_size}
            try:
                m = arc_mod.manifest_of(path)
                row.update(agent=m.get("agent"), conversation_id=m.get("conversation"), created=m.get("created"),
                           members=m.get("members"), items=len(m.get("items") or []), home=m.get("home"))
            except Exception as e:  # (one unreadable archive is listed as such; the others still are)
                row.update(error=f"cannot be read: {e}")
            out.append(row)
        return out

    def show(self, ref: str) -> dict[str, Any]:
        """One archive's manifest, every sum checked."""
        arc = arc_mod.load(self.resolve(ref))
        arc.close()
        return {"name": arc.path.name, "path": str(arc.path), **arc.manifest}

    def rm(self, ref: str) -> str:
        """Remove one archive: a file named ``*.muxarchive`` with a manifest, never any other file."""
        path = self.resolve(ref)
        try:
            arc_mod.manifest_of(path)
        except Exception as e:
            raise Refused(f"{path} is no muxhost archive ({e}); left as it is") from None
        if not path.name.endswith(arc_mod.SUFFIX):
            raise Refused(f"{path} is not named *{arc_mod.SUFFIX}; left as it is")
        os.unlink(path)
        return str(path)

    def prune(self, older_than: float, dry_run: bool = False) -> list[str]:
        """Remove the archives written more than ``older_than`` seconds ago; returns their paths."""
        where, now = self.folder(), time.time()
        gone = [where / n for n in arc_mod.names(where) if now - arc_mod.created(n, where / n) > older_than]
        if not dry_run:
            for p in gone:
                os.unlink(p)
        return [str(p) for p in gone]


def _target(it: dict, e: dict) -> str:
    return it["place"] if e["rel"] == "." else os.path.join(it["place"], e["rel"])


def _row_state(con, it: dict, row: list) -> str:
    """``missing``, ``same`` or ``other`` (a row with its key holds other values) for one archived row."""
    from muxhost.kit.sqlite import ident

    cols = it["columns"]
    key = it["key"] or cols
    where = " and ".join(f"{ident(c)} is ?" for c in key)
    args = [row[cols.index(c)] for c in key]
    found = [tuple(r) for r in con.execute(f"select * from {ident(it['table'])} where {where}", args)]
    if not found:
        return "missing"
    return "same" if tuple(row) in found else "other"


def _insert_rows(arc: "Archive", db: str, group: list[dict]) -> None:
    """The missing rows of ``group`` (tables of one database) in ONE transaction; a row whose key
    holds other values by now rolls it all back."""
    from muxhost.kit.sqlite import ident

    con = sqlite3.connect(db, timeout=SQL_TIMEOUT, isolation_level=None)
    try:
        con.execute("begin immediate")
        for it in group:
            cols = it["columns"]
            sql = f"insert into {ident(it['table'])} ({', '.join(ident(c) for c in cols)}) " \
                  f"values ({', '.join('?' * len(cols))})"
            for raw in arc.json(it["member"]):
                row = [arc_mod.decode_value(v) for v in raw]
                state = _row_state(con, it, row)
                if state == "other":
                    raise Refused(f"cannot unpurge: a row of table {it['table']} in {db} with the same key "
                                  "holds other values now; no row of that database was restored")
                if state == "missing":
                    con.execute(sql, row)
        con.execute("commit")
    except BaseException:
        if con.in_transaction:
            con.execute("rollback")
        raise
    finally:
        con.close()


def _put_tree(arc: "Archive", it: dict) -> None:
    """A File or a Dir back: folders first (0700 parents where they went too), then files and links,
    written to a temp name and linked in (never over something that came meanwhile), then times."""
    entries = it["entries"]
    parent = os.path.dirname(it["place"])
    os.makedirs(parent, 0o700, exist_ok=True)
    for e in entries:
        if e["type"] == "dir" and not os.path.lexists(_target(it, e)):
            os.mkdir(_target(it, e), 0o700)
    for e in entries:
        target = _target(it, e)
        if e["type"] == "dir" or os.path.lexists(target):
            continue
        if e["type"] == "symlink":
            os.symlink(e["target"], target)
        else:
            tmp = os.path.join(os.path.dirname(target), f".{os.path.basename(target)}.{os.getpid()}.unpurge")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            try:
                with os.fdopen(fd, "wb") as f:
                    shutil.copyfileobj(arc.open(e["member"]), f, 1 << 20)
                    os.fchmod(f.fileno(), e["mode"])
                    f.flush()
                    os.fsync(f.fileno())
                os.link(tmp, target)
            finally:
                os.unlink(tmp)
        os.utime(target, ns=(e["mtime_ns"], e["mtime_ns"]), follow_symlinks=False)
    for e in sorted((e for e in entries if e["type"] == "dir"), key=lambda e: -e["rel"].count(os.sep)):
        os.chmod(_target(it, e), e["mode"])
        os.utime(_target(it, e), ns=(e["mtime_ns"], e["mtime_ns"]))
