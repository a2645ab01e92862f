# codegym unit-test harness (runs as main.py; the candidate is solution.py in the same dir).
# stdin: "<nonce>\n<json config>". The result record "<nonce> <json>\n" goes to the original stdout
# only after every test ran. The candidate runs in a child process forked *before* the tests and the
# nonce are read (candidate.py, shared with the differential runner), and is called through pipes
# with plain data only: no candidate code ever runs in the process that holds the tests, the nonce or
# the record's descriptor. A suite's first run offers its compiled tests in the record
# (`compiled`); the host hands them to its later runs, which skip the compile (reward/compiled.rs).
# See reward/harness.rs.
def _cg_compile_tests(cfg, describe):
    """The suite's tests compiled, before any candidate code runs, as plain data and code objects
    (marshal's types: the host keeps a copy and hands it to later runs of the same suite, which
    then skip this). `check`: (names, the rewritten `check`'s code, the prompt's code); `asserts`:
    (names, each assert's code or its syntax error's text, the setup's code, the candidate's names)."""
    import builtins
    _isinstance, _len = isinstance, len
    style = cfg["style"]
    import ast  # preloaded by the warm server; ~15 ms of a fresh run's start-up

    if style == "check":
        tree = ast.parse(cfg["code"], "tests.py")
        # Functions of the tests that assert, directly or through each other: a statement of
        # `check` that calls one is a test, like a statement holding an assert.
        helpers = {n.name: n for n in ast.walk(tree)
                   if _isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name != "check"}

        def asserts_in(node):
            return any(_isinstance(n, ast.Assert) and not _isinstance(n.test, ast.Constant) for n in ast.walk(node))

        def calls_into(node, fns):
            return any(_isinstance(n, ast.Call) and _isinstance(n.func, ast.Name) and n.func.id in fns
                       for n in ast.walk(node))

        asserting = {k for k, fn in helpers.items() if asserts_in(fn)}
        grew = True
        while grew:
            more = {k for k, fn in helpers.items() if k not in asserting and calls_into(fn, asserting)}
            asserting |= more
            grew = bool(more)
        names = []
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == "check":
                new_body = []
                for stmt in node.body:
                    # A top-level assert (HumanEval's tests, nearly all) needs no walk of its tree.
                    if isinstance(stmt, ast.Assert):
                        is_test = not isinstance(stmt.test, ast.Constant)
                    else:
                        is_test = asserts_in(stmt) or calls_into(stmt, asserting)
                    # Any other statement that fails is a failed test too (found at run time): an
                    # `assert False`, a helper's assert, a candidate call that raises.
                    idx = _len(names) if is_test else -1 - stmt.lineno
                    if is_test:
                        names.append("check line %d" % stmt.lineno)
                    # The new nodes take the statement's location (instead of a walk of the whole
                    # tree by `ast.fix_missing_locations`: ~40% of this rewrite's time).
                    at = {"lineno": stmt.lineno, "col_offset": stmt.col_offset,
                          "end_lineno": stmt.end_lineno, "end_col_offset": stmt.end_col_offset}

                    def mark(fn, *a):
                        return ast.Expr(ast.Call(ast.Name(fn, ast.Load(), **at), list(a), [], **at), **at)

                    new_body.append(ast.Try(
                        body=[stmt, mark("__cg_pass", ast.Constant(idx, **at))],
                        handlers=[ast.ExceptHandler(
                            type=ast.Name("BaseException", ast.Load(), **at), name="__cg_e",
                            body=[mark("__cg_fail", ast.Constant(idx, **at), ast.Name("__cg_e", ast.Load(), **at))],
                            **at)],
                        orelse=[], finalbody=[], **at))
                node.body = new_body
        test_code = compile(tree, "tests.py", "exec")
        # The task's own code the tests may call (the prompt's helpers), run in this process from
        # the task, never from the candidate's copy. A prompt may end in a signature and docstring.
        prelude = cfg.get("prelude") or ""
        try:
            prelude_code = compile(prelude, "prompt.py", "exec")
        except SyntaxError:
            prelude_code = compile(prelude + "\n    pass\n", "prompt.py", "exec")
        return tuple(names), test_code, prelude_code
    names = list(cfg["asserts"])
    test_codes = []
    trees = []
    for i, t in enumerate(names):
        try:
            trees.append(ast.parse(t, "test_%d.py" % i))
            test_codes.append(compile(trees[-1], "test_%d.py" % i, "exec"))
        except SyntaxError as e:
            test_codes.append(describe(e))
    setup = cfg.get("setup", "") or ""
    trees.append(ast.parse(setup, "setup.py"))
    setup_code = compile(trees[-1], "setup.py", "exec")
    # The candidate's names are those the task declares, or else every name the tests load
    # that neither they, their setup nor Python's builtins define: a program defining `abs`
    # or `range` never changes what the tests' own calls of them do.
    own = cfg.get("candidate_names")
    if own is None:
        bound, loads = _cg_names_of(trees)
        own = loads - bound - set(dir(builtins))
    return tuple(names), tuple(test_codes), setup_code, tuple(sorted(own))


def _cg_checked_tests(style, tests):
    """A copy handed back by the host, if it has the shape `_cg_compile_tests` gives `style`."""
    code = type(_cg_checked_tests.__code__)

    def strs(xs):
        return type(xs) is tuple and all(type(x) is str for x in xs)

    if style == "check" and type(tests) is tuple and len(tests) == 3:
        names, test_code, prelude_code = tests
        if strs(names) and type(test_code) is code and type(prelude_code) is code:
            return tests
    if style != "check" and type(tests) is tuple and len(tests) == 4:
        names, test_codes, setup_code, own = tests
        if (strs(names) and type(test_codes) is tuple and len(test_codes) == len(names)
                and all(type(c) in (code, str) for c in test_codes)
                and type(setup_code) is code and strs(own)):
            return tests
    return None


def _cg_main():
    import builtins, os, sys
    _type, _len, _str, _Exc = type, len, str, BaseException
    _exec, _isinstance, _enumerate, _list, _dict = exec, isinstance, enumerate, list, dict
    _CONTROL_FLOW = ("StopIteration", "StopAsyncIteration", "GeneratorExit", "SystemExit", "KeyboardInterrupt")

    candidate = _cg_candidate()
    cfg = candidate.read()
    describe = candidate.describe
    # Plain data crosses the pipes in the codec's tagged form (plain_codec.py, shared with the
    # differential runner): exact builtin types only, so nothing of the candidate's making reaches
    # the tests' comparisons.
    enc, dec = _cg_plain_codec()

    per_test = float(cfg.get("per_test_timeout", 0) or 0)
    # How long the candidate may take to answer past its own alarm before it is killed (it may
    # have caught the timeout); its later calls then fail.
    backstop = (per_test + 1.0) if per_test > 0 else None
    alive = [True]

    class _Timeout(_Exc):
        pass

    class _Gone(_Exc):
        pass

    def ask(msg, raw=False):
        if not alive[0]:
            raise _Gone("the candidate's process is gone")
        msg["timeout"] = per_test
        reply, _ = candidate.call(msg, backstop)
        if not reply:
            alive[0] = False
            if reply is None:
                raise _Timeout("test timed out")
            raise _Gone("the candidate's process ended")
        if raw:
            return reply
        if reply.get("timeout"):
            raise _Timeout("test timed out")
        if "error" in reply:
            # The candidate's builtin exception types are raised as themselves (a test may expect
            # a ValueError); any other as an Exception subclass of the same name. Exceptions that
            # steer control flow (a StopIteration ends the `map`, `zip` or `for` that called the
            # candidate, silently skipping the asserts after it) arrive as a RuntimeError, as PEP
            # 479 does for generators.
            name, text = _str(reply["error"]), _str(reply.get("text", ""))
            if name in _CONTROL_FLOW:
                text, name = "the program raised " + name + (": " + text if text else ""), "RuntimeError"
            kind = getattr(builtins, name, None)
            if not (_isinstance(kind, _type) and issubclass(kind, Exception)):
                kind = _type(name if name.isidentifier() else "CandidateError", (Exception,), {})
            try:
                err = kind(text) if text else kind()
            except _Exc:
                err = Exception(text)
            raise err
        return reply

    class Handle:
        # An object of the candidate's (an instance of one of its classes), held in its process.
        __slots__ = ("_cg_id",)

        def __init__(self, ident):
            object.__setattr__(self, "_cg_id", ident)

        def __getattr__(self, attr):
            def method(*args, **kwargs):
                return call({"op": "call", "handle": self._cg_id, "attr": attr}, args, kwargs)

            if attr.startswith("__"):
                raise AttributeError(attr)
            reply = ask({"op": "get", "handle": self._cg_id, "attr": attr, "args": {"l": []},
                         "kwargs": {"d": []}, "keep": True})
            value = dec(reply["ok"], Handle)
            return method if _isinstance(value, Handle) else value

    def arg_handle(v):
        if _type(v) is Handle:
            return {"h": object.__getattribute__(v, "_cg_id")}
        raise TypeError("only plain data is passed to the candidate")

    def call(msg, args, kwargs):
        msg["args"] = enc(_list(args), arg_handle)
        msg["kwargs"] = enc(_dict(kwargs), arg_handle)
        return dec(ask(msg)["ok"], Handle)

    def remote_function(name):
        def candidate(*args, **kwargs):
            return call({"op": "call", "name": name}, args, kwargs)

        candidate.__name__ = name
        return candidate

    def remote_class(name):
        def construct(*args, **kwargs):
            return call({"op": "call", "name": name, "keep": True}, args, kwargs)

        construct.__name__ = name
        return construct

    results = []
    record = {"v": 1, "tests": results}
    style = cfg["style"]
    # The tests compiled: from the host's copy of an earlier run's (`compiled`, the same suite's
    # own output on this bytecode), else here, and then offered back in the record.
    import marshal
    # An interpreter without CPython's bytecode magic number neither takes nor offers a copy.
    magic = getattr(sys.modules.get("_frozen_importlib_external"), "MAGIC_NUMBER", None)
    tests = None
    if cfg.get("compiled") and magic:
        try:
            raw = bytes.fromhex(cfg["compiled"])
            if raw[:_len(magic)] == magic:
                tests = _cg_checked_tests(style, marshal.loads(raw[_len(magic):]))
        except _Exc:
            tests = None
    if tests is None:
        tests = _cg_compile_tests(cfg, describe)
        try:
            blob = (magic + marshal.dumps(tests)).hex() if magic else ""
        except _Exc:
            blob = ""
        if 0 < _len(blob) <= 1 << 18:  # a suite too large to be worth a copy stays cold
            record["compiled"] = blob
    if style == "check":
        names, test_code, prelude_code = tests
        # The tests reach the candidate only through its entry point and the names the task
        # declares as the candidate's.
        own = {cfg["entry_point"]} | set(cfg.get("candidate_names") or ())
    else:
        names, test_codes, setup_code, own = tests
        own = set(own)

    for n in names:
        results.append({"name": n[:200], "passed": False, "error": "not run"})

    def passed(idx):
        if idx >= 0:
            results[idx]["passed"] = True
            results[idx]["error"] = None

    def failed(idx, e):
        if idx >= 0:
            results[idx]["passed"] = False
            results[idx]["error"] = describe(e)
        else:
            results.append({"name": "check line %d" % (-1 - idx), "passed": False, "error": describe(e)})

    def finish():
        candidate.finish(record)

    try:
        loaded = ask({"op": "load"}, raw=True)
    except _Exc as e:
        record["load_error"] = describe(e)
        finish()
    if "compile_error" in loaded:
        record["compile_error"] = loaded["compile_error"]
        finish()
    if "error" in loaded or "timeout" in loaded:
        text = loaded.get("text")
        record["load_error"] = (loaded.get("error", "") + (": " + text if text else "")) or "test timed out"
        finish()
    # Modules the tests name are imported from the standard library, never from the work dir the
    # candidate can write to.
    sys.path[:] = [p for p in sys.path if p and os.path.abspath(p) != os.getcwd()]

    tns = {"__name__": "tests", "__builtins__": builtins}
    if style == "check":
        try:
            _exec(prelude_code, tns)
        except _Exc as e:
            record["test_error"] = "the task's prompt code: " + describe(e)
            finish()
    for k, kind in loaded["names"].items():
        if k not in own:
            continue
        if kind == "function":
            tns[k] = remote_function(k)
        elif kind == "class":
            tns[k] = remote_class(k)
        elif "module" in kind:
            top = kind["module"].partition(".")[0]
            if top in sys.stdlib_module_names:
                try:
                    __import__(kind["module"])
                    tns[k] = sys.modules[kind["module"]]
                except _Exc:
                    pass
        else:
            tns[k] = dec(kind["value"])
    tns.update({"__cg_pass": passed, "__cg_fail": failed})

    if style == "check":
        entry = cfg["entry_point"]
        if loaded["names"].get(entry) != "function":
            record["load_error"] = "the program does not define a function %r" % entry
            finish()
        try:
            _exec(test_code, tns)
            check = tns["check"]
            if not names:
                # No statement holds an assert: the whole check is one test.
                results.append({"name": "check", "passed": False, "error": "not run"})
                try:
                    check(tns[entry])
                    if _len(results) == 1:
                        passed(0)
                    else:  # a statement failed (recorded after this entry): it fails the check
                        results[0]["error"] = results[1]["error"]
                        del results[1:]
                except _Exc as e:
                    failed(0, e)
            else:
                check(tns[entry])
        except _Exc as e:
            record["test_error"] = describe(e)
    else:
        try:
            _exec(setup_code, tns)
        except _Exc as e:
            record["test_error"] = "setup: " + describe(e)
        for i, code in _enumerate(test_codes):
            if _type(code) is _str:  # the assert's syntax error, described
                results[i]["error"] = code
                continue
            try:
                _exec(code, tns)
                passed(i)
            except _Exc as e:
                failed(i, e)
    finish()


_cg_main()
