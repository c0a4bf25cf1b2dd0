"""A wheel holds every package of the tree: `setup.cfg` names each one, since setuptools takes
only the packages it is told of, and an editable install would hide a missing one."""

from __future__ import annotations

import configparser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"monarch_pdb": "monarch_pdb", "monarch_pdb.broker": "broker", "monarch_pdb.client": "client"}


@pytest.mark.timeout(10)
def test_setup_cfg_names_every_package_of_the_tree():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    named = set(config["options"]["packages"].split())
    found = set()
    for package, folder in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((package, *relative)))
    assert found - named == set(), "packages a wheel would leave out"
    assert named - found == set(), "packages setup.cfg names that are not in the tree"
