"""Git worktrees: ``launch --worktree NAME`` runs the agent in a new worktree on a new branch NAME,
``rm`` removes it again — never with work of the user in it. Every git call is ``git -C FOLDER …``
(no shell). :class:`Removal` is ``rm``.

A record's ``worktree`` is ``{"path", "repo", "branch", "base"}``: the folder muxhost made, the
top-level folder of the repository it came from, the branch, and the commit it started from. The
branch is deleted only while it still points at ``base`` (atomically: ``update-ref -d REF BASE``),
so commits made in the worktree are never lost; the folder is removed only while ``git status``
shows nothing, no commit made in it would lose its last name (a reflog's) and no other repository
is inside it (or with ``--force``). Files git ignores go with the folder.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from typing import TYPE_CHECKING, Any

from muxhost.errors import INCOMPLETE, MuxhostError, NotFound, Refused, UsageError
from muxhost.store import Record

if TYPE_CHECKING:
    from muxhost.core import Core
    from muxhost.locks import Locks
    from muxhost.purging import Purging
    from muxhost.refusals import Refusals
    from muxhost.state import State

GIT_TIMEOUT = 120.0  # seconds one git command may take
# a git of the caller's (a hook that runs muxhost) must not point ours at its repository
_GIT_VARS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_PREFIX",
             "GIT_OBJECT_DIRECTORY", "GIT_NAMESPACE")


def git(folder: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """``git -C folder args…``; with ``check`` a failure is one line naming the command and git's reason."""
    env = {k: v for k, v in os.environ.items() if k not in _GIT_VARS}
    env["GIT_TERMINAL_PROMPT"] = "0"
    try:
        p = subprocess.run(["git", "-C", folder, *args], capture_output=True, text=True, env=env,
                           stdin=subprocess.DEVNULL, timeout=GIT_TIMEOUT)
    except FileNotFoundError:
        raise MuxhostError("git is not installed (worktrees need it)") from None
    except subprocess.TimeoutExpired:
        raise MuxhostError(f"`git {' '.join(args[:2])}` in {folder} took over {GIT_TIMEOUT:g}s") from None
    if check and p.returncode != 0:
        raise MuxhostError(f"`git {' '.join(args[:2])}` in {folder} failed: {why(p)}")
    return p


def why(p: subprocess.CompletedProcess) -> str:
    """git's reason, on one line: its ``fatal:``/``error:`` line, else its last line."""
    lines = [ln.strip() for ln in (p.stderr or p.stdout or "").splitlines() if ln.strip()]
    for ln in lines:
        for prefix in ("fatal: ", "error: "):
            if ln.startswith(prefix):
                return ln[len(prefix):]
    return lines[-1] if lines else f"exit status {p.returncode}"


def check_name(folder: str, name: str) -> None:
    """NAME must be a plain branch name (``git check-ref-format --branch``; no ``@{-1}``)."""
    p = git(folder, "check-ref-format", "--branch", name, check=False)
    if p.returncode != 0 or p.stdout.strip() != name:
        raise UsageError(f"--worktree {name!r}: not a valid branch name (see `git check-ref-format`)")


def toplevel(folder: str) -> str:
    """The top-level folder of the git work tree ``folder`` is in; else a usage error."""
    p = git(folder, "rev-parse", "--show-toplevel", check=False)
    if p.returncode != 0 or not p.stdout.strip():
        raise UsageError(f"--worktree: --cwd {folder} is not inside a git repository")
    return p.stdout.strip()


def commit_of(repo: str, ref: str) -> str | None:
    p = git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False)
    return (p.stdout.strip() or None) if p.returncode == 0 else None


def plan(cwd: str, name: str, root: str | None) -> tuple[dict[str, Any], str]:
    """What ``launch --cwd CWD --worktree NAME`` makes, checked, nothing created: the record's
    ``worktree`` and the agent's folder relative to it (``--cwd`` relative to its repository).
    The folder is ``ROOT/<repo folder>-<NAME>`` ('/' in NAME becomes '-'); ROOT is the repository's
    parent folder, or ``root`` (``worktree.root``; a relative one is taken from the repository)."""
    check_name(cwd, name)
    top = toplevel(cwd)
    base = commit_of(top, "HEAD")
    if base is None:
        raise UsageError(f"--worktree {name}: {top} has no commit yet (a worktree starts from one)")
    parent = os.path.dirname(top) if root is None else os.path.join(top, root)
    path = os.path.normpath(os.path.join(parent, f"{os.path.basename(top)}-{name.replace('/', '-')}"))
    if git(top, "show-ref", "--quiet", "--verify", f"refs/heads/{name}", check=False).returncode == 0:
        raise UsageError(f"--worktree {name}: branch {name!r} already exists in {top}; choose another name")
    if os.path.lexists(path):
        raise UsageError(f"--worktree {name}: {path} already exists; choose another name, or move it aside")
    rel = os.path.relpath(os.path.realpath(cwd), os.path.realpath(top))
    return {"path": path, "repo": top, "branch": name, "base": base}, rel


def create(wt: dict[str, Any], rel: str = ".") -> str:
    """``git worktree add -b NAME PATH BASE``; returns the agent's folder in it (``rel`` inside)."""
    p = git(wt["repo"], "worktree", "add", "--quiet", "-b", wt["branch"], wt["path"], wt["base"], check=False)
    if p.returncode != 0:
        raise MuxhostError(f"cannot create the worktree {wt['path']}: {why(p)}")
    cwd = os.path.normpath(os.path.join(wt["path"], rel))
    try:
        os.makedirs(cwd, exist_ok=True)  # (a folder git does not track, e.g. an empty one)
    except OSError as e:
        discard(wt)
        raise MuxhostError(f"cannot create {cwd} in the worktree: {e.strerror or e}") from e
    return cwd


def discard(wt: dict[str, Any]) -> None:
    """Undo :func:`create` (the launch failed): the folder, then the branch while still at its base."""
    p = git(wt["repo"], "worktree", "remove", "--force", wt["path"], check=False)
    if p.returncode != 0 and os.path.lexists(wt["path"]):
        raise MuxhostError(f"cannot remove the worktree {wt['path']} again: {why(p)}")
    git(wt["repo"], "worktree", "prune", check=False)
    delete_branch(wt)


def registered(repo: str, path: str) -> bool:
    """Whether ``path`` is a worktree of ``repo`` (``git worktree list``)."""
    real = os.path.realpath(path)
    return any(os.path.realpath(w) == real for w in _worktrees(repo))


def _worktrees(repo: str) -> dict[str, str | None]:
    """``{worktree folder: its branch ref or None}`` of ``repo``."""
    out: dict[str, str | None] = {}
    current = None
    for line in git(repo, "worktree", "list", "--porcelain").stdout.splitlines():
        if line.startswith("worktree "):
            current = line[len("worktree "):]
            out[current] = None
        elif line.startswith("branch ") and current is not None:
            out[current] = line[len("branch "):]
    return out


def changes(path: str) -> list[str]:
    """``git status --porcelain`` of the worktree: each uncommitted change and untracked file."""
    p = git(path, "status", "--porcelain", "--ignore-submodules=none", check=False)
    if p.returncode != 0:  # fail closed: what we cannot see may be work
        raise MuxhostError(f"cannot tell whether the worktree {path} has changes: {why(p)}; nothing was removed")
    return [ln for ln in p.stdout.splitlines() if ln.strip()]


def unreachable_head(path: str) -> str | None:
    """The worktree's HEAD commit when HEAD is detached and no ref of the repository contains it
    (commits made on a detached HEAD, or a rebase stopped halfway): removing the worktree takes its
    HEAD and reflog, the only names those commits have. None when HEAD is on a branch or reachable."""
    if git(path, "symbolic-ref", "-q", "HEAD", check=False).returncode == 0:
        return None  # on a branch: the branch keeps its commits (delete_branch keeps a moved one)
    head = git(path, "rev-parse", "--verify", "-q", "HEAD", check=False)
    if head.returncode != 0:  # fail closed: what we cannot see may be work
        raise MuxhostError(f"cannot tell which commit the worktree {path} is at: {why(head)}; nothing was removed")
    sha = head.stdout.strip()
    refs = git(path, "for-each-ref", "--count=1", "--contains", sha, "--format=%(refname)", check=False)
    if refs.returncode != 0:
        raise MuxhostError(f"cannot tell whether commit {sha[:12]} of the worktree {path} is on a branch: "
                           f"{why(refs)}; nothing was removed")
    return None if refs.stdout.strip() else sha


def reflog_only(wt: dict[str, Any]) -> list[str]:
    """Commits made in the worktree that only a reflog ``rm`` takes still names (newest first): the
    worktree HEAD's (``git reset --hard HEAD~1`` after a commit), and the branch's while the branch
    is back at its base (:func:`delete_branch` deletes it, reflog and all). Not the base or what it
    came from, nor a commit any other ref contains."""
    path, ref = wt["path"], f"refs/heads/{wt['branch']}"
    named: list[str] = []
    logs = [(path, "HEAD")]
    deleted = commit_of(wt["repo"], ref) == wt["base"]
    if deleted:
        logs.append((wt["repo"], ref))
    for folder, log in logs:
        p = git(folder, "log", "-g", "--format=%H", log, check=False)
        if p.returncode != 0:  # fail closed: what we cannot see may be work
            raise MuxhostError(f"cannot read the reflog of {log} in {folder}: {why(p)}; nothing was removed")
        named += p.stdout.split()
    if not named:
        return []
    p = git(wt["repo"], "rev-list", "--ignore-missing", *dict.fromkeys(named), "--not", wt["base"],
            *([f"--exclude={ref}"] if deleted else []), "--glob=refs/*", check=False)
    if p.returncode != 0:
        raise MuxhostError(f"cannot tell whether the commits of the worktree {path} are on a branch: "
                           f"{why(p)}; nothing was removed")
    return p.stdout.split()


def nested_repo(path: str) -> str | None:
    """The first folder under the worktree that holds a ``.git`` of its own (a repository, ignored by
    the worktree's git or not): ``git worktree remove`` takes it, history and all. None if none."""
    for top, dirs, files in os.walk(path):
        if top != path and (".git" in dirs or ".git" in files):
            return top
        dirs[:] = [d for d in dirs if d != ".git"]
    return None


def describe(lines: list[str]) -> str:
    """``2 changed, 1 untracked: a.py, b.py, notes.txt``."""
    untracked = sum(1 for ln in lines if ln.startswith("??"))
    counts = [f"{n} {what}" for n, what in ((len(lines) - untracked, "changed"), (untracked, "untracked")) if n]
    names = [ln[3:] for ln in lines[:3]] + (["…"] if len(lines) > 3 else [])
    return f"{', '.join(counts)}: {', '.join(names)}"


def delete_branch(wt: dict[str, Any]) -> tuple[bool, str]:
    """Delete the branch only while it points at its base and no worktree has it checked out."""
    branch, ref = wt["branch"], f"refs/heads/{wt['branch']}"
    tip = commit_of(wt["repo"], ref)
    if tip is None:
        return False, f"branch {branch} was already gone"
    if tip != wt["base"]:
        return False, f"branch {branch} kept: it has commits (at {tip[:12]}; it started at {wt['base'][:12]})"
    holder = next((w for w, b in _worktrees(wt["repo"]).items() if b == ref), None)
    if holder is not None:
        return False, f"branch {branch} kept: it is checked out in {holder}"
    p = git(wt["repo"], "update-ref", "-d", ref, wt["base"], check=False)  # only while it is still at base
    if p.returncode != 0:
        return False, f"branch {branch} kept: {why(p)}"
    return True, f"deleted branch {branch} (it was at {wt['base'][:12]}, where it started)"


class Removal:
    """``rm``: forget a stopped record, and remove the worktree muxhost made for it (after the
    refusals, :mod:`muxhost.refusals`; its conversations purged first with ``purge``)."""

    def __init__(self, core: "Core", state: "State", locks: "Locks", refusals: "Refusals", purging: "Purging"):
        self.core, self.state, self.locks, self.refusals, self.purging = core, state, locks, refusals, purging

    def agent_there(self, rec: Record) -> str | None:
        """Why ``rm`` refuses ``rec`` now because its agent may be there (running, starting, asleep,
        exited in its pane), or None."""
        view = self.state.view([rec])
        live = self.state.live(rec, view, self.core.registry.agents.get(rec.agent), check_resumable=False)
        state = "asleep" if rec.state == "asleep" else live.state
        if state in ("running", "starting", "asleep", "exited"):
            where = f" in pane {live.pane.pane_id}" if live.pane else ""
            return f"record {rec.id} ({rec.name}) is {state}{where}; stop it first"
        return None

    def rm(self, rec: Record, *, purge: bool = False, force: bool = False) -> dict[str, Any]:
        """Refuse (exit 4, nothing removed) while the record's agent may be there or its worktree has
        uncommitted or untracked changes (unless ``force``); then purge its conversations
        (``purge``), remove the worktree, delete its branch (only at its base) and forget the record.
        Returns what was done: ``{"id", "name", "purged", "worktree", "branch", "forgotten", "done"}``."""
        there = self.agent_there(rec)
        if there:
            raise Refused(there)
        wt = rec.worktree
        present = bool(wt) and os.path.lexists(wt["path"])
        ours = False
        if wt and present:
            if not os.path.isdir(wt["repo"]):
                raise MuxhostError(f"cannot remove the worktree {wt['path']}: its repository {wt['repo']} is gone; "
                                   f"remove the folder yourself, then rm again; nothing was removed")
            ours = registered(wt["repo"], wt["path"])
            if ours and not force:
                # what removing the folder would lose, each with how to keep it (the first found refuses)
                refusals = (
                    (lambda: changes(wt["path"]), lambda dirty: f"has uncommitted changes ({describe(dirty)}); "
                     "commit or remove them"),
                    (lambda: unreachable_head(wt["path"]), lambda lost: f"is at commit {lost[:12]}, which is on no "
                     f"branch: removing it would lose it; put it on one (git -C {wt['path']} branch NAME)"),
                    (lambda: reflog_only(wt), lambda only: f"has {len(only)} commit(s) only a reflog names (newest "
                     f"{only[0][:12]}, e.g. after a `git reset`): removing it would lose them; keep them "
                     f"(git -C {wt['repo']} branch keep {only[0]})"),
                    (lambda: nested_repo(wt["path"]), lambda nested: f"holds another git repository, {nested}: "
                     "removing it would lose that repository's history; move it out of the worktree"),
                )
                for find, say in refusals:
                    found = find()
                    if found:
                        raise Refused(f"the worktree {wt['path']} {say(found)}, or rm --force; nothing was removed")
        self.refusals.refuse_alive(rec, self.core.registry.agents.get(rec.agent),
                          [*([rec.conversation_id] if rec.conversation_id else []), *rec.conversations],
                          then="; nothing was removed")
        done: list[str] = []
        result: dict[str, Any] = {"id": rec.id, "name": rec.name, "purged": [], "worktree": None, "branch": None,
                                  "forgotten": False, "done": done}
        if purge:
            for cid in dict.fromkeys([*rec.conversations, *([rec.conversation_id] if rec.conversation_id else [])]):
                try:
                    report = self.purging.purge(rec=rec, conversation_id=cid, confirm=None)
                except NotFound:
                    done.append(f"conversation {cid}: nothing on disk")
                    continue
                if report.residual:
                    raise MuxhostError(f"purge incomplete: conversation {cid}: {len(report.residual)} item(s) left: "
                                       f"{report.residual[0]}; the record is kept", INCOMPLETE)
                result["purged"].append(report.to_dict())
                done.append(f"purged {report.agent} conversation {cid}: {len(report.removed)} removed")
        with self._unchanged(rec):
            self._remove(rec, wt, present, ours, force, result)
        return result

    @contextlib.contextmanager
    def _unchanged(self, rec: Record):
        """Hold the record's conversation lock (a resume holds it until its pane runs) and its record
        lock (a stop, a sleep), and refuse (exit 4) when the record was started again since it was
        judged stopped: a worktree is never removed, nor a record forgotten, under an agent that a
        concurrent resume just started."""
        now = self.core.store.get(rec.id)
        cid = (now or rec).conversation_id
        with self.locks.conversation(rec.agent, cid, "rm") if cid else contextlib.nullcontext(), \
                self.locks.record(rec, "rm"):
            now = self.core.store.get(rec.id)
            if now is None or (now.state, now.launched_at) != (rec.state, rec.launched_at):
                raise Refused(f"record {rec.id} ({rec.name}) changed meanwhile (it is "
                              f"{now.state if now else 'gone'}); its worktree and record were kept; look again")
            yield

    def _remove(self, rec: Record, wt: dict[str, Any] | None, present: bool, ours: bool, force: bool,
                result: dict[str, Any]) -> None:
        """The worktree, its branch and the record (see :meth:`rm`), under :meth:`_unchanged`."""
        done = result["done"]
        if wt:
            removed = False
            if present and not ours:
                done.append(f"worktree {wt['path']} kept: it is no longer a git worktree of {wt['repo']}")
            elif present:
                git(wt["repo"], "worktree", "remove", *(["--force"] if force else []), wt["path"])
                removed = True
                done.append(f"removed worktree {wt['path']}")
            else:
                done.append(f"worktree {wt['path']} was already gone")
            result["worktree"] = {**wt, "removed": removed}
            if os.path.isdir(wt["repo"]):
                git(wt["repo"], "worktree", "prune", check=False)
                deleted, line = delete_branch(wt)
            else:
                deleted, line = False, f"branch {wt['branch']} kept: its repository {wt['repo']} is gone"
            result["branch"] = {"name": wt["branch"], "deleted": deleted}
            done.append(line)
        self.core.store.delete(rec)
        result["forgotten"] = True
        done.append(f"forgot record {rec.id} ({rec.name})")
