#!/usr/bin/env bash
# test/warm/run.sh [BINARY]
#
# Warm interpreters (docs/jail.md, "Warm interpreters"), no PostgreSQL:
#   equivalence  a corpus of programs run through a launcher with warm
#                interpreters and through one without: the same stdout,
#                stderr, exit status, verdict flags and workspace files;
#                every warm run must really have been warm ("warm":true);
#   attacker     what code can learn or change about the state prepared
#                before it arrived, and that nothing of one run reaches
#                the next;
#   launcher     settings that are refused, a preload that fails, a
#                request a warm interpreter cannot take.
# Runs as root; the launchers run as JAIL_USERS (default "postgres root").
# Ends with "N passed, N failed".  No test times anything: every wait is
# bounded only so that a broken launcher cannot hang the suite.
# T=REGEX runs only the cases whose name matches.
set -u

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${1:-$ROOT/src/jail/sandbox-jail}
case $BIN in /*) ;; *) BIN=$(pwd)/$BIN ;; esac
PY=/usr/bin/python3
USERS=${JAIL_USERS:-postgres root}
T=${T:-}
MODULES=numpy,pandas,requests

LAUNCHERS=()
WORK=$(mktemp -d /tmp/warmtest.XXXXXX)
chmod 755 "$WORK"
cleanup() {
	for p in "${LAUNCHERS[@]}"; do kill -TERM "$p" 2>/dev/null; done
	sleep 0.3
	for p in "${LAUNCHERS[@]}"; do kill -KILL "$p" 2>/dev/null; done
	rm -rf "$WORK"
}
trap cleanup EXIT

if [ "$(id -u)" != 0 ] || [ ! -x "$BIN" ]; then
	echo "test/warm/run.sh must run as root, with the jail built (make -C src/jail)" >&2
	echo "0 passed, 1 failed"
	exit 1
fi
"$ROOT/scripts/jail-host-setup.sh" postgres >/dev/null 2>&1
make -s -C "$ROOT/src/egress" >/dev/null	# the proxy of the egress runs

TAG=				# "fallback " for the pass on the older kernels' path
# ok, nok, check: test/tap.sh (plain lines, TAG before each name)
TAP_STYLE=plain
. "$ROOT/test/tap.sh"
selected() { [ -z "$T" ] || [[ $1 =~ $T ]]; }

# v FILE FIELD: a field of a verdict file (INVALID unless one JSON line)
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
' "$1" "$2"
}
# the flags the equivalence compares (everything but clocks, sizes, warm_*)
flags() {
	$PY -c '
import json, sys
try:
    d = json.loads(open(sys.argv[1]).read())
    print(" ".join("%s=%s" % (k, json.dumps(d.get(k))) for k in
        ("status", "exit_code", "signal", "timed_out", "oom_killed", "output_truncated",
         "file_too_large", "pids_limit_hit", "killed", "cgroup", "setup_error")))
except Exception as e:
    print("INVALID", e)
' "$1"
}

# start USER NAME [--serve options]: a launcher as USER; sets SOCK_NAME
start() {
	local u=$1 name=$2 dir n=0
	shift 2
	dir=$WORK/l-$name
	mkdir -p "$dir"
	chown "$u": "$dir"
	chmod 700 "$dir"
	# shellcheck disable=SC2086
	runuser -u "$u" -- env ${LAUNCHER_ENV:-} "$BIN" --serve "$dir/s" --pool 2 --keep-running "$@" \
		>/dev/null 2>>"$WORK/launcher-$name.log" &
	local rpid=$!
	disown
	while [ ! -S "$dir/s" ] && [ $n -lt 100 ]; do sleep 0.05; n=$((n + 1)); done
	# the launcher is runuser's child (its workers are the launcher's)
	LAUNCHERS+=("$(pgrep -P "$rpid" | head -1)")
	printf -v "SOCK_$name" '%s' "$dir/s"
}
# ready SOCK LANG(0 python, 1 node): wait (at most 120 s) until the page
# counts a waiting interpreter; status 1 if none came
ready() {
	local n=0
	while [ $n -lt 600 ]; do
		if [ -f "$1.warm" ] && [ "$($PY -c '
import struct, sys
d = open(sys.argv[1], "rb").read()
print(struct.unpack_from("i", d, 16 + 4 * int(sys.argv[2]))[0])' "$1.warm" "$2")" -gt 0 ]; then
			return 0
		fi
		sleep 0.2
		n=$((n + 1))
	done
	return 1
}
# page_worker SOCK LANG: the pid of a worker whose LANG interpreter waits
# (the page's held[]), or nothing; page_held SOCK LANG: what it holds
page_worker() {
	$PY -c '
import struct, sys
d = open(sys.argv[1], "rb").read()
for i in range(16):
    pid, lang, held = struct.unpack_from("iiQ", d, 40 + 16 * i)
    if pid > 0 and lang == int(sys.argv[2]):
        print(pid if sys.argv[3] == "pid" else held); break' "$1.warm" "$2" "${3:-pid}"
}
page_held() { page_worker "$1" "$2" held; }
# page_take SOCK LANG: take one waiting interpreter off the page's count,
# as a caller's claim does (the test's launchers have one place per
# language: nothing else writes that count while it waits)
page_take() {
	$PY -c '
import mmap, os, struct, sys
fd = os.open(sys.argv[1], os.O_RDWR)
m = mmap.mmap(fd, 0)
off = 16 + 4 * int(sys.argv[2])
n = struct.unpack_from("i", m, off)[0]
struct.pack_into("i", m, off, n - 1 if n > 0 else 0)' "$1.warm" "$2"
}
EGR_N=0
# egress_opts USER: EGR, a run's egress options (a policy allowing one
# name, nothing resolvable: the run makes no connection; the proxy starts)
egress_opts() {
	local d=$WORK/egr-$1
	mkdir -p "$d"
	printf 'sandbox-egress/1\nrule a host allowed.test 443\n' > "$d/policy"
	chmod 755 "$d"
	chmod 644 "$d/policy"
	if [ "$1" = root ]; then chmod 1777 "$d"; else chown "$1": "$d"; fi
	EGR=(--egress-policy "$d/policy" --egress-log "$d/log.$((++EGR_N))" --egress-resolver 127.0.0.1:53
		--egress-proxy "$ROOT/src/egress/sandbox-egress")
}
# ws_new USER DIR: an empty workspace the run's outer uid owns
ws_new() {
	rm -rf "$2"
	mkdir -p "$2"
	if [ "$1" = root ]; then chown 65534:65534 "$2"; else chown "$1": "$2"; fi
}
# runc USER SOCK OUT LANG CODEFILE [options]: one client run; OUT.{out,err,verdict,rc,ws}
runc() {
	local u=$1 sock=$2 out=$3 lang=$4 code=$5
	shift 5
	ws_new "$u" "$out.wsdir"
	[ -n "${SEED:-}" ] && cp -r "$SEED"/. "$out.wsdir"/ && chown -R --reference="$out.wsdir" "$out.wsdir"
	timeout -s KILL 120 runuser -u "$u" -- "$BIN" --client "$sock" --language "$lang" \
		--workspace "$out.wsdir" --code-file "$code" --verdict-fd 3 "$@" \
		> "$out.out" 2> "$out.err" 3> "$out.verdict" < /dev/null
	echo $? > "$out.rc"
	# a .pyc's 16-byte header holds its source's mtime (the second a run
	# wrote it): the rest is what must match
	(cd "$out.wsdir" && find . -type f | sort | while read -r f; do
		case $f in
		*.pyc) echo "$f $(tail -c +17 "$f" | sha256sum | cut -c1-16)" ;;
		*) echo "$f $(sha256sum < "$f" | cut -c1-16)" ;;
		esac
	done) > "$out.ws"
}

# ---------------------------------------------------------------- corpus
# Each case: a file $WORK/corpus/NAME.{py,js}; optional NAME.opts (client
# options) and NAME.norm (a sed script both outputs go through: only for
# what the docs name as a difference).
C=$WORK/corpus
mkdir -p "$C"
cat > "$C/hello.py" <<'EOF'
print("hello"); import sys; print("err", file=sys.stderr)
EOF
cat > "$C/identity.py" <<'EOF'
import sys, os
print(__name__, __file__, sys.argv, os.getcwd(), __package__, __spec__, __cached__)
print(type(__loader__).__name__, __loader__.path, __builtins__.__name__)
print(sorted(k for k in globals()))
print(sys.flags)
print(sys.path)
print(sys.executable, sys.orig_argv)
print(sorted(os.environ.items()))
print(sys._getframe().f_back, len(__import__("inspect").stack()))
EOF
cat > "$C/main_guard.py" <<'EOF'
def main():
    print("in main")
if __name__ == "__main__":
    main()
EOF
cat > "$C/traceback.py" <<'EOF'
def f(x):
    return g(x)
def g(x):
    try:
        return 1 / x
    except ZeroDivisionError as e:
        raise ValueError("bad %r" % x) from e
print("before")
f(0)
EOF
cat > "$C/syntax.py" <<'EOF'
print("never")
def f(:
    pass
EOF
cat > "$C/exit3.py" <<'EOF'
import sys; print("x"); sys.exit(3)
EOF
cat > "$C/exit_msg.py" <<'EOF'
import sys; sys.exit("a message")
EOF
cat > "$C/exit_none.py" <<'EOF'
raise SystemExit(None)
EOF
cat > "$C/os_exit.py" <<'EOF'
import os, sys, atexit
atexit.register(lambda: print("atexit must not run"))
sys.stdout.write("partial"); os._exit(7)
EOF
cat > "$C/sigterm.py" <<'EOF'
import os, signal; print("bye", flush=True); os.kill(os.getpid(), signal.SIGTERM)
EOF
cat > "$C/sigsegv.py" <<'EOF'
import ctypes; ctypes.string_at(0)
EOF
cat > "$C/kbint.py" <<'EOF'
import atexit
atexit.register(lambda: print("atexit ran"))
raise KeyboardInterrupt
EOF
cat > "$C/excepthook.py" <<'EOF'
import sys
sys.excepthook = lambda t, v, tb: print("hook:", t.__name__, v, tb.tb_frame.f_code.co_filename, tb.tb_next is None)
raise RuntimeError("custom")
EOF
cat > "$C/atexit.py" <<'EOF'
import atexit, sys
atexit.register(lambda: print("second"))
atexit.register(lambda: print("first", file=sys.stderr))
print("main")
EOF
cat > "$C/stdin.py" <<'EOF'
import sys; data = sys.stdin.read(); print(repr(data), sys.stdin.isatty(), input.__name__)
try:
    input()
except EOFError as e:
    print("EOFError", e)
EOF
cat > "$C/threads.py" <<'EOF'
import threading, time
out = []
def w(i):
    time.sleep(0.05); out.append(i)
ts = [threading.Thread(target=w, args=(i,)) for i in range(4)]
for t in ts: t.start()
def late():
    time.sleep(0.2); print("non-daemon thread finished", sorted(out))
threading.Thread(target=late).start()
print("main done", threading.active_count() >= 2)
EOF
cat > "$C/mp.py" <<'EOF'
import multiprocessing as mp
def sq(x): return x * x
if __name__ == "__main__":
    with mp.Pool(2) as p:
        print(p.map(sq, range(10)))
    q = mp.Process(target=print, args=("child",)); q.start(); q.join(); print(q.exitcode)
EOF
cat > "$C/warnings.py" <<'EOF'
import warnings
warnings.warn("a user warning")
warnings.warn("deprecated here", DeprecationWarning)
def f(): warnings.warn("from f", stacklevel=2)
f()
import numpy as np
print(np.array([1.0]) / 0)
np.float64(1) / 0
print(np.__version__ is not None)
EOF
cat > "$C/recursion.py" <<'EOF'
import sys
print(sys.getrecursionlimit())
def r(n): return r(n + 1)
r(0)
EOF
cat > "$C/import_ws.py" <<'EOF'
try:
    import helper
except ImportError as e:
    print("not on the path:", e)
import sys
sys.path.insert(0, "/workspace")
import helper
print(helper.VALUE, helper.__file__)
EOF
cat > "$C/files.py" <<'EOF'
import os
with open("/workspace/out.txt", "w") as f:
    f.write("written\n")
g = open("/workspace/unclosed.txt", "w")
g.write("flushed at exit\n")
os.mkdir("/workspace/d")
open("/workspace/d/x.bin", "wb").write(os.urandom(0) + b"\0" * 1000)
print(sorted(os.listdir("/workspace")))
EOF
cat > "$C/pandas.py" <<'EOF'
import pandas as pd
df = pd.DataFrame({"k": ["a", "b", "a", "b"], "v": [1, 2, 3, 4]})
print(df.groupby("k").sum())
EOF
cat > "$C/numpy.py" <<'EOF'
import numpy as np
print(np.arange(12).reshape(3, 4).sum(axis=0), np.linalg.det(np.eye(3)))
EOF
cat > "$C/memory.py" <<'EOF'
x = bytearray(400 * 1024 * 1024)
print("never")
EOF
echo "--memory 200M" > "$C/memory.py.opts"
# just under the limit, without an import: cold it fits; warm it must too
# (the interpreter's ~49 MB are not the program's: the slot's limit has
# room for them, docs)
cat > "$C/memory_near.py" <<'EOF'
x = b"\1" * (160 * 1024 * 1024)
print("fits", len(x))
EOF
echo "--memory 200M" > "$C/memory_near.py.opts"
cat > "$C/output.py" <<'EOF'
import sys
sys.stdout.write("x" * 100000); sys.stderr.write("y" * 5000)
print("end")
EOF
echo "--output-limit 2K" > "$C/output.py.opts"
cat > "$C/walltime.py" <<'EOF'
print("start", flush=True)
import time
while True: time.sleep(0.01)
EOF
echo "--wall-time 1" > "$C/walltime.py.opts"
cat > "$C/cputime.py" <<'EOF'
print("spin", flush=True)
while True: pass
EOF
echo "--cpu-time 1 --wall-time 20" > "$C/cputime.py.opts"
# the jail's CPU watch ends both (RLIMIT_CPU is a second later, a backstop)
cat > "$C/filesize.py" <<'EOF'
open("/workspace/big", "wb").write(b"z" * 300000)
print("wrote")
EOF
echo "--file-size 100K" > "$C/filesize.py.opts"
cat > "$C/fork_bomb.py" <<'EOF'
import os, time
n = 0
try:
    for i in range(200):
        if os.fork() == 0:
            time.sleep(2); os._exit(0)
        n += 1
except OSError as e:
    print("fork refused", e.errno)
EOF
echo "--pids 16" > "$C/fork_bomb.py.opts"
# node
cat > "$C/hello.js" <<'EOF'
console.log("hello"); console.error("err");
EOF
cat > "$C/identity.js" <<'EOF'
console.log(require.main === module, __filename, __dirname, process.argv, process.cwd(), module.id);
console.log(process.execArgv, process.title, Object.keys(require.cache));
console.log(Object.entries(process.env).sort());
EOF
cat > "$C/exit.js" <<'EOF'
process.on("exit", (c) => console.log("exit event", c)); console.log("x"); process.exit(3);
EOF
cat > "$C/throw.js" <<'EOF'
function f() { throw new TypeError("bad thing"); }
console.log("before");
f();
EOF
# node's stack below the program's own frames is the loader's: the docs
# name it as the difference (the bootstrap's frames); compare the rest
echo '/^    at .*node:internal/d; /^    at Module\./d; /^    at Function\./d; /^    at Object\.<anonymous> (\/sandbox\/main.js:1[0-9]:/d' > "$C/throw.js.norm"
cat > "$C/signal.js" <<'EOF'
console.log("bye"); process.kill(process.pid, "SIGTERM");
EOF
cat > "$C/async.js" <<'EOF'
setTimeout(() => console.log("timeout"), 10);
Promise.resolve().then(() => console.log("microtask"));
process.nextTick(() => console.log("tick"));
console.log("sync");
EOF
cat > "$C/stdin.js" <<'EOF'
let d = ""; process.stdin.on("data", (c) => d += c); process.stdin.on("end", () => console.log("eof", JSON.stringify(d)));
EOF
cat > "$C/files.js" <<'EOF'
const fs = require("fs"); fs.writeFileSync("/workspace/n.txt", "node\n"); console.log(fs.readdirSync("/workspace"));
EOF
cat > "$C/reject.js" <<'EOF'
Promise.reject(new Error("unhandled"));
EOF
echo '/^    at /d' > "$C/reject.js.norm"
mkdir -p "$WORK/seed"
echo 'VALUE = 42' > "$WORK/seed/helper.py"

# compare NAME USER: the case through both launchers
compare() {
	local f=$1 u=$2 name ext lang langi opts=() a b
	ext=${f##*.}
	name=$(basename "$f" ".$ext")
	if [ "$ext" = py ]; then lang=python; langi=0; else lang=node; langi=1; fi
	[ -f "$C/$name.$ext.opts" ] && read -r -a opts < "$C/$name.$ext.opts"
	name=$name.$ext
	a=$WORK/r/$u-$name-cold
	b=$WORK/r/$u-$name-warm
	mkdir -p "$WORK/r"
	SEED=
	[ "$name" = import_ws.py ] && SEED=$WORK/seed
	runc "$u" "$COLD" "$a" "$lang" "$f" "${opts[@]}"
	if ! ready "$WARM" "$langi"; then
		nok "$u $name: no warm $lang interpreter came up" "$(tail -3 "$WORK/launcher-warm$u.log")"
		return
	fi
	runc "$u" "$WARM" "$b" "$lang" "$f" "${opts[@]}"
	SEED=
	if [ -f "$C/$name.norm" ]; then
		for x in "$a" "$b"; do sed -i -f "$C/$name.norm" "$x.out" "$x.err"; done
	fi
	local bad=()
	[ "$(v "$b.verdict" warm)" = true ] || bad+=("the warm run was not warm: $(cat "$b.verdict")")
	[ "$(v "$a.verdict" warm)" = false ] || bad+=("the cold run was warm")
	cmp -s "$a.out" "$b.out" || bad+=("stdout differs: cold [$(head -c 300 "$a.out" | tr '\n' '|')] warm [$(head -c 300 "$b.out" | tr '\n' '|')]")
	cmp -s "$a.err" "$b.err" || bad+=("stderr differs: cold [$(head -c 600 "$a.err" | tr '\n' '|')] warm [$(head -c 600 "$b.err" | tr '\n' '|')]")
	cmp -s "$a.rc" "$b.rc" || bad+=("rc differs: $(cat "$a.rc") vs $(cat "$b.rc")")
	if [ -f "$C/$name.flags" ]; then
		# the docs name this difference: compare what they say holds
		local fa fb
		fa=$(flags "$a.verdict" | tr ' ' '\n' | grep -vE "$(cat "$C/$name.flags")" | tr '\n' ' ')
		fb=$(flags "$b.verdict" | tr ' ' '\n' | grep -vE "$(cat "$C/$name.flags")" | tr '\n' ' ')
		[ "$fa" = "$fb" ] || bad+=("flags differ: cold [$fa] warm [$fb]")
	else
	[ "$(flags "$a.verdict")" = "$(flags "$b.verdict")" ] || bad+=("flags differ: cold [$(flags "$a.verdict")] warm [$(flags "$b.verdict")]")
	fi
	cmp -s "$a.ws" "$b.ws" || bad+=("workspace differs: cold [$(tr '\n' '|' < "$a.ws")] warm [$(tr '\n' '|' < "$b.ws")]")
	if [ ${#bad[@]} -eq 0 ]; then ok "$u equivalence $name ($(flags "$a.verdict" | cut -d' ' -f1-3))"
	else nok "$u equivalence $name" "${bad[@]}"; fi
}

# ------------------------------------------------------------ attacker side
# probe USER NAME CODE [options]: run CODE warm (must be warm) and cold,
# files $WORK/p/NAME-{warm,cold}.*
probe() {
	local u=$1 name=$2 lang=python langi=0
	shift 2
	case $name in *_js) lang=node; langi=1 ;; esac
	mkdir -p "$WORK/p"
	printf '%s\n' "$1" > "$WORK/p/$name.code"
	shift
	runc "$u" "$COLD" "$WORK/p/$name-cold" "$lang" "$WORK/p/$name.code" "$@"
	ready "$WARM" "$langi"
	runc "$u" "$WARM" "$WORK/p/$name-warm" "$lang" "$WORK/p/$name.code" "$@"
}
pw() { cat "$WORK/p/$1-warm.out"; }
pc() { cat "$WORK/p/$1-cold.out"; }
warm_ok() { [ "$(v "$WORK/p/$1-warm.verdict" warm)" = true ]; }

attacker() {
	local u=$1

	# environment, descriptors, identity, confinement: as a cold run's
	probe "$u" env 'import os; print(sorted(os.environ.items())); print(open("/proc/self/environ","rb").read())'
	if warm_ok env && [ "$(pw env)" = "$(pc env)" ]; then ok "$u attacker: environment (os.environ, /proc/self/environ) is a cold run's"
	else nok "$u attacker: environment" "$(pw env | head -c 400)" "$(pc env | head -c 400)"; fi

	probe "$u" fds 'import os
fds = sorted(int(x) for x in os.listdir("/proc/self/fd"))
print(fds)
for fd in (3, 1000, 1001, 1002, 1003, 1004):
    try:
        print(fd, os.readlink("/proc/self/fd/%d" % fd))
    except OSError as e:
        print(fd, "closed")
print([os.readlink("/proc/self/fd/%d" % f).split(":")[0] for f in (0, 1, 2)])'
	if warm_ok fds && [ "$(pw fds)" = "$(pc fds)" ] && grep -q '^1000 closed' "$WORK/p/fds-warm.out"; then
		ok "$u attacker: descriptors are a cold run's (0, 1, 2; the bootstrap's 1000-1004 closed)"
	else nok "$u attacker: descriptors" "warm $(pw fds | tr '\n' '|')" "cold $(pc fds | tr '\n' '|')"; fi

	probe "$u" status 'import re
s = open("/proc/self/status").read()
print([l for l in s.splitlines() if re.match(r"(Uid|Gid|Groups|NoNewPrivs|Seccomp|Seccomp_filters|Cap\w+|NSpid|PPid):", l)])
print(open("/proc/self/cgroup").read().strip())
import os; print(os.getpid(), os.getppid(), os.getsid(0) == os.getpid(), os.getpgrp() == os.getpid())
print(sorted(p for p in os.listdir("/proc") if p.isdigit()))
print(open("/proc/1/cmdline","rb").read().split(b"\0")[1:2])
try:
    print(open("/proc/1/environ","rb").read()[:20])
except OSError as e:
    print("/proc/1/environ:", e.strerror)
try:
    print(len(open("/proc/1/maps").read()))
except OSError as e:
    print("/proc/1/maps:", e.strerror)'
	if warm_ok status && [ "$(pw status)" = "$(pc status)" ]; then ok "$u attacker: ids, capabilities, seccomp (and its number of filters), no_new_privs, cgroup, session, pid 1 as a cold run's"
	else nok "$u attacker: confinement" "warm $(pw status | tr '\n' '|')" "cold $(pc status | tr '\n' '|')"; fi

	probe "$u" mounts 'import os
print(sorted(l.split()[4] for l in open("/proc/self/mountinfo")))
print(open("/etc/python3.11/sitecustomize.py").read() == open("/usr/lib/python3.11/sitecustomize.py").read())
print(os.path.exists("/.warm-sitecustomize.py"), sorted(os.listdir("/")), sorted(os.listdir("/sandbox")))'
	if warm_ok mounts && [ "$(pw mounts)" = "$(pc mounts)" ] &&
		diff <(sed -n '/^# sandbox-jail/,$p' /etc/python3.11/sitecustomize.py) /dev/null >/dev/null; then
		ok "$u attacker: mount table, /, /sandbox and sitecustomize.py as a cold run's (the bootstrap's bind is gone)"
	else nok "$u attacker: mounts" "warm $(pw mounts | tr '\n' '|' | head -c 600)" "cold $(pc mounts | tr '\n' '|' | head -c 600)"; fi
	if grep -q "$(head -1 /etc/python3.11/sitecustomize.py)" /etc/python3.11/sitecustomize.py &&
		! grep -q sandbox /etc/python3.11/sitecustomize.py; then ok "$u attacker: the host's sitecustomize.py is untouched"
	else nok "$u attacker: host sitecustomize.py changed"; fi

	probe "$u" rlimits 'import resource as r
for n in ("RLIMIT_NOFILE", "RLIMIT_CORE", "RLIMIT_MSGQUEUE", "RLIMIT_FSIZE", "RLIMIT_NPROC", "RLIMIT_AS", "RLIMIT_STACK"):
    print(n, r.getrlimit(getattr(r, n)))
s, h = r.getrlimit(r.RLIMIT_CPU)
print("cpu soft >= 3:", s >= 3, "hard = soft + 1:", h == s + 1)' --cpu-time 3 --file-size 1M
	if warm_ok rlimits && [ "$(pw rlimits)" = "$(pc rlimits)" ]; then ok "$u attacker: rlimits as a cold run's (RLIMIT_CPU counts the start's CPU on top)"
	else nok "$u attacker: rlimits" "warm $(pw rlimits | tr '\n' '|')" "cold $(pc rlimits | tr '\n' '|')"; fi

	# Node: what its process can look at, as a cold one's
	probe "$u" env_js 'const fs = require("fs");
console.log(JSON.stringify(Object.entries(process.env).sort()), JSON.stringify(fs.readFileSync("/proc/self/environ", "latin1")));
console.log(fs.readdirSync("/proc/self/fd").map(Number).sort((a, b) => a - b).filter((fd) => { try { return !fs.readlinkSync("/proc/self/fd/" + fd).startsWith("anon_inode:"); } catch (e) { return false; } }).join(" "));
for (const fd of [1000, 1001, 1002, 1003, 1004]) { try { fs.readlinkSync("/proc/self/fd/" + fd); console.log(fd, "open"); } catch (e) { console.log(fd, "closed"); } }
console.log(fs.readFileSync("/proc/self/status", "utf8").split("\n").filter((l) => /^(Uid|Gid|Groups|NoNewPrivs|Seccomp|Seccomp_filters|Cap\w+|NSpid|PPid):/.test(l)).join("|"));
console.log(fs.readFileSync("/proc/self/limits", "utf8").split("\n").filter((l) => !/^Max cpu time/.test(l)).join("|"));
console.log(fs.readFileSync("/proc/self/cgroup", "utf8").trim(), process.getuid(), process.getgid(), process.ppid);' --file-size 1M
	if warm_ok env_js && [ "$(pw env_js)" = "$(pc env_js)" ] && grep -q '^1000 closed' "$WORK/p/env_js-warm.out"; then
		ok "$u attacker: node's environment, descriptors (1000-1004 closed), ids, capabilities, seccomp, rlimits but the CPU's, cgroup as a cold run's"
	else nok "$u attacker: node's process" "warm $(pw env_js | tr '\n' '|' | head -c 900)" "cold $(pc env_js | tr '\n' '|' | head -c 900)"; fi

	# two warm runs share nothing that was random at the start: each is
	# its own interpreter (hash seed, random's and numpy's generators,
	# where libc is mapped)
	local rnd='import random, numpy
print(hash("x"), random.getrandbits(64), numpy.random.get_state()[1][1:4].tolist())
print([l.split("-")[0] for l in open("/proc/self/maps") if "libc.so" in l][:1])'
	printf '%s\n' "$rnd" > "$WORK/p/rnd.code"
	ready "$WARM" 0
	runc "$u" "$WARM" "$WORK/p/rnd1" python "$WORK/p/rnd.code"
	ready "$WARM" 0
	runc "$u" "$WARM" "$WORK/p/rnd2" python "$WORK/p/rnd.code"
	local r1 r2 same=0
	r1=$(cat "$WORK/p/rnd1.out"); r2=$(cat "$WORK/p/rnd2.out")
	if [ "$(v "$WORK/p/rnd1.verdict" warm)" = true ] && [ "$(v "$WORK/p/rnd2.verdict" warm)" = true ] &&
		[ "$(wc -l < "$WORK/p/rnd1.out")" = 2 ] && [ "$(sed -n 2p "$WORK/p/rnd1.out")" != "[]" ]; then
		# field by field: hash, getrandbits, numpy state, libc base
		for i in 1 2 3; do
			[ "$(sed -n 1p "$WORK/p/rnd1.out" | cut -d' ' -f$i)" = "$(sed -n 1p "$WORK/p/rnd2.out" | cut -d' ' -f$i)" ] && same=1
		done
		[ "$(sed -n 2p "$WORK/p/rnd1.out")" = "$(sed -n 2p "$WORK/p/rnd2.out")" ] && same=1
		if [ $same = 0 ]; then ok "$u attacker: two warm runs differ in hash('x'), random, numpy's generator state and libc's address"
		else nok "$u attacker: two warm runs share random state" "[$r1]" "[$r2]"; fi
	else nok "$u attacker: random state probe" "[$r1]" "[$r2]" "$(cat "$WORK/p/rnd1.verdict")"; fi

	# the start's CPU is not the run's: a warm `pass` reports less CPU
	# than its interpreter's start used
	printf 'pass\n' > "$WORK/p/pass.code"
	ready "$WARM" 0
	runc "$u" "$WARM" "$WORK/p/pass" python "$WORK/p/pass.code"
	if [ "$(v "$WORK/p/pass.verdict" warm)" = true ] &&
		[ "$(v "$WORK/p/pass.verdict" cpu_ms)" -lt "$(v "$WORK/p/pass.verdict" warm_cpu_ms)" ] 2>/dev/null; then
		ok "$u verdict: a warm pass's cpu_ms is below its interpreter's warm_cpu_ms (the start is not the run's)"
	else nok "$u verdict: a warm pass's CPU" "$(cat "$WORK/p/pass.verdict")"; fi

	probe "$u" maps 'import os
m = open("/proc/self/maps").read()
paths = sorted({l.split()[5] for l in m.splitlines() if len(l.split()) > 5})
bad = [p for p in paths if not (p.startswith("/usr/") or p.startswith("[") or p.startswith("/dev/zero") or p.startswith("/etc/ld.so.cache"))]
print("foreign mappings:", bad)
print("sandbox-request" in m, "warm-sitecustomize" in m)'
	if warm_ok maps && [ "$(head -1 "$WORK/p/maps-warm.out")" = "foreign mappings: []" ] &&
		[ "$(sed -n 2p "$WORK/p/maps-warm.out")" = "False False" ]; then
		ok "$u attacker: memory maps hold only system files (the preloaded modules' libraries), nothing of the request's plumbing"
	else nok "$u attacker: maps" "$(pw maps | tr '\n' '|')"; fi

	# the start printed nothing into the run: "this" prints the Zen at import
	printf 'print("run output")\n' > "$WORK/p/zen.code"
	ready "$ZEN" 0
	runc "$u" "$ZEN" "$WORK/p/zen" python "$WORK/p/zen.code"
	if [ "$(v "$WORK/p/zen.verdict" warm)" = true ] && [ "$(cat "$WORK/p/zen.out")" = "run output" ] &&
		[ ! -s "$WORK/p/zen.err" ]; then ok "$u attacker: what a preloaded module printed at its import does not reach the run (--warm-modules this)"
	else nok "$u attacker: start output leaked" "$(cat "$WORK/p/zen.out" | head -3 | tr '\n' '|')" "$(cat "$WORK/p/zen.verdict")"; fi
	printf 'import sys; print("this" in sys.modules)\nimport this\n' > "$WORK/p/zen2.code"
	ready "$ZEN" 0
	runc "$u" "$ZEN" "$WORK/p/zen2" python "$WORK/p/zen2.code"
	check "$u attacker: a preloaded module is in sys.modules (the documented difference): its import prints nothing again" "True" "$(cat "$WORK/p/zen2.out")"

	# nothing of one run reaches the next
	cat > "$WORK/p/taint.code" <<'EOF'
import os, sys, subprocess, pandas, numpy
pandas.TAINT = numpy.TAINT = sys.TAINT = 1
os.environ["TAINT"] = "1"
open("/tmp/taint", "w").write("x"); open("/dev/shm/taint", "w").write("x")
sys.modules["taint_module"] = sys
subprocess.Popen(["/bin/sh", "-c", "sleep 30 &"], start_new_session=True)
import gc; gc.unfreeze()
print("tainted", sorted(p for p in os.listdir("/proc") if p.isdigit()) != [])
EOF
	cat > "$WORK/p/check.code" <<'EOF'
import os, sys, pandas, numpy
print(hasattr(pandas, "TAINT"), hasattr(numpy, "TAINT"), hasattr(sys, "TAINT"), "TAINT" in os.environ,
      os.path.exists("/tmp/taint"), os.listdir("/tmp"), os.listdir("/dev/shm"), "taint_module" in sys.modules)
print(sorted(p for p in os.listdir("/proc") if p.isdigit()) == sorted(["1", str(os.getpid())]))
EOF
	ready "$WARM" 0
	runc "$u" "$WARM" "$WORK/p/taint" python "$WORK/p/taint.code"
	ready "$WARM" 0
	runc "$u" "$WARM" "$WORK/p/check" python "$WORK/p/check.code"
	if [ "$(v "$WORK/p/taint.verdict" warm)" = true ] && [ "$(v "$WORK/p/check.verdict" warm)" = true ] &&
		[ "$(cat "$WORK/p/check.out")" = "False False False False False [] [] False
True" ]; then ok "$u attacker: nothing of a warm run (module state, environment, /tmp, /dev/shm, a setsid daemon) reaches the next"
	else nok "$u attacker: state reached the next run" "$(cat "$WORK/p/taint.out" "$WORK/p/check.out" | tr '\n' '|')" "$(cat "$WORK/p/check.err" | head -c 300)"; fi
	if ! pgrep -u "$([ "$u" = root ] && echo nobody || echo "$u")" -f "sleep 30" >/dev/null; then ok "$u attacker: the warm run's daemon died with its run"
	else nok "$u attacker: a warm run's daemon survived"; fi

	# the CPU of the start is reported apart, not in cpu_ms; its memory is in the run's
	if [ "$(v "$WORK/p/check.verdict" warm_cpu_ms)" -gt 0 ] 2>/dev/null &&
		[ "$(v "$WORK/p/check.verdict" warm_memory_bytes)" -gt 0 ] 2>/dev/null &&
		[ "$(v "$WORK/p/check.verdict" peak_memory_bytes)" -ge "$(v "$WORK/p/check.verdict" warm_memory_bytes)" ] 2>/dev/null; then
		ok "$u verdict: warm_cpu_ms and warm_memory_bytes reported; peak_memory_bytes includes what the interpreter held"
	else nok "$u verdict: warm fields" "$(cat "$WORK/p/check.verdict")"; fi

	# a request with less memory than the interpreter holds is still warm:
	# the slot's limit is the request's plus what the interpreter holds
	printf 'print("small")\n' > "$WORK/p/small.code"
	ready "$WARM" 0
	runc "$u" "$WARM" "$WORK/p/small" python "$WORK/p/small.code" --memory 8M
	if [ "$(v "$WORK/p/small.verdict" warm)" = true ] && [ "$(cat "$WORK/p/small.out")" = small ] &&
		[ "$(v "$WORK/p/small.verdict" status)" = exited ] &&
		[ "$(v "$WORK/p/small.verdict" warm_memory_bytes)" -gt $((8 << 20)) ] 2>/dev/null; then
		ok "$u a request with less memory than the warm interpreter holds runs warm (its limit has room for the interpreter)"
	else nok "$u small memory request" "$(cat "$WORK/p/small.verdict")"; fi
	# and the program's own memory is still bounded by its request: 60 MB
	# under 32M is killed warm as cold
	printf 'x = b"\\1" * (60 << 20)\nprint("survived")\n' > "$WORK/p/over.code"
	ready "$WARM" 0
	runc "$u" "$WARM" "$WORK/p/over" python "$WORK/p/over.code" --memory 32M
	runc "$u" "$COLD" "$WORK/p/overc" python "$WORK/p/over.code" --memory 32M
	if [ "$(v "$WORK/p/over.verdict" warm)" = true ] && [ "$(v "$WORK/p/over.verdict" oom_killed)" = true ] &&
		[ "$(v "$WORK/p/overc.verdict" oom_killed)" = true ] && [ ! -s "$WORK/p/over.out" ]; then
		ok "$u a warm program over its request is OOM-killed as a cold one"
	else nok "$u warm memory bound" "$(cat "$WORK/p/over.verdict")" "$(cat "$WORK/p/overc.verdict")"; fi
	# the interpreter it did not take is gone; the next one comes up
	if ready "$WARM" 0; then ok "$u the pool refills after that"; else nok "$u the pool did not refill"; fi

	# an egress run is never warm (its sandbox is cloned for it, whose init
	# makes the proxy's socket): it takes no interpreter from the pool (the
	# one waiting still waits), and its peak is a cold run's, not the
	# interpreter's
	local w0 held
	ready "$WARM" 0
	w0=$(page_worker "$WARM" 0)
	held=$(page_held "$WARM" 0)
	egress_opts "$u"
	runc "$u" "$WARM" "$WORK/p/egr" python "$WORK/p/small.code" "${EGR[@]}"
	if [ "$(cat "$WORK/p/egr.out")" = small ] && [ "$(v "$WORK/p/egr.verdict" warm)" = false ] &&
		[ -n "$w0" ] && [ "$(page_worker "$WARM" 0)" = "$w0" ] && kill -0 "$w0" 2>/dev/null &&
		[ "$(v "$WORK/p/egr.verdict" peak_memory_bytes)" -lt $((held / 2)) ] 2>/dev/null; then
		ok "$u an egress run takes no warm interpreter (the waiting one still waits) and its peak is a cold run's"
	else nok "$u egress run and the pool" "waiting worker before $w0 after $(page_worker "$WARM" 0), held $held" \
		"$(cat "$WORK/p/egr.verdict")" "$(head -c 300 "$WORK/p/egr.err")"; fi
	# one that reaches a waiting interpreter anyway (a caller that claimed
	# it: the page's count taken by hand here) is served by a fresh clone
	# in that slot, whose counters then start after the interpreter's end
	ready "$WARM" 0
	held=$(page_held "$WARM" 0)
	page_take "$WARM" 0
	egress_opts "$u"
	runc "$u" "$WARM.python" "$WORK/p/egr2" python "$WORK/p/small.code" "${EGR[@]}"
	if [ "$(cat "$WORK/p/egr2.out")" = small ] && [ "$(v "$WORK/p/egr2.verdict" warm)" = false ] &&
		[ "$(v "$WORK/p/egr2.verdict" peak_memory_bytes)" -lt $((held / 2)) ] 2>/dev/null; then
		ok "$u a warm interpreter thrown away for an egress run: the run's peak memory is its own, not the interpreter's"
	else nok "$u thrown-away interpreter's counters" "held $held" "$(cat "$WORK/p/egr2.verdict")" "$(head -c 300 "$WORK/p/egr2.err")"; fi

	# a workspace on a file system mounted after the interpreter started is
	# not in its copy of the host tree: a fresh sandbox, never a setup error
	ready "$WARM" 0
	mkdir -p "$WORK/latermnt"
	mount -t tmpfs -o size=1M tmpfs "$WORK/latermnt"
	chmod 755 "$WORK/latermnt"
	printf 'import os; print(os.listdir("/workspace"))\n' > "$WORK/p/later.code"
	ws_new "$u" "$WORK/latermnt/ws"
	echo hi > "$WORK/latermnt/ws/seen"
	chown -R --reference="$WORK/latermnt/ws" "$WORK/latermnt/ws"
	timeout -s KILL 60 runuser -u "$u" -- "$BIN" --client "$WARM" --language python \
		--workspace "$WORK/latermnt/ws" --code-file "$WORK/p/later.code" --verdict-fd 3 \
		> "$WORK/p/later.out" 2> "$WORK/p/later.err" 3> "$WORK/p/later.verdict" < /dev/null
	umount "$WORK/latermnt"
	if [ "$(cat "$WORK/p/later.out")" = "['seen']" ] && [ "$(v "$WORK/p/later.verdict" warm)" = false ] &&
		[ "$(v "$WORK/p/later.verdict" peak_memory_bytes)" -lt $((held / 2)) ] 2>/dev/null; then
		ok "$u a workspace on a file system mounted after the interpreter started gets a fresh sandbox (its peak its own)"
	else nok "$u later mount" "$(cat "$WORK/p/later.verdict")" "$(cat "$WORK/p/later.err")"; fi
	# while a mount elsewhere does not cost the warm interpreter
	ready "$WARM" 0
	mount -t tmpfs -o size=1M tmpfs "$WORK/latermnt"
	runc "$u" "$WARM" "$WORK/p/elsewhere" python "$WORK/p/small.code"
	umount "$WORK/latermnt"
	check "$u a mount elsewhere after the interpreter started does not make it unusable" true "$(v "$WORK/p/elsewhere.verdict" warm)"

	# a warm worker killed while it waits takes its count with it: the
	# count never says more than there are, and the next run is warm again
	ready "$WARM" 0
	local wpid cnt
	wpid=$($PY -c '
import struct, sys
d = open(sys.argv[1], "rb").read()
for i in range(16):
    pid, lang, _ = struct.unpack_from("iiQ", d, 40 + 16 * i)
    if pid > 0 and lang == 0:
        print(pid); break' "$WARM.warm")
	[ -n "$wpid" ] && kill -KILL "$wpid"
	# once the launcher has reaped it (its entry cleared), before a
	# replacement can have imported anything
	cnt=$($PY -c '
import struct, sys, time
for i in range(500):
    d = open(sys.argv[1], "rb").read()
    if all(struct.unpack_from("i", d, 40 + 16 * j)[0] != int(sys.argv[2]) for j in range(16)):
        break
    time.sleep(0.002)
print(struct.unpack_from("i", d, 16)[0])' "$WARM.warm" "${wpid:-0}")
	ready "$WARM" 0
	runc "$u" "$WARM" "$WORK/p/afterkill" python "$WORK/p/small.code"
	if [ -n "$wpid" ] && [ "$cnt" -le 0 ] && [ "$(v "$WORK/p/afterkill.verdict" warm)" = true ]; then
		ok "$u a warm worker killed while it waits: its count goes, the next run is warm"
	else nok "$u killed warm worker" "pid=$wpid count after kill=$cnt" "$(cat "$WORK/p/afterkill.verdict")"; fi

	# shell still goes to the cold pool (never warm)
	printf 'echo shell\n' > "$WORK/p/sh.code"
	runc "$u" "$WARM" "$WORK/p/sh" shell "$WORK/p/sh.code"
	if [ "$(v "$WORK/p/sh.verdict" warm)" = false ] && [ "$(cat "$WORK/p/sh.out")" = shell ]; then ok "$u shell runs are never warm"
	else nok "$u shell run" "$(cat "$WORK/p/sh.verdict")"; fi
}

# ------------------------------------------------------------ launcher
launcher_checks() {
	local u=$1 out s
	out=$(runuser -u "$u" -- "$BIN" --serve "$WORK/bad.s" --warm-python 1 --warm-modules 'os;import x' 2>&1); rc=$?
	if [ $rc -eq 2 ] && [[ $out == *"not a list of module names"* ]] && [ ! -e "$WORK/bad.s" ]; then
		ok "$u --warm-modules with anything but module names is refused"
	else nok "$u --warm-modules injection" "rc=$rc $out"; fi
	out=$(runuser -u "$u" -- "$BIN" --serve "$WORK/bad.s" --warm-python 17 2>&1); rc=$?
	check "$u --warm-python beyond the bound is refused" 2 "$rc"

	# without a cgroup slot (a parent that does not exist) no warm
	# interpreter starts: its memory would be bounded by nothing; the page
	# says why, and runs are served cold
	start "$u" "noslot$u" --warm-python 1 --cgroup-parent /nonexistent-sandbox-parent
	s=$(eval echo "\$SOCK_noslot$u")
	local why="" n=0
	while [ -z "$why" ] && [ $n -lt 100 ]; do
		why=$($PY -c '
import sys
d = open(sys.argv[1], "rb").read()
print(d[296:496].split(b"\0")[0].decode())' "$s.warm" 2>/dev/null)
		[ -n "$why" ] || sleep 0.1
		n=$((n + 1))
	done
	mkdir -p "$WORK/p"
	printf 'print("cold")\n' > "$WORK/p/noslot.code"
	runc "$u" "$s" "$WORK/p/noslot" python "$WORK/p/noslot.code"
	local l interp
	l=$(launcher_of "$s")
	interp=$(interpreters "$l")
	if [[ $why == *"without a cgroup slot"* ]] && [ -z "$interp" ] &&
		[ "$(v "$WORK/p/noslot.verdict" warm)" = false ] && [ "$(cat "$WORK/p/noslot.out")" = cold ]; then
		ok "$u without a cgroup slot no warm interpreter starts (the page says why) and runs are served cold"
	else nok "$u warm place without a slot" "problem [$why] interpreters [$interp]" "$(cat "$WORK/p/noslot.verdict")"; fi

	# a module that does not import: warned, runs go cold, the launcher keeps serving
	start "$u" "nomod$u" --warm-python 1 --warm-modules no_such_module_xyz
	s=$(eval echo "\$SOCK_nomod$u")
	printf 'print("still runs")\n' > "$WORK/p/nomod.code"
	local n=0
	while ! grep -q "no_such_module_xyz" "$WORK/launcher-nomod$u.log" && [ $n -lt 300 ]; do sleep 0.2; n=$((n + 1)); done
	runc "$u" "$s" "$WORK/p/nomod" python "$WORK/p/nomod.code"
	if grep -q "could not start: import no_such_module_xyz: ModuleNotFoundError" "$WORK/launcher-nomod$u.log" &&
		[ "$(cat "$WORK/p/nomod.out")" = "still runs" ] && [ "$(v "$WORK/p/nomod.verdict" warm)" = false ]; then
		ok "$u a preload that fails is reported and runs are served cold"
	else nok "$u failing preload" "$(tail -2 "$WORK/launcher-nomod$u.log")" "$(cat "$WORK/p/nomod.verdict")"; fi
}

# pass USER PREFIX: the launchers (names PREFIX...), the corpus, the
# attacker's side and the launcher's checks
pass() {
	local u=$1 p=$2
	start "$u" "${p}cold$u"
	start "$u" "${p}warm$u" --warm-python 1 --warm-node 1 --warm-modules "$MODULES" --warm-memory 512M
	start "$u" "${p}zen$u" --warm-python 1 --warm-modules this
	COLD=$(eval echo "\$SOCK_${p}cold$u")
	WARM=$(eval echo "\$SOCK_${p}warm$u")
	ZEN=$(eval echo "\$SOCK_${p}zen$u")
	[ -n "$p" ] && fallback_in_effect "$u"
	for f in "$C"/*.py "$C"/*.js; do
		selected "$(basename "$f")" || continue
		compare "$f" "$u"
	done
	selected attacker && attacker "$u"
	selected launcher && [ -z "$p" ] && launcher_checks "$u"
}

# The launcher whose socket is SOCK: its pid (LAUNCHERS holds them all).
launcher_of() {
	local l
	for l in "${LAUNCHERS[@]}"; do
		tr '\0' ' ' < "/proc/$l/cmdline" 2>/dev/null | grep -q -- "--serve $1 " && { echo "$l"; return; }
	done
}
# The waiting interpreters (python3, node) under a process, as "pid ppid".
interpreters() {
	local c
	for c in $(cat "/proc/$1/task/$1/children" 2>/dev/null); do
		case $(readlink "/proc/$c/exe" 2>/dev/null) in
		*/python3* | */node) echo "$c $1" ;;
		esac
		interpreters "$c"
	done
}
# On the path for kernels that cannot clone mounts out of a detached copy
# of the host tree, each waiting interpreter has entered its root in a
# mount namespace of its own (docs/jail.md), while its init's namespace
# still has the host's root mounted.
fallback_in_effect() {
	local u=$1 l pairs=() own=0 bad=0
	ready "$WARM" 0
	ready "$WARM" 1
	l=$(launcher_of "$WARM")
	mapfile -t pairs < <(interpreters "$l")
	for pr in "${pairs[@]}"; do
		read -r c par <<<"$pr"
		if [ "$(readlink "/proc/$c/ns/mnt")" != "$(readlink "/proc/$par/ns/mnt")" ] &&
			[ "$(stat -f -c %T "/proc/$c/root/")" = tmpfs ] &&
			[ "$(stat -f -c %T "/proc/$par/root/")" != tmpfs ]; then
			own=$((own + 1))
		else
			bad=$((bad + 1))
		fi
	done
	if [ "$own" -ge 2 ] && [ "$bad" = 0 ]; then
		ok "$u fallback in effect: each waiting interpreter has entered its root in a mount namespace of its own, its init still has the host's"
	else nok "$u fallback not in effect" "launcher ${l:-none}: $own interpreters in their own namespace, $bad not: ${pairs[*]}"; fi
}

for u in $USERS; do
	pass "$u" ""
done

# The same on the older kernels' path (Debian 12's 6.1 cannot clone mounts
# out of a detached copy of the host tree): forced here, as the jail suite
# forces it for its served runs (SANDBOX_JAIL_NO_HOST_TREE in the
# launchers' environment; the payload's is scrubbed anyway).
fb_user=${USERS##* }
LAUNCHER_ENV=SANDBOX_JAIL_NO_HOST_TREE=1
TAG="fallback "
pass "$fb_user" fb
TAG=
LAUNCHER_ENV=

# a sanitizer build (test/warm/run.sh src/jail/sandbox-jail-asan) reports
# into the launchers' logs: none may have a report
if grep -lE "AddressSanitizer|LeakSanitizer|runtime error:" "$WORK"/launcher-*.log >/dev/null 2>&1; then
	nok "no sanitizer report in the launchers' logs" "$(grep -hE -m3 "AddressSanitizer|LeakSanitizer|runtime error:" "$WORK"/launcher-*.log)"
else ok "no sanitizer report in the launchers' logs"; fi

tap_summary
[ $FAIL -eq 0 ]
