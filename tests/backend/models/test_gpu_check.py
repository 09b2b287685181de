"""`bench.gpu_check` is a check that can fail: on CPU (`--device cpu`, CPU against CPU) its comparisons
pass, a planted error fails the named row with exit code 1, and an estimator it cannot compare fails."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from bench import gpu_check
from tests.backend.models.conftest import ROOT

QUICK = [
    "--device",
    "cpu",
    "--only",
    "estimators",
    "--estimators",
    "grpo,rloo,suffix_mc",
    "--batches",
    "demo",
]


def test_planted_error_fails_the_named_row_with_exit_code_1(tmp_path):
    out = tmp_path / "gpu_check.json"
    run = subprocess.run(
        [sys.executable, "-m", "bench.gpu_check", *QUICK, "--plant-error", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert any("demo/grpo" in line and line.endswith("FAIL (planted error)") for line in lines), run.stdout
    assert any("demo/rloo" in line and line.endswith("ok") for line in lines), run.stdout
    assert "1 of 2 checks failed; planted error at estimators: demo/grpo" in run.stdout
    rows = json.loads(out.read_text())["rows"]
    assert [r["check"] for r in rows if r["ok"] is False] == ["demo/grpo max|A_cpu - A_cpu|"]
    assert [r["value"] for r in rows if r["check"] == "suffix_mc"] == [
        "not model-free (needs a model or resampling): not compared"
    ]


def test_without_a_planted_error_the_same_run_passes(capsys):
    assert gpu_check.main(QUICK) == 0
    printed = capsys.readouterr().out
    assert "all checks passed" in printed and "FAIL" not in printed


def test_an_estimator_no_batch_can_feed_is_a_failure(capsys):
    # The oracle batch has no entropies or reference logprobs, which tepo_mask needs.
    args = ["--device", "cpu", "--only", "estimators", "--estimators", "tepo_mask", "--batches", "oracle"]
    assert gpu_check.main(args) == 1
    assert "no batch meets its needs" in capsys.readouterr().out


def test_max_diff_bound_and_shapes():
    report = gpu_check.Report(plant_error=False)
    assert report.max_diff("s", "equal", np.zeros(3), np.full(3, 1e-5), 1e-5) == pytest.approx(1e-5)
    report.max_diff("s", "over", torch.zeros(2, 2), torch.full((2, 2), 2e-5), 1e-5)
    report.max_diff("s", "shape", np.zeros(3), np.zeros(4), 1e-5)
    assert [r.ok for r in report.rows] == [True, False, False]
    assert "shapes (3,) vs (4,)" in report.table()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible")
def test_cuda_asked_without_a_device_fails(capsys):
    assert gpu_check.main(["--only", "estimators"]) == 1
    assert "no CUDA device visible" in capsys.readouterr().out


@pytest.mark.slow
def test_transformers_section_dry_run_with_a_planted_error(capsys):
    assert gpu_check.main(["--device", "cpu", "--only", "transformers,vllm", "--plant-error"]) == 1
    printed = capsys.readouterr().out
    failing = [line for line in printed.splitlines() if "FAIL" in line]
    assert len(failing) == 1 and "greedy logprobs max|cpu - cpu|" in failing[0], printed
    assert "same seed, suffixes that differ on cpu     0/64" in printed
    assert "skipped: needs CUDA" in printed


def test_the_attribution_section_passes_on_cpu(capsys):
    assert gpu_check.main(["--device", "cpu", "--only", "attribution"]) == 0
    printed = capsys.readouterr().out
    assert "one SGD step on cpu: Pearson r(predicted, realized)" in printed and "FAIL" not in printed
