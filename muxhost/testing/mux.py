"""The ``mux`` driver: the muxhost CLI against a private tmux server, HOME and state dir (in this
process by default, see :mod:`muxhost.testing.inprocess`), its panes, shells and the watch."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import subprocess as _subprocess
import sys
import time
from pathlib import Path
from typing import Any

from muxhost.testing.helpers import Result, wait_for
from muxhost.testing.inprocess import needs_subprocess, run_cli


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
        self.subprocess = False  # True: every run a process of its own (see :meth:`run`)

    def run(self, *args: str, env: dict[str, str] | None = None, input: str | None = None,
            timeout: float = 60, cwd: str | None = None, subprocess: bool | None = None) -> Result:
        """``muxhost ARGS`` with this Mux's environment (plus ``env``), in ``cwd`` (default HOME).

        In this process (:func:`muxhost.testing.inprocess.run_cli`: the same result, a tenth of the
        time) unless ``subprocess=True``, :attr:`subprocess` is set, or the run needs a process of its
        own (:func:`~muxhost.testing.inprocess.needs_subprocess`: another thread, ``attach``/``watch``,
        a ``PYTHONPATH`` of its own). Use a subprocess where the process boundary is what is tested:
        start-up, signals, the launcher, what ``ps`` shows."""
        full_env = dict(self.env)
        if env:
            full_env.update(env)
        where = cwd or str(self.home)
        own = self.subprocess if subprocess is None else subprocess
        if not own and needs_subprocess(list(args), full_env) is None:
            return run_cli(list(args), full_env, where, input=input, timeout=timeout)
        p = _subprocess.run([sys.executable, "-m", "muxhost", *args], env=full_env, input=input,
                            capture_output=True, text=True, timeout=timeout, cwd=where,
                            stdin=None if input is not None else _subprocess.DEVNULL)
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

    def shell_processes(self, pane: str) -> set[tuple[int, float]]:
        """The processes started in the :meth:`shell` ``pane`` (its tree and the shell's mark in their
        environment), as (pid, create time)."""
        from muxhost import procs

        token, shell = self._shells.get(pane, (None, None))
        if token is None:
            return set()
        table = procs.ProcessTable.snapshot()
        return set(carrying(SHELL_ENV, token)) | ({p.key for p in table.tree_of(shell)} if shell else set())

    @contextlib.contextmanager
    def frozen(self, keys: set[tuple[int, float]]):
        """Hold the processes ``keys`` (pid, create time; ones this test started) still with SIGSTOP for
        the ``with`` block, then SIGCONT them: a check that nothing changed files cannot be upset by a
        live agent's own timed writes (opencode's database is written now and then while it sits idle).
        A stopped process keeps its files, locks and argv, which is all a refusal looks at."""
        from muxhost import procs

        held = [k for k in keys if procs.signal_if_same(*k, signal.SIGSTOP)]
        try:
            yield held
        finally:
            for k in held:
                procs.signal_if_same(*k, signal.SIGCONT)

    def end_shell(self, pane: str) -> None:
        """End every process started in the :meth:`shell` ``pane`` as closing a terminal does (SIGHUP,
        then SIGKILL after 3 s), found by its process tree and by the shell's mark in their
        environment; then its session."""
        from muxhost import procs

        token, shell = self._shells.pop(pane, (None, None))
        if token is None:
            return
        table = procs.ProcessTable.snapshot()
        keys = set(carrying(SHELL_ENV, token)) | ({p.key for p in table.tree_of(shell)} if shell else set())
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


def carrying(var: str, value: str) -> list[tuple[int, float]]:
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
