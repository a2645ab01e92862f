# codegym session driver: runs cells in one persistent namespace. Requests arrive on fd 3
# (u64 LE source length, source, u64 LE stdin length or 2**64-1 for none, stdin, u64 LE spec
# length, spec JSON or nothing), replies go to fd 4 ("D" + i32 LE exit code + u32 LE report length
# + report JSON) after stdout/stderr are flushed.
# Issue 12: with a spec, the cell runs through `_codegym_report` (report.py, prepended by
# session.rs): injected vars, the last expression's value, the error and the variables.
import io, os, site, sys, traceback
# Under -S, `site` did not install exit/quit/help; cells may call them.
site.setquit(); site.sethelper(); site.setcopyright()
def _codegym_session(reporter):
    rd, wr = 3, 4
    def readn(n):
        b = bytearray()
        while len(b) < n:
            c = os.read(rd, min(n - len(b), 1 << 20))
            if not c:
                os._exit(0)
            b += c
        return bytes(b)
    g = {"__name__": "__main__", "__builtins__": __builtins__}
    while True:
        src = readn(int.from_bytes(readn(8), "little")).decode("utf-8", "replace")
        m = int.from_bytes(readn(8), "little")
        data = b"" if m == (1 << 64) - 1 else readn(m)
        n = int.from_bytes(readn(8), "little")
        spec = __import__("json").loads(readn(n)) if n else None
        if spec is not None and spec.get("tools"):
            reporter.install_tools(5, g, spec)  # issue 12: the session's tool channel is fd 5
        sys.stdin = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
        code = 0
        report = {}
        try:
            if spec is None:
                exec(compile(src, "<cell>", "exec"), g)
            else:
                reporter.execute(src, "<cell>", g, spec, report)
        except SystemExit as e:
            if e.code is None:
                code = 0
            elif isinstance(e.code, int):
                code = e.code
            else:
                print(e.code, file=sys.stderr)
                code = 1
        except BaseException:
            t, v, tb = sys.exc_info()
            tb = reporter.trim(tb)  # the driver's own frames are not the cell's
            traceback.print_exception(t, v, tb)
            code = 1
        for f in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            try:
                f.flush()
            except Exception:
                pass
        framed = reporter.finish(g, spec, report) if spec is not None else b"\0\0\0\0"
        reply = memoryview(b"D" + (code & 0xFFFFFFFF).to_bytes(4, "little") + framed)
        while reply:
            reply = reply[os.write(wr, reply):]
_codegym_session(globals().pop("_codegym_report"))
