"""``muxhost hosts add|rm|ls``: the remote hosts (their code: :mod:`muxhost.remote.hosts`)."""

from __future__ import annotations


def add_arguments(sp) -> None:
    from muxhost.remote.hosts import add_arguments

    add_arguments(sp)


def run(host, args) -> int:  # (host: None, the CLI makes none for `hosts`)
    from muxhost.remote.hosts import run

    return run(getattr(args, "config", None), args)
