"""`python -m muxhost`: the CLI, as the `muxhost` command runs it."""

from muxhost.cli import main

raise SystemExit(main())
