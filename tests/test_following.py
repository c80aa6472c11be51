"""The follower of remote hosts' watches (muxhost/remote/following.py) without an sshd: each host's
ssh session is a small local program that speaks the protocol (a header, then ``watch --json`` lines),
so what a user relies on is checked fast: unknown fields and stray lines tolerated, a session that ends
marks the host offline with the reason and is tried again, closing ends the child by its pid; and the
local watch counts, alerts and notifies a remote agent naming its host. The real ssh path:
tests/test_remote.py (marked ``remote``)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from muxhost.remote import following, hosts, protocol, transport
from muxhost.testing import load_module, wait_for


def _program(lines: list[dict | str], then: str = "exit", delay: float = 0.0) -> list[str]:
    """A session's stand-in: the protocol's header, ``lines`` (after ``delay`` seconds), then the
    connection lost (ssh's exit 255 and its line; ``then="wait"``: it waits for its stdin to close,
    as a served watch does)."""
    text = [protocol.header(), *(ln if isinstance(ln, str) else json.dumps(ln) for ln in lines)]
    code = (f"import sys, time\nprint({text[0]!r}, flush=True)\ntime.sleep({delay})\n"
            f"for line in {text[1:]!r}:\n    print(line, flush=True)\n"
            + ("sys.stdin.read()\n" if then == "wait" else
               "sys.stderr.write('Connection to box closed by remote host.\\n'); sys.exit(255)\n"))
    return [sys.executable, "-c", code]


@pytest.fixture
def sessions(monkeypatch):
    """``transport.session`` replaced: each call runs the next program of the list ``scripts``
    (the last one again once the list is used up); ``started`` gets each child."""
    state = {"scripts": [], "started": []}

    def session(host, argv, timeout):
        assert argv == ["watch", "--json"]
        scripts = state["scripts"]
        argv = scripts.pop(0) if len(scripts) > 1 else scripts[0]
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        state["started"].append(proc)
        return proc

    monkeypatch.setattr(transport, "session", session)
    yield state
    for proc in state["started"]:
        if proc.poll() is None:
            proc.kill()
        proc.wait(5)


def _table() -> hosts.Hosts:
    return hosts.Hosts(hosts={"box": hosts.RemoteHost("box", "box")}, timeout=2.0)


def _change(rid: str, old: str | None, new: str | None, **more) -> dict:
    return {"record": rid, "name": f"n-{rid}", "agent": "demo", "pane": "%1", "old": old, "new": new,
            "since": time.time() - 5, "at": time.time(), "note": None, **more}


def test_lines_are_kept_offline_on_eof_then_followed_again_and_close_ends_the_child(sessions):
    sessions["scripts"] = [
        _program([_change("r1", None, "idle", later_field={"x": 1}), "not json", {"notify": "failed"},
                  _change("r2", None, "working")]),
        _program([_change("r1", None, "waiting")], then="wait"),
    ]
    seen: list[dict] = []
    f = following.Follower(_table(), seen.append, backoff=(0.05, 0.4)).start()
    try:
        wait_for(lambda: any(s.get("online") is False for s in seen), timeout=10, what="the host offline")
        offline = next(s for s in seen if s.get("online") is False)
        assert offline == {**offline, "host": "box", "reason": "unreachable (Connection to box closed by remote host.)"}
        assert [(s["record"], s["new"], s["host"]) for s in seen if "record" in s][:2] == \
            [("r1", "idle", "box"), ("r2", "working", "box")]
        assert next(s for s in seen if "record" in s)["later_field"] == {"x": 1}, "an unknown field rides along"
        wait_for(lambda: f.tally()[0] == {"waiting": 1}, timeout=10, what="the host followed again")
        counts, offline_hosts, waiting = f.tally()
        assert offline_hosts == [] and [w[1] for w in waiting] == ["n-r1@box"]
        assert any(s.get("online") is True for s in seen[seen.index(offline):])
        child = sessions["started"][-1]
        assert child.poll() is None
    finally:
        f.close()
    assert child.poll() is not None and not psutil.pid_exists(child.pid), "the ssh child survived close()"


def test_a_host_that_answers_then_drops_at_once_backs_off_too(sessions):
    """A host reached that ends the session at once, every time, is not asked again every first step
    of the backoff: the backoff starts over only after the host stayed followed for ``steady``."""
    sessions["scripts"] = [_program([_change("r1", None, "idle")])]  # the header, one line, then EOF
    f = following.Follower(_table(), lambda _line: None, backoff=(0.1, 0.8), steady=30).start()
    try:
        wait_for(lambda: len(sessions["started"]) >= 4, timeout=15, what="four tries")
        n = len(sessions["started"])
        time.sleep(1.0)
        assert len(sessions["started"]) - n <= 2, "tries at most every 0.8 s (the backoff's cap), not every 0.1 s"
    finally:
        f.close()


def test_a_host_that_fails_is_retried_with_a_growing_backoff(sessions):
    sessions["scripts"] = [[sys.executable, "-c", "import sys; sys.stderr.write('ssh: connect to host box port 22: "
                                                  "Connection refused\\n'); sys.exit(255)"]]
    seen: list[dict] = []
    f = following.Follower(_table(), seen.append, backoff=(0.1, 0.8)).start()
    try:
        wait_for(lambda: len(sessions["started"]) >= 4, timeout=15, what="four tries")
        t = time.monotonic()
        n = len(sessions["started"])
        time.sleep(1.0)
        assert len(sessions["started"]) - n <= 2, "tries at most every 0.8 s (the backoff's cap), not at once"
    finally:
        f.close()
    offline = [s for s in seen if s.get("online") is False]
    assert len(offline) == 1, "said once, not at every try"
    assert offline[0]["reason"].startswith("unreachable") and "Connection refused" in offline[0]["reason"]
    assert f.snapshot()[0].online is False and time.monotonic() - t < 5


def test_a_remote_watch_that_ends_by_itself_or_is_refused_is_followed_by_ls(sessions, monkeypatch):
    """A remote muxhost too old to serve `watch`, its server ended there (the watch exits 0), or a
    watch runs there already (exit 4: tests/test_remote.py): the host stays online, followed by
    `ls --json`, whose activities become change lines."""
    too_old = [sys.executable, "-c", f"import sys; print({protocol.header()!r}); sys.stderr.write("
               "\"muxhost: remote-serve: 'watch' is not served (a request runs one of launch, ls)\\n\"); sys.exit(2)"]
    ended = _program([_change("r1", None, "idle")], then="wait")
    ended[-1] = ended[-1].replace("sys.stdin.read()", "sys.exit(0)")
    listed = [{"id": "r9", "name": "nine", "agent": "demo", "state": "running", "activity": "waiting",
               "activity_since": 100.0, "pane": "%9", "unknown": 1},
              {"id": "r8", "name": "eight", "agent": "demo", "state": "stopped", "activity": None}]
    asked = []

    def ask(host, argv, timeout):
        asked.append(argv)
        return transport.Answer(True, rc=0, doc=listed)

    monkeypatch.setattr(transport, "ask", ask)
    for script, told in ((too_old, [("r9", None, "waiting")]),
                         (ended, [("r1", None, "idle"), ("r9", None, "waiting"), ("r1", "idle", None)])):
        sessions["scripts"] = [script]
        seen: list[dict] = []
        f = following.Follower(_table(), seen.append, backoff=(0.05, 0.4), poll=0.1).start()
        try:
            wait_for(lambda: f.tally()[0] == {"waiting": 1}, timeout=10, what="the ls poll's record")
            time.sleep(0.3)  # (more polls: they change nothing)
            state = f.snapshot()[0]
            assert state.online is True and state.mode == "ls" and list(state.records) == ["r9"]
            assert asked[-1] == ["ls", "--json"] and not any(s.get("online") is False for s in seen)
            # (ls goes on from what the watch said: r1 is not listed, gone; a poll that changed nothing tells nothing)
            assert [(s["record"], s["old"], s["new"]) for s in seen if "record" in s] == told
        finally:
            f.close()


notify_tests = load_module(Path(__file__).with_name("test_notify.py"))
sink = notify_tests.sink


def test_the_local_watch_counts_alerts_and_notifies_a_remote_agent_naming_its_host(host, sink, sessions):
    from muxhost import notify
    from muxhost.config import NOTIFY_EVENTS
    from muxhost.watching import Watch

    sessions["scripts"] = [_program([_change("r1", None, "idle"), _change("r1", "idle", "waiting"),
                                     _change("r2", None, "working")], then="wait", delay=1.0)]
    published, alerts, lines = [], [], []
    host.fake.publish = lambda panes, server={}: published.append(dict(server))
    host.fake.alert = lambda text, pane_id: alerts.append((text, pane_id))
    follower = following.Follower(_table(), backoff=(0.05, 0.4))
    w = Watch(host, 0.1, 600.0, True, lines.append, follower=follower)
    w.notifier = notify.Notifier([sink.url], list(NOTIFY_EVENTS), 0.0, 600.0, lambda warning: None, host="here")
    try:
        wait_for(lambda: sum(1 for ln in lines if "record" in ln) == 3, timeout=10, what="the remote lines")
        assert all(ln["host"] == "box" for ln in lines if "record" in ln)
        w.step()
        assert published[-1]["@muxhost_summary"] == "1 working · 1 waiting"
        assert published[-1]["@muxhost_waiting"] == "n-r1@box"
        assert alerts == [("muxhost: n-r1@box (demo) is waiting for you", None)], "one alert: the first line is no news"
        post = sink.wait(1)[0]
        assert post["title"] == "muxhost: n-r1 is waiting for you" and "(demo, record r1) on box" in post["message"]
    finally:
        follower.close()
        w.notifier.close()
    follower.states["box"].online, follower.states["box"].reason = False, "unreachable (gone)"
    follower.states["box"].records.clear()  # (as the follower does when a host goes offline)
    w.step()
    assert published[-1]["@muxhost_summary"] == "box offline"
