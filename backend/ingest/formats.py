"""The importer registry: one `FormatSpec` per import format, the only list of formats.

`creditlens import` (`--format` and its detection), the format sniffer (`sniff.check_format`), `--follow`
and the Runs page all read it. A spec says how to recognise the format (a folder, a file, the first
record of a JSONL file, the columns of a Parquet file), which files of a path it reads, the reader that
turns them into native records, and the options it accepts. Adding a format: its reader module and one
`register(FormatSpec(...))` here.

Detection tries the specs by `rank`, lowest first: layouts with their own file names or fields (the
token dumps) before the general ones, whose tests would also accept them (a NeMo-RL folder is a folder
of JSONL files, as a verl dump is).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from backend.core.errors import InputError
from backend.ingest import token_dumps
from backend.ingest.sources import (
    PARQUET_ERRORS,
    Progress,
    ReadNotes,
    first_record,
    jsonl_step_files,
    trl_files,
    verl_files,
    verl_records,
)
from backend.ingest.step_files import native_files
from backend.ingest.tokenize import Tokenizer
from backend.ingest.trl import trl_records

JSON_SUFFIXES = (".jsonl", ".json")


@dataclass
class ReadContext:
    """What a reader may use besides its files: progress, the import summary's notes, the run's tokenizer
    and the options the command line passed (each reader reads only those its spec accepts)."""

    progress: Progress | None
    notes: ReadNotes
    tokenizer: Tokenizer
    channels: list[str] | None = None
    group_size: int | None = None


Reader = Callable[[list[Path], ReadContext], Iterator[tuple[str, dict]]]


@dataclass(frozen=True)
class FormatSpec:
    name: str
    """What `--format` takes."""
    title: str
    """What a file of this format is, in the sniffer's words ("verl rollout dump")."""
    reads: str
    """What `--format NAME` reads, in the sniffer's words."""
    rank: int
    """Detection order, lowest first (see the module docstring)."""
    files: Callable[[Path], list[Path]]
    """The files of a path (a file: itself) this format reads, in step order."""
    folder: Callable[[Path], bool]
    """A folder holds this format."""
    file: Callable[[Path], bool]
    """A file holds this format (detection)."""
    record: Callable[[object], bool] | None = None
    """The first record of a JSONL file is this format's (the sniffer)."""
    columns: Callable[[list[str]], bool] | None = None
    """A Parquet file with these columns is this format's (detection and the sniffer)."""
    reader: Reader | None = None
    """Native records from the files; None: the vectorized native paths (`backend.ingest.native`)."""
    containers: tuple[str, ...] = ("JSONL",)
    options: frozenset[str] = frozenset()
    """The `import_path` options this format reads beyond the common ones (see OPTIONS)."""
    follow: bool = False
    """`--follow` reads folders of this format."""
    unscorable_ok: bool = False
    """A record may have no score at all (the reader counts such rollouts as unscorable)."""

    def detect(self, path: Path) -> bool:
        return self.folder(path) if path.is_dir() else self.file(path)

    @property
    def counts_rows(self) -> bool:
        """Progress counts rows (a Parquet-only format), not bytes."""
        return "JSONL" not in self.containers


OPTIONS = {
    "channels": "--channels applies to {formats} imports (native records name their channels in 'rewards')",
    "group_size": "--group-size applies to {formats} imports (verl groups come from uid or prompt)",
}
"""Options only some formats take: the error for a format that does not."""

_REGISTRY: dict[str, FormatSpec] = {}


def register(spec: FormatSpec) -> FormatSpec:
    if spec.name in _REGISTRY:
        raise ValueError(f"import format {spec.name!r} is registered twice")
    unknown = spec.options - OPTIONS.keys()
    if unknown:
        raise ValueError(
            f"import format {spec.name!r}: unknown options {sorted(unknown)}; known: {list(OPTIONS)}"
        )
    _REGISTRY[spec.name] = spec
    return spec


def names() -> tuple[str, ...]:
    """Every format, in registration order: the command line's choices and the Runs page's list."""
    return tuple(_REGISTRY)


def get(name: str, path: Path | str = "") -> FormatSpec:
    """The spec of `name`; an unknown name raises `InputError` listing the known ones."""
    if name not in _REGISTRY:
        raise InputError(f"{path}: unknown format {name!r}; use one of {', '.join(_REGISTRY)}")
    return _REGISTRY[name]


def in_detection_order(among: tuple[str, ...] | None = None) -> list[FormatSpec]:
    specs = [s for s in _REGISTRY.values() if among is None or s.name in among]
    return sorted(specs, key=lambda s: s.rank)


def followed() -> tuple[str, ...]:
    return tuple(s.name for s in _REGISTRY.values() if s.follow)


def detect(path: Path, among: tuple[str, ...] | None = None) -> FormatSpec:
    """The format of a file or folder: the first spec (by rank) that recognises it; `among` limits the
    candidates. Raises `InputError` saying what would be recognised when none does."""
    if not path.exists():
        raise InputError(f"{path}: no such file or directory")
    for spec in in_detection_order(among):
        if spec.detect(path):
            return spec
    if path.is_dir():
        raise InputError(
            f"{path}: a directory with no files of a known format (<step>.jsonl, completions_*.parquet, "
            "native step_<N>.parquet or .jsonl, train_data_step<N>.jsonl, token_exports/); pass --format "
            "or a file"
        )
    if path.suffix == ".parquet":
        names = parquet_columns(path)
        raise InputError(f"{path}: unknown Parquet layout (columns {names[:8]}); expected native or TRL")
    raise InputError(f"{path}: unknown format; pass --format (`creditlens import --help` lists them)")


def check_options(path: Path, spec: FormatSpec, **given) -> None:
    """Refuse an option (not None) that `spec` does not read, naming the formats that do."""
    for option, value in given.items():
        if value is not None and option not in spec.options:
            takers = sorted(s.name for s in _REGISTRY.values() if option in s.options)
            formats = " and ".join([", ".join(takers[:-1]), takers[-1]] if len(takers) > 1 else takers)
            raise InputError(f"{path}: " + OPTIONS[option].format(formats=formats))


# --- the tests the specs are built from ----------------------------------------------------------------


def parquet_columns(path: Path) -> list[str]:
    try:
        return pq.read_schema(path).names
    except PARQUET_ERRORS as exc:
        raise InputError(f"{path}: not a readable Parquet file ({exc})") from None


def _parquet_file(columns: Callable[[list[str]], bool]) -> Callable[[Path], bool]:
    return lambda path: path.suffix == ".parquet" and columns(parquet_columns(path))


def _jsonl_file(record: Callable[[object], bool]) -> Callable[[Path], bool]:
    return lambda path: path.suffix in JSON_SUFFIXES and record(first_record(path))


def _verl_record(obj: object) -> bool:
    return isinstance(obj, dict) and "input" in obj and "output" in obj


def _native_record(obj: object) -> bool:
    return isinstance(obj, dict) and {"prompt", "response", "rewards"} <= obj.keys() and not _verl_record(obj)


def _native_file(path: Path) -> bool:
    """Parquet with a `response` column; else JSONL (or any file whose first record has a `response`)
    unless the first record is verl's."""
    if path.suffix == ".parquet":
        return "response" in parquet_columns(path)
    first = first_record(path)
    if _verl_record(first):
        return False
    return (isinstance(first, dict) and "response" in first) or path.suffix in JSON_SUFFIXES


def _verl_folder(path: Path) -> bool:
    # a folder whose first record is native is native's (it ranks first), whatever its other files hold
    return bool(jsonl_step_files(path))


def _dump_record(name: str) -> Callable[[object], bool]:
    return lambda obj: token_dumps.record_format(obj) == name


def _dump_reader(read) -> Reader:
    return lambda files, ctx: read(files, ctx.progress, ctx.tokenizer)


def _verl_reader(files: list[Path], ctx: ReadContext) -> Iterator[tuple[str, dict]]:
    return verl_records(files, ctx.progress, ctx.notes, ctx.channels)


def _trl_reader(files: list[Path], ctx: ReadContext) -> Iterator[tuple[str, dict]]:
    return trl_records(files, ctx.progress, ctx.notes, ctx.channels, ctx.group_size, ctx.tokenizer)


# --- the formats ---------------------------------------------------------------------------------------

register(
    FormatSpec(
        "native",
        "native Credit Lens run",
        "one JSONL or Parquet file of native records (prompt, response, rewards), or a folder of native "
        "Parquet or JSONL step files",
        rank=4,
        files=native_files,
        folder=lambda path: bool(native_files(path)),
        file=_native_file,
        record=_native_record,
        columns=lambda names: "response" in names,
        containers=("JSONL", "Parquet"),
        follow=True,
    )
)
register(
    FormatSpec(
        "verl",
        "verl rollout dump",
        "JSONL verl rollout dumps (<step>.jsonl with input, output, score)",
        rank=5,
        files=verl_files,
        folder=_verl_folder,
        file=lambda path: path.suffix != ".parquet" and _verl_record(first_record(path)),
        record=_verl_record,
        reader=_verl_reader,
        options=frozenset({"channels"}),
        follow=True,
        unscorable_ok=True,
    )
)
register(
    FormatSpec(
        "trl",
        "TRL completions log",
        "Parquet TRL completion logs (completions_*.parquet)",
        rank=3,
        files=trl_files,
        folder=lambda path: bool(trl_files(path)),
        file=_parquet_file(lambda names: "completion" in names),
        columns=lambda names: "completion" in names,
        reader=_trl_reader,
        containers=("Parquet",),
        options=frozenset({"channels", "group_size"}),
        follow=True,
        unscorable_ok=True,
    )
)
register(
    FormatSpec(
        "nemo-rl",
        "NeMo-RL train_data dump",
        "JSONL NeMo-RL dumps (train_data_step<N>.jsonl)",
        rank=0,
        files=token_dumps.nemo_rl_files,
        folder=lambda path: bool(token_dumps.nemo_rl_files(path)),
        file=_jsonl_file(_dump_record("nemo-rl")),
        record=_dump_record("nemo-rl"),
        reader=_dump_reader(token_dumps.nemo_rl_records),
    )
)
register(
    FormatSpec(
        "prime-rl",
        "prime-rl token export",
        "JSONL prime-rl token exports (token_exports/step_<N>/rank_<R>.jsonl)",
        rank=1,
        files=token_dumps.prime_rl_files,
        folder=token_dumps.holds_prime_rl_steps,
        file=_jsonl_file(_dump_record("prime-rl")),
        record=_dump_record("prime-rl"),
        reader=_dump_reader(token_dumps.prime_rl_records),
    )
)
register(
    FormatSpec(
        "rl-logging-board",
        "RL Logging Board log",
        "JSONL RL Logging Board files (prompt, response, response_tokens, reward, step)",
        rank=2,
        files=token_dumps.rl_logging_board_files,
        folder=lambda path: any(
            _dump_record("rl-logging-board")(first_record(f))
            for f in token_dumps.rl_logging_board_files(path)[:1]
        ),
        file=_jsonl_file(_dump_record("rl-logging-board")),
        record=_dump_record("rl-logging-board"),
        reader=_dump_reader(token_dumps.rl_logging_board_records),
    )
)
