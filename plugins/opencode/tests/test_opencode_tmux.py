"""The real opencode TUI in a real tmux pane, driven through the muxhost CLI, for what the contract
suite (test_opencode_contract.py: launch, discover, stop, resume, purge refused while running, dry
run, purge, neighbour) leaves out: a sub-agent that starts its own child, purged with the parent,
with XDG_DATA_HOME, with OPENCODE_DB and without the binary; two TUIs in one folder when the second
one's session comes first."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from muxhost.testing import wait_for

READY = "ctrl+p commands"


class Scenario:
    def __init__(self, mux, tmp_path: Path, fake_llm, binary: str, npm_cache: str, env: dict, db_cls, words: dict):
        self.mux = mux
        self.words = words
        self.binary = binary
        self.cwd = tmp_path / "work"
        self.cwd.mkdir()
        self.bin_dir = tmp_path / "bin"
        self.bin_dir.mkdir()
        os.symlink(binary, self.bin_dir / "opencode")
        mux.env.update(words["env"])
        mux.env["PATH"] = f"{self.bin_dir}:{mux.env.get('PATH', os.defpath)}"
        mux.env["npm_config_cache"] = npm_cache
        mux.env.update(env)
        config_home = Path(mux.env.get("XDG_CONFIG_HOME") or mux.home / ".config")
        cfg = config_home / "opencode" / "opencode.json"
        cfg.parent.mkdir(parents=True, exist_ok=True)
        cfg.write_text(json.dumps(fake_llm.config, indent=1))
        if "OPENCODE_DB" in env:
            self.db_path = Path(env["OPENCODE_DB"])
        else:
            data = Path(mux.env.get("XDG_DATA_HOME") or mux.home / ".local/share")
            self.db_path = data / "opencode" / "opencode.db"
        self.db = db_cls(self.db_path)

    def opencode_run(self, prompt: str) -> None:
        env = dict(self.mux.env, PWD=str(self.cwd))
        p = subprocess.run([self.binary, "run", prompt], env=env, cwd=self.cwd, stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr

    def record(self, rid: str) -> dict:
        recs = [r for r in self.mux.ok("ls", "--all", "--json") if r["id"] == rid]
        assert len(recs) == 1
        return recs[0]

    def launch(self) -> dict:
        rec = self.mux.ok("launch", "opencode", "--cwd", str(self.cwd), "--json")
        assert rec["agent"] == "opencode" and rec["pane"], rec
        self.mux.wait_screen(rec["pane"], READY, timeout=40)
        return rec

    def prompt_subagents(self, pane: str) -> str:
        """Type a prompt that makes the model start a sub-agent, which starts a grandchild; return
        the new top-level session."""
        roots_before = set(self.db.roots()) if self.db_path.exists() else set()
        self.mux.type(pane, f"{self.words['spawn']} please")

        def done():
            if not self.db_path.exists():
                return None
            new = [r for r in self.db.roots() if r not in roots_before]
            if len(new) == 1 and len(self.db.family(new[0])) == 3 and self.words["done"] in self.mux.capture(pane):
                return new[0]
            return None
        return wait_for(done, timeout=60, interval=0.2, what="parent, sub-agent and grandchild")

    def stop(self, rid: str) -> dict:
        out = self.mux.ok("stop", rid, "--json")
        assert out["outcome"] == "exit", out
        return out


@pytest.fixture
def scenario(mux, tmp_path, fake_llm, opencode_bin, npm_cache, opencode_db, scripted):
    def make(env: dict | None = None) -> Scenario:
        return Scenario(mux, tmp_path, fake_llm, opencode_bin, npm_cache, env or {}, opencode_db, scripted)
    return make


def test_the_plugin_is_installed_and_listed(mux):
    agents = {a["name"]: a for a in mux.ok("plugins", "--json")["agents"]}
    assert agents["opencode"]["package"] == "muxhost-opencode"
    assert "opencode" in agents["opencode"]["process_names"]


def _short_flow(s, *, remove_binary: bool = False, unrelated: bool = False) -> dict:
    mux = s.mux
    ofam: list[str] = []
    if unrelated:
        s.opencode_run("just say hello")
        ofam = s.db.family(s.db.roots()[0])
    rec = s.launch()
    root = s.prompt_subagents(rec["pane"])
    fam = s.db.family(root)
    assert s.record(rec["id"])["conversation_id"] == root
    other_before = s.db.counts(ofam) if ofam else None
    s.stop(rec["id"])
    if remove_binary:
        (s.bin_dir / "opencode").unlink()
    report = mux.ok("purge", rec["id"], "--yes", "--json")
    assert report["residual"] == [] and report["complete"] is True, report
    for child in fam[1:]:  # the sub-agent and its own child went with it, labelled
        assert any(i.startswith(f"session:{child} (") and i.endswith(f" [child conversation {child}]")
                   for i in report["removed"]), report["removed"]
    assert all(n == 0 for n in s.db.counts(fam).values())
    assert s.db.mentions(fam) == {}
    if ofam:
        assert s.db.counts(ofam) == other_before
    return report


def test_with_xdg_data_home(scenario, tmp_path):
    s = scenario({"XDG_DATA_HOME": str(tmp_path / "xdg-data")})
    _short_flow(s)
    assert s.db_path == tmp_path / "xdg-data" / "opencode" / "opencode.db"
    assert not (s.mux.home / ".local/share/opencode/opencode.db").exists()


def test_with_opencode_db(scenario, tmp_path):
    s = scenario({"OPENCODE_DB": str(tmp_path / "elsewhere" / "oc.db")})
    (tmp_path / "elsewhere").mkdir()
    _short_flow(s)
    assert s.db_path.exists()
    assert not (s.mux.home / ".local/share/opencode/opencode.db").exists()


def test_without_the_binary_the_sql_path_purges(scenario):
    s = scenario()
    report = _short_flow(s, remove_binary=True, unrelated=True)
    assert any("binary not found" in n for n in report["notes"]), report


def test_two_agents_in_one_folder_each_get_their_own_conversation(scenario):
    """Both TUIs see every new session of the folder; opencode's log says which process made which,
    so the agent that has not been prompted yet never takes the other's conversation."""
    s = scenario()
    mux = s.mux
    a = s.launch()
    b = s.launch()
    mux.type(b["pane"], "hello from b")
    root_b = wait_for(lambda: (s.db.roots() or [None])[-1] if s.db_path.exists() else None, timeout=60,
                      what="b's session")
    # until opencode's log names b's process as the creator (it writes lazily), b may show none
    wait_for(lambda: s.record(b["id"])["conversation_id"] == root_b, timeout=60, interval=0.5,
             what="b's conversation discovered")
    assert s.record(a["id"])["conversation_id"] is None
    mux.type(a["pane"], "hello from a")
    wait_for(lambda: len(s.db.roots()) == 2, timeout=60, what="a's session")
    root_a = [r for r in s.db.roots() if r != root_b][0]
    wait_for(lambda: s.record(a["id"])["conversation_id"] == root_a, timeout=60, interval=0.5,
             what="a's conversation discovered")
    assert s.record(b["id"])["conversation_id"] == root_b
