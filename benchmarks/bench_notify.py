"""Benchmark the watch's notifications: what they add to a pass, with a channel that answers and one
that hangs.

N agents (default 100) on the fake backend (muxhost.testing.fake: panes are `sh` processes, in this
process, no tmux) whose plugin answer flips between working and waiting every pass, so every pass
has N changes. It times M passes (default 20) of the real watch pass (Watch.step) three ways: no
notify.urls; a channel that answers (an HTTP sink on 127.0.0.1, apprise's json://); a channel that
takes each request and never answers. It prints the median and the slowest pass of each, the notifier's
own part of a pass (judging the changes, the waiting agents' screens, the enqueueing), and how
many messages the answering sink got (one a pass, whatever N). Aim: the hanging channel adds
nothing to a pass (the pass only enqueues).

Everything it started (the panes' processes, the sinks) is ended at the end.

usage: python benchmarks/bench_notify.py [-n 100] [--passes 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def sink(hang: threading.Event | None):
    """An HTTP server on 127.0.0.1 that counts what is posted (or holds every request while ``hang``
    is not set); returns (server, its json:// URL, the count)."""
    count = [0]

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if hang is not None:
                hang.wait(120)
            count[0] += 1
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"json://127.0.0.1:{server.server_address[1]}/hook?rto=120", count


def timed(saw, spent: list[float]):
    """``saw``, adding the seconds each call takes to ``spent``."""
    def wrapper(*args):
        t0 = time.perf_counter()
        try:
            return saw(*args)
        finally:
            spent.append(time.perf_counter() - t0)
    return wrapper


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=100, help="agents (default 100)")
    ap.add_argument("--passes", type=int, default=20, help="passes timed each way (default 20)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="muxhost-bench-notify-"))
    os.environ.update(HOME=str(tmp), MUXHOST_STATE_DIR=str(tmp / "state"), MUXHOST_CONFIG=str(tmp / "none.yaml"))
    from muxhost import notify
    from muxhost.agent import Agent, Launch
    from muxhost.config import NOTIFY_EVENTS
    from muxhost.testing.fake import fake_host
    from muxhost.watching import Watch

    if notify.load_apprise() is None:
        raise SystemExit(notify.INSTALL)

    class Flipper(Agent):
        name, id_pattern, process_names, exit_text = "flipper", r"[0-9a-f]{32}", ("sh",), None

        def launch(self, ctx):
            return Launch(["sh", "-c", "echo ready; echo 'go ahead? (y/n)'; exec cat"])

        def activity(self, ctx, screen):
            return (Path(ctx.cwd) / "state").read_text()

    import muxhost.launching

    muxhost.launching.UP_SETTLE = 0.0
    host = fake_host(tmp / "state", [Flipper()])
    hang = threading.Event()
    servers = []
    try:
        cwds = []
        for i in range(args.n):
            cwds.append(tmp / f"a{i}")
            cwds[-1].mkdir()
            (cwds[-1] / "state").write_text("working")
            host.launch("flipper", cwd=str(cwds[-1]))
        print(f"{args.n} agents, every one changing every pass; {args.passes} passes each way")
        for label, hanging in (("no notify.urls", None), ("a channel that answers", False),
                               ("a channel that hangs", True)):
            w = Watch(host, 1.0, 600.0, False)
            count, spent = [0], []
            if hanging is not None:
                server, url, count = sink(hang if hanging else None)
                servers.append(server)
                w.notifier = notify.Notifier([url], list(NOTIFY_EVENTS), 0.0, 600.0, lambda line: None, host="bench")
                w.notifier.saw = timed(w.notifier.saw, spent)
            w.step()
            times = []
            for k in range(args.passes):
                for cwd in cwds:
                    (cwd / "state").write_text("waiting" if k % 2 == 0 else "working")
                t0 = time.perf_counter()
                changes = w.step()
                times.append(time.perf_counter() - t0)
                if os.environ.get("PROFILE_SAW") and w.notifier is not None:
                    t1 = time.perf_counter(); w.notifier.saw([], 0, None, None); print("saw", time.perf_counter()-t1)
                assert len(changes) == args.n, len(changes)
            if w.notifier is not None and not hanging:
                w.notifier.close(30)
            got = f"; the sink got {count[0]} message(s)" if hanging is False else ""
            its = f" (the notifier's part: median {1000 * statistics.median(spent[1:]):.1f} ms)" if spent else ""
            print(f"  {label:24s} median {1000 * statistics.median(times):6.1f} ms a pass{its}, "
                  f"slowest {1000 * max(times):6.1f} ms{got}")
        return 0
    finally:
        hang.set()
        for server in servers:
            server.shutdown()
            server.server_close()
        host.fake.close()
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
