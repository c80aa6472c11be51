"""The claude plugin keeps the contract every agent plugin keeps (muxhost.testing.AgentContract), run
on the REAL claude binary in real tmux panes against the fake model server of conftest.py.

Needs the ``claude`` CLI (``$MUXHOST_AGENT_BIN_DIR``): in CI a missing binary fails, elsewhere the
tests skip and say why. A child conversation is a claude sub-agent (the Agent / Task tool): its
transcript lives in ``projects/<folder>/<id>/subagents/``, its output under ``<tmp>/claude-<uid>/``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from muxhost.testing import AgentContract, files_holding, wait_for

# the words conftest.FakeAnthropic reacts to (conftest is not importable by name)
SPAWN_CHILD = "MUXHOST_SPAWN_CHILD"
FAKE_REPLY = "hello, I am a fake model"


class TestClaudeContract(AgentContract):
    agent = "claude"
    has_children = True
    settle = 1.0  # claude appends to its transcript a moment after a turn
    activity_fixtures = Path(__file__).parent / "fixtures" / "activity"  # made by record_activity.py

    @pytest.fixture(autouse=True)
    def _claude(self, claude_world):
        # HOME seeded (onboarding, the work folder trusted, tools allowed), the fake server's env, the
        # binary first on PATH; claude_world's work folder is the contract's (tmp_path / "work")
        self.world = claude_world

    def prepare(self, mux):
        assert self.workdir(mux) == self.world.work
        # claude's temp folder under HOME, so that every grep of the contract covers it too
        mux.env["CLAUDE_CODE_TMPDIR"] = str(mux.home / "tmp")

    @staticmethod
    def _stored(mux, text: str, where: str = "/") -> None:
        """Until a transcript (``where``: a part of its path) holds ``text``."""
        wait_for(lambda: [p for p in files_holding([mux.home / ".claude" / "projects"], [text]) if where in p],
                 timeout=30, what=f"a transcript ({where}) holding {text!r}")

    def model_requests(self, mux):
        return [json.dumps(r["body"]) for r in list(self.world.server.requests)]

    def converse(self, mux, pane, text):
        self.world.wait_ready(pane, timeout=60)
        self.world.say(pane, text, FAKE_REPLY)
        self._stored(mux, text)

    def spawn_child(self, mux, pane, text):
        # typed reversed: the text itself is only in what the sub-agent was given and wrote
        self.world.say(pane, f"{SPAWN_CHILD} {text[::-1]}", "child done")
        self._stored(mux, text, "/subagents/")
