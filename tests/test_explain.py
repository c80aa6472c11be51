"""`muxhost explain REF`: what the judgement of an agent read and which rule decided — for each state
of the demo agent (in-process on the fake backend, and on a real tmux pane with and without a
watch), for a record that does not run, and the rule's words for each of its branches."""
import argparse
import dataclasses
import re
import time

import pytest

from muxhost.activity import RECENT, Evidence, decide, judge
from muxhost.agent import Agent, Launch
from muxhost.cli import explain as cli_explain
from muxhost.testing import Watching, wait_for

STALL = 600.0


# -- the rule: each branch names itself, and judge is the same rule ------------------------------

@pytest.mark.parametrize("ev, now, state, words", [
    (Evidence("waiting"), 100.0, "waiting", "the plugin says waiting"),
    (Evidence("stalled"), 100.0, "stalled", "the plugin says stalled"),
    (Evidence("idle", busy=True, tool_busy=True), 100.0, "working", "the plugin says idle, but a non-resident child used CPU"),
    (Evidence("idle", busy=True), 100.0, "idle", "the plugin says idle, and no non-resident child used CPU"),
    (Evidence("working", progress=0.0), 700.0, "stalled", "for 700 s >= stall_after 600 s"),
    (Evidence("working", progress=0.0, busy=True), 700.0, "working", "the plugin says working (a non-resident process used CPU)"),
    (Evidence("working", progress=90.0), 100.0, "working", "the plugin says working (last output or CPU 10 s ago < stall_after"),
    (Evidence(None, busy=True), 100.0, "working", "no opinion from the plugin; a non-resident process used CPU"),
    (Evidence(None, progress=99.0), 100.0, "working", f"output 1.0 s ago < {RECENT:g} s"),
    (Evidence(None, progress=10.0), 100.0, "idle", "no output for 90 s"),
    (Evidence(None), 100.0, "idle", "no output seen"),
])
def test_each_branch_of_the_rule_says_which_it_is(ev, now, state, words):
    verdict = decide(ev, now, STALL)
    assert verdict.state == state == judge(ev, now, STALL)
    assert words in verdict.rule


# -- in-process, on the fake backend ---------------------------------------------------------------

def explain(host, ref, capsys, json=False):
    """``muxhost explain REF [--json]`` in-process: (exit code, stdout)."""
    rc = cli_explain.run(host, argparse.Namespace(ref=ref, json=json))
    return rc, capsys.readouterr().out


def explained(host, ref, capsys):
    import json

    rc, out = explain(host, ref, capsys, json=True)
    assert rc == 0
    return json.loads(out)


@pytest.fixture
def terminal(host, monkeypatch):
    """The fake backend's screen as a terminal shows it: the demo's prompt, written without a newline,
    ends the line the user typed (the pipe has no echo: ``demo> demo: working`` would be one line)."""
    capture = host.fake.capture
    monkeypatch.setattr(host.fake, "capture", lambda pane: re.sub(r"(?m)^(demo> )+", "", capture(pane)))
    return host


def demo(host, tmp_path):
    lv = host.launch("demo", cwd=str(tmp_path), name="why")
    wait_for(lambda: host.explain(lv.rec).get("look", {}).get("plugin", {}).get("answer") == "idle", timeout=10)
    return lv.rec


def test_explain_idle_names_the_plugins_source_and_the_rule(terminal, tmp_path, capsys):
    rec = demo(terminal, tmp_path)
    doc = explained(terminal, "why", capsys)
    assert (doc["id"], doc["state"], doc["activity"]) == (rec.id, "running", "idle")
    assert doc["muxhost"] and doc["schema"] == 1  # (the remote protocol's version fields, as hosts ls has)
    look = doc["look"]
    assert look["plugin"] == {"hook": True, "answer": "idle", "reason": look["plugin"]["reason"]}
    assert look["plugin"]["reason"].startswith("registry: ")  # the demo's live registry entry, read without a screen
    assert look["rule"] == "the plugin says idle, and no non-resident child used CPU"
    assert doc["judged_by"] == {"watch": None}
    assert [p["role"] for p in look["processes"]] == ["agent"]
    assert look["processes"][0]["cpu_percent"] is not None and look["cpu_sample"] == 0.5
    rc, out = explain(terminal, "why", capsys)
    assert rc == 0
    assert re.search(r"^activity: +idle", out, re.M)
    assert re.search(r"^plugin: +idle \(registry: .*says idle\)", out, re.M)
    assert re.search(r"^rule: +the plugin says idle, and no non-resident child used CPU$", out, re.M)
    assert re.search(r"^judged by: +this look \(no watch runs", out, re.M)


def test_explain_working_shows_the_tool_that_used_cpu(terminal, tmp_path, capsys):
    rec = demo(terminal, tmp_path)
    terminal.send(rec, "/work 8")
    wait_for(lambda: len(terminal.explain(rec)["look"]["processes"]) == 2, timeout=10)
    doc = explained(terminal, "why", capsys)
    assert doc["activity"] == "working"
    agent, tool = doc["look"]["processes"]
    assert (agent["role"], tool["role"]) == ("agent", "tool")
    assert tool["cpu_percent"] > 20  # (the /work child spins a core)
    assert doc["look"]["plugin"]["answer"] == "working"
    assert "a non-resident process used CPU" in doc["look"]["rule"]
    assert doc["clock"]["since"] is None and "cannot tell" in doc["clock"]["set_by"]
    assert doc["sent_at"] is not None
    rc, out = explain(terminal, "why", capsys)
    assert re.search(rf"^ +{tool['pid']} +tool +\d+\.\d%", out, re.M), out


def test_explain_waiting_and_the_answer_the_plugin_gave(terminal, tmp_path, capsys):
    rec = demo(terminal, tmp_path)
    terminal.send(rec, "/ask")
    wait_for(lambda: terminal.explain(rec)["activity"] == "waiting", timeout=10)
    doc = explained(terminal, "why", capsys)
    assert doc["look"]["rule"] == "the plugin says waiting"
    assert doc["look"]["plugin"]["reason"].startswith("registry: ")


def test_explain_stalled_says_how_long_it_was_silent(terminal, tmp_path, capsys, monkeypatch):
    terminal.config.data["watch"] = {"stall_after": 2}
    rec = demo(terminal, tmp_path)
    terminal.send(rec, "/hang")
    wait_for(lambda: "working on it" in terminal.fake.capture(rec.pane or "f1"), timeout=10)
    time.sleep(max(0.0, rec.launched_at + 2.5 - time.time()))  # (the clock never starts before the launch)
    printed = time.time() - 5  # (the fake backend does not tell when a pane printed: as tmux would, 5 s ago)
    snapshot = terminal.fake.snapshot
    monkeypatch.setattr(terminal.fake, "snapshot",
                        lambda: [dataclasses.replace(p, last_output=printed) for p in snapshot()])
    doc = explained(terminal, "why", capsys)
    assert doc["activity"] == "stalled"
    assert doc["look"]["plugin"]["answer"] == "working"
    assert doc["look"]["plugin"]["reason"].startswith("screen: ")  # asked again with the screen
    assert doc["look"]["output"]["asked_with_screen"] and doc["look"]["output"]["last_lines"][-1].startswith(
        "demo: working on it")
    assert re.fullmatch(r"the plugin says working, but nothing printed and no non-resident process used CPU "
                        r"for \d+ s >= stall_after 2 s", doc["look"]["rule"])
    assert doc["clock"]["set_by"].startswith("stall_after (2 s) after the last output")
    assert abs(doc["clock"]["since"] - (printed + 1 + 2)) < 0.01  # (the last output, to the end of its second)


def test_a_record_not_running_is_explained_and_exits_0(host, tmp_path, capsys):
    rec = demo(host, tmp_path)
    host.stop(rec)  # (the fake backend keeps the dead pane: exited, with its status)
    doc = explained(host, "why", capsys)
    assert doc["state"] == "exited" and "look" not in doc and "activity" not in doc
    assert re.fullmatch(r"exited with status -?\d+: its pane f1 is kept, dead", doc["why"])
    rc, out = explain(host, "why", capsys)
    assert rc == 0 and re.search(r"^why: +exited with status", out, re.M)


class Quiet(Agent):
    """An agent whose plugin has no activity hook."""

    name = "quiet"
    process_names = ("sleep",)

    def launch(self, ctx):
        return Launch(["sleep", "60"])


class Helped(Agent):
    """No activity hook either; a resident child (``yes``, a stand-in for a language server) spins."""

    name = "helped"
    process_names = ("sleep",)
    resident_children = ("yes",)

    def launch(self, ctx):
        return Launch(["sh", "-c", "yes > /dev/null & exec sleep 60"])


class Broken(Quiet):
    """An activity hook that fails."""

    name = "broken"

    def activity(self, ctx, screen):
        raise RuntimeError("the transcript is gone")


@pytest.fixture
def host_agents():
    return [Quiet(), Helped(), Broken()]


@pytest.mark.parametrize("state, fields, why", [
    ("stopped", {"stopped_at": 1.0, "outcome": "term", "seconds": 2.5},
     r"stopped by `muxhost stop` at \d\d:\d\d:\d\d \(outcome term, after 2.5 s\)"),
    ("asleep", {"slept_at": 1.0}, r"asleep since \d\d:\d\d:\d\d: its pane shows the stub; Enter there or "
                                  r"`muxhost wake zzz` resumes it"),
    ("stopping", {}, r"a stop was cut short and something of it still runs: `muxhost stop abcdef12` finishes it"),
    ("starting", {}, r"launched at \d\d:\d\d:\d\d, its pane is not there yet"),
    ("lost", {}, r"lost: its pane \(or its pane server\) is gone; `muxhost restore` resumes it"),
])
def test_why_a_record_does_not_run(state, fields, why):
    from muxhost import procs
    from muxhost.explaining import why_not_running
    from muxhost.state import Live, View
    from muxhost.store import Record

    rec = Record("abcdef12", "zzz", "demo", "/", "/", 1.0, **fields)
    assert re.fullmatch(why, why_not_running(Live(rec, state, None), View({}, procs.ProcessTable({}))))


def test_a_plugin_without_an_activity_hook_is_said_so(host, tmp_path, capsys):
    lv = host.launch("quiet", cwd=str(tmp_path), name="q")
    doc = explained(host, "q", capsys)
    assert doc["look"]["plugin"] == {"hook": False, "answer": None, "reason": None}
    assert doc["look"]["rule"].startswith("no opinion from the plugin; no CPU")
    assert doc["activity"] == "idle" and lv.rec.id == doc["id"]
    rc, out = explain(host, "q", capsys)
    assert re.search(r"^plugin: +the plugin has no activity hook$", out, re.M)


# -- a real tmux pane, with and without a watch ----------------------------------------------------

def test_explain_on_tmux_with_the_watch_and_without(mux):
    mux.config.write_text("watch:\n  interval: 0.3\n  stall_after: 2\n")
    rec = mux.ok("launch", "demo", "--name", "why", "--json")
    pane = rec["pane"]
    mux.wait_screen(pane, "demo>")
    with Watching(mux) as w:
        w.wait(pane, "idle", timeout=10)
        mux.type(pane, "/hang")
        w.wait(pane, "stalled", timeout=15)
        doc = mux.ok("explain", "why", "--json")
        assert doc["activity"] == "stalled" and doc["judged_by"]["watch"] == w.proc.pid
        assert doc["look"]["activity"] == "stalled"  # its own fresh look, beside the watch's
        assert doc["clock"]["set_by"].startswith(f"the watch (pid {w.proc.pid})")
        text = mux.run("explain", "why").out
        assert re.search(rf"^judged by: +the watch \(pid {w.proc.pid}\); this look says stalled$", text, re.M), text
        assert re.search(r"^screen: ", text, re.M) and "  | demo: working on it" in text
    doc = mux.ok("explain", "why", "--json")
    assert doc["judged_by"] == {"watch": None} and doc["activity"] == "stalled"
    assert doc["look"]["plugin"]["reason"].startswith("screen: ")
    assert doc["look"]["output"]["ago"] >= 2 and doc["look"]["output"]["last_output"] is not None
    mux.ok("stop", "why")
    doc = mux.ok("explain", "why", "--json")
    assert doc["state"] == "stopped" and doc["why"].startswith("stopped by `muxhost stop`")


def test_a_resident_childs_cpu_is_shown_but_never_counted(host, tmp_path, capsys):
    host.launch("helped", cwd=str(tmp_path), name="h")
    wait_for(lambda: len(host.explain(host.resolve("h"))["look"]["processes"]) == 2, timeout=10)
    doc = explained(host, "h", capsys)
    agent, helper = doc["look"]["processes"]
    assert (agent["role"], helper["role"], helper["name"]) == ("agent", "resident", "yes")
    assert helper["cpu_percent"] > 20  # (it spins: shown, as explain samples every process of the tree)
    assert doc["activity"] == "idle" and doc["look"]["rule"] == "no opinion from the plugin; no CPU, and no output seen"


def test_a_hook_that_fails_is_a_warning_and_no_opinion(host, tmp_path, capsys):
    host.launch("broken", cwd=str(tmp_path), name="oops")
    doc = explained(host, "oops", capsys)
    assert doc["look"]["plugin"] == {"hook": True, "answer": None, "reason": None}
    assert doc["look"]["rule"].startswith("no opinion from the plugin")
    assert [(w["hook"], "the transcript is gone" in w["error"]) for w in doc["warnings"]] == [("activity", True)]
