#!/usr/bin/env bash
# test/cgroup-v2/guest.sh COMMAND [ARG...]
#
# Boots a cgroup-v2-only Linux guest under qemu and runs COMMAND there as
# root; prints what it prints and exits with its exit code (3: the guest
# itself could not be built or booted, with the reason on stderr).
#
# The guest:
#   kernel    Debian's own (scripts/guest-kernel.sh unpacks it), booted
#             with cgroup_no_v1=all: cgroup2 is the only hierarchy there is
#   root      this host's / shared read-only over 9p (virtio), so COMMAND,
#             the jail binary and every interpreter are the host's own files;
#             a small initramfs of ours (busybox and the 9p/virtio modules of
#             that kernel) mounts it and switches to it
#   writable  fresh tmpfs /tmp, /run, /dev/shm, /var/tmp (lost at power-off;
#             nothing the guest does reaches the host's files)
#   network   none (no network device); the host's namespaces are not touched
#   init      test/cgroup-v2/init.sh: mounts, cgroup2 on /sys/fs/cgroup, then
#             COMMAND; the last console line "sbx-guest-exit N" carries its
#             exit code out
#
# Acceleration: SANDBOX_GUEST_ACCEL=auto (default) uses KVM only if a probe
# guest actually boots under it (the result is cached per host kernel and
# qemu version in the kernel cache), else software emulation (-accel tcg
# -cpu max).  kvm or tcg force one.  SANDBOX_GUEST_MEM (MiB, default 2048),
# SANDBOX_GUEST_CPUS (default: the host's CPUs, at most 4) and
# SANDBOX_GUEST_TIMEOUT (s, default 1800: what the cgroup-v2 suite takes
# emulated on a loaded 2-core host, with room; docs/jail.md has the
# figures) size and bound the guest.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
ACCEL=${SANDBOX_GUEST_ACCEL:-auto}
MEM=${SANDBOX_GUEST_MEM:-2048}
CPUS=${SANDBOX_GUEST_CPUS:-$(nproc)}
[ "$CPUS" -gt 4 ] && CPUS=4
TIMEOUT=${SANDBOX_GUEST_TIMEOUT:-1800}
QEMU=qemu-system-x86_64

die() { echo "cgroup-v2 guest: $*" >&2; exit 3; }

[ $# -ge 1 ] || die "usage: guest.sh COMMAND [ARG...]"
[ "$(id -u)" = 0 ] || die "must run as root (qemu exports / with the host's owners)"
command -v "$QEMU" >/dev/null || die "$QEMU not found: install qemu-system-x86 (scripts/deps.sh does)"
[ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1 ||
	die "no static /bin/busybox for the initramfs: install busybox-static (scripts/deps.sh does)"
kdir=$("$top/scripts/guest-kernel.sh" --print) ||
	die "no guest kernel unpacked: run scripts/guest-kernel.sh (scripts/deps.sh does)"
rel=$(cat "$kdir/release")

work=$(mktemp -d /tmp/sbx-guest.XXXXXX)
qpid=
# qemu itself (its pid file) and the subshell that runs it (boot below)
stop_qemu() {
	[ -s "$work/qemu.pid" ] && kill -KILL "$(cat "$work/qemu.pid")" 2>/dev/null
	[ -n "$qpid" ] && kill -KILL "$qpid" 2>/dev/null
}
cleanup() {
	stop_qemu
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- the initramfs: busybox, the modules for a 9p root, /init -------------
# A module's dependencies are in its .modinfo ("depends=a,b"); load them
# first.  The unpacked package has no modules.dep (depmod is not run).
declare -A mod_path=() mod_seen=()
while IFS= read -r f; do
	n=${f##*/}
	n=${n%%.ko*}
	mod_path[$n]=$f
	mod_path[${n//-/_}]=$f
done < <(find "$kdir/modules/kernel" -name '*.ko*')
mod_order=()
add_module() {
	local m=$1 f d
	[ -n "${mod_seen[$m]:-}" ] && return 0
	mod_seen[$m]=1
	f=${mod_path[$m]:-}
	if [ -z "$f" ]; then
		# built in (modules.builtin) is fine; missing is not
		grep -q "/$m\.ko" "$kdir/modules/modules.builtin" 2>/dev/null && return 0
		die "kernel $rel has no module $m"
	fi
	case $f in
	*.ko) cat "$f" ;;
	*.ko.xz) xz -dc "$f" ;;
	*.ko.zst) zstd -dcq "$f" ;;
	*.ko.gz) gzip -dc "$f" ;;
	esac > "$work/$m.ko" || die "could not read $f"
	for d in $(grep -a -o 'depends=[A-Za-z0-9_,-]*' "$work/$m.ko" | head -n 1 | cut -d= -f2 | tr , ' '); do
		add_module "$d"
	done
	mod_order+=("$m")
}
mkdir -p "$work/ir/bin" "$work/ir/modules" "$work/ir/proc" "$work/ir/dev" "$work/ir/newroot"
for m in virtio_pci 9pnet_virtio 9p; do add_module "$m"; done
for m in "${mod_order[@]}"; do mv "$work/$m.ko" "$work/ir/modules/"; done
printf '%s\n' "${mod_order[@]}" > "$work/ir/modules/order"
cp /bin/busybox "$work/ir/bin/busybox"
# the command, as a script the guest's init runs
{
	printf 'cd /\nexec'
	printf ' %q' "$@"
	printf '\n'
} > "$work/ir/cmd"
# the checkout, which init.sh keeps visible if the fresh /tmp would hide it
printf '%s\n' "$top" > "$work/ir/keep"
cat > "$work/ir/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
fail() { echo "sbx-guest: $*"; echo "sbx-guest-exit 3"; poweroff -f; }
mount -t proc proc /proc
mount -t devtmpfs devtmpfs /dev
for m in $(cat /modules/order); do
	insmod /modules/$m.ko || fail "insmod $m failed"
done
mount -t 9p -o ro,trans=virtio,version=9p2000.L,msize=512000,cache=loose sbxroot /newroot ||
	fail "could not mount the host's root over 9p"
mount -t tmpfs -o mode=0755,size=64m tmpfs /newroot/run || fail "no tmpfs on /run"
mkdir -p /newroot/run/sbx-guest
cp /cmd /newroot/run/sbx-guest/cmd
cp /keep /newroot/run/sbx-guest/keep
umount /proc
umount /dev
exec switch_root /newroot "${SBX_INIT:-/sbin/init}"
EOF
sed -i "s|\${SBX_INIT:-/sbin/init}|$here/init.sh|" "$work/ir/init"
chmod 0755 "$work/ir/init"
(cd "$work/ir" && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1) > "$work/initrd" ||
	die "could not build the initramfs"

# ---- qemu ------------------------------------------------------------------
# boot ACCEL-ARGS... : the guest on our stdout; sets RC (the guest's exit
# code from its last "sbx-guest-exit N" line, 3 if there was none)
boot() {
	local tmo=$1
	shift
	: > "$work/console"
	rm -f "$work/qemu.pid"
	# in a subshell, so that an abort is reported in qemu.log, not here
	("$QEMU" "$@" -m "$MEM" -smp "$CPUS" -nodefaults -display none -no-reboot \
		-serial "file:$work/console" -monitor none -pidfile "$work/qemu.pid" \
		-kernel "$kdir/vmlinuz" -initrd "$work/initrd" \
		-append "console=ttyS0 quiet loglevel=3 panic=-1 cgroup_no_v1=all mitigations=off $GUEST_APPEND" \
		-fsdev local,id=root,path=/,security_model=passthrough,readonly=on,multidevs=remap \
		-device virtio-9p-pci,fsdev=root,mount_tag=sbxroot
	exit $?) \
		</dev/null >"$work/qemu.log" 2>&1 &
	qpid=$!
	# follow the console while the guest runs (the serial line has CRs)
	local n=0 off=0 sz
	while kill -0 "$qpid" 2>/dev/null; do
		if [ "$FOLLOW" = 1 ]; then
			sz=$(stat -c %s "$work/console")
			if [ "$sz" -gt "$off" ]; then
				tail -c +"$((off + 1))" "$work/console" | head -c "$((sz - off))" | tr -d '\r'
				off=$sz
			fi
		fi
		sleep 0.5
		n=$((n + 1))
		if [ $((n / 2)) -ge "$tmo" ]; then
			echo "cgroup-v2 guest: no power-off within ${tmo}s; killed" >&2
			stop_qemu
			tmo=$((tmo + 60))	# once
		fi
	done
	wait "$qpid" 2>/dev/null
	qpid=
	if [ "$FOLLOW" = 1 ]; then
		sz=$(stat -c %s "$work/console")
		[ "$sz" -gt "$off" ] && tail -c +"$((off + 1))" "$work/console" | tr -d '\r'
	fi
	RC=$(tr -d '\r' < "$work/console" | sed -n 's/^sbx-guest-exit \([0-9]*\)$/\1/p' | tail -n 1)
	RC=${RC:-3}
}

qver=$("$QEMU" --version | head -n 1)
probe_file=$kdir/kvm-probe
probe_key="$(uname -r) | $qver | $(grep -m1 '^model name' /proc/cpuinfo)"
kvm_works() {
	[ -r /dev/kvm ] && [ -w /dev/kvm ] || return 1
	if [ -f "$probe_file" ] && [ "$(sed -n 2p "$probe_file")" = "$probe_key" ]; then
		[ "$(sed -n 1p "$probe_file")" = ok ]
		return
	fi
	# a guest that boots to its init and powers off; KVM that cannot run
	# one aborts, hangs or prints nothing: any of those is a "no"
	local saved=$work/ir/cmd.saved
	cp "$work/ir/cmd" "$saved"
	FOLLOW=0 GUEST_APPEND="sbx.probe=1" boot 60 -accel kvm -cpu host
	local ok=no
	grep -q '^sbx-guest: probe ok' <(tr -d '\r' < "$work/console") && [ "$RC" = 0 ] && ok=yes
	{ [ $ok = yes ] && echo ok || echo failed; echo "$probe_key"; } > "$probe_file"
	[ $ok = yes ]
}

FOLLOW=1
GUEST_APPEND=
case $ACCEL in
kvm) ACCEL_ARGS=(-accel kvm -cpu host) ;;
tcg) ACCEL_ARGS=(-accel tcg,thread=multi -cpu max) ;;
auto)
	if kvm_works; then ACCEL_ARGS=(-accel kvm -cpu host)
	else
		ACCEL_ARGS=(-accel tcg,thread=multi -cpu max)
		echo "# guest: KVM unusable here (no /dev/kvm, or a probe guest did not boot under it: $probe_file)"
	fi
	;;
*) die "SANDBOX_GUEST_ACCEL must be auto, kvm or tcg" ;;
esac
echo "# guest: kernel $rel, ${ACCEL_ARGS[*]}, ${MEM} MiB, $CPUS cpus, $qver"
boot "$TIMEOUT" "${ACCEL_ARGS[@]}"
if [ "$RC" = 3 ] && ! grep -q '^sbx-guest-exit' <(tr -d '\r' < "$work/console"); then
	echo "cgroup-v2 guest: the guest did not report an exit code; qemu said:" >&2
	tail -n 20 "$work/qemu.log" >&2
fi
exit "$RC"
