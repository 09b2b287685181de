"""A multi-turn agent run's columns of the rollout table, as SQL. From the rollouts' stored turns:
`turns` (every role), `assistant_turns` (the policy's) and `tool_calls` (the tool and environment turns).
With an estimator, over a `credit_summary` row aliased `c` (migration 013): `turn_share_first` and
`turn_share_last`, the first and the last assistant turn's share of the rollout's Σ|A|, and
`turn_share_calls`, the share on the assistant turns a tool's or an environment's turn follows (the turns
that called a tool; `backend.credit.credit_summary.turn_credit` sums them). A tool's, environment's or
user's turn is never trained, so every estimator gives it 0: the credit splits among the assistant's turns.
NULL where the rollout has no credit (Σ|A| = 0)."""

from __future__ import annotations

COUNT_COLUMNS = ("turns", "assistant_turns", "tool_calls")
SHARE_COLUMNS = ("turn_share_first", "turn_share_last", "turn_share_calls")


ROLES_SQL = "json_extract_string(turns, '$[*].role')"  # a rollout's turn roles, in order


def counts_join() -> str:
    """A LEFT JOIN, aliased `tu`, of the turn counts per rollout onto a table aliased `s`; its one
    parameter is the run id."""
    return (
        " LEFT JOIN (SELECT rollout_id, json_array_length(turns)::INTEGER AS turns, "
        f"len(list_filter({ROLES_SQL}, lambda r: r = 'assistant'))::INTEGER AS assistant_turns, "
        f"len(list_filter({ROLES_SQL}, lambda r: r IN ('tool', 'environment')))::INTEGER AS tool_calls "
        "FROM rollouts WHERE run_id = ?) tu ON tu.rollout_id = s.rollout_id"
    )


def count_columns() -> list[str]:
    return [f"tu.{name}" for name in COUNT_COLUMNS]


def share_columns() -> list[str]:
    """The credit-by-turn expressions over `c`, named as SHARE_COLUMNS."""
    total = "nullif(c.abs_total, 0)"
    first, last, calls = SHARE_COLUMNS
    return [
        f"c.turn_abs[1] / {total} AS {first}",
        f"c.turn_abs[-1] / {total} AS {last}",  # DuckDB: -1 is the last entry
        f"c.call_abs / {total} AS {calls}",
    ]
