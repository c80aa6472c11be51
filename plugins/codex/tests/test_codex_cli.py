"""The real codex TUI in a real tmux pane, driven through the muxhost CLI (launch, ls, show, stop,
resume, purge), against the fake Responses server and a private CODEX_HOME."""

from __future__ import annotations

import os
import signal

import psutil

from muxhost.procs import same_process
from muxhost.testing import wait_for

READY = ("? for shortcuts", "Ask Codex to do anything")


def wait_ready(mux, pane: str) -> str:
    try:
        return wait_for(lambda: (lambda s: s if any(r in s for r in READY) else None)(mux.capture(pane)),
                        timeout=30, what=f"codex ready on pane {pane}")
    except AssertionError as e:
        raise AssertionError(f"{e}; the screen:\n{mux.capture(pane)}") from None


def record(mux, rid: str, all_records: bool = True) -> dict:
    args = ("ls", "--all", "--json") if all_records else ("ls", "--json")
    return next(r for r in mux.ok(*args) if r["id"] == rid)


def processes(pids) -> list[tuple[int, float]]:
    out = []
    for pid in pids:
        try:
            out.append((pid, psutil.Process(pid).create_time()))
        except psutil.Error:
            pass
    return out


def launch(mux, cwd) -> tuple[str, str]:
    rec = mux.ok("launch", "codex", "--cwd", str(cwd), "--json")
    assert rec["agent"] == "codex" and rec["state"] == "running"
    assert "--no-daemon" in rec["argv"]
    wait_ready(mux, rec["pane"])
    return rec["id"], rec["pane"]


def prompt(mux, cx, pane: str, text: str) -> None:
    mux.type(pane, text, pause=0.6)  # codex takes text followed at once by Enter as a paste
    wait_for(lambda: any(text in t for t in cx.server.user_texts()), timeout=30, what=f"the model asked {text!r}")


def test_a_tui_thread_and_its_sub_agent_leave_no_trace(mux, mux_codex, tmp_path):
    """What the contract suite (test_codex_contract.py) does not check: the id is known before the
    first prompt; the sub-agent never becomes the record's conversation and is held by the TUI too;
    the wrapper pair stops together; `codex delete` runs and the plan takes what it leaves (queued
    rows); afterwards no row, file name or byte anywhere names either id, and every unrelated row,
    file and line is intact."""
    cx = mux_codex
    work, other = tmp_path / "work", tmp_path / "other"
    work.mkdir()
    other.mkdir()
    cx.configure(work, other)
    locks = cx.codex_home / "thread-writer-locks"

    # unrelated conversations that must survive: one from `codex exec` (with its own sub-agent) and
    # one from a TUI in the same folder (a history.jsonl line, a capabilities file)
    unrelated_exec = cx.exec("unrelated SPAWN-CHILD", other)
    (unrelated_child,) = [r[0] for r in cx.query(
        "state_5.sqlite", "select child_thread_id from thread_spawn_edges where parent_thread_id = ?", (unrelated_exec,))]
    urid, upane = launch(mux, work)
    prompt(mux, cx, upane, "unrelated hello")
    mux.wait_screen(upane, "fake reply")
    unrelated_tui = wait_for(lambda: record(mux, urid)["conversation_id"], what="the unrelated thread id")
    assert mux.ok("stop", urid, "--json")["outcome"] == "exit"
    unrelated = {unrelated_exec, unrelated_child, unrelated_tui}

    # launch: the id is known before the first prompt (the TUI holds its writer lock from the start)
    rid, pane = launch(mux, work)
    cid = wait_for(lambda: record(mux, rid, all_records=False)["conversation_id"], timeout=15,
                   what="ls to discover the conversation id")
    assert cid not in unrelated
    assert (locks / f"{cid}.lock").exists()

    # prompt: the fake model answers with a multi_agent_v1.spawn_agent call, codex starts a sub-agent
    prompt(mux, cx, pane, "hello SPAWN-CHILD please")
    child = wait_for(lambda: [r[0] for r in cx.query(
        "state_5.sqlite", "select child_thread_id from thread_spawn_edges where parent_thread_id = ?", (cid,))],
        timeout=30, what="the sub-agent's spawn edge")[0]
    wait_for(lambda: child in cx.server.threads_asked(), timeout=30, what="the sub-agent to ask the model")
    mux.wait_screen(pane, "fake reply")
    assert record(mux, rid, all_records=False)["conversation_id"] == cid  # the parent, never the child

    # the sub-agent alone is held by the same TUI: refused (4), nothing touched
    r = mux.run("purge", "--agent", "codex", "--conversation", child, "--yes", "--json")
    assert r.rc == 4 and f"{child}.lock" in r.err, r
    assert list(cx.codex_home.glob(f"sessions/**/rollout-*-{child}.jsonl"))

    # stop: the exit text ends the wrapper (node) and the native codex
    procs = processes(mux.ok("show", rid, "--json")["pids"])
    assert {"node", "codex"} <= {psutil.Process(pid).name() for pid, _ in procs}
    assert mux.ok("stop", rid, "--json")["outcome"] == "exit"
    assert not [k for k in procs if same_process(*k)]

    # purge: `codex delete` first, then what it leaves; parent and child gone everywhere
    cx.queue(cid, "queued before the purge", work)  # rows in queue_1.sqlite as well
    ids = {cid, child}
    before = cx.snapshot(ids)
    plan = mux.ok("purge", rid, "--dry-run", "--json")["plan"]
    assert any(line.startswith(f"threads:{child} (") and line.endswith(f"[child conversation {child}]") for line in plan)
    assert not any(u in line for line in plan for u in unrelated)
    report = mux.ok("purge", rid, "--yes", "--json")
    assert report["agent"] == "codex" and report["conversation_id"] == cid
    assert report["complete"] is True and report["residual"] == [] and report["notes"] == []
    assert report["removed"][0].startswith("ran: ") and report["removed"][0].endswith(f" delete --force "
                                                                                      f"-c features.daemon_auto_start=false {cid}")
    for table in ("queued_items", "queued_thread_revisions"):  # codex's delete trigger writes the revision back
        assert any(line.startswith(f"{table}:{cid} (") for line in report["removed"]), (table, report["removed"])
    assert cx.mentions(ids) == []
    # what was typed is gone too, from every table and file (the databases are compacted)
    assert cx.mentions({"hello SPAWN-CHILD please", "queued before the purge"}) == []
    cx.assert_intact(before, cx.snapshot(ids))
    assert any(str(unrelated_tui) in ln.decode() for ln in cx.lines("history.jsonl"))
    r = mux.run("purge", rid, "--yes", "--json")
    assert r.rc == 3, r
    assert record(mux, urid)["resumable"] is True


def codex_home_of(p: psutil.Process) -> str | None:
    """The CODEX_HOME in a process's environment (None when it has none or cannot be read)."""
    try:
        return p.environ().get("CODEX_HOME")
    except psutil.Error:
        return None


def test_stop_finds_the_native_codex_after_its_wrapper_was_killed(mux, mux_codex, tmp_path):
    """SIGKILL of the node wrapper re-parents the native codex to init; the stop ladder still ends it
    (MUXHOST_RECORD is in its environment). The native one is stopped first, so it cannot notice
    its wrapper go and exit by itself."""
    cx = mux_codex
    work = tmp_path / "work"
    work.mkdir()
    cx.configure(work, daemon=True)  # would start a detached daemon: launch must still run in-process
    r = mux.run("launch", "codex", "--cwd", str(work), "--json")
    assert r.rc == 0, r
    assert "daemon" in r.err and "--no-daemon" in r.err  # the warning line
    rid, pane = r.json["id"], r.json["pane"]
    wait_ready(mux, pane)
    prompt(mux, cx, pane, "hello before the kill")
    mux.wait_screen(pane, "fake reply")
    cid = record(mux, rid, all_records=False)["conversation_id"]
    assert cid
    wrapper = psutil.Process(r.json["pids"][0])
    (native,) = [p for p in wrapper.children(recursive=True) if p.name() == "codex"]
    assert wrapper.name() == "node"
    assert not [p for p in psutil.process_iter(["cmdline"]) if "app-server" in (p.info["cmdline"] or [])
                and codex_home_of(p) == str(cx.codex_home)]  # (this test's: another test may run codex now)
    native_key = (native.pid, native.create_time())
    wrapper_key = (wrapper.pid, wrapper.create_time())

    os.kill(native.pid, signal.SIGSTOP)
    os.kill(wrapper.pid, signal.SIGKILL)
    wait_for(lambda: not same_process(*wrapper_key), what="the wrapper to die")
    wait_for(lambda: native.ppid() != wrapper.pid, what="the native codex to be re-parented")
    assert same_process(*native_key)  # orphaned, still there

    stopped = mux.ok("stop", rid, "--json")
    assert stopped["outcome"] in ("hup", "term", "kill"), stopped
    assert not same_process(*native_key)

    # a killed codex leaves its lock file and shell snapshot behind: stale, not in use, and purged
    ch = cx.codex_home
    assert (ch / "thread-writer-locks" / f"{cid}.lock").exists()
    assert list((ch / "shell_snapshots").glob(f"{cid}.*"))
    report = mux.ok("purge", rid, "--yes", "--json")
    assert report["complete"] and f"~/.codex/thread-writer-locks/{cid}.lock" in report["removed"]
    assert any(x.startswith(f"~/.codex/shell_snapshots/{cid}.") for x in report["removed"])
    assert cx.mentions({cid}) == []


def test_purge_pane_of_a_codex_started_by_hand(mux, mux_codex, tmp_path):
    """A codex the user started in a shell pane (no record): `purge --pane` finds it by its process
    names (node wrapper and native), refuses while it runs, and with --stop ends it and purges;
    the user's shell stays."""
    cx = mux_codex
    work = tmp_path / "work"
    work.mkdir()
    cx.configure(work)
    env = {k: cx.env[k] for k in ("HOME", "CODEX_HOME", "PATH", "FAKE_API_KEY")}
    args = ["new-session", "-d", "-P", "-F", "#{pane_id}", "-s", "byhand", "-x", "120", "-y", "40", "-c", str(work)]
    for k, v in env.items():
        args += ["-e", f"{k}={v}"]
    # tmux gives a new pane the PATH of the client that asked for it, whatever -e says: pass it with env
    (pane,) = mux.tmux(*args, "env", f"PATH={env['PATH']}", "/bin/sh")
    shell = psutil.Process(int(mux.tmux("display", "-p", "-t", pane, "#{pane_pid}")[0]))
    mux.type(pane, "codex --no-daemon")
    wait_ready(mux, pane)
    prompt(mux, cx, pane, "hello by hand")
    mux.wait_screen(pane, "fake reply")
    cid = wait_for(lambda: [r[0] for r in cx.query("state_5.sqlite", "select id from threads")], what="a thread")[0]
    tree = [(p.pid, p.create_time()) for p in shell.children(recursive=True)]
    assert len(tree) == 2  # node wrapper and native codex

    r = mux.run("purge", "--pane", pane, "--yes", "--json")
    assert r.rc == 4, r
    assert f"{cid}.lock" in r.err
    report = mux.ok("purge", "--pane", pane, "--stop", "--yes", "--json")
    assert report["conversation_id"] == cid and report["complete"] and report["residual"] == []
    assert not [k for k in tree if same_process(*k)]
    assert shell.is_running() and shell.status() != psutil.STATUS_ZOMBIE  # the user's shell is left alone
    assert cx.mentions({cid}) == []


def test_new_thread_in_the_same_tui_is_discovered(mux, mux_codex, tmp_path):
    """`/new` in the TUI starts another thread; codex keeps the first one's lock and rollout open
    too. ls follows to the new thread; the first stays in use until the TUI ends."""
    cx = mux_codex
    work = tmp_path / "work"
    work.mkdir()
    cx.configure(work)
    rid, pane = launch(mux, work)
    first = wait_for(lambda: record(mux, rid, all_records=False)["conversation_id"], what="the first thread")
    prompt(mux, cx, pane, "in the first thread")
    mux.wait_screen(pane, "fake reply")
    mux.type(pane, "/new", pause=0.6)
    second = wait_for(lambda: (lambda c: c if c and c != first else None)(
        record(mux, rid, all_records=False)["conversation_id"]), timeout=20, what="ls to follow /new")
    r = mux.run("purge", "--agent", "codex", "--conversation", first, "--yes", "--json")
    assert r.rc == 4 and f"{first}.lock" in r.err, r
    assert mux.ok("stop", rid, "--json")["outcome"] == "exit"
    assert record(mux, rid)["conversation_id"] == second
    report = mux.ok("purge", "--agent", "codex", "--conversation", first, "--yes", "--json")
    assert report["complete"] and cx.mentions({first}) == []


def test_a_launch_whose_codex_exits_at_once_fails_and_says_why(mux, mux_codex, tmp_path):
    """`launch codex -- --ask-for-approval untrusted`: codex refuses the value and exits 2 at once;
    the launch says so (exit 1, its status and last lines) instead of "launched"."""
    work = tmp_path / "work"
    work.mkdir()
    r = mux.run("launch", "codex", "--cwd", str(work), "--", "--ask-for-approval", "untrusted")
    error = r.err.splitlines()[-1]  # (after the plugin's own warnings, if any)
    assert r.rc == 1 and error.startswith("muxhost: codex exited at once (status 2): "), r
    assert "untrusted" in error, error
    rec = mux.ok("ls", "--all", "--json")[-1]
    assert rec["agent"] == "codex" and rec["state"] == "exited"
