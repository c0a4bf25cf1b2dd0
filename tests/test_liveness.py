"""A rank is lost when its process or its connection is gone, never because it is busy: a process
whose thread holds the GIL in C code for many heartbeats keeps its running rank `running` and its
paused session paused, while one that is killed is lost at once."""

from __future__ import annotations

import os
import re
import signal
import textwrap

import pytest
from programs import Program, wait_for_all_rows, wait_for_lines

HOLDS = textwrap.dedent("""
    import ctypes
    import os
    import sys
    import threading
    import time

    import monarch_pdb

    go, hold, actor, pause = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == "pause"
    monarch_pdb.install()
    monarch_pdb.set_identity(actor=actor, rank=0)


    def helper():
        value = 41
        breakpoint()


    if pause:
        threading.Thread(target=helper, name="helper").start()
    while not os.path.exists(go):
        time.sleep(0.05)
    print("HOLDING", flush=True)
    ctypes.PyDLL(None).sleep(hold)  # a C call that keeps the GIL
    print("DONE", flush=True)
""")
BEAT = "0.2"
"""Heartbeats five times a second: the hold lasts dozens of them."""
HOLD = "6"
LISTED = r"^\| holds-\d+ +\| (busy|paused) +\| 0 .*\| (\w+) +\|$"
"""An actor of the program and its one rank's state, in a row of `list --all`."""


def start(env, tmp_path) -> tuple[list[Program], object]:
    """A process whose rank runs and one whose rank is paused in another thread, each with a
    thread that will hold the GIL once `go` exists."""
    env["MONARCH_PDB_HEARTBEAT"] = BEAT
    script = tmp_path / "holds.py"
    script.write_text(HOLDS)
    go = tmp_path / "go"
    programs = [
        Program(env, script, str(go), HOLD, "busy", "run", cwd=tmp_path),
        Program(env, script, str(go), HOLD, "paused", "pause", cwd=tmp_path),
    ]
    wait_for_all_rows(
        env, lambda rows: sorted((r.actor, r.state) for r in rows) == [("busy", "running"), ("paused", "breakpoint")]
    )
    return programs, go


def listed(sh) -> list[tuple[str, str]]:
    return re.findall(LISTED, sh.command("list --all"), re.M)


@pytest.mark.timeout(120)
def test_a_process_holding_the_gil_in_c_stays_running_and_a_paused_session_in_it_is_never_lost(env, tmp_path, shell):
    programs, go = start(env, tmp_path)
    try:
        sh = shell()
        before = listed(sh)
        assert before == [("busy", "running"), ("paused", "breakpoint")], before
        go.touch()
        for program in programs:
            wait_for_lines(program, "HOLDING", 1)
        held = sh.command("peek --timeout 1 busy ranks(0) 1 + 1")
        assert "holds the GIL in C code" in held, held
        assert listed(sh) == before, "nothing changed while the GIL was held"
        for program in programs:
            wait_for_lines(program, "DONE", 1, timeout=60)
        assert ("paused", "breakpoint") in listed(sh)  # the busy one ends after its hold
        assert sh.command("cast paused ranks(0) p value").endswith("\n41\n")
        assert not re.search(r"lost|left|joined", sh.text), sh.text
        sh.command("continue")
        for program in programs:
            code, output = program.finish(timeout=30)
            assert code == 0, output
    finally:
        for program in programs:
            program.stop()


@pytest.mark.timeout(120)
def test_a_killed_process_is_lost_at_once_even_while_it_held_the_gil(env, tmp_path, shell):
    programs, go = start(env, tmp_path)
    try:
        sh = shell()
        go.touch()
        for program in programs:
            wait_for_lines(program, "HOLDING", 1)
            os.kill(program.proc.pid, signal.SIGKILL)
        for actor in ("busy", "paused"):
            if f"{actor} 0 was lost" not in sh.text:
                sh.expect(rf"{actor} 0 was lost")
        assert listed(sh) == [("busy", "lost"), ("paused", "lost")]
    finally:
        for program in programs:
            program.stop()
