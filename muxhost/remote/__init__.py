"""Remote hosts over OpenSSH: ``REF@HOST`` and ``--host NAME`` forwarded to a muxhost on another machine.

One dispatch point, :func:`dispatch`, runs before the local host is built: a command whose REF ends
in ``@NAME`` of a configured host (or ``launch … --host NAME``) goes over ``ssh`` to that host's
muxhost (``remote-serve``, a hidden verb reading one JSON request on stdin) and answers with the
remote verb's own stdout, stderr and exit code. ``hosts add|rm|ls`` manage the hosts; ``ls`` merges
every host (:mod:`muxhost.remote.listing`). The pieces: :mod:`~muxhost.remote.hosts` (which hosts),
:mod:`~muxhost.remote.transport` (the ssh command), :mod:`~muxhost.remote.protocol` (what goes over it).
"""

from __future__ import annotations

import sys
from typing import Callable, Sequence

from muxhost.errors import UsageError
from muxhost.remote import protocol
from muxhost.remote.protocol import REF_VERBS
MANY_REFS = ("stop", "sleep")
GLOBAL_WITH_VALUE = ("--config", "--socket", "--backend")


def split(argv: Sequence[str]) -> tuple[list[str], str | None, list[str]]:
    """``argv`` as (global options, command word, the command's arguments)."""
    argv = list(argv)
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in GLOBAL_WITH_VALUE:
            i += 2
        elif a.startswith("-"):
            i += 1
        else:
            return argv[:i], a, argv[i + 1:]
    return argv, None, []


def _config_of(globals_: list[str]) -> str | None:
    for i, a in enumerate(globals_):
        if a == "--config" and i + 1 < len(globals_):
            return globals_[i + 1]
        if a.startswith("--config="):
            return a.partition("=")[2]
    return None


def dispatch(argv: Sequence[str], run_cli: Callable[[list[str]], int] | None = None) -> int | None:
    """Run ``argv`` on a remote host when it names one (the exit code), else None: run it here.
    Cheap when nothing in ``argv`` could name a host: no config is read. ``run_cli`` (the CLI's
    ``main``, which passes itself) runs a request from another muxhost (``remote-serve``)."""
    globals_, word, rest = split(argv)
    if protocol.serving():  # a request from another muxhost runs here, never hops on
        return None
    if word == protocol.SERVE_VERB:
        if run_cli is None:
            raise UsageError(f"{protocol.SERVE_VERB}: only the muxhost command line serves a request")
        return protocol.serve(run_cli)
    if word == "launch" and any(a == "--host" or a.startswith("--host=") for a in rest[:_cut(rest)]):
        return _forward_launch(_config_of(globals_), rest)
    if word in REF_VERBS:
        positions = _ref_positions(word, rest)
        if any("@" in rest[i] for i in positions):  # (not the text of `send r "mail me@x"`)
            return _forward_ref(_config_of(globals_), word, rest, positions)
    if word in HOST_VERBS and any(a == "--host" or a.startswith("--host=") for a in rest):
        return _forward_launch(_config_of(globals_), rest, word)
    return None


#: verbs besides ``launch`` that take ``--host NAME``: the whole command runs on that host
HOST_VERBS = ("conversations", "prune")


def _cut(rest: list[str]) -> int:
    return rest.index("--") if "--" in rest else len(rest)


def _forward_launch(config_path: str | None, rest: list[str], word: str = "launch") -> int:
    """``launch … --host NAME`` (``conversations``, ``prune`` too): the command on NAME, without
    ``--host``. (launch's ``--env`` values stay in argv: the whole request is on the session's stdin,
    never on a command line, and the remote launch checks them as a local one does.)"""
    from muxhost.remote import hosts, transport

    cut = _cut(rest)
    mine, agent_args = rest[:cut], rest[cut:]
    name, out, i = None, [], 0
    while i < len(mine):
        a = mine[i]
        if a == "--host":
            if i + 1 >= len(mine):
                raise UsageError(f"{word}: argument --host: expected one argument")
            name, i = mine[i + 1], i + 2
            continue
        if a.startswith("--host="):
            name = a.partition("=")[2]
        else:
            out.append(a)
        i += 1
    if name == hosts.LOCAL:
        return None  # type: ignore[return-value]  # (`--host local`: here, as without it)
    table = hosts.load(config_path)
    return transport.forward(table.get(name), [word, *out, *agent_args], timeout=table.timeout)


def _forward_ref(config_path: str | None, word: str, rest: list[str], positions: list[int]) -> int:
    """A REF verb whose REF (at ``positions`` of ``rest``) ends in ``@NAME`` of a configured host: the
    verb on NAME, REF@NAME -> REF."""
    from muxhost.remote import hosts, transport

    table = hosts.load(config_path)
    named = {}
    for i in positions:
        ref, at, name = rest[i].rpartition("@")
        if at and ref and name in table.hosts:
            named[i] = (ref, name)
    if not named:
        return None  # type: ignore[return-value]  # (a local REF with an @ in its name)
    where = {name for _, name in named.values()}
    if len(where) > 1 or len(named) != len(positions):
        raise UsageError(f"{word}: the REFs of one command go to one host (got "
                         f"{', '.join(rest[i] for i in positions)})")
    args = list(rest)
    for i, (ref, _) in named.items():
        args[i] = ref
    host = table.get(where.pop())
    if word == "send" and len(positions) == 1 and positions[0] + 1 < len(args) and args[positions[0] + 1] == "-":
        args[positions[0] + 1] = sys.stdin.read().rstrip("\n")  # the text goes in the request, stdin carries it
    if word == "attach":
        return transport.attach(host, args, timeout=table.timeout, ref=args[positions[0]])
    if word == "purge" and "--yes" not in args and "-y" not in args and "--dry-run" not in args:
        return _purge_confirmed(host, args, table.timeout)
    return transport.forward(host, [word, *args], timeout=table.timeout)


def _purge_confirmed(host, args: list[str], timeout: float) -> int:
    """``purge REF@HOST`` without ``--yes``: the remote plan (``--dry-run``), asked here, then that
    conversation purged there (``--yes --confirmed ID``: not the one the agent is in by then)."""
    import types

    from muxhost.cli.purge import print_report
    from muxhost.remote import transport

    if not sys.stdin.isatty():
        raise UsageError("refusing to purge without --yes when stdin is not a terminal")
    shown = transport.ask(host, ["purge", *[a for a in args if a != "--json"], "--dry-run", "--json"], timeout)
    if not shown.ok or not isinstance(shown.doc, dict) or not shown.doc.get("conversation_id"):
        sys.stderr.write(shown.err)
        if not shown.ok and shown.reason:
            print(f"muxhost: {host.name}: {shown.reason}", file=sys.stderr)
        return shown.rc or 1
    print_report(types.SimpleNamespace(**{"stopped": None, "home": None, "refused": None, "notes": [],
                                          **shown.doc}), False)
    if shown.doc.get("refused"):  # (a yes could only be refused: say so now, as a local purge does)
        print(f"muxhost: {host.name}: {shown.doc['refused']}", file=sys.stderr)
        return 4
    try:
        answer = input(f"purge this on {host.name} for good? [y/N] ")
    except EOFError:
        answer = ""
    if answer.strip().lower() not in ("y", "yes"):
        print("muxhost: not purged", file=sys.stderr)
        return 4
    return transport.forward(host, ["purge", *args, "--yes", "--confirmed", shown.doc["conversation_id"]],
                             timeout=timeout)


# options of the REF verbs that take a value (what follows them is no REF)
_VALUED = {"--confirmed", "--grace", "--idle-for", "--target", "--split", "--agent", "--conversation", "--pane", "--home",
           "--client", "--until", "--timeout", "--lines"}


def _ref_positions(word: str, rest: list[str]) -> list[int]:
    """Indexes of ``rest`` that are REFs of ``word``."""
    found, skip = [], False
    for i, a in enumerate(rest):
        if skip:
            skip = False
            continue
        if a in _VALUED:
            skip = True
            continue
        if a.startswith("-") and a != "-":
            continue
        found.append(i)
        if word not in MANY_REFS:
            break
    return found
