"""What several commands print the same way: JSON, tables and their cells (short ids, paths, ages), notes, hints."""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def json_flag(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")


def out_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=str))


def table(rows: list[list[str]], headers: list[str]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    lines = ["  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip() for r in [headers, *rows]]
    return "\n".join(lines)


def notes(live) -> None:
    for note in live.notes:
        print(f"muxhost: note: {note}", file=sys.stderr)


def attach_hint(live) -> str:
    """``attach: muxhost attach NAME``; ``NAME@HOST`` when run for another muxhost that knows this
    machine as HOST (a remote launch, resume, wake: the line is run there)."""
    from muxhost.remote import protocol

    at = protocol.serving_as()
    return f"  attach: muxhost attach {live.rec.name}{'@' + at if at else ''}" if live.pane is not None else ""


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


def ago(seconds: float) -> str:
    """``45s``, ``12m``, ``3h``, ``2d``."""
    s = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{s}s"


def line_width() -> int:
    """The columns a table fits: the terminal's, else 100 (a pipe, a file)."""
    import shutil

    return shutil.get_terminal_size((100, 24)).columns if sys.stdout.isatty() else 100
