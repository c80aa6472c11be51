"""pytest helpers for muxhost and its plugin packages (loaded with ``-p muxhost.testing``).

Fixtures:

- ``mux``: a :class:`Mux` bound to libtmux's ``server`` fixture (a private tmux socket), a temp HOME,
  a temp state dir and a temp config path. ``mux.run("launch", "demo", "--json")`` runs the real
  ``muxhost`` CLI in a subprocess with that environment. At teardown every process of every record
  of this test is ended (by pid, after checking its create time): nothing a test started survives.

Helpers: :func:`wait_for`, :func:`tree_hash` (prove "byte for byte"), :func:`agent_binary` (a real
agent CLI, or fail in CI / skip elsewhere), :class:`TmuxClient` (a real attached client in a pty),
:func:`install_plugin` (pip-install a plugin package as a user would), :func:`unique_text` and
:func:`files_holding` (grep raw bytes for a conversation's text), ``Mux.shell`` and
``Mux.resume_command`` (resume a conversation outside muxhost, as a user would), :class:`Watching`
(``muxhost watch --json`` running, its change lines, what it published for a pane).

:class:`AgentContract`: the contract suite every agent plugin subclasses in its own tests.
"""

from __future__ import annotations

import json
import os
import shlex
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


def tree_hash(*roots: str | os.PathLike, skip: tuple[str, ...] = (),
              sizes: dict[str, int] | None = None) -> dict[str, str]:
    """``{path: sha256}`` for every file (and ``path/: dir`` for folders) under the roots — compare
    one taken before a purge with one after to prove "byte for byte". Paths containing any of
    ``skip`` are left out. ``sizes``, when given, is filled with each hashed file's size (of the
    very bytes hashed), for :func:`appended_only`."""
    import hashlib

    out: dict[str, str] = {}
    for root in roots:
        root = Path(root)
        if root.is_file():
            data = root.read_bytes()
            out[str(root)] = hashlib.sha256(data).hexdigest()
            if sizes is not None:
                sizes[str(root)] = len(data)
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
                    data = Path(p).read_bytes()
                except OSError:
                    out[p] = "unreadable"
                    continue
                out[p] = hashlib.sha256(data).hexdigest()
                if sizes is not None:
                    sizes[p] = len(data)
    return out


def appended_only(before: dict[str, str], sizes: dict[str, int], after: dict[str, str]) -> dict[str, str]:
    """``after`` without the files that only grew since ``before`` (``sizes`` from the same
    :func:`tree_hash`): each such file's first ``sizes[p]`` bytes, read now, hash to what they did
    before. A running agent appends to its own log while a refused purge runs; that is the agent's
    doing, and it loses no byte. A file rewritten, truncated or with a line taken out stays in."""
    import hashlib

    out = dict(after)
    for p, was in before.items():
        now = after.get(p)
        if now is None or now == was or was in ("dir", "unreadable") or p not in sizes:
            continue
        try:
            data = Path(p).read_bytes()
        except OSError:
            continue
        if len(data) > sizes[p] and hashlib.sha256(data[:sizes[p]]).hexdigest() == was:
            out[p] = was
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
    """Runs the real muxhost CLI against a private tmux server and a private HOME.

    On another pane backend (``backend="herdr"``), agents go to ``pane_server`` (its ``.address``;
    its ``.env`` points the CLI at it), and :meth:`capture`, :meth:`type`, :meth:`pane_pid` and
    :meth:`has_session` go through that backend's muxhost class; the tmux server stays for
    :meth:`shell` and :meth:`tmux`."""

    def __init__(self, server, tmp_path: Path, backend: str = "tmux", pane_server: Any = None):
        self.server = server
        self.socket = server.socket_name
        self.backend = backend
        self.pane_server = pane_server
        self.address = pane_server.address if pane_server is not None else self.socket
        self._pane_backend = None
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
        if backend != "tmux":
            self.env.update(MUXHOST_BACKEND=backend, **pane_server.env)
        self._shells: dict[str, tuple[str, tuple[int, float] | None]] = {}  # pane -> (token, shell)

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

    def launch_brief(self, *args: str, **kw) -> dict:
        """``launch ARGS --json`` of an agent that may exit at once (exit 1, "exited at once", the
        record kept): the new record either way."""
        before = {r["id"] for r in self.ok("ls", "--all", "--json")}
        r = self.run("launch", *args, "--json", **kw)
        assert r.rc == 0 or (r.rc == 1 and "exited at once" in r.err), \
            f"muxhost launch {' '.join(args)} -> {r.rc}\nstdout: {r.out}\nstderr: {r.err}"
        return next(rec for rec in self.ok("ls", "--all", "--json") if rec["id"] not in before)

    def tmux(self, *args: str) -> list[str]:
        return self.server.cmd(*args).stdout

    def pane_backend(self):
        """The muxhost backend of this test's pane server (off tmux: what :meth:`capture` and
        :meth:`type` use), from the installed plugins (no plugin cache written)."""
        if self._pane_backend is None:
            from importlib.metadata import entry_points

            from muxhost.plugins import Registry, get_plugin_manager

            pm = get_plugin_manager(load_entrypoints=False)
            for ep in entry_points(group="muxhost"):
                if not pm.has_plugin(ep.name):
                    pm.register(ep.load(), name=ep.name)
            self._pane_backend = Registry(pm).backends[self.backend](self.address, None)
        return self._pane_backend

    def pane_pid(self, pane_id: str) -> int | None:
        """The process the multiplexer runs in the pane (tmux's ``pane_pid``)."""
        if self.backend == "tmux":
            return int(self.tmux("display-message", "-p", "-t", pane_id, "#{pane_pid}")[0])
        return next((p.pid for p in self.pane_backend().snapshot() or [] if p.pane_id == pane_id), None)

    def has_session(self, name: str) -> bool:
        """True while the multiplexer has a session (tmux) or tab (herdr) called ``name``."""
        if self.backend == "tmux":
            return self.server.cmd("has-session", "-t", name).returncode == 0
        return any(p.session_name == name for p in self.pane_backend().snapshot() or [])

    def capture(self, pane_id: str, history: bool = False) -> str:
        """The pane's screen (with ``history``: its scrollback too; off tmux: always)."""
        if self.backend != "tmux":
            return self.pane_backend().capture(pane_id)
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
        if self.backend != "tmux":
            self.pane_backend().type_text(pane_id, text)
            if enter:
                time.sleep(pause)
                self.pane_backend().send_keys(pane_id, "enter")
            return
        self.server.cmd("send-keys", "-t", pane_id, "-l", text)
        if enter:
            time.sleep(pause)
            self.server.cmd("send-keys", "-t", pane_id, "Enter")

    def resume_under_way(self, record_id: str, seconds: float = 1.5):
        """A context manager: another muxhost's resume of record ``record_id`` under way — a process
        holds the conversation's lock and the record's (as ``resume`` does until its pane runs) for
        ``seconds``, then moves the record's ``launched_at`` (as a resume does) and lets go. Entered
        once the locks are held."""
        return self._under_way("resume", record_id, seconds)

    def stop_under_way(self, record_id: str, seconds: float = 1.5):
        """A context manager: another muxhost's stop of record ``record_id`` under way — a process
        holds the record's lock (as ``stop`` does for its whole ladder) for ``seconds``, then writes
        the record down ``stopped`` and lets go. Entered once the lock is held."""
        return self._under_way("stop", record_id, seconds)

    def _under_way(self, what: str, record_id: str, seconds: float):
        import contextlib

        @contextlib.contextmanager
        def held():
            p = subprocess.Popen([sys.executable, "-c", _UNDER_WAY, what, record_id, str(seconds)], env=self.env,
                                 stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
            try:
                assert p.stdout.readline() == "held\n", f"the stand-in {what} did not take the lock"
                yield
            finally:
                p.wait(timeout=30 + seconds)
        return held()

    def resume_command(self, ref: str) -> tuple[list[str], dict[str, str], str]:
        """What a user types to resume record ``ref``'s conversation outside muxhost: ``(argv, env,
        cwd)`` from the plugin's ``resume(ctx, conversation_id)``, given the context the host builds
        for the record (run in a subprocess with this Mux's environment, so the plugin loads as the
        CLI loads it). ``env``: the record's environment plus the command's, without ``MUXHOST_RECORD``."""
        p = subprocess.run([sys.executable, "-c", _RESUME_COMMAND, ref], env=self.env, capture_output=True,
                           text=True, timeout=60, cwd=str(self.home), stdin=subprocess.DEVNULL)
        assert p.returncode == 0, f"the plugin's resume() for {ref} failed:\n{p.stderr.strip()}"
        found = json.loads(p.stdout)
        found["env"].pop("MUXHOST_RECORD", None)
        return found["argv"], found["env"], found["cwd"]

    def shell(self, cwd: str | os.PathLike, env: dict[str, str]) -> str:
        """A plain ``/bin/sh`` in a new session of this tmux server, with exactly ``env`` (no
        ``TMUX``, no ``MUXHOST_RECORD``): a user's own terminal, not muxhost's. Returns its pane id;
        :meth:`end_shell` (or the teardown) ends every process started in it."""
        import tempfile

        token = os.urandom(8).hex()
        env = {k: v for k, v in env.items() if k not in ("TMUX", "TMUX_PANE", "MUXHOST_RECORD")}
        env[SHELL_ENV] = token
        fd, env_file = tempfile.mkstemp(prefix="muxhost-shell-", suffix=".json")
        with os.fdopen(fd, "w") as f:  # not in argv: the environment may hold a (test) API key
            json.dump(env, f)
        boot = ("import json, os, sys; f = sys.argv[1]; env = json.load(open(f)); os.unlink(f); "
                "os.execve('/bin/sh', ['sh'], env)")
        out = self.server.cmd("new-session", "-d", "-x", "200", "-y", "50", "-c", str(cwd), "-P", "-F",
                              "#{pane_id} #{pane_pid}", sys.executable, "-c", boot, env_file).stdout
        pane, pid = out[0].split()
        try:
            import psutil

            shell = (int(pid), psutil.Process(int(pid)).create_time())
        except Exception:
            shell = None
        self._shells[pane] = (token, shell)
        return pane

    def end_shell(self, pane: str) -> None:
        """End every process started in the :meth:`shell` ``pane`` as closing a terminal does (SIGHUP,
        then SIGKILL after 3 s), found by its process tree and by the shell's mark in their
        environment; then its session."""
        from muxhost import procs

        token, shell = self._shells.pop(pane, (None, None))
        if token is None:
            return
        table = procs.ProcessTable.snapshot()
        keys = set(_carrying(SHELL_ENV, token)) | ({p.key for p in table.tree_of(shell)} if shell else set())
        for key in keys:
            procs.signal_if_same(*key, signal.SIGHUP)
        for key in procs.wait_gone(keys, 3.0):
            procs.signal_if_same(*key, signal.SIGKILL)
        procs.wait_gone(keys, 5.0)
        try:
            self.server.cmd("kill-session", "-t", pane)
        except Exception:  # the session went with its shell
            pass

    def reap(self) -> None:
        """End every process of every record of this test (processes this test started)."""
        from muxhost import procs

        for pane in list(self._shells):
            self.end_shell(pane)
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
        for rid, _launched_at, pids in rows:
            for p in procs.marked(rid, table):
                victims[p.pid] = p.create_time
            for pid, ct in json.loads(pids or "[]"):
                for p in table.tree_of((pid, ct)):
                    victims[p.pid] = p.create_time
        for pid, ct in victims.items():
            procs.signal_if_same(pid, ct, signal.SIGKILL)


SHELL_ENV = "MUXHOST_TESTING_SHELL"  # marks every process started in a Mux.shell pane

# run with a Mux's environment: the plugin's resume command for a record, with the host's context
_UNDER_WAY = """\
import contextlib, sys, time
from pathlib import Path
from muxhost import locks
from muxhost.store import Store
what, rid, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
store = Store()
rec = store.get(rid)
folder = Path(store.path).parent / "locks"
with contextlib.ExitStack() as held:
    if what == "resume":
        held.enter_context(locks.conversation(folder, rec.agent, rec.conversation_id, what))
    held.enter_context(locks.records(folder, [rid], what))
    print("held", flush=True)
    time.sleep(seconds)
    if what == "resume":
        store.update(rec, launched_at=time.time())
    else:
        store.update(rec, state="stopped", stopped_at=time.time())
"""

_RESUME_COMMAND = """\
import json, sys
from muxhost import config
from muxhost.host import Host
host = Host(config.load())
rec = host.resolve(sys.argv[1])
launch = host.registry.agent(rec.agent).resume(host.context(rec), rec.conversation_id)
print(json.dumps({"argv": list(launch.argv), "env": {**rec.env, **dict(launch.env)}, "cwd": rec.cwd}))
"""


def _carrying(var: str, value: str) -> list[tuple[int, float]]:
    """(pid, create time) of every live process of our user whose environment has ``var=value``."""
    import psutil

    uid, found = os.getuid(), []
    for p in psutil.process_iter(["uids", "create_time"]):
        try:
            if p.info["uids"] is None or p.info["uids"].real != uid or p.status() == psutil.STATUS_ZOMBIE:
                continue
            if p.environ().get(var) == value:
                found.append((p.pid, p.info["create_time"]))
        except (psutil.Error, OSError):
            continue
    return found


@pytest.fixture
def mux(request, server, tmp_path):
    """A :class:`Mux` on tmux; parametrized (``indirect=True``) with a pane backend ``"NAME"`` (or
    ``"NAME-VARIANT"``), on that backend's server from the fixture ``NAME_server``
    (``NAME_VARIANT_server``), which gives ``.address`` and ``.env``."""
    kind = getattr(request, "param", "tmux")
    pane_server = None if kind == "tmux" else request.getfixturevalue(kind.replace("-", "_") + "_server")
    m = Mux(server, tmp_path, backend=kind.split("-")[0], pane_server=pane_server)
    yield m
    m.reap()


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


# -- the contract suite --------------------------------------------------------------------------
_XDG_VARS = ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME")
_SQLITE_MAGIC = b"SQLite format 3\x00"
_DB_SIDECARS = ("-wal", "-journal", "-shm")


class Watching:
    """``muxhost watch --json`` running against a :class:`Mux`'s server, as a user starts it:
    :attr:`changes` fills with its change lines as they come; :meth:`activity` reads what it
    published for a pane (``tmux show-options``); :meth:`wait` waits for a pane to show a state.
    Use it as a context manager (or call :meth:`stop`): it is ended by its pid, which this object
    started."""

    def __init__(self, mux: Mux, *args: str, env: dict[str, str] | None = None):
        import threading

        self.mux = mux
        self.proc = subprocess.Popen([sys.executable, "-m", "muxhost", "watch", "--json", *args],
                                     env={**mux.env, **(env or {})}, cwd=str(mux.home), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.changes: list[dict[str, Any]] = []
        self.stderr = ""

        def read() -> None:
            for line in self.proc.stdout:
                self.changes.append(json.loads(line))

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()

    def __enter__(self) -> "Watching":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def option(self, name: str, pane: str | None = None) -> str | None:
        """A user option as tmux shows it: the pane's, or the global one."""
        where = ["-p", "-t", pane] if pane else ["-g"]
        out = self.mux.tmux("show-options", "-v", *where, name)
        return out[0] if out else None

    def activity(self, pane: str) -> str | None:
        return self.option("@muxhost_activity", pane)

    def wait(self, pane: str, state: str, timeout: float = 20.0) -> float:
        """Wait until the pane's ``@muxhost_activity`` is ``state``; returns the seconds it took."""
        t0 = time.monotonic()
        try:
            wait_for(lambda: self.activity(pane) == state, timeout=timeout, interval=0.05,
                     what=f"@muxhost_activity={state} on {pane}")
        except AssertionError as e:
            raise AssertionError(f"{e} (it is {self.activity(pane)!r}; changes: {self.changes}; "
                                 f"watch alive: {self.proc.poll() is None})") from None
        return time.monotonic() - t0

    def changes_of(self, record: str, mark: int = 0, until: str | None = None, timeout: float = 10) -> list[dict[str, Any]]:
        """The change lines of ``record`` from line ``mark`` on. With ``until``, once one of them goes
        to that state: a state seen published (:meth:`wait`) may still have its line on the way."""
        def mine() -> list[dict[str, Any]]:
            return [c for c in list(self.changes)[mark:] if c["record"] == record]
        if until is not None:
            wait_for(lambda: any(c["new"] == until for c in mine()), timeout=timeout,
                     what=f"the watch's change line of record {record} to {until}")
        return mine()

    def stop(self) -> int:
        """SIGTERM, as a user's Ctrl-C or kill: the watch takes back what it published. Returns its
        exit status."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self._reader.join(5)
        self.stderr = self.proc.stderr.read() if self.proc.stderr else ""
        return self.proc.returncode


def unique_text(role: str) -> str:
    """A text no file holds yet (``muxhost contract <role> <32 hex digits>``): grep finds exactly it."""
    import uuid

    return f"muxhost contract {role} {uuid.uuid4().hex}"


def _files(roots: list[Path], skip: tuple[str, ...]) -> list[str]:
    """Every regular file under ``roots`` (symlinks not followed), without paths containing ``skip``."""
    out: dict[str, None] = {}
    for root in roots:
        for dirpath, _dirnames, filenames in os.walk(root):
            for name in filenames:
                p = os.path.join(dirpath, name)
                if not any(s in p for s in skip) and not os.path.islink(p) and os.path.isfile(p):
                    out[p] = None
    return list(out)


def files_holding(roots: list[Path], needles: list[str], skip: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """``{path: [needle, …]}`` for every file under ``roots`` whose raw bytes contain a needle:
    bytes, not rows, so SQLite files, their ``-wal`` and their free pages count."""
    wanted = [(n, n.encode()) for n in needles]
    out: dict[str, list[str]] = {}
    for path in _files(roots, skip):
        try:
            data = Path(path).read_bytes()
        except OSError:
            continue
        hits = [n for n, raw in wanted if raw in data]
        if hits:
            out[path] = hits
    return out


def _mentions(line: str, form: str, ends: tuple[str, ...]) -> bool:
    """``form`` appears in ``line`` as a whole path: after a start or a space/bracket, before one of ``ends``."""
    i = line.find(form)
    while i >= 0:
        before, after = line[i - 1:i] if i else "", line[i + len(form):i + len(form) + 1]
        if before in ("", " ", "(", "[", "'", '"') and after in ends:
            return True
        i = line.find(form, i + 1)
    return False


def plan_names(plan: list[str], path: str, home: str | os.PathLike, roots: list[Path] = ()) -> bool:
    """True when a line of a purge plan names the file ``path``: itself (absolute or ``~/…``), a
    folder holding it inside ``roots`` (a ``Dir`` line, ``~/…/``), or for a database's ``-wal``,
    ``-journal`` or ``-shm`` its database (rows are named by their database's path)."""
    targets = [path] + [path[:-len(s)] for s in _DB_SIDECARS if path.endswith(s)]
    homes = {os.path.abspath(home), os.path.realpath(home)}
    inside = [os.path.realpath(r) for r in roots] + [os.path.abspath(r) for r in roots]

    def forms(p: str) -> set[str]:
        out = {p}
        for h in homes:
            if p.startswith(h.rstrip(os.sep) + os.sep):
                out.add("~" + p[len(h.rstrip(os.sep)):])
        return out

    for target in targets:
        for p in {os.path.abspath(target), os.path.realpath(target)}:
            if any(_mentions(line, f, ("", " ", ":", ")", ",", "]", ";")) for line in plan for f in forms(p)):
                return True
            d = os.path.dirname(p)
            while any(d.startswith(r.rstrip(os.sep) + os.sep) for r in inside):
                for f in forms(d):
                    if any(_mentions(line, f + "/", ("", " ")) or _mentions(line, f, ("", " "))
                           for line in plan):
                        return True
                d = os.path.dirname(d)
    return False


def _head(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read(len(_SQLITE_MAGIC))


def _sqlite_text(db: str, text: str) -> tuple[bool, str]:
    """(whether a row of ``db`` holds ``text``, what went wrong), read from a copy of the database
    and its ``-wal`` (the original is not opened)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "copy.db")
        shutil.copyfile(db, copy)
        for suffix in ("-wal", "-journal"):
            if os.path.exists(db + suffix):
                shutil.copyfile(db + suffix, copy + suffix)
        try:
            con = sqlite3.connect(copy)
            try:
                tables = [r[0] for r in con.execute("select name from sqlite_master where type = 'table'")]
                for table in tables:
                    for row in con.execute(f'select * from "{table}"'):
                        for v in row:
                            if (isinstance(v, str) and text in v) or (isinstance(v, bytes) and text.encode() in v):
                                return True, ""
            finally:
                con.close()
        except sqlite3.Error as e:
            return False, f"its rows cannot be read ({e})"
    return False, "no row holds its text"


@dataclass
class ContractWorld:
    """What the purge tests start from: in one cwd, a neighbour conversation (made first, its own
    text) and the conversation under test (its texts; its children's texts), both agents stopped."""

    work: Path
    neighbour: dict
    neighbour_text: str
    main: dict
    texts: list[str]
    child_texts: list[str]


class AgentContract:
    """The contract every muxhost agent plugin keeps, checked on real panes against the agent's real
    program. Subclass it in your plugin package's tests and run ``pytest -p muxhost.testing``::

        from muxhost.testing import AgentContract

        class TestMyAgent(AgentContract):
            agent = "myagent"                       # the agent to launch
            has_children = True                     # it can start child conversations
            def converse(self, mux, pane, text):    # make the agent store a turn holding `text`
                mux.wait_screen(pane, "> "); mux.type(pane, text); mux.wait_screen(pane, "answer")
            def spawn_child(self, mux, pane, text): # make it start a child conversation holding `text`
                mux.type(pane, f"use a sub-agent to say {text}"); mux.wait_screen(pane, "done")
            def prepare(self, mux):                 # optional: a fake model server, config, …
                mux.env["MYAGENT_API_URL"] = start_fake_server().url

    What you implement (``mux`` is the :class:`Mux` fixture: a private tmux server, HOME and state):

    - ``agent``: the name the plugin registers; the plugin must be installed (an entry point of
      group ``muxhost``) or made loadable by ``prepare`` (``mux.env.update(install_plugin(…))``).
    - ``converse(mux, pane, text)``: make the agent in tmux pane ``pane`` store a turn holding
      ``text`` and return once it is on disk. It is called right after the pane starts (wait until
      the agent takes input), on panes muxhost started and on a plain shell pane in which the
      conversation was resumed by hand.
    - ``spawn_child(mux, pane, text)`` (with ``has_children = True``): make it start a child
      conversation (a sub-agent, a fork) holding ``text``; return once that is on disk.
    - ``prepare(mux)`` (optional): called first in every test; set ``mux.env``, write ``mux.config``,
      seed ``mux.home``. The agents run in ``self.workdir(mux)`` (made before ``prepare``).
    - ``ignore_paths`` (optional): path fragments the suite never reads or hashes — only for files
      that are not the agent's (a fake server's log). Every other file of HOME and the XDG dirs counts.
    - ``settle`` (optional, seconds): how long the disk must stay unchanged before the byte-for-byte
      snapshot of a running agent is taken, for agents that write a moment after a turn.

    Every test starts from a fresh HOME, tmux server and state dir and types unique texts
    (:func:`unique_text`), so "no file holds the text" is an exact grep of raw bytes (SQLite files,
    their ``-wal`` and free pages included). What each test proves — a failure names its item in
    brackets, e.g. ``[stop] …``:

    - ``test_plugins_lists_the_agent``: ``muxhost plugins --json`` lists it.
    - ``test_a_bad_conversation_id_exits_2_before_anything_runs``: ``purge --agent A --conversation
      'not an id'`` exits 2 with one ``muxhost:`` line, and nothing on disk changed.
    - ``test_launch_purge_while_running_stop_and_resume``: launch → ``discover`` finds an id (``ls``);
      a purge while it runs exits 4 and HOME and the XDG dirs are unchanged byte for byte; stop ends
      with ``exit`` and no survivors (every pid of the record, every process carrying
      ``MUXHOST_RECORD``); ``exists`` (``resumable`` when stopped); resume → the same id.
    - ``test_sleep_frees_the_agent_and_enter_wakes_it_in_its_pane``: ``sleep`` leaves no process of
      the agent and the pane shows the stub; Enter there resumes the same conversation in that pane.
    - ``test_two_agents_in_one_cwd_keep_their_own_conversations``: two agents in one folder each keep
      their own id through several ``ls``, and each id's plan names the files holding its own text.
    - ``test_purge_refuses_while_resumed_outside_muxhost``: the plugin's resume command typed into a
      plain shell pane; ``purge --agent A --conversation ID`` exits 4 (this is ``in_use`` itself: for
      its own records the host already knows) and changes nothing; once that agent is gone it is free.
    - ``test_dry_run_names_every_file_and_changes_nothing``: ``purge --dry-run`` names every file
      holding the conversation's text (a database by its path) and changes nothing.
    - ``test_purge_removes_every_trace_of_the_conversation``: purge exits 0 with an empty residual, no
      file holds its text, it is no longer resumable, and a second purge exits 0 or 3.
    - ``test_purge_keeps_the_neighbour_byte_for_byte``: a conversation in the same cwd keeps its files
      byte for byte, its lines in shared line files, its rows and text in shared databases, and stays
      resumable.
    - ``test_purge_takes_the_child_conversations`` (skipped, saying why, unless ``has_children``): the
      dry run names every file holding a child's text; after the purge none holds it.
    """

    agent: str = ""
    has_children: bool = False
    ignore_paths: tuple[str, ...] = ()
    settle: float = 0.0

    # -- what a plugin's test class implements -------------------------------------------------
    def converse(self, mux: Mux, pane: str, text: str) -> None:
        raise NotImplementedError(f"{type(self).__name__}.converse(mux, pane, text): make the agent store a turn")

    def spawn_child(self, mux: Mux, pane: str, text: str) -> None:
        raise NotImplementedError(f"{type(self).__name__}.spawn_child(mux, pane, text): has_children is True")

    def prepare(self, mux: Mux) -> None:
        """Called first in every test: point ``mux.env`` at a fake model server, write config, …"""

    def workdir(self, mux: Mux) -> Path:
        """The folder the agents run in (outside HOME, as a project is)."""
        return mux.home.parent / "work"

    # -- the steps -------------------------------------------------------------------------------
    def _begin(self, mux: Mux) -> Path:
        assert self.agent, f"{type(self).__name__}.agent: set it to the name of the agent to test"
        work = self.workdir(mux)
        work.mkdir(parents=True, exist_ok=True)
        self.prepare(mux)
        self._muxhost_cache(mux).mkdir(parents=True, exist_ok=True)  # made by any run: not the agent's
        return work

    @staticmethod
    def _ok(mux: Mux, item: str, *args: str) -> Any:
        r = mux.run(*args)
        assert r.rc == 0, f"[{item}] `muxhost {' '.join(args)}` exited {r.rc}: {(r.err or r.out).strip()}"
        return r.json if "--json" in args else r.out

    def _launch(self, mux: Mux, work: Path, text: str) -> dict:
        rec = self._ok(mux, "launch", "launch", self.agent, "--cwd", str(work), "--json")
        self.converse(mux, rec["pane"], text)
        return rec

    def _row(self, mux: Mux, item: str, rid: str, all_records: bool = False) -> dict:
        rows = self._ok(mux, item, "ls", *(["--all"] if all_records else []), "--json")
        row = next((r for r in rows if r["id"] == rid), None)
        assert row is not None, f"[{item}] record {rid} is not in `muxhost ls{' --all' if all_records else ''}`"
        return row

    def _roots(self, mux: Mux) -> list[Path]:
        """HOME and the XDG dirs of the agents (those outside HOME, when ``mux.env`` sets them)."""
        home = mux.home.resolve()
        roots = [mux.home]
        for var in _XDG_VARS:
            value = mux.env.get(var)
            if value and not Path(value).resolve().is_relative_to(home):
                roots.append(Path(value))
        return roots

    @staticmethod
    def _muxhost_cache(mux: Mux) -> Path:
        """muxhost's own plugin cache (the host's, not the agent's)."""
        return Path(mux.env.get("XDG_CACHE_HOME") or mux.home / ".cache") / "muxhost"

    def _skip(self, mux: Mux) -> tuple[str, ...]:
        return (str(self._muxhost_cache(mux)) + os.sep, *self.ignore_paths)

    def _hash(self, mux: Mux, sizes: dict[str, int] | None = None) -> dict[str, str]:
        # a -shm is SQLite's shared-memory index, which readers write too: not content
        hashed = tree_hash(*self._roots(mux), skip=self._skip(mux), sizes=sizes)
        return {p: h for p, h in hashed.items() if not p.endswith("-shm")}

    def _quiet_hash(self, mux: Mux, sizes: dict[str, int] | None = None) -> dict[str, str]:
        """:meth:`_hash` once it has not changed for ``settle`` seconds (at most 30 s); ``sizes``,
        when given, gets the sizes of the files in the one returned."""
        last_sizes: dict[str, int] = {}
        last = self._hash(mux, last_sizes)
        deadline = time.monotonic() + 30
        while self.settle > 0 and time.monotonic() < deadline:
            time.sleep(self.settle)
            now_sizes: dict[str, int] = {}
            now = self._hash(mux, now_sizes)
            if now == last:
                break
            last, last_sizes = now, now_sizes
        if sizes is not None:
            sizes.update(last_sizes)
        return last

    @staticmethod
    def _changes(before: dict[str, str], after: dict[str, str]) -> str:
        changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
        said = [f"{p} ({'new' if p not in before else 'gone' if p not in after else 'changed'})" for p in changed[:8]]
        return ", ".join(said) + (f" and {len(changed) - 8} more" if len(changed) > 8 else "")

    def _holding(self, mux: Mux, texts: list[str]) -> dict[str, list[str]]:
        return files_holding(self._roots(mux), texts, self._skip(mux))

    def _unnamed(self, mux: Mux, plan: list[str], texts: list[str]) -> list[str]:
        """Files holding one of ``texts`` that no line of ``plan`` names."""
        roots = self._roots(mux)
        return sorted(p for p in self._holding(mux, texts) if not plan_names(plan, p, mux.home, roots))

    def _plan(self, mux: Mux, item: str, ref: str) -> list[str]:
        before = self._hash(mux)
        report = self._ok(mux, item, "purge", ref, "--dry-run", "--json")
        assert report.get("dry_run") is True, f"[{item}] `purge --dry-run` did not report a dry run: {report}"
        after = self._hash(mux)
        assert after == before, f"[{item}] `purge --dry-run` changed files: {self._changes(before, after)}"
        return list(report["plan"])

    def _world(self, mux: Mux, children: bool) -> ContractWorld:
        """A neighbour conversation, then the conversation under test (with a child when asked), in
        one cwd; both agents stopped (in one ladder)."""
        work = self._begin(mux)
        ntext, text = unique_text("neighbour"), unique_text("purged")
        neighbour = self._launch(mux, work, ntext)
        main = self._launch(mux, work, text)
        child_texts = []
        if children:
            child_texts.append(unique_text("child"))
            self.spawn_child(mux, main["pane"], child_texts[0])
        stopped = {r["id"]: r for r in self._ok(mux, "stop", "stop", neighbour["id"], main["id"], "--json")}
        neighbour, main = stopped[neighbour["id"]], stopped[main["id"]]
        for rec in (neighbour, main):
            assert rec.get("conversation_id"), f"[discover] record {rec['id']} has no conversation id after a turn"
        assert neighbour["conversation_id"] != main["conversation_id"], \
            f"[two agents] two agents in one cwd got one conversation id {main['conversation_id']}"
        return ContractWorld(work, neighbour, ntext, main, [text], child_texts)

    # -- the contract ----------------------------------------------------------------------------
    def test_plugins_lists_the_agent(self, mux: Mux) -> None:
        self._begin(mux)
        info = self._ok(mux, "plugins", "plugins", "--json")
        names = [a["name"] for a in info["agents"]]
        assert self.agent in names, f"[plugins] `muxhost plugins --json` lists agents {names}, not {self.agent!r}"

    def test_a_bad_conversation_id_exits_2_before_anything_runs(self, mux: Mux) -> None:
        self._begin(mux)
        before = self._hash(mux)
        for extra in (["--yes"], ["--dry-run"]):
            r = mux.run("purge", "--agent", self.agent, "--conversation", "not an id", *extra)
            assert r.rc == 2, f"[bad id] `purge --agent {self.agent} --conversation 'not an id'` exited {r.rc}: {r.err}"
            assert r.err.startswith("muxhost: ") and r.err.count("\n") == 1, f"[bad id] not one error line: {r.err!r}"
        after = self._hash(mux)
        assert after == before, f"[bad id] files changed: {self._changes(before, after)}"

    def test_launch_purge_while_running_stop_and_resume(self, mux: Mux) -> None:
        from muxhost import procs

        work = self._begin(mux)
        rec = self._launch(mux, work, unique_text("lifecycle"))
        row = self._row(mux, "discover", rec["id"])
        cid = row["conversation_id"]
        assert row["state"] == "running" and cid, f"[discover] after a turn `ls` shows {row}"
        assert self._row(mux, "discover", rec["id"])["conversation_id"] == cid, "[discover] the id changed on its own"

        sizes: dict[str, int] = {}
        before = self._quiet_hash(mux, sizes)
        r = mux.run("purge", rec["id"], "--yes")
        assert r.rc == 4, f"[purge while running] exited {r.rc}, not 4: {(r.err or r.out).strip()}"
        assert r.err.startswith("muxhost: ") and r.err.count("\n") == 1, f"[purge while running] {r.err!r}"
        after = appended_only(before, sizes, self._hash(mux))  # the live agent may append to its log
        assert after == before, f"[purge while running] files changed: {self._changes(before, after)}"
        early = self._ok(mux, "purge while running", "purge", rec["id"], "--dry-run", "--json")
        assert early.get("refused"), f"[purge while running] a dry run does not say it would be refused: {early}"
        after = appended_only(before, sizes, self._hash(mux))
        assert after == before, f"[purge while running] the dry run changed files: {self._changes(before, after)}"

        shown = self._ok(mux, "stop", "show", rec["id"], "--json")
        table = procs.ProcessTable.snapshot()
        keys = {p.key for pid in {*shown["pids"], *(q["pid"] for q in shown["processes"])}
                if (p := table.get(pid)) is not None}
        assert keys, f"[stop] `muxhost show` lists no process of the running agent: {shown}"
        stopped = self._ok(mux, "stop", "stop", rec["id"], "--json")
        assert stopped.get("outcome") == "exit", \
            f"[stop] outcome {stopped.get('outcome')!r} after {stopped.get('seconds')}s, not 'exit': the agent " \
            "did not quit on its exit_text within the grace"
        survivors = procs.alive(keys) + _carrying(procs.RECORD_ENV, rec["id"])
        assert not survivors, f"[stop] processes survived the stop: {sorted(survivors)}"

        row = self._row(mux, "exists", rec["id"], all_records=True)
        assert row["state"] == "stopped" and row["conversation_id"] == cid, f"[stop] `ls --all` shows {row}"
        assert row["resumable"] is True, f"[exists] conversation {cid} is on disk but not resumable: {row}"

        resumed = self._ok(mux, "resume", "resume", rec["id"], "--json")
        assert resumed["conversation_id"] == cid, f"[resume] resumed into {resumed['conversation_id']}, not {cid}"
        self.converse(mux, resumed["pane"], unique_text("resumed"))
        row = self._row(mux, "resume", rec["id"])
        assert row["state"] == "running" and row["conversation_id"] == cid, \
            f"[resume] after a turn in the resumed agent `ls` shows {row}, not conversation {cid}"

    def test_sleep_frees_the_agent_and_enter_wakes_it_in_its_pane(self, mux: Mux) -> None:
        from muxhost import procs

        work = self._begin(mux)
        rec = self._launch(mux, work, unique_text("sleeper"))
        cid = self._row(mux, "sleep", rec["id"])["conversation_id"]
        shown = self._ok(mux, "sleep", "show", rec["id"], "--json")
        table = procs.ProcessTable.snapshot()
        keys = {p.key for pid in {*shown["pids"], *(q["pid"] for q in shown["processes"])}
                if (p := table.get(pid)) is not None}
        asleep = self._ok(mux, "sleep", "sleep", rec["id"], "--json")
        assert asleep["state"] == "asleep", f"[sleep] `muxhost sleep` gave {asleep}"
        survivors = procs.alive(keys) + _carrying(procs.RECORD_ENV, rec["id"])
        assert not survivors, f"[sleep] processes of the agent survived its sleep: {sorted(survivors)}"
        row = self._row(mux, "sleep", rec["id"])
        assert row["state"] == "asleep" and row["conversation_id"] == cid, f"[sleep] `ls` shows {row}"
        pane = row["pane"]
        mux.wait_screen(pane, "Enter wakes it")
        mux.type(pane, "", enter=True)
        wait_for(lambda: self._row(mux, "wake", rec["id"])["state"] == "running", timeout=30,
                 what="[wake] the record running again after Enter in its pane")
        self.converse(mux, pane, unique_text("woken"))
        row = self._row(mux, "wake", rec["id"])
        assert row["pane"] == pane and row["conversation_id"] == cid, \
            f"[wake] after Enter and a turn `ls` shows {row}, not conversation {cid} in pane {pane}"

    def test_two_agents_in_one_cwd_keep_their_own_conversations(self, mux: Mux) -> None:
        work = self._begin(mux)
        a_texts, b_text = [unique_text("first agent")], unique_text("second agent")
        first: dict[str, str] = {}  # record id -> the conversation `ls` showed first

        def look(step: str, *recs: dict) -> None:
            rows = {r["id"]: r for r in self._ok(mux, "two agents", "ls", "--json")}
            for rec in recs:
                cid = rows.get(rec["id"], {}).get("conversation_id")
                was = first.setdefault(rec["id"], cid)
                assert cid and cid == was, f"[two agents] {step}: record {rec['id']} is in {cid}, it was in {was}"

        a = self._launch(mux, work, a_texts[0])
        look("after the first agent's turn", a)
        b = self._launch(mux, work, b_text)
        look("after the second agent's turn", a, b)
        a_texts.append(unique_text("first agent again"))
        self.converse(mux, a["pane"], a_texts[1])
        look("after the first agent's second turn", a, b)
        look("once more", a, b)
        assert first[a["id"]] != first[b["id"]], f"[two agents] both agents are in conversation {first[a['id']]}"
        stopped = {r["id"]: r for r in self._ok(mux, "two agents", "stop", a["id"], b["id"], "--json")}
        for rec, texts in ((a, a_texts), (b, [b_text])):
            cid = first[rec["id"]]
            assert stopped[rec["id"]]["conversation_id"] == cid, \
                f"[two agents] record {rec['id']} stopped in {stopped[rec['id']]['conversation_id']}, not {cid}"
            unnamed = self._unnamed(mux, self._plan(mux, "two agents", rec["id"]), texts)
            assert not unnamed, f"[two agents] the plan of record {rec['id']}'s conversation {cid} does not name " \
                                f"the files holding its own text: {unnamed} (was it given the other one?)"

    def test_purge_refuses_while_resumed_outside_muxhost(self, mux: Mux) -> None:
        work = self._begin(mux)
        rec = self._launch(mux, work, unique_text("outside"))
        cid = self._ok(mux, "in use", "stop", rec["id"], "--json")["conversation_id"]
        assert cid, f"[discover] record {rec['id']} has no conversation id after a turn"
        argv, env, cwd = mux.resume_command(rec["id"])
        pane = mux.shell(cwd, env)
        mux.type(pane, shlex.join(argv))
        self.converse(mux, pane, unique_text("outside again"))
        sizes: dict[str, int] = {}
        before = self._quiet_hash(mux, sizes)
        r = mux.run("purge", "--agent", self.agent, "--conversation", cid, "--yes")
        assert r.rc == 4, f"[in use] the conversation runs in a shell pane (`{shlex.join(argv)}`), but " \
                          f"`purge --agent {self.agent} --conversation {cid}` exited {r.rc}, not 4: " \
                          f"in_use() did not see it. {(r.err or r.out).strip()}"
        after = appended_only(before, sizes, self._hash(mux))  # the live agent may append to its log
        assert after == before, f"[in use] the refused purge changed files: {self._changes(before, after)}"
        mux.end_shell(pane)
        r = mux.run("purge", "--agent", self.agent, "--conversation", cid, "--dry-run")
        assert r.rc == 0, f"[in use] once the agent in the shell is gone, a dry run exited {r.rc}: {r.err.strip()}"

    def test_dry_run_names_every_file_and_changes_nothing(self, mux: Mux) -> None:
        w = self._world(mux, self.has_children)
        plan = self._plan(mux, "dry run", w.main["id"])
        assert plan, "[dry run] the plan is empty"
        unnamed = self._unnamed(mux, plan, w.texts)
        assert not unnamed, f"[dry run] files hold the conversation's text but the plan does not name them: " \
                            f"{unnamed}; the plan: {plan}"

    def test_purge_removes_every_trace_of_the_conversation(self, mux: Mux) -> None:
        w = self._world(mux, self.has_children)
        report = self._ok(mux, "purge", "purge", w.main["id"], "--yes", "--json")
        assert report["residual"] == [] and report.get("complete") is True, f"[purge] residual: {report['residual']}"
        left = self._holding(mux, w.texts)
        assert not left, f"[purge] after the purge these files still hold the conversation's text: {sorted(left)}"
        row = self._row(mux, "purge", w.main["id"], all_records=True)
        assert row["resumable"] is False, f"[purge] the purged conversation is still resumable: {row}"
        r = mux.run("purge", w.main["id"], "--yes")
        assert r.rc in (0, 3), f"[purge again] exited {r.rc}, not 0 or 3: {(r.err or r.out).strip()}"

    def test_purge_keeps_the_neighbour_byte_for_byte(self, mux: Mux) -> None:
        w = self._world(mux, self.has_children)
        theirs = [w.neighbour_text.encode(), w.neighbour["conversation_id"].encode()]
        mine = [t.encode() for t in (*w.texts, *w.child_texts, w.main["conversation_id"])]

        def has(data: bytes, markers: list[bytes]) -> bool:
            return any(m in data for m in markers)

        def theirs_only(data: bytes) -> list[bytes]:
            return [ln.rstrip(b"\r\n") for ln in data.splitlines() if has(ln, theirs) and not has(ln, mine)]

        files = _files(self._roots(mux), self._skip(mux))
        dbs = {p for p in files if _head(p) == _SQLITE_MAGIC}
        owned: dict[str, bytes] = {}      # files only the neighbour's text is in: identical bytes
        lines: dict[str, list[bytes]] = {}  # shared line files: the neighbour's lines
        shared_dbs: list[str] = []          # shared databases: its rows readable, its text there
        for p in files:
            if any(p.endswith(s) and p[:-len(s)] in dbs for s in _DB_SIDECARS):
                continue  # judged with its database
            data = Path(p).read_bytes()
            unit = {p: data, **{p + s: Path(p + s).read_bytes() for s in ("-wal", "-journal")
                                if p in dbs and os.path.exists(p + s)}}
            joined = b"".join(unit.values())
            if not has(joined, theirs):
                continue
            if not has(joined, mine):
                owned.update(unit)
            elif p in dbs:
                shared_dbs.append(p)
            else:
                lines[p] = theirs_only(data)
        assert owned or lines or shared_dbs, f"[neighbour] no file holds the neighbour's text {w.neighbour_text!r}"

        self._ok(mux, "neighbour", "purge", w.main["id"], "--yes", "--json")
        problems = []
        for p, data in owned.items():
            if not os.path.exists(p):
                problems.append(f"{p} (only the neighbour's) is gone")
            elif Path(p).read_bytes() != data:
                problems.append(f"{p} (only the neighbour's) changed")
        for p, kept in lines.items():
            now = theirs_only(Path(p).read_bytes()) if os.path.exists(p) else None
            if now != kept:
                problems.append(f"{p} (shared): the neighbour's lines changed "
                                f"({len(kept)} before, {'file gone' if now is None else len(now)} after)")
        for p in shared_dbs:
            found, why = _sqlite_text(p, w.neighbour_text) if os.path.exists(p) else (False, "the database is gone")
            if not found:
                problems.append(f"{p} (shared database): {why}")
        assert not problems, f"[neighbour] the purge of {w.main['conversation_id']} touched the neighbour " \
                             f"{w.neighbour['conversation_id']}: " + "; ".join(problems)
        row = self._row(mux, "neighbour", w.neighbour["id"], all_records=True)
        assert row["resumable"] is True, f"[neighbour] the neighbour is no longer resumable: {row}"

    def test_purge_takes_the_child_conversations(self, mux: Mux) -> None:
        if not self.has_children:
            pytest.skip(f"{type(self).__name__}.has_children is False: the agent starts no child conversations")
        w = self._world(mux, children=True)
        assert self._holding(mux, w.child_texts), \
            f"[children] spawn_child() returned but no file holds the child's text {w.child_texts[0]!r}"
        plan = self._plan(mux, "children", w.main["id"])
        unnamed = self._unnamed(mux, plan, w.child_texts)
        assert not unnamed, f"[children] files hold a child conversation's text but the plan does not name " \
                            f"them: {unnamed}; the plan: {plan}"
        report = self._ok(mux, "children", "purge", w.main["id"], "--yes", "--json")
        assert report["residual"] == [], f"[children] residual: {report['residual']}"
        left = self._holding(mux, w.child_texts)
        assert not left, f"[children] after the purge these files still hold a child's text: {sorted(left)}"
