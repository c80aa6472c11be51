"""Built-in plugin: the ``demo`` agent — the reference every plugin author reads.

It implements every :class:`muxhost.Agent` method for real against ``muxhost-demo``
(muxhost/demo_agent.py), whose storage has the same shapes real agents have: one file per
conversation, child conversations that point at their parent, a shared history file with one line
per prompt, and a live registry ``live/<pid>.json`` saying which conversation a process is in.
"""

from __future__ import annotations

import json
import shutil
import sys
import uuid
from pathlib import Path

import muxhost
from muxhost import fsutil, procs
from muxhost.agent import Agent, AgentContext, Launch
from muxhost.demo_agent import ID_PATTERN


def _program() -> list[str]:
    """argv[0..] of muxhost-demo: the console script beside this Python, else ``python -m``."""
    beside = Path(sys.executable).parent / "muxhost-demo"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("muxhost-demo")
    return [found] if found else [sys.executable, "-m", "muxhost.demo_agent"]


class DemoAgent(Agent):
    name = "demo"
    process_names = ("muxhost-demo",)
    resident_children = ()
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

    def family(self, ctx: AgentContext, cid: str) -> list[str]:
        """The conversation and its descendants at every depth (parent first)."""
        parents = self._parents(ctx)
        out, frontier = [cid], [cid]
        while frontier:
            frontier = [c for c, p in parents.items() if p in frontier and c not in out]
            out += frontier
        return out

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
        return procs.same_process(pid, started)

    # -- the Agent API -------------------------------------------------------------------------
    def launch(self, ctx: AgentContext) -> Launch:
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

    def in_use(self, ctx: AgentContext, conversation_id: str) -> list[str]:
        family = set(self.family(ctx, conversation_id))
        holders = []
        table = ctx.process_table()
        for entry in self._live(ctx):
            if entry.get("conversation") in family and self._alive(entry):
                p = table.get(entry["pid"])
                holders.append(p.describe() if p else f"pid {entry['pid']} muxhost-demo")
        for cid in family:
            holders += [h for h in procs.argv_holders(cid, table) if h not in holders]
        return holders

    def artifacts(self, ctx: AgentContext, conversation_id: str) -> list[str]:
        out = []
        family = self.family(ctx, conversation_id)
        for cid in family:
            path = self._conv(ctx, cid)
            if path.exists():
                suffix = "" if cid == conversation_id else f" [child conversation {cid}]"
                out.append(ctx.expand(path) + suffix)
        history = self.root(ctx) / "history.jsonl"
        n = self._history_lines(history, set(family))
        if n:
            out.append(f"{ctx.expand(history)}: {n} line{'s' if n != 1 else ''}")
        for entry in self._live(ctx):  # stale registry entries of dead processes
            if entry.get("conversation") in family:
                out.append(ctx.expand(entry["_path"]))
        return out

    @staticmethod
    def _line_names(line: bytes, ids: set[str]) -> bool:
        try:
            return json.loads(line).get("conversation") in ids
        except (ValueError, AttributeError):
            return False

    def _history_lines(self, history: Path, ids: set[str]) -> int:
        if not history.exists():
            return 0
        with open(history, "rb") as f:
            return sum(1 for line in f if self._line_names(line, ids))

    def purge(self, ctx: AgentContext, conversation_id: str) -> list[str]:
        removed = []
        family = self.family(ctx, conversation_id)
        for cid in reversed(family):  # children first: a crash midway never orphans a child
            path = self._conv(ctx, cid)
            if fsutil.remove(path):
                suffix = "" if cid == conversation_id else f" [child conversation {cid}]"
                removed.append(ctx.expand(path) + suffix)
        history = self.root(ctx) / "history.jsonl"
        if history.exists():
            n = fsutil.drop_lines(history, lambda line: self._line_names(line, set(family)))
            if n:
                removed.append(f"{ctx.expand(history)}: {n} line{'s' if n != 1 else ''}")
        for entry in self._live(ctx):
            if entry.get("conversation") in family and not self._alive(entry):
                if fsutil.remove(entry["_path"]):
                    removed.append(ctx.expand(entry["_path"]))
        return removed


@muxhost.hookimpl
def muxhost_register_agents(register):
    register(DemoAgent())
