"""What an editor's breakpoint does when its line is reached: whether its condition holds, and
a log point's message, its `{expression}`s replaced by their values in that frame, as VS Code
writes them (`{{` and `}}` are braces)."""

from __future__ import annotations

from monarch_pdb import wire


def problem(spot: wire.Spot) -> str | None:
    """Why the spot can never work (its condition or a `{...}` of its message is no Python
    expression), or None."""
    try:
        compile(spot.condition or "True", "<condition>", "eval")
    except SyntaxError as error:
        return f"the condition is not a Python expression: {error.msg}"
    try:
        for expression in parts(spot.log)[1::2]:
            compile(expression, "<log message>", "eval")
    except SyntaxError as error:
        return f"the log message's {{{expression}}} is not a Python expression: {error.msg}"
    except ValueError as error:
        return f"the log message {error}"
    return None


def holds(condition: str, frame) -> bool:
    """Whether `condition` holds in `frame`; one that raises holds, as pdb's do, so a mistake
    stops the rank rather than hiding the line."""
    if not condition:
        return True
    try:
        return bool(eval(condition, frame.f_globals, frame.f_locals))
    except Exception:
        return True


def parts(template: str) -> list[str]:
    """The text and the expressions of a message, alternately: `a {x} b` is `a `, `x`, ` b`."""
    found, text, index = [], [], 0
    while index < len(template):
        char = template[index]
        if char in "{}" and template[index + 1 : index + 2] == char:
            text.append(char)
            index += 2
        elif char == "{":
            depth, end = 1, index + 1
            while end < len(template) and depth:
                depth += {"{": 1, "}": -1}.get(template[end], 0)
                end += 1
            if depth:
                raise ValueError(f"has a {{ at {index + 1} that no }} closes")
            found += ["".join(text), template[index + 1 : end - 1]]
            text, index = [], end
        else:
            text.append(char)
            index += 1
    return found + ["".join(text)]


def message(template: str, frame) -> str:
    """The message as the frame's values make it; an expression that raises shows what it
    raised, and the rest of the message is still printed."""
    pieces = parts(template)
    for at in range(1, len(pieces), 2):
        try:
            pieces[at] = str(eval(pieces[at], frame.f_globals, frame.f_locals))
        except Exception as error:  # the user's expression
            pieces[at] = f"<{type(error).__name__}: {error}>"
    return "".join(pieces)
