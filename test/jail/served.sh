# test/jail/served.sh: sourced by test/jail/run.sh (uses its helpers and
# its $WORK, $MARK, $CGOPT, $USERS).
#
# Served mode: one `sandbox-jail --serve` launcher per user, the whole
# attacker-side suite again through `sandbox-jail --client` (which must
# behave exactly like the one-shot command line), then what only a
# resident launcher can get wrong: runs that overlap, pooled network
# namespaces, malformed requests, and the launcher's own lifetime.  No
# test times anything; waits are bounded so a broken launcher cannot hang
# the suite.

REALBIN=$BIN
LAUNCHER_EXTRA=()				# more --serve options (test/jail/image.sh)

# start_launcher USER: sets SOCK, LPID (the launcher), LPARENT (its runuser)
start_launcher() {
	local u=$1 n=0
	SDIR=$WORK/launcher-$u
	rm -rf "$SDIR"
	mkdir "$SDIR"
	chown "$u": "$SDIR"
	chmod 700 "$SDIR"
	SOCK=$SDIR/jail.sock
	# shellcheck disable=SC2086
	runuser -u "$u" -- env ${LAUNCHER_ENV:-} "${LBIN:-$REALBIN}" --serve "$SOCK" --pool 3 "${CGOPT[@]}" "${LAUNCHER_EXTRA[@]}" 2>>"${LLOG:-$WORK/launcher.log}" &
	LPARENT=$!
	# a loaded machine can take seconds to start the pool: up to 60 s
	while [ ! -S "$SOCK" ] && [ $n -lt 1200 ]; do sleep 0.05; n=$((n + 1)); done
	LPID=$(pgrep -P "$LPARENT" -f -- "--serve $SOCK")
	LAUNCHERS+=("$LPID")
	printf '#!/bin/sh\nexec "%s" --client "%s" "$@"\n' "${LBIN:-$REALBIN}" "$SOCK" > "$WORK/client-$u"
	chmod 755 "$WORK/client-$u"
}
# the file system type of "/" as the launcher's waiting sandbox sees it
# (the last mount on "/" in its mountinfo; empty when none is found)
waiting_root_fstype() {
	local w c n=0
	while [ $n -lt 50 ]; do
		for w in $(pgrep -P "$LPID"); do
			for c in $(pgrep -P "$w"); do
				# a sandbox, not the worker's egress stub (which shares the
				# worker's mount namespace: the host's)
				[ "$(readlink "/proc/$c/ns/mnt")" != "$(readlink "/proc/$w/ns/mnt")" ] || continue
				awk '$5 == "/" { for (i = 7; i <= NF; i++) if ($i == "-") { t = $(i + 1); break } }
					 END { if (t != "") print t }' "/proc/$c/mountinfo" 2>/dev/null && return
			done
		done
		sleep 0.1
		n=$((n + 1))
	done
}
# the launcher is gone (bounded wait)
launcher_gone() {
	local n=0
	while kill -0 "$LPID" 2>/dev/null && [ $n -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
	! kill -0 "$LPID" 2>/dev/null
}
no_survivors() {
	local n=0
	while survivors && [ $n -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
	! survivors
}
# wait_for FILE TEXT: bounded wait until FILE contains TEXT
wait_for() {
	local n=0
	while ! grep -q -- "$2" "$1" 2>/dev/null && [ $n -lt 600 ]; do sleep 0.1; n=$((n + 1)); done
}
# served_bg USER NAME LANG CODEFILE [opts]: a client run in the background,
# files $WORK/NAME.{out,err,verdict}; sets BGPID.  The files are emptied
# here, before the job starts: a wait_for on NAME.out must never find what
# the previous run of that name wrote there (the background job's own
# redirections may run only after the wait has looked).
served_bg() {
	local u=$1 name=$2 lang=$3 code=$4
	shift 4
	: > "$WORK/$name.out"
	: > "$WORK/$name.err"
	: > "$WORK/$name.verdict"
	runuser -u "$u" -- "$WORK/client-$u" --language "$lang" --verdict-fd 3 \
		"${CGOPT[@]}" "$@" < "$code" > "$WORK/$name.out" 2> "$WORK/$name.err" 3> "$WORK/$name.verdict" &
	BGPID=$!
}
vf() { cp "$1" "$WORK/verdict"; v "$2"; }	# field of a named verdict file
cgroup_of() { sed -n 's/^[0-9]*:memory:\(.*\)$/\1/p' "/proc/$1/cgroup"; }
ws_for() {
	rm -rf "$1"
	mkdir "$1"
	if [ "$2" = root ]; then chown 65534:65534 "$1"; else chown "$2": "$1"; fi
}

served_checks() {
	local u=$1 n
	echo "# served: cross-run checks as $u"

	t "$u: launcher socket is mode 600, owned by $u" '[ "$(stat -c %a:%U "$SOCK")" = "600:$u" ]'

	# --- two runs at once: processes, files, network, cgroups, signals --------
	local MA=$((MARK + 1)) MB=$((MARK + 2))
	ws_for "$WORK/ws-a" "$u"
	ws_for "$WORK/ws-b" "$u"
	cat > "$WORK/code-a.py" <<-EOF
	import os, socket, time
	open("/tmp/secret-a", "w").write("a")
	open("/workspace/secret-a", "w").write("a")
	l = socket.socket(); l.bind(("127.0.0.1", 47001)); l.listen(5)
	a = socket.socket(socket.AF_UNIX); a.bind("\0served-a-$MARK"); a.listen(5)
	os.spawnlp(os.P_NOWAIT, "sleep", "sleep", "$MA")
	print("ready-a", flush=True)
	for i in range(600):
	    if os.path.exists("/workspace/stop"):
	        break
	    time.sleep(0.05)
	EOF
	cat > "$WORK/code-b.py" <<-EOF
	import os, signal, socket, time
	cmds = []
	for p in os.listdir("/proc"):
	    if p.isdigit():
	        try:
	            cmds.append(open("/proc/%s/cmdline" % p).read().replace("\0", " "))
	        except OSError:
	            pass
	print("sees-a" if any("$MA" in c for c in cmds) else "no-a")
	print("tmp-a", os.path.exists("/tmp/secret-a"))
	print("ws-a", os.path.exists("/workspace/secret-a") or os.path.exists("$WORK/ws-a"))
	for name, fam, addr in [("tcp", socket.AF_INET, ("127.0.0.1", 47001)),
	                        ("abstract", socket.AF_UNIX, "\0served-a-$MARK")]:
	    s = socket.socket(fam); s.settimeout(2)
	    try:
	        s.connect(addr); print(name, "CONNECTED")
	    except OSError:
	        print(name, "refused")
	os.spawnlp(os.P_NOWAIT, "sleep", "sleep", "$MB")
	print("ready-b", flush=True)
	for i in range(600):
	    if os.path.exists("/workspace/stop"):
	        break
	    time.sleep(0.05)
	signal.signal(signal.SIGTERM, signal.SIG_IGN)
	try:
	    os.kill(-1, signal.SIGKILL)     # everything this run can reach
	except OSError:
	    pass
	print("killed-all", flush=True)
	EOF
	served_bg "$u" a python "$WORK/code-a.py" --workspace "$WORK/ws-a" --memory 100M --wall-time 60
	local pa=$BGPID
	wait_for "$WORK/a.out" ready-a
	served_bg "$u" b python "$WORK/code-b.py" --workspace "$WORK/ws-b" --memory 200M --wall-time 60
	local pb=$BGPID
	wait_for "$WORK/b.out" ready-b
	local sa sb cga cgb nsa nsb lima limb
	sa=$(pgrep -f "^sleep $MA$")
	sb=$(pgrep -f "^sleep $MB$")
	cga=$(cgroup_of "$sa")
	cgb=$(cgroup_of "$sb")
	nsa=$(readlink "/proc/$sa/ns/net")
	nsb=$(readlink "/proc/$sb/ns/net")
	lima=$(cat "/sys/fs/cgroup/memory$cga/memory.limit_in_bytes" 2>/dev/null)
	limb=$(cat "/sys/fs/cgroup/memory$cgb/memory.limit_in_bytes" 2>/dev/null)
	cp "$WORK/b.out" "$WORK/out"
	t "$u: concurrent runs: b cannot see a's processes" 'grep -q ready-a "$WORK/a.out" && out_has no-a && ! out_has sees-a'
	t "$u: concurrent runs: b cannot see a's /tmp or workspace" 'out_has "tmp-a False" && out_has "ws-a False"'
	t "$u: concurrent runs: b cannot reach a's loopback or abstract sockets" 'out_has "tcp refused" && out_has "abstract refused" && ! out_has CONNECTED'
	t "$u: concurrent runs: separate netns, none the host's" '[ -n "$nsa" ] && [ -n "$nsb" ] && [ "$nsa" != "$nsb" ] && [ "$nsa" != "$(readlink /proc/self/ns/net)" ] && [ "$nsa" != "$(readlink /proc/$LPID/ns/net)" ]'
	t "$u: concurrent runs: separate cgroups with their own limits" '[ -n "$cga" ] && [ "$cga" != "$cgb" ] && [ "$lima" = 104857600 ] && [ "$limb" = 209715200 ]'
	touch "$WORK/ws-b/stop"
	wait "$pb"
	local rb=$?
	local a_alive=no
	kill -0 "$sa" 2>/dev/null && a_alive=yes
	touch "$WORK/ws-a/stop"
	wait "$pa"
	local ra=$?
	t "$u: concurrent runs: kill(-1) in b does not reach a; both verdicts exited 0" '[ $a_alive = yes ] && grep -q killed-all "$WORK/b.out" && [ $ra = 0 ] && [ $rb = 0 ] && [ "$(vf "$WORK/a.verdict" exit_code)" = 0 ] && [ "$(vf "$WORK/b.verdict" exit_code)" = 0 ]'
	t "$u: nothing of a or b survives" 'no_survivors && ! kill -0 "$sa" 2>/dev/null && ! kill -0 "$sb" 2>/dev/null'

	# --- a pooled netns is used once: hold each one open so the kernel ---
	# --- cannot recycle its inode number, then compare -------------------
	local i fds=() inos=() dup=no m
	for i in 1 2 3 4 5 6; do
		m=$((MARK + 10 + i))
		ws_for "$WORK/ws-n" "$u"
		printf 'sleep %s &\nwhile [ ! -e /workspace/stop ]; do sleep 0.05; done\n' $m > "$WORK/code-n"
		served_bg "$u" n shell "$WORK/code-n" --workspace "$WORK/ws-n" --wall-time 60
		n=0
		while ! pgrep -f "^sleep $m$" >/dev/null && [ $n -lt 100 ]; do sleep 0.05; n=$((n + 1)); done
		local sp fd
		sp=$(pgrep -f "^sleep $m$")
		exec {fd}<"/proc/$sp/ns/net"
		fds+=("$fd")
		inos+=("$(readlink "/proc/$sp/ns/net")")
		touch "$WORK/ws-n/stop"
		wait "$BGPID"
	done
	[ "$(printf '%s\n' "${inos[@]}" | sort -u | wc -l)" = 6 ] || dup=yes
	printf '%s\n' "${inos[@]}" | grep -q "^net:" || dup=yes
	for fd in "${fds[@]}"; do exec {fd}<&-; done
	t "$u: six runs, six network namespaces (never reused)" '[ $dup = no ]'

	# --- root's launcher builds sandboxes ahead for the last run's owner: ----
	# --- a run for another owner must still get its own owner's uid -------
	if [ "$u" = root ]; then
		local owner owners_ok=yes
		for owner in postgres nobody nobody postgres postgres nobody; do
			WS=$WORK/ws-owner
			rm -rf "$WS"
			mkdir "$WS"
			chown "$owner": "$WS"
			jr root shell 'echo made > /workspace/f; id -u'
			[ $RC = 0 ] && [ "$(stat -c %U "$WS/f")" = "$owner" ] && out_has "^1000$" || owners_ok=no
		done
		t "$u: each served run maps to its own workspace's owner (ahead-built or not)" '[ $owners_ok = yes ]'
	fi

	# --- a request for another cgroup parent gets a run-* cgroup there, ---
	# --- and every process of its sandbox is in it (not in the slot) -----
	if [ ${#CGOPT[@]} -gt 0 ] && [ -d /sys/fs/cgroup/memory/sandbox_ext ]; then
		local mc=$((MARK + 30)) sc cgc
		fresh_ws "$u"
		printf 'sleep %s &\nwhile [ ! -e /workspace/stop ]; do sleep 0.05; done\ngrep memory /proc/self/cgroup\n' $mc > "$WORK/code-c"
		served_bg "$u" c shell "$WORK/code-c" --workspace "$WS" --wall-time 60 \
			--cgroup-parent /sys/fs/cgroup/memory/sandbox_ext
		n=0
		while ! pgrep -f "^sleep $mc$" >/dev/null && [ $n -lt 100 ]; do sleep 0.05; n=$((n + 1)); done
		sc=$(pgrep -f "^sleep $mc$")
		cgc=$(cgroup_of "$sc")
		touch "$WS/stop"
		wait "$BGPID"
		cp "$WORK/c.out" "$WORK/out"
		t "$u: a request for another cgroup parent runs in a run-* cgroup of its own there" '[ "${cgc%/run-*}" = /sandbox_ext ] && out_has ":memory:/$" && [ "$(vf "$WORK/c.verdict" exit_code)" = 0 ]'
	fi

	# --- the launcher survives payloads that misbehave ------------------------
	fresh_ws "$u"
	jr "$u" shell 'bomb() { bomb | bomb & }; bomb; sleep 1; echo bomb-done' --pids 32 --wall-time 10
	jr "$u" python 'x = bytearray(1 << 30); x[::4096] = b"x" * len(x[::4096])' --memory 64M
	jr "$u" shell 'kill -9 -1; exec >&-; exec 2>&-; sleep 0.2' --wall-time 10
	jr "$u" shell 'head -c 50M /dev/zero' --output-limit 1K
	jr "$u" shell 'echo still-serving'
	t "$u: launcher survives fork bomb, OOM, kill -1, closed stdio, flood" 'kill -0 "$LPID" && [ $RC = 0 ] && out_has still-serving'

	# --- a served init confines itself before the request: whatever the ---
	# --- payload does first, init holds nothing ----------------------------
	fresh_ws "$u"
	jr "$u" shell 'grep -E "^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp):" /proc/1/status'
	t "$u: served init: no capability in any set, NoNewPrivs, seccomp, from the payload's first instruction" '[ $RC = 0 ] && [ "$(grep -c "^Cap.*:[[:space:]]*0000000000000000$" "$WORK/out")" = 5 ] && grep -q "^NoNewPrivs:[[:space:]]*1$" "$WORK/out" && grep -q "^Seccomp:[[:space:]]*2$" "$WORK/out"'

	# --- a run ends on init's report only when init is alone: a daemon ---
	# --- left behind is gone before the verdict, and an orphan's CPU time ---
	# --- (reaped by init) is the run's ------------------------------------
	jr "$u" shell "setsid sleep $MARK & exit 3"
	t "$u: a payload that exits leaving a daemon: the daemon is gone when the verdict comes" '[ $RC = 0 ] && [ "$(v exit_code)" = 3 ] && ! survivors'
	jr "$u" shell '( ( i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done; : > /tmp/done ) & )
while [ ! -e /tmp/done ]; do sleep 0.05; done; sleep 0.2; exit 4'
	t "$u: an orphan's CPU time, reaped by init, is in the verdict's cpu_ms" '[ $RC = 0 ] && [ "$(v exit_code)" = 4 ] && [ "$(v cpu_ms)" -ge 300 ]'

	# --- malformed requests: refused with a message, the launcher goes on ----
	runuser -u "$u" -- "$PY" - "$SOCK" > "$WORK/out" 2>&1 <<-'EOF'
	import os, socket, sys
	path = sys.argv[1]
	def req(label, payload, fds=()):
	    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
	    s.connect(path)
	    if fds:
	        socket.send_fds(s, [payload], list(fds))
	    else:
	        s.send(payload)
	    r = s.recv(70000).split(b"\0")
	    s.close()
	    print(label, r[1].decode(), r[3].decode())
	out = os.open("/dev/null", os.O_WRONLY)
	rd = os.open("/dev/null", os.O_RDONLY)
	code = os.memfd_create("c")
	os.write(code, b"echo hi\n")
	ok = b"sandbox-jail/1\0--language\0shell\0--workspace\0/nonexistent\0"
	req("nofds:", ok)
	req("badmagic:", b"hello/9\0--language\0shell\0", [code, out, out])
	req("notnul:", b"sandbox-jail/1\0--language", [code, out, out])
	req("forbidden:", ok + b"--verdict-fd\0003\0", [code, out, out])
	req("abbrev:", b"sandbox-jail/1\0--lang\0shell\0--workspace\0/tmp\0", [code, out, out])
	req("badvalue:", b"sandbox-jail/1\0--language\0perl\0--workspace\0/tmp\0", [code, out, out])
	req("relative:", b"sandbox-jail/1\0--language\0shell\0--workspace\0tmp\0", [code, out, out])
	req("relexec:", b"sandbox-jail/1\0--exec\0bin/true\0--workspace\0/tmp\0", [code, out, out])
	req("execargs:", b"sandbox-jail/1\0--exec\0/bin/sh\0--workspace\0/tmp\0-c\0id\0", [code, out, out])
	req("rdonly-out:", ok, [code, rd, out])
	r, w = os.pipe()
	req("pipe-code:", ok, [r, out, out])
	req("fourfds:", ok, [code, out, out, out])
	sec = b"--egress-policy\0/nonexistent\0--egress-secrets-fd\0"
	req("secrets-nofd:", ok + sec + b"3\0", [code, out, out])
	req("secrets-index:", ok + sec + b"4\0", [code, out, out, out])
	req("fivefds:", ok, [code, out, out, out, out])
	req("huge:", b"sandbox-jail/1\0" + b"x" * 70000 + b"\0", [code, out, out])
	s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
	s.connect(path)
	s.close()   # connect and leave
	print("done")
	EOF
	local bad=no l
	for l in nofds badmagic notnul forbidden abbrev badvalue relative relexec execargs rdonly-out pipe-code fourfds \
		secrets-nofd secrets-index fivefds huge; do
		grep -q "^$l: 2 ." "$WORK/out" || { bad=yes; echo "       not refused: $(grep "^$l:" "$WORK/out" || echo "$l missing")"; }
	done
	t "$u: malformed requests are refused (code 2) with a message" '[ $bad = no ] && out_has "^done" && out_has "must carry 3 descriptors (code, stdout, stderr), or 4 with the run.s secrets" && out_has "^secrets-nofd: 2 a fourth descriptor comes with --egress-secrets-fd 3, and only then" && out_has "^secrets-index: 2 a fourth descriptor comes with" && out_has "unknown protocol" && out_has "not allowed in a request: --verdict-fd"'
	fresh_ws "$u"
	jr "$u" shell 'echo after-garbage'
	t "$u: launcher keeps serving after malformed requests" 'kill -0 "$LPID" && [ $RC = 0 ] && out_has after-garbage'
	jr "$u" shell 'echo x' --bogus
	t "$u: client usage error exits 2 before reaching the launcher" '[ $RC = 2 ] && err_has usage'

	peer_checks "$u"
	late_mount_check "$u"
	installer_cache_check "$u"
}

# The installers a launcher's sandboxes cover come from its cached glob
# (src/jail/installers.c), refreshed when a directory a pattern reads
# changes.  A pip put on the host while the launcher runs: the 3 waiting
# sandboxes were prepared before it (as any sandbox prepared ahead, they
# see the host's /usr as it is at their run, new files included); a run
# in a sandbox whose worker was forked after it has it covered.
installer_cache_check() {
	local u=$1 fake=/usr/local/bin/pip9.99.$MARK n
	if [ ! -d /usr/local/bin ]; then
		t "$u: /usr/local/bin exists for the installer cache check" false
		return
	fi
	printf '#!/bin/sh\necho REAL-INSTALLER\n' > "$fake"
	chmod 755 "$fake"
	fresh_ws "$u"
	for n in 1 2 3 4 5; do
		jr "$u" shell "${fake##*/}; echo rc=\$?"
	done
	rm -f "$fake"
	t "$u: an installer put on the host while the launcher runs is covered once a worker is forked after it" 'out_has "^rc=127$" && err_has "not available in the sandbox" && ! out_has REAL-INSTALLER'
}

# A file system mounted after the launcher's workers cloned their sandboxes
# (the extension's work directory moved to a new mount, say): a served
# run's workspace there is found, as a one-shot run's is.  The sandboxes
# cloned ahead hold a copy of the host's mounts as they were.
late_mount_check() {
	local u=$1 late=$WORK/late-$u
	mkdir -p "$late"
	mount -t tmpfs -o size=8m,mode=0755 sandbox_jail_late "$late"
	ws_for "$late/ws" "$u"
	jr "$u" shell 'pwd; echo late-mount' --workspace "$late/ws"
	umount "$late"
	t "$u: a workspace on a file system mounted after the launcher started is found" \
		'[ $RC = 0 ] && [ "$(v status)" = exited ] && out_has "^late-mount$"'
}

# as_client USER: one run through the launcher at $SOCK, as USER (RC, out, err, verdict)
as_client() {
	printf 'echo never\n' > "$WORK/code"
	runuser -u "$1" -- "$REALBIN" --client "$SOCK" --language shell --workspace "$WS" \
		--verdict-fd 3 < "$WORK/code" > "$WORK/out" 2> "$WORK/err" 3> "$WORK/verdict"
	RC=$?
}
# open_socket / close_socket: let every user reach $SOCK, and undo it
open_socket() { chmod 711 "$SDIR" && chmod 666 "$SOCK"; }
close_socket() { chmod 700 "$SDIR" && chmod 600 "$SOCK"; }

# Who may talk to a launcher: two barriers, each checked for its own
# refusal.  The socket (0600, in a 0700 directory) stops another user
# before the launcher sees anything: the client's own setup error, exit 1.
# A worker refuses a peer that is not the launcher's owner (SO_PEERCRED)
# even when the socket lets it through: the launcher's refusal, exit 2.
peer_checks() {
	local u=$1
	as_client nobody
	t "$u: nobody cannot reach $u's launcher socket (exit 1, permission denied)" \
		'[ $RC = 1 ] && ! out_has never && [ "$(v status)" = setup_error ] && [ "$(v setup_error)" = "cannot reach the launcher at $SOCK: Permission denied" ]'
	open_socket
	as_client nobody
	close_socket
	t "$u: its socket opened to all, $u's launcher still refuses nobody (exit 2, peer uid)" \
		'[ $RC = 2 ] && ! out_has never && err_has "the launcher refused the request: peer uid 65534 is not the launcher.s owner$"'
	if [ "$u" != root ]; then
		as_client root
		t "$u: root gets through $u's socket, the launcher refuses it (exit 2, peer uid)" \
			'[ $RC = 2 ] && ! out_has never && err_has "the launcher refused the request: peer uid [0-9]* is not the launcher.s owner$"'
	fi

	# The worker refuses such a peer before it reads the request: a close
	# with the request still unread would reset the connection and the
	# answer be lost (ECONNRESET).  This client reads only once the worker
	# has answered; the answer must still be there.
	open_socket
	runuser -u nobody -- "$PY" - "$SOCK" > "$WORK/out" 2>&1 <<-'EOF'
	import os, socket, sys, time
	s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
	s.connect(sys.argv[1])
	out = os.open("/dev/null", os.O_WRONLY)
	code = os.memfd_create("c")
	socket.send_fds(s, [b"sandbox-jail/1\0--language\0shell\0--workspace\0/tmp\0"], [code, out, out])
	time.sleep(0.5)
	try:
	    r = s.recv(70000).split(b"\0")
	    print("answer", r[1].decode(), r[3].decode())
	except OSError as e:
	    print("lost:", e)
	EOF
	close_socket
	t "$u: a refused peer gets the refusal even when its request was never read" \
		'out_has "^answer 2 peer uid 65534 is not the launcher"'
}

# The launcher's lifetime: stop, crash and parent death take every run along.
lifetime_checks() {
	local u=$1 how rc cgdir
	for how in TERM KILL parent; do
		start_launcher "$u"
		fresh_ws "$u"
		printf 'echo started\nsleep %s &\nsetsid sleep %s &\nsleep %s\n' $MARK $MARK $MARK > "$WORK/code-l"
		served_bg "$u" l shell "$WORK/code-l" --workspace "$WS"
		wait_for "$WORK/l.out" started
		case $how in
		TERM) kill -TERM "$LPID" ;;
		KILL) kill -KILL "$LPID" ;;
		parent) kill -KILL "$LPARENT" ;;
		esac
		wait "$BGPID"
		rc=$?
		cp "$WORK/l.verdict" "$WORK/verdict" 2>/dev/null
		local started=no gone=no clean=no
		grep -q started "$WORK/l.out" && started=yes
		launcher_gone && gone=yes
		no_survivors && clean=yes
		if [ $started$gone$clean != yesyesyes ]; then
			echo "# launcher $how as $u: started=$started launcher-gone=$gone no-survivors=$clean client-rc=$rc"
			tail -n 5 "${LLOG:-$WORK/launcher.log}" | sed 's/^/#   launcher: /'
		fi
		t "$u: launcher $how: its running sandbox dies, the client reports a setup error" '[ $started$gone$clean = yesyesyes ] && [ $rc = 1 ] && [ "$(v status)" = setup_error ]'
		if [ $how = TERM ]; then
			cgdir=${TESTCG_DIRS[0]:-/nonexistent}
			t "$u: launcher TERM: socket and cgroup slots removed" '[ ! -e "$SOCK" ] && ! ls -d "$cgdir"/srv-"$LPID"-* >/dev/null 2>&1'
		fi
		wait "$LPARENT" 2>/dev/null
		rm -f "$SOCK"
	done
}

for u in $USERS; do
	echo "# served: the suite through --client, as $u"
	start_launcher "$u"
	BIN=$WORK/client-$u
	TAG="served "
	suite "$u"
	TAG=
	served_checks "$u"
	BIN=$REALBIN
	kill -TERM "$LPID" 2>/dev/null
	wait "$LPARENT" 2>/dev/null
	lifetime_checks "$u"
done
BIN=$REALBIN

# The served path on kernels that cannot clone mounts out of a detached
# copy of the host tree (older kernels; the jail probes): the host tree
# stays attached until the request, as in a one-shot run.  This kernel has
# the new way, so the fallback is forced (SANDBOX_JAIL_NO_HOST_TREE in the
# launcher's environment; the payload's environment is scrubbed anyway).
fb_user=${USERS##* }
echo "# served: the suite through --client with the host-tree fallback, as $fb_user"
LAUNCHER_ENV=SANDBOX_JAIL_NO_HOST_TREE=1
start_launcher "$fb_user"
fb_root=$(waiting_root_fstype)
t "$fb_user: fallback in effect: a waiting sandbox still has the host's root mounted" '[ -n "$fb_root" ] && [ "$fb_root" != tmpfs ]'
BIN=$WORK/client-$fb_user
TAG="served-fallback "
suite "$fb_user"
TAG=
BIN=$REALBIN
kill -TERM "$LPID" 2>/dev/null
wait "$LPARENT" 2>/dev/null
LAUNCHER_ENV=

# The launcher and client under ASan/UBSan: a few runs of each kind, a
# malformed request, a stop; no sanitizer report in the launcher's or the
# client's stderr.
if [ "${JAIL_SKIP_ASAN:-0}" != 1 ] && make -s -C "$ROOT/src/jail" SANITIZE=1 >"$WORK/asan-build" 2>&1; then
	for u in $USERS; do
		LBIN=$ROOT/src/jail/sandbox-jail-asan
		LLOG=$WORK/launcher-asan-$u.log
		: > "$LLOG"
		start_launcher "$u"
		BIN=$WORK/client-$u
		asan_bad=no
		fresh_ws "$u"
		for c in 'print("asan-ok")' 'import time; time.sleep(10)' 'x = bytearray(1 << 30)' 'import sys; sys.stdout.write("y" * 3000000)'; do
			jr "$u" python "$c" --wall-time 2 --memory 128M --output-limit 64K
			if [ $RC != 0 ] || grep -Eq "AddressSanitizer|runtime error|LeakSanitizer" "$WORK/err" ||
				[ "$(v status)" = INVALID ]; then asan_bad=yes; fi
		done
		WS=$WORK/nope
		jr "$u" shell true
		[ $RC = 1 ] || asan_bad=yes
		runuser -u "$u" -- "$PY" -c 'import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); s.connect(sys.argv[1]); s.send(b"junk"); s.recv(9999)' "$SOCK"
		kill -TERM "$LPID"
		wait "$LPARENT" 2>/dev/null
		grep -Eq "AddressSanitizer|runtime error|LeakSanitizer" "$LLOG" && asan_bad=yes
		t "$u: ASan/UBSan launcher and client: print, timeout, oom, truncation, setup error, junk request are clean" '[ $asan_bad = no ]'
		BIN=$REALBIN
		unset LBIN LLOG
	done
fi

