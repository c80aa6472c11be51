"""Benchmark `muxhost ls` across hosts: H remote hosts of N demo agents each, over warm connections.

Needs root: a real sshd on 127.0.0.1..127.0.0.H (loopback only; one connection per host) and a second
local user as the other machines (tests/remote_testing.py makes both; each "host" is that user's
muxhost with its own state folder and tmux server). This machine runs N demo agents too. Prints the
median wall time of:

  local     `muxhost ls --json` with no hosts configured (today's ls)
  rtt       one request to one host over its warm connection (ssh + the remote `ls --json`)
  merged    `muxhost ls --json` with the H hosts configured (asked at once)
  dead      the first `ls` with one more host that accepts TCP and never answers (costs hosts.timeout)
  cached    the next `ls` (that host shown offline from cache, not asked)

and merged / (local + rtt) (aim <= 1). Everything it started is ended by pid, the user removed.

usage: sudo python benchmarks/bench_remote.py [-n 20] [--hosts 3] [-r 7] [--timeout 2]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from muxhost.testing import load_module  # noqa: E402

rt = load_module(ROOT / "tests" / "remote_testing.py")


def timed(env: dict, *args: str) -> float:
    t = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "muxhost", *args], env=env, capture_output=True, text=True)
    took = time.monotonic() - t
    if r.returncode != 0:
        raise SystemExit(f"muxhost {' '.join(args)}: {r.returncode} {r.stderr}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=20, help="demo agents per host (and here)")
    ap.add_argument("--hosts", type=int, default=3)
    ap.add_argument("-r", type=int, default=7, help="runs per figure (median)")
    ap.add_argument("--timeout", type=float, default=2.0, help="hosts.timeout")
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench_remote: needs root (an sshd and a second local user)")
    tmp = Path(tempfile.mkdtemp(prefix="mxbr-"))
    user = rt.RemoteUser(f"mxb{secrets.token_hex(3)}", Path("/home"))
    sshd = None
    local_env: dict = {}
    holder = socket.socket()
    try:
        rt.install_muxhost(user)
        key = rt.authorized_key(user, tmp)
        addresses = tuple(f"127.0.0.{i + 1}" for i in range(a.hosts))
        sshd = rt.Sshd(tmp, user.name, key, listen=addresses).start()
        # a host that takes the TCP connection and never says a word
        holder.bind(("127.0.0.1", 0))
        holder.listen(16)
        held = []
        threading.Thread(target=lambda: [held.append(holder.accept()) for _ in iter(int, 1)], daemon=True).start()
        client = tmp / "ssh_config"
        client.write_text(f"Host *\n  Port {sshd.port}\n  User {user.name}\n  IdentityFile {key}\n  IdentitiesOnly yes\n"
                          f"  UserKnownHostsFile {tmp}/known_hosts\n  StrictHostKeyChecking accept-new\n")
        bin_dir = tmp / "bin"
        bin_dir.mkdir()
        (bin_dir / "ssh").write_text(f"#!/bin/sh\nexec /usr/bin/ssh -F {client} \"$@\"\n")
        os.chmod(bin_dir / "ssh", 0o755)
        hosts = []
        for i, address in enumerate(addresses, 1):
            script = user.home / "bin" / f"muxhost-h{i}"
            script.write_text(f"#!/bin/sh\nMUXHOST_STATE_DIR=$HOME/st{i} MUXHOST_TMUX_SOCKET=mxb{i} "
                              f"exec $HOME/bin/muxhost \"$@\"\n")
            os.chmod(script, 0o755)
            hosts.append(f"  h{i}: {{ssh: '{address}', muxhost: '~/bin/muxhost-h{i}'}}\n")
            for j in range(a.n):
                r = user.run(str(script), "launch", "demo", "--name", f"r{i}-{j}")
                assert r.returncode == 0, r.stderr
        home = tmp / "home"
        home.mkdir()
        plain, merged = tmp / "plain.yaml", tmp / "merged.yaml"
        plain.write_text("")
        merged.write_text(f"hosts:\n  timeout: {a.timeout}\n" + "".join(hosts))
        local_env = {"HOME": str(home), "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
                     "TERM": "xterm-256color", "MUXHOST_STATE_DIR": str(tmp / "st"), "MUXHOST_TMUX_SOCKET": f"mxbl-{os.getpid()}",
                     "MUXHOST_CONFIG": str(plain)}
        for j in range(a.n):
            timed(local_env, "launch", "demo", "--name", f"l{j}")
        with_hosts = dict(local_env, MUXHOST_CONFIG=str(merged))
        timed(with_hosts, "ls", "--json")  # warm: one master connection per host
        local = statistics.median(timed(local_env, "ls", "--json") for _ in range(a.r))
        snippet = ("import sys, time, statistics; from muxhost.remote import hosts, transport;"
                   "t = hosts.load(); h = t.get('h1'); out = []\n"
                   f"for _ in range({a.r}):\n s = time.monotonic(); x = transport.ask(h, ['ls', '--json'], 10);"
                   " out.append(time.monotonic() - s); assert x.ok, x.reason\n"
                   "print(statistics.median(out), len(x.doc))")
        r = subprocess.run([sys.executable, "-c", snippet], env=with_hosts, capture_output=True, text=True, check=True)
        rtt, count = float(r.stdout.split()[0]), int(r.stdout.split()[1])
        assert count == a.n, count
        merged_s = statistics.median(timed(with_hosts, "ls", "--json") for _ in range(a.r))
        dead_cfg = tmp / "dead.yaml"
        dead_cfg.write_text(merged.read_text() + f"  dead: {{ssh: 'ssh://nobody@127.0.0.1:{holder.getsockname()[1]}'}}\n")
        with_dead = dict(local_env, MUXHOST_CONFIG=str(dead_cfg))
        dead = timed(with_dead, "ls")
        cached = statistics.median(timed(with_dead, "ls") for _ in range(a.r))
        print(f"ls across {a.hosts} hosts of {a.n} demo agents each (+{a.n} here), median of {a.r}, warm connections:")
        print(f"  local   {local * 1000:7.0f} ms   (no hosts configured)")
        print(f"  rtt     {rtt * 1000:7.0f} ms   (one request to one host: ssh + its ls --json)")
        print(f"  merged  {merged_s * 1000:7.0f} ms   -> merged / (local + rtt) = {merged_s / (local + rtt):.2f} (aim <= 1)")
        print(f"  dead    {dead * 1000:7.0f} ms   (first ls with a host that never answers; hosts.timeout {a.timeout:g} s)")
        print(f"  cached  {cached * 1000:7.0f} ms   (the next ls: that host offline from cache)")
    finally:
        holder.close()
        from muxhost.remote.transport import socket_folder

        # this run's shared connections only (the /tmp/muxhost-ssh-UID fallback is shared with every
        # other muxhost of this user: its sockets are not ours to end)
        for ctl in socket_folder(Path(os.path.realpath(tmp / "st"))).glob("*"):
            if ctl.is_socket():
                subprocess.run(["/usr/bin/ssh", "-o", f"ControlPath={ctl}", "-O", "exit", "x"], capture_output=True)
        if local_env:
            subprocess.run(["tmux", "-L", local_env["MUXHOST_TMUX_SOCKET"], "kill-server"], capture_output=True)
        for i in range(1, a.hosts + 1):
            user.run("tmux", "-L", f"mxb{i}", "kill-server")
        if sshd is not None:
            sshd.stop()
        user.remove()
        subprocess.run(["rm", "-rf", str(tmp)])


if __name__ == "__main__":
    main()
