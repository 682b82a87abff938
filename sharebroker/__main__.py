"""`python -m sharebroker ...` runs the command-line tool."""

from sharebroker.broker.cli import main

raise SystemExit(main())
