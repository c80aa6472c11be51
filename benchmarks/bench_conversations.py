"""What `muxhost conversations` and `prune` cost: N demo conversations on disk (half of them older than
30 days, one in ten with a child), in a temp HOME and state dir, each command run as a user runs it
(`python -m muxhost`, start-up included), best of three; prune once each way.

    python benchmarks/bench_conversations.py [N]     (default 200)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path


def write(folder: Path, n: int) -> None:
    folder.mkdir(parents=True)
    for i in range(n):
        cids = [uuid.uuid4().hex] + ([uuid.uuid4().hex] if i % 10 == 0 else [])
        when = time.time() - (40 if i % 2 else 5) * 86400
        for k, cid in enumerate(cids):
            lines = [{"type": "meta", "id": cid, "parent": cids[0] if k else None, "cwd": f"/work/p{i % 7}",
                      "created": when}, {"type": "user", "text": f"prompt {i} " + "words " * 30, "time": when},
                     {"type": "agent", "text": "answer " * 200, "time": when}]
            path = folder / f"{cid}.jsonl"
            path.write_text("".join(json.dumps(x) + "\n" for x in lines))
            os.utime(path, (when, when))


def timed(env: dict[str, str], *args: str, runs: int = 3) -> tuple[float, str]:
    best, out = float("inf"), ""
    for _ in range(runs):
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "muxhost", *args], env=env, capture_output=True, text=True)
        best = min(best, time.perf_counter() - t0)
        out = r.stdout
        if r.returncode != 0:
            raise SystemExit(f"muxhost {' '.join(args)} exited {r.returncode}: {r.stderr.strip()}")
    return best, out


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        write(home / ".local/share/muxhost-demo/conversations", n)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "MUXHOST_LOAD_PLUGINS": "",
               "MUXHOST_STATE_DIR": str(Path(tmp) / "state"), "MUXHOST_TMUX_SOCKET": f"bench-conv-{os.getpid()}"}
        seconds, out = timed(env, "conversations", "--json")
        print(f"conversations --json, {n} conversations (+{(n + 9) // 10} children): {seconds:.2f}s "
              f"({len(json.loads(out))} rows)")
        seconds, _ = timed(env, "conversations")
        print(f"conversations (the table): {seconds:.2f}s")
        seconds, out = timed(env, "prune", "--older-than", "30d", "--dry-run", "--json")
        print(f"prune --dry-run: {seconds:.2f}s ({len(json.loads(out)['purged'])} would go)")
        seconds, out = timed(env, "prune", "--older-than", "30d", "--yes", "--json", runs=1)
        report = json.loads(out)
        print(f"prune --yes: {seconds:.2f}s ({len(report['purged'])} purged, {report['bytes_freed']} bytes freed, "
              f"{seconds / max(1, len(report['purged'])) * 1000:.0f} ms a purge)")


if __name__ == "__main__":
    main()
