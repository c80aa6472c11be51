"""Built-in plugin: the purge key's commands, added through ``muxhost_register_commands`` like any
plugin's (muxhost's built-ins are ordinary plugins, as datasette's and llm's are).

- ``muxhost tmux-bindings [--key K] [--wait-key W]`` prints the tmux lines (:func:`muxhost.keys.bindings`):
  the purge key, and the key to the agent that has waited longest;
- ``muxhost purge-key --pane %N --client C --prepare | --run`` are the key's two steps, run by tmux:
  find the agent in the pane and name it in the prompt; then, on "y", stop it with the ladder, purge
  its conversation and say the outcome in tmux (never on a terminal: run-shell would show it raw).

``purge --pane %N --tmux-prepare`` / ``--tmux-message``, which earlier bindings call, still work.
"""

from __future__ import annotations

import argparse
import os

import muxhost
from muxhost.errors import INCOMPLETE, MuxhostError, UsageError


def cmd_tmux_bindings(args) -> int:
    from muxhost.keys import bindings

    print(bindings(args.key, socket=args.host.socket, wait_key=args.wait_key, ui_key=args.ui_key))
    return 0


def _other_server(host, server: str | None) -> str | None:
    """Why the key's lines do not belong to the tmux server they were pressed in (``server``: its
    ``#{socket_path}``; ~/.tmux.conf is read by every server), or None when they do."""
    if not server:  # (bindings printed by an earlier muxhost pass none)
        return None
    backend = host.current()
    own = getattr(backend, "socket_path", lambda: "")()
    if own and os.path.realpath(own) == os.path.realpath(server):
        return None
    return (f"this key belongs to muxhost's tmux server on {backend.where()}, not to this one ({server}): "
            "nothing done (`muxhost --socket NAME tmux-bindings` prints the lines for another server)")


def _say_there(server: str, client: str | None, text: str) -> None:
    """A message on the tmux server the key was pressed in (not muxhost's own)."""
    import shutil
    import subprocess

    from muxhost.backends.tmux import literal

    tmux = shutil.which("tmux")
    if tmux:
        subprocess.run([tmux, "-S", server, "display-message", *(["-c", client] if client else []), "-d", "10000",
                        "--", literal(text)], capture_output=True, stdin=subprocess.DEVNULL, check=False)


def run_key(host, pane: str | None, client: str | None, prepare: bool, conversation: str | None = None,
            server: str | None = None) -> int:
    """One step of the key: ``prepare`` (find the agent and its conversation, for the prompt) or the
    purge itself (the ladder first, the client moved off a session that goes with the agent) of
    exactly the conversation the prompt named (``conversation``; earlier bindings pass none: the
    one ``prepare`` put into the pane option), refused when the pane is in another one now."""
    from muxhost import keys

    if not pane:
        raise UsageError("the purge key's steps need --pane")
    wrong = _other_server(host, server)
    if wrong:  # pane %3 of that server is not pane %3 of ours: touch nothing
        _say_there(server, client, f"muxhost: {wrong}")
        return 4
    backend = host.current()
    try:
        if prepare:
            loc = host.locate(pane)
            if not loc.conversation_id:
                raise MuxhostError(f"the {loc.agent.name} agent in pane {pane} has no conversation on disk yet", 3)
            backend.set_pane_option(pane, keys.AGENT_OPTION, loc.agent.name)
            backend.set_pane_option(pane, keys.CONVERSATION_OPTION, loc.conversation_id)
            return 0
        confirmed = conversation or backend.pane_option(pane, keys.CONVERSATION_OPTION)
        if not confirmed:
            raise UsageError(f"no confirmed conversation for pane {pane}: press the key again")
        host.refuse_moved(host.locate(pane), confirmed)  # (before the client is moved anywhere)
        # the client off the agent's session before the ladder ends it (tmux would detach the client)
        held = keys.move_client_first(host, backend, pane, client) if client else None
        text = "muxhost: the purge failed"
        try:
            report = host.purge_pane(pane, stop=True, confirm=None, confirmed=confirmed)
            text = keys.summary(report)
        except MuxhostError as e:
            text = f"muxhost: {e}"
            raise
        finally:
            if held:
                backend.show_held(held, text)
        backend.message(text, client=client)  # where the client is now
        return INCOMPLETE if report.residual else 0
    except MuxhostError as e:  # said in tmux; nothing on stdout/stderr for run-shell to show
        backend.message(f"muxhost: {e}", client=client)
        return e.exit_code


def cmd_purge_key(args) -> int:
    if args.prepare == args.run:
        raise UsageError("purge-key takes --prepare or --run")
    return run_key(args.host, args.pane, args.client, prepare=args.prepare, conversation=args.conversation,
                   server=args.server)


@muxhost.hookimpl
def muxhost_register_commands(subparsers):
    sp = subparsers.add_parser(
        "tmux-bindings", help="print tmux lines that bind a key to purge the current pane's conversation",
        description="Print tmux lines that bind prefix + KEY (default P) to purge the conversation of the\n"
                    "agent in the current pane: it asks first, stops the agent with the whole ladder, purges\n"
                    "the conversation and its children, and shows the outcome in tmux. Also prefix + W: jump\n"
                    "to the agent that has waited longest (from `muxhost watch`), and how to start the watch; and\n"
                    "prefix + M: the dashboard (`muxhost ui`) in a popup.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sp.add_argument("--key", default="P", help="the key after the prefix (default: P)")
    sp.add_argument("--wait-key", default="W", metavar="KEY",
                    help="the key that jumps to the agent waiting longest (default: W; needs `muxhost watch`)")
    sp.add_argument("--ui-key", default="M", metavar="KEY",
                    help="the key that opens the dashboard, `muxhost ui`, in a popup (default: M)")
    sp.set_defaults(func=cmd_tmux_bindings)
    sp = subparsers.add_parser("purge-key", description="The purge key's steps, as tmux runs them "
                               "(see `muxhost tmux-bindings`).")
    sp.add_argument("--pane", required=True, help="the pane the key was pressed in (#{pane_id})")
    sp.add_argument("--client", help="the tmux client that pressed it (#{client_name})")
    sp.add_argument("--server", metavar="PATH", help="the socket of the tmux server it was pressed in "
                    "(#{socket_path}); refused when that is not muxhost's server")
    step = sp.add_mutually_exclusive_group()
    step.add_argument("--prepare", action="store_true", help="find the agent and its conversation for the prompt")
    step.add_argument("--run", action="store_true", help="stop the agent, purge the conversation, say the outcome")
    sp.add_argument("--conversation", metavar="ID",
                    help="with --run: the conversation the prompt named; refused if the pane is in another now")
    sp.set_defaults(func=cmd_purge_key)
