"""``muxhost launch``: start an agent in a new pane and print its record."""

from __future__ import annotations

from muxhost.cli.output import attach_hint, json_flag, notes, out_json


def add_arguments(sp) -> None:
    sp.description = (
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
    sp.add_argument("--host", metavar="NAME", help="launch on this remote host (`muxhost hosts ls`; docs/remote.md)")
    sp.epilog = "Arguments after `--` go to the agent: muxhost launch claude -- --model opus"
    json_flag(sp)


def run(host, args) -> int:
    extra = list(getattr(args, "agent_args", []))
    agent = args.agent or host.config.data.get("default_agent") or "demo"
    live = host.launch(agent, cwd=args.cwd, name=args.name, target=args.target, split=args.split,
                       home=args.home, env=args.env, args=extra, worktree=args.worktree)
    notes(live)
    if args.json:
        out_json(live.to_dict())
    else:
        print(f"launched {live.rec.agent} as {live.rec.name} (record {live.rec.id}) in pane {live.pane.pane_id}")
        if live.rec.conversation_id:
            print(f"  conversation: {live.rec.conversation_id}")
        if live.rec.worktree:
            print(f"  worktree: {live.rec.worktree['path']} (branch {live.rec.worktree['branch']})")
        print(attach_hint(live))
    return 0
