"""CodexAgent's methods called directly (no tmux), and its typed purge plans carried out by the real
host in-process: threads made by the real ``codex exec`` against the fake Responses server, in a
private CODEX_HOME."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time

import pytest

import muxhost_codex
from muxhost import AgentContext, MuxhostError
from muxhost.errors import Refused
from muxhost.procs import Proc
from muxhost_codex import CodexAgent

SPAWN = "please SPAWN-CHILD now"


def ctx_for(codex, cwd, **kw) -> AgentContext:
    return AgentContext(home=str(codex.home), env=dict(codex.env), cwd=str(cwd), **kw)


def children_of(codex, parent: str) -> list[str]:
    return [r[0] for r in codex.query("state_5.sqlite",
                                      "select child_thread_id from thread_spawn_edges where parent_thread_id = ?",
                                      (parent,))]


def spawned_thread(codex, tmp_path) -> tuple:
    """A thread made by `codex exec` in tmp_path/work that spawned one sub-agent: (work, parent, child)."""
    work = tmp_path / "work"
    work.mkdir()
    codex.configure(work)
    parent = codex.exec(SPAWN, work)
    (child,) = children_of(codex, parent)
    return work, parent, child


def holder(args: list[str], lock_paths=(), lock: bool = True, env: dict | None = None,
           seconds: float = 60) -> subprocess.Popen:
    """A python process that opens (and, with ``lock``, flocks) ``lock_paths`` as codex does, then
    sleeps ``seconds``; ``args`` end up in its argv, ``env`` in its environment (the paths too: the
    ids they hold are not in its argv)."""
    code = ("import fcntl, os, time\n"
            "fs = [open(p, 'a+') for p in os.environ['HOLD_PATHS'].split(',') if p]\n"
            f"[fcntl.flock(f, fcntl.LOCK_EX) for f in fs if {lock!r}]\n"
            "print('locked', flush=True)\n"
            f"time.sleep({seconds})\n")
    p = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True,
                         env={**os.environ, **(env or {}), "HOLD_PATHS": ",".join(str(x) for x in lock_paths)})
    assert p.stdout.readline().strip() == "locked"
    return p


def host_for(tmp_path):
    """The real host in-process (no tmux, no CLI): its plugin manager with only codex and the built-ins."""
    from muxhost.host import Host
    from muxhost.plugins import get_plugin_manager
    from muxhost.store import Store

    pm = get_plugin_manager(load_entrypoints=False)
    pm.register(muxhost_codex, name="codex")
    (tmp_path / "muxhost-state").mkdir(mode=0o700, exist_ok=True)
    return Host(pm=pm, store=Store(tmp_path / "muxhost-state" / "state.db"))


def purge(ctx, tid, tmp_path, dry_run=False):
    """``muxhost purge --agent codex --conversation TID`` as the host does it: -> the report."""
    return host_for(tmp_path).purge(agent_name="codex", conversation_id=tid, ctx=ctx, dry_run=dry_run)


# -- launch -----------------------------------------------------------------------------------


def test_process_names_match_the_wrapper_pair():
    agent = CodexAgent()
    wrapper = Proc(10, 1, 1.0, "node", ("node", "/x/node_modules/.bin/codex", "--no-daemon"))
    wrapper_js = Proc(10, 1, 1.0, "node", ("node", "/x/@openai/codex/bin/codex.js", "--no-daemon"))
    native = Proc(11, 10, 1.0, "codex", ("/x/vendor/x86_64-unknown-linux-musl/bin/codex", "--no-daemon"))
    other = Proc(12, 1, 1.0, "node", ("node", "/x/server.js"))
    assert wrapper.matches_name(agent.process_names)
    assert wrapper_js.matches_name(agent.process_names)
    assert native.matches_name(agent.process_names)
    assert not other.matches_name(agent.process_names)


def test_launch_is_in_process_and_warns_about_a_daemon_config(codex, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    agent = CodexAgent()

    codex.configure(work, daemon=True)  # no features.daemon_auto_start = false
    ctx = ctx_for(codex, work, args=["-m", "fake-model"])
    launch = agent.launch(ctx)
    assert launch.argv == [codex.binary, "--no-daemon", "-m", "fake-model"]
    assert len(ctx.notes) == 1 and "daemon" in ctx.notes[0] and "--no-daemon" in ctx.notes[0]
    assert "~/.codex/config.toml" in ctx.notes[0]

    codex.configure(work, daemon=False)
    ctx = ctx_for(codex, work)
    assert agent.launch(ctx).argv == [codex.binary, "--no-daemon"]
    assert ctx.notes == []
    cid = "01a22bb1-7ce7-7d11-a44a-cb6d0e97bd3f"
    assert agent.resume(ctx, cid).argv == [codex.binary, "resume", "--no-daemon", cid]


def test_launch_without_no_daemon_switch_disables_the_daemon_by_config(tmp_path):
    old = tmp_path / "codex"
    old.write_text("#!/bin/sh\necho 'Usage: codex [OPTIONS] [PROMPT]'\necho '  -c, --config <key=value>'\n")
    old.chmod(old.stat().st_mode | stat.S_IXUSR)
    home = tmp_path / "home"
    home.mkdir()
    agent = CodexAgent()
    ctx = AgentContext(home=str(home), env={"PATH": str(tmp_path)}, cwd=str(tmp_path))
    assert agent.launch(ctx).argv == [str(old), "-c", "features.daemon_auto_start=false"]
    assert ctx.notes and "daemon" in ctx.notes[0]  # no config.toml: the daemon would start by default
    ctx = AgentContext(home=str(home), env={"PATH": "/nonexistent"}, cwd=str(tmp_path), config={"binary": str(old)})
    assert agent.launch(ctx).argv[0] == str(old)


def test_codex_home_and_binary_come_from_the_agent_environment(tmp_path):
    ctx = AgentContext(home=str(tmp_path), env={"CODEX_HOME": "~/elsewhere", "PATH": "/nonexistent"})
    assert muxhost_codex.codex_home(ctx) == tmp_path / "elsewhere"
    assert tmp_path / "elsewhere" in CodexAgent().roots(ctx)
    ctx = AgentContext(home=str(tmp_path), env={"CODEX_SQLITE_HOME": "~/sq"})
    assert muxhost_codex.codex_home(ctx) == tmp_path / ".codex"
    assert {tmp_path / ".codex", tmp_path / "sq"} <= set(CodexAgent().roots(ctx))
    ctx = AgentContext(home=str(tmp_path), env={"PATH": "/nonexistent"})
    with pytest.raises(MuxhostError, match="codex is not installed.*npm install -g @openai/codex"):
        CodexAgent().launch(ctx)


# -- discover -------------------------------------------------------------------------------------


def test_discover_falls_back_to_the_newest_unclaimed_top_level_thread_in_cwd(codex, tmp_path):
    work, other = tmp_path / "work", tmp_path / "other"
    work.mkdir()
    other.mkdir()
    codex.configure(work, other)
    old = codex.exec("before launch", work)
    launched = time.time() + 0.01
    time.sleep(1.1)
    first = codex.exec(SPAWN, work)  # with a child thread, which must never be discovered
    second = codex.exec("second", work)
    codex.exec("elsewhere", other)
    assert children_of(codex, first)
    agent = CodexAgent()
    assert agent.discover(ctx_for(codex, work, launched_at=launched)) == second
    assert agent.discover(ctx_for(codex, work, launched_at=launched, claimed=frozenset({second}))) == first
    assert agent.discover(ctx_for(codex, work, launched_at=launched, claimed=frozenset({first, second}))) is None
    assert agent.discover(ctx_for(codex, work, launched_at=0, claimed=frozenset({first, second}))) == old


def test_discover_prefers_the_thread_whose_writer_lock_the_agent_holds(codex, tmp_path):
    work, parent, child = spawned_thread(codex, tmp_path)
    newer = codex.exec("newer", work)
    locks = codex.codex_home / "thread-writer-locks"
    # like a live codex TUI: it holds its own thread's lock and its sub-agent's
    p = holder([], [locks / f"{parent}.lock", locks / f"{child}.lock"])
    try:
        agent = CodexAgent()
        ctx = ctx_for(codex, work, launched_at=0, pids=[p.pid])
        assert agent.discover(ctx) == parent
        assert set(agent.held_threads(ctx)) == {parent, child}
        ctx = ctx_for(codex, work, launched_at=0, pids=[p.pid], claimed=frozenset({parent}))
        assert agent.discover(ctx) is None  # it holds only a claimed thread: no guess from the folder
    finally:
        p.kill()
        p.wait()
    # nothing held (the process is gone): the newest unclaimed thread of the folder
    assert CodexAgent().discover(ctx_for(codex, work, launched_at=0, pids=[p.pid])) == newer


# -- exists / children / in_use ---------------------------------------------------------------------


def test_exists_children_and_in_use(codex, tmp_path):
    from muxhost.testing import tree_hash

    work, parent, child = spawned_thread(codex, tmp_path)
    agent = CodexAgent()
    ctx = ctx_for(codex, work)
    assert agent.exists(ctx, parent) and agent.exists(ctx, child)
    assert not agent.exists(ctx, "01a22bb1-0000-7000-8000-000000000000")
    assert agent.children(ctx, parent) == [child] and agent.children(ctx, child) == []
    assert agent.in_use(ctx, parent) == [] and agent.in_use(ctx, child) == []

    # a stale lock file (what a SIGKILLed codex leaves) holds nothing
    locks = codex.codex_home / "thread-writer-locks"
    locks.mkdir(exist_ok=True)
    (locks / f"{child}.lock").touch()
    assert agent.in_use(ctx, child) == []

    # a live holder of the CHILD's writer lock holds the child; a purge of the parent (which takes
    # the child) is refused before anything changes
    p = holder([], [locks / f"{child}.lock"])
    try:
        (line,) = agent.in_use(ctx, child)
        assert line.startswith(f"pid {p.pid} ") and f"thread-writer-locks/{child}.lock" in line
        assert agent.in_use(ctx, parent) == []  # in_use answers for one thread: the host asks each
        before = tree_hash(codex.codex_home)
        with pytest.raises(Refused, match=f"child conversation {child}: pid {p.pid} "):
            purge(ctx, parent, tmp_path)
        assert tree_hash(codex.codex_home) == before
    finally:
        p.kill()
        p.wait()
    assert agent.in_use(ctx, child) == []

    # the lock open but not locked (codex keeps it open), the rollout open, argv, the environment
    cases = ((lambda: holder([], [locks / f"{child}.lock"], lock=False), f"{child}.lock open"),
             (lambda: holder([], muxhost_codex.rollouts(codex.codex_home, child), lock=False), f"{child}.jsonl open"),
             (lambda: holder(["resume", child]), ""),  # (the line is its command line, cut at 200 characters)
             (lambda: holder([], env={"CODEX_THREAD_ID": child}), f"CODEX_THREAD_ID={child} in its environment"))
    for start, why in cases:
        p = start()
        try:
            lines = agent.in_use(ctx_for(codex, work), child)  # (a context's process table is read once)
            assert len(lines) == 1 and lines[0].startswith(f"pid {p.pid} ") and why in lines[0], (why, lines)
        finally:
            p.kill()
            p.wait()


# -- the purge plan, carried out by the host --------------------------------------------------------


@pytest.mark.parametrize("binary", ["real", "missing", "failing"])
def test_purge_removes_parent_and_child_everywhere_and_nothing_else(codex, tmp_path, binary):
    import shlex

    work, other = tmp_path / "work", tmp_path / "other"
    work.mkdir()
    other.mkdir()
    codex.configure(work, other)
    unrelated = codex.exec(SPAWN, other)
    parent = codex.exec(SPAWN, work)
    (child,) = children_of(codex, parent)
    (unrelated_child,) = children_of(codex, unrelated)
    assert codex.exec("now CREATE-GOAL", work, resume=parent) == parent  # a thread_goals row
    assert codex.exec("and CREATE-GOAL", other, resume=unrelated) == unrelated
    codex.queue(parent, "queued for the parent", work)  # after the resumes: a resume takes the queue
    codex.queue(unrelated, "queued for the unrelated one", other)
    ch = codex.codex_home
    # what a TUI run leaves besides what `codex exec` writes
    with open(ch / "history.jsonl", "ab") as f:
        for sid, text in ((unrelated, "u1"), (parent, "p1"), (unrelated, "u2"), (parent, "p2")):
            f.write(json.dumps({"session_id": sid, "ts": 1, "text": text}).encode() + b"\n")
        f.write(b"not json, keep me\n")
    for tid in (parent, child, unrelated):
        (ch / "shell_snapshots").mkdir(exist_ok=True)
        (ch / "shell_snapshots" / f"{tid}.1796029381870473660.sh").write_text("snapshot\n")
        (ch / "tui-thread-reference-capabilities").mkdir(exist_ok=True)
        (ch / "tui-thread-reference-capabilities" / tid).touch()
        (ch / "thread-writer-locks").mkdir(exist_ok=True)
        (ch / "thread-writer-locks" / f"{tid}.lock").touch()

    ctx = ctx_for(codex, work)
    program = codex.binary
    if binary == "missing":
        program = ctx.config["binary"] = str(tmp_path / "no-such-codex")
    elif binary == "failing":
        failing = tmp_path / "failing-codex"
        failing.write_text("#!/bin/sh\necho 'Error: failed to delete session' >&2\necho '   0: <unknown>' >&2\nexit 1\n")
        failing.chmod(0o755)
        program = ctx.config["binary"] = str(failing)
    plan = purge(ctx, parent, tmp_path, dry_run=True).plan
    kid = f" [child conversation {child}]"

    def has(*parts: str, of_child: bool = False) -> bool:
        return any(all(p in line for p in parts) and line.endswith(kid) == of_child for line in plan)

    assert has("~/.codex/sessions/", f"-{parent}.jsonl") and has("~/.codex/sessions/", f"-{child}.jsonl", of_child=True)
    assert has(f"threads:{parent} (1 row in ~/.codex/state_5.sqlite)")
    assert has(f"threads:{child} (1 row in ~/.codex/state_5.sqlite)", of_child=True)
    for table, db in (("queued_items", "queue_1"), ("queued_thread_revisions", "queue_1"), ("thread_goals", "goals_1")):
        assert has(f"{table}:{parent} (", f" in ~/.codex/{db}.sqlite)"), (table, plan)
    assert "~/.codex/history.jsonl: 2 lines" in plan
    assert f"~/.codex/tui-thread-reference-capabilities/{parent}" in plan
    assert f"~/.codex/thread-writer-locks/{child}.lock{kid}" in plan
    # codex's own delete, once: it deletes the sub-agents with their parent
    deletes = [line for line in plan if line.startswith("run: ")]
    assert deletes == ["run: " + shlex.join([program, "delete", "--force", *muxhost_codex.DAEMON_OFF, parent])]
    assert not any(unrelated in a or unrelated_child in a for a in plan)

    ids = {parent, child}
    before = codex.snapshot(ids)
    report = purge(ctx, parent, tmp_path)
    assert report.residual == [] and report.complete
    assert set(plan) - set(deletes) <= set(report.removed)
    if binary == "real":
        assert report.removed[0] == "ran: " + deletes[0][len("run: "):]
        assert report.notes == []
    else:  # the rest of the plan removes what codex's delete would have
        why = "could not run (FileNotFoundError" if binary == "missing" else "exited 1 (Error: failed to delete session)"
        assert len(report.notes) == 1 and why in report.notes[0], report.notes
        assert not any(line.startswith("ran: ") for line in report.removed)
    assert codex.mentions(ids) == []  # no row, no file name, no byte (the databases are compacted)
    codex.assert_intact(before, codex.snapshot(ids))  # every unrelated row, file and line intact
    assert [json.loads(x)["text"] for x in codex.lines("history.jsonl")[:-1]] == ["u1", "u2"]
    assert codex.lines("history.jsonl")[-1] == b"not json, keep me"
    agent = CodexAgent()
    assert agent.exists(ctx, unrelated) and agent.exists(ctx, unrelated_child)
    assert not agent.exists(ctx, parent) and not agent.exists(ctx, child)
    assert agent.artifacts(ctx, unrelated)


def test_purging_a_sub_agent_alone_keeps_its_parent(codex, tmp_path):
    """`purge --conversation CHILD`: the sub-agent goes (rows, rollout, spawn edge), its parent stays
    whole and resumable; no `codex delete` (the rows and files are removed directly)."""
    work, parent, child = spawned_thread(codex, tmp_path)
    ctx = ctx_for(codex, work)
    (parent_rollout,) = muxhost_codex.rollouts(codex.codex_home, parent)
    kept = parent_rollout.read_bytes()
    report = purge(ctx, child, tmp_path)
    assert report.residual == [] and report.notes == [] and not any(r.startswith("ran: ") for r in report.removed)
    assert any(f"thread_spawn_edges:{child} (" in r for r in report.removed)
    agent = CodexAgent()
    assert not agent.exists(ctx, child) and agent.children(ctx, parent) == []
    assert agent.exists(ctx, parent) and parent_rollout.read_bytes() == kept
    assert codex.query("state_5.sqlite", "select count(*) from threads where id = ?", (parent,)) == [(1,)]


def test_shared_files_keep_their_symlink_and_wait_for_codexs_own_lock(codex, tmp_path):
    """history.jsonl as a symlink stays one (its target loses the thread's lines, every other byte
    kept); session_index.jsonl is rewritten only once codex's own session_index.jsonl.lock is free."""
    work = tmp_path / "work"
    work.mkdir()
    codex.configure(work)
    tid, other = codex.exec("mine", work), codex.exec("not mine", work)
    ch = codex.codex_home

    def lines(key: str) -> bytes:
        return b"".join(json.dumps({key: t, "n": n}).encode() + b"\n" for n, t in enumerate((other, tid, other)))

    shared = ch / "shared" / "history.jsonl"
    shared.parent.mkdir()
    shared.write_bytes(lines("session_id") + b"no newline at the end")
    (ch / "history.jsonl").unlink(missing_ok=True)
    (ch / "history.jsonl").symlink_to(shared)
    index = ch / "session_index.jsonl"
    index.write_bytes(lines("id"))
    ctx = ctx_for(codex, work, config={"binary": str(tmp_path / "none")})  # no `codex delete`: only the lock waits
    p = holder([], [ch / "session_index.jsonl.lock"], seconds=2)
    try:
        t = time.monotonic()
        report = purge(ctx, tid, tmp_path)
        assert time.monotonic() - t >= 1.5, "session_index.jsonl was rewritten while codex held its lock"
    finally:
        p.kill()
        p.wait()
    assert report.residual == []
    assert (ch / "history.jsonl").is_symlink() and os.readlink(ch / "history.jsonl") == str(shared)
    expected = lines("session_id").replace(json.dumps({"session_id": tid, "n": 1}).encode() + b"\n", b"")
    assert shared.read_bytes() == expected + b"no newline at the end"
    assert index.read_bytes() == lines("id").replace(json.dumps({"id": tid, "n": 1}).encode() + b"\n", b"")


def test_purge_without_any_database_or_binary(codex, tmp_path):
    """Only files left (databases gone): the rollouts' session_meta still names the children."""
    work, parent, child = spawned_thread(codex, tmp_path)
    for db in codex.codex_home.glob("*.sqlite*"):
        db.unlink()
    agent = CodexAgent()
    ctx = ctx_for(codex, work, config={"binary": str(tmp_path / "none")})
    assert agent.exists(ctx, parent) and agent.children(ctx, parent) == [child]
    plan = purge(ctx, parent, tmp_path, dry_run=True).plan
    assert any(a.endswith(f"[child conversation {child}]") for a in plan)
    assert purge(ctx, parent, tmp_path).residual == []
    assert codex.mentions({parent, child}) == []


def test_purge_of_leftovers_only(codex, tmp_path):
    """A TUI killed before its first prompt leaves files but no rollout and no row: no `codex delete`
    (it would fail), the files still go."""
    work = tmp_path / "work"
    work.mkdir()
    codex.configure(work)
    tid = "01a22bb5-92c5-7ce1-af7a-2003bdb69104"
    for rel in (f"tui-thread-reference-capabilities/{tid}", f"thread-writer-locks/{tid}.lock",
                f"shell_snapshots/{tid}.1796029381870473660.sh"):
        (codex.codex_home / rel).parent.mkdir(parents=True, exist_ok=True)
        (codex.codex_home / rel).touch()
    ctx = ctx_for(codex, work)
    assert not CodexAgent().exists(ctx, tid)
    assert len(purge(ctx, tid, tmp_path, dry_run=True).plan) == 3
    report = purge(ctx, tid, tmp_path)
    assert len(report.removed) == 3 and not any("delete" in r for r in report.removed)
    assert report.notes == [] and report.residual == []


def test_databases_under_codex_sqlite_home(codex, tmp_path):
    """$CODEX_SQLITE_HOME moves codex's databases out of CODEX_HOME: they are read and purged there."""
    import sqlite3

    work, sq = tmp_path / "work", tmp_path / "sq"
    work.mkdir()
    sq.mkdir()
    codex.env["CODEX_SQLITE_HOME"] = str(sq)
    codex.configure(work)
    parent = codex.exec(SPAWN, work)
    assert not list(codex.codex_home.glob("*.sqlite")) and (sq / "state_5.sqlite").exists()
    con = sqlite3.connect(f"file:{sq / 'state_5.sqlite'}?mode=ro", uri=True)
    (child,) = [r[0] for r in con.execute("select child_thread_id from thread_spawn_edges")]
    con.close()
    ctx = ctx_for(codex, work)
    assert CodexAgent().exists(ctx, parent)
    plan = purge(ctx, parent, tmp_path, dry_run=True).plan
    assert f"threads:{parent} (1 row in {sq}/state_5.sqlite)" in plan
    assert f"threads:{child} (1 row in {sq}/state_5.sqlite) [child conversation {child}]" in plan
    assert purge(ctx, parent, tmp_path).residual == []
    for db in sq.glob("*.sqlite*"):
        assert parent.encode() not in db.read_bytes() and child.encode() not in db.read_bytes(), db


def test_toml_fallback_reads_the_keys_we_need():
    cfg = muxhost_codex._toml_fallback(
        'model = "m"  # comment\nsqlite_home = "/x/y"\n[features]\ndaemon_auto_start = false\n'
        '[projects."/a b"]\ntrust_level = "trusted"\n')
    assert cfg["sqlite_home"] == "/x/y" and cfg["features"]["daemon_auto_start"] is False


def test_an_unreadable_database_is_never_reported_clean(tmp_path):
    """What cannot be read cannot be called gone: it shows in the plan and stays in the residual."""
    home = tmp_path / "home"
    (home / ".codex" / "tui-thread-reference-capabilities").mkdir(parents=True)
    tid = "01a22bb5-92c5-7ce1-af7a-2003bdb69104"
    (home / ".codex" / "tui-thread-reference-capabilities" / tid).touch()
    (home / ".codex" / "state_5.sqlite").write_bytes(b"this is not a database" * 100)
    ctx = AgentContext(home=str(home), env={"PATH": "/nonexistent"}, cwd=str(tmp_path))
    plan = purge(ctx, tid, tmp_path, dry_run=True).plan
    assert any(a.startswith("~/.codex/state_5.sqlite (could not be read:") for a in plan), plan
    residual = purge(ctx, tid, tmp_path).residual
    assert len(residual) == 1 and residual[0].startswith("~/.codex/state_5.sqlite (could not be read:")
    assert not (home / ".codex" / "tui-thread-reference-capabilities" / tid).exists()


def test_remote_argument_is_noted(tmp_path):
    fake = tmp_path / "codex"
    fake.write_text("#!/bin/sh\necho '      --no-daemon'\n")
    fake.chmod(0o755)
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    (home / ".codex" / "config.toml").write_text("[features]\ndaemon_auto_start = true\n")
    ctx = AgentContext(home=str(home), env={"PATH": str(tmp_path)}, cwd=str(tmp_path), args=["--remote", "ws://x:1"])
    assert CodexAgent().launch(ctx).argv == [str(fake), "--no-daemon", "--remote", "ws://x:1"]
    assert "sets features.daemon_auto_start = true" in ctx.notes[0]
    assert "--remote" in ctx.notes[1]
