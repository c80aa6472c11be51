"""The pane launcher: an agent's environment reaches its pane on no command line.

Every local user can read a process's command line (``ps``), and an agent's environment holds API
keys. So a backend writes the exact argv, cwd and environment to a 0600 file in the 0700 folder
``<state dir>/launch`` (:func:`write`) and runs, as the pane's command, only
``python -I -S …/muxhost/launcher.py FILE``: paths, nothing else. That process (:func:`main`) opens
the file, deletes it, reads it, and ``execve``-s the agent, so the agent IS the pane's process, with
exactly the file's environment plus the few variables the multiplexer sets for the pane itself
(``inherit``, taken from the launcher's own environment: tmux's ``TMUX``, ``TMUX_PANE``…). Anything
else the multiplexer handed the pane (tmux: its server's stale environment) is dropped.

The launcher runs once per pane start, so it imports only ``os`` and ``sys`` (``-S``: no site, about
10 ms; on Linux also ``_ctypes``, for :func:`_subreaper`); ``-I`` keeps the pane's stale ``PYTHON*``
variables and this folder off its path.
"""

from __future__ import annotations

import os
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # never at run time: `typing` alone would double the launcher's start-up
    from collections.abc import Iterable, Mapping, Sequence

MAGIC = b"muxhost-launch 1"
SUFFIX = ".launch"
STALE_AFTER = 300.0  # seconds: a file this old belongs to a pane whose launcher never ran
TAKE_TIMEOUT = 10.0  # seconds a backend waits for the launcher to take its file


class LaunchFile:
    """A written launch file; ``argv`` is the command that runs it (paths only)."""

    def __init__(self, path: str):
        self.path = path
        self.argv = [sys.executable, "-I", "-S", os.path.abspath(__file__), path]

    def discard(self) -> None:
        """Delete the file if the launcher has not (it holds the agent's environment)."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def wait(self, pid: int | None, timeout: float = TAKE_TIMEOUT) -> bool:
        """After the pane started: wait until its launcher took the file (the first thing it does)
        while the pane's process ``pid`` lives; delete the file if it did not. True when taken."""
        deadline = time.monotonic() + timeout
        while os.path.lexists(self.path):
            if time.monotonic() > deadline or not _alive(pid):
                self.discard()
                return False
            time.sleep(0.002)
        return True


def _alive(pid: int | None) -> bool:
    if not pid:
        return True  # unknown: wait for the time-out
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _checked(what: str, data: bytes) -> bytes:
    if b"\0" in data:  # ``what`` never shows the value: it may be a secret
        from muxhost.errors import MuxhostError

        raise MuxhostError(f"cannot pass {what} to the agent: it contains a NUL byte")
    return data


def _encode(argv: Sequence[str], cwd: str, env: Mapping[str, str], inherit: Iterable[str]) -> bytes:
    """NUL-terminated fields: MAGIC, cwd, len(argv), argv…, len(inherit), inherit…, NAME=VALUE…"""
    argv, inherit = list(argv), list(inherit)
    parts = [MAGIC, _checked(f"the folder {cwd!r}", os.fsencode(cwd)), b"%d" % len(argv)]
    parts += [_checked(f"argument {i}", os.fsencode(a)) for i, a in enumerate(argv)]
    parts += [b"%d" % len(inherit), *(_checked(f"the name {n!r}", os.fsencode(n)) for n in inherit)]
    for k, v in env.items():
        k = str(k)
        if not k or "=" in k:
            from muxhost.errors import MuxhostError

            raise MuxhostError(f"cannot pass the variable {k!r} to the agent: not a variable name")
        parts.append(_checked(f"the variable {k!r}", os.fsencode(k) + b"=" + os.fsencode(str(v))))
    return b"".join(p + b"\0" for p in parts)


def _decode(data: bytes) -> tuple[list[bytes], bytes, dict[bytes, bytes], list[bytes]]:
    """The inverse of :func:`_encode`; ValueError when ``data`` is not a launch file."""
    fields = data.split(b"\0")
    if len(fields) < 6 or fields[0] != MAGIC or fields[-1] != b"":
        raise ValueError("not a muxhost launch file")
    cwd, n = fields[1], int(fields[2])
    argv = fields[3:3 + n]
    m = int(fields[3 + n]) if 3 + n < len(fields) - 1 else -1
    inherit, pairs = fields[4 + n:4 + n + m], fields[4 + n + m:-1]
    if n < 1 or len(argv) != n or m < 0 or len(inherit) != m or not all(b"=" in p for p in pairs):
        raise ValueError("not a muxhost launch file")
    return argv, cwd, dict(p.split(b"=", 1) for p in pairs), inherit


def write(argv: Sequence[str], *, cwd: str, env: Mapping[str, str], inherit: Iterable[str] = ()) -> LaunchFile:
    """Write a launch file that runs ``argv`` in ``cwd`` with exactly ``env``, plus the variables
    named in ``inherit`` that the launcher itself was started with (those the multiplexer sets for
    the pane: they win). Run its ``argv`` as the pane's command; :meth:`LaunchFile.discard` it
    when the pane could not be made, :meth:`LaunchFile.wait` for it when it was. Files older than
    :data:`STALE_AFTER` (a pane that never ran its launcher) are deleted on the way."""
    from muxhost.errors import MuxhostError
    from muxhost.store import private_folder, state_folder

    if not sys.executable:
        raise MuxhostError("cannot start an agent: this Python does not know its own executable")
    data = _encode(argv, cwd, env, inherit)
    folder = private_folder(state_folder() / "launch")
    if folder.stat().st_mode & 0o777 != 0o700:
        os.chmod(folder, 0o700)
    now = time.time()
    with os.scandir(folder) as entries:
        for entry in entries:
            try:
                if entry.name.endswith(SUFFIX) and now - entry.stat(follow_symlinks=False).st_mtime > STALE_AFTER:
                    os.unlink(entry.path)
            except OSError:
                pass
    path = str(folder / (os.urandom(12).hex() + SUFFIX))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except BaseException:
        os.unlink(path)
        raise
    return LaunchFile(path)


def _fail(text: str) -> int:
    print(f"muxhost: {text}", file=sys.stderr)
    return 127


PR_SET_CHILD_SUBREAPER = 36


def _subreaper() -> None:
    """Linux: make this process (the agent, after the exec: the flag survives it) its orphans'
    parent, so a descendant that left the tree (``setsid``, a double fork) and cleared its
    environment is still in the agent's process tree, where the stop ladder finds it. Elsewhere
    (macOS has no such thing) nothing: the ladder has the tree and ``MUXHOST_RECORD`` only."""
    if not sys.platform.startswith("linux"):
        return
    try:  # prctl(2) through _ctypes: `ctypes` itself would cost this launcher several times its start-up
        import _ctypes

        class _Int(_ctypes._SimpleCData):
            _type_ = "i"

        class _Fn(_ctypes.CFuncPtr):
            _flags_ = _ctypes.FUNCFLAG_CDECL
            _restype_ = _Int

        class _Libc:
            _handle = _ctypes.dlopen(None)

        _Fn(("prctl", _Libc()))(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (ImportError, OSError, AttributeError, TypeError):
        pass  # (no libc to ask: the tree and the marker still hold)


def main(args: list[str] | None = None) -> int:
    """``launcher.py FILE``: read FILE, delete it, and become the agent it names (never returns
    then); 127 with one line on stderr when that cannot be done."""
    args = sys.argv[1:] if args is None else args
    if len(args) != 1:
        return _fail("usage: launcher.py FILE")
    path = args[0]
    try:  # never through a symbolic link, and only a file of ours that nobody else can read
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
        st = os.fstat(fd)
        if st.st_uid != os.geteuid() or st.st_mode & 0o170077 != 0o100000:  # S_IFREG, 0600
            os.close(fd)
            return _fail(f"cannot read the launch file {path}: not a private file of yours (mode 0600)")
        with open(fd, "rb") as f:
            try:
                os.unlink(path)  # first: the environment stays on disk no longer than this
            except FileNotFoundError:
                pass  # the backend gave up on us meanwhile; the open file still reads
            argv, cwd, env, inherit = _decode(f.read())
    except (OSError, ValueError) as e:
        return _fail(f"cannot read the launch file {path}: {getattr(e, 'strerror', None) or e}")
    for name in inherit:
        value = os.environb.get(name)
        if value is not None:
            env[name] = value
    import _signal  # loaded already; `signal` would import enum

    # Python ignores these at start-up, and an ignored signal stays ignored across exec
    for sig in ("SIGPIPE", "SIGXFSZ"):
        if hasattr(_signal, sig):
            _signal.signal(getattr(_signal, sig), _signal.SIG_DFL)
    try:
        os.chdir(cwd)
    except OSError as e:
        return _fail(f"cannot enter {os.fsdecode(cwd)}: {e.strerror}")
    _subreaper()
    try:
        os.execvpe(argv[0], argv, env)  # argv[0] is looked up on the agent's PATH
    except OSError as e:
        return _fail(f"cannot run {os.fsdecode(argv[0])}: {e.strerror}")
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main())
