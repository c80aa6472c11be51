"""The command line as argparse reads it: every command, `hosts` too, takes the global options and
answers `-h`, `--version` and a bad option the same way (muxhost/cli)."""


def test_hosts_reads_the_global_options_as_every_command_does(mux):
    """`hosts` is answered before any host is made, but by the same parser: `-h hosts` is the
    top-level help (as `-h ls` is), `--version hosts` the version, a bad global option the usage
    error it is before any other command."""
    for before in (["-h"], ["--version"], ["--bogus"], ["--socket=s", "-h"]):
        r, ls = mux.run(*before, "hosts", "ls"), mux.run(*before, "ls")
        assert (r.rc, r.out, r.err) == (ls.rc, ls.out, ls.err), before
    assert mux.run("--bogus", "hosts", "ls").err == "muxhost: unrecognized arguments: --bogus\n"
    assert mux.run("hosts", "ls", "--bogus").err == "muxhost: unrecognized arguments: --bogus\n"


FLAKY = '''
import sys, uuid
import muxhost


class Flaky(muxhost.Agent):
    name = "flaky"
    exit_text = None
    id_pattern = r"[0-9a-f]{32}"

    def launch(self, ctx):
        return muxhost.Launch([sys.executable, "-c", "import time; time.sleep(300)"], conversation_id=uuid.uuid4().hex)

    def discover(self, ctx):
        raise RuntimeError("disk on fire")


@muxhost.hookimpl
def muxhost_register_agents(register):
    register(Flaky())
'''


def test_a_failed_plugin_hook_is_a_warning_line_with_json_too(mux, tmp_path):
    """--json or not, every plugin hook that failed is a `muxhost: warning:` line on stderr: the
    JSON document carries only the warnings of the records it shows (`stop --json` carried none of
    `discover`'s, and said nothing)."""
    from muxhost.testing import install_plugin

    env = install_plugin(tmp_path / "flaky", "muxhost-flaky", "muxhost_flaky", FLAKY)
    rec = mux.ok("launch", "flaky", "--json", env=env)
    line = f"muxhost: warning: flaky: discover failed for record {rec['id']}: RuntimeError: disk on fire"
    listed = mux.run("ls", "--json", env=env)
    assert line in listed.err and '"hook": "discover"' in listed.out
    for json_ in ([], ["--json"]):
        r = mux.run("show", rec["id"], *json_, env=env)
        assert r.rc == 0 and line in r.err, (json_, r)
    r = mux.run("stop", rec["id"], "--json", env=env)
    assert r.rc == 0 and line in r.err, r


def test_the_plugin_cache_is_written_through_no_link_and_read_only_when_it_is_yours(tmp_path, monkeypatch):
    """The cache names the modules every command imports: in a cache folder another user can write
    to, a link planted where the new file goes is not written through (it pointed at a file of
    yours, which the cache overwrote), and a cache file that is not yours is not read."""
    import os

    from muxhost import plugins

    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    path = tmp_path / "cache" / "plugins.json"
    path.parent.mkdir()
    os.symlink(victim, f"{path}.{os.getpid()}.tmp")
    plugins._write_cache(str(path), [1], [], {})
    assert victim.read_text() == "precious\n" and not path.is_symlink()
    eps = [plugins.EntryPoint("x", "x_mod", "x-pkg", "1")]
    plugins._write_cache(str(path), [1], eps, {})
    assert plugins._read_cache(str(path), [1])[0][0].value == "x_mod"
    monkeypatch.setattr(os, "geteuid", lambda: os.stat(path).st_uid + 1)  # (as another user would see it)
    assert plugins._read_cache(str(path), [1]) is None


def test_purge_confirmed_purges_the_shown_conversation_or_nothing(mux):
    """``purge REF --confirmed ID`` (what ``purge REF@HOST`` sends after its dry run was answered
    y): a conversation the record was never in is refused and nothing goes; the shown one goes."""
    rec = mux.ok("launch", "demo", "--json")
    mux.wait_screen(rec["pane"], "demo>")
    shown = mux.ok("purge", rec["id"], "--dry-run", "--json")
    other = "0" * 32 if shown["conversation_id"] != "0" * 32 else "1" * 32
    r = mux.run("purge", rec["id"], "--yes", "--stop", "--confirmed", other)
    assert r.rc == 4 and f"not in conversation {other}" in r.err, r
    assert mux.ok("show", rec["id"], "--json")["state"] == "running"  # (refused before the stop)
    done = mux.ok("purge", rec["id"], "--yes", "--stop", "--confirmed", shown["conversation_id"], "--json")
    assert done["conversation_id"] == shown["conversation_id"] and done["removed"] and not done["residual"]
    assert mux.run("purge", "--agent", "demo", "--conversation", other, "--confirmed", other).rc == 2
