"""``muxhost ui``: the dashboard (:mod:`muxhost.ui`, the ``ui`` extra)."""

from __future__ import annotations


def add_arguments(sp) -> None:
    sp.description = (
        "Every record live (waiting ones first), the selected agent's screen, and keys: Enter goes to\n"
        "the agent, i types into it, n launches, s stops, z sleeps, w wakes, r resumes, p purges (the\n"
        "plan first, then y/n), d rm, / filters, ? help, q quits. Needs the `ui` extra (Textual).\n"
        "With remote hosts configured, their running agents are rows too (a HOST column; a host out\n"
        "of reach one offline row), followed over ssh as `muxhost watch` does; keys act there.")
    sp.add_argument("--popup", action="store_true", help="running in a tmux popup: Enter switches to the agent "
                    "and quits (so the popup closes)")


def run(host, args) -> int:
    from muxhost import ui
    from muxhost.host import Host

    return ui.run(lambda: Host(host.config, socket=args.socket, backend=args.backend), popup=args.popup)
