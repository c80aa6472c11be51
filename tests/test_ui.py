"""`muxhost ui`, the dashboard: Textual's pilot drives the real app in-process, against the real host
and store, real demo agents, and a fake pane backend (plain child processes: muxhost.testing.fake's,
with respawn and a screen); and once end to end, in a real tmux pane with real keys."""
import asyncio
import dataclasses
import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

try:
    import textual  # noqa: F401
except ImportError:  # (the ui extra: missing in CI is a failure, not a skip)
    from muxhost.testing import missing

    missing("Textual is not installed: pip install -e '.[test,ui]' (./dev test does)")

import muxhost
from muxhost.errors import Refused
from muxhost.host import Host
from muxhost.plugins import get_plugin_manager
from muxhost.store import Store
from muxhost.testing import wait_for
from muxhost.testing.fake import FakeBackend
from muxhost.ui import rows as ui_rows
from muxhost.ui.app import ConfirmScreen, Dashboard, HelpScreen, LaunchScreen, LineScreen

class Panes(FakeBackend):
    """The in-process fake, with what the dashboard's keys need too: a pane started again in place
    (sleep's stub, wake, resume) and a screen (what the pane's program printed)."""

    def __init__(self, folder: Path):
        super().__init__()
        self.folder = folder
        self.gone: list[subprocess.Popen] = []

    def _start(self, pane, argv, cwd, env):
        out = open(self.folder / f"{pane}.out", "ab")
        self.procs[pane] = subprocess.Popen(list(argv), cwd=cwd, env=dict(env), stdin=subprocess.PIPE, stdout=out,
                                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
        out.close()

    def create(self, argv, *, cwd, env, name, target=None, split=None, options={}):
        pane = f"f{len(self.procs) + len(self.gone) + 1}"
        self.meta[pane] = {"name": name, "record": options.get("@muxhost_record"), "agent": options.get("@muxhost_agent")}
        self._start(pane, argv, cwd, env)
        return next(p for p in self.snapshot() if p.pane_id == pane), True

    def respawn(self, pane_id, argv, *, cwd, env):
        old = self.procs[pane_id]
        if old.poll() is None:
            os.killpg(old.pid, signal.SIGKILL)
        old.wait()
        self._start(pane_id, argv, cwd, env)
        return next(p for p in self.snapshot() if p.pane_id == pane_id)

    def kill_pane(self, pane_id):  # (tmux's kill-pane: the pane goes, not only its program)
        super().kill_pane(pane_id)
        self.gone.append(self.procs.pop(pane_id))

    def snapshot(self):
        return [dataclasses.replace(p, output_mark=str(self._size(p.pane_id))) for p in super().snapshot()]

    def _size(self, pane):
        try:
            return (self.folder / f"{pane}.out").stat().st_size
        except OSError:
            return 0

    def capture(self, pane_id):
        if pane_id not in self.procs:
            raise muxhost.MuxhostError(f"no pane {pane_id}")
        return (self.folder / f"{pane_id}.out").read_text(errors="replace")


@pytest.fixture
def world(tmp_path, monkeypatch):
    """A factory of hosts (one per thread, as the dashboard makes them) on one store and one fake server."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("MUXHOST_STATE_DIR", str(tmp_path / "state"))
    for var in ("TMUX", "TMUX_PANE", "MUXHOST_TMUX_SOCKET", "MUXHOST_DEMO_HOME", "XDG_DATA_HOME"):
        monkeypatch.delenv(var, raising=False)
    (tmp_path / "state").mkdir(mode=0o700)
    fake = Panes(tmp_path)

    def make():
        plugin = types.SimpleNamespace()
        plugin.muxhost_register_backends = muxhost.hookimpl(lambda register: register("fake", lambda a=None, c=None: fake))
        pm = get_plugin_manager(load_entrypoints=False)
        pm.register(plugin, name="ui-test")
        return Host(pm=pm, store=Store(tmp_path / "state" / "state.db"), backend="fake")

    w = types.SimpleNamespace(make=make, fake=fake, tmp=tmp_path, host=make())
    w.conversation = lambda cid: tmp_path / ".local/share/muxhost-demo/conversations" / f"{cid}.jsonl"
    yield w
    for p in [*fake.procs.values(), *fake.gone]:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def dashboard(world, **kw) -> Dashboard:
    return Dashboard(world.make, env={}, cwd=str(world.tmp), where="fake", **kw)


def run(coro):
    return asyncio.run(coro)


async def until(pilot, predicate, timeout=20.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}; status: {status(pilot.app)!r}"
        await pilot.pause(0.05)


def status(app) -> str:
    return str(app.query_one("#status").content)


def row(app, name):
    return next((r for r in app.rows if r.name == name), None)


async def settled(pilot, name, state, timeout=30.0):
    """Until the dashboard shows the record ``name`` in ``state`` (and no action is pending)."""
    await until(pilot, lambda: not pilot.app.pending and (r := row(pilot.app, name)) is not None and r.state == state,
                timeout, f"{name} {state}")


async def select(pilot, name):
    app = pilot.app
    await until(pilot, lambda: any(r.name == name for r in app.shown), what=f"{name} shown")
    table = app.query_one("#table")
    table.move_cursor(row=next(i for i, r in enumerate(app.shown) if r.name == name))
    await until(pilot, lambda: app.selected == row(app, name).id, what=f"{name} selected")


def test_rows_sort_waiting_first_longest_waiting_on_top_stopped_last():
    now = 1_000_000.0
    base = dict(agent="demo", state="running", conversation=None, cwd="/w", branch=None, worktree=None, pane="%1",
                resumable=True)
    made = [ui_rows.Row(id=s + str(i), name=f"{s}-{i}", status=s, since=now - 60 * (i + 1), **base)
            for i, s in enumerate(reversed(ui_rows.ORDER))]
    made.append(ui_rows.Row(id="w2", name="waiting-long", status="waiting", since=now - 3600, **base))
    got = [r.status for r in ui_rows.ordered(made, now=now)]
    assert got[:2] == ["waiting", "waiting"] and got[-1] == "stopped" and got.index("working") == 2
    assert got == sorted(got, key=ui_rows.ORDER.index)
    assert ui_rows.ordered(made, now=now)[0].name == "waiting-long"  # the one waiting longest first
    assert ui_rows.counts(made).startswith("2 waiting · 1 working · 1 stalled · 1 idle")
    assert made[-1].how_long(now) == "waiting 1h" and ui_rows.SYMBOL["waiting"] != ui_rows.SYMBOL["idle"]
    assert [r.name for r in ui_rows.ordered(made, "asleep", now=now)] == [f"asleep-{ui_rows.ORDER[::-1].index('asleep')}"]


def test_every_key_runs_the_lifecycle_of_an_agent(world):
    """n launches (the form), i types, s stops, r resumes, z sleeps, w wakes, p n keeps, p y purges,
    d y forgets, g and Enter say why they cannot here, / filters, ? helps, q quits."""
    async def go():
        app = dashboard(world)
        async with app.run_test(size=(120, 36)) as pilot:
            await until(pilot, lambda: app.looks > 0, what="the first look")
            assert "no agents" in str(app.query_one("#top").content)
            await pilot.press("n")
            await until(pilot, lambda: isinstance(app.screen, LaunchScreen), what="the launch form")
            assert app.screen.agents[0] == "demo"
            app.screen.query_one("#name").value = "alpha"
            await pilot.press("enter")
            await settled(pilot, "alpha", "running")
            alpha = row(app, "alpha")
            assert "launched demo as alpha" in status(app)
            await select(pilot, "alpha")
            await pilot.press("i")
            await until(pilot, lambda: isinstance(app.screen, LineScreen), what="the line form")
            await pilot.press(*"hello", "enter")
            await until(pilot, lambda: "heard 5 characters" in str(app.query_one("#preview-text").content),
                        what="the preview showing the answer")
            assert status(app) == "sent to alpha: hello"
            await pilot.press("s")
            await settled(pilot, "alpha", "stopped")
            assert "stopped alpha" in status(app) and "exit" in status(app)
            await pilot.press("r")
            await settled(pilot, "alpha", "running")
            assert status(app).startswith("resumed alpha")
            await pilot.press("z")
            await settled(pilot, "alpha", "asleep")
            assert row(app, "alpha").status == "asleep" and "asleep: alpha" in status(app)
            await pilot.press("w")
            await settled(pilot, "alpha", "running")
            assert status(app).startswith("woke alpha")
            conv = world.conversation(alpha.conversation)
            assert conv.exists()
            await pilot.press("p")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the purge plan")
            assert any(alpha.conversation in line for line in app.screen.lines)
            await pilot.press("n")
            await until(pilot, lambda: "purge cancelled" in status(app), what="the cancel")
            assert conv.exists() and row(app, "alpha").state == "running"
            await pilot.press("p")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the purge plan")
            await pilot.press("s", "z", "d", "q")  # the table's keys do nothing under the question
            await pilot.pause(0.5)
            assert isinstance(app.screen, ConfirmScreen) and not app.pending and row(app, "alpha").state == "running"
            await pilot.press("y")
            await settled(pilot, "alpha", "stopped")
            assert not conv.exists() and "purged demo conversation " + alpha.conversation in status(app)
            await pilot.press("g")
            await until(pilot, lambda: "runs in no worktree" in status(app), what="g's answer")
            await pilot.press("enter")
            await until(pilot, lambda: "no pane" in status(app), what="Enter's answer")
            await pilot.press("d")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the rm question")
            await pilot.press("y")
            await until(pilot, lambda: row(app, "alpha") is None, what="the record forgotten")
            assert world.host.store.get(alpha.id) is None
            await pilot.press("question_mark")
            await until(pilot, lambda: isinstance(app.screen, HelpScreen), what="the help")
            await pilot.press("escape")
            await until(pilot, lambda: not isinstance(app.screen, HelpScreen), what="the help closed")
            await pilot.press("q")
        assert app.return_code in (0, None)

    run(go())


def test_purge_n_changes_nothing_and_y_purges_exactly_the_shown_conversation(world):
    a = world.host.launch("demo", cwd=str(world.tmp), name="first")
    b = world.host.launch("demo", cwd=str(world.tmp), name="second")
    ca, cb = world.conversation(a.rec.conversation_id), world.conversation(b.rec.conversation_id)

    async def go():
        app = dashboard(world)
        async with app.run_test(size=(100, 30)) as pilot:
            await select(pilot, "second")
            before = {p: p.read_bytes() for p in (ca, cb)}
            await pilot.press("p")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the plan")
            shown = app.screen.title_text
            assert b.rec.conversation_id in shown and a.rec.conversation_id not in shown
            await pilot.press("n")
            await until(pilot, lambda: "cancelled" in status(app))
            assert {p: p.read_bytes() for p in (ca, cb)} == before
            assert world.fake.procs[b.pane.pane_id].poll() is None  # not even stopped
            await pilot.press("p")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the plan")
            await pilot.press("y")
            await settled(pilot, "second", "stopped")
            assert not cb.exists() and ca.read_bytes() == before[ca]
            assert row(app, "first").state == "running"

    run(go())


def test_purge_y_after_the_agent_moved_on_is_about_the_shown_conversation_and_leaves_the_agent(world):
    """The agent starts another conversation while the question is up: y is about the one shown (the
    host's purge ``confirmed=``), never the new one, and does not stop the agent working in it (the
    demo agent still holds the old one by its argv: refused, nothing removed); an id the record was
    never in is refused."""
    lv = world.host.launch("demo", cwd=str(world.tmp), name="mover")
    shown = lv.rec.conversation_id

    async def go():
        app = dashboard(world)
        async with app.run_test(size=(100, 30)) as pilot:
            await select(pilot, "mover")
            await pilot.press("p")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the plan")
            world.host.send(world.host.store.get(lv.rec.id), "/new")
            wait_for(lambda: "new conversation" in world.fake.capture(lv.pane.pane_id), what="the /new")
            await pilot.press("y")
            await until(pilot, lambda: not app.pending and "muxhost:" in status(app), what="the refusal")
            assert status(app).startswith(f"muxhost: conversation {shown} is in use: pid ")

    run(go())
    rec = world.host.store.get(lv.rec.id)
    assert rec.conversation_id != shown and world.conversation(rec.conversation_id).exists()
    assert world.conversation(shown).exists()
    assert world.fake.procs[lv.pane.pane_id].poll() is None  # not stopped: it works in the new one
    other = "d" * 8 + "-0000-4000-8000-" + "0" * 12
    with pytest.raises(Refused, match="not in conversation"):
        world.host.purge(rec=rec, stop=True, confirmed=other)
    assert world.conversation(rec.conversation_id).exists() and world.fake.procs[lv.pane.pane_id].poll() is None


def test_a_pane_that_prints_while_the_feed_looks_is_looked_at_again(world, monkeypatch):
    """What changes while ``Host.ls`` runs is not what the table shows: the next probe says look again
    (not only LOOK_EVERY later)."""
    from muxhost.ui import ops

    lv = world.host.launch("demo", cwd=str(world.tmp), name="chatty")
    wait_for(lambda: "muxhost demo agent" in world.fake.capture(lv.pane.pane_id), what="the prompt")
    feed = ops.Feed(ops.Hosts(world.make))
    host = feed.hosts.get()
    ls = host.ls

    def ls_then_print():
        lives = ls()
        with open(world.tmp / f"{lv.pane.pane_id}.out", "a") as out:  # (the fake pane's output mark moves)
            out.write("printed while the feed looked\n")
        return lives

    monkeypatch.setattr(host, "ls", ls_then_print)
    monkeypatch.setattr(ops, "LOOK_GAP", 0.0)
    feed.look()
    assert feed.due()
    monkeypatch.setattr(host, "ls", ls)
    feed.look()
    assert not feed.due()  # (and nothing changed since: no look)


def test_enter_outside_tmux_execs_the_attach_only_once_the_actions_under_way_ended(world, monkeypatch):
    """`s` on one row, then Enter on another outside tmux: the exec of the attach would end this
    process in the middle of the stop's ladder; it waits for it."""
    import threading

    import muxhost.ui as ui

    ended = threading.Event()

    def dashboard_run(app):  # (the dashboard's life, without a terminal: a slow action, then Enter)
        app.pending[1] = "stopping slow"
        app._pool.submit(lambda: (time.sleep(0.5), ended.set()))
        app.attach_argv = ["tmux", "attach"]
        app.on_unmount()

    execs = []
    monkeypatch.setattr(Dashboard, "run", dashboard_run)
    monkeypatch.setattr(os, "execvp", lambda file, argv: execs.append(ended.is_set()))
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    assert ui.run(world.make) == 0
    assert execs == [True]


def test_a_record_that_vanished_meanwhile_is_a_message_not_a_crash(world):
    """Another muxhost forgets the record after the key was pressed, before the action reaches the host."""
    import threading

    async def go():
        app = dashboard(world)
        get = app.hosts.get

        def vanish_first():  # (in the action's worker thread: the key was pressed, the host not yet asked)
            host = get()
            if threading.current_thread().name.startswith("muxhost-ui_") and vanish:
                rec = host.store.get(vanish.pop())
                if rec is not None:
                    Store(world.tmp / "state" / "state.db").delete(rec)
            return host

        app.hosts.get = vanish_first
        async with app.run_test(size=(100, 30)) as pilot:
            for key in ("s", "z", "w", "r", "p", "d", "i"):
                lv = world.host.launch("demo", cwd=str(world.tmp), name=f"ghost-{key}")
                await select(pilot, f"ghost-{key}")
                vanish.append(lv.rec.id)
                await pilot.press(key)
                if key == "i":
                    await until(pilot, lambda: isinstance(app.screen, LineScreen))
                    await pilot.press("x", "enter")
                await until(pilot, lambda: not app.pending and "is gone" in status(app), what=f"{key}'s message")
                assert status(app).startswith("muxhost: record ") and app.is_running
                assert not isinstance(app.screen, ConfirmScreen)
                await until(pilot, lambda: row(app, f"ghost-{key}") is None, what="the table without it")
                assert world.fake.procs[lv.pane.pane_id].poll() is None  # nothing the dashboard did ended it

    vanish: list[str] = []
    run(go())


def test_a_refused_action_is_a_message(world, monkeypatch):
    lv = world.host.launch("demo", cwd=str(world.tmp), name="busy")
    from muxhost import locks

    monkeypatch.setattr(locks, "RECORD_WAIT", 1.0)  # the stop's wait for the record lock we hold (60 s by default)

    async def go():
        app = dashboard(world)
        async with app.run_test(size=(100, 30)) as pilot:
            await select(pilot, "busy")
            with locks.records(world.tmp / "state" / "locks", [lv.rec.id], "stop"):
                await pilot.press("s")
                await until(pilot, lambda: not app.pending and "busy" in status(app), timeout=30, what="the refusal")
            assert "muxhost:" in status(app) and world.fake.procs[lv.pane.pane_id].poll() is None
            await pilot.press("w")  # awake already: said so
            await until(pilot, lambda: "awake already" in status(app))

    run(go())


def test_filter_by_name_agent_folder_and_state(world):
    (world.tmp / "proj").mkdir()
    world.host.launch("demo", cwd=str(world.tmp), name="one")
    world.host.launch("demo", cwd=str(world.tmp / "proj"), name="two")
    three = world.host.launch("demo", cwd=str(world.tmp), name="three")
    world.host.stop(three.rec)

    async def go():
        app = dashboard(world)
        async with app.run_test(size=(100, 30)) as pilot:
            await until(pilot, lambda: len(app.rows) == 3, what="three rows")
            await pilot.press("slash", *"proj")
            await until(pilot, lambda: [r.name for r in app.shown] == ["two"], what="the folder filter")
            assert "filter: proj (1 of 3)" in str(app.query_one("#top").content)
            await pilot.press("enter")  # kept, and the keys are the table's again
            await pilot.press("slash", *["backspace"] * 4, *"stopped", "enter")
            await until(pilot, lambda: [r.name for r in app.shown] == ["three"], what="the state filter")
            await pilot.press("escape")
            await until(pilot, lambda: len(app.shown) == 3, what="the filter cleared")

    run(go())


@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
def test_layout_fits(world, size):
    """Every column and the preview fit 80×24 (a name of 64 characters, a folder of wide ones too);
    a wide terminal puts the preview beside the table."""
    for i in range(3):
        world.host.launch("demo", cwd=str(world.tmp), name=f"agent-{i}")
    wide = world.tmp / ("幅" * 40)
    wide.mkdir()
    world.host.launch("demo", cwd=str(wide), name="n" * 64)

    async def go():
        app = dashboard(world)
        async with app.run_test(size=size) as pilot:
            await until(pilot, lambda: len(app.rows) == 4 and app.selected, what="the rows")
            await until(pilot, lambda: "muxhost demo agent" in str(app.query_one("#preview-text").content),
                        what="the preview")
            # (the model has the rows before the table has drawn them all: a busy machine shows the gap)
            names = ("agent-0", "agent-1", "agent-2", "STATUS", "FOLDER")
            await until(pilot, lambda: all(n in app.export_screenshot() for n in names), what="every row drawn")
            table, preview = app.query_one("#table"), app.query_one("#preview")
            assert sum(c.get_render_width(table) for c in table.columns.values()) <= table.region.width
            if size[0] >= 140:
                assert preview.region.x > table.region.x and preview.region.y == table.region.y
            else:
                assert preview.region.y > table.region.y and preview.region.width == size[0]
            assert table.region.height >= 4 and preview.region.height >= 4

    run(go())


def test_remote_hosts_rows_fit_80_columns_and_their_keys_go_through_ref_at_host(world, monkeypatch):
    """With remote hosts, the follower's state is rows too (a HOST column in the conversation's place,
    still 80 columns), an offline host one row with the reason; a key on a remote row is the verb
    run there as `muxhost VERB REF@HOST` runs it (the REF, on that host), Enter what `attach REF@HOST` opens."""
    from muxhost.remote import following, hosts, transport
    from muxhost.ui import ops

    monkeypatch.setenv("MUXHOST_CONFIG", str(world.tmp / "config.yaml"))
    (world.tmp / "config.yaml").write_text("hosts:\n  box: {ssh: box}\n  gone: {ssh: gone.example}\n")
    world.host.launch("demo", cwd=str(world.tmp), name="alpha")
    from muxhost import config as config_mod

    cfg = config_mod.load()

    def make():  # (the hosts of muxhost ui: their config names the remote hosts)
        h = world.make()
        h.config = h.core.config = cfg
        return h

    follower = following.Follower(hosts.load(cfg=cfg))  # (not started: its state is fed here, no sshd)
    follower.states["box"].online = True
    follower.states["box"].records["r1"] = {"record": "r1", "name": "asker", "agent": "demo", "pane": "%3",
                                            "old": "working", "new": "waiting", "since": time.time() - 30,
                                            "at": time.time(), "note": None, "host": "box", "later": "ignored"}
    follower.states["gone"].online, follower.states["gone"].reason = False, "unreachable (connection refused)"
    follower.version += 1
    asked = []

    def ask(host, argv, timeout):
        asked.append((host.name, argv))
        return transport.Answer(True, rc=0, out="stopped asker (r1): exit after 0.50s\n")

    monkeypatch.setattr(transport, "ask", ask)

    async def go():
        app = Dashboard(make, env={}, cwd=str(world.tmp), where="fake", feed=ops.Feed(ops.Hosts(make), follower))
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: len(app.rows) == 3, what="the local, the remote and the offline rows")
            assert [(r.name, r.host, r.status) for r in app.shown][0] == ("asker", "box", "waiting")
            assert [(r.name, r.status) for r in app.shown][-1] == ("gone", "offline")  # (alpha: idle or running)
            names = ("HOST", "asker", "box", "alpha", "local", "gone", "unreachable")
            await until(pilot, lambda: all(n in app.export_screenshot() for n in names), what="every row drawn")
            table = app.query_one("#table")
            assert sum(c.get_render_width(table) for c in table.columns.values()) <= table.region.width
            assert "1 waiting" in str(app.query_one("#top").content)
            await select(pilot, "asker")
            await pilot.press("s")
            await until(pilot, lambda: "stopped asker" in status(app), what="the remote stop's answer")
            assert ("box", ["stop", "r1"]) in asked, asked
            await select(pilot, "gone")
            await pilot.press("s")
            await until(pilot, lambda: "gone is offline" in status(app), what="the offline row refusing")
            await select(pilot, "asker")
            await pilot.press("enter")  # (outside tmux: the ssh -t of `attach asker@box`, once the app ends)
            await until(pilot, lambda: app.attach_argv is not None, what="the attach")
        assert app.attach_argv[-2] == "box" and app.attach_argv[-1].endswith("attach r1") and "-t" in app.attach_argv

    run(go())


def test_ui_without_textual_says_how_to_install(tmp_path):
    """`muxhost ui` where Textual is not installed: one muxhost: line with the install command."""
    block = tmp_path / "block"
    block.mkdir()
    (block / "textual.py").write_text("raise ImportError('no textual here')\n")
    env = {**os.environ, "PYTHONPATH": str(block), "HOME": str(tmp_path), "MUXHOST_STATE_DIR": str(tmp_path / "s")}
    p = subprocess.run([sys.executable, "-m", "muxhost", "ui"], env=env, capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=60)
    assert p.returncode == 1 and p.stdout == ""
    assert p.stderr.strip().splitlines() == [p.stderr.strip()] and "pip install 'muxhost[ui]'" in p.stderr


# -- end to end: a real terminal ------------------------------------------------------------------
def test_end_to_end_in_a_tmux_pane(mux):
    """`muxhost ui` in a pane of a private tmux server, real keys, the screen read back: Enter jumps
    to the agent's pane, z then w sleeps and wakes it, p y purges it."""
    lv = mux.ok("launch", "demo", "--name", "endtoend", "--json")
    conv = mux.home / ".local/share/muxhost-demo/conversations" / f"{lv['conversation_id']}.jsonl"
    assert conv.exists()
    env = " ".join(f"{k}={v}" for k, v in mux.env.items() if k.startswith(("MUXHOST_", "HOME", "TERM", "LANG")))
    mux.tmux("new-session", "-d", "-s", "dash", "-x", "120", "-y", "32",
             f"env {env} {sys.executable} -m muxhost ui; sleep 30")
    dash = mux.tmux("display-message", "-p", "-t", "dash", "#{pane_id}")[0]
    mux.wait_screen(dash, "endtoend", timeout=30)
    mux.wait_screen(dash, "idle", timeout=30)
    # a client on the dashboard's session, so that Enter has a client to switch
    from muxhost.testing import TmuxClient

    client = TmuxClient(mux.socket, "dash", mux.env, cols=120, rows=32)
    try:
        client.wait_text("endtoend", timeout=20)
        mux.tmux("send-keys", "-t", dash, "Enter")
        wait_for(lambda: mux.tmux("list-clients", "-F", "#{client_session} #{pane_id}") == [f"{lv['session']} {lv['pane']}"],
                 timeout=20, what="the client on the agent's pane")
        mux.tmux("switch-client", "-t", "dash")
        mux.tmux("send-keys", "-t", dash, "z")
        mux.wait_screen(dash, "asleep: endtoend", timeout=30)
        mux.wait_screen(lv["pane"], "is asleep since", timeout=30)  # the stub
        mux.tmux("send-keys", "-t", dash, "w")
        mux.wait_screen(dash, "woke endtoend", timeout=30)
        mux.wait_screen(lv["pane"], "resumed conversation", timeout=30)
        mux.tmux("send-keys", "-t", dash, "p")
        mux.wait_screen(dash, "for good?", timeout=30)
        mux.tmux("send-keys", "-t", dash, "y")
        mux.wait_screen(dash, "purged demo conversation", timeout=60)
        assert not conv.exists()
        mux.tmux("send-keys", "-t", dash, "q")
        wait_for(lambda: "muxhost" not in mux.tmux("display-message", "-p", "-t", dash, "#{pane_current_command}")[0]
                 and "python" not in mux.tmux("display-message", "-p", "-t", dash, "#{pane_current_command}")[0],
                 timeout=20, what="the dashboard gone")
    finally:
        client.close()


# -- found by the user-level audit (rv-audit) -------------------------------------------------------
def screen_text(app) -> str:
    """What the terminal shows, as plain text lines (what `capture-pane` would read)."""
    import re
    from html import unescape

    svg = app.export_screenshot()
    lines: dict[str, list[str]] = {}
    for y, text in re.findall(r'<text [^>]*y="([0-9.]+)"[^>]*>([^<]*)</text>', svg):
        lines.setdefault(y, []).append(unescape(text).replace("\xa0", " "))
    return "\n".join("".join(parts) for _, parts in sorted(lines.items(), key=lambda kv: float(kv[0])))


def test_a_status_that_grows_in_place_is_drawn_whole(world):
    """A row whose status text grows while the rows stay in the same order (``idle 0s`` then
    ``asleep 12s``) is drawn whole: the column widens, the cell is not cut to ``asleep 1``."""
    from rich.cells import cell_len

    lv = world.host.launch("demo", cwd=str(world.tmp), name="grow")

    async def go():
        app = dashboard(world)
        async with app.run_test(size=(80, 24)) as pilot:
            await settled(pilot, "grow", "running")
            await until(pilot, lambda: "idle" in app._drawn[0][0][0], what="idle drawn")
            def other():  # another muxhost sleeps it: the same row, in the same order
                host = world.make()
                host.sleep_many([host.store.get(lv.rec.id)])

            await asyncio.to_thread(other)
            await until(pilot, lambda: app._drawn and app._drawn[0][0][0].startswith("z asleep"), what="asleep drawn")
            table = app.query_one("#table")
            shown = table.get_row(lv.rec.id)[0]
            width = table.columns["status"].content_width
            assert width >= cell_len(str(shown)), f"{str(shown)!r} cut to {width} cells"

    run(go())


@pytest.mark.parametrize("rows", [24, 23])
def test_the_launch_form_says_how_to_launch_at_80x24(world, rows):
    """The launch form at 80×24 (and 80×23: a tmux window of 24 rows with its status line) shows its
    hint (Enter launches, Esc cancels), not only the inputs."""

    async def go():
        app = dashboard(world)
        async with app.run_test(size=(80, rows)) as pilot:
            await until(pilot, lambda: app.looked_at, what="the first look")
            await pilot.press("n")
            await until(pilot, lambda: isinstance(app.screen, LaunchScreen), what="the form")
            await pilot.pause(0.3)
            assert "Enter launches" in screen_text(app)

    run(go())


def test_rm_of_a_running_record_says_it_would_be_refused(world):
    """`d` on a running record: the confirmation says rm would refuse it now (stop it first)."""
    world.host.launch("demo", cwd=str(world.tmp), name="live")

    async def go():
        app = dashboard(world)
        async with app.run_test(size=(100, 30)) as pilot:
            await select(pilot, "live")
            await pilot.press("d")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the confirmation")
            await pilot.pause(0.3)
            assert "refused now: record" in screen_text(app) and "stop it first" in screen_text(app)
            await pilot.press("n")

    run(go())


def test_the_footer_shows_every_key_at_80_columns(world):
    """At 80 columns the footer shows every key it lists, the last ones (`? help`, `q quit`) too:
    they were cut off at `? he`."""

    async def go():
        app = dashboard(world)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: app.looked_at, what="the first look")
            await pilot.pause(0.3)
            footer = screen_text(app).splitlines()[-1]
            for key in ("i type", "n new", "s stop", "z sleep", "w wake", "r resume", "p purge", "d rm",
                        "/ filter", "? help", "q quit"):
                assert key in footer, footer

    run(go())


def test_a_plan_and_a_refusal_are_shown_as_text_never_as_markup(world):
    """The purge plan's items (`… [child conversation ID]`) and a refusal that quotes a process's
    command line (`python -c 'x[/]'`) are shown as they are: as Rich markup the children's labels
    vanished, and a `[/]` in an argv ended the dashboard (MarkupError)."""
    plan = ["~/c/1.jsonl", "~/c/2.jsonl [child conversation 2a]", "odd [bold]name[/bold] [/]"]
    refused = "conversation 1 is in use: pid 7 python -c 'x[/]'"

    async def go():
        app = dashboard(world)
        async with app.run_test(size=(120, 30)) as pilot:
            await until(pilot, lambda: app.looked_at, what="the first look")
            app.push_screen(ConfirmScreen("purge demo conversation 1 of [x] for good?", plan, refused))
            await pilot.pause(0.5)
            text = screen_text(app)
            assert app.is_running
            for shown in ("[child conversation 2a]", "odd [bold]name[/bold] [/]", "python -c 'x[/]'", "of [x] for"):
                assert shown in text, text
            await pilot.press("n")

    run(go())


def test_the_header_keeps_the_time_of_the_last_look_when_the_counts_are_long(world):
    """At 80 columns with records in many states the header still ends with the time of the last look
    (the server's name gives way first); it ran off the edge with the server."""
    statuses = ["waiting", "idle", "asleep", "exited", *["stopped"] * 12]
    rows = [ui_rows.Row(id=f"{i:08x}", name=f"r{i}", agent="demo", status=s, since=None, state=s,
                        conversation=None, cwd="/", branch=None, worktree=None, pane=None, resumable=False)
            for i, s in enumerate(statuses)]

    async def go():
        app = Dashboard(world.make, env={}, cwd=str(world.tmp), where="tmux socket 'a-long-socket-name'")
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: app.looked_at, what="the first look")
            app.rows = rows
            app._header()
            await pilot.pause(0.2)
            top = screen_text(app).splitlines()[0]
            assert time.strftime("%H:%M", time.localtime(app.looked_at)) in top, top
            assert "1 waiting" in top and "12 stopped" in top, top

    run(go())
