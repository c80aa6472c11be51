"""The demo agent program and its plugin, as a plugin author would read them."""
import re
import subprocess
import sys
from pathlib import Path

from muxhost import config
from muxhost.agent import AgentContext
from muxhost.plugins.demo import DemoAgent

ROOT = Path(__file__).resolve().parent.parent


def run_demo(home, *args, input=""):
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "muxhost.demo_agent", *args], input=input, env=env,
                          capture_output=True, text=True, timeout=30)


def test_demo_program_answers_resumes_and_makes_children(tmp_path):
    cid = "a" * 32
    r = run_demo(tmp_path, "--id", cid, input="hello\n/child 2\n/exit\n")
    assert r.returncode == 0, r.stderr
    assert "olleh" in r.stdout and f"resume with: muxhost-demo --resume {cid}" in r.stdout
    root = tmp_path / ".local/share/muxhost-demo"
    assert len(list((root / "conversations").glob("*.jsonl"))) == 3
    assert not list((root / "live").glob("*.json"))  # the live entry goes with a clean exit
    r = run_demo(tmp_path, "--resume", cid, input="again\n")
    assert "turn 2" in r.stdout
    ctx = AgentContext(home=str(tmp_path), env={"HOME": str(tmp_path)})
    agent = DemoAgent()
    from muxhost import plans

    family = plans.family(agent, ctx, cid)  # the host walks the plugin's children() at every depth
    assert family[0] == cid and len(family) == 3 and agent.children(ctx, family[2]) == []
    assert agent.exists(ctx, cid) and agent.in_use(ctx, cid) == []
    assert run_demo(tmp_path, "--resume", "b" * 32).returncode == 1
    assert run_demo(tmp_path, "--resume", "../x").returncode == 2


def test_data_home_follows_xdg_only_for_the_callers_own_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "me"))
    own = AgentContext(home=str(tmp_path / "me"), env={"XDG_DATA_HOME": str(tmp_path / "xdg")})
    other = AgentContext(home=str(tmp_path / "other"), env={"XDG_DATA_HOME": str(tmp_path / "xdg")})
    assert own.data_home() == tmp_path / "xdg"
    assert other.data_home() == tmp_path / "other/.local/share"
    assert own.config_home() == tmp_path / "me/.config"
    assert own.expand(tmp_path / "me/a/b") == "~/a/b" and own.expand("/etc/x") == "/etc/x"


def test_config_example_shows_every_key_and_changes_no_default():
    """config.example.yaml names every key; copied as it is, it is the defaults; with its
    commented-out settings turned on, it is still a valid config."""
    text = (ROOT / "config.example.yaml").read_text()
    for key in ("socket_name", "default_agent", "backend", "root", *config.DEFAULTS, *config.WATCH_DEFAULTS,
                *config.AGENT_KEYS, *config.NOTIFY_DEFAULTS):
        assert f"{key}:" in text, key
    as_is = config.parse(text, "config.example.yaml")
    assert as_is.socket_name is None and as_is.agents == {} and as_is.worktree_root is None
    assert {k: as_is.stop(k) for k in config.DEFAULTS} == config.DEFAULTS
    assert {k: as_is.watch(k) for k in config.WATCH_DEFAULTS} == config.WATCH_DEFAULTS
    assert {k: as_is.notify(k) for k in config.NOTIFY_DEFAULTS} == config.NOTIFY_DEFAULTS
    assert as_is.data.get("default_agent", "demo") == "demo" and as_is.data.get("backend", "tmux") == "tmux"
    # every commented-out setting, turned on: `# key: value` lines (prose comments have no `key:` first)
    on = re.sub(r"^(\s*)# ?(?=[a-z_]+:|  |\s*#)", r"\1", text, flags=re.M)
    turned_on = config.parse(on, "config.example.yaml")
    assert turned_on.socket_name == "agents" and turned_on.watch("sleep_after") == 3600
    assert turned_on.agents["aider"]["command"] == ["aider", "--no-auto-commits"]
    assert turned_on.agents["claude"]["args"] == ["--model", "sonnet"]
    assert turned_on.notify("urls") == ["ntfy://my-topic", "json://127.0.0.1:8080/hook"]


def test_rewrite_keeps_a_concurrent_appenders_lines(tmp_path):
    """A writer that holds the file open in append mode while a purge rewrites it loses nothing."""
    from muxhost import fsutil

    shared = tmp_path / "history.jsonl"
    shared.write_bytes(b'{"conversation": "a", "n": 1}\n{"conversation": "b", "n": 1}\n')
    link = tmp_path / "link.jsonl"
    link.symlink_to(shared)
    writer = open(shared, "ab")  # another agent, still running
    assert fsutil.drop_lines(link, lambda line: b'"a"' in line) == 1
    writer.write(b'{"conversation": "b", "n": 2}\n')
    writer.close()
    assert shared.read_bytes() == b'{"conversation": "b", "n": 1}\n{"conversation": "b", "n": 2}\n'
    assert link.is_symlink()  # rewritten in place: the link is still a link
    assert [p.name for p in tmp_path.iterdir() if "muxhost" in p.name] == []  # no backup left behind
