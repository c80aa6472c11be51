"""Benchmark `muxhost ls`: one tmux query and one process-table scan, whatever the number of records.

Starts N demo agents (default 50) on a private tmux socket with a temp HOME and state dir, then prints
the median wall time of:

  ls       `muxhost ls --json`
  naive    the same answer built per pane: libtmux lookups and psutil children(recursive=True)
  tmux     `tmux list-panes -a` alone
  python   the interpreter starting and exiting (`python -c pass`)

and the ratios naive/ls (aim >= 5) and ls/(tmux + python) (aim <= 1.5), plus `muxhost --help`.
Everything it started is ended by pid at the end.

usage: python benchmarks/bench_ls.py [-n 50] [-r 15]
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


def naive_ls() -> None:
    """The answer of `ls --json`, built the slow way (run in its own interpreter, like ls)."""
    import libtmux
    import psutil

    from muxhost.store import Store

    server = libtmux.Server(socket_name=os.environ["MUXHOST_TMUX_SOCKET"])
    out = []
    for rec in Store().all():
        pane = server.panes.get(pane_id=rec.pane, default=None) if rec.pane else None
        state, pids = "lost", []
        if pane is not None:
            owner = pane.cmd("show-options", "-pqv", "@muxhost_record").stdout
            dead = pane.cmd("display-message", "-p", "#{pane_dead}").stdout
            if owner and owner[0] == rec.id and dead and dead[0] == "0":
                try:
                    root = psutil.Process(int(pane.pane_pid))
                    pids = [root.pid] + [c.pid for c in root.children(recursive=True)]
                    state = "running"
                except psutil.NoSuchProcess:
                    state = "exited"
        out.append({"id": rec.id, "state": state, "pane": rec.pane, "pids": pids,
                    "conversation_id": rec.conversation_id})
    print(json.dumps(out))


def median_time(argv: list[str], env: dict, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=50, help="demo agents to start (default 50)")
    ap.add_argument("-r", "--runs", type=int, default=15, help="timed runs of each command (default 15)")
    ap.add_argument("--naive", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.naive:
        naive_ls()
        return 0

    tmp = Path(tempfile.mkdtemp(prefix="muxhost-bench-"))
    (tmp / "home").mkdir()
    socket = f"muxhost-bench-{os.getpid()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMUX", "MUXHOST_", "XDG_"))}
    env.update(HOME=str(tmp / "home"), MUXHOST_STATE_DIR=str(tmp / "state"), MUXHOST_TMUX_SOCKET=socket,
               MUXHOST_CONFIG=str(tmp / "none.yaml"), MUXHOST_LOAD_PLUGINS="")
    os.environ.update(env)
    from muxhost import procs
    from muxhost.host import Host
    from muxhost.store import Store

    py = sys.executable
    # an installed muxhost has its bytecode; an editable checkout under PYTHONDONTWRITEBYTECODE would
    # compile every module on every run and measure the compiler
    import compileall

    import muxhost as pkg

    compileall.compile_dir(os.path.dirname(pkg.__file__), quiet=1)
    try:
        t0 = time.perf_counter()
        host = Host()
        for _ in range(args.n):
            host.launch("demo", cwd=str(tmp))
        print(f"started {args.n} demo agents in {time.perf_counter() - t0:.1f}s on socket {socket}")
        time.sleep(1.0)
        listed = json.loads(subprocess.run([py, "-m", "muxhost", "ls", "--json"], env=env, capture_output=True,
                                           text=True, check=True).stdout)
        assert len(listed) == args.n and all(r["state"] == "running" for r in listed), "not all running"
        naive = json.loads(subprocess.run([py, __file__, "--naive"], env=env, capture_output=True, text=True,
                                          check=True).stdout)
        assert {r["id"] for r in naive if r["state"] == "running"} == {r["id"] for r in listed}

        t_ls = median_time([py, "-m", "muxhost", "ls", "--json"], env, args.runs)
        t_naive = median_time([py, __file__, "--naive"], env, max(3, args.runs // 3))
        t_tmux = median_time(["tmux", "-L", socket, "list-panes", "-a"], env, args.runs)
        t_py = median_time([py, "-c", "pass"], env, args.runs)
        t_help = median_time([py, "-m", "muxhost", "--help"], env, args.runs)
        ms = lambda s: f"{s * 1000:8.1f} ms"
        print(f"{'muxhost ls --json':34}{ms(t_ls)}")
        print(f"{'naive (per-pane libtmux + psutil)':34}{ms(t_naive)}")
        print(f"{'tmux list-panes -a':34}{ms(t_tmux)}")
        print(f"{'python -c pass':34}{ms(t_py)}")
        print(f"{'muxhost --help':34}{ms(t_help)}   (aim < 150 ms)")
        print(f"naive / ls                 = {t_naive / t_ls:5.1f}x   (aim >= 5x)")
        print(f"ls / (tmux + python start) = {t_ls / (t_tmux + t_py):5.2f}x   (aim <= 1.5x)")
    finally:
        table = procs.ProcessTable.snapshot()
        for rec in Store().all():
            for p in procs.marked(rec.id, table):
                procs.signal_if_same(p.pid, p.create_time, signal.SIGKILL)
        subprocess.run(["tmux", "-L", socket, "kill-server"], stderr=subprocess.DEVNULL)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
