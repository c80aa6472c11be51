"""The plugin kit: the jobs every agent plugin has, done once, the safe way (fail closed).

Import the module you need; nothing is loaded before that::

    from muxhost.kit import holders, sqlite, jsonl, flock, family, command

- :mod:`muxhost.kit.holders` who holds a conversation: argv naming the id, an environment variable
  equal to it, open files, locks (``/proc/locks``; macOS: open files and a ``flock`` probe), with
  ``exclude`` for services that keep a database open without holding a conversation;
- :mod:`muxhost.kit.sqlite` read-only SQLite that creates no file (a WAL without its ``-shm``; the
  ``immutable`` / private copy fallback, only when no process uses the database; one timeout),
  checked identifiers, ``delete_rows`` in one transaction per database, ``compact``;
- :mod:`muxhost.kit.jsonl` count, list and drop the lines of a conversation in a shared line file;
- :mod:`muxhost.kit.flock` ``flock`` with a deadline, and the ``mkdir`` lock of npm proper-lockfile;
- :mod:`muxhost.kit.family` a conversation and its children at every depth (cycle-safe);
- :mod:`muxhost.kit.command` run the agent's own delete command, with the agent's environment;
- on :class:`~muxhost.agent.AgentContext`: ``ctx.find_binary(name, install_hint)`` and
  ``ctx.resolve(path)`` (``~`` is the AGENT's HOME, a relative path is the agent's cwd's).

Porting guide: the plugins' private helpers and what replaces each.

claude
  ``ClaudeAgent.binary`` -> ``ctx.find_binary("claude", self.install_hint)``;
  ``ClaudePaths._abs`` -> ``ctx.resolve``;
  ``_describe(pid)`` -> ``Proc.describe`` (lines come from ``holders.holders``);
  ``_env_holders`` -> ``holders.holders(ctx, cid, env_vars=("CLAUDE_CODE_SESSION_ID",))``;
  ``argv_holders`` + merging by pid in ``in_use`` -> ``holders.holders`` (argv is on by default);
  ``ClaudeLock`` / ``_locked`` -> ``flock.dirlock(os.path.realpath(file))``;
  ``_history_match`` + counting -> ``jsonl.count_lines(hist, ("sessionId", cid))``,
  ``fsutil.drop_lines(…, match)`` -> ``jsonl.drop_lines(hist, ("sessionId", cid))``.
  Stays (claude's formats): the project-folder encoding, ``registry_entry_live`` /
  ``_proc_start_ticks`` (the live registry), ``_names_id``, ``clear_last_session_id`` /
  ``_json_refs`` / ``_last_session_projects`` / ``_detect_indent`` (until a ``JsonMember`` artifact
  does it), the argv helpers, ``_transcript_cwd``.

opencode
  ``binary`` / ``_require_binary`` -> ``ctx.find_binary("opencode", self.install_hint)``;
  ``db_path``'s ``expanduser`` -> ``ctx.resolve(value, base=data_dir)`` (the agent's HOME);
  ``connect_ro`` / ``_Snapshot`` / ``_read`` -> ``sqlite.connect_ro`` (and ``sqlite.rows``);
  ``_columns`` -> ``sqlite.columns``; ``_keys`` + ``_family_rows`` -> ``sqlite.keys`` per table;
  ``_delete_rows`` -> ``sqlite.delete_rows(db, lambda r: [...])`` (the callable re-walks the
  family under the write lock, as ``_walk`` did); ``_compact`` -> ``sqlite.compact``;
  ``family`` / ``_walk`` -> ``family.walk(cid, family.edges(pairs), valid=self.valid_id)``;
  ``_lock_holders`` -> ``holders.lock_owners``; ``_db_openers`` + ``_uid_of`` + ``_is_muxhost`` +
  the argv loop of ``in_use`` -> ``holders.holders(ctx, family, files=[db, wal, shm],
  locks=[db, wal, shm], names=self.process_names, exclude=<serve predicate>)``;
  ``_is_server`` + ``_server_clients`` -> that predicate:
  ``lambda p: is_server(p) and holders.server_clients(p.pid) is None``;
  ``_open_by_anyone`` -> ``holders.with_open(table, [path]).found`` (fail closed: also
  ``.unreadable``); ``_log_lines`` -> ``jsonl.count_lines(log, jsonl.contains(sid))``;
  ``_history_lines`` / ``_drop_history`` -> ``jsonl.count_lines`` / ``jsonl.drop_lines`` with a
  callable match; ``_delete_with_binary`` -> a ``Command`` artifact, or ``command.run``.
  Stays: ``session_from_argv``, the log's run ids (``_own_runs``, ``_creators``,
  ``_logged_sessions``, ``_offset_since``, ``_run_ending_at``), ``_user_text``,
  ``_history_input``, ``_walk_names``, ``_session_info``'s query (through ``sqlite.rows``).

codex
  ``find_binary`` -> ``ctx.find_binary("codex", self.install_hint)``;
  ``codex_home``'s / ``sqlite_home``'s ``_abs`` -> ``ctx.resolve``;
  ``_ro`` -> ``sqlite.connect_ro`` (``DatabaseError`` where it returned None with an error);
  ``_id_columns`` -> ``sqlite.columns``; ``_naming`` / ``_row_counts`` -> ``sqlite.counts``;
  ``_thread_rows`` -> ``sqlite.rows``; ``_sql_sweep`` -> ``sqlite.delete_rows`` (it sweeps until a
  pass deletes nothing, as the trigger loop did); ``_scrub`` -> ``sqlite.compact``;
  ``family``'s walk -> ``family.walk`` (``_families``, the memory across a purge, stays);
  ``_proc_locks`` / ``_lock_key`` / ``lock_state`` -> ``holders.lock_owners`` / ``holders.locked``;
  ``_open_paths`` -> ``holders.open_paths``; ``_holders_of`` -> ``holders.with_open``;
  ``_describe`` -> ``Proc.describe``; ``in_use`` -> ``holders.holders(ctx, family,
  locks=lock_files, files=lock_files, names=self.process_names)``;
  ``_jsonl_matcher`` + ``_count_lines`` -> ``jsonl.count_lines(path, (key, set(ids)))``, and
  ``drop_lines`` -> ``jsonl.drop_lines``; ``_flocked`` -> ``flock.flock(lock, 5, create=False)``;
  the ``codex delete`` block and ``_last_line`` -> a ``Command`` artifact, or ``command.run`` and
  ``Result.why`` / ``command.reason``.
  Stays: the config reading (``read_config``, ``_toml_fallback``), ``_help_text`` /
  ``in_process_switch`` / ``daemon_warning``, rollouts and ``session_meta``, ``_parent_of_source``,
  ``held_threads`` / ``_held_by`` (on ``holders.open_paths``), ``_parse_ts_ms``.

All three: the before/after diff of ``purge`` (``removed`` = plan minus residual) and the child
labels are the host's once ``artifacts`` returns typed artifacts.
"""
