"""`make demo`'s program: the example in the background, the shell in front, nothing left after."""

from __future__ import annotations

import sys

import pytest
from programs import EXAMPLES, wait_for_sessions
from shell_driver import ShellDriver


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
