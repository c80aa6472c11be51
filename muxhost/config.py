"""config.yaml: found, parsed and validated with errors that name the file, the line and the key.

Looked up as ``--config``, else ``$MUXHOST_CONFIG``, else ``$XDG_CONFIG_HOME/muxhost/config.yaml``
(``~/.config/muxhost/config.yaml``); no file is fine.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from muxhost.errors import ConfigError

# shape of a value: str, "num", bool, [str] list of str, {"*": ...} mapping with any keys, or a
# dict of known keys
_STR = "str"
_NUM = "num"
_STRLIST = "strlist"
_STRMAP = "strmap"
_OPT_STR = "optstr"
_OPT_NUM = "optnum"
_ANY_MAP = "anymap"
_BOOL = "bool"

AGENT_KEYS = {
    "command": _STRLIST,      # config agents: argv to start it ({conversation_id} = a new uuid4)
    "resume": _STRLIST,       # argv with {conversation_id}
    "exit_text": _OPT_STR,    # typed by the stop ladder; null = no graceful exit
    "exit_pause": _NUM,       # seconds between the exit text and Enter (before stop.exit_pause)
    "exit_grace": _NUM,       # seconds to wait for it to leave after the exit text (before stop.exit_grace)
    "exit_still": _OPT_NUM,   # still this long after answering the exit text = it did not take it; null: never judged
    "process_names": _STRLIST,
    "env": _STRMAP,
    "id_pattern": _STR,
    "binary": _STR,           # plugin agents: the executable to run
    "args": _STRLIST,         # extra arguments appended at launch
    "options": _ANY_MAP,      # free-form, for a plugin's own settings
}

SCHEMA: dict[str, Any] = {
    "tmux": {"socket_name": _STR},
    "stop": {"exit_grace": _NUM, "term_grace": _NUM, "hup_grace": _NUM, "exit_pause": _NUM},
    # the activity watch: seconds between passes, silence before a working agent is `stalled`,
    # idle seconds after which the watch puts an agent to sleep (`muxhost sleep`; none by default), and
    # whether an agent that starts waiting gets a tmux message and the bell
    "watch": {"interval": _NUM, "stall_after": _NUM, "sleep_after": _NUM, "alert": _BOOL},
    "default_agent": _STR,
    "backend": _STR,          # the pane backend new agents go to (default tmux; also --backend, $MUXHOST_BACKEND)
    "agents": {"*": AGENT_KEYS},
    # `launch --worktree NAME`: worktrees go to ROOT/<repo folder>-<NAME> (default ROOT: the repo's
    # parent folder; `~` expanded; a relative ROOT is taken from the repo's top-level folder)
    "worktree": {"root": _STR},
    "purge": {"archive": _BOOL},  # purge into an archive by default (`purge --no-archive` for one without)
    "hosts": _ANY_MAP,        # remote hosts over ssh: checked by muxhost.remote.hosts (docs/remote.md)
    # the watch's notifications (muxhost.notify, the `notify` extra): apprise URLs, which changes,
    # and the working spell after which an agent idle again is `done`
    "notify": {"urls": _STRLIST, "events": _STRLIST, "done_after": _NUM},
}

#: the most seconds a setting or a flag takes (a year): finite, and within what sleeps and waits take
MAX_SECONDS = 365 * 86400


def seconds_ok(value: Any) -> bool:
    """Whether ``value`` is a number of seconds muxhost takes: finite, from 0 to :data:`MAX_SECONDS`
    (NaN, infinity and negative numbers are not: a NaN grace would never end the stop ladder)."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and 0 <= value <= MAX_SECONDS


DEFAULTS = {"exit_grace": 5.0, "term_grace": 1.0, "hup_grace": 0.5, "exit_pause": 0.5}
WATCH_DEFAULTS: dict[str, Any] = {"interval": 1.0, "stall_after": 600.0, "sleep_after": None, "alert": True}
NOTIFY_EVENTS = ("waiting", "done", "stalled", "failed")
NOTIFY_DEFAULTS: dict[str, Any] = {"urls": [], "events": list(NOTIFY_EVENTS), "done_after": 60.0}


class Config:
    """The parsed config file: ``data`` by key, ``lines`` the line of each dotted key. (A plain
    class: a dataclass costs every command's start-up its code generation.)"""

    def __init__(self, path: str | None = None, data: dict[str, Any] | None = None,
                 lines: dict[str, int] | None = None):
        self.path = path
        self.data: dict[str, Any] = {} if data is None else data
        self.lines: dict[str, int] = {} if lines is None else lines  # dotted key -> line number

    def __repr__(self) -> str:
        return f"Config(path={self.path!r}, data={self.data!r})"

    def stop(self, key: str) -> float:
        return float(self.data.get("stop", {}).get(key, DEFAULTS[key]))

    def watch(self, key: str) -> Any:
        """A ``watch:`` setting, else its default (:data:`WATCH_DEFAULTS`)."""
        value = (self.data.get("watch") or {}).get(key)
        return WATCH_DEFAULTS[key] if value is None else value

    def notify(self, key: str) -> Any:
        """A ``notify:`` setting, else its default (:data:`NOTIFY_DEFAULTS`)."""
        value = (self.data.get("notify") or {}).get(key)
        return NOTIFY_DEFAULTS[key] if value is None else value

    @property
    def purge_archive(self) -> bool:
        """``purge.archive``: every purge keeps an archive first (default false)."""
        return bool((self.data.get("purge") or {}).get("archive", False))

    @property
    def socket_name(self) -> str | None:
        return self.data.get("tmux", {}).get("socket_name")

    @property
    def worktree_root(self) -> str | None:
        """``worktree.root`` with ``~`` expanded; None: beside each repository."""
        root = (self.data.get("worktree") or {}).get("root")
        return os.path.expanduser(root) if root else None

    @property
    def agents(self) -> dict[str, dict[str, Any]]:
        return self.data.get("agents") or {}

    def agent(self, name: str) -> dict[str, Any]:
        return dict(self.agents.get(name) or {})

    def where(self, key: str) -> str:
        line = self.lines.get(key)
        return f"{self.path}: line {line}: " if line else (f"{self.path}: " if self.path else "")

    def error(self, key: str, message: str) -> ConfigError:
        return ConfigError(f"{self.where(key)}{key}: {message}")


def find_config(explicit: str | None, env: dict[str, str] | None = None) -> Path | None:
    env = os.environ if env is None else env
    if explicit:
        return Path(explicit)
    if env.get("MUXHOST_CONFIG"):
        return Path(env["MUXHOST_CONFIG"])
    base = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "muxhost" / "config.yaml"


def load(explicit: str | None = None) -> Config:
    path = find_config(explicit)
    if path is None:
        return Config()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if explicit:
            raise ConfigError(f"{path}: no such config file")
        return Config()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read config: {e}")
    return parse(text, str(path))


def parse(text: str, path: str = "<config>") -> Config:
    import yaml

    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = f"line {mark.line + 1}: " if mark else ""
        raise ConfigError(f"{path}: {line}YAML syntax error: {e.problem or e}")
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: YAML error: {e}")
    cfg = Config(path=path)
    if node is None:
        return cfg
    lines: dict[str, int] = {}
    cfg.data = _check(node, SCHEMA, "", path, lines)
    cfg.lines = lines
    if (cfg.data.get("worktree") or {}).get("root") == "":
        raise cfg.error("worktree.root", "must not be empty")
    _check_notify(cfg)
    for name, entry in cfg.agents.items():
        if "id_pattern" in entry:
            try:
                re.compile(entry["id_pattern"])
            except re.error as e:
                raise cfg.error(f"agents.{name}.id_pattern", f"not a valid regular expression ({e})")
        for key in ("command", "resume"):
            if key in entry and not entry[key]:
                raise cfg.error(f"agents.{name}.{key}", "must not be empty")
    return cfg


def _check_notify(cfg: Config) -> None:
    """``notify.urls`` holds no empty URL; ``notify.events`` names only known events."""
    notify = cfg.data.get("notify") or {}
    if any(not url.strip() for url in notify.get("urls") or []):
        raise cfg.error("notify.urls", "an empty URL (each is an apprise URL: ntfy://TOPIC, json://HOST:PORT/PATH, …)")
    for event in notify.get("events") or []:
        if event not in NOTIFY_EVENTS:
            raise cfg.error("notify.events", f"unknown event {event!r} (known: {', '.join(NOTIFY_EVENTS)})")


def _fail(path: str, node, key: str, message: str) -> ConfigError:
    return ConfigError(f"{path}: line {node.start_mark.line + 1}: {key or 'top level'}: {message}")


def _scalar(node, path: str, key: str):
    import yaml

    if not isinstance(node, yaml.ScalarNode):
        raise _fail(path, node, key, "expected a single value")
    return yaml.safe_load(yaml.serialize(node))


def _check(node, shape, key: str, path: str, lines: dict[str, int]):
    """The value of ``node`` when it has ``shape`` (a dict of shapes, or one of the ``_`` kinds)."""
    import yaml

    lines.setdefault(key, node.start_mark.line + 1)
    if isinstance(shape, dict):
        return _check_section(node, shape, key, path, lines)
    if shape == _ANY_MAP:
        if not isinstance(node, yaml.MappingNode):
            raise _fail(path, node, key, "expected a mapping")
        return yaml.safe_load(yaml.serialize(node))
    if shape == _STRLIST:
        if not isinstance(node, yaml.SequenceNode):
            raise _fail(path, node, key, "expected a list of strings")
        items = []
        for item in node.value:
            v = _scalar(item, path, key)
            if isinstance(v, bool) or not isinstance(v, (str, int, float)):
                raise _fail(path, item, key, f"expected a list of strings, got {v!r}")
            items.append(str(v))
        return items
    if shape == _STRMAP:
        return _check_env(node, key, path)
    return _check_scalar(node, shape, key, path)


def _check_section(node, shape: dict, key: str, path: str, lines: dict[str, int]) -> dict[str, Any]:
    """A mapping whose keys are ``shape``'s (``"*"``: any key), each value checked against its shape."""
    import yaml

    if not isinstance(node, yaml.MappingNode):
        raise _fail(path, node, key, "expected a mapping")
    out: dict[str, Any] = {}
    for knode, vnode in node.value:
        k = _scalar(knode, path, key)
        if not isinstance(k, str):
            raise _fail(path, knode, key, f"keys must be strings, got {k!r}")
        sub = f"{key}.{k}" if key else k
        if k in out:
            raise _fail(path, knode, sub, "duplicate key")
        lines[sub] = knode.start_mark.line + 1
        if "*" in shape:
            spec = shape["*"]
        elif k in shape:
            spec = shape[k]
        else:
            known = ", ".join(sorted(shape))
            raise _fail(path, knode, sub, f"unknown key (known: {known})")
        if isinstance(spec, dict) and isinstance(vnode, yaml.ScalarNode) and vnode.tag.endswith(":null"):
            lines[sub] = vnode.start_mark.line + 1
            out[k] = {}  # an empty section (`agents:` with nothing under it)
            continue
        out[k] = _check(vnode, spec, sub, path, lines)
    return out


def _check_env(node, key: str, path: str) -> dict[str, str]:
    """A mapping of environment variable names to strings."""
    import yaml

    if not isinstance(node, yaml.MappingNode):
        raise _fail(path, node, key, "expected a mapping of names to strings")
    out = {}
    for knode, vnode in node.value:
        k = _scalar(knode, path, key)
        v = _scalar(vnode, path, f"{key}.{k}")
        if not isinstance(k, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
            raise _fail(path, knode, f"{key}.{k}", "not a valid environment variable name")
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise _fail(path, vnode, f"{key}.{k}", f"expected a string, got {v!r}")
        out[k] = str(v)
    return out


def _check_scalar(node, shape, key: str, path: str):
    """A string, an optional string, a boolean or a number of seconds."""
    value = _scalar(node, path, key)
    if shape == _STR:
        if not isinstance(value, str):
            raise _fail(path, node, key, f"expected a string, got {value!r}")
        return value
    if shape == _OPT_STR:
        if value is not None and not isinstance(value, str):
            raise _fail(path, node, key, f"expected a string or null, got {value!r}")
        return value
    if shape == _BOOL:
        if not isinstance(value, bool):
            raise _fail(path, node, key, f"expected true or false, got {value!r}")
        return value
    if shape == _OPT_NUM and value is None:
        return None
    if shape in (_NUM, _OPT_NUM):
        if not seconds_ok(value):
            raise _fail(path, node, key, f"expected a number of seconds from 0 to {MAX_SECONDS}, got {value!r}")
        if key == "watch.interval" and not value:  # (a watch that never waits between passes)
            raise _fail(path, node, key, f"expected more than 0 seconds, got {value!r}")
        return float(value)
    raise AssertionError(shape)
