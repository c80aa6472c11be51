from muxhost.cli import main

raise SystemExit(main())
