"""What broke when muxhost was tried as a new user would (issue 9): two agents in one folder, a
launch that cannot work, a purge racing a resume, plugin failures, the exit pause, stopping many,
argparse's prefix. Each test fails on the code before the fix."""
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from muxhost.testing import alive, install_plugin, wait_for

KIT = textwrap.dedent('''
    """muxhost-testkit: small agents that behave as a first third-party plugin would.

    All run one program: it makes its conversation file ``<data>/testkit/<id>.json`` (the id chosen by
    the launcher, or by itself when none is given), writes ``{"pid", "cwd", "created"}`` into it,
    prints ``ready>`` and leaves on ``/exit``.

    - ``naive``: the launcher chooses nothing; ``discover`` is "the newest conversation started in my
      cwd since my launch that is not claimed" (it ignores pids).
    - ``greedy``: ``discover`` is the newest conversation in its cwd, claimed or not.
    - ``slowpurge``: its purge takes ``SLOW_PURGE`` seconds (default 3) before it deletes.
    - ``pausy``: a plugin default ``exit_pause`` of 1.5 s.
    - ``broken``: ``discover`` and ``exists`` raise.
    - ``missing``: runs a program that is not installed, with an install hint.
    """
    import json, os, sys, time, uuid
    from pathlib import Path
    import muxhost

    PROGRAM = (
        "import json, os, sys, time, uuid\\n"
        "folder, cid = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else uuid.uuid4().hex)\\n"
        "os.makedirs(folder, exist_ok=True)\\n"
        "path = os.path.join(folder, cid + '.json')\\n"
        "if not os.path.exists(path):\\n"
        "    open(path, 'w').write(json.dumps({'pid': os.getpid(), 'cwd': os.getcwd(), 'created': time.time()}))\\n"
        "print('conversation', cid)\\n"
        "while True:\\n"
        "    line = input('ready> ')\\n"
        "    if line == '/exit': break\\n"
        "    if line == '/new':\\n"
        "        cid = uuid.uuid4().hex\\n"
        "        path = os.path.join(folder, cid + '.json')\\n"
        "        open(path, 'w').write(json.dumps({'pid': os.getpid(), 'cwd': os.getcwd(), 'created': time.time()}))\\n"
        "        print('conversation', cid)\\n"
        "    print('heard', line)\\n"
    )

    class Kit(muxhost.Agent):
        id_pattern = r"[0-9a-f]{32}"
        chooses_id = True

        def folder(self, ctx):
            return ctx.data_home() / "testkit"

        def file(self, ctx, cid):
            return self.folder(ctx) / f"{cid}.json"

        def launch(self, ctx):
            cid = uuid.uuid4().hex if self.chooses_id else None
            return muxhost.Launch([sys.executable, "-c", PROGRAM, str(self.folder(ctx)), *([cid] if cid else [])],
                                  conversation_id=cid)

        def resume(self, ctx, cid):
            return muxhost.Launch([sys.executable, "-c", PROGRAM, str(self.folder(ctx)), cid])

        def exists(self, ctx, cid):
            return self.file(ctx, cid).exists()

        def in_use(self, ctx, cid):
            return []

        def artifacts(self, ctx, cid):
            return [ctx.expand(self.file(ctx, cid))] if self.file(ctx, cid).exists() else []

        def purge(self, ctx, cid):
            self.file(ctx, cid).unlink()
            return [ctx.expand(self.file(ctx, cid))]

    class Naive(Kit):
        name = "naive"
        chooses_id = False

        def discover(self, ctx):
            best = None
            for path in self.folder(ctx).glob("*.json"):
                meta = json.loads(path.read_text())
                if meta["cwd"] != ctx.cwd or meta["created"] < ctx.launched_at or path.stem in ctx.claimed:
                    continue
                if best is None or meta["created"] > best[0]:
                    best = (meta["created"], path.stem)
            return best[1] if best else ctx.conversation_id

    class Greedy(Naive):
        """Worse still: the newest conversation in its cwd, claimed or not."""
        name = "greedy"

        def discover(self, ctx):
            found = [(json.loads(p.read_text()), p.stem) for p in self.folder(ctx).glob("*.json")]
            found = [(m["created"], cid) for m, cid in found if m["cwd"] == ctx.cwd]
            return max(found)[1] if found else None

    class SlowPurge(Kit):
        name = "slowpurge"

        def purge(self, ctx, cid):
            (ctx.data_home() / "purging").write_text(cid)
            time.sleep(float(os.environ.get("SLOW_PURGE", "3")))
            return super().purge(ctx, cid)

    class Pausy(Kit):
        name = "pausy"
        exit_pause = 1.5

    class Broken(Kit):
        name = "broken"

        def discover(self, ctx):
            raise RuntimeError("disk on fire")

        def exists(self, ctx, cid):
            raise OSError("cannot read the sessions folder")

    class Missing(Kit):
        name = "missing"
        install_hint = "pip install missing-agent"

        def launch(self, ctx):
            return muxhost.Launch(["muxhost-no-such-agent-binary"], conversation_id=uuid.uuid4().hex)

    @muxhost.hookimpl
    def muxhost_register_agents(register):
        for cls in (Naive, Greedy, SlowPurge, Pausy, Broken, Missing):
            register(cls())
''')


@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    """muxhost-testkit, pip-installed into a folder; the env that makes the CLI load it."""
    return install_plugin(tmp_path_factory.mktemp("testkit"), "muxhost-testkit", "muxhost_testkit", KIT)


def kit_file(mux, cid) -> Path:
    return mux.home / ".local/share/testkit" / f"{cid}.json"


def launch(mux, kit, agent, *args, env=None):
    rec = mux.ok("launch", agent, "--json", *args, env={**kit, **(env or {})})
    mux.wait_screen(rec["pane"], "ready>")
    return rec


# -- 3. two agents in one folder ------------------------------------------------------------------
def own_conversation(mux, rec) -> str:
    """The id of the conversation file the record's own process wrote."""
    folder = mux.home / ".local/share/testkit"
    mine = [p.stem for p in folder.glob("*.json") if json.loads(p.read_text())["pid"] in rec["pids"]]
    assert len(mine) == 1, mine
    return mine[0]


@pytest.mark.parametrize("first_ls", ["after each launch", "after both"])
def test_two_naive_agents_in_one_folder_each_keep_their_own_conversation(mux, kit, tmp_path, first_ls):
    work = tmp_path / "work"
    work.mkdir()
    a = launch(mux, kit, "naive", "--cwd", str(work))
    if first_ls == "after each launch":
        mux.ok("ls", "--json", env=kit)
    time.sleep(0.05)
    b = launch(mux, kit, "naive", "--cwd", str(work))
    for _ in range(6):
        listed = {r["id"]: r for r in mux.ok("ls", "--json", env=kit)}
    a_own, b_own = own_conversation(mux, listed[a["id"]]), own_conversation(mux, listed[b["id"]])
    assert listed[a["id"]]["conversation_id"] == a_own and listed[a["id"]]["conversations"] == [a_own]
    assert listed[b["id"]]["conversation_id"] == b_own and listed[b["id"]]["conversations"] == [b_own]
    # and the purge of the first takes its own conversation, not the second's
    mux.ok("stop", a["id"], b["id"], env=kit)
    b_bytes = kit_file(mux, b_own).read_bytes()
    mux.ok("purge", a["id"], "--yes", env=kit)
    assert not kit_file(mux, a_own).exists()
    assert kit_file(mux, b_own).read_bytes() == b_bytes


def test_a_record_never_moves_onto_an_id_another_records_discover_also_gives(mux, kit, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    a = launch(mux, kit, "greedy", "--cwd", str(work))
    mux.ok("ls", "--json", env=kit)
    b = launch(mux, kit, "greedy", "--cwd", str(work))
    listed = {r["id"]: r for r in mux.ok("ls", "--json", env=kit)}
    a_own, b_own = own_conversation(mux, listed[a["id"]]), own_conversation(mux, listed[b["id"]])
    assert listed[a["id"]]["conversation_id"] == a_own and listed[b["id"]]["conversation_id"] == b_own
    mux.type(a["pane"], "/new")  # the first agent starts a new conversation: both greedy discovers want it
    wait_for(
        lambda: len(list((mux.home / ".local/share/testkit").glob("*.json"))) == 3, what="the new conversation")
    for _ in range(3):
        listed = {r["id"]: r for r in mux.ok("ls", "--json", env=kit)}
        assert listed[b["id"]]["conversation_id"] == b_own and listed[b["id"]]["conversations"] == [b_own]
        assert listed[a["id"]]["conversation_id"] == a_own


# -- 4. a launch that cannot work ---------------------------------------------------------------
def one_line(r, code):
    assert r.rc == code, (r.rc, r.out, r.err)
    assert r.err.startswith("muxhost: ") and r.err.count("\n") == 1 and "Traceback" not in r.err, r.err
    return r.err.strip()


def no_pane(mux):
    r = mux.server.cmd("list-panes", "-a", "-F", "#{pane_id}")
    return r.returncode != 0 or not r.stdout


def test_a_launch_whose_program_is_missing_fails_before_any_pane(mux, kit):
    msg = one_line(mux.run("launch", "missing", env=kit), 1)
    assert "'muxhost-no-such-agent-binary' is not on the agent's PATH" in msg
    assert "pip install missing-agent" in msg
    mux.config.write_text("agents:\n  ghost:\n    command: [/no/such/ghost, --flag]\n"
                          "  phantom:\n    command: [phantom-cli-not-installed]\n")
    assert "'/no/such/ghost' is not an executable file" in one_line(mux.run("launch", "ghost"), 1)
    assert "'phantom-cli-not-installed' is not on the agent's PATH" in one_line(mux.run("launch", "phantom"), 1)
    assert mux.ok("ls", "--all", "--json", env=kit) == []
    assert no_pane(mux)


def test_a_resume_whose_program_was_deleted_fails_and_keeps_the_record(mux, tmp_path):
    program = tmp_path / "bin" / "myagent"
    program.parent.mkdir()
    program.write_text(f"#!{sys.executable}\nimport sys\nwhile input('mine> ') != '/exit': pass\n")
    program.chmod(0o755)
    mux.config.write_text(f"agents:\n  mine:\n    command: [{program}, '{{conversation_id}}']\n"
                          f"    resume: [{program}, '{{conversation_id}}']\n")
    rec = mux.ok("launch", "mine", "--json")
    mux.wait_screen(rec["pane"], "mine>")
    mux.ok("stop", rec["id"])
    program.unlink()
    msg = one_line(mux.run("resume", rec["id"]), 1)
    assert f"'{program}' is not an executable file" in msg
    shown = mux.ok("show", rec["id"], "--json")
    assert shown["state"] == "stopped" and shown["pane"] is None
    assert no_pane(mux)


# -- 6. a purge racing a resume -------------------------------------------------------------------
def test_a_resume_or_second_purge_during_a_purge_is_refused(mux, kit):
    rec = launch(mux, kit, "slowpurge")
    mux.ok("stop", rec["id"], env=kit)
    cid = rec["conversation_id"]
    slow = {**kit, "SLOW_PURGE": "8"}
    purge = subprocess.Popen([sys.executable, "-m", "muxhost", "purge", rec["id"], "--yes"], cwd=str(mux.home),
                             env={**mux.env, **slow}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: (mux.home / ".local/share/purging").exists(), what="the purge to begin")
        r = mux.run("resume", rec["id"], env=slow)
        assert r.rc == 4 and "purge of conversation" in r.err and "in progress" in r.err, r.err
        r = mux.run("purge", rec["id"], "--yes", env=slow)
        assert r.rc == 4 and "in progress" in r.err, r.err
        out, err = purge.communicate(timeout=30)
    finally:
        purge.kill()
    assert purge.returncode == 0, err
    assert not kit_file(mux, cid).exists()
    shown = mux.ok("show", rec["id"], "--json", env=kit)
    assert shown["state"] == "stopped" and shown["pane"] is None and not shown["pids"]
    # afterwards the conversation is simply gone
    assert mux.run("resume", rec["id"], env=kit).rc == 3


# -- 8. plugin failures are said -------------------------------------------------------------------
def test_a_failing_discover_or_exists_is_a_warning_not_silence(mux, kit):
    rec = launch(mux, kit, "broken")
    listed = mux.ok("ls", "--json", env=kit)
    warnings = listed[0]["warnings"]
    assert {"agent": "broken", "hook": "discover", "error": "RuntimeError: disk on fire", "record": rec["id"]} in warnings
    r = mux.run("ls", env=kit)
    assert r.rc == 0 and rec["id"] in r.out
    assert f"muxhost: warning: broken: discover failed for record {rec['id']}: RuntimeError: disk on fire" in r.err
    assert "Traceback" not in r.err
    r = mux.run("ls", env={**kit, "MUXHOST_DEBUG": "1"})
    assert "Traceback" in r.err and "disk on fire" in r.err
    r = mux.run("stop", rec["id"], env=kit)
    assert r.rc == 0 and "exists failed" in r.err and "cannot read the sessions folder" in r.err
    assert mux.ok("ls", "--all", "--json", env=kit)[0]["warnings"][-1]["hook"] == "exists"


# -- 9. stop.exit_pause --------------------------------------------------------------------------
@pytest.mark.parametrize("config, least, most", [
    ("", 1.5, 3.0),                                                    # the plugin's default
    ("stop:\n  exit_pause: 3\n", 3.0, 5.0),                            # stop: beats the plugin
    ("stop:\n  exit_pause: 3\nagents:\n  pausy:\n    exit_pause: 0.1\n", 0.0, 1.4),  # the agent's entry first
])
def test_exit_pause_comes_from_the_agent_entry_then_stop_then_the_plugin(mux, kit, config, least, most):
    mux.config.write_text(config)
    rec = launch(mux, kit, "pausy")
    stopped = mux.ok("stop", rec["id"], "--json", env=kit)
    assert stopped["outcome"] == "exit"
    assert least <= stopped["seconds"] < most, stopped["seconds"]


# -- 12. stop many at once -----------------------------------------------------------------------
def test_stop_many_and_all_gives_one_outcome_each_and_leaves_nothing(mux, stubborn_config):
    demos = [mux.ok("launch", "demo", "--json") for _ in range(3)]
    stubborn = mux.ok("launch", "stubborn", "--json")
    wait_for(lambda: stubborn_config.exists(), what="the stubborn agent")
    stubborn_pids = [int(p) for p in stubborn_config.read_text().split()]
    for d in demos:
        mux.wait_screen(d["pane"], "demo>")
    out = mux.ok("stop", demos[0]["id"], stubborn["id"], "--json")
    assert [(r["id"], r["outcome"]) for r in out] == [(demos[0]["id"], "exit"), (stubborn["id"], "kill")]
    assert not any(alive(p) for p in stubborn_pids)
    r = mux.run("stop", "--all")
    assert r.rc == 0, r.err
    lines = r.out.splitlines()
    assert len(lines) == 2
    for d in demos[1:]:
        assert any(line.startswith(f"stopped {d['name']} ({d['id']}): exit after ") for line in lines), lines
    assert all(not alive(p) for d in demos for p in d["pids"])
    assert [x["state"] for x in mux.ok("ls", "--all", "--json")] == ["stopped"] * 4
    assert mux.ok("stop", "--all", "--json") == []
    assert mux.run("stop", "--all").out.strip() == "nothing to stop"
    assert one_line(mux.run("stop"), 2) == "muxhost: stop takes REF… or --all"


# -- 14. argparse errors -------------------------------------------------------------------------
def test_argparse_errors_carry_one_prefix(mux):
    msg = one_line(mux.run("frobnicate"), 2)
    assert msg.startswith("muxhost: argument COMMAND: invalid choice: 'frobnicate'")
    assert one_line(mux.run("launch", "--split", "up"), 2).startswith("muxhost: launch: argument --split")
