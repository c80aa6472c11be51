"""A test agent that will not go quietly: it ignores /exit, SIGHUP and SIGTERM, and starts a
grandchild that calls setsid (leaving the pane's session) and also ignores SIGTERM.

usage: stubborn.py PIDFILE — writes "agent_pid child_pid grandchild_pid" to PIDFILE when ready.
"""
import os
import signal
import sys
import time

signal.signal(signal.SIGHUP, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
pidfile = sys.argv[1]

r, w = os.pipe()
child = os.fork()
if child == 0:
    # the child: starts the grandchild, then idles (ignoring SIGTERM/SIGHUP like its parent)
    os.close(r)
    grandchild = os.fork()
    if grandchild == 0:
        os.setsid()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        while True:
            time.sleep(1)
    os.write(w, f"{os.getpid()} {grandchild}".encode())
    os.close(w)
    while True:
        time.sleep(1)
os.close(w)
pids = os.read(r, 100).decode()
with open(pidfile + ".tmp", "w") as f:
    f.write(f"{os.getpid()} {pids}")
os.replace(pidfile + ".tmp", pidfile)
print("stubborn agent ready; /exit does nothing here")
while True:
    try:
        line = input("stubborn> ")
    except EOFError:
        time.sleep(1)
        continue
    print(f"ignoring {line!r}")
