#!/usr/bin/env bash
# bench/jail/warm.sh [N] [BINARY]
#
# Warm interpreters at the jail level (docs/jail.md, "Warm interpreters"):
# request -> verdict through a resident launcher's socket, timed by a
# resident caller (bench/jail/served-client.c) on its own clock, with no
# database in the way.  What a warm run costs beyond the shared floor
# (a served shell `true`) is the interpreter's part of approve -> finished.
#
# One launcher (--pool 2 --warm-python 2 --warm-node 1, default modules)
# serves every row; samples are taken round-robin over the rows, each
# after the launcher is idle again (every warm place waiting, then 40 ms
# for the cold pool's refill: SERVED_SETTLE_POOL), so that no run pays
# for the refill after the one before it.  Rows:
#   sh-true       shell `true`, cold (shell is never warm): the floor
#   py-pass       python `pass`, warm
#   py-pass-cold  python `pass` on a cold served sandbox
#   numpy         `import numpy`, warm
#   pandas        the issue's pandas script, warm
#   node          node `0`, warm
#   node-cold     node `0` on a cold served sandbox
# Prints p50, p90 and p99 (ms) per row and p50 minus sh-true's p50 and
# p50 / sh-true's p50: ratios within this one run; asserts nothing.
#
# WARM_BENCH_ROWS="sh-true pandas" runs only the rows named;
# WARM_BENCH_LAUNCHER_ARGS adds launcher options (e.g. --warm-modules);
# WARM_BENCH_BASE=/path/to/another/sandbox-jail runs a second launcher of
# that binary beside the first, its samples interleaved with the first's
# (each row alternates between the two), and adds its p50 and the ratio
# base / this: a before/after in one run.  WARM_BENCH_BASE_ARGS adds
# options to that second launcher only: with WARM_BENCH_BASE set to the
# same binary and WARM_BENCH_BASE_ARGS="--image /var/lib/sandbox-images/
# data@..." (given to that launcher and to each request sent to it) the
# base column is the same runs on the image's root and base/this is
# image/host (docs/images.md, "Performance").  WARM_BENCH_CPU=1 adds the
# runs' CPU time (the verdict's cpu_ms, p50) beside the wall time: what a
# loaded machine's scheduling adds to the wall time it does not add there.
set -u

N=${1:-30}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${2:-$ROOT/src/jail/sandbox-jail}
ROWS=${WARM_BENCH_ROWS:-"sh-true py-pass py-pass-cold numpy pandas node node-cold"}
BASE=${WARM_BENCH_BASE:-}

for b in "$BIN" ${BASE:+"$BASE"}; do
	if [ ! -x "$b" ]; then
		echo "bench/jail/warm.sh: no jail binary at $b (build it first: make -C src/jail)" >&2
		exit 1
	fi
done
case $N in
'' | *[!0-9]* | 0)
	echo "bench/jail/warm.sh: N must be a positive number of runs, got \"$N\"" >&2
	exit 1
	;;
esac
for b in /usr/bin/python3 /usr/bin/node; do
	[ -x "$b" ] || { echo "bench/jail/warm.sh: $b is not installed (scripts/deps.sh installs it)" >&2; exit 1; }
done

WORK=$(mktemp -d /tmp/warmbench.XXXXXX)
LAUNCHER=
# shellcheck disable=SC2086
trap '[ -n "$LAUNCHER" ] && kill $LAUNCHER && wait $LAUNCHER; rm -rf "$WORK"' EXIT
mkdir "$WORK/ws"
[ "$(id -u)" = 0 ] && chown 65534:65534 "$WORK/ws"
chmod 755 "$WORK"
gcc -O2 -o "$WORK/served-client" "$ROOT/bench/jail/served-client.c" || exit 1

printf 'true\n' >"$WORK/true.sh"
printf 'pass\n' >"$WORK/pass.py"
printf '0\n' >"$WORK/zero.js"
printf 'import numpy\n' >"$WORK/numpy.py"
cat >"$WORK/pandas.py" <<'EOF'
import pandas as pd
df = pd.DataFrame({"k": ["a", "b", "a", "b"], "v": [1, 2, 3, 4]})
print(df.groupby("k").sum())
EOF

# launch BINARY SOCKET [EXTRA]: a launcher, its pid in LAUNCHED
launch() {
	# shellcheck disable=SC2086
	"$1" --serve "$2" --pool 2 --warm-python 2 --warm-node 1 --quiet ${WARM_BENCH_LAUNCHER_ARGS:-} ${3:-} &
	LAUNCHED=$!
	for _ in $(seq 1200); do [ -S "$2" ] && [ -f "$2.warm" ] && break; sleep 0.05; done
	[ -f "$2.warm" ] || { echo "bench/jail/warm.sh: the launcher $1 did not start" >&2; exit 1; }
}
launch "$BIN" "$WORK/jail.sock"
LAUNCHER=$LAUNCHED
SIDES="$WORK/jail.sock"
if [ -n "$BASE" ]; then
	launch "$BASE" "$WORK/base.sock" "${WARM_BENCH_BASE_ARGS:-}"
	LAUNCHER="$LAUNCHER $LAUNCHED"
	SIDES="$SIDES $WORK/base.sock"
fi

# spec NAME: "warm LANGUAGE CODEFILE" (warm 1: through the warm socket)
spec() {
	case $1 in
	sh-true) echo "0 shell $WORK/true.sh" ;;
	py-pass) echo "1 python $WORK/pass.py" ;;
	py-pass-cold) echo "0 python $WORK/pass.py" ;;
	numpy) echo "1 python $WORK/numpy.py" ;;
	pandas) echo "1 python $WORK/pandas.py" ;;
	node) echo "1 node $WORK/zero.js" ;;
	node-cold) echo "0 node $WORK/zero.js" ;;
	*) echo "bench/jail/warm.sh: unknown row $1" >&2; return 1 ;;
	esac
}
# one sample of a row through SOCKET: "us status"; the other launcher, if
# any, must be idle too (its refill would be on this run's CPUs)
sample() {
	local warm lang file other
	read -r warm lang file < <(spec "$1") || return 1
	for other in $SIDES; do
		[ "$other" = "$2" ] && continue
		echo | SERVED_SETTLE_POOL=1 SERVED_SETTLE_ONLY=1 "$WORK/served-client" "$other" /bin/true - "$WORK/ws" >/dev/null
	done
	local extra=
	[ "$2" = "$WORK/base.sock" ] && extra=${WARM_BENCH_BASE_ARGS:-}
	# shellcheck disable=SC2086
	echo | SERVED_PRINT_CPU=1 SERVED_WARM=$warm SERVED_SETTLE_POOL=1 "$WORK/served-client" "$2" "$lang" "$file" "$WORK/ws" $extra
}

declare -A S C
for r in $ROWS; do spec "$r" >/dev/null || exit 1; for side in $SIDES; do sample "$r" "$side" >/dev/null; done; done	# warm-up
for ((i = 0; i < N; i++)); do
	for r in $ROWS; do
		for side in $SIDES; do
			read -r us st cpu < <(sample "$r" "$side")
			if [ "${st:-}" != exited ]; then
				echo "bench/jail/warm.sh: a $r run through $side ended ${st:-without a verdict}: not a sample" >&2
				exit 1
			fi
			S[$r$side]+="$us "
			C[$r$side]+="$((${cpu:-0} * 1000)) "
		done
	done
done

echo "# warm interpreters, request -> verdict through the launcher: N=$N, user $(id -un), kernel $(uname -r), $(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# this: $BIN${BASE:+; base: $BASE ${WARM_BENCH_BASE_ARGS:-}}"
if [ -n "$BASE" ]; then
	printf '%-13s %8s %8s %8s %10s %9s %9s %10s' row p50 p90 p99 p50-shell p50/shell base_p50 base/this
else
	printf '%-13s %8s %8s %8s %10s %9s' row p50 p90 p99 p50-shell p50/shell
fi
if [ -n "${WARM_BENCH_CPU:-}" ]; then
	printf ' %8s' cpu_p50
	[ -n "$BASE" ] && printf ' %9s %10s' base_cpu base/this
fi
echo
# pct "samples" P: the P-th percentile (nearest rank), in ms
pct() { tr ' ' '\n' <<<"$1" | sed '/^$/d' | sort -n | awk -v p="$2" '{ v[NR] = $1 } END { i = int((NR * p + 99) / 100); if (i < 1) i = 1; printf "%.2f", v[i] / 1000 }'; }
base=
this=$WORK/jail.sock
for r in $ROWS; do
	p50=$(pct "${S[$r$this]}" 50)
	[ "$r" = sh-true ] && base=$p50
	printf '%-13s %8s %8s %8s' "$r" "$p50" "$(pct "${S[$r$this]}" 90)" "$(pct "${S[$r$this]}" 99)"
	if [ -n "$base" ]; then
		awk -v a="$p50" -v b="$base" 'BEGIN { printf " %+10.2f %8.2fx", a - b, a / b }'
	else
		printf ' %10s %9s' - -
	fi
	if [ -n "$BASE" ]; then
		b50=$(pct "${S[$r$WORK/base.sock]}" 50)
		awk -v a="$b50" -v b="$p50" 'BEGIN { printf " %9.2f %9.2fx", a, a / b }'
	fi
	if [ -n "${WARM_BENCH_CPU:-}" ]; then
		c50=$(pct "${C[$r$this]}" 50)
		printf ' %8s' "$c50"
		if [ -n "$BASE" ]; then
			bc50=$(pct "${C[$r$WORK/base.sock]}" 50)
			awk -v a="$bc50" -v b="$c50" 'BEGIN { if (b > 0) printf " %9.2f %9.2fx", a, a / b; else printf " %9.2f %10s", a, "-" }'
		fi
	fi
	echo
done
echo "# ms; each sample after both launchers are idle again; rows (and launchers) round-robin in one run${WARM_BENCH_CPU:+; cpu: the cpu_ms of each verdict (whole ms)}"
