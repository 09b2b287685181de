"""The command line as a command-line user meets it (issue 42 item 10): a mistyped store path creates nothing,
output piped into `head` ends quietly, errors name what the user typed (an option, a Python keyword), and
every option says what it does and its default."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

import creditlens
from backend.cli import reference
from backend.store import NoSuchStore
from tests.conftest import make_records, run_cli_here, write_jsonl

ROOT = Path(__file__).resolve().parents[2]

# Every command that reads or changes an existing store, with the arguments it needs to get that far.
STORE_COMMANDS = [
    ["runs"],
    ["runs", "--json"],
    ["delete", "--run", "x"],
    ["main-channel", "--run", "x"],
    ["main-channel", "--run", "x", "all"],
    ["token-classes", "--run", "x"],
    ["checkpoints", "--run", "x"],
    ["estimate", "--run", "x", "--estimator", "grpo", "--out", "{tmp}/x.parquet"],
    ["explain", "--run", "x", "--rollout", "0", "--estimator", "grpo"],
    ["logged-gap", "--run", "x"],
    ["rollouts", "--run", "x", "--json"],
    ["trends", "--run", "x", "--json"],
    ["monitor", "--run", "x"],
    ["cliff", "--run", "x"],
    ["verify-steps", "--run", "x"],
    ["teacher-bench", "--run", "x"],
    ["score", "--run", "x"],
    ["resample", "--run", "x", "--rollout", "0", "--positions", "1"],
    ["teacher", "--run", "x"],
    ["model-credit", "--run", "x", "--method", "oar_p"],
]


@pytest.mark.parametrize("command", STORE_COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_a_missing_store_is_named_and_nothing_is_created(command, tmp_path):
    """Before: `creditlens runs --db typo.duckdb` created an empty 800 KB store there and exited 0."""
    missing = tmp_path / "new_folder" / "typo.duckdb"
    args = [a.replace("{tmp}", str(tmp_path)) for a in command]
    done = run_cli_here(*args, "--db", missing)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert f"error: {missing}: no such store; `creditlens init --db {missing}` creates one" in done.stderr
    assert "Traceback" not in done.stderr
    assert not missing.exists() and not missing.parent.exists()


def test_only_init_and_import_create_a_store(tmp_path):
    native = write_jsonl(tmp_path / "r.jsonl", make_records(n_groups=1))
    imported = tmp_path / "imported" / "runs.duckdb"
    assert run_cli_here("import", native, "--db", imported, "--run", "r", "--quiet").returncode == 0
    assert imported.exists()
    assert run_cli_here("runs", "--db", imported).returncode == 0


def test_the_python_api_refuses_a_missing_store(tmp_path):
    """Before: `creditlens.open("typo.duckdb").runs()` created the store and returned a frame without
    columns."""
    missing = tmp_path / "typo.duckdb"
    with pytest.raises(NoSuchStore, match=f"{missing}: no such store"):
        creditlens.open(missing)
    assert not missing.exists()


@pytest.mark.parametrize("command", [["estimators"], ["estimators", "--json"], ["--help"]])
def test_output_into_a_closed_pipe_ends_quietly(command):
    """`creditlens estimators | head -1`: the reader is gone before the command writes. Before: a
    BrokenPipeError traceback (exit 1); now nothing on stderr and 141, as a shell reports `yes | head`."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "backend.cli", *command],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.close()  # the reader exits before the first write (the command takes ~1 s to start)
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=120)
    assert "Traceback" not in err and "BrokenPipe" not in err and "Exception ignored" not in err, err
    assert code == 141 or (command == ["--help"] and code == 0)


@pytest.fixture
def small_db(tmp_path) -> Path:
    db = tmp_path / "runs.duckdb"
    native = write_jsonl(tmp_path / "r.jsonl", make_records(n_groups=2))
    assert run_cli_here("import", native, "--db", db, "--run", "r", "--quiet").returncode == 0
    return db


def test_limit_and_offset_errors_name_the_option(small_db):
    """Before: `--limit -5` said `page: limit must be at least 1 and offset at least 0`."""
    done = run_cli_here("rollouts", "--db", small_db, "--run", "r", "--json", "--limit", "-5")
    assert done.returncode == 2
    assert "argument --limit: expected a whole number of at least 1, got '-5'" in done.stderr
    done = run_cli_here("rollouts", "--db", small_db, "--run", "r", "--json", "--offset=-1")
    assert done.returncode == 2 and "argument --offset: expected a whole number of at least 0" in done.stderr
    run = creditlens.open(small_db).run("r")
    with pytest.raises(ValueError, match=r"^limit=-5: at least 1 row"):
        run.rollouts(limit=-5)
    with pytest.raises(ValueError, match=r"^offset=-2: at least 0"):
        run.rollouts(offset=-2)


def test_python_keyword_arguments_are_named_as_keywords(small_db, tmp_path):
    """Before: `run.estimate("grpo", epsilon=-1)` said `--set: ...` and `channel="zz"` said `--channel zz`."""
    run = creditlens.open(small_db).run("r")
    with pytest.raises(ValueError) as bad_value:
        run.estimate("grpo", epsilon=-1.0)
    assert str(bad_value.value).startswith("grpo keyword arguments: GRPOConfig.epsilon must be in")
    with pytest.raises(ValueError) as unknown:
        run.estimate("grpo", nope=1)
    assert str(unknown.value).startswith("grpo keyword arguments: estimator 'grpo' has no parameter 'nope'")
    for call in (lambda: run.estimate("grpo", channel="zz"), lambda: run.rollouts("grpo", channel="zz")):
        with pytest.raises(ValueError) as channel:
            call()
        assert str(channel.value).startswith("channel='zz': run 'r' has no scores for channel 'zz'")
    for message in (bad_value, unknown, channel):
        assert "--" not in str(message.value)
    # the command line keeps its own words
    out = tmp_path / "x.parquet"
    done = run_cli_here(
        "estimate", "--db", small_db, "--run", "r", "--estimator", "grpo", "--set", "epsilon=-1", "--out", out
    )
    assert done.returncode == 2 and "error: --set: GRPOConfig.epsilon must be in" in done.stderr


def test_where_shows_one_quoted_argument():
    usage = reference._usage(reference._subcommands(reference.build_parser())["rollouts"])
    assert "[--where 'length>=50']" in usage and "COL OP VALUE]" not in usage


def _options():
    for name, sub in reference._subcommands(reference.build_parser()).items():
        for action in sub._actions:
            if not isinstance(action, argparse._HelpAction):
                yield name, action


def test_every_option_says_what_it_does_and_its_default():
    """Before: `import path`, `--descending`, `--poll`, resample's `--samples`, `--temperature`, `--top-p`,
    `--seed` and `estimate --db`, among others, had no help or did not say their default."""
    no_help = [f"{name} {action.dest}" for name, action in _options() if not (action.help or "").strip()]
    assert not no_help, f"options without help: {no_help}"
    flags = (argparse._StoreTrueAction, argparse._AppendAction)  # off / none unless given
    silent = [
        f"{name} {action.option_strings[0]}"
        for name, action in _options()
        if action.option_strings
        and not action.required
        and action.default is not None
        and not isinstance(action, flags)
        and "default" not in action.help
    ]
    assert not silent, f"options whose help does not give the default: {silent}"


def test_the_reference_lists_the_app_commands_options():
    """Before: docs/commands.md showed `creditlens app` with no option at all."""
    section = reference.reference().split("## creditlens app\n", 1)[1]
    for option in ("--db DB", "--port PORT", "--host HOST", "--token TOKEN", "--read-only", "--import-root"):
        assert option in section
    assert "(default 8501)" in section
