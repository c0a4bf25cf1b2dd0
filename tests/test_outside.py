"""Native frames as shown: C++ names of thousands of characters (pybind11's) are shown as their
qualified function name."""

from __future__ import annotations

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
