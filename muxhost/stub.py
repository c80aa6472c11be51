"""The stub an asleep agent's pane shows (``muxhost sleep``): one line that says which conversation
sleeps there and since when, and Enter to wake it.

It runs as the pane's command through the launcher (``python -I -S …/stub.py TEXT -- WAKE…``), so
it costs a few MB instead of the agent's hundreds: it imports only ``os`` and ``sys``.

Enter runs ``WAKE…`` (``python -m muxhost … wake RECORD``) in a new session of its own, so that
when the wake replaces this pane's process (tmux ``respawn-pane -k`` ends the pane's process
group) the wake itself lives on to finish. If the wake fails (the conversation was purged
meanwhile, the agent is no longer installed), its message is shown here and Enter tries again.
"""

from __future__ import annotations

import os
import sys

import _signal  # (the C module: `signal` would import enum)

#: the keys a user may press in the pane by habit: Ctrl-C, Ctrl-\ and Ctrl-Z would end (or stop) the
#: stub and leave the asleep record in a dead pane that Enter no longer wakes
_IGNORED = (_signal.SIGINT, _signal.SIGQUIT, _signal.SIGTSTP)


def _wake(argv: list[str]) -> tuple[int, str]:
    """Run the wake in its own session; its exit status and what it said on stderr."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a session of its own, stdout to /dev/null, stderr to the pipe
        try:
            for sig in _IGNORED:  # the wake is muxhost: its own Ctrl-C handling again
                _signal.signal(sig, _signal.SIG_DFL)
            os.setsid()
            os.close(read_end)
            null = os.open(os.devnull, os.O_RDWR)
            os.dup2(null, 0)
            os.dup2(null, 1)
            os.dup2(write_end, 2)
            os.execvp(argv[0], argv)
        finally:
            os._exit(127)
    os.close(write_end)
    chunks = []
    while True:
        chunk = os.read(read_end, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status >> 8
    return code, b"".join(chunks).decode(errors="replace").strip()


def main(args: list[str]) -> int:
    cut = args.index("--") if "--" in args else len(args)
    text, wake = " ".join(args[:cut]), args[cut + 1:]
    for sig in _IGNORED:
        _signal.signal(sig, _signal.SIG_IGN)
    out = sys.stdout
    out.write("\033[2J\033[H" + text + "\n")
    out.flush()
    while True:
        try:
            line = sys.stdin.readline()
        except KeyboardInterrupt:
            continue
        if not line:  # no terminal any more: nothing to wait for
            return 0
        if not wake:
            continue
        out.write("waking...\n")
        out.flush()
        code, said = _wake(wake)
        # (a wake that worked replaced this process before it got here)
        out.write((said or f"the wake ended with status {code}") + "\n\nEnter tries again.\n")
        out.flush()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
