# Names in Python syntax trees, shared by the unit-test harness (which of the program's names the
# tests may see) and the audit's derived attacks (which names a program could shadow).
def _cg_names_of(trees):
    """Every name the trees bind (in any scope) and every name they load."""
    import ast

    bound, loads = set(), set()
    for tree in trees:
        for n in ast.walk(tree):
            if isinstance(n, ast.Name):
                (loads if isinstance(n.ctx, ast.Load) else bound).add(n.id)
            elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(n.name)
            elif isinstance(n, ast.alias):
                bound.add((n.asname or n.name).partition(".")[0])
            elif isinstance(n, ast.arg):
                bound.add(n.arg)
            elif isinstance(n, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and n.name:
                bound.add(n.name)
    return bound, loads
