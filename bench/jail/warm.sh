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
# WARM_BENCH_LAUNCHER_ARGS adds launcher options (e.g. --warm-modules).
set -u

N=${1:-30}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${2:-$ROOT/src/jail/sandbox-jail}
ROWS=${WARM_BENCH_ROWS:-"sh-true py-pass py-pass-cold numpy pandas node node-cold"}

if [ ! -x "$BIN" ]; then
	echo "bench/jail/warm.sh: no jail binary at $BIN (build it first: make -C src/jail)" >&2
	exit 1
fi
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
trap '[ -n "$LAUNCHER" ] && kill "$LAUNCHER" && wait "$LAUNCHER"; rm -rf "$WORK"' EXIT
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

# shellcheck disable=SC2086
"$BIN" --serve "$WORK/jail.sock" --pool 2 --warm-python 2 --warm-node 1 --quiet \
	${WARM_BENCH_LAUNCHER_ARGS:-} &
LAUNCHER=$!
for _ in $(seq 1200); do [ -S "$WORK/jail.sock" ] && [ -f "$WORK/jail.sock.warm" ] && break; sleep 0.05; done
[ -f "$WORK/jail.sock.warm" ] || { echo "bench/jail/warm.sh: the launcher did not start" >&2; exit 1; }

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
# one sample of a row: "us status"
sample() {
	local warm lang file
	read -r warm lang file < <(spec "$1") || return 1
	echo | SERVED_WARM=$warm SERVED_SETTLE_POOL=1 "$WORK/served-client" "$WORK/jail.sock" "$lang" "$file" "$WORK/ws"
}

declare -A S
for r in $ROWS; do spec "$r" >/dev/null || exit 1; sample "$r" >/dev/null; done	# warm-up
for ((i = 0; i < N; i++)); do
	for r in $ROWS; do
		read -r us st < <(sample "$r")
		if [ "${st:-}" != exited ]; then
			echo "bench/jail/warm.sh: a $r run ended ${st:-without a verdict}: not a sample" >&2
			exit 1
		fi
		S[$r]+="$us "
	done
done

echo "# warm interpreters, request -> verdict through the launcher: N=$N, user $(id -un), kernel $(uname -r), $(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-13s %8s %8s %8s %10s %9s\n' row p50 p90 p99 p50-shell p50/shell
# pct "samples" P: the P-th percentile (nearest rank), in ms
pct() { tr ' ' '\n' <<<"$1" | sed '/^$/d' | sort -n | awk -v p="$2" '{ v[NR] = $1 } END { i = int((NR * p + 99) / 100); if (i < 1) i = 1; printf "%.2f", v[i] / 1000 }'; }
base=
for r in $ROWS; do
	p50=$(pct "${S[$r]}" 50)
	[ "$r" = sh-true ] && base=$p50
	printf '%-13s %8s %8s %8s' "$r" "$p50" "$(pct "${S[$r]}" 90)" "$(pct "${S[$r]}" 99)"
	if [ -n "$base" ]; then
		awk -v a="$p50" -v b="$base" 'BEGIN { printf " %+10.2f %8.2fx\n", a - b, a / b }'
	else
		echo
	fi
done
echo "# ms; each sample after the launcher is idle again; rows round-robin in one run"
