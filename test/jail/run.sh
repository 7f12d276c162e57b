#!/usr/bin/env bash
# test/jail/run.sh [BINARY]
#
# Attacker's-side tests of sandbox-jail (docs/jail.md, docs/security.md).
# Runs as root and exercises the jail both as root and as the postgres user
# (unprivileged user namespaces).  One line per test; ends with exactly
# "N passed, N failed"; exits non-zero on any failure.  No test times
# anything: waits are bounded only so a broken jail cannot hang the suite.
#
# Environment: JAIL_USERS="root postgres" (default) restricts the users;
# JAIL_SKIP_ASAN=1 / JAIL_SKIP_VALGRIND=1 skip the sanitizer/valgrind part;
# JAIL_ASAN_FULL=1 also runs the whole suite against the ASan/UBSan build
# (by default only a handful of runs use it); JAIL_SKIP_SERVED=1 skips the
# served-mode half (test/jail/served.sh: the same suite through
# `--client` against a `--serve` launcher, plus cross-run checks).
# test/jail/image.sh: runs on an image's root (--image); test/jail/gvisor.sh:
# the escape cases under --isolation gvisor (JAIL_SKIP_GVISOR=1 skips them).
set -u

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${1:-$ROOT/src/jail/sandbox-jail}
case $BIN in /*) ;; *) BIN=$(pwd)/$BIN ;; esac
PY=/usr/bin/python3
USERS=${JAIL_USERS:-root postgres}

KILLED_JAILS=
LAUNCHERS=()
TAG=				# "served " while the suite runs through a launcher
WORK=$(mktemp -d /tmp/jailtest.XXXXXX)
chmod 755 "$WORK"
MARK=$((RANDOM * 32768 + RANDOM + 100000))	# unique sleep durations
cleanup() {
	pkill -KILL -f "sleep $MARK" 2>/dev/null
	for p in "${LAUNCHERS[@]}"; do kill -KILL "$p" 2>/dev/null; done
	sleep 0.1
	for d in "${TESTCG_DIRS[@]}"; do rmdir "$d"/run-* "$d"/srv-* "$d" 2>/dev/null; done
	rm -rf "$WORK"
}
trap cleanup EXIT

if [ "$(id -u)" != 0 ]; then
	echo "test/jail/run.sh must run as root (it also runs the jail as postgres)" >&2
	echo "0 passed, 1 failed"
	exit 1
fi
if [ ! -x "$BIN" ]; then
	echo "no jail binary at $BIN (make -C src/jail)" >&2
	echo "0 passed, 1 failed"
	exit 1
fi

# The delegated cgroup parents (idempotent, normally done by the installer).
"$ROOT/scripts/jail-host-setup.sh" postgres 2>/dev/null

# Other users of this host may run jails under the same delegated parent, so
# the suite's runs use a private child of it (the jail is told with
# --cgroup-parent; v1 uses the same relative path in every hierarchy), which
# makes "nothing left behind" exact.  A few runs below use the default.
CGOPT=()
TESTCG_DIRS=()
if [ -d /sys/fs/cgroup/memory/sandbox_ext ] && [ -d /sys/fs/cgroup/pids/sandbox_ext ]; then
	for h in memory pids cpuacct; do
		[ -d /sys/fs/cgroup/$h/sandbox_ext ] || continue
		mkdir -p /sys/fs/cgroup/$h/sandbox_ext/jailtest-$$ &&
			chown postgres: /sys/fs/cgroup/$h/sandbox_ext/jailtest-$$ &&
			TESTCG_DIRS+=(/sys/fs/cgroup/$h/sandbox_ext/jailtest-$$)
	done
	CGOPT=(--cgroup-parent /sys/fs/cgroup/memory/sandbox_ext/jailtest-$$)
fi

# ok and nok: test/tap.sh (plain lines, TAG before each name); a failure
# shows the last run's verdict and output
TAP_STYLE=plain
. "$ROOT/test/tap.sh"
fail() {
	nok "$*" "verdict: $(cat "$WORK/verdict" 2>/dev/null)" \
		"rc=$RC stdout: $(head -c 300 "$WORK/out" | tr '\n' '|')" \
		"stderr: $(head -c 400 "$WORK/err" | tr '\n' '|')"
}
# t NAME CONDITION: CONDITION is evaluated by the shell
t() {
	local name=$1
	shift
	if eval "$@"; then ok "$name"; else fail "$name [$*]"; fi
}

# Field of the last verdict; INVALID if it is not exactly one JSON object.
v() {
	$PY -c '
import json, sys
try:
    lines = open(sys.argv[1]).read().splitlines()
    assert len(lines) == 1
    d = json.loads(lines[0])
    x = d[sys.argv[2]]
    print(x if isinstance(x, str) else json.dumps(x))
except Exception as e:
    print("INVALID")
' "$WORK/verdict" "$1"
}

# Fresh workspace for user $1 (root runs use one owned by nobody, so the
# payload's outer uid is nobody, never root).
fresh_ws() {
	rm -rf "$WORK/ws"
	mkdir "$WORK/ws"
	if [ "$1" = root ]; then chown 65534:65534 "$WORK/ws"; else chown "$1": "$WORK/ws"; fi
	WS=$WORK/ws
}

# jr USER LANG CODE [jail options...]: run once; sets RC, out/err/verdict files.
jr() {
	local user=$1 lang=$2 code=$3
	shift 3
	printf '%s\n' "$code" > "$WORK/code"
	: > "$WORK/verdict"
	timeout -s KILL 120 runuser -u "$user" -- "$BIN" --language "$lang" \
		--workspace "$WS" --verdict-fd 3 "${CGOPT[@]}" "$@" \
		< "$WORK/code" > "$WORK/out" 2> "$WORK/err" 3> "$WORK/verdict"
	RC=$?
}
# jx USER PATH [jail options...]: --exec PATH once (no code); like jr.
jx() {
	local user=$1 path=$2
	shift 2
	: > "$WORK/verdict"
	timeout -s KILL 120 runuser -u "$user" -- "$BIN" --exec "$path" \
		--workspace "$WS" --verdict-fd 3 "${CGOPT[@]}" "$@" \
		< /dev/null > "$WORK/out" 2> "$WORK/err" 3> "$WORK/verdict"
	RC=$?
}
out_has() { grep -q -- "$1" "$WORK/out"; }
err_has() { grep -q -- "$1" "$WORK/err"; }
survivors() { pgrep -f "sleep $MARK" >/dev/null; }

# The syscall probe and a "setuid root" helper, built once on the host.
gcc -O1 -o "$WORK/probe" "$ROOT/test/jail/probe.c" 2>"$WORK/gcc.err" || cat "$WORK/gcc.err"
mkdir -p "$WORK/suid"
cp "$WORK/probe" "$WORK/suid/probe"
chown root:root "$WORK/suid/probe"
chmod 4755 "$WORK/suid/probe"
mkdir -p "$WORK/skill"
echo "skill data" > "$WORK/skill/README"

# A host-side unix socket listener and a host /tmp marker.
echo "host secret" > "$WORK/host-tmp-marker"
chmod 644 "$WORK/host-tmp-marker"
$PY -c '
import socket, sys, time
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(5)
a = socket.socket(socket.AF_UNIX); a.bind("\0jailtest-abstract-'"$$"'"); a.listen(5)
time.sleep(600)' "$WORK/host.sock" &
LISTENER=$!
chmod 777 "$WORK" 2>/dev/null
sleep 0.3
chmod 755 "$WORK"

suite() {
	local u=$1
	echo "# as $u"

	# --- languages -----------------------------------------------------
	fresh_ws "$u"
	jr "$u" python 'print("hello-py")'
	t "$u: python prints" '[ $RC = 0 ] && out_has hello-py && [ "$(v status)" = exited ] && [ "$(v exit_code)" = 0 ]'
	printf 'echo default-parent\n' > "$WORK/code"
	runuser -u "$u" -- "$BIN" --language shell --workspace "$WS" --verdict-fd 3 \
		< "$WORK/code" > "$WORK/out" 2> "$WORK/err" 3> "$WORK/verdict"
	RC=$?
	t "$u: default (auto-detected) cgroup parent is used" '[ $RC = 0 ] && out_has default-parent && [ "$(v cgroup)" != none ] && { [ ${#CGOPT[@]} = 0 ] || [ "$(v cgroup)" = v1 ]; }'
	jr "$u" node 'console.log("hello-" + "node")'
	t "$u: node prints" '[ $RC = 0 ] && out_has hello-node && [ "$(v exit_code)" = 0 ]'
	jr "$u" shell 'echo hello-$((40+2))'
	t "$u: shell prints" '[ $RC = 0 ] && out_has hello-42 && [ "$(v exit_code)" = 0 ]'
	jr "$u" python 'import numpy, pandas, requests; print("imports", numpy.arange(3).sum(), len(pandas.DataFrame({"a":[1,2]})))'
	t "$u: numpy pandas requests import" 'out_has "imports 3 2" && [ "$(v exit_code)" = 0 ]'
	jr "$u" python 'import sys; print("stdin=%r" % sys.stdin.read())'
	t "$u: stdin is empty" 'out_has "stdin='"''"'"'

	# --- raw exec (--exec): a program of the sandbox, no interpreter ------
	fresh_ws "$u"
	jx "$u" /usr/bin/id
	t "$u: --exec /usr/bin/id prints the sandbox identity" '[ $RC = 0 ] && [ "$(v status)" = exited ] && [ "$(v exit_code)" = 0 ] && out_has "^uid=1000(sandbox) gid=1000(sandbox) groups=1000(sandbox)"'
	jx "$u" /bin/false
	t "$u: --exec exit code reported" '[ $RC = 0 ] && [ "$(v status)" = exited ] && [ "$(v exit_code)" = 1 ]'
	# a script in the workspace, exec'd directly (the kernel reads its #!)
	cat > "$WS/confined.sh" <<-'EOF'
	#!/bin/sh
	id -u
	grep -E "^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp):" /proc/self/status
	ulimit -n
	ulimit -c
	hostname
	ls /proc | grep -c "^[0-9]"
	env | grep -c hunter2
	ls /proc/self/fd | tr "\n" " "; echo
	EOF
	chmod 755 "$WS/confined.sh"
	SECRET_TOKEN=hunter2 jx "$u" /workspace/confined.sh 7</etc/hostname
	t "$u: --exec: uid 1000, no capabilities, NoNewPrivs, seccomp, rlimits" '[ $RC = 0 ] && [ "$(sed -n 1p "$WORK/out")" = 1000 ] && [ "$(grep -c "^Cap.*:[[:space:]]*0000000000000000$" "$WORK/out")" = 5 ] && grep -q "^NoNewPrivs:[[:space:]]*1$" "$WORK/out" && grep -q "^Seccomp:[[:space:]]*2$" "$WORK/out" && [ "$(sed -n 9p "$WORK/out")" = 1024 ] && [ "$(sed -n 10p "$WORK/out")" = 0 ]'
	t "$u: --exec: own hostname, pid namespace, scrubbed env, fds 0-2 only" 'out_has "^sandbox$" && [ "$(sed -n 12p "$WORK/out")" -le 5 ] && [ "$(sed -n 13p "$WORK/out")" = 0 ] && [ "$(sed -n 14p "$WORK/out")" = "0 1 2 3 " ] && [ "$(v cgroup)" != none ]'
	cp "$WORK/probe" "$WS/probe"
	chmod 755 "$WS/probe"
	jx "$u" /workspace/probe
	t "$u: --exec: the seccomp filter is in force (syscall probe)" '[ $RC = 0 ] && out_has "^mount EPERM$" && out_has "^unshare EPERM$" && out_has "^ptrace EPERM$" && out_has "^control_read_badfd EBADF$"'
	jx "$u" /bin/sh -c 'echo HOSTARG'
	t "$u: --exec takes no arguments (the rest is a usage error)" '[ $RC = 2 ] && ! out_has HOSTARG'
	jx "$u" /no/such/program
	t "$u: --exec of a path missing inside -> setup error, exit 1" '[ $RC = 1 ] && [ "$(v status)" = setup_error ] && grep -q "execve /no/such/program" <<<"$(v setup_error)"'
	jx "$u" /tmp
	t "$u: --exec of a directory -> setup error, exit 1" '[ $RC = 1 ] && [ "$(v status)" = setup_error ]'
	jx "$u" /var/lib/postgresql
	t "$u: --exec of a host path that is not in the sandbox -> setup error" '[ $RC = 1 ] && [ "$(v status)" = setup_error ]'

	# --- exit codes, signals, streams ------------------------------------
	jr "$u" python 'import sys; sys.exit(7)'
	t "$u: exit code reported" '[ $RC = 0 ] && [ "$(v status)" = exited ] && [ "$(v exit_code)" = 7 ] && [ "$(v signal)" = null ]'
	jr "$u" node 'process.exit(3)'
	t "$u: node exit code" '[ "$(v exit_code)" = 3 ]'
	jr "$u" shell 'kill -SEGV $$'
	t "$u: signal reported" '[ $RC = 0 ] && [ "$(v status)" = signaled ] && [ "$(v signal)" = 11 ] && [ "$(v exit_code)" = null ]'
	jr "$u" python 'import sys; print("to-out"); print("to-err", file=sys.stderr)'
	t "$u: stdout and stderr separate" 'out_has to-out && ! out_has to-err && err_has to-err && ! err_has to-out && [ "$(v stdout_bytes)" = 7 ] && [ "$(v stderr_bytes)" = 7 ]'

	# A served run may end while its payload still exits (docs/jail.md,
	# "the early end"): its status is read from /proc and its pipes are
	# drained rather than read to EOF.  Output written just before the
	# exit (more than a pipe holds), a thread group's status (a group exit
	# from a thread other than the first; a first thread gone before the
	# others; a fatal signal in a thread) must be what a reaped payload's is.
	jr "$u" python 'import os, sys
sys.stdout.write("a" * 300000); sys.stdout.flush(); sys.stderr.write("b" * 200000); sys.stderr.flush(); os._exit(4)'
	t "$u: output written right before the exit is all there (os._exit)" '[ $RC = 0 ] && [ "$(v exit_code)" = 4 ] && [ "$(stat -c %s "$WORK/out")" = 300000 ] && [ "$(stat -c %s "$WORK/err")" = 200000 ] && [ "$(v stdout_bytes)" = 300000 ] && [ "$(v output_truncated)" = false ]'
	jr "$u" python 'import threading, sys, time
def spin():
    while True: pass
for i in range(3): threading.Thread(target=spin, daemon=True).start()
time.sleep(0.1); print("z" * 100000); sys.exit(5)'
	t "$u: sys.exit with threads still running: its code, all its output" '[ "$(v status)" = exited ] && [ "$(v exit_code)" = 5 ] && [ "$(v stdout_bytes)" = 100001 ]'
	jr "$u" python 'import ctypes, threading, os, time
def later():
    time.sleep(0.3); os._exit(7)
threading.Thread(target=later).start()
ctypes.CDLL(None).pthread_exit(None)'
	t "$u: first thread gone (pthread_exit), another exits the group with 7" '[ "$(v status)" = exited ] && [ "$(v exit_code)" = 7 ]'
	jr "$u" python 'import ctypes, threading, time
threading.Thread(target=lambda: ctypes.string_at(0)).start(); time.sleep(5)'
	t "$u: a thread dies of SIGSEGV: the process is signaled 11" '[ "$(v status)" = signaled ] && [ "$(v signal)" = 11 ]'
	jr "$u" node 'setTimeout(() => { process.stdout.write("n".repeat(200000)); process.exitCode = 9; }, 10)'
	t "$u: node: output of its last tick and its exitCode" '[ "$(v exit_code)" = 9 ] && [ "$(stat -c %s "$WORK/out")" = 200000 ]'

	# streaming: the first line must be readable while the payload still runs
	printf 'import time\nprint("first-line")\ntime.sleep(2)\nprint("second-line")\n' > "$WORK/code"
	: > "$WORK/stream"
	runuser -u "$u" -- "$BIN" --language python --workspace "$WS" --verdict-file /dev/null \
		< "$WORK/code" > "$WORK/stream" 2>/dev/null &
	local jp=$! n=0
	while ! grep -q first-line "$WORK/stream" && [ $n -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
	local seen_first=no seen_second=yes
	grep -q first-line "$WORK/stream" && seen_first=yes
	grep -q second-line "$WORK/stream" || seen_second=no
	local alive=no
	kill -0 $jp 2>/dev/null && alive=yes
	wait $jp
	RC=$?
	t "$u: output streamed before the payload ends" '[ $seen_first = yes ] && [ $seen_second = no ] && [ $alive = yes ] && grep -q second-line "$WORK/stream"'

	# --- time limits -------------------------------------------------------
	jr "$u" shell "sleep $MARK &
setsid sleep $MARK &
( trap '' TERM HUP; ( sleep $MARK & ) ; sleep $MARK ) &
sleep $MARK" --wall-time 1
	sleep 0.2
	t "$u: wall timeout kills the tree (grandchild, setsid, TERM-ignoring)" '[ $RC = 0 ] && [ "$(v status)" = timed_out ] && [ "$(v timed_out)" = true ] && ! survivors'
	jr "$u" shell 'while :; do :; done' --cpu-time 1 --wall-time 30
	t "$u: cpu limit" '[ $RC = 0 ] && [ "$(v timed_out)" = true ] && [ "$(v cpu_ms)" -gt 0 ] && [ "$(v exit_code)" = null ]'
	# each loop alone stays under its own RLIMIT_CPU for a while; only the
	# sum over the sandbox (cgroup accounting) ends the run as timed_out
	# (with rlimits alone the loops die of SIGXCPU and bash exits 0)
	jr "$u" shell 'for i in 1 2 3; do ( while :; do :; done ) & done; wait' --cpu-time 2 --wall-time 600
	t "$u: cpu limit across processes (cgroup sum)" '[ $RC = 0 ] && [ "$(v status)" = timed_out ] && [ "$(v timed_out)" = true ] && [ "$(v cpu_ms)" -ge 2000 ]'

	# --- memory, pids ------------------------------------------------------
	jr "$u" python 'x = bytearray(1 << 30); x[::4096] = b"x" * len(x[::4096]); print("survived")' --memory 128M
	t "$u: memory limit -> oom_killed" '[ $RC = 0 ] && [ "$(v oom_killed)" = true ] && ! out_has survived && [ "$(v cgroup)" != none ] && [ "$(v pids_limit_hit)" = false ]'
	jr "$u" shell "bomb() { bomb | bomb & }; bomb; sleep 1; echo bomb-done" --pids 32 --wall-time 10
	# Contained: forks fail at the limit and the jail tears it all down.
	# Whether the payload's own "echo bomb-done" still gets a process
	# before the wall limit depends on bash's fork-retry back-off and on
	# the machine's load, so a timeout is as good as a clean end here.
	t "$u: fork bomb contained by pids" '[ $RC = 0 ] && err_has "Resource temporarily unavailable" && [ "$(v status)" != setup_error ] && { out_has bomb-done || [ "$(v timed_out)" = true ]; } && ! err_has "could not remove cgroup"'
	t "$u: fork bomb -> pids_limit_hit (pids.events)" '[ "$(v cgroup)" = none ] || [ "$(v pids_limit_hit)" = true ]'

	# --- output and files ----------------------------------------------------
	jr "$u" python 'import sys; sys.stdout.write("y" * 5000000)' --output-limit 100K
	t "$u: output cap -> output_truncated" '[ "$(v output_truncated)" = true ] && [ "$(stat -c %s "$WORK/out")" = 102400 ] && [ "$(v stdout_bytes)" = 5000000 ] && [ "$(v exit_code)" = 0 ]'
	jr "$u" shell 'head -c 100M /dev/zero; echo done >&2'
	t "$u: 100 MB flood is cut at 1 MiB" '[ "$(v output_truncated)" = true ] && [ "$(stat -c %s "$WORK/out")" = 1048576 ] && [ "$(v stdout_bytes)" = 104857600 ] && err_has done'
	jr "$u" python 'import sys
for i in range(100000):
    print("o" * 100); print("e" * 100, file=sys.stderr)' --output-limit 64K
	t "$u: both streams flooded at once: no deadlock, both capped" '[ $RC = 0 ] && [ "$(v exit_code)" = 0 ] && [ "$(v stdout_bytes)" = 10100000 ] && [ "$(v stderr_bytes)" = 10100000 ] && [ "$(stat -c %s "$WORK/out")" = 65536 ]'
	# a reader that holds the pipe open but never reads: the jail must
	# finish on its own (while that reader is still there)
	printf 'while :; do echo flood-flood-flood; done\n' > "$WORK/code"
	: > "$WORK/verdict"
	rm -f "$WORK/fifo"
	mkfifo "$WORK/fifo"
	sleep 600 < "$WORK/fifo" &
	local rp=$!
	timeout -s KILL 60 runuser -u "$u" -- "$BIN" --language shell --workspace "$WS" --wall-time 1 \
		--verdict-fd 3 < "$WORK/code" 3> "$WORK/verdict" 2>/dev/null > "$WORK/fifo"
	RC=$?
	local reader_alive=no
	kill -0 $rp 2>/dev/null && reader_alive=yes
	kill $rp 2>/dev/null
	wait $rp 2>/dev/null
	t "$u: a caller that never reads stdout cannot stop the wall clock" '[ $RC = 0 ] && [ "$(v status)" = timed_out ] && [ $reader_alive = yes ] && [ "$(v output_truncated)" = true ]'
	jr "$u" python 'open("/workspace/big", "wb").write(b"z" * (2 << 20))' --file-size 1M
	t "$u: file size cap -> file_too_large (python, EFBIG)" '[ $RC = 0 ] && [ "$(v file_too_large)" = true ] && [ "$(stat -c %s "$WS/big")" -le 1048576 ]'
	fresh_ws "$u"
	jr "$u" shell 'head -c 2M /dev/zero > /workspace/big2; echo rc=$?' --file-size 1M
	t "$u: file size cap -> file_too_large (shell, SIGXFSZ)" '[ "$(v file_too_large)" = true ] && out_has "rc=153"'
	fresh_ws "$u"
	jr "$u" shell 'for i in $(seq 1 40); do head -c 900K /dev/zero > /workspace/f$i || break; sleep 0.05; done; echo wrote' --file-size 1M --workspace-size 4M
	t "$u: workspace size cap (many small files)" '[ $RC = 0 ] && [ "$(v file_too_large)" = true ] && [ "$(du -sk "$WS" | cut -f1)" -lt 20000 ]'
	fresh_ws "$u"
	jr "$u" python 'i = 0
while True:
    open("/workspace/e%d" % i, "w").close()
    i += 1' --workspace-entries 1000 --wall-time 20
	t "$u: workspace entry cap (files without end) -> file_too_large, killed before the wall clock" '[ $RC = 0 ] && [ "$(v file_too_large)" = true ] && [ "$(v timed_out)" = false ] && [ "$(v status)" = signaled ]'
	jr "$u" shell 'echo small > /workspace/out.txt' --workspace-entries 1000
	t "$u: workspace already over --workspace-entries -> setup error" '[ $RC = 1 ] && [ "$(v status)" = setup_error ] && [ ! -e "$WS/out.txt" ]'
	fresh_ws "$u"
	head -c 3M /dev/zero > "$WS/input.bin"
	jr "$u" shell 'echo small > /workspace/out.txt' --file-size 1M --workspace-size 2M
	t "$u: workspace already over --workspace-size -> setup error" '[ $RC = 1 ] && [ "$(v status)" = setup_error ] && [ ! -e "$WS/out.txt" ]'
	jr "$u" shell 'wc -c < /workspace/input.bin; echo small > /workspace/out.txt' --file-size 1M
	t "$u: a big input file put there by the caller is not blamed on the payload" '[ $RC = 0 ] && out_has 3145728 && [ "$(v file_too_large)" = false ]'
	fresh_ws "$u"
	jr "$u" python 'open("/tmp/t", "wb").write(b"q" * (3 << 20))' --tmp-size 1M
	t "$u: /tmp is size-limited" 'err_has "No space left" && [ "$(v exit_code)" = 1 ]'

	# --- host visibility -------------------------------------------------
	jr "$u" python 'import os
for p in ["/root", "/home", "/var/lib/postgresql", "/run/postgresql", "/etc/shadow",
          "/etc/postgresql", "/etc/ssl/private", "/sys", "/sys/kernel", "/proc/sys",
          "/proc/kcore", "/var", "/run", "/mnt", "/opt", "'"$WORK"'", "/tmp/host-tmp-marker",
          "/tmp/'"${WORK##*/}"'", "/boot", "/srv"]:
    if os.path.lexists(p):
        print("VISIBLE", p)
print("checked")'
	t "$u: host files are not visible" 'out_has checked && ! out_has VISIBLE'
	jr "$u" shell 'ls /proc | grep -c "^[0-9]"; cat /proc/1/status | grep -c sandbox-jail; hostname'
	t "$u: /proc shows only the sandbox, hostname is sandbox" '[ "$(head -1 "$WORK/out")" -le 4 ] && out_has "^sandbox$"'
	jr "$u" shell 'for d in / /usr /etc /bin /sandbox; do touch $d/x 2>/dev/null && echo WROTE $d; done; echo ro-checked'
	t "$u: system dirs and root are read-only" 'out_has ro-checked && ! out_has WROTE'
	fresh_ws "$u"
	jr "$u" shell 'echo data > /workspace/kept; mkdir /workspace/sub; echo more > /workspace/sub/f; ls -ln /workspace'
	local want_uid=65534
	[ "$u" = postgres ] && want_uid=$(id -u postgres)
	t "$u: workspace writable, files persist on the host owned by the mapped uid" '[ "$(cat "$WS/kept")" = data ] && [ "$(stat -c %u "$WS/kept")" = $want_uid ] && [ "$(stat -c %u "$WS/sub/f")" = $want_uid ]'
	jr "$u" shell 'cat /skills/x/README; echo hi > /skills/x/new 2>/dev/null && echo WROTE' --ro-bind "$WORK/skill:/skills/x"
	t "$u: --ro-bind is readable, not writable" 'out_has "skill data" && ! out_has WROTE && [ ! -e "$WORK/skill/new" ]'

	# --- identity and privilege ----------------------------------------------
	jr "$u" shell 'id -u; id -g; grep -E "^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp):" /proc/self/status'
	t "$u: uid/gid inside are 1000" '[ "$(sed -n 1p "$WORK/out")" = 1000 ] && [ "$(sed -n 2p "$WORK/out")" = 1000 ]'
	t "$u: all capability sets are zero" '[ "$(grep -c "^Cap.*:[[:space:]]*0000000000000000$" "$WORK/out")" = 5 ]'
	t "$u: NoNewPrivs 1 and Seccomp 2" 'grep -q "^NoNewPrivs:[[:space:]]*1$" "$WORK/out" && grep -q "^Seccomp:[[:space:]]*2$" "$WORK/out"'
	# securebits (PR_GET_SECUREBITS): NOROOT, NO_SETUID_FIXUP, NO_CAP_AMBIENT_RAISE
	# and KEEP_CAPS off, each locked (0xef), whether the payload's process set
	# them itself or inherited them from init (sandbox.c, jail_drop_bounding)
	jr "$u" shell 'python3 -c "import ctypes; print(\"secbits\", ctypes.CDLL(None).prctl(27, 0, 0, 0, 0))"'
	t "$u: securebits locked against regaining capabilities" 'out_has "^secbits 239$"'
	jr "$u" shell '/suid/probe euid; ls -l /suid/probe' --ro-bind "$WORK/suid:/suid"
	t "$u: setuid-root binary gains nothing" 'out_has "euid=1000 uid=1000" && out_has "^-rws"'
	cp "$WORK/probe" "$WS/probe"
	chmod 755 "$WS/probe"
	jr "$u" shell '/workspace/probe'
	local blocked=yes s
	for s in mount umount2 pivot_root chroot unshare setns ptrace process_vm_readv \
		process_vm_writev bpf perf_event_open keyctl add_key request_key userfaultfd \
		io_uring_setup io_uring_enter io_uring_register open_by_handle_at name_to_handle_at \
		swapon swapoff acct settimeofday clock_settime adjtimex syslog fsopen open_tree \
		move_mount personality_noaslr clone3 socket_netlink socket_packet socket_vsock \
		socket_unspec clone_newuser clone_newnet; do
		grep -Eq "^$s (EPERM|ENOSYS)$" "$WORK/out" || { blocked=no; echo "       not blocked: $(grep "^$s " "$WORK/out" || echo "$s missing")"; }
	done
	t "$u: syscall probe: every denied call is blocked" '[ $blocked = yes ]'
	t "$u: syscall probe controls get through (probe is meaningful)" 'out_has "^control_read_badfd EBADF$" && out_has "^control_socket_inet OK$" && out_has "^control_socket_unix OK$" && out_has "^control_clone_plain OK$" && out_has "^control_personality_query OK$"'
	jr "$u" shell '/workspace/probe kexec; echo "status=$?"'
	t "$u: kexec_load kills the process (SIGSYS)" 'out_has "status=159" && ! out_has "^kexec_load"'
	jr "$u" python 'import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
print("unshare", libc.unshare(0x10000000), ctypes.get_errno())
print("mount", libc.mount(b"none", b"/tmp", b"tmpfs", 0, None), ctypes.get_errno())'
	t "$u: python ctypes unshare/mount fail with EPERM" 'out_has "unshare -1 1" && out_has "mount -1 1"'

	# --- network --------------------------------------------------------
	jr "$u" python 'import socket
def try_(name, fam, addr):
    s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(3)
    try:
        s.connect(addr); print(name, "CONNECTED")
    except OSError as e:
        print(name, "failed", e.errno)
try_("inet", socket.AF_INET, ("1.1.1.1", 53))
try_("unix", socket.AF_UNIX, "'"$WORK/host.sock"'")
try_("abstract", socket.AF_UNIX, "\0jailtest-abstract-'"$$"'")
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(1)
c = socket.create_connection(l.getsockname(), timeout=3); a, _ = l.accept()
c.sendall(b"ping"); print("loopback", a.recv(4).decode())
try:
    socket.getaddrinfo("example.com", 80); print("dns RESOLVED")
except OSError as e:
    print("dns failed")'
	t "$u: no network: 1.1.1.1, host unix socket, host abstract socket fail" 'out_has "inet failed" && out_has "unix failed" && out_has "abstract failed" && ! out_has CONNECTED'
	t "$u: loopback works, DNS does not" 'out_has "loopback ping" && out_has "dns failed"'

	# --- runtime installs ---------------------------------------------------
	jr "$u" shell 'python3 -m pip install six 2>&1; echo "pip=$?"' --wall-time 60
	# the installers are not in the sandbox (rootfs.c, hide_installers)
	t "$u: pip install fails clearly" 'out_has "pip=1" && out_has "No module named pip"'
	jr "$u" shell 'pip install six 2>&1; echo "pip=$?"' --wall-time 60
	t "$u: the pip command says installs are disabled" 'out_has "pip=127" && out_has "pip: not available in the sandbox (runtime package installs are disabled)"'
	if [ -e /usr/bin/npm ]; then
		jr "$u" shell 'cd /tmp && npm install left-pad 2>&1; echo "npm=$?"' --wall-time 60
		t "$u: npm install fails clearly" 'out_has "npm=127" && out_has "npm: command not found"'
	fi

	# --- fds and environment -----------------------------------------------
	SECRET_TOKEN=hunter2 jr "$u" shell 'ls /proc/self/fd | tr "\n" " "; echo; env | cut -d= -f1 | sort | tr "\n" " "; echo; env | grep -c hunter2' 7</etc/hostname
	t "$u: only fds 0 1 2 (+ ls's own) are open" '[ "$(sed -n 1p "$WORK/out")" = "0 1 2 3 " ]'
	t "$u: environment is scrubbed" '! out_has SECRET && [ "$(sed -n 3p "$WORK/out")" = 0 ] && out_has "PATH" && out_has "HOME"'

	# --- termination -----------------------------------------------------------
	printf 'echo started\nsleep %s &\nsetsid sleep %s &\nsleep %s\n' $MARK $MARK $MARK > "$WORK/code"
	: > "$WORK/verdict"
	runuser -u "$u" -- "$BIN" --language shell --workspace "$WS" --verdict-fd 3 \
		< "$WORK/code" > "$WORK/out" 2> "$WORK/err" 3> "$WORK/verdict" &
	jp=$!
	n=0
	while ! grep -q started "$WORK/out" && [ $n -lt 600 ]; do sleep 0.1; n=$((n + 1)); done
	pkill -TERM -P $jp 2>/dev/null || kill -TERM $jp	# runuser's child is the jail
	# some runuser versions forward, some exec: signal the jail itself
	pkill -TERM -f "^$BIN --language shell --workspace $WS" 2>/dev/null
	wait $jp
	RC=$?
	sleep 0.2
	t "$u: SIGTERM -> killed verdict, exit 0, no survivors" '[ $RC = 0 ] && [ "$(v status)" = killed ] && [ "$(v killed)" = true ] && ! survivors'

	# --- supervisor crash: the jail dies with its parent, the sandbox with it
	local victim
	for victim in parent jail; do
		printf 'echo started\nsleep %s &\nsetsid sleep %s &\nsleep %s\n' $MARK $MARK $MARK > "$WORK/code"
		runuser -u "$u" -- "$BIN" --language shell --workspace "$WS" --verdict-file /dev/null \
			< "$WORK/code" > "$WORK/out" 2> "$WORK/err" &
		jp=$!
		n=0
		while ! grep -q started "$WORK/out" && [ $n -lt 600 ]; do sleep 0.1; n=$((n + 1)); done
		local jailpid
		jailpid=$(pgrep -P $jp)
		KILLED_JAILS="$KILLED_JAILS $jailpid"
		if [ $victim = parent ]; then
			kill -KILL $jp		# runuser: the jail's parent
		else
			kill -KILL "$jailpid"
		fi
		wait $jp 2>/dev/null
		n=0
		while survivors && [ $n -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
		t "$u: SIGKILL of the $victim leaves no sandbox process behind" 'grep -q started "$WORK/out" && ! survivors'
	done

	# --- errors ----------------------------------------------------------------
	WS=$WORK/does-not-exist
	jr "$u" shell 'echo never'
	t "$u: setup error (missing workspace) -> exit 1, setup_error" '[ $RC = 1 ] && [ "$(v status)" = setup_error ] && [ "$(v setup_error)" != null ] && ! out_has never'
	fresh_ws "$u"
	ln -s "$WORK/skill" "$WORK/ws-link"
	WS=$WORK/ws-link
	jr "$u" shell 'echo never'
	t "$u: symlinked workspace is refused" '[ $RC = 1 ] && [ "$(v status)" = setup_error ]'
	rm -f "$WORK/ws-link"
	fresh_ws "$u"
	jr "$u" shell 'echo x' --cgroup-parent /nonexistent --require-cgroup
	t "$u: --require-cgroup without a cgroup -> setup error" '[ $RC = 1 ] && [ "$(v status)" = setup_error ]'
	jr "$u" shell 'echo fallback' --cgroup-parent /nonexistent
	t "$u: no cgroup -> runs with rlimits, cgroup none" '[ $RC = 0 ] && out_has fallback && [ "$(v cgroup)" = none ]'
	jr "$u" shell 'bomb() { bomb | bomb & }; bomb; sleep 1; echo bomb-done' --cgroup-parent /nonexistent --pids 32 --wall-time 10
	t "$u: no cgroup -> fork bomb still contained (RLIMIT_NPROC); pids_limit_hit unknown, so false" '[ $RC = 0 ] && err_has "Resource temporarily unavailable" && [ "$(v cgroup)" = none ] && [ "$(v pids_limit_hit)" = false ]'
	jr "$u" shell 'ln -s / /workspace/rootlink; ln -s /workspace /workspace/loop; mkdir -p /workspace/a/b/c; ln -s /etc/passwd /workspace/a/b/c/pw; echo ok'
	t "$u: planted symlinks do not confuse the host-side scan" '[ $RC = 0 ] && [ "$(v file_too_large)" = false ] && [ -L "$WS/rootlink" ]'
}

for u in $USERS; do
	suite "$u"
done

# The same suite through a resident launcher, and what only it can break.
if [ "${JAIL_SKIP_SERVED:-0}" != 1 ]; then
	. "$ROOT/test/jail/served.sh"
fi

# --image: a root built from an image (test/jail/image.sh)
LAUNCHER_EXTRA=()
. "$ROOT/test/jail/image.sh"

# --isolation gvisor: the escape cases on gVisor's kernel (test/jail/gvisor.sh)
. "$ROOT/test/jail/gvisor.sh"

# --- usage errors (user-independent) ---------------------------------------------
fresh_ws root
for args in "" "--language perl --workspace $WS" "--language python" \
	"--language python --workspace $WS --memory lots" "--language python --workspace $WS --bogus" \
	"--language python --workspace $WS --ro-bind /etc:/usr/x" "--language python --workspace $WS extra" \
	"--exec bin/true --workspace $WS" "--exec /bin/../bin/true --workspace $WS" \
	"--exec /bin/true --language shell --workspace $WS" "--exec /bin/true --code-file /etc/hostname --workspace $WS"; do
	"$BIN" $args </dev/null >/dev/null 2>"$WORK/err"
	RC=$?
	t "usage error exits 2: '${args:-<none>}'" '[ $RC = 2 ] && err_has usage'
done
fresh_ws root
printf 'print("from-file")\n' > "$WORK/code.py"
"$BIN" --language python --workspace "$WS" --code-file "$WORK/code.py" --verdict-file "$WORK/verdict" \
	</dev/null >"$WORK/out" 2>"$WORK/err"
RC=$?
t "--code-file and --verdict-file" '[ $RC = 0 ] && out_has from-file && [ "$(v exit_code)" = 0 ]'
echo keep > "$WORK/target"
ln -sf "$WORK/target" "$WORK/vlink"
"$BIN" --language python --workspace "$WS" --code-file "$WORK/code.py" --verdict-file "$WORK/vlink" \
	</dev/null >"$WORK/out" 2>"$WORK/err"
RC=$?
t "--verdict-file never writes through a symlink" '[ $RC = 1 ] && [ "$(cat "$WORK/target")" = keep ] && ! out_has from-file'
"$BIN" --language shell --workspace "$WORK/nope" --quiet --verdict-fd 3 </dev/null >"$WORK/out" 2>"$WORK/err" 3>"$WORK/verdict"
RC=$?
t "--quiet: setup error only in the verdict" '[ $RC = 1 ] && [ ! -s "$WORK/err" ] && [ "$(v status)" = setup_error ]'
# The served init's seccomp program (loaded before its request, seccomp.c)
# against the payload's: the syscall probe under each, as root in a mount
# namespace of its own, must see exactly the same calls blocked, except
# that the mount calls reach the kernel under init's (EFAULT and the like
# from the bad arguments; init drops its capabilities after its mounts).
if gcc -O1 -I "$ROOT/src/jail/obj" -o "$WORK/filterexec" "$ROOT/test/jail/filterexec.c" 2>"$WORK/gcc.err"; then
	unshare -m "$WORK/filterexec" payload "$WORK/probe" > "$WORK/probe-payload" 2>&1
	unshare -m "$WORK/filterexec" init "$WORK/probe" > "$WORK/probe-init" 2>&1
	filters_ok=yes
	while read -r s e; do
		i=$(sed -n "s/^$s //p" "$WORK/probe-init")
		# and setns into a mount namespace (a warm interpreter's own, on
		# kernels where init cannot enter the root ahead: rootfs.c)
		case " mount umount2 pivot_root chroot fsopen open_tree move_mount setns_mnt " in
		*" $s "*) [ "$e" = EPERM ] && [ -n "$i" ] && [ "$i" != EPERM ] && [ "$i" != ENOSYS ] ;;
		*) [ "$i" = "$e" ] ;;
		esac || { filters_ok=no; echo "       $s: payload $e, init ${i:-missing}"; }
	done < "$WORK/probe-payload"
	t "init filter = payload filter without the mount calls (syscall probe under each)" '[ $filters_ok = yes ] && [ "$(wc -l < "$WORK/probe-payload")" -ge 40 ] && grep -q "^unshare EPERM$" "$WORK/probe-init" && grep -q "^setns EPERM$" "$WORK/probe-init" && grep -q "^setns_mnt EBADF$" "$WORK/probe-init" && grep -q "^control_read_badfd EBADF$" "$WORK/probe-init"'
else
	cat "$WORK/gcc.err"
	t "init filter = payload filter without the mount calls (syscall probe under each)" false
fi
WS="$WORK/no\"such
dir"
jr root shell 'true'
t "verdict JSON escapes quotes and newlines" '[ "$(v status)" = setup_error ] && [ $RC = 1 ]'
# a cgroup2 directory without memory/pids (this host binds them to v1):
# fallback to rlimits, or a setup error with --require-cgroup; the per-run
# directory is removed either way
V2=$(awk '{ for (i = 1; i <= NF; i++) if ($i == "-") break;
	if ($(i+1) == "cgroup2") { print $5; exit } }' /proc/self/mountinfo)
if [ -n "$V2" ] && ! grep -qw memory "$V2/cgroup.controllers" 2>/dev/null &&
	mkdir -p "$V2/jailtest-$$" 2>/dev/null; then
	fresh_ws root
	jr root shell 'echo v2-fallback' --cgroup-parent "$V2/jailtest-$$"
	t "v2 parent without controllers -> rlimits only, cgroup none" '[ $RC = 0 ] && out_has v2-fallback && [ "$(v cgroup)" = none ]'
	jr root shell 'echo never' --cgroup-parent "$V2/jailtest-$$" --require-cgroup
	t "v2 parent without controllers + --require-cgroup -> setup error" '[ $RC = 1 ] && [ "$(v status)" = setup_error ] && ! out_has never'
	t "v2 per-run cgroups removed" '! ls -d "$V2/jailtest-$$"/run-* >/dev/null 2>&1'
	rmdir "$V2/jailtest-$$"
fi
leftover=$(ls -d "${TESTCG_DIRS[@]/%//run-*}" 2>/dev/null)
t "no run-* cgroups left behind by the suite's runs" '[ -z "$leftover" ]'

# SIGKILLed jails (above, default parent) leave an empty run-<pid> behind;
# jail-host-setup.sh removes it once the kernel has let go of it (the
# sandbox's orphaned init must first be reaped by the host's pid 1, which
# can take a moment; bounded wait, not a timing assertion).
stale_left() {
	local p
	for p in $KILLED_JAILS; do
		ls -d /sys/fs/cgroup/*/sandbox_ext/run-$p >/dev/null 2>&1 && return 0
	done
	return 1
}
n=0
while :; do
	"$ROOT/scripts/jail-host-setup.sh" postgres 2>/dev/null
	stale_left || break
	[ $n -ge 50 ] && break
	sleep 0.2
	n=$((n + 1))
done
stale=no
stale_left && stale=yes
t "jail-host-setup.sh removes the run-* cgroups of SIGKILLed jails" '[ $stale = no ]'

# --- sanitizer and valgrind runs --------------------------------------------------
if [ "${JAIL_SKIP_ASAN:-0}" != 1 ]; then
	if make -s -C "$ROOT/src/jail" SANITIZE=1 >"$WORK/asan-build" 2>&1; then
		ASAN_BIN=$ROOT/src/jail/sandbox-jail-asan
		if [ "${JAIL_ASAN_FULL:-0}" = 1 ]; then
			# the whole suite against the sanitizer build; an ASan/UBSan
			# report aborts the jail, which fails the test that ran it
			JAIL_SKIP_ASAN=1 JAIL_SKIP_VALGRIND=1 "$0" "$ASAN_BIN" > "$WORK/asan-full.log" 2>&1
			sed 's/^/  asan: /' "$WORK/asan-full.log" | grep -v "^  asan: ok"
			read -r ap _ af _ < <(tail -1 "$WORK/asan-full.log")
			PASS=$((PASS + ${ap:-0}))
			FAIL=$((FAIL + ${af:-1}))
			echo "# full suite under ASan/UBSan: ${ap:-?} passed, ${af:-?} failed"
		fi
		for u in $USERS; do
			fresh_ws "$u"
			asan_bad=no
			for c in 'print("asan-ok")' 'import time; time.sleep(10)' 'x = bytearray(1 << 30)' 'import sys; sys.stdout.write("y" * 3000000)'; do
				printf '%s\n' "$c" > "$WORK/code"
				runuser -u "$u" -- env ASAN_OPTIONS=detect_leaks=1 "$ASAN_BIN" --language python \
					--workspace "$WS" --wall-time 2 --memory 128M --output-limit 64K --verdict-fd 3 \
					< "$WORK/code" > "$WORK/out" 2> "$WORK/err" 3> "$WORK/verdict"
				RC=$?
				if [ $RC != 0 ] || grep -Eq "AddressSanitizer|runtime error|LeakSanitizer" "$WORK/err" ||
					[ "$(v status)" = INVALID ]; then asan_bad=yes; fi
			done
			WS=$WORK/nope
			jr "$u" shell true
			runuser -u "$u" -- "$ASAN_BIN" --language shell --workspace "$WS" --verdict-fd 3 \
				< /dev/null > "$WORK/out" 2> "$WORK/err" 3> "$WORK/verdict"
			[ $? = 1 ] && ! grep -Eq "AddressSanitizer|runtime error|LeakSanitizer" "$WORK/err" || asan_bad=yes
			t "$u: ASan/UBSan build: print, timeout, oom, truncation, setup error are clean" '[ $asan_bad = no ]'
		done
	else
		RC=x
		t "ASan/UBSan build" false
	fi
fi
# valgrind runs the jail's parent (--trace-children=no).  The sandbox child
# is a fork, not an exec, so it runs under valgrind too; there valgrind
# refuses to lower RLIMIT_NOFILE's hard limit and misreads mount(2) with a
# NULL type, so that run ends in a setup_error verdict.  What is asserted is
# the parent: no memory errors, no definite leaks, a valid verdict, exit 1.
if [ "${JAIL_SKIP_VALGRIND:-0}" != 1 ] && command -v valgrind >/dev/null; then
	fresh_ws root
	printf 'print("vg-ok")\n' > "$WORK/code"
	valgrind --trace-children=no --leak-check=full \
		"$BIN" --language python --workspace "$WS" --verdict-fd 3 \
		< "$WORK/code" > "$WORK/out" 2> "$WORK/err" 3> "$WORK/verdict"
	RC=$?
	vpid=$(sed -n 's/^==\([0-9]*\)== Command:.*/\1/p' "$WORK/err" | head -1)
	t "valgrind (jail parent): 0 errors, no definite leaks, valid verdict" \
		'[ -n "$vpid" ] && grep -q "^==$vpid== ERROR SUMMARY: 0 errors" "$WORK/err" && ! grep -q "^==$vpid==.*definitely lost: [1-9]" "$WORK/err" && [ "$(v status)" != INVALID ]'
	echo "# valgrind: $(grep "^==$vpid== ERROR SUMMARY" "$WORK/err"); verdict status $(v status): $(v setup_error)"
fi

kill $LISTENER 2>/dev/null
tap_summary
[ "$FAIL" = 0 ]
