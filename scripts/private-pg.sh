#!/usr/bin/env bash
# Makes a private, relocated copy of the installed PostgreSQL 15 tree
# (binaries, libraries, extensions, headers) under /opt/pg-NAME and prints
# its pg_config path.  Developers working in parallel each install into their
# own copy (PG_CONFIG=... make install) and run their own throwaway cluster
# (SANDBOX_CLUSTER_DIR, SANDBOX_PGPORT) without clobbering each other.
# PostgreSQL finds its share and lib directories relative to its binaries,
# so the copy works as long as the layout below /opt/pg-NAME is kept.
set -euo pipefail
name=${1:?usage: private-pg.sh NAME}
dest=/opt/pg-$name
if [ ! -x "$dest/lib/postgresql/15/bin/pg_config" ]; then
	mkdir -p "$dest/lib/postgresql" "$dest/share/postgresql" "$dest/include/postgresql"
	cp -a /usr/lib/postgresql/15 "$dest/lib/postgresql/"
	cp -a /usr/share/postgresql/15 "$dest/share/postgresql/"
	cp -a /usr/include/postgresql/15 "$dest/include/postgresql/"
fi
echo "$dest/lib/postgresql/15/bin/pg_config"
