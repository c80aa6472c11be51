"""The codex plugin keeps the contract every agent plugin keeps (muxhost.testing.AgentContract): the
real codex TUI in real tmux panes, against the fake Responses server of conftest.py. A child
conversation is a sub-agent thread: the fake model answers ``SPAWN-CHILD <text>`` with a
``spawn_agent`` call whose task holds ``<text>``."""
from __future__ import annotations

import json

from pathlib import Path

import pytest

from muxhost.testing import AgentContract, wait_for

READY = ("? for shortcuts", "Ask Codex to do anything")
SPAWN_WORD = "SPAWN-CHILD"


class TestCodexContract(AgentContract):
    agent = "codex"
    has_children = True
    settle = 1.0  # codex writes its state database and logs a moment after a turn
    activity_fixtures = Path(__file__).parent / "fixtures" / "activity"  # made by record_activity.py

    @pytest.fixture(autouse=True)
    def _codex(self, mux_codex):
        self.cx = mux_codex  # the real binary on the agents' PATH, CODEX_HOME, the fake server's key

    def prepare(self, mux):
        self.cx.configure(self.workdir(mux))  # config.toml: the fake provider, the work folder trusted

    def _answered(self, text: str) -> int:
        """How many rollouts hold ``text`` with a reply of the fake model after it."""
        found = 0
        for path in Path(self.cx.codex_home).glob("sessions/**/rollout-*.jsonl"):
            data = path.read_bytes()
            at = data.find(text.encode())
            found += at >= 0 and b"fake reply" in data[at:]
        return found

    def _say(self, mux, pane: str, typed: str, text: str, rollouts: int) -> None:
        try:
            wait_for(lambda: any(r in mux.capture(pane) for r in READY), timeout=30, what=f"codex ready on {pane}")
        except AssertionError as e:
            raise AssertionError(f"{e}; the screen:\n{mux.capture(pane)}") from None
        mux.type(pane, typed, pause=0.6)  # codex takes text followed at once by Enter as a paste
        wait_for(lambda: self._answered(text) >= rollouts, timeout=40, what=f"{text!r} answered in {rollouts} rollout(s)")

    def model_requests(self, mux):
        return [json.dumps(r["body"]) for r in list(self.cx.server.requests)]

    def converse(self, mux, pane, text):
        self._say(mux, pane, text, text, 1)

    def spawn_child(self, mux, pane, text):
        # the parent's rollout and the sub-agent's both hold the text, each with a reply after it
        self._say(mux, pane, f"{SPAWN_WORD} {text}", text, 2)
