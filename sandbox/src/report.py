# codegym's run reporter (issue 12; see report.rs): prepended to the fork server (warm/server.py),
# the fresh backend's script bootstrap and the session driver, so one definition serves every run.
# It defines one name, `_codegym_report` (methods reach each other through `cls`, so a bootstrap
# may remove the name from the program's globals). Given a spec (injected vars, caps, whether to list
# variables) it runs a program like `exec(compile(source, filename, "exec"), g)`, except that the
# value of a last top-level expression statement is kept (as a REPL shows it), the uncaught
# exception is recorded (then re-raised unchanged), and the report goes to the host as one frame
# (u32 LE length + JSON) over a private descriptor, never stdout/stderr.
class _codegym_report:
    @classmethod
    def read_frame(cls, fd):
        def readn(n):
            b = bytearray()
            while len(b) < n:
                c = __import__("os").read(fd, n - len(b))
                if not c:
                    raise EOFError("report channel closed")
                b += c
            return bytes(b)

        return __import__("json").loads(readn(int.from_bytes(readn(4), "little")))

    @classmethod
    def frame(cls, obj):
        if not obj:  # the common report (no value, no error): no JSON encoder touched per run
            return b"\x02\x00\x00\x00{}"
        data = __import__("json").dumps(obj).encode()
        return len(data).to_bytes(4, "little") + data

    # Serialises whole frames on the descriptor (tool calls from threads, then the report).
    send_lock = None
    # The tool-call function of this process, made once (a session installs tools every cell).
    tool_call = None

    @classmethod
    def send(cls, fd, data):
        lock = cls.send_lock
        if lock is not None:
            lock.acquire()
        try:
            data = memoryview(data)
            while data:
                data = data[__import__("os").write(fd, data):]
        finally:
            if lock is not None:
                lock.release()

    @classmethod
    def install_tools(cls, fd, g, spec):
        """Issue 12: each host tool of the spec becomes a global function; a call is a frame to the
        host (id, name, args, kwargs) and waits for the reply with its id. Threads share the
        descriptor: whoever waits reads the next reply and hands it to its caller."""
        names = spec.get("tools") or []
        if not names:
            return
        if cls.tool_call is None:
            cls.tool_call = cls.make_tool_call(fd)
        call = cls.tool_call

        def bind(name):
            def tool(*args, **kwargs):
                return call(name, args, kwargs)

            tool.__name__ = tool.__qualname__ = name
            return tool

        for name in names:
            g[name] = bind(name)

    @classmethod
    def make_tool_call(cls, fd):
        threading, json = __import__("threading"), __import__("json")
        cls.send_lock = threading.Lock()
        cond = threading.Condition()
        state = {"next": 0, "reading": False, "closed": False}
        replies = {}

        def call(name, args, kwargs):
            with cond:
                state["next"] += 1
                cid = state["next"]
            payload = {"op": "call", "id": cid, "tool": name, "args": list(args), "kwargs": dict(kwargs)}
            try:
                data = json.dumps(payload, allow_nan=False).encode()
            except (TypeError, ValueError) as e:
                raise TypeError(f"tool {name}: arguments must be JSON-serializable: {e}") from None
            cls.send(fd, len(data).to_bytes(4, "little") + data)
            with cond:
                while cid not in replies:
                    if state["closed"]:
                        raise ConnectionError(f"tool {name}: the host closed the tool channel")
                    if state["reading"]:
                        cond.wait()
                        continue
                    state["reading"] = True
                    cond.release()
                    try:
                        msg = cls.read_frame(fd)
                    except BaseException:
                        msg = None
                    finally:
                        cond.acquire()
                        state["reading"] = False
                    if isinstance(msg, dict) and isinstance(msg.get("id"), int):
                        replies[msg["id"]] = msg
                    elif msg is None:
                        state["closed"] = True
                    cond.notify_all()
                reply = replies.pop(cid)
            if "error" in reply:
                raise RuntimeError(f"tool {name}: {reply['error']}")
            return reply.get("result")

        return call

    @classmethod
    def capped(cls, text, cap):
        return text if len(text) <= cap else text[:cap] + "..."

    @classmethod
    def safe_repr(cls, value, cap):
        try:
            return cls.capped(repr(value), cap)
        except BaseException as e:
            return f"<repr failed: {type(e).__name__}>"

    @classmethod
    def encode(cls, value, spec):
        """The report's form of a return value: JSON, or its type and capped repr."""
        cap = spec["max_repr"]
        try:
            size = len(__import__("json").dumps(value, allow_nan=False))
        except BaseException as e:
            reason = cls.capped(f"not JSON-serializable: {type(e).__name__}: {e}", cap)
        else:
            if size <= spec["max_return_bytes"]:
                return {"kind": "json", "value": value}
            reason = f"its JSON is {size} bytes, over the cap of {spec['max_return_bytes']}"
        return {
            "kind": "unrepresentable",
            "type_name": type(value).__name__,
            "repr": cls.safe_repr(value, cap),
            "reason": reason,
        }

    @classmethod
    def error(cls, e, spec):
        try:
            message = str(e)
        except BaseException:
            message = "<str failed>"
        return {"type_name": type(e).__name__, "message": cls.capped(message, spec["max_repr"])}

    @classmethod
    def execute(cls, source, filename, g, spec, report):
        """Injects the vars into `g`, runs `source` there and fills `report`. Raises what the
        program raises (SystemExit included), after recording it."""
        ast = __import__("ast")
        g.update(spec.get("vars") or {})
        try:
            tree = compile(source, filename, "exec", ast.PyCF_ONLY_AST)  # `ast.parse`, minus a frame
            last = None
            if tree.body and isinstance(tree.body[-1], ast.Expr):
                last = ast.Expression(tree.body.pop().value)
            exec(compile(tree, filename, "exec", dont_inherit=True), g)
            if last is not None:
                value = eval(compile(last, filename, "eval", dont_inherit=True), g)
                if value is not None:  # as a REPL shows it: `print(...)` has no value to show
                    report["return_value"] = cls.encode(value, spec)
        except SystemExit:
            raise
        except BaseException as e:
            report["error"] = cls.error(e, spec)
            raise

    @classmethod
    def variables(cls, g, spec):
        """JSON-serializable top-level names (not `_private`, not modules), capped; the rest
        dropped with a reason."""
        json, types = __import__("json"), __import__("types")
        values, dropped, total = {}, [], 0
        most, max_bytes = spec["max_variables"], spec["max_variables_bytes"]
        for name, value in list(g.items()):
            if (
                not isinstance(name, str)
                or name.startswith("_")
                or isinstance(value, types.ModuleType)
                or name in (spec.get("tools") or ())
            ):
                continue
            if len(values) >= most:
                reason = f"over the cap of {most} variables"
            else:
                try:
                    size = len(json.dumps(value, allow_nan=False))
                except BaseException:
                    reason = f"{type(value).__name__} is not JSON-serializable"
                else:
                    if total + size <= max_bytes:
                        total += size
                        values[name] = value
                        continue
                    reason = f"over the cap of {max_bytes} bytes of variables"
            if len(dropped) < most:
                dropped.append({"name": name, "reason": reason})
        return {"values": values, "dropped": dropped}

    @classmethod
    def finish(cls, g, spec, report):
        """The report frame: `report` plus the variables when asked for."""
        if spec.get("variables"):
            try:
                report["variables"] = cls.variables(g, spec)
            except BaseException:
                pass
        try:
            return cls.frame(report)
        except BaseException:  # a value changed under us (a thread): report what is safe
            report.pop("variables", None)
            report.pop("return_value", None)
            return cls.frame(report)

    @classmethod
    def trim(cls, tb):
        """A traceback without the runner's own leading frames (all `<string>`: `python -c`)."""
        while tb is not None and tb.tb_frame.f_code.co_filename == "<string>":
            tb = tb.tb_next
        return tb

    @classmethod
    def run_script(cls, fd, g, filename):
        """The fresh backend's script run: reads the spec on `fd`, runs `filename` in `g`, and sends
        the report before an exception propagates (to `sys.excepthook`, as under `python`)."""
        os, sys = __import__("os"), __import__("sys")

        def hook(t, v, tb, h=sys.__excepthook__, cls=cls):
            tb = cls.trim(tb)
            h(t, v.with_traceback(tb) if isinstance(v, BaseException) else v, tb)

        sys.excepthook = hook
        spec = cls.read_frame(fd)
        os.set_inheritable(fd, False)
        cls.install_tools(fd, g, spec)
        report = {}
        try:
            with open(filename, "rb") as f:
                source = f.read()
            cls.execute(source, filename, g, spec, report)
        finally:
            try:
                cls.send(fd, cls.finish(g, spec, report))
            except OSError:
                pass
