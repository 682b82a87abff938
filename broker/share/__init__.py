"""Share-partition leader (share-groups-spec §5-§7). Import from the defining modules:

- ``partition``: ``SharePartition``, the pure in-flight state machine, and its value types;
- ``inflight``: the range map it keeps its pieces in, and ``RecordState``;
- ``leader``: the owner of one share partition's state, its persister calls and lock timer;
- ``partitions``: every leader on the broker, the share-session cache and delayed-fetch wake-ups;
- ``sessions``: share sessions.
"""
