"""What goes over the ssh session: one JSON request line in, a header line and the verb's own output out.

The remote command is fixed (``<muxhost> remote-serve``): nothing of the request is on any command
line. The request, ``{"muxhost": VERSION, "schema": N, "argv": [...], "env": {K: V}}``, is one line
on the session's stdin (``env``: ``launch --env`` values, given to the remote launch in-process as
``--env`` arguments; this muxhost leaves them in ``argv``, which rides the same stdin, and serves
either). An optional ``"as": NAME`` is the name the caller knows this host by: the lines the verb
prints for the user to run (``attach: muxhost attach REF@NAME``) name it, so they work there.
The answer: a header line ``{"protocol": "muxhost-remote", "muxhost": VERSION, "schema": N}`` on
stdout, then the verb's stdout, stderr and exit code as a local run gives them. Unknown fields are
ignored on both sides; a schema other than :data:`SCHEMA` is refused in one line that says which
version is needed. The argv is one of the verbs a muxhost forwards (:data:`SERVED`), no global option
before it: the serving side's config, state and tmux server are its own, and it hops no further
(``hosts``, which would ssh on or write its hosts, is not served).
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any, Callable

from muxhost import __version__

#: verbs whose first positional argument is a REF (``stop``/``sleep``: every positional is one)
REF_VERBS = ("show", "explain", "stop", "resume", "purge", "rm", "sleep", "wake", "send", "wait", "read", "attach")
SCHEMA = 1
#: a remote host's name (``hosts add NAME``; what a request's caller knows this machine as)
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
SERVE_VERB = "remote-serve"
PROTOCOL = "muxhost-remote"
MAX_REQUEST = 1 << 20
#: the verbs a request may run: what :func:`muxhost.remote.dispatch` forwards (``attach`` goes by ``ssh -t``),
#: and ``watch`` (``--json``), which another muxhost's watch follows (:mod:`muxhost.remote.following`)
SERVED = ("launch", "ls", "watch", *(v for v in REF_VERBS if v != "attach"))
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_serving = False
_serving_as: str | None = None


def serving() -> bool:
    """Whether this process answers another muxhost's request (it then forwards nothing further)."""
    return _serving


def serving_as() -> str | None:
    """The name the caller of the request being served knows this host by (``"as"``), or None."""
    return _serving_as if _serving else None


def request(argv: list[str], env: dict[str, str] | None = None, as_name: str | None = None) -> bytes:
    doc = {"muxhost": __version__, "schema": SCHEMA, "argv": list(argv), "env": dict(env or {})}
    if as_name:
        doc["as"] = as_name
    return (json.dumps(doc) + "\n").encode()


def header() -> str:
    return json.dumps({"protocol": PROTOCOL, "muxhost": __version__, "schema": SCHEMA})


def parse_header(line: bytes | str) -> dict[str, Any] | None:
    """The remote's header, or None when ``line`` is none (not a muxhost that serves)."""
    try:
        doc = json.loads(line)
    except (ValueError, TypeError):
        return None
    return doc if isinstance(doc, dict) and doc.get("protocol") == PROTOCOL else None


def incompatible(doc: dict[str, Any]) -> str | None:
    """Why the remote of header ``doc`` cannot be spoken to, or None."""
    schema = doc.get("schema")
    if schema == SCHEMA:
        return None
    return (f"runs muxhost {doc.get('muxhost', '?')} (remote schema {schema}); this muxhost {__version__} "
            f"speaks schema {SCHEMA}: install muxhost {__version__} there")


def serve(run_cli: Callable[[list[str]], int]) -> int:
    """``muxhost remote-serve``: read one request on stdin, run its verb here with ``run_cli`` (the
    CLI's ``main``), as the caller's ``cli`` would; print the header first. Called by ssh on the
    remote side. (Nothing outlives the call: the CLI may run many times in one process.)"""
    global _serving, _serving_as
    stdin = sys.stdin
    _serving = True
    try:
        return _serve(stdin, run_cli)
    finally:
        _serving, _serving_as = False, None
        if sys.stdin is not stdin:
            sys.stdin.close()
            sys.stdin = stdin


def _serve(stdin, run_cli: Callable[[list[str]], int]) -> int:
    global _serving_as
    line = stdin.buffer.readline(MAX_REQUEST) if hasattr(stdin, "buffer") else stdin.readline(MAX_REQUEST).encode()
    print(header(), flush=True)
    try:
        req = json.loads(line)
        if not isinstance(req, dict):
            raise ValueError("not an object")
    except ValueError as e:
        print(f"muxhost: {SERVE_VERB}: the request is not one JSON object line ({e})", file=sys.stderr)
        return 2
    if req.get("schema") != SCHEMA:
        print(f"muxhost: this muxhost {__version__} speaks remote schema {SCHEMA}; the caller (muxhost "
              f"{req.get('muxhost', '?')}) speaks schema {req.get('schema')}: install muxhost "
              f"{req.get('muxhost', __version__)} here", file=sys.stderr)
        return 2
    argv, env = req.get("argv"), req.get("env") or {}
    as_name = req.get("as")
    _serving_as = as_name if isinstance(as_name, str) and NAME_RE.fullmatch(as_name) else None
    if (not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv)
            or not isinstance(env, dict)
            or not all(isinstance(k, str) and _ENV_NAME.fullmatch(k) and isinstance(v, str) for k, v in env.items())):
        print(f"muxhost: {SERVE_VERB}: the request's argv or env is malformed", file=sys.stderr)
        return 2
    if argv[0] not in SERVED:
        print(f"muxhost: {SERVE_VERB}: {argv[0]!r} is not served (a request runs one of "
              f"{', '.join(SERVED)}, no global option before it)", file=sys.stderr)
        return 2
    if env:
        if argv[0] != "launch":
            print(f"muxhost: {SERVE_VERB}: env goes with launch only", file=sys.stderr)
            return 2
        argv = [argv[0], *(f"--env={k}={v}" for k, v in env.items()), *argv[1:]]
    if argv[0] == "watch":
        _end_with_session(stdin)
    sys.stdin = open(os.devnull)  # the request was stdin: a verb that asks gets no answer, as in a script
    return run_cli(argv)


def _end_with_session(stdin) -> None:
    """A served ``watch`` ends when its ssh session goes: the session's stdin closes (sshd closes it
    when the caller's ssh ends), and this process gets SIGTERM, which ends a watch as Ctrl-C does
    (it takes back what it published). The caller writes nothing more after the request."""
    import signal
    import threading

    source = stdin.buffer if hasattr(stdin, "buffer") else stdin

    def wait() -> None:
        try:
            while source.read(4096):
                pass
        except (OSError, ValueError):
            pass
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=wait, name="muxhost-serve-eof", daemon=True).start()

