"""The tmux backend: libtmux for commands, ONE ``list-panes -a -F`` for every snapshot.

The snapshot runs tmux directly (no libtmux import) because ``muxhost ls`` must cost one tmux
process and one process-table scan, whatever the number of records.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
from typing import Iterator, Mapping, Sequence

from muxhost import launcher
from muxhost.backends import (ACTIVITY_OPTION, ACTIVITY_SINCE_OPTION, AGENT_OPTION, RECORD_OPTION, WATCH_OPTION,
                              Backend, PaneInfo)
from muxhost.errors import MuxhostError, NotFound, UsageError

SEP = "\x1f"
_FIELDS = ("pane_id", "pane_pid", "pane_dead", "pane_dead_status", "session_id", "session_name",
           "window_id", "pane_current_path", "pane_current_command", RECORD_OPTION, AGENT_OPTION,
           # the activity watch's evidence (tmux keeps no per-pane output time: the window's, to the
           # second, and what moves when output comes), what it published, and the watch itself
           "window_activity", "history_size", "cursor_x", "cursor_y", ACTIVITY_OPTION, ACTIVITY_SINCE_OPTION,
           WATCH_OPTION, "pane_dead_signal",
           # a client's last key (or attach) into the session — not send-keys: muxhost's own typing —
           # and whether it went to this pane: the active pane of the session's current window
           "session_activity", "window_active", "pane_active",
           # the server instance (a new server on the same socket is another one)
           "pid", "start_time")
# what tmux sets in a new pane's environment itself; the launcher takes these from its own
PANE_ENV = ("TMUX", "TMUX_PANE", "TERM", "TERM_PROGRAM", "TERM_PROGRAM_VERSION", "SHELL")
_NO_SERVER = ("no server running", "error connecting to", "No such file or directory", "server exited")


def _arg(text: str) -> str:
    """``text`` as ONE literal tmux argument: tmux takes an argument that ends in ";" for the end of
    a command (the ";" dropped, what follows another command), and one that ends in "\\;" for one
    that ends in ";"."""
    return text[:-1] + "\\;" if text.endswith(";") else text


def _format(token: str) -> str:
    """The pane format: every field after ``token``, and ``token`` at the end. A field's value is
    whatever tmux has: the foreground process chooses ``pane_current_command`` and
    ``pane_current_path`` (any byte, a newline or SEP too; tmux 3.3's ``#{q:}`` leaves both as
    they are), so fields and panes are told apart by a token made anew for each query, which no
    process knows when it names itself or its folder."""
    return "".join(token + "#{%s}" % f for f in _FIELDS) + token


def _token() -> str:
    return SEP + "muxhost-" + os.urandom(8).hex() + SEP


def _parse_all(out: str, token: str) -> list[PaneInfo]:
    """Every pane in the output of :func:`_format` with ``token``."""
    pieces = out.split(token)
    n = len(_FIELDS)
    if pieces[0].strip():
        return []
    panes = []
    for i in range(1, len(pieces) - n, n + 1):
        if pieces[i + n] != "\n":  # (each pane ends with the token and tmux's newline)
            break
        panes.append(_parse(pieces[i:i + n]))
    return panes


def _parse(parts: list[str]) -> PaneInfo:
    pid = int(parts[1]) if parts[1].isdigit() else None
    status = int(parts[3]) if parts[3].lstrip("-").isdigit() else None
    return PaneInfo(pane_id=parts[0], pid=pid, dead=parts[2] == "1", dead_status=status,
                    session_id=parts[4], session_name=parts[5], window_id=parts[6], cwd=parts[7],
                    command=parts[8], record=parts[9] or None, agent=parts[10] or None,
                    last_output=_number(parts[11]), output_mark=SEP.join(parts[11:15]),
                    activity=parts[15] or None, activity_since=_number(parts[16]), watcher=parts[17] or None,
                    extra={"dead_signal": parts[18]} if parts[18] else {},
                    last_input=_number(parts[19]) if parts[20] == parts[21] == "1" else None,
                    server=f"{parts[22]} {parts[23]}" if parts[22] else None)


def _number(text: str) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None


_KEYS = {"enter": "Enter", "esc": "Escape", "tab": "Tab", "backspace": "BSpace", "up": "Up", "down": "Down",
         "left": "Left", "right": "Right"}


def tmux_key(name: str) -> str:
    """A backend-neutral key name (``enter``, ``ctrl+u``) as tmux spells it (``Enter``, ``C-u``)."""
    if name in _KEYS:
        return _KEYS[name]
    if name.startswith("ctrl+") and len(name) == 6:
        return "C-" + name[5:]
    raise UsageError(f"unknown key name {name!r}")


def literal(text: str) -> str:
    """``text`` as a tmux message shows it: display-message expands formats (``#{…}``) and then
    strftime (``%3`` became `` %3``, a pane id padded with a space)."""
    return text.replace("#", "##").replace("%", "%%")


def resolve_address(given: str | None, config=None) -> str | None:
    """The tmux socket: ``--socket``, else ``$MUXHOST_TMUX_SOCKET``, else config ``tmux.socket_name``,
    else None (your own server)."""
    return given or os.environ.get("MUXHOST_TMUX_SOCKET") or (config.socket_name if config is not None else None) or None


class TmuxBackend(Backend):
    name = "tmux"
    client_env = ("TMUX", "TMUX_PANE")

    def __init__(self, socket_name: str | None = None, config=None):
        self.socket_name = socket_name
        self.tmux_bin = shutil.which("tmux")
        self._queue: list[list[str]] | None = None  # commands of an open batch()
        self._server = None

    # -- plumbing ---------------------------------------------------------------------------
    def _base(self) -> list[str]:
        if not self.tmux_bin:
            raise MuxhostError("tmux is not installed (no `tmux` on PATH)")
        return [self.tmux_bin] + (["-L", self.socket_name] if self.socket_name else [])

    def where(self) -> str:
        return f"socket {self.socket_name!r}" if self.socket_name else "the default socket"

    @property
    def address(self) -> str | None:
        return self.socket_name

    def pane_ref(self, text: str) -> str | None:
        return text if len(text) > 1 and text[0] == "%" and text[1:].isdigit() else None

    def attach_hint(self, pane: PaneInfo) -> str:
        sock = f" -L {self.socket_name}" if self.socket_name else ""
        return f"tmux{sock} attach -t {pane.session_name}" if pane.session_name else ""

    def _run(self, *args: str, check: bool = True, fast: bool = False) -> subprocess.CompletedProcess:
        """Run one tmux command (a list joined by ";" elements is still one tmux process).
        Commands go through libtmux; ``fast`` ones (the snapshot) call tmux directly."""
        if fast:
            p = subprocess.run(self._base() + list(args), capture_output=True, text=True, errors="surrogateescape",
                               stdin=subprocess.DEVNULL)  # (a folder's name may be any bytes)
        else:
            self._base()  # a clear error when tmux is missing
            r = self.server.cmd(*args)
            p = subprocess.CompletedProcess(r.cmd, r.returncode, "\n".join(r.stdout) + "\n",
                                            "\n".join(r.stderr))
        if check and p.returncode != 0:
            err = (p.stderr or p.stdout).strip().splitlines()
            msg = err[-1] if err else f"exit status {p.returncode}"
            if any(s in msg for s in _NO_SERVER):
                raise MuxhostError(f"no tmux server running on {self.where()}")
            if "can't find" in msg:
                raise NotFound(f"tmux: {msg}")
            raise MuxhostError(f"tmux {args[0]} failed: {msg}")
        return p

    @property
    def server(self):
        """The libtmux Server (imported on first use only)."""
        if self._server is None:
            import libtmux

            self._server = libtmux.Server(socket_name=self.socket_name, tmux_bin=self.tmux_bin)
        return self._server

    # -- queries ----------------------------------------------------------------------------
    def snapshot(self) -> list[PaneInfo] | None:
        panes = self._panes()
        # (a pane killed by a signal has a signal and no status: nothing to wait for)
        if panes and any(pi.dead and pi.dead_status is None and not pi.extra.get("dead_signal") for pi in panes):
            # tmux 3.3 can mark a pane dead (its pty closed) before it reaped the process and kept
            # the exit status, and then only reaps it when another child of the server exits: give
            # it one (run-shell waits for it), and look again
            self._run("run-shell", "true", check=False, fast=True)
            panes = self._panes()
        return panes

    def _panes(self) -> list[PaneInfo] | None:
        token = _token()
        p = self._run("list-panes", "-a", "-F", _format(token), check=False, fast=True)
        if p.returncode != 0:
            msg = p.stderr.strip()
            if any(s in msg for s in _NO_SERVER) or not msg:
                return None
            raise MuxhostError(f"tmux list-panes failed: {msg.splitlines()[-1]}")
        return _parse_all(p.stdout, token)

    def pane(self, pane_id: str) -> PaneInfo | None:
        for p in self.snapshot() or []:
            if p.pane_id == pane_id:
                return p
        return None

    # -- actions ----------------------------------------------------------------------------
    @staticmethod
    def _command(argv: Sequence[str], cwd: str, env: Mapping[str, str]) -> launcher.LaunchFile:
        """The pane's command: muxhost's launcher and a 0600 file holding ``argv``, ``cwd`` and
        exactly ``env`` — no value on any command line, where every local user can read it. tmux
        hands a new pane its server's stale environment (and its client's PATH); the launcher keeps
        only what tmux sets for the pane itself (:data:`PANE_ENV`) and execs the agent, so the agent
        IS the pane's process."""
        return launcher.write(argv, cwd=cwd, env=env, inherit=PANE_ENV)

    def _after(self, options: Mapping[str, str], target: Sequence[str] = ()) -> list[str]:
        # in the same tmux command list, so they apply before the new process can exit
        out = [";", "set-option", "-p", *target, "remain-on-exit", "on"]
        for k, v in options.items():
            out += [";", "set-option", "-p", *target, k, v]
        return out

    def create(self, argv, *, cwd, env, name, target=None, split=None, options={}):
        token = _token()
        fmt = ["-P", "-F", _format(token)]
        # The new pane's options are set in the SAME tmux command list, so they apply before its
        # process can exit. That needs the new pane to be "current", so windows and splits are made
        # without -d and the user's previous pane/window is selected again at the end. A detached
        # new session never becomes "current" (inside tmux the caller's own pane, TMUX_PANE, is):
        # its options name it, `=NAME:` (its one pane).
        restore: list[str] = []
        where: list[str] = []
        if split:
            if split not in ("right", "below"):
                raise UsageError(f"--split must be 'right' or 'below', not {split!r}")
            if not target:
                target = os.environ.get("TMUX_PANE") if os.environ.get("TMUX") else None
                if not target:
                    raise UsageError("--split needs --target SESSION[:WINDOW] (or run it inside tmux)")
            args = ["split-window", "-h" if split == "right" else "-v", "-t", _arg(target), "-c", _arg(cwd)]
            restore, created = [";", "last-pane"], False
        elif target:
            args = ["new-window", "-a", "-t", _arg(target if ":" in target else target + ":"), "-c", _arg(cwd)]
            restore, created = [";", "last-window"], False
        else:
            # detached sessions are 80x24 by default: too narrow for agents' TUIs (footers wrap);
            # tmux resizes the window to the client when someone attaches
            args = ["new-session", "-d", "-s", name, "-c", _arg(cwd), "-x", "200", "-y", "50"]
            where, created = ["-t", f"={name}:"], True
        cmd = self._command(argv, cwd, env)
        try:
            p = self._run(*args, *fmt, "--", *cmd.argv, *self._after(options, where), *restore)
            info = next(iter(_parse_all(p.stdout, token)), None)
            if info is None:
                raise MuxhostError(f"tmux {args[0]} printed no pane")
        except BaseException:
            cmd.discard()  # no pane: no environment left on disk
            raise
        cmd.wait(info.pid)
        return info, created

    def respawn(self, pane_id, argv, *, cwd, env):
        cmd = self._command(argv, cwd, env)
        try:
            self._run("respawn-pane", "-k", "-t", pane_id, "-c", _arg(cwd), "--", *cmd.argv)
            info = self.pane(pane_id)
            if info is None:
                raise MuxhostError(f"pane {pane_id} vanished after respawn")
        except BaseException:
            cmd.discard()
            raise
        cmd.wait(info.pid)
        return info

    def _act(self, *args: str, check: bool = True) -> None:
        """One action, or queued while a :meth:`batch` is open."""
        if self._queue is not None:
            self._queue.append(list(args))
        else:
            self._run(*args, check=check)

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Keys, text and kills inside run as ONE tmux command list on exit (50 panes, one tmux
        process). tmux drops the rest of a list after a failing command (a pane that went
        meanwhile), so then each command runs again on its own, errors ignored."""
        if self._queue is not None:
            yield
            return
        self._queue = []
        try:
            yield
        finally:
            queued, self._queue = self._queue, None
            if queued:
                joined: list[str] = []
                for args in queued:
                    joined += ([";"] if joined else []) + args
                if self._run(*joined, check=False, fast=True).returncode != 0:
                    for args in queued:
                        self._run(*args, check=False, fast=True)

    def type_text(self, pane_id, text):
        self._act("send-keys", "-t", pane_id, "-l", "--", _arg(text))  # (never an option, never a ";")

    def send_keys(self, pane_id, *keys):
        self._act("send-keys", "-t", pane_id, *map(tmux_key, keys))

    def capture(self, pane_id):
        text = self._run("capture-pane", "-p", "-J", "-S", "-", "-t", pane_id).stdout
        lines = text.rstrip("\n").split("\n")
        if lines and lines[-1].startswith("Pane is dead ("):  # tmux's remain-on-exit line, not the agent's
            text = "\n".join(lines[:-1]).rstrip("\n") + "\n"
        return text

    def kill_pane(self, pane_id):
        self._act("kill-pane", "-t", pane_id, check=False)

    def kill_session(self, session_id):
        self._act("kill-session", "-t", session_id, check=False)

    def message(self, text, pane_id=None, client=None):
        args = ["display-message"]
        if client:
            args += ["-c", client]
        if pane_id:
            args += ["-t", pane_id]
        self._run(*args, "-d", "10000", "--", _arg(literal(text)), check=False, fast=True)

    def set_pane_option(self, pane_id: str, name: str, value: str) -> None:
        self._run("set-option", "-p", "-t", pane_id, name, value, fast=True)

    def pane_option(self, pane_id: str, name: str) -> str | None:
        p = self._run("show-options", "-pqv", "-t", pane_id, name, check=False, fast=True)
        return (p.stdout.rstrip("\n") or None) if p.returncode == 0 else None

    def _list(self, commands: list[list[str]]) -> subprocess.CompletedProcess:
        """``commands`` as ONE tmux command list (one tmux process), errors not raised."""
        joined: list[str] = []
        for args in commands:
            joined += ([";"] if joined else []) + args
        return self._run(*joined, check=False, fast=True)

    def screens(self, pane_ids):
        """Every screen in one tmux command: each ``capture-pane`` after a ``display-message`` line
        that names its pane (with a token no screen holds). tmux drops the rest of a list after a
        failing command (a pane gone meanwhile): then the panes not read yet are read one by one."""
        token = "muxhost-screen-" + os.urandom(6).hex()
        cmds: list[list[str]] = []
        for pane_id in pane_ids:
            cmds += [["display-message", "-p", "-t", pane_id, f"{token} #{{pane_id}}"],
                     ["capture-pane", "-p", "-t", pane_id]]
        if not cmds:
            return {}
        p = self._list(cmds)
        out: dict[str, str] = {}
        current, lines = None, []
        for line in (p.stdout or "").split("\n"):
            if line.startswith(token + " "):
                if current is not None:
                    out[current] = "\n".join(lines)
                current, lines = line[len(token) + 1:], []
            elif current is not None:
                lines.append(line)
        if current is not None and p.returncode == 0:
            out[current] = "\n".join(lines)
        if p.returncode != 0:  # the list stopped at a pane gone meanwhile: the rest one by one
            for pane_id in pane_ids:
                if pane_id not in out:
                    r = self._run("capture-pane", "-p", "-t", pane_id, check=False, fast=True)
                    if r.returncode == 0:
                        out[pane_id] = r.stdout
        return out

    def publish(self, panes, server={}):
        cmds: list[list[str]] = []
        for pane_id, values in panes.items():
            for name, value in values.items():
                cmds.append(["set-option", "-p", "-t", pane_id, name, value] if value is not None
                            else ["set-option", "-p", "-u", "-t", pane_id, name])
        for name, value in server.items():  # global session options: every format finds them
            cmds.append(["set-option", "-g", name, value] if value is not None else ["set-option", "-g", "-u", name])
        if cmds and self._list(cmds).returncode != 0:
            for args in cmds:  # a pane went meanwhile, and tmux dropped the rest of the list
                self._run(*args, check=False, fast=True)

    def alert(self, text, pane_id):
        """The message on every attached client, and a BEL written to the pane's terminal as if
        the agent rang it: tmux marks the window (``window_bell_flag``) and handles it as the user's
        ``bell-action`` and ``visual-bell`` say. (``pane_id`` None: an agent of a remote host, the
        message only.)"""
        tty_of = [["display-message", "-p", "-t", pane_id, "#{pane_tty}"]] if pane_id else []
        p = self._list([*tty_of, ["list-clients", "-F", "#{client_name}"]])
        lines = [ln for ln in (p.stdout or "").splitlines() if ln]
        if p.returncode != 0 or (pane_id and not lines):
            return
        tty, clients = (lines[0], lines[1:]) if pane_id else ("", lines)
        if clients:
            self._list([["display-message", "-c", c, "-d", "10000", "--", _arg(literal(text))] for c in clients])
        try:
            fd = os.open(tty, os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK)
            try:
                os.write(fd, b"\a")
            finally:
                os.close(fd)
        except OSError:
            pass

    # -- keeping a client in tmux while its session goes (the purge key) ---------------------------
    def attach(self, pane: PaneInfo, env: Mapping[str, str]) -> list[str] | None:
        """Inside this server (``$TMUX`` names its socket): switch the caller's client to the pane's
        session, window and pane. Inside another tmux server: a new window there runs a client of
        this one (tmux refuses to nest a client in a pane otherwise). Outside tmux: the argv of a
        client of this server on the pane (the pane selected first)."""
        target = pane.pane_id
        self._run("select-window", "-t", target, ";", "select-pane", "-t", target, fast=True)
        inside = (env.get("TMUX") or "").split(",")[0]
        client = [*self._base(), "attach-session", "-t", target]
        if not inside:
            return client
        own = self.socket_path()
        if own and os.path.realpath(inside) == os.path.realpath(own):
            self._run("switch-client", "-t", target, fast=True)
            return None
        # the caller's own server runs the client in a new window
        p = subprocess.run([self.tmux_bin or "tmux", "new-window", "-n", _arg(pane.session_name or "muxhost"),
                            shlex.join(["env", "-u", "TMUX", "-u", "TMUX_PANE", *client])],
                           env=dict(env), stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
        if p.returncode != 0:
            raise MuxhostError(f"tmux new-window failed: {(p.stderr or p.stdout).strip() or p.returncode}")
        return None

    def socket_path(self) -> str:
        """The path of this server's socket (tmux's ``#{socket_path}``)."""
        p = self._run("display-message", "-p", "#{socket_path}", check=False, fast=True)
        return p.stdout.strip() if p.returncode == 0 and p.stdout.strip() else ""

    def _client_session(self, client: str) -> str | None:
        p = self._run("list-clients", "-F", f"#{{client_name}}{SEP}#{{session_id}}", check=False, fast=True)
        return next((s for c, _, s in (ln.partition(SEP) for ln in p.stdout.splitlines()) if c == client), None)

    def move_client_off(self, client: str, session_id: str, text: str) -> str | None:
        """``switch-client -l``, else the most recently active other session; with no other session,
        a new session ``muxhost-purge`` whose one pane prints ``text`` and waits (the server would
        end with its last session, and the client with it). That pane is no record and carries no
        option of ours; it ends after an hour if nobody calls :meth:`show_held`."""
        if self._client_session(client) != session_id:
            return None
        p = self._run("switch-client", "-c", client, "-l", check=False, fast=True)
        if p.returncode == 0 and self._client_session(client) != session_id:
            return None
        p = self._run("list-sessions", "-F", SEP.join(("#{session_activity}", "#{session_id}", "#{session_name}")),
                      check=False, fast=True)
        sessions = sorted((ln.split(SEP) for ln in p.stdout.splitlines() if ln.count(SEP) == 2),
                          key=lambda s: -int(s[0]) if s[0].isdigit() else 0)
        for _, sid, _ in sessions:
            if sid == session_id:
                continue
            self._run("switch-client", "-c", client, "-t", sid, check=False, fast=True)
            if self._client_session(client) == sid:
                return None
        names = {s[2] for s in sessions}
        name = next(n for n in ("muxhost-purge", *(f"muxhost-purge-{i}" for i in range(2, 1000))) if n not in names)
        wait = 'stty -echo 2>/dev/null; printf "%s\\n" "$1"; exec sleep 3600'  # keys typed now are not read
        p = self._run("new-session", "-d", "-s", name, "-n", "muxhost", "-P", "-F",
                      f"#{{session_id}}{SEP}#{{pane_id}}", "--", "/bin/sh", "-c", wait, "sh", _arg(text), fast=True)
        sid, _, pane_id = p.stdout.strip().partition(SEP)
        # it closes with its last key, whatever the user's remain-on-exit; then go on to any session
        self._run("set-option", "-p", "-t", pane_id, "remain-on-exit", "off", ";",
                  "set-option", "-t", sid, "detach-on-destroy", "off", check=False, fast=True)
        self._run("switch-client", "-c", client, "-t", sid, fast=True)
        return pane_id

    def show_held(self, pane_id: str, text: str) -> None:
        """The holding pane prints ``text`` on a clean screen, then closes on any key."""
        show = ('printf "\\033[H\\033[2J%s\\n\\n(press any key to close) " "$1"; '
                'stty -icanon -echo min 1 2>/dev/null; dd bs=1 count=1 >/dev/null 2>&1')
        self._run("respawn-pane", "-k", "-t", pane_id, "--", "/bin/sh", "-c", show, "sh", _arg(text),
                  check=False, fast=True)
