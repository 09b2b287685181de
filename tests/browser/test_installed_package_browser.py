"""The package as a user installs it: `pip install <checkout>` into a new virtual environment outside the
checkout, then `creditlens app` with an empty HOME opens on the bundled demo, from the installed files only.

The new environment sees this one's dependencies through a path file (installing torch and the rest again
would take minutes and gigabytes); the package itself is built from a copy of the checkout's tracked files
and installed without `-e`, so the views (pages/), the migrations and the sample runs must all travel in it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import free_test_port

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def _tracked_copy(dest: Path) -> Path:
    """The checkout's tracked files (a clean clone's content, without .venv or build outputs) in `dest`."""
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split("\0")
    for name in filter(None, files):
        source = ROOT / name
        if source.is_file():  # a file deleted in the working tree but not yet in the index is skipped
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def _outside_env() -> dict[str, str]:
    """This environment without a PYTHONPATH that could lead the new one back into the checkout."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A new virtual environment with the package installed from a copy of the checkout; its bin folder."""
    root = tmp_path_factory.mktemp("installed")
    checkout = _tracked_copy(root / "checkout")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    purelib = Path(
        subprocess.run(
            [str(venv / "bin/python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (purelib / "creditlens_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pip = [str(venv / "bin/python"), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
    done = subprocess.run([*pip, str(checkout)], capture_output=True, text=True, cwd=root)
    assert done.returncode == 0, done.stderr
    shutil.rmtree(checkout)  # the installed package must not lean on the copy it was built from
    return venv / "bin"


def test_the_installed_package_has_its_views_and_sample_runs(installed):
    code = (
        "import app, backend, pages, sample_runs; from app.navigation import VIEW_DIR, VIEWS;"
        "from backend.demo.bundled import SAMPLE_DIR;"
        "print(app.__file__); print(all((VIEW_DIR / v[0]).is_file() for v in VIEWS));"
        "print((SAMPLE_DIR / 'demo_run.jsonl').is_file(),"
        " (SAMPLE_DIR / 'demo-policy/model.safetensors').is_file())"
    )
    done = subprocess.run(
        [str(installed / "python"), "-c", code], capture_output=True, text=True, cwd="/", env=_outside_env()
    )
    assert done.returncode == 0, done.stderr
    where, views, samples = done.stdout.split("\n")[:3]
    assert str(installed.parent) in where and str(ROOT) not in where
    assert views == "True" and samples == "True True"


def test_creditlens_app_opens_on_the_bundled_demo(installed, tab, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    port = free_test_port()
    env = dict(_outside_env(), HOME=str(home), CREDITLENS_WARMUP="0")
    log = tmp_path / "app.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [str(installed / "creditlens"), "app", "--port", str(port)],
            cwd=home,
            env=env,
            stdout=out,
            stderr=out,
        )
    try:
        deadline = time.monotonic() + 180
        while not _healthy(port):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)
        assert "imported bundled runs:" in log.read_text() and " demo," in log.read_text()
        assert (home / ".creditlens" / "runs.duckdb").is_file()
        tab.goto(f"http://127.0.0.1:{port}/explorer")
        tab.wait_for_selector("h1:has-text('Explorer · demo')", timeout=120_000)
        tab.wait_for_selector("[data-testid=stDataFrame]", timeout=120_000)
        assert tab.get_by_text("Page not found").count() == 0
        assert tab.locator("[data-testid=stException]").count() == 0
    finally:
        tab.goto("about:blank")
        proc.terminate()
        proc.wait(timeout=30)
