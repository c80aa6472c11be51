"""A real tmux client attached in a pseudo-terminal, for end-to-end tests of key bindings."""

from __future__ import annotations

import os
import shutil
import signal

from muxhost.testing.helpers import wait_for


class TmuxClient:
    """A real tmux client attached in a pseudo-terminal, for end-to-end tests of key bindings:
    ``press(b"\\x02P")`` types, ``wait_text("…")`` waits until the terminal showed it."""

    def __init__(self, socket: str, target: str, env: dict[str, str], cols: int = 200, rows: int = 40):
        import fcntl
        import pty
        import struct
        import termios
        import threading

        tmux = shutil.which("tmux") or "tmux"
        pid, fd = pty.fork()
        if pid == 0:  # the child: set the terminal size, then become the tmux client
            try:
                fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
                os.execve(tmux, [tmux, "-L", socket, "attach-session", "-t", target], env)
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        self._buf = bytearray()
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.fd, 65536)
            except OSError:
                return
            if not data:
                return
            with self._lock:
                self._buf += data

    @property
    def text(self) -> str:
        return self.text_since(0)

    def mark(self) -> int:
        with self._lock:
            return len(self._buf)

    def text_since(self, mark: int) -> str:
        """What the terminal was sent since ``mark``, without escape sequences."""
        import re

        with self._lock:
            raw = bytes(self._buf[mark:]).decode("utf-8", "replace")
        return re.sub(r"\x1b(\[[0-9;?<>=]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[()][A-Z0-9]|[=>78MNOcDEHZ])", "", raw)

    def press(self, data: bytes) -> None:
        os.write(self.fd, data)

    def wait_text(self, text: str, timeout: float = 20.0, since: int = 0) -> str:
        return wait_for(lambda: (lambda t: t if text in t else None)(self.text_since(since)),
                        timeout=timeout, interval=0.02, what=f"{text!r} on the tmux client's terminal")

    def close(self) -> None:
        try:
            os.kill(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        try:
            os.close(self.fd)
        except OSError:
            pass
