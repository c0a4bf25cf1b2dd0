"""What an editor's breakpoint does when its line is reached: whether its condition holds, and
a log point's message, its `{expression}`s replaced by their values in that frame, as VS Code
writes them (`{{` and `}}` are braces).

Both are compiled once, when the breakpoint is set: a condition on a hot line is evaluated at
every hit, and compiling its text each time cost several times what evaluating it does.
"""

from __future__ import annotations

import types
from dataclasses import dataclass

from monarch_pdb import wire


@dataclass(frozen=True)
class Compiled:
    """A spot's condition and log message, compiled."""

    condition: types.CodeType | None
    """None: no condition, it always holds."""
    pieces: tuple[str | types.CodeType, ...]
    """The message's text and its expressions, alternately; empty for a breakpoint."""

    def holds(self, frame) -> bool:
        """Whether the condition holds in `frame`; one that raises holds, as pdb's do, so a
        mistake stops the rank rather than hiding the line."""
        if self.condition is None:
            return True
        try:
            return bool(eval(self.condition, frame.f_globals, frame.f_locals))
        except Exception:
            return True

    def message(self, frame) -> str:
        """The message as the frame's values make it; an expression that raises shows what it
        raised, and the rest of the message is still printed."""
        shown = []
        for piece in self.pieces:
            if isinstance(piece, str):
                shown.append(piece)
                continue
            try:
                shown.append(str(eval(piece, frame.f_globals, frame.f_locals)))
            except Exception as error:  # the user's expression
                shown.append(f"<{type(error).__name__}: {error}>")
        return "".join(shown)


class Unusable(Exception):
    """Why a spot can never work: its condition or a `{...}` of its message is no Python
    expression."""


def compiled(spot: wire.Spot) -> Compiled:
    """The spot's condition and message, compiled, or `Unusable`."""
    try:
        condition = compile(spot.condition, "<condition>", "eval") if spot.condition else None
    except SyntaxError as error:
        raise Unusable(f"the condition is not a Python expression: {error.msg}") from None
    if not spot.log:
        return Compiled(condition, ())
    try:
        texts = parts(spot.log)
    except ValueError as error:
        raise Unusable(f"the log message {error}") from None
    pieces: list[str | types.CodeType] = []
    for at, text in enumerate(texts):
        if at % 2 == 0:
            pieces += [text] if text else []
            continue
        try:
            pieces.append(compile(text, "<log message>", "eval"))
        except SyntaxError as error:
            raise Unusable(f"the log message's {{{text}}} is not a Python expression: {error.msg}") from None
    return Compiled(condition, tuple(pieces))


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
