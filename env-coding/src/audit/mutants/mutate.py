# codegym mutant generator (runs as main.py in the sandbox; it parses and compiles a task's
# reference solution and never runs it). stdin: {"source", "n", "seed", "first_line", "in_place"},
# optionally "last_line" (mutate only lines first_line..=last_line).
# With "in_place", a mutant's source is the original text with only the changed node's span
# rewritten (comments and layout kept), else the unparsed tree. stdout: one
# JSON line, {"mutants": [{"operator", "line", "what", "source", "diff"}], "sites": N} or
# {"error": why}. Deterministic: the same source, n and seed give the same mutants (see
# audit/mutants/python.rs).
import ast, copy, difflib, json, random, sys

ARITH = {
    ast.Add: [ast.Sub, ast.Mult], ast.Sub: [ast.Add], ast.Mult: [ast.Div, ast.Add, ast.Pow],
    ast.Div: [ast.Mult, ast.FloorDiv], ast.FloorDiv: [ast.Div, ast.Mod], ast.Mod: [ast.FloorDiv],
    ast.Pow: [ast.Mult], ast.LShift: [ast.RShift], ast.RShift: [ast.LShift],
    ast.BitAnd: [ast.BitOr], ast.BitOr: [ast.BitAnd], ast.BitXor: [ast.BitAnd],
}
COMPARE = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
}
SYMBOL = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
    ast.Pow: "**", ast.LShift: "<<", ast.RShift: ">>", ast.BitAnd: "&", ast.BitOr: "|",
    ast.BitXor: "^", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==",
    ast.NotEq: "!=", ast.In: "in", ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not",
    ast.And: "and", ast.Or: "or",
}
# Statements a mutant may replace by `pass` (definitions, imports and returns have operators of
# their own or only break loading).
DROPPABLE = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.If, ast.For, ast.While,
             ast.Break, ast.Continue, ast.Raise, ast.Assert, ast.Delete, ast.With, ast.Try)


def docstrings(tree):
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                found.add(id(body[0]))
                found.add(id(body[0].value))
    return found


def sites(tree, first_line, last_line=None):
    """Every (operator, node index, change, description, line) of the mutable region, in walk
    order. A change edits the node at that index of a copied tree, in place."""
    nodes = list(ast.walk(tree))
    index = {id(n): i for i, n in enumerate(nodes)}
    skip = docstrings(tree)
    for n in nodes:
        if isinstance(n, ast.JoinedStr):
            skip.update(id(v) for v in ast.walk(n))
    out = []

    def mutable(n):
        line = getattr(n, "lineno", 0)
        return (
            line >= first_line
            and (last_line is None or line <= last_line)
            and id(n) not in skip
        )

    def add(op, n, change, what):
        out.append((op, index[id(n)], change, what, n.lineno))

    def set_attr(attr, value):
        return lambda n: setattr(n, attr, value)

    for n in nodes:
        # A statement's or a `not`'s change replaces it in its parent's field, which may lie
        # outside the region (the function a completion prefix declares).
        for field, value in ast.iter_fields(n):
            children = enumerate(value) if isinstance(value, list) else [(None, value)]
            for k, child in children:
                if not isinstance(child, ast.AST) or not mutable(child):
                    continue
                if isinstance(child, ast.UnaryOp) and isinstance(child.op, ast.Not):
                    out.append(("boolean", index[id(n)], replace(field, k, lambda c: c.operand),
                                "not removed", child.lineno))
                if k is not None and isinstance(child, DROPPABLE):
                    out.append(("statement", index[id(n)], replace(field, k, lambda c: ast.Pass()),
                                "statement removed", child.lineno))
        if not mutable(n):
            continue
        if isinstance(n, (ast.BinOp, ast.AugAssign)):
            op = "arithmetic" if isinstance(n, ast.BinOp) else "augmented_assignment"
            for new in ARITH.get(type(n.op), []):
                add(op, n, set_attr("op", new()), "%s -> %s" % (SYMBOL[type(n.op)], SYMBOL[new]))
        elif isinstance(n, ast.Compare):
            for k, cmp in enumerate(n.ops):
                new = COMPARE.get(type(cmp))
                if new:
                    def change(m, k=k, new=new):
                        m.ops[k] = new()
                    add("comparison", n, change, "%s -> %s" % (SYMBOL[type(cmp)], SYMBOL[new]))
        elif isinstance(n, ast.BoolOp):
            new = ast.Or if isinstance(n.op, ast.And) else ast.And
            add("boolean", n, set_attr("op", new()), "%s -> %s" % (SYMBOL[type(n.op)], SYMBOL[new]))
        elif isinstance(n, ast.Constant):
            v = n.value
            if type(v) is bool:
                add("constant", n, set_attr("value", not v), "%r -> %r" % (v, not v))
            elif type(v) is int:
                add("constant", n, set_attr("value", v + 1), "%r -> %r" % (v, v + 1))
                add("constant", n, set_attr("value", v - 1), "%r -> %r" % (v, v - 1))
            elif type(v) is str and v:
                add("constant", n, set_attr("value", ""), "%r -> ''" % (v[:20],))
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "range" \
                and 1 <= len(n.args) <= 3 and not n.keywords \
                and not any(isinstance(a, ast.Starred) for a in n.args):
            if len(n.args) == 1:
                def lower(m):
                    m.args = [ast.Constant(1), m.args[0]]
            else:
                def lower(m):
                    m.args[0] = ast.BinOp(m.args[0], ast.Add(), ast.Constant(1))
            upper_at = 0 if len(n.args) == 1 else 1

            def upper(m, k=upper_at):
                m.args[k] = ast.BinOp(m.args[k], ast.Sub(), ast.Constant(1))
            add("boundary", n, upper, "range end - 1")
            add("boundary", n, lower, "range start + 1")
        elif isinstance(n, ast.Slice):
            for attr in ("lower", "upper"):
                if getattr(n, attr) is not None:
                    for sym, cls in (("+", ast.Add), ("-", ast.Sub)):
                        def change(m, attr=attr, cls=cls):
                            setattr(m, attr, ast.BinOp(getattr(m, attr), cls(), ast.Constant(1)))
                        add("boundary", n, change, "slice %s %s 1" % (attr, sym))
        elif isinstance(n, ast.Return) and n.value is not None and not (
                isinstance(n.value, ast.Constant) and n.value.value is None):
            for value, what in returned(n.value):
                add("return", n, set_attr("value", value), "return " + what)
    return out


def replace(field, k, new_of):
    def change(m):
        if k is None:
            setattr(m, field, new_of(getattr(m, field)))
        else:
            getattr(m, field)[k] = new_of(getattr(m, field)[k])
    return change


def returned(value):
    """The replacement values of `return value`: None, and a constant of the same type."""
    out = [(ast.Constant(None), "None")]
    if isinstance(value, ast.Constant):
        v = value.value
        if type(v) is bool:
            out.append((ast.Constant(not v), repr(not v)))
        elif type(v) is int:
            out.append((ast.Constant(0 if v else 1), repr(0 if v else 1)))
        elif type(v) is float:
            out.append((ast.Constant(0.0 if v else 1.0), repr(0.0 if v else 1.0)))
        elif type(v) is str:
            out.append((ast.Constant("" if v else "a"), repr("" if v else "a")))
    elif isinstance(value, (ast.Compare, ast.BoolOp)) or (
            isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.Not)):
        out += [(ast.Constant(True), "True"), (ast.Constant(False), "False")]
    elif isinstance(value, (ast.List, ast.ListComp)):
        out.append((ast.List([], ast.Load()), "[]"))
    elif isinstance(value, (ast.Dict, ast.DictComp)):
        out.append((ast.Dict([], []), "{}"))
    elif isinstance(value, ast.JoinedStr):
        out.append((ast.Constant(""), "''"))
    return out


def smallest_change(o, m):
    """The smallest pair of (original, mutated) nodes that holds every difference between o and m,
    among original nodes with a position in the source."""
    while type(o) is type(m):
        diffs = []
        for field, ov in ast.iter_fields(o):
            mv = getattr(m, field, None)
            if isinstance(ov, list) and isinstance(mv, list) and len(ov) == len(mv):
                diffs += [(a, b) for a, b in zip(ov, mv) if dumped(a) != dumped(b)]
            elif dumped(ov) != dumped(mv):
                diffs.append((ov, mv))
        if len(diffs) != 1 or not all(isinstance(x, ast.AST) for x in diffs[0]) \
                or not hasattr(diffs[0][0], "end_col_offset"):
            break
        o, m = diffs[0]
    return o, m


def dumped(x):
    return ast.dump(x) if isinstance(x, ast.AST) else repr(x)


def in_place(source, tree, mutated_at, copied):
    """`source` with the span of the change at node `mutated_at` of `tree` rewritten to match the
    mutated `copied` tree, or None when the text cannot be made to parse to that tree."""
    o, m = smallest_change(list(ast.walk(tree))[mutated_at], list(ast.walk(copied))[mutated_at])
    if not hasattr(o, "end_col_offset"):
        return None
    raw = source.encode("utf-8")
    starts = [0]
    for line in raw.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    begin = starts[o.lineno - 1] + o.col_offset
    end = starts[o.end_lineno - 1] + o.end_col_offset
    text = ast.unparse(m)
    # Bare first (the least change), then parenthesized: a replaced operand may bind differently.
    for candidate in (text, "(%s)" % text) if isinstance(m, ast.expr) else (text,):
        out = (raw[:begin] + candidate.encode("utf-8") + raw[end:]).decode("utf-8")
        try:
            if ast.dump(ast.parse(out)) == ast.dump(copied):
                return out
        except (SyntaxError, ValueError, RecursionError):
            pass
    return None


def main():
    cfg = json.loads(sys.stdin.buffer.read())
    try:
        tree = ast.parse(cfg["source"])
        base = ast.unparse(tree)
    except (SyntaxError, ValueError, RecursionError) as e:
        print(json.dumps({"error": "the reference does not parse: %s" % e}))
        return
    last = cfg.get("last_line")
    found = sites(tree, int(cfg.get("first_line") or 1), None if last is None else int(last))
    # Round robin over the operators (each shuffled), so that a few mutants still cover several.
    rng = random.Random(cfg["seed"])
    groups = {}
    for s in found:
        groups.setdefault(s[0], []).append(s)
    order = sorted(groups)
    rng.shuffle(order)
    for g in order:
        rng.shuffle(groups[g])
    queue = []
    while any(groups[g] for g in order):
        for g in order:
            if groups[g]:
                queue.append(groups[g].pop())
    mutants = []
    original = cfg["source"]
    spliced = bool(cfg.get("in_place"))
    base_lines = (original if spliced else base).splitlines()
    seen = {original if spliced else base}
    for op, at, change, what, line in queue:
        if len(mutants) >= cfg["n"]:
            break
        copied = copy.deepcopy(tree)
        change(list(ast.walk(copied))[at])
        ast.fix_missing_locations(copied)
        try:
            text = in_place(original, tree, at, copied) if spliced else ast.unparse(copied)
            if text is None:
                continue
            compile(text, "solution.py", "exec")
        except (SyntaxError, ValueError, RecursionError):
            continue
        if text in seen:
            continue
        seen.add(text)
        diff = [d for d in difflib.unified_diff(base_lines, text.splitlines(), n=0, lineterm="")
                if d[:1] in "-+" and d[:3] not in ("---", "+++")]
        mutants.append({"operator": op, "line": line, "what": what,
                        "source": text if spliced else text + "\n",
                        "diff": diff[:8]})
    print(json.dumps({"mutants": mutants, "sites": len(found)}))


main()
