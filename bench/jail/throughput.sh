#!/usr/bin/env bash
# bench/jail/throughput.sh [SECONDS] [BINARY] [BASE_BINARY]
#
# Served runs per second of shell `true` with 8 resident callers
# (bench/jail/served-client.c, one process per run) at once against one
# launcher (--pool 8, with the warm pool of bench/jail/warm.sh waiting:
# --warm-python 2 --warm-node 1), for SECONDS (default 10).  With
# BASE_BINARY, two rounds alternate between the two binaries (base, this,
# base, this), each with a launcher of its own: on this shared machine
# only figures of one run, side by side, mean anything.  Asserts nothing.
set -u

S=${1:-10}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${2:-$ROOT/src/jail/sandbox-jail}
BASE=${3:-}
for b in "$BIN" ${BASE:+"$BASE"}; do
	[ -x "$b" ] || { echo "bench/jail/throughput.sh: no jail binary at $b" >&2; exit 1; }
done
WORK=$(mktemp -d /tmp/jailtp.XXXXXX)
LAUNCHER=
trap '[ -n "$LAUNCHER" ] && kill "$LAUNCHER" 2>/dev/null; rm -rf "$WORK"' EXIT
chmod 755 "$WORK"
mkdir "$WORK/ws"
[ "$(id -u)" = 0 ] && chown 65534:65534 "$WORK/ws"
printf 'true\n' >"$WORK/true.sh"
gcc -O2 -o "$WORK/served-client" "$ROOT/bench/jail/served-client.c" || exit 1

# round BINARY: "N" runs in S seconds
round() {
	local sock=$WORK/s.$RANDOM pids=() t=0 end
	"$1" --serve "$sock" --pool 8 --warm-python 2 --warm-node 1 --quiet &
	LAUNCHER=$!
	for _ in $(seq 1200); do [ -f "$sock.warm" ] && break; sleep 0.05; done
	# every warm place waiting: their starts are not in the count
	echo | SERVED_SETTLE_POOL=1 SERVED_SETTLE_ONLY=1 "$WORK/served-client" "$sock" /bin/true - "$WORK/ws" >/dev/null
	end=$(($(date +%s) + S))
	for c in $(seq 8); do
		(
			n=0
			while [ "$(date +%s)" -lt $end ]; do
				echo | "$WORK/served-client" "$sock" shell "$WORK/true.sh" "$WORK/ws" >/dev/null
				n=$((n + 1))
			done
			echo $n >"$WORK/c$c"
		) &
		pids+=($!)
	done
	wait "${pids[@]}"
	for c in $(seq 8); do t=$((t + $(cat "$WORK/c$c"))); done
	kill "$LAUNCHER"
	wait "$LAUNCHER" 2>/dev/null
	LAUNCHER=
	echo "$t"
}

echo "# served shell true, 8 callers, ${S} s a round: user $(id -un), kernel $(uname -r), $(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -n "$BASE" ]; then
	for k in 1 2; do
		b=$(round "$BASE")
		t=$(round "$BIN")
		awk -v b="$b" -v t="$t" -v s="$S" -v k="$k" 'BEGIN { printf "round %d: base %.1f/s, this %.1f/s, this / base %.2fx\n", k, b / s, t / s, t / b }'
	done
else
	t=$(round "$BIN")
	awk -v t="$t" -v s="$S" 'BEGIN { printf "%.1f/s\n", t / s }'
fi
