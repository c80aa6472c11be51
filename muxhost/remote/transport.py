"""The ssh command: the system ``ssh`` from PATH, one shared connection per host, never a prompt.

Every session is ``ssh -T -o BatchMode=yes -o ConnectTimeout=T -o ControlMaster=auto
-o ControlPersist=60 -o ControlPath=<state dir>/ssh/%C -- DESTINATION '<muxhost> remote-serve'``:
the remote command is fixed and quoted for the remote shell; the request goes on stdin
(:mod:`muxhost.remote.protocol`). A failure is one reason: unreachable, authentication refused,
no muxhost there (with the install command), or a muxhost of another schema.
"""

from __future__ import annotations

import codecs
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from muxhost import __version__
from muxhost.errors import MuxhostError
from muxhost.remote import protocol

CONTROL_PERSIST = 60
SERVER_ALIVE = 15
OFFLINE_CACHE_SECONDS = 30.0
_SUN_PATH = 103  # a unix socket path's room (104 on macOS with its NUL; 108 on Linux)
INSTALL = f"python3 -m pip install --user muxhost=={__version__}"
SSH_FAILED = 255  # ssh's exit status for its own errors (a muxhost exits 0–5)


@dataclass
class Answer:
    """One request's outcome: ``ok`` with the verb's ``rc``/``out``/``err``, else the ``reason``."""
    ok: bool
    rc: int = 1
    out: str = ""
    err: str = ""
    reason: str | None = None
    version: str | None = None
    schema: int | None = None
    seconds: float = 0.0
    doc: Any = None
    cached: bool = False


def ssh_binary() -> str:
    found = shutil.which("ssh")
    if not found:
        raise MuxhostError("ssh is not on PATH: install OpenSSH's client (remote hosts go through it)")
    return found


def socket_folder(state: Path) -> Path:
    """Where the shared connections' sockets of the state folder ``state`` go: ``state/ssh``, or
    ``$XDG_RUNTIME_DIR/muxhost-ssh-<uid>`` (else ``/tmp/…``) when that path is too long for a socket
    (or holds a space or ``%``, which ssh's ControlPath would take apart)."""
    folder = state / "ssh"
    # "/" + %C (40 hex) + the ".XXXXXXXXXXXXXXXX" ssh adds while it binds
    if len(str(folder)) + 58 > _SUN_PATH or any(c in str(folder) for c in " %\t\"'"):
        runtime = os.environ.get("XDG_RUNTIME_DIR")
        base = Path(runtime) if runtime and os.path.isdir(runtime) else Path("/tmp")
        folder = base / f"muxhost-ssh-{os.geteuid()}"
    return folder


def control_dir() -> Path:
    """:func:`socket_folder` of the state folder, made 0700 (refused when someone else could change it:
    outside the state folder, its parents are checked as the state folder's are, since whoever may
    rename the folder there could put a master socket of theirs in its place)."""
    from muxhost.store import check_parents, private_folder, state_folder

    state = state_folder()
    folder = socket_folder(state)
    if folder.parent != state:
        check_parents(folder, "the ssh socket folder")
    return private_folder(folder)


def remote_word(path: str) -> str:
    """``path`` quoted for the remote shell, a leading ``~/`` left for it to expand."""
    if path == "~":
        return "~"
    if path.startswith("~/"):
        return "~/" + shlex.quote(path[2:])
    return shlex.quote(path)


def remote_command(host, args: list[str]) -> str:
    return " ".join([remote_word(host.muxhost), *(shlex.quote(a) for a in args)])


def ssh_argv(host, command: str, timeout: float, tty: bool = False) -> list[str]:
    return [ssh_binary(), "-t" if tty else "-T",
            "-o", "BatchMode=yes", "-o", f"ConnectTimeout={max(1, math.ceil(timeout))}",
            "-o", "ControlMaster=auto", "-o", f"ControlPersist={CONTROL_PERSIST}",
            "-o", f"ControlPath={control_dir()}/%C", "-o", "LogLevel=ERROR",
            # (a connection that breaks without a word ends within 45 s: a followed watch's host goes offline)
            "-o", f"ServerAliveInterval={SERVER_ALIVE}", "-o", "ServerAliveCountMax=3",
            "--", host.ssh, command]


def _start(host, timeout: float) -> subprocess.Popen:
    argv = ssh_argv(host, remote_command(host, [protocol.SERVE_VERB]), timeout)
    try:
        return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
    except OSError as e:
        raise MuxhostError(f"{host.name}: cannot run ssh: {e}") from None


def failure(host, rc: int, err: str) -> str:
    """Why a session with no muxhost header failed, in a few words."""
    lines = [ln.strip() for ln in err.splitlines() if ln.strip()]
    last = lines[-1] if lines else f"exit {rc}"
    text = err.lower()
    if "invalid choice: 'remote-serve'" in text or "invalid choice: \"remote-serve\"" in text:
        return f"its muxhost is too old for remote hosts (no remote-serve): install muxhost {__version__} there ({INSTALL})"
    if rc == 127 or "command not found" in text or ("no such file" in text and rc != 255):
        return (f"no muxhost there ({host.muxhost} not found): install it there ({INSTALL}), "
                f"or give its path: muxhost hosts add {host.name} {host.ssh} --muxhost PATH")
    if rc == SSH_FAILED:
        if "permission denied" in text or "too many authentication failures" in text:
            return f"authentication refused ({last})"
        if "host key verification failed" in text or "remote host identification has changed" in text:
            return f"host key not trusted ({last}): check it with `ssh {host.ssh}` by hand"
        return f"unreachable ({last})"
    return f"no muxhost answer from {host.muxhost} (exit {rc}: {last})"


def ask(host, argv: list[str], timeout: float) -> Answer:
    """Run ``argv`` on ``host`` and wait for all of its output, at most ``timeout`` seconds."""
    started = time.monotonic()
    try:
        proc = _start(host, timeout)
    except MuxhostError as e:
        return Answer(False, reason=str(e).partition(": ")[2])
    try:
        out, err = proc.communicate(protocol.request(argv, as_name=host.name), timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return Answer(False, reason=f"no answer within {timeout:g}s", seconds=time.monotonic() - started)
    seconds = time.monotonic() - started
    first, _, rest = out.partition(b"\n")
    head = protocol.parse_header(first)
    err_text = err.decode("utf-8", "replace")
    if head is None:
        return Answer(False, rc=proc.returncode, err=err_text, reason=failure(host, proc.returncode, err_text),
                      seconds=seconds)
    why = protocol.incompatible(head)
    answer = Answer(why is None, rc=proc.returncode, out=rest.decode("utf-8", "replace"), err=err_text, reason=why,
                    version=head.get("muxhost"), schema=head.get("schema"), seconds=seconds)
    if answer.ok:
        try:
            answer.doc = json.loads(answer.out) if answer.out.strip() else None
        except ValueError:
            answer.doc = None
        if proc.returncode != 0:
            answer.ok = False
            answer.reason = (err_text.strip().splitlines() or [f"exit {proc.returncode}"])[-1].removeprefix("muxhost: ")
    return answer


# -- the offline cache: a dead host costs hosts.timeout once, then shows offline for 30 s ----------
def _cache_path() -> Path:
    from muxhost.store import state_dir

    return state_dir() / "hosts-offline.json"


def _read_cache() -> dict[str, dict]:
    try:
        data = json.loads(_cache_path().read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_cache(cache: dict[str, dict]) -> None:
    from muxhost.store import check_private, state_folder

    path = _cache_path()
    try:
        state_folder()  # (makes and checks the folder)
        check_private(path)
        tmp = path.with_name(f".offline.{os.getpid()}.{threading.get_ident()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(cache, f)
        os.replace(tmp, path)
    except (OSError, MuxhostError):
        pass  # a cache: the next ls asks again


def ask_all(hosts: list, argv: list[str], timeout: float, use_cache: bool = True) -> dict[str, Answer]:
    """:func:`ask` every host at once (threads); a host found offline less than 30 s ago is not
    asked again (``use_cache``)."""
    now = time.time()
    cache = _read_cache() if use_cache else {}
    answers: dict[str, Answer] = {}
    todo = []
    for h in hosts:
        hit = cache.get(h.name)
        if hit and isinstance(hit, dict) and now - float(hit.get("at", 0)) < OFFLINE_CACHE_SECONDS \
                and hit.get("ssh") == h.ssh:
            answers[h.name] = Answer(False, reason=str(hit.get("reason")), cached=True)
        else:
            todo.append(h)
    if todo:
        with ThreadPoolExecutor(max_workers=len(todo)) as pool:
            for h, a in zip(todo, pool.map(lambda h: ask(h, argv, timeout), todo)):
                answers[h.name] = a
    fresh = _read_cache()
    for h in todo:
        a = answers[h.name]
        if a.ok or a.version is not None:  # it answered: not offline
            fresh.pop(h.name, None)
        else:
            fresh[h.name] = {"at": now, "reason": a.reason, "ssh": h.ssh}
    if todo:
        _write_cache(fresh)
    return answers


# -- a verb run there, its output streamed here -------------------------------------------------
def forward(host, argv: list[str], timeout: float = 5.0) -> int:
    """Run ``argv`` on ``host``; its stdout streams here, its stderr follows, its exit code is ours."""
    proc = _start(host, timeout)
    errs: list[bytes] = []
    reader = threading.Thread(target=lambda: errs.append(proc.stderr.read()), daemon=True)
    reader.start()
    try:
        try:
            proc.stdin.write(protocol.request(argv, as_name=host.name))
            proc.stdin.close()
        except BrokenPipeError:
            pass
        head = protocol.parse_header(proc.stdout.readline())
        if head is None:
            proc.stdout.read()
            rc = proc.wait()
            reader.join()
            raise MuxhostError(f"{host.name}: {failure(host, rc, b''.join(errs).decode('utf-8', 'replace'))}")
        why = protocol.incompatible(head)
        if why:
            proc.kill()
            raise MuxhostError(f"{host.name}: {why}", 1)
        decode = codecs.getincrementaldecoder("utf-8")("replace")
        while True:
            chunk = proc.stdout.read1(65536)
            if not chunk:
                break
            sys.stdout.write(decode.decode(chunk))
            sys.stdout.flush()
        sys.stdout.write(decode.decode(b"", final=True))
        rc = proc.wait()
        reader.join()
        err = b"".join(errs).decode("utf-8", "replace")
        lines = err.splitlines()
        if rc == SSH_FAILED and lines and not lines[-1].startswith("muxhost:"):
            err = "".join(f"{ln}\n" for ln in lines[:-1])  # (ssh's own last word goes in the line below)
        if err:
            sys.stderr.write(err)
            sys.stderr.flush()
        if rc == SSH_FAILED:  # (a muxhost never exits 255: ssh's session died under the verb)
            why = lines[-1].strip() if lines and not lines[-1].startswith("muxhost:") else f"ssh exit {rc}"
            print(f"muxhost: {host.name}: the connection was lost before the command ended ({why}); "
                  f"what it did there so far stands (`muxhost ls --host {host.name}`)", file=sys.stderr)
            return 1
        return rc
    except BaseException:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        raise


def attach(host, args: list[str], timeout: float = 5.0, ref: str = "attach") -> int:
    """``attach REF@HOST``: ``ssh -t`` running the remote ``muxhost attach REF``; inside tmux, in a new
    window of this server named ``REF@HOST`` (``#`` doubled: tmux expands formats in a window name,
    and ``#(…)`` would run here)."""
    sys.stdout.flush()
    argv = open_attach(host, args, timeout, ref, os.environ)
    if argv:
        os.execvp(argv[0], argv)
    return 0


def open_attach(host, args: list[str], timeout: float, ref: str, env) -> list[str] | None:
    """``attach REF@HOST`` inside tmux (``TMUX`` in ``env``): a new window running it (None);
    outside: the ``ssh -t`` argv for this terminal to run."""
    argv = ssh_argv(host, remote_command(host, ["attach", *args]), timeout, tty=True)
    if env.get("TMUX"):
        name = f"{ref}@{host.name}".replace("#", "##")
        r = subprocess.run(["tmux", "new-window", "-n", name, "--", *argv], capture_output=True, text=True,
                           env={**os.environ, "TMUX": env["TMUX"]})
        if r.returncode != 0:
            raise MuxhostError(f"tmux new-window failed: {r.stderr.strip() or r.returncode}")
        return None
    return argv


def session(host, argv: list[str], timeout: float) -> subprocess.Popen:
    """A long-lived session running ``argv`` on ``host`` (``watch --json``): its request written, its
    stdin left open (the remote verb ends when it closes: the ssh session went), stdout and stderr
    pipes for the caller to read. End it with ``kill()`` by its pid."""
    proc = _start(host, timeout)
    try:
        proc.stdin.write(protocol.request(argv, as_name=host.name))
        proc.stdin.flush()
    except OSError:
        pass  # (it ended at once: its stdout says why)
    return proc
