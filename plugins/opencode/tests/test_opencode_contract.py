"""The opencode plugin keeps the contract every agent plugin keeps (muxhost.testing.AgentContract), on
the real opencode TUI in real tmux panes against the fake model server of conftest.py: launch and
discover, two TUIs in one folder, purge refused while running or resumed by hand in a shell, stop,
resume, the dry run, the purge (a sub-agent and its own sub-agent included) and the neighbour."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from muxhost.testing import AgentContract, wait_for

READY = "ctrl+p commands"


class TestOpenCodeContract(AgentContract):
    agent = "opencode"
    has_children = True
    titles_itself = True  # opencode asks its model for a title (the fake server says "Fake title")
    settle = 1.0  # opencode titles a session and flushes its log a moment after a turn
    activity_fixtures = Path(__file__).parent / "fixtures" / "activity"  # made by record_activity.py

    @pytest.fixture(autouse=True)
    def _opencode(self, fake_llm, opencode_bin, npm_cache, scripted, opencode_db):
        self.llm, self.binary, self.npm_cache, self.words, self.db = fake_llm, opencode_bin, npm_cache, scripted, opencode_db

    def prepare(self, mux):
        bin_dir = mux.home.parent / "bin"
        bin_dir.mkdir(exist_ok=True)
        if not (bin_dir / "opencode").exists():
            os.symlink(self.binary, bin_dir / "opencode")
        mux.env.update(self.words["env"], npm_config_cache=self.npm_cache,
                       PATH=f"{bin_dir}:{mux.env.get('PATH', os.defpath)}")
        cfg = mux.home / ".config" / "opencode" / "opencode.json"
        cfg.parent.mkdir(parents=True, exist_ok=True)
        cfg.write_text(json.dumps(self.llm.config, indent=1))

    def model_requests(self, mux):
        return [json.dumps(r) for r in list(self.llm.requests)]

    def converse(self, mux, pane, text):
        screen = mux.wait_screen(pane, READY, timeout=40)
        answer = self.words["noted"](text)
        before = screen.count(answer)
        mux.type(pane, text)
        wait_for(lambda: mux.capture(pane).count(answer) > before, timeout=60, what=f"the answer to {text!r}")

    def spawn_child(self, mux, pane, text):
        db = self.db(Path(mux.home) / ".local/share/opencode/opencode.db")
        sessions = len(db.query("select id from session"))
        mux.type(pane, f"{self.words['spawn']} {text}")
        # the parent calls the task tool: a sub-agent holding the text, which starts a grandchild
        wait_for(lambda: len(db.query("select id from session")) >= sessions + 2
                 and self.words["done"] in mux.capture(pane), timeout=60, what="a sub-agent and its own")
