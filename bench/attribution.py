"""`python -m bench attribution [--beta 0.2] [--json FILE]`: how well the first-order attribution predicts
the change each update made, per step of the bundled recorded run `kl-<beta>`.

The bundled run ships step 1's checkpoint alone, so the run is trained again here exactly as
`scripts/record_sample_runs.py` trains it (TRL's GRPOTrainer on CPU, seed 0, the same settings and reward
functions), with Credit Lens's recorder writing the step files and a callback keeping, around every
optimizer step, the weights before and after it, the learning rate it used and AdamW's state. Per step k,
over the trained tokens of its batch:

- realized: log π_after(y_t) − log π_before(y_t), both scored here (float32, eager attention);
- sgd: the attribution as `creditlens attribution` computes it (one plain SGD step, lr · Σ_s c_s ⟨∇s, ∇t⟩);
- adam_batch: the same shares with AdamW's per-parameter scaling taken from its state after the step
  (P = 1 / (√v̂_k + ε), the batch's part of the first moment (1 − β1)·g_k, bias corrections, clipping), i.e.
  what the batch's own credit moved;
- adam_full: adam_batch plus the momentum carried over from earlier batches (β1 · m_{k−1}), which no token
  of this batch owns;
- linear: ⟨∇log π_t, θ_after − θ_before⟩, the first-order change along the step actually taken (how far
  first order itself goes).
Also `grad_cos`: the cosine between the gradient built from the recorded credit (−∇J) and the trainer's own
gradient recovered from AdamW's first moment, which checks the sign, the loss normalisation and the KL
slope; and whether the replay sampled the same tokens as the shipped run.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import torch
from scipy import stats

from backend.models import attribution
from backend.models.attribution import load_policy

ROOT = Path(__file__).resolve().parents[1]


class _Keeper:
    """A TrainerCallback (built in `replay`, where transformers is imported) that copies the weights, the
    learning rate and AdamW's state around each optimizer step."""

    def __init__(self):
        self.steps: list[dict] = []

    def begin(self, model, optimizer) -> None:
        self.steps.append(
            {
                "before": {k: v.detach().clone() for k, v in model.named_parameters()},
                "lr": float(optimizer.param_groups[0]["lr"]),
                "state_before": _adam_state(model, optimizer),
            }
        )

    def end(self, model, optimizer) -> None:
        self.steps[-1]["after"] = {k: v.detach().clone() for k, v in model.named_parameters()}
        self.steps[-1]["state_after"] = _adam_state(model, optimizer)
        group = optimizer.param_groups[0]
        self.steps[-1]["betas"] = tuple(group["betas"])
        self.steps[-1]["eps"] = float(group["eps"])


def _adam_state(model, optimizer) -> dict:
    out = {}
    for name, p in model.named_parameters():
        state = optimizer.state.get(p, {})
        if "exp_avg" in state:
            out[name] = {
                "m": state["exp_avg"].detach().clone(),
                "v": state["exp_avg_sq"].detach().clone(),
                "t": float(state["step"]),
            }
    return out


def replay(beta: float, out_dir: Path) -> list[dict]:
    """Train the bundled run again (the settings of scripts/record_sample_runs.py), recording its step files
    into `out_dir`; returns per optimizer step what `_Keeper` kept."""
    from transformers import TrainerCallback  # noqa: PLC0415 - heavy

    from creditlens.integrations import trl as lens_trl  # noqa: PLC0415 - imports TRL
    from scripts import record_sample_runs as recipe  # noqa: PLC0415 - the run's own recipe

    keeper = _Keeper()

    class Callback(TrainerCallback):
        def on_step_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
            keeper.begin(model, optimizer)

        def on_step_end(self, args, state, control, model=None, optimizer=None, **kwargs):
            keeper.end(model, optimizer)

    with tempfile.TemporaryDirectory() as scratch:
        trainer = recipe.trainer_for(beta, Path(scratch), save=False, callbacks=(Callback(),))
        recorder = lens_trl.record(trainer, out_dir, entropies=False)
        trainer.train()
        recorder.close()
    return keeper.steps


def _correlations(predicted: np.ndarray, realized: np.ndarray) -> dict:
    return {
        "pearson": float(stats.pearsonr(predicted, realized).statistic),
        "spearman": float(stats.spearmanr(predicted, realized).statistic),
        "sign_agreement": float(np.mean(np.sign(predicted) == np.sign(realized))),
        "slope": float(np.polyfit(predicted, realized, 1)[0]),
    }


def _dot(a: dict, b: dict) -> float:
    return float(sum((a[k].double() * b[k].double()).sum() for k in a))


def step_figures(policy, kept: dict, table: list[dict], beta: float, k: int) -> dict:
    """The figures of one step (see the module docstring); `table`: its recorded rows."""
    rows = attribution.token_rows([r["prompt_ids"] for r in table], [r["token_ids"] for r in table])
    lengths = [len(r["token_ids"]) for r in table]
    advantage = torch.tensor(
        [a for r, L in zip(table, lengths, strict=True) for a in [r["logged_advantage"]] * L]
    )
    policy.load_state_dict(kept["before"], strict=False)
    params_before = attribution.parameters(policy)
    with torch.no_grad():
        before = attribution.token_logprobs(policy, params_before, rows)
    slope = torch.zeros_like(before)
    if beta:
        ref = torch.tensor([x for r in table for x in r["ref_logprobs"]])
        slope = attribution.kl_slope(before, ref, beta)
    weights = attribution.loss_weights(
        lengths, "dapo", batch_rows=len(lengths), batch_tokens=sum(lengths), max_completion_length=48
    )
    coefficients = weights * (advantage - slope)
    G = attribution.weighted_gradient(policy, rows, coefficients)  # ∇J: the ascent direction
    lr = kept["lr"]
    sgd = lr * attribution.directional_logprobs(policy, rows, G)
    beta1, beta2 = kept["betas"]
    eps = kept["eps"]
    after_state, before_state = kept["state_after"], kept["state_before"]
    t = next(iter(after_state.values()))["t"]
    m_prev = {
        n: before_state[n]["m"] if n in before_state else torch.zeros_like(s["m"])
        for n, s in after_state.items()
    }
    trainer_grad = {n: (after_state[n]["m"] - beta1 * m_prev[n]) / (1 - beta1) for n in after_state}
    names = [n for n in G if n in trainer_grad]
    grad_cos = -_dot({n: G[n] for n in names}, trainer_grad) / np.sqrt(
        _dot({n: G[n] for n in names}, {n: G[n] for n in names}) * _dot(trainer_grad, trainer_grad)
    )
    # the trainer's gradient is −clip · ∇J; its scale (the clip) read off by least squares
    clip = -_dot({n: G[n] for n in names}, trainer_grad) / _dot(
        {n: G[n] for n in names}, {n: G[n] for n in names}
    )
    precondition = {
        n: 1.0 / ((after_state[n]["v"] / (1 - beta2**t)).sqrt() + eps) for n in names
    }  # AdamW's per-parameter scaling after this step
    scale = lr * (1 - beta1) * clip / (1 - beta1**t)
    adam_batch = scale * attribution.directional_logprobs(
        policy,
        rows,
        {n: G[n] * precondition[n] for n in names} | {n: torch.zeros_like(G[n]) for n in G if n not in names},
    )
    carry_dir = {n: -lr * beta1 * m_prev[n] / (1 - beta1**t) * precondition[n] for n in names}
    carry = attribution.directional_logprobs(
        policy, rows, carry_dir | {n: torch.zeros_like(G[n]) for n in G if n not in names}
    )
    update = {n: kept["after"][n] - kept["before"][n] for n in G}
    linear = attribution.directional_logprobs(policy, rows, update)
    policy.load_state_dict(kept["after"], strict=False)
    with torch.no_grad():
        after = attribution.token_logprobs(policy, attribution.parameters(policy), rows)
    realized = (after - before).numpy()
    return {
        "step": k,
        "tokens": int(rows.n_tokens),
        "lr": lr,
        "grad_cos": grad_cos,
        "clip": clip,
        "realized_mean_abs": float(np.abs(realized).mean()),
        "sgd": _correlations(sgd.numpy(), realized),
        "adam_batch": _correlations(adam_batch.numpy(), realized),
        "adam_full": _correlations((adam_batch + carry).numpy(), realized),
        "linear": _correlations(linear.numpy(), realized),
        "credit": {
            "spearman_advantage_realized": float(stats.spearmanr(advantage.numpy(), realized).statistic),
            "mean_realized_positive_credit": float(realized[advantage.numpy() > 0].mean()),
            "mean_realized_negative_credit": float(realized[advantage.numpy() < 0].mean()),
        },
    }


def known_answer(lr: float = 0.005) -> dict:
    """One real SGD step of the demo policy on kl-0.2's step-1 rows with a chosen credit pattern (+1 on
    rollouts 0 and 5, −1 on rollout 2, 0 on the rest, dapo weights): predicted against realized Δ, the
    check tests/backend/models/test_attribution.py makes."""
    table = pq.read_table(ROOT / "sample_runs" / "recorded" / "kl-0.2" / "step_000001.parquet").to_pylist()
    rows = attribution.token_rows([r["prompt_ids"] for r in table], [r["token_ids"] for r in table])
    lengths = [len(r["token_ids"]) for r in table]
    pattern = {0: 1.0, 5: 1.0, 2: -1.0}
    credit = torch.tensor([pattern.get(i, 0.0) for i, L in enumerate(lengths) for _ in range(L)])
    coefficients = credit / sum(lengths)
    policy = load_policy(ROOT / "sample_runs" / "demo-policy", "cpu")
    predicted = attribution.predicted_change(policy, rows, coefficients, lr).numpy()
    params = dict(policy.named_parameters())
    before = attribution.token_logprobs(policy, attribution.parameters(policy), rows).detach()
    optimizer = torch.optim.SGD(params.values(), lr=lr)
    (-(attribution.token_logprobs(policy, params, rows) * coefficients).sum()).backward()
    optimizer.step()
    with torch.no_grad():
        realized = (attribution.token_logprobs(policy, attribution.parameters(policy), rows) - before).numpy()
    by_credit = {
        name: {
            "tokens": int(mask.sum()),
            "mean_realized": float(realized[mask].mean()),
            "share_that_rose": float((realized[mask] > 0).mean()),
        }
        for name, mask in (
            ("positive", credit.numpy() > 0),
            ("zero", credit.numpy() == 0),
            ("negative", credit.numpy() < 0),
        )
    }
    return {
        "lr": lr,
        "tokens": int(rows.n_tokens),
        **_correlations(predicted, realized),
        "by_credit": by_credit,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench attribution", description=__doc__.splitlines()[0])
    parser.add_argument("--beta", type=float, default=0.2, help="which bundled run: kl-<beta> (0.0 or 0.2)")
    parser.add_argument("--json", default=None, help="write the figures here as JSON")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    shipped = ROOT / "sample_runs" / "recorded" / f"kl-{args.beta}"
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        kept = replay(args.beta, Path(out))
        files = sorted(Path(out).glob("step_*.parquet"))
        tables = [pq.read_table(f).to_pylist() for f in files]
        same = [
            [r["token_ids"] for r in t]
            == [r["token_ids"] for r in pq.read_table(shipped / f.name).to_pylist()]
            for f, t in zip(files, tables, strict=True)
        ]
    policy = load_policy(ROOT / "sample_runs" / "demo-policy", "cpu")
    check = known_answer()
    print(
        f"known answer (one SGD step, lr {check['lr']}, {check['tokens']} tokens): "
        f"Pearson {check['pearson']:.4f}, Spearman {check['spearman']:.3f}, slope {check['slope']:.3f}, "
        f"sign agreement {check['sign_agreement']:.2f}"
    )
    for name, part in check["by_credit"].items():
        print(
            f"  {name} credit: {part['tokens']} tokens, mean realized Δ {part['mean_realized']:+.3g}, "
            f"{part['share_that_rose']:.0%} rose"
        )
    figures = [step_figures(policy, kept[i], tables[i], args.beta, i + 1) for i in range(len(tables))]
    result = {
        "known_answer": check,
        "run": f"kl-{args.beta}",
        "replay_matches_shipped_tokens": same,
        "seconds": round(time.perf_counter() - started, 1),
        "steps": figures,
    }
    print(f"run kl-{args.beta}, replayed ({result['seconds']} s); same tokens as shipped per step: {same}")
    print(
        f"{'step':>4} {'tokens':>6} {'grad cos':>8} {'sgd r':>7} {'sgd ρ':>7} {'adam r':>7} {'adam ρ':>7} "
        f"{'full r':>7} {'linear r':>8} {'sign':>5}"
    )
    for f in figures:
        sgd, adam, full = f["sgd"], f["adam_batch"], f["adam_full"]
        print(
            f"{f['step']:>4} {f['tokens']:>6} {f['grad_cos']:>8.4f} {sgd['pearson']:>7.3f} "
            f"{sgd['spearman']:>7.3f} {adam['pearson']:>7.3f} {adam['spearman']:>7.3f} "
            f"{full['pearson']:>7.3f} {f['linear']['pearson']:>8.3f} {full['sign_agreement']:>5.2f}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
