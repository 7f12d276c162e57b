#!/usr/bin/env bash
# bench/egress: the egress proxy against the direct path, in one run, to the
# same HTTPS test server of the suite's fake internet (test/egress/net.sh).
# The proxy is the release build (src/egress/sandbox-egress), serving a
# listening socket of its own on the host namespace's loopback (a sandbox's
# socket is the same kind of socket, made in its namespace).  Prints both
# paths and the ratios; it asserts nothing about time.
#   bench/egress/run.sh [N connections, default 300] [download MB, default 200]
# INTERCEPT=1 compares two paths through the proxy instead (docs/secrets.md):
# a host with a secret (TLS intercepted: both handshakes, the head checked,
# the placeholder replaced, the answer scrubbed) and a host without one
# (TLS relayed), both names of the same server.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
. "$top/bench/lib.sh"
N=${1:-300}
MB=${2:-200}
PROXY=$top/src/egress/sandbox-egress
[ "$(id -u)" -eq 0 ] || bench_die "needs root (network namespaces)"
bench_need ip nsenter openssl /usr/bin/python3
[ -x "$PROXY" ] || make -s -C "$top/src/egress" >/dev/null || bench_die "could not build $PROXY"
EGR_PREFIX=egb$$
. "$top/test/egress/net.sh"
ppid_=
trap '[ -n "$ppid_" ] && kill "$ppid_" 2>/dev/null; egr_down; rm -rf "$EGR_DIR"' EXIT
egr_up || bench_die "fake internet did not come up"
printf 'sandbox-egress/1\nlimit connections 100000\nlimit bytes_down 100000000000\nlimit bytes_up 100000000000\nrule b host allowed.test 443\nrule w host www.allowed.test 443\n' >"$EGR_DIR/policy"
if [ -n "${INTERCEPT:-}" ]; then
	# a secret for allowed.test (the runner's memfd, here a file), the CA
	# bundle it checks the server against, its CA and placeholder read back
	printf 'sandbox-egress-secrets/1\nsecret BENCH_TOKEN b allowed.test %s Authorization: Bearer {}\n' \
		"$(printf 'bench-secret-value-0123456789' | base64 -w0)" >"$EGR_DIR/secrets"
	cat /etc/ssl/certs/ca-certificates.crt "$EGR_DIR/ca.pem" >"$EGR_DIR/trust.pem" 2>/dev/null ||
		cp "$EGR_DIR/ca.pem" "$EGR_DIR/trust.pem"
	nsenter --net="/run/netns/$EGR_H" -- "$PROXY" --policy "$EGR_DIR/policy" --listen 127.0.0.1:13128 \
		--resolver "$EGR_RESOLVER" --secrets-fd 7 --trust-fd 8 --summary-fd 5 \
		7<"$EGR_DIR/secrets" 8<"$EGR_DIR/trust.pem" 5>"$EGR_DIR/summary" &
	ppid_=$!
	for _ in $(seq 1 100); do grep -q '^ready' "$EGR_DIR/summary" 2>/dev/null && break; sleep 0.1; done
	grep -q '^ready' "$EGR_DIR/summary" || bench_die "the proxy did not start"
	awk '/BEGIN CERTIFICATE/,/END CERTIFICATE/' "$EGR_DIR/summary" >"$EGR_DIR/runca.pem"
	echo "bench/egress (INTERCEPT): $N connections per path, ${MB} MB download, $(nproc) CPUs"
	egr_in_host /usr/bin/python3 "$top/bench/egress/client.py" "$EGR_DIR/ca.pem" 13128 "$N" $((MB * 1000000)) \
		"$EGR_DIR/runca.pem" "$(sed -n 's/^env BENCH_TOKEN=//p' "$EGR_DIR/summary")"
	exit 0
fi
nsenter --net="/run/netns/$EGR_H" -- "$PROXY" --policy "$EGR_DIR/policy" --listen 127.0.0.1:13128 --resolver "$EGR_RESOLVER" &
ppid_=$!
sleep 0.3
echo "bench/egress: $N connections per path, ${MB} MB download, $(nproc) CPUs"
egr_in_host /usr/bin/python3 "$top/bench/egress/client.py" "$EGR_DIR/ca.pem" 13128 "$N" $((MB * 1000000))
