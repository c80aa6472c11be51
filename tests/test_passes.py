"""The watch pass's judge (muxhost.passes.judge_pass) on recorded observations: plain data, no pane,
no process, no clock. The rules the watch keeps: a new agent idle since its last output, work seen
in CPU, a turn between two passes restarts the idle clock (output alone does not), a wake restarts
it, stalled after stall_after, a tool's CPU keeps an idle-saying plugin working, waiting alerts
(not on the first pass), a record that left is exited (with why), a server gone is lost."""
import copy

import pytest

from muxhost.backends import PaneInfo
from muxhost.passes import Seen, Sight, Track, judge_pass, lost
from muxhost.procs import Proc
from muxhost.state import Live
from muxhost.store import Record

STALL = 10.0
LAUNCH = 1000.0


def record(rid="r1", **kw):
    return Record(id=rid, name=f"n-{rid}", agent="demo", cwd="/", home="/", launched_at=kw.pop("launched_at", LAUNCH),
                  state="running", **kw)


def pane(pane_id="%1", pid=500, **kw):
    return PaneInfo(pane_id, pid, **kw)


def proc(pid=500, cpu=1.0, created=LAUNCH, ppid=1, name="demo"):
    return Proc(pid, ppid, created, name, (), cpu)


def seen(rec, pn, plugin=None, tree=None, tools=(), screen=None):
    tree = tree or [proc(pn.pid)]
    return Seen(Live(rec, "running", pn, tree), [tree[0], *tools], plugin, screen)


class Passes:
    """Pass after pass of the judge, as the watch runs it (tracks and the previous pass's time)."""

    def __init__(self):
        self.tracks, self.looked, self.changes = {}, None, []

    def run(self, now, *running, notes=None):
        before = copy.deepcopy(self.tracks)
        judged = judge_pass(Sight(now, list(running)), self.tracks, self.looked, STALL, notes)
        assert self.tracks == before, "the judge changed what it was given"
        self.tracks, self.looked = judged.tracks, now
        self.changes.append([(c.live.rec.id, c.old, c.new, c.since, c.alert, c.live.state, c.note)
                             for c in judged.changes])
        return judged


def test_a_new_agent_is_idle_since_its_last_output_and_the_first_pass_does_not_alert():
    p = Passes()
    rec = record()
    judged = p.run(1010.0, seen(rec, pane(last_output=1004.0, output_mark="a"), plugin="idle"))
    assert p.changes[-1] == [("r1", None, "idle", 1004.0, False, "running", None)]
    assert judged.tracks["r1"].activity == "idle" and judged.changes[0].live.activity == "idle"
    # the same again: no change
    p.run(1011.0, seen(rec, pane(last_output=1004.0, output_mark="a"), plugin="idle"))
    assert p.changes[-1] == []


def test_a_new_agent_is_never_idle_since_before_its_launch():
    """A wake's stub printed before the agent started: the idle clock starts at launched_at."""
    p = Passes()
    p.run(1010.0, seen(record(), pane(last_output=990.0, output_mark="a"), plugin="idle"))
    assert p.changes[-1][0][3] == LAUNCH


def test_cpu_over_a_pass_is_work_for_a_plugin_without_an_opinion():
    p = Passes()
    rec, pn = record(), pane(last_output=1000.0, output_mark="a")
    p.run(1010.0, seen(rec, pn, tree=[proc(cpu=1.0)]))
    assert p.changes[-1][0][2] == "idle"
    p.run(1011.0, seen(rec, pn, tree=[proc(cpu=1.5)]))  # half a core over the second
    assert p.changes[-1] == [("r1", "idle", "working", 1011.0, True, "running", None)]
    p.run(1012.0, seen(rec, pn, tree=[proc(cpu=1.501)]))  # 0.1%: below CPU_BUSY, but RECENT holds
    assert p.changes[-1] == []
    p.run(1015.0, seen(rec, pn, tree=[proc(cpu=1.501)]))
    assert p.changes[-1] == [("r1", "working", "idle", 1015.0, True, "running", None)]


def test_a_process_started_since_the_last_look_counts_all_its_cpu():
    p = Passes()
    rec, pn = record(), pane(last_output=1000.0, output_mark="a")
    agent = proc(cpu=1.0)
    p.run(1010.0, seen(rec, pn, plugin="idle", tree=[agent]))
    tool = proc(pid=501, ppid=500, cpu=0.5, created=1010.5, name="tool")
    p.run(1011.0, seen(rec, pn, plugin="idle", tree=[agent, tool], tools=[tool]))
    assert p.changes[-1][0][1:3] == ("idle", "working")  # a tool at work: not idle, whatever the plugin says
    # one that was there before the last look (not seen then) counts only from now on
    p2 = Passes()
    p2.run(1010.0, seen(rec, pn, plugin="idle", tree=[agent]))
    old = proc(pid=502, ppid=500, cpu=5.0, created=900.0, name="tool")
    p2.run(1011.0, seen(rec, pn, plugin="idle", tree=[agent, old], tools=[old]))
    assert p2.changes[-1] == []


def test_a_turn_between_two_passes_restarts_the_idle_clock_and_output_alone_does_not():
    p = Passes()
    rec = record()
    p.run(1010.0, seen(rec, pane(last_output=1004.0, output_mark="a"), plugin="idle"))
    # an idle TUI redraws itself: output, nobody typed
    p.run(1030.0, seen(rec, pane(last_output=1029.0, output_mark="b"), plugin="idle"))
    assert p.changes[-1] == [] and p.tracks["r1"].since == 1004.0
    # a `send` at 1035, the answer printed at 1036; the next pass sees the agent idle again
    rec2 = record(sent_at=1035.0)
    p.run(1040.0, seen(rec2, pane(last_output=1036.0, output_mark="c"), plugin="idle"))
    assert p.changes[-1] == [] and p.tracks["r1"].since == 1037.0  # (the output time is to the second)
    # a key typed (the pane's last input) and output after it, too
    p.run(1060.0, seen(rec2, pane(last_output=1055.0, output_mark="d", last_input=1050.0), plugin="idle"))
    assert p.tracks["r1"].since == 1056.0
    # a key typed and no output after it: the clock holds
    p.run(1080.0, seen(rec2, pane(last_output=1055.0, output_mark="d", last_input=1070.0), plugin="idle"))
    assert p.tracks["r1"].since == 1056.0 and p.tracks["r1"].typed == 1070.0
    # (the backend tells the last input only while the pane is active: the watch remembers it)
    p.run(1081.0, seen(rec2, pane(last_output=1055.0, output_mark="d"), plugin="idle"))
    assert p.tracks["r1"].typed == 1070.0


def test_a_wake_in_the_same_pane_starts_afresh_though_no_pass_saw_it_asleep():
    p = Passes()
    p.run(1010.0, seen(record(), pane(last_output=1004.0, output_mark="a"), plugin="idle"))
    woken = record(launched_at=1500.0)
    p.run(1510.0, seen(woken, pane(last_output=1490.0, output_mark="z"), plugin="idle"))
    assert p.changes[-1] == [("r1", None, "idle", 1500.0, True, "running", None)]


def test_working_with_no_output_and_no_cpu_is_stalled_after_stall_after():
    p = Passes()
    rec = record()
    p.run(1010.0, seen(rec, pane(last_output=1009.0, output_mark="a"), plugin="working"))
    assert p.changes[-1][0][2:4] == ("working", 1010.0)  # (working since: unknown from one look: now)
    p.run(1011.0, seen(rec, pane(last_output=1010.0, output_mark="b"), plugin="working"))
    assert p.tracks["r1"].progress == 1011.0
    p.run(1020.5, seen(rec, pane(last_output=1010.0, output_mark="b"), plugin="working"))
    assert p.changes[-1] == []  # 9.5 s of silence
    p.run(1021.5, seen(rec, pane(last_output=1010.0, output_mark="b"), plugin="working"))
    assert p.changes[-1] == [("r1", "working", "stalled", 1021.0, True, "running", None)]
    # CPU again: working
    p.run(1022.5, seen(rec, pane(last_output=1010.0, output_mark="b"), plugin="working", tree=[proc(cpu=2.0)]))
    assert p.changes[-1][0][1:3] == ("stalled", "working")


def test_waiting_first_then_an_alert_for_each_new_wait():
    p = Passes()
    rec = record()
    p.run(1010.0, seen(rec, pane(last_output=1008.0, output_mark="a"), plugin="waiting"))
    assert p.changes[-1] == [("r1", None, "waiting", 1008.0, False, "running", None)]
    p.run(1011.0, seen(rec, pane(last_output=1008.0, output_mark="a"), plugin="idle"))
    p.run(1012.0, seen(rec, pane(last_output=1011.0, output_mark="b"), plugin="waiting"))
    assert p.changes[-1] == [("r1", "idle", "waiting", 1012.0, True, "running", None)]
    # a record first seen on a later pass alerts when it is waiting
    p.run(1013.0, seen(rec, pane(last_output=1011.0, output_mark="b"), plugin="waiting"),
          seen(record("r2"), pane("%2", 600, last_output=1012.0, output_mark="x"), plugin="waiting",
               tree=[proc(600)]))
    assert p.changes[-1] == [("r2", None, "waiting", 1012.0, True, "running", None)]


def test_a_record_that_left_is_exited_with_why_and_a_gone_server_loses_everyone():
    p = Passes()
    a, b = record("a"), record("b")
    p.run(1010.0, seen(a, pane(last_output=1004.0, output_mark="a"), plugin="idle"),
          seen(b, pane("%2", 600, last_output=1004.0, output_mark="a"), plugin="idle", tree=[proc(600)]))
    judged = p.run(1011.0, seen(b, pane("%2", 600, last_output=1004.0, output_mark="a"), plugin="idle",
                                tree=[proc(600)]), notes={"a": "asleep (sleep_after)"})
    assert p.changes[-1] == [("a", "idle", None, 1011.0, False, "exited", "asleep (sleep_after)")]
    assert [t.rec.id for t in judged.left] == ["a"] and set(judged.tracks) == {"b"}
    assert judged.changes[0].live.pane.pane_id == "%1"
    assert [(c.live.rec.id, c.old, c.new, c.live.state, c.live.pane) for c in lost(p.tracks, 1012.0)] == \
        [("b", "idle", None, "lost", None)]


def test_a_blind_backends_screen_that_changed_is_a_sign_of_life():
    """No output mark, no output time: the screen, compared pass to pass, tells."""
    p = Passes()
    rec, pn = record(), pane()
    p.run(1010.0, seen(rec, pn, screen="a"))
    assert p.changes[-1][0][2] == "idle"
    p.run(1011.0, seen(rec, pn, screen="b"))
    assert p.changes[-1][0][1:4] == ("idle", "working", 1011.0)
    assert p.tracks["r1"].screen == "b"
    p.run(1012.0, seen(rec, pn))  # no capture this pass: the last screen is kept
    assert p.tracks["r1"].screen == "b"


@pytest.mark.parametrize("plugin", ["idle", "working", "waiting", "stalled", None])
def test_a_first_pass_is_the_one_rule(plugin):
    """A first pass is the one rule (activity.judge, as ls uses it) and first_since on what it saw."""
    from muxhost.activity import Evidence, first_since, judge

    p = Passes()
    pn = pane(last_output=1000.0, output_mark="a")
    p.run(1020.0, seen(record(), pn, plugin=plugin))
    state = judge(Evidence(plugin, progress=1000.0), 1020.0, STALL)
    assert p.changes[-1][0][2] == state
    assert p.changes[-1][0][3] == (first_since(state, 1000.0, 1000.0, STALL, 1020.0, LAUNCH) or 1020.0)
