"""The real claude binary, in real tmux panes, through the muxhost CLI (issue 3, point 6).

Needs the ``claude`` CLI (``.ci/run`` installs it; ``$MUXHOST_AGENT_BIN_DIR``): in CI a missing binary
fails, elsewhere these tests skip and say why. The model is the fake server of conftest.py.
What every plugin must do (launch, stop, resume, purge while running, dry run, purge, neighbour, bad
id, in use outside muxhost, sub-agents) is test_claude_contract.py; here is what is claude's own.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from muxhost.testing import wait_for
from muxhost_claude import ClaudeAgent, project_folder_name

# the words conftest.FakeAnthropic reacts to (conftest is not importable by name)
MAKE_STUFF = "MUXHOST_MAKE_STUFF"
CREATED_FILE = "made-by-claude.txt"
SUB_FILE = "made-by-subagent.txt"
FAKE_REPLY = "hello, I am a fake model"


def _env_of(p) -> dict:
    try:
        return p.environ()
    except Exception:
        return {}


def _paths_naming(root: Path, *ids: str) -> list[str]:
    return sorted(os.path.join(d, n) for d, dirs, files in os.walk(root) for n in dirs + files
                  if any(i in n for i in ids))


def test_folder_encoding_matches_the_binary(claude_world, tmp_path):
    """claude -p in odd and over-200-character cwds: the folder it makes is project_folder_name()."""
    w = claude_world
    cwds = [w.work / "a b.c_d", w.work / "ünï😀 x", w.work / ("x" * 110) / ("y.z" * 40)]
    for cwd in cwds:
        cwd.mkdir(parents=True)
        p = subprocess.run([w.binary, "-p", "hello"], cwd=cwd, env=w.mux.env, capture_output=True, text=True,
                           timeout=60, stdin=subprocess.DEVNULL)
        assert p.returncode == 0, p.stderr
        assert FAKE_REPLY in p.stdout
        expected = project_folder_name(os.path.realpath(cwd))
        assert [d.name for d in (w.config_dir / "projects").iterdir() if d.name == expected] == [expected], \
            sorted(d.name for d in (w.config_dir / "projects").iterdir())
        transcripts = list((w.config_dir / "projects" / expected).glob("*.jsonl"))
        assert len(transcripts) == 1
        agent = ClaudeAgent()
        ctx = w.ctx(cwd)
        cid = transcripts[0].stem
        assert agent.exists(ctx, cid)
        assert agent.resume(ctx, cid).argv[-2:] == ["--resume", cid]
    assert len(project_folder_name(os.path.realpath(cwds[2]))) > 200
    assert "----" in project_folder_name(str(cwds[1]))  # one dash per UTF-16 unit: 😀 is two


def _plan(mux, cid: str) -> list[str]:
    return mux.ok("purge", "--agent", "claude", "--conversation", cid, "--dry-run", "--json")["plan"]


def test_scenario(claude_world):
    """What the contract suite (test_claude_contract.py) does not check: the id launch chooses is the one
    claude uses; a turn that writes a file, makes a task and runs a sub-agent lays its files out where
    the plan looks; ``/clear`` is followed; both ids are refused while the pane runs one of them; the
    purge rewrites history.jsonl and .claude.json minus exactly our lines and members; nothing else moves."""
    w = claude_world
    mux = w.mux
    agent = ClaudeAgent()
    cwd = w.work / "proj dir.x"
    cwd.mkdir()

    # a second conversation in the same cwd, made first: it must come through the purge untouched
    other_id = w.one_turn(cwd, "hello other", FAKE_REPLY)["conversation_id"]

    # 1. launch: the record knows its conversation from the first second, and claude uses that id
    rec = w.launch(cwd)
    ref, id1 = rec["id"], rec["conversation_id"]
    assert agent.valid_id(id1) and id1 != other_id
    assert rec["argv"][-2:] == ["--session-id", id1]

    # 2. a prompt: the fake model writes a file, creates a task, runs a sub-agent (which writes a file)
    w.say(rec["pane"], f"please {MAKE_STUFF} now", "all done", timeout=60)
    assert (cwd / CREATED_FILE).read_text() == "hello from claude\n"
    assert (cwd / SUB_FILE).exists()
    enc = project_folder_name(str(cwd))
    folder = w.config_dir / "projects" / enc
    assert (folder / f"{id1}.jsonl").is_file()
    assert list((folder / id1 / "subagents").glob("agent-*.jsonl")), "the sub-agent's transcript"
    assert list((w.config_dir / "tasks" / id1).glob("*.json")), "the task"
    sub_requests = [r for r in w.server.requests if "MUXHOST_SUBAGENT_WORK" in json.dumps(r["body"].get("messages"))]
    assert sub_requests, "the sub-agent talked to the fake server"
    assert any(r["headers"].get("X-Claude-Code-Session-Id") == id1 for r in w.server.requests)
    held = agent.in_use(w.ctx(cwd), id1)
    assert held and all(h.startswith("pid ") for h in held)

    # 3. /clear: the record follows the new conversation
    mux.type(rec["pane"], "/clear")
    id2 = wait_for(lambda: (lambda r: r["conversation_id"] if r["conversation_id"] != id1 else None)(
        next(r for r in mux.ok("ls", "--json") if r["id"] == ref)), timeout=30, what="ls follows /clear")
    assert agent.valid_id(id2) and id2 not in (id1, other_id)
    w.say(rec["pane"], "after clear", FAKE_REPLY)
    assert (folder / f"{id2}.jsonl").is_file()

    # 4. purge while running: exit 4 and nothing touched, for id1 too (only the pane's argv names it now)
    # (.claude.json: the running claude rewrites its UI state there when it likes, e.g. some seconds after
    # /clear; what a purge would take from it, the lastSessionId, is compared instead)
    roots = [w.home, w.work, w.tmpdir]
    gcfg = w.home / ".claude.json"
    before = w.quiet_hash(*roots, skip=(".claude.json",))
    last = json.loads(gcfg.read_bytes())["projects"][str(cwd)]["lastSessionId"]
    for args in (("purge", ref, "--yes", "--json"),
                 ("purge", "--agent", "claude", "--conversation", id2, "--yes", "--json"),
                 ("purge", "--agent", "claude", "--conversation", id1, "--yes", "--json")):
        r = mux.run(*args)
        assert r.rc == 4, (args, r)
        assert r.err.startswith("muxhost:") and "\n" not in r.err.strip(), r.err
    assert w.tree_hash(*roots, skip=(".claude.json",)) == before
    assert json.loads(gcfg.read_bytes())["projects"][str(cwd)]["lastSessionId"] == last
    assert mux.ok("stop", ref, "--json")["outcome"] == "exit"

    # what must survive, byte for byte: the other conversation and the shared files
    ours = (id1, id2)
    keep_before = w.tree_hash(*roots, skip=ours + ("history.jsonl", ".claude.json"))
    hist = w.config_dir / "history.jsonl"
    hist_before, gcfg_before = hist.read_bytes(), gcfg.read_bytes()
    assert json.loads(gcfg_before)["projects"][str(cwd)]["lastSessionId"] in ours
    plan1, plan2 = _plan(mux, id1), _plan(mux, id2)
    for plan, cid in ((plan1, id1), (plan2, id2)):
        assert f"~/.claude/projects/{enc}/{cid}.jsonl" in plan
        assert any(p.startswith("~/.claude/history.jsonl: ") for p in plan)
    assert f"~/.claude/projects/{enc}/{id1}/" in plan1
    assert f"~/.claude/tasks/{id1}/" in plan1
    assert f"{w.tmpdir}/claude-{os.getuid()}/{enc}/{id1}/" in plan1
    assert f"~/.claude.json: projects[{json.dumps(str(cwd))}].lastSessionId" in plan1 + plan2

    # 5. purge the record (its conversation now: id2), then the first one by id from elsewhere
    rep2 = mux.ok("purge", ref, "--yes", "--json")
    assert rep2["conversation_id"] == id2 and rep2["complete"] is True and rep2["residual"] == [], rep2
    assert sorted(rep2["removed"]) == sorted(rep2["plan"]) and rep2["plan"]
    rep1 = mux.ok("purge", "--agent", "claude", "--conversation", id1, "--yes", "--json")
    assert rep1["conversation_id"] == id1 and rep1["complete"] is True and rep1["residual"] == [], rep1
    assert sorted(rep1["removed"]) == sorted(rep1["plan"])
    assert set(plan1) <= set(rep1["plan"])
    for cid in ours:  # gone means gone: again is "not found"
        assert mux.run("purge", "--agent", "claude", "--conversation", cid, "--dry-run").rc == 3
        assert not agent.exists(w.ctx(cwd), cid)

    # every artifact of both ids is gone (backups/ is shared: claude's own copies of .claude.json)
    assert _paths_naming(w.home, *ours) == []
    assert _paths_naming(w.tmpdir, *ours) == []
    for dirpath, dirs, files in os.walk(w.home):
        if "/backups" in dirpath:
            continue
        for f in files:
            data = Path(dirpath, f).read_bytes()
            assert id1.encode() not in data and id2.encode() not in data, os.path.join(dirpath, f)

    # ...and nothing else moved
    assert w.tree_hash(*roots, skip=ours + ("history.jsonl", ".claude.json")) == keep_before
    want_hist = b"".join(line for line in hist_before.splitlines(keepends=True)
                         if json.loads(line).get("sessionId") not in ours)
    assert hist.read_bytes() == want_hist
    assert any(json.loads(line)["sessionId"] == other_id for line in want_hist.splitlines())
    # byte for byte: the file claude wrote, minus exactly the one member
    member = re.compile(rb',\n[ ]*"lastSessionId": "(%s|%s)"' % (id1.encode(), id2.encode()))
    assert len(member.findall(gcfg_before)) == 1
    assert gcfg.read_bytes() == member.sub(b"", gcfg_before)
    assert agent.exists(w.ctx(cwd), other_id)
    assert (cwd / CREATED_FILE).exists(), "the work the agent did is not the conversation"


def test_in_session_resume_kill_and_gone_cwd(claude_world):
    """In-session ``/resume <id>`` moves the record; SIGKILL leaves a stale registry file that does not
    count as "in use" and goes with the purge; resume in a cwd that is gone is "not found" (3)."""
    import signal

    import psutil

    w = claude_world
    mux = w.mux
    agent = ClaudeAgent()
    cwd = w.work / "second"
    cwd.mkdir()

    first = w.one_turn(cwd, "hello first", FAKE_REPLY)
    a = first["conversation_id"]

    # a new agent that switches to conversation a from inside the TUI: the record follows
    rec = w.launch(cwd)
    assert rec["conversation_id"] != a
    mux.type(rec["pane"], f"/resume {a}")
    wait_for(lambda: next(r for r in mux.ok("ls", "--json") if r["id"] == rec["id"])["conversation_id"] == a,
             timeout=30, what="ls follows an in-session /resume")
    w.say(rec["pane"], "hello resumed", FAKE_REPLY)
    held = agent.in_use(w.ctx(cwd), a)
    assert held, "the live registry names a"

    # a background shell (its own session, CLAUDE_CODE_SESSION_ID=a in its environment)
    w.say(rec["pane"], "start MUXHOST_BACKGROUND", "background started")
    shells = wait_for(lambda: [p for p in psutil.process_iter(["pid", "cmdline"]) if p.info["cmdline"] == ["sleep", "300"]
                               and _env_of(p).get("CLAUDE_CODE_SESSION_ID") == a], timeout=30, what="the background shell")

    # SIGKILL: the registry file stays behind, names a dead pid, and does not count
    registry = [f for f in (w.config_dir / "sessions").glob("*.json") if json.loads(f.read_text())["sessionId"] == a]
    assert len(registry) == 1
    pid = int(registry[0].stem)
    proc = psutil.Process(pid)
    assert "claude" in proc.name()
    proc.send_signal(signal.SIGKILL)
    wait_for(lambda: not psutil.pid_exists(pid) or proc.status() == psutil.STATUS_ZOMBIE, timeout=30, what="claude killed")
    assert registry[0].exists(), "SIGKILL leaves the registry file"
    # ...but the orphaned background shell still works for conversation a: in use
    held = agent.in_use(w.ctx(cwd), a)
    assert str(shells[0].pid) in [h.split()[1] for h in held], held
    assert mux.run("purge", "--agent", "claude", "--conversation", a, "--yes", "--json").rc == 4
    mux.run("stop", rec["id"], "--json")  # the ladder ends the record's stray processes too
    wait_for(lambda: not shells[0].is_running() or shells[0].status() == psutil.STATUS_ZOMBIE, timeout=30, what="shell ended")
    assert agent.in_use(w.ctx(cwd), a) == []
    assert f"~/.claude/sessions/{pid}.json" in _plan(mux, a)

    # the cwd is gone: resume is "not found", and says why
    gone = w.work / "second-moved"
    cwd.rename(gone)
    r = mux.run("resume", first["id"], "--json")
    assert r.rc == 3, r
    assert str(cwd) in r.err

    # purge from elsewhere (no cwd to go by): everything of a goes, the stale registry file too
    rep = mux.ok("purge", "--agent", "claude", "--conversation", a, "--yes", "--json")
    assert rep["complete"] is True and f"~/.claude/sessions/{pid}.json" in rep["removed"], rep
    assert _paths_naming(w.home, a) == []


def test_claude_config_dir(claude_world, tmp_path):
    """A record launched with ``--env CLAUDE_CONFIG_DIR=…``: discover, in_use and purge look there, and
    ``~/.claude`` is not touched."""
    w = claude_world
    mux = w.mux
    cfg = tmp_path / "cfg dir"
    w.seed(config_dir=cfg)
    cwd = w.work / "cfgtest"
    cwd.mkdir()
    default_before = w.tree_hash(w.config_dir, w.home / ".claude.json")

    rec = w.launch(cwd, "--env", f"CLAUDE_CONFIG_DIR={cfg}")
    cid = rec["conversation_id"]
    w.say(rec["pane"], f"please {MAKE_STUFF} now", "all done")
    enc = project_folder_name(str(cwd))
    assert (cfg / "projects" / enc / f"{cid}.jsonl").is_file()
    assert (cfg / "sessions").is_dir() and list((cfg / "sessions").glob("*.json"))
    r = mux.run("purge", rec["id"], "--yes", "--json")
    assert r.rc == 4, r
    assert mux.ok("stop", rec["id"], "--json")["outcome"] == "exit"
    assert json.loads((cfg / ".claude.json").read_text())["projects"][str(cwd)]["lastSessionId"] == cid

    plan = mux.ok("purge", rec["id"], "--dry-run", "--json")["plan"]
    assert f"{cfg}/projects/{enc}/{cid}.jsonl" in plan
    assert f"{cfg}/.claude.json: projects[{json.dumps(str(cwd))}].lastSessionId" in plan
    rep = mux.ok("purge", rec["id"], "--yes", "--json")
    assert rep["complete"] is True and sorted(rep["removed"]) == sorted(rep["plan"]), rep
    assert _paths_naming(cfg, cid) == []
    assert "lastSessionId" not in json.loads((cfg / ".claude.json").read_text())["projects"][str(cwd)]
    assert w.tree_hash(w.config_dir, w.home / ".claude.json") == default_before


def test_purge_pane_of_a_claude_started_by_hand(claude_world):
    """A claude the user typed into a shell pane (no record, no --session-id): ``purge --pane`` finds it by
    its process name and its conversation through the live registry, refuses while it runs, and with
    ``--stop`` ends it and purges; the shell stays."""
    import psutil

    w = claude_world
    mux = w.mux
    cwd = w.work / "by hand"
    cwd.mkdir()
    args = ["new-session", "-d", "-P", "-F", "#{pane_id}", "-s", "byhand", "-x", "120", "-y", "40", "-c", str(cwd)]
    env = [f"{k}={v}" for k, v in sorted(w.mux.env.items()) if not k.startswith("MUXHOST_")]
    (pane,) = mux.tmux(*args, "env", *env, "/bin/sh")
    shell = psutil.Process(int(mux.tmux("display", "-p", "-t", pane, "#{pane_pid}")[0]))
    mux.type(pane, "claude")
    w.wait_ready(pane)
    w.say(pane, "hello by hand", FAKE_REPLY)
    (registry,) = list((w.config_dir / "sessions").glob("*.json"))
    entry = json.loads(registry.read_text())
    cid, pid = entry["sessionId"], entry["pid"]
    assert psutil.Process(pid).ppid() == shell.pid

    r = mux.run("purge", "--pane", pane, "--yes", "--json")
    assert r.rc == 4 and f"pid {pid}" in r.err, r
    rep = mux.ok("purge", "--pane", pane, "--stop", "--yes", "--json")
    assert rep["conversation_id"] == cid and rep["complete"] is True and rep["residual"] == [], rep
    assert f"~/.claude/projects/{project_folder_name(str(cwd))}/{cid}.jsonl" in rep["removed"]
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert shell.is_running() and shell.status() != psutil.STATUS_ZOMBIE
    assert _paths_naming(w.home, cid) == [] and _paths_naming(w.tmpdir, cid) == []
