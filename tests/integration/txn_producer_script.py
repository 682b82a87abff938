"""A transactional producer that opens a transaction and then waits to be killed (SIGKILL by the
test): init_transactions, begin_transaction, produce N records, flush, print "ready", block.

    python txn_producer_script.py BOOTSTRAP TOPIC TRANSACTIONAL_ID N [PARTITION]
"""

from __future__ import annotations

import sys

from confluent_kafka import Producer


def main() -> None:
    bootstrap, topic, txn_id, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    partition = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "socket.timeout.ms": 5000,
                  "request.timeout.ms": 5000, "message.timeout.ms": 10000, "linger.ms": 5, "log_level": 3})
    p.init_transactions(15)
    p.begin_transaction()
    for i in range(n):
        p.produce(topic, value=b"zombie-%d" % i, partition=partition)
    remaining = p.flush(15)
    if remaining:
        print(f"not delivered: {remaining}", flush=True)
        sys.exit(2)
    print("ready", flush=True)
    sys.stdin.read()  # block until killed (the test never closes our stdin)


if __name__ == "__main__":
    main()
