"""What several commands print the same way: JSON, a table, a record's notes, the attach hint."""

from __future__ import annotations

import json
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
