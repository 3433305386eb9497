"""Every ``robot-rl`` command shown in the README and the docs parses: its subcommand and options
exist and the config accepts the values (``robot_rl.cli.main.parse``: nothing runs).

A usage summary (``[--opt a|b]`` optional groups, ``...``) is checked as written without its
optional groups and once more with every group (first alternative each). What the commands do
is tested where the workflows are (``tests/test_cli.py``, ``tests/drivers/test_record.py``,
``tests/learner/``, ``tests/test_programmatic.py`` for the README's Python); the docs site
builds with ``mkdocs build --strict`` in ``scripts/test.sh``.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from robot_rl.cli.main import parse

REPO = Path(__file__).resolve().parents[1]
PAGES = [
    REPO / "README.md",
    *sorted((REPO / "docs").rglob("*.md")),
    REPO / "launch" / "README.md",  # included in the site (docs/setups.md)
    REPO / "drivers" / "CONTRACT.md",  # included in the site (docs/ros2_contract.md)
]
COMMAND = re.compile(r"^(?:\.venv/bin/)?robot-rl\s+(.*)$")


def _shell_blocks(text: str) -> list[str]:
    return re.findall(r"```(?:bash|sh|console)?\n(.*?)```", text, re.S)


def shown_commands() -> list[tuple[str, str]]:
    """(page, command line after ``robot-rl``) for every command in a shell block."""
    found: list[tuple[str, str]] = []
    for page in PAGES:
        for block in _shell_blocks(page.read_text()):
            block = re.sub(r"\\\n\s*", " ", block)  # backslash continuations
            block = re.sub(r"\n\s+(?=\[)", " ", block)  # a usage summary wrapped onto `[...]` lines
            for line in block.splitlines():
                for part in line.split("&&"):
                    part = part.strip()
                    if "robot-rl" in part:
                        part = part.split(" #")[0].strip()
                    m = COMMAND.match(part)
                    if m:
                        found.append((str(page.relative_to(REPO)), m.group(1)))
    return found


def _first_alternative(group: str) -> str:
    return group.split("|")[0].replace("...", "").strip()


PLACEHOLDER = re.compile(r"^[A-Z]{1,6}$")  # N, P, SECRET, T L H W: a value to fill in
INPUTS = ("--demos",)  # options whose file must exist when the config is made


FILL = {"P": "0.5"}  # a probability; any other placeholder is a count or size


def _fill(args: list[str]) -> list[str]:
    return [FILL.get(a, "1") if PLACEHOLDER.match(a) else a for a in args]


def variants(command: str) -> list[list[str]]:
    """The command without its optional groups, and with all of them (first alternatives;
    placeholders such as ``N`` filled with 1; a pattern such as ``[--sac.*]`` is not an option)."""
    groups = [g for g in re.findall(r"\[([^\]]*)\]", command) if "*" not in g]
    required = re.sub(r"\[[^\]]*\]", " ", command).replace("...", " ")
    required_args = shlex.split(_first_alternative(required) if "|" in required else required)
    out = [_fill(required_args)]
    if groups:
        extra = [a for g in groups for a in shlex.split(_first_alternative(g))]
        out.append(_fill(required_args + extra))
    return out


CASES = [
    pytest.param(args, id=f"{page}: {' '.join(args)}"[:150])
    for page, command in shown_commands()
    for args in variants(command)
]


def test_the_docs_show_commands() -> None:
    pages = {page for page, _ in shown_commands()}
    assert "README.md" in pages and len(CASES) > 40, pages


@pytest.mark.parametrize("args", CASES)
def test_a_command_shown_in_the_docs_parses(
    args: list[str], capsys, tmp_path: Path, monkeypatch
) -> None:
    # Run where the docs' commands run: the repo's setups at launch/, the inputs they name there.
    (tmp_path / "launch").symlink_to(REPO / "launch")
    for flag, value in zip(args, args[1:], strict=False):
        if flag in INPUTS:
            (tmp_path / value).mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(tmp_path)
    try:
        cfg = parse(args)
    except SystemExit as e:  # tyro printed the usage and what was wrong
        pytest.fail(f"robot-rl {' '.join(args)} does not parse:\n{capsys.readouterr().err}")
        raise AssertionError from e
    assert cfg is not None
