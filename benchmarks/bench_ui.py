"""Benchmark `muxhost ui`: the first full screen, a key to its redraw, and what the dashboard costs idle.

Starts N demo agents (default 100) on a private tmux socket with a temp HOME and state dir, then runs
`muxhost ui` in a pane of that server (a real terminal, 160×50, no watch running: the dashboard
judges activity itself) and reads its screen back with `capture-pane`:

  first screen   from starting the pane to the table with all N agents on screen (aim <= 1 s)
  key -> redraw  `j` (the next row: the preview's title names it) and `?` (the help opens), from
                 send-keys to the screen showing it, the median and the worst of R presses (aim <= 100 ms)
  idle CPU       the dashboard's process and the tmux server together over S seconds with no key,
                 less what the server used over as long before the dashboard started (aim <= 3 %
                 of one core)

Everything it started is ended by pid (the agents) and by its own socket (the server) at the end.

usage: python benchmarks/bench_ui.py [-n 100] [-r 15] [-s 30]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _fleet


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=100, help="demo agents to start (default 100)")
    ap.add_argument("-r", "--runs", type=int, default=15, help="presses of each key (default 15)")
    ap.add_argument("-s", "--seconds", type=float, default=30.0, help="idle seconds measured (default 30)")
    args = ap.parse_args()

    import psutil

    tmp = Path(tempfile.mkdtemp(prefix="muxhost-bench-ui-"))
    socket = f"muxhost-bench-ui-{os.getpid()}"
    os.environ.update(_fleet.env_for(tmp, socket, MUXHOST_LOAD_PLUGINS="", TERM="xterm-256color"))

    tmux = ["tmux", "-L", socket]

    def screen() -> str:
        return subprocess.run([*tmux, "capture-pane", "-p", "-t", "dash"], capture_output=True, text=True).stdout

    def until(test, timeout: float = 30.0, step: float = 0.005) -> float:
        t0 = time.perf_counter()
        while not test(screen()):
            if time.perf_counter() - t0 > timeout:
                raise SystemExit(f"bench_ui: timed out; the screen:\n{screen()}")
            time.sleep(step)
        return time.perf_counter() - t0

    try:
        _fleet.start(args.n, tmp, socket)
        time.sleep(2.0)
        server = psutil.Process(int(subprocess.run([*tmux, "display-message", "-p", "#{pid}"], capture_output=True,
                                                   text=True, check=True).stdout))
        c0, w0 = sum(server.cpu_times()[:2]), time.perf_counter()
        time.sleep(min(15.0, args.seconds))
        base = (sum(server.cpu_times()[:2]) - c0) / (time.perf_counter() - w0)
        # a warm start, as a user's second one is (bytecode written, the page cache warm)
        cmd = f"{shlex_join([sys.executable, '-m', 'muxhost', 'ui'])}"
        subprocess.run([*tmux, "new-session", "-d", "-s", "dash", "-x", "160", "-y", "50", cmd], check=True)
        subprocess.run([*tmux, "set-option", "-p", "-t", "dash", "remain-on-exit", "on"], check=True)  # (respawned)
        until(lambda s: counted(s) == args.n)
        subprocess.run([*tmux, "send-keys", "-t", "dash", "q"], check=True)
        time.sleep(1.0)
        t0 = time.perf_counter()
        subprocess.run([*tmux, "respawn-pane", "-k", "-t", "dash", cmd], check=True)
        pid = int(subprocess.run([*tmux, "display-message", "-p", "-t", "dash", "#{pane_pid}"], capture_output=True,
                                 text=True, check=True).stdout)
        ui = psutil.Process(pid)
        until(lambda s: counted(s) == args.n and s.count("demo-") >= min(40, args.n))  # the header's counts, the rows
        first, first_cpu = time.perf_counter() - t0, sum(ui.cpu_times()[:2])
        load = os.getloadavg()[0]
        print(f"first full screen          {first * 1000:8.0f} ms   (aim <= 1000 ms; {args.n} agents; "
              f"{first_cpu * 1000:.0f} ms of CPU; load average {load:.1f} on {os.cpu_count()} cores)")
        time.sleep(2.0)
        for key, label in (("j", "j (next row)"), ("question_mark", "? (help)")):
            times = []
            for _ in range(args.runs):
                before = screen()
                title = re.search(r"╭─ (\S+) ·", before)
                if key == "j":
                    subprocess.run([*tmux, "send-keys", "-t", "dash", "j"], check=True)
                    times.append(until(lambda s: (m := re.search(r"╭─ (\S+) ·", s)) and title and
                                       m.group(1) != title.group(1)))
                else:
                    subprocess.run([*tmux, "send-keys", "-t", "dash", "?"], check=True)
                    times.append(until(lambda s: "muxhost ui — keys" in s))
                    subprocess.run([*tmux, "send-keys", "-t", "dash", "Escape"], check=True)
                    until(lambda s: "muxhost ui — keys" not in s)
                time.sleep(0.2)
            print(f"key -> redraw {label:13}{statistics.median(times) * 1000:8.0f} ms median, "
                  f"{max(times) * 1000:.0f} ms worst   (aim <= 100 ms)")
        time.sleep(3.0)
        tree = [ui, *ui.children(recursive=True)]
        # (children's times too: the tmux commands the dashboard ran and reaped meanwhile)
        cpu = lambda: sum(sum(p.cpu_times()[:4]) for p in tree) + sum(server.cpu_times()[:2])
        c0, w0 = cpu(), time.perf_counter()
        time.sleep(args.seconds)
        used = (cpu() - c0) / (time.perf_counter() - w0) - base
        print(f"idle CPU (ui + tmux server) {used * 100:6.2f} %    (aim <= 3 % of a core; the server alone "
              f"before: {base * 100:.2f} %)")
        subprocess.run([*tmux, "send-keys", "-t", "dash", "q"], check=True)
    finally:
        _fleet.end(socket, tmp / "state", tmp)
    return 0


def counted(screen: str) -> int:
    """The agents the dashboard's header counts (``3 working · 97 idle``)."""
    head = screen.split("\n")[0]
    return sum(int(n) for n in re.findall(r"(\d+) (?:waiting|working|stalled|idle|running|starting)", head))


def shlex_join(argv: list[str]) -> str:
    import shlex

    return shlex.join(argv)


if __name__ == "__main__":
    raise SystemExit(main())
