"""Every number of seconds muxhost takes is finite and in range (issue 17, item 16): a stop with
``exit_grace: .nan`` never reached SIGKILL and held the record's lock for ever. A config number that is
NaN, infinite, negative or past a year is a config error (exit 2, the file, ``line N``, the key); so is
such a value given to a flag that takes seconds."""
import pytest

from muxhost import config
from muxhost.errors import ConfigError

BAD = [".nan", ".NaN", ".inf", "-.inf", "-1", "1.0e+400", "1.0e+12", "100000000000000000000000000000000000000000000"]

KEYS = {  # dotted key -> the YAML that sets it to {v}, and its line
    "stop.exit_grace": ("stop:\n  exit_grace: {v}\n", 2),
    "stop.term_grace": ("stop:\n  term_grace: {v}\n", 2),
    "stop.hup_grace": ("stop:\n  hup_grace: {v}\n", 2),
    "stop.exit_pause": ("stop:\n  exit_pause: {v}\n", 2),
    "watch.interval": ("watch:\n  alert: true\n  interval: {v}\n", 3),
    "watch.stall_after": ("watch:\n  stall_after: {v}\n", 2),
    "watch.sleep_after": ("watch:\n  sleep_after: {v}\n", 2),
    "agents.mine.exit_pause": ("agents:\n  mine:\n    command: [a]\n    exit_pause: {v}\n", 4),
    "agents.mine.exit_grace": ("agents:\n  mine:\n    command: [a]\n    exit_grace: {v}\n", 4),
}


@pytest.mark.parametrize("value", BAD)
@pytest.mark.parametrize("key", sorted(KEYS))
def test_a_config_number_that_is_not_finite_or_in_range_is_refused(key, value):
    text, line = KEYS[key]
    with pytest.raises(ConfigError) as e:
        config.parse(text.format(v=value), "/cfg/config.yaml")
    assert e.value.exit_code == 2
    assert str(e.value).startswith(f"/cfg/config.yaml: line {line}: {key}: expected a number of seconds from 0 to "), \
        str(e.value)


@pytest.mark.parametrize("value", ["0", "0.5", "5", "86400", "31536000"])
def test_config_numbers_in_range_are_taken(value):
    cfg = config.parse(f"stop:\n  exit_grace: {value}\nwatch:\n  sleep_after: {value}\n")
    assert cfg.stop("exit_grace") == float(value) and cfg.watch("sleep_after") == float(value)


def test_a_nan_grace_in_the_config_stops_nothing_and_says_where(mux):
    mux.config.write_text("stop:\n  term_grace: 1\n  exit_grace: .nan\n")
    for argv in (("ls",), ("launch", "demo"), ("stop", "--all")):
        r = mux.run(*argv)
        assert (r.rc, r.err) == (2, f"muxhost: {mux.config}: line 3: stop.exit_grace: expected a number of "
                                    f"seconds from 0 to 31536000, got nan\n"), (argv, r.rc, r.err)


FLAGS = [
    (("stop", "--grace={v}", "x"), "--grace must be a number of seconds"),
    (("sleep", "--grace={v}", "x"), "--grace must be a number of seconds"),
    (("watch", "--interval={v}"), "--interval must be more than 0 seconds"),
    (("sleep", "--idle-for={v}"), "--idle-for "),
    (("wait", "x", "--until", "idle", "--timeout={v}"), "--timeout "),
]


@pytest.mark.parametrize("argv,says", FLAGS, ids=[" ".join(f[0][:-1] if f[0][0] != "wait" else f[0][::4]) for f in FLAGS])
def test_a_flag_that_takes_seconds_refuses_nan_inf_and_negative(mux, argv, says):
    for value in ("nan", "inf", "-inf", "-1", "1e400", "1e300"):
        r = mux.run(*(a.format(v=value) for a in argv))
        assert r.rc == 2 and r.err.startswith(f"muxhost: {says}") and r.err.count("\n") == 1, (value, r.rc, r.err)
    mux.ok("ls")  # and nothing was started meanwhile
