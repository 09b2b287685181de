"""The importer registry (`backend.ingest.formats`) is the one list of formats: the docs name each, and
detection, `--format`, the sniffer and the import itself all go through it."""

import json
import re
from pathlib import Path

import pytest

from backend.cli.main import build_parser
from backend.core.errors import InputError
from backend.ingest import FORMATS, detect_format, formats, import_path, sniff
from backend.ingest.sources import iter_jsonl

DOCS = Path(__file__).resolve().parents[3] / "docs" / "importing.md"


def _documented_formats() -> list[str]:
    """The `--format` names of docs/importing.md's format list (its lines "- `NAME`: ...")."""
    text = DOCS.read_text()
    section = text[text.index("## Formats") :]
    section = section[: section.index("\n## ", 1)] if "\n## " in section[1:] else section
    return re.findall(r"^- `([a-z-]+)`:", section, flags=re.MULTILINE)


def test_the_docs_name_every_registered_format_and_no_other():
    assert _documented_formats() == list(formats.names())


def test_the_command_line_offers_the_registry():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    choices = next(a for a in sub.choices["import"]._actions if a.dest == "format").choices
    assert tuple(choices) == FORMATS == formats.names()


def test_registering_a_name_twice_or_an_unknown_option_raises():
    with pytest.raises(ValueError, match="registered twice"):
        formats.register(formats.get("verl"))
    toy = formats.FormatSpec(
        "toy-x",
        "toy",
        "toy",
        rank=9,
        files=lambda p: [p],
        folder=bool,
        file=bool,
        options=frozenset({"colour"}),
    )
    with pytest.raises(ValueError, match="unknown options"):
        formats.register(toy)
    assert "toy-x" not in formats.names()


def test_an_unknown_format_lists_the_known_ones(store, tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text("{}\n")
    with pytest.raises(InputError, match="unknown format 'csv'; use one of native, verl, trl"):
        import_path(store, path, "r", fmt="csv")


def _toy_records(files, context):
    for path in files:
        for where, obj in iter_jsonl(path, context.progress):
            yield where, {"prompt": obj["ask"], "response": obj["toy"], "rewards": {"task": obj["score"]}}


@pytest.fixture
def toy_format(monkeypatch):
    """A format registered for one test: detected by its `.toy` files and its first record's `toy`."""
    is_toy = lambda obj: isinstance(obj, dict) and "toy" in obj  # noqa: E731
    spec = formats.FormatSpec(
        "toy",
        "toy log",
        "JSONL toy logs (ask, toy, score)",
        rank=-1,
        files=lambda p: [p],
        folder=lambda p: False,
        file=lambda p: p.suffix == ".toy",
        record=is_toy,
        reader=_toy_records,
    )
    monkeypatch.setitem(formats._REGISTRY, "toy", spec)
    return spec


def _write_toy(path: Path) -> Path:
    rows = [{"ask": "2+2?", "toy": f"answer {k}", "score": float(k % 2)} for k in range(4)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_detection_and_import_go_through_the_registry(store, tmp_path, toy_format):
    path = _write_toy(tmp_path / "run.toy")
    assert detect_format(path) == "toy"
    report = import_path(store, path, "detected")
    assert report.format == "toy" and report.records == 4  # what the CLI prints as "detected format"
    assert import_path(store, path, "chosen", fmt="toy").records == 4  # --format toy


def test_the_sniffer_names_a_registered_format(tmp_path, toy_format):
    path = _write_toy(tmp_path / "run.jsonl")
    with pytest.raises(InputError, match=r"JSONL file \(toy log\); --format verl reads .*; use --format toy"):
        sniff.check_format(path, "verl")
    sniff.check_format(path, "toy")  # fits: no error


def test_options_name_the_formats_that_take_them(store, tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"prompt": "p", "response": "r", "rewards": {"task": 1}}\n')
    with pytest.raises(InputError, match="--channels applies to trl and verl imports"):
        import_path(store, path, "r", channels=["task"])
    with pytest.raises(InputError, match="--group-size applies to trl imports"):
        import_path(store, path, "r", group_size=2)
