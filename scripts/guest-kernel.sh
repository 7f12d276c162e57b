#!/usr/bin/env bash
# scripts/guest-kernel.sh [--print]
#
# Puts Debian's own kernel (the package linux-image-amd64 depends on) where
# the cgroup v2 guest (test/cgroup-v2/guest.sh) boots it from:
#
#   /var/cache/sandbox_ext/guest/<package>_<version>/
#       vmlinuz        the kernel
#       modules/       its lib/modules/<release>/ tree
#       release        the release string (uname -r in the guest)
#
# The package is fetched with `apt-get download` and unpacked there, not
# installed: the host's /boot, its initramfs hooks and its own kernel stay
# as they are.  Idempotent: a version already unpacked is kept.  --print
# prints the directory of the newest unpacked kernel and fetches nothing
# (exit 1 if there is none).  Run as root (scripts/deps.sh calls it).
set -euo pipefail

CACHE=${SANDBOX_GUEST_CACHE:-/var/cache/sandbox_ext/guest}

if [ "${1:-}" = --print ]; then
	dir=$(ls -d "$CACHE"/linux-image-*/ 2>/dev/null | sort -V | tail -n 1)
	[ -n "$dir" ] && [ -f "$dir/vmlinuz" ] || exit 1
	echo "${dir%/}"
	exit 0
fi

die() { echo "guest-kernel: $*" >&2; exit 1; }

# linux-image-amd64 is a metapackage; the kernel is the package it depends on
pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9].*\)$/\1/p' | head -n 1)
if [ -z "$pkg" ]; then
	apt-get update -q >/dev/null
	pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9].*\)$/\1/p' | head -n 1)
fi
[ -n "$pkg" ] || die "apt knows no linux-image-amd64 (is a Debian archive in sources.list?)"
ver=$(apt-cache policy "$pkg" | sed -n 's/^ *Candidate: //p')
[ -n "$ver" ] && [ "$ver" != "(none)" ] || die "no installable version of $pkg"
dest=$CACHE/${pkg}_$ver
if [ -f "$dest/vmlinuz" ] && [ -d "$dest/modules" ]; then
	exit 0
fi

echo "guest-kernel: fetching $pkg $ver"
mkdir -p "$CACHE"
tmp=$(mktemp -d "$CACHE/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# apt's sandbox user must be able to write where it downloads
chmod 0755 "$tmp"
chown _apt "$tmp" 2>/dev/null || true
(cd "$tmp" && apt-get download -q "$pkg=$ver" >/dev/null) || die "could not download $pkg $ver"
dpkg-deb -x "$tmp"/*.deb "$tmp/x" || die "could not unpack $pkg $ver"
rel=$(ls "$tmp/x/lib/modules" | head -n 1)
[ -n "$rel" ] && [ -f "$tmp/x/boot/vmlinuz-$rel" ] || die "$pkg $ver has no vmlinuz-<release> and lib/modules/<release>"
mkdir -p "$tmp/out"
mv "$tmp/x/boot/vmlinuz-$rel" "$tmp/out/vmlinuz"
mv "$tmp/x/boot/config-$rel" "$tmp/out/config" 2>/dev/null || true
mv "$tmp/x/lib/modules/$rel" "$tmp/out/modules"
echo "$rel" > "$tmp/out/release"
rm -rf "$dest"
mv "$tmp/out" "$dest"
echo "guest-kernel: $dest ($rel)"
