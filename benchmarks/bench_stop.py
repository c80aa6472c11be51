"""Benchmark `muxhost stop`: many ladders at once with the default graces, zero survivors; and
each real agent CLI's exit time.

Starts N agents (default 50) on a private tmux socket with a temp HOME and state dir and a config
that sets no grace (the defaults), stops them all with one `muxhost stop --all --json`, and prints
the wall time, the outcomes and the survivors (which must be none). Then each real CLI found
(claude, codex, opencode: $MUXHOST_AGENT_BIN_DIR, ./dev's npm folder, else PATH) against the plugins'
fake model servers, R times each (default 3), one at a time: `muxhost stop` after its prompt shows,
and the ladder's seconds (exit text typed to every process gone; its 0.5 s pause included) and
outcome (which must be `exit`). Rounds:

  cooperative  N demo agents: each leaves on /exit          (aim: <= 3 s wall)
  stubborn     N hung agents: they ignore /exit, SIGHUP and SIGTERM, each with a setsid
               grandchild                                    (aim: <= 4 s wall)
  real         each real CLI, R times                        (aim: outcome exit every time)

Everything it started is ended by pid at the end.

usage: python benchmarks/bench_stop.py [-n 50] [-r 3] [--only cooperative|stubborn|real] [--cli NAME]...
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
while True:  # (like any prompt: a line that is no command gets the prompt again)
    try:
        input("stubborn> ")
    except EOFError:
        time.sleep(1)
"""

ROOT = Path(__file__).resolve().parent.parent
READY = {"claude": ("shift+tab to cycle",), "codex": ("? for shortcuts", "Ask Codex to do anything"),
         "opencode": ("ctrl+p commands",)}


def _env(tmp: Path, name: str, config: Path) -> tuple[dict, str, Path]:
    """The CLI's environment for one round (private socket, HOME, state dir), its socket, its state dir."""
    socket = f"muxhost-bench-stop-{os.getpid()}-{name}"
    state = tmp / f"state-{name}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMUX", "MUXHOST_", "XDG_"))}
    env.update(HOME=str(tmp / "home"), MUXHOST_STATE_DIR=str(state), MUXHOST_TMUX_SOCKET=socket,
               MUXHOST_CONFIG=str(config), MUXHOST_LOAD_PLUGINS="")
    return env, socket, state


def _end(state: Path, socket: str) -> None:
    """End by pid whatever the round's records started, and its tmux server."""
    from muxhost import procs
    from muxhost.store import Store

    os.environ["MUXHOST_STATE_DIR"] = str(state)
    table = procs.ProcessTable.snapshot()
    if (state / "state.db").exists():
        for rec in Store(state / "state.db").all():
            for q in procs.marked(rec.id, table):
                procs.signal_if_same(q.pid, q.create_time, signal.SIGKILL)
    subprocess.run(["tmux", "-L", socket, "kill-server"], stderr=subprocess.DEVNULL)


def run_round(kind: str, n: int, tmp: Path) -> tuple[float, float, Counter, list[int]]:
    """One round: (wall seconds of the stop, the slowest ladder's own seconds, outcomes, survivors)."""
    from muxhost import procs

    script = tmp / "stubborn.py"
    script.write_text(STUBBORN)
    config = tmp / f"config-{kind}.yaml"
    config.write_text(  # no stop: section: the default graces
        f"agents:\n  stubborn:\n    command: [{sys.executable}, {script}]\n    process_names: [stubborn.py]\n")
    env, socket, state = _env(tmp, kind, config)
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
        stopped = json.loads(p.stdout or "[]")
        outcomes = Counter(r.get("outcome", "error") for r in stopped)
        ladder = max((r.get("seconds") or 0.0 for r in stopped), default=0.0)
        table = procs.ProcessTable.snapshot()
        seen = {p.key for p in table.procs.values() if p.pid in pids}
        seen |= {q.key for r in before for q in procs.marked(r["id"], table)}
        survivors = sorted(pid for pid, _ in procs.alive(seen))  # zombies are not survivors
        return wall, ladder, outcomes, survivors
    finally:
        _end(state, socket)


def _binary(name: str) -> str | None:
    import shutil

    for folder in (os.environ.get("MUXHOST_AGENT_BIN_DIR"), str(Path.home() / ".cache/muxhost/npm/node_modules/.bin")):
        if folder and os.access(os.path.join(folder, name), os.X_OK):
            return os.path.join(folder, name)
    return shutil.which(name)


def _world(name: str, binary: str, env: dict, work: Path, tmp: Path):
    """Point ``env`` at the plugin's fake model server (from its tests' conftest) and seed what the
    CLI needs to start without questions; returns the server's stop function."""
    from muxhost.testing import load_module

    fakes = load_module(ROOT / "plugins" / name / "tests" / "conftest.py")
    env["PATH"] = os.path.dirname(binary) + os.pathsep + env.get("PATH", os.defpath)
    env.setdefault("npm_config_cache", os.path.join(os.path.expanduser("~"), ".npm"))
    if name == "claude":
        srv = fakes.FakeAnthropic().start()
        fakes.seed_home(Path(env["HOME"]), [str(work)])
        (tmp / "ctmp").mkdir(exist_ok=True)
        env.update(fakes.claude_env(srv.url), CLAUDE_CODE_TMPDIR=str(tmp / "ctmp"))
        return srv.stop
    if name == "codex":
        srv = fakes.FakeResponses().start()
        cx = fakes.Codex(binary, Path(env["HOME"]), srv, env)
        cx.configure(work)
        env.update({k: cx.env[k] for k in ("PATH", "CODEX_HOME", "FAKE_API_KEY")})
        return srv.stop
    srv = fakes.FakeOpenAI()
    cfg = Path(env["HOME"]) / ".config" / "opencode" / "opencode.json"
    cfg.parent.mkdir(parents=True, exist_ok=True)
    cfg.write_text(json.dumps(srv.config, indent=1))
    env.update(fakes.OPENCODE_ENV)
    return srv.close


def _wait_screen(socket: str, pane: str, marks: tuple[str, ...], timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        screen = subprocess.run(["tmux", "-L", socket, "capture-pane", "-p", "-t", pane], capture_output=True,
                                text=True).stdout
        if any(m in screen for m in marks):
            return
        time.sleep(0.1)
    raise RuntimeError(f"not ready after {timeout:.0f} s: {screen[-400:]}")


def real_round(name: str, binary: str, repeats: int, tmp: Path) -> list[tuple[str, float]]:
    """``repeats`` launches and stops of the real CLI ``name``: each stop's (outcome, seconds)."""
    root = tmp / f"real-{name}"
    work = root / "work"
    work.mkdir(parents=True)
    config = root / "config.yaml"
    config.write_text("")  # the defaults
    env, socket, state = _env(root, name, config)
    env["HOME"] = str(root / "home")
    (root / "home").mkdir()
    del env["MUXHOST_LOAD_PLUGINS"]  # (the agent plugins are what is measured)
    stop_server = _world(name, binary, env, work, root)
    py, out = sys.executable, []
    try:
        for _ in range(repeats):
            rec = json.loads(subprocess.run([py, "-m", "muxhost", "launch", name, "--cwd", str(work), "--json"],
                                            env=env, check=True, capture_output=True, text=True).stdout)
            _wait_screen(socket, rec["pane"], READY[name])
            time.sleep(1.0)  # (a prompt that just showed may still be settling)
            p = subprocess.run([py, "-m", "muxhost", "stop", rec["id"], "--json"], env=env, capture_output=True,
                               text=True)
            r = json.loads(p.stdout) if p.returncode == 0 else {"outcome": f"error: {p.stderr.strip()}", "seconds": 0}
            out.append((r["outcome"], r["seconds"]))
    finally:
        _end(state, socket)
        stop_server()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=50, help="agents per round (default 50)")
    ap.add_argument("-r", type=int, default=3, help="stops of each real CLI (default 3)")
    ap.add_argument("--only", choices=("cooperative", "stubborn", "real"))
    ap.add_argument("--cli", action="append", choices=("claude", "codex", "opencode"),
                    help="the real CLIs to stop (default: every one installed)")
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
        wall, ladder, outcomes, survivors = run_round(kind, args.n, tmp)
        aim = 3.0 if kind == "cooperative" else 4.0
        print(f"{kind:12} {args.n} agents: stop --all {wall:5.2f} s wall (aim <= {aim:.1f} s; the slowest "
              f"ladder {ladder:.2f} s)  "
              f"outcomes {dict(outcomes)}  survivors {len(survivors)}  load {os.getloadavg()[0]:.1f}", flush=True)
        bad |= bool(survivors)
    for name in args.cli or ("claude", "codex", "opencode"):
        if args.only not in (None, "real"):
            break
        binary = _binary(name)
        if binary is None:
            print(f"{name:12} not installed: skipped")
            continue
        stops = real_round(name, binary, args.r, tmp)
        seconds = sorted(s for _, s in stops)
        print(f"{name:12} {len(stops)} stops: /exit to gone {seconds[0]:.2f}-{seconds[-1]:.2f} s "
              f"(median {seconds[len(seconds) // 2]:.2f})  outcomes {dict(Counter(o for o, _ in stops))}  "
              f"load {os.getloadavg()[0]:.1f}", flush=True)
        bad |= any(o != "exit" for o, _ in stops)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
