"""``python -m graphpass``: the command line."""

from graphpass.cli import main

raise SystemExit(main())
