#!/usr/bin/env bash
# `make compose-test`: build the images, start the compose project's broker, wait until it is
# healthy, run the integration tests (the `tests` service) against it, check a client on the host
# and one on the compose network, run the example application, stop the broker with SIGTERM, and
# tear everything down, volumes included. Needs a Docker engine and docker-compose (or compose v2).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
export COMPOSE_PROJECT_NAME="${COMPOSE_PROJECT_NAME:-sharebroker-compose-test}"
if docker compose version >/dev/null 2>&1; then compose=(docker compose); else compose=(docker-compose); fi
host_port="${SHAREBROKER_HOST_PORT:-9092}"
secure_port="${SHAREBROKER_SECURE_PORT:-9094}"
certs_dir=$(mktemp -d)
summary=()
seconds_since() { local ms=$(( ($(date +%s%N) - $1) / 1000000 )); printf '%d.%d' $((ms / 1000)) $((ms % 1000 / 100)); }
say() { printf '%s\n' "compose-test: $*"; }
note() { say "$*"; summary+=("$*"); }
down() { "${compose[@]}" --profile tests down --volumes --remove-orphans >/dev/null 2>&1 || true; }
trap 'down; rm -rf "$certs_dir"' EXIT

started=$(date +%s%N)
down
say "building images"
"${compose[@]}" --profile tests build --quiet
size=$(docker image inspect sharebroker:dev --format '{{.Size}}')
note "image sharebroker:dev: $((size / 1000000)) MB"

t0=$(date +%s%N)
"${compose[@]}" up -d broker
container=$("${compose[@]}" ps -q broker)
status=starting
for _ in $(seq 1 600); do
    status=$(docker inspect --format '{{.State.Health.Status}}' "$container")
    [ "$status" = healthy ] || [ "$status" = unhealthy ] && break
    sleep 0.1
done
[ "$status" = healthy ] || { docker logs "$container" | tail -20; say "broker is $status"; exit 1; }
note "broker healthy $(seconds_since "$t0") s after 'up' (healthcheck: sharebroker healthcheck)"

say "running the integration tests in the tests service against broker:29092"
log=$(mktemp)
set +e
"${compose[@]}" run --rm tests 2>&1 | tee "$log"
tests_status=${PIPESTATUS[0]}
set -e
note "tests service: $(grep -E '[0-9]+ (passed|failed)' "$log" | tail -1)"
rm -f "$log"
[ "$tests_status" -eq 0 ] || { say "the tests service failed"; exit 1; }

note "$("$PYTHON" docker/smoke.py "localhost:$host_port" host)"
note "$("${compose[@]}" run --rm --no-deps tests python docker/smoke.py broker:29092 network)"
# The SASL_SSL listener from the host, trusting the CA the certs service made (PLAIN user alice;
# then a SCRAM user added with `sharebroker configs`, as kafka-configs.sh adds one).
docker cp "$container:/etc/sharebroker/certs/ca.pem" "$certs_dir/ca.pem"
note "$("$PYTHON" docker/smoke.py "localhost:$secure_port" host-sasl-ssl --ca "$certs_dir/ca.pem" \
      --user alice --password alice-secret)"
"$PYTHON" -m sharebroker configs --bootstrap-server "localhost:$host_port" --alter --entity-type users \
    --entity-name carol --add-config 'SCRAM-SHA-256=[password=carol-secret]'
note "$("$PYTHON" docker/smoke.py "localhost:$secure_port" host-scram --ca "$certs_dir/ca.pem" \
      --user carol --password carol-secret --mechanism SCRAM-SHA-256)"

"${compose[@]}" run --rm group-config
"${compose[@]}" run --rm producer >/dev/null
worked=$("${compose[@]}" run --rm worker work --bootstrap broker:29092 --topic jobs --group workers --expect 100 --timeout 60 | tail -1)
note "example app: $worked"

t0=$(date +%s%N)
"${compose[@]}" stop broker >/dev/null 2>&1
code=$(docker inspect --format '{{.State.ExitCode}}' "$container")
note "broker stopped by SIGTERM in $(seconds_since "$t0") s, exit code $code"
[ "$code" -eq 0 ] || exit 1

say "summary ($(seconds_since "$started") s in all):"
printf '  %s\n' "${summary[@]}"
