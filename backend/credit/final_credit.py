"""Credit summaries of A_final: per rollout, |A|, positive and negative credit per token class of
the split-channel final advantage Σ_c β_c·Ã_c (every outcome channel by the estimator, every token-level
channel by its own projection, the run's default β and normalizations, or a tuned β), the numbers the
Rollout view colours with. The Explorer, Trends and `creditlens rollouts` read them by default, so a
class's share and its excess (share of |A| − share of tokens) describe the credit the user sees.

They live in `credit_summary` beside the estimator outputs' own, under the channel `final:<channel>`
(`final_channel`; `final:<channel>|β:c=x,...` with a tuned β), and go with the run's estimates when its
inputs change.
"""

from __future__ import annotations

from collections.abc import Callable

from backend.core.errors import InputError
from backend.credit import as_trained, channel_credit, channels, credit_summary, estimates
from backend.store import StoreHandle
from backend.store.explorer_queries import CreditKey, credit_summary_ids
from backend.store.handle import StoreBusy

FINAL = "final"


def final_channel(channel: str, betas: tuple = ()) -> str:
    """The credit summary's channel of A_final with an estimator config reading `channel`; `betas`:
    (channel, β) pairs overriding the run's β (a tuned β), each summarized under its own name."""
    tuned = ",".join(f"{c}={float(b):.6g}" for c, b in sorted(betas))
    return f"{FINAL}:{channel}" + (f"|β:{tuned}" if tuned else "")


def fill(
    handle: StoreHandle,
    run: str,
    key: CreditKey,
    estimator: str,
    config: tuple,
    progress: Callable[[int, int, str], None] | None = None,
    betas: tuple = (),
) -> list[str]:
    """Compute and save the A_final credit summary of every rollout of `run` under `key` that lacks one (a
    step at a time: a run that grew gets its new steps' only; each outcome channel's estimator at its
    declared scope through the store's cache). config: the estimator's (key, value) pairs, its channel
    included; betas: (channel, β) pairs overriding the run's β (an InputError names a channel without a β).
    Returns notes for the user."""
    channel = dict(config).get("channel")
    with handle.read() as store:
        index = store.rollout_keys(run)
        done = credit_summary_ids(store, store.run_id(run), key)
        wanted = index[~index["rollout_id"].isin(list(done))]
        steps = sorted(int(s) for s in wanted["step"].unique())
        if not steps:
            return []
        wanted = index[index["step"].isin(steps)]  # a step is summarized whole (its batch normalizes)
        first = store.load_batch(run, steps=steps[:1])
        definitions = credit_summary.run_classes(store, run)
        found = as_trained.recipe(store, run)
    specs = channel_credit.channel_specs(first, estimator, config, channel=channel)
    unknown = sorted(set(dict(betas)) - set(specs))
    if unknown:
        raise InputError(f"--beta {unknown[0]}: the channels with a β on {channel} are {sorted(specs)}")
    # the trainer's reward weights and KL coefficient, where it has them, under any tuned β
    if estimator not in as_trained.TRAINER_ESTIMATORS:
        betas = tuple(sorted({**as_trained.trainer_betas(found, list(specs)), **dict(betas)}.items()))
    notes: list[str] = []
    scoped = {}
    for name, spec in specs.items():
        if spec.projection == "estimator":
            found = estimates.estimate_rollouts(
                handle,
                run,
                spec.estimator,
                channels.estimator_config(spec),
                [int(r) for r in wanted["rollout_id"]] if done else None,
                progress=progress,
            )
            notes += found.notes
            scoped[name] = found
    rows = []
    with handle.read() as store:
        for step in steps:
            batch = store.load_batch(run, steps=[step])
            ids = batch.rollout_ids.tolist()
            projected = {c: s.padded(ids, batch.T) for c, s in scoped.items()}
            credit = channel_credit.channel_credit(
                batch, estimator, config, dict(betas) or None, projected, channel=channel
            )
            rows.append(credit_summary.credit_rows(batch, credit.final, key.classes, definitions))
    try:
        with handle.write() as store, store.transaction():
            credit_summary.save(store, run, key, rows)
    except StoreBusy:
        notes.append("the store is busy; the shares of A_final are filled on the next try")
    return notes
