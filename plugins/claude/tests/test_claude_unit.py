"""Unit tests of muxhost-claude: no claude binary, no tmux. Files are laid out the way claude 2.1.197
lays them out (see the module docstring of muxhost_claude)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from muxhost import AgentContext, plans
from muxhost.artifacts import JsonMember, MkdirLock
from muxhost.errors import NotFound
from muxhost.testing import wait_for
from muxhost_claude import ClaudeAgent, java_string_hash, project_folder_name, registry_entry_live

# fresh ids per run: a concurrent run of these tests (whose sleeper names its A in argv) is no holder here
A = str(uuid.uuid4())
B = str(uuid.uuid4())


@pytest.fixture
def agent():
    return ClaudeAgent()


@pytest.fixture(scope="module")
def bin_dir(tmp_path_factory) -> str:
    """A folder with an executable ``claude`` (launch and resume name the binary they find)."""
    d = tmp_path_factory.mktemp("bin")
    (d / "claude").write_text("#!/bin/sh\n")
    (d / "claude").chmod(0o755)
    return str(d)


@pytest.fixture(autouse=True)
def _path(bin_dir, monkeypatch):
    monkeypatch.setenv("PATH", bin_dir + os.pathsep + os.environ.get("PATH", os.defpath))


def _ctx(home: Path, cwd: Path | str, **kw) -> AgentContext:
    return AgentContext(home=str(home), env=kw.pop("env", {}), cwd=str(cwd), **kw)


def plan(agent, ctx, cid) -> list[str]:
    """What the host builds from the typed artifacts: each checked (roots, …), kept when there, labelled."""
    members = plans.family(agent, ctx, cid)
    return plans.labels(plans.build(agent, ctx, members, {m: agent.artifacts(ctx, m) for m in members}))


def purge(agent, ctx, cid) -> list[str]:
    """What the host does with the plan: carry it out in its fixed order, then ask again (the residual)."""
    members = plans.family(agent, ctx, cid)
    plans.carry_out(plans.build(agent, ctx, members, {m: agent.artifacts(ctx, m) for m in members}), ctx, ctx.notes)
    return plan(agent, ctx, cid)


def _last(path: str) -> str:
    return f'projects[{json.dumps(path)}].lastSessionId'


def _proc_start(pid: int) -> str:
    data = Path(f"/proc/{pid}/stat").read_text()
    return data[data.rfind(")") + 2:].split()[19]


def lay_out(home: Path, cwd: Path, cid: str, tmp_root: Path | None = None, config_dir: Path | None = None) -> list[Path]:
    """Create every per-conversation file claude writes for ``cid``; return the paths."""
    cfg = config_dir or home / ".claude"
    folder = cfg / "projects" / project_folder_name(str(cwd))
    made = [
        folder / f"{cid}.jsonl",
        folder / cid / "subagents" / "agent-a22854dd4084dde11.jsonl",
        folder / cid / "subagents" / "agent-a22854dd4084dde11.meta.json",
        folder / cid / "tool-results" / "toolu_1.txt",
        folder / f"{cid}.jsonl.tmp",
        cfg / "file-history" / cid / "ab92b9a3e498a8c9@v2",
        cfg / "tasks" / cid / "1.json",
        cfg / "tasks" / cid / ".lock",
        cfg / "session-env" / cid / "sessionstart-hook-1.sh",
        cfg / "debug" / f"{cid}.txt",
        cfg / "uploads" / cid / "a.png",
    ]
    if tmp_root is not None:
        made.append(tmp_root / project_folder_name(str(cwd)) / cid / "tasks" / "a22854dd4084dde11.output")
    for p in made:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps({"sessionId": cid, "cwd": str(cwd)}) + "\n")
    return made


# --------------------------------------------------------------------------------------------------
# the project-folder encoding

def test_folder_name_short():
    assert project_folder_name("/tmp/a/w.x_y z") == "-tmp-a-w-x-y-z"
    assert project_folder_name("/home/u/My Project-2") == "-home-u-My-Project-2"


def test_java_hash_matches_java():
    # values of java.lang.String#hashCode
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Hello World") == -862545276
    assert java_string_hash("polygenelubricants") == -2147483648


def test_folder_name_over_200_chars():
    cwd = "/tmp/" + "a" * 120 + "/" + "b.c" * 40
    name = project_folder_name(cwd)
    flat = cwd.replace("/", "-").replace(".", "-")
    h = abs(java_string_hash(cwd))
    digits = ""
    while h:
        h, r = divmod(h, 36)
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[r] + digits
    assert name == flat[:200] + "-" + (digits or "0")
    assert len(name) > 200
    # exactly 200 characters: no hash
    cwd200 = "/" + "x" * 199
    assert project_folder_name(cwd200) == "-" + "x" * 199


def test_folder_name_counts_utf16_units():
    # JavaScript replaces per UTF-16 code unit: an astral character becomes two dashes
    assert project_folder_name("/tmp/é😀") == "-tmp---" + "-"


# --------------------------------------------------------------------------------------------------
# launch / resume

def test_launch_chooses_the_id(agent, tmp_path, bin_dir):
    ctx = _ctx(tmp_path, tmp_path, args=["--model", "x"], config={"binary": f"{bin_dir}/claude"})
    launch = agent.launch(ctx)
    assert list(launch.argv[:2]) == [f"{bin_dir}/claude", "--session-id"]
    assert launch.argv[2] == launch.conversation_id and agent.valid_id(launch.conversation_id)
    assert list(launch.argv[3:]) == ["--model", "x"]
    assert agent.launch(ctx).conversation_id != launch.conversation_id


def test_launch_binary_from_ctx_path(agent, tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "claude"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    ctx = _ctx(tmp_path, tmp_path, env={"PATH": str(bindir)})
    assert agent.launch(ctx).argv[0] == str(exe)


def test_launch_with_user_session_or_resume(agent, tmp_path):
    sid = str(uuid.uuid4())
    l1 = agent.launch(_ctx(tmp_path, tmp_path, args=["--session-id", sid]))
    assert l1.conversation_id == sid and l1.argv.count("--session-id") == 1
    l2 = agent.launch(_ctx(tmp_path, tmp_path, args=["--resume", sid]))
    assert l2.conversation_id == sid and "--session-id" not in l2.argv
    l3 = agent.launch(_ctx(tmp_path, tmp_path, args=["--continue"]))
    assert l3.conversation_id is None


def test_resume(agent, tmp_path):
    home, cwd = tmp_path / "home", tmp_path / "w"
    cwd.mkdir()
    lay_out(home, cwd, A)
    launch = agent.resume(_ctx(home, cwd), A)
    assert list(launch.argv[1:]) == ["--resume", A]


def test_resume_keeps_config_args_but_not_conversation_options(agent, tmp_path):
    home, cwd = tmp_path / "home", tmp_path / "w"
    cwd.mkdir()
    lay_out(home, cwd, A)
    ctx = _ctx(home, cwd, args=["--model", "x", "--session-id", B, "-c", "--resume", "--permission-mode", "plan",
                                "--fork-session", f"--resume={B}"])
    assert list(agent.resume(ctx, A).argv[1:]) == ["--resume", A, "--model", "x", "--permission-mode", "plan"]


def test_resume_cwd_gone(agent, tmp_path):
    home = tmp_path / "home"
    lay_out(home, tmp_path / "gone", A)
    with pytest.raises(NotFound, match="no longer exists"):
        agent.resume(_ctx(home, tmp_path / "gone"), A)


def test_resume_wrong_cwd_or_no_transcript(agent, tmp_path):
    home, cwd, other = tmp_path / "home", tmp_path / "w", tmp_path / "other"
    cwd.mkdir()
    other.mkdir()
    lay_out(home, cwd, A)
    with pytest.raises(NotFound, match=str(cwd)):
        agent.resume(_ctx(home, other), A)
    with pytest.raises(NotFound, match="no transcript"):
        agent.resume(_ctx(home, cwd), B)


# --------------------------------------------------------------------------------------------------
# the live registry: discover and in_use

@pytest.fixture
def sleeper():
    p = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep(60)  # {A}"])
    yield p
    p.kill()
    p.wait()


def _registry(home: Path, pid: int, cid: str, **extra) -> Path:
    d = home / ".claude" / "sessions"
    d.mkdir(parents=True, exist_ok=True)
    f = d / f"{pid}.json"
    f.write_text(json.dumps({"pid": pid, "sessionId": cid, "cwd": "/w", "kind": "interactive", **extra}))
    return f


def test_discover_follows_registry(agent, tmp_path, sleeper):
    home = tmp_path / "home"
    _registry(home, sleeper.pid, B, procStart=_proc_start(sleeper.pid), startedAt=int(time.time() * 1000))
    ctx = _ctx(home, tmp_path, pids=[sleeper.pid], conversation_id=A)
    assert agent.discover(ctx) == B
    # claude's own registry for its own pid is its word even for a claimed id (an in-session /resume
    # of a stopped record's conversation): the host moves the record only if in_use proves it
    ctx.claimed = frozenset({B})
    assert agent.discover(ctx) == B
    # without a registry entry: the record's own id, never a claimed one
    ctx = _ctx(home, tmp_path, pids=[], conversation_id=A)
    ctx.claimed = frozenset({B})
    assert agent.discover(ctx) == A
    ctx.claimed = frozenset({A, B})
    assert agent.discover(ctx) is None


def test_discover_ignores_stale_and_reused(agent, tmp_path, sleeper):
    home = tmp_path / "home"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    _registry(home, dead.pid, B)
    assert agent.discover(_ctx(home, tmp_path, pids=[dead.pid], conversation_id=A)) == A
    # a live pid whose start time is not the writer's (pid reused)
    _registry(home, sleeper.pid, B, procStart=str(int(_proc_start(sleeper.pid)) - 7))
    assert agent.discover(_ctx(home, tmp_path, pids=[sleeper.pid], conversation_id=A)) == A


def test_registry_start_time_checks(sleeper):
    pid = sleeper.pid
    ct = psutil.Process(pid).create_time()
    assert registry_entry_live({"pid": pid, "procStart": _proc_start(pid)})
    assert not registry_entry_live({"pid": pid, "procStart": "1"})
    # without procStart: startedAt (ms) must not be before the process was created
    assert registry_entry_live({"pid": pid, "startedAt": int((ct + 0.8) * 1000)})
    assert not registry_entry_live({"pid": pid, "startedAt": int((ct - 30) * 1000)})


def test_in_use(agent, tmp_path, sleeper):
    home = tmp_path / "home"
    ctx = _ctx(home, tmp_path)
    # the sleeper's argv names A: argv holders count
    held = agent.in_use(ctx, A)
    assert any(h.startswith(f"pid {sleeper.pid} ") for h in held)
    # a live registry file naming B, with the right start time
    _registry(home, sleeper.pid, B, procStart=_proc_start(sleeper.pid))
    assert [h.split()[1] for h in agent.in_use(ctx, B)] == [str(sleeper.pid)]
    # wrong start time: not held
    _registry(home, sleeper.pid, B, procStart="1")
    assert agent.in_use(ctx, B) == []


def test_in_use_stale_registry_does_not_count(agent, tmp_path):
    home = tmp_path / "home"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    _registry(home, dead.pid, B, procStart="12345", startedAt=1)
    assert agent.in_use(_ctx(home, tmp_path), B) == []


def test_in_use_fails_closed_on_an_unreadable_registry_of_a_live_pid(agent, tmp_path, sleeper):
    home = tmp_path / "home"
    f = _registry(home, sleeper.pid, B)
    f.write_text('{"pid": %d, "sessionId": "%s", "cw' % (sleeper.pid, B[:8]))  # caught half-written
    held = agent.in_use(_ctx(home, tmp_path), B)
    assert any(h.startswith(f"pid {sleeper.pid} ") and "cannot be read" in h for h in held)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    f.rename(f.with_name(f"{dead.pid}.json"))  # the same garbage of a dead pid: stale, not a holder
    assert not any("cannot be read" in h for h in agent.in_use(_ctx(home, tmp_path), B))


def test_in_use_counts_a_tool_process_of_the_conversation(agent, tmp_path):
    """claude's tool processes carry CLAUDE_CODE_SESSION_ID and outlive a killed claude: a holder."""
    tool = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            env={**os.environ, "CLAUDE_CODE_SESSION_ID": B})
    try:
        held = wait_for(lambda: agent.in_use(_ctx(tmp_path, tmp_path), B), timeout=10, what="the tool process")
        assert [h.split()[1] for h in held] == [str(tool.pid)] and f"CLAUDE_CODE_SESSION_ID={B}" in held[0], held
        assert agent.in_use(_ctx(tmp_path, tmp_path), A) == []
    finally:
        tool.kill()
        tool.wait()


# --------------------------------------------------------------------------------------------------
# artifacts and purge

HISTORY_OTHER = [
    '{"display":"other one","pastedContents":{},"timestamp":1,"project":"/w","sessionId":"%s"}' % B,
    '{"display":"mentions %s but is B\'s","timestamp":2,"project":"/w","sessionId":"%s"}' % (A, B),
]


def _history_bytes(lines_a: int = 3) -> tuple[bytes, bytes]:
    """(history with A's lines, the same without them)."""
    a_lines = ['{"display":"p%d","pastedContents":{},"timestamp":%d,"project":"/w","sessionId":"%s"}' % (i, 10 + i, A)
               for i in range(lines_a)]
    order = [HISTORY_OTHER[0], a_lines[0], "not json at all " + A, a_lines[1], HISTORY_OTHER[1]] + a_lines[2:]
    kept = [HISTORY_OTHER[0], "not json at all " + A, HISTORY_OTHER[1]]
    return ("\n".join(order) + "\n").encode(), ("\n".join(kept) + "\n").encode()


GLOBAL = """{
  "numStartups": 6,
  "projects": {
    "/other": {
      "lastSessionId": "%s",
      "hasTrustDialogAccepted": true
    },
    "/w": {
      "hasTrustDialogAccepted": true,
      "allowedTools": [],
      "lastCost": 0.0024500000000000004,
      "lastSessionId": "%s",
      "lastSessionMetrics": {
        "frame_duration_ms_count": 26
      }
    },
    "/first": {
      "lastSessionId": "%s",
      "x": "é"
    },
    "/only": {"lastSessionId": "%s"}
  },
  "userID": "abc"
}"""


def test_last_session_ids_go_and_every_other_byte_stays(agent, tmp_path):
    """Each ``projects[*].lastSessionId`` equal to the id is cut out of the text (the last member of an
    object, one before another, the only one); the rest of the global config keeps its bytes."""
    home, cwd = tmp_path / "home", tmp_path / "w"
    cwd.mkdir()
    lay_out(home, cwd, A)
    before = GLOBAL % (B, A, A, A)
    (home / ".claude.json").write_text(before)
    assert [p for p in plan(agent, _ctx(home, cwd), A) if ".claude.json" in p] == \
        [f"~/.claude.json: {_last(p)}" for p in ("/w", "/first", "/only")]
    assert purge(agent, _ctx(home, cwd), A) == []
    want = before.replace(',\n      "lastSessionId": "%s"' % A, "")
    want = want.replace('"lastSessionId": "%s",\n      "x"' % A, '"x"')
    want = want.replace('{"lastSessionId": "%s"}' % A, "{}")
    assert (home / ".claude.json").read_text() == want
    obj = json.loads(want)
    assert obj["projects"]["/other"]["lastSessionId"] == B
    assert list(obj["projects"]["/w"]) == ["hasTrustDialogAccepted", "allowedTools", "lastCost", "lastSessionMetrics"]


def test_a_last_session_id_that_moved_on_is_kept(agent, tmp_path):
    """Between the plan and its carrying out a claude may start another conversation in the project:
    the member goes only while it still names ours (``JsonMember(equals=…)``)."""
    home, cwd = tmp_path / "home", tmp_path / "w"
    cwd.mkdir()
    lay_out(home, cwd, A)
    gc = home / ".claude.json"
    gc.write_text(json.dumps({"projects": {str(cwd): {"lastSessionId": A}}}, indent=2))
    ctx = _ctx(home, cwd)
    items = plans.build(agent, ctx, [A], {A: agent.artifacts(ctx, A)})
    assert f"~/.claude.json: {_last(str(cwd))}" in plans.labels(items)
    gc.write_text(json.dumps({"projects": {str(cwd): {"lastSessionId": B}}}, indent=2))
    plans.carry_out(items, ctx, ctx.notes)
    assert json.loads(gc.read_text()) == {"projects": {str(cwd): {"lastSessionId": B}}}


def test_artifacts_and_purge(agent, tmp_path):
    home, cwd = tmp_path / "home", tmp_path / "w.x y"
    cwd.mkdir()
    tmp_root = tmp_path / "tmproot"
    env = {"CLAUDE_CODE_TMPDIR": str(tmp_root)}
    made = lay_out(home, cwd, A, tmp_root=tmp_root / f"claude-{os.getuid()}")
    other = lay_out(home, cwd, B, tmp_root=tmp_root / f"claude-{os.getuid()}")
    cfg = home / ".claude"
    shared = [
        cfg / "projects" / project_folder_name(str(cwd)) / "memory" / "MEMORY.md",
        cfg / "shell-snapshots" / f"snapshot-bash-{A}.sh",
        cfg / "backups" / ".claude.json.backup.1",
        cfg / "plans" / "some-plan.md",
        cfg / "settings.json",
    ]
    for p in shared:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"shared {A}\n")
    hist, hist_after = _history_bytes()
    (cfg / "history.jsonl").write_bytes(hist)
    gbefore = (GLOBAL % (B, A, A, B)).replace("/w", str(cwd)).encode()
    (home / ".claude.json").write_bytes(gbefore)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = _registry(home, dead.pid, A, procStart="1")

    ctx = _ctx(home, cwd, env=env)
    assert agent.exists(ctx, A)
    got = plan(agent, ctx, A)
    enc = project_folder_name(str(cwd))
    want = [f"~/.claude/projects/{enc}/{A}.jsonl", f"~/.claude/projects/{enc}/{A}/",
            f"~/.claude/projects/{enc}/{A}.jsonl.tmp", f"~/.claude/debug/{A}.txt",
            *(f"~/.claude/{sub}/{A}/" for sub in ("file-history", "tasks", "session-env", "uploads")),
            f"{tmp_root}/claude-{os.getuid()}/{enc}/{A}/", f"~/.claude/sessions/{dead.pid}.json",
            "~/.claude/history.jsonl: 3 lines", f"~/.claude.json: {_last(str(cwd))}",
            f"~/.claude.json: {_last('/first')}"]
    assert sorted(got) == sorted(want)
    assert any("backups" in n and "1 old copies" in n for n in ctx.notes), ctx.notes  # said, not touched

    assert purge(agent, ctx, A) == []
    assert not agent.exists(ctx, A)
    for p in made:
        assert not p.exists(), p
    assert not stale.exists()
    for p in other + shared:
        assert p.read_text() in (json.dumps({"sessionId": B, "cwd": str(cwd)}) + "\n", f"shared {A}\n"), p
    assert (cfg / "history.jsonl").read_bytes() == hist_after
    gafter = json.loads((home / ".claude.json").read_bytes())
    assert gafter["projects"]["/other"]["lastSessionId"] == B and gafter["projects"]["/only"]["lastSessionId"] == B
    assert "lastSessionId" not in gafter["projects"][str(cwd)] and "lastSessionId" not in gafter["projects"]["/first"]
    # B is untouched and still complete
    assert agent.exists(ctx, B)
    assert len(plan(agent, ctx, B)) == 12


def test_other_mentions_in_the_global_config_are_reported_not_removed(agent, tmp_path):
    home, cwd = tmp_path / "home", tmp_path / "w"
    cwd.mkdir()
    lay_out(home, cwd, A)
    doc = {"projects": {str(cwd): {"lastSessionId": A}}, "resumeHints": [{"session": A}]}
    (home / ".claude.json").write_text(json.dumps(doc, indent=2))
    leftover = f'~/.claude.json (["resumeHints"][0]["session"] names the conversation)'
    ctx = _ctx(home, cwd)
    assert leftover in plan(agent, ctx, A)
    assert purge(agent, ctx, A) == [leftover]  # the purge is incomplete: exit 5
    assert json.loads((home / ".claude.json").read_text()) == {"projects": {str(cwd): {}},
                                                               "resumeHints": [{"session": A}]}


def test_an_unreadable_global_config_fails_closed(agent, tmp_path):
    """A global config that does not parse may name the conversation: reported, left byte for byte."""
    home, cwd = tmp_path / "home", tmp_path / "w"
    cwd.mkdir()
    lay_out(home, cwd, A)
    broken = ('{"projects": {"%s": {"lastSessionId": "%s"' % (cwd, A)).encode()
    (home / ".claude.json").write_bytes(broken)
    ctx = _ctx(home, cwd)
    left = purge(agent, ctx, A)
    assert len(left) == 1 and left[0].startswith("~/.claude.json (could not be read: "), left
    assert (home / ".claude.json").read_bytes() == broken


def test_purge_without_record_finds_transcript_anywhere(agent, tmp_path):
    home, cwd = tmp_path / "home", tmp_path / "w"
    cwd.mkdir()
    made = lay_out(home, cwd, A)
    elsewhere = _ctx(home, tmp_path / "somewhere-else")
    assert agent.exists(_ctx(home, ""), A)
    assert f"~/.claude/projects/{project_folder_name(str(cwd))}/{A}.jsonl" in plan(agent, elsewhere, A)
    assert purge(agent, elsewhere, A) == []
    assert not any(p.exists() for p in made)


def test_claude_config_dir_is_followed(agent, tmp_path):
    home, cwd, cfg = tmp_path / "home", tmp_path / "w", tmp_path / "cfgdir"
    cwd.mkdir()
    home.mkdir()
    made = lay_out(home, cwd, A, config_dir=cfg)
    (cfg / ".claude.json").write_text(json.dumps({"projects": {str(cwd): {"lastSessionId": A}}}, indent=2))
    (home / ".claude.json").write_text(json.dumps({"projects": {str(cwd): {"lastSessionId": A}}}, indent=2))
    ctx = _ctx(home, cwd, env={"CLAUDE_CONFIG_DIR": str(cfg)})
    got = plan(agent, ctx, A)
    assert f"{cfg}/projects/{project_folder_name(str(cwd))}/{A}.jsonl" in got
    assert f"{cfg}/.claude.json: {_last(str(cwd))}" in got
    assert not any(p.startswith("~/") for p in got)
    assert purge(agent, ctx, A) == []
    assert not any(p.exists() for p in made)
    assert json.loads((cfg / ".claude.json").read_text())["projects"][str(cwd)] == {}
    # ~/.claude.json belongs to the default config dir: not this conversation's
    assert json.loads((home / ".claude.json").read_text())["projects"][str(cwd)] == {"lastSessionId": A}
    # and with the default config dir nothing of A is seen under ~/.claude
    assert plan(agent, _ctx(home, cwd), A) == [f"~/.claude.json: {_last(str(cwd))}"]


def test_a_config_dir_relative_to_home_is_the_agents(agent, tmp_path):
    """``CLAUDE_CONFIG_DIR=~/alt``: ``~`` is the agent's HOME, not the caller's."""
    home, cwd = tmp_path / "home", tmp_path / "w"
    cwd.mkdir()
    made = lay_out(home, cwd, A, config_dir=home / "alt")
    ctx = _ctx(home, cwd, env={"CLAUDE_CONFIG_DIR": "~/alt"})
    assert f"~/alt/projects/{project_folder_name(str(cwd))}/{A}.jsonl" in plan(agent, ctx, A)
    assert purge(agent, ctx, A) == [] and not any(p.exists() for p in made)


def test_long_cwd_artifacts(agent, tmp_path):
    home = tmp_path / "home"
    cwd = tmp_path / ("d" * 120) / ("e" * 120)
    cwd.mkdir(parents=True)
    made = lay_out(home, cwd, A)
    assert len(made[0].parent.name) > 200
    ctx = _ctx(home, cwd)
    assert agent.exists(ctx, A)
    assert agent.resume(ctx, A).argv[-1] == A
    assert purge(agent, ctx, A) == []
    assert not any(p.exists() for p in made)


def test_rewrites_wait_for_claudes_lock(agent, tmp_path, monkeypatch):
    """claude locks history.jsonl and .claude.json with proper-lockfile (``<file>.lock/``): a fresh lock
    is respected (nothing rewritten, a note, the residual stays), a stale one (>10 s) is taken over."""
    monkeypatch.setattr(plans, "LOCK_TIMEOUT", 0.3)
    home, cwd = tmp_path / "home", tmp_path / "w"
    cwd.mkdir()
    lay_out(home, cwd, A)
    hist, hist_after = _history_bytes()
    (home / ".claude" / "history.jsonl").write_bytes(hist)
    gbefore = json.dumps({"projects": {str(cwd): {"lastSessionId": A}}}, indent=2)
    (home / ".claude.json").write_text(gbefore)
    hlock = home / ".claude" / "history.jsonl.lock"
    glock = home / ".claude.json.lock"
    hlock.mkdir()
    glock.mkdir()
    ctx = _ctx(home, cwd)
    left = ["~/.claude/history.jsonl: 3 lines", f"~/.claude.json: {_last(str(cwd))}"]
    assert sorted(purge(agent, ctx, A)) == sorted(left)
    assert (home / ".claude" / "history.jsonl").read_bytes() == hist and (home / ".claude.json").read_text() == gbefore
    assert len([n for n in ctx.notes if "could not rewrite" in n and ".lock is locked" in n]) == 2, ctx.notes
    assert hlock.is_dir() and glock.is_dir(), "someone else's lock is never removed while fresh"
    old = time.time() - 60
    os.utime(hlock, (old, old))
    os.utime(glock, (old, old))
    assert purge(agent, ctx, A) == []
    assert (home / ".claude" / "history.jsonl").read_bytes() == hist_after
    assert not hlock.exists() and not glock.exists()


def test_default_tmp_folder(agent, tmp_path):
    """Without $CLAUDE_CODE_TMPDIR / $TMPDIR claude uses /tmp/claude-<uid>/<folder>/<id>/ (the folder name
    comes from this test's own cwd, so nothing of anyone else's is looked at)."""
    home, cwd = tmp_path / "home", tmp_path / "w"
    cwd.mkdir()
    lay_out(home, cwd, A)
    root = Path("/tmp") / f"claude-{os.getuid()}"
    created_root = not root.exists()
    folder = root / project_folder_name(str(cwd))
    try:
        (folder / A / "tasks").mkdir(parents=True, mode=0o700)
        (folder / A / "tasks" / "x.output").write_text("out\n")
        (folder / B).mkdir()
        ctx = _ctx(home, cwd)
        assert f"{folder}/{A}/" in plan(agent, ctx, A)
        assert purge(agent, ctx, A) == []
        assert not (folder / A).exists() and (folder / B).is_dir()
    finally:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
        if created_root:
            try:
                root.rmdir()  # only when empty: a claude elsewhere may have started using it meanwhile
            except OSError:
                pass


def test_symlinked_dotfiles_stay_symlinks(agent, tmp_path):
    """A dotfile symlinked from elsewhere: its target is rewritten in place (the plan's roots hold it),
    under the lock of the target, and the symlink stays."""
    home, cwd, dots = tmp_path / "home", tmp_path / "w", tmp_path / "dotfiles"
    cwd.mkdir()
    dots.mkdir()
    lay_out(home, cwd, A)
    hist, hist_after = _history_bytes()
    (dots / "history.jsonl").write_bytes(hist)
    (dots / "claude.json").write_text(json.dumps({"projects": {str(cwd): {"lastSessionId": A, "x": 1}}}, indent=2))
    (home / ".claude" / "history.jsonl").symlink_to(dots / "history.jsonl")
    (home / ".claude.json").symlink_to(dots / "claude.json")
    assert purge(agent, _ctx(home, cwd), A) == []
    assert (home / ".claude" / "history.jsonl").is_symlink() and (home / ".claude.json").is_symlink()
    assert (dots / "history.jsonl").read_bytes() == hist_after
    assert json.loads((dots / "claude.json").read_text()) == {"projects": {str(cwd): {"x": 1}}}
    assert sorted(p.name for p in dots.iterdir()) == ["claude.json", "history.jsonl"]  # no lock left behind


# -- the host's rule this plugin needs (muxhost.plans): the lock beside a shared file goes with it -----
def test_a_lock_beside_the_file_it_guards_is_checked_as_the_file_is(tmp_path):
    """``~/.claude.json`` is a root by itself, so its lock ``~/.claude.json.lock`` is inside no root: the
    lock named for a file's realpath is accepted with the file; any other lock outside the roots is not."""
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    gc = home / ".claude.json"
    gc.write_text(json.dumps({"projects": {"/w": {"lastSessionId": A}}}))
    ctx = _ctx(home, tmp_path)
    roots = [os.path.realpath(r) for r in ClaudeAgent().roots(ctx)]
    keys = ("projects", "/w", "lastSessionId")
    plans.check(JsonMember(gc, keys, equals=A, lock=MkdirLock(f"{gc}.lock")), roots, ctx)
    for elsewhere in (home / "other.lock", tmp_path / "x.lock", f"{gc}.lock/../y.lock"):
        with pytest.raises(plans.PlanError, match="outside the agent's folders"):
            plans.check(JsonMember(gc, keys, equals=A, lock=MkdirLock(elsewhere)), roots, ctx)
