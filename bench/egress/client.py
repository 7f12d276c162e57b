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
#   client.py CA PROXY_PORT N BIG_BYTES
import os, socket, ssl, statistics, sys, time

CA, PPORT, N, BIG = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
HOST, ADDR = "allowed.test", "93.184.216.34"
ctx = ssl.create_default_context(cafile=CA)

def connect(via_proxy):
    if not via_proxy:
        s = socket.create_connection((ADDR, 443))
    else:
        s = socket.create_connection(("127.0.0.1", PPORT))
        s.sendall(b"CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n\r\n" % (HOST.encode(), HOST.encode()))
        # Read the answer as curl and urllib3 do (buffered, not a byte at
        # a time): nothing follows the head until the ClientHello is sent.
        head = b""
        while b"\r\n\r\n" not in head:
            d = s.recv(4096)
            assert d, head
            head += d
        assert head.startswith(b"HTTP/1.1 200") and head.endswith(b"\r\n\r\n"), head
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return ctx.wrap_socket(s, server_hostname=HOST)

def get(t, path):
    t.sendall(b"GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (path.encode(), HOST.encode()))
    n = 0
    while True:
        d = t.recv(262144)
        if not d:
            return n
        n += len(d)

def small(via):
    t0 = time.perf_counter()
    t = connect(via)
    get(t, "/small")
    t.close()
    return (time.perf_counter() - t0) * 1000

def big(via):
    t = connect(via)
    t0 = time.perf_counter()
    n = get(t, "/bytes/%d" % BIG)
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
for via, name in ((False, "direct"), (True, "proxy")):
    print("%-6s connect+TLS+GET: median %.3f ms, mean %.3f ms (n=%d); download median %.1f MB/s"
          " (%d downloads, %.1f-%.1f)"
          % (name, statistics.median(res[via]), statistics.mean(res[via]), len(res[via]), mbs[via],
             len(runs[via]), min(runs[via]), max(runs[via])))
print("added per connection (median): %.3f ms (target <= 0.5)"
      % (statistics.median(res[True]) - statistics.median(res[False])))
print("throughput ratio proxy/direct: %.2f (target >= 0.8)" % (mbs[True] / mbs[False]))
