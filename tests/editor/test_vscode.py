"""The guide in real VS Code: code-server in headless Chromium, the extension packed from
editors/vscode, the guide's 16 ranks; what a user does and sees, step by step."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

import pytest

CACHE = os.environ.get("EDITOR_CACHE")
if not CACHE:
    pytest.skip("`make test-editor` installs code-server and runs these", allow_module_level=True)

from playwright.sync_api import expect  # noqa: E402  (installed by make test-editor only)
from programs import EXAMPLES, Program, stop_line, wait_for_sessions  # noqa: E402
from conftest import MARKER, processes_with_marker  # noqa: E402
from workbench import EXTENSION, CodeServer, browser, step, thread, thread_row, top_frame, variable  # noqa: E402

pytestmark = pytest.mark.timeout(600)

# examples/debugging.py: rank 5 pauses after the breakpoint() of line 14, at `rank += 2`; ranks
# 0, 4, 8, 12 return at line 12; ranks 2, 6, 10, 14 raise at line 5, in _bad_rank.
RANK5_STOP = stop_line(15)
RETURN_LINE = 12
RAISE_LINE = 5


def default_configuration() -> dict:
    """The configuration VS Code writes into a new launch.json for monarch-pdb."""
    package = json.loads((EXTENSION / "package.json").read_text())
    return package["contributes"]["debuggers"][0]["initialConfigurations"][0]


@pytest.fixture
def workspace(tmp_path):
    """A folder as the guide leaves it: the example, the venv monarch-pdb is installed in (where
    the extension finds the adapter), and the launch.json of the default configuration."""
    folder = tmp_path / "workspace"
    folder.mkdir()
    shutil.copy(EXAMPLES / "debugging.py", folder / "debugging.py")
    (folder / ".venv").symlink_to(Path(sys.prefix))
    (folder / ".vscode").mkdir()
    (folder / ".vscode" / "launch.json").write_text(json.dumps({"version": "0.2.0",
                                                                "configurations": [default_configuration()]}))
    return folder


def test_the_guide_in_vscode(env, workspace, tmp_path):
    program = Program(env, workspace / "debugging.py", cwd=workspace)
    try:
        wait_for_sessions(env, 16)
        with CodeServer(Path(CACHE), env, workspace, tmp_path / "code-server") as server, \
                browser(server.url, tmp_path / "chromium") as page:
            with step(page, "1-f5-16-threads"):
                press_f5(page, server, "debugging.py", default_configuration()["name"])
                page.locator(".debug-toolbar").wait_for()
                for rank in range(16):
                    expect(thread(page, rank)).to_be_visible()
                expect(page.locator(".debug-call-stack .monaco-list-row .thread")).to_have_count(16)

            with step(page, "2-ranks-view-groups"):
                # The 16 ranks paused on entry, grouped as `list` groups them: four lines by four.
                ranks = page.locator(".pane", has=page.locator(".pane-header", has_text="Ranks"))
                ranks.locator(".pane-header").click()
                groups = ranks.locator(".monaco-list-row", has_text=re.compile(r"ranks\[.*\] \(4\)"))
                expect(groups).to_have_count(4)
                group = groups.filter(has_text="_debugee_actor_internal:15")
                expect(group).to_contain_text("debugee ranks[")
                # The first stop shows rank 0; selecting the group shows its first rank's locals.
                expect(variable(page, "variables", "rank")).to_have_text("0")
                group.click()
                expect(variable(page, "variables", "rank")).to_have_text("1")
                ranks.locator(".pane-header").click()

            with step(page, "3-locals"):
                frame = top_frame(page, 5)
                expect(frame).to_contain_text("_debugee_actor_internal")
                frame.click()
                expect(variable(page, "variables", "rank")).to_have_text("5")

            with step(page, "4-console-then-locals-and-watch"):
                page.keyboard.press("Control+Shift+Y")
                # Typed once the console's input has the focus, else its first keys go elsewhere.
                page.locator(".repl-input-wrapper .monaco-editor.focused").wait_for()
                page.keyboard.type("p rank * 10")
                expect(page.locator(".repl-input-wrapper .view-lines")).to_have_text("p rank * 10")
                page.keyboard.press("Enter")
                expect(page.locator(".repl .monaco-list-row", has_text=re.compile(r"^50$"))).to_be_visible()
                expect(variable(page, "variables", "rank")).to_have_text("5")
                add_watch(page, "rank + 100")
                expect(variable(page, "watch", "rank + 100")).to_have_text("105")

            with step(page, "5-step-over"):
                page.keyboard.press("F10")
                expect(variable(page, "variables", "rank")).to_have_text("7")
                expect(variable(page, "watch", "rank + 100")).to_have_text("107")

            with step(page, "6-breakpoint-continue-all"):
                page.locator(".monaco-editor .view-lines").first.click()
                page.keyboard.press("Control+G")
                page.keyboard.type(str(RETURN_LINE))
                page.keyboard.press("Enter")
                page.keyboard.press("F9")
                page.keyboard.press("F5")
                for rank in (0, 4, 8, 12):
                    expect(thread_state(page, rank)).to_have_text(re.compile("breakpoint", re.I))

            with step(page, "7-post-mortem"):
                for rank in (2, 6, 10, 14):
                    expect(thread_state(page, rank)).to_have_text(re.compile("exception", re.I))
                top_frame(page, 6).click()
                widget = page.locator(".exception-widget")
                expect(widget).to_contain_text("ValueError")
                expect(widget).to_contain_text("bad rank")
                expect(page.locator(".debug-call-stack .monaco-list-row.focused .stack-frame")).to_contain_text("_bad_rank")

            with step(page, "8-job-end-ends-the-session"):
                page.keyboard.press("F5")
                expect(page.locator(".debug-toolbar")).to_be_hidden()
                expect(page.locator(".debug-call-stack .monaco-list-row .thread")).to_have_count(0)
        assert program.proc.wait(timeout=60) is not None
    finally:
        program.stop()


# A job of four ranks started as torchrun starts them (each worker told its rank in its
# environment), whose workers pause at breakpoint() and then loop until stopped.
JOB = """
import os, subprocess, sys
ranks = {"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "0", "TORCHELASTIC_RUN_ID": "launched"}
workers = [subprocess.Popen([sys.executable, "worker.py"], env={**os.environ, **ranks, "RANK": str(rank), "LOCAL_RANK": str(rank)})
           for rank in range(4)]
for worker in workers:
    worker.wait()
"""
WORKER = """
import time
step = 0
breakpoint()
while True:
    step += 1
    time.sleep(0.01)
"""
LAUNCH = {"type": "monarch-pdb", "request": "launch", "name": "monarch-pdb: a job of four ranks",
          "command": ["${workspaceFolder}/.venv/bin/python", "job.py"], "cwd": "${workspaceFolder}"}


def test_launch_a_job_act_on_its_ranks_as_a_group_and_stop_it(env, tmp_path):
    folder = tmp_path / "job"
    (folder / ".vscode").mkdir(parents=True)
    (folder / "job.py").write_text(JOB)
    (folder / "worker.py").write_text(WORKER)
    (folder / ".venv").symlink_to(Path(sys.prefix))
    (folder / ".vscode" / "launch.json").write_text(json.dumps({"version": "0.2.0", "configurations": [LAUNCH]}))
    with CodeServer(Path(CACHE), env, folder, tmp_path / "code-server") as server, \
            browser(server.url, tmp_path / "chromium") as page:
        with step(page, "launch-1-f5-4-threads"):
            press_f5(page, server, "job.py", LAUNCH["name"])
            page.locator(".debug-toolbar").wait_for()
            for rank in range(4):
                expect(thread(page, rank, "worker")).to_be_visible()

        ranks = page.locator(".pane", has=page.locator(".pane-header", has_text="Ranks"))
        # The group's row: the merged stacks below the groups have a row of the same ranks.
        group = ranks.locator(".monaco-list-row", has_text=re.compile(r"worker ranks\[.*\] \(4\)")).first
        with step(page, "launch-2-continue-these-ranks"):
            ranks.locator(".pane-header").click()
            expect(group).to_contain_text("breakpoint")
            group.hover()
            group.locator(".action-label[aria-label='Continue These Ranks']").click()
            expect(group).to_contain_text("running")

        with step(page, "launch-3-interrupt-these-ranks"):
            group.hover()
            group.locator(".action-label[aria-label='Interrupt These Ranks']").click()
            for rank in range(4):
                expect(thread_state(page, rank, "worker")).to_have_text(re.compile("pause", re.I))

        with step(page, "launch-4-stop-ends-the-job"):
            page.keyboard.press("Shift+F5")
            expect(page.locator(".debug-toolbar")).to_be_hidden()
            deadline = time.monotonic() + 60
            while job_left := [cmd for _, cmd in processes_with_marker(env[MARKER])
                               if "job.py" in cmd or "worker.py" in cmd or "monarch_pdb.broker" in cmd]:
                assert time.monotonic() < deadline, f"the job, its ranks and its broker end: {job_left}"
                time.sleep(0.1)


def press_f5(page, server, shown_file: str, configuration: str) -> None:
    """F5, once the workspace shows `shown_file`, the extension host has started and Run and
    Debug offers `configuration`: before that, F5 starts nothing."""
    page.locator(".explorer-folders-view .monaco-list-row", has_text=shown_file).wait_for()
    server.wait_for_extensions()
    page.keyboard.press("Control+Shift+D")
    page.locator(".start-debug-action-item", has_text=configuration).wait_for()
    page.keyboard.press("F5")


def thread_state(page, rank: int, actor: str = "debugee"):
    return thread_row(page, rank, actor).locator(".state")


def add_watch(page, expression: str) -> None:
    """The Watch view's Add Expression, then the expression typed."""
    header = page.locator(".pane-header", has_text=re.compile("watch", re.I))
    header.hover()
    header.locator(".action-label[aria-label='Add Expression']").click()
    page.keyboard.type(expression)
    page.keyboard.press("Enter")
