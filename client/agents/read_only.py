"""Whether an expression an agent sends only reads: what `monarch-pdb mcp` evaluates in the ranks
for an agent that may not change them (no `--allow-control`), checked before it is sent.

An expression that reads is made of names, attributes, subscripts and slices, literals,
containers of those, and operators (arithmetic, comparisons, `and`/`or`/`not`, `x if c else y`).
Nothing else: no call, so nothing the agent writes runs a function; no assignment (`:=`), import,
`lambda`, comprehension or `await`; no f-string (it formats by calling); no `*`/`**` unpacking;
and no name or attribute that begins and ends with two underscores (`__class__`, `__globals__`,
`__builtins__`, `__dict__`), the interpreter's own machinery, from which escapes start. What the
program's own objects do when read still runs: a property, a `__getitem__`, an operator's method.
"""

from __future__ import annotations

import ast

READS = (
    ast.Expression,
    ast.Name,
    ast.Attribute,
    ast.Subscript,
    ast.Slice,
    ast.Constant,
    ast.Tuple,
    ast.List,
    ast.Set,
    ast.Dict,
    ast.BinOp,
    ast.UnaryOp,
    ast.BoolOp,
    ast.Compare,
    ast.IfExp,
    ast.expr_context,
    ast.operator,
    ast.unaryop,
    ast.boolop,
    ast.cmpop,
)
"""The nodes of an expression that only reads."""
WHAT = {
    ast.Call: "calls a function",
    ast.NamedExpr: "assigns (:=)",
    ast.Lambda: "makes a function (lambda)",
    ast.ListComp: "runs a comprehension",
    ast.SetComp: "runs a comprehension",
    ast.DictComp: "runs a comprehension",
    ast.GeneratorExp: "runs a comprehension",
    ast.Await: "awaits",
    ast.Yield: "yields",
    ast.YieldFrom: "yields",
    ast.JoinedStr: "formats an f-string (a call)",
    ast.Starred: "unpacks with *",
}
"""Why a node that runs code is refused, in the words of the refusal."""


def refusal(expression: str) -> str:
    """Why `expression` does more than read, in a few words; empty when it only reads, or when it
    is not an expression at all (the shell says why, in its own words)."""
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        return ""
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict) and None in node.keys:
            return "unpacks with **"
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
        if len(name) > 4 and name.startswith("__") and name.endswith("__"):
            return f"reads {name}, the interpreter's own machinery"
        if not isinstance(node, READS):
            return WHAT.get(type(node), f"has {type(node).__name__}, which is more than reading")
    return ""
