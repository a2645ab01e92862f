# codegym's candidate process, shared by the trusted programs that run as main.py (the unit-test
# harness, the differential runner; prepended to each, after plain_codec.py). `_cg_candidate()` is
# the first thing such a program does: it forks the program under test (solution.py) into a
# process of its own *before* the trusted side reads its stdin (the nonce, the tests or inputs),
# and returns the trusted side's calls. The candidate is then called through pipes with plain data
# only; every call's deadline is enforced and its time measured by the trusted side (its own clock,
# `select`, then SIGKILL), so nothing the candidate does to its own process (timers, signals,
# patched clocks, frames) changes a verdict's limits or times. See reward/harness.rs.
def _cg_candidate():
    import builtins, json, os, select, signal, struct, sys, time, types
    _write, _read, _exit, _dup, _dup2, _open = os.write, os.read, os._exit, os.dup, os.dup2, os.open
    _type, _len, _str, _Exc = type, len, str, BaseException
    _pack, _unpack, _select, _kill, _clock = struct.pack, struct.unpack, select.select, os.kill, time.monotonic
    _exec, _isinstance, _list, _callable, _dict = exec, isinstance, list, callable, dict

    # `json.dumps` and `json.loads` minus their Python layers (type checks, a closure per call,
    # encoding detection, regular expressions): the C encoder and scanner they end in. Both sides
    # run them on every call, and every Python frame writes pages the process shares with the
    # other side and the fork server (bench/child_steps.py: ~45 page copies per task).
    c_encoder = getattr(json.encoder, "c_make_encoder", None)
    scan = json.JSONDecoder().scan_once
    _ascii = json.encoder.encode_basestring_ascii

    def not_json(o):
        raise TypeError("not JSON data: " + _type(o).__name__)

    def _dumps(obj):
        if c_encoder is None:
            return json.dumps(obj)
        return "".join(c_encoder({}, not_json, _ascii, None, ": ", ", ", False, False, True)(obj, 0))

    def _loads(raw):
        text = raw.decode()
        obj, end = scan(text, 0)
        if end != _len(text):
            raise ValueError("extra data after the JSON value")
        return obj

    # Integers cross the pipes as text: tests and inputs may use thousands of digits.
    if hasattr(sys, "set_int_max_str_digits"):
        sys.set_int_max_str_digits(0)
    # Another process of this run (the candidate) must not read the trusted process's memory or
    # descriptors through /proc: a non-dumpable process's /proc entries belong to root. The warm
    # backend's runs are non-dumpable from their fork; after an exec (fresh backend) ask for it.
    if os.stat("/proc/self/mem").st_uid == os.getuid():
        try:
            import ctypes

            failed = ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) != 0  # PR_SET_DUMPABLE
            why = "prctl(PR_SET_DUMPABLE) failed: errno %d" % ctypes.get_errno()
        except _Exc as e:
            failed, why = True, "cannot make the trusted process non-dumpable: " + _str(e)
        if failed:
            # No candidate code has run: say so under the nonce (the host reports a machinery
            # failure, never a verdict) and stop.
            nonce = sys.stdin.buffer.read().partition(b"\n")[0]
            _write(1, nonce + b" " + _dumps({"v": 1, "harness_error": why}).encode() + b"\n")
            _exit(0)
    null = _open(os.devnull, os.O_RDWR)
    to_child_r, to_child_w = os.pipe()
    from_child_r, from_child_w = os.pipe()

    def send(fd, obj):
        data = _dumps(obj).encode()
        data = _pack("<I", _len(data)) + data
        while data:
            data = data[_write(fd, data):]

    def recv_exact(fd, n, deadline):
        # None: nothing by the deadline (an instant of `_clock`); b"": the other end is closed.
        buf = b""
        while _len(buf) < n:
            if deadline is not None:
                left = deadline - _clock()
                if left <= 0 or not _select([fd], [], [], left)[0]:
                    return None
            chunk = _read(fd, n - _len(buf))
            if not chunk:
                return b""
            buf += chunk
        return buf

    def recv(fd, deadline=None):
        head = recv_exact(fd, 4, deadline)
        if not head:
            return head
        body = recv_exact(fd, _unpack("<I", head)[0], deadline)
        return _loads(body) if body else body

    def describe(e):
        try:
            name = _type(e).__name__
            text = _str(e)
        except _Exc:
            return "unprintable exception"
        if _type(name) is not _str or _type(text) is not _str:
            return "unprintable exception"
        s = name + (": " + text if text else "")
        return s[:300]

    enc, dec = _cg_plain_codec()

    pid = os.fork()
    if pid == 0:
        # The candidate's process. It never holds the trusted side's input, the nonce or the
        # record's descriptor: its stdin, stdout and stderr are /dev/null before any of its code
        # runs. It answers one message at a time: `load` (compile and run solution.py), `call` a
        # function or a kept object's method, `get` an attribute.
        os.close(to_child_w)
        os.close(from_child_r)
        _dup2(null, 0)
        _dup2(null, 1)
        _dup2(null, 2)
        sys.path.insert(0, os.getcwd())
        objects = []

        def keep(obj):
            objects.append(obj)
            return {"h": _len(objects) - 1}

        def opaque(v):
            # What is not plain data, as a value equal to nothing on the host (its type's name).
            name = _type(v).__name__
            return {"o": name if _type(name) is _str else "object"}

        class _Timeout(_Exc):
            pass

        def on_alarm(signum, frame):
            raise _Timeout("test timed out")

        signal.signal(signal.SIGALRM, on_alarm)
        ns = {"__name__": "solution", "__file__": "solution.py", "__builtins__": builtins}
        while True:
            msg = recv(to_child_r)
            if not msg:
                _exit(0)
            # The harness's own per-test alarm, so that a slow test fails alone and the next
            # one still runs; the trusted side's deadline stands whatever the candidate does to it.
            limit = msg.get("timeout") or 0
            try:
                if limit > 0:
                    signal.setitimer(signal.ITIMER_REAL, limit)
                if msg["op"] == "load":
                    try:
                        with open("solution.py", "rb") as f:
                            code = compile(f.read(), "solution.py", "exec")
                    except _Exc as e:
                        signal.setitimer(signal.ITIMER_REAL, 0)
                        send(from_child_w, {"compile_error": describe(e)})
                        continue
                    _exec(code, ns)
                    signal.setitimer(signal.ITIMER_REAL, 0)
                    if msg.get("entry") is not None:
                        send(from_child_w, {"entry": _callable(ns.get(msg["entry"]))})
                        continue
                    names = {}
                    for k, v in _list(ns.items()):
                        if k.startswith("__"):
                            continue
                        if _type(v) is types.FunctionType and v.__globals__ is ns:
                            names[k] = "function"
                        elif _isinstance(v, _type):
                            names[k] = "class"
                        elif _isinstance(v, types.ModuleType):
                            # Tests may use a module the program imported (`math.isclose`): the
                            # tests' process imports its own copy, from the standard library only.
                            names[k] = {"module": _str(getattr(v, "__name__", ""))}
                        else:
                            try:
                                names[k] = {"value": enc(v)}
                            except _Exc:
                                pass
                    send(from_child_w, {"names": names})
                    continue
                target = ns[msg["name"]] if msg.get("handle") is None else objects[msg["handle"]]
                if msg.get("attr") is not None:
                    target = getattr(target, msg["attr"])
                args = dec(msg["args"], lambda h: objects[h])
                kwargs = dec(msg["kwargs"], lambda h: objects[h])
                out = target(*args, **kwargs) if msg["op"] == "call" else target
                signal.setitimer(signal.ITIMER_REAL, 0)
                if msg.get("not_none"):
                    out = out is not None
                other = keep if msg.get("keep") else (opaque if msg.get("opaque") else None)
                send(from_child_w, {"ok": enc(out, other)})
            except _Timeout:
                send(from_child_w, {"timeout": True})
            except _Exc as e:
                signal.setitimer(signal.ITIMER_REAL, 0)
                text = describe(e)
                kind, _, text = text.partition(": ")
                try:
                    send(from_child_w, {"error": kind, "text": text})
                except _Exc:
                    _exit(1)

    # The trusted side.
    os.close(to_child_r)
    os.close(from_child_w)
    # The nonce and the record's descriptor, once `read` has them.
    held = {}

    def read():
        # The config from stdin ("<nonce>\n<json config>"), read whole; then stdin, stdout and
        # stderr become /dev/null, and only a saved duplicate of the original stdout carries the
        # record (`finish`).
        raw = sys.stdin.buffer.read()
        nonce, _, cfg = raw.partition(b"\n")
        held["nonce"], held["fd"] = nonce, _dup(1)
        _dup2(null, 0)
        _dup2(null, 1)
        _dup2(null, 2)
        return _loads(cfg)

    def kill():
        try:
            _kill(pid, signal.SIGKILL)
        except _Exc:
            pass

    def call(msg, limit=None):
        # Sends `msg` and waits at most `limit` seconds (None: no deadline) for the reply:
        # `(reply, seconds)`, the reply None when the deadline passed, b"" when the candidate's
        # process ended or answered nonsense; either way the process is then killed. The seconds
        # run from the send to the whole reply, on this process's clock; a reply that comes in
        # later than the limit (this process was stopped meanwhile) is past the deadline too.
        start = _clock()
        deadline = None if limit is None else start + limit
        try:
            send(to_child_w, msg)
            reply = recv(from_child_r, deadline)
        except _Exc:
            reply = b""
        elapsed = _clock() - start
        if reply and limit is not None and elapsed > limit:
            reply = None
        if reply and _type(reply) is not _dict:
            reply = b""
        if not reply:
            kill()
        return reply, elapsed

    def finish(record):
        # Writes the record under the nonce and ends the run (the candidate first).
        kill()
        line = held["nonce"] + b" " + _dumps(record).encode() + b"\n"
        while line:
            n = _write(held["fd"], line)
            line = line[n:]
        _exit(0)

    return types.SimpleNamespace(read=read, call=call, kill=kill, finish=finish, describe=describe)
