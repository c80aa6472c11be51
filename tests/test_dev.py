"""The developer entry point `./dev`, as a new user meets it."""
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def dev(*args, env=None):
    return subprocess.run([str(ROOT / "dev"), *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


def test_help_lists_every_command_and_no_script_lines():
    out = dev("--help")
    assert out.returncode == 0
    for cmd in ("./dev demo", "./dev test", "./dev bench"):
        assert cmd in out.stdout
    assert "set -" not in out.stdout and "#" not in out.stdout
    bad = dev("bogus")
    assert bad.returncode == 2 and "unknown command: bogus" in bad.stderr


def test_demo_installs_only_when_something_changed(tmp_path):
    """A second `./dev demo` with nothing changed runs no pip (it took 18-43 s every time)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    log = tmp_path / "calls"
    fake = f'#!/bin/sh\necho "$(basename "$0") $*" >> {log}\n[ "$1" = -V ] && echo "Python 3.x"\nexit 0\n'
    for name in ("python", "muxhost"):
        (venv / "bin" / name).write_text(fake)
        (venv / "bin" / name).chmod(0o755)
    env = {"MUXHOST_VENV": str(venv)}
    assert dev("demo", env=env).returncode == 0
    first = log.read_text()
    assert "-m pip install" in first and "muxhost launch demo" in first
    log.write_text("")
    assert dev("demo", env=env).returncode == 0
    second = log.read_text()
    assert "pip" not in second and "muxhost launch demo" in second
