"""Run the muxhost CLI in this process as a subprocess would run it: its environment, cwd, stdin and
the fds 0/1/2 swapped in, SystemExit and exceptions turned into the same :class:`Result`, and every
piece of process state a command could change put back afterwards (and checked: :class:`Leak`)."""

from __future__ import annotations

import functools
import gc
import io
import os
import signal
import subprocess
import sys
import tempfile
import threading
import traceback

from muxhost.testing.helpers import Result

# signals whose handlers a command may set (the watch's SIGTERM, the ladder's SIGHUP/SIGTERM)
_SIGNALS = tuple(getattr(signal, s) for s in ("SIGTERM", "SIGINT", "SIGHUP", "SIGPIPE", "SIGCHLD", "SIGALRM",
                                                 "SIGUSR1", "SIGUSR2", "SIGQUIT", "SIGTSTP") if hasattr(signal, s))
# commands that leave the process (attach execs tmux) or run until signalled (watch): subprocesses
SUBPROCESS_COMMANDS = frozenset({"attach", "watch", "ui"})
_LOCK = threading.Lock()


class Leak(AssertionError):
    """An in-process command left something behind that a process exit would have cleaned up (an
    open fd, a lock, a signal handler, the umask, a thread still running, ``sys.path``, the cwd,
    ``os.environ``): a bug for every caller that runs many commands in one process (the dashboard)."""


# how long a thread the command started may take to end after it returned (a reader thread that
# ends with its pipe); one still running then is a leak
THREAD_GRACE = 1.0


class _Started:
    """Every thread started from the main thread (the command's own) while it is entered:
    ``threading.Thread.start`` wrapped, for the threads a process exit would have ended."""

    def __init__(self):
        self.threads: list[threading.Thread] = []

    def __enter__(self) -> "_Started":
        self._start = start = threading.Thread.start
        started = self.threads

        def tracked(thread, *a, **kw):
            if threading.current_thread() is threading.main_thread():  # (not a test's server thread)
                started.append(thread)
            return start(thread, *a, **kw)

        threading.Thread.start = tracked
        return self

    def __exit__(self, *exc) -> None:
        threading.Thread.start = self._start

    def running(self, grace: float) -> list[threading.Thread]:
        """Those still running after up to ``grace`` seconds in all."""
        import time

        deadline = time.monotonic() + grace
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return [t for t in self.threads if t.is_alive()]


class _Timeout(BaseException):
    """Raised in the command by SIGALRM: not an ``Exception``, so the CLI's catch-all lets it pass."""


class _Interrupted(BaseException):
    """Ctrl-C of the test run during a command: not a ``KeyboardInterrupt``, which the CLI turns
    into exit 130; re-raised as one once everything is put back, so pytest stops."""


def needs_subprocess(argv: list[str], env: dict[str, str]) -> str | None:
    """Why this run cannot be in-process (or None): another thread is running, the command execs or
    never returns, or the environment changes what the interpreter itself loads."""
    if threading.current_thread() is not threading.main_thread():
        return "not the main thread (runs meant to overlap stay processes)"
    if SUBPROCESS_COMMANDS.intersection(a for a in argv if not a.startswith("-")):
        return "the command leaves or outlives the process"
    # what a Python started with another environment would do differently (PYTHONPATH: other plugins,
    # PYTHONPROFILEIMPORTTIME: its imports on stderr)
    changed = sorted(v for v in {*env, *os.environ} if v.startswith("PYTHON") and env.get(v) != os.environ.get(v))
    if changed:
        return f"{', '.join(changed)} differ from this interpreter's"
    return None


def _open_fds() -> dict[int, str]:
    folder = "/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"
    out = {}
    for name in os.listdir(folder):
        try:
            out[int(name)] = os.readlink(os.path.join(folder, name))
        except OSError:  # the listing's own fd, gone already
            continue
    return out


def _clear_caches() -> None:
    """Forget what muxhost's modules memoised (``functools`` caches): a subprocess starts without."""
    for name, module in list(sys.modules.items()):
        if name == "muxhost" or name.startswith(("muxhost.", "muxhost_")):
            for value in list(vars(module).values()):
                if isinstance(value, functools._lru_cache_wrapper):
                    value.cache_clear()


def _cli(argv: list[str]) -> int:
    """``muxhost.cli.main(argv)``; exit status as the process would end with it."""
    from muxhost import cli

    sys.argv = ["muxhost", *argv]
    try:
        main = cli.main
        import inspect

        rc = main(argv) if inspect.signature(main).parameters else main()
    except SystemExit as e:
        code = e.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    return rc if isinstance(rc, int) else 0


def run_cli(argv: list[str], env: dict[str, str], cwd: str, input: str | None = None,
            timeout: float = 60) -> Result:
    """Run ``muxhost ARGV`` here as :func:`subprocess.run` would in a new process with ``env`` and
    ``cwd``: stdin is ``input`` (else empty), fds 1 and 2 are captured (so are the programs it
    starts, as a pipe would), a run past ``timeout`` raises :class:`subprocess.TimeoutExpired`."""
    with _LOCK:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        saved_env, saved_cwd, saved_argv, saved_path = dict(os.environ), os.getcwd(), sys.argv, list(sys.path)
        saved_streams = (sys.stdin, sys.stdout, sys.stderr)
        saved_umask = os.umask(0o022)
        os.umask(saved_umask)
        saved_signals = {s: signal.getsignal(s) for s in _SIGNALS}
        saved_fds = [os.dup(fd) for fd in (0, 1, 2)]
        fds_before = _open_fds()
        files = [tempfile.TemporaryFile(), tempfile.TemporaryFile(), tempfile.TemporaryFile()]
        if input is not None:
            files[0].write(input.encode())
            files[0].flush()
            files[0].seek(0)
        streams = []
        interrupted = False
        threads = _Started()
        try:
            for fd, f in enumerate(files):
                os.dup2(f.fileno(), fd)
            sys.stdin = io.TextIOWrapper(io.FileIO(os.dup(0), "r"), encoding="utf-8")
            sys.stdout = io.TextIOWrapper(io.FileIO(os.dup(1), "w"), encoding="utf-8")
            sys.stderr = io.TextIOWrapper(io.FileIO(os.dup(2), "w"), encoding="utf-8", line_buffering=True,
                                          errors="backslashreplace")
            streams = [sys.stdin, sys.stdout, sys.stderr]
            os.environ.clear()
            os.environ.update(env)
            os.chdir(cwd)
            entered = os.getcwd()
            _clear_caches()

            def expire(signum, frame):
                raise _Timeout()

            def interrupt(signum, frame):
                raise _Interrupted()

            signal.signal(signal.SIGALRM, expire)
            signal.signal(signal.SIGINT, interrupt)
            signal.setitimer(signal.ITIMER_REAL, timeout)
            timed_out = False
            try:
                try:
                    with threads:
                        rc = _cli(list(argv))
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
            except _Timeout:
                timed_out = True
            except _Interrupted:
                interrupted = True
                raise
            except BaseException:  # what an uncaught exception does to a process
                traceback.print_exc()
                rc = 1
            for s in streams[1:]:
                try:
                    s.flush()
                except (OSError, ValueError):
                    pass
            if timed_out:
                raise subprocess.TimeoutExpired(["muxhost", *argv], timeout)
            # (while the fds are still the command's: what a thread of it prints late is its output)
            running = threads.running(THREAD_GRACE)
        finally:
            for s in streams:
                try:
                    s.close()
                except (OSError, ValueError):
                    pass
            sys.stdin, sys.stdout, sys.stderr = saved_streams
            for fd, saved in enumerate(saved_fds):
                os.dup2(saved, fd)
                os.close(saved)
            sys.argv = saved_argv
            path_now, sys.path[:] = list(sys.path), saved_path
            try:
                cwd_now = os.getcwd()
            except OSError as e:  # (a folder it entered, then removed)
                cwd_now = f"({e.strerror})"
            os.chdir(saved_cwd)
            env_now = dict(os.environ)
            os.environ.clear()
            os.environ.update(saved_env)
            changed = {s: h for s, h in saved_signals.items()
                       if s not in (signal.SIGALRM, signal.SIGINT) and signal.getsignal(s) is not h}
            for s, h in saved_signals.items():
                if h is not None:  # (None: a handler not set from Python, which nothing here changed)
                    signal.signal(s, h)
            umask = os.umask(saved_umask)
            _clear_caches()
            out, err = (_read(f) for f in files[1:])
            for f in files:
                f.close()
            if interrupted:
                raise KeyboardInterrupt from None
        # files only (a fake server's thread may hold a new socket or pipe meanwhile): a database, a
        # lock. Not a file this process had open before: SQLite keeps a closed connection's fd while
        # another connection of the process (the test's own Store) holds a lock on that file
        was_open = set(fds_before.values())

        def left_open() -> dict[int, str]:
            return {fd: target for fd, target in _open_fds().items()
                    if (fd not in fds_before or fds_before[fd] != target) and target.startswith("/")
                    and not target.startswith("/dev/") and target not in was_open}

        left = left_open()
        if left:  # what only a reference cycle still holds is closed by a collection (~0.4 s here: only then)
            gc.collect()
            left = left_open()
    problems = []
    if left:
        problems.append("open fds " + ", ".join(f"{fd} -> {t}" for fd, t in sorted(left.items())))
    if changed:
        problems.append("signal handlers of " + ", ".join(signal.Signals(s).name for s in changed))
    if umask != saved_umask:
        problems.append(f"the umask ({umask:o}, was {saved_umask:o})")
    if running:
        problems.append("threads still running " + ", ".join(t.name for t in running))
    if path_now != saved_path:
        problems.append(f"sys.path ({', '.join(sorted(set(path_now) ^ set(saved_path)) or ['its order'])})")
    if cwd_now != entered:
        problems.append(f"the cwd ({cwd_now}, was {entered})")
    if env_now != env:
        problems.append("os.environ " + ", ".join(sorted(k for k in {*env, *env_now} if env.get(k) != env_now.get(k))))
    if problems:
        raise Leak(f"`muxhost {' '.join(argv)}` (in-process) left behind: {'; '.join(problems)}\n"
                   f"stdout: {out}\nstderr: {err}")
    return Result(rc, out, err)


def _read(f) -> str:
    f.seek(0)
    return f.read().decode("utf-8", "replace")
