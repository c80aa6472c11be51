"""The herdr backend (muxhost-herdr) against the fake herdr server (herdr_fake.py), and the real
one where ``herdr`` is on PATH: what differs from tmux and how each fact of herdr 0.8.2 is met.
The host's lifecycle tests run on herdr too (tests/: ``@pytest.mark.every_backend``)."""
import json
import os
import shlex
import socket
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from muxhost.errors import MuxhostError, UsageError
from muxhost.testing import Mux, load_module, wait_for
from muxhost_herdr import backend as hb

HERE = Path(__file__).resolve().parent
SERVER_ONLY = "HERDR_FAKE_SERVER_ONLY"  # herdr_testing.STALE: in the herdr server's environment only
on_herdr = pytest.mark.parametrize("mux", ["herdr"], indirect=True)
on_any_herdr = pytest.mark.parametrize("mux", ["herdr", "herdr-live"], indirect=True)


def typed(fake):
    """Every request that typed into a pane."""
    return [r for r in fake.requests() if r["method"] in ("pane.send_input", "pane.send_text", "pane.send_keys")]


def call(address, method, params=None):
    return hb.Client(address).call(method, params or {})


@pytest.fixture
def herdr_mux(server, tmp_path, start_herdr):
    """``herdr_mux(**kw)``: a Mux on a fake herdr server of its own (``start_herdr(**kw)``)."""
    made = []

    def make(**kw):
        made.append(Mux(server, tmp_path, backend="herdr", pane_server=start_herdr(**kw)))
        return made[-1]

    yield make
    for m in made:
        m.reap()


@pytest.fixture
def in_process(monkeypatch, tmp_path):
    """For backends used in this process: a private state dir (the launcher's files)."""
    monkeypatch.setenv("MUXHOST_STATE_DIR", str(tmp_path / "state"))
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path / "home"), "MUXHOST_RECORD": "feedf00d"}


@on_herdr
def test_launch_types_one_exec_line_and_the_agent_gets_exactly_the_records_environment(mux):
    fake = mux.pane_server
    rec = mux.ok("launch", "demo", "--env", "API_KEY=sk-muxhost-secret-42", "--json")
    inputs = typed(fake)
    assert [(r["method"], r["params"].get("keys")) for r in inputs] == [("pane.send_input", ["enter"])]
    words = shlex.split(inputs[0]["params"]["text"])
    assert words[:4] == ["exec", sys.executable, "-I", "-S"] and words[4].endswith("launcher.py") and len(words) == 6
    assert not os.path.exists(words[5])  # the launcher took (and deleted) its file
    assert "sk-muxhost-secret-42" not in json.dumps(fake.requests())  # no secret over the socket either
    pid = rec["pids"][0]
    env = psutil.Process(pid).environ()
    assert env["API_KEY"] == "sk-muxhost-secret-42" and env["MUXHOST_RECORD"] == rec["id"]
    assert SERVER_ONLY not in env  # the herdr server's environment is not the agent's
    assert (env["HERDR_PANE_ID"], env["HERDR_SOCKET_PATH"], env["TERM"]) == (rec["pane"], fake.address, "xterm-256color")
    # the agent IS the pane's process: the shell became the launcher, the launcher the agent
    assert call(fake.address, "pane.process_info", {"pane_id": rec["pane"]})["process_info"]["shell_pid"] == pid
    assert "muxhost-demo" in " ".join(psutil.Process(pid).cmdline())
    mux.wait_screen(rec["pane"], "demo>")
    # herdr starts with no workspace: the first agent made one, the next gets a tab in it
    assert [r["method"] for r in fake.requests() if r["method"].endswith(".create")] == ["workspace.create"]
    other = mux.ok("launch", "demo", "--json")
    tabs = call(fake.address, "session.snapshot")["snapshot"]["tabs"]
    assert sorted(t["label"] for t in tabs) == sorted([rec["name"], other["name"]])
    assert {t["workspace_id"] for t in tabs} == {"w1"}


def test_a_slow_shell_loses_nothing_and_is_typed_nothing_else(herdr_mux, tmp_path):
    # an rc file that takes its time, then drops whatever was typed meanwhile (as some shells and
    # rc files do): only a line typed once the prompt is there reaches the shell
    rc = tmp_path / "slow-rc.sh"
    rc.write_text(f"sleep 1.5\n{sys.executable} -c 'import termios; termios.tcflush(0, termios.TCIFLUSH)'\n"
                  "echo rc-done\n")
    m = herdr_mux(env={"ENV": str(rc)})
    t0 = time.monotonic()
    rec = m.ok("launch", "demo", "--json")
    assert time.monotonic() - t0 > 1.5
    assert rec["state"] == "running"
    m.wait_screen(rec["pane"], "demo>")
    assert len(typed(m.pane_server)) == 1
    assert m.ok("ls", "--json")[0]["state"] == "running"


def test_the_agent_must_become_the_panes_foreground_process(start_herdr, in_process, tmp_path, monkeypatch):
    # a "shell" that runs each line in a child instead of becoming it: the launcher takes its file,
    # but the pane's process stays the shell
    shell = tmp_path / "childish-shell"
    shell.write_text(f"#!{sys.executable}\n" + textwrap.dedent("""
        import subprocess, sys
        while True:
            sys.stdout.write("$ "); sys.stdout.flush()
            line = sys.stdin.readline()
            if not line:
                break
            subprocess.run(["/bin/sh", "-c", line])
    """))
    shell.chmod(0o755)
    fake = start_herdr(env={"SHELL": str(shell)})
    monkeypatch.setattr(hb, "AGENT_TIMEOUT", 1.5)
    backend = hb.HerdrBackend(fake.address)
    marker = tmp_path / "agent-ran"
    argv = [sys.executable, "-c", f"open({str(marker)!r}, 'w').close(); import time; time.sleep(60)"]
    with pytest.raises(MuxhostError, match=r"the agent did not become the pane's foreground process"):
        backend.create(argv, cwd=str(tmp_path), env=in_process, name="x", options={"@muxhost_record": "feedf00d"})
    assert marker.exists()  # it did start, as the shell's child...
    assert call(fake.address, "session.snapshot")["snapshot"]["panes"] == []  # ...and went with the closed pane
    wait_for(lambda: not [p for p in psutil.process_iter(["cmdline"]) if str(marker) in " ".join(p.info["cmdline"] or [])],
             timeout=5, what="the agent to end with its pane")


def test_a_cwd_that_is_not_a_folder_is_refused_before_any_pane(herdr_server, in_process, tmp_path):
    backend = hb.HerdrBackend(herdr_server.address)
    with pytest.raises(UsageError, match="no such directory"):  # herdr would silently use $HOME
        backend.create(["true"], cwd=str(tmp_path / "nowhere"), env=in_process, name="x")
    assert not [r for r in herdr_server.requests() if r["method"] in ("workspace.create", "tab.create", "pane.split")]


def test_a_protocol_it_does_not_speak_is_one_error_line(herdr_mux):
    m = herdr_mux(protocol=22)
    sock = m.pane_server.address
    r = m.run("launch", "demo")
    assert r.rc == 1
    assert r.err == (f"muxhost: herdr at {sock} speaks protocol 22 (herdr 0.8.2); "
                     "muxhost-herdr speaks protocol 20 (herdr 0.8.2)\n")
    assert [r["method"] for r in m.pane_server.requests()] == ["ping"]  # nothing else was asked
    assert m.ok("ls", "--all", "--json") == []  # no record, no pane


def test_no_herdr_server_is_one_error_line_and_ls_shows_nothing(mux, tmp_path):
    env = {"MUXHOST_BACKEND": "herdr", "HERDR_SOCKET_PATH": str(tmp_path / "no-herdr.sock")}
    r = mux.run("launch", "demo", env=env)
    assert (r.rc, r.err) == (1, f"muxhost: no herdr server running on socket {tmp_path / 'no-herdr.sock'}\n")
    assert mux.ok("ls", "--json", env=env) == []


def test_the_socket_is_where_herdr_looks(monkeypatch, tmp_path):
    for var in ("HERDR_SOCKET_PATH", "HERDR_SESSION", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert hb.resolve_address(None) == str(tmp_path / ".config/herdr/herdr.sock")
    assert hb.resolve_address("work") == str(tmp_path / ".config/herdr/sessions/work/herdr.sock")  # --socket NAME
    assert hb.resolve_address("default") == str(tmp_path / ".config/herdr/herdr.sock")
    assert hb.resolve_address("./here.sock") == os.path.abspath("here.sock")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HERDR_SESSION", "agents")
    assert hb.resolve_address(None) == str(tmp_path / "xdg/herdr/sessions/agents/herdr.sock")
    monkeypatch.setenv("HERDR_SOCKET_PATH", str(tmp_path / "explicit.sock"))
    assert hb.resolve_address(None) == str(tmp_path / "explicit.sock")
    assert hb.resolve_address(str(tmp_path / "given.sock")) == str(tmp_path / "given.sock")
    with pytest.raises(UsageError):
        hb.resolve_address("no such session!")


@on_herdr
def test_a_record_keeps_its_herdr_socket(mux, tmp_path):
    rec = mux.ok("launch", "demo", "--json")
    assert (rec["backend"], rec["socket"]) == ("herdr", mux.pane_server.address)
    # another herdr chosen now (or none): the record's own server is asked
    elsewhere = {"HERDR_SOCKET_PATH": str(tmp_path / "other.sock")}
    assert [r["state"] for r in mux.ok("ls", "--json", env=elsewhere)] == ["running"]
    assert mux.ok("stop", rec["id"], "--json", env=elsewhere)["outcome"] == "exit"


@on_herdr
def test_a_snapshot_costs_one_request_plus_one_per_muxhost_pane(mux, tmp_path):
    fake = mux.pane_server
    a, b = mux.ok("launch", "demo", "--json"), mux.ok("launch", "demo", "--json")
    call(fake.address, "tab.create", {"cwd": str(tmp_path), "label": "the user's own"})  # not muxhost's: free
    fake.forget()
    rows = mux.ok("ls", "--json")
    assert sorted((r["id"], r["state"]) for r in rows) == sorted([(a["id"], "running"), (b["id"], "running")])
    asked = [(r["method"], r["params"].get("pane_id")) for r in fake.requests()]
    assert asked[:2] == [("ping", None), ("session.snapshot", None)]
    assert sorted(asked[2:]) == sorted([("pane.process_info", a["pane"]), ("pane.process_info", b["pane"])])


@on_any_herdr
def test_an_agent_that_exits_takes_its_pane_shows_exited_and_resumes_in_a_new_pane(mux):
    rec = mux.ok("launch", "demo", "--json")
    mux.wait_screen(rec["pane"], "demo>")
    mux.type(rec["pane"], "/exit")
    # (herdr closes the pane once its process has ended: between the two, `show` truly says exited
    # with the pane still listed — a poll of in-process commands can land there)
    shown = wait_for(lambda: (lambda s: s if s["state"] == "exited" and s["pane"] is None else None)(
        mux.ok("show", rec["id"], "--json")), what="the record to show exited, its pane gone")
    assert shown["exit_status"] is None  # herdr kept neither the pane nor its status
    again = mux.ok("resume", rec["id"], "--json")
    assert again["pane"] != rec["pane"] and again["conversation_id"] == rec["conversation_id"]
    mux.wait_screen(again["pane"], "resumed conversation")
    # the herdr server goes (and every pane with it): that record is lost, not exited
    assert not mux.pane_server.violations()
    mux.pane_server.stop()
    assert mux.ok("ls", "--all", "--json")[0]["state"] == "lost"


@on_any_herdr
def test_target_and_split_close_only_the_records_pane(mux):
    a = mux.ok("launch", "demo", "--name", "ax", "--json")
    b = mux.ok("launch", "demo", "--name", "bx", "--target", "ax", "--json")  # a tab beside ax's
    c = mux.ok("launch", "demo", "--name", "cx", "--target", a["pane"], "--split", "right", "--json")
    panes = {p.pane_id: p for p in mux.pane_backend().snapshot()}
    assert panes[b["pane"]].session_id != panes[a["pane"]].session_id
    assert panes[b["pane"]].extra["workspace_id"] == panes[a["pane"]].extra["workspace_id"]
    assert panes[c["pane"]].session_id == panes[a["pane"]].session_id  # a split of ax's pane
    mux.wait_screen(c["pane"], "demo>")
    # ax's tab is muxhost's, but cx runs in it now: only ax's pane is closed
    assert mux.ok("stop", "ax", "--json")["outcome"] == "exit"
    assert {r["name"]: r["state"] for r in mux.ok("ls", "--json")} == {"bx": "running", "cx": "running"}
    r = mux.run("launch", "demo", "--split", "right")
    assert r.rc == 2 and "--split needs --target PANE" in r.err


@on_any_herdr
def test_herdr_shows_the_records_agent_and_conversation(mux):
    rec = mux.ok("launch", "demo", "--json")
    pane = next(p for p in mux.pane_backend().snapshot() if p.pane_id == rec["pane"])
    assert (pane.record, pane.agent, pane.extra.get("conversation")) == (rec["id"], "demo", rec["conversation_id"])
    info = call(mux.address, "pane.get", {"pane_id": rec["pane"]})["pane"]
    assert info["tokens"]["muxhost_conversation"] == rec["conversation_id"]
    assert info["title"] == f"demo {rec['conversation_id']}"


def test_keys_are_herdrs_names():
    fake = load_module(HERE / "herdr_fake.py")
    for neutral in ("enter", "esc", "tab", "backspace", "up", "down", "left", "right", "ctrl+u", "ctrl+c"):
        assert fake.encode_key(hb.herdr_key(neutral)) is not None, neutral  # herdr's parser takes it
    assert fake.encode_key(hb.herdr_key("ctrl+u")) == b"\x15"
    for bad in ("home", "C-u", "Enter!", "ctrl+"):
        with pytest.raises(UsageError):
            hb.herdr_key(bad)


def test_the_fake_checks_every_request_and_answers_one_per_connection(start_herdr):
    fake = start_herdr()
    with pytest.raises(hb.HerdrError, match="invalid_request"):
        call(fake.address, "pane.read", {"pane_id": "w1:p1"})  # `source` is required
    assert fake.violations() and "'source' is required" in fake.violations()[0]
    fake.violations_file.unlink()  # this test's own bad request, not the backend's
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(fake.address)
        s.sendall(b'{"id":"a","method":"ping","params":{}}\n{"id":"b","method":"ping","params":{}}\n')
        s.settimeout(5)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    assert [json.loads(line)["id"] for line in data.splitlines()] == ["a"]  # then the server closed it
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(fake.address)
        s.sendall(b"not json\n")
        assert json.loads(s.makefile().readline())["id"] == ""


def test_the_fake_behaves_as_herdr(start_herdr, tmp_path):
    fake = start_herdr()
    with pytest.raises(hb.HerdrError, match="no active workspace"):
        call(fake.address, "tab.create", {"cwd": str(tmp_path)})
    made = call(fake.address, "workspace.create", {"cwd": str(tmp_path / "nowhere")})
    pane = made["root_pane"]
    assert (made["workspace"]["workspace_id"], made["tab"]["tab_id"], pane["pane_id"]) == ("w1", "w1:t1", "w1:p1")
    assert pane["cwd"] == str(tmp_path / "home")  # not a folder: $HOME
    split = call(fake.address, "pane.split", {"target_pane_id": "w1:p1", "direction": "right"})["pane"]
    assert split["pane_id"] == "w1:p2"
    wait_for(lambda: call(fake.address, "pane.read", {"pane_id": "w1:p2", "source": "visible"})["read"]["text"].strip(),
             what="a prompt")
    # SIGHUP and SIGTERM ignored: pane.close ends it with SIGKILL, 250 ms after each
    call(fake.address, "pane.send_text", {"pane_id": "w1:p2", "text": "trap '' HUP TERM; exec sleep 60\r"})
    time.sleep(0.5)
    t0 = time.monotonic()
    call(fake.address, "pane.close", {"pane_id": "w1:p2"})
    assert 0.45 < time.monotonic() - t0 < 3
    # a shell that exits takes its pane, and the last pane its tab and workspace
    call(fake.address, "pane.send_input", {"pane_id": "w1:p1", "text": "exit", "keys": ["enter"]})
    wait_for(lambda: not call(fake.address, "session.snapshot")["snapshot"]["workspaces"], what="w1 to go")
    assert call(fake.address, "workspace.create", {})["workspace"]["workspace_id"] == "w2"  # never reused


def test_the_schema_checker_knows_the_keywords_the_schema_uses():
    sc = load_module(HERE / "schema_check.py")
    doc = json.loads((HERE / "herdr-api.schema.json").read_text())
    req = "#/schemas/request"
    assert sc.errors(doc, req, {"id": "1", "method": "ping", "params": {}}) == []
    assert sc.errors(doc, req, {"id": "1", "method": "pane.send_keys", "params": {"pane_id": "w1:p1", "keys": ["enter"]}}) == []
    bad = {
        "type": {"id": 1, "method": "ping", "params": {}},
        "const/oneOf": {"id": "1", "method": "pane.nope", "params": {}},
        "required": {"id": "1", "method": "pane.read", "params": {"pane_id": "p"}},
        "enum ($ref)": {"id": "1", "method": "pane.read", "params": {"pane_id": "p", "source": "everything"}},
        "items": {"id": "1", "method": "pane.send_keys", "params": {"pane_id": "p", "keys": [1]}},
        "additionalProperties": {"id": "1", "method": "tab.create", "params": {"env": {"A": 1}}},
        "propertyNames/pattern": {"id": "1", "method": "pane.report_metadata",
                                  "params": {"pane_id": "p", "source": "s", "tokens": {"no.dots": "x"}}},
        "maximum": {"id": "1", "method": "pane.report_metadata", "params": {"pane_id": "p", "source": "s", "ttl_ms": 86400001}},
        "minimum": {"id": "1", "method": "pane.read", "params": {"pane_id": "p", "source": "recent", "lines": -1}},
        "maxProperties": {"id": "1", "method": "pane.report_metadata",
                          "params": {"pane_id": "p", "source": "s", "tokens": {f"k{i}": "v" for i in range(17)}}},
    }
    for what, instance in bad.items():
        assert sc.errors(doc, req, instance), what
    res = "#/schemas/success_response"
    assert sc.errors(doc, res, {"id": "1", "result": {"type": "pong", "version": "0.8.2", "protocol": 20}}) == []
    assert sc.errors(doc, res, {"id": "1", "result": {"type": "pong", "version": "0.8.2", "protocol": 20,
                                                      "capabilities": {"live_handoff": "no"}}})  # anyOf
    assert sc.errors(doc, res, {"id": "1", "result": {"type": "ok", "extra": True}}) == []  # unknown fields pass
    with pytest.raises(sc.SchemaError):
        sc.errors({"x": {"not": {}}}, "#/x", 1)  # a keyword it does not implement is never skipped
