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
# (make itself decides: a build older than its sources is rebuilt, not used)
make -s -C "$top/src/egress" SANITIZE=1 >/dev/null
make -s -C "$top/src/egress" >/dev/null

trap 'egr_down' EXIT
if ! egr_up; then
	nok "fake internet up"
	finish_suite
fi
rm -rf "$EGR_DIR/ws" "$EGR_DIR"/log.* "$EGR_DIR"/verdict.* "$EGR_DIR"/code.* "$EGR_DIR"/flood.*
mkdir -p "$EGR_DIR/ws" && chmod 0777 "$EGR_DIR/ws"
# the proxy runs as nobody when the jail is root: a directory it can write
mkdir -p -m 1777 "$EGR_DIR/asan" && chmod 1777 "$EGR_DIR/asan" && rm -f "$EGR_DIR"/asan/*
ASAN_LOG=$EGR_DIR/asan/log

# The policy every test starts from (a test writes its own where it needs).
POLICY=$EGR_DIR/policy
cat >"$POLICY" <<'P'
sandbox-egress/1
rule exact host allowed.test 443,80
rule wild host *.allowed.test 443
rule reb host *.rebind.test 80,443
rule rebttl host *.rebindttl.test 80,443
rule many host *.many.test 443
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
rule h1 host ptrloop.test 443
rule h2 host overlong.test 443
rule h3 host wrongid.test 443
rule h4 host othername.test 443
rule hself host hostself.test 80
P

# jrun LANG CODE [POLICY|none] [extra jail options...]: one run in the
# host namespace; stdout+stderr in $out, the verdict in $verdict, the
# connection log in $log.  SECRETS=FILE: the run's secrets (fd 9,
# --egress-secrets-fd); JPROXY: another proxy binary; NOCA=1: no
# --egress-ca (the system's CAs only, for the payload and the proxy).
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
			--egress-proxy "${JPROXY:-$PROXY}")
		[ -n "${NOCA:-}" ] || egress+=(--egress-ca "$EGR_DIR/ca.pem")
		[ -z "${SECRETS:-}" ] || egress+=(--egress-secrets-fd 9)
	fi
	out=$(egr_in_host env ASAN_OPTIONS=log_path=$ASAN_LOG.$nrun "$JAIL" \
		--language "$lang" --workspace "$EGR_DIR/ws" --code-file "$EGR_DIR/code.$nrun" \
		--wall-time 60 --quiet --verdict-file "$EGR_DIR/verdict.$nrun" "${egress[@]}" "$@" \
		9<"${SECRETS:-/dev/null}" 2>&1)
	verdict=$(cat "$EGR_DIR/verdict.$nrun" 2>/dev/null)
	[ -f "$log" ] || : >"$log"
}
has() { [[ $out == *"$2"* ]] && ok "$1" || nok "$1" "no [$2] in: ${out:0:600}"; }
hasnt() { [[ $out != *"$2"* ]] && ok "$1" || nok "$1" "[$2] in: ${out:0:600}"; }
hasline() { grep -qxF -- "$2" <<<"$out" && ok "$1" || nok "$1" "no line [$2] in: $(grep -m1 -- "^${2%%:*}:" <<<"$out")"; }
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

t_refusal_messages() {
	# what each client shows of a refusal (docs/egress.md, "What a refusal says")
	jrun node '
const https = require("https");
https.get("https://denied.test/x", (r) => console.log("A GOT", r.statusCode)).on("error", (e) => console.log("A", e.code, e.message));
fetch("https://denied.test/y").then((r) => console.log("B GOT", r.status),
  (e) => console.log("B", e.message, "| cause:", e.cause && e.cause.message));
fetch("http://denied.test/z").then((r) => console.log("C", r.status, r.statusText), (e) => console.log("C ERR", e.message));'
	has "node https.get: the reason in the error" "A EGRESS_DENIED egress denied: denied.test:443 is not in the allowlist"
	has "node fetch over https: the reason in the message" "B fetch failed: egress denied: denied.test:443 is not in the allowlist |"
	has "and in e.cause.message" "cause: egress denied: denied.test:443 is not in the allowlist"
	has "node fetch over plain http: a 403 with the reason" "C 403 egress denied: denied.test:80 is not in the allowlist"
	jrun shell '
wget -O- https://denied.test/ 2>&1 | sed "s/^/W /"
wget -O- http://denied.test/ 2>&1 | sed "s/^/X /"
curl -sS http://denied.test/ 2>&1 | sed "s/^/Y /"'
	has "wget over https: the reason" "W Proxy tunneling failed: egress denied: denied.test:443 is not in the allowlist"
	has "wget over plain http: the reason" "ERROR 403: egress denied: denied.test:80 is not in the allowlist"
	has "curl over plain http: the body says why" "Y egress denied: denied.test:80 is not in the allowlist"
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
	check "a TTL of 0 is never kept: the second connection looked the name up again" 2 \
		"$(dns_queries "r$$.rebind.test")"
}

# How many queries the fake resolver got for a name (asked directly, from
# the host namespace: the fake servers count them).
dns_queries() { egr_in_host curl -sS --max-time 5 "http://93.184.216.34/dns-queries/$1"; }

t_dns_cache() {
	local before name=rt$$.rebindttl.test
	# an answer is kept for its TTL (300 s here): one lookup for three
	# connections of one run; a new run (a new proxy) asks again
	before=$(dns_queries www.allowed.test)
	pyget https://www.allowed.test/a https://www.allowed.test/b https://www.allowed.test/c
	has "three connections to one name" "https://www.allowed.test/c GOT 200 hello www.allowed.test /c from 93.184.216.34"
	check "one lookup for them (the answer's TTL is 300 s)" 1 "$(($(dns_queries www.allowed.test) - before))"
	check "each dialed the vetted address" 3 "$(grep -c '"host":"www.allowed.test","port":443,"address":"93.184.216.34","decision":"allowed"' "$log")"
	# kept for its TTL only, and vetted again when asked again: a
	# rebinding name with a TTL of 2 s answers public, then 127.0.0.1
	jrun python "
import time, requests
def get(p):
    try:
        print(p, 'GOT', requests.get('http://$name' + p, timeout=20).text.strip())
    except Exception as e:
        print(p, 'ERR', str(e))
get('/one'); get('/two'); time.sleep(3); get('/three')"
	has "within the TTL: the kept public answer" "/two GOT hello $name /two from 93.184.216.34"
	has "after it: looked up again, vetted again, refused" "/three GOT egress denied: $name resolves to 127.0.0.1, a loopback address"
	check "two lookups in all" 2 "$(dns_queries "$name")"
	hasnt "the host's loopback service never answered" "HOST-SECRET"
	# bounded in size: 64 names, the one that expires first makes room
	cat >"$EGR_DIR/pol.many" <<'P'
sandbox-egress/1
limit connections 200
rule many host *.many.test 443
P
	jrun python "
import socket
def tunnel(h):
    s = socket.create_connection(('127.0.0.1', 3128))
    s.sendall(b'CONNECT %s:443 HTTP/1.1\\r\\nHost: %s:443\\r\\n\\r\\n' % (h, h))
    r = s.recv(300).split(b'\\r\\n')[0].decode()
    s.close()
    return r
names = [b'n%d.c$$.many.test' % i for i in range(65)]
print('tunnels', sorted(set(tunnel(h) for h in names + [names[0], names[64]])))" "$EGR_DIR/pol.many"
	has "67 tunnels to 65 names" "tunnels ['HTTP/1.1 200 Connection established']"
	check "the first name was let go for the 65th: asked again" 2 "$(dns_queries "n0.c$$.many.test")"
	check "the 65th was still kept" 1 "$(dns_queries "n64.c$$.many.test")"
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

t_ca_bundle() {
	# --egress-ca adds a CA to the system's (runners.md egress_ca_file):
	# the one file every client variable names holds both
	local sys=/etc/ssl/certs/ca-certificates.crt nsys
	nsys=$(grep -c 'BEGIN CERTIFICATE' "$sys")
	jrun python "EXTRA = '''$(cat "$EGR_DIR/ca.pem")'''"'
import os, ssl
f = os.environ["SSL_CERT_FILE"]
print("same file for all", len({os.environ[v] for v in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS")}))
text = open(f).read()
print("system bundle first", text.startswith(open("/etc/ssl/certs/ca-certificates.crt").read()))
print("extra CA in it", EXTRA.strip() in text)
ctx = ssl.create_default_context(cafile=f)
print("certificates", len(ctx.get_ca_certs()))
print("subjects", any(dict(x[0] for x in c["subject"]).get("commonName") == "sandbox_ext egress test CA" for c in ctx.get_ca_certs()))'
	has "one bundle for every client" "same file for all 1"
	has "it starts with the system's bundle" "system bundle first True"
	has "and holds the extra CA" "extra CA in it True"
	has "all of them load: the system's and the extra one" "certificates $((nsys + 1))"
	has "the test CA among them" "subjects True"
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

t_host_own_addresses() {
	# The proxy runs in the host's network namespace: the host's own
	# public-looking address (93.184.0.1, where the host's service listens
	# too) must stay out of reach, by a CIDR rule covering it and by an
	# allowed name that resolves to it.
	cat >"$EGR_DIR/pol.self" <<'P'
sandbox-egress/1
rule self cidr 93.184.0.0/24 80
rule hself host hostself.test 80
P
	jrun python "URLS = ['http://93.184.0.1/', 'http://hostself.test/']$PYGET" "$EGR_DIR/pol.self"
	has "a CIDR rule cannot open the host's own address" \
		"GOT 403 egress denied: 93.184.0.1 is an address of the sandbox's host"
	has "nor a name resolving to it" \
		"GOT 403 egress denied: hostself.test resolves to 93.184.0.1, an address of the sandbox's host"
	hasnt "the host's service never answered" "HOST-SECRET"
	check "both logged with the reason" 2 "$(logrows "an address of the sandbox's host")"
	# An address the host gains while the run goes on (not in the list the
	# proxy read at its start): the connection reaches the host itself,
	# which the proxy sees after the connect and refuses before a byte.
	rm -f "$EGR_DIR/ws/addr-wait" "$EGR_DIR/ws/addr-added"
	rm -f "$EGR_DIR/late.out"
	(jrun python '
import os, time
open("/workspace/addr-wait", "w").close()
while not os.path.exists("/workspace/addr-added"):
    time.sleep(0.05)
URLS = ["http://93.184.0.9/"]'"$PYGET" "$EGR_DIR/pol.self"
		printf '%s\n' "$out" >"$EGR_DIR/late.out") &
	local rpid=$!
	if wait_for 30 '[ -f "$EGR_DIR/ws/addr-wait" ]'; then
		ip -n "$EGR_H" addr add 93.184.0.9/32 dev "${EGR_PREFIX}a"
		: >"$EGR_DIR/ws/addr-added"
	else
		nok "the late-address run started"
		: >"$EGR_DIR/ws/addr-added"
	fi
	wait $rpid
	ip -n "$EGR_H" addr del 93.184.0.9/32 dev "${EGR_PREFIX}a" 2>/dev/null
	rm -f "$EGR_DIR/ws/addr-wait" "$EGR_DIR/ws/addr-added"
	nrun=$((nrun + 1))		# the subshell's jrun took this number
	out=$(cat "$EGR_DIR/late.out" 2>/dev/null)
	has "an address the host gained during the run: refused after the connect" \
		"GOT 403 egress denied: 93.184.0.9:80 (93.184.0.9) reached an address of the sandbox's host"
	hasnt "the host's service never answered" "HOST-SECRET"
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
	egr_in_host "$JAIL" --language python --workspace "$EGR_DIR/ws" --code-file "$EGR_DIR/flood.py" \
		--wall-time 60 --quiet --verdict-file "$EGR_DIR/flood.verdict" --egress-policy "$POLICY" \
		--egress-log "$EGR_DIR/flood.log" --egress-resolver "$EGR_RESOLVER" --egress-proxy "$PROXY" \
		>"$EGR_DIR/flood.out" 2>&1 &
	local apid=$!
	wait_for 30 '[ -f "$EGR_DIR/ws/flooding" ]' || nok "the flood started"
	local jpid ppid_ user
	jpid=$(pgrep -f "^$JAIL --language python .*flood.py" | head -n 1)
	ppid_=$(pgrep -P "${jpid:-0}" -f sandbox-egress | head -n 1)
	user=$(ps -o user= -p "${ppid_:-0}" 2>/dev/null)
	check "the proxy of a run started by root runs as nobody" nobody "$user"
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
	# the upload cap: a POST larger than it is cut mid-body (the server
	# never gets it whole, so never answers), and the run is flagged
	cat >"$EGR_DIR/pol.capsup" <<'P'
sandbox-egress/1
limit bytes_up 100000
rule a host allowed.test 443,80
P
	jrun python '
import requests
for name, f in [("small", lambda: requests.post("https://allowed.test/post", data=b"s" * 1000, timeout=20)),
                ("big", lambda: requests.post("https://allowed.test/post", data=b"b" * 500000, timeout=20)),
                ("after", lambda: requests.get("http://allowed.test/after", timeout=20))]:
    try:
        r = f(); print(name, "GOT", r.status_code, r.text.strip()[:200])
    except Exception as e:
        print(name, "ERR", type(e).__name__)' "$EGR_DIR/pol.capsup"
	has "a small upload passes" "small GOT 200 got 1000"
	has "the upload past the byte cap is cut (the request fails)" "big ERR"
	hasnt "the server never got it whole" "got 500000"
	has "then the run's connections are refused" "after GOT 403 egress denied: the run's byte limit is used up"
	check "the verdict flags the limit" true "$(vfield egress_limit_hit)"
	check "bytes up at most the cap" 1 "$([ "$(vfield egress_bytes_up)" -le 100000 ] && echo 1)"
	check "logged with the reason" 1 "$(logrows "the run's byte limit (up) was reached")"
	# many at once: the cap counts admissions, not finished connections
	jrun python '
import socket, threading
res = []
def one():
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(b"CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n")
    res.append(s.recv(200).split(b"\r\n")[0].decode()); held.append(s)
held = []
ts = [threading.Thread(target=one) for _ in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
print("admitted", sum(r.startswith("HTTP/1.1 200") for r in res), "refused", sum("connection limit (2)" in r for r in res))' "$EGR_DIR/pol.caps"
	has "eight at once against a cap of two: two admitted" "admitted 2 refused 6"
}

t_runtime_installs() {
	# Every switch the payload owns turned back on (config file, index,
	# npm's offline mode) with the registry hosts allowed and answering
	# (G): the installers are not in the sandbox, so nothing installs and
	# none of them contacts the proxy.
	jrun shell '
PIP_CONFIG_FILE=/dev/null PIP_NO_INDEX= pip install --index-url https://pypi.org/simple --target /tmp/x left-pad 2>&1 | tail -n 1 | sed "s/^/A /"
PIP_CONFIG_FILE=/dev/null PIP_NO_INDEX= python3 -m pip install --index-url https://pypi.org/simple --target /tmp/x left-pad 2>&1 | tail -n 1 | sed "s/^/B /"
python3 -m ensurepip --root /tmp/e 2>&1 | tail -n 1 | sed "s/^/C /"
pip3 --version 2>&1 | sed "s/^/D /"
cd /tmp && npm_config_offline=false npm install --offline=false --registry https://registry.npmjs.org/ left-pad 2>&1 | tail -n 1 | sed "s/^/E /"
npx --yes left-pad 2>&1 | tail -n 1 | sed "s/^/F /"
python3 -c "import requests; print(\"G\", requests.get(\"https://pypi.org/simple/left-pad/\").status_code)"
python3 -c "import requests, urllib3, json, ssl, setuptools; print(\"H imports ok\")" 2>&1
node -e "require(\"https\"); require(\"http\"); console.log(\"I node ok\")"
ls /tmp/x /tmp/e 2>&1 | sed "s/^/J /"'
	has "pip with its config and index switched back on: not there" \
		"A pip: not available in the sandbox (runtime package installs are disabled)"
	has "python3 -m pip: no pip module" "B /usr/bin/python3: No module named pip"
	has "python3 -m ensurepip: no ensurepip" "C /usr/bin/python3: No module named ensurepip"
	has "pip3 refuses too" "D pip3: not available in the sandbox"
	has "npm with offline switched off: not there" "npm: command not found"
	has "npx: not there" "npx: command not found"
	has "the registry host itself is reachable (data, not an install)" "G 200"
	has "Python's libraries still import" "H imports ok"
	has "node still runs" "I node ok"
	hasnt "nothing was installed" "J /tmp/x:"
	check "only the requests download contacted the proxy" 1 "$(vfield egress_attempts)"
}

t_hostile_inputs() {
	# malformed requests and TLS hellos from the payload, malformed answers
	# from a hostile resolver: each refused with a reason, the proxy (ASan)
	# serving on; t_sanitizers then finds no report
	jrun python '
import socket, struct
def ask(data, close=False):
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(data)
    if close: s.shutdown(socket.SHUT_WR)
    s.settimeout(15)
    try:
        return s.recv(400).split(b"\r\n")[0].decode(errors="replace")
    except Exception as e:
        return "ERR " + str(e)
for i, req in enumerate([b"\x00\x01\x02\r\n\r\n", b"GET\r\n\r\n", b"CONNECT\r\n\r\n",
        b"CONNECT allowed.test HTTP/1.1\r\n\r\n", b"CONNECT allowed.test:99999 HTTP/1.1\r\n\r\n",
        b"CONNECT [::1 HTTP/1.1\r\n\r\n", b"CONNECT :443 HTTP/1.1\r\n\r\n",
        b"CONNECT allowed.test:443 HTTP/2.0\r\n\r\n", b"GET http://user@allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
        b"POST http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
        b"POST http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"GET http://" + b"a" * 300 + b".test/ HTTP/1.1\r\nHost: x\r\n\r\n",
        b"X" * 20000]):
    print("R%d" % i, ask(req))
# TLS hellos that lie about their lengths
def tunnel_then(payload):
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(b"CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n")
    assert s.recv(100).startswith(b"HTTP/1.1 200")
    s.sendall(payload); s.shutdown(socket.SHUT_WR); s.settimeout(15)
    try:
        return s.recv(100)
    except Exception as e:
        return str(e)
hs = b"\x01" + struct.pack(">I", 2000)[1:] + b"\x03\x03" + b"\x00" * 32 + b"\xff"
for j, p in enumerate([b"\x16\x03\x01\x00\x05\x01\x00\x00\xff\xff", b"\x16\x03\x01\x40\x01" + b"\x01" * 10,
                       b"\x16\x03\x01" + struct.pack(">H", len(hs)) + hs, b"\x16\x03\x01\x00\x30" + b"\x01\x00\x00\x2c" + b"\x03\x03" + b"\x00" * 32 + b"\x00\x00\x02\x13\x01\x01\x00\xff\xff"]):
    print("T%d" % j, tunnel_then(p))
import requests
for h in ["ptrloop.test", "overlong.test", "wrongid.test", "othername.test"]:
    try:
        requests.get("https://%s/" % h, timeout=30); print(h, "GOT")
    except Exception as e:
        print(h, "ERR", str(e)[-160:])
print("still", requests.get("https://allowed.test/after").text.strip())'
	has "garbage before the head" "R0 HTTP/1.1 403 egress denied: the request head is malformed"
	has "a bare method" "R1 HTTP/1.1 403 egress denied: not an HTTP/1 proxy request"
	has "CONNECT without a port" "R3 HTTP/1.1 403 egress denied: CONNECT needs host:port"
	has "a port out of range" "R4 HTTP/1.1 403 egress denied: CONNECT needs host:port"
	has "an unterminated IPv6 literal" "R5 HTTP/1.1 403 egress denied: CONNECT needs host:port"
	has "an empty host" "R6 HTTP/1.1 403 egress denied: CONNECT needs host:port"
	has "another HTTP version" "R7 HTTP/1.1 403 egress denied: not an HTTP/1 proxy request"
	has "credentials in the authority" "R8 HTTP/1.1 403 egress denied: invalid request target"
	has "two Content-Lengths" "R9 HTTP/1.1 403 egress denied: request bodies need one Content-Length"
	has "a chunked upload" "R10 HTTP/1.1 403 egress denied: request bodies need one Content-Length"
	has "an over-long name" "R11 HTTP/1.1 403 egress denied: invalid request target"
	has "a head larger than 16 KiB" "R12 HTTP/1.1 403 egress denied: the request head is larger than 16384 bytes"
	check "lying TLS hellos: every tunnel closed, nothing relayed" 4 "$(grep -c "^T[0-3] b''$" <<<"$out")"
	has "a resolver answer that loops" "ptrloop.test ERR"
	has "a record longer than the answer" "overlong.test ERR"
	has "an answer with another id is not taken" "502 egress failed: could not resolve wrongid.test: the resolver did not answer"
	has "an answer for another name is not taken" "could not resolve othername.test: no address"
	check "malformed answers are refused as such" 2 "$(logrows 'malformed answer from the resolver')"
	has "the proxy still serves afterwards" "still hello allowed.test /after from 93.184.216.34"
}

# What reached the fake internet's recorder (fakenet.py, :8081): how many
# connections it has accepted, asked from the host namespace.
recorded() { egr_in_host curl -sS --max-time 5 "http://93.184.216.34/recorded"; }

# Malformed request heads (issue 27): each refused with its own 403 as soon
# as the bytes that make it malformed arrive, nothing forwarded.  Every case
# is sent twice by the payload, as the sandbox's clients reach the proxy:
# "cut", the head up to and including the offending bytes and no further
# (no blank line, no half-close: a proxy that waits for more answers nothing
# and drops it after its head timeout, "no request within 10 s"), and
# "whole", the complete head.  The recorder behind allowed.test:8081 counts
# every connection that reaches it.
MALFORMED='
import socket, threading
T = b"GET http://allowed.test:8081/ HTTP/1.1\r\n"
H = T + b"Host: allowed.test:8081\r\n"
C = b"CONNECT allowed.test:8081 HTTP/1.1\r\n"
END = b"Accept: */*\r\n\r\n"
CASES = [
    ("host-space-colon", H + b"Host : evil.test\r\n", END),
    ("fold-after-host", T + b"Host: allowed.test:8081\r\n evil.test\r\n", END),
    ("te-space-colon", H + b"Transfer-Encoding : chunked\r\n", END),
    ("cl-plus", H + b"Content-Length: +0\r\n", END),
    ("cl-overflow", H + b"Content-Length: 18446744073709551616\r\n", END),
    ("cl-20-digits", H + b"Content-Length: 99999999999999999999\r\n", END),
    ("bare-lf", T[:-2] + b"\n", b"Host: allowed.test:8081\n\n"),
    ("bare-lf-field", H + b"Accept: */*\n", b"\n"),
    ("bare-cr", H + b"X-A: a\rb", b"\r\n\r\n"),
    ("nul", H + b"X-A: a\x00", b"b\r\n\r\n"),
    ("dup-host", H + b"Host: allowed.test:8081\r\n", END),
    ("cl-and-te", H + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", END),
    ("cl-negative", H + b"Content-Length: -1\r\n", END),
    ("cl-differ", H + b"Content-Length: 5\r\nContent-Length: 6\r\n", END),
    ("cl-inner-space", H + b"Content-Length: 1 0\r\n", END),
    ("name-space", H + b"X A: b\r\n", END),
    ("fold-tab", H + b"X-A: a\r\n\t", b"b\r\n\r\n"),
    ("no-colon", H + b"X-A\r\n", END),
    ("name-not-token", H + b"X(A): b\r\n", END),
    ("oversize", H + b"X-A: " + b"a" * 16400, b"\r\n\r\n"),
    ("too-many", H + b"".join(b"X-%d: v\r\n" % i for i in range(100)), END),
    ("host-other", T + b"Host: denied.test\r\n", END),
    ("host-port-sign", T + b"Host: allowed.test:+8081\r\n", END),
    ("target-port-sign", b"GET http://allowed.test:+8081/ HTTP/1.1\r\n", b"Host: allowed.test:8081\r\n\r\n"),
    ("target-host-bad", b"GET http://allow!ed.test:8081/ HTTP/1.1\r\n", b"Host: allow!ed.test:8081\r\n\r\n"),
    ("connect-host-other", C + b"Host: evil.test\r\n", b"\r\n"),
    ("connect-host-space", C + b"Host : allowed.test\r\n", b"\r\n"),
    ("connect-dup-host", C + b"Host: allowed.test\r\nHost: allowed.test\r\n", b"\r\n"),
    ("connect-te", C + b"Transfer-Encoding: chunked\r\n", b"\r\n"),
    ("connection-names-cl", H + b"Content-Length: 0\r\nConnection: keep-alive, content-length\r\n", END),
    ("connection-names-host", H + b"Connection: , Host \r\n", END),
]

def answer(data, half_close=False):
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(data)
    if half_close:
        s.shutdown(socket.SHUT_WR)
    s.settimeout(60)   # a hang guard only: the proxy drops a silent client after 10 s
    got = b""
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            got += d
    except OSError:
        pass           # reset after the answer: what it had not read
    s.close()
    return got.split(b"\r\n")[0].decode(errors="replace") or "(no answer)"

res = {}
def one(name, data, **kw):
    res[name] = answer(data, **kw)
ts = [threading.Thread(target=one, args=("%s %s" % (n, how), d))
      for n, cut, rest in CASES for how, d in (("cut", cut), ("whole", cut + rest))]
ts.append(threading.Thread(target=one, args=("ended-early cut", H), kwargs={"half_close": True}))
for i in range(0, len(ts), 28):     # at most 28 at once: the proxy serves 32
    [t.start() for t in ts[i:i + 28]]
    [t.join() for t in ts[i:i + 28]]
for k in sorted(res):
    print(k + ":", res[k])'

t_malformed_heads() {
	local before name reason how n=0
	cat >"$EGR_DIR/pol.heads" <<'P'
sandbox-egress/1
limit connections 200
rule rec host allowed.test 8081
P
	local cases=(
		"host-space-colon|the request head is malformed: whitespace in a header field's name or before its colon"
		"fold-after-host|the request head is malformed: a folded header line (obs-fold)"
		"te-space-colon|the request head is malformed: whitespace in a header field's name or before its colon"
		"cl-plus|invalid Content-Length: digits only, at most 18"
		"cl-overflow|invalid Content-Length: digits only, at most 18"
		"cl-20-digits|invalid Content-Length: digits only, at most 18"
		"bare-lf|the request head is malformed: a bare LF (lines end in CRLF)"
		"bare-lf-field|the request head is malformed: a bare LF (lines end in CRLF)"
		"bare-cr|the request head is malformed: a bare CR (lines end in CRLF)"
		"nul|the request head is malformed: a control character (0x00)"
		"dup-host|the request needs exactly one Host header"
		"cl-and-te|request bodies need one Content-Length (no chunked uploads through the proxy)"
		"cl-negative|invalid Content-Length: digits only, at most 18"
		"cl-differ|request bodies need one Content-Length (two different ones were sent)"
		"cl-inner-space|invalid Content-Length: digits only, at most 18"
		"name-space|the request head is malformed: whitespace in a header field's name or before its colon"
		"fold-tab|the request head is malformed: a folded header line (obs-fold)"
		"no-colon|the request head is malformed: a header line without a colon"
		"name-not-token|the request head is malformed: an invalid header field name"
		"oversize|the request head is larger than 16384 bytes"
		"too-many|the request head has more than 100 header fields"
		"host-other|the Host header does not name the request's host"
		"host-port-sign|the Host header does not name the request's host"
		"target-port-sign|invalid request target"
		"target-host-bad|invalid host name"
		"connect-host-other|the Host header does not name the request's host"
		"connect-host-space|the request head is malformed: whitespace in a header field's name or before its colon"
		"connect-dup-host|the request needs exactly one Host header"
		"connect-te|request bodies need one Content-Length (no chunked uploads through the proxy)"
		"connection-names-cl|the Connection header names a field that frames or routes the request"
		"connection-names-host|the Connection header names a field that frames or routes the request"
	)
	before=$(recorded)
	jrun python "$MALFORMED" "$EGR_DIR/pol.heads"
	for c in "${cases[@]}"; do
		name=${c%%|*} reason=${c#*|}
		for how in cut whole; do
			hasline "$name ($how): 403 at once" "$name $how: HTTP/1.1 403 egress denied: $reason"
			n=$((n + 1))
		done
	done
	has "a head the client ends early (half-close): 403 at once" \
		"ended-early cut: HTTP/1.1 403 egress denied: the connection ended before the request head did"
	check "every case got its 403 (none left out)" $((n + 1)) "$(grep -c ': HTTP/1.1 403 ' <<<"$out")"
	check "nothing reached the upstream server" 0 "$(($(recorded) - before))"
	check "each refusal logged, none left to the head timeout" "$((n + 1))|0" \
		"$(logrows '"decision":"denied"')|$(logrows 'no request within')"

	# What is forwarded is written from what was parsed: OWS trimmed, a
	# space after each colon, hop-by-hop fields dropped (and those the
	# Connection header names), Connection: close;
	# a body (a NUL in it) sent in the head's segment reaches the server
	# intact; two equal Content-Lengths go up as one; a CONNECT's Host
	# without a port (RFC 9110's own example) names the target.
	before=$(recorded)
	jrun python '
import socket
def upstream_got(req):
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(req)
    s.settimeout(60)
    got = b""
    while True:
        d = s.recv(65536)
        if not d:
            break
        got += d
    return got.partition(b"\r\n\r\n")[2] if got.startswith(b"HTTP/1.1 200 ") else got.split(b"\r\n")[0]
for name, req, want in [
    ("tidy", b"GET http://allowed.test:8081/p?q=1 HTTP/1.1\r\nhost:allowed.test:8081\r\nX-A: \t v 1 \t\r\n"
             b"Proxy-Connection: keep-alive\r\nConnection: keep-alive, x-hop\r\nX-Hop: for the proxy\r\n"
             b"Keep-Alive: 5\r\nX-Empty:\r\n"
             b"Content-Length: 0\r\nUpgrade: h2c\r\nTE: trailers\r\n\r\n",
     b"GET /p?q=1 HTTP/1.1\r\nhost: allowed.test:8081\r\nX-A: v 1\r\nX-Empty:\r\nContent-Length: 0\r\n"
     b"Connection: close\r\n\r\n"),
    ("nul-body", b"POST http://allowed.test:8081/b HTTP/1.1\r\nHost: allowed.test:8081\r\nContent-Length: 4\r\n\r\n\x00\x01\r\n",
     b"POST /b HTTP/1.1\r\nHost: allowed.test:8081\r\nContent-Length: 4\r\nConnection: close\r\n\r\n\x00\x01\r\n"),
    ("equal-cl", b"POST http://allowed.test:8081/c HTTP/1.1\r\nHost: allowed.test:8081\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok",
     b"POST /c HTTP/1.1\r\nHost: allowed.test:8081\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")]:
    got = upstream_got(req)
    print(name, "upstream got it as written" if got == want else "upstream got %r" % got)
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(b"CONNECT allowed.test:8081 HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
print("connect-host-no-port", s.recv(200).split(b"\r\n")[0].decode())' "$EGR_DIR/pol.heads"
	has "the head forwarded is re-written from what was parsed" "tidy upstream got it as written"
	has "a body in the head's segment (with a NUL) is forwarded, not refused" "nul-body upstream got it as written"
	has "two equal Content-Lengths go up as one" "equal-cl upstream got it as written"
	has "CONNECT with a Host without a port" "connect-host-no-port HTTP/1.1 200 Connection established"
	check "and these four reached the upstream server (the count counts)" 4 "$(($(recorded) - before))"
}

t_served() {
	# the resident launcher: the sandbox joins its worker's network
	# namespace, the proxy is started by the launcher in the host's
	# namespace (and the launcher's cgroup, not the run's slot) when the
	# worker asks (egress.c, jail_egress_spawn)
	local sock=$EGR_DIR/jail.sock lpid i w kids extra cpid proxy py worker
	rm -f "$sock"
	nsenter --net="/run/netns/$EGR_H" -- "$JAIL" --serve "$sock" --pool 2 --quiet >"$EGR_DIR/serve.out" 2>&1 &
	lpid=$!
	wait_for 30 '[ -S "$sock" ]' || { nok "the launcher came up" "$(cat "$EGR_DIR/serve.out")"; return; }
	# a waiting worker forks nothing ahead for egress: its one child is its
	# sandbox (there used to be a stub in the host's namespace per worker)
	wait_for 30 '[ "$(pgrep -P "$lpid" | wc -l)" -ge 2 ]'
	sleep 1
	extra=
	for w in $(pgrep -P "$lpid"); do
		kids=$(pgrep -P "$w" | wc -l)
		[ "$kids" -eq 1 ] || extra="$extra worker $w has $kids children;"
	done
	check "a waiting worker's only child is its sandbox" "" "$extra"
	for i in 1 2 3; do
		nrun=$((nrun + 1))
		log=$EGR_DIR/log.$nrun
		printf '%s\n' "URLS = ['https://allowed.test/served$i', 'https://denied.test/']$PYGET" >"$EGR_DIR/code.$nrun"
		out=$(env ASAN_OPTIONS=log_path=$ASAN_LOG.$nrun "$JAIL" --client "$sock" --language python \
			--workspace "$EGR_DIR/ws" --code-file "$EGR_DIR/code.$nrun" --wall-time 60 \
			--verdict-file "$EGR_DIR/verdict.$nrun" --egress-policy "$POLICY" --egress-log "$log" \
			--egress-resolver "$EGR_RESOLVER" --egress-ca "$EGR_DIR/ca.pem" --egress-proxy "$PROXY" 2>&1)
		verdict=$(cat "$EGR_DIR/verdict.$nrun" 2>/dev/null)
		has "served run $i: the allowed host" "https://allowed.test/served$i GOT 200 hello allowed.test /served$i from 93.184.216.34"
		has "served run $i: the other refused" "egress denied: denied.test:443 is not in the allowlist"
		check "served run $i: logged and counted" "2|1|1" "$(grep -c decision "$log")|$(vfield egress_allowed)|$(vfield egress_denied)"
	done
	jrun python 'import socket
try:
    socket.create_connection(("127.0.0.1", 3128), timeout=3); print("OPEN")
except OSError as e:
    print("closed", e.errno)' none
	has "a served run without a policy after them: nothing listens" "closed 111"

	# a run held open: its proxy is the launcher's child, in the host's
	# network namespace and the launcher's cgroup; when its worker dies
	# (SIGKILL: no verdict, no SIGTERM to the proxy) the proxy ends too
	printf '%s\n' "import socket, time
s = socket.create_connection(('127.0.0.1', 3128), timeout=10)
print('held', flush=True)
time.sleep(60)" >"$EGR_DIR/code.hold"
	rm -f "$EGR_DIR/log.hold"
	env ASAN_OPTIONS=log_path=$ASAN_LOG.hold "$JAIL" --client "$sock" --language python \
		--workspace "$EGR_DIR/ws" --code-file "$EGR_DIR/code.hold" --wall-time 90 \
		--verdict-file "$EGR_DIR/verdict.hold" --egress-policy "$POLICY" --egress-log "$EGR_DIR/log.hold" \
		--egress-resolver "$EGR_RESOLVER" --egress-proxy "$PROXY" >"$EGR_DIR/hold.out" 2>&1 &
	cpid=$!
	if wait_for 60 'grep -q held "$EGR_DIR/hold.out"'; then
		# (the payload's connect is taken by the listening socket's
		# backlog: the launcher's fork may not have reached its exec of
		# sandbox-egress yet on a loaded machine)
		wait_for 30 '[ -n "$(pgrep -P "$lpid" -f sandbox-egress)" ]'
		proxy=$(pgrep -P "$lpid" -f sandbox-egress | head -n 1)
		check "the held run's proxy is the launcher's child" t "$([ -n "$proxy" ] && echo t)"
		# (should it not be: the launcher's tree, as it is)
		[ -n "$proxy" ] || { echo "#   launcher $lpid"; ps -e -o pid,ppid,stat,args | grep -E 'sandbox-(jail|egress)|python3' | grep -v grep | sed 's/^/#   /'; }
		check "in the host's network namespace" "$(readlink "/proc/$lpid/ns/net")" \
			"$(readlink "/proc/${proxy:-0}/ns/net" 2>/dev/null)"
		check "in the launcher's cgroups, not the run's slot" "$(cat "/proc/$lpid/cgroup")" \
			"$(cat "/proc/${proxy:-0}/cgroup" 2>/dev/null)"
		# the payload (python, in its pid namespace), its init, its worker
		py=$(for i in $(pgrep -x python3); do
			w=$(awk '{ print $4 }' "/proc/$(awk '{ print $4 }' "/proc/$i/stat")/stat" 2>/dev/null)
			[ "$(awk '{ print $4 }' "/proc/$w/stat" 2>/dev/null)" = "$lpid" ] && echo "$i"
		done | head -n 1)
		worker=$(awk '{ print $4 }' "/proc/$(awk '{ print $4 }' "/proc/${py:-0}/stat" 2>/dev/null)/stat" 2>/dev/null)
		check "the held run's worker found" t "$([ -n "$worker" ] && [ -n "$proxy" ] && echo t)"
		[ -n "$worker" ] && kill -KILL "$worker"
		check "its proxy ended with it" t \
			"$(wait_for 20 "! kill -0 ${proxy:-0} 2>/dev/null" && echo t)"
	else
		nok "a run held on the proxy" "$(cat "$EGR_DIR/hold.out")"
	fi
	kill "$cpid" 2>/dev/null
	wait "$cpid" 2>/dev/null
	kill "$lpid" 2>/dev/null
	wait "$lpid" 2>/dev/null
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

# The proxy under its own seccomp allowlist (src/egress/confine.c): the
# release build, as runs use it, serves the usual clients with every one of
# its threads confined; and from the attacker's side, the calls a payload
# that took the proxy over would make first each kill it.
t_proxy_seccomp() {
	local rel=$top/src/egress/sandbox-egress jpid ppid_ tasks confined rc t out2
	rm -f "$EGR_DIR/ws/serving" "$EGR_DIR/sc.log"
	printf '%s\n' '
import requests, time
print("A", requests.get("https://allowed.test/sc").text.strip())
print("B", requests.post("http://allowed.test/sc", data=b"z" * 2000).text.strip())
try:
    requests.get("https://denied.test/", timeout=20)
except Exception as e:
    print("C", str(e))
open("/workspace/serving", "w").close()
time.sleep(3)' >"$EGR_DIR/sc.py"
	egr_in_host "$JAIL" --language python --workspace "$EGR_DIR/ws" --code-file "$EGR_DIR/sc.py" \
		--wall-time 60 --quiet --verdict-file "$EGR_DIR/sc.verdict" --egress-policy "$POLICY" \
		--egress-log "$EGR_DIR/sc.log" --egress-resolver "$EGR_RESOLVER" --egress-ca "$EGR_DIR/ca.pem" \
		--egress-proxy "$rel" >"$EGR_DIR/sc.out" 2>&1 &
	local apid=$!
	wait_for 30 '[ -f "$EGR_DIR/ws/serving" ]' || nok "the run reached its pause"
	jpid=$(pgrep -f "^$JAIL --language python .*sc.py" | head -n 1)
	ppid_=$(pgrep -P "${jpid:-0}" -x sandbox-egress | head -n 1)
	tasks=$(ls "/proc/${ppid_:-0}/task" 2>/dev/null | wc -l)
	confined=$(cat /proc/"${ppid_:-0}"/task/*/status 2>/dev/null | grep -c '^Seccomp:[[:space:]]*2$')
	check "every thread of the serving proxy is under a seccomp filter (main and its workers)" \
		"t|$tasks" "$([ "$tasks" -ge 3 ] && echo t)|$confined"
	wait $apid
	out=$(cat "$EGR_DIR/sc.out")
	verdict=$(cat "$EGR_DIR/sc.verdict" 2>/dev/null)
	has "under its filter the proxy serves https" "A hello allowed.test /sc from 93.184.216.34"
	has "and plain http with a body" "B got 2000"
	has "and refuses, saying why" "egress denied: denied.test:443 is not in the allowlist"
	check "and its summary reaches the verdict" "3|2|1" "$(vfield egress_attempts)|$(vfield egress_allowed)|$(vfield egress_denied)"
	rm -f "$EGR_DIR/ws/serving"
	# the attacker's side: after "ready", one call the allowlist refuses
	for t in openat execve fork socket_unix socket_netlink socket_packet \
		mprotect_exec mmap_exec ptrace kill setuid unshare; do
		out2=$(egr_in_host timeout 10 "$rel" --policy "$POLICY" --listen 127.0.0.1:13999 \
			--resolver "$EGR_RESOLVER" --summary-fd 1 --selftest-syscall "$t" 2>&1)
		rc=$?
		check "a proxy that tries $t after it serves is killed (SIGSYS)" "ready|159" \
			"$(head -n 1 <<<"$out2")|$rc"
	done
	# the control: the same start without the call serves until SIGTERM
	# (nsenter execs the proxy: $! is the proxy)
	nsenter --net="/run/netns/$EGR_H" -- "$rel" --policy "$POLICY" --listen 127.0.0.1:13999 \
		--resolver "$EGR_RESOLVER" --summary-fd 1 >"$EGR_DIR/sc.ctl" 2>&1 &
	local cpid=$!
	wait_for 10 'grep -q ready "$EGR_DIR/sc.ctl"'
	out2=$(egr_in_host python3 -c '
import socket
s = socket.create_connection(("127.0.0.1", 13999))
s.sendall(b"CONNECT denied.test:443 HTTP/1.1\r\n\r\n")
print(s.recv(200).split(b"\r\n")[0].decode())')
	kill -TERM "$cpid"
	wait "$cpid"
	rc=$?
	check "without it, the confined proxy serves and ends on SIGTERM with its summary" \
		"HTTP/1.1 403 egress denied: denied.test:443 is not in the allowlist|0|1" \
		"$out2|$rc|$(grep -c '"attempts":1,' "$EGR_DIR/sc.ctl")"
	# the suite's sanitizer build is confined too, and its reports still get out
	out2=$(egr_in_host timeout 10 "$PROXY" --policy "$POLICY" --listen 127.0.0.1:13999 \
		--resolver "$EGR_RESOLVER" --summary-fd 1 --selftest-syscall execve 2>&1)
	rc=$?
	check "the sanitizer build is killed for execve too" "ready|159" "$(head -n 1 <<<"$out2")|$rc"
	rm -f "$EGR_DIR"/asan/selftest.*
	egr_in_host env ASAN_OPTIONS=log_path=$EGR_DIR/asan/selftest timeout 10 "$PROXY" --policy "$POLICY" \
		--listen 127.0.0.1:13999 --resolver "$EGR_RESOLVER" --summary-fd 1 \
		--selftest-syscall asan_report >/dev/null 2>&1
	check "and a sanitizer report gets out from under the filter (so t_sanitizers can see one)" 1 \
		"$(cat "$EGR_DIR"/asan/selftest.* 2>/dev/null | grep -c '^SUMMARY: AddressSanitizer: heap-buffer-overflow')"
	rm -f "$EGR_DIR"/asan/selftest.*
	egr_in_host env ASAN_OPTIONS=log_path=$EGR_DIR/asan/selftest timeout 10 "$PROXY" --policy "$POLICY" \
		--listen 127.0.0.1:13999 --resolver "$EGR_RESOLVER" --summary-fd 1 \
		--selftest-syscall lsan_report >/dev/null 2>&1
	check "so does LeakSanitizer's, from its check at exit" 1 \
		"$(cat "$EGR_DIR"/asan/selftest.* 2>/dev/null | grep -c 'ERROR: LeakSanitizer: detected memory leaks')"
	rm -f "$EGR_DIR"/asan/selftest.*
}

# ---- secrets (docs/secrets.md): the proxy's side, through the jail ----------------
# The run's secrets as the runner hands them over (src/runner/secret_box.h):
# API_TOKEN for allowed.test in Authorization, WILD_KEY for *.allowed.test in
# X-Api-Key.  fakenet's /auth knows the values (expected_token,
# expected_key); the sandbox must only ever hold placeholders.
SECRET_VALUE=tok-$(openssl rand -hex 16)
WILD_VALUE=key-$(openssl rand -hex 12)
printf '%s\n' "$SECRET_VALUE" >"$EGR_DIR/expected_token"
printf '%s\n' "$WILD_VALUE" >"$EGR_DIR/expected_key"
SECRETS_FILE=$EGR_DIR/secrets
POLICY_S=$EGR_DIR/policy.secrets
cat >"$POLICY_S" <<'P'
sandbox-egress/1
rule exact host allowed.test 443,80,8081
rule wild host *.allowed.test 443
rule oth host other.test 443
P
printf 'sandbox-egress-secrets/1\nsecret API_TOKEN exact allowed.test %s Authorization: Bearer {}\nsecret WILD_KEY wild *.allowed.test %s X-Api-Key: {}\n' \
	"$(printf '%s' "$SECRET_VALUE" | base64 -w0)" "$(printf '%s' "$WILD_VALUE" | base64 -w0)" >"$SECRETS_FILE"
sjrun() { SECRETS=$SECRETS_FILE jrun "$1" "$2" "${3:-$POLICY_S}" "${@:4}"; }
# No value where the sandbox or a file of the run could have it.
no_value_left() {
	hasnt "$1: the value is not in the sandbox's output" "$SECRET_VALUE"
	check "$1: nor in the workspace, the log or the verdict" "" \
		"$(grep -rlF -e "$SECRET_VALUE" -e "$WILD_VALUE" "$EGR_DIR/ws" "$log" "$EGR_DIR/verdict.$nrun" 2>/dev/null)"
}
echo_log_has() { grep -cF -- "$1" "$EGR_DIR/echo.log" 2>/dev/null || true; }

t_secret_clients() {
	sjrun python '
import os, requests, urllib.request
tok = os.environ["API_TOKEN"]
print("PH", tok.startswith("sbxph_"), len(tok), "WILD_KEY" in os.environ)
print("A", requests.get("https://allowed.test/auth", headers={"Authorization": "Bearer " + tok}).text.strip())
r = urllib.request.Request("https://allowed.test/auth", headers={"Authorization": "Bearer " + tok})
print("B", urllib.request.urlopen(r).read().decode().strip())
print("C", requests.get("https://www.allowed.test/auth", headers={"X-Api-Key": os.environ["WILD_KEY"]}).text.strip())
print("D", requests.get("https://allowed.test/auth").status_code)
print("E", requests.get("https://allowed.test/auth", headers={"Authorization": "Bearer not-the-placeholder"}).status_code)
env = open("/proc/self/environ", "rb").read()
print("ENV", env.count(b"sbxph_"), b"tok-" in env)'
	has "the sandbox holds a placeholder per secret, not the value" "PH True 38 True"
	has "python requests authenticates with the real value" "A authenticated"
	has "urllib too" "B authenticated"
	has "a wildcard rule's secret, in its own header" "C authenticated"
	has "without the placeholder nothing is added" "D 401"
	has "nor with another token" "E 401"
	has "the environment holds the two placeholders only" "ENV 2 False"
	check "two uses of API_TOKEN logged with its name" 2 "$(grep -c '"decision":"allowed".*"secret":"API_TOKEN"' "$log")"
	check "one of WILD_KEY" 1 "$(grep -c '"decision":"allowed".*"secret":"WILD_KEY"' "$log")"
	check "the log holds no value" 0 "$(grep -cF -e "$SECRET_VALUE" -e "$WILD_VALUE" "$log")"
	no_value_left python
	sjrun node '
const https = require("https"), tok = process.env.API_TOKEN;
https.get("https://allowed.test/auth", { headers: { Authorization: "Bearer " + tok } }, (r) => {
  let b = ""; r.on("data", (d) => b += d);
  r.on("end", async () => {
    console.log("A", b.trim());
    const f = await fetch("https://allowed.test/auth", { headers: { Authorization: "Bearer " + tok } });
    console.log("B", f.status, (await f.text()).trim());
  });
}).on("error", (e) => console.log("ERR", e.message));'
	has "node https authenticates" "A authenticated"
	has "node fetch authenticates" "B 200 authenticated"
	no_value_left node
	sjrun shell '
echo "A $(curl -sS -H "Authorization: Bearer $API_TOKEN" https://allowed.test/auth)"
echo "B $(curl -sS --http2 -H "Authorization: Bearer $API_TOKEN" -o /dev/null -w "%{http_version} %{http_code}" https://allowed.test/auth)"'
	has "curl authenticates" "A authenticated"
	has "curl offering h2 and HTTP/1.1 gets HTTP/1.1" "B 1.1 200"
	no_value_left shell
}

# The same under --isolation gvisor (docs/jail.md, "The gvisor class"): the
# proxy stays outside, the placeholders and its CA reach the bundle over
# the listening socket's pair; gVisor's kernel holds the placeholder only.
t_secret_gvisor() {
	if ! [ -x /usr/bin/runsc ] || [ "$(id -u)" != 0 ]; then
		echo "# skip t_secret_gvisor: needs root and /usr/bin/runsc (Debian's runsc)"
		return
	fi
	sjrun python '
import os, requests
tok = os.environ["API_TOKEN"]
print("KERNEL", "gVisor" if os.uname().release != "'"$(uname -r)"'" else "host")
print("PH", tok.startswith("sbxph_"), len(tok))
print("A", requests.get("https://allowed.test/auth", headers={"Authorization": "Bearer " + tok}).text.strip())
print("D", requests.get("https://allowed.test/auth").status_code)
env = open("/proc/self/environ", "rb").read()
print("ENV", env.count(b"sbxph_"), b"tok-" in env)' "$POLICY_S" --isolation gvisor
	has "gvisor: the payload runs on gVisor's kernel" "KERNEL gVisor"
	has "gvisor: the sandbox holds a placeholder, not the value" "PH True 38"
	has "gvisor: requests authenticates with the real value through the proxy outside" "A authenticated"
	has "gvisor: without the placeholder nothing is added" "D 401"
	has "gvisor: the environment holds the two placeholders only" "ENV 2 False"
	check "gvisor: the use logged with the secret's name" 1 "$(grep -c '"decision":"allowed".*"secret":"API_TOKEN"' "$log")"
	no_value_left gvisor
}

t_secret_echo() {
	: >"$EGR_DIR/echo.log"
	sjrun python '
import os, requests
h = {"Authorization": "Bearer " + os.environ["API_TOKEN"]}
auth = lambda t: [l for l in t.splitlines() if l.lower().startswith("authorization")]
r = requests.get("https://allowed.test/echo", headers=h)
print("A", r.status_code, r.headers.get("X-Echo-Authorization"))
print("B", auth(r.text))
print("C", auth(requests.get("https://allowed.test/echo-chunked", headers=h).text))
r = requests.get("https://allowed.test/echo-gzip", headers=h)
print("D", r.status_code, r.text.strip())
r = requests.get("https://allowed.test/echo", headers={**h, "Accept-Encoding": "gzip", "Upgrade": "h2c", "Connection": "Upgrade, HTTP2-Settings", "HTTP2-Settings": "AAMAAABkAAQAAP__"})
print("E", [l for l in r.text.splitlines() if l.split(":")[0].lower() in ("accept-encoding", "upgrade", "connection")])'
	local stars
	stars=$(printf "%${#SECRET_VALUE}s" | tr ' ' '*')
	has "the server echoes the header back: scrubbed in the response header" "A 200 Bearer $stars"
	has "and in the body" "B ['Authorization: Bearer $stars']"
	has "a chunked echo, the value split across chunks: scrubbed too" "C ['Authorization: Bearer $stars']"
	has "an encoded answer cannot be scrubbed: refused" "D 502 egress failed: the server's response is encoded (Content-Encoding: gzip), so it could not be scrubbed of secrets"
	has "hop-by-hop fields dropped, identity asked for" "E ['Accept-Encoding: identity', 'Connection: close']"
	check "the server did get the real value (four requests)" 4 "$(echo_log_has "Authorization: Bearer $SECRET_VALUE")"
	no_value_left echo
}

t_secret_placeholder_elsewhere() {
	: >"$EGR_DIR/echo.log"
	local before after
	before=$(egr_in_host curl -s http://93.184.216.34/recorded)
	sjrun python '
import os, socket, ssl, requests
tok, wk = os.environ["API_TOKEN"], os.environ["WILD_KEY"]
def get(label, url, **kw):
    try:
        r = requests.request(kw.pop("method", "GET"), url, timeout=20, **kw)
        print(label, r.status_code, r.text.strip()[:400])
    except Exception as e:
        print(label, "ERR", str(e)[:300])
get("A", "https://allowed.test/echo?t=" + tok, headers={"Authorization": "Bearer " + tok})
get("B", "https://allowed.test/echo", headers={"X-Foo": tok})
get("C", "https://allowed.test/echo", headers={"Authorization": "Token " + tok})
get("D", "https://allowed.test/echo", headers={"X-Api-Key": wk})
get("E", "http://allowed.test:8081/x", headers={"Authorization": "Bearer " + tok})
get("F", "https://allowed.test/echo", method="POST", headers={"Authorization": "Bearer " + tok},
    data=b"x" * 70000 + tok.encode() + b"y" * 10)
ctx = ssl.create_default_context()
ctx.set_alpn_protocols([tok, "http/1.1"])
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(b"CONNECT other.test:443 HTTP/1.1\r\nHost: other.test:443\r\n\r\n")
s.recv(100)
try:
    ctx.wrap_socket(s, server_hostname="other.test"); print("G handshake")
except Exception as e:
    print("G closed", type(e).__name__)'
	after=$(egr_in_host curl -s http://93.184.216.34/recorded)
	has "in the request target: refused" "A 403 egress denied: the placeholder of secret API_TOKEN was sent in the request target to allowed.test:443; it goes only in the Authorization header of requests to allowed.test"
	has "in another header: refused" "B 403 egress denied: the placeholder of secret API_TOKEN was sent in the X-Foo header to allowed.test:443"
	has "in its header but not as its template: refused" "C 403 egress denied: the placeholder of secret API_TOKEN was sent in the Authorization header, not as its template Bearer {}"
	has "another host's secret: refused" "D 403 egress denied: the placeholder of secret WILD_KEY was sent in a request to allowed.test:443; it goes only in the X-Api-Key header of requests to *.allowed.test"
	has "in a plain HTTP request (never intercepted): refused" "E 403 egress denied: the placeholder of secret API_TOKEN was sent in a request head to the proxy"
	check "the plain HTTP server never saw it" "$before" "$after"
	has "in a request body: cut, refused" "F 403 egress denied: the placeholder of secret API_TOKEN was sent in a request body to allowed.test:443"
	has "in a TLS ClientHello to a host without a secret: closed" "G closed"
	check "the ClientHello refusal is logged" 1 "$(logrows 'placeholder of secret API_TOKEN was sent in a TLS ClientHello to other.test:443')"
	check "each refusal recorded as denied, with the secret's name" 6 "$(grep -c '"decision":"denied".*"secret":"API_TOKEN"' "$log")"
	check "and WILD_KEY's" 1 "$(grep -c '"decision":"denied".*"secret":"WILD_KEY"' "$log")"
	check "no request with a placeholder outside its header reached the server" 0 "$(echo_log_has "$EGR_PLACEHOLDER_PREFIX")"
	no_value_left elsewhere
}
EGR_PLACEHOLDER_PREFIX=sbxph_

t_secret_tls_checks() {
	# CONNECT = SNI = Host, HTTP/1.1 only: a raw client through the tunnel
	sjrun python '
import os, socket, ssl
tok = os.environ["API_TOKEN"]
def tunnel(target, sni, head, alpn=None):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
    s.sendall(b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target))
    line = s.recv(200).split(b"\r\n")[0]
    if b" 200 " not in line:
        return "refused " + line.decode()
    ctx = ssl.create_default_context()
    if alpn:
        ctx.set_alpn_protocols(alpn)
    try:
        t = ctx.wrap_socket(s, server_hostname=sni)
    except Exception as e:
        return "tls failed " + type(e).__name__
    t.sendall(head)
    data = b""
    while True:
        try:
            d = t.recv(65536)
        except Exception:
            break
        if not d:
            break
        data += d
    return (t.selected_alpn_protocol() or "-") + " " + data.split(b"\r\n")[0].decode()
auth = b"Authorization: Bearer " + tok.encode() + b"\r\n"
print("A", tunnel(b"allowed.test:443", "www.allowed.test", b"GET /auth HTTP/1.1\r\nHost: www.allowed.test\r\n" + auth + b"\r\n"))
print("B", tunnel(b"allowed.test:443", "allowed.test", b"GET /auth HTTP/1.1\r\nHost: www.allowed.test\r\n" + auth + b"\r\n"))
print("C", tunnel(b"allowed.test:443", "allowed.test", b"GET /auth HTTP/1.1\r\nHost: allowed.test:8443\r\n" + auth + b"\r\n"))
print("D", tunnel(b"allowed.test:443", "allowed.test", b"GET https://allowed.test/auth HTTP/1.1\r\nHost: allowed.test\r\n" + auth + b"\r\n"))
print("E", tunnel(b"allowed.test:443", "allowed.test", b"GET /auth HTTP/1.1\r\nHost: allowed.test\r\n" + auth + b"\r\n", ["h2"]))
print("F", tunnel(b"allowed.test:443", "allowed.test", b"GET /auth HTTP/1.1\r\nHost: allowed.test\r\n" + auth + b"\r\n", ["h2", "http/1.1"]))
print("G", tunnel(b"allowed.test:443", "allowed.test", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
print("H", tunnel(b"allowed.test:443", "allowed.test", b"GET /auth HTTP/1.1\r\nHost: allowed.test\r\n" + auth + b"\r\n"))'
	has "SNI other than the CONNECT host: closed before any TLS" "A tls failed"
	has "Host other than the CONNECT host: refused" "B - HTTP/1.1 403 egress denied: the Host header does not name the request's host"
	has "Host with another port: refused" "C - HTTP/1.1 403 egress denied: the Host header does not name the request's host"
	has "absolute form inside the tunnel: refused" "D - HTTP/1.1 403 egress denied: a request through the tunnel has a path as its target (origin form)"
	has "a client that offers h2 alone: refused by ALPN" "E tls failed"
	check "logged as such" 1 "$(logrows "the sandbox's TLS offered no HTTP/1.1 (ALPN)")"
	has "h2 and HTTP/1.1 offered: HTTP/1.1 chosen" "F http/1.1 HTTP/1.1 200 OK"
	has "the HTTP/2 preface: refused" "G - HTTP/1.1 403 egress denied: not an HTTP/1 proxy request"
	has "CONNECT = SNI = Host passes" "H - HTTP/1.1 200 OK"
	check "no refused attempt used the secret" 2 "$(grep -c '"decision":"allowed".*"secret":"API_TOKEN"' "$log")"
}

t_secret_upstream_verified() {
	# the proxy checks the real server's certificate: without the test CA
	# (the system's alone) the fake server is no one it trusts
	NOCA=1 sjrun python '
import os, requests
r = requests.get("https://allowed.test/auth", headers={"Authorization": "Bearer " + os.environ["API_TOKEN"]})
print("A", r.status_code, r.text.strip())'
	has "an upstream certificate that does not verify: 502, nothing sent" "A 502 egress failed: the certificate of allowed.test:443 could not be verified: unable to get local issuer certificate"
	check "logged, the secret never used" 0 "$(grep -c '"secret"' "$log")"
}

t_secret_ca() {
	sjrun python '
import os, subprocess
bundle = open(os.environ["SSL_CERT_FILE"]).read()
print("SAME", all(os.environ[v] == os.environ["SSL_CERT_FILE"] for v in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS")))
last = bundle[bundle.rfind("-----BEGIN CERTIFICATE-----"):]
txt = subprocess.run(["openssl", "x509", "-noout", "-text"], input=last, capture_output=True, text=True).stdout
print("RUNCA", "sandbox-egress run CA" in txt, "CA:TRUE" in txt, "Permitted:" in txt and "DNS:allowed.test" in txt)
found = []
for top in ("/sandbox", "/tmp", "/workspace", "/etc", "/proc/self"):
    for d, _, fs in os.walk(top):
        for f in fs:
            try:
                if b"PRIVATE" b" KEY" in open(os.path.join(d, f), "rb").read(1 << 20):
                    found.append(os.path.join(d, f))
            except Exception:
                pass
print("KEYS", found)
procs = []
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            procs.append(open("/proc/%s/cmdline" % p, "rb").read())
        except Exception:
            pass
print("PROXY VISIBLE", [c for c in procs if c.startswith(b"sandbox-" b"egress\0")])'
	has "every client's CA variable names the one bundle" "SAME True"
	has "the bundle ends with the run's CA, constrained to the secrets' hosts" "RUNCA True True True"
	has "no private key anywhere the sandbox can read" "KEYS []"
	has "the proxy (which holds the CA's key) is not in the sandbox's view" "PROXY VISIBLE []"
}

# The release proxy with secrets is not dumpable: another process of its
# user (nobody) cannot read its memory; without secrets it can (the
# check can fail).
proxy_readable_by_nobody() {	# secrets-file|"" → "yes" | "no" | "none"
	local sec=$1 pid="" p jpid
	rm -f "$EGR_DIR/ws/started" "$EGR_DIR/ws/go"
	printf '%s\n' 'import os, time
open("/workspace/started", "w").close()
for _ in range(600):
    if os.path.exists("/workspace/go"):
        break
    time.sleep(0.1)' >"$EGR_DIR/code.dump"
	egr_in_host "$JAIL" --language python --workspace "$EGR_DIR/ws" --code-file "$EGR_DIR/code.dump" \
		--wall-time 60 --quiet --egress-policy "$POLICY_S" --egress-resolver "$EGR_RESOLVER" \
		--egress-ca "$EGR_DIR/ca.pem" --egress-proxy "$top/src/egress/sandbox-egress" \
		${sec:+--egress-secrets-fd 9} 9<"${sec:-/dev/null}" >/dev/null 2>&1 &
	jpid=$!
	for _ in $(seq 1 300); do [ -e "$EGR_DIR/ws/started" ] && break; sleep 0.1; done
	for p in /proc/[0-9]*; do
		[ "$(readlink "$p/exe" 2>/dev/null)" = "$top/src/egress/sandbox-egress" ] && pid=${p#/proc/}
	done
	if [ -z "$pid" ]; then echo none
	elif runuser -u nobody -- cat "/proc/$pid/environ" >/dev/null 2>&1; then echo yes
	else echo no; fi
	touch "$EGR_DIR/ws/go"
	wait "$jpid"
}

t_secret_proxy_memory() {
	check "without secrets the proxy's memory is its user's to read (the check works)" yes \
		"$(proxy_readable_by_nobody "")"
	check "with secrets it is not: no other process of its user reads it" no \
		"$(proxy_readable_by_nobody "$SECRETS_FILE")"
}

t_secret_bad_secrets() {
	# what the runner hands over must agree with the approved policy: a
	# secret whose rule names another host is a setup error, never a run
	printf 'sandbox-egress-secrets/1\nsecret API_TOKEN exact other.test %s Authorization: Bearer {}\n' \
		"$(printf '%s' "$SECRET_VALUE" | base64 -w0)" >"$EGR_DIR/secrets.bad"
	SECRETS=$EGR_DIR/secrets.bad jrun python 'print("RAN")' "$POLICY_S"
	hasnt "the payload never ran" "RAN"
	check "a setup error saying why" t "$([[ $(vfield setup_error) == *"egress proxy did not start"* ]] && echo t || echo "$verdict")"
	has "the proxy said which line" "its rule is not a host rule of the policy with its host"
}

t_sanitizers() {
	check "no ASan/UBSan report from the proxy" "" \
		"$(cat "$ASAN_LOG".* 2>/dev/null | grep -m3 -E 'ERROR: AddressSanitizer|runtime error|LeakSanitizer')"
}

# ---- the database: policy as data, end to end ------------------------------------
# A cluster of its own, started inside the fake internet's host namespace:
# its supervisor's jails and their proxies run there (the suite's shared
# cluster runs in the machine's namespace, which has no fake internet).
EPG_DIR=$EGR_DIR/pg
EPG_PORT=$((SANDBOX_PGPORT + 7))
# The runner hosts' key pair for secrets (docs/secrets.md): the private
# key the local runner reads (the server's OS user's alone), the public
# key the operator registers.
SECRET_TOOL=$top/src/runner/sandbox-secret
RUNNER_KEY=$EGR_DIR/runner.key
rm -f "$RUNNER_KEY"
RUNNER_PUB=$("$SECRET_TOOL" keygen "$RUNNER_KEY") && chown postgres "$RUNNER_KEY"
db_up() {
	PGBIN=$PGBIN egr_cluster start "$EPG_DIR" "$EPG_PORT" "sandbox.secrets_key_file = '$RUNNER_KEY'" \
		>"$EGR_DIR/db_up.log" 2>&1 || {
		nok "egress cluster up" "$(tail -n 5 "$EGR_DIR/db_up.log")"
		return 1
	}
	CLUSTER_DIR=$EPG_DIR
	PORT=$EPG_PORT
}
db_down() {
	[ -n "${EPG_UP:-}" ] && PGBIN=$PGBIN SANDBOX_CLUSTER_DIR=$EPG_DIR SANDBOX_PGPORT=$EPG_PORT "$top/scripts/cluster.sh" stop >/dev/null 2>&1
	EPG_UP=
}
trap 'db_down; egr_down' EXIT

aq_error() {
	local err
	err=$(aq "$1" "\\set VERBOSITY verbose
$2" 2>&1 >/dev/null | sed -n 's/^.*ERROR:  \([0-9A-Z]\{5\}\): \(.*\)$/\1 \2/p' | head -n 1)
	echo "${err:-no error}"
}
await_ok() {		# TENANT INV: "the run succeeded", with its reason when not
	local st
	st=$(await "$1" "$2")
	check "the run succeeded" succeeded "$st"
	[ "$st" = succeeded ] || echo "#   reason: $(field "$2" state_reason)"
}
q_error() {			# SQL as the owner → "SQLSTATE message" of its error
	printf '\\set VERBOSITY verbose\n%s\n' "$1" | q -f - 2>&1 >/dev/null |
		sed -n 's/^.*ERROR:  \([0-9A-Z]\{5\}\): \(.*\)$/\1 \2/p' | head -n 1
}
card() { tq "$1" "$2" "SELECT egress_may_reach FROM agent.approval_card('$3');" | tail -n 1; }
TWO_GETS='
import requests
for u in ["https://allowed.test/one", "https://denied.test/two"]:
    try:
        print(u, "GOT", requests.get(u, timeout=20).text.strip())
    except Exception as e:
        print(u, "ERR", str(e))'

t_db_default_deny() {
	local T org ws agent conv inv appr
	T=$(new_tenant 100)
	read -r org ws agent conv <<<"$T"
	read -r inv appr < <(req "$T" python 'import socket
try:
    socket.create_connection(("127.0.0.1", 3128), timeout=3); print("OPEN")
except OSError as e:
    print("closed", e.errno)')
	check "an org without rules: the card says no network" "nothing (no network)" "$(card "$org" "$ws" "$appr")"
	check "no policy on the invocation" "" "$(field "$inv" egress_policy)"
	approve "$T" "$appr"
	await_ok "$T" "$inv"
	check "nothing listens inside: today's no-network sandbox" "closed 111" "$(output "$inv")"
	check "no egress rows" 0 "$(q -c "SELECT count(*) FROM agent.egress_connections WHERE invocation_id = '$inv'")"
}

t_db_allowed_run() {
	local T org ws agent conv inv appr
	T=$(new_tenant 100)
	read -r org ws agent conv <<<"$T"
	aq "$org" "SELECT agent.add_egress_rule('allowed.test', '{443}', 'admin');
SELECT agent.add_egress_rule('*.Allowed.Test.', '{443,8443}', 'admin');" >/dev/null
	read -r inv appr < <(req "$T" python "$TWO_GETS")
	check "the card says what the run may reach" "*.allowed.test:443,8443, allowed.test:443" "$(card "$org" "$ws" "$appr")"
	approve "$T" "$appr"
	await_ok "$T" "$inv"
	out=$(output "$inv")
	check "it ran through the resident launcher (served: no jail pid of its own)" "0" "$(field "$inv" "coalesce(jail_pid, 0)")"
	has "the allowed host answered through the supervisor's jail" "https://allowed.test/one GOT hello allowed.test /one from 93.184.216.34"
	has "the other one was refused, saying why" "egress denied: denied.test:443 is not in the allowlist"
	check "two rows for the tenant, one allowed (under RLS, as the backend)" "2|1" \
		"$(tq "$org" "$ws" "SELECT count(*) || '|' || count(*) FILTER (WHERE allowed) FROM agent.egress_connections WHERE invocation_id = '$inv';" | tail -n 1)"
	check "the allowed row names its host, address and rule" "allowed.test|93.184.216.34|true" \
		"$(q -c "SELECT c.host || '|' || host(c.address) || '|' || (c.rule_id = r.id) FROM agent.egress_connections c JOIN agent.egress_rules r ON r.host = 'allowed.test' AND r.org_id = c.org_id WHERE c.invocation_id = '$inv' AND c.allowed")"
	check "the tool call's summary" "2|1|1|false" \
		"$(q -c "SELECT (egress->>'attempts') || '|' || (egress->>'allowed') || '|' || (egress->>'denied') || '|' || (egress->>'limit_hit') FROM agent.agent_tool_calls WHERE invocation_id = '$inv'")"
	check "one egress audit event for the run" 1 \
		"$(q -c "SELECT count(*) FROM agent.audit_events WHERE invocation_id = '$inv' AND event_type = 'egress.connections'")"
	check "its hash is the connection log's" t \
		"$(q -c "SELECT details->>'log_sha256' = agent.egress_log_sha256('$inv') AND (details->>'log_rows')::int = 2 FROM agent.audit_events WHERE invocation_id = '$inv' AND event_type = 'egress.connections'")"
	check "the approval event binds the policy's hash" t \
		"$(q -c "SELECT a.details->>'egress_sha256' = i.egress_sha256 FROM agent.audit_events a JOIN agent.invocations i ON i.id = a.invocation_id WHERE a.invocation_id = '$inv' AND a.event_type = 'approval.approved'")"
	q -c "ALTER TABLE agent.egress_connections DISABLE ROW LEVEL SECURITY" >/dev/null
	q -c "UPDATE agent.egress_connections SET allowed = true WHERE invocation_id = '$inv'" >/dev/null
	check "a rewritten log no longer matches its audited hash" f \
		"$(q -c "SELECT details->>'log_sha256' = agent.egress_log_sha256('$inv') FROM agent.audit_events WHERE invocation_id = '$inv' AND event_type = 'egress.connections'")"
	q -c "ALTER TABLE agent.egress_connections ENABLE ROW LEVEL SECURITY" >/dev/null
	check "the audit chain verifies" t "$(q -c "SELECT ok FROM agent.verify_audit_chain('$org')")"
}

# The supervisor's launcher's waiting Python interpreters (its page's
# held[]: their workers' pids), sorted, once as many wait as it keeps
# (bounded: "none" if they never do); with "now", as they are.
warm_py_waiting() {
	python3 - "$EPG_DIR/data/sandbox_runner/jail.sock.warm" "${1:-}" <<'PY'
import struct, sys, time
for _ in range(600):
    try:
        d = open(sys.argv[1], "rb").read()
        conf = struct.unpack_from("i", d, 24)[0]
        held = [struct.unpack_from("iiQ", d, 40 + 16 * i) for i in range(16)]
        pids = sorted(p for p, lang, _ in held if p > 0 and lang == 0)
        if sys.argv[2] == "now" or (conf > 0 and len(pids) == conf):
            print(",".join(map(str, pids)), min([b for p, lang, b in held if p > 0 and lang == 0] or [0]))
            sys.exit(0)
    except OSError:
        pass
    time.sleep(0.2)
print("none 0")
PY
}

# An egress run's sandbox is cloned for it (its init makes the proxy's
# socket): it must not take a warm interpreter (which the jail would throw
# away, draining the pool), and its peak memory is its own.
t_db_egress_not_warm() {
	local T org ws agent conv inv appr before held after
	T=$(new_tenant 100)
	read -r org ws agent conv <<<"$T"
	aq "$org" "SELECT agent.add_egress_rule('allowed.test', '{443}', 'admin');" >/dev/null
	read -r before held < <(warm_py_waiting)
	read -r inv appr < <(req "$T" python 'print("an egress run")')
	approve "$T" "$appr"
	await_ok "$T" "$inv"
	read -r after _ < <(warm_py_waiting now)
	if [ "$before" != none ] && [ "$before" = "$after" ]; then
		ok "an egress run takes no warm interpreter: the ones waiting before it still wait ($before)"
	else nok "an egress run takes no warm interpreter" "waiting before [$before] after [$after]"; fi
	check "its verdict is a cold run's" false \
		"$(q -c "SELECT details->'verdict'->>'warm' FROM agent.audit_events WHERE invocation_id = '$inv' AND event_type = 'invocation.finished'")"
	check "its peak memory is its own, not a thrown-away interpreter's" t \
		"$(field "$inv" "peak_memory_bytes < $held / 2")"
}

t_db_policy_changed_after_request() {
	local T org ws agent conv inv appr
	T=$(new_tenant 100)
	read -r org ws agent conv <<<"$T"
	aq "$org" "SELECT agent.add_egress_rule('allowed.test', '{443}', 'admin');" >/dev/null
	read -r inv appr < <(req "$T" python "$TWO_GETS")
	# between request and run: the admin widens the policy
	aq "$org" "SELECT agent.add_egress_rule('denied.test', '{443}', 'admin');" >/dev/null
	check "the policy now includes denied.test" "allowed.test:443, denied.test:443" \
		"$(tq "$org" "$ws" "SELECT may_reach FROM agent.effective_egress('$agent');" | tail -n 1)"
	check "the card still shows what was requested" "allowed.test:443" "$(card "$org" "$ws" "$appr")"
	approve "$T" "$appr"
	await_ok "$T" "$inv"
	out=$(output "$inv")
	has "the approved host works" "https://allowed.test/one GOT hello"
	has "the host added after the request stays refused" "egress denied: denied.test:443 is not in the allowlist"
	check "the copy on the invocation cannot be changed (even by the owner)" \
		"55000 cannot change the egress policy of invocation $inv" \
		"$(q_error "UPDATE agent.invocations SET egress_policy = NULL WHERE id = '$inv';")"
	# a superuser widening the copy behind the freeze: the run would be refused
	q >/dev/null <<SQL
ALTER TABLE agent.invocations DISABLE TRIGGER invocations_freeze_egress;
UPDATE agent.invocations SET egress_policy = jsonb_set(egress_policy, '{rules}', egress_policy->'rules' || '[{"id":"00000000-0000-4000-8000-000000000000","host":"denied.test","ports":[443]}]'),
	egress_sha256 = NULL WHERE id = '$inv';
UPDATE agent.invocations SET egress_sha256 = agent._egress_sha256(egress_policy) WHERE id = '$inv';
ALTER TABLE agent.invocations ENABLE TRIGGER invocations_freeze_egress;
SQL
	check "a policy copy rewritten after approval is refused for the run" \
		"55000 the egress policy of invocation $inv is not the one its approval covers" \
		"$(q_error "SELECT agent._egress_policy_file('$inv');")"
}

t_db_narrowing() {
	local T org ws agent conv ra rb T2 org2 rc inv appr
	T=$(new_tenant 100)
	read -r org ws agent conv <<<"$T"
	ra=$(aq "$org" "SELECT agent.add_egress_rule('allowed.test', '{443}', 'admin');" | tail -n 1)
	rb=$(aq "$org" "SELECT agent.add_egress_rule('other.test', '{443}', 'admin');" | tail -n 1)
	T2=$(new_tenant 0)
	read -r org2 _ <<<"$T2"
	rc=$(aq "$org2" "SELECT agent.add_egress_rule('denied.test', '{443}', 'admin');" | tail -n 1)
	# an agent's narrowing is the admin's; the backend can neither set one
	check "the backend cannot narrow an agent" "42501 only an admin can narrow an agent's egress" \
		"$(tq_error "$org" "$ws" "SELECT agent.narrow_egress('$agent', NULL, ARRAY['$ra']::uuid[], 'owner');")"
	aq "$org" "SELECT agent.narrow_egress('$agent', NULL, ARRAY['$ra']::uuid[], 'admin');" >/dev/null
	check "an agent narrowed to one rule by the admin" "allowed.test:443" \
		"$(tq "$org" "$ws" "SELECT may_reach FROM agent.effective_egress('$agent');" | tail -n 1)"
	# ... nor remove nor widen the admin's
	check "the backend cannot remove the admin's narrowing" "42501 only an admin can narrow an agent's egress" \
		"$(tq_error "$org" "$ws" "SELECT agent.narrow_egress('$agent', NULL, NULL, 'owner');")"
	check "nor widen it" "42501 only an admin can narrow an agent's egress" \
		"$(tq_error "$org" "$ws" "SELECT agent.narrow_egress('$agent', NULL, ARRAY['$ra', '$rb']::uuid[], 'owner');")"
	check "the agent still reaches only what the admin left" "allowed.test:443" \
		"$(tq "$org" "$ws" "SELECT may_reach FROM agent.effective_egress('$agent');" | tail -n 1)"
	check "a conversation (the backend's) cannot take a rule its agent does not have" \
		"42501 egress rule $rb is not available to narrow to" \
		"$(tq_error "$org" "$ws" "SELECT agent.narrow_egress('$agent', '$conv', ARRAY['$rb']::uuid[], 'owner');")"
	check "nor a rule of another org" "42501 egress rule $rc is not available to narrow to" \
		"$(aq_error "$org" "SELECT agent.narrow_egress('$agent', NULL, ARRAY['$rc']::uuid[], 'admin');")"
	tq "$org" "$ws" "SELECT agent.narrow_egress('$agent', '$conv', ARRAY['$ra']::uuid[], 'owner');" >/dev/null
	check "the backend narrows a conversation within its agent's rules" "allowed.test:443" \
		"$(tq "$org" "$ws" "SELECT may_reach FROM agent.effective_egress('$agent', '$conv');" | tail -n 1)"
	tq "$org" "$ws" "SELECT agent.narrow_egress('$agent', '$conv', '{}'::uuid[], 'owner');" >/dev/null
	read -r inv appr < <(req "$T" python 'print(1)')
	check "a conversation narrowed to nothing has no network" "nothing (no network)" "$(card "$org" "$ws" "$appr")"
	tq "$org" "$ws" "SELECT agent.deny('$appr', 'approver');" >/dev/null
}

t_db_roles_and_rls() {
	local T org ws agent conv T2 org2 ws2
	T=$(new_tenant 0)
	read -r org ws agent conv <<<"$T"
	aq "$org" "SELECT agent.add_egress_rule('allowed.test', '{443}', 'admin');" >/dev/null
	T2=$(new_tenant 0)
	read -r org2 ws2 _ <<<"$T2"
	check "another tenant sees none of the org's rules" 0 \
		"$(tq "$org2" "$ws2" "SELECT count(*) FROM agent.egress_rules;" | tail -n 1)"
	check "nor any connection row of another tenant" 0 \
		"$(tq "$org2" "$ws2" "SELECT count(*) FROM agent.egress_connections WHERE org_id <> '$org2';" | tail -n 1)"
	check "the backend cannot add rules (an admin's)" "42501 permission denied for function add_egress_rule" \
		"$(tq_error "$org" "$ws" "SELECT agent.add_egress_rule('evil.test', '{443}', 'me');")"
	check "nor write connection rows" "42501 permission denied for table egress_connections" \
		"$(tq_error "$org" "$ws" "INSERT INTO agent.egress_connections (invocation_id, seq, org_id, workspace_id, kind, host, port, allowed, bytes_up, bytes_down, duration_ms) VALUES (gen_random_uuid(), 1, '$org', '$ws', 'connect', 'x', 1, true, 0, 0, 0);")"
	check "nor record a run's egress" "42501 permission denied for function _record_egress" \
		"$(tq_error "$org" "$ws" "SELECT agent._record_egress(gen_random_uuid(), '', NULL);")"
	check "an IP address is not a host pattern" "22023 host pattern \"2130706433\" is an address, not a name" \
		"$(aq_error "$org" "SELECT agent.add_egress_rule('2130706433', '{443}', 'admin');")"
	check "nor a dotted one" "22023 host pattern \"1.2.3.4\" is an address, not a name" \
		"$(aq_error "$org" "SELECT agent.add_egress_rule('1.2.3.4', '{443}', 'admin');")"
	check "a wildcard only at the front" "22023 invalid host pattern \"a.*.test\"" \
		"$(aq_error "$org" "SELECT agent.add_egress_rule('a.*.test', '{443}', 'admin');")"
	check "ports are checked" "22023 invalid ports for an egress rule" \
		"$(aq_error "$org" "SELECT agent.add_egress_rule('ok.test', '{0}', 'admin');")"
	check "host or cidr, not both" "22023 an egress rule needs exactly one of host and cidr" \
		"$(aq_error "$org" "SELECT agent.add_egress_rule('ok.test', '{443}', 'admin', '1.2.3.0/24');")"
}

t_db_limits() {
	local T org ws agent conv inv
	T=$(new_tenant 100)
	read -r org ws agent conv <<<"$T"
	aq "$org" "SELECT agent.add_egress_rule('allowed.test', '{443}', 'admin');
SELECT agent.set_egress_limits(1, 1000000, 1000000, 'admin');" >/dev/null
	inv=$(run "$T" python 'import requests
for u in ["https://allowed.test/a", "https://allowed.test/b"]:
    try:
        print(u, requests.get(u, timeout=20).text.strip())
    except Exception as e:
        print(u, "ERR", str(e))')
	out=$(output "$inv")
	has "the first connection passes" "https://allowed.test/a hello allowed.test /a"
	has "the second hits the org's limit" "egress denied: the run's connection limit (1) is used up"
	check "the tool call flags the limit" true \
		"$(q -c "SELECT egress->>'limit_hit' FROM agent.agent_tool_calls WHERE invocation_id = '$inv'")"
}

t_db_runner_without_conversation() {
	# no conversation (no session) and no skills: only has_egress makes the
	# runner take the prepare step that gives it the policy
	local T org ws agent conv inv appr
	T=$(new_tenant 100)
	read -r org ws agent conv <<<"$T"
	aq "$org" "SELECT agent.add_egress_rule('allowed.test', '{443}', 'admin');" >/dev/null
	read -r inv appr < <(req "$T" python "$TWO_GETS" none)
	check "the run has no conversation" "" "$(field "$inv" conversation_id)"
	approve "$T" "$appr"
	await_ok "$T" "$inv"
	out=$(output "$inv")
	has "the allowed host answered (the policy reached the runner's jail)" "https://allowed.test/one GOT hello allowed.test /one"
	has "the other one was refused, saying why" "egress denied: denied.test:443 is not in the allowlist"
	check "both attempts recorded" 2 "$(q -c "SELECT count(*) FROM agent.egress_connections WHERE invocation_id = '$inv'")"
}

t_db_runner_config() {
	local out conf=$EPG_DIR/data/sandbox_runner/runner.conf
	check "the local runner's configuration carries sandbox.egress_resolver" \
		"egress_resolver = '$EGR_RESOLVER'" "$(grep '^egress_resolver' "$conf")"
	check "and sandbox.egress_ca_file" "egress_ca_file = '$EGR_DIR/ca.pem'" "$(grep '^egress_ca_file' "$conf")"
	local bad=$EGR_DIR/bad-runner.conf
	printf "name = 'x'\nwork_dir = '/tmp/x'\nrun_dir = '/tmp/y'\negress_ca_file = 'ca.pem'\n" >"$bad"
	out=$("$top/src/runner/sandbox-runner" --config "$bad" --check 2>&1)
	has "a relative egress_ca_file is refused" "egress_ca_file must be an absolute path"
}

t_db_bad_log_keeps_no_slot() {
	# Fault injection (a trigger of the test's): the database refuses the
	# run's egress record.  The runner's fallback finish records no egress,
	# so the run ends and its slot comes back; the next run is served.
	local T org ws agent conv inv inv2
	T=$(new_tenant 100)
	read -r org ws agent conv <<<"$T"
	aq "$org" "SELECT agent.add_egress_rule('allowed.test', '{443}', 'admin');" >/dev/null
	q >/dev/null <<'SQL'
CREATE FUNCTION public.t_refuse_egress() RETURNS trigger LANGUAGE plpgsql AS
$$BEGIN RAISE EXCEPTION 'test: egress record refused'; END$$;
CREATE TRIGGER t_refuse_egress BEFORE INSERT ON agent.egress_runs
	FOR EACH ROW EXECUTE FUNCTION public.t_refuse_egress();
SQL
	inv=$(run "$T" python 'print("ran")' none)
	q >/dev/null <<'SQL'
DROP TRIGGER t_refuse_egress ON agent.egress_runs;
DROP FUNCTION public.t_refuse_egress();
SQL
	local st
	st=$(field "$inv" state)
	case "$st" in
		succeeded|failed|provision_failed) ok "the run whose egress record was refused ended ($st)" ;;
		*) nok "the run whose egress record was refused ended" "state $st" ;;
	esac
	check "its reason says the result could not be recorded" t \
		"$(q -c "SELECT coalesce(state_reason, '') LIKE '%test: egress record refused%' FROM agent.invocations WHERE id = '$inv'")"
	check "no egress record for it" 0 "$(q -c "SELECT count(*) FROM agent.egress_runs WHERE invocation_id = '$inv'")"
	inv2=$(run "$T" python "$TWO_GETS" none)
	check "the next run is served" succeeded "$(field "$inv2" state)"
	check "and recorded" 1 "$(q -c "SELECT count(*) FROM agent.egress_runs WHERE invocation_id = '$inv2'")"
}

# ---- secrets end to end: sealed by the admin's tool, opened by the runner --------
DB_VALUE=ghp-$(openssl rand -hex 20)
AUTH_CODE='
import os, requests
tok = os.environ.get("API_TOKEN")
print("PH", (tok or "none")[:6])
r = requests.get("https://allowed.test/auth", headers={"Authorization": "Bearer " + (tok or "none")})
print("AUTH", r.status_code, r.text.strip())'
# seal ORG NAME HOST HEADER VALUE → what agent.set_secret takes (the admin's
# machine: the tool and the public key agent.secrets_public_key() gives)
seal() {
	local key
	key=$(aq "$1" "SELECT public_key FROM agent.secrets_public_key();" | tail -n 1)
	printf '%s' "$5" | "$SECRET_TOOL" seal --key "$key" --org "$1" --name "$2" --host "$3" --header "$4"
}
# set_secret ORG NAME RULE HEADER VALUE [AGENTS]: sealed and stored
set_secret() {
	local host sealed
	host=$(q -c "SELECT host FROM agent.egress_rules WHERE id = '$3'")
	sealed=$(seal "$1" "$2" "$host" "$4" "$5")
	aq "$1" "SELECT agent.set_secret('$2', '$3', '$4', '$sealed', 'admin'${6:+, agents => $6});" | tail -n 1
}
register_key() { q -c "SELECT agent.add_secret_key('$RUNNER_PUB', 'operator')" >/dev/null; }

t_db_secret_run() {
	local T org ws agent conv rule inv appr workdir
	T=$(new_tenant 100)
	read -r org ws agent conv <<<"$T"
	register_key
	printf '%s\n' "$DB_VALUE" >"$EGR_DIR/expected_token"
	rule=$(aq "$org" "SELECT agent.add_egress_rule('allowed.test', '{443}', 'admin');" | tail -n 1)
	set_secret "$org" API_TOKEN "$rule" 'Authorization: Bearer {}' "$DB_VALUE" >/dev/null
	check "the database holds the sealed box only" 0 \
		"$(q -c "SELECT count(*) FROM agent.secrets WHERE position(convert_to('$DB_VALUE', 'UTF8') IN sealed) > 0")"
	read -r inv appr < <(req "$T" python "$AUTH_CODE")
	check "the card shows which secret goes to which host" "allowed.test:443; secret API_TOKEN → allowed.test:443" \
		"$(card "$org" "$ws" "$appr")"
	approve "$T" "$appr"
	await_ok "$T" "$inv"
	out=$(output "$inv")
	has "the run held a placeholder" "PH sbxph_"
	has "and authenticated with the real value, through the runner's proxy" "AUTH 200 authenticated"
	hasnt "the value is not in the run's output" "$DB_VALUE"
	check "the approval bound the policy with its secret" t \
		"$(q -c "SELECT a.details->>'egress_sha256' = i.egress_sha256 AND i.egress_policy->'rules'->0->'secrets'->0->>'name' = 'API_TOKEN' FROM agent.audit_events a JOIN agent.invocations i ON i.id = a.invocation_id WHERE a.invocation_id = '$inv' AND a.event_type = 'approval.approved'")"
	check "the use is a connection row with the secret's name" "API_TOKEN|allowed.test|true" \
		"$(q -c "SELECT secret || '|' || host || '|' || allowed FROM agent.egress_connections WHERE invocation_id = '$inv'")"
	check "and an audit event: name, host, port" "API_TOKEN|allowed.test|443" \
		"$(q -c "SELECT details->>'name' || '|' || (details->>'host') || '|' || (details->>'port') FROM agent.audit_events WHERE invocation_id = '$inv' AND event_type = 'secret.used'")"
	check "the connection log's hash covers the secret's name" t \
		"$(q -c "SELECT details->>'log_sha256' = agent.egress_log_sha256('$inv') FROM agent.audit_events WHERE invocation_id = '$inv' AND event_type = 'egress.connections'")"
	check "the audit chain verifies" t "$(q -c "SELECT ok FROM agent.verify_audit_chain('$org')")"
	check "no row of the database holds the value (audit, output, tool call)" 0 \
		"$(q -c "SELECT (SELECT count(*) FROM agent.audit_events WHERE details::text LIKE '%$DB_VALUE%') + (SELECT count(*) FROM agent.invocation_output WHERE data LIKE '%$DB_VALUE%') + (SELECT count(*) FROM agent.agent_tool_calls WHERE row(agent_tool_calls)::text LIKE '%$DB_VALUE%')")"
	# the files: the data directory (tables, WAL, the server's log) and the
	# runner's work directory, after a checkpoint
	q -c "CHECKPOINT" >/dev/null
	workdir=$(sed -n "s/^work_dir = '\(.*\)'$/\1/p" "$EPG_DIR/data/sandbox_runner/runner.conf")
	check "grep finds what is stored in clear (the secret's name, the org) in the data files" t \
		"$([ "$(grep -rlaF "$org" "$EPG_DIR" 2>/dev/null | wc -l)" -gt 0 ] && echo t || echo f)"
	check "no file of the database, its WAL, its log or the runner's work directory holds the value" "" \
		"$(grep -rlaF "$DB_VALUE" "$EPG_DIR" ${workdir:+"$workdir"} 2>/dev/null)"
}

t_db_secret_scope() {
	local T org ws agent conv rule agent_b inv appr T2 org2 ws2 rule2 inv2 sealed1
	T=$(new_tenant 100)
	read -r org ws agent conv <<<"$T"
	register_key
	printf '%s\n' "$DB_VALUE" >"$EGR_DIR/expected_token"
	rule=$(aq "$org" "SELECT agent.add_egress_rule('allowed.test', '{443}', 'admin');" | tail -n 1)
	set_secret "$org" API_TOKEN "$rule" 'Authorization: Bearer {}' "$DB_VALUE" "ARRAY['$agent']::uuid[]" >/dev/null
	agent_b=$(tq "$org" "$ws" "SELECT agent.create_agent('B', 'specialist', (SELECT model_id FROM agent.agents WHERE id = '$agent'), 'alice', code_execution_enabled => true);" | tail -n 1)
	read -r inv appr < <(req "$org $ws $agent_b none" python "$AUTH_CODE" none)
	check "another agent of the org: the card shows no secret" "allowed.test:443" "$(card "$org" "$ws" "$appr")"
	approve "$T" "$appr"
	await_ok "$T" "$inv"
	out=$(output "$inv")
	has "its sandbox has no such variable" "PH none"
	has "and nothing is put in for it" "AUTH 401 unauthenticated"
	# another org
	T2=$(new_tenant 100)
	read -r org2 ws2 _ <<<"$T2"
	check "another org cannot bind a secret to this org's rule" "P0002 egress rule $rule does not exist" \
		"$(aq_error "$org2" "SELECT agent.set_secret('X_TOKEN', '$rule', 'Authorization: Bearer {}', 'sealed:1:0000000000000000:AAAA', 'admin');")"
	check "nor sees its secrets" 0 "$(aq "$org2" "SELECT count(*) FROM agent.org_secrets;" | tail -n 1)"
	check "the backend reads no sealed box" "42501 permission denied for table secrets" \
		"$(tq_error "$org" "$ws" "SELECT sealed FROM agent.secrets;")"
	check "a runner host reads no secret" "42501 permission denied for table secrets" \
		"$(q_error "SET ROLE agent_runner; SELECT count(*) FROM agent.secrets;")"
	check "nor prepares (and so opens) a run it holds no lease on" "42501" \
		"$(q_error "SET ROLE agent_runner; SELECT * FROM agent.runner_prepare(gen_random_uuid(), gen_random_uuid(), '$inv', false);" | cut -c1-5)"
	# A superuser moves org 1's sealed box to org 2's secret: the runner
	# refuses to open it there (sealed for another org), nothing runs.
	rule2=$(aq "$org2" "SELECT agent.add_egress_rule('allowed.test', '{443}', 'admin');" | tail -n 1)
	set_secret "$org2" API_TOKEN "$rule2" 'Authorization: Bearer {}' "org2-value-0123456789" >/dev/null
	q -c "UPDATE agent.secrets s SET sealed = o.sealed FROM agent.secrets o WHERE s.org_id = '$org2' AND o.org_id = '$org' AND o.name = 'API_TOKEN' AND s.name = 'API_TOKEN'" >/dev/null
	inv2=$(run "$T2" python "$AUTH_CODE" none)
	check "the moved box does not open for another org: the run is not started (refunded)" provision_failed \
		"$(field "$inv2" state)"
	check "saying why" t "$(field "$inv2" "state_reason LIKE '%secret API_TOKEN cannot be opened: the value was sealed for another org than this secret''s%'")"
	check "nothing of the run ran" "" "$(output "$inv2")"
}

t_db_secret_changed() {
	local T org ws agent conv rule inv appr
	T=$(new_tenant 100)
	read -r org ws agent conv <<<"$T"
	register_key
	rule=$(aq "$org" "SELECT agent.add_egress_rule('allowed.test', '{443}', 'admin');" | tail -n 1)
	set_secret "$org" API_TOKEN "$rule" 'Authorization: Bearer {}' "$DB_VALUE" >/dev/null
	check "a rule that carries a secret is not removed" "2BP01 egress rule $rule carries secret API_TOKEN" \
		"$(aq_error "$org" "SELECT agent.remove_egress_rule('$rule', 'admin');")"
	read -r inv appr < <(req "$T" python "$AUTH_CODE")
	aq "$org" "SELECT agent.remove_secret('API_TOKEN', 'admin');" >/dev/null
	approve "$T" "$appr"
	await "$T" "$inv" >/dev/null
	check "a secret removed after the request: the run is not started" provision_failed "$(field "$inv" state)"
	check "saying why" t "$(field "$inv" "state_reason LIKE '%secret API_TOKEN of invocation $inv was changed or removed after the run was requested%'")"
	check "the local runner's configuration carries sandbox.secrets_key_file" \
		"secrets_key_file = '$RUNNER_KEY'" "$(grep '^secrets_key_file' "$EPG_DIR/data/sandbox_runner/runner.conf")"
}

# A run with secrets goes only to a runner holding the key they are sealed
# to: sealed to a second key no runner holds, it waits (queue_status says
# why, nothing charged); once the runner's key file holds that key too
# (the runner sees the file change at its next heartbeat and reports it),
# the run is claimed and authenticates.
t_db_secret_routing() {
	local T org ws agent conv rule inv appr k2file k2pub k2id orig
	T=$(new_tenant 100)
	read -r org ws agent conv <<<"$T"
	register_key
	printf '%s\n' "$DB_VALUE" >"$EGR_DIR/expected_token"
	k2file=$EGR_DIR/runner-k2.key
	rm -f "$k2file"
	k2pub=$("$SECRET_TOOL" keygen "$k2file")
	k2id=$(q -c "SELECT agent.add_secret_key('$k2pub', 'operator')")
	check "the second key is the current one (new secrets are sealed to it)" "$k2id" \
		"$(aq "$org" "SELECT key_id FROM agent.secrets_public_key();" | tail -n 1)"
	check "no live runner holds it" 0 "$(q -c "SELECT live_runners FROM agent.secret_key_status WHERE key_id = '$k2id'")"
	check "the runner reported the key it holds" 1 \
		"$(q -c "SELECT live_runners FROM agent.secret_key_status WHERE key_id <> '$k2id' AND retired_at IS NULL ORDER BY added_at LIMIT 1")"
	rule=$(aq "$org" "SELECT agent.add_egress_rule('allowed.test', '{443}', 'admin');" | tail -n 1)
	set_secret "$org" API_TOKEN "$rule" 'Authorization: Bearer {}' "$DB_VALUE" >/dev/null
	read -r inv appr < <(req "$T" python "$AUTH_CODE")
	approve "$T" "$appr"
	wait_for 30 '[ "$(q -c "SELECT waiting_for FROM agent.queue_status() WHERE invocation_id = '"'$inv'"'")" = secrets_key_not_held ]'
	check "approved, it waits: no live runner holds the key its secret is sealed to" \
		"approved|secrets_key_not_held|no live runner holds the secrets key $k2id" \
		"$(field "$inv" state)|$(q -c "SELECT waiting_for || '|' || detail FROM agent.queue_status() WHERE invocation_id = '$inv'")"
	check "nothing is charged while it waits" "" "$(ledger "$inv")"
	orig=$(cat "$RUNNER_KEY")
	cat "$k2file" >>"$RUNNER_KEY"
	check "once the runner holds the key, it runs" succeeded "$(await "$T" "$inv" 90)"
	out=$(output "$inv")
	has "and authenticates with the value sealed to the second key" "AUTH 200 authenticated"
	check "the runner reported both keys" 1 "$(q -c "SELECT live_runners FROM agent.secret_key_status WHERE key_id = '$k2id'")"
	# the runner's own role, its id and incarnation (only it may report)
	local role id incn
	read -r role id incn <<<"$(q -c "SELECT login_role || ' ' || id || ' ' || incarnation FROM agent.runners WHERE state = 'active' ORDER BY last_heartbeat DESC LIMIT 1")"
	check "a runner reports only well-formed key ids" "22023 invalid secrets key id \"nope\"" \
		"$(q_error "SET ROLE $role; SELECT agent.runner_report_secret_keys('$id', '$incn', '{nope}');")"
	check "and at most 8" "54000 a runner may report at most 8 secrets keys" \
		"$(q_error "SET ROLE $role; SELECT agent.runner_report_secret_keys('$id', '$incn', array_fill('0123456789abcdef'::text, ARRAY[9]));")"
	check "never NULL" "22004 key_ids must not be null" \
		"$(q_error "SET ROLE $role; SELECT agent.runner_report_secret_keys('$id', '$incn', NULL);")"
	check "nor for another runner" "42501 permission denied for runner 00000000-0000-0000-0000-000000000000" \
		"$(q_error "SET ROLE $role; SELECT agent.runner_report_secret_keys('00000000-0000-0000-0000-000000000000', '$incn', '{}');")"
	check "a refused report changed nothing" 1 "$(q -c "SELECT live_runners FROM agent.secret_key_status WHERE key_id = '$k2id'")"
	# back as it was: the secret removed, the second key retired, the file restored
	aq "$org" "SELECT agent.remove_secret('API_TOKEN', 'admin');" >/dev/null
	q -c "SELECT agent.retire_secret_key('$k2id', 'operator')" >/dev/null
	printf '%s\n' "$orig" >"$RUNNER_KEY"
}

if [ -z "${T:-}" ] || [[ t_db_ =~ $T ]] || [[ $T == *t_db* ]]; then
	db_up && EPG_UP=1
fi

run_tests t_python_allowed t_node_allowed t_shell_allowed t_denied_host t_refusal_messages t_wildcard_apex \
	t_wrong_port t_ip_literal t_forbidden_names t_rebinding t_dns_cache t_sni_and_host t_ipv6 \
	t_ca_bundle t_no_route_no_dns t_proxy_own_ports t_host_own_addresses t_flood_and_slow t_caps t_runtime_installs \
	t_hostile_inputs t_malformed_heads t_served t_no_policy_no_proxy t_proxy_seccomp \
	t_secret_clients t_secret_gvisor t_secret_echo t_secret_placeholder_elsewhere t_secret_tls_checks \
	t_secret_upstream_verified t_secret_ca t_secret_proxy_memory t_secret_bad_secrets t_sanitizers
if [ -n "${EPG_UP:-}" ]; then
	run_tests t_db_default_deny t_db_allowed_run t_db_egress_not_warm t_db_policy_changed_after_request \
		t_db_narrowing t_db_roles_and_rls t_db_limits t_db_runner_without_conversation \
		t_db_runner_config t_db_bad_log_keeps_no_slot t_db_secret_run t_db_secret_scope t_db_secret_changed t_db_secret_routing
fi
finish_suite
