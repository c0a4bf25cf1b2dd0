"""The debugger in a notebook: `%load_ext monarch_pdb` adds the line magic `%monarch_debug
COMMAND` and the cell magic `%%monarch_debug` (a command a line, as in a `--script` file).

Each line is read and run by the command layer, as the shell runs it, so a cell shows what the
shell prints; `list` and `mesh` come as HTML tables too, for front ends that draw HTML. Only
commands that need no typing loop run here: `attach` needs a terminal. Imported by IPython
only, through `monarch_pdb.load_ipython_extension`.
"""

from __future__ import annotations

import html
import shutil
import sys

from IPython.display import display

from monarch_pdb import settings as settings_module
from monarch_pdb.client import commands
from monarch_pdb.client.commands import mesh
from monarch_pdb.client.connection import WAIT_BROKER, BrokerConnection, NoBroker
from monarch_pdb.client.escapes import visible

COMMANDS = ("list", "cast", "continue", "stacks", "peek", "mesh", "jobs", "wait", "interrupt")
TERMINAL_ONLY = ("attach", "follow")
WHERE = "%monarch_debug"
LETTERS = {letter: word for letter, word, _ in mesh.STATES.values()}


def register(ipython) -> None:
    ipython.register_magic_function(monarch_debug, magic_kind="line_cell", magic_name="monarch_debug")


def monarch_debug(line: str, cell: str | None = None) -> None:
    """%monarch_debug COMMAND, or %%monarch_debug and a command a line: the debugger shell's
    list, cast, continue, stacks, peek, mesh, jobs, wait and interrupt (attach: `monarch debug`
    in a terminal). The lines run in order; the first that fails ends the cell."""
    texts = [line] if cell is None else cell.split("\n")
    lines = [(n, text.strip()) for n, text in enumerate(texts, 1) if text.strip() and not text.lstrip().startswith("#")]
    if not lines:
        print(f"usage: %monarch_debug COMMAND, where COMMAND is one of {', '.join(COMMANDS)}", file=sys.stderr)
        return
    for number, text in lines:
        word = text.split()[0]
        command = commands.ALIASES.get(word, word)
        if command not in COMMANDS:
            print(f"{WHERE}: line {number}: {refusal(command)}", file=sys.stderr)
            return
    settings = settings_module.load()
    conn = BrokerConnection(settings)
    try:
        conn.wait_for_broker(WAIT_BROKER)
    except NoBroker as error:
        conn.close()
        print(f"monarch-pdb: {error}", file=sys.stderr)
        return
    try:
        for number, text in lines:
            if not run(conn, settings, number, text):
                return
    finally:
        conn.close()


def run(conn: BrokerConnection, settings: settings_module.Settings, number: int, text: str) -> bool:
    """Run one line as the shell runs a script's; `list` and `mesh` shown as text and HTML at
    once. False when it failed, which ends the cell."""
    where = f"monarch-pdb: {WHERE}:{number}: {text}"
    try:
        args = commands.parse(text)
        answer = commands.run(
            conn,
            commands.with_settings(args, list_rows=settings.list_rows, columns=shutil.get_terminal_size().columns),
        )
    except commands.FAILURES as error:
        print(f"{where}: {visible(str(error))}", file=sys.stderr)
        return False
    shown = visible(answer.shown)
    shown = shown if shown.endswith("\n") or not shown else shown + "\n"
    command = commands.ALIASES.get(text.split()[0], text.split()[0])
    if command in ("list", "mesh") and shown:
        display({"text/plain": shown.rstrip("\n"), "text/html": as_html(command, shown)}, raw=True)
    else:
        sys.stdout.write(shown)
    if answer.failure:
        print(f"{where}: {visible(answer.failure)}", file=sys.stderr)
        return False
    return True


def refusal(command: str) -> str:
    if command in TERMINAL_ONLY:
        return (
            f"{command} needs a terminal, where each line you type goes to the rank: run `monarch debug` "
            f"in one; here: {', '.join(COMMANDS)}"
        )
    return f"{command!r} is not a command of %monarch_debug, which runs {', '.join(COMMANDS)}"


def as_html(command: str, text: str) -> str:
    """The shell's `list` grid or `mesh` picture as HTML tables, with the lines around them."""
    parts: list[str] = []
    rows: list[str] = []

    def close() -> None:
        if rows:
            parts.append("<table>" + "".join(rows) + "</table>")
            rows.clear()

    for line in text.splitlines():
        if command == "list" and line.startswith("+"):
            continue
        if command == "list" and line.startswith("| "):
            cells = [cell.strip() for cell in line[2:-2].split(" | ")]
            tag = "th" if not rows else "td"
            rows.append("<tr>" + "".join(f"<{tag}>{html.escape(c)}</{tag}>" for c in cells) + "</tr>")
        elif command == "mesh" and line[:1].isspace():
            close()
            rows.append("<tr><th></th>" + "".join(f"<th>{html.escape(c)}</th>" for c in line.split()) + "</tr>")
        elif command == "mesh" and rows and line[:1].isdigit():
            label, *letters = line.split()
            rows.append(
                f"<tr><th>{html.escape(label)}</th>"
                + "".join(f'<td title="{LETTERS.get(c, "")}">{html.escape(c)}</td>' for c in letters)
                + "</tr>"
            )
        elif line.strip():
            close()
            parts.append(f"<p>{html.escape(line)}</p>")
    close()
    return "\n".join(parts)
