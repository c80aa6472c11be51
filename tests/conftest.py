import sys
from pathlib import Path

import pytest

AGENTS = Path(__file__).parent / "agents"


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
