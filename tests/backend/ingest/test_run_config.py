"""The trainer configuration is kept with an imported run (issue 45 item 3): the TRL recorder's
`trainer_config.json` in the imported folder, or verl's Hydra config in the dump folder's parent; a broken
file stops the import with its name and line, and nothing is written."""

from __future__ import annotations

import json

import pytest

from backend.core import run_config
from backend.core.errors import InputError
from backend.ingest import import_path
from tests.conftest import make_records, write_jsonl

HYDRA = """\
algorithm:
  adv_estimator: grpo
  kl_ctrl:
    kl_coef: 0.001
actor_rollout_ref:
  actor:
    optim:
      lr: 1.0e-06
    loss_agg_mode: token-mean
  rollout:
    n: 4
    temperature: 1.0
trainer:
  rollout_data_dir: ${oc.env:DUMP}
"""


def _verl_dump(folder):
    folder.mkdir(parents=True)
    lines = [
        {"input": f"q{g}", "output": f"answer {k}", "gts": str(g), "score": float(k % 2), "step": 1}
        for g in range(2)
        for k in range(3)
    ]
    return write_jsonl(folder / "1.jsonl", lines)


def test_a_verl_run_keeps_the_hydra_config_of_the_dump_folders_parent(store, tmp_path):
    (tmp_path / "out" / ".hydra").mkdir(parents=True)
    (tmp_path / "out" / ".hydra" / "config.yaml").write_text(HYDRA)
    _verl_dump(tmp_path / "out" / "rollouts")
    import_path(store, tmp_path / "out" / "rollouts", "v")
    meta = store.run_info("v")["meta"]
    assert meta[run_config.SOURCE_KEY] == f"hydra: {tmp_path / 'out' / '.hydra' / 'config.yaml'}"
    flat = run_config.flatten(meta[run_config.CONFIG_KEY])
    assert flat["algorithm.kl_ctrl.kl_coef"] == 0.001 and flat["actor_rollout_ref.actor.optim.lr"] == 1e-6
    assert flat["trainer.rollout_data_dir"] == "${oc.env:DUMP}"  # an interpolation is kept as written


def test_a_recorded_folder_keeps_the_trainer_args_and_a_run_without_one_has_none(store, tmp_path):
    folder = tmp_path / "runs" / "a"
    folder.mkdir(parents=True)
    write_jsonl(folder / "step_000001.jsonl", make_records())
    args = {"beta": 0.04, "learning_rate": 1e-6, "loss_type": "dapo", "num_generations": 4}
    (folder / run_config.CONFIG_FILE).write_text(json.dumps(args))
    import_path(store, folder / "step_000001.jsonl", "a")  # one file of the folder, as --follow imports
    assert store.run_info("a")["meta"][run_config.CONFIG_KEY] == args
    assert store.run_info("a")["meta"][run_config.SOURCE_KEY].startswith("trl args: ")
    plain = tmp_path / "plain"
    plain.mkdir()
    write_jsonl(plain / "r.jsonl", make_records(seed=1))
    import_path(store, plain / "r.jsonl", "b")
    assert run_config.CONFIG_KEY not in store.run_info("b")["meta"]


@pytest.mark.parametrize(
    ("name", "text", "match"),
    [
        (".hydra/config.yaml", "a: [1, 2\nb: 3\n", r"config\.yaml: line \d+: not valid YAML"),
        (run_config.CONFIG_FILE, '{"beta": 0.04,\n "lr": }', r"trainer_config\.json: line 2: not valid JSON"),
        (run_config.CONFIG_FILE, "[1, 2]", "must be a mapping of keys to values, got list"),
    ],
)
def test_a_broken_configuration_is_named_with_its_line(store, tmp_path, name, text, match):
    dump = tmp_path / "out"
    _verl_dump(dump)
    (dump / name).parent.mkdir(parents=True, exist_ok=True)
    (dump / name).write_text(text)
    with pytest.raises(InputError, match=match):
        import_path(store, dump, "v")
    assert store.list_runs() == []
