"""Every command line the README and docs/ show still names a command and options that exist:
each one's ``--help`` runs, and each ``--flag`` it uses is one of its command's options (or
of the ``octune`` group's, or a family's shape key where the command reads shapes). A renamed
flag breaks the build here, not a reader's first try.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from octune.catalogue.registry import families
from octune.cli import app

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
#: Code as the pages write it: fenced blocks and inline spans.
CODE = re.compile(r"```[^\n]*\n(.*?)```|`([^`\n]+)`", re.DOTALL)
#: Commands that read a family's shape keys after the kernel's name (``cli/shape_options.py``).
SHAPE_COMMANDS = {"tune", "best", "lookup"}


def command_lines() -> list[tuple[str, str]]:
    """(page, command line) for every ``octune ...`` in the pages' code."""
    found = []
    for page in PAGES:
        for block, span in CODE.findall(page.read_text(encoding="utf-8")):
            text = re.sub(r"\\\n\s*", " ", block or span)  # continued lines are one command
            for line in text.splitlines():
                for match in re.finditer(r"(?:^|[\s$(])octune ([^|;&#]*)", line):
                    found.append((page.name, "octune " + match.group(1).strip()))
    return found


def resolve(root: Any, words: list[str]) -> tuple[list[str], Any] | None:
    """The command path the words name and its command; None for prose (``octune tunes``).
    Click's objects as Typer builds them (typer vendors its own click).
    """
    path: list[str] = []
    command = root
    for word in words:
        if word not in getattr(command, "commands", {}):
            break
        command = command.commands[word]
        path.append(word)
    return (path, command) if path else None


def options(*commands: Any) -> set[str]:
    return {
        name
        for command in commands
        for param in command.params
        for name in (*param.opts, *param.secondary_opts)
    }


ROOT = typer.main.get_command(app)
SHAPE_KEYS = {f"--{key}" for family in families().values() for key in family.problem.keys}
LINES = [
    (page, line, found)
    for page, line in command_lines()
    if (found := resolve(ROOT, line.split()[1:])) is not None
]


def test_the_pages_show_many_command_lines() -> None:
    """The extraction itself: a page layout change must not silently leave nothing to check."""
    assert len(LINES) >= 60
    assert len({" ".join(path) for _, _, (path, _) in LINES}) >= 15


@pytest.mark.parametrize("path", sorted({tuple(path) for _, _, (path, _) in LINES}), ids=" ".join)
def test_each_command_shown_has_help(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [*path, "--help"])
    assert result.exit_code == 0, result.output


def test_each_flag_shown_is_an_option_of_its_command() -> None:
    wrong = []
    for page, line, (path, command) in LINES:
        known = options(ROOT, command) | {"--help"}
        if path[0] in SHAPE_COMMANDS:
            known |= SHAPE_KEYS
        shown = re.sub(r"\S*<TAB>", "", line)  # a completion shown half typed: `--gr<TAB>`
        for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", shown):
            if flag not in known and f"--no-{flag[2:]}" not in known:
                wrong.append(f"{page}: {flag} in `{line}`")
    assert not wrong, "\n".join(wrong)
