"""How a message type is declared, and how one that arrives is checked, field by field.

A message is a dataclass registered under its short wire name (`message`); it travels as a map
of its fields. A record (`record`) is a small value nested in a message (a row, a group, a
frame): it travels as a msgpack array of its fields in declared order. Decoding gives back each
field as its declared type (a record built, an enum's word looked up, a rank set made from its
runs) or refuses the message with `Dropped`.

A type's checks are built the first time one of its kind travels, not when it is declared: a
rank that never stops never pays for the checks of the ninety-odd types it never sends.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from importlib import import_module
from operator import attrgetter
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
else:

    def dataclass_transform(**kwargs: Any) -> Callable[[Any], Any]:
        """Tells type checkers that `message` and `record` make dataclasses; nothing at run time
        (typing has it from 3.11 only)."""
        return lambda decorator: decorator


from monarch_pdb import ranks


class Dropped(Exception):
    """A message that must be dropped; the text says why, in a few words."""


@dataclass
class Message:
    """What travels on its own, as a map of its fields under its wire name (`TYPE`)."""

    TYPE: ClassVar[str] = ""


class Record:
    """A small value nested in a message (a row, a group, a frame): it travels as a msgpack
    array of its fields in declared order, and decoding checks each field like a message's."""

    __slots__ = ()


Check = Callable[[Any], Any]
Schema = tuple[tuple[str, Check, bool], ...]
"""Each field's name, its check, and whether it is required."""
REGISTRY: dict[str, type[Message]] = {}
_SCHEMAS: dict[type, Schema] = {}
_BUILDERS: dict[type, Check] = {}
"""For each record, the function that builds one from the array it travelled as (a list of
131,072 rows, or the root's million answers of a cast, is that many records to build)."""
_FLATTENERS: dict[type, Callable[[Any], tuple]] = {}
"""For each record, its fields in order as it travels, a rank set's as its runs: one call in C."""


def _wrong(value: Any) -> Any:
    raise Dropped("wrong field type")


def _checker(annotation: Any) -> Check:
    """A function that gives back a decoded value as its declared type (a record built, an
    enum's word looked up, each item of a list checked) or refuses it. A bool is no int here."""
    origin = typing.get_origin(annotation)
    if isinstance(annotation, types.UnionType) or origin is typing.Union:
        options = [_checker(arg) for arg in typing.get_args(annotation)]

        def check_union(value: Any) -> Any:
            for option in options:
                try:
                    return option(value)
                except Dropped:
                    pass
            return _wrong(value)

        return check_union
    if annotation is None or annotation is type(None):
        return lambda value: value if value is None else _wrong(value)
    if origin is list:
        (item_type,) = typing.get_args(annotation) or (Any,)
        if exact_items := _exact_types(item_type):
            # The ranks of a cast's answers or of a broker below: 131,072 of them are checked
            # in one pass, not a call each.
            return lambda value: (
                value if isinstance(value, list) and all(type(item) in exact_items for item in value) else _wrong(value)
            )
        check_item = _checker(item_type)
        return lambda value: list(map(check_item, value)) if isinstance(value, list) else _wrong(value)
    if origin is dict:
        key_type, value_type = typing.get_args(annotation)
        if (keys := _exact_types(key_type)) and (values := _exact_types(value_type)):
            # A rank's coordinates, in each of 131,072 rows of a list.
            return lambda value: (
                value
                if isinstance(value, dict) and all(type(k) in keys and type(v) in values for k, v in value.items())
                else _wrong(value)
            )
        check_key, check_value = _checker(key_type), _checker(value_type)
        return lambda value: (
            {check_key(k): check_value(v) for k, v in value.items()} if isinstance(value, dict) else _wrong(value)
        )
    if annotation is Any:
        return lambda value: value
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        words = {member.value: member for member in annotation}
        return lambda value: words[value] if isinstance(value, str) and value in words else _wrong(value)
    if isinstance(annotation, type) and issubclass(annotation, Record):
        return _builder(annotation)
    if annotation is ranks.RankSet:
        return _rank_set
    exact = _exact_types(annotation)
    if exact is None:
        raise TypeError(f"no check for a field of type {annotation!r}")
    return lambda value: value if type(value) in exact else _wrong(value)


def _rank_set(value: Any) -> ranks.RankSet:
    """A rank set travels as its runs, flat (`ranks.RankSet.spans`)."""
    if type(value) is not list:
        return _wrong(value)
    try:
        return ranks.RankSet.from_wire(value)
    except ValueError:
        return _wrong(value)


def _exact_types(annotation: Any) -> tuple[type, ...] | None:
    """The types msgpack gives for a plain field of this type, matched exactly (`type() in`):
    so no bool passes for an int, and a float field takes an int."""
    if annotation is float:
        return float, int
    if annotation in (int, str, bytes, bool):
        return (annotation,)
    return None


def _schema(cls: type) -> Schema:
    """The checks of a message's or record's fields, built on first use."""
    schema = _SCHEMAS.get(cls)
    if schema is None:
        hints = typing.get_type_hints(cls)
        schema = _SCHEMAS[cls] = tuple(
            (
                f.name,
                _checker(hints[f.name]),
                f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
            )
            for f in dataclasses.fields(cls)
        )
    return schema


@dataclass_transform()
def message(type_name: str):
    """Register a dataclass as a message type under its short wire name."""

    def register(cls):
        cls = dataclass(cls)
        cls.TYPE = type_name
        REGISTRY[type_name] = cls
        return cls

    return register


@dataclass_transform()
def record(cls):
    """Declare a record: a slotted dataclass whose fields are checked as they arrive."""
    return dataclass(slots=True)(cls)


def _builder(cls: type) -> Check:
    """How a record is built from the array it travelled as, made on first use."""
    builder = _BUILDERS.get(cls)
    if builder is None:
        builder = _BUILDERS[cls] = _record_builder(cls, _schema(cls))
    return builder


def _flattener(cls: type) -> Callable[[Any], tuple]:
    """A record's fields in order as it travels, a rank set's as its runs: one call in C (made
    on first use)."""
    flatten = _FLATTENERS.get(cls)
    if flatten is None:
        hints = typing.get_type_hints(cls)
        names = [f"{f.name}.spans" if hints[f.name] is ranks.RankSet else f.name for f in dataclasses.fields(cls)]
        get = attrgetter(*names)
        flatten = _FLATTENERS[cls] = get if len(names) > 1 else lambda value: (get(value),)
    return flatten


def _record_builder(cls: type, schema: Schema) -> Check:
    """How a record is built from the array it travelled as. Where each field is of one plain
    type or a rank set (a cast's answer, a frame, a rank that did not answer), the types of
    all its fields are compared at once and only the rank sets are made by a call; otherwise
    each field is checked by its own."""
    fewest, checks = sum(required for _, _, required in schema), tuple(check for _, check, _ in schema)
    hints = typing.get_type_hints(cls)
    plain = [_exact_types(hints[name]) for name, _, _ in schema]
    made = [at for at, (name, _, _) in enumerate(schema) if hints[name] is ranks.RankSet]
    if all(exact is not None and len(exact) == 1 or at in made for at, exact in enumerate(plain)):
        wire_types = tuple(list if exact is None else exact[0] for exact in plain)
        expected = {length: wire_types[:length] for length in range(fewest, len(schema) + 1)}

        def build_plain(value: Any) -> Any:
            if type(value) is not list or tuple(map(type, value)) != expected.get(len(value)):
                return _wrong(value)
            try:
                for at in made:
                    if at < len(value):
                        value[at] = ranks.RankSet.from_wire(value[at])
            except ValueError:
                return _wrong(value)
            return cls(*value)

        return build_plain

    def build_checked(value: Any) -> Any:
        if not isinstance(value, list) or not fewest <= len(value) <= len(checks):
            return _wrong(value)
        return cls(*[check(item) for check, item in zip(checks, value)])

    return build_checked


def build(cls: type[Message], fields: dict) -> Message:
    """A message of type `cls` from decoded fields, each present when required and of its
    declared type, records and lists checked all the way down, or `Dropped`."""
    values = {}
    for name, check, required in _SCHEMAS.get(cls) or _schema(cls):
        if name not in fields:
            if required:
                raise Dropped("missing field")
            continue
        values[name] = check(fields[name])
    return cls(**values)


def message_types() -> dict[str, type[Message]]:
    """Every message type by its wire name, the modules that declare them loaded first: a rank
    loads those of shells and brokers only when one of their messages reaches it."""
    package = import_module("monarch_pdb.wire")
    for module in package.MODULES:
        import_module(f"{package.__name__}.{module}")
    return REGISTRY


def from_fields(fields: dict) -> Message:
    """The message a decoded map says it is (its `t`), checked as `build` does."""
    kind = fields.get("t")
    cls = REGISTRY.get(kind) or message_types().get(kind)  # type: ignore[arg-type]
    if cls is None:
        raise Dropped("unknown type")
    return build(cls, fields)


def flatten(value: Any) -> tuple:
    """A record as it travels: its fields in order; a rank set as its runs."""
    flatten = _FLATTENERS.get(type(value))
    if flatten is not None:
        return flatten(value)
    if isinstance(value, Record):
        return _flattener(type(value))(value)
    if isinstance(value, ranks.RankSet):
        return value.spans
    raise TypeError(f"cannot send {type(value).__name__}")
