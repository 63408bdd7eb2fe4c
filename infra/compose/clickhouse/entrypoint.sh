#!/bin/bash
# The stand-in's entrypoint (Dockerfile), in the place of the official
# clickhouse/clickhouse-server image's: it starts Debian's 18.16 server with
#   - the default user (or CLICKHOUSE_USER) with the password of
#     CLICKHOUSE_PASSWORD_FILE (its first line) or CLICKHOUSE_PASSWORD,
#     allowed from any address, as the official image sets it up;
#   - every XML file the service mounts under /etc/clickhouse-server/config.d
#     and users.d, rewritten for 18.16: the root element <clickhouse> becomes
#     <yandex>, and a cluster's <secret> (the inter-server secret of
#     remote_servers, which 18.16 predates and rejects as an unknown element)
#     gives way to what 18.16 has instead: each <replica> of that file
#     connects as the user above with its password. The current server that
#     the compose files name reads the files as they are; only the secret's
#     use goes untested here.
# It prepares the data folder as root, then runs the server as `clickhouse`.
set -euo pipefail

conf=/etc/clickhouse-standin
rm -rf "$conf"
mkdir -p "$conf/config.d" "$conf/users.d"
cp /usr/share/clickhouse-standin/config.xml "$conf/config.xml"

user=${CLICKHOUSE_USER:-default}
password=${CLICKHOUSE_PASSWORD:-}
if [ -n "${CLICKHOUSE_PASSWORD_FILE:-}" ]; then
  password=$(head -n1 "$CLICKHOUSE_PASSWORD_FILE")
fi
xml() { printf '%s' "$1" | sed -e 's/&/\&amp;/g; s/</\&lt;/g; s/>/\&gt;/g'; }
# sed's replacement text: & and the delimiter escaped.
credentials=$(printf '<user>%s</user><password>%s</password></replica>' "$(xml "$user")" "$(xml "$password")" | sed -e 's/[&#\\]/\\&/g')

for d in config.d users.d; do
  for f in /etc/clickhouse-server/"$d"/*.xml; do
    [ -e "$f" ] || continue
    out=$conf/$d/$(basename "$f")
    sed -e 's#<clickhouse>#<yandex>#g; s#</clickhouse>#</yandex>#g' "$f" >"$out"
    if grep -q '<secret[ >/]' "$out"; then
      sed -i -e '/<secret[ >\/]/d' -e "s#</replica>#$credentials#g" "$out"
    fi
  done
done
if [ -n "$password" ]; then
  auth="<password_sha256_hex>$(printf '%s' "$password" | sha256sum | cut -d' ' -f1)</password_sha256_hex>"
else
  auth="<password></password>"
fi
cat >"$conf/users.xml" <<XML
<?xml version="1.0"?>
<yandex>
    <profiles><default><max_memory_usage>4294967296</max_memory_usage></default></profiles>
    <users>
        <$user>
            $auth
            <networks><ip>::/0</ip></networks>
            <profile>default</profile>
            <quota>default</quota>
        </$user>
    </users>
    <quotas><default><interval><duration>3600</duration><queries>0</queries><errors>0</errors><result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time></interval></default></quotas>
</yandex>
XML
# The files hold the password: the server's user alone reads them (and
# writes its preprocessed copies beside them).
chown -R clickhouse:clickhouse "$conf" /var/lib/clickhouse
chmod -R go-rwx "$conf"

exec setpriv --reuid=clickhouse --regid=clickhouse --init-groups \
  clickhouse-server --config-file="$conf/config.xml"
