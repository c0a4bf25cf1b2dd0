"""The agent's modules import each other in one direction: no module needs, even lazily, a
module that needs it back (type hints aside), so each can be read, tested and changed alone."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import monarch_pdb

PACKAGE = Path(monarch_pdb.__file__).parent


def module_name(path: Path) -> str:
    parts = ("monarch_pdb", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(tree: ast.AST, modules: set[str]) -> set[str]:
    """The package's modules that `tree` imports anywhere, except under `if TYPE_CHECKING:`."""
    found: set[str] = set()
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            found |= imports(ast.Module(body=node.orelse, type_ignores=[]), modules)
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module for a in node.names
            }
        found |= imports(node, modules)
    return found & modules


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each import circle, as the path from a module back to itself (one per module in one)."""
    found = []
    for start in sorted(graph):
        paths = [[start]]
        seen = {start}
        while paths:
            path = paths.pop()
            for after in sorted(graph[path[-1]]):
                if after == start:
                    found.append([*path, start])
                    paths.clear()
                    break
                if after not in seen:
                    seen.add(after)
                    paths.append([*path, after])
    return found


@pytest.mark.timeout(10)
def test_no_module_of_the_agent_imports_one_that_imports_it_back() -> None:
    files = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    modules = set(files)
    graph = {name: imports(ast.parse(path.read_text()), modules) - {name} for name, path in files.items()}
    assert circles(graph) == []


def all_imports(tree: ast.AST, modules: set[str]) -> set[str]:
    """The package's modules that `tree` imports anywhere, type hints' imports too."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module for a in node.names
            }
    return found & modules


@pytest.mark.timeout(10)
def test_no_module_of_the_broker_imports_one_that_imports_it_back_even_for_types() -> None:
    import monarch_pdb.broker

    folder = Path(monarch_pdb.broker.__file__).parent
    files = {
        "monarch_pdb.broker." + path.stem if path.stem != "__init__" else "monarch_pdb.broker": path
        for path in folder.glob("*.py")
    }
    modules = set(files)
    graph = {name: all_imports(ast.parse(path.read_text()), modules) - {name} for name, path in files.items()}
    assert circles(graph) == []


@pytest.mark.timeout(10)
def test_no_module_of_the_clients_imports_one_that_imports_it_back() -> None:
    import monarch_pdb.client

    folder = Path(monarch_pdb.client.__file__).parent

    def name(path: Path) -> str:
        parts = ("monarch_pdb", "client", *path.relative_to(folder).with_suffix("").parts)
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    files = {name(path): path for path in folder.rglob("*.py")}
    modules = set(files)
    graph = {name: imports(ast.parse(path.read_text()), modules) - {name} for name, path in files.items()}
    assert circles(graph) == []


RANK_MODULES = {module_name(path) for path in (PACKAGE / "rank").rglob("*.py")}


@pytest.mark.timeout(10)
def test_no_client_module_imports_the_agents_modules() -> None:
    """What a client reads of a process from outside is `monarch_pdb.processes`, which the agent
    uses too: a client never loads the agent's own modules."""
    import monarch_pdb.client

    folder = Path(monarch_pdb.client.__file__).parent
    importers = sorted(
        str(path.relative_to(folder))
        for path in folder.rglob("*.py")
        if any(name.startswith("monarch_pdb.rank") for name in all_imports(ast.parse(path.read_text()), RANK_MODULES))
    )
    assert importers == []
