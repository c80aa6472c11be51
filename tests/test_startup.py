"""Start-up: `muxhost ls` pays for every module it imports on every run, so it imports only what
the command needs (README "Speed"). Checked the way a user would: `python -X importtime`."""
from muxhost.testing import wait_for


def imported(err: str) -> set[str]:
    """The modules an ``importtime`` log on stderr names."""
    return {line.rpartition("|")[2].strip() for line in err.splitlines() if line.startswith("import time:")}


def test_a_warm_ls_lists_no_package_metadata_and_parses_no_yaml(mux):
    cache = mux.home / ".cache" / "muxhost" / "plugins.json"
    # metadata installed in the last two seconds (CI installs right before the tests) is not cached yet
    wait_for(lambda: mux.ok("ls") is not None and cache.exists(), timeout=10, what="ls to write the plugin cache")
    r = mux.run("ls", "--json", env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert r.rc == 0, r.err
    modules = imported(r.err)
    assert "muxhost.host" in modules  # the log is there
    assert "importlib.metadata" not in modules  # the entry points came from the cache
    assert "yaml" not in modules  # no config file: no YAML parser


def test_the_plugin_cache_is_in_xdg_cache_home(mux, tmp_path):
    xdg = tmp_path / "xdg-cache"
    env = {"XDG_CACHE_HOME": str(xdg)}
    wait_for(lambda: mux.ok("ls", env=env) is not None and (xdg / "muxhost" / "plugins.json").exists(),
             timeout=10, what="ls to write the plugin cache")
    assert not (mux.home / ".cache" / "muxhost").exists()
