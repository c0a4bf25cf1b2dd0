"""The commands page's table and the shell's `help` agree: the same commands, each with the
usage line that `help COMMAND` shows (the first line of its docstring, as pdb's commands have)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from programs import debug

ROOT = Path(__file__).resolve().parent.parent
CATEGORY = "Debugger"


def table_usages(page: Path) -> dict[str, str]:
    """Each command of the page's command table, by name, with the usage in its first cell."""
    cells = re.findall(r"^\| `(.+?)` \|", page.read_text(), flags=re.M)
    usages = [cell.replace("\\|", "|") for cell in cells]
    return {usage.split()[0]: usage for usage in usages}


def listed(help_text: str, category: str) -> set[str]:
    """The commands `help` lists under a heading."""
    block = help_text.split(f"{category}\n", 1)[1].split("\n\n", 1)[0]
    return set(block.split()) - {"─" * len(category)}


@pytest.mark.timeout(60)
def test_the_command_table_and_help_name_the_same_commands_with_the_same_usage(env, broker):
    documented = table_usages(ROOT / "docs" / "commands.md")
    assert documented, "the commands page has a table of commands"
    listing = debug(env, "help")
    assert listing.returncode == 0, listing.stderr
    commands = listed(listing.stdout, CATEGORY)
    assert commands == set(documented)

    names = sorted(commands)
    shown = debug(env, *(f"help {name}" for name in names))
    assert shown.returncode == 0, shown.stderr
    usages = re.findall(r"^Usage: (.+)$", shown.stdout, flags=re.M)
    assert dict(zip(names, usages)) == {name: documented[name] for name in names}
    assert len(usages) == len(names)
