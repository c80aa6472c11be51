"""Which remote hosts there are: config ``hosts:`` plus ``muxhost hosts add``'s file, and the ``hosts`` verb.

``hosts: {timeout: 5, box: {ssh: "ssh://me@box:2222", muxhost: "~/.local/bin/muxhost"}}`` in
config.yaml (``timeout`` is the one reserved key, seconds), and ``<state dir>/hosts.json`` (0600),
which ``hosts add``/``hosts rm`` write (the config file is the user's: muxhost never rewrites it).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from muxhost.errors import MuxhostError, NotFound, UsageError
from muxhost.remote.protocol import NAME_RE  # (a host's name)

DEFAULT_TIMEOUT = 5.0
#: the HOST column's name for this machine (not a name a remote host may take)
LOCAL = "local"
HOST_KEYS = ("ssh", "muxhost")


@dataclass(frozen=True)
class RemoteHost:
    name: str
    ssh: str                      # anything ssh takes as a destination: an alias, user@box, ssh://me@box:2222
    muxhost: str = "muxhost"      # the muxhost command there (a path, ~/ expanded by the remote shell)
    source: str = ""              # where it is defined: the config file, or hosts.json

    def to_dict(self) -> dict:
        return {"name": self.name, "ssh": self.ssh, "muxhost": self.muxhost, "source": self.source}


@dataclass
class Hosts:
    hosts: dict[str, RemoteHost] = field(default_factory=dict)
    timeout: float = DEFAULT_TIMEOUT
    config_path: str | None = None

    def get(self, name: str | None) -> RemoteHost:
        if name in self.hosts:
            return self.hosts[name]
        known = ", ".join(sorted(self.hosts)) or "none: `muxhost hosts add NAME TARGET` adds one"
        raise NotFound(f"no host {name!r} (known: {known})")


def check_name(name: str) -> str:
    if not NAME_RE.fullmatch(name or "") or name == LOCAL:
        raise UsageError(f"host name {name!r}: letters, digits, '.', '_' and '-', not starting with "
                         f"'.', '-' or '_', and not {LOCAL!r}")
    return name


def _check_target(target: str, what: str) -> str:
    if not target or target.startswith("-") or any(c.isspace() or ord(c) < 32 for c in target):
        raise UsageError(f"{what}: {target!r} is no ssh destination (an alias, user@host or ssh://user@host:port)")
    return target


def from_config(cfg) -> Hosts:
    """The ``hosts:`` section of a loaded config, checked (errors name the file, the line, the key)."""
    section = cfg.data.get("hosts") or {}
    out = Hosts(config_path=cfg.path)
    if not isinstance(section, dict):
        raise cfg.error("hosts", "expected a mapping of host names")
    for name, entry in section.items():
        key = f"hosts.{name}"
        if name == "timeout":
            from muxhost.config import seconds_ok

            if not seconds_ok(entry) or not entry:
                raise cfg.error(key, f"expected a number of seconds more than 0, got {entry!r}")
            out.timeout = float(entry)
            continue
        if not isinstance(name, str) or not NAME_RE.fullmatch(name) or name == LOCAL:
            raise cfg.error(key, "not a host name (letters, digits, '.', '_', '-'; not 'local')")
        if isinstance(entry, str):
            entry = {"ssh": entry}
        if not isinstance(entry, dict):
            raise cfg.error(key, "expected a mapping with ssh: (and muxhost:)")
        unknown = sorted(set(entry) - set(HOST_KEYS))
        if unknown:
            raise cfg.error(f"{key}.{unknown[0]}", f"unknown key (known: {', '.join(HOST_KEYS)})")
        for k in HOST_KEYS:
            if k in entry and not (isinstance(entry[k], str) and entry[k]):
                raise cfg.error(f"{key}.{k}", f"expected a string, got {entry[k]!r}")
        if "ssh" not in entry:
            raise cfg.error(key, "needs ssh: (the destination, as ssh takes it)")
        try:
            _check_target(entry["ssh"], f"{key}.ssh")
        except UsageError as e:
            raise cfg.error(f"{key}.ssh", str(e).partition(": ")[2]) from None
        out.hosts[name] = RemoteHost(name, entry["ssh"], entry.get("muxhost") or "muxhost", cfg.path or "config")
    return out


def added_file() -> Path:
    from muxhost.store import state_dir

    return state_dir() / "hosts.json"


def _read_added() -> dict[str, dict]:
    path = added_file()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise MuxhostError(f"{path}: cannot read the hosts `muxhost hosts add` keeps ({e}); fix or remove it")
    return data.get("hosts", {}) if isinstance(data, dict) else {}


def _write_added(entries: dict[str, dict]) -> None:
    from muxhost.store import check_private, state_folder

    folder = state_folder()
    path = folder / "hosts.json"
    check_private(path)
    tmp = folder / f".hosts.json.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({"hosts": entries}, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def load(config_path: str | None = None, cfg=None) -> Hosts:
    """Every host: the config's, then the added ones (a config host wins a name)."""
    if cfg is None:
        from muxhost import config as config_mod

        cfg = config_mod.load(config_path)
    table = from_config(cfg)
    for name, entry in _read_added().items():
        if name in table.hosts or not isinstance(entry, dict) or not NAME_RE.fullmatch(str(name)):
            continue
        if isinstance(entry.get("ssh"), str) and entry["ssh"]:
            table.hosts[name] = RemoteHost(name, entry["ssh"], entry.get("muxhost") or "muxhost", str(added_file()))
    return table


def any_configured(cfg) -> bool:
    """Whether a remote host may exist, without parsing more than needed (``ls``'s fast path)."""
    return bool((cfg.data.get("hosts") or {}).keys() - {"timeout"}) or added_file().exists()


# -- the `hosts` verb -----------------------------------------------------------------------------
def add_arguments(sp) -> None:
    """``hosts add|rm|ls`` on the command's parser ``sp`` (:mod:`muxhost.cli.hosts`)."""
    from muxhost.cli.output import json_flag

    sp.description = (
             "Remote hosts run their own muxhost, reached with your ssh (its config, agent, keys and\n"
             "ProxyJump). REF@HOST in every verb, and `launch AGENT --host NAME`, run there; `ls` lists\n"
             "every host. Hosts come from config hosts: and from `hosts add` (kept in the state folder).")
    hs = sp.add_subparsers(dest="hosts_command", metavar="ACTION")
    a = hs.add_parser("add", help="add a host: NAME and an ssh destination (alias, user@box, ssh://me@box:2222)")
    a.add_argument("name", metavar="NAME")
    a.add_argument("target", metavar="TARGET")
    a.add_argument("--muxhost", metavar="PATH", help="the muxhost command there (default: muxhost on its PATH)")
    r = hs.add_parser("rm", help="forget a host added with `hosts add`")
    r.add_argument("name", metavar="NAME")
    s = hs.add_parser("ls", help="every host: reachable or why not, its muxhost version, records, round-trip")
    json_flag(s)


def run(config_path: str | None, args) -> int:
    """``hosts ACTION`` with its parsed ``args``."""
    table = load(config_path)
    if args.hosts_command == "add":
        check_name(args.name)
        _check_target(args.target, "TARGET")
        if args.muxhost is not None and not args.muxhost.strip():
            raise UsageError("--muxhost must not be empty")
        if args.name in table.hosts and table.hosts[args.name].source != str(added_file()):
            raise MuxhostError(f"host {args.name!r} is defined in {table.hosts[args.name].source}: change it there", 4)
        entries = _read_added()
        old = entries.get(args.name)
        entries[args.name] = {"ssh": args.target, **({"muxhost": args.muxhost} if args.muxhost else {})}
        _write_added(entries)
        if isinstance(old, dict):  # (said, with what it was: a typo must not lose a --muxhost path in silence)
            was = f"{old.get('ssh')}" + (f", --muxhost {old['muxhost']}" if old.get("muxhost") else "")
            print(f"changed host {args.name} to {args.target} (it was {was}); `muxhost hosts ls` checks it")
        else:
            print(f"added host {args.name} ({args.target}); `muxhost hosts ls` checks it")
        return 0
    if args.hosts_command == "rm":
        entries = _read_added()
        if args.name not in entries:
            if args.name in table.hosts:
                raise MuxhostError(f"host {args.name!r} is defined in {table.hosts[args.name].source}: "
                                   "remove it there", 4)
            raise NotFound(f"no host {args.name!r} added with `muxhost hosts add`")
        del entries[args.name]
        _write_added(entries)
        print(f"removed host {args.name}")
        return 0
    if args.hosts_command != "ls":
        raise UsageError("hosts takes add, rm or ls")
    return _ls(table, args.json)


def _ls(table: Hosts, as_json: bool) -> int:
    from muxhost.remote import transport

    names = sorted(table.hosts)
    answers = transport.ask_all([table.hosts[n] for n in names], ["ls", "--all", "--json"], table.timeout,
                                use_cache=False)
    docs = []
    for n in names:
        ans = answers[n]
        d = {**table.hosts[n].to_dict(), "reachable": ans.ok, "reason": ans.reason,
             "version": ans.version, "schema": ans.schema,
             "records": len(ans.doc) if ans.ok and isinstance(ans.doc, list) else None,
             "rtt": round(ans.seconds, 3)}
        docs.append(d)
    if as_json:
        print(json.dumps(docs, indent=2))
        return 0
    if not docs:
        print("no remote hosts (`muxhost hosts add NAME TARGET` adds one)")
        return 0
    from muxhost.cli.output import table as _table

    rows = [[d["name"], d["ssh"], "reachable" if d["reachable"] else f"offline: {d['reason']}",
             d["version"] or "-", "-" if d["records"] is None else str(d["records"]),
             f"{d['rtt'] * 1000:.0f}ms"] for d in docs]
    print(_table(rows, ["HOST", "SSH", "STATE", "MUXHOST", "RECORDS", "RTT"]))
    return 0
