"""Benchmark `muxhost watch`: what knowing every agent's activity costs, all day.

Starts N idle demo agents (default 100) on a private tmux socket with a temp HOME and state dir,
starts `muxhost watch` at watch.interval (default 1 s), waits for its first pass (the summary says
"N idle"), then measures for D seconds (default 30) the CPU time (psutil cpu_times deltas: user +
system) of the watch process, of the tmux clients it ran (its reaped children), and of the tmux
server, and prints them as % of one core, per pass and per agent. Aim: <= 3% of one core.

Everything it started is ended by pid at the end.

usage: python benchmarks/bench_watch.py [-n 100] [--seconds 30] [--interval 1]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

import _fleet


def cpu(p: psutil.Process, children: bool = False) -> float:
    t = p.cpu_times()
    return t.user + t.system + ((t.children_user + t.children_system) if children else 0.0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=100, help="idle demo agents (default 100)")
    ap.add_argument("--seconds", type=float, default=30.0, help="how long to measure (default 30)")
    ap.add_argument("--interval", type=float, default=1.0, help="watch.interval (default 1)")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="muxhost-bench-watch-"))
    socket = f"muxhost-bench-watch-{os.getpid()}"
    state = tmp / "state"
    config = tmp / "config.yaml"
    config.write_text(f"watch: {{interval: {args.interval}}}\n")
    env = _fleet.env_for(tmp, socket, MUXHOST_CONFIG=str(config), MUXHOST_LOAD_PLUGINS="")
    py = sys.executable
    tmux = ["tmux", "-L", socket]
    watch = None
    try:
        import compileall

        import muxhost as pkg

        compileall.compile_dir(os.path.dirname(pkg.__file__), quiet=1)
        subprocess.run([py, "-m", "muxhost", "launch", "demo", "--cwd", str(tmp)], env=env, check=True,
                       stdout=subprocess.DEVNULL)  # the first one starts the server

        def launch(_):
            subprocess.run([py, "-m", "muxhost", "launch", "demo", "--cwd", str(tmp)], env=env, check=True,
                           stdout=subprocess.DEVNULL)

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(launch, range(args.n - 1)))
        time.sleep(3)  # every agent at its prompt
        server = psutil.Process(int(subprocess.run([*tmux, "display-message", "-p", "#{pid}"], capture_output=True,
                                                   text=True, check=True).stdout))
        watch = subprocess.Popen([py, "-m", "muxhost", "watch"], env=env, stdout=subprocess.DEVNULL)
        wp = psutil.Process(watch.pid)
        want = f"{args.n} idle"
        deadline = time.monotonic() + 60
        while True:  # its first pass (every screen captured once) is not what it costs all day
            out = subprocess.run([*tmux, "show-options", "-gv", "@muxhost_summary"], capture_output=True, text=True)
            if out.stdout.strip() == want:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"the watch never said {want!r} (it says {out.stdout.strip()!r})")
            time.sleep(0.2)
        time.sleep(2 * args.interval)
        w0, s0, t0 = cpu(wp, children=True), cpu(server), time.monotonic()
        wc0 = wp.cpu_times()
        time.sleep(args.seconds)
        w1, s1, t1 = cpu(wp, children=True), cpu(server), time.monotonic()
        wc1 = wp.cpu_times()
        wall = t1 - t0
        passes = wall / args.interval
        own = (wc1.user + wc1.system) - (wc0.user + wc0.system)
        clients = (w1 - w0) - own
        total = (w1 - w0) + (s1 - s0)
        pct = 100 * total / wall
        print(f"{args.n} idle demo agents, watch.interval {args.interval:g} s, measured {wall:.1f} s (~{passes:.0f} passes)")
        print(f"  watch process   {100 * own / wall:5.2f}% of one core")
        print(f"  its tmux clients{100 * clients / wall:6.2f}%")
        print(f"  tmux server     {100 * (s1 - s0) / wall:5.2f}%")
        print(f"  total           {pct:5.2f}% of one core (aim <= 3%): {1000 * total / passes:.1f} ms CPU per pass, "
              f"{1000 * total / passes / args.n:.3f} ms per agent per pass ({pct / args.n:.4f}% of a core per agent)")
        return 0 if pct <= 3.0 else 1
    finally:
        if watch is not None and watch.poll() is None:
            watch.send_signal(signal.SIGTERM)
            try:
                watch.wait(10)
            except subprocess.TimeoutExpired:
                watch.kill()
        os.environ["MUXHOST_STATE_DIR"] = str(state)
        _fleet.end(socket, state, tmp)


if __name__ == "__main__":
    raise SystemExit(main())
