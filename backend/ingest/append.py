"""Which imports may add rollouts to a run that already exists: run names are never merged by accident.

An import that would add rollouts to an existing run is either
- a *continuation* of what the run holds: its path, a file or folder inside it, or a folder holding it was
  imported into the run before (`import DIR` again after the trainer wrote a step; `import --follow`), or
  some of its records are in the run already by record key (the same log grown, reached through a copy);
- or an *append on purpose* (`append=True`: `creditlens import --append`, the app's "Append" box).
Anything else is refused, saying how to append on purpose or to choose another name. Content the run has
already adds nothing and is never refused (imports stay idempotent).

Every addition must also match the run: the same tokenizer (the same model folder, or the simple
tokenization for both: one run is cut one way) and the same reward channels (a run whose rollouts score
different things cannot be normalized together). A mismatch is refused whatever asked for the append.
Channels are compared by the channels that hold values: a column that is NaN in every row of the addition
scores nothing, so it does not stand in for one of the run's channels (the refusal names it).
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from backend.core.errors import InputError
from backend.store import Store


class ImportRefused(InputError):
    """An import the run refuses. `detail` says why; the message adds what fixes it on the command line,
    `app_message` what fixes it in the app's import form (the app never gives command-line advice)."""

    def __init__(self, detail: str, cli_fix: str, app_fix: str):
        super().__init__(f"{detail}; {cli_fix}")
        self.detail = detail
        self.app_message = f"{detail}; {app_fix}"


def same_source(path: Path | None, recorded: Collection[str]) -> bool:
    """Whether `path` is, lies inside, or holds a path recorded by an earlier import of the run."""
    if path is None:
        return False
    here = path.resolve()
    for text in recorded:
        before = Path(text)
        if not before.is_absolute():  # recorded before paths were resolved: as seen from here
            before = before.resolve()
        if here == before or here.is_relative_to(before) or before.is_relative_to(here):
            return True
    return False


def check_follow(store: Store, run: str, directory: Path, append: bool) -> None:
    """Refuse to follow `directory` into an existing run it never fed, unless `append` asks for it."""
    if append or not store.has_run(run) or same_source(directory, store.import_sources(store.run_id(run))):
        return
    raise ImportRefused(
        f"run {run!r} already exists and {directory} was never imported into it; following it would merge "
        "the two",
        "choose another --run name, or pass --append to add its steps to this run on purpose",
        "choose another run name, or append to this run on purpose",
    )


def _tokenizer_text(tokenizer: str | None, model_dir: str | None) -> str:
    if model_dir:
        return f"the tokenizer of {model_dir}"
    return "the simple tokenization (no model)" if tokenizer in (None, "simple") else f"tokenizer {tokenizer}"


def empty_channels(store: Store, staging_id: int, notes, origin: str) -> list[str]:
    """A summary line for each channel the reader named (`notes.channels`) that holds no value in any staged
    row (a reward column that is NaN in every row): it makes no channel of the run."""
    valued = set(store.channels_of(staging_id))
    return [
        f"channel {name!r} is NaN in every row of {origin}: it holds no score, so it makes no channel"
        for name in (notes.channels if notes is not None else ())
        if name not in valued
    ]


def _channel_list(names: list[str]) -> str:
    quoted = ", ".join(repr(n) for n in names)
    return f"channel {quoted} is" if len(names) == 1 else f"channels {quoted} are"


def _same_model(a: str | None, b: str | None) -> bool:
    if not a or not b:
        return not a and not b
    return Path(a).resolve() == Path(b).resolve()


def check_addition(
    store: Store,
    run: str,
    run_id: int,
    staging_id: int,
    origin: str,
    added: int,
    skipped: int,
    source_path: Path | None,
    append: bool,
    tokenizer: str,
    model_dir: str | None,
    declared_channels: Collection[str],
) -> None:
    """Refuse (`ImportRefused`) adding the `added` staged rollouts of `origin` to run `run` unless the
    import continues the run's source or `append` asks for it, and unless the tokenizer and the channels
    match the run's. Channels are those of the staged scores, the ones holding values: `declared_channels`
    (the channels the reader named) only say which of the run's channels are in `origin` without any value
    (NaN in every row), to name them."""
    info = store.run_info(run)
    if not (append or skipped or same_source(source_path, store.import_sources(run_id))):
        have = store.con.execute("SELECT count(*) FROM rollouts WHERE run_id = ?", [run_id]).fetchall()[0][0]
        raise ImportRefused(
            f"run {run!r} already exists ({have} rollouts from {info['source'] or 'another import'}); "
            f"{origin} holds other content ({added} rollouts, none of them in the run), and importing it "
            "would merge the two",
            "choose another --run name, or pass --append to add them to this run on purpose (the model and "
            "the channels must match)",
            'choose another run name, or tick "Append to an existing run" to add them to this run on '
            "purpose (the model and the channels must match)",
        )
    if not _same_model(info["model_dir"], model_dir) or (not model_dir and info["tokenizer"] != tokenizer):
        run_tok = _tokenizer_text(info["tokenizer"], info["model_dir"])
        cli = f"--model {info['model_dir']}" if info["model_dir"] else "no --model"
        app = f"the model folder {info['model_dir']}" if info["model_dir"] else "an empty model folder"
        raise ImportRefused(
            f"run {run!r} was tokenized with {run_tok}, this import with "
            f"{_tokenizer_text(tokenizer, model_dir)}; one run is cut one way",
            f"import with {cli} to add to it, or choose another --run name",
            f"import with {app} to add to it, or choose another run name",
        )
    theirs = set(store.channels_of(run_id))
    ours = set(store.channels_of(staging_id))
    empty = sorted((set(declared_channels) & theirs) - ours)
    if theirs and empty and ours | set(empty) == theirs:
        raise ImportRefused(
            f"{origin}: {_channel_list(empty)} NaN in every one of the {added} rollouts it adds, so it "
            f"scores only {', '.join(sorted(ours)) or 'nothing'} while run {run!r} has the reward channels "
            f"{', '.join(sorted(theirs))} (channels are compared by the ones that hold values)",
            "check the reward function that writes it, or import this under another --run name",
            "check the reward function that writes it, or import this under another run name",
        )
    if theirs and ours != theirs:
        raise ImportRefused(
            f"run {run!r} has the reward channels {', '.join(sorted(theirs))}; {origin} has "
            f"{', '.join(sorted(ours)) or 'none'}; rollouts scored on other channels cannot share its groups "
            "and statistics",
            "choose another --run name (or name the same channels with --channels)",
            'choose another run name (or name the same channels under "Reward channels")',
        )
