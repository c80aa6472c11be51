"""Built-in plugin: the ``demo`` agent — the reference every plugin author reads.

It implements every :class:`~muxhost.api.Agent` method for real against ``muxhost-demo``
(muxhost/demo_agent.py), whose storage has the same shapes real agents have: one file per
conversation, child conversations that point at their parent, a shared history file with one line
per prompt, and a live registry ``live/<pid>.json`` saying which conversation a process is in.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from muxhost.api import Activity, Agent, AgentContext, Launch, hookimpl, kit, same_process

# what the program shows and is called (muxhost/demo_agent.py): a plugin knows its agent from outside
ID_PATTERN = r"[0-9a-f]{32}"
PROMPT = "demo> "
WORKING = "demo: working"   # a line starting with this: at work
ASK = "(y/n)"               # a line ending with this: waiting for the user's answer
HELPER = "muxhost-demo-helper"  # argv[0] of its resident helper process (``-- --helper``)


def _program() -> list[str]:
    """argv[0..] of muxhost-demo: the console script beside this Python, else ``python -m``."""
    import shutil

    beside = Path(sys.executable).parent / "muxhost-demo"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("muxhost-demo")
    return [found] if found else [sys.executable, "-m", "muxhost.demo_agent"]


class DemoAgent(Agent):
    name = "demo"
    process_names = ("muxhost-demo",)
    resident_children = (HELPER,)  # its resident helper (`-- --helper`): part of the agent, not work
    exit_text = "/exit"
    id_pattern = ID_PATTERN

    # -- where things are ----------------------------------------------------------------------
    def root(self, ctx: AgentContext) -> Path:
        if ctx.env.get("MUXHOST_DEMO_HOME"):
            return Path(ctx.env["MUXHOST_DEMO_HOME"])
        return ctx.data_home() / "muxhost-demo"

    def _conv(self, ctx: AgentContext, cid: str) -> Path:
        return self.root(ctx) / "conversations" / f"{cid}.jsonl"

    def _parents(self, ctx: AgentContext) -> dict[str, str | None]:
        """conversation id -> parent id, from each file's first line."""
        out: dict[str, str | None] = {}
        folder = self.root(ctx) / "conversations"
        if not folder.is_dir():
            return out
        for path in folder.glob("*.jsonl"):
            try:
                with open(path, encoding="utf-8") as f:
                    meta = json.loads(f.readline() or "{}")
            except (OSError, ValueError):
                continue
            if meta.get("id") == path.stem:
                out[path.stem] = meta.get("parent")
        return out

    def children(self, ctx: AgentContext, conversation_id: str) -> list[str]:
        """The conversations whose first line names this one as their parent (the host walks them
        at every depth)."""
        return sorted(c for c, p in self._parents(ctx).items() if p == conversation_id)

    def _live(self, ctx: AgentContext) -> list[dict]:
        entries = []
        folder = self.root(ctx) / "live"
        for path in folder.glob("*.json") if folder.is_dir() else ():
            try:
                entry = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            entry["_path"] = path
            entries.append(entry)
        return entries

    @staticmethod
    def _alive(entry: dict) -> bool:
        pid, started = entry.get("pid"), entry.get("started")
        if not isinstance(pid, int):
            return False
        if started is None:  # no start time to compare: if the pid runs, count it (fail closed)
            import psutil

            return psutil.pid_exists(pid)
        return same_process(pid, started)

    # -- the Agent API -------------------------------------------------------------------------
    def launch(self, ctx: AgentContext) -> Launch:
        import uuid

        cid = uuid.uuid4().hex  # chosen up front: the record knows its conversation from the start
        return Launch([*_program(), "--id", cid, *ctx.args], conversation_id=cid)

    def resume(self, ctx: AgentContext, conversation_id: str) -> Launch:
        return Launch([*_program(), "--resume", conversation_id], conversation_id=conversation_id)

    def discover(self, ctx: AgentContext) -> str | None:
        # the live registry entry of the agent's own pid says where it is now (after /new too)
        for pid in ctx.pids:
            path = self.root(ctx) / "live" / f"{pid}.json"
            try:
                entry = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            cid = entry.get("conversation")
            proc = ctx.process_table().get(pid)  # the host's snapshot: no system call per agent
            started = entry.get("started")
            alive = proc is not None and started is not None and abs(proc.create_time - started) < 0.01
            if entry.get("pid") == pid and self.valid_id(cid) and cid not in ctx.claimed and alive:
                return cid
        return ctx.conversation_id

    def exists(self, ctx: AgentContext, conversation_id: str) -> bool:
        return self._conv(ctx, conversation_id).is_file()

    def activity(self, ctx: AgentContext, screen: str | None) -> Activity | None:
        """From the screen's last line when there is a screen (the watch's): a question ending
        ``(y/n)`` is ``waiting``, ``demo: working …`` is ``working``, the prompt (or any other
        ``demo: …`` line, a command's last words) is ``idle``. Without one
        (``ls`` with no watch), from the ``activity`` its live registry entry says. Anything else:
        no opinion. (The host tells a ``/hang`` from a ``/work``: no output and no CPU for
        ``watch.stall_after`` is ``stalled``.)"""
        if screen is not None:
            last = next((ln.rstrip() for ln in reversed(screen.splitlines()) if ln.strip()), "")
            if last.endswith(ASK):
                return Activity("waiting", f"screen: the last line asks {ASK}")
            if last.startswith(WORKING):
                return Activity("working", f"screen: the last line says {WORKING!r}")
            if last.startswith((PROMPT.rstrip(), "demo: ")):
                # at its prompt, or a command's last words (its prompt comes next)
                what = "its prompt" if last.startswith(PROMPT.rstrip()) else repr(last[:40])
                return Activity("idle", f"screen: the last line is {what}")
            return None
        for pid in ctx.pids[:1]:  # the agent itself: the pane's process
            try:
                entry = json.loads((self.root(ctx) / "live" / f"{pid}.json").read_text())
            except (OSError, ValueError):
                return None
            proc, started = ctx.process_table().get(pid), entry.get("started")
            if proc is None or not isinstance(started, (int, float)) or abs(proc.create_time - started) > 0.01:
                return None  # an entry some earlier process with this pid left
            answer = entry.get("activity")
            return Activity(answer, f"registry: live/{pid}.json says {answer}") if answer in ("idle", "working", "waiting") else None
        return None

    def in_use(self, ctx: AgentContext, conversation_id: str) -> list[str]:
        # (the host asks for every conversation of the family, and about its own records itself)
        table = ctx.process_table()
        holders = []
        for entry in self._live(ctx):
            if entry.get("conversation") == conversation_id and self._alive(entry):
                p = table.get(entry["pid"])
                holders.append(p.describe() if p else f"pid {entry['pid']} muxhost-demo")
        return holders + [h for h in kit.holders.argv_holders(conversation_id, table) if h not in holders]

    def artifacts(self, ctx: AgentContext, conversation_id: str) -> list:
        # typed: the host checks each is there, prints the plan, removes them and reads the residual
        from muxhost.api import artifacts

        stale = [artifacts.File(e["_path"]) for e in self._live(ctx)
                 if e.get("conversation") == conversation_id and not self._alive(e)]
        return [artifacts.File(self._conv(ctx, conversation_id)),
                artifacts.Lines(self.root(ctx) / "history.jsonl", key="conversation", value=conversation_id),
                *stale]

    def roots(self, ctx: AgentContext) -> list[Path]:
        return [*super().roots(ctx), self.root(ctx)]  # MUXHOST_DEMO_HOME may be anywhere

    def conversations(self, ctx: AgentContext) -> list:
        """Every file of ``conversations/``: its meta line (cwd, created, parent) and first prompt
        from the file's first lines (``kit.conversations``), times and size from ``stat``."""
        parents: dict[str, str | None] = {}

        def describe(path: Path, entries: list[dict]) -> dict:
            meta = entries[0] if entries and entries[0].get("type") == "meta" else {}
            parents[path.stem] = meta.get("parent")
            first = next((e.get("text") for e in entries if e.get("type") == "user"), "")
            created = meta.get("created")
            return {"cwd": meta.get("cwd") if isinstance(meta.get("cwd"), str) else None,
                    "created": float(created) if isinstance(created, (int, float)) else None,
                    "title": kit.conversations.title(first)}

        found = list(kit.conversations.folder(self.root(ctx) / "conversations", describe))
        for conv in found:
            conv.children = sorted(c for c, p in parents.items() if p == conv.id)
        return found


@hookimpl
def muxhost_register_agents(register):
    register(DemoAgent())
