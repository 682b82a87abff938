"""`python -m sharebroker ...` runs the command-line tool."""

from sharebroker.cli.main import run

run()
