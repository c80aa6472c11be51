"""Benchmark `muxhost ls`: one tmux query and one process-table scan, whatever the number of records.

Starts N demo agents (default 50) on a private tmux socket with a temp HOME and state dir, then prints
the median wall time (and CPU time: steadier on a busy machine) of:

  ls        `muxhost ls --json` with every installed plugin package loaded (what a user runs; the
            entry point list comes from the plugin cache, which the first run writes)
  built-ins the same with MUXHOST_LOAD_PLUGINS="" (no plugin package)
  naive     the same answer built per pane: libtmux lookups and psutil children(recursive=True)
  tmux      `tmux list-panes -a` alone
  python    the interpreter with psutil, sqlite3 and json imported, reading the process table once
            (:data:`FLOOR`), and `python -c pass`

and the ratios naive/ls (aim >= 5) and ls/floor (aim <= 2.0), where the floor is that python + tmux:
what no `ls` that reads the process table, the store and tmux from Python can avoid. Also
`muxhost --help`. Bytecode of muxhost and of the plugin
packages is compiled first (an editable checkout under PYTHONDONTWRITEBYTECODE would otherwise compile
every module on every run and measure the compiler). Everything it started is ended by pid at the end.

usage: python benchmarks/bench_ls.py [-n 50] [-r 15]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _fleet


# the floor's Python: what any `ls` pays before its own code (the process table read as muxhost reads it)
FLOOR = ("import json, sqlite3, psutil\n"
         "for p in psutil.process_iter():\n"
         "    try:\n"
         "        p.as_dict(['pid', 'ppid', 'create_time', 'name'])\n"
         "    except psutil.Error:\n"
         "        pass\n")


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


def plugin_names() -> list[str]:
    from importlib.metadata import entry_points

    return sorted(ep.name for ep in entry_points(group="muxhost"))


def compile_bytecode() -> None:
    """Compile muxhost and every installed plugin package, as an installed (non-editable) package is."""
    import compileall
    import importlib.util
    from importlib.metadata import entry_points

    import muxhost as pkg

    compileall.compile_dir(os.path.dirname(pkg.__file__), quiet=1)
    for ep in entry_points(group="muxhost"):
        spec = importlib.util.find_spec(ep.module)
        if spec is None or not spec.origin:
            continue
        if spec.submodule_search_locations:  # a package: its folder
            compileall.compile_dir(os.path.dirname(spec.origin), quiet=1)
        else:
            compileall.compile_file(spec.origin, quiet=1)


def median_time(argv: list[str], env: dict, runs: int) -> float:
    return median_times({"": (argv, env)}, runs)[""][0]


def median_times(commands: dict[str, tuple[list[str], dict]], runs: int) -> dict[str, tuple[float, float]]:
    """The median (wall time, CPU time) of each command, run in turns so that load from elsewhere on
    the machine falls on all of them alike. CPU time (user + system of the command itself) moves less
    than wall time on a busy machine; the tmux server's share of list-panes is in neither."""
    wall: dict[str, list[float]] = {k: [] for k in commands}
    cpu: dict[str, list[float]] = {k: [] for k in commands}
    for _ in range(runs):
        for key, (argv, env) in commands.items():
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            wall[key].append(time.perf_counter() - t0)
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[key].append(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
    return {k: (statistics.median(wall[k]), statistics.median(cpu[k])) for k in commands}


def report(t: dict[str, tuple[float, float]], t_naive: float) -> None:
    """Print each median (wall, CPU) and the ratios."""
    ms = lambda s: f"{s * 1000:8.1f} ms"
    row = lambda what, k, note="": print(f"{what:34}{ms(t[k][0])}{ms(t[k][1])} cpu{note}")
    row("muxhost ls --json", "ls", f"   (plugins: {', '.join(plugin_names()) or 'none'})")
    row("  built-ins only", "builtin", '   (MUXHOST_LOAD_PLUGINS="")')
    print(f"{'naive (per-pane libtmux + psutil)':34}{ms(t_naive)}")
    row("tmux list-panes -a", "tmux")
    row("floor: python, imports, 1 pass", "floor")
    row("python -c pass", "py")
    row("muxhost --help", "help", "   (aim < 150 ms)")
    floor = [t["tmux"][i] + t["floor"][i] for i in (0, 1)]
    print(f"naive / ls                 = {t_naive / t['ls'][0]:5.1f}x   (aim >= 5x)")
    print(f"floor = that python + tmux list-panes -a = {ms(floor[0]).strip()} ({ms(floor[1]).strip()} cpu)")
    print(f"ls / floor                 = {t['ls'][0] / floor[0]:5.2f}x   ({t['ls'][1] / floor[1]:.2f}x in cpu)"
          "   (aim <= 2.0x)")
    print(f"built-ins only / floor     = {t['builtin'][0] / floor[0]:5.2f}x   ({t['builtin'][1] / floor[1]:.2f}x in cpu)")


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
    socket = f"muxhost-bench-{os.getpid()}"
    env = _fleet.env_for(tmp, socket)
    builtins = {**env, "MUXHOST_LOAD_PLUGINS": ""}
    os.environ.update(builtins)  # the demo agents are started from here, with the built-ins only
    py = sys.executable
    compile_bytecode()
    try:
        _fleet.start(args.n, tmp, socket)
        time.sleep(1.0)
        listed = json.loads(subprocess.run([py, "-m", "muxhost", "ls", "--json"], env=env, capture_output=True,
                                           text=True, check=True).stdout)  # also writes the plugin cache
        assert len(listed) == args.n and all(r["state"] == "running" for r in listed), "not all running"
        naive = json.loads(subprocess.run([py, __file__, "--naive"], env=env, capture_output=True, text=True,
                                          check=True).stdout)
        assert {r["id"] for r in naive if r["state"] == "running"} == {r["id"] for r in listed}

        t_naive = median_time([py, __file__, "--naive"], env, max(3, args.runs // 3))
        t = median_times({"ls": ([py, "-m", "muxhost", "ls", "--json"], env),
                          "builtin": ([py, "-m", "muxhost", "ls", "--json"], builtins),
                          "tmux": (["tmux", "-L", socket, "list-panes", "-a"], env),
                          "floor": ([py, "-c", FLOOR], env),
                          "py": ([py, "-c", "pass"], env),
                          "help": ([py, "-m", "muxhost", "--help"], env)}, args.runs)
        report(t, t_naive)
    finally:
        _fleet.end(socket, tmp / "state", tmp)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
