#!/usr/bin/env bash
# Follow one invocation as a client should (docs/execution.md, "Streaming"):
#
#   scripts/follow.sh LISTEN_BIN ORG WORKSPACE INVOCATION [TIMEOUT_S]
#
# LISTEN on the invocation's channel (learned from agent.output_channel()
# under the tenant) and treat every notification as a hint only: whoever
# learns a channel's name can NOTIFY on it, and the payload says nothing
# but "output" or "done".  On each hint, and every few seconds without one,
# read the state (agent.wait(id, '0 s')) and the new output
# (agent.read_output(id, after_seq)) under the tenant; stop when the state
# is final.  Prints "stdout<TAB>line" / "stderr<TAB>line" for the output,
# then "state<TAB>final state".  On stderr: "ready" once listening (start
# the run after it), "hint <payload>" per notification and "look <state>"
# per look at the state.
#
# LISTEN_BIN is test/tools/listen.c built; the cluster is the one of
# SANDBOX_CLUSTER_DIR / SANDBOX_PGPORT / SANDBOX_DB (scripts/cluster.sh).
# Used by scripts/demo.sh and test/suites/supervisor.sh.
set -euo pipefail

listen_bin=${1:?usage: follow.sh LISTEN_BIN ORG WORKSPACE INVOCATION [TIMEOUT_S]}
org=${2:?} ws=${3:?} inv=${4:?} timeout=${5:-120}
PGBIN=${PGBIN:-$(dirname "${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}")}
host=${SANDBOX_CLUSTER_DIR:?} port=${SANDBOX_PGPORT:?} db=${SANDBOX_DB:?}

as_pg() {
	if [ "$(id -un)" = postgres ]; then "$@"
	elif [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"
	else sudo -u postgres -- "$@"; fi
}
# One statement in the tenant's transaction, as a backend would run it.
tenant_sql() {
	as_pg "$PGBIN/psql" -X -q -At -F $'\t' -v ON_ERROR_STOP=1 -h "$host" -p "$port" -U postgres -d "$db" \
		-c "BEGIN" -c "SET LOCAL sandbox.org_id = '$org'" -c "SET LOCAL sandbox.workspace_id = '$ws'" \
		-c "$1" -c "COMMIT"
}

channel=$(tenant_sql "SELECT agent.output_channel('$inv')")
tmp=$(mktemp -d /tmp/sandbox_follow.XXXXXX)
listener=
cleanup() {
	if [ -n "$listener" ]; then kill "$listener" 2>/dev/null || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT
mkfifo "$tmp/notes"
as_pg "$listen_bin" "host=$host port=$port user=postgres dbname=$db" "$channel" "$timeout" \
	>"$tmp/notes" 2>"$tmp/listen.err" &
listener=$!
exec 3<"$tmp/notes"
for _ in $(seq 1 100); do
	grep -q '^ready$' "$tmp/listen.err" 2>/dev/null && break
	kill -0 "$listener" 2>/dev/null || { cat "$tmp/listen.err" >&2; exit 1; }
	sleep 0.1
done
echo ready >&2

last=0
deadline=$((SECONDS + timeout))
while :; do
	# The state first: once it is final, every output row is committed, so
	# the read below gets the rest.
	state=$(tenant_sql "SELECT s, agent._state_is_terminal(s) FROM agent.wait('$inv', '0 s') s")
	echo "look ${state%%$'\t'*}" >&2
	while IFS=$'\t' read -r seq stream line; do
		[ -n "$seq" ] || continue
		printf '%s\t%s\n' "$stream" "$line"
		last=$seq
	done < <(tenant_sql "SELECT o.seq, o.stream, l.line
		  FROM agent.read_output('$inv', $last) o,
			   regexp_split_to_table(rtrim(o.data, E'\\n'), E'\\n') WITH ORDINALITY AS l (line, n)
		 ORDER BY o.seq, l.n")
	if [ "${state#*$'\t'}" = t ]; then
		printf 'state\t%s\n' "${state%%$'\t'*}"
		exit 0
	fi
	[ "$SECONDS" -lt "$deadline" ] || { echo "follow: $inv not finished after $timeout s" >&2; exit 1; }
	# A hint (or a quiet spell): look again.
	if read -r -t 5 -u 3 _ payload; then
		echo "hint $payload" >&2
	elif [ $? -le 128 ]; then
		sleep 1		# the listener is gone (its timeout): poll
	fi
done
