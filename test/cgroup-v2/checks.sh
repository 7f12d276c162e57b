#!/usr/bin/env bash
# test/cgroup-v2/checks.sh [BINARY]
#
# The jail's cgroup code on a cgroup-v2-only host: every limit and its
# verdict fields, one-shot and served, as root and as postgres through the
# delegation scripts/jail-host-setup.sh sets up, slot reuse and clean-up,
# killed jails and launchers, an account that is not delegated, the
# systemd layout (a service's own delegated subtree, the drop-in
# jail-host-setup.sh writes), sandbox-runner's unit (its cgroup given to
# its User=, its ExecStart's --enter-cgroup step), and the supervisor
# completing real invocations under PostgreSQL (postgres.sh).  Runs as root on a
# host whose cgroup2 mount has memory, pids and cpu and no v1 hierarchy:
# test/cgroup-v2/run.sh boots such a guest and runs this there, but any
# such host will do.  One line per check; ends with "N passed, N failed".
# No check times anything; waits are bounded so a broken jail cannot hang
# the suite.  CG2_ONLY=REGEX runs only the checks whose name matches
# (the runs they need still run); CG2_PARTS="oneshot served ..." runs only
# those parts (oneshot served nodeleg service runner-unit postgres; the
# host's set-up always runs): test knobs for work on one part under
# emulation.
set -u

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${1:-$ROOT/src/jail/sandbox-jail}
PY=/usr/bin/python3
CG=$(awk '{ for (i = 1; i <= NF; i++) if ($i == "-") break;
	if ($(i+1) == "cgroup2") { print $5; exit } }' /proc/self/mountinfo)
D=$CG/sandbox_ext			# the delegated parent jail-host-setup.sh makes
SVC=$D/service				# where postgres's own processes run

WORK=$(mktemp -d /tmp/cg2test.XXXXXX)
chmod 755 "$WORK"
MARK=$((RANDOM * 32768 + RANDOM + 100000))	# unique sleep durations
LAUNCHERS=()
cleanup() {
	for p in "${LAUNCHERS[@]}"; do kill -KILL "$p" 2>/dev/null; done
	pkill -KILL -f "sleep $MARK" 2>/dev/null
	rm -rf "$WORK"
}
trap cleanup EXIT

# ok and nok: test/tap.sh (plain lines); a failure shows the last run's
# verdict and output
TAP_STYLE=plain
. "$ROOT/test/tap.sh"
part() { [ -z "${CG2_PARTS:-}" ] || [[ " $CG2_PARTS " == *" $1 "* ]]; }
# where the guest's time goes (a note, never a check)
stamp() { echo "# at $SECONDS s: $*"; }
fail() {
	nok "$*" "verdict: $(cat "$WORK/verdict" 2>/dev/null)" \
		"rc=${RC:-} stdout: $(head -c 300 "$WORK/out" 2>/dev/null | tr '\n' '|')" \
		"stderr: $(head -c 400 "$WORK/err" 2>/dev/null | tr '\n' '|')"
}
# t NAME CONDITION: CONDITION is evaluated by the shell
t() {
	local name=$1
	shift
	if [ -n "${CG2_ONLY:-}" ] && ! [[ $name =~ $CG2_ONLY ]]; then return; fi
	if eval "$@"; then ok "$name"; else fail "$name [$*]"; fi
}
# field of the last verdict; INVALID if it is not exactly one JSON object
v() {
	$PY -c '
import json, sys
try:
    lines = open(sys.argv[1]).read().splitlines()
    assert len(lines) == 1
    x = json.loads(lines[0])[sys.argv[2]]
    print(x if isinstance(x, str) else json.dumps(x))
except Exception:
    print("INVALID")
' "$WORK/verdict" "$1"
}
out_has() { grep -q -- "$1" "$WORK/out"; }
err_has() { grep -q -- "$1" "$WORK/err"; }
survivors() { pgrep -f "sleep $MARK" >/dev/null; }
# bounded wait until a command succeeds
wait_until() {
	local n=0
	until eval "$1"; do
		[ $n -ge "${2:-200}" ] && return 1
		sleep 0.1
		n=$((n + 1))
	done
}

if [ "$(id -u)" != 0 ] || [ -z "$CG" ] || [ ! -x "$BIN" ]; then
	echo "checks.sh needs root, a cgroup2 mount and the jail at $BIN" >&2
	echo "0 passed, 1 failed"
	exit 1
fi

# runner USER: the command prefix that runs a command as USER; postgres's
# processes start inside the delegated subtree, as its service's would
# (SVC), root's where we are (the root cgroup)
IN_CG='echo $$ > "$1/cgroup.procs" && shift && exec runuser -u "$@"'
runner() {
	if [ "$1" = root ]; then RUNNER=(env)
	else RUNNER=(sh -c "$IN_CG" sh "$SVC" "$1" --); fi
}
fresh_ws() {
	rm -rf "$WORK/ws"
	mkdir "$WORK/ws"
	if [ "$1" = root ]; then chown 65534:65534 "$WORK/ws"; else chown "$1": "$WORK/ws"; fi
	WS=$WORK/ws
}
# jr USER LANG CODE [jail options...]: one run through $JAIL (the one-shot
# binary, or the client of USER's launcher); sets RC and out/err/verdict
JAIL=()
jr() {
	local u=$1 lang=$2 code=$3
	shift 3
	printf '%s\n' "$code" > "$WORK/code"
	: > "$WORK/verdict"
	timeout -s KILL 300 "${RUNNER[@]}" "${JAIL[@]}" --language "$lang" --workspace "$WS" \
		--verdict-fd 3 "$@" < "$WORK/code" > "$WORK/out" 2> "$WORK/err" 3> "$WORK/verdict"
	RC=$?
}
# jbg NAME USER LANG CODE [opts]: a run in the background, files
# $WORK/NAME.{out,err,verdict}; sets BGPID
jbg() {
	local name=$1 u=$2 lang=$3 code=$4
	shift 4
	printf '%s\n' "$code" > "$WORK/$name.code"
	: > "$WORK/$name.verdict"
	timeout -s KILL 300 "${RUNNER[@]}" "${JAIL[@]}" --language "$lang" --workspace "$WS" \
		--verdict-fd 3 "$@" < "$WORK/$name.code" > "$WORK/$name.out" 2> "$WORK/$name.err" \
		3> "$WORK/$name.verdict" &
	BGPID=$!
}
vf() { cp "$1" "$WORK/verdict"; v "$2"; }
# copy a run's file to where fail() and v read it; missing: an empty one
take() { cat "$1" > "$2" 2>/dev/null || : > "$2"; }
# the v2 cgroup (relative to the mount) of the first process matching $1
cg_of() { sed -n 's/^0:://p' "/proc/$(pgrep -f -o "$1")/cgroup" 2>/dev/null; }
stale() { ls -d "$1"/run-* "$1"/srv-* 2>/dev/null; }

# ---- the host: cgroup2 alone, and what jail-host-setup.sh makes of it -------
echo "# kernel $(uname -r), cgroup2 at $CG: $(cat "$CG/cgroup.controllers")"
mkdir -p "$WORK/v1"
v1=no
mount -t cgroup -o memory none "$WORK/v1" 2>/dev/null && { v1=yes; umount "$WORK/v1"; }
t "host: memory, pids and cpu on cgroup2, and no v1 hierarchy can be mounted" \
	'[ $v1 = no ] && [ -z "$(awk '"'"'$3 == "cgroup"'"'"' /proc/self/mounts)" ] && [ "$(grep -ow -e memory -e pids -e cpu "$CG/cgroup.controllers" | wc -l)" = 3 ]'
"$ROOT/scripts/jail-host-setup.sh" postgres > "$WORK/setup.out" 2>&1
cp "$WORK/setup.out" "$WORK/err"
t "jail-host-setup.sh: $D delegated to postgres (directory, procs, subtree_control), memory pids cpu enabled" \
	'[ "$(stat -c %U "$D" "$D/cgroup.procs" "$D/cgroup.subtree_control" "$SVC" "$SVC/cgroup.procs" | sort -u)" = postgres ] && [ "$(cat "$D/cgroup.subtree_control")" = "cpu memory pids" ] && err_has "v2: $D delegated to postgres"'
t "jail-host-setup.sh: says where postgres's service must run for its jails to get cgroups" \
	'err_has "start postgres.s service in $SVC"'

# ---- one-shot runs ------------------------------------------------------------
oneshot() {
	local u=$1
	echo "# one-shot as $u"
	JAIL=("$BIN")
	runner "$u"
	fresh_ws "$u"
	jr "$u" shell 'echo hi; cat /proc/self/cgroup'
	t "$u: one-shot run gets a v2 cgroup; inside, its cgroup namespace root is /" \
		'[ $RC = 0 ] && [ "$(v cgroup)" = v2 ] && out_has "^0::/$" && [ "$(v exit_code)" = 0 ]'

	# born in its cgroup: clone3 with CLONE_INTO_CGROUP, no cgroup.procs write
	printf 'true\n' > "$WORK/code"
	install -m 0644 -o "$u" /dev/null "$WORK/strace"
	"${RUNNER[@]}" strace -qq -o "$WORK/strace" -e trace=clone3,openat -e signal=none \
		"$BIN" --language shell --workspace "$WS" --verdict-fd 3 < "$WORK/code" \
		> "$WORK/out" 2> "$WORK/err" 3> "$WORK/verdict"
	RC=$?
	t "$u: one-shot sandbox is cloned into its cgroup (CLONE_INTO_CGROUP), never moved" \
		'[ $RC = 0 ] && [ "$(v cgroup)" = v2 ] && grep -Eq "^clone3\(.*CLONE_INTO_CGROUP.*\) = [1-9][0-9]*$" "$WORK/strace" && ! grep -q "run-[0-9]*/cgroup.procs" "$WORK/strace"'

	# the limits as written, read from outside while the run waits
	jbg lim "$u" shell "sleep $MARK & while [ ! -e /workspace/stop ]; do sleep 0.1; done" \
		--memory 96M --pids 21 --wall-time 120
	wait_until "pgrep -f 'sleep $MARK' >/dev/null"
	local rcg
	rcg=$(cg_of "sleep $MARK")
	echo "$(cat "$CG$rcg/memory.max" "$CG$rcg/memory.swap.max" "$CG$rcg/pids.max" 2>&1 | tr '\n' ' ')" > "$WORK/out"
	touch "$WS/stop"
	wait "$BGPID"
	cp "$WORK/lim.verdict" "$WORK/verdict"
	t "$u: the run's own cgroup $D/run-<jail pid> holds the payload, with memory.max, memory.swap.max=0, pids.max" \
		'[[ "$rcg" == "${D#"$CG"}/run-"* ]] && [ "$(cat "$WORK/out")" = "100663296 0 21 " ] && [ "$(v exit_code)" = 0 ]'

	jr "$u" python 'x = bytearray(1 << 30); x[::4096] = b"x" * len(x[::4096]); print("survived")' --memory 64M
	t "$u: memory limit: oom_killed, SIGKILL, peak at the limit" \
		'[ $RC = 0 ] && [ "$(v oom_killed)" = true ] && [ "$(v signal)" = 9 ] && ! out_has survived && [ "$(v peak_memory_bytes)" -le 67108864 ] && [ "$(v peak_memory_bytes)" -ge 50331648 ]'
	jr "$u" python 'x = bytearray(48 << 20); x[::4096] = b"x" * len(x[::4096]); print("kept")' --memory 256M
	t "$u: memory.peak: a run that touches 48 MiB under 256 MiB reports 48..256 MiB, no oom" \
		'[ $RC = 0 ] && out_has kept && [ "$(v oom_killed)" = false ] && [ "$(v pids_limit_hit)" = false ] && [ "$(v peak_memory_bytes)" -ge 50331648 ] && [ "$(v peak_memory_bytes)" -lt 268435456 ]'
	jr "$u" shell 'bomb() { bomb | bomb & }; bomb; sleep 1; echo bomb-done' --pids 24 --wall-time 20
	t "$u: pids limit contains a fork bomb" \
		'[ $RC = 0 ] && err_has "Resource temporarily unavailable" && [ "$(v status)" != setup_error ] && [ "$(v cgroup)" = v2 ] && [ "$(v pids_limit_hit)" = true ]'
	jr "$u" shell 'for i in 1 2 3; do ( while :; do :; done ) & done; wait' --cpu-time 2 --wall-time 300
	t "$u: cpu time summed over processes (cpu.stat) ends the run as timed_out" \
		'[ $RC = 0 ] && [ "$(v status)" = timed_out ] && [ "$(v cpu_ms)" -ge 2000 ]'
	jr "$u" shell "sleep $MARK &
setsid sleep $MARK &
( trap '' TERM HUP; ( sleep $MARK & ) ; sleep $MARK ) &
sleep $MARK" --wall-time 2
	t "$u: wall timeout kills the whole tree (pid namespace + cgroup.kill)" \
		'[ $RC = 0 ] && [ "$(v status)" = timed_out ] && wait_until "! survivors" 50'
	t "$u: no run-* cgroup left behind by the runs" '[ -z "$(ls -d "$D"/run-* 2>/dev/null)" ]'

	# a jail killed mid-run: its sandbox goes with it (death signal), its
	# empty run-<pid> stays until jail-host-setup.sh removes it
	printf 'sleep %s\n' "$MARK" > "$WORK/code"
	"${RUNNER[@]}" "$BIN" --language shell --workspace "$WS" --verdict-file /dev/null \
		< "$WORK/code" > /dev/null 2>&1 &
	local bg=$! jp
	wait_until "pgrep -f 'sleep $MARK' >/dev/null"
	jp=$(pgrep -o -f "^$BIN --language shell --workspace $WS --verdict-file")
	kill -KILL "$jp"
	wait "$bg" 2>/dev/null
	local left=no
	wait_until "! survivors" 100
	[ -d "$D/run-$jp" ] && left=yes
	"$ROOT/scripts/jail-host-setup.sh" postgres 2>/dev/null
	t "$u: SIGKILL of the jail: no sandbox process survives; jail-host-setup.sh removes its empty run-$jp" \
		'[ -n "$jp" ] && ! survivors && [ $left = yes ] && [ ! -d "$D/run-$jp" ]'
}

# ---- served runs -----------------------------------------------------------------
WARMOPT=()
start_launcher() {
	local u=$1
	SDIR=$WORK/launcher-$u
	rm -rf "$SDIR"
	mkdir "$SDIR"
	chown "$u": "$SDIR"
	SOCK=$SDIR/jail.sock
	runner "$u"
	"${RUNNER[@]}" "$BIN" --serve "$SOCK" --pool 2 "${WARMOPT[@]}" 2>> "$WORK/launcher.log" &
	LPARENT=$!
	wait_until "[ -S '$SOCK' ] || ! kill -0 $LPARENT 2>/dev/null"
	LPID=$(pgrep -o -f "^$BIN --serve $SOCK")
	LAUNCHERS+=("$LPID")
}
slots() { ls -d "$D"/srv-"$LPID"-* 2>/dev/null; }
# the first python interpreter under a process (a warm worker's), or nothing
interpreter_of() {
	local c
	for c in $(cat "/proc/$1/task/$1/children" 2>/dev/null); do
		case $(readlink "/proc/$c/exe" 2>/dev/null) in */python3*) echo "$c"; return ;; esac
		interpreter_of "$c" && return
	done
	return 1
}
# the highest serial of the launcher's slots
last_slot() { slots | sed 's/.*-//' | sort -n | tail -n 1; }

served() {
	local u=$1 a b
	echo "# served as $u"
	start_launcher "$u"
	JAIL=("$BIN" --client "$SOCK")
	RUNNER=(runuser -u "$u" --)
	fresh_ws "$u"
	jr "$u" shell 'cat /proc/self/cgroup'
	t "$u: served run gets a v2 cgroup, the namespace root inside" \
		'[ $RC = 0 ] && [ "$(v cgroup)" = v2 ] && out_has "^0::/$"'

	# two at once: each in a slot of its own with its own limits
	jbg a "$u" shell "sleep $((MARK + 1)) & while [ ! -e /workspace/stop ]; do sleep 0.1; done" --memory 100M --pids 30 --wall-time 120
	a=$BGPID
	jbg b "$u" shell "sleep $((MARK + 2)) & while [ ! -e /workspace/stop ]; do sleep 0.1; done" --memory 200M --pids 40 --wall-time 120
	b=$BGPID
	wait_until "pgrep -f 'sleep $((MARK + 1))' >/dev/null && pgrep -f 'sleep $((MARK + 2))' >/dev/null"
	local ca cb
	ca=$(cg_of "sleep $((MARK + 1))")
	cb=$(cg_of "sleep $((MARK + 2))")
	echo "$(cat "$CG$ca/memory.max" "$CG$ca/pids.max" "$CG$cb/memory.max" "$CG$cb/pids.max" 2>&1 | tr '\n' ' ')" > "$WORK/out"
	touch "$WS/stop"
	wait "$a"
	wait "$b"
	t "$u: two served runs at once: separate slots srv-<launcher>-N with their own memory.max and pids.max (+1 for the worker)" \
		'[[ "$ca" == "${D#"$CG"}/srv-$LPID-"* ]] && [[ "$cb" == "${D#"$CG"}/srv-$LPID-"* ]] && [ "$ca" != "$cb" ] && [ "$(cat "$WORK/out")" = "104857600 31 209715200 41 " ] && [ "$(vf "$WORK/a.verdict" exit_code)" = 0 ] && [ "$(vf "$WORK/b.verdict" exit_code)" = 0 ]'
	rm -f "$WS/stop"

	jr "$u" python 'x = bytearray(1 << 30); x[::4096] = b"x" * len(x[::4096]); print("survived")' --memory 64M
	t "$u: served memory limit: oom_killed, SIGKILL; the worker survives to send the verdict" \
		'[ $RC = 0 ] && [ "$(v oom_killed)" = true ] && [ "$(v signal)" = 9 ] && ! out_has survived && kill -0 "$LPID"'
	jr "$u" python 'x = bytearray(100 << 20); x[::4096] = b"x" * len(x[::4096]); print("big")' --memory 256M
	t "$u: served memory.peak: a run touching 100 MiB reports >= 100 MiB" \
		'[ $RC = 0 ] && out_has big && [ "$(v peak_memory_bytes)" -ge 104857600 ]'
	jr "$u" python 'print("small")' --memory 256M
	t "$u: served memory.peak is the run's own: the next run (a fresh slot) reports < 64 MiB" \
		'[ $RC = 0 ] && out_has small && [ "$(v peak_memory_bytes)" -gt 0 ] && [ "$(v peak_memory_bytes)" -lt 67108864 ] && [ "$(v oom_killed)" = false ]'
	jr "$u" shell 'bomb() { bomb | bomb & }; bomb; sleep 1; echo bomb-done' --pids 24 --wall-time 20
	t "$u: served pids limit contains a fork bomb, pids_limit_hit from the slot's pids.events" \
		'[ $RC = 0 ] && err_has "Resource temporarily unavailable" && [ "$(v status)" != setup_error ] && [ "$(v pids_limit_hit)" = true ]'
	jr "$u" shell 'for i in 1 2 3; do ( while :; do :; done ) & done; wait' --cpu-time 2 --wall-time 300
	t "$u: served cpu time summed over processes ends the run as timed_out" \
		'[ $RC = 0 ] && [ "$(v status)" = timed_out ] && [ "$(v cpu_ms)" -ge 2000 ]'
	jr "$u" shell "setsid sleep $MARK & sleep $MARK" --wall-time 2
	t "$u: served wall timeout: verdict timed_out (the slot is never cgroup.kill'ed with its worker), nothing survives" \
		'[ $RC = 0 ] && [ "$(v status)" = timed_out ] && wait_until "! survivors" 50 && kill -0 "$LPID"'
	# each worker's slot serves one run and goes with it: a fresh one per run
	local before
	wait_until '[ "$(slots | wc -l)" = 2 ]' 50
	before=$(last_slot)
	for _ in 1 2 3; do jr "$u" shell 'true'; done
	wait_until '[ "$(slots | wc -l)" = 2 ] && [ "$(last_slot)" = $((before + 3)) ]' 50
	t "$u: slots: a fresh one per run, each removed after its run (3 runs, pool of 2: 2 slots, 3 new)" \
		'[ $RC = 0 ] && [ "$(slots | wc -l)" = 2 ] && [ "$(last_slot)" = $((before + 3)) ]'

	kill -TERM "$LPID"
	wait_until "! kill -0 $LPID 2>/dev/null"
	t "$u: launcher TERM: all its slots removed" '! kill -0 "$LPID" 2>/dev/null && [ -z "$(slots)" ]'

	# warm interpreters on v2 (jail.md, "Warm interpreters"; nothing
	# preloaded: an emulated guest would take long over pandas): the slot's
	# memory.peak is reset at the request, its CPU counter taken as a base
	WARMOPT=(--warm-python 1 --warm-modules "")
	start_launcher "$u"
	WARMOPT=()
	JAIL=("$BIN" --client "$SOCK")
	# the page: "N problem" (wire_protocol.h: ready[] at 16, problem[] at 296)
	warm_state() {
		$PY -c '
import struct, sys
try:
    d = open(sys.argv[1], "rb").read()
    print(struct.unpack_from("i", d, 16)[0], d[296:496].split(b"\0")[0].decode())
except OSError:
    print(0)' "$SOCK.warm"
	}
	warm_ready() { wait_until '[ "$(warm_state | cut -d" " -f1)" -gt 0 ] || [ -n "$(warm_state | cut -s -d" " -f2-)" ]' 1200; }
	warm_ready
	local why
	why=$(warm_state | cut -s -d" " -f2-)
	# a kernel that cannot clone out of a detached copy of the host tree
	# (Debian's 6.1) starts it too: the interpreter's process enters its
	# root in a mount namespace of its own (jail.md); either way it waits
	# in its final root (a tmpfs), and in its init's namespace only if init
	# entered that root ahead
	local ip par ns_path=none
	ip=$(interpreter_of "$LPID")
	if [ -n "$ip" ]; then
		par=$(awk '/^PPid:/ { print $2 }' "/proc/$ip/status")
		if [ "$(readlink "/proc/$ip/ns/mnt")" = "$(readlink "/proc/$par/ns/mnt")" ]; then
			[ "$(stat -f -c %T "/proc/$par/root/")" = tmpfs ] && ns_path="init's, entered ahead"
		else
			[ "$(stat -f -c %T "/proc/$par/root/")" != tmpfs ] && ns_path="its own, init still on the host's root"
		fi
	fi
	t "$u: warm python on v2 ($(uname -r)): an interpreter waits in its final root, in a mount namespace: $ns_path${why:+ (the page says: $why)}" \
		'[ -z "$why" ] && [ -n "$ip" ] && [ "$(stat -f -c %T "/proc/$ip/root/")" = tmpfs ] && [ "$ns_path" != none ]'
	if [ -z "$why" ]; then
		jr "$u" python 'import sys; print(sys.argv, __file__)'
		t "$u: warm python on v2: warm, the cold run's argv and __file__, a v2 cgroup" \
			'[ $RC = 0 ] && [ "$(v warm)" = true ] && [ "$(v cgroup)" = v2 ] && out_has "/sandbox/main.py" && [ "$(v peak_memory_bytes)" -ge "$(v warm_memory_bytes)" ]'
		warm_ready
		jr "$u" python 'x = bytearray(1 << 30); x[::4096] = b"x" * len(x[::4096]); print("survived")' --memory 64M
		t "$u: warm python on v2: the memory limit holds (oom_killed)" \
			'[ $RC = 0 ] && [ "$(v warm)" = true ] && [ "$(v oom_killed)" = true ] && ! out_has survived'
		warm_ready
		jr "$u" python 'while True: pass' --cpu-time 2 --wall-time 300
		t "$u: warm python on v2: the CPU limit holds, counted from the request (timed_out, cpu_ms >= 2000)" \
			'[ $RC = 0 ] && [ "$(v warm)" = true ] && [ "$(v timed_out)" = true ] && [ "$(v cpu_ms)" -ge 2000 ]'
	fi
	kill -TERM "$LPID"
	wait_until "! kill -0 $LPID 2>/dev/null"
	t "$u: warm launcher TERM: its slots, warm sockets and page removed" \
		'! kill -0 "$LPID" 2>/dev/null && [ -z "$(slots)" ] && [ ! -e "$SOCK.warm" ] && [ ! -e "$SOCK.python" ]'

	start_launcher "$u"
	JAIL=("$BIN" --client "$SOCK")
	jbg k "$u" shell "sleep $MARK"
	wait_until "pgrep -f 'sleep $MARK' >/dev/null"
	kill -KILL "$LPID"
	wait "$BGPID"
	RC=$?
	cp "$WORK/k.verdict" "$WORK/verdict"
	local left
	wait_until "! survivors" 100
	left=$(slots | wc -l)
	"$ROOT/scripts/jail-host-setup.sh" postgres 2>/dev/null
	t "$u: launcher SIGKILL: its sandboxes die, the client gets a setup error, jail-host-setup.sh removes the $left empty slots" \
		'! survivors && [ $RC = 1 ] && [ "$(v status)" = setup_error ] && [ "$left" -ge 1 ] && [ -z "$(slots)" ]'
	wait "$LPARENT" 2>/dev/null
}

stamp "oneshot"
if part oneshot; then
	oneshot root
	oneshot postgres
fi
stamp "served"
if part served; then
	served root
	served postgres
fi

# ---- an account whose own processes are outside the delegated subtree --------
stamp "nodeleg"
if part nodeleg; then
	echo "# postgres outside $D (not delegated)"
	fresh_ws postgres
	JAIL=("$BIN")
	RUNNER=(runuser -u postgres --)
	jr postgres shell 'echo ran'
	t "not delegated: the run falls back to rlimits, says so (cgroup none, and why on stderr)" \
		'[ $RC = 0 ] && out_has ran && [ "$(v cgroup)" = none ] && err_has "is not delegated to this process"'
	jr postgres shell 'echo never' --require-cgroup
	t "not delegated + --require-cgroup: setup error naming the reason" \
		'[ $RC = 1 ] && [ "$(v status)" = setup_error ] && grep -q "not delegated" <<<"$(v setup_error)" && ! out_has never'
	jr postgres shell 'echo never' --cgroup-parent "$D" --require-cgroup
	t "not delegated, explicit --cgroup-parent: refused before any cgroup is made" \
		'[ $RC = 1 ] && grep -q "not delegated" <<<"$(v setup_error)" && [ -z "$(stale "$D")" ]'
	SOCK=$WORK/nodeleg.sock
	timeout -s KILL 60 runuser -u postgres -- "$BIN" --serve "$SOCK" --pool 1 --require-cgroup > "$WORK/out" 2> "$WORK/err"
	RC=$?
	t "not delegated: a launcher with --require-cgroup refuses to start, naming the reason" \
		'[ $RC = 1 ] && err_has "not delegated" && [ ! -e "$SOCK" ]'
fi

# ---- the systemd layout: a service's own subtree (Delegate=yes) --------------
# What the drop-in does, without systemd: a service cgroup with the
# service's processes in it, and the ExecStartPost run from <service>/.control.
stamp "service"
if part service; then
	echo "# a delegated service (the systemd drop-in's ExecStartPost)"
	S=$CG/system.slice/sbx-test.service
	mkdir -p "$CG/system.slice"
	for c in +memory +pids +cpu; do echo $c > "$CG/system.slice/cgroup.subtree_control"; done
	mkdir -p "$S/.control"
	# the "server": postgres processes in S, one forking more while we move
	sh -c 'echo $$ > "$1/cgroup.procs" && exec runuser -u postgres -- sh -c "sleep $2 & while :; do sleep 0.2; done"' sh "$S" "$MARK" &
	SERVER=$!
	wait_until "[ \$(wc -l < '$S/cgroup.procs') -ge 2 ]"
	sh -c 'echo $$ > "$1/.control/cgroup.procs" && exec "$2" --service-cgroup postgres' sh "$S" "$ROOT/scripts/jail-host-setup.sh" > "$WORK/out" 2> "$WORK/err"
	cp "$WORK/err" "$WORK/out"
	t "service layout: ExecStartPost moves the service into <service>/sandbox_ext/service and delegates <service>/sandbox_ext" \
		'[ -z "$(cat "$S/cgroup.procs")" ] && [ "$(wc -l < "$S/sandbox_ext/service/cgroup.procs")" -ge 2 ] && [ "$(stat -c %U "$S/sandbox_ext" "$S/sandbox_ext/cgroup.procs" | sort -u)" = postgres ] && [ "$(cat "$S/sandbox_ext/cgroup.subtree_control")" = "cpu memory pids" ] && out_has "delegated to postgres"'
	fresh_ws postgres
	printf 'cat /proc/self/cgroup; sleep %s & wait_for() { :; }; while [ ! -e /workspace/stop ]; do sleep 0.1; done\n' "$((MARK + 5))" > "$WORK/svc.code"
	sh -c 'echo $$ > "$1/sandbox_ext/service/cgroup.procs" && shift && exec runuser -u postgres -- "$@"' sh "$S" \
		"$BIN" --language shell --workspace "$WS" --verdict-fd 3 --memory 80M < "$WORK/svc.code" \
		> "$WORK/out" 2> "$WORK/err" 3> "$WORK/verdict" &
	bg=$!
	wait_until "pgrep -f 'sleep $((MARK + 5))' >/dev/null"
	scg=$(cg_of "sleep $((MARK + 5))")
	smax=$(cat "$CG$scg/memory.max" 2>&1)
	touch "$WS/stop"
	wait "$bg"
	RC=$?
	t "service layout: postgres's jail finds <service>/sandbox_ext by itself; limits apply there" \
		'[ $RC = 0 ] && [ "$(v cgroup)" = v2 ] && [[ "$scg" == /system.slice/sbx-test.service/sandbox_ext/run-* ]] && [ "$smax" = 83886080 ]'
	kill -KILL "$SERVER" 2>/dev/null
	pkill -KILL -f "sleep $MARK" 2>/dev/null
	wait "$SERVER" 2>/dev/null
	wait_until '[ -z "$(cat "$S/sandbox_ext/service/cgroup.procs")" ]' 50
	rmdir "$S"/sandbox_ext/run-* "$S/sandbox_ext/service" "$S/sandbox_ext" "$S/.control" "$S" 2>/dev/null

	# the systemd branch of jail-host-setup.sh (a host with /run/systemd/system),
	# its paths under a scratch root (SANDBOX_SYSTEMD_ROOT, the script's test
	# knob): the drop-in for postgresql@.service, and one for a unit named
	SDR=$WORK/sdroot
	mkdir -p "$SDR/run/systemd/system"
	SANDBOX_SYSTEMD_ROOT=$SDR "$ROOT/scripts/jail-host-setup.sh" postgres > "$WORK/out" 2> "$WORK/err"
	RC=$?
	SANDBOX_SYSTEMD_ROOT=$SDR "$ROOT/scripts/jail-host-setup.sh" postgres --unit sbx-other.service 2>> "$WORK/err"
	dropin=$SDR/etc/systemd/system/postgresql@.service.d/sandbox_ext-cgroup.conf
	want_dropin=$(printf '%s\n' '[Service]' 'Delegate=yes' \
		'ExecStartPost=+/usr/local/libexec/sandbox_ext/jail-host-setup.sh --service-cgroup postgres')
	t "systemd host: jail-host-setup.sh writes postgresql@.service's drop-in: Delegate=yes, ExecStartPost=+ its installed copy --service-cgroup postgres" \
		'[ $RC = 0 ] && [ "$(grep -v "^#" "$dropin")" = "$want_dropin" ] && err_has "systemd: $dropin written" && err_has "no daemon-reload"'
	t "systemd host: the installed copy is this script, executable; --unit names another unit's drop-in; no temporary file left" \
		'cmp -s "$ROOT/scripts/jail-host-setup.sh" "$SDR/usr/local/libexec/sandbox_ext/jail-host-setup.sh" && [ -x "$SDR/usr/local/libexec/sandbox_ext/jail-host-setup.sh" ] && grep -qx "ExecStartPost=+/usr/local/libexec/sandbox_ext/jail-host-setup.sh --service-cgroup postgres" "$SDR/etc/systemd/system/sbx-other.service.d/sandbox_ext-cgroup.conf" && [ -z "$(find "$SDR" -name "*.tmp")" ]'
	rm -rf "$SDR"
fi

# ---- sandbox-runner's unit: Delegate=yes, User=, ExecStart via --enter-cgroup --
# What systemd does for that unit, without systemd: the unit's cgroup R,
# chowned to the unit's User= (Delegate=yes: the directory, cgroup.procs,
# cgroup.subtree_control, cgroup.threads), the main process started in R
# as that user, running the unit's own ExecStart chain with the runner
# replaced by a runner-like script: a resident launcher and one-shot jails
# with --require-cgroup, as the runner starts them (require_cgroup = on).
runner_unit() {
	local name=$1 delegate=$2
	RU=$CG/system.slice/$name.service
	# systemd enables every controller on the way to a Delegate=yes unit
	mkdir -p "$CG/system.slice"
	for c in +memory +pids +cpu; do echo $c > "$CG/system.slice/cgroup.subtree_control"; done
	mkdir -p "$RU"
	[ "$delegate" = yes ] && chown "$RUID:$RUID" "$RU" "$RU/cgroup.procs" "$RU/cgroup.subtree_control" "$RU/cgroup.threads"
	RL=$WORK/$name
	rm -rf "$RL"
	mkdir -m 0755 "$RL"
	mkdir -m 0700 "$RL/ws" "$RL/run"
	chown -R "$RUID:$RUID" "$RL"
	cat > "$RL/runner-like.sh" <<-EOF
	cat /proc/self/cgroup > $RL/cgroup
	$BIN --serve $RL/run/jail.sock --pool 1 --quiet 2> $RL/launcher.err &
	lp=\$!
	n=0
	while [ ! -S $RL/run/jail.sock ] && [ \$n -lt 600 ]; do sleep 0.1; n=\$((n + 1)); done
	printf '%s\n' 'sleep $((MARK + 7)) & while [ ! -e /workspace/stop ]; do sleep 0.1; done' |
		$BIN --client $RL/run/jail.sock --language shell --workspace $RL/ws --memory 72M --pids 19 \
			--require-cgroup --verdict-fd 3 > $RL/served.out 2> $RL/served.err 3> $RL/served.verdict
	rm -f $RL/ws/stop
	printf '%s\n' 'x = bytearray(1 << 30); x[::4096] = b"x" * len(x[::4096]); print("survived")' |
		$BIN --language python --workspace $RL/ws --memory 64M --require-cgroup --verdict-fd 3 \
			> $RL/oom.out 2> $RL/oom.err 3> $RL/oom.verdict
	kill -TERM \$lp
	wait
	EOF
	# ExecStart as the unit has it, the runner's path and arguments replaced
	sh -c 'echo $$ > "$1/cgroup.procs" && u=$2 && shift 2 && exec setpriv --reuid="$u" --regid="$u" --clear-groups -- "$@"' \
		sh "$RU" "$RUID" "$ROOT/scripts/jail-host-setup.sh" "$es_mode" /bin/bash "$RL/runner-like.sh" \
		> "$RL/unit.out" 2> "$RL/unit.err" &
	RUPID=$!
}
stamp "runner-unit"
if part runner-unit; then
	echo "# sandbox-runner's unit (src/runner/sandbox-runner.service) without systemd"
	UNITF=$ROOT/src/runner/sandbox-runner.service
	RUID=4242			# the unit's User=: an account of its own
	read -r es_setup es_mode es_rest <<<"$(sed -n 's/^ExecStart=//p' "$UNITF")"
	t "runner unit: Delegate=yes, a User=, ExecStart = sandbox-jail-host-setup --enter-cgroup <the runner>" \
		'grep -qx "Delegate=yes" "$UNITF" && grep -q "^User=." "$UNITF" && [ "${es_setup##*/}" = sandbox-jail-host-setup ] && [ "$es_mode" = --enter-cgroup ] && [[ "$es_rest" == */sandbox-runner\ * ]]'
	runner_unit sbx-runner yes
	wait_until "pgrep -f 'sleep $((MARK + 7))' >/dev/null || ! kill -0 $RUPID 2>/dev/null" 600
	rcg=$(cg_of "sleep $((MARK + 7))")
	rlim=$(cat "$CG$rcg/memory.max" "$CG$rcg/pids.max" 2>&1 | tr '\n' ' ')
	touch "$RL/ws/stop"
	wait_until "! kill -0 $RUPID 2>/dev/null" 1200
	wait "$RUPID"
	RC=$?
	take "$RL/unit.err" "$WORK/err"
	take "$RL/served.verdict" "$WORK/verdict"
	RUR=${RU#"$CG"}
	t "runner unit: the runner-like process runs in <unit>/sandbox_ext/service; the unit's cgroup holds no process, its subtree has memory pids cpu" \
		'[ $RC = 0 ] && [ "$(cat "$RL/cgroup")" = "0::$RUR/sandbox_ext/service" ] && [ -z "$(cat "$RU/cgroup.procs")" ] && [ "$(cat "$RU/sandbox_ext/cgroup.subtree_control")" = "cpu memory pids" ] && err_has "delegated to $RUID"'
	t "runner unit: a served run with --require-cgroup gets its v2 slot <unit>/sandbox_ext/srv-* with its limits (memory.max, pids.max +1)" \
		'[ "$(v status)" = exited ] && [ "$(v cgroup)" = v2 ] && [[ "$rcg" == "$RUR/sandbox_ext/srv-"* ]] && [ "$rlim" = "75497472 20 " ]'
	take "$RL/oom.verdict" "$WORK/verdict"
	take "$RL/oom.out" "$WORK/out"
	t "runner unit: a one-shot run with --require-cgroup gets v2 under <unit>/sandbox_ext: oom_killed at 64M" \
		'[ "$(v cgroup)" = v2 ] && [ "$(v oom_killed)" = true ] && ! out_has survived'
	rmdir "$RU"/sandbox_ext/* "$RU/sandbox_ext" "$RU" 2>/dev/null
	# the same unit without Delegate=yes: R stays root's, nothing is moved, and
	# the runner's jails refuse to run (require_cgroup), naming the reason
	runner_unit sbx-runner-nodeleg no
	touch "$RL/ws/stop"
	wait_until "! kill -0 $RUPID 2>/dev/null" 1200
	wait "$RUPID"
	take "$RL/unit.err" "$WORK/err"
	take "$RL/oom.verdict" "$WORK/verdict"
	take "$RL/oom.out" "$WORK/out"
	t "runner unit without Delegate=yes: --enter-cgroup says so and execs the runner where it is; its --require-cgroup runs are setup errors" \
		'err_has "is not delegated to $RUID" && [ "$(cat "$RL/cgroup")" = "0::${RU#"$CG"}" ] && [ "$(v status)" = setup_error ] && grep -q "cgroup" <<<"$(v setup_error)" && [ "$(vf "$RL/served.verdict" status)" = setup_error ]'
	rmdir "$RU" 2>/dev/null
fi

# ---- the supervisor under PostgreSQL (postgres.sh) ------------------------------
stamp "postgres"
if part postgres; then
	echo "# the supervisor under PostgreSQL, the server in $SVC"
	"$ROOT/test/cgroup-v2/postgres.sh" "$BIN" "$SVC" 2>&1 | tee "$WORK/postgres.log" | sed 's/^/    /'
	line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$WORK/postgres.log" | tail -n 1)
	if [ -z "$line" ]; then
		FAIL=$((FAIL + 1))
		echo "FAIL - postgres.sh reported no result"
	else
		PASS=$((PASS + ${line%% passed*}))
		FAIL=$((FAIL + $(sed -E 's/.* ([0-9]+) failed$/\1/' <<<"$line")))
	fi
fi

stamp "done"
tap_summary
[ "$FAIL" = 0 ]
