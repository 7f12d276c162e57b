#!/usr/bin/env bash
# jail-host-setup.sh [USER] [--unit UNIT]
# jail-host-setup.sh --service-cgroup [USER]
# jail-host-setup.sh --enter-cgroup COMMAND [ARG...]
#
# Prepares the host for sandbox-jail (docs/jail.md, "Host setup"): creates
# the delegated cgroup parents that the jail puts each run's cgroup under,
# owned by USER (default: postgres) so USER can create and remove per-run
# child cgroups without privilege, and removes what SIGKILLed jails and
# launchers left there; and gives the supervisor's work directory
# (/var/lib/sandbox_ext) a filesystem of its own (see the end of this file).
#
#   cgroup v1 (memory, pids, cpuacct hierarchies):
#       /sys/fs/cgroup/<controller>/sandbox_ext   owned by USER
#   cgroup v2 (only when the v2 hierarchy actually has memory and pids):
#       <cgroup2 mount>/sandbox_ext                owned by USER, with
#       memory, pids (and cpu) enabled in its subtree_control, and a leaf
#       <cgroup2 mount>/sandbox_ext/service for USER's own processes.
#       v2 lets an unprivileged account move a process only between
#       cgroups inside a subtree delegated to it, so USER's jails get
#       cgroups only when USER's service itself runs inside that subtree.
#       On a systemd host that is arranged for the service UNIT (default,
#       for postgres: postgresql@.service): a drop-in with Delegate=yes and
#       an ExecStartPost that runs this script with --service-cgroup, which
#       moves the service's processes into <service cgroup>/sandbox_ext/
#       service and delegates <service cgroup>/sandbox_ext to USER.  A
#       running service picks that up when it is restarted.
#   --enter-cgroup: the ExecStart of a unit with Delegate=yes and User=
#       (src/runner/sandbox-runner.service): systemd has given the unit's
#       cgroup to that user; as that user, before anything else runs, move
#       this process into <unit cgroup>/sandbox_ext/service, enable the
#       controllers, then exec COMMAND there (no root step, no race with
#       what COMMAND starts).  Where that cannot be done (no v2, the unit's
#       cgroup not delegated) it says why on stderr and execs COMMAND
#       anyway: its jails then report the reason (require_cgroup decides).
#
# Run as root (--enter-cgroup: as the unit's user); idempotent; harmless (exit 0, a note on stderr) when cgroups
# or controllers are unavailable: the jail then falls back to rlimits and
# reports "cgroup":"none" (or refuses to run with --require-cgroup).
set -u

MODE=host
if [ "${1:-}" = --service-cgroup ]; then
	MODE=service
	shift
elif [ "${1:-}" = --enter-cgroup ]; then
	MODE=enter
	shift
fi
NAME=sandbox_ext
LIBEXEC=/usr/local/libexec/sandbox_ext
# A test knob: SANDBOX_SYSTEMD_ROOT=DIR puts what the systemd branch
# below looks at and writes (run/systemd/system, etc/systemd/system,
# the installed copy of this script) under DIR instead of /, and skips
# `systemctl daemon-reload` (test/cgroup-v2/checks.sh checks the drop-in).
SD_ROOT=${SANDBOX_SYSTEMD_ROOT:-}

note() { echo "jail-host-setup: $*" >&2; }

# controllers the jail wants that the v2 cgroup DIR offers ("+memory +pids
# [+cpu]"), or nothing if memory or pids is missing
v2_wanted() {
	local c
	c=" $(cat "$1/cgroup.controllers" 2>/dev/null) "
	case $c in *" memory "*) ;; *) return ;; esac
	case $c in *" pids "*) ;; *) return ;; esac
	case $c in *" cpu "*) echo "+memory +pids +cpu" ;; *) echo "+memory +pids" ;; esac
}

v2_mount() {
	awk '{ for (i = 1; i <= NF; i++) if ($i == "-") break;
		if ($(i+1) == "cgroup2") { print $5; exit } }' /proc/self/mountinfo
}

# ---- --enter-cgroup: the ExecStart of a delegated unit with User= ----------
# Runs as the unit's user, in the unit's cgroup S, which systemd chowned to
# that user (Delegate=yes: the directory and its cgroup.procs,
# cgroup.subtree_control and cgroup.threads).  This process is the only
# one in S (systemd runs ExecStartPre/Post of such a unit in S/.control),
# so once it is in S/sandbox_ext/service the controllers can be enabled in
# S (no internal processes) and in S/sandbox_ext; what COMMAND starts is
# born inside the subtree, where the jail finds S/sandbox_ext by itself.
if [ $MODE = enter ]; then
	[ $# -gt 0 ] || { note "usage: jail-host-setup.sh --enter-cgroup COMMAND [ARG...]"; exit 2; }
	v2=$(v2_mount)
	own=$(sed -n 's/^0:://p' /proc/self/cgroup)
	S=$v2$own
	if [ -z "$v2" ] || [ -z "$own" ]; then
		note "no cgroup v2 here; $1 runs where it is"
	elif [ "$own" = / ]; then
		note "this process is in the root cgroup, not a unit's own: $1 runs where it is"
	elif [ "${own%/"$NAME"/service}" != "$own" ]; then
		note "already in $S; nothing to do"
	elif ! [ -w "$S" ] || ! [ -w "$S/cgroup.procs" ] || ! [ -w "$S/cgroup.subtree_control" ]; then
		note "$S is not delegated to $(id -un 2>/dev/null || id -u) (Delegate=yes and User= in its unit?): $1 runs where it is"
	else
		want=$(v2_wanted "$S")
		if [ -z "$want" ]; then
			note "$S has no memory or pids controller (is Delegate=yes set?): $1 runs where it is"
		elif ! mkdir -p "$S/$NAME/service" || ! echo $$ > "$S/$NAME/service/cgroup.procs"; then
			note "could not move into $S/$NAME/service: $1 runs where it is"
		else
			for c in $want; do
				echo "$c" > "$S/cgroup.subtree_control" || note "could not enable $c in $S"
				echo "$c" > "$S/$NAME/cgroup.subtree_control" || note "could not enable $c in $S/$NAME"
			done
			chmod 0755 "$S/$NAME" "$S/$NAME/service"
			note "v2: $S/$NAME delegated to $(id -un 2>/dev/null || id -u) ($(cat "$S/$NAME/cgroup.subtree_control")); $1 runs in $S/$NAME/service"
		fi
	fi
	exec "$@"
fi

USER_NAME=${1:-postgres}
[ $# -gt 0 ] && shift
UNIT=
if [ "${1:-}" = --unit ] && [ -n "${2:-}" ]; then
	UNIT=$2
elif [ "$USER_NAME" = postgres ]; then
	UNIT=postgresql@.service
fi

if [ "$(id -u)" != 0 ]; then
	note "must run as root; nothing done"
	exit 0
fi
if ! id "$USER_NAME" >/dev/null 2>&1; then
	note "user $USER_NAME does not exist; nothing done"
	exit 0
fi
GROUP_NAME=$(id -gn "$USER_NAME")

# mount point of a v1 hierarchy carrying controller $1, from mountinfo
v1_mount() {
	awk -v c="$1" '{
		for (i = 1; i <= NF; i++) if ($i == "-") break;
		if ($(i+1) != "cgroup") next;
		n = split($(i+3), o, ",");
		for (j = 1; j <= n; j++) if (o[j] == c) { print $5; exit }
	}' /proc/self/mountinfo
}

did_something=0

# remove the empty leftovers of jails (run-<jail pid>) and resident
# launchers (srv-<launcher pid>-<n>) that were SIGKILLed, in DIR; rmdir
# fails on a cgroup that still has processes, so this never disturbs a
# live run, and a live owner's are skipped anyway
clean_stale() {
	local dir=$1 run slot pid
	for run in "$dir"/run-*; do
		[ -d "$run" ] || continue
		pid=${run##*/run-}
		kill -0 "$pid" 2>/dev/null && continue
		# processes of a just-killed sandbox may still be exiting
		for _ in 1 2 3 4 5; do
			rmdir "$run" 2>/dev/null && break
			[ -s "$run/cgroup.procs" ] || sleep 0.1
			[ -s "$run/cgroup.procs" ] && break
		done
	done
	for slot in "$dir"/srv-*; do
		[ -d "$slot" ] || continue
		pid=${slot##*/srv-}
		pid=${pid%%-*}
		kill -0 "$pid" 2>/dev/null && continue
		rmdir "$slot" 2>/dev/null || true
	done
}

# delegate the v2 cgroup D (made if missing) to USER: the jail's parent,
# with its controllers on in D's subtree_control, and the leaf D/service
# where USER's own processes belong
v2_delegate() {
	local d=$1 want=$2 c
	mkdir -p "$d/service" || return 1
	for c in $want; do echo "$c" > "$d/cgroup.subtree_control" 2>/dev/null; done
	chown "$USER_NAME:$GROUP_NAME" "$d" "$d/cgroup.procs" "$d/cgroup.subtree_control" \
		"$d/cgroup.threads" "$d/service" "$d/service/cgroup.procs" \
		"$d/service/cgroup.threads" 2>/dev/null
	chmod 0755 "$d" "$d/service"
	clean_stale "$d"
}

# ---- --service-cgroup: run by a delegated service's ExecStartPost ---------
# Our cgroup is <service>/.control (systemd runs ExecStartPost there for a
# Delegate=yes unit).  Move every process of <service> into
# <service>/sandbox_ext/service (new children of a moved process are born
# there; the loop catches those forked meanwhile), then turn the
# controllers on: <service> must hold no process for that.
if [ $MODE = service ]; then
	v2=$(awk '{ for (i = 1; i <= NF; i++) if ($i == "-") break;
		if ($(i+1) == "cgroup2") { print $5; exit } }' /proc/self/mountinfo)
	own=$(sed -n 's/^0:://p' /proc/self/cgroup)
	[ -n "$v2" ] && [ -n "$own" ] || { note "no cgroup v2 here; nothing done"; exit 0; }
	svc=$own
	[ "${svc##*/}" = .control ] && svc=${svc%/*}
	S=$v2$svc
	want=$(v2_wanted "$S")
	if [ -z "$want" ]; then
		note "$S has no memory or pids controller (is Delegate=yes set?); nothing done"
		exit 0
	fi
	mkdir -p "$S/$NAME/service" || { note "cannot create $S/$NAME/service"; exit 0; }
	for _ in $(seq 50); do
		pids=$(cat "$S/cgroup.procs")
		[ -z "$pids" ] && break
		for p in $pids; do echo "$p" > "$S/$NAME/service/cgroup.procs" 2>/dev/null; done
	done
	[ -z "$(cat "$S/cgroup.procs")" ] || note "$S still holds processes; controllers not enabled"
	for c in $want; do echo "$c" > "$S/cgroup.subtree_control" 2>/dev/null; done
	v2_delegate "$S/$NAME" "$want"
	note "v2: $S/$NAME delegated to $USER_NAME ($(cat "$S/$NAME/cgroup.subtree_control")); the service runs in $S/$NAME/service"
	exit 0
fi

# ---- cgroup v1 -------------------------------------------------------------
for ctl in memory pids cpuacct; do
	mnt=$(v1_mount "$ctl")
	[ -n "$mnt" ] || continue
	dir="$mnt/$NAME"
	if ! mkdir -p "$dir" 2>/dev/null; then
		note "cannot create $dir (read-only cgroupfs?)"
		continue
	fi
	# the directory (mkdir/rmdir of run-* children) and its procs files
	chown "$USER_NAME:$GROUP_NAME" "$dir" "$dir/cgroup.procs" "$dir/tasks" 2>/dev/null
	chmod 0755 "$dir"
	clean_stale "$dir"
	did_something=1
	note "v1 $ctl: $dir owned by $USER_NAME"
done
mem=$(v1_mount memory)
if [ -n "$mem" ] && [ -f "$mem/$NAME/memory.use_hierarchy" ]; then
	# since Linux 6.x hierarchical accounting is always on (reads 1); on
	# older kernels turn it on so per-run children inherit the accounting
	if [ "$(cat "$mem/$NAME/memory.use_hierarchy")" != 1 ]; then
		echo 1 > "$mem/$NAME/memory.use_hierarchy" 2>/dev/null ||
			note "memory.use_hierarchy could not be set to 1"
	fi
fi

# ---- cgroup v2 -------------------------------------------------------------
v2=$(v2_mount)
if [ -n "$v2" ]; then
	want=$(v2_wanted "$v2")
	if [ -z "$want" ]; then
		note "v2 at $v2 has no memory or pids controller (bound to v1?); not delegating"
	else
		for c in $want; do echo "$c" > "$v2/cgroup.subtree_control" 2>/dev/null; done
		if v2_delegate "$v2/$NAME" "$want"; then
			did_something=1
			note "v2: $v2/$NAME delegated to $USER_NAME ($(cat "$v2/$NAME/cgroup.subtree_control"))"
			note "v2: root's jails use it as it is; $USER_NAME's jails only from processes inside it: start $USER_NAME's service in $v2/$NAME/service (echo PID > $v2/$NAME/service/cgroup.procs)"
		else
			note "cannot create $v2/$NAME"
		fi
		# systemd owns the tree: the service itself gets a delegated subtree
		if [ -d "$SD_ROOT/run/systemd/system" ] && [ -n "$UNIT" ]; then
			self=$(readlink -f "$0")
			install -d "$SD_ROOT$LIBEXEC"
			install -m 0755 "$self" "$SD_ROOT$LIBEXEC/jail-host-setup.sh"
			dropin=$SD_ROOT/etc/systemd/system/$UNIT.d/sandbox_ext-cgroup.conf
			install -d "${dropin%/*}"
			cat > "$dropin.tmp" <<-EOF
			# written by sandbox_ext's jail-host-setup.sh: a delegated cgroup
			# subtree for the jails that $USER_NAME starts (docs/jail.md)
			[Service]
			Delegate=yes
			ExecStartPost=+$LIBEXEC/jail-host-setup.sh --service-cgroup $USER_NAME
			EOF
			mv "$dropin.tmp" "$dropin"
			if [ -n "$SD_ROOT" ]; then
				note "systemd: SANDBOX_SYSTEMD_ROOT=$SD_ROOT set: no daemon-reload"
			else
				systemctl daemon-reload 2>/dev/null || note "systemctl daemon-reload failed"
			fi
			note "systemd: $dropin written (Delegate=yes, ExecStartPost moves the service into <its cgroup>/$NAME/service); restart running instances of $UNIT for it to take effect"
		fi
	fi
fi

[ "$did_something" = 1 ] || note "no usable cgroup hierarchy; the jail will use rlimits only"

# ---- the supervisor's work directory -----------------------------------------
# Workspaces live on a filesystem of their own, never on the one the database
# writes to (the supervisor refuses that; docs/execution.md).  Unless
# something is mounted there already (a dedicated volume: the production
# choice), mount a size-limited tmpfs.  SANDBOX_WORK_BASE, SANDBOX_WORK_SIZE
# and SANDBOX_WORK_INODES change the defaults.
WORK_BASE=${SANDBOX_WORK_BASE:-/var/lib/sandbox_ext}
WORK_SIZE=${SANDBOX_WORK_SIZE:-2g}
WORK_INODES=${SANDBOX_WORK_INODES:-1m}
mkdir -p "$WORK_BASE"
if mountpoint -q "$WORK_BASE"; then
	note "work directory: $WORK_BASE is a mount point already; left as it is"
elif mount -t tmpfs -o "size=$WORK_SIZE,nr_inodes=$WORK_INODES,mode=0700,nosuid,nodev" \
		sandbox_ext_work "$WORK_BASE" 2>/dev/null; then
	note "work directory: mounted a tmpfs of $WORK_SIZE ($WORK_INODES inodes) at $WORK_BASE"
	note "  it is lost at reboot (the database keeps every file; sessions are rebuilt); to keep it, add to /etc/fstab:"
	note "  sandbox_ext_work $WORK_BASE tmpfs size=$WORK_SIZE,nr_inodes=$WORK_INODES,mode=0700,nosuid,nodev 0 0"
else
	note "work directory: could not mount a filesystem at $WORK_BASE; mount one there"
	note "  (the supervisor claims no work while its work directory shares the database's filesystem)"
fi
chown "$USER_NAME:$GROUP_NAME" "$WORK_BASE"
chmod 0700 "$WORK_BASE"
exit 0
