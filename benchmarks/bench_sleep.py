"""Benchmark `muxhost sleep` / `wake`: the memory an asleep agent frees, and the time to wake it.

Starts N agents (default 10) on a private tmux socket with a temp HOME and state dir; prints the RSS of
each record's processes awake and of its pane once asleep (muxhost's stub), the time `sleep` took for all
at once, the time from `wake` to the agent's prompt (one, then the rest); ends all it started by pid.

- `--agent demo` (default): the demo agent with its resident helper (`-- --helper`: a child process
  that is part of the agent, like an MCP server).
- `--agent claude`: the real `claude` TUI (from $MUXHOST_AGENT_BIN_DIR, else PATH) against a fake
  Anthropic server on 127.0.0.1 (plugins/claude/tests/conftest.py), HOME seeded as the claude tests
  seed it; each is given one prompt (so it has a conversation on disk) and, unless `--no-mcp`, a tiny
  stdio MCP server (python) registered in `~/.claude.json`, a resident child as users have.

usage: python benchmarks/bench_sleep.py [-n 10] [--agent demo|claude] [--no-mcp]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import psutil

CLAUDE_CONFTEST = Path(__file__).resolve().parents[1] / "plugins" / "claude" / "tests" / "conftest.py"
PROMPT, ANSWER = "say hello", "hello, I am a fake model"  # the fake model's plain answer

# A stdio MCP server with no tools: enough for claude to start it and keep it running.
MCP_SERVER = """import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    m, out = msg.get("method"), {"jsonrpc": "2.0", "id": msg["id"]}
    if m == "initialize":
        out["result"] = {"protocolVersion": msg["params"].get("protocolVersion", "2024-11-05"),
                         "capabilities": {"tools": {}}, "serverInfo": {"name": "bench", "version": "1"}}
    elif m in ("tools/list", "ping"):
        out["result"] = {"tools": []}
    else:
        out["error"] = {"code": -32601, "message": "no such method"}
    print(json.dumps(out), flush=True)
"""


def rss(pids: list[int]) -> int:
    """The RSS of these processes and all their descendants, in bytes."""
    seen, total = set(), 0
    for pid in pids:
        try:
            root = psutil.Process(pid)
            for p in [root, *root.children(recursive=True)]:
                if p.pid not in seen:
                    seen.add(p.pid)
                    total += p.memory_info().rss
        except psutil.Error:
            continue
    return total


def tree(pid: int) -> list[tuple[int, float]]:
    """(pid, create time) of this process and its descendants: what to end by pid at the end."""
    try:
        root = psutil.Process(pid)
        return [(p.pid, p.create_time()) for p in [root, *root.children(recursive=True)]]
    except psutil.Error:
        return []


def mcp_running(pid: int, script: Path) -> bool:
    """Whether the process ``pid`` has started the MCP server ``script`` (a child running it)."""
    try:
        return any(str(script) in c.cmdline() for c in psutil.Process(pid).children())
    except psutil.Error:
        return False


def claude_binary() -> str:
    """The real claude CLI, found as muxhost.testing.agent_binary finds it: $MUXHOST_AGENT_BIN_DIR, else PATH."""
    bin_dir = os.environ.get("MUXHOST_AGENT_BIN_DIR")
    if bin_dir and os.access(os.path.join(bin_dir, "claude"), os.X_OK):
        return os.path.join(bin_dir, "claude")
    found = shutil.which("claude")
    if not found:
        raise SystemExit("bench_sleep: the claude CLI is not installed (set MUXHOST_AGENT_BIN_DIR)")
    return found


def claude_kit():
    """The claude tests' conftest (FakeAnthropic, seed_home, claude_env), loaded by path."""
    spec = importlib.util.spec_from_file_location("muxhost_claude_test_kit", CLAUDE_CONFTEST)
    kit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kit)  # type: ignore[union-attr]
    return kit


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=10)
    ap.add_argument("--agent", choices=("demo", "claude"), default="demo")
    ap.add_argument("--no-mcp", action="store_true", help="claude: no stdio MCP server")
    args = ap.parse_args()
    claude = args.agent == "claude"
    binary = claude_binary() if claude else ""
    tmp = Path(tempfile.mkdtemp(prefix="muxhost-bench-sleep-"))
    home, work, mcp = tmp / "home", tmp / "work", tmp / "mcp_server.py"
    for d in (home, work, tmp / "ctmp"):
        d.mkdir()
    socket = f"muxhost-bench-sleep-{os.getpid()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMUX", "MUXHOST_", "XDG_", "CLAUDE", "ANTHROPIC"))}
    env.update(HOME=str(home), MUXHOST_STATE_DIR=str(tmp / "state"), MUXHOST_TMUX_SOCKET=socket,
               MUXHOST_CONFIG=str(tmp / "none.yaml"), MUXHOST_LOAD_PLUGINS="claude" if claude else "")
    py = [sys.executable, "-m", "muxhost"]
    fake = None  # the FakeAnthropic (claude)

    def mux(*a: str) -> str:
        return subprocess.run([*py, *a], env=env, capture_output=True, text=True, check=True).stdout

    def tmux(*a: str) -> str:
        return subprocess.run(["tmux", "-L", socket, *a], capture_output=True, text=True).stdout

    def screen(pane: str) -> str:
        return tmux("capture-pane", "-p", "-t", pane)

    def until(pred: Callable[[], object], timeout: float = 60.0, what: str = "") -> float:
        t0 = time.perf_counter()
        while not pred():
            if time.perf_counter() - t0 > timeout:
                raise SystemExit(f"bench_sleep: timed out waiting for {what}")
            time.sleep(0.01)
        return time.perf_counter() - t0

    def say(pane: str) -> None:
        """Type PROMPT into a claude pane, Enter (again while no request carries it: a TUI that is
        still starting may drop a key), and wait for the fake model's answer on screen."""
        asked = len(fake.requests)
        tmux("send-keys", "-t", pane, "-l", PROMPT)
        until(lambda: PROMPT in screen(pane), what="the typed prompt")
        for _ in range(3):
            tmux("send-keys", "-t", pane, "Enter")
            try:
                until(lambda: any(PROMPT in json.dumps(r["body"].get("messages")) for r in fake.requests[asked:]), 5)
                break
            except SystemExit:
                continue
        until(lambda: ANSWER in screen(pane), what="the fake model's answer")

    started: list[tuple[int, float]] = []
    try:
        if claude:
            kit = claude_kit()
            fake = kit.FakeAnthropic().start()
            kit.seed_home(home, [str(work)])
            env.update(kit.claude_env(fake.url), PATH=os.path.dirname(binary) + os.pathsep + env.get("PATH", ""),
                       CLAUDE_CODE_TMPDIR=str(tmp / "ctmp"))
            if not args.no_mcp:
                mcp.write_text(MCP_SERVER)
                cfg = json.loads((home / ".claude.json").read_text())
                cfg["mcpServers"] = {"bench": {"type": "stdio", "command": sys.executable, "args": [str(mcp)]}}
                (home / ".claude.json").write_text(json.dumps(cfg, indent=2) + "\n")
            version = subprocess.run([binary, "--version"], env=env, capture_output=True, text=True).stdout.split()
            what = f"{args.n} claude {version[0] if version else '?'} TUIs, each with a conversation" + (
                "" if args.no_mcp else " and a stdio MCP server")
            launch, ready, woken = ["claude", "--cwd", str(work)], kit.ClaudeWorld.READY, kit.ClaudeWorld.READY
        else:
            what = f"{args.n} demo agents, each with its resident helper"
            launch, ready, woken = ["demo", "--cwd", str(tmp), "--", "--helper"], "demo>", "resumed conversation"
        recs = [json.loads(mux("launch", "--json", *launch)) for _ in range(args.n)]
        for r in recs:
            until(lambda r=r: ready in screen(r["pane"]), what=f"{r['id']}'s prompt")
        started += [pt for r in json.loads(mux("ls", "--json")) for pt in tree(r["pids"][0])]
        if claude:
            folder = re.sub(r"[^a-zA-Z0-9]", "-", os.path.realpath(work))
            for r in recs:
                say(r["pane"])
            for r in recs:
                t = home / ".claude" / "projects" / folder / f"{r['conversation_id']}.jsonl"
                until(lambda t=t: t.is_file() and ANSWER in t.read_text(), what="the transcript")
        rows = {r["id"]: r for r in json.loads(mux("ls", "--json"))}
        if claude and not args.no_mcp:  # (claude starts its MCP servers beside the TUI, not before it)
            until(lambda: all(mcp_running(r["pids"][0], mcp) for r in rows.values()), what="the MCP servers")
        awake = [pt for r in rows.values() for pt in tree(r["pids"][0])]
        started += awake
        before = {rid: rss(r["pids"]) for rid, r in rows.items()}
        own = {rid: psutil.Process(r["pids"][0]).memory_info().rss for rid, r in rows.items()}  # the agent alone

        t0 = time.perf_counter()
        mux("sleep", *rows)
        slept = time.perf_counter() - t0
        for r in recs:
            until(lambda r=r: "Enter wakes it" in screen(r["pane"]), what="the stub")
        after = {rid: rss([int(tmux("display", "-p", "-t", r["pane"], "#{pane_pid}"))]) for rid, r in rows.items()}
        gone = [p for p, ct in awake if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]

        def woke(r: dict) -> bool:
            s = screen(r["pane"])
            return woken in s and "Enter wakes it" not in s

        first = recs[0]
        t0 = time.perf_counter()
        mux("wake", first["id"])
        command = time.perf_counter() - t0
        until(lambda: woke(first), what="the woken agent's prompt")
        wake_one = time.perf_counter() - t0
        t0 = time.perf_counter()
        for r in recs[1:]:
            mux("wake", r["id"])
        for r in recs[1:]:
            until(lambda r=r: woke(r), what="the woken agents' prompts")
        wake_rest = time.perf_counter() - t0

        mb = 2 ** 20
        b, a = statistics.mean(before.values()) / mb, statistics.mean(after.values()) / mb
        lo, hi = min(before.values()) / mb, max(before.values()) / mb
        o = statistics.mean(own.values()) / mb
        parts = (f"agent {o:.1f} + helper {b - o:.1f}" if not claude else
                 "claude alone" if args.no_mcp else f"claude {o:.1f} + MCP server {b - o:.1f}")
        print(f"agents: {what}")
        print(f"RSS per agent awake:   {b:6.1f} MB ({parts}; {lo:.1f} to {hi:.1f} MB)")
        print(f"RSS per agent asleep:  {a:6.1f} MB (muxhost's stub)   freed {b - a:.1f} MB each, "
              f"{(b - a) / b:.0%}; {sum(before.values()) / mb:.0f} MB -> {sum(after.values()) / mb:.0f} MB in all")
        print(f"sleep, all at once:    {slept:6.2f} s")
        print(f"wake one:              {wake_one:6.2f} s (from `muxhost wake` to the agent's prompt; "
              f"the command returns in {command:.2f} s)")
        rest = len(recs) - 1
        print(f"wake the other {rest}:      {wake_rest:6.2f} s ({wake_rest / max(1, rest):.2f} s each)")
        print(f"survivors of sleep:    {len(gone)}")
        return 1 if gone else 0
    finally:  # (claude ignores the SIGHUP of kill-server in some versions: every pane's tree by pid too)
        started += [pt for pid in tmux("list-panes", "-a", "-F", "#{pane_pid}").split() for pt in tree(int(pid))]
        socket_path = tmux("display", "-p", "#{socket_path}").strip()
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)
        if socket_path:  # (tmux 3.3a leaves its socket file behind)
            Path(socket_path).unlink(missing_ok=True)
        for pid, ct in started:
            try:
                p = psutil.Process(pid)
                if abs(p.create_time() - ct) < 0.01:
                    p.send_signal(signal.SIGKILL)
            except psutil.Error:
                pass
        if fake is not None:
            fake.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
