"""Purge: validate → in use (the whole family) → the plan → veto → carry it out → the residual,
under the conversation's lock. Typed plans are carried out by :mod:`muxhost.plans`. Part of
:class:`muxhost.host.Host`."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Callable, Iterable, Iterator

from muxhost.agent import Agent, AgentContext, PurgeReport
from muxhost.errors import MuxhostError, NotFound, Refused, UsageError
from muxhost.state import LIVE_STATES, Live
from muxhost.store import Record


def _callers_home(home: str) -> bool:
    """``home`` is the HOME of whoever runs muxhost (compared by realpath)."""
    return os.path.realpath(home) == os.path.realpath(os.environ.get("HOME") or os.path.expanduser("~"))


class PurgeOps:
    """The purge half of :class:`muxhost.host.Host`."""

    @staticmethod
    def check_id(agent: Agent, conversation_id: str) -> None:
        if not agent.valid_id(conversation_id):
            raise UsageError(f"{conversation_id!r} is not a valid {agent.name} conversation id")

    def purge(self, *, rec: Record | None = None, agent_name: str | None = None,
              conversation_id: str | None = None, home: str | None = None, dry_run: bool = False,
              stop: bool = False, confirm: Callable[[PurgeReport], bool] | None = None,
              ctx: AgentContext | None = None) -> PurgeReport:
        """validate → in_use → artifacts (the plan) → veto → purge → artifacts (the residual)."""
        if rec is not None:
            agent = self.registry.agent(rec.agent)
            if conversation_id is None:
                if rec.state != "stopped":
                    view = self.view([rec])
                    self.refresh([self.live(rec, view, agent, check_resumable=False)], view)
                conversation_id = rec.conversation_id
            if not conversation_id:
                raise NotFound(f"record {rec.id} has no conversation id: nothing to purge")
        else:
            agent = self.registry.agent(agent_name or "")
            if conversation_id is None:
                raise UsageError("purge needs a REF, or --agent and --conversation")
        self.check_id(agent, conversation_id)
        if ctx is None:  # (a caller that found a hand-started agent in a pane passes its context)
            # (an explicit --home wins: a record's copy of the conversation in another HOME is not it)
            rec = rec or self._record_for(agent.name, conversation_id, home)
            if rec is not None:
                ctx = self.context(rec)
            else:
                h, env = self.agent_env(dict(os.environ), home, agent.name)
                ctx = AgentContext(home=h, env=env, cwd=os.getcwd(), config=self.config.agent(agent.name))
        if dry_run:
            return self._purge(agent, ctx, conversation_id, rec, dry_run=True, stop=stop)
        # held from the in-use check until the residual is read: a resume or launch of this
        # conversation (and a second purge) that comes meanwhile waits briefly, then is refused
        with self.conversation_lock(agent.name, conversation_id, "purge"):
            report = self._purge(agent, ctx, conversation_id, rec, stop=stop, confirm=confirm)
        if rec is not None and rec.state == "asleep" and rec.conversation_id == conversation_id and not report.residual:
            self.stop(rec)  # nothing left to wake: its stub goes too
        return report

    def conversation_lock(self, agent: str, conversation_id: str, purpose: str):
        """The per-conversation lock (muxhost.locks), in the state dir beside the store."""
        from muxhost import locks

        return locks.conversation(Path(self.store.path).parent / "locks", agent, conversation_id, purpose)

    @contextlib.contextmanager
    def record_locks(self, records: list[Record], purpose: str,
                     timeout: float | None = None) -> Iterator[dict[str, MuxhostError]]:
        """Hold the per-record locks (:func:`muxhost.locks.records`) of ``records``, each record
        then read again (into the caller's objects: it prints them) as whoever held the lock before
        left it. Yields those left alone, with their error: another muxhost held the lock too long
        (exit 4; ``timeout``: the wait, default :data:`muxhost.locks.RECORD_WAIT`), or removed the
        record meanwhile (exit 3)."""
        from muxhost import locks

        with locks.records(Path(self.store.path).parent / "locks", [r.id for r in records], purpose,
                           timeout) as busy:
            left: dict[str, MuxhostError] = dict(busy)
            for r in records:
                if r.id in left:
                    continue
                now = self.store.get(r.id)
                if now is None:
                    left[r.id] = NotFound(f"record {r.id} ({r.name}) is gone: another muxhost removed it")
                elif now.updated_at != r.updated_at:
                    vars(r).update(vars(now))
            yield left

    @contextlib.contextmanager
    def record_lock(self, rec: Record, purpose: str) -> Iterator[None]:
        """One record's lock, refused (exit 4) when another muxhost holds it too long; ``rec`` is
        left as the caller read it (to compare it with the store's)."""
        from muxhost import locks

        with locks.records(Path(self.store.path).parent / "locks", [rec.id], purpose) as busy:
            if busy:
                raise busy[rec.id]
            yield

    def _purge(self, agent: Agent, ctx: AgentContext, conversation_id: str, rec: Record | None, *,
               dry_run: bool = False, stop: bool = False,
               confirm: Callable[[PurgeReport], bool] | None = None) -> PurgeReport:
        report = PurgeReport(agent=agent.name, conversation_id=conversation_id, record=rec.id if rec else None,
                             home=None if _callers_home(ctx.home) else ctx.home)
        runs, live = False, None
        if stop and rec is not None:
            live = self.live(rec, self.view([rec]), agent, check_resumable=False)
            runs = live.state in LIVE_STATES
            if runs and not dry_run:
                done = self.stop(rec)
                report.stopped = {"outcome": done.rec.outcome, "seconds": done.rec.seconds}
        from muxhost import plans

        members = self._family(agent, ctx, conversation_id)
        try:  # (a dry run with --stop: the record's own agent would be stopped first, so it holds nothing)
            self._refuse_held(agent, ctx, conversation_id, members, live if dry_run and runs else None)
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
                reason = self.pm.hook.muxhost_purge_veto(agent=agent.name, conversation_id=conversation_id,
                                                         artifacts=list(report.plan))
                report.refused = None if reason is None else f"purge vetoed: {reason}"
            if runs:
                ctx.notes.append(f"with --stop, record {rec.id} ({rec.name}) is stopped first")
            report.dry_run = True
            report.notes = list(ctx.notes)
            return report
        if confirm is not None:
            if not confirm(report):
                raise Refused("purge cancelled")
            # the answer may have taken minutes: who holds it now, and what is there now
            members = self._family(agent, ctx, conversation_id)
            self._refuse_held(agent, ctx, conversation_id, members)
            items = self._plan(agent, ctx, members)
        purged = self.pm.hook.muxhost_conversation_purged  # (its plugins imported before anything goes)
        reason = self.pm.hook.muxhost_purge_veto(agent=agent.name, conversation_id=conversation_id,
                                                 artifacts=list(report.plan))
        if reason is not None:
            raise Refused(f"purge vetoed: {reason}")
        ran = plans.carry_out(items, ctx, ctx.notes)
        after = self._plan(agent, ctx, self._family(agent, ctx, conversation_id), members)
        left = {i.key for i in after}
        report.removed = ran + [i.label for i in items
                                if i.key not in left and i.artifact.kind not in ("command", "leftover", "legacy")]
        report.residual = [i.label for i in after if i.artifact.kind != "command"]
        report.notes = list(ctx.notes)
        purged(agent=agent.name, conversation_id=conversation_id, report=report.to_dict())
        return report

    def _family(self, agent: Agent, ctx: AgentContext, conversation_id: str) -> list[str]:
        from muxhost import plans

        try:
            return plans.family(agent, ctx, conversation_id)
        except MuxhostError:
            raise
        except Exception as e:  # fail closed: a family we cannot see cannot be purged
            raise Refused(f"cannot tell the child conversations of {conversation_id} "
                          f"({agent.name}.children: {type(e).__name__}: {e}); nothing was removed") from None

    def _refuse_held(self, agent: Agent, ctx: AgentContext, conversation_id: str, members: list[str],
                     stopped: "Live | None" = None) -> None:
        """Exit 4 when the conversation or any conversation of its family is held — leaving out
        ``stopped``, a record a ``--stop`` would stop first (itself, and processes of its tree)."""
        import re

        own = {p.pid for p in stopped.tree} if stopped is not None else set()

        def theirs(h: str) -> bool:
            m = re.match(r"pid (\d+)\b", h)
            return stopped is None or not (h.startswith(f"record {stopped.rec.id} ") or (m and int(m.group(1)) in own))

        holders = []
        for member in members:
            label = "" if member == conversation_id else f"child conversation {member}: "
            holders += [label + h for h in self._holders(agent, ctx, member) if theirs(h)]
        if holders:
            raise Refused(f"conversation {conversation_id} is in use: " + "; ".join(holders))

    def _plan(self, agent: Agent, ctx: AgentContext, members: list[str], also: Iterable[str] = ()) -> list:
        """The plan's items (an older plugin's strings too: :func:`muxhost.plans.legacy`)."""
        from muxhost import plans

        return plans.plan(agent, ctx, members, also)

    def _record_for(self, agent: str, conversation_id: str, home: str | None = None) -> Record | None:
        """The latest record in ``conversation_id`` (with ``home``: one whose HOME it is)."""
        same = (lambda h: True) if home is None else (
            lambda h, want=os.path.realpath(os.path.expanduser(home)): os.path.realpath(h) == want)
        matches = [r for r in self.store.all() if r.agent == agent and r.conversation_id == conversation_id
                   and same(r.home)]
        return matches[-1] if matches else None

    def refuse_alive(self, rec: Record, agent: Agent | None, conversations: Iterable[str],
                     own: Iterable[int] = (), then: str = "") -> None:
        """Exit 4 while something of the record may still run where its pane does not show it — a
        pane gone from this muxhost's view (another TMUX_TMPDIR, a server it cannot reach) is no
        proof that its agent ended: a process of an earlier run (its ``MUXHOST_RECORD``, outside
        ``own``: the record's own pane tree), or one of ``conversations`` held (another live
        record, or the plugin's ``in_use``, fail closed, as for a purge). Asked before ``resume``
        starts a record again and before ``rm`` forgets one; ``then`` ends the message."""
        from muxhost import procs

        cids = list(dict.fromkeys(conversations))
        view = self.view([rec, *(r for r in self.store.all() if r.conversation_id in cids)])
        skip = set(own)
        left = [p for p in procs.marked(rec.id, view.table) if p.pid not in skip]
        if left:
            raise Refused(f"record {rec.id} ({rec.name}) still has processes of an earlier run (pid "
                          f"{', '.join(str(p.pid) for p in left[:5])}); `muxhost stop {rec.id}` ends them first{then}")
        if agent is None:  # (its plugin is gone: nothing can say more)
            return
        ctx = self.context(rec, table=view.table)
        for cid in cids:
            held = self._holders(agent, ctx, cid, view)
            if held:
                raise Refused(f"conversation {cid} of record {rec.id} ({rec.name}) is in use "
                              f"({'; '.join(held)}): it runs already; stop it first{then}")

    def _holders(self, agent: Agent, ctx: AgentContext, conversation_id: str, view=None) -> list[str]:
        holders = []
        records = [r for r in self.store.all() if r.agent == agent.name and r.conversation_id == conversation_id]
        if records:
            view = view or self.view(records)
            for r in records:
                lv = self.live(r, view, agent, check_resumable=False)
                if lv.state in ("running", "starting"):
                    where = f" in pane {lv.pane.pane_id}" if lv.pane else ""
                    holders.append(f"record {r.id} ({r.name}){where}")
        try:
            for h in agent.in_use(ctx, conversation_id) or []:
                if h not in holders:
                    holders.append(str(h))
        except Exception as e:  # fail closed: if we cannot tell, it is in use
            holders.append(f"cannot tell who holds it ({type(e).__name__}: {e})")
        return holders

    def purge_pane(self, pane_id: str, *, dry_run: bool = False, stop: bool = False,
                   confirm: Callable[[PurgeReport], bool] | None = None, confirmed: str | None = None) -> PurgeReport:
        """Purge the conversation of the agent in ``pane_id``; ``confirmed``: the id the user said
        yes to (the purge key's prompt), purged exactly, and refused if the pane is in another now."""
        loc = self.locate(pane_id)
        if confirmed is not None:
            self.refuse_moved(loc, confirmed)
        if loc.rec is not None:
            return self.purge(rec=loc.rec, conversation_id=confirmed, dry_run=dry_run, stop=stop, confirm=confirm)
        if not loc.conversation_id:
            raise NotFound(f"the {loc.agent.name} agent in pane {pane_id} has no conversation on disk yet")
        self.check_id(loc.agent, loc.conversation_id)
        if stop and not dry_run:
            self.stop_adopted(loc)
        return self.purge(agent_name=loc.agent.name, conversation_id=loc.conversation_id, dry_run=dry_run,
                          confirm=confirm, ctx=loc.ctx)

    @staticmethod
    def refuse_moved(loc, confirmed: str) -> None:
        """Exit 4 when the agent located in a pane is no longer in the conversation ``confirmed``."""
        if loc.conversation_id != confirmed:
            raise Refused(f"the {loc.agent.name} agent in pane {loc.pane.pane_id} is in conversation "
                          f"{loc.conversation_id or '(none yet)'} now, not {confirmed} as confirmed: nothing "
                          "was purged (press the key again)")

