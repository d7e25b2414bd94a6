#!/usr/bin/env bash
# A throwaway PostgreSQL server on loopback in a directory of its own, for tests and benchmarks.
#   .ci/postgres.sh start DIR   -> prints the SQLAlchemy URL of a server whose data lives in DIR
#   .ci/postgres.sh stop DIR
# Uses Debian's `postgresql` package (`apt-get install -y postgresql`); as root, the server runs
# as the `postgres` user, because PostgreSQL refuses to run as root.
set -euo pipefail
action=${1:?usage: postgres.sh start|stop DIR}
dir=${2:?usage: postgres.sh start|stop DIR}
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
if [[ -z "$bin" ]]; then
    echo "postgres.sh: no PostgreSQL under /usr/lib/postgresql: apt-get install -y postgresql" >&2
    exit 1
fi
as_owner() {
    if [[ $(id -u) == 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}
case "$action" in
start)
    mkdir -p "$dir"
    [[ $(id -u) == 0 ]] && chown postgres: "$dir"
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    as_owner "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 >"$dir/initdb.log" 2>&1
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=off -c max_connections=200" \
        start >/dev/null
    echo "postgresql+psycopg://postgres@127.0.0.1:$port/postgres"
    ;;
stop)
    as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
    ;;
*)
    echo "usage: postgres.sh start|stop DIR" >&2
    exit 2
    ;;
esac
