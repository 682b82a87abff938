"""Spark's Python worker daemon for the project's local sessions (`spark.python.daemon.module`):
pyspark's own daemon, with hypothesis kept out of the workers it forks.

kio's types register hypothesis strategies whenever hypothesis is importable (a venv with test
tools in it), which costs each Python worker about 0.3 s of its first import of this package; the
workers never use them. As the command line does for its own process (`cli.main.run`), the module
is marked absent before pyspark's daemon starts, and the forked workers inherit that."""

import sys

if __name__ == "__main__":
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]  # None: "import hypothesis" fails
    from pyspark.daemon import manager

    manager()
