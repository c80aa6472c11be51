"""issue 18 item 7: a claude purge takes the conversation id out of Claude Code's own copies of the
global config (``~/.claude/backups/.claude.json.backup.*``) too: the same member, from each copy."""
from __future__ import annotations

import json
import uuid
from pathlib import Path

from muxhost import AgentContext, plans
from muxhost_claude import ClaudeAgent

A, B = str(uuid.uuid4()), str(uuid.uuid4())


def _doc(cwd: str, last: str) -> bytes:
    return json.dumps({"numStartups": 3, "projects": {cwd: {"lastSessionId": last, "allowedTools": []},
                                                      "/other": {"lastSessionId": B}}}, indent=2).encode()


def test_the_global_configs_backups_lose_the_same_member_and_nothing_else(tmp_path):
    home, cwd = tmp_path / "home", tmp_path / "w"
    cwd.mkdir()
    backups = home / ".claude" / "backups"
    backups.mkdir(parents=True)
    (home / ".claude.json").write_bytes(_doc(str(cwd), A))
    copies = {f".claude.json.backup.{n}": _doc(str(cwd), A) for n in (1700000000001, 1700000000002)}
    copies[".claude.json.backup.1700000000003"] = _doc(str(cwd), B)  # names the neighbour only
    copies[".claude.json.backup.1700000000004"] = b'{"mention": "%s"}' % A.encode()  # another mention: kept, said
    for name, data in copies.items():
        (backups / name).write_bytes(data)
    agent, ctx = ClaudeAgent(), AgentContext(home=str(home), env={}, cwd=str(cwd))
    last = f'projects[{json.dumps(str(cwd))}].lastSessionId'

    members = plans.family(agent, ctx, A)
    items = plans.build(agent, ctx, members, {m: agent.artifacts(ctx, m) for m in members})
    assert sorted(plans.labels(items)) == sorted([f"~/.claude.json: {last}",
                                                  f"~/.claude/backups/.claude.json.backup.1700000000001: {last}",
                                                  f"~/.claude/backups/.claude.json.backup.1700000000002: {last}"])
    plans.carry_out(items, ctx, ctx.notes)
    assert plans.build(agent, ctx, members, {m: agent.artifacts(ctx, m) for m in members}) == []

    for name in (".claude.json.backup.1700000000001", ".claude.json.backup.1700000000002"):
        doc = json.loads((backups / name).read_bytes())
        assert doc == {"numStartups": 3, "projects": {str(cwd): {"allowedTools": []}, "/other": {"lastSessionId": B}}}
    for name in (".claude.json.backup.1700000000003", ".claude.json.backup.1700000000004"):
        assert (backups / name).read_bytes() == copies[name]
    assert any("backups" in n and "1 old copies" in n for n in ctx.notes), ctx.notes
    assert sorted(p.name for p in backups.iterdir()) == sorted(copies)
