"""Serving from several worker processes (`worker.processes` > 1, experimental).

Each worker is a broker of its own: node id `node.id + i`, its own port, the leader of a fixed
share of the partitions and the coordinator of the groups and share-state keys whose internal-topic
partition it owns. Metadata lists every worker, so clients route to the owner as in a cluster of
brokers. The supervisor (`supervisor.py`) binds the listeners, starts and stops the workers;
`gate.py` forwards the few requests only worker 0 may carry out (topic and config changes) and
refuses what multi-worker mode does not support; `persister.py` sends share state to the worker
that owns its `__share_group_state` partition. With one process (the default) none of this runs.
See README "More than one core"."""

from __future__ import annotations

import json
import os
import zlib
from dataclasses import dataclass

from sharebroker.broker.topics import INTERNAL_TOPICS

ENV = "SHAREBROKER_WORKER"  # set by the supervisor for each worker it starts


def owner_index(topic: str, partition: int, count: int) -> int:
    """The worker that leads a partition. Internal topics by partition index alone (the group and
    share-state coordinators follow their partition); other topics start at a hash of the name,
    so single-partition topics spread over the workers too."""
    if topic in INTERNAL_TOPICS:
        return partition % count
    return (zlib.crc32(topic.encode()) + partition) % count


@dataclass(frozen=True)
class WorkerIdentity:
    index: int
    count: int
    node_ids: tuple[int, ...]
    host: str  # advertised host of the first listener
    ports: tuple[int, ...]  # advertised port of each worker
    listen_fds: tuple[int, ...]  # the bound listening sockets the supervisor handed down
    clean: bool  # the supervisor found the clean-shutdown marker
    after: str = ""  # a file that appears once worker 0 serves (the others start their imports meanwhile)

    @property
    def node_id(self) -> int:
        return self.node_ids[self.index]

    def owns(self, topic: str, partition: int) -> bool:
        return owner_index(topic, partition, self.count) == self.index

    def owner_node(self, topic: str, partition: int) -> int:
        return self.node_ids[owner_index(topic, partition, self.count)]

    def endpoint(self, index: int) -> tuple[str, int]:
        return self.host, self.ports[index]

    def to_env(self) -> str:
        return json.dumps({"index": self.index, "count": self.count, "node_ids": list(self.node_ids),
                           "host": self.host, "ports": list(self.ports), "listen_fds": list(self.listen_fds),
                           "clean": self.clean, "after": self.after})

    @classmethod
    def from_env(cls) -> WorkerIdentity | None:
        raw = os.environ.get(ENV)
        if not raw:
            return None
        d = json.loads(raw)
        return cls(int(d["index"]), int(d["count"]), tuple(int(n) for n in d["node_ids"]), str(d["host"]),
                   tuple(int(p) for p in d["ports"]), tuple(int(f) for f in d["listen_fds"]), bool(d["clean"]),
                   str(d.get("after", "")))
