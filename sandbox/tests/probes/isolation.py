# Isolation probe: run many at once, each reports what it can see of the others as one JSON line.
# stdin: {"index": I, "n": N, "hold_ms": H}. The checks are the host's (tests/support/isolation.rs):
# this program only looks, from inside a run, the way a hostile program would.
import ctypes, errno, json, os, socket, sys, time

cfg = json.loads(sys.stdin.read())
index, n, hold = cfg["index"], cfg["n"], cfg["hold_ms"] / 1000.0
start = time.time()
libc = ctypes.CDLL(None, use_errno=True)
IPC_CREAT, IPC_EXCL, KEY = 0o1000, 0o2000, 0x00C0DE00
out = {"index": index, "start": start, "pid": os.getpid(), "cwd": os.getcwd()}


def err_name(e):
    return errno.errorcode.get(e, str(e))


out["ns"] = {k: os.stat(f"/proc/self/ns/{k}").st_ino for k in ("mnt", "ipc", "pid", "net", "uts")}
out["proc_pids"] = sorted(int(d) for d in os.listdir("/proc") if d.isdigit())


def sysv(name, call):
    r = call()
    return "created" if r >= 0 else err_name(ctypes.get_errno())


# The same key in every run: EEXIST means another run's object (or a dead run's) is visible.
out["shm"] = sysv("shm", lambda: libc.shmget(KEY, 4096, IPC_CREAT | IPC_EXCL | 0o666))
out["msg"] = sysv("msg", lambda: libc.msgget(KEY, IPC_CREAT | IPC_EXCL | 0o666))
out["sem"] = sysv("sem", lambda: libc.semget(KEY, 1, IPC_CREAT | IPC_EXCL | 0o666))
try:
    librt = ctypes.CDLL("librt.so.1", use_errno=True)
    librt.mq_open.restype = ctypes.c_int
    mq = librt.mq_open(b"/codegym-isolation", os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o666, None)
    out["mq"] = "created" if mq >= 0 else err_name(ctypes.get_errno())
except OSError as e:
    out["mq"] = f"no librt: {e}"
try:
    fd = os.open("/dev/shm/codegym-isolation", os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o666)
    os.close(fd)
    out["posix_shm"] = "created"
except OSError as e:
    out["posix_shm"] = err_name(e.errno)

listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    listener.bind(f"\0codegym-isolation-{index}".encode())
    listener.listen(64)
    out["abstract_bind"] = "ok"
except OSError as e:
    out["abstract_bind"] = err_name(e.errno)


def look():
    """What of other runs is visible right now."""
    seen = {}
    for kind in ("shm", "msg", "sem"):
        try:
            with open(f"/proc/sysvipc/{kind}") as f:
                seen[f"sysvipc_{kind}"] = len(f.read().splitlines()) - 1
        except OSError as e:
            seen[f"sysvipc_{kind}"] = err_name(e.errno)
    try:
        seen["dev_shm"] = sorted(os.listdir("/dev/shm"))
    except OSError as e:
        seen["dev_shm"] = err_name(e.errno)
    seen["proc_pids"] = sorted(int(d) for d in os.listdir("/proc") if d.isdigit())
    connected = []
    for j in range(n):
        if j == index:
            continue
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(f"\0codegym-isolation-{j}".encode())
            connected.append(j)
        except OSError:
            pass
        finally:
            s.close()
    seen["abstract_connected"] = connected
    try:
        os.kill(-1, 0)  # every process this run may signal but itself and its init
        seen["kill_all"] = "delivered"
    except OSError as e:
        seen["kill_all"] = err_name(e.errno)
    return seen


out["early"] = look()
while time.time() < start + hold:  # hold on, so that the runs overlap
    time.sleep(0.01)
out["late"] = look()
out["end"] = time.time()
print(json.dumps(out))
