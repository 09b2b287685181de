"""Compare: several estimators on one rollout, all read as ONE credit (the Compare view and `creditlens
compare`, from one code path).

A credit is one of `credit_choices`: the final advantage A_final = Σ_c β_c·Ã_c, or one channel's term of it
β_c·Ã_c (an outcome channel: each estimator on its score; a token-level channel such as a format penalty:
its own projection, the same under every estimator), or on a run with several scored channels the what-if
of each estimator on their scores summed first (`summed`, never part of A_final). The heatmap rows, their
difference, the rank agreement and the credit mass by token class all read the chosen credit, so a bar never
describes another number than the row above it. The mass is signed: credit (A > 0) and penalty (A < 0) per
class, apart.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from backend.core.batch import RolloutBatch
from backend.core.errors import InputError
from backend.credit import channel_credit, channels, credit_shares, estimates, token_classes
from backend.estimators import registry
from backend.store import StoreHandle
from backend.views import explain

FINAL = "final"
CHANNEL = "channel:"
"""Prefix of a channel's credit choice: `channel:task` is the task channel's term β·Ã of A_final."""
SUMMED = "summed"
"""The what-if beside A_final: each estimator on every channel's score summed per rollout first."""


@dataclass(frozen=True)
class CreditChoice:
    """One credit Compare can show: `key` (what the URL and `--credit` hold), a short `label` and `help`."""

    key: str
    label: str
    help: str


def credit_choices(batch: RolloutBatch) -> list[CreditChoice]:
    """The credits a run offers, the final A first, then each channel's term of it (outcome channels first):
    the one list the Compare view's picker and `creditlens compare --credit` read."""
    out = [
        CreditChoice(
            FINAL,
            "final A (every channel)",
            "A_final = Σ_c β_c·Ã_c: each estimator on the outcome channels, every other channel by its own "
            "projection (what the Rollout view colours)",
        )
    ]
    specs = channels.default_specs(batch)
    # the outcome channels first (the estimators differ there), then the token-level ones
    for name, spec in sorted(specs.items(), key=lambda item: item[1].projection != "estimator"):
        if spec.projection == "estimator":
            label, text = f"{name}: each estimator's credit", f"β·Ã of {name}: each estimator on its score"
        else:
            label = f"{name}: its {spec.projection} term"
            text = f"β·Ã of {name}: its {spec.projection} projection, the same under every estimator"
        out.append(CreditChoice(CHANNEL + name, label, text))
    if len(batch.scores) >= 2:
        out.append(
            CreditChoice(
                SUMMED,
                "what-if: scores summed first",
                "each estimator on every channel's score summed per rollout first (TRL's combined reward), "
                "a what-if beside A_final, never in it",
            )
        )
    return out


def summed_config(estimator: str, config: tuple) -> tuple:
    """The config of `estimator` on the scores summed first (the `summed` choice); a ValueError for an
    estimator that reads no channel (it has no such what-if)."""
    summed = channel_credit.summed_config(estimator, config)
    if not summed:
        raise ValueError(f"{estimator} reads no reward channel: it has no what-if on the scores summed first")
    return summed


def choice_channel(choice: str) -> str | None:
    """The channel of a channel's credit choice (None: the final A)."""
    return choice[len(CHANNEL) :] if choice.startswith(CHANNEL) else None


def chosen_credit(credit: channel_credit.ChannelCredit, choice: str) -> np.ndarray:
    """(B, T) the credit `choice` of one estimator's split-channel credit."""
    if choice == FINAL:
        return credit.final
    channel = choice_channel(choice)
    if channel is None or channel not in credit.contributions:
        raise ValueError(
            f"credit {choice!r}: this estimator's credit has {FINAL!r} and "
            + ", ".join(repr(CHANNEL + c) for c in credit.contributions)
        )
    return credit.contributions[channel]


def compare_numbers(
    batch: RolloutBatch,
    rollout_id: int,
    arrays: dict[str, np.ndarray],
    choice: str,
    classes: tuple = token_classes.DEFAULT_CLASSES,
    errors: dict[str, str] | None = None,
) -> dict:
    """What Compare shows for rollout `rollout_id` of the group `batch`, given each estimator's chosen
    credit on the group (label -> (B, T), `chosen_credit`): per label the credit on the rollout (L,), the
    rollout's untrained tokens (L,) bool, the rank agreement and the signed mass by class over the group's
    trained tokens, and `errors` (label -> message) as given."""
    row = int((batch.rollout_ids == int(rollout_id)).nonzero()[0, 0])
    L = int(batch.lengths[row])
    trained = batch.trained_mask.cpu().numpy().astype(bool)  # (B, T)
    return {
        "credit": choice,
        "tokens": explain.tokens_of(batch, row),
        "rollout": {k: np.asarray(v[row, :L], dtype=np.float64) for k, v in arrays.items()},
        "untrained": ~trained[row, :L],
        "errors": dict(errors or {}),
        "agreement": credit_shares.rank_agreement(arrays, batch.trained_mask),
        "mass": credit_shares.signed_mass_by_class(
            arrays, token_classes.class_ids(batch, classes), trained, token_classes.names(classes)
        ),
        "classes": token_classes.labels(batch, row, classes),
        "silent": all(not np.any(a) for a in arrays.values()),  # no estimator credits the group
        # every estimator gives the group the same credit (a final A that is the token-level channels alone)
        "same": len(arrays) > 1
        and all(np.array_equal(a, next(iter(arrays.values()))) for a in arrays.values()),
    }


def compare_rollout(
    handle: StoreHandle,
    run: str,
    rollout_id: int,
    estimators: list[tuple[str, tuple]],
    choice: str = FINAL,
    classes: tuple | None = None,
    betas: dict[str, float] | None = None,
    save: bool = True,
) -> dict:
    """`compare_numbers` of `rollout_id` with `estimators` ((name, config), ...; a repeated name is
    labelled with a prime), each estimator's credit from `explain.group_channel_credit` (its declared scope,
    through the store's cache); an estimator that cannot run is in `errors` (label -> message); `choices`:
    the run's `credit_choices`."""
    with handle.read() as store:
        index = store.rollout_keys(run)
        if classes is None:
            classes = token_classes.from_json(store.run_info(run)["meta"].get("token_classes"))
    match = index[index["rollout_id"] == int(rollout_id)]
    if match.empty:
        raise InputError(f"run {run!r} has no rollout {rollout_id}")
    group = int(match["group_id"].iloc[0])
    with handle.read() as store:
        batch = store.load_batch(run, group_ids=[group])
    choices = credit_choices(batch)
    known = [c.key for c in choices]
    if choice not in known:
        raise InputError(f"credit {choice!r}: run {run!r} offers {', '.join(known)}")
    arrays, errors = {}, {}
    ids = batch.rollout_ids.tolist()
    for name, config in estimators:
        label = unique_label(name, [*arrays, *errors])
        try:
            if choice == SUMMED:
                built = registry.make_config(name, **dict(summed_config(name, config)))
                scoped = estimates.estimate_rollouts(handle, run, name, built, ids, save=save)
                arrays[label] = scoped.padded(ids, batch.T).numpy()  # (B, T)
            else:
                channel = config_channel(choice, config, batch)
                _, credit = explain.group_channel_credit(
                    handle, run, group, name, config, betas, save=save, channel=channel
                )
                arrays[label] = chosen_credit(credit, choice)  # (B, T)
        except (ValueError, RuntimeError) as exc:  # BatchError, InputError, a bad config: said per estimator
            errors[label] = str(exc)
    return compare_numbers(batch, rollout_id, arrays, choice, classes, errors) | {"choices": choices}


def unique_label(name: str, taken: list[str]) -> str:
    """`name`, with a prime per earlier use (the same estimator twice, with other parameters)."""
    label = name
    while label in taken:
        label += "′"
    return label


def config_channel(choice: str, config: tuple, batch: RolloutBatch) -> str | None:
    """The channel an estimator is looked at on for `choice`: a config's own `channel`, else the chosen
    channel when it is scored, else None (the run's main channel). It changes no contribution, only which
    outcome channel an estimator that reads none (`logged`) stands in for."""
    chosen = choice_channel(choice)
    return dict(config).get("channel", chosen if chosen in batch.scores else None)


def mass_records(mass: pd.DataFrame) -> list[dict]:
    """The signed mass as JSON records (NaN as None)."""
    return [
        {k: (None if isinstance(v, float) and v != v else v) for k, v in r.items()}
        for r in mass.to_dict(orient="records")
    ]
