"""muxhost-demo: a small real terminal agent, so muxhost runs with no agent CLI installed.

It shows a prompt, answers each line, keeps each conversation in its own file, resumes one by id,
starts child conversations on request, and quits on ``/exit`` — the behaviours a real coding agent
has that muxhost cares about. Storage (under ``$MUXHOST_DEMO_HOME``, else
``${XDG_DATA_HOME:-~/.local/share}/muxhost-demo``):

- ``conversations/<id>.jsonl``  line 1: ``{"type": "meta", "id", "parent", "cwd", "created"}``,
  then one line per message
- ``history.jsonl``             shared by all conversations: one line per prompt, with its id
- ``live/<pid>.json``           the live registry: which conversation this process is in now, and
  what it is doing (``activity``: ``idle``, ``working`` or ``waiting``)

Commands: ``/exit``, ``/new`` (a fresh conversation, like ``/clear``), ``/child [N] [TEXT]`` (a child
conversation, N levels deep; each holds TEXT, when given, as its task), ``/id``, ``/help``, and for
muxhost's activity states (``muxhost watch``):

- ``/work N``  busy N seconds: says it is working, and a child process does the work (a Python
  process spinning the CPU), then says it is done;
- ``/ask``     asks a y/n question and waits for the answer;
- ``/hang``    says it is working, then prints nothing and uses no CPU (until Ctrl-C);
- ``/helper spin N`` and ``/helper tool N`` (with ``--helper``): its resident helper process
  ``muxhost-demo-helper`` (a language server or an MCP server of a real agent) spins the CPU
  itself for N seconds, or runs a tool — a child process of its own — that does.

What the screen shows says what it does: the prompt ``demo> `` (idle), a line starting with
``demo: working`` (working) or ending with ``(y/n)`` (waiting for an answer).
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import sys
import time
from pathlib import Path

ID_PATTERN = r"[0-9a-f]{32}"
PROMPT = "demo> "
WORKING = "demo: working"   # a line starting with this: at work
ASK = "(y/n)"               # a line ending with this: waiting for the user's answer
HELPER = "muxhost-demo-helper"  # argv[0] of the resident helper process (--helper)

# a process that spins the CPU for argv[1] seconds (Ctrl-C in the pane is for the demo: it ends
# its /work child itself)
_SPIN = ("import signal, sys, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
         "end = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end:\n    pass\n")
# the resident helper: reads `spin N` / `tool N` lines; argv[1] is the Python to run a tool with;
# like a language server, a Ctrl-C in the pane is not for it
_HELPER = f"""import signal, subprocess, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
SPIN = {_SPIN!r}
for line in sys.stdin:
    word, _, n = line.strip().partition(" ")
    if word == "spin":
        end = time.monotonic() + float(n)
        while time.monotonic() < end:
            pass
    elif word == "tool":
        subprocess.run([sys.argv[1], "-c", SPIN, n])
"""


def spin(seconds: float) -> "subprocess.Popen":
    """A child process that spins the CPU for ``seconds``."""
    import subprocess

    return subprocess.Popen([sys.executable, "-c", _SPIN, str(seconds)], stdin=subprocess.DEVNULL)


def start_helper() -> "subprocess.Popen":
    """The resident helper, named :data:`HELPER` (its argv[0]); it ends when our end of its stdin closes."""
    import subprocess

    return subprocess.Popen([HELPER, "-c", _HELPER, sys.executable], executable=sys.executable,
                            stdin=subprocess.PIPE, text=True)


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
        self.activity = "idle"

    def conv_path(self, cid: str) -> Path:
        return self.root / "conversations" / f"{cid}.jsonl"

    def create(self, cid: str | None = None, parent: str | None = None) -> str:
        import uuid

        cid = cid or uuid.uuid4().hex
        path = self.conv_path(cid)
        if path.exists():
            raise SystemExit(f"muxhost-demo: conversation {cid} already exists")
        _append(path, {"type": "meta", "id": cid, "parent": parent, "cwd": os.getcwd(), "created": time.time()})
        return cid

    def enter(self, cid: str) -> None:
        self.conversation = cid
        self._write_live()

    def doing(self, activity: str) -> None:
        """Say in the live registry what it does now (``idle``, ``working``, ``waiting``)."""
        if activity != self.activity:
            self.activity = activity
            self._write_live()

    def _write_live(self) -> None:
        try:
            import psutil

            started = psutil.Process().create_time()
        except Exception:
            started = None
        self.live.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.live.with_suffix(".tmp")
        tmp.write_text(json.dumps({"pid": os.getpid(), "conversation": self.conversation, "started": started,
                                   "cwd": os.getcwd(), "activity": self.activity}))
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


HELP = ("/child [N] [TEXT]  start a child conversation N levels deep (holding TEXT)\n"
        "/work N  work N seconds (a child process spins the CPU)\n"
        "/ask  ask a y/n question and wait for the answer\n"
        "/hang  say it is working, then print nothing and use no CPU (Ctrl-C ends it)\n"
        "/helper spin N | /helper tool N  the resident helper spins, or runs a tool that does (--helper)\n"
        "/new  a fresh conversation\n/exit  quit")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="muxhost-demo", description="The muxhost demo agent.")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--id", help="start a new conversation with this id (32 hex digits)")
    group.add_argument("--resume", metavar="ID", help="resume this conversation")
    parser.add_argument("--helper", action="store_true",
                        help=f"start a resident helper process ({HELPER}) for /helper spin|tool N")
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
    helper = start_helper() if args.helper else None
    print("type a line; /child [N] [TEXT], /work N, /ask, /hang, /new, /id, /help, /exit")
    while True:
        demo.doing("idle")
        try:
            line = input(PROMPT)
        except EOFError:
            break
        except KeyboardInterrupt:
            print()
            continue
        line = line.strip()
        if line and (line == "/exit" or command(demo, line, helper) == "exit"):
            break
    print(f"resume with: muxhost-demo --resume {demo.conversation}")
    demo.leave()
    return 0


def command(demo: Demo, line: str, helper) -> str | None:
    """One line typed at the prompt: a /command, or a turn. ``"exit"`` when the agent is to quit."""
    words = line.split()
    if words[0] == "/work":
        work(demo, float(words[1]) if len(words) > 1 and words[1].replace(".", "", 1).isdigit() else 5.0)
    elif line == "/ask":
        return ask(demo)
    elif line == "/hang":
        demo.doing("working")
        print(f"{WORKING} on it ...", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            print("\ndemo: interrupted")
    elif words[0] == "/helper":
        to_helper(helper, words)
    elif line == "/id":
        print(demo.conversation)
    elif line == "/new":
        demo.enter(demo.create())
        print(f"new conversation {demo.conversation}")
    elif words[0] == "/child":
        children(demo, line)
    elif line == "/help":
        print(HELP)
    else:
        print(demo.prompt(line))
    return None


def work(demo: Demo, seconds: float) -> None:
    """``/work N``: a child process spins the CPU for N seconds (Ctrl-C ends it)."""
    demo.doing("working")
    print(f"{WORKING} for {seconds:g} s (a child process does the work) ...", flush=True)
    child = spin(seconds)
    try:
        child.wait()
        print(f"demo: done after {seconds:g} s of work")
    except KeyboardInterrupt:
        child.kill()
        child.wait()
        print("\ndemo: interrupted")


def ask(demo: Demo) -> str | None:
    """``/ask``: a y/n question, waiting for the answer (``"exit"`` on /exit, EOF or Ctrl-C)."""
    answer = ""
    demo.doing("waiting")
    try:
        while answer not in ("y", "n", "/exit"):
            answer = input(f"demo: go ahead? {ASK} ").strip().lower()
    except (EOFError, KeyboardInterrupt):
        answer = "/exit"
    if answer == "/exit":
        return "exit"
    print(f"demo: you said {'yes' if answer == 'y' else 'no'}")
    return None


def to_helper(helper, words: list[str]) -> None:
    """``/helper spin N`` | ``/helper tool N``: the resident helper spins, or runs a tool that does."""
    what = words[1] if len(words) > 1 else ""
    seconds = words[2] if len(words) > 2 and words[2].replace(".", "", 1).isdigit() else "5"
    if helper is None:
        print("demo: no helper (start with --helper)")
    elif what not in ("spin", "tool"):
        print("demo: /helper spin N | /helper tool N")
    else:
        helper.stdin.write(f"{what} {seconds}\n")
        helper.stdin.flush()
        print(f"demo: the helper {'spins' if what == 'spin' else 'runs a tool'} for {seconds} s")


def children(demo: Demo, line: str) -> None:
    """``/child [N] [TEXT]``: a child conversation N levels deep, each holding TEXT (its task)."""
    words = line.split(maxsplit=2)
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


if __name__ == "__main__":
    raise SystemExit(main())
