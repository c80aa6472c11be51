"""Benchmark `muxhost sleep` / `wake`: the memory an asleep agent frees, and the time to wake it.

Starts N demo agents (default 10), each with its resident helper (`-- --helper`: a child process
that is part of the agent, like an MCP server), on a private tmux socket with a temp HOME and state
dir. Prints the RSS of each record's processes before, the RSS of its pane (muxhost's stub) once
asleep, the time `sleep` took for all of them at once, and the time from `wake` to the agent's
prompt, for one agent and then for all. Everything it started is ended by pid at the end.

usage: python benchmarks/bench_sleep.py [-n 10]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil


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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=10)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="muxhost-bench-sleep-"))
    socket = f"muxhost-bench-sleep-{os.getpid()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMUX", "MUXHOST_", "XDG_"))}
    env.update(HOME=str(tmp / "home"), MUXHOST_STATE_DIR=str(tmp / "state"), MUXHOST_TMUX_SOCKET=socket,
               MUXHOST_CONFIG=str(tmp / "none.yaml"), MUXHOST_LOAD_PLUGINS="")
    (tmp / "home").mkdir()
    py = [sys.executable, "-m", "muxhost"]

    def mux(*a: str) -> str:
        return subprocess.run([*py, *a], env=env, capture_output=True, text=True, check=True).stdout

    def screen(pane: str) -> str:
        return subprocess.run(["tmux", "-L", socket, "capture-pane", "-p", "-t", pane], capture_output=True,
                              text=True).stdout

    def until(pred, timeout=30.0) -> float:
        t0 = time.perf_counter()
        while not pred():
            if time.perf_counter() - t0 > timeout:
                raise SystemExit("timed out")
            time.sleep(0.01)
        return time.perf_counter() - t0

    started: list[tuple[int, float]] = []
    try:
        recs = [json.loads(mux("launch", "demo", "--cwd", str(tmp), "--json", "--", "--helper")) for _ in range(args.n)]
        for r in recs:
            until(lambda r=r: "demo>" in screen(r["pane"]))
        rows = {r["id"]: r for r in json.loads(mux("ls", "--json"))}
        for r in rows.values():
            for p in [psutil.Process(r["pids"][0]), *psutil.Process(r["pids"][0]).children(recursive=True)]:
                started.append((p.pid, p.create_time()))
        before = {rid: rss(r["pids"]) for rid, r in rows.items()}

        t0 = time.perf_counter()
        mux("sleep", *rows)
        slept = time.perf_counter() - t0
        for r in recs:
            until(lambda r=r: "Enter wakes it" in screen(r["pane"]))
        after = {}
        for rid, r in rows.items():
            pid = int(subprocess.run(["tmux", "-L", socket, "display", "-p", "-t", r["pane"], "#{pane_pid}"],
                                     capture_output=True, text=True).stdout)
            started.append((pid, psutil.Process(pid).create_time()))
            after[rid] = rss([pid])
        gone = [p for p, ct in started[:-len(rows)] if psutil.pid_exists(p)
                and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]

        first = recs[0]
        t0 = time.perf_counter()
        mux("wake", first["id"])
        until(lambda: "resumed conversation" in screen(first["pane"]))
        wake_one = time.perf_counter() - t0
        t0 = time.perf_counter()
        for r in recs[1:]:
            mux("wake", r["id"])
        for r in recs[1:]:
            until(lambda r=r: "resumed conversation" in screen(r["pane"]))
        wake_rest = time.perf_counter() - t0

        mb = 2 ** 20
        b, a = statistics.mean(before.values()) / mb, statistics.mean(after.values()) / mb
        print(f"agents: {args.n} demo agents, each with its resident helper")
        print(f"RSS per agent awake:   {b:6.1f} MB (agent + helper)")
        print(f"RSS per agent asleep:  {a:6.1f} MB (muxhost's stub)   freed {b - a:.1f} MB each, "
              f"{(b - a) / b:.0%}; {sum(before.values()) / mb:.0f} MB -> {sum(after.values()) / mb:.0f} MB in all")
        print(f"sleep, all at once:    {slept:6.2f} s")
        print(f"wake one:              {wake_one:6.2f} s (from `muxhost wake` to the agent's prompt)")
        print(f"wake the other {len(recs) - 1}:      {wake_rest:6.2f} s ({wake_rest / max(1, len(recs) - 1):.2f} s each)")
        print(f"survivors of sleep:    {len(gone)}")
        return 1 if gone else 0
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)
        for pid, ct in started:
            try:
                p = psutil.Process(pid)
                if abs(p.create_time() - ct) < 0.01:
                    p.send_signal(signal.SIGKILL)
            except psutil.Error:
                pass


if __name__ == "__main__":
    sys.exit(main())
