"""A fake herdr server for muxhost's tests: herdr 0.8.2's socket API (protocol 20) as herdr answers
it, over real pseudo-terminals running the user's shell. Standard library and psutil only.

usage: herdr_fake.py SOCKET [--protocol N] [--log FILE] [--violations FILE]

As herdr 0.8.2 does it (read from its source):

- newline-delimited JSON on a Unix socket (mode 0600), ONE request per connection: one line read,
  one line answered, the connection closed; an unparsable request is answered with id ``""`` and
  ``invalid_request``. ``ping`` answers ``pong`` with ``--protocol`` (default 20) and a field this
  protocol does not have (clients are to ignore unknown fields).
- EVERY request and EVERY response is checked against herdr-api.schema.json (beside this file): a
  request that breaks it is answered ``invalid_request`` (as herdr's parser would refuse it), and
  every violation, of either side, is written to ``--violations`` for the test to fail on.
- It starts with no workspace. Ids are ``w1``, ``w1:t1``, ``w1:p1`` (numbers in herdr's base 32:
  ``w9``, ``wA``, …), never reused. ``tab.create`` with no workspace answers ``workspace_not_found``
  "no active workspace".
- A pane runs ``$SHELL`` (else /bin/sh), non-login, in its own session, on a real pty of 200x50. Its
  environment is the server's plus the request's ``env``, then ``HERDR_ENV``, ``HERDR_SOCKET_PATH``,
  ``HERDR_BIN_PATH``, ``HERDR_WORKSPACE_ID``/``TAB_ID``/``PANE_ID``, ``TERM=xterm-256color``,
  ``COLORTERM=truecolor``. A cwd that is not a directory silently becomes ``$HOME``.
- When a pane's shell exits the pane is removed; the last pane of a tab takes the tab with it, the
  last tab its workspace. herdr keeps no dead pane.
- ``pane.close`` / ``tab.close``: SIGHUP, SIGTERM, SIGKILL 250 ms apart to the processes of the
  pane shell's session (no further once they are gone), then the answer. setsid children survive.
- ``pane.read``: the text of a small terminal emulation (the output kept, escape sequences
  stripped, cursor moves and line erases applied); ``strip_ansi`` is ignored.
- ``pane.process_info``: ``shell_pid`` and the members of the pty's foreground process group
  (``os.tcgetpgrp`` on the master, then psutil).
- ``pane.send_input`` wraps its text in bracketed paste while the program has that mode on;
  ``pane.send_text`` writes the text as it is; key names are parsed as herdr parses them (an
  unknown one fails the whole request: nothing is typed).
- ``pane.report_metadata``: tokens kept per pane (``PaneInfo.tokens``; 16 per report, 32 per pane,
  with herdr's checks), ``title`` and ``display_agent`` shown in ``PaneInfo``.
- ``pane.report_agent_session``: kept only for herdr's own ``herdr:<agent>`` sources.

``--log`` gets one JSON line per request, written before the answer: ``{"method", "params", "error"}``
(tests count requests and see what was typed).
"""

from __future__ import annotations

import argparse
import codecs
import fcntl
import json
import os
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
import schema_check  # noqa: E402  (beside this file)

SCHEMA = Path(__file__).resolve().parent / "herdr-api.schema.json"
VERSION = "0.8.2"
ROWS, COLS = 50, 200
KEEP_LINES = 5000
# the pane's shell starts through this: the pty becomes its controlling terminal, then it execs
# the shell (same pid); subprocess's setsid() runs before, in C, so forking from threads is safe
CTTY = "import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); os.execv(sys.argv[1], sys.argv[1:])"


ALPHABET = "123456789ABCDEFGHJKMNPQRSTVWXYZ0"  # herdr's public id numbers: 1..9, A.., then 11


def public_number(value: int) -> str:
    """herdr's workspace::encode_public_number (bijective base 32)."""
    out = ""
    while value > 0:
        out = ALPHABET[(value - 1) % len(ALPHABET)] + out
        value = (value - 1) // len(ALPHABET)
    return out or "0"


class ApiError(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message


# -- a small terminal -----------------------------------------------------------------------------
class Screen:
    """Enough of a terminal to read back what a shell and a TUI printed: a grid of lines with a
    cursor; CR, LF, BS, TAB, cursor moves (CUU/CUD/CUF/CUB/CUP/CHA), erase in line and display,
    DECSET 2004 (bracketed paste); every other escape sequence is dropped."""

    def __init__(self, rows: int = ROWS, cols: int = COLS):
        self.rows, self.cols = rows, cols
        self.lines: list[list[str]] = [[]]
        self.row = self.col = 0
        self.bracketed_paste = False
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._esc = ""  # an escape sequence being read
        self.revision = 0

    def feed(self, data: bytes) -> None:
        self.revision += 1
        for ch in self._decoder.decode(data):
            if self._esc:
                self._escape(ch)
            elif ch == "\x1b":
                self._esc = ch
            elif ch == "\r":
                self.col = 0
            elif ch == "\n":
                self._down(1)
            elif ch == "\b":
                self.col = max(0, self.col - 1)
            elif ch == "\t":
                self.col = min(self.cols - 1, (self.col // 8 + 1) * 8)
            elif ch >= " " and ch != "\x7f":
                self._put(ch)

    def _escape(self, ch: str) -> None:
        seq = self._esc + ch
        if len(seq) == 2:
            if ch in "[]PX^_":  # CSI, OSC, DCS, SOS, PM, APC: read on
                self._esc = seq
            elif ch in "()*+#%":  # charset selection and the like: one more character
                self._esc = seq
            else:
                self._esc = ""
            return
        kind = seq[1]
        if kind == "[":
            if "@" <= ch <= "~":
                self._esc = ""
                self._csi(seq[2:-1], ch)
            else:
                self._esc = seq
        elif kind in "]PX^_":
            if ch == "\x07" or seq.endswith("\x1b\\"):
                self._esc = ""
            else:
                self._esc = seq[-4096:]
        else:
            self._esc = ""

    def _csi(self, params: str, final: str) -> None:
        private = params.startswith("?")
        nums = [int(n) if n.isdigit() else 0 for n in params.lstrip("?>=").split(";")] if params else []
        n = nums[0] if nums and nums[0] else 1
        if private and final in "hl" and 2004 in nums:
            self.bracketed_paste = final == "h"
        elif private:
            return
        elif final == "A":
            self.row = max(self._top(), self.row - n)
        elif final == "B":
            self._down(n)
        elif final == "C":
            self.col = min(self.cols - 1, self.col + n)
        elif final == "D":
            self.col = max(0, self.col - n)
        elif final == "G":
            self.col = min(self.cols - 1, n - 1)
        elif final in "Hf":
            r = nums[0] if nums and nums[0] else 1
            c = nums[1] if len(nums) > 1 and nums[1] else 1
            self.row = self._top() + r - 1
            while len(self.lines) <= self.row:
                self.lines.append([])
            self.col = min(self.cols - 1, c - 1)
        elif final == "K":
            line = self.lines[self.row]
            mode = nums[0] if nums else 0
            if mode == 0:
                del line[self.col:]
            elif mode == 1:
                line[:self.col + 1] = [" "] * min(len(line), self.col + 1)
            else:
                line.clear()
        elif final == "J":
            mode = nums[0] if nums else 0
            if mode == 0:
                del self.lines[self.row][self.col:]
                del self.lines[self.row + 1:]
            elif mode in (2, 3):  # the screen scrolls up into the history, a blank one below
                top = len(self.lines)
                self.lines.extend([] for _ in range(self.rows))
                self.row = top + (self.row - self._top(top))
                self._trim()

    def _top(self, total: int | None = None) -> int:
        return max(0, (len(self.lines) if total is None else total) - self.rows)

    def _down(self, n: int) -> None:
        self.row += n
        while len(self.lines) <= self.row:
            self.lines.append([])
        self._trim()

    def _put(self, ch: str) -> None:
        if self.col >= self.cols:
            self.col = 0
            self._down(1)
        line = self.lines[self.row]
        if len(line) < self.col:
            line.extend(" " * (self.col - len(line)))
        if self.col < len(line):
            line[self.col] = ch
        else:
            line.append(ch)
        self.col += 1

    def _trim(self) -> None:
        extra = len(self.lines) - KEEP_LINES
        if extra > 0:
            del self.lines[:extra]
            self.row -= extra

    def text(self, source: str, lines: int | None) -> tuple[str, bool]:
        rendered = ["".join(line).rstrip() for line in self.lines]
        while rendered and not rendered[-1]:
            rendered.pop()
        if source in ("visible", "detection"):
            rows = rendered[self._top():]
            limit = lines
        else:  # recent, recent_unwrapped: the last rows, scrollback included
            rows = rendered
            limit = min(lines, 1000) if lines is not None else 80
        truncated = limit is not None and len(rows) > limit
        if limit is not None:
            rows = rows[max(0, len(rows) - limit):] if limit else []
        return "".join(r + "\n" for r in rows), truncated


# -- keys as herdr's api_helpers.rs / config::parse_key_combo parse them ---------------------------
_NAMED = {"space": " ", "enter": "\r", "return": "\r", "esc": "\x1b", "escape": "\x1b", "tab": "\t",
          "backspace": "\x7f", "bs": "\x7f", "left": "\x1b[D", "right": "\x1b[C", "up": "\x1b[A",
          "down": "\x1b[B", "minus": "-", "comma": ",", "period": ".", "slash": "/", "backslash": "\\",
          "quote": "'", "double_quote": '"', "double-quote": '"', "semicolon": ";", "colon": ":",
          "percent": "%", "ampersand": "&", "backtick": "`", "plus": "+"}
_MODIFIERS = {"ctrl": "ctrl", "control": "ctrl", "alt": "alt", "option": "alt", "meta": "alt", "shift": "shift"}


def encode_key(name: str) -> bytes | None:
    name = {"C-c": "ctrl+c", "c-c": "ctrl+c", "+": "plus"}.get(name.strip(), name.strip())
    mods, key = set(), None
    for part in name.split("+"):
        part = part.strip()
        if not part:
            return None
        if part.lower() in _MODIFIERS:
            mods.add(_MODIFIERS[part.lower()])
        elif key is not None:
            return None
        else:
            key = part
    if key is None:
        return None
    low = key.lower()
    if low in _NAMED:
        out = _NAMED[low]
        if low == "tab" and "shift" in mods:
            out = "\x1b[Z"
    elif len(key) == 1:
        out = key.upper() if "shift" in mods else key
        if "ctrl" in mods and out.isalpha():
            out = chr(ord(out.lower()) & 0x1F)
    elif re.fullmatch(r"f\d{1,2}", low):
        out = "\x1bO" + "PQRS"[int(low[1:]) - 1] if 1 <= int(low[1:]) <= 4 else "\x1b[%d~" % (int(low[1:]) + 10)
    else:
        return None
    if "alt" in mods:
        out = "\x1b" + out
    return out.encode()


# -- workspaces, tabs, panes ----------------------------------------------------------------------
class Workspace:
    def __init__(self, number: int, label: str):
        self.id, self.number, self.label = f"w{public_number(number)}", number, label
        self.tabs: list[Tab] = []
        self.active_tab: Tab | None = None
        self.next_tab = self.next_pane = 1
        self.tokens: dict[str, str] = {}


class Tab:
    def __init__(self, ws: Workspace, label: str | None):
        self.ws, self.number = ws, ws.next_tab
        ws.next_tab += 1
        self.id = f"{ws.id}:t{public_number(self.number)}"
        self.label = label or str(self.number)
        self.panes: list[Pane] = []
        self.focused: Pane | None = None


class Pane:
    def __init__(self, fake: "Fake", tab: Tab, cwd: str, extra_env: dict[str, str]):
        ws = tab.ws
        self.fake, self.tab = fake, tab
        self.id = f"{ws.id}:p{public_number(ws.next_pane)}"
        ws.next_pane += 1
        fake.terminals += 1
        self.terminal_id = f"term_{fake.terminals}"
        self.screen = Screen()
        self.tokens: dict[str, tuple[str, float | None]] = {}  # name -> (value, expires at)
        self.title: str | None = None
        self.display_agent: str | None = None
        self.agent_session: dict[str, str] | None = None
        self.revision = 0
        self.gone = False
        env = dict(fake.env)
        env.pop("CODEX_THREAD_ID", None)
        env.update(extra_env)
        env.update(HERDR_ENV="1", HERDR_SOCKET_PATH=fake.socket_path, HERDR_BIN_PATH=os.path.abspath(__file__),
                   HERDR_WORKSPACE_ID=ws.id, HERDR_TAB_ID=tab.id, HERDR_PANE_ID=self.id,
                   TERM="xterm-256color", COLORTERM="truecolor")
        home = fake.env.get("HOME") or "/"
        self.cwd = cwd if cwd and os.path.isdir(cwd) else home  # herdr: silently $HOME
        shell = fake.env.get("SHELL") or "/bin/sh"
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
        try:
            self.proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", CTTY, shell], stdin=slave, stdout=slave,
                                         stderr=slave, cwd=self.cwd, env=env, start_new_session=True)
        finally:
            os.close(slave)
        self.master = master
        self.shell_pid = self.proc.pid
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._wait, daemon=True).start()

    def _read(self) -> None:
        while not self.gone:
            try:
                ready, _, _ = select.select([self.master], [], [], 0.1)
                if not ready:
                    continue
                data = os.read(self.master, 65536)
            except OSError:
                break
            if not data:
                break
            with self.fake.lock:
                self.screen.feed(data)
        with self.fake.lock:
            if self.master >= 0:
                os.close(self.master)
                self.master = -1

    def _wait(self) -> None:
        self.proc.wait()
        with self.fake.lock:
            self.fake.remove(self)

    def write(self, data: bytes) -> None:
        if self.gone or self.master < 0:
            raise ApiError("pane_send_failed", "pane is closed")
        os.write(self.master, data)

    def session(self) -> list[psutil.Process]:
        """The processes of the pane shell's session (herdr: platform::session_processes)."""
        out = []
        for p in psutil.process_iter():
            try:
                if os.getsid(p.pid) == self.shell_pid:
                    out.append(p)
            except OSError:
                continue
        return out or [p for p in [_process(self.shell_pid)] if p is not None]

    def shutdown(self) -> None:
        """HUP, TERM, KILL 250 ms apart to the shell's session, as herdr's shutdown_pane_processes."""
        procs = self.session()
        for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGKILL):
            for p in procs:
                try:
                    p.send_signal(sig)
                except psutil.Error:
                    pass
            _, procs = psutil.wait_procs(procs, timeout=0.25)
            procs = [p for p in procs if _running(p)]
            if not procs:
                return

    def foreground(self) -> tuple[int | None, list[dict[str, Any]]]:
        try:
            pgid = os.tcgetpgrp(self.master)
        except OSError:
            return None, []
        members = []
        for p in psutil.process_iter(["pid", "name", "cmdline"]):
            try:
                if os.getpgid(p.pid) != pgid or not _running(p):
                    continue
                argv = list(p.info["cmdline"] or [])
                try:
                    cwd = p.cwd()
                except psutil.Error:
                    cwd = None
                members.append({"pid": p.pid, "name": p.info["name"] or "", "argv": argv,
                                "argv0": argv[0] if argv else None, "cmdline": " ".join(argv), "cwd": cwd})
            except (OSError, psutil.Error):
                continue
        return pgid, sorted(members, key=lambda m: m["pid"])

    def live_tokens(self) -> dict[str, str]:
        now = time.monotonic()
        return {k: v for k, (v, until) in self.tokens.items() if until is None or until > now}


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


def _running(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


# -- the server -----------------------------------------------------------------------------------
class Fake:
    def __init__(self, socket_path: str, protocol: int, log: str | None, violations: str | None):
        self.socket_path = os.path.abspath(socket_path)
        self.protocol = protocol
        self.log_path, self.violations_path = log, violations
        self.env = dict(os.environ)
        self.lock = threading.RLock()
        self.workspaces: list[Workspace] = []
        self.active: Workspace | None = None
        self.next_workspace = 1
        self.terminals = 0
        self.document = json.loads(SCHEMA.read_text())
        self.checker = schema_check.Checker(self.document)
        self.stopping = threading.Event()

    # ---- plumbing
    def serve(self) -> None:
        try:
            os.unlink(self.socket_path)
        except FileNotFoundError:
            pass
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(self.socket_path)
        os.chmod(self.socket_path, 0o600)
        sock.listen(64)
        sock.settimeout(0.2)
        while not self.stopping.is_set():
            try:
                conn, _ = sock.accept()
            except socket.timeout:
                continue
            threading.Thread(target=self.connection, args=(conn,), daemon=True).start()
        sock.close()
        try:
            os.unlink(self.socket_path)
        except FileNotFoundError:
            pass

    def connection(self, conn: socket.socket) -> None:
        """One request, one answer, then the connection is closed (a second line is never read)."""
        with conn:
            conn.settimeout(5)
            data = b""
            try:
                while b"\n" not in data and len(data) < 1 << 20:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
            except OSError:
                return
            line = data.split(b"\n", 1)[0].strip()
            if not line:
                return
            response = self.answer(line)
            problems = self.checker.errors(self.document["schemas"]["error_response" if "error" in response
                                                                      else "success_response"], response)
            if problems:
                self.violation("response", response, problems)
            try:
                conn.sendall(json.dumps(response).encode() + b"\n")
            except OSError:
                pass

    def answer(self, line: bytes) -> dict[str, Any]:
        try:
            request = json.loads(line)
        except ValueError as e:
            return _error("", "invalid_request", f"invalid request: {e}")
        problems = self.checker.errors(self.document["schemas"]["request"], request)
        if problems:
            self.violation("request", request, problems)
            rid = request.get("id") if isinstance(request, dict) and isinstance(request.get("id"), str) else ""
            return _error(rid, "invalid_request", "invalid request: " + "; ".join(problems[-2:]))
        method, params = request["method"], request["params"]
        error = None
        try:
            with self.lock:
                handler = getattr(self, "m_" + method.replace(".", "_"), None)
                if handler is None:
                    raise ApiError("unsupported_in_fake", f"the fake herdr does not implement {method}")
                result = handler(params)
            return {"id": request["id"], "result": result}
        except ApiError as e:
            error = e.code
            return _error(request["id"], e.code, e.message)
        finally:
            self.log({"method": method, "params": params, "error": error})

    def log(self, entry: dict[str, Any]) -> None:
        if self.log_path:
            with open(self.log_path, "a") as f:
                f.write(json.dumps(entry) + "\n")

    def violation(self, side: str, message: Any, problems: list[str]) -> None:
        text = f"{side} {json.dumps(message)[:300]}: {'; '.join(problems[:5])}"
        print(f"herdr_fake: schema violation: {text}", file=sys.stderr)
        if self.violations_path:
            with open(self.violations_path, "a") as f:
                f.write(text + "\n")

    # ---- state
    def panes(self) -> list[Pane]:
        return [p for ws in self.workspaces for t in ws.tabs for p in t.panes]

    def pane(self, pane_id: str) -> Pane:
        for p in self.panes():
            if p.id == pane_id:
                return p
        raise ApiError("pane_not_found", f"pane {pane_id} not found")

    def tab(self, tab_id: str) -> Tab:
        for ws in self.workspaces:
            for t in ws.tabs:
                if t.id == tab_id:
                    return t
        raise ApiError("tab_not_found", f"tab {tab_id} not found")

    def workspace(self, workspace_id: str) -> Workspace:
        for ws in self.workspaces:
            if ws.id == workspace_id:
                return ws
        raise ApiError("workspace_not_found", f"workspace {workspace_id} not found")

    def new_pane(self, tab: Tab, params: dict[str, Any]) -> Pane:
        env = params.get("env") or {}
        for k, v in env.items():
            if not k or "=" in k or "\0" in k or "\0" in v:
                raise ApiError("invalid_env", f"env key {k} is not valid")
        pane = Pane(self, tab, params.get("cwd") or self.env.get("HOME") or "/", env)
        tab.panes.append(pane)
        tab.focused = tab.focused or pane
        return pane

    def remove(self, pane: Pane) -> None:
        if pane.gone:
            return
        pane.gone = True
        tab, ws = pane.tab, pane.tab.ws
        if pane in tab.panes:
            tab.panes.remove(pane)
        if tab.focused is pane:
            tab.focused = tab.panes[0] if tab.panes else None
        if not tab.panes and tab in ws.tabs:
            ws.tabs.remove(tab)
            if ws.active_tab is tab:
                ws.active_tab = ws.tabs[0] if ws.tabs else None
        if not ws.tabs and ws in self.workspaces:
            self.workspaces.remove(ws)
            if self.active is ws:
                self.active = self.workspaces[0] if self.workspaces else None

    # ---- info objects
    def pane_info(self, p: Pane) -> dict[str, Any]:
        ws = p.tab.ws
        cwd = p.cwd
        proc = _process(p.shell_pid)
        try:
            cwd = proc.cwd() if proc else cwd
        except psutil.Error:
            pass
        focused = self.active is ws and ws.active_tab is p.tab and p.tab.focused is p
        return {"pane_id": p.id, "terminal_id": p.terminal_id, "workspace_id": ws.id, "tab_id": p.tab.id,
                "focused": focused, "cwd": cwd, "foreground_cwd": cwd, "label": None, "agent": None,
                "title": p.title, "display_agent": p.display_agent, "terminal_title": None,
                "terminal_title_stripped": None, "agent_status": "unknown", "state_labels": {},
                "tokens": p.live_tokens(), "agent_session": p.agent_session, "scroll": None,
                "revision": p.revision + p.screen.revision}

    def tab_info(self, t: Tab) -> dict[str, Any]:
        return {"tab_id": t.id, "workspace_id": t.ws.id, "number": t.number, "label": t.label,
                "focused": self.active is t.ws and t.ws.active_tab is t, "pane_count": len(t.panes),
                "agent_status": "unknown"}

    def workspace_info(self, ws: Workspace) -> dict[str, Any]:
        active = ws.active_tab or (ws.tabs[0] if ws.tabs else None)
        return {"workspace_id": ws.id, "number": self.workspaces.index(ws) + 1, "label": ws.label,
                "focused": self.active is ws, "pane_count": sum(len(t.panes) for t in ws.tabs),
                "tab_count": len(ws.tabs), "active_tab_id": active.id if active else f"{ws.id}:t1",
                "agent_status": "unknown", "tokens": dict(ws.tokens), "worktree": None}

    # ---- methods
    def m_ping(self, params):
        return {"type": "pong", "version": VERSION, "protocol": self.protocol,
                "capabilities": {"live_handoff": False, "detached_server_daemon": False},
                "fake_build": "muxhost tests"}  # a field protocol 20 does not have: to be ignored

    def m_server_stop(self, params):
        self.stopping.set()
        return {"type": "ok"}

    def m_session_snapshot(self, params):
        tabs = [t for ws in self.workspaces for t in ws.tabs]
        focused_ws = self.active
        focused_tab = focused_ws.active_tab if focused_ws else None
        return {"type": "session_snapshot", "snapshot": {
            "version": VERSION, "protocol": self.protocol,
            "workspaces": [self.workspace_info(ws) for ws in self.workspaces],
            "tabs": [self.tab_info(t) for t in tabs],
            "panes": [self.pane_info(p) for p in self.panes()],
            "layouts": [], "agents": [],
            "focused_workspace_id": focused_ws.id if focused_ws else None,
            "focused_tab_id": focused_tab.id if focused_tab else None,
            "focused_pane_id": focused_tab.focused.id if focused_tab and focused_tab.focused else None}}

    def m_workspace_create(self, params):
        cwd = params.get("cwd") or self.env.get("HOME") or "/"
        ws = Workspace(self.next_workspace, params.get("label") or os.path.basename(cwd.rstrip("/")) or "/")
        self.next_workspace += 1
        self.workspaces.append(ws)
        tab = Tab(ws, None)
        ws.tabs.append(tab)
        ws.active_tab = tab
        pane = self.new_pane(tab, params)
        if self.active is None or params.get("focus"):
            self.active = ws
        return {"type": "workspace_created", "workspace": self.workspace_info(ws), "tab": self.tab_info(tab),
                "root_pane": self.pane_info(pane)}

    def m_workspace_list(self, params):
        return {"type": "workspace_list", "workspaces": [self.workspace_info(ws) for ws in self.workspaces]}

    def m_workspace_get(self, params):
        return {"type": "workspace_info", "workspace": self.workspace_info(self.workspace(params["workspace_id"]))}

    def m_workspace_close(self, params):
        ws = self.workspace(params["workspace_id"])
        for p in [p for t in ws.tabs for p in t.panes]:
            p.shutdown()
            self.remove(p)
        return {"type": "ok"}

    def m_tab_create(self, params):
        if params.get("workspace_id"):
            ws = self.workspace(params["workspace_id"])
        elif self.active is not None:
            ws = self.active
        else:
            raise ApiError("workspace_not_found", "no active workspace")
        tab = Tab(ws, params.get("label"))
        ws.tabs.append(tab)
        pane = self.new_pane(tab, params)
        if params.get("focus"):
            self.active, ws.active_tab = ws, tab
        return {"type": "tab_created", "tab": self.tab_info(tab), "root_pane": self.pane_info(pane)}

    def m_tab_list(self, params):
        wss = [self.workspace(params["workspace_id"])] if params.get("workspace_id") else self.workspaces
        return {"type": "tab_list", "tabs": [self.tab_info(t) for ws in wss for t in ws.tabs]}

    def m_tab_get(self, params):
        return {"type": "tab_info", "tab": self.tab_info(self.tab(params["tab_id"]))}

    def m_tab_rename(self, params):
        tab = self.tab(params["tab_id"])
        tab.label = params["label"]
        return {"type": "tab_info", "tab": self.tab_info(tab)}

    def m_tab_close(self, params):
        tab = self.tab(params["tab_id"])
        for p in list(tab.panes):
            p.shutdown()
            self.remove(p)
        return {"type": "ok"}

    def m_pane_split(self, params):
        if params.get("target_pane_id"):
            target = self.pane(params["target_pane_id"])
        else:
            ws = self.workspace(params["workspace_id"]) if params.get("workspace_id") else self.active
            tab = ws.active_tab if ws else None
            if tab is None or tab.focused is None:
                raise ApiError("pane_not_found", "pane not found")
            target = tab.focused
        pane = self.new_pane(target.tab, params)
        return {"type": "pane_info", "pane": self.pane_info(pane)}

    def m_pane_list(self, params):
        panes = self.panes()
        if params.get("workspace_id"):
            ws = self.workspace(params["workspace_id"])
            panes = [p for p in panes if p.tab.ws is ws]
        return {"type": "pane_list", "panes": [self.pane_info(p) for p in panes]}

    def m_pane_get(self, params):
        return {"type": "pane_info", "pane": self.pane_info(self.pane(params["pane_id"]))}

    def m_pane_process_info(self, params):
        if not params.get("pane_id"):
            raise ApiError("pane_not_found", "pane not found")
        p = self.pane(params["pane_id"])
        pgid, members = p.foreground()
        return {"type": "pane_process_info", "process_info": {
            "pane_id": p.id, "shell_pid": p.shell_pid, "foreground_process_group_id": pgid, "tty": None,
            "foreground_processes": members}}

    def m_pane_send_text(self, params):
        self.pane(params["pane_id"]).write(params["text"].encode())
        return {"type": "ok"}

    def m_pane_send_keys(self, params):
        p = self.pane(params["pane_id"])
        data = b""
        for key in params["keys"]:
            encoded = encode_key(key)
            if encoded is None:
                raise ApiError("invalid_key", f"unsupported key {key}")
            data += encoded
        p.write(data)
        return {"type": "ok"}

    def m_pane_send_input(self, params):
        p = self.pane(params["pane_id"])
        text = params.get("text") or ""
        data = b""
        if text:
            data = (f"\x1b[200~{text}\x1b[201~" if p.screen.bracketed_paste else text).encode()
        for key in params.get("keys") or []:
            encoded = encode_key(key)
            if encoded is None:
                raise ApiError("invalid_key", f"unsupported key {key}")
            data += encoded
        p.write(data)
        return {"type": "ok"}

    def m_pane_read(self, params):
        p = self.pane(params["pane_id"])
        text, truncated = p.screen.text(params["source"], params.get("lines"))
        return {"type": "pane_read", "read": {
            "pane_id": p.id, "workspace_id": p.tab.ws.id, "tab_id": p.tab.id, "source": params["source"],
            "format": params.get("format") or "text", "text": text, "revision": 0, "truncated": truncated}}

    def m_pane_report_metadata(self, params):
        p = self.pane(params["pane_id"])
        source = params["source"].strip()
        if not source or len(source) > 80 or not re.fullmatch(r"[A-Za-z0-9:._-]+", source):
            raise ApiError("invalid_metadata_source", "metadata source may contain only ASCII letters, digits, "
                                                      "colon, dot, underscore, and hyphen")
        tokens = params.get("tokens") or {}
        if len(tokens) > 16:
            raise ApiError("invalid_metadata_token", "a metadata report may update at most 16 tokens")
        clean: dict[str, str | None] = {}
        for key, value in tokens.items():
            if not re.fullmatch(r"[A-Za-z0-9_-]{1,32}", key):
                raise ApiError("invalid_metadata_token", f"invalid metadata token key: {key}")
            if value is not None:
                value = "".join(ch for ch in value.strip() if ch.isprintable())[:80].strip() or None
            clean[key] = value
        ttl = params.get("ttl_ms")
        if ttl is not None and not 1 <= ttl <= 86_400_000:
            raise ApiError("invalid_metadata_ttl", "metadata ttl_ms must be between 1 and 86400000")
        title, display = params.get("title"), params.get("display_agent")
        if not clean and title is None and display is None and not params.get("state_labels") \
                and not any(params.get(k) for k in ("clear_title", "clear_display_agent", "clear_state_labels")):
            raise ApiError("invalid_metadata_request", "missing metadata field to set or clear")
        keys = set(p.live_tokens()) | {k for k, v in clean.items() if v is not None}
        if len(keys - {k for k, v in clean.items() if v is None}) > 32:
            raise ApiError("metadata_token_limit", "pane metadata may contain at most 32 tokens")
        until = time.monotonic() + ttl / 1000 if ttl is not None else None
        for key, value in clean.items():
            if value is None:
                p.tokens.pop(key, None)
            else:
                p.tokens[key] = (value, until)
        if title is not None or params.get("clear_title"):
            p.title = None if params.get("clear_title") else title.strip() or None
        if display is not None or params.get("clear_display_agent"):
            p.display_agent = None if params.get("clear_display_agent") else display.strip() or None
        p.revision += 1
        return {"type": "ok"}

    def m_pane_report_agent_session(self, params):
        p = self.pane(params["pane_id"])
        source, agent = params["source"], params["agent"]
        value = params.get("agent_session_id") or params.get("agent_session_path")
        if source == f"herdr:{agent}" and value:  # 0.8.2 keeps a session only for its own sources
            p.agent_session = {"source": source, "agent": agent, "value": value,
                               "kind": "id" if params.get("agent_session_id") else "path"}
        return {"type": "ok"}

    def m_pane_close(self, params):
        p = self.pane(params["pane_id"])
        p.shutdown()
        self.remove(p)
        return {"type": "ok"}

    def close_all(self) -> None:
        with self.lock:
            panes = self.panes()
        for p in panes:
            p.shutdown()
            with self.lock:
                self.remove(p)


def _error(rid: str, code: str, message: str) -> dict[str, Any]:
    return {"id": rid, "error": {"code": code, "message": message}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="a fake herdr server (protocol 20) for muxhost's tests")
    ap.add_argument("socket")
    ap.add_argument("--protocol", type=int, default=20)
    ap.add_argument("--log")
    ap.add_argument("--violations")
    args = ap.parse_args(argv)
    fake = Fake(args.socket, args.protocol, args.log, args.violations)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: fake.stopping.set())
    thread = threading.Thread(target=fake.serve, daemon=True)
    thread.start()
    while not fake.stopping.wait(0.2):
        pass
    thread.join(5)
    fake.close_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
