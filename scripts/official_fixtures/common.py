"""What every official-fixture script shares: the checkout argument and its commit, importing from the
checkout, the library versions, and writing the fixture.

The official code is never copied into this repository: each script imports it from a checkout whose path
is its argument, runs it on the inputs written in the script, and writes one JSON file under
`tests/backend/estimators/fixtures/official/` that names the repository, the commit that ran, the file and
function, and the versions of Python, the CPU and the libraries involved.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import subprocess
import sys
import types
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "backend" / "estimators" / "fixtures" / "official"


def parse_args(doc: str, repository: str, commit: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "checkout", type=Path, help=f"a git work tree of {repository} at {commit} (outside this repository)"
    )
    parser.add_argument("--out", type=Path, default=None, help="where to write (default: the test fixture)")
    parser.add_argument(
        "--any-commit",
        action="store_true",
        help="run at whatever commit the checkout has; the fixture records that commit",
    )
    return parser.parse_args()


def checkout_commit(checkout: Path, cited: str, any_commit: bool) -> str:
    """The checkout's HEAD, after checking it is the cited commit with no local changes to tracked files."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(checkout), *args], check=True, capture_output=True, text=True
        ).stdout.strip()

    if not checkout.is_dir():
        raise SystemExit(f"{checkout}: not a directory; give a git work tree of the official repository")
    try:
        head = git("rev-parse", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no")
    except subprocess.CalledProcessError as err:
        raise SystemExit(
            f"{checkout}: not a git work tree ({err.stderr.strip()}); the commit must be "
            "read from the checkout, so clone the repository and check out the commit"
        ) from err
    if changed:
        raise SystemExit(
            f"{checkout}: tracked files differ from {head}:\n{changed}\n"
            "the fixture must come from the commit itself"
        )
    if head != cited and not any_commit:
        raise SystemExit(
            f"{checkout}: HEAD is {head}, the cited commit is {cited}; check out {cited} "
            "or pass --any-commit (the fixture then records the commit that ran)"
        )
    return head


def use_checkout(checkout: Path, skip_init: tuple[str, ...] = ()) -> None:
    """Put the checkout first on sys.path. Packages named in `skip_init` are registered empty (their
    `__init__.py` is not run, their modules import as usual): for an `__init__` that imports code needing
    a GPU library, never code that the fixture runs."""
    sys.path.insert(0, str(checkout.resolve()))
    for name in skip_init:
        parent, _, _ = name.rpartition(".")
        if parent:
            importlib.import_module(parent)
        package = types.ModuleType(name)
        package.__path__ = [str(checkout.resolve().joinpath(*name.split(".")))]
        sys.modules[name] = package


def load_file(path: Path, namespace: dict) -> dict:
    """Run a source file that is not an importable module (a fragment of a script) in `namespace`, which
    supplies the names the file uses without importing them, and return the namespace."""
    exec(compile(path.read_text(), str(path), "exec"), namespace)  # noqa: S102 - the official file itself
    return namespace


def cpu() -> str:
    """The CPU model: KTAE's float32 Fisher test rounds differently on different CPUs."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def provenance(
    script: str, repository: str, cited: str, commit: str, function: str, libraries: tuple[str, ...]
) -> dict:
    versions = {}
    for name in libraries:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    note = None if commit == cited else f"the cited commit {cited} was not the checkout's; this ran {commit}"
    return {
        "made_by": f"scripts/official_fixtures/{script}",
        "repository": repository,
        "commit": commit,
        "cited_commit": cited,
        "commit_note": note,
        "function": function,
        "python": platform.python_version(),
        "cpu": cpu(),
        "libraries": versions,
    }


def _dump(value, indent: int) -> str:
    """JSON with one key per line and every list of numbers on one line (reviewable diffs)."""
    pad = " " * indent
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = [f"{pad} {json.dumps(k)}: {_dump(v, indent + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(value, list) and any(isinstance(v, dict | list) for v in value):
        items = [f"{pad} {_dump(v, indent + 1)}" for v in value]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return json.dumps(value)


def write(name: str, fixture: dict, out: Path | None) -> Path:
    path = out or FIXTURES / f"{name}.json"
    path.write_text(_dump(fixture, 0) + "\n")
    print(f"wrote {path}")
    return path
