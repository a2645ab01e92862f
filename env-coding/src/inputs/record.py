# codegym input recorder (runs as main.py in the sandbox; trusted code only: a task's reference
# solution and its own tests, never a candidate). stdin: a JSON config. It runs the tests against
# the reference with a recording wrapper in place of the entry point, and writes one JSON line to
# the original stdout: the argument lists the tests passed, as JSON the differential runner reads
# back (see inputs/seeds.rs).
import copy, json, math, os, sys


def main():
    cfg = json.loads(sys.stdin.buffer.read())
    out = os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.dup2(null, 2)
    if hasattr(sys, "set_int_max_str_digits"):
        sys.set_int_max_str_digits(0)
    sys.path.insert(0, os.getcwd())
    calls, seen = [], set()
    counts = {"skipped": 0}
    limit = int(cfg.get("max_calls", 200))

    class Unfit(Exception):
        pass

    # Plain JSON the runner reads back unchanged: bools, ints that fit 64 bits, finite floats,
    # strings, None, lists and str-keyed dicts. Tuples are kept when a call holds no list (the
    # runner's `all_to_tuples` restores them); anything else is not recorded.
    def plain(v, kinds, in_dict):
        t = type(v)
        if v is None or t is bool or t is str:
            return v
        if t is int:
            if -(2 ** 63) <= v < 2 ** 63:
                return v
            raise Unfit()
        if t is float:
            if math.isfinite(v):
                return v
            raise Unfit()
        if t is list or t is tuple:
            if t is tuple and in_dict:
                raise Unfit()
            kinds.add(t.__name__)
            return [plain(x, kinds, in_dict) for x in v]
        if t is dict:
            if not all(type(k) is str for k in v):
                raise Unfit()
            return {k: plain(x, kinds, True) for k, x in v.items()}
        raise Unfit()

    def record(args, kwargs):
        if kwargs or len(calls) >= limit:
            counts["skipped"] += 1
            return
        # The argument list itself is a list: only the values inside decide.
        kinds = set()
        try:
            value = [plain(a, kinds, False) for a in args]
        except Unfit:
            counts["skipped"] += 1
            return
        if "tuple" in kinds and "list" in kinds:
            counts["skipped"] += 1
            return
        text = json.dumps(value)
        tuples = "tuple" in kinds
        if (text, tuples) not in seen:
            seen.add((text, tuples))
            calls.append({"args": text, "tuples": tuples})

    error = None
    try:
        ns = {"__name__": "solution", "__file__": "solution.py"}
        exec(compile(cfg["reference"], "solution.py", "exec"), ns)
        fn = ns[cfg["entry_point"]]

        def wrapper(*args, **kwargs):
            # Recorded before the call: the function may change its arguments.
            record(copy.deepcopy(args), kwargs)
            return fn(*args, **kwargs)

        style = cfg["style"]
        if style == "check":
            tests = {"__name__": "tests"}
            exec(compile(cfg["code"], "tests.py", "exec"), tests)
            tests["check"](wrapper)
        else:
            # The tests call the function by name, in the reference's names (its helpers, its
            # imports); the reference's own calls of it still reach the unwrapped function.
            tests = dict(ns)
            tests[cfg["entry_point"]] = wrapper
            exec(compile(cfg.get("setup") or "", "setup.py", "exec"), tests)
            for code in cfg.get("tests") or []:
                try:
                    exec(compile(code, "tests.py", "exec"), tests)
                except BaseException as e:
                    error = error or "%s: %s" % (type(e).__name__, e)
    except BaseException as e:
        error = "%s: %s" % (type(e).__name__, e)
    line = json.dumps({"calls": calls, "skipped": counts["skipped"], "error": error}) + "\n"
    data = line.encode()
    while data:
        data = data[os.write(out, data):]
    os._exit(0)


main()
