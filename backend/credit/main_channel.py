"""The run's main channel: the reward channel (or `all`, the channel scores summed per rollout) that every
view and command reads when no channel is chosen.

It is chosen at import (`creditlens import --main-channel`; by default `task`, else the run's one channel,
else `all`), stored with the run (migration 007) and changed with `creditlens main-channel` or on the Runs
page. `resolve` turns a `--channel` (or a view's choice) into a channel the run has, `on_channel` puts it
into an estimator's config (estimators without a channel field, e.g. `logged`, are left as they are).
The estimator registry is imported only by the functions that take an estimator: the commands that read a
run without one (`creditlens main-channel`, `rollouts`) never import torch (docs/benchmarks.md).
"""

from __future__ import annotations

import math

from backend.core.batch_fields import ALL_CHANNELS, missing_channel
from backend.core.errors import InputError
from backend.store import Store, StoreHandle

CLI_CHANNEL = "--channel {}"
"""How the command line names a channel in its errors; `creditlens.open` passes its own (`channel={!r}`)."""


def main_channel(handle: StoreHandle, run: str) -> str:
    with handle.read() as store:
        return store.main_channel(run)


def channel_choices(store: Store, run: str) -> list[str]:
    """The channels a view or command may read on `run`: its scored channels, then `all`."""
    channels = store.channels_of(store.run_id(run))
    return channels + ([ALL_CHANNELS] if ALL_CHANNELS not in channels else [])


def resolve(handle: StoreHandle, run: str, channel: str | None, channel_as: str = CLI_CHANNEL) -> str:
    """`channel`, checked against the run's channels (an InputError lists them), or the run's main channel
    when None. `channel_as`: how the caller's user wrote the channel (`channel={!r}` in Python)."""
    with handle.read() as store:
        if channel is None:
            return store.main_channel(run)
        choices = channel_choices(store, run)
    if channel not in choices:
        all_as = None if channel_as == CLI_CHANNEL else channel_as.format(ALL_CHANNELS)
        message = missing_channel(channel, [c for c in choices if c != ALL_CHANNELS], all_as)
        named = channel_as.format(channel)
        raise InputError(f"{named}: " + message.replace("this run", f"run {run!r}", 1))
    return channel


def channel_default(estimator: str) -> str | None:
    """The default of the estimator's channel field; None when it reads no reward channel."""
    from backend.estimators import registry  # noqa: PLC0415 - heavy (torch, every estimator); on use

    return next(
        (f["default"] for f in registry.config_schema(estimator)["fields"] if f["name"] == "channel"), None
    )


def on_channel(estimator: str, config: tuple, channel: str) -> tuple:
    """`config` (sorted (field, value) pairs) reading `channel`, unless it sets a channel itself (`--set
    channel=...`) or the estimator reads none. The channel is always written out, even when it is the
    field's default (`task`): a config without one means "the run's main channel" to the functions here."""
    overrides = dict(config)
    if "channel" not in overrides and channel_default(estimator) is not None:
        overrides["channel"] = channel
    return tuple(sorted(overrides.items()))


def config_on_channel(
    handle: StoreHandle,
    run: str,
    estimator: str,
    overrides: dict,
    channel: str | None,
    channel_as: str = CLI_CHANNEL,
) -> tuple:
    """The sorted (field, value) pairs an estimator is looked up by in the views and commands: `overrides`
    (`--set` pairs) reading `channel` (a `channel` override wins; None: the run's main channel), checked
    against the run's channels (`channel_as`: see `resolve`). An unknown estimator is an InputError listing
    the known ones."""
    from backend.credit import as_trained  # noqa: PLC0415 - the recipe reads the importers' constants; on use
    from backend.estimators import registry  # noqa: PLC0415 - heavy (torch, every estimator); on use

    config = tuple(sorted(as_trained.trainer_config(handle, run, estimator, overrides).items()))
    chosen = resolve(handle, run, overrides.get("channel", channel), channel_as)
    try:
        return on_channel(estimator, config, chosen)
    except registry.UnknownEstimator as exc:
        raise InputError(str(exc)) from None


def set_main_channel(store: Store, run: str, channel: str) -> str:
    """Store `channel` (one of the run's channels, or `all`) as the run's main channel; returns it."""
    with store.transaction():
        return store.set_main_channel_of(store.run_id(run), channel)


def score_on(rewards: dict[str, float], channel: str) -> float | None:
    """One rollout's score on `channel` from its channel scores (`all`: their sum, missing ones skipped);
    None when it has none."""
    if channel == ALL_CHANNELS and ALL_CHANNELS not in rewards:
        present = [v for v in map(_number, rewards.values()) if v is not None]
        return sum(present) if present else None
    return _number(rewards.get(channel))


def _number(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):  # None, pandas' NA
        return None
    return None if math.isnan(number) else number
