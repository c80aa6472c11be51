"""The purge key: tmux lines that bind a key to purge the conversation of the current pane."""

from __future__ import annotations


def bindings(key: str = "P", socket: str | None = None) -> str:
    raise NotImplementedError
