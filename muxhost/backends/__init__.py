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


#: key names the host uses, the same for every backend (each maps them to its own): "enter",
#: "esc", "tab", "backspace", "up", "down", "left", "right", and "ctrl+<letter>"
KEYS = ("enter", "esc", "tab", "backspace", "up", "down", "left", "right")


class Backend(ABC):
    """One terminal multiplexer server (a tmux socket, a herdr session).

    A factory registered with ``muxhost_register_backends`` makes one: ``factory(address, config)``,
    where ``address`` is the server's address (a tmux socket name, a herdr socket path; None = the
    backend's default server). A factory may have an attribute ``resolve_address(given, config)``
    that turns the user's choice (``--socket``, else the backend's own environment variable or
    config key) into the address records keep."""

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

    def set_pane_option(self, pane_id: str, name: str, value: str) -> None:
        """Attach a named value to a pane (tmux: a user option). Optional."""

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

    def move_client_off(self, client: str, session_id: str, text: str) -> str | None:
        """Before session ``session_id`` goes away: if the user's ``client`` is on it, move the client
        to the session it was on before (else the most recently used other one), or, when there is
        none, to a holding pane (not a record) that shows ``text``. Returns that holding pane's id
        (for :meth:`show_held`), or None. Optional: a backend without clients does nothing."""
        return None

    def show_held(self, pane_id: str, text: str) -> None:
        """Replace the text of a holding pane made by :meth:`move_client_off` (the outcome); the pane
        stays until the user presses a key, then closes. Optional."""
