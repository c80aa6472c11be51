"""The contract suite every agent plugin subclasses in its own tests (:class:`AgentContract`)."""

from __future__ import annotations

import os
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from muxhost.testing.forensics import (DB_SIDECARS, SQLITE_MAGIC, appended_only, file_head, files_holding,
                                       files_under, plan_names, sqlite_text, tree_hash, unique_text)
from muxhost.testing.helpers import wait_for
from muxhost.testing.mux import Mux, carrying

_XDG_VARS = ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME")


@dataclass
class ContractWorld:
    """What the purge tests start from: in one cwd, a neighbour conversation (made first, its own
    text) and the conversation under test (its texts; its children's texts), both agents stopped."""

    work: Path
    neighbour: dict
    neighbour_text: str
    main: dict
    texts: list[str]
    child_texts: list[str]


class AgentContract:
    """The contract every muxhost agent plugin keeps, checked on real panes against the agent's real
    program. Subclass it in your plugin package's tests and run ``pytest -p muxhost.testing``::

        from muxhost.testing import AgentContract

        class TestMyAgent(AgentContract):
            agent = "myagent"                       # the agent to launch
            has_children = True                     # it can start child conversations
            def converse(self, mux, pane, text):    # make the agent store a turn holding `text`
                mux.wait_screen(pane, "> "); mux.type(pane, text); mux.wait_screen(pane, "answer")
            def spawn_child(self, mux, pane, text): # make it start a child conversation holding `text`
                mux.type(pane, f"use a sub-agent to say {text}"); mux.wait_screen(pane, "done")
            def prepare(self, mux):                 # optional: a fake model server, config, …
                mux.env["MYAGENT_API_URL"] = start_fake_server().url

    What you implement (``mux`` is the :class:`Mux` fixture: a private tmux server, HOME and state):

    - ``agent``: the name the plugin registers; the plugin must be installed (an entry point of
      group ``muxhost``) or made loadable by ``prepare`` (``mux.env.update(install_plugin(…))``).
    - ``converse(mux, pane, text)``: make the agent in tmux pane ``pane`` store a turn holding
      ``text`` and return once it is on disk. It is called right after the pane starts (wait until
      the agent takes input), on panes muxhost started and on a plain shell pane in which the
      conversation was resumed by hand.
    - ``spawn_child(mux, pane, text)`` (with ``has_children = True``): make it start a child
      conversation (a sub-agent, a fork) holding ``text``; return once that is on disk.
    - ``prepare(mux)`` (optional): called first in every test; set ``mux.env``, write ``mux.config``,
      seed ``mux.home``. The agents run in ``self.workdir(mux)`` (made before ``prepare``).
    - ``ignore_paths`` (optional): path fragments the suite never reads or hashes — only for files
      that are not the agent's (a fake server's log). Every other file of HOME and the XDG dirs counts.
    - ``agent_cli`` (default True): the agent is a real CLI program, so the tests get the ``agents``
      marker (``-m "not agents"`` leaves them out); False for a stand-in (the demo agent).
    - ``settle`` (optional, seconds): how long the disk must stay unchanged before the byte-for-byte
      snapshot of a running agent is taken, for agents that write a moment after a turn.
    - ``activity_fixtures`` (a folder, for an agent with an ``activity`` hook): recorded cases of the
      real agent in each state, one folder each (:mod:`muxhost.testing.recording`: its screen, its
      state files, the state expected); None only for an agent without the hook.

    Every test starts from a fresh HOME, tmux server and state dir and types unique texts
    (:func:`unique_text`), so "no file holds the text" is an exact grep of raw bytes (SQLite files,
    their ``-wal`` and free pages included). What each test proves — a failure names its item in
    brackets, e.g. ``[stop] …``:

    - ``test_plugins_lists_the_agent``: ``muxhost plugins --json`` lists it.
    - ``test_a_bad_conversation_id_exits_2_before_anything_runs``: ``purge --agent A --conversation
      'not an id'`` exits 2 with one ``muxhost:`` line, and nothing on disk changed.
    - ``test_launch_purge_while_running_stop_and_resume``: launch → ``discover`` finds an id (``ls``);
      a purge while it runs exits 4 and HOME and the XDG dirs are unchanged byte for byte; stop ends
      with ``exit`` and no survivors (every pid of the record, every process carrying
      ``MUXHOST_RECORD``); ``exists`` (``resumable`` when stopped); resume → the same id.
    - ``test_sleep_frees_the_agent_and_enter_wakes_it_in_its_pane``: ``sleep`` leaves no process of
      the agent and the pane shows the stub; Enter there resumes the same conversation in that pane.
    - ``test_two_agents_in_one_cwd_keep_their_own_conversations``: two agents in one folder each keep
      their own id through several ``ls``, and each id's plan names the files holding its own text.
    - ``test_purge_refuses_while_resumed_outside_muxhost``: the plugin's resume command typed into a
      plain shell pane; ``purge --agent A --conversation ID`` exits 4 (this is ``in_use`` itself: for
      its own records the host already knows) and changes nothing; once that agent is gone it is free.
    - ``test_dry_run_names_every_file_and_changes_nothing``: ``purge --dry-run`` names every file
      holding the conversation's text (a database by its path) and changes nothing.
    - ``test_purge_removes_every_trace_of_the_conversation``: purge exits 0 with an empty residual, no
      file holds its text, it is no longer resumable, and a second purge exits 0 or 3.
    - ``test_purge_keeps_the_neighbour_byte_for_byte``: a conversation in the same cwd keeps its files
      byte for byte, its lines in shared line files, its rows and text in shared databases, and stays
      resumable.
    - ``test_purge_takes_the_child_conversations`` (skipped, saying why, unless ``has_children``): the
      dry run names every file holding a child's text; after the purge none holds it.
    - ``test_purge_archive_unpurge_and_resume``: ``purge --archive`` leaves no file holding the
      conversation's (or a child's) text and the neighbour resumable; ``unpurge`` brings every file of
      HOME and the XDG dirs back byte for byte (one that only grew counts as kept: a log the agent's
      own delete command wrote to), every row of the tables the archive names equal, every other
      table as many rows; ``resume`` continues the conversation, and (with ``model_requests``) the
      model is sent its earlier turns.
    - ``model_requests(mux)`` (optional): the request bodies the fake model server received, oldest
      first, as text; the round trip then checks the resumed agent sent the earlier context.
    - ``test_activity_answers_each_recorded_state`` (skipped, saying why, for an agent without an
      ``activity`` hook): over every case of ``activity_fixtures`` (its files in a temporary HOME,
      its screen) the hook answers the state recorded — an agent CLI upgrade that changes a footer
      or a status word fails here once the cases are recorded again.
    """

    agent: str = ""
    agent_cli: bool = True  # a real agent CLI runs (the marker `agents`); False for a stand-in program
    has_children: bool = False
    #: the agent titles its conversations itself (opencode asks its model): the title `conversations`
    #: lists need not hold the first prompt, only be one short line
    titles_itself: bool = False
    ignore_paths: tuple[str, ...] = ()
    settle: float = 0.0
    activity_fixtures: Path | None = None

    # -- what a plugin's test class implements -------------------------------------------------
    def converse(self, mux: Mux, pane: str, text: str) -> None:
        raise NotImplementedError(f"{type(self).__name__}.converse(mux, pane, text): make the agent store a turn")

    def spawn_child(self, mux: Mux, pane: str, text: str) -> None:
        raise NotImplementedError(f"{type(self).__name__}.spawn_child(mux, pane, text): has_children is True")

    def prepare(self, mux: Mux) -> None:
        """Called first in every test: point ``mux.env`` at a fake model server, write config, …"""

    def model_requests(self, mux: Mux) -> list[str] | None:
        """The bodies the fake model server received, oldest first (None: the suite cannot look)."""
        return None

    def workdir(self, mux: Mux) -> Path:
        """The folder the agents run in (outside HOME, as a project is)."""
        return mux.home.parent / "work"

    # -- the steps -------------------------------------------------------------------------------
    def _begin(self, mux: Mux) -> Path:
        assert self.agent, f"{type(self).__name__}.agent: set it to the name of the agent to test"
        work = self.workdir(mux)
        work.mkdir(parents=True, exist_ok=True)
        self.prepare(mux)
        self._muxhost_cache(mux).mkdir(parents=True, exist_ok=True)  # made by any run: not the agent's
        return work

    @staticmethod
    def _ok(mux: Mux, item: str, *args: str) -> Any:
        r = mux.run(*args)
        assert r.rc == 0, f"[{item}] `muxhost {' '.join(args)}` exited {r.rc}: {(r.err or r.out).strip()}"
        return r.json if "--json" in args else r.out

    def _launch(self, mux: Mux, work: Path, text: str) -> dict:
        rec = self._ok(mux, "launch", "launch", self.agent, "--cwd", str(work), "--json")
        self.converse(mux, rec["pane"], text)
        return rec

    def _processes(self, mux: Mux, rid: str) -> set[tuple[int, float]]:
        """The running record ``rid``'s processes as `muxhost show` lists them, and every process that
        carries its record in the environment (an agent's detached helper: opencode's plugin install),
        (pid, create time)."""
        from muxhost import procs

        shown = self._ok(mux, "show", "show", rid, "--json")
        table = procs.ProcessTable.snapshot()
        return {p.key for pid in {*shown["pids"], *(q["pid"] for q in shown["processes"])}
                if (p := table.get(pid)) is not None} | set(carrying(procs.RECORD_ENV, rid))

    def _row(self, mux: Mux, item: str, rid: str, all_records: bool = False) -> dict:
        rows = self._ok(mux, item, "ls", *(["--all"] if all_records else []), "--json")
        row = next((r for r in rows if r["id"] == rid), None)
        assert row is not None, f"[{item}] record {rid} is not in `muxhost ls{' --all' if all_records else ''}`"
        return row

    def _roots(self, mux: Mux) -> list[Path]:
        """HOME and the XDG dirs of the agents (those outside HOME, when ``mux.env`` sets them)."""
        home = mux.home.resolve()
        roots = [mux.home]
        for var in _XDG_VARS:
            value = mux.env.get(var)
            if value and not Path(value).resolve().is_relative_to(home):
                roots.append(Path(value))
        return roots

    @staticmethod
    def _muxhost_cache(mux: Mux) -> Path:
        """muxhost's own plugin cache (the host's, not the agent's)."""
        return Path(mux.env.get("XDG_CACHE_HOME") or mux.home / ".cache") / "muxhost"

    def _skip(self, mux: Mux) -> tuple[str, ...]:
        return (str(self._muxhost_cache(mux)) + os.sep, *self.ignore_paths)

    def _hash(self, mux: Mux, sizes: dict[str, int] | None = None) -> dict[str, str]:
        # a -shm is SQLite's shared-memory index, which readers write too: not content
        hashed = tree_hash(*self._roots(mux), skip=self._skip(mux), sizes=sizes)
        return {p: h for p, h in hashed.items() if not p.endswith("-shm")}

    def _quiet_hash(self, mux: Mux, sizes: dict[str, int] | None = None) -> dict[str, str]:
        """:meth:`_hash` once it has not changed for ``settle`` seconds (at most 30 s); ``sizes``,
        when given, gets the sizes of the files in the one returned."""
        last_sizes: dict[str, int] = {}
        last = self._hash(mux, last_sizes)
        deadline = time.monotonic() + 30
        while self.settle > 0 and time.monotonic() < deadline:
            time.sleep(self.settle)
            now_sizes: dict[str, int] = {}
            now = self._hash(mux, now_sizes)
            if now == last:
                break
            last, last_sizes = now, now_sizes
        if sizes is not None:
            sizes.update(last_sizes)
        return last

    @staticmethod
    def _changes(before: dict[str, str], after: dict[str, str]) -> str:
        changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
        said = [f"{p} ({'new' if p not in before else 'gone' if p not in after else 'changed'})" for p in changed[:8]]
        return ", ".join(said) + (f" and {len(changed) - 8} more" if len(changed) > 8 else "")

    def _holding(self, mux: Mux, texts: list[str]) -> dict[str, list[str]]:
        return files_holding(self._roots(mux), texts, self._skip(mux))

    def _unnamed(self, mux: Mux, plan: list[str], texts: list[str]) -> list[str]:
        """Files holding one of ``texts`` that no line of ``plan`` names."""
        roots = self._roots(mux)
        return sorted(p for p in self._holding(mux, texts) if not plan_names(plan, p, mux.home, roots))

    def _plan(self, mux: Mux, item: str, ref: str) -> list[str]:
        before = self._hash(mux)
        report = self._ok(mux, item, "purge", ref, "--dry-run", "--json")
        assert report.get("dry_run") is True, f"[{item}] `purge --dry-run` did not report a dry run: {report}"
        after = self._hash(mux)
        assert after == before, f"[{item}] `purge --dry-run` changed files: {self._changes(before, after)}"
        return list(report["plan"])

    def _world(self, mux: Mux, children: bool) -> ContractWorld:
        """A neighbour conversation, then the conversation under test (with a child when asked), in
        one cwd; both agents stopped (in one ladder)."""
        work = self._begin(mux)
        ntext, text = unique_text("neighbour"), unique_text("purged")
        neighbour = self._launch(mux, work, ntext)
        main = self._launch(mux, work, text)
        child_texts = []
        if children:
            child_texts.append(unique_text("child"))
            self.spawn_child(mux, main["pane"], child_texts[0])
        stopped = {r["id"]: r for r in self._ok(mux, "stop", "stop", neighbour["id"], main["id"], "--json")}
        neighbour, main = stopped[neighbour["id"]], stopped[main["id"]]
        for rec in (neighbour, main):
            assert rec.get("conversation_id"), f"[discover] record {rec['id']} has no conversation id after a turn"
        assert neighbour["conversation_id"] != main["conversation_id"], \
            f"[two agents] two agents in one cwd got one conversation id {main['conversation_id']}"
        return ContractWorld(work, neighbour, ntext, main, [text], child_texts)

    # -- the contract ----------------------------------------------------------------------------
    def test_plugins_lists_the_agent(self, mux: Mux) -> None:
        self._begin(mux)
        info = self._ok(mux, "plugins", "plugins", "--json")
        names = [a["name"] for a in info["agents"]]
        assert self.agent in names, f"[plugins] `muxhost plugins --json` lists agents {names}, not {self.agent!r}"

    def test_a_bad_conversation_id_exits_2_before_anything_runs(self, mux: Mux) -> None:
        self._begin(mux)
        before = self._hash(mux)
        for extra in (["--yes"], ["--dry-run"]):
            r = mux.run("purge", "--agent", self.agent, "--conversation", "not an id", *extra)
            assert r.rc == 2, f"[bad id] `purge --agent {self.agent} --conversation 'not an id'` exited {r.rc}: {r.err}"
            assert r.err.startswith("muxhost: ") and r.err.count("\n") == 1, f"[bad id] not one error line: {r.err!r}"
        after = self._hash(mux)
        assert after == before, f"[bad id] files changed: {self._changes(before, after)}"

    def test_launch_purge_while_running_stop_and_resume(self, mux: Mux) -> None:
        from muxhost import procs

        work = self._begin(mux)
        rec = self._launch(mux, work, unique_text("lifecycle"))
        row = self._row(mux, "discover", rec["id"])
        cid = row["conversation_id"]
        assert row["state"] == "running" and cid, f"[discover] after a turn `ls` shows {row}"
        assert self._row(mux, "discover", rec["id"])["conversation_id"] == cid, "[discover] the id changed on its own"

        sizes: dict[str, int] = {}
        with mux.frozen(self._processes(mux, rec["id"])):  # the agent's own timed writes are not the purge's
            before = self._quiet_hash(mux, sizes)
            r = mux.run("purge", rec["id"], "--yes")
            assert r.rc == 4, f"[purge while running] exited {r.rc}, not 4: {(r.err or r.out).strip()}"
            assert r.err.startswith("muxhost: ") and r.err.count("\n") == 1, f"[purge while running] {r.err!r}"
            after = appended_only(before, sizes, self._hash(mux))  # the live agent may append to its log
            assert after == before, f"[purge while running] files changed: {self._changes(before, after)}"
            early = self._ok(mux, "purge while running", "purge", rec["id"], "--dry-run", "--json")
            assert early.get("refused"), f"[purge while running] a dry run does not say it would be refused: {early}"
            after = appended_only(before, sizes, self._hash(mux))
            assert after == before, f"[purge while running] the dry run changed files: {self._changes(before, after)}"

        keys = self._processes(mux, rec["id"])
        assert keys, f"[stop] `muxhost show {rec['id']}` lists no process of the running agent"
        stopped = self._ok(mux, "stop", "stop", rec["id"], "--json")
        assert stopped.get("outcome") == "exit", \
            f"[stop] outcome {stopped.get('outcome')!r} after {stopped.get('seconds')}s, not 'exit': the agent " \
            "did not quit on its exit_text within the grace"
        survivors = procs.alive(keys) + carrying(procs.RECORD_ENV, rec["id"])
        assert not survivors, f"[stop] processes survived the stop: {sorted(survivors)}"

        row = self._row(mux, "exists", rec["id"], all_records=True)
        assert row["state"] == "stopped" and row["conversation_id"] == cid, f"[stop] `ls --all` shows {row}"
        assert row["resumable"] is True, f"[exists] conversation {cid} is on disk but not resumable: {row}"

        resumed = self._ok(mux, "resume", "resume", rec["id"], "--json")
        assert resumed["conversation_id"] == cid, f"[resume] resumed into {resumed['conversation_id']}, not {cid}"
        self.converse(mux, resumed["pane"], unique_text("resumed"))
        row = self._row(mux, "resume", rec["id"])
        assert row["state"] == "running" and row["conversation_id"] == cid, \
            f"[resume] after a turn in the resumed agent `ls` shows {row}, not conversation {cid}"

    def test_sleep_frees_the_agent_and_enter_wakes_it_in_its_pane(self, mux: Mux) -> None:
        from muxhost import procs

        work = self._begin(mux)
        rec = self._launch(mux, work, unique_text("sleeper"))
        cid = self._row(mux, "sleep", rec["id"])["conversation_id"]
        shown = self._ok(mux, "sleep", "show", rec["id"], "--json")
        table = procs.ProcessTable.snapshot()
        keys = {p.key for pid in {*shown["pids"], *(q["pid"] for q in shown["processes"])}
                if (p := table.get(pid)) is not None}
        asleep = self._ok(mux, "sleep", "sleep", rec["id"], "--json")
        assert asleep["state"] == "asleep", f"[sleep] `muxhost sleep` gave {asleep}"
        survivors = procs.alive(keys) + carrying(procs.RECORD_ENV, rec["id"])
        assert not survivors, f"[sleep] processes of the agent survived its sleep: {sorted(survivors)}"
        row = self._row(mux, "sleep", rec["id"])
        assert row["state"] == "asleep" and row["conversation_id"] == cid, f"[sleep] `ls` shows {row}"
        pane = row["pane"]
        mux.wait_screen(pane, "Enter wakes it")
        mux.type(pane, "", enter=True)
        wait_for(lambda: self._row(mux, "wake", rec["id"])["state"] == "running", timeout=30,
                 what="[wake] the record running again after Enter in its pane")
        self.converse(mux, pane, unique_text("woken"))
        row = self._row(mux, "wake", rec["id"])
        assert row["pane"] == pane and row["conversation_id"] == cid, \
            f"[wake] after Enter and a turn `ls` shows {row}, not conversation {cid} in pane {pane}"

    def test_two_agents_in_one_cwd_keep_their_own_conversations(self, mux: Mux) -> None:
        work = self._begin(mux)
        a_texts, b_text = [unique_text("first agent")], unique_text("second agent")
        first: dict[str, str] = {}  # record id -> the conversation `ls` showed first

        def look(step: str, *recs: dict) -> None:
            rows = {r["id"]: r for r in self._ok(mux, "two agents", "ls", "--json")}
            for rec in recs:
                cid = rows.get(rec["id"], {}).get("conversation_id")
                was = first.setdefault(rec["id"], cid)
                assert cid and cid == was, f"[two agents] {step}: record {rec['id']} is in {cid}, it was in {was}"

        a = self._launch(mux, work, a_texts[0])
        look("after the first agent's turn", a)
        b = self._launch(mux, work, b_text)
        look("after the second agent's turn", a, b)
        a_texts.append(unique_text("first agent again"))
        self.converse(mux, a["pane"], a_texts[1])
        look("after the first agent's second turn", a, b)
        look("once more", a, b)
        assert first[a["id"]] != first[b["id"]], f"[two agents] both agents are in conversation {first[a['id']]}"
        stopped = {r["id"]: r for r in self._ok(mux, "two agents", "stop", a["id"], b["id"], "--json")}
        for rec, texts in ((a, a_texts), (b, [b_text])):
            cid = first[rec["id"]]
            assert stopped[rec["id"]]["conversation_id"] == cid, \
                f"[two agents] record {rec['id']} stopped in {stopped[rec['id']]['conversation_id']}, not {cid}"
            unnamed = self._unnamed(mux, self._plan(mux, "two agents", rec["id"]), texts)
            assert not unnamed, f"[two agents] the plan of record {rec['id']}'s conversation {cid} does not name " \
                                f"the files holding its own text: {unnamed} (was it given the other one?)"

    def test_purge_refuses_while_resumed_outside_muxhost(self, mux: Mux) -> None:
        work = self._begin(mux)
        rec = self._launch(mux, work, unique_text("outside"))
        cid = self._ok(mux, "in use", "stop", rec["id"], "--json")["conversation_id"]
        assert cid, f"[discover] record {rec['id']} has no conversation id after a turn"
        argv, env, cwd = mux.resume_command(rec["id"])
        pane = mux.shell(cwd, env)
        mux.type(pane, shlex.join(argv))
        self.converse(mux, pane, unique_text("outside again"))
        sizes: dict[str, int] = {}
        with mux.frozen(mux.shell_processes(pane)):  # the agent's own timed writes are not the purge's
            before = self._quiet_hash(mux, sizes)
            r = mux.run("purge", "--agent", self.agent, "--conversation", cid, "--yes")
            assert r.rc == 4, f"[in use] the conversation runs in a shell pane (`{shlex.join(argv)}`), but " \
                              f"`purge --agent {self.agent} --conversation {cid}` exited {r.rc}, not 4: " \
                              f"in_use() did not see it. {(r.err or r.out).strip()}"
            after = appended_only(before, sizes, self._hash(mux))  # the live agent may append to its log
            assert after == before, f"[in use] the refused purge changed files: {self._changes(before, after)}"
        mux.end_shell(pane)
        r = mux.run("purge", "--agent", self.agent, "--conversation", cid, "--dry-run")
        assert r.rc == 0, f"[in use] once the agent in the shell is gone, a dry run exited {r.rc}: {r.err.strip()}"

    def test_dry_run_names_every_file_and_changes_nothing(self, mux: Mux) -> None:
        w = self._world(mux, self.has_children)
        plan = self._plan(mux, "dry run", w.main["id"])
        assert plan, "[dry run] the plan is empty"
        unnamed = self._unnamed(mux, plan, w.texts)
        assert not unnamed, f"[dry run] files hold the conversation's text but the plan does not name them: " \
                            f"{unnamed}; the plan: {plan}"

    def test_purge_removes_every_trace_of_the_conversation(self, mux: Mux) -> None:
        w = self._world(mux, self.has_children)
        report = self._ok(mux, "purge", "purge", w.main["id"], "--yes", "--json")
        assert report["residual"] == [] and report.get("complete") is True, f"[purge] residual: {report['residual']}"
        left = self._holding(mux, w.texts)
        assert not left, f"[purge] after the purge these files still hold the conversation's text: {sorted(left)}"
        row = self._row(mux, "purge", w.main["id"], all_records=True)
        assert row["resumable"] is False, f"[purge] the purged conversation is still resumable: {row}"
        r = mux.run("purge", w.main["id"], "--yes")
        assert r.rc in (0, 3), f"[purge again] exited {r.rc}, not 0 or 3: {(r.err or r.out).strip()}"

    def test_purge_keeps_the_neighbour_byte_for_byte(self, mux: Mux) -> None:
        w = self._world(mux, self.has_children)
        theirs = [w.neighbour_text.encode(), w.neighbour["conversation_id"].encode()]
        mine = [t.encode() for t in (*w.texts, *w.child_texts, w.main["conversation_id"])]

        def has(data: bytes, markers: list[bytes]) -> bool:
            return any(m in data for m in markers)

        def theirs_only(data: bytes) -> list[bytes]:
            return [ln.rstrip(b"\r\n") for ln in data.splitlines() if has(ln, theirs) and not has(ln, mine)]

        files = files_under(self._roots(mux), self._skip(mux))
        dbs = {p for p in files if file_head(p) == SQLITE_MAGIC}
        owned: dict[str, bytes] = {}      # files only the neighbour's text is in: identical bytes
        lines: dict[str, list[bytes]] = {}  # shared line files: the neighbour's lines
        shared_dbs: list[str] = []          # shared databases: its rows readable, its text there
        for p in files:
            if any(p.endswith(s) and p[:-len(s)] in dbs for s in DB_SIDECARS):
                continue  # judged with its database
            data = Path(p).read_bytes()
            unit = {p: data, **{p + s: Path(p + s).read_bytes() for s in ("-wal", "-journal")
                                if p in dbs and os.path.exists(p + s)}}
            joined = b"".join(unit.values())
            if not has(joined, theirs):
                continue
            if not has(joined, mine):
                owned.update(unit)
            elif p in dbs:
                shared_dbs.append(p)
            else:
                lines[p] = theirs_only(data)
        assert owned or lines or shared_dbs, f"[neighbour] no file holds the neighbour's text {w.neighbour_text!r}"

        self._ok(mux, "neighbour", "purge", w.main["id"], "--yes", "--json")
        problems = []
        for p, data in owned.items():
            if not os.path.exists(p):
                problems.append(f"{p} (only the neighbour's) is gone")
            elif Path(p).read_bytes() != data:
                problems.append(f"{p} (only the neighbour's) changed")
        for p, kept in lines.items():
            now = theirs_only(Path(p).read_bytes()) if os.path.exists(p) else None
            if now != kept:
                problems.append(f"{p} (shared): the neighbour's lines changed "
                                f"({len(kept)} before, {'file gone' if now is None else len(now)} after)")
        for p in shared_dbs:
            found, why = sqlite_text(p, w.neighbour_text) if os.path.exists(p) else (False, "the database is gone")
            if not found:
                problems.append(f"{p} (shared database): {why}")
        assert not problems, f"[neighbour] the purge of {w.main['conversation_id']} touched the neighbour " \
                             f"{w.neighbour['conversation_id']}: " + "; ".join(problems)
        row = self._row(mux, "neighbour", w.neighbour["id"], all_records=True)
        assert row["resumable"] is True, f"[neighbour] the neighbour is no longer resumable: {row}"

    def test_conversations_lists_what_the_agent_wrote(self, mux: Mux) -> None:
        w = self._world(mux, children=self.has_children)
        rows = self._ok(mux, "conversations", "conversations", "--agent", self.agent, "--json")
        by_id = {r["id"]: r for r in rows}
        kids = self._ok(mux, "conversations", "show", w.main["id"], "--json").get("children") or []
        for rec, text in ((w.main, w.texts[0]), (w.neighbour, w.neighbour_text)):
            row = by_id.get(rec["conversation_id"])
            assert row is not None, f"[conversations] {rec['conversation_id']} is not listed: {sorted(by_id)}"
            assert os.path.realpath(row["cwd"]) == os.path.realpath(w.work), f"[conversations] cwd: {row}"
            assert row["size"] > 0 and row["updated"] >= row["created"] - 60, f"[conversations] size, times: {row}"
            title = row["title"]
            assert "\n" not in title and 0 < len(title) <= 80, f"[conversations] not one short line: {title!r}"
            assert self.titles_itself or text in title, f"[conversations] the title {title!r} lacks the prompt {text!r}"
            assert (row["record"] or {}).get("id") == rec["id"], f"[conversations] record: {row['record']}"

        def ids(row: dict) -> list[str]:
            return [c["id"] for c in row["children"]] + [i for c in row["children"] for i in ids(c)]

        listed = ids(by_id[w.main["conversation_id"]])
        assert sorted(listed) == sorted(kids), f"[conversations] children listed {listed}, `show` says {kids}"
        assert not set(kids) & set(by_id), f"[conversations] a child is a row of its own: {set(kids) & set(by_id)}"

    def test_purge_takes_the_child_conversations(self, mux: Mux) -> None:
        if not self.has_children:
            pytest.skip(f"{type(self).__name__}.has_children is False: the agent starts no child conversations")
        w = self._world(mux, children=True)
        assert self._holding(mux, w.child_texts), \
            f"[children] spawn_child() returned but no file holds the child's text {w.child_texts[0]!r}"
        plan = self._plan(mux, "children", w.main["id"])
        unnamed = self._unnamed(mux, plan, w.child_texts)
        assert not unnamed, f"[children] files hold a child conversation's text but the plan does not name " \
                            f"them: {unnamed}; the plan: {plan}"
        report = self._ok(mux, "children", "purge", w.main["id"], "--yes", "--json")
        assert report["residual"] == [], f"[children] residual: {report['residual']}"
        left = self._holding(mux, w.child_texts)
        assert not left, f"[children] after the purge these files still hold a child's text: {sorted(left)}"

    def test_activity_answers_each_recorded_state(self, mux: Mux, tmp_path: Path) -> None:
        import json
        import subprocess
        import sys

        self._begin(mux)  # (prepare: the plugin loads as the CLI loads it, in mux.env)
        folder = str(self.activity_fixtures) if self.activity_fixtures is not None else ""
        p = subprocess.run([sys.executable, "-c", "import json, sys; from muxhost.testing.recording import replay_all; "
                            "print(json.dumps(replay_all(*sys.argv[1:])))", self.agent, folder, str(tmp_path)],
                           env=mux.env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, f"[activity] the replay failed: {p.stderr.strip()[-2000:]}"
        got = json.loads(p.stdout)
        assert got["found"], f"[activity] no plugin provides agent {self.agent!r}"
        if not got["hook"]:
            pytest.skip(f"{self.agent} has no activity hook: nothing recorded to replay")
        assert folder, f"[activity] {type(self).__name__}.activity_fixtures: {self.agent} has an activity hook; record its states"
        assert got["cases"], f"[activity] no case (a folder with expected.txt) under {folder}"
        wrong = [f"{name}: {answer!r}, recorded {want!r}" for name, (answer, want) in got["cases"].items() if answer != want]
        assert not wrong, "[activity] the hook does not answer the recorded state: " + "; ".join(wrong)

    def _contents(self, mux: Mux, sizes: dict[str, int] | None = None) -> dict[str, Any]:
        """Every file of HOME and the XDG dirs: its sha256, or for a database the rows of each table
        (its bytes change with a VACUUM; its -wal, -shm and -journal are judged with it)."""
        import sqlite3

        hashed = self._hash(mux, sizes)
        dbs = {p for p, h in hashed.items() if h != "dir" and os.path.isfile(p) and file_head(p) == SQLITE_MAGIC}
        out: dict[str, Any] = {}
        for p, h in hashed.items():
            if any(p.endswith(s) and p[:-len(s)] in dbs for s in DB_SIDECARS):
                continue
            if p not in dbs:
                out[p] = h
                continue
            con = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
            try:
                tables = [t for (t,) in con.execute("select name from sqlite_master where type = 'table'")]
                out[p] = {t: sorted(map(repr, con.execute(f'select * from "{t}"'))) for t in tables}
            finally:
                con.close()
        return out

    @staticmethod
    def _difference(path: str, was: Any, now: Any, tables: set[tuple[str, str]]) -> str:
        """What differs in ``path`` between two :meth:`_contents` ("" when nothing does): a file byte
        for byte (what only grew since — a log the agent's own delete command wrote to — counts as
        kept); in a database, the rows of every table the archive names, and the row count of every
        other table (the agent's own delete command may touch a row of its own, a time updated)."""
        if now is None:
            return f"{path} is gone"
        if not isinstance(was, dict) or not isinstance(now, dict):
            return "" if was == now else f"{path} differs"
        bad = [f"{t} ({len(was.get(t, []))} rows before, {len(now.get(t, []))} after; e.g. "
               f"{sorted(set(now.get(t, [])) ^ set(was.get(t, [])))[:1]})"
               for t in sorted(was.keys() | now.keys())
               if (was.get(t) != now.get(t) if (os.path.realpath(path), t) in tables
                   else len(was.get(t, [])) != len(now.get(t, [])))]
        return f"{path}: tables {', '.join(bad)}" if bad else ""

    def test_purge_archive_unpurge_and_resume(self, mux: Mux) -> None:
        w = self._world(mux, self.has_children)
        sizes: dict[str, int] = {}
        before = self._contents(mux, sizes)
        report = self._ok(mux, "archive", "purge", w.main["id"], "--archive", "--yes", "--json")
        assert report["residual"] == [] and report.get("archive"), f"[archive] {report}"
        left = self._holding(mux, [*w.texts, *w.child_texts])
        assert not left, f"[archive] after `purge --archive` these files still hold the conversation: {sorted(left)}"
        assert self._row(mux, "archive", w.neighbour["id"], all_records=True)["resumable"] is True

        done = self._ok(mux, "unpurge", "unpurge", report["archive"], "--json")
        assert done["restored"], f"[unpurge] nothing restored: {done}"
        archived = self._ok(mux, "unpurge", "archives", "show", report["archive"], "--json")
        tables = {(i["place"], i["table"]) for i in archived["items"] if i["kind"] == "rows"}
        after = appended_only(before, sizes, self._contents(mux))
        changed = [self._difference(p, before[p], after.get(p), tables) for p in sorted(before)]
        changed = [c for c in changed if c]
        assert not changed, f"[unpurge] not back as it was: {'; '.join(changed[:8])}"
        cid = w.main["conversation_id"]
        row = self._row(mux, "unpurge", w.main["id"], all_records=True)
        assert row["resumable"] is True, f"[unpurge] conversation {cid} is back on disk but not resumable: {row}"

        resumed = self._ok(mux, "resume", "resume", w.main["id"], "--json")
        assert resumed["conversation_id"] == cid, f"[unpurge] resumed into {resumed['conversation_id']}, not {cid}"
        probe = unique_text("after unpurge")
        self.converse(mux, resumed["pane"], probe)
        sent = self.model_requests(mux)
        if sent is not None:
            last = [body for body in sent if probe in body]
            assert last and w.texts[0] in last[-1], \
                f"[unpurge] the resumed agent sent {probe!r} without its earlier turn {w.texts[0]!r}"
        row = self._row(mux, "unpurge", w.main["id"])
        assert row["state"] == "running" and row["conversation_id"] == cid, f"[unpurge] after a turn: {row}"
