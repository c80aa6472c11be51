"""pytest helpers for muxhost and its plugin packages (loaded with ``-p muxhost.testing``).

Fixtures:

- ``mux``: a :class:`Mux` bound to libtmux's ``server`` fixture (a private tmux socket), a temp HOME,
  a temp state dir and a temp config path. ``mux.run("launch", "demo", "--json")`` runs the real
  ``muxhost`` CLI in a subprocess with that environment. At teardown every process of every record
  of this test is ended (by pid, after checking its create time): nothing a test started survives.

Helpers: :func:`wait_for`, :func:`tree_hash` (prove "byte for byte"), :func:`agent_binary` (a real
agent CLI, or fail in CI / skip elsewhere), :class:`TmuxClient` (a real attached client in a pty).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest


@dataclass
class Result:
    rc: int
    out: str
    err: str

    @property
    def json(self) -> Any:
        return json.loads(self.out)


def wait_for(predicate: Callable[[], Any], timeout: float = 20.0, interval: float = 0.05, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy; fail the test after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def tree_hash(*roots: str | os.PathLike, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """``{path: sha256}`` for every file (and ``path/: dir`` for folders) under the roots — compare
    one taken before a purge with one after to prove "byte for byte". Paths containing any of
    ``skip`` are left out."""
    import hashlib

    out: dict[str, str] = {}
    for root in roots:
        root = Path(root)
        if root.is_file():
            out[str(root)] = hashlib.sha256(root.read_bytes()).hexdigest()
            continue
        if not root.is_dir():
            continue
        for dirpath, _dirnames, filenames in os.walk(root):
            if any(s in dirpath for s in skip):
                continue
            out[dirpath + "/"] = "dir"
            for f in filenames:
                p = os.path.join(dirpath, f)
                if any(s in p for s in skip):
                    continue
                try:
                    out[p] = hashlib.sha256(Path(p).read_bytes()).hexdigest()
                except OSError:
                    out[p] = "unreadable"
    return out


def clean_env(home: Path) -> dict[str, str]:
    """The caller's environment without anything that points at the user's tmux or home."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TMUX", "XDG_", "MUXHOST_", "CLAUDE", "OPENCODE", "CODEX"))}
    env.update(HOME=str(home), SHELL="/bin/sh", TERM=env.get("TERM") or "xterm-256color", LANG=env.get("LANG", "C.UTF-8"))
    # keep the npm cache shared (warm) even though HOME is a temp dir
    real_home = os.path.expanduser("~")
    env.setdefault("npm_config_cache", os.environ.get("npm_config_cache") or os.path.join(real_home, ".npm"))
    return env


class Mux:
    """Runs the real muxhost CLI against a private tmux server and a private HOME."""

    def __init__(self, server, tmp_path: Path):
        self.server = server
        self.socket = server.socket_name
        self.home = tmp_path / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        self.state_dir = tmp_path / "state"
        self.config = tmp_path / "config.yaml"
        self.env = clean_env(self.home)
        self.env.update(
            MUXHOST_STATE_DIR=str(self.state_dir),
            MUXHOST_TMUX_SOCKET=self.socket,
            MUXHOST_CONFIG=str(self.config),
        )

    def run(self, *args: str, env: dict[str, str] | None = None, input: str | None = None,
            timeout: float = 60, cwd: str | None = None) -> Result:
        full_env = dict(self.env)
        if env:
            full_env.update(env)
        p = subprocess.run([sys.executable, "-m", "muxhost", *args], env=full_env, input=input,
                           capture_output=True, text=True, timeout=timeout, cwd=cwd or str(self.home),
                           stdin=None if input is not None else subprocess.DEVNULL)
        return Result(p.returncode, p.stdout, p.stderr)

    def ok(self, *args: str, **kw) -> Any:
        """Run a command that must succeed; return its parsed ``--json`` output (or stdout)."""
        r = self.run(*args, **kw)
        assert r.rc == 0, f"muxhost {' '.join(args)} -> {r.rc}\nstdout: {r.out}\nstderr: {r.err}"
        try:
            return json.loads(r.out)
        except ValueError:
            return r.out

    def tmux(self, *args: str) -> list[str]:
        return self.server.cmd(*args).stdout

    def capture(self, pane_id: str, history: bool = False) -> str:
        """The pane's screen (with ``history``: its scrollback too)."""
        extra = ["-S", "-"] if history else []
        return "\n".join(self.server.cmd("capture-pane", "-p", "-J", *extra, "-t", pane_id).stdout)

    def wait_screen(self, pane_id: str, text: str, timeout: float = 20.0) -> str:
        """Poll the pane until ``text`` shows; on time-out the failure shows the last screen."""
        try:
            return wait_for(lambda: (lambda s: s if text in s else None)(self.capture(pane_id)),
                            timeout=timeout, what=f"{text!r} on pane {pane_id}")
        except AssertionError as e:
            try:
                screen = self.capture(pane_id, history=True)
            except Exception as why:  # the pane may be gone
                screen = f"(cannot capture: {why})"
            raise AssertionError(f"{e}\n--- last screen of {pane_id} ---\n{screen.rstrip()}") from None

    def type(self, pane_id: str, text: str, enter: bool = True, pause: float = 0.3) -> None:
        self.server.cmd("send-keys", "-t", pane_id, "-l", text)
        if enter:
            time.sleep(pause)
            self.server.cmd("send-keys", "-t", pane_id, "Enter")

    def reap(self) -> None:
        """End every process of every record of this test (processes this test started)."""
        from muxhost import procs

        db = self.state_dir / "state.db"
        if not db.exists():
            return
        try:
            con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
            rows = con.execute("select id, launched_at, pids from records").fetchall()
            con.close()
        except sqlite3.Error:
            return
        table = procs.ProcessTable.snapshot()
        victims: dict[int, float] = {}
        for rid, launched_at, pids in rows:
            for p in procs.marked(rid, table):
                victims[p.pid] = p.create_time
            for pid, ct in json.loads(pids or "[]"):
                for p in table.tree_of((pid, ct)):
                    victims[p.pid] = p.create_time
        for pid, ct in victims.items():
            procs.signal_if_same(pid, ct, signal.SIGKILL)


@pytest.fixture
def mux(server, tmp_path):
    m = Mux(server, tmp_path)
    yield m
    m.reap()


def install_plugin(folder: Path, dist: str, module: str, source: str, version: str = "1.0") -> dict[str, str]:
    """Build the plugin package ``dist`` (one module ``module`` holding ``source``, entry point
    ``muxhost: module = module``) and pip-install it into ``folder/site`` as a user would install
    it. Returns the environment that makes the CLI load it and only it (``mux.run(..., env=...)``):
    ``PYTHONPATH`` with the site first (the caller's own path kept behind it) and
    ``MUXHOST_LOAD_PLUGINS``."""
    import textwrap

    pkg = Path(folder) / dist
    pkg.mkdir(parents=True)
    (pkg / "pyproject.toml").write_text(textwrap.dedent(f'''
        [build-system]
        requires = ["setuptools>=64"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "{dist}"
        version = "{version}"
        dependencies = ["muxhost"]

        [project.entry-points.muxhost]
        {module} = "{module}"
    '''))
    (pkg / f"{module}.py").write_text(source)
    site = Path(folder) / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--target", str(site), str(pkg)], check=True)
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "MUXHOST_LOAD_PLUGINS": module}


def agent_binary(name: str) -> str:
    """The real agent CLI ``name``: from ``$MUXHOST_AGENT_BIN_DIR`` (set by .ci/run), else PATH.
    Missing: a failure in CI (``CI=true``), a skip that says why elsewhere."""
    bin_dir = os.environ.get("MUXHOST_AGENT_BIN_DIR")
    found = None
    if bin_dir and os.access(os.path.join(bin_dir, name), os.X_OK):
        found = os.path.join(bin_dir, name)
    found = found or shutil.which(name)
    if found:
        return found
    why = f"the {name} CLI is not installed (run .ci/run, or set MUXHOST_AGENT_BIN_DIR)"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(why)
    pytest.skip(why)


class TmuxClient:
    """A real tmux client attached in a pseudo-terminal, for end-to-end tests of key bindings:
    ``press(b"\\x02P")`` types, ``wait_text("…")`` waits until the terminal showed it."""

    def __init__(self, socket: str, target: str, env: dict[str, str], cols: int = 200, rows: int = 40):
        import fcntl
        import pty
        import struct
        import termios
        import threading

        tmux = shutil.which("tmux") or "tmux"
        pid, fd = pty.fork()
        if pid == 0:  # the child: set the terminal size, then become the tmux client
            try:
                fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
                os.execve(tmux, [tmux, "-L", socket, "attach-session", "-t", target], env)
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        self._buf = bytearray()
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.fd, 65536)
            except OSError:
                return
            if not data:
                return
            with self._lock:
                self._buf += data

    @property
    def text(self) -> str:
        return self.text_since(0)

    def mark(self) -> int:
        with self._lock:
            return len(self._buf)

    def text_since(self, mark: int) -> str:
        """What the terminal was sent since ``mark``, without escape sequences."""
        import re

        with self._lock:
            raw = bytes(self._buf[mark:]).decode("utf-8", "replace")
        return re.sub(r"\x1b(\[[0-9;?<>=]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[()][A-Z0-9]|[=>78MNOcDEHZ])", "", raw)

    def press(self, data: bytes) -> None:
        os.write(self.fd, data)

    def wait_text(self, text: str, timeout: float = 20.0, since: int = 0) -> str:
        return wait_for(lambda: (lambda t: t if text in t else None)(self.text_since(since)),
                        timeout=timeout, interval=0.02, what=f"{text!r} on the tmux client's terminal")

    def close(self) -> None:
        try:
            os.kill(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        try:
            os.close(self.fd)
        except OSError:
            pass
