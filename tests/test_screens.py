"""What a person reads at a thousand ranks: `list` by groups of ranks past a screenful, host
names compressed, and output taller than the terminal through a pager, as git does."""

from __future__ import annotations

import json
import pprint
import re
import textwrap

import pytest
from programs import NAMED_RANKS, Program, run_debug, stop_line, wait_for_sessions
from rich.cells import cell_len
from shell_driver import ShellDriver

from monarch_pdb.client.commands.hostlist import compress

MANY = textwrap.dedent("""
    import dataclasses
    import threading

    import monarch_pdb
    from monarch_pdb.rank import identity

    RANKS, PER_HOST = 1024, 8
    host = threading.local()
    real_here = identity.here
    # A host per 8 ranks: each rank's identity is worked out once, on its own thread.
    identity.here = lambda: dataclasses.replace(real_here(), hostname=getattr(host, "name", None) or real_here().hostname)


    def rank_main(rank):
        host.name = f"node{rank // PER_HOST + 1:03d}"
        with monarch_pdb.endpoint_call("trainer", rank, {"host": rank // PER_HOST, "gpu": rank % PER_HOST}):
            if rank == 700:
                breakpoint()
                where = "the odd one"
            elif rank < RANKS // 2:
                breakpoint()
                where = "first half"
            else:
                breakpoint()
                where = "second half"
            return where


    monarch_pdb.install()
    threading.stack_size(256 * 1024)
    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(RANKS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("DONE")
""")


def line_of(text: str, code: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if line.strip() == code)


STORM = re.compile(r"^trainer (\d+|ranks\[[\d,-]+\] \(\d+\)) stopped at many\.py:[\d,]+\n", re.M)
"""A line announcing ranks of the storm that stopped: on a busy machine some come in after
the broker has counted every rank, above the prompt of a later command."""


def fake_pager(tmp_path) -> tuple[str, object]:
    """A pager that keeps what it was given, in the order given; returns it and its record."""
    record = tmp_path / "paged.txt"
    script = tmp_path / "pager.sh"
    script.write_text(f"#!/bin/sh\ncat >> '{record}'\n")
    script.chmod(0o755)
    return str(script), record


@pytest.mark.parametrize(
    "names, text",
    [
        ([f"node{n:03d}" for n in range(1, 129)], "node[001-128]"),
        ([f"node{n}" for n in range(128, 0, -1)], "node[1-128]"),
        ([f"node{n:03d}" for n in (1, 2, 3, 5, 10, 100)], "node[001-003,005,010,100]"),
        (["login", "node2", "node1", "node3", "gpu01", "gpu02", "node2"], "gpu[01,02],login,node[1-3]"),
        (["a1.cluster", "a2.cluster", "a3.cluster", "b7.cluster"], "a[1-3].cluster,b7.cluster"),
        (["rack1-node3", "rack1-node4", "rack2-node3"], "rack1-node[3,4],rack2-node3"),
        (["n01", "n2"], "n01,n2"),
        (["vm"], "vm"),
        ([], ""),
    ],
)
def test_host_names_compress_as_a_slurm_hostlist(names, text):
    assert compress(names) == text


@pytest.mark.timeout(180)
@pytest.mark.each_python
def test_a_thousand_ranks_list_as_a_row_per_group_and_every_row_when_asked(env, tmp_path):
    script = tmp_path / "many.py"
    script.write_text(MANY)
    program = Program(env, script, cwd=tmp_path)
    pager, paged = fake_pager(tmp_path)
    sh = ShellDriver(dict(env, PAGER=pager))
    try:
        wait_for_sessions(env, 1024, timeout=120)  # a thousand threads stop in turn: minutes on a busy machine
        sh.wait_prompt()
        first, odd, second = (
            stop_line(line_of(MANY, f'where = "{w}"')) for w in ("first half", "the odd one", "second half")
        )
        assert STORM.sub("", sh.command("list")) == textwrap.dedent(f"""\
            +------------+------------------------+------------------------------+---------------+----------------+----------+
            | Actor Name | Ranks                  | Coords                       | Hosts         | Function       | Line No. |
            +============+========================+==============================+===============+================+==========+
            | trainer    | 0-511 (512)            | {{'host': 0-63, 'gpu': 0-7}}   | node[001-064] | many.rank_main | {first}       |
            +------------+------------------------+------------------------------+---------------+----------------+----------+
            | trainer    | 512-699,701-1023 (511) | {{'host': 64-127, 'gpu': 0-7}} | node[065-128] | many.rank_main | {second}       |
            +------------+------------------------+------------------------------+---------------+----------------+----------+
            | trainer    | 700 (1)                | {{'host': 87, 'gpu': 4}}       | node088       | many.rank_main | {odd}       |
            +------------+------------------------+------------------------------+---------------+----------------+----------+
            1024 ranks in 3 groups; 'list --rows' shows each rank
        """)
        assert not paged.exists(), "a table that fits on the screen is not paged"

        assert STORM.sub("", sh.command("list --rows")) == "", "a table taller than the terminal goes to the pager"
        every = run_debug(env, "-c", "list --rows")
        assert every.returncode == 0 and every.stdout.count("\n| trainer ") == 1024
        assert paged.read_text() == every.stdout, "the pager gets the table a script prints, whole"
        assert re.search(
            rf"^\| trainer +\| 700 +\| {{'host': 87, 'gpu': 4}} +\| node088 +\| many.rank_main \| {odd} +\|$",
            every.stdout,
            re.M,
        )

        sh.command("set list_rows 1024")
        assert STORM.sub("", sh.command("list")) == ""
        assert paged.read_text() == 2 * every.stdout, "up to list_rows ranks, a row each"
        sh.command("set list_rows 1023")
        assert sh.command("list").endswith("1024 ranks in 3 groups; 'list --rows' shows each rank\n")

        rows = json.loads(run_debug(env, "--json", "-c", "list").stdout)
        assert [r["rank"] for r in rows] == list(range(1024)) and rows[700]["host"] == "node088"
        states = run_debug(dict(env, MONARCH_PDB_LIST_ROWS="2000"), "-c", "list --all")
        assert states.stdout.count("| breakpoint |") == 1024
    finally:
        sh.kill()
        program.stop()


def columns_of(line: str, marks: str) -> list[int]:
    """The terminal columns at which `line` shows one of `marks`."""
    return [cell_len(line[:at]) for at, char in enumerate(line) if char in marks]


@pytest.mark.timeout(60)
def test_wide_names_keep_the_columns_of_a_table_in_line_on_the_terminal(env, tmp_path, shell):
    script = tmp_path / "named.py"
    script.write_text(NAMED_RANKS)
    program = Program(env, script, "训练,train,🔥火箭,e\u0301", "-1", cwd=tmp_path)
    try:
        wait_for_sessions(env, 4)
        table = [line for line in shell().command("list").splitlines() if line[:1] in "+|"]
        assert {line.split("|")[1].strip() for line in table if line.startswith("| ") and "Name" not in line} == {
            "训练",
            "train",
            "🔥火箭",
            "e\u0301",
        }
        assert len({tuple(columns_of(line, "+|")) for line in table}) == 1, "\n".join(table)
    finally:
        program.stop()


@pytest.mark.timeout(120)
def test_output_taller_than_the_terminal_goes_through_the_pager_at_a_terminal_only(env, example, tmp_path):
    pager, paged = fake_pager(tmp_path)
    tall = "cast debugee ranks(:) pp list(range(60))"
    answer = "debugee ranks[0-15] (16)\n" + pprint.pformat(list(range(60))) + "\n"
    with_pager = dict(env, PAGER=pager)
    sh = ShellDriver(with_pager)
    try:
        sh.wait_prompt()
        assert sh.command(tall) == "", "nothing of it scrolls by on the terminal"
        assert paged.read_text() == answer
        listing = sh.command("list")
        assert listing.count("\n| debugee ") == 16 and paged.read_text() == answer, "the guide's list fits: not paged"
        sh.command("set pager cat")
        assert sh.command(tall) == answer
    finally:
        sh.kill()
    paged.unlink()

    off = ShellDriver(dict(with_pager, MONARCH_PDB_PAGER=""))
    try:
        off.wait_prompt()
        assert off.command(tall) == answer, "MONARCH_PDB_PAGER='' turns the pager off"
    finally:
        off.kill()
    documents = ShellDriver(with_pager, "--json")
    try:
        documents.wait_prompt()
        shown = documents.command(tall)
        assert json.loads(shown)["groups"][0]["output"] == answer.split("\n", 1)[1]
    finally:
        documents.kill()
    script = run_debug(with_pager, "-c", tall)
    assert script.returncode == 0 and script.stdout == answer
    assert not paged.exists(), "never for --json, a script, or without a terminal"


@pytest.mark.timeout(90)
def test_control_characters_a_rank_prints_are_shown_escaped_as_cat_v_does(example, shell):
    sh = shell()
    clear = r'!print("\x1b[2Jcleared\x07\tand\r\x9b2J")'
    shown = "^[[2Jcleared^G\tand^MM-^[2J\n"
    assert sh.command(f"cast debugee ranks(0) {clear}") == "debugee ranks[0] (1)\n" + shown
    sh.command("set cast_output raw")
    assert sh.command(f"cast debugee ranks(1) {clear}") == "[1] " + shown
    sh.command("follow debugee ranks(2)")
    before = len(sh.text)
    sh.command(r'cast debugee ranks(2) !print("\x1b]0;retitled\x07")')
    sh.seen = before
    sh.expect(r"\[debugee 2\] \^\[\]0;retitled\^G")
    sh.command("follow off")
    sh.command("set color off")
    sh.command("attach debugee 3")
    assert sh.command(r'!print("\x1b[31mred\x1b[0m")') == "^[[31mred^[[0m\n"
    assert sh.command("detach").startswith("Detaching")
    assert "Attached to debug session for debugee 3" in (again := sh.command("attach debugee 3"))
    assert "^[[31mred^[[0m" in again, "the replay of what the rank printed is escaped too"
    for raw in ("\x1b[2J", "\x07", "\x9b", "\x1b]0;", "\x1b[31m"):
        assert raw not in sh.raw
    sh.command("detach")
    sh.command("set color on")  # pdb's colours show attached, and nothing else a rank prints does
    sh.command("attach debugee 3")
    assert sh.command(r'!print("\x1b[31mred\x1b[0m\x1b[2J")') == "red^[[2J\n"
    assert "\x1b[31mred\x1b[0m^[[2J" in sh.raw and "\x1b[2J" not in sh.raw


@pytest.mark.timeout(120)
def test_a_pager_that_cannot_run_is_refused_and_one_that_reads_nothing_swallows_nothing(env, example, tmp_path):
    pager, paged = fake_pager(tmp_path)
    tall = "cast debugee ranks(:) pp list(range(60))"
    answer = "debugee ranks[0-15] (16)\n" + pprint.pformat(list(range(60))) + "\n"
    sh = ShellDriver(dict(env, PAGER=pager))
    try:
        sh.wait_prompt()
        assert (
            sh.command("set pager nosuchpager")
            == "Error setting pager: 'nosuchpager' is not a command here (cat: no pager)\n"
        )
        assert sh.command('set pager "less \'"') == (
            'Error setting pager: cannot read "less \'" as a command: No closing quotation\n'
        )
        assert sh.command(tall) == "" and paged.read_text() == answer, "the pager set before is kept"
        for reads_nothing in ("false", "true", "sleep 0"):
            assert "now: " in sh.command(f"set pager '{reads_nothing}'")
            assert sh.command(tall) == (
                f"monarch-pdb: the pager '{reads_nothing}' ended without reading it "
                f"(exit status {int(reads_nothing == 'false')}); here it is:\n" + answer
            )
    finally:
        sh.kill()
