"""Built-in plugin: agents defined in config.yaml, with no code.

```yaml
agents:
  aider:
    command: [aider, --no-auto-commits]
    resume: [aider, --restore-chat-history]          # may use {conversation_id}
    exit_text: /exit
    process_names: [aider]
    env: {AIDER_DARK_MODE: "1"}
```

If ``command`` contains ``{conversation_id}``, a new uuid4 is put there at launch (for agents that let
the launcher choose the id, like ``claude --session-id {conversation_id}``), so the record knows it.
Config agents do not know their agent's storage, so they cannot purge.
"""

from __future__ import annotations

import os
from typing import Any

import muxhost
from muxhost.agent import UUID_PATTERN, Agent, AgentContext, Launch
from muxhost.errors import UsageError

TOKEN = "{conversation_id}"


class ConfigAgent(Agent):
    def __init__(self, name: str, entry: dict[str, Any]):
        self.name = name
        self.command = list(entry["command"])
        self.resume_argv = list(entry.get("resume") or [])
        self.exit_text = entry.get("exit_text", "/exit")
        self.process_names = tuple(entry.get("process_names") or (os.path.basename(self.command[0]),))
        self.id_pattern = entry.get("id_pattern") or UUID_PATTERN
        self.install_hint = f"check agents.{name}.command in the config"

    @staticmethod
    def _fill(argv: list[str], conversation_id: str) -> list[str]:
        return [a.replace(TOKEN, conversation_id) for a in argv]

    def launch(self, ctx: AgentContext) -> Launch:
        if any(TOKEN in a for a in self.command):
            import uuid

            cid = str(uuid.uuid4())
            return Launch(self._fill(self.command, cid) + list(ctx.args), conversation_id=cid)
        return Launch(self.command + list(ctx.args))

    def resume(self, ctx: AgentContext, conversation_id: str) -> Launch:
        if not self.resume_argv:
            raise UsageError(f"agent {self.name!r} has no resume command (set agents.{self.name}.resume in the config)")
        return Launch(self._fill(self.resume_argv, conversation_id), conversation_id=conversation_id)

    def exists(self, ctx: AgentContext, conversation_id: str) -> bool:
        # nothing is known about its storage: resumable when a resume command is configured
        return bool(self.resume_argv)

    def _cannot_purge(self) -> UsageError:
        return UsageError(f"agent {self.name!r} is defined in the config and does not know its storage: it cannot purge")

    def artifacts(self, ctx: AgentContext, conversation_id: str) -> list[str]:
        raise self._cannot_purge()

    def purge(self, ctx: AgentContext, conversation_id: str) -> list[str]:
        raise self._cannot_purge()


class ConfigAgents:
    """Registers one :class:`ConfigAgent` for each ``agents:`` entry that has a ``command``
    (an entry without one configures a plugin's agent of that name)."""

    def __init__(self, config=None):
        self.config = config

    @muxhost.hookimpl
    def muxhost_register_agents(self, register):
        if self.config is None:
            return
        for name, entry in self.config.agents.items():
            if entry.get("command"):
                register(ConfigAgent(name, entry))
