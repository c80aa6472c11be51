import sys
from pathlib import Path

import pytest

from muxhost.testing import load_module

AGENTS = Path(__file__).parent / "agents"
# the pane backends the host's lifecycle tests run on (@pytest.mark.every_backend): tmux, the fake
# herdr server, and a real herdr where `herdr` is on PATH (skipped elsewhere)
BACKENDS = ("tmux", "herdr", "herdr-live")


def pytest_configure(config):
    config.addinivalue_line("markers", "every_backend: run the test on every pane backend (the mux fixture)")


def pytest_generate_tests(metafunc):
    if metafunc.definition.get_closest_marker("every_backend") and "mux" in metafunc.fixturenames:
        metafunc.parametrize("mux", BACKENDS, indirect=True)


_herdr_testing = load_module(Path(__file__).resolve().parent.parent / "plugins" / "herdr" / "tests" / "herdr_testing.py")
herdr_server = _herdr_testing.herdr_server
herdr_live_server = _herdr_testing.herdr_live_server


@pytest.fixture
def stubborn_config(mux, tmp_path):
    """A config with a config agent `stubborn` (tests/agents/stubborn.py) and short graces."""
    pidfile = tmp_path / "stubborn.pids"
    mux.config.write_text(
        "stop:\n  exit_grace: 1\n  term_grace: 1\n  hup_grace: 0.5\n"
        "agents:\n  stubborn:\n"
        f"    command: [{sys.executable}, {AGENTS / 'stubborn.py'}, {pidfile}]\n"
        "    exit_text: /exit\n    process_names: [stubborn.py]\n"
    )
    return pidfile
