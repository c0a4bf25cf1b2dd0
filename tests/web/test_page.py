"""The live page in a real browser (Debian's Chromium through Playwright), driven as a user
drives it: what it shows of ranks with hostile names, a hover over the mesh, a click that selects
a rank as the shell's `ranks(...)`, a click that reads an actor, and the broker's news arriving;
no dialog ever opens, so nothing a rank sent ran."""

from __future__ import annotations

import re

import pytest

sync_api = pytest.importorskip("playwright.sync_api", reason="`make test-web` installs Playwright and runs these")

from programs import HOSTILE_NAMES, debug, hostile_ranks  # noqa: E402
from test_web_server import serving  # noqa: E402

from monarch_pdb import ranks  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
WAIT_MS = 30_000
IMG, SCRIPT = HOSTILE_NAMES


@pytest.mark.timeout(180)
def test_the_page_shows_reads_and_follows_the_job_and_runs_nothing_a_rank_sent(env, tmp_path):
    program = hostile_ranks(env, tmp_path)
    dialogs: list[str] = []
    try:
        with serving(env, "127.0.0.1:0") as base, sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            page = browser.new_page()
            page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
            page.goto(base)
            expect = sync_api.expect
            expect(page.get_by_role("heading", name="monarch-pdb: the job now")).to_be_visible(timeout=WAIT_MS)
            expect(page.get_by_role("heading", name=IMG, exact=True)).to_be_visible()
            expect(page.get_by_role("heading", name=SCRIPT, exact=True)).to_be_visible()

            image_part = page.locator("section", has=page.get_by_role("heading", name=IMG, exact=True))
            mesh = image_part.locator("canvas")
            mesh.hover(position={"x": 7, "y": 7})
            expect(mesh).to_have_attribute("title", re.compile(r"^rank 0 breakpoint on \S+, pid \d+, \S*rank_main$"))

            mesh.click(position={"x": 7, "y": 7})
            expect(image_part.locator("code.selection")).to_have_text(f'"{IMG}" ranks(0)')
            for numbers, said in (([2, 0, 1, 3], "ranks(0:4)"), ([7, 0, 5], "ranks(0,5,7)"), ([4], "ranks(4)")):
                assert page.evaluate(f"selector({numbers})") == said
                assert sorted(ranks.select(ranks.parse_selector(said), [(n, {}) for n in range(9)])) == sorted(numbers)

            running_part = page.locator("section", has=page.get_by_role("heading", name=SCRIPT, exact=True))
            running_part.get_by_role("button").click()
            stacks = running_part.locator("pre").last
            expect(stacks).to_contain_text(f"actor = {SCRIPT!r}", timeout=WAIT_MS)
            expect(running_part.get_by_role("button")).to_have_count(0)

            assert debug(env, "continue").returncode == 0
            expect(page.locator("pre.news")).to_contain_text(IMG, timeout=WAIT_MS)
            browser.close()
        assert dialogs == [], "a dialog opened: something a rank sent ran in the page"
    finally:
        program.stop()
