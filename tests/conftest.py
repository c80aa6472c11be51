import importlib.util
import sys
from pathlib import Path

import pytest

AGENTS = Path(__file__).parent / "agents"
# the pane backends the host's lifecycle tests run on (@pytest.mark.every_backend): tmux, the fake
# herdr server, and a real herdr where `herdr` is on PATH (skipped elsewhere)
BACKENDS = ("tmux", "herdr", "herdr-live")


def pytest_configure(config):
    config.addinivalue_line("markers", "every_backend: run the test on every pane backend (the mux fixture)")


def pytest_generate_tests(metafunc):
    if metafunc.definition.get_closest_marker("every_backend") and "mux" in metafunc.fixturenames:
        metafunc.parametrize("mux", BACKENDS, indirect=True)


def _herdr_testing():
    """plugins/herdr/tests/herdr_testing.py: the herdr_server and herdr_live_server fixtures."""
    name = "muxhost_herdr_testing"
    if name not in sys.modules:
        path = Path(__file__).resolve().parent.parent / "plugins" / "herdr" / "tests" / "herdr_testing.py"
        spec = importlib.util.spec_from_file_location(name, path)
        sys.modules[name] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[name]


herdr_server = _herdr_testing().herdr_server
herdr_live_server = _herdr_testing().herdr_live_server


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
