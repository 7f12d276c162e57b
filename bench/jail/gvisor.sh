#!/usr/bin/env bash
# bench/jail/gvisor.sh [N] [BINARY]
#
# The isolation classes side by side (docs/jail.md, "The gvisor class"),
# measured in one run on this machine, contenders interleaved round-robin
# (a benchmark: it prints figures, it asserts nothing).  Rows:
#   start    /bin/true: bare, the jail (--exec /bin/true), the jail with
#            --isolation gvisor
#   pandas   a small pandas script (a frame of 100k rows, a groupby, a
#            CSV into the workspace): python3 bare, --language python in
#            the jail, the same with --isolation gvisor
# Each: the median wall ms over N runs (default 5: a gvisor start costs
# about a second under ptrace), and the ratios to bare and to namespaces.
# The platform is printed first (runsc's version and platform, the
# kernel, the CPUs).  Runs as root (runsc needs it).  One-shot jails: the
# warm pool does not serve gvisor runs (docs/jail.md); the row warm
# measures what a pool of runsc sandboxes created ahead would save, and
# the row zygote a prototype of a warm gvisor run (bench/jail/
# gvisor_zygote.py: a sandbox started ahead with pandas imported, the
# workspace attached at the request) against the launcher's warm
# namespaced pandas run (bench/jail/warm.sh's pandas row), in this run.
# GVISOR_BENCH_ROWS="zygote" runs only the rows named (default: start
# pandas warm zygote).
set -u
ROWS=${GVISOR_BENCH_ROWS:-"start pandas warm zygote"}
on() { case " $ROWS " in *" $1 "*) return 0 ;; esac; return 1; }

N=${1:-5}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${2:-$ROOT/src/jail/sandbox-jail}
RUNSC=${RUNSC:-/usr/bin/runsc}

if [ "$(id -u)" != 0 ] || [ ! -x "$BIN" ] || [ ! -x "$RUNSC" ]; then
	echo "bench/jail/gvisor.sh: needs root, the jail ($BIN) and runsc ($RUNSC)" >&2
	exit 1
fi

WORK=$(mktemp -d /tmp/gvbench.XXXXXX)
chmod 0755 "$WORK"		# the namespaced sandbox opens the workspace as its own uid
trap 'rm -rf "$WORK"' EXIT
mkdir "$WORK/ws" "$WORK/bare"
chown 65534:65534 "$WORK/ws"
cat > "$WORK/job.py" <<'PY'
import pandas as pd, numpy as np
df = pd.DataFrame({"k": np.arange(100000) % 97, "v": np.arange(100000, dtype=float)})
g = df.groupby("k")["v"].agg(["sum", "mean", "count"])
g.to_csv("out.csv")		# the working directory: /workspace in a sandbox
print(len(g), round(g["sum"].sum()))
PY

echo "# platform: $($RUNSC --version | head -n 1), --platform=ptrace; kernel $(uname -r); $(nproc) CPUs; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "# N=$N, median wall ms per run, contenders interleaved"

now_ms() { echo $(( ${EPOCHREALTIME/./} / 1000 )); }
# one timed run of a contender; its ms to stdout (a failed run: FAIL)
timed() {
	local t0 t1
	t0=$(now_ms)
	if "$@" >/dev/null 2>"$WORK/last.err"; then
		t1=$(now_ms)
		echo $((t1 - t0))
	else
		echo FAIL
	fi
}
median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

jail() { "$BIN" --workspace "$WORK/ws" --verdict-file /dev/null --quiet --wall-time 120 --memory 1G "$@"; }

row() {		# name bare-cmd... -- jail-args...
	local name=$1 bare=() args=() b=() ns=() gv=() i x
	shift
	while [ "$1" != -- ]; do bare+=("$1"); shift; done
	shift
	args=("$@")
	for i in $(seq 1 "$N"); do
		b+=("$(cd "$WORK/bare" && timed "${bare[@]}")")
		ns+=("$(timed jail "${args[@]}")")
		gv+=("$(timed jail --isolation gvisor "${args[@]}")")
	done
	for x in "${b[@]}" "${ns[@]}" "${gv[@]}"; do
		[ "$x" = FAIL ] && { echo "$name: a run failed (bare: ${b[*]}; namespaces: ${ns[*]}; gvisor: ${gv[*]}): $(tail -c 300 "$WORK/last.err")"; return; }
	done
	local mb mn mg
	mb=$(echo "${b[*]}" | median)
	mn=$(echo "${ns[*]}" | median)
	mg=$(echo "${gv[*]}" | median)
	printf '%-7s bare %7s ms   namespaces %7s ms   gvisor %7s ms   gvisor/namespaces %5.1fx   namespaces/bare %5.1fx   gvisor/bare %5.1fx\n' \
		"$name" "$mb" "$mn" "$mg" "$(echo "$mg / $mn" | bc -l)" "$(echo "$mn / $mb" | bc -l)" "$(echo "$mg / $mb" | bc -l)"
}

on start && row start /bin/true -- --exec /bin/true
on pandas && row pandas /usr/bin/python3 "$WORK/job.py" -- --language python --code-file "$WORK/job.py"

# warm: what a sandbox created ahead (`runsc create`, a pool's part) would
# leave on a request's path (`runsc start` to the payload's exit), against
# the namespaced jail's one-shot start, in the same run.  A bare bundle
# (the host's root read-only, /bin/true, no network): runsc's own split,
# not the jail's (the exit is seen by polling `runsc state`: an upper bound); docs/jail.md, "The gvisor class", says why the launcher
# does not pool gvisor sandboxes.
warm_row() {
	local i c s t0 x ns=() cr=() st=() mn mc ms
	mkdir -p "$WORK/wb"
	printf '%s\n' '{"ociVersion": "1.0.0", "process": {"user": {"uid": 65534, "gid": 65534}, "args": ["/bin/true"], "env": ["PATH=/usr/bin:/bin"], "cwd": "/"},' \
		'"root": {"path": "/", "readonly": true}, "hostname": "sandbox", "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],' \
		'"linux": {"namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}]}}' > "$WORK/wb/config.json"
	local R=("$RUNSC" --root="$WORK/wb/state" --platform=ptrace --network=none --ignore-cgroups)
	for i in $(seq 1 "$N"); do
		ns+=("$(timed jail --exec /bin/true)")
		c=$(timed "${R[@]}" create --bundle "$WORK/wb" "w$i")
		# start returns once the payload runs; to its exit (the state says stopped)
		t0=$(now_ms)
		if "${R[@]}" start "w$i" 2>"$WORK/last.err"; then
			while ! "${R[@]}" state "w$i" 2>/dev/null | grep -q '"status": "stopped"'; do sleep 0.01; done
			s=$(( $(now_ms) - t0 ))
		else
			s=FAIL
		fi
		"${R[@]}" delete -force "w$i" >/dev/null 2>&1
		cr+=("$c"); st+=("$s")
	done
	for x in "${ns[@]}" "${cr[@]}" "${st[@]}"; do
		[ "$x" = FAIL ] && { echo "warm: a run failed (namespaces: ${ns[*]}; create: ${cr[*]}; start: ${st[*]}): $(tail -c 300 "$WORK/last.err")"; return; }
	done
	mn=$(echo "${ns[*]}" | median); mc=$(echo "${cr[*]}" | median); ms=$(echo "${st[*]}" | median)
	printf '%-7s namespaces %7s ms   runsc create (ahead) %7s ms   runsc start, a created sandbox %7s ms   start/namespaces %5.1fx\n' \
		warm "$mn" "$mc" "$ms" "$(echo "$ms / $mn" | bc -l)"
}
on warm && warm_row

# zygote: the same pandas script as bench/jail/warm.sh's pandas row, warm
# namespaced (request -> verdict through a launcher, and its floor, a
# served shell `true`) vs the prototype (go -> the payload's status, no
# launcher: its floor is not in it).  N samples each; warm.sh first.
zygote_row() {
	local small="$WORK/small.py" ns z nsp nsf
	printf '%s\n' 'import pandas as pd' \
		'df = pd.DataFrame({"k": ["a", "b", "a", "b"], "v": [1, 2, 3, 4]})' \
		'print(df.groupby("k").sum())' >"$small"
	ns=$(WARM_BENCH_ROWS="sh-true pandas" "$ROOT/bench/jail/warm.sh" "$N" "$BIN" 2>&1)
	nsp=$(echo "$ns" | awk '$1 == "pandas" {print $2}')
	nsf=$(echo "$ns" | awk '$1 == "sh-true" {print $2}')
	z=$(/usr/bin/python3 "$ROOT/bench/jail/gvisor_zygote.py" "$N" "$small" 2>&1)
	if [ -z "$nsp" ] || ! echo "$z" | grep -q '^small.py ahead'; then
		echo "zygote: a run failed: $ns $z"
		return
	fi
	# shellcheck disable=SC2086
	set -- $z
	printf '%-7s warm namespaces pandas %7s ms (floor, served true: %s ms)   warm gvisor prototype: ahead %7s ms, request %7s ms   request/namespaces %5.1fx   (request+floor)/namespaces %5.1fx\n' \
		zygote "$nsp" "$nsf" "$3" "$5" "$(echo "$5 / $nsp" | bc -l)" "$(echo "($5 + $nsf) / $nsp" | bc -l)"
}
on zygote && zygote_row
