#!/usr/bin/python3
# bench/jail/gvisor_zygote.py N SCRIPT...   (as root; bench/jail/gvisor.sh's zygote row)
#
# A prototype of a warm gvisor run (docs/jail.md, "The gvisor class",
# "Warm gvisor sandboxes: the experiment"), to measure what it would
# leave on a request's path.  Not the jail: its own bundle (the host's
# /usr and /etc read-only, a tmpfs /tmp, no network), no cgroup, no
# egress.  Per sample:
#   ahead    runsc create + start of a sandbox whose pid 1 (root in gVisor
#            with CAP_SYS_ADMIN, CAP_SETUID, CAP_SETGID) forks the zygote:
#            uid 65534, no capabilities, no_new_privs, pandas imported,
#            waiting for its code on a pipe of gVisor's own.  /workspace
#            is an empty directory of the read-only root; the spec mounts
#            a staging directory (a shared tmpfs of this mount namespace)
#            at /run/wsvol, a volume (runsc's default file access for
#            volumes, shared: no cached dentries).
#   request  (timed, go -> the payload's status) the run's workspace is
#            bound onto staging/w on the host (it propagates into the
#            gofer's mount namespace, a slave of ours); the code goes to
#            pid 1 on the sandbox's stdin; pid 1 binds /run/wsvol/w onto
#            /workspace inside gVisor, detaches /run/wsvol and covers it
#            with an empty read-only tmpfs (the root's gofer would walk
#            into the host's mount of the volume there), hands the code
#            to the zygote, which chdirs to /workspace and runs it; pid 1
#            prints the wait status.
# The sandbox is destroyed after each sample (off the clock).  Each run's
# A first run checks, from the payload's side: its own workspace's marker,
# uid 65534, /workspace as its cwd and writable, nothing under /run/wsvol
# and no way to uncover it, pid 1 (root of gVisor) out of reach (no
# signal, no memory), no capability.  (gVisor, unlike Linux, lets it read
# pid 1's /proc/1/environ and maps: pid 1 must hold nothing the payload
# may not see.)  Prints "ahead MS request MS" medians.
import os
import shutil
import statistics
import subprocess
import sys
import time

ZYGOTE = r'''
import os, sys, ctypes
libc = ctypes.CDLL(None, use_errno=True)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(w)
    for cap in range(64):
        libc.prctl(24, cap, 0, 0, 0)                        # PR_CAPBSET_DROP
    os.setgroups([]); os.setgid(65534); os.setuid(65534)   # every capability gone
    libc.prctl(38, 1, 0, 0, 0)                              # PR_SET_NO_NEW_PRIVS
    import pandas, numpy
    os.write(1, b"ready\n")
    chunks = []
    while True:
        b = os.read(r, 65536)
        if not b:
            break
        chunks.append(b)
    os.close(r)
    os.chdir("/workspace")
    exec(compile(b"".join(chunks), "/sandbox/main.py", "exec"), {"__name__": "__main__"})
    sys.stdout.flush()
    os._exit(0)
os.close(r)
n = int(sys.stdin.buffer.readline())
code = sys.stdin.buffer.read(n)
if libc.mount(b"/run/wsvol/w", b"/workspace", None, 4096, None) != 0:      # MS_BIND
    os.write(1, b"status mount %d\n" % ctypes.get_errno()); os._exit(1)
if libc.umount2(b"/run/wsvol", 2) != 0:                                   # MNT_DETACH
    os.write(1, b"status umount %d\n" % ctypes.get_errno()); os._exit(1)
# the root's gofer would still walk into the host's mount of the volume there
if libc.mount(b"tmpfs", b"/run/wsvol", b"tmpfs", 1 | 2 | 4 | 8, b"size=4k,mode=0555") != 0:  # ro, nosuid, nodev, noexec
    os.write(1, b"status tmpfs %d\n" % ctypes.get_errno()); os._exit(1)
os.write(w, code)
os.close(w)
_, st = os.waitpid(pid, 0)
os.write(1, b"status %d\n" % st)
'''

CHECK = r'''
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def errno_of(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return e.errno
def umount():
    if libc.umount2(b"/run/wsvol", 2) != 0:
        raise OSError(ctypes.get_errno(), "umount")
def status(key):
    return [l.split()[1] for l in open("/proc/self/status") if l.startswith(key + ":")][0]
def mem():
    fd = os.open("/proc/1/mem", os.O_RDONLY)
    os.lseek(fd, 0x400000, 0)
    os.read(fd, 8)
print("check", os.getuid(), os.getcwd(), os.listdir("/run/wsvol"), open("marker").read(),
      errno_of(umount), errno_of(lambda: os.kill(1, 0)), errno_of(mem),
      errno_of(lambda: open("/run/wsvol/x", "w")), errno_of(lambda: open("/workspace/new", "w").close()),
      status("CapEff"), status("CapBnd"), libc.prctl(39, 0, 0, 0, 0))
'''

RUNSC = os.environ.get("RUNSC", "/usr/bin/runsc")


def bundle(d):
    caps = '["CAP_SYS_ADMIN", "CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP"]'
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0700", "tmpfs", d], check=True)
    subprocess.run(["mount", "--make-shared", d], check=True)
    for p in ["rootfs/usr", "rootfs/etc", "rootfs/tmp", "rootfs/workspace", "rootfs/run/wsvol",
              "rootfs/proc", "rootfs/sandbox", "state", "wsvol/w", "sandbox"]:
        os.makedirs(os.path.join(d, p), 0o755)
    for link, target in [("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64"), ("sbin", "usr/sbin")]:
        os.symlink(target, os.path.join(d, "rootfs", link))
    with open(os.path.join(d, "sandbox/zygote.py"), "w") as f:
        f.write(ZYGOTE)
    mounts = [
        ("/proc", "proc", "proc", []),
        ("/usr", "bind", "/usr", ["rbind", "ro"]),
        ("/etc", "bind", "/etc", ["rbind", "ro"]),
        ("/tmp", "tmpfs", "tmpfs", ["nosuid", "nodev"]),
        ("/sandbox", "bind", d + "/sandbox", ["rbind", "ro"]),
        ("/run/wsvol", "bind", d + "/wsvol", ["rbind", "rw", "nosuid", "nodev"]),
    ]
    import json
    spec = {
        "ociVersion": "1.0.0",
        "process": {"user": {"uid": 0, "gid": 0},
                    "args": ["/usr/bin/python3", "-I", "-u", "/sandbox/zygote.py"],
                    "env": ["PATH=/usr/bin:/bin", "LANG=C.UTF-8"], "cwd": "/",
                    "noNewPrivileges": True,
                    "capabilities": {k: json.loads(caps) for k in ("bounding", "effective", "permitted")}},
        "root": {"path": d + "/rootfs", "readonly": True},
        "hostname": "sandbox",
        "mounts": [{"destination": m[0], "type": m[1], "source": m[2], "options": m[3]} for m in mounts],
        "linux": {"namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")]},
    }
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(spec, f)


def sample(d, ws, code):
    runsc = [RUNSC, "--root=%s/state" % d, "--platform=ptrace", "--network=none",
             "--ignore-cgroups", "--log=%s/runsc.log" % d]
    ir, iw = os.pipe()
    orr, ow = os.pipe()
    bound = False
    try:
        t0 = time.monotonic()
        subprocess.run(runsc + ["create", "--bundle", d, "z"], stdin=ir, stdout=ow, check=True)
        subprocess.run(runsc + ["start", "z"], check=True)
        os.close(ir)
        os.close(ow)
        ir = ow = -1
        os.set_blocking(orr, True)      # runsc makes the donated descriptors non-blocking
        out = os.fdopen(orr, "rb")
        orr = -1
        if out.readline() != b"ready\n":
            raise SystemExit("gvisor_zygote: the zygote did not start")
        ahead = time.monotonic() - t0
        t0 = time.monotonic()
        subprocess.run(["mount", "--bind", ws, d + "/wsvol/w"], check=True)
        bound = True
        os.set_blocking(iw, True)
        os.write(iw, b"%d\n" % len(code) + code)
        lines = []
        while True:
            line = out.readline()
            if not line or line.startswith(b"status"):
                break
            lines.append(line)
        request = time.monotonic() - t0
        out.close()
    finally:
        # the sandbox never outlives its sample, whatever happened
        subprocess.run(runsc + ["delete", "-force", "z"], stderr=subprocess.DEVNULL)
        if bound:
            subprocess.run(["umount", d + "/wsvol/w"], check=True)
        for fd in (ir, iw, orr, ow):
            if fd >= 0:
                os.close(fd)
    if line != b"status 0\n":
        raise SystemExit("gvisor_zygote: the run ended %r: %r" % (line, lines))
    return ahead, request, lines


def main():
    if os.environ.get("GVISOR_ZYGOTE_INNER") != "1":
        os.environ["GVISOR_ZYGOTE_INNER"] = "1"
        os.execvp("unshare", ["unshare", "-m", "--propagation", "private", sys.executable] + sys.argv)
    n = int(sys.argv[1])
    work = os.environ.get("TMPDIR", "/tmp") + "/gvzygote.%d" % os.getpid()
    os.makedirs(work + "/b")
    try:
        bundle(work + "/b")
        # the contract's checks first: this run's workspace only, the pool's uid, no staging
        ws = work + "/ws0"
        os.makedirs(ws)
        with open(ws + "/marker", "w") as f:
            f.write("run-0")
        os.chown(ws, 65534, 65534)
        os.chown(ws + "/marker", 65534, 65534)
        _, _, lines = sample(work + "/b", ws, CHECK.encode())
        # uid, cwd, the staging path empty, this run's marker; then EPERM for
        # uncovering the staging path and for signalling pid 1, EACCES for
        # pid 1's memory and under the cover, the workspace writable; no
        # capability, bounding set empty, no_new_privs
        if lines != [b"check 65534 /workspace [] run-0 1 1 13 13 ok 0000000000000000 0000000000000000 1\n"]:
            raise SystemExit("gvisor_zygote: the check run saw %r" % lines)
        for k, script in enumerate(sys.argv[2:]):
            code = open(script, "rb").read()
            ahead, request = [], []
            for i in range(n):
                ws = work + "/ws%d.%d" % (k, i)
                os.makedirs(ws)
                os.chown(ws, 65534, 65534)
                a, r, _ = sample(work + "/b", ws, code)
                ahead.append(a * 1000)
                request.append(r * 1000)
            print("%s ahead %.0f request %.0f" % (os.path.basename(script),
                  statistics.median(ahead), statistics.median(request)))
    finally:
        subprocess.run(["umount", "-l", work + "/b"], stderr=subprocess.DEVNULL)
        shutil.rmtree(work, ignore_errors=True)


main()
