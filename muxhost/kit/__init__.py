"""The plugin kit: the jobs every agent plugin has, done once, the safe way (fail closed).

Nothing is loaded before it is used: ``kit.sqlite`` (after ``from muxhost.api import kit``) imports
:mod:`muxhost.kit.sqlite` on first use, and so does ``from muxhost.kit import sqlite``.

- :mod:`muxhost.kit.holders` who holds a conversation: argv naming the id, an environment variable
  equal to it, open files, locks (``/proc/locks``; macOS: open files and a ``flock`` probe), with
  ``exclude`` for services that keep a database open without holding a conversation;
- :mod:`muxhost.kit.sqlite` read-only SQLite that creates no file (a WAL without its ``-shm``; the
  ``immutable`` / private copy fallback, only when no process uses the database; one timeout),
  checked identifiers, ``delete_rows`` in one transaction per database, ``compact``;
- :mod:`muxhost.kit.jsonl` count, list and drop the lines of a conversation in a shared line file, and
  read the complete lines at a line file's end (``tail``, ``since``: a torn last line waits);
- :mod:`muxhost.kit.flock` ``flock`` with a deadline, and the ``mkdir`` lock of npm proper-lockfile;
- :mod:`muxhost.kit.family` a conversation and its children at every depth (cycle-safe);
- :mod:`muxhost.kit.command` run the agent's own delete command, with the agent's environment;
- :mod:`muxhost.kit.net` when the agent last heard from the network (``quiet_for``: the kernel's
  ``tcp_info`` of its TCP connections, Linux) and ``stalled``: the evidence of a turn that waits on
  a model that sends nothing, for ``Agent.activity``;
- :mod:`muxhost.kit.conversations` every conversation on disk (``Agent.conversations``), read-only and
  cheap: a folder of JSONL transcripts, rollout files, a sessions table; titles from the first lines;
- on :class:`~muxhost.agent.AgentContext`: ``ctx.find_binary(name, install_hint)`` and
  ``ctx.resolve(path)`` (``~`` is the AGENT's HOME, a relative path is the agent's cwd's).

The three agent plugins in this repository are built on it (their private copies are gone):
claude uses ``holders`` (argv, ``CLAUDE_CODE_SESSION_ID``) and ``jsonl``, with ``MkdirLock`` /
``JsonMember`` artifacts for its proper-lockfile-guarded files; opencode uses ``sqlite``
(``connect_ro``, ``columns``, ``keys``), ``holders`` (files, locks, its ``serve`` excluded),
``jsonl`` and ``family``; codex uses ``sqlite``, ``holders`` (writer locks, open rollouts,
``CODEX_THREAD_ID``), ``jsonl`` and ``flock``. Their own delete commands are ``Command`` artifacts.
All three use ``net`` for ``stalled``.

All three: the before/after diff of ``purge`` (``removed`` = plan minus residual) and the child
labels are the host's once ``artifacts`` returns typed artifacts.
"""

MODULES = ("holders", "sqlite", "jsonl", "flock", "family", "command", "net", "conversations")


def __getattr__(name: str):
    if name not in MODULES:
        raise AttributeError(f"module 'muxhost.kit' has no attribute {name!r}")
    import importlib

    return importlib.import_module(f"muxhost.kit.{name}")  # (which also sets it here)


def __dir__() -> list[str]:
    return [*globals(), *MODULES]
