# codegym differential runner (runs as main.py; the program under test is solution.py beside it).
# stdin: "<nonce>\n<json config>". It calls the program's function on every input and writes one
# record "<nonce> <json>\n" to the original stdout: each output copied into a tagged form of plain
# builtin data (never an object of the program's making), or the error it raised, and the time each
# call took. It never sees expected outputs: the host compares (see differential/mod.rs).
#
# The program runs in a process of its own, forked before the config and the nonce are read, and is
# called through pipes (candidate.py, shared with the unit-test harness): each input's time limit is
# a deadline this process enforces (the program is killed at it) and each time is measured on this
# process's clock, so no timer, signal handler or patched clock of the program changes either.
def _cg_main():
    import json

    _type, _str, _len, _tuple, _list = type, str, len, tuple, list
    candidate = _cg_candidate()
    cfg = candidate.read()
    inputs = json.loads(cfg["inputs"])

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
    entry = cfg["entry_point"]
    results, times = [], []
    record = {"v": 1, "outputs": results, "times": times}

    def error(reply):
        # The candidate's error as "Name: text" (its process describes it; capped here too).
        name, text = _str(reply.get("error", "")), _str(reply.get("text", ""))
        return (name + (": " + text if text else ""))[:300]

    # Loading gets the largest input's limit (none for the reference: no per-input limits).
    reply, _ = candidate.call({"op": "load", "entry": entry}, max(limits) if limits else None)
    if reply is None:
        record["load_error"] = "time limit exceeded while loading"
    elif not reply:
        record["load_error"] = "the program's process ended while loading"
    elif "compile_error" in reply:
        record["compile_error"] = _str(reply["compile_error"])[:300]
    elif "error" in reply:
        record["load_error"] = error(reply)
    elif reply.get("entry") is not True:
        record["load_error"] = "the program does not define %r" % entry
    if "load_error" in record or "compile_error" in record:
        candidate.finish(record)

    # Outputs come back in the codec's tagged form (plain_codec.py); what is not plain data is an
    # opaque `{"o": type name}` that equals nothing on the host.
    enc, _ = _cg_plain_codec()
    base = {"op": "call", "name": entry, "kwargs": {"d": []}, "opaque": True,
            "not_none": bool(cfg.get("not_none"))}
    for i in range(_len(inputs)):
        limit = limits[i] if i < _len(limits) and limits[i] > 0 else None
        try:
            msg = dict(base, args=enc(_list(inputs[i])))
        except Exception as e:
            # Not the program's fault: the task's input is no plain data (a reference fails on it).
            results.append({"error": "the input cannot be passed on: %s" % candidate.describe(e)})
            times.append(0.0)
            continue
        reply, elapsed = candidate.call(msg, limit)
        if reply is None:
            # A timed-out input fails whatever it would have returned: stop here (a slow program
            # would otherwise spend every input's limit).
            results.append({"timeout": True})
            times.append(limit)
            break
        if not reply:
            results.append({"error": "the program's process ended"})
            times.append(elapsed)
            break
        if "ok" in reply:
            results.append({"ok": reply["ok"]})
        elif "error" in reply:
            results.append({"error": error(reply)})
        else:
            results.append({"error": "malformed reply"})
        times.append(elapsed)
    candidate.finish(record)


_cg_main()
