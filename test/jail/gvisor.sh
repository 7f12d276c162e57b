# test/jail/gvisor.sh: sourced by test/jail/run.sh (uses its helpers, $WORK,
# $CGOPT, $MARK, the probe and the tiny image of image.sh).
#
# --isolation gvisor (docs/jail.md, "The gvisor class") from the attacker's
# side: the escape cases of run.sh's suite that mean something on gVisor's
# kernel, run through runsc, as root (runsc needs it).  A representative
# subset, for CI time: every run pays runsc's start under ptrace (about a
# second here), so each rule is tested once, not per language or user;
# the cases that test the namespaced class's own mechanisms are skipped
# with the reason printed.  JAIL_SKIP_GVISOR=1 skips it all; so does a
# host without runsc (said, not hidden).

GV=(--isolation gvisor)
# A process of a run left behind: any task in a run cgroup under the
# suite's private parent (runsc, its sentry, gofer and stubs all live in
# the run's cgroup); without one, any runsc of a gvisor run on the host.
gv_left() {
	if [ ${#TESTCG_DIRS[@]} -gt 0 ]; then
		cat "${TESTCG_DIRS[0]}"/run-*/tasks 2>/dev/null | grep -q .
	else
		pgrep -f -- "--root=/run/sandbox-jail-gvisor/state" >/dev/null
	fi
}

if [ -n "${JAIL_SKIP_GVISOR:-}" ]; then
	echo "# gvisor: skipped (JAIL_SKIP_GVISOR)"
elif ! [ -x /usr/bin/runsc ]; then
	echo "# gvisor: skipped: /usr/bin/runsc is not installed (Debian's runsc package)"
else
	echo "# gvisor (runsc --platform=ptrace), as root"
	TAG="gvisor "
	u=root
	for why in "the payload's seccomp filter, its syscall probe table, kexec's SIGSYS and securebits (the namespaced class's own mechanisms; gVisor's sentry filters the host calls itself)" \
		"uid 1000 inside (a gvisor payload runs as the workspace's owner: no user namespace)" \
		"RLIMIT_NPROC without a cgroup (a gvisor run without a cgroup is refused, tested below)"; do
		echo "# gvisor: skip: $why"
	done

	# --- languages, verdict ------------------------------------------------------
	fresh_ws root
	jr root python 'import sys; print("hello-py"); print("to-err", file=sys.stderr); sys.exit(7)' "${GV[@]}"
	t "python runs, its exit code, stdout and stderr apart" '[ $RC = 0 ] && [ "$(v status)" = exited ] && [ "$(v exit_code)" = 7 ] && out_has hello-py && ! out_has to-err && err_has to-err && [ "$(v cgroup)" != none ]'
	umask 077				# a runner's: the bundle must not inherit it
	jr root node 'console.log("hello-" + "node")' "${GV[@]}"
	umask 022
	t "node runs (under the caller's umask 077 too)" '[ "$(v exit_code)" = 0 ] && out_has hello-node'
	jr root shell 'exit 137' "${GV[@]}"
	t "exit 137 is an exit code (runsc alone would say SIGKILL)" '[ "$(v status)" = exited ] && [ "$(v exit_code)" = 137 ] && [ "$(v signal)" = null ]'
	jr root shell 'kill -SEGV $$' "${GV[@]}"
	t "a signal is a signal" '[ $RC = 0 ] && [ "$(v status)" = signaled ] && [ "$(v signal)" = 11 ] && [ "$(v exit_code)" = null ]'
	jr root shell 'cat /proc/version; dmesg 2>/dev/null | head -n 1; ls /proc | grep -c "^[0-9]"' "${GV[@]}"
	t "the payload's kernel is gVisor's, its /proc only the sandbox's" '! grep -q "$(uname -r)" "$WORK/out" && [ "$(tail -n 1 "$WORK/out")" -le 5 ]'

	# --- limits ---------------------------------------------------------------------
	jr root shell "sleep $MARK & setsid sleep $MARK & sleep $MARK" --wall-time 2 "${GV[@]}"
	t "wall timeout ends the sandbox, runsc included" '[ $RC = 0 ] && [ "$(v status)" = timed_out ] && ! gv_left'
	jr root shell 'while :; do :; done' --cpu-time 2 --wall-time 60 "${GV[@]}"
	t "cpu limit" '[ "$(v status)" = timed_out ] && [ "$(v cpu_ms)" -ge 2000 ]'
	jr root python 'x = bytearray(1 << 30); x[::4096] = b"x" * len(x[::4096]); print("survived")' --memory 128M "${GV[@]}"
	t "memory limit -> oom_killed, signaled 9 (the payload's, not a setup error)" '[ $RC = 0 ] && [ "$(v oom_killed)" = true ] && [ "$(v status)" = signaled ] && ! out_has survived'
	jr root shell 'bomb() { bomb | bomb & }; bomb; sleep 5; echo bomb-done' --pids 32 --wall-time 30 "${GV[@]}"
	t "fork bomb contained: pids_limit_hit, not a setup error, nothing left" '[ $RC = 0 ] && [ "$(v status)" != setup_error ] && [ "$(v pids_limit_hit)" = true ] && ! gv_left'
	jr root python 'import os, sys
sys.stdout.write("a" * 300000); sys.stdout.flush(); sys.stderr.write("b" * 200000); sys.stderr.flush(); os._exit(4)' "${GV[@]}"
	t "output written right before the exit is all there (large writes through gVisor)" '[ "$(v exit_code)" = 4 ] && [ "$(stat -c %s "$WORK/out")" = 300000 ] && [ "$(stat -c %s "$WORK/err")" = 200000 ] && [ "$(v output_truncated)" = false ]'
	jr root python 'import sys; sys.stdout.write("y" * 5000000)' --output-limit 100K "${GV[@]}"
	t "output cap -> output_truncated" '[ "$(v output_truncated)" = true ] && [ "$(stat -c %s "$WORK/out")" = 102400 ] && [ "$(v stdout_bytes)" = 5000000 ]'
	fresh_ws root
	jr root shell 'head -c 2M /dev/zero > /workspace/big2; echo rc=$?' --file-size 1M "${GV[@]}"
	t "file size cap -> file_too_large (SIGXFSZ)" '[ "$(v file_too_large)" = true ] && out_has "rc=153"'
	jr root python 'open("/tmp/t", "wb").write(b"q" * (3 << 20))' --tmp-size 1M "${GV[@]}"
	t "/tmp is size-limited" 'err_has "No space left" && [ "$(v exit_code)" = 1 ]'

	# --- the root, the workspace, the host ------------------------------------------
	fresh_ws root
	jr root python 'import os
for p in ["/root", "/home", "/var/lib/postgresql", "/run/postgresql", "/etc/shadow",
          "/etc/postgresql", "/etc/ssl/private", "/proc/kcore", "/var", "/mnt", "/opt",
          "'"$WORK"'", "/tmp/host-tmp-marker", "/tmp/'"${WORK##*/}"'", "/boot", "/srv",
          "/sys/fs/cgroup/memory"]:
    if os.path.lexists(p):
        print("VISIBLE", p)
print(sorted(os.listdir("/run")))
print("checked")' "${GV[@]}"
	t "host files are not visible (/run holds only the init's status dir)" 'out_has checked && ! out_has VISIBLE && out_has "^\[.sandbox-status.\]$"'
	jr root shell 'cat /run/sandbox-status/status 2>&1; echo x > /run/sandbox-status/forged 2>&1 || echo denied' "${GV[@]}"
	t "the payload can neither read nor forge the init's status" 'out_has denied && out_has "Permission denied" && [ "$(v exit_code)" = 0 ]'
	jr root shell 'for d in / /usr /etc /bin /sandbox /sandbox/.init; do touch $d/x 2>/dev/null && echo WROTE $d; done; echo ro-checked' "${GV[@]}"
	t "system dirs, root and /sandbox are read-only" 'out_has ro-checked && ! out_has WROTE'
	jr root shell 'echo data > /workspace/kept; mkdir /workspace/sub; echo more > /workspace/sub/f; ln -s /etc/passwd /workspace/pw' "${GV[@]}"
	t "workspace writable, files on the host owned by the workspace's owner" '[ "$(cat "$WS/kept")" = data ] && [ "$(stat -c %u "$WS/kept")" = 65534 ] && [ "$(stat -c %u "$WS/sub/f")" = 65534 ] && [ -L "$WS/pw" ]'
	jr root shell 'cat /skills/x/README; echo hi > /skills/x/new 2>/dev/null && echo WROTE' --ro-bind "$WORK/skill:/skills/x" "${GV[@]}"
	t "--ro-bind is readable, not writable" 'out_has "skill data" && ! out_has WROTE && [ ! -e "$WORK/skill/new" ]'
	jr root shell 'pip install six 2>&1; echo "pip=$?"; python3 -m pip --version 2>&1; echo "mpip=$?"' "${GV[@]}"
	t "the installers are masked as in a namespaced root" 'out_has "pip=127" && out_has "runtime package installs are disabled" && out_has "mpip=1"'
	# an image (the layout sandbox-image builds; image.sh removed its own):
	# its /usr and /etc files, and its absolute symlink out of it resolved
	# inside it, never on the host
	GVIMG=$WORK/gvimages/tiny@$(printf 'gvtiny' | sha256sum | cut -c1-64)
	mkdir -p "$GVIMG/root/usr/bin" "$GVIMG/root/usr/share" "$GVIMG/root/etc"
	ln -s usr/bin "$GVIMG/root/bin"
	ln -s usr/lib "$GVIMG/root/lib"
	ln -s usr/lib64 "$GVIMG/root/lib64"
	cp /bin/busybox "$GVIMG/root/usr/bin/busybox"
	for c in sh cat ls; do ln -s busybox "$GVIMG/root/usr/bin/$c"; done
	cp /usr/bin/bash "$GVIMG/root/usr/bin/bash"
	for lib in $(ldd /usr/bin/bash | grep -o '/[^ ]*'); do
		mkdir -p "$GVIMG/root/usr$(dirname "${lib#/usr}")"
		cp "$(readlink -f "$lib")" "$GVIMG/root/usr${lib#/usr}"
	done
	echo "image marker" > "$GVIMG/root/usr/share/marker"
	echo "ID=tinyimage" > "$GVIMG/root/etc/os-release"
	ln -s "$WORK/host-ssl" "$GVIMG/root/etc/ssl"
	mkdir -p "$WORK/host-ssl/certs"
	echo "host certificate secret" > "$WORK/host-ssl/certs/secret.pem"
	: > "$GVIMG/lock"
	chown -R root:root "$WORK/gvimages"
	chmod 755 "$WORK/gvimages" "$GVIMG" "$GVIMG/root"
	chmod 644 "$GVIMG/lock"
	jr root shell 'cat /usr/share/marker; cat /etc/os-release; [ -e /usr/bin/python3 ] && echo HOST-PYTHON; cat /etc/ssl/certs/secret.pem 2>/dev/null && echo HOST-SSL; echo done' --image "$GVIMG" "${GV[@]}"
	t "--image: the image's root, none of the host's, its symlinks resolved inside it" '[ "$(v exit_code)" = 0 ] && out_has "image marker" && out_has "ID=tinyimage" && out_has done && ! out_has HOST-'
	mkdir "$WORK/rootws"
	echo input > "$WORK/rootws/in.txt"
	chmod 0600 "$WORK/rootws/in.txt"
	chmod 0700 "$WORK/rootws"
	WS=$WORK/rootws
	jr root shell 'cat /workspace/in.txt; echo out > /workspace/out.txt; id -u' "${GV[@]}"
	t "a root-owned workspace (a root runner's) is given to nobody: read, written, owned" '[ "$(v exit_code)" = 0 ] && out_has "^input$" && out_has "^65534$" && [ "$(stat -c %u "$WS/out.txt")" = 65534 ] && [ "$(stat -c %u "$WS/in.txt")" = 65534 ]'
	fresh_ws root

	# --- identity and privilege -------------------------------------------------
	jr root shell 'id -u; grep -E "^Cap(Inh|Prm|Eff|Bnd)" /proc/self/status; python3 -c "import ctypes; print(\"nnp\", ctypes.CDLL(None).prctl(39, 0, 0, 0, 0))"' "${GV[@]}"
	t "not root, every capability set zero, no_new_privs" '[ "$(sed -n 1p "$WORK/out")" = 65534 ] && [ "$(grep -c "^Cap.*:[[:space:]]*0000000000000000$" "$WORK/out")" = 4 ] && out_has "^nnp 1$"'
	jr root shell '/suid/probe euid; ls -l /suid/probe' --ro-bind "$WORK/suid:/suid" "${GV[@]}"
	t "a setuid-root binary gains nothing" 'out_has "uid=65534" && ! out_has "euid=0"'
	jr root python 'import ctypes, os, signal
libc = ctypes.CDLL(None, use_errno=True)
print("mount", libc.mount(b"none", b"/tmp", b"tmpfs", 0, None), ctypes.get_errno())
print("ptrace", libc.ptrace(16, 1, 0, 0), ctypes.get_errno())
try:
    os.kill(1, signal.SIGKILL); print("killed init")
except OSError as e:
    print("kill", e.errno)' "${GV[@]}"
	t "mount, ptrace of the init and killing it are refused" 'out_has "mount -1 1" && out_has "ptrace -1 1" && out_has "kill 1" && ! out_has "killed init"'

	# --- network, environment --------------------------------------------------------
	jr root python 'import socket
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
c.sendall(b"ping"); print("loopback", a.recv(4).decode())' "${GV[@]}"
	t "no network: 1.1.1.1, the host's unix and abstract sockets fail; loopback works" 'out_has "inet failed" && out_has "unix failed" && out_has "abstract failed" && ! out_has CONNECTED && out_has "loopback ping"'
	# egress: the proxy at 127.0.0.1:3128 as in a namespaced run, and nothing else
	if [ -x "$ROOT/src/egress/sandbox-egress" ]; then
		printf 'sandbox-egress/1\nrule exact host allowed.test 443\n' > "$WORK/gv-policy"
		rm -f "$WORK/gv-egress.log"
		jr root python 'import os, socket
print("proxy", os.environ.get("HTTPS_PROXY"))
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
s.sendall(b"CONNECT evil.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\n")
print("said", s.recv(200).split(b"\r\n")[0].decode())
try:
    socket.create_connection(("1.1.1.1", 80), timeout=3); print("direct CONNECTED")
except OSError as e:
    print("direct failed", e.errno)' --egress-policy "$WORK/gv-policy" --egress-log "$WORK/gv-egress.log" \
			--egress-proxy "$ROOT/src/egress/sandbox-egress" "${GV[@]}"
		t "egress: the proxy on 127.0.0.1:3128 refuses a host off the list and logs it; no other way out" 'out_has "^proxy http://127.0.0.1:3128" && out_has "said HTTP/1.1 403" && out_has "direct failed" && ! out_has CONNECTED && grep -q "\"host\":\"evil.test\".*\"decision\":\"denied\"" "$WORK/gv-egress.log" && [ "$(v egress_denied)" = 1 ]'
	else
		echo "# gvisor: skip: egress (no src/egress/sandbox-egress built)"
	fi
	SECRET_TOKEN=hunter2 jr root python 'import os; print(sorted(os.listdir("/proc/self/fd"))); print(sum("hunter2" in v for v in os.environ.values())); print("PATH" in os.environ)' "${GV[@]}" 7</etc/hostname
	t "environment scrubbed, no inherited descriptors" '[ "$(sed -n 1p "$WORK/out")" = "['"'0', '1', '2', '3'"']" ] && [ "$(sed -n 2p "$WORK/out")" = 0 ] && [ "$(sed -n 3p "$WORK/out")" = True ]'

	# --- termination, errors -----------------------------------------------------------
	printf 'echo started\nsleep %s\n' $MARK > "$WORK/code"
	: > "$WORK/verdict"
	"$BIN" --language shell --workspace "$WS" --verdict-fd 3 "${CGOPT[@]}" "${GV[@]}" \
		< "$WORK/code" > "$WORK/out" 2> "$WORK/err" 3> "$WORK/verdict" &
	jp=$!
	n=0
	while ! grep -q started "$WORK/out" && [ $n -lt 600 ]; do sleep 0.1; n=$((n + 1)); done
	kill -TERM $jp
	wait $jp
	RC=$?
	t "SIGTERM -> killed verdict, exit 0, runsc gone" '[ $RC = 0 ] && [ "$(v status)" = killed ] && ! gv_left'
	# The verdict goes to a file: a jail that ended before the kill (a
	# setup error) shows it in the failure.
	: > "$WORK/verdict"
	"$BIN" --language shell --workspace "$WS" --verdict-fd 3 "${CGOPT[@]}" "${GV[@]}" \
		< "$WORK/code" > "$WORK/out" 2> "$WORK/err" 3> "$WORK/verdict" &
	jp=$!
	n=0
	while ! grep -q started "$WORK/out" && kill -0 $jp 2>/dev/null && [ $n -lt 1200 ]; do sleep 0.1; n=$((n + 1)); done
	kill -0 $jp 2>/dev/null && RC=alive || RC=ended
	kill -KILL $jp 2>/dev/null
	wait $jp 2>/dev/null
	n=0
	while gv_left && [ $n -lt 300 ]; do sleep 0.1; n=$((n + 1)); done
	t "SIGKILL of the jail leaves no runsc process behind" '[ $RC = alive ] && grep -q started "$WORK/out" && ! [ -s "$WORK/verdict" ] && ! gv_left'
	jr root shell 'echo x' --cgroup-parent /nonexistent "${GV[@]}"
	t "no cgroup -> setup error (rlimits cannot hold runsc)" '[ $RC = 1 ] && [ "$(v status)" = setup_error ] && grep -q "needs a cgroup" <<<"$(v setup_error)"'
	ln -s "$WORK/skill" "$WORK/ws-link"
	WS=$WORK/ws-link
	jr root shell 'echo never' "${GV[@]}"
	t "a symlinked workspace is refused" '[ $RC = 1 ] && [ "$(v status)" = setup_error ] && ! out_has never'
	rm -f "$WORK/ws-link"
	fresh_ws root
	jr root shell 'echo never' --runsc /nonexistent/runsc "${GV[@]}"
	t "no runsc -> setup error naming it" '[ $RC = 1 ] && [ "$(v status)" = setup_error ] && grep -q "/nonexistent/runsc" <<<"$(v setup_error)"'
	jr root shell 'echo x' --runsc /usr/bin/runsc
	t "--runsc without --isolation gvisor is a usage error" '[ $RC = 2 ]'
	TAG=
fi
