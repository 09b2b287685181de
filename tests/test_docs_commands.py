"""The command examples of README.md and every page of docs/ are the program's (docs/python.md's code runs in
tests/test_python_api.py, docs/commands.md is generated): every `creditlens ...` line of a code block parses
as the program parses it, every option a page names (in a block or inline) exists, and every example runs as
written and prints the output its page shows.

An example is a code-block line starting with `creditlens ` (or `$ creditlens `); the lines after it, up to
a blank line or the next command, are its output as shown: an excerpt, found as consecutive lines of what
the command prints (a line `...` leaves lines out). A line with `[...]` is a synopsis: only its option names
are checked. A block right under a line `<!-- not run: why -->` (hidden when the page is rendered) is parsed,
not run: examples that need a model, a GPU, the reader's own files, or minutes.

Run on its own (`pytest tests/test_docs_commands.py -p no:xdist`), this file took 83 s of wall time and
26 CPU s (2026-12-07, 2 cores at load average 8-9): the README's block 18 s, every other page 1-4 s.
"""

from __future__ import annotations

import argparse
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from app.server.launch import build_parser as launcher_parser
from backend.cli import build_parser
from backend.ingest.native_writer import StepRecords, write_atomic
from backend.ingest.step_files import step_file_name
from tests.conftest import copy_store, run_cli_here

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "commands.md")]
COMMAND = re.compile(r"^(?:\$ )?(?:\.venv[\w-]*/bin/)?creditlens\s")
NOT_RUN = re.compile(r"<!-- not run: (\S.*?) -->[ \t]*\n\Z")  # the line right above a block's fence
SHELL = {">", ">>", "||", "&&", "|", ";", "2>&1"}


@dataclass
class Example:
    page: str
    line: int
    argv: list[str]
    shown: list[str] = field(default_factory=list)
    not_run: str | None = None  # why its block is parsed, not run (the page's `<!-- not run: why -->`)

    @property
    def synopsis(self) -> bool:
        return any(a.startswith(("[", "<")) or a.endswith("]") for a in self.argv)

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: creditlens {' '.join(self.argv)}"


def _argv(line: str) -> list[str]:
    words = shlex.split(COMMAND.sub("", line.strip(), count=1), comments=True)
    cut = next((i for i, w in enumerate(words) if w in SHELL), len(words))
    return words[:cut]


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix() if page.is_relative_to(ROOT) else page.name


def examples(pages: list[Path] = PAGES) -> list[Example]:
    found = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for block in re.finditer(r"^```([\w-]*)\n(.*?)^```", text, flags=re.S | re.M):
            if block.group(1) in ("python", "toml", "json", "text"):
                continue
            first = text.count("\n", 0, block.start(2)) + 1
            marker = NOT_RUN.search(text, 0, block.start())
            why = marker.group(1) if marker else None
            current = None
            lines = block.group(2).split("\n")
            i = 0
            while i < len(lines):
                start, line = i, lines[i]
                while line.endswith("\\") and i + 1 < len(lines):  # a command continued on the next line
                    i += 1
                    line = line[:-1] + " " + lines[i]
                i += 1
                if COMMAND.match(line.strip()):
                    current = Example(_name(page), first + start, _argv(line), not_run=why)
                    found.append(current)
                elif current is not None and current.synopsis and line.strip().startswith("["):
                    current.argv += _argv(line)  # a synopsis goes on
                elif current is not None and line.strip():
                    current.shown.append(line.rstrip())
                else:
                    current = None
    return found


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _options(name: str) -> set[str]:
    parser = launcher_parser() if name == "app" else _subparsers(build_parser())[name]
    return {o for a in parser._actions for o in a.option_strings}


def _inline_commands() -> list[tuple[str, list[str]]]:
    """`creditlens ...` in the pages' inline code (prose), each command of an `a && b` chain: (where,
    words)."""
    out = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in re.finditer(r"`([^`]*creditlens [^`]+)`", text):
            where = f"{_name(page)}:{text.count(chr(10), 0, m.start()) + 1}"
            words: list[str] | None = None
            for word in m.group(1).split():
                if re.fullmatch(r"(?:\.venv[\w-]*/bin/)?creditlens", word):
                    words = []
                    out.append((where, words))
                elif word in SHELL:
                    words = None
                elif words is not None:
                    words.append(word)
    return out


def test_the_pages_have_examples():
    found = examples()
    assert len(found) >= 20 and any(e.page == "README.md" for e in found)
    assert any(e.shown for e in found), "no example shows its output"
    assert len(_inline_commands()) >= 50


@pytest.mark.parametrize("example", [e for e in examples() if not e.synopsis], ids=str)
def test_every_example_parses_as_the_program_parses_it(example):
    parser = build_parser()
    try:
        args, rest = parser.parse_known_args(example.argv)
    except SystemExit:
        pytest.fail(f"{example}: the program refuses these arguments")
    assert not rest or getattr(args, "forwards_rest", False), f"{example}: unknown {rest}"


def test_every_option_a_page_names_exists():
    """Synopses, inline commands (`creditlens teacher-bench --run demo --estimators ...`) and examples."""
    commands = set(_subparsers(build_parser()))
    named = [(str(e), e.argv) for e in examples()] + _inline_commands()
    wrong = []
    for where, words in named:
        if not words or words[0] in ("COMMAND", "...") or words[0].startswith("-"):
            continue  # `creditlens COMMAND --help`, `creditlens --help`
        name = words[0]
        if name not in commands:
            wrong.append(f"{where}: no command {name!r}")
            continue
        options = _options(name)
        for word in words[1:]:
            option = word.strip("[]()`,.;").split("=", 1)[0]
            if option.startswith("--") and len(option) > 2 and option not in options:
                wrong.append(f"{where}: `creditlens {name}` has no option {option}")
    assert not wrong, "\n".join(wrong)


def _my_grpo_run(folder: Path) -> None:
    """What the README imports as `runs/my_grpo_run`: a run recorded step by step (the TRL recorder's native
    Parquet step files), here the demo run's first two steps."""
    import json  # noqa: PLC0415 - only here

    records = [json.loads(line) for line in (ROOT / "sample_runs" / "demo_run.jsonl").open()]
    folder.mkdir(parents=True)
    for step in (0, 1):
        rows = [r for r in records if r["step"] == step]
        channels = ("task", "format", "style")
        table, _ = StepRecords(
            step=step,
            prompts=[r["prompt"] for r in rows],
            responses=[r["response"] for r in rows],
            prompt_ids=[np.array(r["prompt_ids"]) for r in rows],
            token_ids=[np.array(r["token_ids"]) for r in rows],
            rewards={c: np.array([r["rewards"][c] for r in rows], np.float64) for c in channels},
            groups=np.array([r["group"] for r in rows]),
            tokens=[r["tokens"] for r in rows],
            per_token={k: [np.array(r[k]) for r in rows] for k in ("logprobs", "ref_logprobs", "entropies")},
        ).table()
        write_atomic(table, folder / step_file_name(step))


def _prints(example: Example, done) -> None:
    """The example's shown lines are consecutive lines of what it printed, in order; a line `...` stands for
    lines left out."""
    printed = [line.rstrip() for line in done.stdout.splitlines()]
    start = 0
    for chunk in _chunks(example.shown):
        n = len(chunk)
        at = next((i for i in range(start, len(printed) - n + 1) if printed[i : i + n] == chunk), None)
        assert at is not None, (
            f"{example}: the page shows\n" + "\n".join(chunk) + "\nthe command printed\n" + done.stdout
        )
        start = at + n


def _chunks(shown: list[str]) -> list[list[str]]:
    chunks: list[list[str]] = [[]]
    for line in shown:
        if line.strip() == "...":
            chunks.append([])
        else:
            chunks[-1].append(line)
    return [c for c in chunks if c]


def test_the_readme_runs_as_written(bundled_template, tmp_path, monkeypatch):
    """Every command of the README's block, in order, in a folder holding `runs/my_grpo_run`, on a store with
    the bundled runs (the default store: $CREDITLENS_DB). Before: its `explain` showed pos 3 '!', 0.5401 and
    0.27, numbers of a demo re-sampled since."""
    monkeypatch.setenv("CREDITLENS_DB", str(copy_store(bundled_template, tmp_path / "store" / "runs.duckdb")))
    monkeypatch.chdir(tmp_path)
    _my_grpo_run(tmp_path / "runs" / "my_grpo_run")
    readme = [e for e in examples() if e.page == "README.md"]
    assert [e.argv[0] for e in readme] == [
        "import",
        "estimators",
        "explain",
        "rollouts",
        "monitor",
        "compare-runs",
        "turns",
        "landed",
    ]
    for example in readme:
        done = run_cli_here(*example.argv)
        assert done.returncode in ((0, 1) if example.argv[0] == "monitor" else (0,)), (
            f"{example}\n{done.stderr}"
        )
        _prints(example, done)
        if example.argv[0] == "import":
            assert "detected format: native" in done.stderr and "imported 224 rollouts" in done.stdout
        if example.argv[0] == "rollouts":
            assert done.stdout.count('"rollout_id"') == 20
        if example.argv[0] == "compare-runs":  # the bundled pair recorded from TRL: beta is what differs
            assert [line.split() for line in done.stdout.splitlines() if line.startswith("config.")] == [
                ["config.beta", "0.0", "0.2"]
            ]


def _runs(example: Example) -> bool:
    return not example.synopsis and example.not_run is None


@pytest.mark.parametrize("doc", sorted({e.page for e in examples() if e.page != "README.md" and _runs(e)}))
def test_every_example_of_a_page_runs_as_written(doc, bundled_template, tmp_path, monkeypatch):
    """A page's examples in order (a later one may read what an earlier one wrote), in an empty folder that
    sees the repository's sample_runs/, on a copy of the bundled store as the default store
    ($CREDITLENS_DB): each exits 0 (`monitor`: 0 or 1, its code for a warning) and prints what the page shows
    after it."""
    monkeypatch.setenv("CREDITLENS_DB", str(copy_store(bundled_template, tmp_path / "store" / "runs.duckdb")))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sample_runs").symlink_to(ROOT / "sample_runs")  # the pages' paths are the repository's
    for example in [e for e in examples() if e.page == doc and _runs(e)]:
        done = run_cli_here(*example.argv)
        assert done.returncode in ((0, 1) if example.argv[0] == "monitor" else (0,)), (
            f"{example}\n{done.stderr}"
        )
        _prints(example, done)


def test_the_readme_lists_every_page_once():
    """The README's documentation table: one row per page of docs/, each page in one row."""
    rows = [
        line
        for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
        if line.startswith("| [")
    ]
    linked = [m for row in rows for m in re.findall(r"\]\((docs/[\w-]+\.md)\)", row.split(" | ")[0])]
    pages = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))
    assert sorted(linked) == pages and all(
        len(re.findall(r"\]\(docs/", r.split(" | ")[0])) <= 1 for r in rows
    )


def test_every_page_with_examples_runs_some_or_says_why_not():
    """Every example is run, or its block says why not; a page of docs/ whose examples all go unrun is one
    whose commands nobody checks."""
    found = [e for e in examples() if not e.synopsis]
    assert all(e.not_run is None or e.not_run.strip() for e in found)
    run = [e for e in found if e.not_run is None]
    assert {e.page for e in run} >= {"README.md", "docs/estimators.md", "docs/monitors.md", "docs/process.md"}


def test_a_stale_example_is_found(tmp_path):
    """The checks above on a page written wrong: an unknown option, a synopsis, an output."""
    page = tmp_path / "page.md"
    page.write_text(
        "```\n$ creditlens runs --jsn\nname\n  ...\nx\n\ncreditlens monitor --run R [--estimator E]\n```\n"
        "<!-- not run: needs a GPU -->\n```\ncreditlens resample --run R --rollout 0 --engine vllm\n```\n",
        encoding="utf-8",
    )
    found = examples([page])
    assert [(e.argv, e.shown, e.synopsis, e.not_run) for e in found] == [
        (["runs", "--jsn"], ["name", "  ...", "x"], False, None),
        (["monitor", "--run", "R", "[--estimator", "E]"], [], True, None),
        (["resample", "--run", "R", "--rollout", "0", "--engine", "vllm"], [], False, "needs a GPU"),
    ]
    assert _chunks(found[0].shown) == [["name"], ["x"]]
    with pytest.raises(SystemExit):
        build_parser().parse_args(found[0].argv)
    _prints(found[0], argparse.Namespace(stdout="name\nother\nx\n"))
    with pytest.raises(AssertionError, match=r"the page shows\s+x\s+the command printed"):
        _prints(found[0], argparse.Namespace(stdout="x\nname\n"))  # out of order


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_link_between_pages_resolves():
    """A relative link of README.md, CHANGELOG.md or a page of docs/ names a file that exists and, with
    `#anchor`, a heading of that file (a page merged or renamed leaves no dead link)."""
    sources = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
    dead = []
    for source in sources:
        text = source.read_text(encoding="utf-8")
        for target, anchor in re.findall(r"\]\(([^)#\s]*\.md|)(?:#([^)\s]+))?\)", text):
            path = (source.parent / target).resolve() if target else source
            if not path.is_file():
                dead.append(f"{_name(source)}: {target}")
                continue
            headings = re.findall(r"^#+ (.+)$", path.read_text(encoding="utf-8"), flags=re.M)
            if anchor and anchor not in {_anchor(h) for h in headings}:
                dead.append(f"{_name(source)}: {target}#{anchor}")
    assert not dead, "\n".join(dead)
