#!/usr/bin/env bash
# jail-host-setup.sh [USER]
#
# Prepares the host for sandbox-jail (docs/jail.md, "Host setup"): creates
# the delegated cgroup parents that the jail puts each run's cgroup under,
# owned by USER (default: postgres) so USER can create and remove per-run
# child cgroups without privilege; and gives the supervisor's work directory
# (/var/lib/sandbox_ext) a filesystem of its own (see the end of this file).
#
#   cgroup v1 (memory, pids, cpuacct hierarchies):
#       /sys/fs/cgroup/<controller>/sandbox_ext   owned by USER
#   cgroup v2 (only when the v2 hierarchy actually has memory and pids):
#       <cgroup2 mount>/sandbox_ext                owned by USER, with
#       memory, pids (and cpu) enabled in its subtree_control
#
# Run as root; idempotent; harmless (exit 0, a note on stderr) when cgroups
# or controllers are unavailable: the jail then falls back to rlimits and
# reports "cgroup":"none".
set -u

USER_NAME=${1:-postgres}
NAME=sandbox_ext

note() { echo "jail-host-setup: $*" >&2; }

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

v2_mount() {
	awk '{ for (i = 1; i <= NF; i++) if ($i == "-") break;
		if ($(i+1) == "cgroup2") { print $5; exit } }' /proc/self/mountinfo
}

did_something=0

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
	# remove empty leftovers of jails that were SIGKILLed (rmdir fails on
	# a cgroup that still has tasks, so this never disturbs a live run)
	for run in "$dir"/run-*; do
		[ -d "$run" ] || continue
		pid=${run##*/run-}
		kill -0 "$pid" 2>/dev/null && continue
		# tasks of a just-killed sandbox may still be exiting
		for _ in 1 2 3 4 5; do
			rmdir "$run" 2>/dev/null && break
			[ -s "$run/cgroup.procs" ] || sleep 0.1
			[ -s "$run/cgroup.procs" ] && break
		done
	done
	# and the empty slots of a resident launcher (srv-<launcher pid>-<n>)
	# that was SIGKILLed
	for slot in "$dir"/srv-*; do
		[ -d "$slot" ] || continue
		pid=${slot##*/srv-}
		pid=${pid%%-*}
		kill -0 "$pid" 2>/dev/null && continue
		rmdir "$slot" 2>/dev/null || true
	done
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
	ctrls=$(cat "$v2/cgroup.controllers" 2>/dev/null)
	case " $ctrls " in
	*" memory "*)
		case " $ctrls " in
		*" pids "*)
			want="+memory +pids"
			case " $ctrls " in *" cpu "*) want="$want +cpu";; esac
			for c in $want; do echo "$c" > "$v2/cgroup.subtree_control" 2>/dev/null; done
			mkdir -p "$v2/$NAME"
			for c in $want; do echo "$c" > "$v2/$NAME/cgroup.subtree_control" 2>/dev/null; done
			chown "$USER_NAME:$GROUP_NAME" "$v2/$NAME" "$v2/$NAME/cgroup.procs" \
				"$v2/$NAME/cgroup.subtree_control" "$v2/$NAME/cgroup.threads" 2>/dev/null
			did_something=1
			note "v2: $v2/$NAME delegated to $USER_NAME ($(cat "$v2/$NAME/cgroup.subtree_control"))"
			;;
		*) note "v2 at $v2 has no pids controller; not delegating" ;;
		esac
		;;
	*) note "v2 at $v2 has no memory controller (bound to v1?); not delegating" ;;
	esac
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
