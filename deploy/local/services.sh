#!/usr/bin/env bash
# Local Kafka broker + ClickHouse HTTP server for development and tests, no Docker.
#
#   deploy/local/services.sh start  [DIR] [--keep-data]   # Kafka, then ClickHouse
#   deploy/local/services.sh stop   [DIR]                 # both; fine if already down
#   deploy/local/services.sh status [DIR]                 # exit 0 if both run
#
# DIR defaults to .services. `start` writes DIR/env; use it with:  . DIR/env
#   export KAFKA_BOOTSTRAP=127.0.0.1:PORT
#   export CLICKHOUSE_URL=http://127.0.0.1:PORT
# --keep-data keeps the data from the previous run and, when they are known, its ports.
# Runs kafka.py and clickhouse.py with ${PYTHON:-python3}; that interpreter needs the
# `chdb` package (for ClickHouse). Kafka needs Java 17+ and, the first time, Maven.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="${PYTHON:-python3}"
cmd="${1:-}"
dir=".services"
keep=()
for arg in "${@:2}"; do
  case "$arg" in
    --keep-data) keep=(--keep-data) ;;
    -h|--help) cmd=help ;;
    *) dir="$arg" ;;
  esac
done

case "$cmd" in
  start)
    mkdir -p "$dir"
    kport=0 cport=0
    if [[ ${#keep[@]} -gt 0 ]]; then
      [[ -s "$dir/kafka.bootstrap" ]] && kport="$(sed 's/.*://' "$dir/kafka.bootstrap")"
      [[ -s "$dir/clickhouse.url" ]] && cport="$(sed 's/.*://' "$dir/clickhouse.url")"
    fi
    rm -f "$dir/env"
    kafka_line="$("$py" "$here/kafka.py" start --dir "$dir" --port "$kport" "${keep[@]}")"
    if ! ch_line="$("$py" "$here/clickhouse.py" start --dir "$dir" --port "$cport" "${keep[@]}")"; then
      "$py" "$here/kafka.py" stop --dir "$dir" || true
      exit 1
    fi
    printf 'export %s\nexport %s\n' "$kafka_line" "$ch_line" > "$dir/env"
    cat "$dir/env"
    ;;
  stop)
    rc=0
    "$py" "$here/clickhouse.py" stop --dir "$dir" || rc=1
    "$py" "$here/kafka.py" stop --dir "$dir" || rc=1
    rm -f "$dir/env"
    exit $rc
    ;;
  status)
    rc=0
    "$py" "$here/kafka.py" status --dir "$dir" || rc=1
    "$py" "$here/clickhouse.py" status --dir "$dir" || rc=1
    exit $rc
    ;;
  *)
    sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    [[ "$cmd" == help || "$cmd" == -h || "$cmd" == --help ]] || exit 2
    ;;
esac
