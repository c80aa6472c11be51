"""The herdr pane backend: a small client of herdr's socket API (protocol 20, herdr 0.8.2) and the
:class:`muxhost.backends.Backend` on top of it. Standard library only.

The protocol: newline-delimited JSON on a Unix socket, ONE request per connection (connect, send one
line, read one line; the server closes). Every :class:`HerdrBackend` pings first and refuses a
protocol it does not speak; fields it does not know are ignored, ids are opaque strings.

How muxhost's guarantees hold on herdr:

- A herdr pane always starts the user's shell, with the herdr SERVER's environment. So the agent is
  started the way it is on tmux, through muxhost's launcher (:func:`muxhost.api.launch_file`: argv,
  cwd and the exact environment in a 0600 file, never on a command line): once the shell is ready, ONE line,
  `` exec <launcher> <file>``, is typed into it, and nothing else. The shell becomes the launcher,
  the launcher the agent: the agent IS the pane's process, with exactly the record's environment
  plus the variables herdr sets for the pane (:data:`PANE_ENV`). The launch is checked: the file
  was taken, and the pane's foreground process is no longer the shell or the launcher.
- herdr has no user options: the record and agent are pane metadata tokens
  (``pane.report_metadata``, source ``muxhost``), which herdr returns in every ``PaneInfo``.
- A snapshot is one ``session.snapshot`` (panes, tabs and workspaces) plus one
  ``pane.process_info`` for each pane that carries a record token (the pid); other panes cost
  nothing and have no pid.
- herdr keeps no dead pane (:attr:`HerdrBackend.keeps_dead_panes`): an agent that exits takes its
  pane with it, and no exit status is left to read.
- Closing a pane (``pane.close``) signals the pane shell's session only; muxhost's stop ladder sweeps
  the rest (steps 4-5, by ``MUXHOST_RECORD``).
"""

from __future__ import annotations

import errno
import json
import os
import re
import shlex
import socket
import time
from typing import Any, Mapping, Sequence

from muxhost.api import (AGENT_OPTION, LAUNCH_TIMEOUT, RECORD_OPTION, Backend, MuxhostError, NotFound, PaneInfo,
                         UsageError, launch_file)

PROTOCOLS = (20,)          # what this client speaks (herdr 0.8.2)
SOURCE = "muxhost"         # the metadata source muxhost reports as
CONVERSATION_TOKEN = "muxhost_conversation"
# what herdr sets in a pane's environment itself; the launcher takes these from its own
PANE_ENV = ("TERM", "COLORTERM", "HERDR_ENV", "HERDR_SOCKET_PATH", "HERDR_BIN_PATH",
            "HERDR_WORKSPACE_ID", "HERDR_TAB_ID", "HERDR_PANE_ID")
REQUEST_TIMEOUT = 15.0     # seconds for one request (pane.close takes up to 750 ms by itself)
READY_TIMEOUT = 10.0       # seconds a new pane's shell gets to draw its prompt
AGENT_TIMEOUT = 10.0       # seconds the launcher gets to become the agent
POLL = 0.05
WORKSPACE_LABEL = "muxhost"  # a workspace muxhost creates (herdr starts with none)
_SESSION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")

# backend-neutral key names (muxhost.backends.KEYS) as herdr spells them (app/api_helpers.rs)
_KEYS = {"enter": "enter", "esc": "esc", "tab": "tab", "backspace": "backspace", "up": "up", "down": "down",
         "left": "left", "right": "right"}


def herdr_key(name: str) -> str:
    """A backend-neutral key name (``enter``, ``ctrl+u``) as herdr's ``pane.send_keys`` takes it."""
    if name in _KEYS:
        return _KEYS[name]
    if name.startswith("ctrl+") and len(name) == 6 and name[5].isalpha():
        return "ctrl+" + name[5].lower()
    raise UsageError(f"unknown key name {name!r}")


def token(option: str) -> str:
    """The metadata token that holds the pane option ``option`` (``@muxhost_record`` ->
    ``muxhost_record``): herdr's token names are ``[A-Za-z0-9_-]{1,32}``."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", option.lstrip("@"))[:32] or "_"


RECORD_TOKEN, AGENT_TOKEN = token(RECORD_OPTION), token(AGENT_OPTION)


def config_dir(env: Mapping[str, str] = os.environ) -> str:
    """herdr's folder: ``$XDG_CONFIG_HOME/herdr``, else ``~/.config/herdr``."""
    base = env.get("XDG_CONFIG_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".config")
    return os.path.join(base, "herdr")


def session_socket(name: str | None, env: Mapping[str, str] = os.environ) -> str:
    """The socket of herdr session ``name`` (None or ``default``: the default session)."""
    if name and name != "default":
        return os.path.join(config_dir(env), "sessions", name, "herdr.sock")
    return os.path.join(config_dir(env), "herdr.sock")


def default_socket(env: Mapping[str, str] = os.environ) -> str:
    """Where herdr itself looks (no ``--session``): ``$HERDR_SOCKET_PATH``, else the socket of the
    session ``$HERDR_SESSION``, else ``~/.config/herdr/herdr.sock``."""
    if env.get("HERDR_SOCKET_PATH"):
        return os.path.abspath(os.path.expanduser(env["HERDR_SOCKET_PATH"]))
    session = env.get("HERDR_SESSION")
    return session_socket(session if session and _SESSION_NAME.fullmatch(session) else None, env)


def resolve_address(given: str | None, config=None) -> str:
    """The herdr socket new agents go to: ``--socket PATH`` (or a herdr session NAME, as
    ``herdr --session NAME``), else where herdr itself looks (:func:`default_socket`). Always an
    absolute path: records keep it."""
    if given:
        if os.sep in given or given.startswith((".", "~")):
            return os.path.abspath(os.path.expanduser(given))
        if not _SESSION_NAME.fullmatch(given):
            raise UsageError(f"--socket {given!r}: not a herdr socket path or session name")
        return session_socket(given)
    return default_socket()


class HerdrError(MuxhostError):
    """herdr answered a request with an error."""

    def __init__(self, method: str, code: str, message: str):
        super().__init__(f"herdr {method} failed: {message} ({code})")
        self.code = code


class NoServer(MuxhostError):
    """No herdr server listens on the socket."""


class Client:
    """herdr's socket API: :meth:`call` sends one request on its own connection."""

    def __init__(self, path: str):
        self.path = path
        self.requests = 0  # sent by this client (tests count them)

    def call(self, method: str, params: Mapping[str, Any] | None = None,
             timeout: float = REQUEST_TIMEOUT) -> dict[str, Any]:
        """The ``result`` of ``method``; :class:`HerdrError` when herdr answers an error,
        :class:`NoServer` when nothing listens."""
        self.requests += 1
        request = {"id": f"muxhost-{os.getpid()}-{self.requests}", "method": method, "params": dict(params or {})}
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            try:
                sock.connect(self.path)
            except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError):
                raise NoServer(f"no herdr server running on socket {self.path}") from None
            except OSError as e:
                raise MuxhostError(f"cannot connect to herdr at {self.path}: {e.strerror or e}") from None
            data = b""
            try:
                sock.sendall(json.dumps(request).encode() + b"\n")
                while b"\n" not in data:
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    data += chunk
            except socket.timeout:
                raise MuxhostError(f"herdr at {self.path} did not answer {method} within {timeout:g}s") from None
            except OSError as e:
                if e.errno in (errno.EPIPE, errno.ECONNRESET) and not data:
                    raise MuxhostError(f"herdr at {self.path} closed the connection on {method}") from None
                raise MuxhostError(f"herdr {method}: {e.strerror or e}") from None
        finally:
            sock.close()
        try:
            answer = json.loads(data.split(b"\n", 1)[0])
        except ValueError:
            raise MuxhostError(f"herdr at {self.path} answered {method} with something that is not JSON") from None
        if not isinstance(answer, dict):
            raise MuxhostError(f"herdr at {self.path} answered {method} with {type(answer).__name__}, not an object")
        if answer.get("error") is not None:
            err = answer["error"] if isinstance(answer["error"], dict) else {}
            raise HerdrError(method, str(err.get("code") or "error"), str(err.get("message") or "no message"))
        result = answer.get("result")
        return result if isinstance(result, dict) else {}


class HerdrBackend(Backend):
    """One herdr server (its socket). Sessions are tabs: a record's "session" is the tab muxhost
    made for it (``launch`` without ``--target``); ``--target`` names a workspace (by id or label),
    or a tab or pane whose workspace gets the new tab; ``--split`` splits the ``--target`` pane."""

    name = "herdr"
    client_env = ("HERDR_ENV", "HERDR_SOCKET_PATH", "HERDR_BIN_PATH", "HERDR_WORKSPACE_ID", "HERDR_TAB_ID",
                  "HERDR_PANE_ID")
    keeps_dead_panes = False

    def __init__(self, path: str | None = None, config=None):
        self.path = path or default_socket()
        self.client = Client(self.path)
        self._checked = False

    # -- plumbing ---------------------------------------------------------------------------
    def call(self, method: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """One request, after this backend's ``ping`` (a protocol it does not speak: one error line)."""
        if not self._checked:
            pong = self.client.call("ping", {})
            got = pong.get("protocol")
            if pong.get("type") != "pong" or got not in PROTOCOLS:
                speaks = " or ".join(map(str, PROTOCOLS))
                raise MuxhostError(f"herdr at {self.path} speaks protocol {got} (herdr {pong.get('version', '?')}); "
                                   f"muxhost-herdr speaks protocol {speaks} (herdr 0.8.2)")
            self._checked = True
        return self.client.call(method, params)

    def where(self) -> str:
        return f"socket {self.path}"

    @property
    def address(self) -> str | None:
        return self.path

    def pane_ref(self, text: str) -> str | None:
        # herdr's pane ids (w1:p1) are opaque, but never a record id or name (those have no ':')
        return text if ":" in text else None

    def attach_hint(self, pane: PaneInfo) -> str:
        if self.path == session_socket(None):
            return "herdr"
        return f"HERDR_SOCKET_PATH={shlex.quote(self.path)} herdr"

    # -- queries ----------------------------------------------------------------------------
    def _snapshot(self) -> dict[str, Any]:
        return self.call("session.snapshot").get("snapshot") or {}

    def _process_info(self, pane_id: str) -> dict[str, Any]:
        return self.call("pane.process_info", {"pane_id": pane_id}).get("process_info") or {}

    def snapshot(self) -> list[PaneInfo] | None:
        """Every pane: one ``session.snapshot``, plus one ``pane.process_info`` per pane that
        carries a record (its pid)."""
        try:
            snap = self._snapshot()
        except NoServer:
            return None
        labels = {t.get("tab_id"): t.get("label") or "" for t in snap.get("tabs") or [] if isinstance(t, dict)}
        out = []
        for p in snap.get("panes") or []:
            if not isinstance(p, dict) or not isinstance(p.get("pane_id"), str):
                continue
            tokens = p.get("tokens") if isinstance(p.get("tokens"), dict) else {}
            pid, command = None, ""
            if tokens.get(RECORD_TOKEN):
                try:
                    info = self._process_info(p["pane_id"])
                except HerdrError:
                    continue  # gone since the snapshot
                pid = info.get("shell_pid") if isinstance(info.get("shell_pid"), int) else None
                command = next((f.get("name") or "" for f in info.get("foreground_processes") or []
                                if isinstance(f, dict) and f.get("pid") == pid), "")
            out.append(self._pane(p, labels.get(p.get("tab_id"), ""), pid, command))
        return out

    @staticmethod
    def _pane(p: Mapping[str, Any], tab_label: str, pid: int | None, command: str = "") -> PaneInfo:
        tokens = p.get("tokens") if isinstance(p.get("tokens"), dict) else {}
        tab = str(p.get("tab_id") or "")
        extra = {"workspace_id": str(p.get("workspace_id") or "")}
        if tokens.get(CONVERSATION_TOKEN):
            extra["conversation"] = str(tokens[CONVERSATION_TOKEN])
        return PaneInfo(pane_id=p["pane_id"], pid=pid, session_id=tab, session_name=tab_label, window_id=tab,
                        cwd=str(p.get("cwd") or ""), command=command, record=tokens.get(RECORD_TOKEN) or None,
                        agent=tokens.get(AGENT_TOKEN) or None, extra=extra)

    # -- creating a pane and starting the agent in it ------------------------------------------
    def create(self, argv, *, cwd, env, name, target=None, split=None, options={}):
        if split is not None and split not in ("right", "below"):
            raise UsageError(f"--split must be 'right' or 'below', not {split!r}")
        if not os.path.isdir(cwd):  # herdr would start the pane in $HOME without a word
            raise UsageError(f"{cwd}: no such directory")
        pane, tab_label, created = self._new_pane(cwd, name, target, split)
        pane_id = pane.get("pane_id")
        if not isinstance(pane_id, str):
            raise MuxhostError(f"herdr made no pane on {self.where()} (its answer named none)")
        try:
            tokens = {token(k): str(v) for k, v in options.items()}
            if tokens:  # before anything runs: a look meanwhile sees the pane as the record's
                self.call("pane.report_metadata", {"pane_id": pane_id, "source": SOURCE, "tokens": tokens})
            pid, command = self._start(pane_id, argv, cwd, env)
        except BaseException:
            self._close(pane_id)
            raise
        pane = {**pane, "tokens": {**(pane.get("tokens") or {}), **tokens}}
        return self._pane(pane, tab_label, pid, command), created

    def _new_pane(self, cwd: str, name: str, target: str | None, split: str | None) -> tuple[dict, str, bool]:
        """A new pane with its shell: a split of ``target``, a tab in ``target``'s workspace, or a tab
        in the focused workspace (a new workspace when there is none). Returns the pane's
        ``PaneInfo``, its tab's label, and whether muxhost made the tab ("session")."""
        snap = self._snapshot()
        tabs = {t["tab_id"]: t for t in snap.get("tabs") or [] if isinstance(t, dict) and "tab_id" in t}
        panes = {p["pane_id"]: p for p in snap.get("panes") or [] if isinstance(p, dict) and "pane_id" in p}
        if split:
            if not target and os.environ.get("HERDR_PANE_ID") and os.environ.get("HERDR_SOCKET_PATH") == self.path:
                target = os.environ["HERDR_PANE_ID"]  # run inside herdr: split the pane we are in
            if not target:
                raise UsageError("--split needs --target PANE (a herdr pane id such as w1:p1), or run it inside herdr")
            if target in tabs:
                target = next((p for p, info in panes.items() if info.get("tab_id") == target), target)
            if target not in panes:
                raise NotFound(f"herdr: no pane {target!r} on {self.where()}")
            r = self.call("pane.split", {"target_pane_id": target, "direction": "right" if split == "right" else "down",
                                         "cwd": cwd})
            pane = r.get("pane") or {}
            return pane, str(tabs.get(pane.get("tab_id"), {}).get("label") or ""), False
        workspaces = [w for w in snap.get("workspaces") or [] if isinstance(w, dict) and "workspace_id" in w]
        if target:
            ids = {w["workspace_id"] for w in workspaces}
            by_label = [w["workspace_id"] for w in workspaces if w.get("label") == target]
            by_tab = [t["workspace_id"] for t in tabs.values() if target in (t["tab_id"], t.get("label"))]
            ws = target if target in ids else (by_label or by_tab or [None])[0]
            if ws is None and target in panes:
                ws = panes[target].get("workspace_id")
            if ws is None:
                raise NotFound(f"herdr: no workspace, tab or pane {target!r} on {self.where()}")
            r = self.call("tab.create", {"workspace_id": ws, "cwd": cwd, "label": name})
            return r.get("root_pane") or {}, str((r.get("tab") or {}).get("label") or name), False
        if workspaces:
            ws = snap.get("focused_workspace_id") or workspaces[0]["workspace_id"]
            try:
                r = self.call("tab.create", {"workspace_id": ws, "cwd": cwd, "label": name})
                return r.get("root_pane") or {}, str((r.get("tab") or {}).get("label") or name), True
            except HerdrError as e:
                if e.code != "workspace_not_found":
                    raise  # else: the workspace went meanwhile (with its last pane)
        # `herdr server` starts with no workspace, and the last pane takes its workspace with it
        r = self.call("workspace.create", {"cwd": cwd, "label": WORKSPACE_LABEL})
        tab = r.get("tab") or {}
        try:
            self.call("tab.rename", {"tab_id": tab["tab_id"], "label": name})
            label = name
        except (HerdrError, KeyError):
            label = str(tab.get("label") or "")
        return r.get("root_pane") or {}, label, True

    def _start(self, pane_id: str, argv: Sequence[str], cwd: str, env: Mapping[str, str]) -> tuple[int | None, str]:
        """Start ``argv`` in the fresh pane: wait for its shell, type ``exec <launcher> <file>`` and
        Enter (the only input), check the launcher took its file and became the agent. Returns the
        pane's pid (the agent) and the agent's process name ("" when it ended already)."""
        cmd = launch_file(argv, cwd=cwd, env=env, inherit=PANE_ENV)
        try:
            shell = self._wait_ready(pane_id)
            pid = shell.get("pid")
            # a leading space keeps the line out of the shell's history (bash, zsh)
            self.call("pane.send_input", {"pane_id": pane_id, "text": " exec " + shlex.join(cmd.argv),
                                          "keys": ["enter"]})
            taken = cmd.wait(pid)
        except BaseException:
            cmd.discard()  # no agent: no environment left on disk
            raise
        if not taken:
            raise MuxhostError(f"herdr pane {pane_id}: its shell did not run muxhost's launcher "
                               f"within {LAUNCH_TIMEOUT:g}s")
        return pid, self._wait_agent(pane_id, pid, shell.get("argv"), cmd.argv)

    def _wait_ready(self, pane_id: str) -> dict[str, Any]:
        """The pane's shell once it is ready for a line: alone in the terminal's foreground (its rc
        files ran) and its prompt drawn (the screen is not empty and did not change for one poll).
        After :data:`READY_TIMEOUT` the line is typed anyway (a shell with an empty prompt); the
        terminal keeps it until the shell reads it. Returns the shell's process entry."""
        deadline = time.monotonic() + READY_TIMEOUT
        screen, seen = None, None  # the last screen read; the shell's entry, once seen
        while True:
            try:
                info = self._process_info(pane_id)
            except HerdrError:
                raise MuxhostError(f"herdr pane {pane_id} closed before its shell was ready") from None
            pid = info.get("shell_pid")
            fg = [p for p in info.get("foreground_processes") or [] if isinstance(p, dict)]
            shell = next((p for p in fg if p.get("pid") == pid), None)
            seen = shell or seen
            if isinstance(pid, int) and shell is not None and len(fg) == 1:
                now = self.call("pane.read", {"pane_id": pane_id, "source": "visible"}).get("read", {}).get("text", "")
                if now.strip() and now == screen:
                    return shell
                screen = now
            if time.monotonic() > deadline:
                if not isinstance(pid, int):
                    raise MuxhostError(f"herdr pane {pane_id} has no shell process")
                return seen or {"pid": pid}
            time.sleep(POLL)

    def _wait_agent(self, pane_id: str, pid: int | None, shell_argv: Any, launcher_argv: list[str]) -> str:
        """Wait until the pane's process ``pid`` (the shell) is neither the shell nor the launcher any
        more, in the terminal's foreground: the agent. The pane may be gone already (an agent that
        ended at once takes its pane with it). Returns the agent's process name."""
        deadline = time.monotonic() + AGENT_TIMEOUT
        seen = "nothing"
        while True:
            try:
                info = self._process_info(pane_id)
            except HerdrError:
                return ""
            fg = [p for p in info.get("foreground_processes") or [] if isinstance(p, dict)]
            for p in fg:
                argv = p.get("argv") if isinstance(p.get("argv"), list) else [p.get("name")]
                if p.get("pid") == pid and argv != launcher_argv and argv != shell_argv:
                    return str(p.get("name") or "")
            if fg:
                seen = ", ".join(f"pid {p.get('pid')} {p.get('name')}" for p in fg)
            if time.monotonic() > deadline:
                raise MuxhostError(f"herdr pane {pane_id}: the agent did not become the pane's foreground process "
                                   f"(it is {seen})")
            time.sleep(POLL)

    def _close(self, pane_id: str) -> None:
        try:
            self.call("pane.close", {"pane_id": pane_id})
        except MuxhostError:
            pass

    def respawn(self, pane_id, argv, *, cwd, env):
        raise MuxhostError("herdr keeps no dead pane to start an agent in again")

    # -- actions ----------------------------------------------------------------------------
    def type_text(self, pane_id, text):
        self.call("pane.send_text", {"pane_id": pane_id, "text": text})

    def send_keys(self, pane_id, *keys):
        self.call("pane.send_keys", {"pane_id": pane_id, "keys": [herdr_key(k) for k in keys]})

    def capture(self, pane_id):
        try:
            read = self.call("pane.read", {"pane_id": pane_id, "source": "recent", "lines": 1000}).get("read") or {}
        except HerdrError as e:
            if e.code == "pane_not_found":
                raise NotFound(f"herdr: no pane {pane_id}") from None
            raise
        return str(read.get("text") or "")

    def kill_pane(self, pane_id):
        self._close(pane_id)

    def kill_session(self, session_id):
        try:
            self.call("tab.close", {"tab_id": session_id})
        except MuxhostError:
            pass

    def set_pane_option(self, pane_id: str, name: str, value: str) -> None:
        self.call("pane.report_metadata", {"pane_id": pane_id, "source": SOURCE, "tokens": {token(name): value}})

    def show_conversation(self, pane_id: str, agent: str, conversation_id: str) -> None:
        """Let herdr show which conversation runs in the pane: a ``muxhost_conversation`` token and
        the pane's title (``pane.report_metadata``)."""
        self.call("pane.report_metadata", {"pane_id": pane_id, "source": SOURCE, "title": f"{agent} {conversation_id}",
                                           "tokens": {CONVERSATION_TOKEN: conversation_id}})
