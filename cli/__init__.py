"""The `sharebroker` command line (cli.main): `serve` runs the broker; the tools talk to any
Kafka-compatible broker over the wire: `topics`, `share-groups`, `consumer-groups`, `produce`,
`consume` and `share-consume` (modelled on kafka-topics.sh / kafka-configs.sh,
kafka-share-groups.sh, kafka-consumer-groups.sh and the console producer and consumers). They
depend only on kio and the sans-I/O client codec (protocol/client.py), never on a client library.
`verify` works offline on a data directory (kafka-dump-log.sh --verify); `pipeline` runs Spark
jobs (pipeline/cli.py)."""
