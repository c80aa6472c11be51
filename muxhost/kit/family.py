"""Families of conversations: a conversation and the child conversations it started (sub-agents,
tasks, forks), at every depth.

Agents record the tie in different places (a ``parent_id`` column, a table of spawn edges, the
first line of a transcript, a log line); gather the (parent, child) pairs from all of them with
:func:`edges`, then :func:`walk` them from the conversation::

    pairs = [(r["parent_id"], r["id"]) for r in sqlite.rows(db, "select id, parent_id from session"
                                                           " where parent_id is not null")]
    family = walk(conversation_id, edges(pairs), valid=self.valid_id)
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping

__all__ = ["edges", "walk"]


def edges(pairs: Iterable[tuple[object, object]]) -> dict[str, set[str]]:
    """``{parent: {children}}`` from (parent, child) pairs; pairs with an empty or non-string end,
    and a conversation named its own child, are left out."""
    out: dict[str, set[str]] = {}
    for parent, child in pairs:
        if isinstance(parent, str) and isinstance(child, str) and parent and child and parent != child:
            out.setdefault(parent, set()).add(child)
    return out


def walk(root: str, children: Mapping[str, Iterable[str]] | Callable[[str], Iterable[str]], *,
         valid: Callable[[str], bool] | None = None, limit: int = 10_000) -> list[str]:
    """``root`` and its descendants at every depth: root first, then breadth first (each
    conversation's children in sorted order), each once. Cycle-safe; ids that ``valid`` rejects
    (the agent's :meth:`~muxhost.agent.Agent.valid_id`) are left out with everything under them;
    at most ``limit`` members. ``children`` is a mapping (see :func:`edges`) or a callable giving
    one conversation's children."""
    get = children if callable(children) else (lambda cid: children.get(cid, ()))  # type: ignore[union-attr]
    out, seen, i = [root], {root}, 0
    while i < len(out) and len(out) < limit:
        for child in sorted(c for c in get(out[i]) if isinstance(c, str)):
            if child not in seen and (valid is None or valid(child)):
                seen.add(child)
                out.append(child)
                if len(out) >= limit:
                    break
        i += 1
    return out
