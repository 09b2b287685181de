"""Why a token got its credit: the Rollout view's numbers and `creditlens explain`, from one code path.

`explain_rollout` gives, for one rollout: its tokens, each channel's advantage (the estimator's output on
that channel, equal to `creditlens estimate --channel C`) and contribution β_c·Ã_c, the final advantage,
and the estimator's `terms`: the intermediate quantities behind its number, taken from the estimator's
diagnostics at its declared scope and sliced to the rollout. `derivation` turns the terms at one token
into a short derivation with the numbers, e.g. `A_t = Z · w_t / mean w = 0.540 × 1.83 = 0.99`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from backend import channel_credit, channels, estimates, main_channel, strips
from backend.batch import RolloutBatch
from backend.errors import InputError
from backend.estimators import registry
from backend.store import StoreHandle


@dataclass
class Explanation:
    """One rollout's credit, channel by channel, with the estimator's terms.

    tokens: (L,) token text; channels: name -> {"advantage": (L,), "contribution": (L,)};
    final: (L,) A_final; betas: name -> β_c; terms: see `terms_of`; batch/row: the rollout's group
    batch and its row (for per-token facts; `to_json` adds the per-token strips of `backend.strips`)."""

    rollout_id: int
    group_id: int
    estimator: str
    scope: str
    tokens: list[str]
    channels: dict[str, dict[str, np.ndarray]]
    final: np.ndarray
    betas: dict[str, float]
    terms: dict[str, Any]
    batch: RolloutBatch
    row: int
    channel: str = "task"
    """The channel the estimator read (its terms are on it)."""

    def to_json(self) -> dict:
        def floats(x):
            return [None if not math.isfinite(v) else float(v) for v in np.asarray(x, dtype=np.float64)]

        return {
            "rollout_id": self.rollout_id,
            "group_id": self.group_id,
            "estimator": self.estimator,
            "channel": self.channel,
            "scope": self.scope,
            "tokens": self.tokens,
            "channels": {c: {k: floats(v) for k, v in parts.items()} for c, parts in self.channels.items()},
            "final": floats(self.final),
            "betas": self.betas,
            "terms": self.terms,
            "strips": {k: floats(v) for k, v in strips.token_strips(self.batch, self.row).items()},
        }


def tokens_of(batch: RolloutBatch, row: int) -> list[str]:
    L = int(batch.lengths[row])
    if batch.tokens is not None:
        return list(batch.tokens[row])
    return [str(t) for t in batch.token_ids[row, :L].tolist()]


def group_channel_credit(
    handle: StoreHandle, run: str, group_id: int, estimator: str, config: tuple = (),
    betas: dict[str, float] | None = None, progress: estimates.Progress | None = None,
    normalizations: dict[str, str] | None = None, save: bool = True, channel: str | None = None,
) -> tuple[RolloutBatch, channel_credit.ChannelCredit]:
    """The split-channel credit of one group with `estimator` on `channel` (a `channel` in `config`
    wins; default: the run's main channel), every estimator channel computed at its declared scope
    (through the store's cache), so the numbers equal `creditlens estimate` on the whole run."""
    channel = main_channel.resolve(handle, run, dict(config).get("channel", channel))
    with handle.read() as store:
        batch = store.load_batch(run, group_ids=[int(group_id)])
    ids = batch.rollout_ids.tolist()
    projected = {}
    specs = channel_credit.channel_specs(batch, estimator, config, betas, normalizations, channel)
    for name, spec in specs.items():
        if spec.projection == "estimator":
            cfg = channels.estimator_config(spec)
            scoped = estimates.estimate_rollouts(handle, run, spec.estimator, cfg, ids, progress=progress,
                                                 save=save)
            projected[name] = scoped.padded(ids, batch.T)
    return batch, channel_credit.channel_credit(batch, estimator, config, betas, projected, normalizations,
                                                channel)


def explain_rollout(
    handle: StoreHandle, run: str, rollout_id: int, estimator: str, config: tuple = (),
    channel: str | None = None, betas: dict[str, float] | None = None,
    normalizations: dict[str, str] | None = None,
) -> Explanation:
    """Everything the Rollout view draws for `rollout_id` under `estimator` (overrides `config`, a tuple
    of (key, value)) on `channel` (default: the run's main channel); `terms` are the estimator's there."""
    channel = main_channel.resolve(handle, run, dict(config).get("channel", channel))
    with handle.read() as store:
        index = store.rollout_keys(run)
    match = index[index["rollout_id"] == int(rollout_id)]
    if match.empty:
        raise InputError(f"run {run!r} has no rollout {rollout_id}")
    group_id = int(match["group_id"].iloc[0])
    batch, credit = group_channel_credit(handle, run, group_id, estimator, config, betas,
                                         normalizations=normalizations, channel=channel)
    row = int((batch.rollout_ids == int(rollout_id)).nonzero()[0, 0])
    L = int(batch.lengths[row])
    parts = {
        c: {"advantage": credit.projected[c][row, :L], "contribution": credit.contributions[c][row, :L]}
        for c in credit.contributions
    }
    built = registry.make_config(estimator, **dict(main_channel.on_channel(estimator, config, channel)))
    terms = scoped_terms(handle, run, int(rollout_id), estimator, built)
    return Explanation(int(rollout_id), group_id, estimator, terms["scope"], tokens_of(batch, row), parts,
                       credit.final[row, :L], credit.betas, terms, batch, row, channel)


def scoped_terms(handle: StoreHandle, run: str, rollout_id: int, estimator: str, config: Any) -> dict:
    """The estimator's terms for one rollout, computed on the batch of its declared scope."""
    scope = registry.get(estimator).scope_for(config)
    # a model fitted on the run in a first streamed pass applies to the rollout's group alone
    run_fit = estimates.fitted_run(handle, run, estimator, config) if scope == "run" else None
    with handle.read() as store:
        if scope == "run" and run_fit is None:
            batch = store.load_batch(run)
        elif run_fit is not None:
            info = store.rollout_keys(run)
            group = int(info.loc[info["rollout_id"] == int(rollout_id), "group_id"].iloc[0])
            batch = dataclasses.replace(store.load_batch(run, group_ids=[group]), run_fit=run_fit)
        else:
            info = store.rollout_keys(run)
            info = info[info["rollout_id"] == int(rollout_id)].iloc[0]
            batch = (store.load_batch(run, steps=[int(info["step"])]) if scope == "step"
                     else store.load_batch(run, group_ids=[int(info["group_id"])]))
        mc = store.resample_values(run, int(rollout_id)) if registry.MC_NEEDS[0] in batch.extras else None
    batch = estimates.with_channel(batch, estimates.channel_key(config))
    result = registry.estimate(estimator, batch, config)
    row = int((batch.rollout_ids == int(rollout_id)).nonzero()[0, 0])
    terms = terms_of(batch, result, row, estimator, config)
    if mc is not None and not mc.empty and ("mc_mask" in terms["tokens"] or
                                             terms["notes"].get("value_source") == "mc"):
        # The Monte Carlo values that fed it: V̂(s_t) ± stderr over n sampled suffixes, reward units.
        terms["mc"] = [{"pos": int(r.pos), "value": float(r.value), "stderr": float(r.stderr), "n": int(r.n)}
                       for r in mc.itertuples()]
    return terms


def terms_of(batch: RolloutBatch, result: registry.EstimatorResult, row: int, estimator: str,
             config: Any) -> dict:
    """The estimator's intermediate quantities for response `row`, in one documented form:

    - `sequence`: name -> float, per-response numbers (Z; for outcome-based estimators also R, the group
      mean and std of R over the responses that have a score, n and ε);
    - `tokens`: name -> (L,) list of floats, per-token quantities (weights w, token rewards r, values
      V(s_t), the base advantage of a modifier, masks as 0/1, ...) and always `advantage`;
    - `notes`: name -> text (value source, fallbacks, feature names);
    - `scope`, `estimator`, `config` (field -> value).
    """
    L = int(batch.lengths[row])
    sequence: dict[str, float] = {}
    tokens: dict[str, list[float]] = {}
    notes: dict[str, Any] = {}
    for key, value in result.diagnostics.items():
        if isinstance(value, torch.Tensor):
            if value.dim() == 0:
                sequence[key] = float(value)
            elif value.dim() == 1 and value.shape[0] == batch.B:
                sequence[key] = float(value[row])
            elif value.dim() == 2 and value.shape[0] == batch.B:
                tokens[key] = value[row, :L].detach().to(torch.float64).cpu().tolist()
            elif key == "feature_contributions" and value.dim() == 3 and value.shape[0] == batch.B:
                names = result.diagnostics.get("features") or [str(i) for i in range(value.shape[2])]
                per_feature = value[row, :L].detach().to(torch.float64).cpu().T.tolist()  # (F, L)
                tokens.update({f"feature:{n}": vals for n, vals in zip(names, per_feature, strict=True)})
        elif isinstance(value, (str, int, float, bool)) or value is None:
            if value is not None:
                notes[key] = value
        elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            notes[key] = list(value)
    tokens["advantage"] = result.advantages[row, :L].detach().to(torch.float64).cpu().tolist()
    channel = getattr(config, "channel", None)
    if channel is not None and channel in batch.scores:
        sequence.update(_outcome_terms(batch, row, channel, getattr(config, "epsilon", None)))
    spec = registry.get(estimator)
    return {
        "estimator": estimator,
        "scope": spec.scope_for(config),
        "config": {k: (v if isinstance(v, (int, float, str, bool)) or v is None else str(v))
                   for k, v in vars(config).items()},
        "sequence": {k: _finite(v) for k, v in sequence.items()},
        "tokens": {k: [_finite(v) for v in vals] for k, vals in tokens.items()},
        "notes": notes,
    }


def _finite(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None


def _outcome_terms(batch: RolloutBatch, row: int, channel: str, epsilon: float | None) -> dict[str, float]:
    """R of the response and the statistics of its group (unbiased std), over responses with a score."""
    scores = batch.scores[channel].to(torch.float64)
    same = (batch.group_ids == batch.group_ids[row]) & torch.isfinite(scores)
    R = scores[same]
    out = {"R": float(scores[row]), "group_mean": float(R.mean()) if R.numel() else math.nan,
           "group_std": float(R.std()) if R.numel() > 1 else 0.0, "group_n": float(R.numel())}
    if epsilon is not None:
        out["epsilon"] = float(epsilon)
    return out


def derivation(terms: dict, t: int) -> list[str]:
    """A short derivation of A_t from the terms, with the numbers (one formula per line)."""
    seq, tok, cfg = terms["sequence"], terms["tokens"], terms["config"]

    def at(name: str, i: int | None = None) -> float | None:
        vals = tok.get(name)
        i = t if i is None else i
        if vals is None or not 0 <= i < len(vals):
            return None
        return vals[i]

    A = at("advantage")
    lines: list[str] = []
    if "R" in seq and "Z" in seq:
        outcome = cfg.get("outcome", "grpo" if cfg.get("norm_by_std", True) else "dr_grpo")
        if terms.get("estimator") == "maxrl":
            outcome = "maxrl"
        R, mean, std, Z = seq["R"], seq["group_mean"], seq["group_std"], seq["Z"]
        if None in (R, mean, std, Z):
            lines.append("R: no score on this channel (left out of the group; advantage 0)")
        elif outcome == "maxrl":
            eps = seq.get("epsilon", 0.0) or 0.0
            if mean <= 0 and cfg.get("nonpositive_mean") == "zero":
                lines.append(f"pass rate mean_G = {mean:.4g} ≤ 0: no success in the group, Z = 0"
                             f"   (G = {seq['group_n']:.0f})")
            else:
                lines.append(f"Z = (R − mean_G) / (mean_G + ε) = ({R:.4g} − {mean:.4g}) / ({mean:.4g} + "
                             f"{eps:.0e}) = {Z:.4g}   (MaxRL: divided by the pass rate, G = "
                             f"{seq['group_n']:.0f})")
        elif outcome == "grpo":
            eps = seq.get("epsilon", 0.0) or 0.0
            lines.append(f"Z = (R − mean_G) / (std_G + ε) = ({R:.4g} − {mean:.4g}) / ({std:.4g} + {eps:.0e})"
                         f" = {Z:.4g}   (G = {seq['group_n']:.0f})")
        else:
            lines.append(f"Z ({outcome}) from R = {R:.4g}, group mean {mean:.4g} (G = {seq['group_n']:.0f})"
                         f" = {Z:.4g}")
    w, r, V, base = at("weights"), at("r"), at("values"), at("base")
    if V is not None and "temporal" in tok:
        absolute = seq.get("absolute") or 0.0
        lines.append(f"V(s_t) from {terms['notes'].get('value_source', '?')}: V(s_t) = {V:.4g}")
        temporal = at("temporal") or 0.0
        if float(cfg.get("lam", 1.0)) == 1.0 and float(cfg.get("gamma", 1.0)) == 1.0:
            lines.append(f"temporal (GAE, γ = λ = 1): Z − V(s_t) = {seq.get('Z') or 0.0:.4g} − {V:.4g} = "
                         f"{temporal:.4g}")
        else:
            lines.append(f"temporal (GAE, γ = {cfg.get('gamma')}, λ = {cfg.get('lam')}) = {temporal:.4g}")
        lines.append(f"A_t = temporal + w_abs (R − anchor) = {temporal:.4g} + {absolute:.4g} = {A:.4g}")
    elif V is not None and r is not None:
        V_next = at("values", t + 1) or 0.0
        gamma = float(cfg.get("gamma", 1.0))
        lam = seq.get("lam_actor")  # gae's per-response lambda (VAPO's length-adaptive option)
        lam = float(cfg.get("lam", 1.0)) if lam is None else lam
        delta = r + gamma * V_next - V
        source = terms["notes"].get("value_source", "?")
        A_next = at("advantage", t + 1) or 0.0
        lines.append(f"V(s_t) from {source}: V(s_t) = {V:.4g}, V(s_t+1) = {V_next:.4g}")
        lines.append(f"δ_t = r_t + γ V(s_t+1) − V(s_t) = {r:.4g} + {gamma:g} × {V_next:.4g} − {V:.4g}"
                     f" = {delta:.4g}")
        lines.append(f"A_t = δ_t + γλ A_t+1 = {delta:.4g} + {gamma * lam:.3g} × {A_next:.4g} = {A:.4g}")
        if cfg.get("lam_mode") == "length_adaptive":
            lines.append(f"λ = 1 − 1/(α L) = 1 − 1/({float(cfg.get('alpha', 0)):g} × {len(tok['advantage'])})"
                         f" = {lam:.4g} (VAPO, at least 0)")
        critic_lam, G = terms["notes"].get("lam_critic"), at("returns")
        if critic_lam is not None and G is not None:
            lines.append(f"value target (decoupled, λ_critic = {critic_lam:g}): returns_t = {G:.4g}; "
                         "A_t keeps the actor's λ")
    elif "values_after" in tok and V is not None:
        Va, branch = at("values_after"), at("branch")
        eta = float(cfg.get("eta", 1.0))
        Z = seq.get("Z") or 0.0
        if branch:
            lines.append(f"branch point: A_t = Z + η (V(s_t+1) − V(s_t)) = {Z:.4g} + {eta:g} × ({Va:.4g} − "
                         f"{V:.4g}) = {A:.4g}")
        else:
            lines.append(f"no branch at t: A_t = Z = {A:.4g}")
    elif V is not None and "mc_mask" in tok:
        valued = {m["pos"]: m for m in terms.get("mc", [])}
        before = [p for p in valued if p <= t]
        after = [p for p in valued if p > t]
        if before:
            m = valued[max(before)]
            lines.append(f"V̂(s_{m['pos']}) = {m['value']:.4g} ± {m['stderr']:.2g} (reward units, "
                         f"{m['n']} sampled suffixes)")
        else:
            lines.append("before the first resampled position: V̂ = the group's mean reward")
        if after:
            m = valued[min(after)]
            lines.append(f"V̂(s_{m['pos']}) = {m['value']:.4g} ± {m['stderr']:.2g} ({m['n']} suffixes)")
        else:
            lines.append(f"after the last resampled position: the outcome R = {seq.get('R')}")
        lines.append(f"A_t = scale · (V̂ next − V̂ current) = {A:.4g}   (scale maps rewards to Z units)")
    elif at("trace_sum") is not None and seq.get("Z_used") is not None:  # log_ratio_trace
        decay = float(cfg.get("trace_gamma", 1.0)) * float(cfg.get("trace_lam", 1.0))
        if cfg.get("clamp_negative"):
            floor, Z = float(cfg.get("floor", 0.0)), seq.get("Z") or 0.0
            lines.append(f"Z' = max(Z, floor) = max({Z:.4g}, {floor:g}) = {seq['Z_used']:.4g}")
        lines.append(f"W_t = Σ_(u ≥ t) tr(u, u − t) = {at('trace_sum'):.4g}   ({cfg.get('weighting')} trace, "
                     f"γλ = {decay:.4g}, over the {len(tok['advantage']) - t} tokens from t on)")
        lines.append(f"A_t = Z' · W_t = {seq['Z_used']:.4g} × {at('trace_sum'):.4g} = {A:.4g}")
    elif w is not None and "scored" in tok and seq.get("Z") is not None:  # oar_p, oar_g, gcpo
        score = next((f"{k} = {at(k):.4g}" for k in tok if k.endswith("_score") and at(k) is not None), "")
        if at("scored"):
            lines.append(f"cached model score at t: {score}" + (f", divergence d_t = {at('divergence'):.4g}"
                                                                 if at("divergence") is not None else ""))
        else:
            lines.append("t is not scored (conclude text, answer, or no answer found): w_t = 1")
        lines.append(f"A_t = Z · w_t = {seq['Z']:.4g} × {w:.4g} = {A:.4g}")
    elif w is not None and r is not None and "Z" in seq:
        weights = [x for x in tok["weights"] if x is not None]
        mean_w = sum(weights) / max(len(weights), 1)
        Z = seq["Z"]
        if mean_w > 0:
            lines.append(f"A_t = Z · w_t / mean w = {Z:.4g} × {w:.4g} / {mean_w:.4g} = {A:.4g}")
        else:
            lines.append(f"all weights 0: uniform fallback, A_t = Z = {A:.4g}")
    elif at("anchored") is not None and at("gate") is not None:  # divergence_progress
        lines.append(f"s_t = (d_t − window mean) / window std = ({at('divergence'):.4g} − "
                     f"{at('window_mean'):.4g}) / {at('window_std'):.4g} → {at('signal'):.4g} (clipped)"
                     f"   (window {at('window'):.0f})")
        lines.append(f"A_t = g_t (Z + λ s_t) = {at('gate'):.4g} × ({seq.get('Z') or 0.0:.4g} + "
                     f"{float(cfg.get('lam', 0.0)):g} × {at('signal'):.4g}) = {A:.4g}")
    elif at("token_weight") is not None and "Z" in seq:  # pivot_buckets, asymmetric_confidence
        if at("window_mean_gate") is not None:
            beta = float(cfg.get("anchor", 1.0))
            lines.append(f"ĝ_t = g_t / window mean g = {at('gate'):.4g} / {at('window_mean_gate'):.4g}; "
                         f"w_t = (1 − β) + β ĝ_t = {at('token_weight'):.4g}   (β = {beta:g})")
        elif at("surrogate_entropy") is not None:
            lines.append(f"u_t = {at('surrogate_entropy'):.4g} bits, confidence c_t = "
                         f"{at('confidence'):.4g}; w_t = 1 + α (u_t if Z > 0, c_t if Z < 0) = "
                         f"{at('weights_raw'):.4g}")
        lines.append(f"A_t = Z · w_t = {seq.get('Z') or 0.0:.4g} × {at('token_weight'):.4g} = {A:.4g}")
    elif r is not None and "Z" in seq:
        L = len(tok["advantage"])
        extra = ""
        for name in ("phi", "g", "key_score"):
            if at(name) is not None:
                extra = f"   ({name}_t = {at(name):.4g})"
        if at("phi") is not None:
            phi_sum = sum(v for v in tok["phi"] if v is not None)
            lines.append(f"r_t = φ_t + (Z − Σφ) / L = {at('phi'):.4g} + ({seq['Z']:.4g} − {phi_sum:.4g})"
                         f" / {L} = {r:.4g}")
            parts = sorted(((k[8:], at(k)) for k in tok if k.startswith("feature:") and at(k) is not None),
                           key=lambda kv: -abs(kv[1]))[:3]
            if parts:
                lines.append("largest feature contributions to φ_t: "
                             + ", ".join(f"{n} {v:+.3g}" for n, v in parts))
        lines.append(f"A_t = L · r_t = {L} × {r:.4g} = {A:.4g}{extra}")
    elif base is not None and "block" in tok:
        members = [i for i, b in enumerate(tok["block"]) if b == at("block")]
        values = [tok["base"][i] or 0.0 for i in members]
        lines.append(f"block {at('block'):.0f} = tokens {members[0]}–{members[-1]}: A_t = mean of base over "
                     f"the block = {sum(values):.4g} / {len(values)} = {A:.4g}   (base_t = {base:.4g})")
    elif base is not None:
        factor = A / base if base else float("nan")
        flags = [n for n in ("boosted", "pivots", "mask") if at(n)]
        note = f"   ({', '.join(flags)} at t)" if flags else ""
        if base:
            lines.append(f"A_t = f_t · base_t = {factor:.4g} × {base:.4g} = {A:.4g}{note}")
        else:
            lines.append(f"base_t = 0, so A_t = {A:.4g}{note}")
    elif seq.get("Z") is not None and A is not None and abs(A - seq["Z"]) < 1e-6:
        lines.append(f"A_t = Z = {A:.4g} (broadcast to every token)")
    if A is not None and not any("A_t" in line for line in lines):
        # No formula for these terms: the number itself, with every per-token term at t.
        shown = ", ".join(f"{k}_t = {at(k):.4g}" for k in tok if k != "advantage" and at(k) is not None)
        lines.append(f"A_t = {A:.4g}" + (f"   ({shown})" if shown else ""))
    return lines
