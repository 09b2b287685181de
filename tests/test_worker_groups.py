"""The suite's worker groups hold: tests that share an expensive fixture (a Streamlit server, a trained TRL
run, a module's store) run on one pytest-xdist worker. pytest 9.2 stores node ids in a structured form that
pytest-xdist 3.8 no longer rewrites, so `--dist loadgroup` quietly spread every group over all workers and
each built the fixture again (pytest-xdist issue 1386): requirements-dev.txt pins pytest 9.1.1."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import uses_a_module_fixture

GROUPED = """
import os
import pytest

pytestmark = pytest.mark.xdist_group("shared")


@pytest.fixture(scope="module")
def built():
    with open("setups.txt", "a") as log:
        log.write(f"{os.getpid()}\\n")


@pytest.mark.parametrize("i", range(4))
def test_uses_it(built, i):
    pass
"""

OTHERS = """
import pytest


@pytest.mark.parametrize("i", range(4))
def test_other(i):
    pass
"""


def test_a_group_runs_on_one_worker_and_builds_its_fixture_once(tmp_path):
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    (tmp_path / "test_others.py").write_text(OTHERS)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider", "-q"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    setups = (tmp_path / "setups.txt").read_text().split()
    assert len(setups) == 1, f"the group's module fixture was built {len(setups)} times: the group was split"


@pytest.fixture(scope="module")
def _module_scoped():
    return 1


def test_a_test_of_a_module_fixture_is_put_in_its_modules_group(request, _module_scoped):
    assert uses_a_module_fixture(request.node)
    assert request.node.get_closest_marker("xdist_group").args == (__name__,)
