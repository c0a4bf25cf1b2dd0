"""The docs tell a newcomer where everything is: each module is on the design page's map, each
page is in the site's navigation, and each link of the README leads somewhere."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("monarch_pdb", "broker", "client")

pytestmark = pytest.mark.timeout(30)


def modules() -> list[Path]:
    return sorted(p.relative_to(ROOT) for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def test_every_module_is_on_the_design_pages_map():
    design = (ROOT / "docs" / "design.md").read_text()
    sections = re.split(r"^### ", design, flags=re.M)[1:]
    mapped = {}
    for section in sections:
        folder = re.match(r"`([^`]+)/`", section)
        if folder:
            mapped[folder.group(1)] = set(re.findall(r"`([\w]+\.py)`", section))
    missing = [str(m) for m in modules() if m.name not in mapped.get(str(m.parent), set())]
    assert missing == []


def test_every_page_is_in_the_sites_navigation():
    nav = set(re.findall(r":\s*(\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), flags=re.M))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert pages == nav


def test_every_link_of_the_readme_and_changelog_leads_to_a_file():
    for name in ("README.md", "CHANGELOG.md"):
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", (ROOT / name).read_text()):
            if "://" not in target:
                assert (ROOT / target).exists(), f"{name} links to {target}, which is not there"
