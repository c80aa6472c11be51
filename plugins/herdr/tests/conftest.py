"""The herdr fixtures (herdr_testing.py, loaded by path: pytest runs with --import-mode=importlib)."""
from pathlib import Path

from muxhost.testing import load_module

_herdr_testing = load_module(Path(__file__).with_name("herdr_testing.py"))
herdr_server = _herdr_testing.herdr_server
herdr_live_server = _herdr_testing.herdr_live_server
start_herdr = _herdr_testing.start_herdr
