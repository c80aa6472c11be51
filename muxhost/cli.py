"""The ``muxhost`` command line (argparse). ``cli(argv)`` returns the exit code; ``main()`` exits.

``muxhost --help`` imports no plugin and no libtmux: the host is imported when a command runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Sequence

from muxhost import __version__
from muxhost.errors import INCOMPLETE, MuxhostError, UsageError

EXIT_CODES = """exit codes:
  0 done · 1 failed (tmux, agent or I/O error) · 2 usage or config error · 3 not found
  4 refused (in use, or vetoed) · 5 purge incomplete (something was left)"""

CORE_COMMANDS = ("launch", "ls", "show", "stop", "resume", "purge", "reconcile", "plugins", "watch",
                 "sleep", "wake", "restore", "send", "wait", "read", "rm", "attach", "ui")


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        # a flag is its whole name: `--dry` is no `--dry-run` (a script that leans on a prefix breaks
        # the day another flag starts the same, and the docs' check could not see a renamed flag)
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # one line, exit 2, like every other usage error
        sub = self.prog.partition(" ")[2]  # "muxhost launch" -> "launch"; the CLI adds "muxhost: "
        raise UsageError(f"{sub}: {message}" if sub else message)


class _Unbuilt:
    """What ``cmd`` gives in :func:`build_parser` for a command that is not built: it takes every
    call (``add_argument``, ``epilog = …``) and keeps nothing."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: self

    def __setattr__(self, name: str, value: Any) -> None:
        pass


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with ``command`` (one of :data:`CORE_COMMANDS`) only that command's
    parser under the top-level one — what parsing a command line that runs it needs (building
    every command's parser is a large share of a command's start-up). See :func:`_command`."""
    p = _Parser(prog="muxhost", formatter_class=argparse.RawDescriptionHelpFormatter,
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
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def cmd(name: str, help: str, description: str | None = None):
        if command is not None and name != command:
            return _Unbuilt()
        sp = sub.add_parser(name, help=help, description=description or help,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        return sp

    def json_flag(sp):
        sp.add_argument("--json", action="store_true", help="print one JSON document on stdout")

    sp = cmd("launch", "start an agent in a new tmux pane and print its record",
             "Start AGENT (default: demo) in a new tmux session named after the record, or in a new window\n"
             "of --target, or in a split of --target. The agent runs as the pane's command, with this\n"
             "environment, the agent's config env, --env pairs, and MUXHOST_RECORD=<record id>.")
    sp.add_argument("agent", nargs="?", help="agent name (see `muxhost plugins`); default: demo, or config default_agent")
    sp.add_argument("--cwd", metavar="DIR", help="working directory (default: the current one)")
    sp.add_argument("--name", metavar="N", help="record name, also the tmux session name")
    sp.add_argument("--target", metavar="SESSION[:WINDOW]", help="start in this existing session instead")
    sp.add_argument("--split", choices=("right", "below"), help="split the --target pane instead of a new window")
    sp.add_argument("--home", metavar="DIR", help="run the agent with this HOME")
    sp.add_argument("--env", metavar="K=V", action="append", default=[], help="extra environment (repeatable)")
    sp.add_argument("--worktree", metavar="NAME", help="run the agent in a new git worktree of --cwd's repository, "
                    "on a new branch NAME, in <root>/<repo folder>-NAME (root: config worktree.root, default the "
                    "repository's parent folder); `muxhost rm` removes it again")
    sp.epilog = "Arguments after `--` go to the agent: muxhost launch claude -- --model opus"
    json_flag(sp)

    sp = cmd("ls", "list records with their live state",
             "List live records (running or exited), or every record with --all. States: running, exited,\n"
             "stopped, lost. The conversation id of running records is refreshed from the agent. ACTIVITY:\n"
             "working, waiting, idle or stalled, and how long it has held (from `muxhost watch` when one\n"
             "runs, else from one look).")
    sp.add_argument("--all", action="store_true", help="every record, stopped and lost ones too")
    sp.add_argument("--wide", action="store_true", help="whole conversation ids and folders (the table fits "
                    "the terminal, or 100 columns, without it: ids cut like git's, folders from the left)")
    json_flag(sp)

    sp = cmd("show", "one record, with its process tree and pane")
    sp.add_argument("ref", metavar="REF")
    json_flag(sp)

    sp = cmd("attach", "go to an agent's pane",
             "Go to the agent's pane. Inside tmux on the agent's server: the client switches to its\n"
             "session, window and pane. Inside another tmux server: a new window there attaches to it.\n"
             "Outside tmux: this terminal becomes a tmux client of the agent's server, on its pane.")
    sp.add_argument("ref", metavar="REF")

    sp = cmd("stop", "stop an agent: /exit, then kill-session, SIGTERM, SIGKILL of the whole tree",
             "The stop ladder: Ctrl-U + the agent's exit text + Enter; wait stop.exit_grace; kill the\n"
             "session (or pane); SIGTERM every survivor; wait stop.term_grace; SIGKILL. The outcome names\n"
             "the step that ended it: exit, hup, term or kill.")
    sp.add_argument("refs", metavar="REF", nargs="*", help="records to stop (all at once, concurrently)")
    sp.add_argument("--all", action="store_true", help="every live record (running, exited or starting)")
    sp.add_argument("--grace", type=float, metavar="S", help="seconds to wait after the exit text (stop.exit_grace)")
    sp.epilog = ("Many records go down the ladder together: 50 take about as long as one.\n"
                 "--json prints the record (one REF) or a list of records (several, or --all).")
    json_flag(sp)

    sp = cmd("resume", "resume the record's conversation in a new pane (same record)")
    sp.add_argument("ref", metavar="REF")
    sp.add_argument("--target", metavar="SESSION[:WINDOW]")
    sp.add_argument("--split", choices=("right", "below"))
    json_flag(sp)

    sp = cmd("purge", "delete a conversation and its child conversations for good",
             "Order: validate the id; refuse if in use (exit 4); list what is on disk (the plan;\n"
             "--dry-run stops here); plugins may veto (exit 4); purge; list again: anything left is the\n"
             "residual (exit 5). A conversation with nothing on disk exits 3.")
    sp.add_argument("ref", metavar="REF", nargs="?", help="the record whose conversation to purge")
    sp.add_argument("--agent", metavar="A", help="with --conversation: purge without a record")
    sp.add_argument("--conversation", metavar="ID")
    sp.add_argument("--pane", metavar="PANE", help="the conversation of the agent in this tmux pane (e.g. %%3)")
    sp.add_argument("--home", metavar="DIR", help="with --agent: the HOME the agent ran with")
    sp.add_argument("--dry-run", action="store_true", help="print the plan and change nothing")
    sp.add_argument("--yes", "-y", action="store_true", help="do not ask")
    sp.add_argument("--stop", action="store_true", help="run the stop ladder first")
    sp.add_argument("--tmux-prepare", action="store_true", help=argparse.SUPPRESS)
    sp.add_argument("--tmux-message", action="store_true", help=argparse.SUPPRESS)
    sp.add_argument("--client", help=argparse.SUPPRESS)
    json_flag(sp)

    sp = cmd("reconcile", "compare records with tmux and the process table; fix drift; say what changed")
    json_flag(sp)

    sp = cmd("plugins", "agents and backends, with their package, version and hooks")
    json_flag(sp)

    sp = cmd("watch", "watch what every agent does (working, waiting, idle, stalled) and publish it",
             "One long-running process per server (a second one is refused, exit 4). Every watch.interval\n"
             "(1 s) it looks at every running agent and publishes the pane option @muxhost_activity and\n"
             "the global @muxhost_summary (\"2 working · 1 waiting\"), which status-right '#{@muxhost_summary}'\n"
             "shows with no process per refresh; `ls` then uses what it knows. An agent that starts\n"
             "waiting gets a tmux message and the bell (watch.alert). It prints one line per change and\n"
             "ends with its server (or Ctrl-C, SIGTERM), taking back what it published.")
    sp.add_argument("--interval", type=float, metavar="S", help="seconds between passes (watch.interval, 1)")
    sp.add_argument("--json", action="store_true",
                    help='one JSON line per change: {"record", "name", "agent", "pane", "old", "new", "since"}')

    sp = cmd("sleep", "stop an agent but keep its pane, which wakes it on Enter",
             "The stop ladder, except that the pane stays: it shows a small muxhost stub (\"the claude\n"
             "conversation 1a2b… is asleep since 14:02 — Enter wakes it\") and the agent's memory is free.\n"
             "Enter in that pane, or `muxhost wake REF`, resumes the same conversation there. Refused (exit 4)\n"
             "for an agent with no conversation on disk yet. `ls` shows it asleep.")
    sp.add_argument("refs", metavar="REF", nargs="*", help="records to put to sleep (all at once)")
    sp.add_argument("--idle-for", metavar="D", help="every running agent (with REFs: of those) idle, and not typed "
                                                   "to, at least this long (30m, 2h, 90s)")
    sp.add_argument("--grace", type=float, metavar="S", help="seconds to wait after the exit text (stop.exit_grace)")
    json_flag(sp)

    sp = cmd("wake", "resume an asleep agent's conversation in its own pane (as Enter there does)",
             "Resume the record's conversation in the pane its stub holds (a new pane when that pane is\n"
             "gone). For a record that is not asleep, the same as `muxhost resume`.")
    sp.add_argument("ref", metavar="REF")
    json_flag(sp)

    sp = cmd("restore", "after the pane server died, resume every agent that was running, show the asleep ones",
             "Every record that was running when its pane went away (a reboot, a crash, `tmux\n"
             "kill-server`) is resumed in a session named as before, in its own conversation; one that was\n"
             "asleep gets its stub again there (Enter wakes it; --wake wakes it now). A record whose\n"
             "conversation is gone from disk (or runs elsewhere) is reported, not started. Safe to run\n"
             "twice: what runs is not started again.")
    sp.add_argument("--dry-run", action="store_true", help="list what would be started; start nothing")
    sp.add_argument("--wake", action="store_true", help="wake the records that were asleep too, instead of "
                    "showing their stub")
    json_flag(sp)

    sp = cmd("send", "type a line into the agent: Ctrl-U, TEXT, Enter",
             "Typed as the stop ladder types its exit text: Ctrl-U, the literal TEXT, a pause, Enter.\n"
             "Refused (exit 4) when the record's agent is not running. With `wait` and `read`:\n"
             "  muxhost send a \"run the tests\" && muxhost wait a --until idle && muxhost read a")
    sp.add_argument("ref", metavar="REF")
    sp.add_argument("text", metavar="TEXT", help="one line; - reads it from stdin")
    json_flag(sp)

    sp = cmd("wait", "wait until the agent is idle, waiting for you, or exited",
             "Exit 0 when the state is reached, 1 on --timeout, 4 when it can no longer be reached (the\n"
             "agent is gone). Judged as `muxhost watch` judges; after `send`, idle counts only once the\n"
             "agent has been seen doing something else (or 3 s passed): it may not have started yet.")
    sp.add_argument("ref", metavar="REF")
    sp.add_argument("--until", required=True, choices=("idle", "waiting", "exited"))
    sp.add_argument("--timeout", metavar="S", help="give up after this long (seconds, or 30s, 5m); default: never")
    json_flag(sp)

    sp = cmd("read", "print the agent's screen as plain text")
    sp.add_argument("ref", metavar="REF")
    sp.add_argument("--lines", type=int, metavar="N", help="the last N lines, scrollback included")
    json_flag(sp)

    sp = cmd("rm", "forget a stopped record and remove the git worktree muxhost made for it",
             "Refused (exit 4, nothing removed) while the record's agent runs, is starting, asleep or\n"
             "exited in its pane (stop it first), and while its worktree has uncommitted or untracked\n"
             "changes (unless --force). Then: --purge purges each of its conversations, the worktree is\n"
             "removed, its branch is deleted only if it still points at the commit it started from (a\n"
             "branch with commits is kept), and the record is forgotten.")
    sp.add_argument("ref", metavar="REF")
    sp.add_argument("--purge", action="store_true", help="also purge every conversation of the record")
    sp.add_argument("--force", action="store_true", help="remove the worktree even with uncommitted or untracked "
                    "changes (they are lost; a branch with commits is still kept)")
    json_flag(sp)

    sp = cmd("ui", "the dashboard: every agent live, a preview, a key for each command (docs/ui.md)",
             "Every record live (waiting ones first), the selected agent's screen, and keys: Enter goes to\n"
             "the agent, i types into it, n launches, s stops, z sleeps, w wakes, r resumes, p purges (the\n"
             "plan first, then y/n), d rm, / filters, ? help, q quits. Needs the `ui` extra (Textual).")
    sp.add_argument("--popup", action="store_true", help="running in a tmux popup: Enter switches to the agent "
                    "and quits (so the popup closes)")

    if command is not None:
        return p
    # the built-in plugins' commands (the purge key's), through their muxhost_register_commands
    # hooks — called here directly, so `muxhost --help` lists them without loading any plugin
    import importlib

    from muxhost.plugins import COMMAND_PLUGINS

    for name in COMMAND_PLUGINS:
        importlib.import_module(name).muxhost_register_commands(subparsers=sub)
    return p


# -- output helpers -------------------------------------------------------------------------------
def out_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=str))


def _table(rows: list[list[str]], headers: list[str]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    lines = ["  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip() for r in [headers, *rows]]
    return "\n".join(lines)


def _load_host(args):
    from muxhost import config as config_mod
    from muxhost.host import Host

    cfg = config_mod.load(args.config)
    return Host(cfg, socket=args.socket, backend=getattr(args, "backend", None))


def _attach_hint(host, live) -> str:
    return f"  attach: muxhost attach {live.rec.name}" if live.pane is not None else ""


def _print_damaged(host) -> None:
    """One line per record the store skipped because its row is damaged (``--json`` too)."""
    store = getattr(host, "_store", None)
    for rid, why in getattr(store, "damaged", {}).items():
        print(f"muxhost: warning: record {rid} in {store.path} is damaged ({why}): skipped; fix or delete its "
              f"row (sqlite3 {store.path} \"DELETE FROM records WHERE id = '{rid}'\")", file=sys.stderr)


def _print_warnings(host) -> None:
    """One line per plugin hook that failed (``ls --json`` carries them as ``warnings``)."""
    for w in getattr(host, "warnings", ()):
        rec = f" for record {w['record']}" if w.get("record") else ""
        print(f"muxhost: warning: {w['agent']}: {w['hook']} failed{rec}: {w['error']} "
              "(MUXHOST_DEBUG=1 shows the traceback)", file=sys.stderr)


# -- commands -------------------------------------------------------------------------------------
def _notes(live) -> None:
    for note in live.notes:
        print(f"muxhost: note: {note}", file=sys.stderr)


def cmd_launch(host, args) -> int:
    extra = list(getattr(args, "agent_args", []))
    agent = args.agent or host.config.data.get("default_agent") or "demo"
    live = host.launch(agent, cwd=args.cwd, name=args.name, target=args.target, split=args.split,
                       home=args.home, env=args.env, args=extra, worktree=args.worktree)
    _notes(live)
    if args.json:
        out_json(live.to_dict())
    else:
        print(f"launched {live.rec.agent} as {live.rec.name} (record {live.rec.id}) in pane {live.pane.pane_id}")
        if live.rec.conversation_id:
            print(f"  conversation: {live.rec.conversation_id}")
        if live.rec.worktree:
            print(f"  worktree: {live.rec.worktree['path']} (branch {live.rec.worktree['branch']})")
        print(_attach_hint(host, live))
    return 0


def cmd_ls(host, args) -> int:
    from muxhost.state import LIVE_STATES

    every = host.ls()
    for note in host.notes:
        print(f"muxhost: note: {note}", file=sys.stderr)
    lives = every if args.all else [lv for lv in every if lv.state in LIVE_STATES]
    if args.json:
        out_json([lv.to_dict() for lv in lives])
        return 0
    lost = [lv for lv in every if lv.state == "lost" and lv.rec.state in ("running", "starting")]
    if lost and not args.all:  # (their server went: a reboot, a crash, kill-server)
        print(f"muxhost: note: {len(lost)} record(s) that were running lost their pane; `muxhost restore` "
              "resumes them (`muxhost ls --all` lists them)", file=sys.stderr)
    if not lives:
        print("no records" + ("" if args.all else " running (see `muxhost ls --all`)"))
        return 0
    ids = [o.rec.conversation_id for o in lives]
    rows = [[lv.rec.id, lv.rec.name, lv.rec.agent, lv.state, _activity(lv), lv.pane.pane_id if lv.pane else "-",
             _conversation(host, lv, args.wide, ids),
             "yes" if lv.resumable else "no", lv.rec.cwd] for lv in lives]
    headers = ["ID", "NAME", "AGENT", "STATE", "ACTIVITY", "PANE", "CONVERSATION", "RESUMABLE", "CWD"]
    if not args.wide:  # the folder gets what is left of the line, shortened from the left
        import shutil

        width = shutil.get_terminal_size((100, 24)).columns if sys.stdout.isatty() else 100
        used = len(_table([r[:-1] for r in rows], headers[:-1]).splitlines()[0]) + 2
        for r in rows:
            r[-1] = short_path(r[-1], max(16, width - used))
    print(_table(rows, headers))
    return 0


def short_id(cid: str, others=()) -> str:
    """A conversation id as git shows a commit: its first 8 characters after a word prefix such as
    ``ses_`` (longer where another id in ``others`` starts the same)."""
    import re

    head = re.match(r"[A-Za-z]+_", cid)
    start = head.end() if head else 0
    n = start + 8
    while n < len(cid) and any(o != cid and o.startswith(cid[:n]) for o in others if o):
        n += 1
    return cid if n >= len(cid) else cid[:n]


def short_path(path: str, width: int) -> str:
    """``path`` with the home folder as ``~``, and cut from the left to ``width`` characters,
    keeping whole trailing folders (``~/…/project``)."""
    home = os.path.expanduser("~")
    if home not in ("", "/") and (path == home or path.startswith(home.rstrip("/") + "/")):
        path = "~" + path[len(home.rstrip("/")):]
    if len(path) <= width:
        return path
    parts = path.split("/")
    head = parts[0] + "/" if parts[0] in ("~", "") else ""
    tail = parts[-1]
    for i in range(len(parts) - 2, 0, -1):
        longer = parts[i] + "/" + tail
        if len(head) + 2 + len(longer) > width:
            break
        tail = longer
    out = f"{head}…/{tail}"
    return out if len(out) <= width else "…" + path[-(width - 1):]


def _conversation(host, lv, wide: bool, others) -> str:
    """The CONVERSATION cell: its id (short unless ``wide``), and ``+N`` for its child
    conversations at every depth, as the plugin's ``children`` tells them — for the live records
    only (``ls --all`` of a long history would ask the plugin once per record; ``show`` lists them)."""
    from muxhost.state import LIVE_STATES

    cid = lv.rec.conversation_id
    if not cid:
        return "-"
    kids = len(children_of(host, lv.rec)) if lv.state in LIVE_STATES else 0
    return (cid if wide else short_id(cid, others)) + (f" +{kids}" if kids else "")


def children_of(host, rec) -> list[str]:
    """The record's conversation's descendants, parent first ([] when the plugin cannot tell)."""
    agent = host.registry.agents.get(rec.agent)
    if agent is None or not rec.conversation_id or not agent.valid_id(rec.conversation_id):
        return []
    from muxhost import plans

    try:
        return plans.family(agent, host.context(rec), rec.conversation_id)[1:]
    except Exception as e:  # the table still shows; the warning says why the count is missing
        host.warn(agent.name, "children", e, rec)
        return []


def _ago(seconds: float) -> str:
    """``45s``, ``12m``, ``3h``, ``2d``."""
    s = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{s}s"


def _activity(lv) -> str:
    """``idle 12m`` (the state and how long it has held), ``working`` when since is unknown, or -."""
    if not lv.activity:
        return "-"
    import time

    return lv.activity if lv.activity_since is None else f"{lv.activity} {_ago(time.time() - lv.activity_since)}"


def cmd_watch(host, args) -> int:
    import signal
    import time

    def clock(t: float) -> str:
        return time.strftime('%H:%M:%S', time.localtime(t))

    def emit(change) -> None:
        # stamped with the time of the change (in order); since when the new state holds, apart
        if args.json:
            line = json.dumps(change)
        else:
            since = f" (since {clock(change['since'])})" if change["new"] and clock(change["since"]) != clock(change["at"]) else ""
            line = (f"{clock(change['at'])}  {change['name']} ({change['record']}) "
                    f"{change['old'] or '-'} -> {change['new'] or change.get('note') or 'gone'}{since}")
        try:
            print(line, flush=True)
        except OSError:  # nobody reads the lines any more (run-shell's server gone): the watch goes on
            sys.stdout = open(os.devnull, "w")

    def stop(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        host.watch(emit, interval=args.interval)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the watch took back what it published
        pass
    return 0


def cmd_show(host, args) -> int:
    from muxhost import procs

    rec = host.resolve(args.ref)
    view = host.view([rec])
    live = host.live(rec, view, check_resumable=False)
    host.judge([live], view)  # as `ls` judges it
    marked = procs.marked(rec.id, view.table, since=rec.launched_at)
    seen = {p.pid for p in live.tree}
    processes = [*live.tree, *[p for p in marked if p.pid not in seen]]
    d = live.to_dict()
    d["processes"] = [{"pid": p.pid, "ppid": p.ppid, "name": p.name, "cmdline": list(p.cmdline)} for p in processes]
    d["pane_info"] = None if live.pane is None else {
        "id": live.pane.pane_id, "pid": live.pane.pid, "dead": live.pane.dead, "dead_status": live.pane.dead_status,
        "session": live.pane.session_name, "window": live.pane.window_id, "cwd": live.pane.cwd}
    d["children"] = children_of(host, rec)
    if args.json:
        out_json(d)
        return 0
    d["activity"] = _activity(live) if live.activity else None  # "idle 12m"
    for k in ("id", "name", "agent", "state", "activity", "conversation_id", "resumable", "cwd", "home", "pane",
              "session", "exit_status", "outcome", "seconds"):
        if k in d:
            print(f"{k + ':':17}{d[k] if d[k] is not None else '-'}")
    if processes:
        print("processes:")
        for p in d["processes"]:
            print(f"  {p['pid']:>7}  {' '.join(p['cmdline']) or p['name']}")
    if d["children"]:
        print(f"child conversations ({len(d['children'])}):")
        for c in d["children"]:
            print(f"  {c}")
    return 0


def _records(host, refs) -> list:
    """The records REF… name, each once, in order."""
    records, seen = [], set()
    for ref in refs:
        rec = host.resolve(ref)
        if rec.id not in seen:
            seen.add(rec.id)
            records.append(rec)
    return records


def _outcomes(records, results, args, single: bool, done: str) -> int:
    """Print what the ladder did to each record (``stop``, ``sleep``); the worst exit code."""
    from muxhost.fleet import ASLEEP_ALREADY, NOT_IDLE

    failed = [r for r in results if isinstance(r, MuxhostError)]
    if args.json:
        docs = [{"id": rec.id, "name": rec.name, "error": str(r)} if isinstance(r, MuxhostError) else r.to_dict()
                for rec, r in zip(records, results)]
        out_json(docs[0] if single else docs)
    else:
        for rec, r in zip(records, results):
            if isinstance(r, MuxhostError):  # (most errors name the record already)
                print(f"muxhost: {r}" if rec.id in str(r) else f"muxhost: {rec.name} ({rec.id}): {r}", file=sys.stderr)
            elif r.already == "stopped":
                print(f"{rec.name} ({rec.id}) was stopped already")
                continue
            elif ASLEEP_ALREADY in r.notes:
                print(f"{rec.name} ({rec.id}) was asleep already")
                continue
            elif NOT_IDLE in r.notes:
                print(f"{rec.name} ({rec.id}) was not idle that long ({r.activity or 'no activity known'}): left awake")
                continue
            else:
                print(f"{done} {rec.name} ({rec.id}): {rec.outcome} after {rec.seconds:.2f}s")
            for note in getattr(r, "notes", ()) or ():
                print(f"muxhost: note: {note}", file=sys.stderr)
    return max((e.exit_code for e in failed), default=0)


def _check_grace(args) -> None:
    from muxhost.config import MAX_SECONDS, seconds_ok

    if args.grace is not None and not seconds_ok(args.grace):
        raise UsageError(f"--grace must be a number of seconds from 0 to {MAX_SECONDS}")


def cmd_stop(host, args) -> int:
    _check_grace(args)
    if args.all == bool(args.refs):
        raise UsageError("stop takes REF… or --all")
    view = None
    if args.all:
        records, view = host.live_records()
    else:
        records = _records(host, args.refs)
    results = host.stop_many(records, grace=args.grace, view=view) if records else []
    if args.all and not records and not args.json:
        print("nothing to stop")
    return _outcomes(records, results, args, len(args.refs) == 1 and not args.all, "stopped")


def cmd_sleep(host, args) -> int:
    from muxhost.fleet import parse_duration

    _check_grace(args)
    if args.idle_for is None and not args.refs:
        raise UsageError("sleep takes REF… and/or --idle-for D")
    idle_for = parse_duration(args.idle_for, "--idle-for") if args.idle_for is not None else None
    records = _records(host, args.refs) if args.refs else host.idle_for(idle_for)
    results = host.sleep_many(records, grace=args.grace, idle_for=idle_for) if records else []
    if args.idle_for is not None and not records and not args.json:
        print("no agent has been idle that long")
    return _outcomes(records, results, args, len(args.refs) == 1, "asleep")


def cmd_wake(host, args) -> int:
    rec = host.resolve(args.ref)
    live = host.wake(rec)
    _notes(live)
    if args.json:
        out_json(live.to_dict())
    elif live.already:
        where = f", in pane {live.pane.pane_id}" if live.pane is not None else ""
        print(f"{rec.name} ({rec.id}) is awake already{where}")
    else:
        print(f"woke {rec.conversation_id} as {rec.name} (record {rec.id}) in pane {live.pane.pane_id}")
        print(_attach_hint(host, live))
    return 0


def cmd_restore(host, args) -> int:
    report = host.restore(dry_run=args.dry_run, wake=args.wake)
    if args.json:
        out_json(report)
    elif not report:
        print("nothing to restore: every record that was running still is")
    for e in report if not args.json else ():
        what = f"{e['name']} ({e['id']}, {e['agent']} {e['conversation_id'] or '-'})"
        what += " asleep" if e.get("asleep") else ""
        if e["action"] == "restored":
            print(f"restored {what} in session {e['session']}, pane {e['pane']}")
        elif e["action"] == "would restore":
            print(f"would restore {what} in session {e['session']}")
        else:
            print(f"{'not restored' if e['action'] == 'skipped' else 'failed'}: {what}: {e['reason']}")
    return 1 if any(e["action"] == "failed" for e in report) else 0


def cmd_send(host, args) -> int:
    text = sys.stdin.read().rstrip("\n") if args.text == "-" else args.text
    live = host.send(host.resolve(args.ref), text)
    if args.json:
        out_json(live.to_dict())
    return 0


def cmd_wait(host, args) -> int:
    from muxhost.fleet import parse_duration

    timeout = None if args.timeout is None else parse_duration(args.timeout, "--timeout")
    rec = host.resolve(args.ref)
    state = host.wait(rec, args.until, timeout=timeout)
    if args.json:
        out_json({"id": rec.id, "name": rec.name, "state": state})
    return 0


def cmd_attach(host, args) -> int:
    rec = host.resolve(args.ref)
    live = host.live(rec, host.view([rec]), check_resumable=False)
    if live.pane is None:
        from muxhost.errors import NotFound

        raise NotFound(f"{rec.name} ({rec.id}) has no pane ({live.state}); `muxhost resume {rec.name}` starts it again")
    argv = host.backend_of(rec).attach(live.pane, os.environ)
    if argv:
        sys.stdout.flush()
        os.execvp(argv[0], argv)
    return 0


def cmd_read(host, args) -> int:
    rec = host.resolve(args.ref)
    text = host.read(rec, lines=args.lines)
    if args.json:
        out_json({"id": rec.id, "name": rec.name, "text": text})
    else:
        print(text)
    return 0


def cmd_resume(host, args) -> int:
    rec = host.resolve(args.ref)
    live = host.resume(rec, target=args.target, split=args.split)
    _notes(live)
    if args.json:
        out_json(live.to_dict())
    else:
        print(f"resumed {rec.conversation_id} as {rec.name} (record {rec.id}) in pane {live.pane.pane_id}")
        print(_attach_hint(host, live))
    return 0


def _print_report(report, as_json: bool) -> None:
    if as_json:
        out_json(report.to_dict())
        return
    if report.stopped:
        print(f"stopped record {report.record} first: {report.stopped['outcome']} after "
              f"{report.stopped['seconds']:.2f}s")
    if report.dry_run:
        print(f"would purge {report.agent} conversation {report.conversation_id}{_in_home(report)}:")
        for item in report.plan:
            print(f"  {item}")
        if report.refused:
            print(f"  refused now: {report.refused}")
    else:
        print(f"purged {report.agent} conversation {report.conversation_id}{_in_home(report)}: "
              f"{len(report.removed)} removed")
        for item in report.removed:
            print(f"  - {item}")
        for item in report.residual:
            print(f"  left: {item}")
    for note in report.notes:
        print(f"  note: {note}")


def _in_home(report) -> str:
    """`` in HOME /other/home`` when the purge is not in the caller's HOME, else ""."""
    return f" in HOME {report.home}" if report.home else ""


def _confirm(report) -> bool:
    print(f"purge {report.agent} conversation {report.conversation_id}{_in_home(report)}? this removes:",
          file=sys.stderr)
    for item in report.plan:
        print(f"  {item}", file=sys.stderr)
    try:
        answer = input("purge these for good? [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def cmd_purge(host, args) -> int:
    if args.tmux_prepare or args.tmux_message:
        return _purge_key(host, args)
    given = [x for x in (args.ref, args.pane) if x] + (["--agent/--conversation"] if (args.agent or args.conversation) else [])
    if len(given) != 1:
        raise UsageError("purge takes one of: REF, --pane PANE, or --agent A --conversation ID")
    if (args.agent or args.conversation) and not (args.agent and args.conversation):
        raise UsageError("--agent and --conversation go together")
    confirm = None
    if not args.yes and not args.dry_run:
        if not sys.stdin.isatty():
            raise UsageError("refusing to purge without --yes when stdin is not a terminal")
        confirm = _confirm
    if args.pane:
        report = host.purge_pane(args.pane, dry_run=args.dry_run, stop=args.stop, confirm=confirm)
    elif args.ref:
        report = host.purge(rec=host.resolve(args.ref), dry_run=args.dry_run, stop=args.stop, confirm=confirm)
    else:
        report = host.purge(agent_name=args.agent, conversation_id=args.conversation, home=args.home,
                            dry_run=args.dry_run, stop=args.stop, confirm=confirm)
    _print_report(report, args.json)
    if report.residual:
        raise MuxhostError(f"purge incomplete: {len(report.residual)} item(s) left: {report.residual[0]}", INCOMPLETE)
    return 0


def _purge_key(host, args) -> int:
    """``purge --tmux-prepare`` / ``--tmux-message``: the purge key's steps as earlier bindings call
    them (the key is the built-in plugin muxhost.plugins.purge_key now)."""
    from muxhost.plugins.purge_key import run_key

    return run_key(host, args.pane, args.client, prepare=args.tmux_prepare)


def cmd_rm(host, args) -> int:
    done = host.rm(host.resolve(args.ref), purge=args.purge, force=args.force)
    if args.json:
        out_json(done)
    else:
        print("\n".join(done["done"]))
    return 0


def cmd_ui(host, args) -> int:
    from muxhost import ui
    from muxhost.host import Host

    return ui.run(lambda: Host(host.config, socket=args.socket, backend=args.backend), popup=args.popup)


def cmd_reconcile(host, args) -> int:
    changes = host.reconcile()
    if args.json:
        out_json({"changes": changes})
    else:
        print("\n".join(changes) if changes else "nothing drifted")
    return 0


def cmd_plugins(host, args) -> int:
    info = host.registry.describe()
    if args.json:
        out_json(info)
        return 0
    print(_table([[a["name"], a["package"], a["version"] or "-", ", ".join(a["hooks"])] for a in info["agents"]],
                 ["AGENT", "PACKAGE", "VERSION", "HOOKS"]))
    print()
    print(_table([[b["name"], b["package"], b["version"] or "-", ", ".join(b["hooks"])] for b in info["backends"]],
                 ["BACKEND", "PACKAGE", "VERSION", "HOOKS"]))
    return 0


COMMANDS = {"launch": cmd_launch, "ls": cmd_ls, "show": cmd_show, "stop": cmd_stop, "resume": cmd_resume,
            "purge": cmd_purge, "reconcile": cmd_reconcile, "plugins": cmd_plugins, "watch": cmd_watch,
            "sleep": cmd_sleep, "wake": cmd_wake, "restore": cmd_restore, "send": cmd_send, "wait": cmd_wait,
            "read": cmd_read, "rm": cmd_rm, "attach": cmd_attach, "ui": cmd_ui}


_GLOBAL_OPTIONS = ("--config", "--socket", "--backend")
_GLOBAL_SPELLED = tuple(f"{o}=" for o in _GLOBAL_OPTIONS)


def _command(argv: Sequence[str]) -> tuple[str | None, bool]:
    """The command word of ``argv`` (global options and their values skipped), and whether it runs
    alone: a core command with nothing before it but global options spelled out with their value
    (``--config F``, ``--socket=S``) — nothing that prints the top-level help or version, nothing
    argparse could take for the command (its error would list every command). Then only its
    parser is built: its errors and ``--help`` are the same."""
    alone = True
    it = iter(argv)
    for a in it:
        if a in _GLOBAL_OPTIONS:
            next(it, None)
        elif a.startswith(_GLOBAL_SPELLED):
            continue
        elif a.startswith("-"):
            alone = False
        else:
            return a, alone and a in CORE_COMMANDS
    return None, False


def cli(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    word, alone = _command(argv)
    parser = build_parser(word if alone else None)
    host = None
    try:
        if word is not None and word not in CORE_COMMANDS:
            # a plugin's command: plugins may add subparsers
            global_args, _ = parser.parse_known_args(argv[:argv.index(word)])
            host = _load_host(global_args)
            sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
            from muxhost.plugins import COMMAND_PLUGINS

            builtin = [p for p in (host.pm.get_plugin(n) for n in COMMAND_PLUGINS) if p is not None]
            host.pm.subset_hook_caller("muxhost_register_commands", remove_plugins=builtin)(subparsers=sub)
        agent_args: list[str] = []
        if word == "launch" and "--" in argv:  # everything after `--` is the agent's
            cut = argv.index("--")
            argv, agent_args = argv[:cut], argv[cut + 1:]
        args = parser.parse_args(argv)
        args.agent_args = agent_args
        if not args.command:
            parser.print_help()
            return 2
        if host is None:
            host = _load_host(args)
        func = COMMANDS.get(args.command) or getattr(args, "func", None)
        if func is None:
            raise UsageError(f"command {args.command!r} has no handler")
        try:
            if args.command in COMMANDS:
                return func(host, args) or 0
            args.host = host
            return func(args) or 0
        finally:
            if not getattr(args, "json", False):
                _print_warnings(host)
            _print_damaged(host)
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


def main() -> None:
    sys.exit(cli())
