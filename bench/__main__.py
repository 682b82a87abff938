"""`make bench`: every benchmark, printing its figures. Not part of the test run."""

from bench import startup

startup.main()
