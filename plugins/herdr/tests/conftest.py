"""The herdr fixtures (herdr_testing.py, loaded by path: pytest runs with --import-mode=importlib)."""
import importlib.util
import sys
from pathlib import Path


def _herdr_testing():
    name = "muxhost_herdr_testing"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("herdr_testing.py"))
        sys.modules[name] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[name]


herdr_server = _herdr_testing().herdr_server
herdr_live_server = _herdr_testing().herdr_live_server
start_herdr = _herdr_testing().start_herdr
