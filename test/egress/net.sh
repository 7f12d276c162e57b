# The egress suite's fake internet (sourced by test/suites/egress.sh and
# bench/egress): two network namespaces joined by one veth pair, with
# addresses we assign; nothing routes anywhere else.
#   $EGR_H   "the host": the jail and its proxy run here (ip netns exec)
#   $EGR_I   "the internet": fakenet.py (resolver, HTTP/HTTPS servers)
# Addresses: the host 93.184.0.1; the resolver 93.184.0.53; servers
# 93.184.216.34, 93.184.216.35, 140.82.112.3 (public-looking on purpose:
# the proxy refuses every special-purpose range).
EGR_PREFIX=${EGR_PREFIX:-egr$$}
EGR_H=${EGR_PREFIX}h
EGR_I=${EGR_PREFIX}i
EGR_RESOLVER=93.184.0.53
EGR_DIR=${EGR_DIR:-/tmp/${EGR_PREFIX}}
EGR_FAKENET_PID=
EGR_HOSTSVC_PID=
EGR_TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# Run a command in the host namespace.  nsenter --net switches only the
# network namespace; ip netns exec would also remount /sys, hiding the
# cgroup tree the jail needs.
egr_in_host() { nsenter --net="/run/netns/$EGR_H" -- "$@"; }

egr_certs() {		# a test CA and one certificate for every test name
	mkdir -p "$EGR_DIR"
	openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=sandbox_ext egress test CA" \
		-keyout "$EGR_DIR/ca.key" -out "$EGR_DIR/ca.pem" 2>/dev/null || return 1
	openssl req -newkey rsa:2048 -nodes -subj "/CN=allowed.test" \
		-keyout "$EGR_DIR/srv.key" -out "$EGR_DIR/srv.csr" 2>/dev/null || return 1
	printf 'subjectAltName=DNS:allowed.test,DNS:*.allowed.test,DNS:*.api.allowed.test,DNS:denied.test,DNS:other.test,DNS:rebind.test,DNS:pypi.org,DNS:files.pythonhosted.org,DNS:registry.npmjs.org,DNS:mixed.test,IP:93.184.216.34,IP:140.82.112.3\n' >"$EGR_DIR/ext"
	openssl x509 -req -in "$EGR_DIR/srv.csr" -CA "$EGR_DIR/ca.pem" -CAkey "$EGR_DIR/ca.key" \
		-CAcreateserial -days 2 -extfile "$EGR_DIR/ext" -out "$EGR_DIR/srv.pem" 2>/dev/null
}

egr_up() {
	egr_down 2>/dev/null
	egr_certs || return 1
	ip netns add "$EGR_H" && ip netns add "$EGR_I" || return 1
	ip link add "${EGR_PREFIX}a" netns "$EGR_H" type veth peer name "${EGR_PREFIX}b" netns "$EGR_I" || return 1
	ip -n "$EGR_H" link set lo up
	ip -n "$EGR_I" link set lo up
	ip -n "$EGR_H" addr add 93.184.0.1/16 dev "${EGR_PREFIX}a"
	for a in 93.184.0.2/16 93.184.0.53/16 93.184.216.34/16 93.184.216.35/16 140.82.112.3/32; do
		ip -n "$EGR_I" addr add "$a" dev "${EGR_PREFIX}b"
	done
	ip -n "$EGR_H" link set "${EGR_PREFIX}a" up
	ip -n "$EGR_I" link set "${EGR_PREFIX}b" up
	ip -n "$EGR_H" route add default via 93.184.0.2
	ip -n "$EGR_I" route add 93.184.0.0/16 dev "${EGR_PREFIX}b" 2>/dev/null
	# the host's own service, listening on every address of the host (as
	# many do: 0.0.0.0): what a refused name or literal must never reach,
	# neither by loopback nor by the host's own address 93.184.0.1
	ip netns exec "$EGR_H" /usr/bin/python3 -c '
import http.server as h
class S(h.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"HOST-SECRET\n")
    def log_message(self, *a): pass
h.HTTPServer(("0.0.0.0", 80), S).serve_forever()' &
	EGR_HOSTSVC_PID=$!
	ip netns exec "$EGR_I" /usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/fakenet.py" \
		"$EGR_RESOLVER" "$EGR_DIR/srv.pem" "$EGR_DIR/srv.key" "$EGR_DIR" >"$EGR_DIR/fakenet.out" 2>&1 &
	EGR_FAKENET_PID=$!
	for _ in $(seq 1 50); do
		grep -q ready "$EGR_DIR/fakenet.out" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "fakenet did not start: $(cat "$EGR_DIR/fakenet.out")" >&2
	return 1
}

# egr_cluster start|stop DIR PORT [MORE_CONF]: a cluster (scripts/cluster.sh)
# run inside the host namespace, so that its supervisor's jails and their
# proxies reach the fake internet (resolving with its resolver, trusting
# its test CA); MORE_CONF lines go into its postgresql.conf too.
egr_cluster() {
	local cmd=$1 dir=$2 port=$3
	[ "$cmd" != start ] || { chmod 0755 "$EGR_DIR" && chmod 0644 "$EGR_DIR/ca.pem"; } || return 1
	SANDBOX_CLUSTER_DIR=$dir SANDBOX_PGPORT=$port SANDBOX_EXTRA_CONF="sandbox.egress_resolver = '$EGR_RESOLVER'
sandbox.egress_ca_file = '$EGR_DIR/ca.pem'${4:+
$4}" egr_in_host "$EGR_TOP/scripts/cluster.sh" "$cmd"
}

egr_down() {
	[ -n "$EGR_FAKENET_PID" ] && kill "$EGR_FAKENET_PID" 2>/dev/null
	[ -n "$EGR_HOSTSVC_PID" ] && kill "$EGR_HOSTSVC_PID" 2>/dev/null
	EGR_FAKENET_PID= EGR_HOSTSVC_PID=
	ip netns del "$EGR_H" 2>/dev/null
	ip netns del "$EGR_I" 2>/dev/null
	return 0
}
