"""Records the demo agent's activity fixtures, ``tests/fixtures/activity/demo/<case>/``
(:mod:`muxhost.testing.recording`): the built-in demo in a real tmux pane at its prompt, at ``/work``
and asking ``/ask`` — its screen (the demo reads only that when it has one). Not collected by the
suite (its name); after a change to the demo's words, record again and commit::

    ./dev test tests/record_demo_activity.py
"""

from __future__ import annotations

from pathlib import Path

from muxhost.plugins.demo import DemoAgent
from muxhost.testing.recording import record

FIXTURES = Path(__file__).parent / "fixtures" / "activity" / "demo"


def test_record(mux):
    rec = mux.ok("launch", "demo", "--json")
    pane = rec["pane"]
    mux.wait_screen(pane, "demo>")
    agent = DemoAgent()

    def take():
        return mux.capture(pane), {}, None

    def case(name: str, state: str) -> None:
        record(agent, FIXTURES / name, state, take, {str(mux.home): "@HOME@"})

    case("idle", "idle")
    mux.type(pane, "/work 30")
    mux.wait_screen(pane, "demo: working")
    case("working", "working")
    mux.tmux("send-keys", "-t", pane, "C-c")
    mux.wait_screen(pane, "demo>")
    mux.type(pane, "/ask")
    mux.wait_screen(pane, "(y/n)")
    case("waiting-question", "waiting")
    mux.type(pane, "y")
