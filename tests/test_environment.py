"""The suite runs as on a fresh machine: `./dev test` (and so CI) scrubs the caller's shell."""
import os
from pathlib import Path

import pytest

from muxhost.testing import in_ci


@pytest.mark.skipif(not in_ci(), reason="checked in CI only")
def test_ci_runs_without_the_callers_venv_agent_clis_or_muxhost_settings():
    env = os.environ
    assert "VIRTUAL_ENV" not in env and "PYTHONPATH" not in env
    leaked = [k for k in env if (k.startswith(("MUXHOST_", "TMUX")) and k != "MUXHOST_AGENT_BIN_DIR")]
    assert leaked == []
    for folder in env.get("PATH", "").split(os.pathsep):
        assert not (Path(folder) / "activate").exists(), f"a virtualenv's bin is on PATH: {folder}"
        assert not any((Path(folder) / b).exists() for b in ("claude", "opencode", "codex")), folder
    assert env.get("LANG") or any(k.startswith("LC_") for k in env)  # the locale is kept
