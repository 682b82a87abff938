"""`make bench` / `python -m bench [--quick]`: every workload against a fresh broker, with the
librdkafka mock cluster and the raw disk as peers. Not part of the test run. See bench/run.py."""

from bench.run import main

if __name__ == "__main__":
    main()
