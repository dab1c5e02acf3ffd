#!/bin/sh
# The database of the PostgreSQL example (compose-postgres.yaml): a fresh
# cluster with trust on the compose network, run as the postgres user.
# Works on the public postgres image and on the local stand-in (Debian's
# postgresql package), which keep their binaries in the same place.
set -eu
bin=$(ls -d /usr/lib/postgresql/*/bin | tail -n1)
data=/var/lib/postgresql/demo
mkdir -p "$data"
chown postgres "$data"
su postgres -s /bin/sh -c "$bin/initdb -D $data -U postgres -A trust --no-sync >/dev/null"
echo "listen_addresses = '*'" >> "$data/postgresql.conf"
echo "host all all 0.0.0.0/0 trust" >> "$data/pg_hba.conf"
exec su postgres -s /bin/sh -c "exec $bin/postgres -D $data"
