"""The pane backend interface: everything pane-specific the host needs, small and typed.

A backend creates a pane running an argv (with a cwd and an environment), types text, sends keys,
captures the screen, gives one snapshot of all panes with their pids and options, and kills a pane or
its session. The host never talks to tmux (or herdr) directly.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Sequence

RECORD_OPTION = "@muxhost_record"
AGENT_OPTION = "@muxhost_agent"
# what the activity watch publishes (muxhost.watching): per pane, and for the whole server
ACTIVITY_OPTION = "@muxhost_activity"              # working | waiting | idle | stalled
ACTIVITY_SINCE_OPTION = "@muxhost_activity_since"  # epoch seconds it has held since
SUMMARY_OPTION = "@muxhost_summary"                # "2 working · 1 waiting"
WAITING_OPTION = "@muxhost_waiting"                # the pane that has waited longest, or ""
WATCH_OPTION = "@muxhost_watch"                    # "<pid> <create time>" of the running watch


@dataclass(frozen=True)
class PaneInfo:
    pane_id: str
    pid: int | None
    dead: bool = False
    dead_status: int | None = None
    session_id: str = ""
    session_name: str = ""
    window_id: str = ""
    cwd: str = ""
    command: str = ""
    record: str | None = None      # the @muxhost_record option
    agent: str | None = None       # the @muxhost_agent option
    extra: Mapping[str, str] = field(default_factory=dict)
    #: the latest time (epoch s) the pane may have printed something, as the backend knows it: never
    #: earlier than its real last output, maybe later (tmux: its window's, to the second); None = unknown
    last_output: float | None = None
    #: an opaque value that changes when the pane's output changes ("" = the backend cannot tell)
    output_mark: str = ""
    activity: str | None = None          # what the watch published: @muxhost_activity
    activity_since: float | None = None  # @muxhost_activity_since
    watcher: str | None = None           # the server's @muxhost_watch: "<pid> <create time>"
    #: the latest time (epoch s) a user's key (or an attach) may have gone into this pane, as the
    #: backend knows it (tmux: the session's activity, to the second, while the pane is the active
    #: one of its session's current window; muxhost's own typing does not count); None = unknown.
    #: An agent someone is typing to is not put to sleep for being idle.
    last_input: float | None = None
    #: which instance of the server the pane is on (tmux: the server's pid and start time): another
    #: value on the same address is a new server, after the one a watch watched went; None = unknown
    server: str | None = None


#: key names the host uses, the same for every backend (each maps them to its own): "enter",
#: "esc", "tab", "backspace", "up", "down", "left", "right", and "ctrl+<letter>"
KEYS = ("enter", "esc", "tab", "backspace", "up", "down", "left", "right")


class Backend(ABC):
    """One terminal multiplexer server (a tmux socket, a herdr session).

    A factory registered with ``muxhost_register_backends`` makes one: ``factory(address, config)``,
    where ``address`` is the server's address (a tmux socket name, a herdr socket path; None = the
    backend's default server). A factory may have an attribute ``resolve_address(given, config)``
    that turns the user's choice (``--socket``, else the backend's own environment variable or
    config key) into the address records keep, and an attribute ``client_env`` (its backends'
    :attr:`client_env`): a launch drops the client variables of every installed backend."""

    name: str = ""
    #: what the multiplexer tells processes about the client they run in (tmux: TMUX, TMUX_PANE);
    #: never handed from the launching muxhost to an agent, whose pane gets its own
    client_env: tuple[str, ...] = ()

    @abstractmethod
    def snapshot(self) -> list[PaneInfo] | None:
        """Every pane of the server in ONE query; None when no server is running."""

    @abstractmethod
    def create(self, argv: Sequence[str], *, cwd: str, env: Mapping[str, str], name: str,
               target: str | None = None, split: str | None = None,
               options: Mapping[str, str] = {}) -> tuple[PaneInfo, bool]:
        """Start ``argv`` (as the pane's command, not typed into a shell) in a new session called
        ``name``, or a new window of ``target``, or a split (``right``/``below``) of ``target``.
        The pane keeps its last screen and exit status when the command ends, and carries
        ``options``. Returns the pane and whether a session was created."""

    @abstractmethod
    def respawn(self, pane_id: str, argv: Sequence[str], *, cwd: str, env: Mapping[str, str]) -> PaneInfo:
        """Run ``argv`` again in the (dead) pane ``pane_id``."""

    @abstractmethod
    def type_text(self, pane_id: str, text: str) -> None:
        """Type ``text`` literally (no key names interpreted)."""

    @abstractmethod
    def send_keys(self, pane_id: str, *keys: str) -> None:
        """Press keys by their backend-neutral names (:data:`KEYS`, ``ctrl+u``)."""

    @abstractmethod
    def capture(self, pane_id: str) -> str:
        """The pane's screen and its scrollback."""

    @abstractmethod
    def kill_pane(self, pane_id: str) -> None: ...

    @abstractmethod
    def kill_session(self, session_id: str) -> None: ...

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Within the block, :meth:`type_text`, :meth:`send_keys`, :meth:`kill_pane` and
        :meth:`kill_session` may be queued and sent together when it ends (one round trip for many
        panes: the stop ladder of many agents). Errors of queued actions are not raised. By
        default each action runs at once."""
        yield

    def message(self, text: str, pane_id: str | None = None, client: str | None = None) -> None:
        """Show a short message to the user (tmux: display-message). Optional."""

    def screens(self, pane_ids: Sequence[str]) -> dict[str, str]:
        """The visible screen (no scrollback) of each pane, in ONE round trip where the backend can;
        a pane that is gone is left out. Default: :meth:`capture` of each."""
        out: dict[str, str] = {}
        for pane_id in pane_ids:
            try:
                out[pane_id] = self.capture(pane_id)
            except Exception:  # gone meanwhile: no screen
                continue
        return out

    def publish(self, panes: Mapping[str, Mapping[str, str | None]],
                server: Mapping[str, str | None] = {}) -> None:
        """Set named values on panes and on the server (tmux: pane and global user options, which
        status and border formats show), in ONE round trip where the backend can; None unsets a
        value. Errors (a pane gone meanwhile) are ignored. Default: :meth:`set_pane_option` each."""
        for pane_id, values in panes.items():
            for name, value in values.items():
                if value is not None:
                    try:
                        self.set_pane_option(pane_id, name, value)
                    except Exception:
                        continue

    def alert(self, text: str, pane_id: str | None) -> None:
        """Get the user's attention for ``pane_id`` (an agent that waits for them): tmux shows
        ``text`` on every client and rings the pane's bell (None: an agent of a remote host, no pane
        here). Default: :meth:`message`."""
        self.message(text, pane_id)

    def set_pane_option(self, pane_id: str, name: str, value: str) -> None:
        """Attach a named value to a pane (tmux: a user option). Optional."""

    def pane_option(self, pane_id: str, name: str) -> str | None:
        """The value :meth:`set_pane_option` attached to a pane, or None. Optional."""
        return None

    def where(self) -> str:
        """This server, for messages ("socket 'agents'")."""
        return self.name

    @property
    def address(self) -> str | None:
        """This server's address, as records keep it (None: the backend's default server)."""
        return None

    def pane_ref(self, text: str) -> str | None:
        """The pane id a user's REF names on this backend (tmux: ``%12``), or None when ``text`` is no
        pane reference of this backend."""
        return None

    def attach_hint(self, pane: PaneInfo) -> str:
        """How the user gets to ``pane`` (``tmux -L agents attach -t demo-1a2b``), or ""."""
        return ""

    def attach(self, pane: PaneInfo, env: Mapping[str, str]) -> list[str] | None:
        """Take the user to ``pane`` (``muxhost attach``). ``env`` is the caller's environment: from
        inside this server, move the caller's client there and return None; else return the argv
        that the caller execs to get there (a client of this server). The default: refused, with
        :meth:`attach_hint` when there is one."""
        from muxhost.errors import MuxhostError

        hint = self.attach_hint(pane)
        raise MuxhostError(f"the {self.name} backend cannot attach by itself" + (f"; run: {hint}" if hint else ""))

    def move_client_off(self, client: str, session_id: str, text: str) -> str | None:
        """Before session ``session_id`` goes away: if the user's ``client`` is on it, move the client
        to the session it was on before (else the most recently used other one), or, when there is
        none, to a holding pane (not a record) that shows ``text``. Returns that holding pane's id
        (for :meth:`show_held`), or None. Optional: a backend without clients does nothing."""
        return None

    def show_held(self, pane_id: str, text: str) -> None:
        """Replace the text of a holding pane made by :meth:`move_client_off` (the outcome); the pane
        stays until the user presses a key, then closes. Optional."""

    #: False for a multiplexer that removes a pane when its process ends (herdr): no pane then means
    #: the agent exited by itself (``exited``, its status unknown), not that the record is ``lost``
    keeps_dead_panes: bool = True
