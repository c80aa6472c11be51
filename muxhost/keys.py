"""The purge key: prefix + P purges the conversation of the agent in the current pane (and the
waiting key, prefix + W: to the agent that has waited longest, as ``muxhost watch`` publishes it;
and the dashboard key, prefix + M: ``muxhost ui`` in a popup).

The printed tmux lines do three things, all inside the key's own tmux command queue (the commands
are the built-in plugin :mod:`muxhost.plugins.purge_key`):

1. ``if-shell`` runs ``muxhost purge-key --pane %N --prepare``: it finds the agent in the pane (a
   record's, or one the user started by hand) and its conversation, and puts both into the pane options
   ``@muxhost_purge_agent`` / ``@muxhost_purge_conversation``. No agent → a message, and nothing else.
2. ``confirm-before`` asks, naming that agent and conversation.
3. On "y", ``run-shell`` (not ``-b``: the ladder runs to completion in this process) runs
   ``muxhost purge-key --pane %N --run``, which reports back with ``display-message``.
   When the agent's session goes with the agent (muxhost's own session, the default), the client is
   first moved off it (:func:`move_client_first`): tmux would detach it, and the user would land in
   their shell without seeing the outcome.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path

AGENT_OPTION = "@muxhost_purge_agent"
CONVERSATION_OPTION = "@muxhost_purge_conversation"


def muxhost_command() -> str:
    """This muxhost, by absolute path (run-shell gets the tmux server's PATH, not yours)."""
    beside = Path(sys.executable).parent / "muxhost"
    if beside.exists():
        return shlex.quote(str(beside.absolute()))
    argv0 = Path(sys.argv[0])
    if argv0.name == "muxhost" and argv0.exists():
        return shlex.quote(str(argv0.resolve()))
    return f"{shlex.quote(sys.executable)} -m muxhost"


def _tmux_quoted(text: str) -> str:
    """A double-quoted tmux config string."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


def _check_key(flag: str, key: str) -> None:
    if not key or any(c in key for c in " \t\n\"'{};"):
        from muxhost.errors import UsageError

        raise UsageError(f"{flag} {key!r}: give one tmux key name, like P or M-p")


def bindings(key: str = "P", socket: str | None = None, wait_key: str = "W", ui_key: str = "M") -> str:
    _check_key("--key", key)
    _check_key("--wait-key", wait_key)
    _check_key("--ui-key", ui_key)
    for (a, x), (b, y) in ((("--key", key), ("--wait-key", wait_key)), (("--key", key), ("--ui-key", ui_key)),
                           (("--wait-key", wait_key), ("--ui-key", ui_key))):
        if x == y:
            from muxhost.errors import UsageError

            raise UsageError(f"{a} and {b} are both {x!r}")
    if socket is not None and any(ord(c) < 32 or c == "\x7f" for c in socket):
        from muxhost.errors import UsageError  # (a newline in it would be a line of tmux config)

        raise UsageError(f"the tmux socket name {socket!r} holds a control character")
    mux = muxhost_command() + (f" --socket {shlex.quote(socket)}" if socket else "")
    tmux = f"tmux -L {shlex.quote(socket)}" if socket else "tmux"  # (what the Remove: lines run)
    # (--server: the key works only in the server muxhost uses; pressed in another one it says so)
    target = "--pane '#{pane_id}' --client '#{client_name}' --server '#{socket_path}'"
    prepare = f"{mux} purge-key {target} --prepare"
    # (the id the prompt named goes with "y": the pane may be in another conversation by then)
    purge = f"{mux} purge-key {target} --conversation '#{{{CONVERSATION_OPTION}}}' --run || true"
    prompt = f"muxhost: purge the #{{{AGENT_OPTION}}} conversation #{{{CONVERSATION_OPTION}}} for good? (y/n)"
    return f"""# muxhost purge key: prefix + {key} purges the conversation of the agent in the current pane,
# with its child conversations. It asks first, naming the agent and the conversation, stops the agent
# (the whole stop ladder) and says what happened.
{_load_lines(socket, key)}
bind-key {key} if-shell {_tmux_quoted(prepare)} {{
  confirm-before -p {_tmux_quoted(prompt)} {{
    run-shell {_tmux_quoted(purge)}
  }}
}}
{waiting_key(wait_key, mux, tmux)}
{ui_key_lines(ui_key, mux, tmux)}"""


def _load_lines(socket: str | None, key: str) -> str:
    """How to load the lines into the server muxhost uses: your own one, or ``tmux -L SOCKET``."""
    if not socket:
        return f"""# Load:   add these lines to ~/.tmux.conf, then run: tmux source-file ~/.tmux.conf
#         (or: muxhost tmux-bindings > ~/.config/muxhost/purge-key.conf
#              and add `source-file ~/.config/muxhost/purge-key.conf` to ~/.tmux.conf)
# Remove: tmux unbind-key {key}   (and delete the lines)"""
    tmux = f"tmux -L {shlex.quote(socket)}"
    conf = f"~/.config/muxhost/keys-{socket}.conf" if re.fullmatch(r"[A-Za-z0-9._-]+", socket) else "FILE"
    return f"""# These lines are for the tmux server on socket {socket!r} (`{tmux}`), the one muxhost uses here;
# pressed in another server the keys only say so. Load them into that server:
#   muxhost --socket {shlex.quote(socket)} tmux-bindings > {conf}
#   {tmux} source-file {conf}
# Remove: {tmux} unbind-key {key}"""


def waiting_key(key: str, mux: str, tmux: str = "tmux") -> str:
    """prefix + ``key`` jumps to the agent that has waited longest: the pane the watch publishes as
    ``@muxhost_waiting`` (tmux only: no process runs on the key), or, when that is ``REF@HOST`` (an
    agent of a remote host), a new window running ``muxhost attach REF@HOST``."""
    from muxhost.backends import SUMMARY_OPTION, WAITING_OPTION

    jump = f"switch-client -t '#{{{WAITING_OPTION}}}'"
    # (an agent of a remote host waits longest: REF@HOST, opened as `muxhost attach REF@HOST` opens it)
    remote = f"{mux} attach '#{{{WAITING_OPTION}}}'"
    return f"""
# muxhost waiting key: prefix + {key} jumps to the agent that has waited longest for you (a question,
# a permission). It needs the activity watch, one per tmux server, which also publishes
# #{{{SUMMARY_OPTION}}} ("2 working · 1 waiting") for your status line. Start it from tmux:
#   run-shell -b {_tmux_quoted(f"{mux} watch")}
# (or put that line, without the #, in ~/.tmux.conf: a second watch for the server exits at once), and:
#   set -g status-right '#{{{SUMMARY_OPTION}}} %H:%M'
# Remove: {tmux} unbind-key {key}
bind-key {key} if-shell -F {_tmux_quoted("#{" + WAITING_OPTION + "}")} {{
  if-shell -F {_tmux_quoted("#{m:%*,#{" + WAITING_OPTION + "}}")} {{
    run-shell -C {_tmux_quoted(jump)}
  }} {{
    run-shell -b {_tmux_quoted(remote)}
  }}
}} {{
  display-message "muxhost: no agent is waiting (is muxhost watch running?)"
}}"""


def ui_key_lines(key: str, mux: str, tmux: str = "tmux") -> str:
    """prefix + ``key``: the dashboard (``muxhost ui --popup``) in a tmux popup; Enter there
    switches the client to the agent's pane and closes the popup."""
    return f"""
# muxhost dashboard key: prefix + {key} opens `muxhost ui` in a popup (needs the ui extra: pip install
# 'muxhost[ui]'); Enter there goes to the agent and closes it, q closes it. Remove: {tmux} unbind-key {key}
bind-key {key} display-popup -E -w 90% -h 85% -d '#{{pane_current_path}}' {_tmux_quoted(f"{mux} ui --popup")}"""


def move_client_first(host, backend, pane_id: str, client: str) -> str | None:
    """Before the ladder: if the session of ``pane_id`` will go with the agent (every pane of it is
    the record's, or its one pane's process is a hand-started agent itself), move ``client`` off it
    (``Backend.move_client_off``). An agent started in the user's shell leaves the pane: nothing to
    do. Returns the holding pane made when there was no other session to go to, or None."""
    loc = host.locate(pane_id)
    pane = loc.pane
    if loc.rec is not None and loc.rec.state != "stopped":
        rid = loc.rec.id
    elif loc.rec is None and loc.proc is not None and loc.proc.pid == pane.pid:
        rid = None
    else:
        return None
    if any(p.pane_id != pane.pane_id and (rid is None or p.record != rid)
           for p in backend.snapshot() or [] if p.session_id == pane.session_id):
        return None  # other panes keep the session
    return backend.move_client_off(client, pane.session_id, f"muxhost: stopping the {loc.agent.name} agent "
                                   f"and purging its conversation {loc.conversation_id} ...")


def summary(report) -> str:
    n = len(report.removed)
    text = f"muxhost: purged the {report.agent} conversation {report.conversation_id} ({n} item{'s' if n != 1 else ''})"
    if report.residual:
        text = (f"muxhost: purge incomplete: {len(report.residual)} left of the {report.agent} conversation "
                f"{report.conversation_id}: {report.residual[0]}")
    if getattr(report, "archive", None):
        text += f"; archived: muxhost unpurge {os.path.basename(report.archive)}"
    return text
