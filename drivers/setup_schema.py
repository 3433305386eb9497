"""Checks behind :mod:`drivers.setup`: typed reads of YAML values with messages that say where.

Every error is a :class:`SetupError` whose message reads ``<file>: <key path>: <what is wrong>``,
for example::

    launch/sim.yaml: cameras[1].height: expected an integer, found the string '128'
    launch/sim.yaml: camers: unknown key; did you mean 'cameras'? (allowed at the top level: ...)
    launch/sim.yaml: control_hz: expected a positive number (Hz), found the number -10.0

Rules: a key that is present must have a value of the right type (``control_hz:`` with nothing
after it is an error, not the default); unknown keys are errors with the closest known key; a
key written twice in one mapping (PyYAML would silently keep the last) is an error with both
line numbers. Booleans are never numbers (``true`` is not 1).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, NoReturn

import yaml

_MERGE_TAG = "tag:yaml.org,2002:merge"


class SetupError(ValueError):
    """A setup file is malformed; the message names the file, the key and what to change."""


# -- YAML ---------------------------------------------------------------------------------------


class _DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping repeats a key (PyYAML alone would keep the last value silently)."""


class _StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key written twice in one mapping. Keys brought in by
    a merge (``<<: *anchor``) may be overridden by an explicit key, as YAML intends."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
            continue
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        if key in seen:
            raise _DuplicateKeyError(
                None,
                None,
                f"key {key!r} is written twice in the same mapping (lines {seen[key]} and "
                f"{line}); YAML would keep only the last one: delete one of them",
                key_node.start_mark,
            )
        seen[key] = line
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def read_yaml(path: str | Path) -> Any:
    """The parsed content of a setup file (plain data), refusing repeated keys.

    Raises:
        SetupError: The file is missing, not YAML, or repeats a key in one mapping.
    """
    p = Path(path)
    if not p.is_file():
        raise SetupError(f"setup file {p} does not exist; see launch/README.md")
    try:
        return yaml.load(p.read_text(), Loader=_StrictLoader)  # noqa: S506 - a SafeLoader
    except _DuplicateKeyError as e:
        mark = e.problem_mark
        line = f"line {mark.line + 1}: " if mark is not None else ""
        raise SetupError(f"{p}: {line}{e.problem}") from e
    except yaml.YAMLError as e:
        raise SetupError(f"{p}: not valid YAML: {e}") from e


# -- values -------------------------------------------------------------------------------------


def describe(value: Any) -> str:
    """A found value for a message: its YAML kind and (shortened) text."""
    if value is None:
        return "nothing (an empty value)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    kind = {str: "the string", list: "a list", dict: "a mapping"}.get(
        type(value), f"a {type(value).__name__}"
    )
    text = repr(value)
    return f"{kind} {text if len(text) <= 60 else text[:57] + '...'}"


def is_number(value: Any) -> bool:
    """An int or float that is not a boolean."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def join_path(prefix: str, key: str | int) -> str:
    """``prefix.key`` (``prefix[i]`` for an index); ``key`` alone at the top level."""
    if isinstance(key, int):
        return f"{prefix}[{key}]"
    return f"{prefix}.{key}" if prefix else key


class Where:
    """Typed reads from one setup's plain data; every failure names the file and key path.

    Args:
        source: The file (or ``<setup>``) for messages.
    """

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, message: str) -> NoReturn:
        """Raise :class:`SetupError` for the key at ``path`` ('' = the whole file)."""
        raise SetupError(f"{self.source}: {path or 'top level'}: {message}")

    def expected(self, path: str, what: str, found: Any) -> NoReturn:
        """Raise ``<path>: expected <what>, found <value>``."""
        self.fail(path, f"expected {what}, found {describe(found)}")

    def mapping(self, value: Any, path: str, what: str = "a mapping (key: value)") -> dict:
        """``value`` if it is a mapping."""
        if not isinstance(value, dict):
            self.expected(path, what, value)
        return value

    def no_unknown(self, m: Mapping, allowed: Collection[str], prefix: str) -> None:
        """Fail on keys of ``m`` that are not in ``allowed``, suggesting the closest known key."""
        unknown = [k for k in m if k not in allowed]
        if not unknown:
            return
        where = f"in {prefix}" if prefix else "at the top level"
        notes = []
        for k in unknown:
            close = difflib.get_close_matches(str(k), sorted(allowed), n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            notes.append(f"{k!r}{hint}")
        listed = f"(allowed {where}: {', '.join(sorted(allowed))})"
        if len(unknown) == 1:
            self.fail(join_path(prefix, str(unknown[0])), f"unknown key {notes[0]} {listed}")
        self.fail(prefix, f"unknown keys {', '.join(notes)} {listed}")

    def get(
        self, m: Mapping, key: str, types: type | tuple[type, ...], prefix: str, default: Any = ...
    ) -> Any:
        """``m[key]`` checked against ``types`` (``default`` if absent; required if no default).

        A key that is present with no value (null) is an error, not the default.
        """
        path = join_path(prefix, key)
        types_t = types if isinstance(types, tuple) else (types,)
        if key not in m:
            if default is ...:
                self.fail(path, f"missing: this key is required ({type_names(types_t)})")
            return default
        value = m[key]
        if value is None:
            tail = "" if default is ... else f", or delete the line to use the default {default!r}"
            self.fail(path, f"has no value; write {type_names(types_t)}{tail}")
        if (isinstance(value, bool) and bool not in types_t) or not isinstance(value, types_t):
            self.expected(path, type_names(types_t), value)
        return value

    def number(
        self,
        m: Mapping,
        key: str,
        prefix: str,
        default: Any = ...,
        minimum: float | None = 0.0,
        strict: bool = True,
        unit: str = "",
    ) -> float:
        """A finite number ``> minimum`` (``>=`` if not ``strict``; no bound if None)."""
        if key not in m or m[key] is None:  # the default, or "missing" / "has no value"
            return self.get(m, key, (int, float), prefix, default)
        return self.check_number(m[key], join_path(prefix, key), minimum, strict, unit)

    def check_number(
        self,
        value: Any,
        path: str,
        minimum: float | None = None,
        strict: bool = True,
        unit: str = "",
    ) -> float:
        """``value`` as a float if it is a finite number within the bound."""
        unit = f" ({unit})" if unit else ""
        if minimum is None:
            what = f"a finite number{unit}"
        elif minimum == 0:
            what = f"a {'positive' if strict else 'non-negative'} number{unit}"
        else:
            what = f"a number {'>' if strict else '>='} {minimum:g}{unit}"
        if not is_number(value) or not math.isfinite(value):
            self.expected(path, what, value)
        if minimum is not None and (value <= minimum if strict else value < minimum):
            self.expected(path, what, value)
        return float(value)

    def integer(
        self,
        m: Mapping,
        key: str,
        prefix: str,
        lo: int,
        hi: int,
        default: Any = ...,
        unit: str = "",
    ) -> int:
        """An integer in ``[lo, hi]``."""
        value = self.get(m, key, int, prefix, default)
        if not lo <= value <= hi:
            unit = f" ({unit})" if unit else ""
            self.expected(join_path(prefix, key), f"an integer in [{lo}, {hi}]{unit}", value)
        return int(value)

    def numbers(self, value: Any, path: str, n: int, what: str) -> tuple[float, ...]:
        """A list of exactly ``n`` finite numbers (``what`` describes them, e.g. ``[x, y, z]``)."""
        if not isinstance(value, list):
            self.expected(path, f"a list of {n} numbers {what}", value)
        if len(value) != n:
            self.expected(path, f"a list of {n} numbers {what}", value)
        for i, v in enumerate(value):
            self.check_number(v, f"{path}[{i}]")
        return tuple(float(v) for v in value)

    def choice(
        self, m: Mapping, key: str, choices: Collection[str], prefix: str, default: Any = ...
    ) -> str:
        """A string among ``choices``."""
        value = self.get(m, key, str, prefix, default=default)
        if value not in choices:
            close = difflib.get_close_matches(value, list(choices), n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            self.expected(join_path(prefix, key), f"one of {', '.join(choices)}{hint}", value)
        return value


def type_names(types: tuple[type, ...]) -> str:
    """``(int, float)`` -> ``'a number'``; for messages."""
    if set(types) == {int, float}:
        return "a number"
    names = {
        int: "an integer",
        float: "a number",
        str: "a string",
        bool: "true or false",
        list: "a list",
        dict: "a mapping (key: value)",
    }
    return " or ".join(names.get(t, t.__name__) for t in types)
