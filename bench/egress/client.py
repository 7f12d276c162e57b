#!/usr/bin/python3
# bench/egress: one client, two paths to the same test server: directly, and
# through the egress proxy (CONNECT, SNI checked).  Prints, per path, the
# median and mean of connect + TLS handshake + a small GET (the paths
# alternating connection by connection), and the median MB/s of K large
# downloads (alternating too; K = 9 unless the environment's BIG_RUNS says
# otherwise) with their spread; then the ratios.  One download per path
# was too few: on a 2-CPU machine the client, the test server and the
# proxy share the CPUs, and one download ran at 600 or at 1200 MB/s
# depending on where they were scheduled.  Usage:
#   client.py CA PROXY_PORT N BIG_BYTES [RUN_CA PLACEHOLDER]
# With RUN_CA (bench/egress/run.sh INTERCEPT=1) the two paths both go
# through the proxy: "relay" to www.allowed.test (no secret: TLS relayed)
# and "intercept" to allowed.test (a secret: TLS ended at the proxy, whose
# CA of the run RUN_CA is, the placeholder sent in Authorization).
import os, socket, ssl, statistics, sys, time

CA, PPORT, N, BIG = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
INTERCEPT = len(sys.argv) > 6
HOST, ADDR = "allowed.test", "93.184.216.34"
ctx = ssl.create_default_context(cafile=CA)
if INTERCEPT:
    ictx = ssl.create_default_context(cafile=sys.argv[5])
    AUTH = b"Authorization: Bearer %s\r\n" % sys.argv[6].encode()
NAMES = ("relay", "intercept") if INTERCEPT else ("direct", "proxy")

def host_of(via):
    return "www.allowed.test" if INTERCEPT and not via else HOST

def connect(via_proxy):
    host = host_of(via_proxy)
    if not via_proxy and not INTERCEPT:
        s = socket.create_connection((ADDR, 443))
    else:
        s = socket.create_connection(("127.0.0.1", PPORT))
        s.sendall(b"CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n\r\n" % (host.encode(), host.encode()))
        # Read the answer as curl and urllib3 do (buffered, not a byte at
        # a time): nothing follows the head until the ClientHello is sent.
        head = b""
        while b"\r\n\r\n" not in head:
            d = s.recv(4096)
            assert d, head
            head += d
        assert head.startswith(b"HTTP/1.1 200") and head.endswith(b"\r\n\r\n"), head
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return (ictx if INTERCEPT and via_proxy else ctx).wrap_socket(s, server_hostname=host)

def get(t, path, via):
    t.sendall(b"GET %s HTTP/1.1\r\nHost: %s\r\n%sConnection: close\r\n\r\n"
              % (path.encode(), host_of(via).encode(), AUTH if INTERCEPT and via else b""))
    n = 0
    while True:
        d = t.recv(262144)
        if not d:
            return n
        n += len(d)

def small(via):
    t0 = time.perf_counter()
    t = connect(via)
    get(t, "/small", via)
    t.close()
    return (time.perf_counter() - t0) * 1000

def big(via):
    t = connect(via)
    t0 = time.perf_counter()
    n = get(t, "/bytes/%d" % BIG, via)
    dt = time.perf_counter() - t0
    t.close()
    assert n >= BIG, n
    return n / dt / 1e6

res = {False: [], True: []}
for via in (False, True):
    small(via)                                   # warm up
# The two paths alternate connection by connection (the order swapped
# every time), so both see the same load of a shared machine.
for i in range(N):
    for via in ((False, True) if i % 2 == 0 else (True, False)):
        res[via].append(small(via))
runs = {False: [], True: []}
K = int(os.environ.get("BIG_RUNS", "9"))
for i in range(K):                               # alternating too
    for via in ((False, True) if i % 2 == 0 else (True, False)):
        runs[via].append(big(via))
mbs = {via: statistics.median(runs[via]) for via in (False, True)}
for via, name in ((False, NAMES[0]), (True, NAMES[1])):
    print("%-9s connect+TLS+GET: median %.3f ms, mean %.3f ms (n=%d); download median %.1f MB/s"
          " (%d downloads, %.1f-%.1f)"
          % (name, statistics.median(res[via]), statistics.mean(res[via]), len(res[via]), mbs[via],
             len(runs[via]), min(runs[via]), max(runs[via])))
print("added per connection (median): %.3f ms%s"
      % (statistics.median(res[True]) - statistics.median(res[False]), "" if INTERCEPT else " (target <= 0.5)"))
print("throughput ratio %s/%s: %.2f (target >= 0.8)" % (NAMES[1], NAMES[0], mbs[True] / mbs[False]))
