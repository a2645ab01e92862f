# codegym differential runner (runs as main.py; the program under test is solution.py beside it).
# stdin: "<nonce>\n<json config>". It calls the program's function on every input and writes one
# record "<nonce> <json>\n" to the original stdout: each output copied into a tagged form of plain
# builtin data (never an object of the program's making), or the error it raised. It never sees
# expected outputs: the host compares (see differential/mod.rs).
def _cg_main():
    import copy, json, os, signal, sys, time, types
    _write, _exit, _dup, _dup2, _open = os.write, os._exit, os.dup, os.dup2, os.open
    _type, _str, _dumps, _Exc, _len = type, str, json.dumps, BaseException, len
    _deepcopy, _clock = copy.deepcopy, time.perf_counter
    _setitimer, _ITIMER_REAL, _callable, _tuple = signal.setitimer, signal.ITIMER_REAL, callable, tuple
    # Plus inputs hold integers of thousands of digits; both sides print them whole.
    if hasattr(sys, "set_int_max_str_digits"):
        sys.set_int_max_str_digits(0)

    raw = sys.stdin.buffer.read()
    nonce_bytes, _, cfg_bytes = raw.partition(b"\n")
    cfg = json.loads(cfg_bytes)
    inputs = json.loads(cfg["inputs"])
    del raw, cfg_bytes
    null = _open(os.devnull, os.O_RDWR)
    record_fd = _dup(1)
    _dup2(null, 0)
    _dup2(null, 1)
    _dup2(null, 2)
    sys.path.insert(0, os.getcwd())

    def tuples(x):
        return _tuple(tuples(i) for i in x) if _type(x) is list else x

    # EvalPlus stores some MBPP+ inputs in JSON-friendly shapes; these restore the Python types
    # its reference solutions were written for (named by what they do, chosen by the loader).
    kind = cfg.get("deserialize")
    restore = {
        "args_to_tuples": lambda a: [_tuple(x) for x in a],
        "args_to_tuple_lists": lambda a: [[_tuple(y) for y in x] for x in a],
        "args_to_tuples_of_tuples": lambda a: [_tuple(_tuple(y) for y in x) for x in a],
        "first_to_tuple_list": lambda a: [[_tuple(y) for y in a[0]]] + a[1:],
        "first_to_tuple": lambda a: [_tuple(a[0])] + a[1:],
        "second_to_tuple": lambda a: [a[0], _tuple(a[1])] + a[2:],
        "first_items_to_sets": lambda a: [[set(i) if _type(i) is list and i else {} for i in a[0]]],
        "float_complex": lambda a: [float(a[0]), complex(a[1])],
        "complex": lambda a: [complex(a[0])],
        "first_lists_to_tuples_then_args": lambda a: [
            _tuple(_tuple(i) if _type(i) is list else i for i in a[0])
        ] + [_tuple(x) for x in a[1:]],
        "first_dict_values_to_tuples": lambda a: [{k: _tuple(v) for k, v in a[0].items()}] + a[1:],
        "all_to_tuples": tuples,
    }
    if kind:
        inputs = [restore[kind](inp) for inp in inputs]

    limits = cfg.get("per_input") or []
    not_none = bool(cfg.get("not_none"))

    class _Timeout(_Exc):
        pass

    def on_alarm(signum, frame):
        raise _Timeout()

    signal.signal(signal.SIGALRM, on_alarm)

    def describe(e):
        try:
            name, text = _type(e).__name__, _str(e)
        except _Exc:
            return "unprintable exception"
        if _type(name) is not _str or _type(text) is not _str:
            return "unprintable exception"
        return (name + (": " + text if text else ""))[:300]

    # Outputs in the codec's tagged form (plain_codec.py, shared with the unit-test harness); what
    # is not plain data is an opaque `{"o": type name}` that equals nothing on the host.
    _enc, _ = _cg_plain_codec()

    def opaque(v):
        name = _type(v).__name__
        return {"o": name if _type(name) is _str else "object"}

    def enc(v):
        return _enc(v, opaque)

    results, times = [], []
    record = {"v": 1, "outputs": results, "times": times}

    def finish():
        _setitimer(_ITIMER_REAL, 0)
        line = nonce_bytes + b" " + _dumps(record).encode() + b"\n"
        while line:
            n = _write(record_fd, line)
            line = line[n:]
        _exit(0)

    try:
        with open("solution.py", "rb") as f:
            code = compile(f.read(), "solution.py", "exec")
    except _Exc as e:
        record["compile_error"] = describe(e)
        finish()
    ns = {"__name__": "solution", "__file__": "solution.py"}
    try:
        if limits:
            _setitimer(_ITIMER_REAL, max(limits))
        exec(code, ns)
        _setitimer(_ITIMER_REAL, 0)
        fn = ns.get(cfg["entry_point"])
        if not _callable(fn):
            raise NameError("the program does not define %r" % cfg["entry_point"])
    except _Exc as e:
        _setitimer(_ITIMER_REAL, 0)
        record["load_error"] = describe(e)
        finish()

    for i in range(_len(inputs)):
        start = _clock()
        try:
            args = _deepcopy(inputs[i])
            if i < _len(limits) and limits[i] > 0:
                _setitimer(_ITIMER_REAL, limits[i])
            out = fn(*args)
            elapsed = _clock() - start
            _setitimer(_ITIMER_REAL, 0)
            if not_none:
                out = out is not None
            results.append({"ok": enc(out)})
            times.append(elapsed)
        except _Timeout:
            # A timed-out input fails whatever it would have returned: stop here (a slow program
            # would otherwise spend every input's limit).
            results.append({"timeout": True})
            times.append(limits[i] if i < _len(limits) else 0.0)
            break
        except _Exc as e:
            _setitimer(_ITIMER_REAL, 0)
            results.append({"error": describe(e)})
            times.append(_clock() - start)
    finish()


_cg_main()
