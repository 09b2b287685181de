"""One group's facts (the Group view's header, `creditlens group`): its responses, their lengths and each
channel's score over them. Built from the Explorer's rows of the group (`explorer.rollout_table` filtered on
`group_id`, what `creditlens rollouts --where group_id=G` prints), so the two never disagree."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from backend.core.errors import InputError
from backend.store import StoreHandle
from backend.store import explorer_queries as queries
from backend.views import explorer


@dataclass(frozen=True)
class ChannelScores:
    """A channel's scores over the group's responses (None where no response has one)."""

    channel: str
    mean: float | None
    min: float | None
    max: float | None
    distinct: int  # different scores: 1 means no response scores differently from the rest


@dataclass(frozen=True)
class GroupSummary:
    group: int
    steps: list[int]
    rollouts: int
    length_min: int
    length_mean: float
    length_max: int
    zero_variance: bool  # every response the same score on the run's main channel
    channels: list[ChannelScores]

    def as_dict(self) -> dict:
        return asdict(self)


def group_summary(handle: StoreHandle, run: str, group: int) -> GroupSummary:
    """The facts of group `group` of `run` over all its responses (an InputError names a missing group)."""
    query = explorer.ExplorerQuery(filters=(explorer.Filter("group_id", "=", float(group)),), limit=None)
    rows = explorer.rollout_table(handle, run, query).rows
    if rows.empty:
        raise InputError(
            f"run {run!r} has no group {group} (group ids as `creditlens rollouts --run {run}` shows them)"
        )
    with handle.read() as store:
        names = queries.run_channels(store, store.run_id(run))
    channels = []
    for alias, name in explorer.unique_columns("score", names):
        scores = rows[alias].dropna().astype(float) if alias in rows else rows[alias].iloc[:0]
        channels.append(
            ChannelScores(
                name,
                float(scores.mean()) if len(scores) else None,
                float(scores.min()) if len(scores) else None,
                float(scores.max()) if len(scores) else None,
                int(scores.nunique()),
            )
        )
    lengths = rows["length"].astype(int)
    return GroupSummary(
        int(group),
        sorted(int(s) for s in rows["step"].unique()),
        len(rows),
        int(lengths.min()),
        float(lengths.mean()),
        int(lengths.max()),
        bool(rows["zero_variance"].fillna(False).all()),
        channels,
    )
