#!/usr/bin/env bash
# Generates the secrets docker-compose.yml reads, with fresh random
# passwords, into secrets/ at the repository root (or $HF_COMPOSE_DIR/secrets),
# and records the invoking user's uid and gid in .env (HF_UID, HF_GID: the
# harnessflow services run as that user so that they can read the 0600
# password files that compose bind-mounts under /run/secrets; as root, set
# HF_UID and HF_GID to a non-root user and the files are given to it). Existing
# passwords are kept: run it again after deleting a file to rotate that one.
# Nothing it writes is committed (secrets/.gitignore ignores everything).
#
#   infra/scripts/compose-secrets.sh && docker compose up -d --build
#
# Files (docs/security.md):
#   clickhouse_password    the ClickHouse `default` user's password (0600)
#   kafka_password         SASL/PLAIN password of the services' Kafka user
#                          `harnessflow` (0600)
#   kafka_broker_password  SASL/PLAIN password of the brokers' own user
#                          `broker` (0600)
#   kafka_jaas.conf        the brokers' JAAS file: their login and the users
#                          they accept (0644: read by the kafka image's user)
#   kafka_client.properties  client settings as `broker`, for the brokers'
#                          health check and Kafka's CLI tools (0644)
#   ingest-tokens          ingest's bearer tokens, `TOKEN PROJECT` lines (0600)
#   clickhouse_cluster_secret.xml  the cluster shape's (docker-compose.cluster.yml)
#                          inter-server secret of cluster `hf`, substituted into
#                          infra/compose/clickhouse-cluster/cluster.xml by
#                          include_from (0644: read by the clickhouse image's
#                          user; protected by the directory)
set -euo pipefail

root=${HF_COMPOSE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
dir=$root/secrets
umask 077
mkdir -p "$dir"
# The 0644 broker files are protected by the directory.
chmod 700 "$dir"
printf '# generated secrets: never commit\n*\n' >"$dir/.gitignore"

gen() { od -An -N24 -tx1 /dev/urandom | tr -d ' \n'; }

# password NAME: a new random password unless NAME exists; mode 0600.
password() {
  local f=$dir/$1
  if [ ! -s "$f" ]; then
    gen >"$f"
    echo >>"$f"
    echo "wrote $f" >&2
  fi
  chmod 600 "$f"
}

password clickhouse_password
password kafka_password
password kafka_broker_password
if [ ! -s "$dir/ingest-tokens" ]; then
  printf '%s default\n' "$(gen)" >"$dir/ingest-tokens"
  echo "wrote $dir/ingest-tokens (a token for project default)" >&2
fi
chmod 600 "$dir/ingest-tokens"

kafka_pw=$(head -n1 "$dir/kafka_password")
broker_pw=$(head -n1 "$dir/kafka_broker_password")
cat >"$dir/kafka_jaas.conf" <<JAAS
KafkaServer {
  org.apache.kafka.common.security.plain.PlainLoginModule required
  username="broker"
  password="$broker_pw"
  user_broker="$broker_pw"
  user_harnessflow="$kafka_pw";
};
JAAS
cat >"$dir/kafka_client.properties" <<PROPS
security.protocol=SASL_PLAINTEXT
sasl.mechanism=PLAIN
sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" password="$broker_pw";
PROPS
chmod 644 "$dir/kafka_jaas.conf" "$dir/kafka_client.properties"

# The servers of the cluster shape authenticate each other's queries with
# one shared secret (remote_servers' <secret>): kept across runs, like the
# passwords, since every node must have the same one.
password clickhouse_cluster_secret
cat >"$dir/clickhouse_cluster_secret.xml" <<XML
<clickhouse>
    <hf_cluster_secret>$(head -n1 "$dir/clickhouse_cluster_secret")</hf_cluster_secret>
</clickhouse>
XML
chmod 644 "$dir/clickhouse_cluster_secret.xml"

# The services' user: HF_UID/HF_GID from the environment, else from .env,
# else the invoking user. Run as root with a non-root user there, the files
# the services read are given to that user.
envval() { if [ -f "$root/.env" ]; then sed -n "s/^$1=//p" "$root/.env" | tail -n1; fi; }
uid=${HF_UID:-$(envval HF_UID)}
gid=${HF_GID:-$(envval HF_GID)}
uid=${uid:-$(id -u)}
gid=${gid:-$(id -g)}
if [ "$(id -u)" = 0 ] && [ "$uid:$gid" != 0:0 ]; then
  chown "$uid:$gid" "$dir"/clickhouse_password "$dir"/kafka_password "$dir"/kafka_broker_password \
    "$dir"/ingest-tokens "$dir"/clickhouse_cluster_secret
fi
if ! grep -qs '^HF_UID=' "$root/.env"; then
  printf 'HF_UID=%s\nHF_GID=%s\n' "$uid" "$gid" >>"$root/.env"
  echo "wrote HF_UID and HF_GID to $root/.env" >&2
fi
echo "compose secrets are in $dir" >&2
