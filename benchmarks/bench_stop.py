"""Benchmark `muxhost stop --all`: many ladders at once, zero survivors.

Starts N agents (default 50) on a private tmux socket with a temp HOME and state dir, stops them all
with one `muxhost stop --all --json`, and prints the wall time, the outcomes and the survivors (which
must be none). Two rounds:

  cooperative  N demo agents: each leaves on /exit          (aim: <= 3 s wall)
  stubborn     N agents that ignore /exit, SIGHUP and SIGTERM, each with a setsid grandchild
               (aim: <= exit_grace + term_grace + 2 s wall)

Everything it started is ended by pid at the end.

usage: python benchmarks/bench_stop.py [-n 50] [--only cooperative|stubborn]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

STUBBORN = r"""
import os, signal, sys, time
signal.signal(signal.SIGHUP, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.fork() == 0:
    os.setsid()
    while True:
        time.sleep(1)
print("stubborn> ", end="", flush=True)
while True:
    try:
        input()
    except EOFError:
        time.sleep(1)
"""

EXIT_GRACE, TERM_GRACE, HUP_GRACE = 1.0, 1.0, 0.5


def run_round(kind: str, n: int, tmp: Path) -> tuple[float, Counter, list[int]]:
    from muxhost import procs
    from muxhost.store import Store

    socket = f"muxhost-bench-stop-{os.getpid()}-{kind}"
    state = tmp / f"state-{kind}"
    script = tmp / "stubborn.py"
    script.write_text(STUBBORN)
    config = tmp / f"config-{kind}.yaml"
    config.write_text(
        f"stop: {{exit_grace: {EXIT_GRACE}, term_grace: {TERM_GRACE}, hup_grace: {HUP_GRACE}}}\n"
        f"agents:\n  stubborn:\n    command: [{sys.executable}, {script}]\n    process_names: [stubborn.py]\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMUX", "MUXHOST_", "XDG_"))}
    env.update(HOME=str(tmp / "home"), MUXHOST_STATE_DIR=str(state), MUXHOST_TMUX_SOCKET=socket,
               MUXHOST_CONFIG=str(config), MUXHOST_LOAD_PLUGINS="")
    agent = "demo" if kind == "cooperative" else "stubborn"
    py = sys.executable
    try:
        for _ in range(n):
            subprocess.run([py, "-m", "muxhost", "launch", agent, "--cwd", str(tmp)], env=env, check=True,
                           stdout=subprocess.DEVNULL)
        time.sleep(1.5)  # let every agent reach its prompt
        before = json.loads(subprocess.run([py, "-m", "muxhost", "ls", "--json"], env=env, capture_output=True,
                                           text=True, check=True).stdout)
        pids = {p for r in before for p in r["pids"]}
        assert len(before) == n and all(r["state"] == "running" for r in before), "not all running"
        t0 = time.perf_counter()
        prof = ["-m", "cProfile", "-o", os.environ["BENCH_PROFILE"]] if os.environ.get("BENCH_PROFILE") else []
        p = subprocess.run([py, *prof, "-m", "muxhost", "stop", "--all", "--json"], env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if p.returncode != 0:
            print(p.stderr, file=sys.stderr)
        outcomes = Counter(r.get("outcome", "error") for r in json.loads(p.stdout or "[]"))
        table = procs.ProcessTable.snapshot()
        seen = {p.key for p in table.procs.values() if p.pid in pids}
        seen |= {q.key for r in before for q in procs.marked(r["id"], table)}
        survivors = sorted(pid for pid, _ in procs.alive(seen))  # zombies are not survivors
        return wall, outcomes, survivors
    finally:
        os.environ["MUXHOST_STATE_DIR"] = str(state)
        table = procs.ProcessTable.snapshot()
        if (state / "state.db").exists():
            for rec in Store(state / "state.db").all():
                for q in procs.marked(rec.id, table):
                    procs.signal_if_same(q.pid, q.create_time, signal.SIGKILL)
        subprocess.run(["tmux", "-L", socket, "kill-server"], stderr=subprocess.DEVNULL)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=50, help="agents per round (default 50)")
    ap.add_argument("--only", choices=("cooperative", "stubborn"))
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="muxhost-bench-stop-"))
    (tmp / "home").mkdir()
    import compileall

    import muxhost as pkg

    compileall.compile_dir(os.path.dirname(pkg.__file__), quiet=1)
    bad = False
    for kind in ("cooperative", "stubborn"):
        if args.only and kind != args.only:
            continue
        wall, outcomes, survivors = run_round(kind, args.n, tmp)
        aim = 3.0 if kind == "cooperative" else EXIT_GRACE + TERM_GRACE + 2.0
        print(f"{kind:12} {args.n} agents: stop --all {wall:5.2f} s wall (aim <= {aim:.1f} s)  "
              f"outcomes {dict(outcomes)}  survivors {len(survivors)}")
        bad |= bool(survivors)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
