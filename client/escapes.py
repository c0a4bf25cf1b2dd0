"""What a rank prints, made safe to show: its control characters escaped as `cat -v` shows them.

A rank's output reaches the user's terminal, so an escape sequence in it (`print("\x1b[2J")`)
would clear the screen, move the cursor or retitle the window. Newlines and tabs are kept. A
shell that shows colours keeps colour sequences (SGR, `ESC[1;34m`), which set colours and do
nothing else: pdb colours the source it shows with them (Python 3.14+).
"""

from __future__ import annotations

import re

CONTROL = "[\x00-\x08\x0b-\x1f\x7f-\x9f]"
COLOUR = "\x1b\\[[0-9;]*m"
CONTROLS = re.compile(CONTROL)
COLOURS = re.compile(COLOUR)
COLOURS_OR_CONTROLS = re.compile(f"{COLOUR}|{CONTROL}")
NAMES = {chr(code): f"^{chr(code + 64)}" for code in range(0x20)}
NAMES.update({"\x7f": "^?"})
NAMES.update({chr(0x80 + code): f"M-^{chr(code + 64)}" for code in range(0x20)})


def visible(text: str, colours: bool = False) -> str:
    """`text` with each control character but newline and tab written as `cat -v` does
    (ESC as `^[`, DEL as `^?`, the C1 controls as `M-^@` to `M-^_`); with `colours`, but for
    the ESC of each colour sequence."""
    if not colours:
        return CONTROLS.sub(lambda found: NAMES[found.group()], text)
    return COLOURS_OR_CONTROLS.sub(lambda found: NAMES.get(found.group(), found.group()), text)


def without_colours(text: str) -> str:
    """`text` without its colour sequences: what a transcript keeps of what was shown in colour."""
    return COLOURS.sub("", text)
