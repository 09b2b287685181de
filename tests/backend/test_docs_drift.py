"""The docs that list what the code has are checked against the code: the command reference is generated
from argparse (docs/commands.md), and docs/estimators.md's table of all registered estimators names
exactly the registry's estimators."""

from __future__ import annotations

import re
from pathlib import Path

from backend.cli import reference
from backend.estimators import registry

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_the_command_reference_is_generated_from_the_parser():
    written = (DOCS / "commands.md").read_text(encoding="utf-8")
    assert written == reference.reference(), (
        "docs/commands.md is stale: run `python -m backend.cli.reference > docs/commands.md`"
    )


def test_the_reference_names_every_command_and_option():
    text = reference.reference()
    for name, sub in reference._subcommands(reference.build_parser()).items():
        assert f"## creditlens {name}\n" in text
        for action in sub._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert option in text, f"{name} {option}"


def _documented_estimators() -> list[str]:
    text = (DOCS / "estimators.md").read_text(encoding="utf-8")
    table = text.split("## All registered estimators", 1)[1]
    return [n for n in re.findall(r"^\| (\w+) \|", table, flags=re.M) if n != "name"]


def test_the_docs_list_every_registered_estimator_and_no_other():
    documented = _documented_estimators()
    assert len(documented) == len(set(documented)), "an estimator is listed twice in docs/estimators.md"
    missing = sorted(set(registry.names()) - set(documented))
    extra = sorted(set(documented) - set(registry.names()))
    assert not missing, f"docs/estimators.md 'All registered estimators' lacks {', '.join(missing)}"
    assert not extra, f"docs/estimators.md lists {', '.join(extra)}, which the registry does not have"
