#!/usr/bin/python3
# The egress suite's fake internet (test/suites/egress.sh): run inside the
# "internet" network namespace, it serves
#   * a DNS resolver on RESOLVER:53 (UDP) answering from NAMES below with
#     a TTL of 300 s; NAME.rebind.test answers a public address first, then
#     127.0.0.1, with a TTL of 0 (as a rebinding attacker's does);
#     NAME.rebindttl.test the same with a TTL of 2 s; NAME.many.test the
#     public address (300 s); GET /dns-queries/NAME on the HTTP servers
#     says how many queries NAME got;
#   * HTTP on :80 and :8080, HTTPS on :443 and :8443 (a certificate of
#     the suite's test CA for every name below), on every address of the
#     namespace.  GET /... answers "hello <Host> <path> from <local address>";
#     GET /bytes/N answers N bytes; POST answers the body's length;
#   * for secrets (docs/secrets.md), on the HTTPS servers: GET /echo
#     answers the request head as it arrived (the body, and the
#     Authorization field again in X-Echo-Authorization: a server that
#     echoes a credential back), /echo-chunked the same in 3-byte chunks,
#     /echo-gzip gzip-encoded; each head that reached /echo* is appended
#     to DIR/echo.log; GET /auth answers 200 "authenticated" when its
#     Authorization is "Bearer " and the contents of DIR/expected_token (or
#     its X-Api-Key is DIR/expected_key), 401 otherwise;
#   * a recorder on :8081, a raw HTTP/1 server that keeps what reached it:
#     every connection is counted when it is accepted, and what it read
#     (the head and a Content-Length body, byte for byte) is its answer's
#     body; GET /recorded on the HTTP servers says how many connections it
#     has accepted.
# Usage: fakenet.py RESOLVER CERT KEY [DIR]
import gzip, os, re, socket, ssl, struct, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PUB, PUB2, PUB3 = "93.184.216.34", "93.184.216.35", "140.82.112.3"
NAMES = {
    "allowed.test": [PUB], "www.allowed.test": [PUB], "api.allowed.test": [PUB],
    "deep.api.allowed.test": [PUB], "denied.test": [PUB2], "other.test": [PUB3],
    "loop.test": ["127.0.0.1"], "meta.test": ["169.254.169.254"],
    "private.test": ["10.0.0.5"], "cgnat.test": ["100.64.0.1"],
    "mixed.test": [PUB, "192.168.1.1"], "127.0.0.1.nip.test": ["127.0.0.1"],
    "hostself.test": ["93.184.0.1"],     # the sandbox's host's own address
    "pypi.org": [PUB], "files.pythonhosted.org": [PUB], "registry.npmjs.org": [PUB],
}
AAAA = {"v6ula.test": ["fd00::1"], "v6loop.test": ["::1"]}
queries = {}
recorded = [0]
recorded_lock = threading.Lock()
DIR = sys.argv[4] if len(sys.argv) > 4 else None

def read_file(name):
    try:
        with open(os.path.join(DIR, name)) as f:
            return f.read().strip()
    except (OSError, TypeError):
        return None

def dns_answer(q):
    qid, flags, qd = struct.unpack(">HHH", q[:6])
    off, labels = 12, []
    while q[off]:
        l = q[off]; labels.append(q[off + 1:off + 1 + l].decode().lower()); off += 1 + l
    qtype, qclass = struct.unpack(">HH", q[off + 1:off + 5])
    name = ".".join(labels)
    question = q[12:off + 5]
    queries[name] = queries.get(name, 0) + 1
    ttl = 300
    if name.endswith(".rebind.test") or name.endswith(".rebindttl.test"):
        # each such name: a public answer first, the host's loopback after
        addrs = ([PUB] if queries[name] == 1 else ["127.0.0.1"]) if qtype == 1 else []
        ttl = 0 if name.endswith(".rebind.test") else 2
    elif name.endswith(".many.test"):
        addrs = [PUB] if qtype == 1 else []
    else:
        addrs = NAMES.get(name, []) if qtype == 1 else AAAA.get(name, []) if qtype == 28 else []
    # a hostile resolver: malformed answers the proxy must refuse, not trust
    if name == "ptrloop.test":      # an answer whose name points at itself
        off = len(q[:off + 5])
        return struct.pack(">HHHHHH", qid, 0x8180, 1, 1, 0, 0) + question + \
            struct.pack(">H", 0xc000 | off) + struct.pack(">HHIH", 1, 1, 0, 4) + b"\x5d\xb8\xd8\x22"
    if name == "overlong.test":     # rdlength beyond the message
        return struct.pack(">HHHHHH", qid, 0x8180, 1, 1, 0, 0) + question + \
            b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 0, 200) + b"\x5d\xb8"
    if name == "wrongid.test":      # an answer to another query: ignored
        return struct.pack(">HHHHHH", qid ^ 0x5555, 0x8180, 1, 1, 0, 0) + question + \
            b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 0, 4) + b"\x5d\xb8\xd8\x22"
    if name == "othername.test":    # an answer for a name that was not asked
        other = b"\x05other\x04test\x00"
        return struct.pack(">HHHHHH", qid, 0x8180, 1, 1, 0, 0) + question + \
            other + struct.pack(">HHIH", 1, 1, 0, 4) + b"\x5d\xb8\xd8\x22"
    known = name in NAMES or name in AAAA or name.endswith((".rebind.test", ".rebindttl.test", ".many.test"))
    rcode = 0 if known else 3
    ans = b""
    for a in addrs:
        rdata = socket.inet_pton(socket.AF_INET if qtype == 1 else socket.AF_INET6, a)
        ans += b"\xc0\x0c" + struct.pack(">HHIH", qtype, 1, ttl, len(rdata)) + rdata
    return struct.pack(">HHHHHH", qid, 0x8180 | rcode, 1, len(addrs), 0, 0) + question + ans

def dns(resolver):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((resolver, 53))
    while True:
        q, peer = s.recvfrom(512)
        try:
            s.sendto(dns_answer(q), peer)
        except Exception as e:
            print("dns:", e, file=sys.stderr)

class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def reply(self, body, ctype="text/plain"):
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def echo(self):
        head = (self.requestline + "\r\n" + str(self.headers)).encode()
        if DIR:
            with recorded_lock, open(os.path.join(DIR, "echo.log"), "ab") as f:
                f.write(head + b"\n----\n")
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("X-Echo-Authorization", self.headers.get("Authorization", "-"))
        if self.path.startswith("/echo-chunked"):
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(0, len(head), 3):
                part = head[i:i + 3]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")
            return
        body = gzip.compress(head) if self.path.startswith("/echo-gzip") else head
        if self.path.startswith("/echo-gzip"):
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def auth(self):
        tok, key = read_file("expected_token"), read_file("expected_key")
        ok = (tok and self.headers.get("Authorization") == "Bearer " + tok) or \
             (key and self.headers.get("X-Api-Key") == key)
        body = b"authenticated\n" if ok else b"unauthenticated\n"
        self.send_response(200 if ok else 401)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        if self.path.startswith("/echo") and isinstance(self.connection, ssl.SSLSocket):
            self.echo()
            return
        if self.path.startswith("/auth") and isinstance(self.connection, ssl.SSLSocket):
            self.auth()
            return
        if self.path.startswith("/dns-queries/"):
            self.reply(b"%d\n" % queries.get(self.path[13:], 0))
            return
        if self.path == "/recorded":
            with recorded_lock:
                self.reply(b"%d\n" % recorded[0])
            return
        if self.path.startswith("/bytes/"):
            n = int(self.path[7:])
            self.send_response(200)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            chunk = b"x" * 65536
            while n > 0:
                self.wfile.write(chunk[:min(n, 65536)]); n -= 65536
            return
        if self.path.startswith("/simple/") or self.path.endswith(".tgz") or self.path.startswith("/left-pad"):
            # a registry that answers: what a runtime install would fetch
            self.reply(b'{"name":"left-pad","versions":{}}', "application/json")
            return
        self.reply(("hello %s %s from %s\n" % (self.headers.get("Host"), self.path,
                                               self.connection.getsockname()[0])).encode())
    def do_POST(self):
        if self.path.startswith("/echo") and isinstance(self.connection, ssl.SSLSocket):
            n = int(self.headers.get("Content-Length", "0"))
            self.rfile.read(n)
            self.echo()
            return
        n = int(self.headers.get("Content-Length", "0"))
        data = self.rfile.read(n)
        self.reply(("got %d\n" % len(data)).encode())

def serve(port, ctx=None):
    srv = ThreadingHTTPServer(("0.0.0.0", port), H)
    srv.daemon_threads = True
    if ctx:
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    srv.serve_forever()

def record_one(s):
    s.settimeout(30)
    got = b""
    try:
        while b"\r\n\r\n" not in got:
            d = s.recv(65536)
            if not d:
                break
            got += d
        head, _, body = got.partition(b"\r\n\r\n")
        m = re.search(rb"\r\ncontent-length: *([0-9]+)\r", head + b"\r", re.I)
        n = int(m.group(1)) if m else 0
        while len(body) < n:
            d = s.recv(65536)
            if not d:
                break
            body += d
        got = head + b"\r\n\r\n" + body
        s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(got) + got)
    except OSError:
        pass
    finally:
        s.close()

def recorder(port):
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(64)
    while True:
        s, _ = srv.accept()
        with recorded_lock:
            recorded[0] += 1
        threading.Thread(target=record_one, args=(s,), daemon=True).start()

def main():
    resolver, cert, key = sys.argv[1:4]
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    ts = [threading.Thread(target=dns, args=(resolver,), daemon=True)]
    for p in (80, 8080):
        ts.append(threading.Thread(target=serve, args=(p,), daemon=True))
    for p in (443, 8443):
        ts.append(threading.Thread(target=serve, args=(p, ctx), daemon=True))
    ts.append(threading.Thread(target=recorder, args=(8081,), daemon=True))
    for t in ts:
        t.start()
    print("ready", flush=True)
    for t in ts:
        t.join()

main()
