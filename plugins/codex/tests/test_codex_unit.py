"""CodexAgent's methods called directly (no tmux): threads made by the real ``codex exec`` against the
fake Responses server, in a private CODEX_HOME."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
import time

import pytest

import muxhost_codex
from muxhost import AgentContext, MuxhostError
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


def holder(args: list[str], lock_paths=()) -> subprocess.Popen:
    """A python process that opens and flocks ``lock_paths`` (like codex does), then sleeps;
    ``args`` end up in its argv."""
    code = ("import fcntl, sys, time\n"
            "fs = [open(p, 'a+') for p in sys.argv[1].split(',') if p]\n"
            "[fcntl.flock(f, fcntl.LOCK_EX) for f in fs]\n"
            "print('locked', flush=True)\n"
            "time.sleep(60)\n")
    p = subprocess.Popen([sys.executable, "-c", code, ",".join(str(x) for x in lock_paths), *args],
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "locked"
    return p


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
    ctx = AgentContext(home=str(tmp_path), env={})
    assert muxhost_codex.codex_home(ctx) == tmp_path / ".codex"
    ctx = AgentContext(home=str(tmp_path), env={"PATH": "/nonexistent"})
    assert muxhost_codex.find_binary(ctx) is None
    with pytest.raises(MuxhostError, match="cannot find codex"):
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


# -- exists / in_use --------------------------------------------------------------------------------


def test_exists_and_in_use(codex, tmp_path, monkeypatch):
    work, parent, child = spawned_thread(codex, tmp_path)
    agent = CodexAgent()
    ctx = ctx_for(codex, work)
    assert agent.exists(ctx, parent) and agent.exists(ctx, child)
    assert not agent.exists(ctx, "01a22bb1-0000-7000-8000-000000000000")
    assert agent.in_use(ctx, parent) == []

    # a stale lock file (what a SIGKILLed codex leaves) holds nothing
    locks = codex.codex_home / "thread-writer-locks"
    locks.mkdir(exist_ok=True)
    (locks / f"{child}.lock").touch()
    assert agent.in_use(ctx, parent) == []

    # a live holder of the CHILD's writer lock makes the parent in use (purging it deletes the child)
    p = holder([], [locks / f"{child}.lock"])
    try:
        lines = agent.in_use(ctx, parent)
        assert len(lines) == 1 and lines[0].startswith(f"pid {p.pid} ") and f"{child}.lock" in lines[0]
        # fail closed: locked, but the holder cannot be seen
        monkeypatch.setattr(muxhost_codex, "_holders_of", lambda paths: ({}, True))
        assert any("cannot see" in line for line in agent.in_use(ctx, parent))
        monkeypatch.setattr(muxhost_codex, "lock_state", lambda path: None)
        with pytest.raises(RuntimeError):
            agent.in_use(ctx, parent)
        monkeypatch.undo()
    finally:
        p.kill()
        p.wait()
    assert agent.in_use(ctx, parent) == []

    # argv naming the id
    p = holder(["resume", parent])
    try:
        lines = agent.in_use(ctx, parent)
        assert any(line.startswith(f"pid {p.pid} ") for line in lines)
    finally:
        p.kill()
        p.wait()


# -- artifacts / purge ----------------------------------------------------------------------------


@pytest.mark.parametrize("binary", ["real", "missing", "failing"])
def test_purge_removes_parent_and_child_everywhere_and_nothing_else(codex, tmp_path, binary):
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

    agent = CodexAgent()
    ctx = ctx_for(codex, work)
    if binary == "missing":
        ctx.config["binary"] = str(tmp_path / "no-such-codex")
    elif binary == "failing":
        failing = tmp_path / "failing-codex"
        failing.write_text("#!/bin/sh\necho 'Error: failed to delete session' >&2\necho '   0: <unknown>' >&2\nexit 1\n")
        failing.chmod(0o755)
        ctx.config["binary"] = str(failing)
    plan = agent.artifacts(ctx, parent)
    suffix = f" [child thread {child}]"
    assert any(a.startswith("~/.codex/sessions/") and parent in a and not a.endswith("]") for a in plan)
    assert any(a.startswith("~/.codex/sessions/") and a.endswith(suffix) for a in plan)
    assert f"threads:{parent}" in plan and f"threads:{child}{suffix}" in plan
    assert f"queued_items:{parent}" in plan and f"queued_thread_revisions:{parent}" in plan
    assert f"thread_goals:{parent}" in plan
    assert f"~/.codex/history.jsonl (2 lines of {parent})" in plan
    assert f"~/.codex/tui-thread-reference-capabilities/{parent}" in plan
    assert f"~/.codex/thread-writer-locks/{child}.lock{suffix}" in plan
    assert not any(unrelated in a for a in plan)

    ids = {parent, child}
    before = codex.snapshot(ids)
    removed = agent.purge(ctx, parent)
    assert agent.artifacts(ctx, parent) == []
    assert set(plan) <= set(removed)
    if binary == "real":
        assert removed[0] == f"codex delete --force {parent}"
        assert not any("fallback" in n for n in ctx.notes)
        # codex 0.171.0 deletes the queued items, and its own trigger writes the revision row back
        assert any("left rows in queued_thread_revisions" in n for n in ctx.notes), ctx.notes
    elif binary == "missing":
        assert any("not found" in n and "fallback" in n for n in ctx.notes)
    else:
        assert any("failed (exit 1: Error: failed to delete session)" in n and "fallback" in n for n in ctx.notes)
    assert codex.mentions(ids) == []  # no row, no file name, no byte (the databases are compacted)
    codex.assert_intact(before, codex.snapshot(ids))  # every unrelated row, file and line intact
    assert [json.loads(x)["text"] for x in codex.lines("history.jsonl")[:-1]] == ["u1", "u2"]
    assert codex.lines("history.jsonl")[-1] == b"not json, keep me"
    assert agent.exists(ctx, unrelated) and agent.exists(ctx, unrelated_child)
    assert not agent.exists(ctx, parent) and not agent.exists(ctx, child)
    assert agent.artifacts(ctx, unrelated)


def test_purge_without_any_database_or_binary(codex, tmp_path):
    """Only files left (databases gone): the rollouts' session_meta still names the children."""
    work, parent, child = spawned_thread(codex, tmp_path)
    for db in codex.codex_home.glob("*.sqlite*"):
        db.unlink()
    agent = CodexAgent()
    ctx = ctx_for(codex, work, config={"binary": str(tmp_path / "none")})
    assert agent.exists(ctx, parent)
    plan = agent.artifacts(ctx, parent)
    assert any(a.endswith(f"[child thread {child}]") for a in plan)
    agent.purge(ctx, parent)
    assert agent.artifacts(ctx, parent) == []
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
    agent = CodexAgent()
    ctx = ctx_for(codex, work)
    assert not agent.exists(ctx, tid)
    assert len(agent.artifacts(ctx, tid)) == 3
    removed = agent.purge(ctx, tid)
    assert len(removed) == 3 and not any("codex delete" in r for r in removed)
    assert ctx.notes == [] and agent.artifacts(ctx, tid) == []


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
    agent = CodexAgent()
    ctx = ctx_for(codex, work)
    assert agent.exists(ctx, parent)
    plan = agent.artifacts(ctx, parent)
    assert f"threads:{parent}" in plan and f"threads:{child} [child thread {child}]" in plan
    agent.purge(ctx, parent)
    assert agent.artifacts(ctx, parent) == []
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
    agent = CodexAgent()
    ctx = AgentContext(home=str(home), env={"PATH": "/nonexistent"}, cwd=str(tmp_path))
    plan = agent.artifacts(ctx, tid)
    assert any(a.startswith("~/.codex/state_5.sqlite (could not be read:") for a in plan), plan
    agent.purge(ctx, tid)
    residual = agent.artifacts(ctx, tid)
    assert len(residual) == 1 and residual[0].startswith("~/.codex/state_5.sqlite (could not be read:")


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
