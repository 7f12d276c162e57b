#!/usr/bin/env bash
# A baseline install for the benchmarks that compare against one in the
# same run (bench/e2e/run.sh BASE_PG_CONFIG=..., bench/runners/finish.sh
# BASELINE_PG_CONFIG=...): the extension, sandbox-jail and whatever else
# git revision REV builds and installs (sandbox-egress, sandbox-runner when
# it has them), installed into a private relocated PostgreSQL copy
# (scripts/private-pg.sh NAME: /opt/pg-NAME).  Prints that copy's
# pg_config on its last line (stdout carries nothing else).
#
#   bench/baseline.sh REV [NAME]     (as root: it writes /opt/pg-NAME;
#                                     NAME defaults to base-<short REV>)
#   BASE_PG_CONFIG=$(bench/baseline.sh 3777718 base9) bench/e2e/run.sh
#
# The sources are a detached worktree of REV, /tmp/sandbox_baseline.NAME,
# reused when present.  A second call for the same REV and NAME builds
# nothing: /opt/pg-NAME/.sandbox_baseline records the commit installed
# there (REBUILD=1 builds and installs again).  Before installing, the
# copy's sandbox_ext files (which private-pg.sh copied from the system's
# install, i.e. from another revision) are removed, so that what the
# copy holds is REV's alone: its control file, its SQL scripts, its
# library and programs.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
die() {
	echo "baseline: $*" >&2
	exit 1
}

if [ $# -lt 1 ] || [ $# -gt 2 ]; then die "usage: bench/baseline.sh REV [NAME]"; fi
[ "$(id -u)" -eq 0 ] || die "needs root: it installs into /opt/pg-${2:-base-<rev>} (run it with sudo)"
rev=$1
sha=$(git -C "$top" rev-parse --verify --quiet "$rev^{commit}") ||
	die "no commit $rev in $top (a branch, tag or commit of this repository)"
short=$(git -C "$top" rev-parse --short "$sha")
name=${2:-base-$short}
[[ $name =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]] || die "NAME must be letters, digits, '.', '_' or '-' (got '$name')"

dest=/opt/pg-$name
stamp=$dest/.sandbox_baseline
wt=/tmp/sandbox_baseline.$name
pgc=$dest/lib/postgresql/15/bin/pg_config

if [ -z "${REBUILD:-}" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$sha" ] &&
	[ -x "$pgc" ] && [ -f "$("$pgc" --sharedir)/extension/sandbox_ext.control" ]; then
	echo "baseline: $short already installed in $dest (REBUILD=1 to build again)" >&2
	echo "$pgc"
	exit 0
fi

# The sources: a detached worktree of REV, made once, moved to REV when a
# NAME is reused for another revision (its build products cleaned then).
if [ -e "$wt" ]; then
	[ "$(git -C "$wt" rev-parse --path-format=absolute --git-common-dir 2>/dev/null)" = \
		"$(git -C "$top" rev-parse --path-format=absolute --git-common-dir)" ] ||
		die "$wt exists and is not a worktree of $top: remove it"
	if [ "$(git -C "$wt" rev-parse HEAD)" != "$sha" ]; then
		echo "baseline: moving $wt to $short" >&2
		git -C "$wt" checkout -q --detach "$sha"
		git -C "$wt" clean -q -f -d -x
	fi
else
	git -C "$top" worktree prune
	git -C "$top" worktree add -q --detach "$wt" "$sha"
fi

# The private PostgreSQL copy, then REV's files alone in it.
pgc=$("$top/scripts/private-pg.sh" "$name" | tail -n 1)
[ "$pgc" = "$dest/lib/postgresql/15/bin/pg_config" ] || die "scripts/private-pg.sh printed $pgc, not a pg_config under $dest"
rm -f "$stamp"
share=$("$pgc" --sharedir)
lib=$("$pgc" --pkglibdir)
bin=$("$pgc" --bindir)
rm -f "$share"/extension/sandbox_ext.control "$share"/extension/sandbox_ext--*.sql \
	"$lib/sandbox_ext.so" "$lib/bitcode/sandbox_ext.index.bc" \
	"$bin/sandbox-jail" "$bin/sandbox-egress" "$bin/sandbox-runner" "$bin/sandbox-jail-host-setup"
rm -rf "$lib/bitcode/sandbox_ext"

log=$wt/baseline-build.log
echo "baseline: building $short in $wt for $dest (log: $log)" >&2
if ! { make -C "$wt" PG_CONFIG="$pgc" all && make -C "$wt" PG_CONFIG="$pgc" install; } >"$log" 2>&1; then
	tail -n 20 "$log" >&2
	die "building or installing $short failed (above; the whole log: $log)"
fi
if ! [ -f "$share/extension/sandbox_ext.control" ] || ! [ -f "$lib/sandbox_ext.so" ] || ! [ -x "$bin/sandbox-jail" ]; then
	die "$short's make install left no control file, library or sandbox-jail in $dest"
fi
echo "$sha" >"$stamp"
version=$(sed -n "s/^default_version *= *'\(.*\)'.*/\1/p" "$share/extension/sandbox_ext.control")
echo "baseline: $short installed in $dest: sandbox_ext $version, $(cd "$bin" && echo sandbox-*)" >&2
echo "$pgc"
