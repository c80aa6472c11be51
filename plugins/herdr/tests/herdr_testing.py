"""pytest fixtures for tests on the herdr backend: ``herdr_server`` (the fake herdr of herdr_fake.py)
and ``herdr_live_server`` (a real ``herdr server``, where ``herdr`` is on PATH; skipped elsewhere).

Each gives a pane server the ``mux`` fixture runs the CLI against (``mux`` parametrized with
``"herdr"`` or ``"herdr-live"``): ``.address`` (its socket) and ``.env`` (what points the CLI at it).
Both run on a private socket with the test's HOME and ``SHELL=/bin/sh``, and end every pane at
teardown. The fake also fails the test when any request or response broke herdr's schema.

Loaded by path from the conftest files (pytest runs with ``--import-mode=importlib``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
FAKE = HERE / "herdr_fake.py"
STALE = "HERDR_FAKE_SERVER_ONLY"  # in the server's environment only: never an agent's


def _short_dir() -> str:
    """A private folder with a short path: a Unix socket path has at most ~104 bytes."""
    return tempfile.mkdtemp(prefix="herdr-", dir="/tmp" if os.path.isdir("/tmp") else None)


def _server_env(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    from muxhost.testing import clean_env

    home.mkdir(parents=True, exist_ok=True)
    env = clean_env(home)
    env = {k: v for k, v in env.items() if not k.startswith("HERDR_")}
    env.update({"SHELL": "/bin/sh", STALE: "from-the-herdr-server", **(extra or {})})
    return env


def _ping(path: str) -> dict[str, Any] | None:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(2)
            s.connect(path)
            s.sendall(b'{"id":"ready","method":"ping","params":{}}\n')
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        return json.loads(data)
    except (OSError, ValueError):
        return None


class FakeHerdr:
    """The fake herdr server (herdr_fake.py) in its own process on a private socket."""

    def __init__(self, home: Path, protocol: int | None = None, env: dict[str, str] | None = None):
        self.server_env = _server_env(home, env)
        self.folder = Path(_short_dir())
        self.address = str(self.folder / "herdr.sock")
        self.log = self.folder / "requests.jsonl"
        self.violations_file = self.folder / "violations.txt"
        self.env = {"HERDR_SOCKET_PATH": self.address}
        args = [sys.executable, str(FAKE), self.address, "--log", str(self.log), "--violations", str(self.violations_file)]
        if protocol is not None:
            args += ["--protocol", str(protocol)]
        self.proc = subprocess.Popen(args, env=self.server_env, start_new_session=True, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while _ping(self.address) is None:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the fake herdr server did not start on {self.address}")
            time.sleep(0.05)
        self.log.write_text("")  # the readiness ping is not the test's

    def requests(self) -> list[dict[str, Any]]:
        """Every request since the start (or :meth:`forget`): ``{"method", "params", "error"}``."""
        return [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []

    def forget(self) -> None:
        self.log.write_text("")

    def violations(self) -> list[str]:
        return self.violations_file.read_text().splitlines() if self.violations_file.exists() else []

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        shutil.rmtree(self.folder, ignore_errors=True)


class LiveHerdr:
    """A real ``herdr server`` on a private socket, with its own config folder."""

    def __init__(self, home: Path):
        binary = shutil.which("herdr")
        if binary is None:
            pytest.skip("herdr is not on PATH: the live herdr tests need a real herdr server "
                        "(herdr 0.8.2 is not installable here: not on PyPI, npm or Debian)")
        self.folder = Path(_short_dir())
        self.address = str(self.folder / "herdr.sock")
        self.env = {"HERDR_SOCKET_PATH": self.address}
        self.server_env = _server_env(home, {"HERDR_SOCKET_PATH": self.address,
                                             "XDG_CONFIG_HOME": str(self.folder / "config"),
                                             "XDG_STATE_HOME": str(self.folder / "state")})
        self.binary = binary
        self.proc = subprocess.Popen([binary, "server"], env=self.server_env, start_new_session=True,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while True:
            pong = _ping(self.address)
            if pong is not None and "result" in pong:
                break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"`herdr server` did not start on {self.address}")
            time.sleep(0.1)

    def violations(self) -> list[str]:
        return []

    def stop(self) -> None:
        subprocess.run([self.binary, "server", "stop"], env=self.server_env, capture_output=True, timeout=30)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)
        shutil.rmtree(self.folder, ignore_errors=True)


@pytest.fixture
def herdr_server(tmp_path):
    """The fake herdr server (no workspace at start), with the test's HOME (``tmp_path/home``)."""
    server = FakeHerdr(tmp_path / "home")
    yield server
    bad = server.violations()
    server.stop()
    assert not bad, "requests or responses that break herdr's schema:\n" + "\n".join(bad)


@pytest.fixture
def start_herdr(tmp_path):
    """Start fake herdr servers of one's own: ``start_herdr(protocol=22, env={"ENV": rcfile})``
    (``env``: more of the server's environment). Each is stopped at teardown; schema violations fail."""
    made: list[FakeHerdr] = []

    def start(**kw: Any) -> FakeHerdr:
        made.append(FakeHerdr(tmp_path / "home", **kw))
        return made[-1]

    yield start
    bad = [v for s in made for v in s.violations()]
    for s in made:
        s.stop()
    assert not bad, "requests or responses that break herdr's schema:\n" + "\n".join(bad)


@pytest.fixture
def herdr_live_server(tmp_path):
    """A real ``herdr server`` (skips where ``herdr`` is not on PATH)."""
    server = LiveHerdr(tmp_path / "home")
    yield server
    server.stop()
