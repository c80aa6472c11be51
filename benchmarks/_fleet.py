"""What the benchmarks share: a fleet of demo agents on a private tmux socket, with a temp HOME and
state dir, started from this process, and its end (every agent's processes by pid, then the server by
its own socket, then the temp folder). ``import _fleet`` from a benchmark run as
``python benchmarks/bench_X.py`` (the script's folder is first on sys.path)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path


def start(n: int, tmp: Path, socket: str) -> None:
    """``n`` demo agents launched by a :class:`muxhost.host.Host` of this process, in ``tmp``
    (``os.environ`` names the fleet's HOME, state dir and socket already); says how long it took."""
    from muxhost.host import Host

    t0 = time.perf_counter()
    host = Host()
    for _ in range(n):
        host.launch("demo", cwd=str(tmp))
    print(f"started {n} demo agents in {time.perf_counter() - t0:.1f}s on socket {socket}")


def end(socket: str, state: Path, tmp: Path | None = None) -> None:
    """Every process of the records in ``state`` (their trees and those marked with their id) killed
    by pid and start time, the tmux server of ``socket`` ended, ``tmp`` removed."""
    from muxhost import procs
    from muxhost.store import Store

    table = procs.ProcessTable.snapshot()
    if (state / "state.db").exists():
        for rec in Store(state / "state.db").all():
            mine = [q for pid, ct in rec.pids for q in table.tree_of((int(pid), ct))]
            for q in [*mine, *procs.marked(rec.id, table)]:
                procs.signal_if_same(q.pid, q.create_time, signal.SIGKILL)
    subprocess.run(["tmux", "-L", socket, "kill-server"], stderr=subprocess.DEVNULL)
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)


def env_for(tmp: Path, socket: str, **more: str) -> dict[str, str]:
    """This process's environment less the caller's tmux and muxhost, with the fleet's HOME
    (``tmp/home``, made), state dir (``tmp/state``), socket and no config file; ``more`` on top."""
    (tmp / "home").mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMUX", "MUXHOST_", "XDG_"))}
    env.update(HOME=str(tmp / "home"), MUXHOST_STATE_DIR=str(tmp / "state"), MUXHOST_TMUX_SOCKET=socket,
               MUXHOST_CONFIG=str(tmp / "none.yaml"))
    env.update(more)
    return env
