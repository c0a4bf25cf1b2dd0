"""The guide's actor defined where Monarch cannot debug it: in a notebook's cells (a real
ipykernel, started through jupyter_client as a front end starts it) and in `python -`. Its
ranks are debugged from the notebook's own magics and from a terminal's shell."""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import tempfile
import textwrap
import time

import jupyter_client
import pytest
from programs import EXAMPLES, Program, stop_line, wait_for_sessions

GUIDE = (EXAMPLES / "debugging.py").read_text()
ACTOR_CELL = GUIDE[: GUIDE.index('if __name__ == "__main__":')]
"""The guide's imports, functions and actor, as a user pastes them into a cell: their lines
are the guide's own lines."""
RANK_1_STOP = stop_line(15)


class Kernel:
    """An IPython kernel, as a notebook front end runs one; each cell waited on with a deadline.

    Its channels are Unix sockets in a directory of its own: TCP ports that jupyter_client picks
    free are bound by the kernel only later, and on a busy machine another test took one first."""

    def __init__(self, env: dict[str, str], cwd) -> None:
        self.sockets = tempfile.mkdtemp(prefix="kernel-")  # short: a Unix socket's path has ~100 bytes
        self.manager = jupyter_client.KernelManager(
            kernel_name="python3", transport="ipc", ip=os.path.join(self.sockets, "channel")
        )
        self.manager.start_kernel(env=env, cwd=str(cwd))
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=60)
        self.threads = cwd / "kernel-threads.txt"
        self.run(
            f"import faulthandler, signal; faulthandler.register(signal.SIGUSR1, open({str(self.threads)!r}, 'w'), "
            "all_threads=True)",
            silent=True,
        )

    def run(self, code: str, timeout: float = 60.0, silent: bool = False) -> Cell:
        """Run a cell; what it showed, once the kernel is idle again and has replied.

        The reply is waited for as well as the idle status, since ipykernel 7.3 (the last for
        Python 3.10) can strand a request that comes while it sends the reply before it, and
        the idle status may come first. A cell that does not end in time fails the test with
        what each of the kernel's threads was doing."""
        msg_id = self.client.execute(code, silent=silent)
        cell = Cell()
        deadline = time.monotonic() + timeout
        idle = False
        while not idle:
            msg = self.message_about(self.client.get_iopub_msg, msg_id, deadline, code)
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                setattr(cell, content["name"], getattr(cell, content["name"]) + content["text"])
            elif kind in ("display_data", "execute_result"):
                cell.shown.append(content["data"])
            elif kind == "execute_input":
                cell.number = content["execution_count"]
            elif kind == "error":
                cell.error = f"{content['ename']}: {content['evalue']}"
            idle = kind == "status" and content["execution_state"] == "idle"
        self.message_about(self.client.get_shell_msg, msg_id, deadline, code)
        return cell

    def message_about(self, channel, msg_id: str, deadline: float, code: str) -> dict:
        """The channel's next message about the request msg_id."""
        while True:
            try:
                msg = channel(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(
                    f"the kernel had not ended the cell {code!r} by its deadline; its threads:\n{self.stacks()}"
                ) from None
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg

    def stacks(self) -> str:
        self.manager.signal_kernel(signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not self.threads.read_text():
            time.sleep(0.05)  # a poll on a file the kernel writes, with a deadline
        return self.threads.read_text() or "(the kernel wrote none in 10 s)"

    def close(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)
        shutil.rmtree(self.sockets, ignore_errors=True)


class Cell:
    def __init__(self) -> None:
        self.stdout = self.stderr = self.error = ""
        self.shown: list[dict[str, str]] = []
        self.number = 0

    @property
    def plain(self) -> str:
        return self.stdout + "".join(data.get("text/plain", "") for data in self.shown)


@pytest.fixture
def kernel(env, tmp_path):
    # A notebook's kernel is told its notebook's name, as Jupyter's server tells it.
    kernel = Kernel(dict(env, JPY_SESSION_NAME=str(tmp_path / "debugging.ipynb")), tmp_path)
    try:
        yield kernel
    finally:
        kernel.close()


def listed(text: str) -> list[tuple[str, ...]]:
    return re.findall(r"^\| (\w+) +\| (\d) +\| \{'gpu': \d\} +\| \S+ +\| (\S+) +\| (\d+) +\|$", text, re.M)


@pytest.mark.timeout(180)
@pytest.mark.each_python
def test_an_actor_defined_in_a_cell_is_debugged_from_the_notebook_and_from_a_terminal(kernel, shell):
    assert not kernel.run("%load_ext monarch_pdb").error
    defined = kernel.run(ACTOR_CELL)
    assert not defined.error, defined.error
    started = kernel.run(
        textwrap.dedent("""
        procs = this_host().spawn_procs(per_host={"gpu": 4})
        mesh = procs.spawn("debugee", DebugeeActor)
        fut = mesh.to_debug.call()
    """)
    )
    assert not started.error, started.error + started.stderr

    assert kernel.run("%monarch_debug wait debugee 4").stdout == "4 ranks of debugee stopped\n"
    shown = kernel.run("%monarch_debug list")
    assert listed(shown.plain) == [
        ("debugee", str(rank), "debugging._debugee_actor_internal", str(stop_line(line)))
        for rank, line in enumerate((11, 15, 19, 23))
    ]
    [html] = [data["text/html"] for data in shown.shown]
    assert (
        html.startswith("<table><tr><th>Actor Name</th><th>Rank</th>")
        and "<td>debugging._debugee_actor_internal</td>" in html
    )
    pictured = kernel.run("%monarch_debug mesh debugee")
    assert pictured.plain.startswith("debugee: gpu\n   0 1 2 3\n0  S S S S\n"), pictured.plain
    assert '<tr><th>0</th><td title="stopped">S</td><td title="stopped">S</td>' in pictured.shown[0]["text/html"]

    cast = kernel.run("%monarch_debug cast debugee ranks(:) p rank")
    assert cast.stdout.startswith(
        "debugee ranks[0] (1)\n0\ndebugee ranks[1] (1)\n1\ndebugee ranks[2] (1)\n2\ndebugee ranks[3] (1)\n3\n"
    ), cast.stdout
    refused = kernel.run("%monarch_debug attach debugee 1")
    assert refused.stdout == "" and refused.stderr.startswith("%monarch_debug: line 1: attach needs a terminal")
    assert "run `monarch debug` in one" in refused.stderr and len(refused.stderr.splitlines()) == 1

    sh = shell()
    assert "Attached to debug session for debugee 1" in sh.command("attach debugee 1")
    listing = sh.command("l")
    assert re.search(r"^ 14  (->)?\t        breakpoint\(\)  # noqa$", listing, re.M), listing
    assert re.search(r"^ 15  (->)?\t        rank \+= 2$", listing, re.M), listing
    assert re.search(rf"^ {RANK_1_STOP}  ->\t", listing, re.M), "the cell's line where the rank stopped is marked"
    where = sh.command("where")
    assert f"  <Cell In[{defined.number}]>(31)to_debug()\n-> return _debugee_actor_internal(rank)\n" in where, where
    assert f"> <Cell In[{defined.number}]>({RANK_1_STOP})_debugee_actor_internal()\n" in where, where
    sh.command("detach")

    assert "Continued 4 ranks: debugee ranks[0-3]" in kernel.run("%monarch_debug continue").stdout
    kernel.run("%monarch_debug wait debugee 1")
    post_mortem = kernel.run(
        textwrap.dedent("""\
        %%monarch_debug
        list
        cast debugee ranks(2) where
        continue
    """)
    )
    assert listed(post_mortem.plain) == [("debugee", "2", "debugging._bad_rank", "5")], post_mortem.plain
    assert f'<Cell In[{defined.number}]>(5)_bad_rank()\n-> raise ValueError("bad rank")' in post_mortem.stdout
    assert "Continued 1 rank: debugee ranks[2]" in post_mortem.stdout

    raised = kernel.run("fut.get(timeout=30)")
    assert raised.error.startswith("ActorError: 1 of 4 ranks of debugee.to_debug raised: rank 2: ValueError: bad rank")
    assert not kernel.run("procs.stop()").error


@pytest.mark.timeout(120)
def test_the_guides_program_read_from_stdin_is_debugged_with_its_own_lines(env, shell, tmp_path):
    program_text = GUIDE.replace('{"host": 4, "gpu": 4}', '{"gpu": 4}')
    (tmp_path / "typed.txt").write_text(program_text)
    with open(tmp_path / "typed.txt") as typed:
        program = Program(env, "-", stdin=typed)
    try:
        wait_for_sessions(env, 4)
        sh = shell()
        sh.command("attach debugee 1")
        assert f"> <stdin>({RANK_1_STOP})_debugee_actor_internal()" in sh.command("where")
        assert re.search(r"^ 15 +(->)?\t        rank \+= 2$", sh.command("l"), re.M)
        sh.command("detach")
        assert "Continued 4 ranks: debugee ranks[0-3]" in sh.command("continue")
        wait_for_sessions(env, 1, state="post-mortem")
        sh.command("continue")
        code, output = program.finish(timeout=60)
    finally:
        program.stop()
    assert code == 1
    assert "ActorError: 1 of 4 ranks of debugee.to_debug raised: rank 2: ValueError: bad rank" in output
    assert 'File "<stdin>", line 5, in _bad_rank\n    raise ValueError("bad rank")' in output
