"""Docs stay true to the code: every CLI command is documented, README commands match CI."""

from __future__ import annotations

import re
from pathlib import Path

import typer

from birdrl.cli import app

ROOT = Path(__file__).resolve().parent.parent


def _commands(typer_app: typer.Typer, prefix: str = "") -> list[str]:
    out = []
    for cmd in typer_app.registered_commands:
        name = cmd.name or (cmd.callback.__name__.replace("_", "-") if cmd.callback else "")
        out.append(f"{prefix}{name}")
    for group in typer_app.registered_groups:
        out.extend(_commands(group.typer_instance, f"{prefix}{group.name} "))
    return out


def test_every_command_is_documented() -> None:
    text = (ROOT / "docs" / "cli.md").read_text()
    commands = _commands(app)
    assert "pool bench" in commands
    for command in commands:
        assert f"`birdrl {command}`" in text, f"docs/cli.md does not document `birdrl {command}`"


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    blocks = re.findall(r"```bash\n(.*?)\n```", readme, flags=re.S)
    test_commands = [b.strip() for b in blocks if "pytest" in b]
    assert test_commands, "README has no test command"
    assert test_commands[0] in ci


def test_docs_links_resolve() -> None:
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#]+\.md)\)", page.read_text()):
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"
