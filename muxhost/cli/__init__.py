"""The ``muxhost`` command line: ``main(argv)`` parses, runs one command and returns its exit code.

Each command is a module of this package (tmuxp's layout): ``add_arguments(parser)`` and
``run(host, args) -> int``. A command line imports only its own command's module and builds only its
parser (argparse picks the command; see :class:`_Commands`): ``muxhost --help`` imports no plugin and
no libtmux, and the host is imported when a command runs. Nothing here outlives one call of
:func:`main` (it runs many times in one process: the tests, the dashboard).
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib import import_module
from typing import Any, Sequence

from muxhost import __version__
from muxhost.errors import MuxhostError, UsageError

EXIT_CODES = """exit codes:
  0 done · 1 failed (tmux, agent or I/O error) · 2 usage or config error · 3 not found
  4 refused (in use, or vetoed) · 5 purge incomplete (something was left)"""

#: every core command, in the order ``--help`` lists them, with its line there; its module is
#: ``muxhost.cli.<name>``
COMMANDS = {
    "launch": "start an agent in a new tmux pane and print its record",
    "ls": "list records with their live state",
    "show": "one record, with its process tree and pane",
    "explain": "why muxhost thinks an agent is working, waiting, idle or stalled: what it read, which rule decided",
    "attach": "go to an agent's pane",
    "stop": "stop an agent: /exit, then kill-session, SIGTERM, SIGKILL of the whole tree",
    "resume": "resume the record's conversation in a new pane (same record)",
    "purge": "delete a conversation and its child conversations for good",
    "unpurge": "put a purge archive back (`purge --archive` wrote it): files, rows, lines",
    "archives": "the purge archives: ls, show A, rm A, prune --older-than D",
    "reconcile": "compare records with tmux and the process table; fix drift; say what changed",
    "plugins": "agents and backends, with their package, version and hooks",
    "watch": "watch what every agent does (working, waiting, idle, stalled) and publish it",
    "sleep": "stop an agent but keep its pane, which wakes it on Enter",
    "wake": "resume an asleep agent's conversation in its own pane (as Enter there does)",
    "restore": "after the pane server died, resume every agent that was running, show the asleep ones",
    "send": "type a line into the agent: Ctrl-U, TEXT, Enter",
    "wait": "wait until the agent is idle, waiting for you, or exited",
    "read": "print the agent's screen as plain text",
    "rm": "forget a stopped record and remove the git worktree muxhost made for it",
    "conversations": "every conversation on disk, of every agent: age, folder, size, title, record, in use",
    "prune": "purge every conversation last updated before a cutoff, skipping those in use",
    "hosts": "remote hosts reached over ssh: add, rm, ls",
    "ui": "the dashboard: every agent live, a preview, a key for each command (docs/ui.md)",
    "notify": "the watch's notifications (notify.urls): `notify test` sends one to every channel",
}
CORE_COMMANDS = tuple(COMMANDS)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        # a flag is its whole name: `--dry` is no `--dry-run` (a script that leans on a prefix breaks
        # the day another flag starts the same, and the docs' check could not see a renamed flag)
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # one line, exit 2, like every other usage error
        sub = self.prog.partition(" ")[2]  # "muxhost launch" -> "launch"; the CLI adds "muxhost: "
        raise UsageError(f"{sub}: {message}" if sub else message)


class _Parsers(dict):
    """The command parsers by name; a core command's is built when first looked up (``None`` until then)."""

    def __init__(self, build):
        super().__init__()
        self._build = build

    def __getitem__(self, name: str) -> argparse.ArgumentParser:
        parser = super().__getitem__(name)
        if parser is None:
            parser = self._build(name)
            dict.__setitem__(self, name, parser)
        return parser


class _Commands(argparse._SubParsersAction):
    """The COMMAND argument. Each core command is listed (for ``--help`` and argparse's choices)
    without its parser, which argparse builds when it picks that command. A word that is no core
    command gets the plugins' commands first: the built-in ones (the purge key's), then, with the
    host the global options name, every other plugin's. The top-level help lists the built-in
    plugins' commands too."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._name_parser_map = self.choices = _Parsers(self._build)
        self.host = None  # loaded to ask the plugins for their commands
        self._builtins = False

    def add_core(self, name: str, help: str) -> None:
        self._choices_actions.append(self._ChoicesPseudoAction(name, (), help))
        dict.__setitem__(self._name_parser_map, name, None)

    def _build(self, name: str) -> argparse.ArgumentParser:
        parsers, self._name_parser_map = self._name_parser_map, {}
        try:  # (argparse's own add_parser, for its prog and defaults; listed already)
            parser = self.add_parser(name, description=COMMANDS[name],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
        finally:
            self._name_parser_map = parsers
        import_module(f"muxhost.cli.{name}").add_arguments(parser)
        return parser

    def __call__(self, parser, namespace, values, option_string=None):
        if values[0] == "launch" and "--" in values:  # everything after `--` is the agent's
            cut = values.index("--")
            values, namespace.agent_args = values[:cut], values[cut + 1:]
        super().__call__(parser, namespace, values, option_string)

    def add_builtin_commands(self) -> None:
        """The built-in plugins' commands, through their ``muxhost_register_commands`` hooks called
        directly (so ``muxhost --help`` lists them without loading any other plugin)."""
        if not self._builtins:
            self._builtins = True
            from muxhost.plugins import COMMAND_PLUGINS

            for name in COMMAND_PLUGINS:
                import_module(name).muxhost_register_commands(subparsers=self)

    def add_plugin_commands(self, namespace: argparse.Namespace) -> None:
        """Every plugin's commands (a command line whose word is no core command)."""
        self.add_builtin_commands()
        if self.host is None:
            from muxhost.plugins import COMMAND_PLUGINS

            self.host = host = load_host(namespace)
            builtin = [p for p in (host.pm.get_plugin(n) for n in COMMAND_PLUGINS) if p is not None]
            host.pm.subset_hook_caller("muxhost_register_commands", remove_plugins=builtin)(subparsers=self)


class _Top(_Parser):
    """``muxhost``: its options, and the COMMAND argparse picks."""

    commands: _Commands
    _namespace: argparse.Namespace | None = None

    def parse_known_args(self, args=None, namespace=None):
        self._namespace = namespace = argparse.Namespace() if namespace is None else namespace
        return super().parse_known_args(args, namespace)

    def _check_value(self, action, value):
        if action is self.commands and value not in action.choices:
            self.commands.add_plugin_commands(self._namespace or argparse.Namespace())
        super()._check_value(action, value)

    def format_help(self) -> str:
        self.commands.add_builtin_commands()
        return super().format_help()


def build_parser(full: bool = True) -> argparse.ArgumentParser:
    """The parser: with ``full``, every command's parser built (the docs' check reads them all);
    without, each command's built when argparse picks it (:class:`_Commands`)."""
    p = _Top(prog="muxhost", formatter_class=argparse.RawDescriptionHelpFormatter,
             description="Run AI coding agents in tmux panes: launch, stop without orphans, resume, "
                         "and purge one conversation safely. Agents are plugins.",
             epilog=EXIT_CODES + "\n\nREF is a record id (or unique prefix), a record name, or a tmux pane id "
                    "like %12.\nPlugins may add commands: see `muxhost plugins`.")
    p.add_argument("--version", action="version", version=f"muxhost {__version__}")
    p.add_argument("--config", metavar="FILE", help="config file (default: $MUXHOST_CONFIG, else "
                   "$XDG_CONFIG_HOME/muxhost/config.yaml)")
    p.add_argument("--backend", metavar="NAME", help="the pane backend new agents go to: tmux (the default), "
                   "herdr, or a plugin's (also $MUXHOST_BACKEND, config backend:); each record keeps its own")
    p.add_argument("--socket", metavar="ADDR", help="the pane server: a tmux socket name, as `tmux -L NAME` (default: "
                   "$MUXHOST_TMUX_SOCKET, config tmux.socket_name, else your own tmux server); a herdr socket path "
                   "(default: $HERDR_SOCKET_PATH, else herdr's own)")
    p.commands = p.add_subparsers(action=_Commands, dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, help in COMMANDS.items():
        p.commands.add_core(name, help)
    if full:
        for name in COMMANDS:
            p.commands.choices[name]
        p.commands.add_builtin_commands()
    return p


def load_host(args):
    """The host the global options (``--config``, ``--socket``, ``--backend``) name."""
    from muxhost import config as config_mod
    from muxhost.host import Host

    cfg = config_mod.load(getattr(args, "config", None))
    return Host(cfg, socket=getattr(args, "socket", None), backend=getattr(args, "backend", None))


def _print_damaged(host) -> None:
    """One line per record the store skipped because its row is damaged (``--json`` too)."""
    store = getattr(host, "_store", None)
    for rid, why in getattr(store, "damaged", {}).items():
        print(f"muxhost: warning: record {rid} in {store.path} is damaged ({why}): skipped; fix or delete its "
              f"row (sqlite3 {store.path} \"DELETE FROM records WHERE id = '{rid}'\")", file=sys.stderr)


def _print_warnings(host) -> None:
    """One line per plugin hook that failed, ``--json`` too (a JSON document carries only the
    ``warnings`` of the records it shows)."""
    for w in getattr(host, "warnings", ()):
        rec = f" for record {w['record']}" if w.get("record") else ""
        print(f"muxhost: warning: {w['agent']}: {w['hook']} failed{rec}: {w['error']} "
              "(MUXHOST_DEBUG=1 shows the traceback)", file=sys.stderr)


def _run(argv: list[str]) -> int:
    from muxhost.remote import dispatch

    if (forwarded := dispatch(argv, main)) is not None:  # REF@HOST, launch --host, remote-serve
        return forwarded
    parser = build_parser(full=False)
    args = parser.parse_args(argv, argparse.Namespace(agent_args=[]))
    if not args.command:
        parser.print_help()
        return 2
    if args.command == "hosts":  # (config and a file in the state folder: no host, nor its imports)
        return import_module("muxhost.cli.hosts").run(None, args)
    host = parser.commands.host or load_host(args)
    try:
        if args.command in COMMANDS:
            return import_module(f"muxhost.cli.{args.command}").run(host, args) or 0
        func = getattr(args, "func", None)
        if func is None:
            raise UsageError(f"command {args.command!r} has no handler")
        args.host = host
        return func(args) or 0
    finally:
        _print_warnings(host)
        _print_damaged(host)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command line (``sys.argv[1:]`` by default); its exit code (CONTRACT §4)."""
    try:
        return _run(list(sys.argv[1:] if argv is None else argv))
    except MuxhostError as e:
        print(f"muxhost: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("muxhost: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1
    except Exception as e:  # never a traceback for the user; MUXHOST_DEBUG=1 shows it
        if os.environ.get("MUXHOST_DEBUG"):
            raise
        print(f"muxhost: internal error: {type(e).__name__}: {e} (MUXHOST_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 1


cli = main  # the name earlier code and tests call


def __getattr__(name: str) -> Any:  # the table helpers, where they were (muxhost.cli.short_id)
    if name in ("short_id", "short_path"):
        return getattr(import_module("muxhost.cli.output"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
