"""Stacks read from outside a process (py-spy): a read that does not finish in time names the
process and why, a file name that is not UTF-8 is named rather than shown as an empty stack, and
C++ names of thousands of characters are shown as their qualified function name."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest
from programs import DEBUG_SHELL, Program, debug, wait_for_all_rows, wait_for_lines

from monarch_pdb import wire
from monarch_pdb.places import NATIVE_WIDTH, native_name, where

RATIO = "std::chrono::duration<long, std::ratio<(long)1, (long)1000> >"
BINDING = (
    "pybind11::cpp_function::initialize<pybind11::cpp_function::cpp_function<bool, c10d::Work, "
    f"{RATIO}, pybind11::name, pybind11::is_method, pybind11::sibling, pybind11::arg_v, "
    "pybind11::call_guard<pybind11::gil_scoped_release>, char [654]>(pybind11::name const, "
    f"pybind11::is_method&)::{{lambda(c10d::Work*, {RATIO})#1}}, bool, c10d::Work*, {RATIO}>"
    f"(bool (*)(c10d::Work*, {RATIO}), pybind11::name const)::{{lambda(pybind11::detail::function_call&)#3}}::_FUN"
)
"""A pybind11 binding's name as py-spy reads it from libtorch_python.so, a third of its length."""

SLEEPER = textwrap.dedent("""
    import time

    print("WAITING", flush=True)


    def nap():
        while True:
            time.sleep(0.2)


    nap()
""")

RANK = textwrap.dedent("""
    import time

    import monarch_pdb

    monarch_pdb.install()
    monarch_pdb.set_identity(actor="train", rank=0)
    while True:
        time.sleep(0.2)
""")


def outside_stacks(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([DEBUG_SHELL[0], "stacks", *args], env=env, capture_output=True, text=True, timeout=60)


def test_a_long_cpp_name_keeps_its_qualified_name_and_elides_its_lists():
    assert native_name(BINDING) == "pybind11::cpp_function::initialize<...>(...)::{lambda(...)#3}::_FUN"
    frame = wire.Frame("/site-packages/torch/lib/libtorch_python.so", 0, BINDING, native=True)
    assert where(frame) == "pybind11::cpp_function::initialize<...>(...)::{lambda(...)#3}::_FUN (libtorch_python.so)"
    assert native_name("c10d::ProcessGroupGloo::AsyncWork::wait(std::chrono::duration<long>)") == (
        "c10d::ProcessGroupGloo::AsyncWork::wait(std::chrono::duration<long>)"
    ), "a name that fits is shown whole"


def test_operators_and_anonymous_namespaces_keep_their_brackets():
    pairs = "std::vector<std::pair<int, std::basic_string<char> > >"
    call = f"(anonymous namespace)::Runner<{pairs}>::operator()({pairs} const&) const"
    assert native_name(call) == "(anonymous namespace)::Runner<...>::operator()(...) const"
    shift = (
        "std::basic_ostream<char>& std::operator<< <std::char_traits<char> >(std::basic_ostream<char>&, char const*)"
    )
    assert native_name(shift) == "std::basic_ostream<...>& std::operator<< <...>(...)"
    assert native_name("f<>()::{lambda()#1}::g(" + "int, " * 30 + "int)") == "f<>()::{lambda()#1}::g(...)", (
        "an empty list stays empty"
    )


def test_a_name_too_long_even_without_its_lists_keeps_its_end():
    nested = "::".join(f"level{i}<int>" for i in range(40)) + "::run(int)"
    shown = native_name(nested)
    assert len(shown) == NATIVE_WIDTH and shown.startswith("...") and shown.endswith("level39<...>::run(...)")


@pytest.mark.timeout(60)
def test_a_process_py_spy_does_not_read_in_time_is_named_with_why(env, tmp_path):
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    program = Program(env, tmp_path / "sleeper.py", cwd=tmp_path)
    try:
        wait_for_lines(program, "WAITING", 1)
        pid = program.proc.pid
        done = outside_stacks(env, "--native", "--timeout", "0.001", str(pid))
        assert (done.returncode, done.stdout, done.stderr) == (
            1,
            f"no answer from sleeper pids ranks[{pid}] (1): process {pid}: py-spy did not finish within 0.001 s\n",
            "",
        )
        read = outside_stacks(env, "--timeout", "60", str(pid))
        assert read.returncode == 0 and re.search(r"^sleeper\.py:\d+ nap  ranks", read.stdout, re.M), read.stdout
        refused = outside_stacks(env, "--timeout", "0", str(pid))
        assert refused.returncode == 2 and "--timeout" in refused.stderr, refused.stderr
    finally:
        program.stop()


@pytest.mark.timeout(90)
def test_a_rank_its_broker_cannot_read_in_time_is_named_with_why(env, tmp_path):
    (tmp_path / "rank.py").write_text(RANK)
    program = Program(dict(env, MONARCH_PDB_READ_TIMEOUT="0.001"), tmp_path / "rank.py", cwd=tmp_path)
    try:
        wait_for_all_rows(env, lambda rows: [(r.actor, r.state) for r in rows] == [("train", "running")])
        done = debug(env, "stacks --native --timeout 30 train")
        assert done.returncode == 1, done.stdout + done.stderr
        assert re.fullmatch(
            r"no answer from train ranks\[0\] \(1\): reading it from outside failed: "
            r"py-spy did not finish within 0\.00\d+ s\n",
            done.stdout,
        ), done.stdout
    finally:
        program.stop()


@pytest.mark.timeout(60)
def test_a_script_whose_name_is_not_utf8_is_named_not_shown_as_an_empty_stack(env, tmp_path):
    script = os.fsencode(tmp_path) + b"/caf\xe9.py"
    with open(script, "wb") as file:
        file.write(SLEEPER.encode())
    program = Program(env, os.fsdecode(script), cwd=tmp_path, launcher=[sys.executable])
    try:
        wait_for_lines(program, "WAITING", 1)
        pid = program.proc.pid
        for options in ((), ("--native",)):
            done = outside_stacks(env, *options, str(pid))
            assert done.returncode == 1, done.stdout + done.stderr
            assert done.stdout.endswith(
                f"process {pid}: py-spy cannot read the frames of caf\\xe9.py, a file whose name is not UTF-8\n"
            ), done.stdout
    finally:
        program.stop()
