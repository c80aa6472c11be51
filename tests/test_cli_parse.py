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
