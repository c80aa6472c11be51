"""Benchmark purge archives: a purge with and without ``--archive``, and ``unpurge``, by size.

For each size a demo conversation of that many MB (one transcript, a child's, and lines in the
shared history among a neighbour's) is written into a temp HOME; then ``muxhost purge --agent demo
--conversation ID --yes`` runs as a user runs it, with ``--archive`` and without, and ``muxhost
unpurge`` puts it back. Prints the median wall time of each, the archive's size and the rate.

usage: python benchmarks/bench_archive.py [-r 3] [--sizes 1,20,100]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path


def world(home: Path, mb: int) -> str:
    """A conversation of ``mb`` MB with a child, and a neighbour, as the demo agent keeps them."""
    root = home / ".local/share/muxhost-demo"
    convs = root / "conversations"
    convs.mkdir(parents=True, exist_ok=True)
    cid, kid, other = (uuid.uuid4().hex for _ in range(3))
    line = json.dumps({"role": "user", "text": "x" * 1000}) + "\n"
    for c, parent, n in ((cid, None, mb * 1000), (kid, cid, 100), (other, None, 100)):
        with open(convs / f"{c}.jsonl", "w") as f:
            f.write(json.dumps({"id": c, "parent": parent}) + "\n")
            f.write(line * n)
    with open(root / "history.jsonl", "a") as f:
        for i in range(2000):
            f.write(json.dumps({"conversation": (cid, other)[i % 2], "text": f"prompt {i}"}) + "\n")
    return cid


def timed(env: dict, *args: str) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "muxhost", *args], env=env, check=True, capture_output=True)
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-r", "--runs", type=int, default=3)
    ap.add_argument("--sizes", default="1,20,100", help="conversation sizes in MB, comma-separated")
    args = ap.parse_args()
    from muxhost.testing import clean_env

    tmp = Path(tempfile.mkdtemp(prefix="muxhost-bench-archive-"))
    try:
        for mb in (int(s) for s in args.sizes.split(",")):
            plain, kept, back, size = [], [], [], 0
            for _ in range(args.runs):
                home = tmp / "home"
                shutil.rmtree(home, ignore_errors=True)
                shutil.rmtree(tmp / "state", ignore_errors=True)
                home.mkdir()
                env = clean_env(home)
                env.update(MUXHOST_STATE_DIR=str(tmp / "state"), MUXHOST_CONFIG=str(tmp / "none.yaml"),
                           MUXHOST_LOAD_PLUGINS="")
                cid = world(home, mb)
                plain.append(timed(env, "purge", "--agent", "demo", "--conversation", cid, "--yes"))
                cid = world(home, mb)
                kept.append(timed(env, "purge", "--agent", "demo", "--conversation", cid, "--yes", "--archive"))
                [archive] = list((tmp / "state" / "archive").iterdir())
                size = archive.stat().st_size
                back.append(timed(env, "unpurge", archive.name))
            p, k, b = (statistics.median(x) for x in (plain, kept, back))
            print(f"{mb:>5} MB: purge {p:.2f} s, purge --archive {k:.2f} s (+{k - p:.2f} s, "
                  f"{size / 1e6 / max(k - p, 1e-3):.0f} MB/s), archive {size / 1e6:.1f} MB, unpurge {b:.2f} s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
