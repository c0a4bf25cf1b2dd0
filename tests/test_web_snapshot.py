"""`monarch-pdb snapshot`: one HTML file with the job inside it, which a browser draws with no
server, and in which nothing a rank sent can run or become markup."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest
from programs import HOSTILE_NAMES, hostile_ranks

IMG, SCRIPT = HOSTILE_NAMES
CHROMIUM = shutil.which("chromium")


def snapshot(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "monarch_pdb", "snapshot", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=90,
    )


def data_of(html: str) -> dict:
    found = re.search(r'<script type="application/json" id="job-data">(.*?)</script>', html, re.S)
    assert found, "the data is inside the page"
    return json.loads(found.group(1))


@pytest.mark.timeout(120)
def test_a_snapshot_holds_the_job_and_shows_what_ranks_sent_as_text_only(env, tmp_path):
    program = hostile_ranks(env, tmp_path)
    try:
        page = tmp_path / "job.html"
        done = snapshot(env, "-o", str(page))
        assert done.returncode == 0, done.stderr
        assert done.stdout == f"wrote {page}: 2 ranks, 2 actors\n"
        html = page.read_text()
        assert html.count("<script") == 2 and "<img" not in html, "no name of a rank's is markup in the file"
        data = data_of(html)
        assert sorted(part["name"] for part in data["actors"]) == sorted([IMG, SCRIPT])
        running = next(part for part in data["actors"] if part["name"] == SCRIPT)
        assert (
            running["collectives"] == f"{SCRIPT} ranks[1] (1): torch.distributed has no process group in this process\n"
        )
        assert "rank_main" in running["stacks"] and f"actor = {SCRIPT!r}" in running["stacks"], "and its locals"
        assert sorted((row["actor"], row["state"]) for row in data["ranks"]) == [
            (SCRIPT, "running"),
            (IMG, "breakpoint"),
        ]

        missing = snapshot(env, "nosuch", "-o", str(tmp_path / "none.html"))
        assert (missing.returncode, missing.stdout) == (1, "")
        assert missing.stderr == "monarch-pdb: no running rank of actor nosuch is known to the broker\n"
        assert not (tmp_path / "none.html").exists()
        unwritable = snapshot(env, "-o", str(tmp_path / "no" / "such" / "dir.html"))
        assert unwritable.returncode == 1
        assert unwritable.stderr.startswith(f"monarch-pdb: cannot write {tmp_path}/no/such/dir.html: ")

        if CHROMIUM is None:
            pytest.skip("Debian's chromium draws the page (make test-editor and CI install it)")
        drawn = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()],
            capture_output=True,
            text=True,
            timeout=60,
        )
        dom = drawn.stdout
        assert "<canvas" in dom and "Merged stacks, with the program frame's locals" in dom, dom[:2000]
        assert "&lt;img src=x onerror=alert(1)&gt;" in dom, "the name is shown, as text"
        assert "<img" not in dom and dom.count("<script") == 2, "nothing a rank sent became an element"
    finally:
        program.stop()
