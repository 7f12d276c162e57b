#!/usr/bin/env bash
# Suite "egress" (docs/egress.md): a sandbox's outbound network through the
# enforcing proxy, tested from the attacker's side against a fake internet
# (test/egress/net.sh: two network namespaces, one veth pair, addresses we
# assign; fakenet.py: a test resolver and HTTP/HTTPS servers with a test
# CA).  The jail and its proxy run in the "host" namespace of that fake
# internet (ip netns exec); the proxy is the ASan/UBSan build, and the
# suite fails on any sanitizer report.  The database part (policy as data,
# the card, the audit rows) runs on the suite's cluster; the end-to-end
# part starts a second cluster inside the fake internet's host namespace
# so that its supervisor's jails reach the fake servers.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
. "$top/test/lib.sh"

EGR_PREFIX=egr${SANDBOX_PGPORT}
EGR_DIR=/tmp/sbx_egress_suite_$SANDBOX_PGPORT
. "$top/test/egress/net.sh"

JAIL=$top/src/jail/sandbox-jail
PROXY=$top/src/egress/sandbox-egress-asan
[ -x "$PROXY" ] || make -s -C "$top/src/egress" SANITIZE=1 >/dev/null
[ -x "$top/src/egress/sandbox-egress" ] || make -s -C "$top/src/egress" >/dev/null

trap 'egr_down' EXIT
if ! egr_up; then
	nok "fake internet up"
	finish_suite
fi
rm -rf "$EGR_DIR/ws" "$EGR_DIR"/log.* "$EGR_DIR"/verdict.* "$EGR_DIR"/code.* "$EGR_DIR"/flood.*
mkdir -p "$EGR_DIR/ws" && chmod 0777 "$EGR_DIR/ws"
ASAN_LOG=$EGR_DIR/asan.log
: >"$ASAN_LOG"

# The policy every test starts from (a test writes its own where it needs).
POLICY=$EGR_DIR/policy
cat >"$POLICY" <<'P'
sandbox-egress/1
rule exact host allowed.test 443,80
rule wild host *.allowed.test 443
rule reb host *.rebind.test 80,443
rule loop host loop.test 80,443
rule meta host meta.test 80,443
rule priv host private.test 80,443
rule cgn host cgnat.test 443
rule mix host mixed.test 443
rule nip host 127.0.0.1.nip.test 80,443
rule v6 host v6ula.test 443
rule reg host pypi.org 443
rule reg2 host files.pythonhosted.org 443
rule reg3 host registry.npmjs.org 443
P

# jrun LANG CODE [POLICY|none] [extra jail options...]: one run in the
# host namespace; stdout+stderr in $out, the verdict in $verdict, the
# connection log in $log.
nrun=0
jrun() {
	local lang=$1 code=$2 pol=${3:-$POLICY}
	shift 3 2>/dev/null || shift $#
	nrun=$((nrun + 1))
	log=$EGR_DIR/log.$nrun
	printf '%s\n' "$code" >"$EGR_DIR/code.$nrun"
	local egress=()
	if [ "$pol" != none ]; then
		egress=(--egress-policy "$pol" --egress-log "$log" --egress-resolver "$EGR_RESOLVER"
			--egress-ca "$EGR_DIR/ca.pem" --egress-proxy "$PROXY")
	fi
	out=$(ip netns exec "$EGR_H" env ASAN_OPTIONS=log_path=$ASAN_LOG.$nrun "$JAIL" \
		--language "$lang" --workspace "$EGR_DIR/ws" --code-file "$EGR_DIR/code.$nrun" \
		--wall-time 60 --quiet --verdict-file "$EGR_DIR/verdict.$nrun" "${egress[@]}" "$@" 2>&1)
	verdict=$(cat "$EGR_DIR/verdict.$nrun" 2>/dev/null)
	[ -f "$log" ] || : >"$log"
}
has() { [[ $out == *"$2"* ]] && ok "$1" || nok "$1" "no [$2] in: ${out:0:600}"; }
hasnt() { [[ $out != *"$2"* ]] && ok "$1" || nok "$1" "[$2] in: ${out:0:600}"; }
vfield() { sed -E "s/.*\"$1\":([^,}]*).*/\1/" <<<"$verdict"; }
logrows() { grep -c "$1" "$log"; }

# ---- clients that should work --------------------------------------------------
t_python_allowed() {
	jrun python '
import requests, urllib.request
print("A", requests.get("https://allowed.test/req").text.strip())
print("B", urllib.request.urlopen("https://www.allowed.test/url").read().decode().strip())
print("C", requests.get("http://allowed.test/plain").text.strip())
print("D", requests.post("https://api.allowed.test/post", data=b"x" * 5000).text.strip())'
	has "python requests over https" "A hello allowed.test /req from 93.184.216.34"
	has "python urllib over https (wildcard)" "B hello www.allowed.test /url from 93.184.216.34"
	has "python requests over plain http" "C hello allowed.test /plain from 93.184.216.34"
	has "python POST with a body" "D got 5000"
	check "four connections logged as allowed" 4 "$(logrows '"decision":"allowed"')"
	check "verdict counts them" "4|0" "$(vfield egress_allowed)|$(vfield egress_denied)"
}

t_node_allowed() {
	jrun node '
const https = require("https"), http = require("http");
https.get("https://allowed.test/nodehttps", (r) => { let b = ""; r.on("data", (d) => b += d);
  r.on("end", async () => { console.log("A", b.trim());
    const f = await fetch("https://www.allowed.test/fetch"); console.log("B", f.status, (await f.text()).trim());
    const p = await fetch("https://allowed.test/post", { method: "POST", body: "y".repeat(300) }); console.log("C", (await p.text()).trim());
    http.get("http://allowed.test/nodehttp", (r2) => { let c = ""; r2.on("data", (d) => c += d); r2.on("end", () => console.log("D", c.trim())); });
  }); }).on("error", (e) => console.log("ERR", e.message));'
	has "node https.get" "A hello allowed.test /nodehttps from 93.184.216.34"
	has "node fetch" "B 200 hello www.allowed.test /fetch from 93.184.216.34"
	has "node fetch POST" "C got 300"
	has "node http.get" "D hello allowed.test /nodehttp from 93.184.216.34"
}

t_shell_allowed() {
	jrun shell '
echo "A $(curl -sS https://allowed.test/curl)"
echo "B $(wget -qO- http://allowed.test/wget)"
curl -sS https://denied.test/ 2>&1 | sed "s/^/C /"
curl -sS -o /dev/null -w "D %{http_code}\n" http://denied.test/'
	has "curl over https" "A hello allowed.test /curl from 93.184.216.34"
	has "wget over http" "B hello allowed.test /wget from 93.184.216.34"
	has "curl refused at once, the proxy says 403" "C curl: (56) CONNECT tunnel failed, response 403"
	has "curl plain http refused with 403" "D 403"
	check "the refusals are logged" 2 "$(logrows 'denied.test:[0-9]* is not in the allowlist')"
}

# ---- refusals --------------------------------------------------------------------
PYGET='
import sys, requests
for u in sys.argv[1:] if len(sys.argv) > 1 else URLS:
    try:
        r = requests.get(u, timeout=20)
        print(u, "GOT", r.status_code, r.text.strip()[:100])
    except Exception as e:
        print(u, "ERR", str(e))'
pyget() {		# URL... through requests, one line each
	local urls
	urls=$(printf '"%s",' "$@")
	jrun python "URLS = [${urls%,}]$PYGET"
}

t_denied_host() {
	pyget https://denied.test/ https://other.test/
	has "a host without a rule: why, in the error" "Tunnel connection failed: 403 egress denied: denied.test:443 is not in the allowlist"
	has "other.test too" "egress denied: other.test:443 is not in the allowlist"
	hasnt "nothing reached the server" "GOT 200"
	check "logged, with no address (never resolved)" 2 "$(grep -c '"address":null,"decision":"denied"' "$log")"
}

t_wildcard_apex() {
	cat >"$EGR_DIR/pol.wild" <<'P'
sandbox-egress/1
rule w host *.allowed.test 443
P
	jrun python "URLS = ['https://www.allowed.test/', 'https://deep.api.allowed.test/', 'https://allowed.test/', 'https://xallowed.test/']$PYGET" "$EGR_DIR/pol.wild"
	has "wildcard matches a subdomain" "https://www.allowed.test/ GOT 200"
	has "wildcard matches a deeper subdomain" "https://deep.api.allowed.test/ GOT 200"
	has "wildcard does not match the apex" "egress denied: allowed.test:443 is not in the allowlist"
	has "nor a name that merely ends the same" "egress denied: xallowed.test:443 is not in the allowlist"
}

t_wrong_port() {
	pyget https://allowed.test:8443/ http://www.allowed.test:80/
	has "a port the rule does not list" "egress denied: port 8443 is not allowed for allowed.test"
	has "port 80 not listed for the wildcard" "egress denied: port 80 is not allowed for www.allowed.test"
	jrun python '
import socket
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(b"CONNECT allowed.test:22 HTTP/1.1\r\nHost: allowed.test:22\r\n\r\n")
print("R", s.recv(200).split(b"\r\n")[0].decode())'
	has "CONNECT to another port once the host matched" "R HTTP/1.1 403 egress denied: port 22 is not allowed for allowed.test"
}

t_ip_literal() {
	pyget https://93.184.216.34/ https://1572395042/ https://0135.0270.0330.042/ https://0x5db8d822/ https://93.184.55346/
	has "an IP literal without a CIDR rule" "egress denied: IP address 93.184.216.34 is not in the allowlist"
	has "decimal address" "egress denied: 1572395042 is a numeric host name"
	has "octal address" "egress denied: 0135.0270.0330.042 is a numeric host name"
	has "hex address" "egress denied: 0x5db8d822 is a numeric host name"
	has "short dotted form" "egress denied: 93.184.55346 is a numeric host name"
	cat >"$EGR_DIR/pol.cidr" <<'P'
sandbox-egress/1
rule c cidr 93.184.216.0/24 443
rule lo cidr 127.0.0.0/8 80,443
rule ten cidr 10.0.0.0/8 443
P
	jrun python "URLS = ['https://93.184.216.34/', 'https://1572395042/', 'http://127.0.0.1/', 'https://10.0.0.5/']$PYGET" "$EGR_DIR/pol.cidr"
	has "a CIDR rule admits the canonical literal" "https://93.184.216.34/ GOT 200 hello 93.184.216.34 / from 93.184.216.34"
	has "but never a numeric spelling of it" "egress denied: 1572395042 is a numeric host name"
	has "a CIDR rule cannot open loopback" "egress denied: 127.0.0.1 is a loopback address"
	has "nor a private range" "egress denied: 10.0.0.5 is a private address"
	hasnt "the host's loopback service never answered" "HOST-SECRET"
}

t_forbidden_names() {
	pyget http://loop.test/ https://meta.test/ http://private.test/ https://cgnat.test/ https://mixed.test/ http://127.0.0.1.nip.test/ https://v6ula.test/
	has "a name resolving to 127.0.0.1" "egress denied: loop.test resolves to 127.0.0.1, a loopback address"
	has "to the metadata address" "egress denied: meta.test resolves to 169.254.169.254, the cloud metadata address"
	has "to a private address" "egress denied: private.test resolves to 10.0.0.5, a private address"
	has "to CGNAT" "egress denied: cgnat.test resolves to 100.64.0.1, a shared (CGNAT) address"
	has "one private answer among public ones" "egress denied: mixed.test resolves to 192.168.1.1, a private address"
	has "127.0.0.1.nip-style names" "egress denied: 127.0.0.1.nip.test resolves to 127.0.0.1, a loopback address"
	has "an AAAA-only name in the ULA range" "egress denied: v6ula.test resolves to fd00::1, a unique local (ULA) address"
	hasnt "the host's loopback service never answered" "HOST-SECRET"
}

t_rebinding() {
	# r1.rebind.test: the first lookup answers public, every later one
	# 127.0.0.1.  One lookup per connection, and the address dialled is
	# the one vetted: the first connection reaches the public server (a
	# second lookup would have reached the host's own service), the next
	# is refused.
	pyget http://r$$.rebind.test/ http://r$$.rebind.test/again
	has "first connection: the vetted public address" "http://r$$.rebind.test/ GOT 200 hello r$$.rebind.test / from 93.184.216.34"
	has "after the rebind: refused" "egress denied: r$$.rebind.test resolves to 127.0.0.1, a loopback address"
	hasnt "the host's loopback service never answered" "HOST-SECRET"
}

t_sni_and_host() {
	jrun python '
import socket, ssl
def tunnel(host):
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(b"CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n\r\n" % (host, host))
    assert s.recv(100).startswith(b"HTTP/1.1 200")
    return s
ctx = ssl.create_default_context(cafile="/sandbox/.egress-ca.pem")
try:
    t = ctx.wrap_socket(tunnel(b"allowed.test"), server_hostname="denied.test")
    t.sendall(b"GET / HTTP/1.1\r\nHost: denied.test\r\n\r\n"); print("FRONTED", t.recv(200))
except Exception as e:
    print("A refused", type(e).__name__)
s = tunnel(b"allowed.test"); s.sendall(b"GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
print("B", s.recv(100))
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(b"GET http://allowed.test/ HTTP/1.1\r\nHost: denied.test\r\n\r\n")
print("C", s.recv(300).split(b"\r\n")[0].decode())
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(b"GET http://allowed.test/one HTTP/1.1\r\nHost: allowed.test\r\n\r\nGET http://denied.test/two HTTP/1.1\r\nHost: denied.test\r\n\r\n")
import time; data = b""
while True:
    d = s.recv(4096)
    if not d: break
    data += d
print("D", data.count(b"HTTP/1.1 200"), b"/two" in data, b"/one" in data)
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(b"GET https://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
print("E", s.recv(300).split(b"\r\n")[0].decode())'
	has "CONNECT host != SNI: the tunnel is closed" "A refused"
	hasnt "no fronted answer" "FRONTED"
	check "logged with the reason" 1 "$(logrows 'the TLS server name denied.test is not the tunnel.s host allowed.test')"
	has "plain bytes through a CONNECT tunnel: closed" "B b''"
	check "logged: only TLS is relayed" 1 "$(logrows 'did not start with a TLS ClientHello')"
	has "Host header != the URL's host" "C HTTP/1.1 403 egress denied: the Host header does not name the request's host"
	has "a pipelined second request is never sent" "D 1 False True"
	has "absolute https:// through plain HTTP refused" "E HTTP/1.1 403 egress denied: only CONNECT and absolute http:// requests go through the proxy"
}

t_ipv6() {
	pyget 'https://[2606:4700::1111]/' 'http://[::1]/' 'https://[::ffff:127.0.0.1]/' 'https://[fe80::1]/'
	has "an IPv6 literal without a rule" "egress denied: IP address 2606:4700::1111 is not in the allowlist"
	has "IPv6 loopback" "egress denied: IP address ::1 is not in the allowlist"
	has "IPv4-mapped loopback" "egress denied: IP address ::ffff:127.0.0.1 is not in the allowlist"
	cat >"$EGR_DIR/pol.v6" <<'P'
sandbox-egress/1
rule all6 cidr ::/0 80,443
P
	jrun python "URLS = ['http://[::1]/', 'https://[::ffff:127.0.0.1]/', 'https://[fe80::1]/', 'https://[fd00::1]/']$PYGET" "$EGR_DIR/pol.v6"
	has "even ::/0 cannot open ::1" "egress denied: ::1 is a loopback address"
	has "nor a mapped IPv4 loopback" "egress denied: ::ffff:127.0.0.1 is an IPv4-mapped address"
	has "nor link-local" "egress denied: fe80::1 is a link-local address"
	has "nor ULA" "egress denied: fd00::1 is a unique local (ULA) address"
}

t_no_route_no_dns() {
	jrun python '
import socket, errno
def tryit(name, f):
    try:
        f(); print(name, "WORKED")
    except socket.gaierror:
        print(name, "blocked gaierror")
    except OSError as e:
        print(name, "blocked", errno.errorcode.get(e.errno, e.errno) if e.errno else type(e).__name__)
tryit("tcp-direct", lambda: socket.create_connection(("93.184.216.34", 443), timeout=5))
tryit("tcp-v6", lambda: socket.create_connection(("2606:4700::1111", 443), timeout=5))
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
tryit("udp-dns", lambda: u.sendto(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07allowed\x04test\x00\x00\x01\x00\x01", ("93.184.0.53", 53)))
tryit("getaddrinfo", lambda: socket.getaddrinfo("allowed.test", 443))
tryit("raw-inet", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
tryit("packet", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0))
tryit("netlink", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0))
print(open("/etc/resolv.conf").read().strip() or "resolv.conf empty")'
	has "direct TCP: no route" "tcp-direct blocked ENETUNREACH"
	has "direct IPv6: no route" "tcp-v6 blocked ENETUNREACH"
	has "UDP to the resolver: no route" "udp-dns blocked ENETUNREACH"
	has "no DNS inside at all" "getaddrinfo blocked gaierror"
	has "raw IP sockets refused" "raw-inet blocked EPERM"
	has "packet sockets refused" "packet blocked EPERM"
	has "netlink refused" "netlink blocked EPERM"
	has "no resolver configured" "resolv.conf empty"
	hasnt "nothing got out" "WORKED"
}

t_proxy_own_ports() {
	jrun python '
import socket
def ask(req):
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(req); return s.recv(300).split(b"\r\n")[0].decode()
print("A", ask(b"CONNECT 127.0.0.1:3128 HTTP/1.1\r\nHost: 127.0.0.1:3128\r\n\r\n"))
print("B", ask(b"CONNECT localhost:3128 HTTP/1.1\r\nHost: localhost:3128\r\n\r\n"))
print("C", ask(b"CONNECT 93.184.0.53:53 HTTP/1.1\r\nHost: 93.184.0.53:53\r\n\r\n"))
print("D", ask(b"GET http://allowed.test:3128/ HTTP/1.1\r\nHost: allowed.test:3128\r\n\r\n"))
for p in (22, 80, 5432, 3129):
    try:
        socket.create_connection(("127.0.0.1", p), timeout=3); print("OPEN", p)
    except OSError as e:
        print("closed", p)'
	has "the proxy to itself by address" "A HTTP/1.1 403 egress denied: IP address 127.0.0.1 is not in the allowlist"
	has "the proxy to itself by name" "B HTTP/1.1 403 egress denied: localhost:3128 is not in the allowlist"
	has "the resolver through the proxy" "C HTTP/1.1 403 egress denied: IP address 93.184.0.53 is not in the allowlist"
	has "an allowed host on the proxy's port" "D HTTP/1.1 403 egress denied: port 3128 is not allowed for allowed.test"
	hasnt "no other port of the host is reachable from inside" "OPEN"
}

t_flood_and_slow() {
	# Run A: holds 32 silent connections (the per-run limit of connections
	# in flight) and opens 300 more; run B, at the same time, is served as
	# usual (each run has its own proxy).  Bounded: A ends after 300.
	rm -f "$EGR_DIR/ws/flooding"
	printf '%s\n' '
import socket, time, os
held = [socket.create_connection(("127.0.0.1", 3128)) for _ in range(40)]
open("/workspace/flooding", "w").close()
refused = 0
for i in range(300):
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(b"CONNECT allowed.test:443 HTTP/1.1\r\n\r\n")
    if b"too many connections at once" in s.recv(300): refused += 1
    s.close()
time.sleep(2)
print("A refused", refused)' >"$EGR_DIR/flood.py"
	ip netns exec "$EGR_H" "$JAIL" --language python --workspace "$EGR_DIR/ws" --code-file "$EGR_DIR/flood.py" \
		--wall-time 60 --quiet --verdict-file "$EGR_DIR/flood.verdict" --egress-policy "$POLICY" \
		--egress-log "$EGR_DIR/flood.log" --egress-resolver "$EGR_RESOLVER" --egress-proxy "$PROXY" \
		>"$EGR_DIR/flood.out" 2>&1 &
	local apid=$!
	wait_for 30 '[ -f "$EGR_DIR/ws/flooding" ]' || nok "the flood started"
	jrun python 'import requests; print("B", requests.get("https://allowed.test/b").text.strip())'
	has "another run is served during the flood" "B hello allowed.test /b from 93.184.216.34"
	wait $apid
	out=$(cat "$EGR_DIR/flood.out")
	has "the flooding run's excess connections are refused at once" "A refused 300"
	rm -f "$EGR_DIR/ws/flooding" "$EGR_DIR/flood.log"
	# a client that never finishes its request head is dropped (10 s)
	jrun python '
import socket, time
s = socket.create_connection(("127.0.0.1", 3128)); s.sendall(b"CONNECT allowed.test:443 HTTP/1.1\r\n")
s.settimeout(30); print("slow", s.recv(10) == b"")'
	has "a slow client is dropped" "slow True"
	check "and logged" 1 "$(logrows 'no request within 10 s')"
}

t_caps() {
	cat >"$EGR_DIR/pol.caps" <<'P'
sandbox-egress/1
limit connections 2
limit bytes_down 200000
rule a host allowed.test 443,80
P
	jrun python '
import requests
for u in ["https://allowed.test/bytes/1000", "https://allowed.test/bytes/1000000", "https://allowed.test/third"]:
    try:
        r = requests.get(u, timeout=20); print(u, "GOT", len(r.content))
    except Exception as e:
        print(u, "ERR", str(e)[:300])' "$EGR_DIR/pol.caps"
	has "a small download passes" "/bytes/1000 GOT 1000"
	hasnt "the download past the byte cap is cut" "/bytes/1000000 GOT 1000000"
	has "then no more connections" "egress denied: the run's connection limit (2) is used up"
	check "the verdict flags the limit" true "$(vfield egress_limit_hit)"
	check "bytes down at most the cap" 1 "$([ "$(vfield egress_bytes_down)" -le 200000 ] && echo 1)"
	check "logged with the reason" 1 "$(logrows "the run's byte limit (down) was reached")"
}

t_runtime_installs() {
	jrun shell '
pip install --break-system-packages left-pad 2>&1 | tail -n 2
cd /tmp && npm install left-pad 2>&1 | grep -m1 -o "ENOTCACHED\|EACCES\|ENETUNREACH\|403"'
	has "pip stays off with the registry allowlisted" "from versions: none"
	has "npm stays offline" "ENOTCACHED"
	check "neither even tried the proxy" 0 "$(vfield egress_attempts)"
}

t_no_policy_no_proxy() {
	jrun python '
import os, socket
print("proxy vars:", [k for k in os.environ if "proxy" in k.lower()])
try:
    socket.create_connection(("127.0.0.1", 3128), timeout=3); print("OPEN")
except OSError as e:
    print("closed", e.errno)' none
	has "no policy: no proxy variables" "proxy vars: []"
	has "no policy: nothing listens" "closed 111"
	check "no policy: no egress fields in the verdict" "" "$(grep -o egress_attempts <<<"$verdict")"
}

t_sanitizers() {
	check "no ASan/UBSan report from the proxy" "" \
		"$(cat "$ASAN_LOG".* 2>/dev/null | grep -m3 -E 'ERROR: AddressSanitizer|runtime error|LeakSanitizer')"
}

run_tests t_python_allowed t_node_allowed t_shell_allowed t_denied_host t_wildcard_apex \
	t_wrong_port t_ip_literal t_forbidden_names t_rebinding t_sni_and_host t_ipv6 \
	t_no_route_no_dns t_proxy_own_ports t_flood_and_slow t_caps t_runtime_installs \
	t_no_policy_no_proxy t_sanitizers
finish_suite
