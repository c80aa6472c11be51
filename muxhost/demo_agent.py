"""muxhost-demo: a small real terminal agent, so muxhost runs with no agent CLI installed.

It shows a prompt, answers each line, keeps each conversation in its own file, resumes one by id,
starts child conversations on request, and quits on ``/exit`` — the behaviours a real coding agent
has that muxhost cares about. Storage (under ``$MUXHOST_DEMO_HOME``, else
``${XDG_DATA_HOME:-~/.local/share}/muxhost-demo``):

- ``conversations/<id>.jsonl``  line 1: ``{"type": "meta", "id", "parent", "cwd", "created"}``,
  then one line per message
- ``history.jsonl``             shared by all conversations: one line per prompt, with its id
- ``live/<pid>.json``           the live registry: which conversation this process is in now

Commands: ``/exit``, ``/new`` (a fresh conversation, like ``/clear``), ``/child [N] [TEXT]`` (a child
conversation, N levels deep; each holds TEXT, when given, as its task), ``/id``, ``/help``.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import sys
import time
import uuid
from pathlib import Path

ID_PATTERN = r"[0-9a-f]{32}"


def data_dir(env=os.environ) -> Path:
    if env.get("MUXHOST_DEMO_HOME"):
        return Path(env["MUXHOST_DEMO_HOME"])
    base = env.get("XDG_DATA_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".local", "share")
    return Path(base) / "muxhost-demo"


def _append(path: Path, obj: dict) -> None:
    """Append one line, under a flock on the file: a purge rewriting a shared file takes the same
    lock, so no line of ours is lost (muxhost.fsutil.rewrite)."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        f.write(json.dumps(obj) + "\n")
        f.flush()


class Demo:
    def __init__(self, root: Path):
        self.root = root
        self.live = root / "live" / f"{os.getpid()}.json"
        self.conversation = ""

    def conv_path(self, cid: str) -> Path:
        return self.root / "conversations" / f"{cid}.jsonl"

    def create(self, cid: str | None = None, parent: str | None = None) -> str:
        cid = cid or uuid.uuid4().hex
        path = self.conv_path(cid)
        if path.exists():
            raise SystemExit(f"muxhost-demo: conversation {cid} already exists")
        _append(path, {"type": "meta", "id": cid, "parent": parent, "cwd": os.getcwd(), "created": time.time()})
        return cid

    def enter(self, cid: str) -> None:
        self.conversation = cid
        try:
            import psutil

            started = psutil.Process().create_time()
        except Exception:
            started = None
        self.live.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.live.with_suffix(".tmp")
        tmp.write_text(json.dumps({"pid": os.getpid(), "conversation": cid, "started": started, "cwd": os.getcwd()}))
        os.replace(tmp, self.live)

    def leave(self) -> None:
        try:
            self.live.unlink()
        except FileNotFoundError:
            pass

    def say(self, cid: str, role: str, text: str) -> None:
        _append(self.conv_path(cid), {"type": role, "text": text, "time": time.time()})

    def prompt(self, text: str) -> str:
        cid = self.conversation
        self.say(cid, "user", text)
        _append(self.root / "history.jsonl", {"conversation": cid, "text": text, "cwd": os.getcwd()})
        n = sum(1 for _ in open(self.conv_path(cid), encoding="utf-8")) // 2
        answer = f"demo: heard {len(text)} characters (turn {n}): {text[::-1]}"
        self.say(cid, "agent", answer)
        return answer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="muxhost-demo", description="The muxhost demo agent.")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--id", help="start a new conversation with this id (32 hex digits)")
    group.add_argument("--resume", metavar="ID", help="resume this conversation")
    args = parser.parse_args(argv)

    import re

    for value in (args.id, args.resume):
        if value is not None and not re.fullmatch(ID_PATTERN, value):
            parser.error(f"not a conversation id: {value!r}")
    demo = Demo(data_dir())
    if args.resume:
        if not demo.conv_path(args.resume).exists():
            print(f"muxhost-demo: no conversation found with id {args.resume}", file=sys.stderr)
            return 1
        cid = args.resume
        print(f"muxhost demo agent · resumed conversation {cid}")
    else:
        cid = demo.create(args.id)
        print(f"muxhost demo agent · conversation {cid}")
    demo.enter(cid)
    atexit.register(demo.leave)
    print("type a line; /child [N] [TEXT], /new, /id, /exit")
    while True:
        try:
            line = input("demo> ")
        except EOFError:
            break
        line = line.strip()
        if not line:
            continue
        if line == "/exit":
            break
        if line == "/id":
            print(demo.conversation)
        elif line == "/new":
            demo.enter(demo.create())
            print(f"new conversation {demo.conversation}")
        elif line.split()[0] == "/child":
            words = line.split(maxsplit=2)  # /child [N] [TEXT]
            numbered = len(words) > 1 and words[1].isdigit()
            depth = int(words[1]) if numbered else 1
            task = " ".join(words[2:] if numbered else words[1:])
            parent = demo.conversation
            for _ in range(max(1, depth)):
                child = demo.create(parent=parent)
                if task:  # the child's task, as a sub-agent's conversation holds its prompt
                    demo.say(child, "user", task)
                demo.say(child, "agent", f"child of {parent} at work")
                print(f"child conversation {child} (parent {parent})")
                parent = child
        elif line == "/help":
            print("/child [N] [TEXT]  start a child conversation N levels deep (holding TEXT)\n"
                  "/new  a fresh conversation\n/exit  quit")
        else:
            print(demo.prompt(line))
    print(f"resume with: muxhost-demo --resume {demo.conversation}")
    demo.leave()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
