"""Purge: validate → in use (the whole family) → the plan → veto → carry it out → the residual,
under the conversation's lock (:mod:`muxhost.locks`), after the in-use refusals (:mod:`muxhost.refusals`);
``--stop`` runs the ladder (:mod:`muxhost.ladder`) first. Typed plans are carried out by :mod:`muxhost.plans`."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Callable, Iterable

from muxhost.agent import Agent, AgentContext, PurgeReport
from muxhost.errors import MuxhostError, NotFound, Refused, UsageError
from muxhost.refusals import check_id, refuse_moved
from muxhost.state import LIVE_STATES
from muxhost.store import Record

if TYPE_CHECKING:
    from muxhost.core import Core
    from muxhost.ladder import Ladder
    from muxhost.launching import Launching
    from muxhost.locks import Locks
    from muxhost.refusals import Refusals
    from muxhost.state import State, View


def _callers_home(home: str) -> bool:
    """``home`` is the HOME of whoever runs muxhost (compared by realpath)."""
    return os.path.realpath(home) == os.path.realpath(os.environ.get("HOME") or os.path.expanduser("~"))


class Purging:
    """Purge of one conversation (and its family): of a record, of an agent in a pane, or by id."""

    def __init__(self, core: "Core", state: "State", ladder: "Ladder", locks: "Locks", refusals: "Refusals",
                 launching: "Launching"):
        self.core, self.state, self.ladder, self.locks = core, state, ladder, locks
        self.refusals, self.launching = refusals, launching

    def purge(self, *, rec: Record | None = None, agent_name: str | None = None,
              conversation_id: str | None = None, home: str | None = None, dry_run: bool = False,
              stop: bool = False, confirm: Callable[[PurgeReport], bool] | None = None,
              ctx: AgentContext | None = None, confirmed: str | None = None,
              archive: bool | None = None) -> PurgeReport:
        """validate → in_use → artifacts (the plan) → veto → [archive] → purge → artifacts (the residual).
        ``archive``: keep what goes in an archive first (:mod:`muxhost.archive`); None: config
        ``purge.archive`` (default false).
        ``confirmed`` (with ``rec``): the id the user said yes to after a dry run, purged exactly; the
        record's conversation is read again first: refused when the record was never in it, and not
        stopped first when it is an earlier one of the record's (its agent is in another by now)."""
        view = None  # (one look serves the refresh, --stop's state and its ladder)
        if rec is not None:
            agent = self.core.registry.agent(rec.agent)
            if conversation_id is None:
                if rec.state != "stopped":
                    view = self.state.view([rec])
                    self.state.refresh([self.state.live(rec, view, agent, check_resumable=False)], view)
                conversation_id = rec.conversation_id
                if confirmed is not None and confirmed != conversation_id:
                    if confirmed not in rec.conversations:
                        raise Refused(f"{rec.name} is not in conversation {confirmed} any more: nothing purged; "
                                      "look again")
                    conversation_id, stop = confirmed, False
            if not conversation_id:
                raise NotFound(f"record {rec.id} has no conversation id: nothing to purge")
        else:
            agent = self.core.registry.agent(agent_name or "")
            if conversation_id is None:
                raise UsageError("purge needs a REF, or --agent and --conversation")
        check_id(agent, conversation_id)
        if ctx is None:  # (a caller that found a hand-started agent in a pane passes its context)
            # (an explicit --home wins: a record's copy of the conversation in another HOME is not it)
            rec = rec or self._record_for(agent.name, conversation_id, home)
            if rec is not None:
                ctx = self.core.context(rec)
            else:
                h, env = self.launching.agent_env(dict(os.environ), home, agent.name)
                ctx = AgentContext(home=h, env=env, cwd=os.getcwd(), config=self.core.config.agent(agent.name))
        archive = self.core.config.purge_archive if archive is None else archive
        if dry_run:
            return self._purge(agent, ctx, conversation_id, rec, dry_run=True, stop=stop, view=view, archive=archive)
        # held from the in-use check until the residual is read: a resume or launch of this
        # conversation (and a second purge) that comes meanwhile waits briefly, then is refused
        with self.locks.conversation(agent.name, conversation_id, "purge"):
            report = self._purge(agent, ctx, conversation_id, rec, stop=stop, confirm=confirm, view=view,
                                 archive=archive)
        if rec is not None and rec.state == "asleep" and rec.conversation_id == conversation_id and not report.residual:
            self.ladder.stop(rec)  # nothing left to wake: its stub goes too
        return report

    def _purge(self, agent: Agent, ctx: AgentContext, conversation_id: str, rec: Record | None, *,
               dry_run: bool = False, stop: bool = False,
               confirm: Callable[[PurgeReport], bool] | None = None, view: "View | None" = None,
               archive: bool = False) -> PurgeReport:
        report = PurgeReport(agent=agent.name, conversation_id=conversation_id, record=rec.id if rec else None,
                             home=None if _callers_home(ctx.home) else ctx.home)
        runs, live = False, None
        if stop and rec is not None:
            view = view or self.state.view([rec])
            live = self.state.live(rec, view, agent, check_resumable=False)
            runs = live.state in LIVE_STATES
            if runs and not dry_run:
                done = self.ladder.stop(rec, view=view)
                report.stopped = {"outcome": done.rec.outcome, "seconds": done.rec.seconds}
        from muxhost import plans  # (start-up: only a purge loads the plans)

        members = self._family(agent, ctx, conversation_id)
        try:  # (a dry run with --stop: the record's own agent would be stopped first, so it holds nothing)
            self.refusals.refuse_held(agent, ctx, conversation_id, members, live if dry_run and runs else None)
        except Refused as e:
            if not dry_run:
                if report.stopped:
                    raise Refused(f"{e} (record {rec.id} was stopped first: {report.stopped['outcome']})") from None
                raise
            report.refused = str(e)  # a dry run changes nothing: the plan, and why it would be refused now
        items = self._plan(agent, ctx, members)
        report.plan = plans.labels(items)
        # (the agent's own delete command alone is nothing to purge: nothing of it is on disk)
        if all(i.artifact.kind == "command" for i in items):
            raise NotFound(f"nothing to purge: conversation {conversation_id} of agent {agent.name} has no artifacts")
        if dry_run:
            if report.refused is None:
                reason = self.core.pm.hook.muxhost_purge_veto(agent=agent.name, conversation_id=conversation_id,
                                                              artifacts=list(report.plan))
                report.refused = None if reason is None else f"purge vetoed: {reason}"
            if runs:
                ctx.notes.append(f"with --stop, record {rec.id} ({rec.name}) is stopped first")
            if archive:
                self._archivable(items, report, ctx)
            report.dry_run = True
            report.notes = list(ctx.notes)
            return report
        if confirm is not None:
            if not confirm(report):
                raise Refused("purge cancelled")
            # the answer may have taken minutes: who holds it now, and what is there now
            ctx.processes = None  # (a new process table: the one read before the question is old)
            members = self._family(agent, ctx, conversation_id)
            self.refusals.refuse_held(agent, ctx, conversation_id, members)
            items = self._plan(agent, ctx, members)
        return self._carry_out(agent, ctx, conversation_id, items, members, report, archive)

    def _carry_out(self, agent: Agent, ctx: AgentContext, conversation_id: str, items: list,
                   members: list[str], report: PurgeReport, archive: bool = False) -> PurgeReport:
        """The veto, the archive (with ``archive``: of these very items, before anything goes), then
        the plan carried out (by the host; an older plugin's strings through its own ``purge``,
        :func:`muxhost.plans.legacy`), and the residual read; ``report`` filled in."""
        from muxhost import plans  # (start-up: only a purge loads the plans)

        purged = self.core.pm.hook.muxhost_conversation_purged  # (its plugins imported before anything goes)
        reason = self.core.pm.hook.muxhost_purge_veto(agent=agent.name, conversation_id=conversation_id,
                                                      artifacts=list(report.plan))
        if reason is not None:
            raise Refused(f"purge vetoed: {reason}")
        if archive:
            report.archive = self._archive(agent, ctx, conversation_id, members, items)
        ran = plans.carry_out(items, ctx, ctx.notes)
        after = self._plan(agent, ctx, self._family(agent, ctx, conversation_id), members)
        left = {i.key for i in after}
        report.removed = ran + [i.label for i in items
                                if i.key not in left and i.artifact.kind not in ("command", "leftover", "legacy")]
        report.residual = [i.label for i in after if i.artifact.kind != "command"]
        report.notes = list(ctx.notes)
        purged(agent=agent.name, conversation_id=conversation_id, report=report.to_dict())
        return report

    @staticmethod
    def _archivable(items: list, report: PurgeReport, ctx: AgentContext) -> None:
        """A dry run with an archive: why archiving would be refused, else a note that it comes first."""
        from muxhost import archive

        try:
            archive.refuse_unnamed_commands(items)
        except Refused as e:
            report.refused = report.refused or str(e)
        else:
            ctx.notes.append("with --archive, what goes is archived first (`muxhost unpurge` puts it back)")

    def _archive(self, agent: Agent, ctx: AgentContext, conversation_id: str, members: list[str], items: list) -> str:
        """The archive of the checked plan ``items``, written and fsynced; when an earlier archive of
        this conversation holds all of it already (a purge that was cut short, run again), that one."""
        from muxhost import archive

        where = archive.folder(self.core.store.path)
        path = archive.write(where, items, {"agent": agent.name, "conversation": conversation_id,
                                            "members": members, "home": ctx.home})
        earlier = archive.holding(where, path)
        if earlier is None:
            return str(path)
        os.unlink(path)
        ctx.notes.append(f"the earlier archive {earlier.name} holds all of it: no second archive written")
        return str(earlier)

    def _family(self, agent: Agent, ctx: AgentContext, conversation_id: str) -> list[str]:
        from muxhost import plans

        try:
            return plans.family(agent, ctx, conversation_id)
        except MuxhostError:
            raise
        except Exception as e:  # fail closed: a family we cannot see cannot be purged
            raise Refused(f"cannot tell the child conversations of {conversation_id} "
                          f"({agent.name}.children: {type(e).__name__}: {e}); nothing was removed") from None

    def _plan(self, agent: Agent, ctx: AgentContext, members: list[str], also: Iterable[str] = ()) -> list:
        """The plan's items (an older plugin's strings too: :func:`muxhost.plans.legacy`)."""
        from muxhost import plans

        return plans.plan(agent, ctx, members, also)

    def _record_for(self, agent: str, conversation_id: str, home: str | None = None) -> Record | None:
        """The latest record in ``conversation_id`` (with ``home``: one whose HOME it is)."""
        same = (lambda h: True) if home is None else (
            lambda h, want=os.path.realpath(os.path.expanduser(home)): os.path.realpath(h) == want)
        matches = [r for r in self.core.store.all() if r.agent == agent and r.conversation_id == conversation_id
                   and same(r.home)]
        return matches[-1] if matches else None

    def purge_pane(self, pane_id: str, *, dry_run: bool = False, stop: bool = False,
                   confirm: Callable[[PurgeReport], bool] | None = None, confirmed: str | None = None,
                   archive: bool | None = None) -> PurgeReport:
        """Purge the conversation of the agent in ``pane_id``; ``confirmed``: the id the user said
        yes to (the purge key's prompt), purged exactly, and refused if the pane is in another now."""
        loc = self.state.locate(pane_id)
        if confirmed is not None:
            refuse_moved(loc, confirmed)
        if loc.rec is not None:
            return self.purge(rec=loc.rec, conversation_id=confirmed, dry_run=dry_run, stop=stop, confirm=confirm,
                              archive=archive)
        if not loc.conversation_id:
            raise NotFound(f"the {loc.agent.name} agent in pane {pane_id} has no conversation on disk yet")
        check_id(loc.agent, loc.conversation_id)
        if stop and not dry_run:
            self.ladder.stop_adopted(loc)
        return self.purge(agent_name=loc.agent.name, conversation_id=loc.conversation_id, dry_run=dry_run,
                          confirm=confirm, ctx=loc.ctx, archive=archive)
