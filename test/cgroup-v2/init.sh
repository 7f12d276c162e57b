#!/bin/sh
# test/cgroup-v2/init.sh: pid 1 of the cgroup v2 guest (test/cgroup-v2/guest.sh),
# started by the guest's initramfs once the host's root is mounted
# read-only on /.  Mounts what a Debian system has (fresh and writable
# where a test writes), cgroup2 alone on /sys/fs/cgroup (the kernel runs
# with cgroup_no_v1=all), runs the command the initramfs left in
# /run/sbx-guest/cmd, prints "sbx-guest-exit N" and powers the guest off.
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
HOME=/root
LANG=C.UTF-8
TERM=dumb
export PATH HOME LANG TERM

finish() {
	echo "sbx-guest-exit $1"
	sync
	echo o > /proc/sysrq-trigger
	# the 9p root goes away with the power-off: no program to exec now,
	# and pid 1 must not exit meanwhile (a panic)
	while :; do :; done
}

mount -t proc -o nosuid,nodev,noexec proc /proc
mount -t sysfs -o nosuid,nodev,noexec sysfs /sys
mount -t devtmpfs -o nosuid devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts -o nosuid,noexec,gid=5,mode=620 devpts /dev/pts
# what udev would add to devtmpfs (bash's <(...) needs /dev/fd)
ln -sf /proc/self/fd /dev/fd
ln -sf /proc/self/fd/0 /dev/stdin
ln -sf /proc/self/fd/1 /dev/stdout
ln -sf /proc/self/fd/2 /dev/stderr
mount -t tmpfs -o nosuid,nodev tmpfs /dev/shm
# A checkout under /tmp or /var/tmp (a CI clone, say) would be hidden by the
# fresh tmpfs mounted there next: keep it visible at its own path.
keep=$(cat /run/sbx-guest/keep 2>/dev/null)
case "$keep" in
/tmp/*|/var/tmp/*)
	mkdir -p /run/sbx-guest/keep.d
	mount --bind "$keep" /run/sbx-guest/keep.d || keep=
	;;
*) keep= ;;
esac
mount -t tmpfs -o nosuid,nodev,mode=1777 tmpfs /tmp
mount -t tmpfs -o nosuid,nodev,mode=1777 tmpfs /var/tmp
if [ -n "$keep" ]; then
	mkdir -p "$keep" && mount --bind /run/sbx-guest/keep.d "$keep" ||
		echo "sbx-guest: could not keep $keep visible"
fi
# as systemd mounts it: nsdelegate makes a cgroup namespace a delegation
# boundary (a process cannot move itself out of its namespace's root)
mount -t cgroup2 -o nosuid,nodev,noexec,nsdelegate cgroup2 /sys/fs/cgroup || {
	echo "sbx-guest: could not mount cgroup2"
	finish 3
}
hostname sbx-guest
ip link set lo up 2>/dev/null

case " $(cat /proc/cmdline) " in
*" sbx.probe=1 "*)
	echo "sbx-guest: probe ok"
	finish 0
	;;
esac

/bin/sh /run/sbx-guest/cmd
finish $?
