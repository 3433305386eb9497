"""``robot-rl ... --help`` for every subcommand, top level and nested.

The subcommands are found by walking the help output itself (each help's ``subcommands``
box names the next level), so a new subcommand is checked without editing this file. Each
help is rendered in process through :func:`robot_rl.cli.main.main`, exactly as a user sees
it (plain-text layout: stdout is not a terminal). Checked for every subcommand:

- its help starts with its own one-line summary (not empty, not the docstring of a library
  type such as ``typing.Union``), and the parent's list of subcommands shows that line;
- every flag and positional argument has a help text of its own (not only tyro's
  ``(default: ...)`` / ``(required)`` hint).
"""

from __future__ import annotations

import contextlib
import io
import pathlib
import re
import typing
from dataclasses import dataclass, field

import pytest

from robot_rl.cli.main import main

# tyro appends one of these hints to every argument's help; a help that *starts* with one has
# no text of its own (the field has no docstring).
_HINT = re.compile(
    r"\((default|default if used|required|fixed to|repeatable|unset by default|optional)\b"
)
# A dataclass without a docstring gets one like "TrainConfig(run: pathlib.Path, ...)".
_AUTO_DATACLASS_DOC = re.compile(r"^\w+\(.*\)$")


def _library_summaries() -> set[str]:
    """First lines of docstrings that a help must never show (what tyro falls back to)."""
    objs = (typing.Union, typing.Optional, typing.Any, typing.Annotated, typing.Literal)
    objs += (object, type, tuple, list, dict, str, int, float, bool, pathlib.Path)
    out = set()
    for obj in objs:
        doc = (getattr(obj, "__doc__", None) or "").strip()
        if doc:
            out.add(doc.splitlines()[0].strip())
    return out


_LIBRARY = _library_summaries()


@dataclass
class Help:
    """One parsed ``--help`` output."""

    text: str
    description: str
    subcommands: dict[str, str] = field(default_factory=dict)
    """name -> the summary shown next to it in the ``subcommands`` box."""
    arguments: dict[str, str] = field(default_factory=dict)
    """invocation (``--steps INT``, ``PATH``) -> its help text."""
    group_descriptions: list[str] = field(default_factory=list)


def _render_help(argv: list[str]) -> str:
    """``robot-rl <argv> --help`` in process; its stdout."""
    out = io.StringIO()  # no terminal: plain ASCII boxes, no colour codes
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_info:
        main([*argv, "--help"])
    assert exit_info.value.code in (0, None), f"robot-rl {' '.join(argv)} --help failed"
    return re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue())


def _split_boxes(lines: list[str]) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """(lines before the first box, [(box title, box content lines)]).

    A plain-text box is a title line, a ``" ----- "`` rule, then content lines indented by
    two spaces.
    """
    rule = re.compile(r"^ -{3,} ?$")
    starts = [i for i in range(len(lines) - 1) if rule.match(lines[i + 1])]
    head = lines[: starts[0]] if starts else lines
    boxes = []
    for k, i in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(lines)
        boxes.append((lines[i].strip(), [ln[2:].rstrip() for ln in lines[i + 2 : end]]))
    return head, boxes


def _entries(content: list[str]) -> list[tuple[str, str]]:
    """(first line, continuation text) per entry: an entry starts at an unindented line."""
    entries: list[tuple[str, str]] = []
    for line in content:
        if not line.strip():
            continue
        if not line.startswith(" "):
            entries.append((line, ""))
        elif entries:
            first, rest = entries[-1]
            entries[-1] = (first, f"{rest} {line.strip()}".strip())
        else:
            raise AssertionError(f"help text the test cannot parse: {line!r}")
    return entries


def _parse(text: str) -> Help:
    """The usage line, description, subcommands and arguments of one plain-text help."""
    lines = text.splitlines()
    head, boxes = _split_boxes(lines)
    assert head and head[0].startswith("usage:"), f"no usage line in:\n{text}"
    assert boxes, f"no option boxes in:\n{text}"
    description = "\n".join(head[1:]).strip()
    help_ = Help(text=text, description=description)
    for title, content in boxes:
        if title == "subcommands":
            for line in content:
                m = re.match(r"^\s*• (\S+)(.*)$", line)
                if m:
                    name = m.group(1)
                    help_.subcommands[name] = m.group(2).strip()
                elif help_.subcommands and line.startswith("    "):
                    name = next(reversed(help_.subcommands))
                    help_.subcommands[name] = f"{help_.subcommands[name]} {line.strip()}".strip()
            continue
        rules = [i for i, ln in enumerate(content) if re.fullmatch(r"-{3,}", ln.strip())]
        if rules:  # a group description (or a mutex note) above a rule, then the entries
            help_.group_descriptions.append(" ".join(ln.strip() for ln in content[: rules[0]]))
            content = content[rules[0] + 1 :]
        for first, rest in _entries(content):
            invocation, *inline = re.split(r"\s{2,}", first, maxsplit=1)
            help_.arguments[invocation.strip()] = " ".join([*inline, rest]).strip()
    return help_


def _walk() -> dict[tuple[str, ...], Help]:
    """Every command path (``()`` is ``robot-rl`` itself) -> its parsed help."""
    found: dict[tuple[str, ...], Help] = {}
    todo: list[tuple[str, ...]] = [()]
    while todo:
        path = todo.pop(0)
        found[path] = _parse(_render_help(list(path)))
        todo += [(*path, name) for name in found[path].subcommands]
    return found


@pytest.fixture(scope="module")
def helps() -> dict[tuple[str, ...], Help]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COLUMNS", "100")  # one column of boxes, so the layout parses line by line
        return _walk()


def _problem_with_summary(summary: str) -> str | None:
    if not summary:
        return "no summary line"
    if summary in _LIBRARY or summary.startswith("Union type"):
        return f"a library type's docstring: {summary[:80]!r}..."
    if _AUTO_DATACLASS_DOC.match(summary):
        return f"the dataclass's generated signature: {summary[:80]!r}..."
    return None


def _cmd(path: tuple[str, ...]) -> str:
    return " ".join(("robot-rl", *path))


def test_the_walk_reaches_every_level(helps):
    """The walk finds the top-level commands and nested ones, and parses -h in every help."""
    top = helps[()].subcommands
    assert {"train", "dataset", "reward"} <= set(top), top
    assert {("dataset", "info"), ("reward", "train")} <= set(helps), sorted(helps)
    for path, h in helps.items():
        assert "-h, --help" in h.arguments, f"{_cmd(path)}: -h not parsed from\n{h.text}"


def test_every_subcommand_starts_with_its_own_summary(helps):
    problems = []
    for path, h in helps.items():
        summary = h.description.splitlines()[0].strip() if h.description else ""
        problem = _problem_with_summary(summary)
        if problem:
            problems.append(f"{_cmd(path)} --help: {problem}")
        if path:  # the parent's list shows the same summary
            listed = helps[path[:-1]].subcommands[path[-1]]
            problem = _problem_with_summary(listed)
            if problem or " ".join(listed.split()) != " ".join(summary.split()):
                problems.append(
                    f"{_cmd(path[:-1])} --help lists {path[-1]!r} as {listed[:80]!r}: "
                    f"{problem or f'not its summary {summary!r}'}"
                )
        for desc in h.group_descriptions:
            problem = _problem_with_summary(desc.strip()) if desc.strip() else None
            if problem:
                problems.append(f"{_cmd(path)} --help: an option group shows {problem}")
    assert not problems, "\n".join(problems)


def test_every_flag_has_a_help_text(helps):
    problems = []
    for path, h in helps.items():
        for invocation, text in h.arguments.items():
            if not text or _HINT.match(text):
                problems.append(f"{_cmd(path)} {invocation}: no help text ({text!r})")
    assert not problems, "\n".join(problems)
