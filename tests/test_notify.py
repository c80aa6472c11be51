"""Notifications from the watch (muxhost.notify, the `notify` extra): what a user away from the
terminal receives. A real HTTP sink on 127.0.0.1 stands in for the channel (apprise's
``json://127.0.0.1:PORT/hook``) and records what apprise posts; the watch's passes are driven
in-process on the fake backend (the ``host`` fixture), and once as a real ``muxhost watch`` with
the demo agent in a real tmux pane."""
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from muxhost import notify
from muxhost.agent import Agent, Launch
from muxhost.config import NOTIFY_EVENTS
from muxhost.watching import Watch

pytest.importorskip("apprise", reason="apprise is not installed: pip install -e '.[notify]' (./dev test does)")

# a pane program: prints its prompt, then exits with the status given on its first line
PROGRAM = "echo 'ready'; echo 'go ahead? (y/n)'; read status; exit \"$status\""


class Sink:
    """An HTTP server on 127.0.0.1 that records each JSON document posted to it (``posts``) while
    ``status`` is 200, answers ``status`` otherwise, and holds every request while ``hold`` is set."""

    def __init__(self):
        self.posts: list[dict] = []
        self.tries = 0
        self.status = 200
        self.hold = threading.Event()     # set: requests wait until it is cleared
        self.arrived = threading.Event()  # a request came in
        self.released = threading.Event()
        self.released.set()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                sink.tries += 1
                sink.arrived.set()
                sink.released.wait(90)
                if sink.status == 200:
                    sink.posts.append(json.loads(body))
                self.send_response(sink.status)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"json://127.0.0.1:{self.server.server_address[1]}/hook"

    def hang(self) -> None:
        self.released.clear()

    def release(self) -> None:
        self.released.set()

    def wait(self, n: int, timeout: float = 15.0) -> list[dict]:
        deadline = time.monotonic() + timeout
        while len(self.posts) < n and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.posts

    def close(self) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def sink():
    s = Sink()
    yield s
    s.close()


class Scripted(Agent):
    """An agent whose activity is what the file ``state`` in its cwd says; its pane exits with the
    status typed into it."""

    name = "scripted"
    id_pattern = r"[0-9a-f]{32}"
    process_names = ("sh",)
    exit_text = None

    def launch(self, ctx):
        return Launch(["sh", "-c", PROGRAM])

    def activity(self, ctx, screen):
        try:
            return (Path(ctx.cwd) / "state").read_text().strip() or None
        except OSError:
            return None


@pytest.fixture
def host_agents():
    return [Scripted()]


def agents(host, tmp_path, n, state="idle"):
    lives = []
    for i in range(n):
        cwd = tmp_path / f"a{i}"
        cwd.mkdir()
        (cwd / "state").write_text(state)
        lives.append(host.launch("scripted", cwd=str(cwd), name=f"agent{i}"))
    return lives


def set_state(lives, state):
    for lv in lives:
        (Path(lv.rec.cwd) / "state").write_text(state)


def watch_with(host, sink, warnings, done_after=0.0, stall_after=600.0):
    """A watch of the fake server whose notifier tells ``sink`` (host name ``testhost``)."""
    w = Watch(host, 0.1, stall_after, False, lambda line: None)
    w.notifier = notify.Notifier([sink.url], list(NOTIFY_EVENTS), done_after, stall_after, warnings.append,
                                 host="testhost")
    return w


@pytest.fixture
def watches():
    made = []
    yield made
    for w in made:
        w.notifier.close()


def test_waiting_done_stalled_and_failed_each_make_exactly_one_message(host, tmp_path, sink, watches):
    warnings = []
    lives = agents(host, tmp_path, 5, "working")
    set_state(lives[4:], "waiting")  # waiting before the watch starts: no news
    w = watch_with(host, sink, warnings, done_after=0.0, stall_after=600.0)
    watches.append(w)
    w.step()  # the first pass sets the scene: no message
    [waiter, doer, staller, failer, _] = lives
    set_state([waiter], "waiting")
    w.step()
    assert [p["title"] for p in sink.wait(1)] == ["muxhost: agent0 is waiting for you"]
    body = sink.posts[0]["message"]
    assert f"agent0 (scripted, record {waiter.rec.id}) on testhost is waiting for you" in body
    assert "go ahead? (y/n)" in body  # the question on its screen
    set_state([doer], "idle")
    w.step()
    assert sink.wait(2)[1]["title"] == "muxhost: agent1 is done"
    assert f"agent1 (scripted, record {doer.rec.id}) on testhost is done: idle since" in sink.posts[1]["message"]
    assert "after working" in sink.posts[1]["message"]
    set_state([staller], "stalled")
    w.step()
    assert sink.wait(3)[2]["title"] == "muxhost: agent2 is stalled"
    assert "no output and no CPU for" in sink.posts[2]["message"]
    host.fake.type_text(failer.pane.pane_id, "3")
    host.fake.send_keys(failer.pane.pane_id, "enter")
    host.fake.procs[failer.pane.pane_id].wait(10)
    w.step()
    assert sink.wait(4)[3]["title"] == "muxhost: agent3 failed (status 3)"
    assert f"agent3 (scripted, record {failer.rec.id}) on testhost failed: exited with status 3" \
        in sink.posts[3]["message"]
    for _ in range(3):  # states that hold tell nothing again
        w.step()
    time.sleep(0.3)
    assert len(sink.posts) == 4 and sink.tries == 4 and warnings == []


def test_an_exit_with_status_0_and_short_work_tell_nothing(host, tmp_path, sink, watches):
    warnings = []
    lives = agents(host, tmp_path, 2, "working")
    w = watch_with(host, sink, warnings, done_after=3600.0)
    watches.append(w)
    w.step()
    set_state([lives[0]], "idle")  # idle again after less than done_after: not done
    host.fake.type_text(lives[1].pane.pane_id, "0")
    host.fake.send_keys(lives[1].pane.pane_id, "enter")
    host.fake.procs[lives[1].pane.pane_id].wait(10)
    changes = w.step()
    assert {(c["name"], c["new"]) for c in changes} == {("agent0", "idle"), ("agent1", None)}
    time.sleep(0.5)
    assert sink.tries == 0


def test_a_turn_with_a_question_in_it_is_done_when_idle_after_done_after(host, tmp_path, sink, watches):
    warnings = []
    [lv] = agents(host, tmp_path, 1, "idle")
    w = watch_with(host, sink, warnings, done_after=0.5)
    watches.append(w)
    w.step()
    set_state([lv], "working")
    w.step()
    time.sleep(0.6)  # (the turn, from its first work: longer than done_after; its last stretch shorter)
    for state in ("waiting", "working", "idle"):
        set_state([lv], state)
        w.step()
    posts = sink.wait(2)
    assert [p["title"] for p in posts] == ["muxhost: agent0 is waiting for you", "muxhost: agent0 is done"]
    assert warnings == []


def test_a_hundred_agents_changing_in_one_pass_make_one_message(host, tmp_path, sink, watches, monkeypatch):
    monkeypatch.setattr("muxhost.launching.UP_SETTLE", 0.0)  # (100 launches: no moment after each first screen)
    lives = agents(host, tmp_path, 100, "working")
    warnings = []
    w = watch_with(host, sink, warnings)
    watches.append(w)
    w.step()
    set_state(lives, "idle")
    changes = w.step()
    assert len(changes) == 100
    [post] = sink.wait(1)
    assert post["title"] == "muxhost: 100 agents: 100 done"
    assert post["message"].count("is done: idle since") == notify.LISTED
    assert post["message"].endswith(f"… and {100 - notify.LISTED} more")
    time.sleep(0.3)
    assert sink.tries == 1 and warnings == []


def test_a_channel_that_fails_is_a_warning_and_a_later_delivery(host, tmp_path, sink, watches, monkeypatch):
    monkeypatch.setattr(notify, "BACKOFF", 0.3)
    lives = agents(host, tmp_path, 1, "working")
    warnings = []
    w = watch_with(host, sink, warnings)
    watches.append(w)
    w.step()
    sink.status = 503
    set_state(lives, "waiting")
    w.step()
    deadline = time.monotonic() + 10
    while not warnings and time.monotonic() < deadline:
        time.sleep(0.02)
    [warning] = warnings[:1]
    assert warning["notify"] == "failed" and warning["channel"] == "#1 json 127.0.0.1"
    assert warning["retry_in"] == 0.3 and warning["pending"] == 1
    line = notify.warning_line(warning)
    assert line.startswith("muxhost: warning: notify: channel #1 json 127.0.0.1 failed: ")
    assert str(sink.server.server_address[1]) not in line and "/hook" not in line  # never its URL
    assert sink.posts == []
    sink.status = 200
    [post] = sink.wait(1)
    assert post["title"] == "muxhost: agent0 is waiting for you"
    time.sleep(0.5)
    assert len(sink.posts) == 1


def test_a_channel_that_hangs_never_holds_up_a_pass(host, tmp_path, sink, watches):
    """The sink takes the request and does not answer for a minute (and apprise waits that long for
    it: rto=60): the passes keep coming meanwhile, each with what it saw; delivered once it answers."""
    lives = agents(host, tmp_path, 2, "working")
    warnings = []
    sink.url += "?rto=60&cto=60"
    w = watch_with(host, sink, warnings)
    watches.append(w)
    w.step()
    sink.hang()
    stuck = threading.Event()
    # (a watchdog: a pass stuck on the channel for 30 s fails the test, and is let go)
    watchdog = threading.Timer(30, lambda: (stuck.set(), sink.release()))
    watchdog.start()
    try:
        set_state(lives[:1], "waiting")
        changes = w.step()
        assert sink.arrived.wait(10)  # the worker is inside the channel, which does not answer ...
        set_state(lives[1:], "waiting")
        for _ in range(5):  # ... and the passes keep coming
            changes += w.step()
    finally:
        watchdog.cancel()
    assert not stuck.is_set(), "a pass waited on the channel that hangs"
    assert not sink.released.is_set() and [c["name"] for c in changes] == ["agent0", "agent1"]
    sink.release()
    posts = sink.wait(2)
    assert [p["title"] for p in posts] == ["muxhost: agent0 is waiting for you", "muxhost: agent1 is waiting for you"]
    assert warnings == []


def test_messages_pending_on_a_channel_are_coalesced_and_given_up_with_a_line(sink, monkeypatch):
    monkeypatch.setattr(notify, "BACKOFF", 0.1)
    monkeypatch.setattr(notify, "TRIES", 3)
    warnings = []
    n = notify.Notifier([sink.url], list(NOTIFY_EVENTS), 0.0, 600.0, warnings.append, host="h")
    try:
        sink.status = 500
        ev = notify.Event("waiting", "r1", "one", "demo", "h", time.time(), 0.0)
        n.queue.put([ev])
        n.queue.put([ev._replace(record="r2", name="two")])
        deadline = time.monotonic() + 10
        while not any(x["notify"] == "gave up" for x in warnings) and time.monotonic() < deadline:
            time.sleep(0.02)
        gave_up = warnings[-1]
        assert gave_up["notify"] == "gave up" and gave_up["tries"] == 3 and gave_up["dropped"] == 2
        assert "gave up after 3 tries: 2 notification(s) not delivered" in notify.warning_line(gave_up)
        sink.status = 200
        n.queue.put([ev._replace(record="r3", name="three")])
        [post] = sink.wait(1)
        assert post["title"] == "muxhost: three is waiting for you"  # the ones given up are not sent late
    finally:
        n.close()


def test_a_url_apprise_does_not_know_is_said_once_and_left_out(sink):
    warnings = []
    n = notify.Notifier(["nosuchscheme://secret-token/x", sink.url], list(NOTIFY_EVENTS), 0.0, 600.0,
                        warnings.append, host="h")
    try:
        assert [notify.warning_line(w) for w in warnings] == [
            "muxhost: warning: notify: channel #1 nosuchscheme: not a URL apprise knows "
            "(see https://github.com/caronc/apprise/wiki): left out"]
        n.queue.put([notify.Event("waiting", "r1", "one", "demo", "h", time.time(), 0.0)])
        assert [p["title"] for p in sink.wait(1)] == ["muxhost: one is waiting for you"]
        time.sleep(0.2)
        assert len(warnings) == 1
    finally:
        n.close()


def test_a_channel_is_named_without_its_secrets():
    assert notify.channel_name(1, "json://127.0.0.1:8080/hook") == "#1 json 127.0.0.1"
    assert notify.channel_name(2, "tgram://123456789:AAHsecret/555") == "#2 tgram"
    assert notify.channel_name(3, "slack://TokenA/TokenB/TokenC") == "#3 slack"
    assert notify.channel_name(4, "mailtos://me:pw@gmail.com") == "#4 mailtos gmail.com"
    assert notify.channel_name(5, "ntfy://my-secret-topic") == "#5 ntfy"
    said = notify.scrub("error posting to https://hooks.slack.com/TokenA/TokenB", "slack://TokenA/TokenB")
    assert "TokenA" not in said and "TokenB" not in said


# -- the CLI -----------------------------------------------------------------------------------------


def test_notify_test_says_which_channel_failed_and_why(mux, sink, tmp_path):
    mux.config.write_text(f'notify:\n  urls: ["{sink.url}", "json://127.0.0.1:9/down?token=s3cr3tvalue"]\n')
    mux.config.chmod(0o600)
    r = mux.run("notify", "test")
    assert r.rc == 1, r.err
    lines = r.out.splitlines()
    assert lines[0] == "#1 json 127.0.0.1: ok"
    assert lines[1].startswith("#2 json 127.0.0.1: failed: ") and "s3cr3tvalue" not in r.out + r.err
    assert r.err.strip() == "muxhost: notify test: 1 of 2 channel(s) failed"
    [post] = sink.posts
    assert post["title"] == "muxhost: a test message"
    r = mux.run("notify", "test", "--json")
    got = json.loads(r.out)
    assert [(c["channel"], c["ok"]) for c in got] == [("#1 json 127.0.0.1", True), ("#2 json 127.0.0.1", False)]
    assert got[1]["error"] and r.rc == 1


def test_notify_test_with_no_url_and_bad_notify_settings(mux):
    r = mux.run("notify", "test")
    assert r.rc == 2 and r.out == ""
    assert r.err.strip() == f"muxhost: notify test: no notification channel: set notify.urls in {mux.config} " \
                               "(docs/activity.md)"
    mux.config.write_text("notify:\n  urls: [ntfy://t]\n  events: [waiting, finished]\n")
    r = mux.run("notify", "test")
    assert r.rc == 2
    assert r.err.strip() == (f"muxhost: {mux.config}: line 3: notify.events: unknown event 'finished' "
                                "(known: waiting, done, stalled, failed)")
    mux.config.write_text("notify:\n  done_after: -1\n")
    r = mux.run("notify", "test")
    assert r.rc == 2 and "line 2: notify.done_after: expected a number of seconds" in r.err


def test_a_config_with_notify_urls_others_can_read_is_a_warning_and_one_they_can_write_is_refused(mux, sink):
    mux.config.write_text(f'notify:\n  urls: ["{sink.url}"]\n')
    mux.config.chmod(0o644)
    r = mux.run("notify", "test")
    assert r.rc == 0 and r.out == "#1 json 127.0.0.1: ok\n"
    assert r.err == (f"muxhost: warning: {mux.config} holds notify.urls (which may hold tokens) and others can "
                     f"read it: chmod go-r {mux.config}\n")
    mux.config.chmod(0o666)
    r = mux.run("notify", "test")
    assert r.rc == 1 and r.out == "" and f"chmod go-w {mux.config}" in r.err
    assert len(sink.posts) == 1  # (nothing sent from a config others could have changed)


def test_without_apprise_notify_test_says_how_to_install_and_the_watch_warns_once(mux, monkeypatch):
    monkeypatch.setitem(sys.modules, "apprise", None)  # (import apprise raises ImportError)
    mux.config.write_text("notify:\n  urls: [ntfy://t]\n")
    mux.config.chmod(0o600)
    r = mux.run("notify", "test")
    assert r.rc == 1
    assert r.err.strip() == ("muxhost: notify test: apprise is not installed: pip install 'muxhost[notify]' "
                                "(the notify extra)")
    warnings = []
    n = notify.Notifier(["ntfy://t"], list(NOTIFY_EVENTS), 60.0, 600.0, warnings.append)
    assert n.thread is None and [w["notify"] for w in warnings] == ["missing"]
    n.close()


def test_a_real_watch_tells_the_sink_once_that_the_demo_agent_asks(mux, sink):
    """A real `muxhost watch`, the demo agent's /ask in a real pane: one message with its question;
    a second channel that is down is a warning line (and a `notify` line in --json), never its URL."""
    from muxhost.testing import Watching

    down = "json://127.0.0.1:9/hook?token=s3cr3tvalue"
    mux.config.write_text(f'watch:\n  interval: 0.3\nnotify:\n  urls: ["{sink.url}", "{down}"]\n')
    mux.config.chmod(0o600)
    rec = mux.ok("launch", "demo", "--json", "--name", "asker")
    pane = rec["pane"]
    mux.wait_screen(pane, "demo>")
    with Watching(mux) as w:
        w.wait(pane, "idle")
        mux.type(pane, "/ask")
        w.wait(pane, "waiting")
        [post] = sink.wait(1)
        time.sleep(1.5)  # (more passes, the agent still waiting: nothing more)
        mux.type(pane, "y")
        w.wait(pane, "idle")
    assert len(sink.posts) == 1
    assert post["title"] == "muxhost: asker is waiting for you"
    import socket

    assert f"asker (demo, record {rec['id']}) on {socket.gethostname()} is waiting for you" in post["message"]
    assert post["message"].rstrip().endswith("demo: go ahead? (y/n)")
    failed = next(c for c in w.changes if "notify" in c)  # (the first try; a slow machine may see the next)
    assert failed["notify"] == "failed" and failed["channel"] == "#2 json 127.0.0.1" and failed["retry_in"] == 5
    line = next(ln for ln in w.stderr.splitlines() if "notify" in ln)
    assert line.startswith("muxhost: warning: notify: channel #2 json 127.0.0.1 failed: ")
    assert line.endswith("(trying again in 5 s)") and "s3cr3tvalue" not in w.stderr


def test_a_real_watch_tells_that_an_agent_exited_with_a_non_zero_status(mux, sink):
    """tmux keeps the dead pane and its status (remain-on-exit): `failed`, with the status."""
    from muxhost.testing import Watching

    mux.config.write_text(f'watch:\n  interval: 0.3\nnotify:\n  urls: ["{sink.url}"]\nagents:\n  quitter:\n'
                          f'    command: [sh, -c, \'echo ready; read status; exit "$status"\']\n'
                          f'    process_names: [sh]\n')
    mux.config.chmod(0o600)
    rec = mux.ok("launch", "quitter", "--json", "--name", "quits")
    with Watching(mux) as w:
        w.wait(rec["pane"], "idle")
        mux.type(rec["pane"], "3")
        [post] = sink.wait(1)
        time.sleep(1)
    assert post["title"] == "muxhost: quits failed (status 3)"
    assert f"quits (quitter, record {rec['id']}) on " in post["message"]
    assert " failed: exited with status 3 at " in post["message"]
    assert len(sink.posts) == 1
