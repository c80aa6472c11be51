"""Benchmark the purge key: keypress-to-prompt and answer-to-message times.

A private tmux server, a real client attached in a pseudo-terminal, the printed bindings loaded;
for each run a demo agent is launched, prefix + P pressed, the prompt answered "y", and the time until
the outcome message shows on the client's terminal is measured. Prints medians.

usage: python benchmarks/bench_key.py [-r 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-r", "--runs", type=int, default=5)
    args = ap.parse_args()
    from muxhost.testing import TmuxClient, clean_env

    tmp = Path(tempfile.mkdtemp(prefix="muxhost-bench-key-"))
    (tmp / "home").mkdir()
    socket = f"muxhost-bench-key-{os.getpid()}"
    env = clean_env(tmp / "home")
    env.update(MUXHOST_STATE_DIR=str(tmp / "state"), MUXHOST_TMUX_SOCKET=socket,
               MUXHOST_CONFIG=str(tmp / "none.yaml"), MUXHOST_LOAD_PLUGINS="")
    tmux = ["tmux", "-L", socket]

    def mux(*a: str) -> str:
        return subprocess.run([sys.executable, "-m", "muxhost", *a], env=env, capture_output=True, text=True,
                              check=True).stdout

    client = None
    prompts, messages = [], []
    try:
        mux("launch", "demo", "--name", "keeper")
        conf = tmp / "keys.conf"
        conf.write_text(mux("tmux-bindings"))
        subprocess.run(tmux + ["source-file", str(conf)], check=True)
        subprocess.run(tmux + ["new-session", "-d", "-s", "main", "-x", "200", "-y", "40"], check=True, env=env)
        client = TmuxClient(socket, "main", dict(env, TERM="xterm-256color"))
        client.wait_text("[main]")
        for _ in range(args.runs):
            rec = json.loads(mux("launch", "demo", "--json"))
            deadline = time.monotonic() + 10
            while "demo>" not in subprocess.run(tmux + ["capture-pane", "-p", "-t", rec["pane"]], capture_output=True,
                                                text=True).stdout:
                if time.monotonic() > deadline:
                    raise SystemExit("demo agent did not start")
                time.sleep(0.05)
            subprocess.run(tmux + ["join-pane", "-s", rec["pane"], "-t", "main:0", ";", "select-pane", "-t", rec["pane"]],
                           check=True)
            mark = client.mark()
            t0 = time.perf_counter()
            client.press(b"\x02P")
            client.wait_text("for good? (y/n)", since=mark)
            prompts.append(time.perf_counter() - t0)
            mark = client.mark()
            t0 = time.perf_counter()
            client.press(b"y")
            client.wait_text("muxhost: purged", since=mark)
            messages.append(time.perf_counter() - t0)
        print(f"runs: {args.runs}")
        print(f"keypress -> prompt   median {statistics.median(prompts) * 1000:7.1f} ms")
        print(f"'y' -> message       median {statistics.median(messages) * 1000:7.1f} ms  (stop ladder with /exit included)")
    finally:
        if client is not None:
            client.close()
        from muxhost import procs
        from muxhost.store import Store

        os.environ["MUXHOST_STATE_DIR"] = env["MUXHOST_STATE_DIR"]
        table = procs.ProcessTable.snapshot()
        for rec in Store().all():
            for p in procs.marked(rec.id, table):
                procs.signal_if_same(p.pid, p.create_time, 9)
        subprocess.run(tmux + ["kill-server"], stderr=subprocess.DEVNULL)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
