"""`make demo`'s program: the example in the background, the shell in front, nothing left after."""

from __future__ import annotations

import os
import sys

import pytest
from programs import EXAMPLES, settings_for, wait_for_sessions
from shell_driver import ShellDriver

from monarch_pdb import discovery

MAKE_DEMO = ["make", "-s", "-C", str(EXAMPLES.parent), "demo", f"BIN={os.path.dirname(sys.executable)}", "INSTALLED="]
"""`make demo`, with this test's Python (and no install step first)."""


@pytest.mark.timeout(90)
def test_demo_opens_the_shell_on_16_ranks_and_cleans_up(env):
    demo = ShellDriver(env, command=[sys.executable, str(EXAMPLES / "demo.py")])
    try:
        demo.expect(r"Started examples/debugging\.py: 16 ranks")
        demo.wait_prompt()
        wait_for_sessions(env, 16)
        listing = demo.command("list")
        assert listing.count("| debugee ") == 16
        assert "Quitting debug session..." in demo.command_until_exit("quit")
        assert demo.child.exitstatus == 0
    finally:
        demo.kill()


@pytest.mark.timeout(90)
def test_ctrl_c_in_make_demo_gives_a_fresh_prompt_and_leaves_the_broker_and_make_running(env):
    demo = ShellDriver(env, command=MAKE_DEMO)
    try:
        demo.expect(r"Started examples/debugging\.py: 16 ranks")
        demo.wait_prompt()
        wait_for_sessions(env, 16)
        broker = discovery.locate(settings_for(env), here=True)
        demo.child.send("p ra")
        demo.expect("p ra")
        demo.child.sendintr()
        demo.expect("\nmonarch_dbg> ")
        listing = demo.command("list")
        assert listing.count("| debugee ") == 16 and "restarted" not in listing
        assert discovery.locate(settings_for(env), here=True).pid == broker.pid, "the demo's broker lives on"
        after = demo.command_until_exit("quit")
        assert "Stopped the example" in after and "Interrupt" not in after
        assert (demo.child.exitstatus, demo.child.signalstatus) == (0, None), "make ends as the demo did"
    finally:
        demo.kill()
