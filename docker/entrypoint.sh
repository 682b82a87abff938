#!/bin/sh
# The image's start command: `sharebroker serve` with the apache/kafka image's defaults where the
# container sets nothing of its own (one PLAINTEXT listener on :9092 advertised as localhost:9092).
# Everything else comes from KAFKA_* variables, read by `serve` itself.
set -e
if [ -z "${KAFKA_LISTENERS:-}" ]; then
    export KAFKA_LISTENERS="PLAINTEXT://:9092"
    export KAFKA_ADVERTISED_LISTENERS="${KAFKA_ADVERTISED_LISTENERS:-PLAINTEXT://localhost:9092}"
fi
export KAFKA_LOG_DIRS="${KAFKA_LOG_DIRS:-/var/lib/sharebroker}"
exec sharebroker serve "$@"
