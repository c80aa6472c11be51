"""Small helpers of every test tier: a command's result, polling, whether a process lives, loading another test module, the
one-error-line check, the real agent CLIs, plugin packages pip-installed as a user would, a quiet network connection."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NoReturn

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


def alive(pid: int, create_time: float | None = None) -> bool:
    """True while ``pid`` runs and is not a zombie; with ``create_time``, only while it is the
    process created then (:func:`muxhost.procs.same_process`: a pid taken again is not it)."""
    import psutil

    if create_time is not None:
        from muxhost import procs

        return procs.same_process(pid, create_time)
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def load_module(path: str | os.PathLike):
    """The module at ``path`` (another test module's helpers and fixtures, a plugin's test kit),
    loaded once per file: under ``--import-mode=importlib`` test modules cannot import each other."""
    import importlib.util
    import re

    path = Path(path).resolve()
    name = "muxhost_test_module_" + re.sub(r"\W", "_", str(path))
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        sys.modules[name] = module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name]


def one_line_error(r: "Result", code: int, *needles: str) -> str:
    """``r`` failed with exit ``code`` and exactly one ``muxhost:`` line on stderr (no traceback),
    holding every one of ``needles``; returns that line."""
    assert r.rc == code, (r.rc, r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("muxhost: "), r.err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    assert "Traceback" not in r.err
    return lines[0]


def plugin_package(root: Path, dist: str, module: str, source: str, version: str = "1.0") -> Path:
    """Write the source tree of the plugin package ``dist`` into ``root``: one module ``module``
    holding ``source``, entry point ``muxhost: module = module``. Returns ``root``."""
    import textwrap

    root = Path(root)
    root.mkdir(parents=True)
    (root / "pyproject.toml").write_text(textwrap.dedent(f'''
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
    (root / f"{module}.py").write_text(source)
    return root


def pip_install(package: Path, site: Path) -> None:
    """pip-install a package source tree into the folder ``site`` (``--target``), as a user would."""
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--target", str(site), str(package)], check=True)


def install_plugin(folder: Path, dist: str, module: str, source: str, version: str = "1.0") -> dict[str, str]:
    """Build the plugin package ``dist`` (:func:`plugin_package`) and pip-install it into
    ``folder/site``. Returns the environment that makes the CLI load it and only it
    (``mux.run(..., env=...)``): ``PYTHONPATH`` with the site first (the caller's own path kept
    behind it) and ``MUXHOST_LOAD_PLUGINS``."""
    site = Path(folder) / "site"
    pip_install(plugin_package(Path(folder) / dist, dist, module, source, version), site)
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "MUXHOST_LOAD_PLUGINS": module}


def in_ci() -> bool:
    """True in CI (``CI=true``, as .ci/run sets it)."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def missing(why: str) -> NoReturn:
    """A test (or a test module, at its top) without something it needs that an install step gives
    (an agent CLI, textual, sshd): a failure in CI, where that step is missing, else a skip that
    says ``why``. Not for what CI cannot have at all (herdr, another OS): that is a plain skip."""
    if in_ci():
        pytest.fail(f"{why} (a failure in CI: CI=true)", pytrace=False)
    pytest.skip(why, allow_module_level=True)


def agent_binary(name: str) -> str:
    """The real agent CLI ``name``: from ``$MUXHOST_AGENT_BIN_DIR`` (set by .ci/run), else PATH.
    Missing: :func:`missing` (a failure in CI, a skip that says why elsewhere)."""
    bin_dir = os.environ.get("MUXHOST_AGENT_BIN_DIR")
    found = None
    if bin_dir and os.access(os.path.join(bin_dir, name), os.X_OK):
        found = os.path.join(bin_dir, name)
    found = found or shutil.which(name)
    if found:
        return found
    missing(f"the {name} CLI is not installed (run .ci/run, or set MUXHOST_AGENT_BIN_DIR)")


_PEER = """import socket, sys
srv = socket.create_server(("127.0.0.1", 0))
print(srv.getsockname()[1], flush=True)
conn, _ = srv.accept()
for line in sys.stdin:
    if line.strip() == "read":
        conn.recv(1)
    else:
        conn.sendall(b"x")
    print("ok", flush=True)
"""


@contextlib.contextmanager
def quiet_connection(seconds: float):
    """A TCP connection of this process to another (a child on 127.0.0.1, a model that sends
    nothing) made ``seconds`` ago (it waits that long), nothing sent either way: yields
    ``[os.getpid()]``, the pids to give an AgentContext so that :func:`muxhost.kit.net.quiet_for`
    sees it. The yielded list's ``poke()`` has the peer send one byte (a reply that streams),
    ``answer()`` this end (a request)."""
    import socket

    peer = subprocess.Popen([sys.executable, "-c", _PEER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    client = None
    try:
        client = socket.create_connection(("127.0.0.1", int(peer.stdout.readline())))

        class Pids(list):
            def poke(self) -> None:
                """The peer sends one byte (a reply streams)."""
                peer.stdin.write("send\n")
                peer.stdin.flush()
                client.recv(1)
                peer.stdout.readline()

            def answer(self) -> None:
                """This end sends one byte (a request, a ping's answer)."""
                peer.stdin.write("read\n")
                peer.stdin.flush()
                client.sendall(b"y")
                peer.stdout.readline()

        time.sleep(seconds)
        yield Pids([os.getpid()])
    finally:
        if client is not None:
            client.close()
        peer.kill()
        peer.wait()
