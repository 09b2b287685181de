"""The notebook API's two objects: `Lens` (a store) and `Run` (one run of it). No logic of their own."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from backend.core import workers as work
from backend.core.errors import InputError
from backend.credit import as_trained, landed, main_channel
from backend.credit.token_rows import TOKEN_ROWS_SCHEMA, estimate_config, token_tables
from backend.estimators import registry
from backend.monitor import compare_runs as run_comparison
from backend.monitor import config as monitor_config
from backend.monitor import monitors as monitor
from backend.store import StoreHandle, store_handle
from backend.store.runs import RUN_FIELDS
from backend.views import attribution as attribution_view
from backend.views import compare_runs, explain, explorer, turns

# Errors name what a Python user wrote: keyword arguments, not the command line's `--set` and `--channel`.
CHANNEL_AS = "channel={!r}"


def open(  # noqa: A001 - `creditlens.open(path)`, as a file is opened
    path: str | Path | None = None, *, workers: int | None = None, ray: str | None = None
) -> Lens:
    """The store at `path` (default: the one the command line uses, ~/.creditlens/runs.duckdb). `workers`
    and `ray` split the whole-run estimates its methods compute, as `--workers` and `--ray` do (default:
    the machine's cores for a run of 20M tokens or more; `backend.core.workers`)."""
    handle = store_handle(Path(path).expanduser() if path is not None else None)
    return Lens(handle, work.Workers(workers, ray))


def _split(method):
    """The method runs with its object's workers (`--workers`/`--ray` of the command line)."""

    @functools.wraps(method)
    def split(self, *args, **kwargs):
        with work.using(self.workers):
            return method(self, *args, **kwargs)

    return split


class Lens:
    """A Credit Lens store. Each call opens the store for that call only, so a command or the app may
    write to it in between (the same rule as the command line's)."""

    def __init__(self, handle: StoreHandle, workers: work.Workers = work.IN_PROCESS):
        self.handle, self.workers = handle, workers

    def __repr__(self) -> str:
        return f"creditlens.open({str(self.handle.path)!r})"

    def runs(self) -> pd.DataFrame:
        """One row per run (`creditlens runs --json`): name, source, model, verifier, created, rollouts,
        groups, steps, tokens, channels (its reward channels), main_channel, metrics (the names of its
        per-rollout metrics, e.g. verl's `acc`); the same columns when the store has no run."""
        with self.handle.read() as store:
            return pd.DataFrame(store.list_runs(), columns=list(RUN_FIELDS))

    @_split
    def trends(
        self,
        runs: list[str] | tuple[str, ...],
        estimator: str | None = None,
        *,
        channel: str | None = None,
        credit: str = "final",
        **params,
    ) -> pd.DataFrame:
        """Several runs' trends (`creditlens trends --run a --run b ...`): one row per run and step, `run`
        first; each run's rows are its `run(name).trends(...)`."""
        runs = list(runs)
        estimator = as_trained.chosen_estimator(self.handle, runs, estimator, fallback=None)
        if estimator is not None:
            _check_params(estimator, params)
        return compare_runs.run_trends(
            self.handle, runs, estimator, params, channel, credit=credit, channel_as=CHANNEL_AS
        )

    @_split
    def compare(
        self,
        runs: list[str] | tuple[str, ...],
        estimator: str | None = None,
        *,
        channel: str | None = None,
        config: str | Path | None = None,
        **params,
    ) -> pd.DataFrame:
        """Runs side by side (`creditlens compare-runs --json`): one row per run with its size, last and
        best mean score per channel, credit shares by token class at its first and last step, entropy, KL
        and length at its last step, the monitors' earliest warning (`first_alert_step`, None when quiet) and
        `config.<key>` for the configuration keys that differ. `config`: the monitors' TOML settings.
        Default estimator: the runs' trainer's own advantage (as trained) where they share one, else grpo."""
        estimator = as_trained.chosen_estimator(self.handle, list(runs), estimator)
        _check_params(estimator, params)
        settings = monitor_config.load_settings(config)
        return run_comparison.compare_runs(
            self.handle, list(runs), estimator, params, channel, settings=settings, channel_as=CHANNEL_AS
        )

    @_split
    def compare_alerts(
        self,
        runs: list[str] | tuple[str, ...],
        estimator: str | None = None,
        *,
        channel: str | None = None,
        **params,
    ) -> pd.DataFrame:
        """Every warning the monitors raise on each run (`creditlens compare-runs --alerts --json`): run,
        step, severity, detector, statistic; the marks on the Trends view's run traces."""
        estimator = as_trained.chosen_estimator(self.handle, list(runs), estimator)
        _check_params(estimator, params)
        return run_comparison.run_alerts(
            self.handle, list(runs), estimator, params, channel, channel_as=CHANNEL_AS
        )

    def same_prompt(
        self, runs: list[str] | tuple[str, ...], prompt: str | None = None, step: int | None = None
    ) -> pd.DataFrame:
        """The groups the runs were asked the same prompt in (`creditlens compare-runs --same-prompt --json`):
        prompt, run, step, group_id, responses, for prompts two or more of the runs were asked."""
        return compare_runs.same_prompt(self.handle, list(runs), prompt, step)

    def run(self, name: str) -> Run:
        """The run called `name` (an InputError naming the known runs when there is none)."""
        with self.handle.read() as store:
            store.run_id(name)
        return Run(self.handle, name, self.workers)


def _check_params(estimator: str, params: dict[str, Any]) -> None:
    """Bad estimator names and keyword values fail here, as `--set` does."""
    try:
        registry.make_config(estimator, **params)
    except registry.UnknownEstimator as exc:
        raise InputError(str(exc)) from None
    except ValueError as exc:
        raise InputError(f"{estimator} keyword arguments: {exc}") from None


class Run:
    """One run of a store. Estimator parameters are keyword arguments (`epsilon=1e-4`), as `--set`."""

    def __init__(self, handle: StoreHandle, name: str, workers: work.Workers = work.IN_PROCESS):
        self.handle, self.name, self.workers = handle, name, workers

    def __repr__(self) -> str:
        return f"<creditlens run {self.name!r} in {self.handle.path}>"

    @property
    def main_channel(self) -> str:
        """The channel every method reads when none is given (`creditlens main-channel`)."""
        return main_channel.main_channel(self.handle, self.name)

    def _opening(self, estimator: str | None, fallback: str | None = "grpo") -> str | None:
        """`estimator`, or the credit the run opens on: its trainer's own (as trained), else `fallback`."""
        return as_trained.chosen_estimator(self.handle, self.name, estimator, fallback)

    def _explorer_config(self, estimator: str | None, params: dict[str, Any], channel: str | None) -> tuple:
        """The sorted (field, value) pairs the Explorer functions take, on `channel` (default: main)."""
        if estimator is None:
            return ()
        _check_params(estimator, params)
        return main_channel.config_on_channel(self.handle, self.name, estimator, params, channel, CHANNEL_AS)

    @_split
    def rollouts(
        self,
        estimator: str | None = None,
        *,
        channel: str | None = None,
        compare: str | None = None,
        sort: str = "rollout_id",
        search: str = "",
        where: list[str] | tuple[str, ...] = (),
        limit: int | None = None,
        offset: int = 0,
        credit: str = "final",
        **params,
    ) -> pd.DataFrame:
        """The Explorer's table (`creditlens rollouts`): one row per rollout. `sort="-col"` sorts
        descending; `where` holds filters as the command line writes them (`"length>=100"`); with an
        estimator, the credit's shares by token class and `excess_<class>` (share of |A| − share of
        tokens), of A_final (`credit="final"`) or of the estimator's output (`credit="channel"`); with
        `compare`, the Spearman column. Default estimator: the trainer's own advantage on a run a trainer
        made (as trained), else none."""
        estimator = self._opening(estimator, None)
        descending = sort.startswith("-")
        query = explorer.ExplorerQuery(
            estimator=estimator,
            config=self._explorer_config(estimator, params, channel),
            compare=compare,
            compare_config=self._explorer_config(compare, {}, channel),
            sort=sort.removeprefix("-"),
            descending=descending,
            search=search,
            filters=explorer.parse_filters(where),
            limit=limit,
            offset=offset,
            credit=credit,
        )
        return explorer.rollout_table(self.handle, self.name, query).rows

    @_split
    def trends(
        self, estimator: str | None = None, *, channel: str | None = None, credit: str = "final", **params
    ) -> pd.DataFrame:
        """One row per step (`creditlens trends`): scores, length, entropy, KL, zero-variance share, ...;
        with an estimator, the credit's shares and excess by class (`credit` as in `rollouts`) and the
        quantiles of the estimator's A."""
        estimator = self._opening(estimator, None)
        config = self._explorer_config(estimator, params, channel)
        return explorer.step_trends(self.handle, self.name, estimator, config, credit=credit)

    def turns(
        self, estimator: str | None = None, *, group: int | None = None, channel: str | None = None, **params
    ) -> pd.DataFrame:
        """An agent run by turn (`creditlens turns`): per step and assistant turn index the share of
        |A_final|; with `group`, that group's responses turn by turn (role, span, trained, credit, text)."""
        estimator = self._opening(estimator)
        config = self._explorer_config(estimator, params, channel)
        if group is None:
            return turns.turn_shares(self.handle, self.name, estimator, config)
        return turns.group_turns(self.handle, self.name, group, estimator, config)

    @_split
    def estimate(
        self, estimator: str | None = None, *, channel: str | None = None, use_cache: bool = True, **params
    ) -> pd.DataFrame:
        """One row per real token (`creditlens estimate`): rollout_id, group_id, pos, token_id, token,
        token_class (the run's token classes, `creditlens token-classes`), advantage. `channel="all"` sums
        the channel scores per rollout (TRL's combined reward). Default: the trainer's own advantage on a
        run a trainer made (as trained), else grpo."""
        estimator = self._opening(estimator)
        name, config = estimate_config(
            self.handle,
            self.name,
            estimator,
            params,
            channel,
            set_as=f"{estimator} keyword arguments",
            channel_as=CHANNEL_AS,
        )
        rows = token_tables(self.handle, self.name, name, config, use_cache=use_cache)
        tables = list(rows.tables())
        return pa.concat_tables(tables or [TOKEN_ROWS_SCHEMA.empty_table()]).to_pandas()

    def explain(
        self,
        rollout: int,
        estimator: str | None = None,
        pos: int | None = None,
        *,
        channel: str | None = None,
        **params,
    ) -> dict:
        """Why `rollout`'s tokens got their credit, as `creditlens explain --json` prints it: tokens, each
        channel's advantage and contribution, the final advantage, the estimator's terms; with `pos`, the
        derivation of A at that token."""
        estimator = self._opening(estimator)
        config = self._explorer_config(estimator, params, channel)
        result = explain.explain_rollout(self.handle, self.name, rollout, estimator, config)
        out = result.to_json()
        if pos is not None:
            if not 0 <= pos < len(result.tokens):
                raise InputError(f"pos {pos}: rollout {rollout} has {len(result.tokens)} tokens")
            out["derivation"] = {"pos": pos, "lines": explain.derivation(result.terms, pos)}
        return out

    @_split
    def monitor(
        self,
        estimator: str | None = None,
        *,
        channel: str | None = None,
        config: str | Path | None = None,
        **params,
    ) -> pd.DataFrame:
        """The credit-health alerts (`creditlens monitor --json`), one row per alert: detector, statistic,
        step (the onset), severity, value, baseline, message, rollouts, ... `config`: a TOML file of
        thresholds (docs/monitors.md). An empty frame when the run is healthy."""
        settings = monitor_config.load_settings(config)
        estimator = self._opening(estimator)
        report = monitor.run_monitors(
            self.handle, self.name, estimator, self._explorer_config(estimator, params, channel), settings
        )
        return pd.DataFrame([a.as_dict() for a in report.alerts])

    def attribution(
        self,
        rollout: int,
        pos: int,
        *,
        scope: str = "group",
        estimator: str | None = None,
        model: str | None = None,
        device: str | None = None,
        lr: float | None = None,
    ) -> dict:
        """Whose credit moved token `pos` of `rollout` (`creditlens attribution --json`): the step, the
        model, the trainer's settings used, `predicted_delta` (first-order Δ log π of the token after its
        step's update) and `shares`, a DataFrame with one row per token of the group (`scope="step"`: of the
        step): rollout_id, pos, token, trained, advantage, coefficient, inner, share (they sum to
        predicted_delta)."""
        result = attribution_view.attribute(
            self.handle,
            self.name,
            rollout,
            pos,
            scope=scope,
            estimator=estimator,
            model=model,
            device=device,
            lr=lr,
        )
        return {**result.to_json(), "shares": result.shares}

    def predicted_change(
        self,
        step: int,
        *,
        estimator: str | None = None,
        model: str | None = None,
        device: str | None = None,
        lr: float | None = None,
    ) -> pd.DataFrame:
        """The first-order Δ log π of every token of `step` after its update (`creditlens attribution --step
        --json`): rollout_id, pos, token, trained, advantage, coefficient, predicted."""
        return attribution_view.predicted_step(
            self.handle, self.name, step, estimator=estimator, model=model, device=device, lr=lr
        )

    def landed(
        self,
        table: str = "steps",
        estimator: str | None = None,
        *,
        source: str = "auto",
        steps: list[int] | None = None,
        compare: list[str] | None = None,
        **params,
    ) -> pd.DataFrame:
        """Did the credit land (`creditlens landed --json`): the realized Δ log π after each update beside
        the credit (default: as trained). `table`: `steps` (Spearman and sign agreement per step), `classes`
        (credit share vs mean Δ per token class), `classes_by_step`, `rollouts` (the Explorer's columns),
        `tokens` (one row per token), or `estimators` (how well each of `compare` predicts Δ). `source`:
        recorded, checkpoints (what `creditlens landed` scored and cached) or auto."""
        tables = ("steps", "classes", "classes_by_step", "rollouts", "tokens", "estimators")
        if table not in tables:
            raise InputError(f"table={table!r}: choose one of {', '.join(tables)}")
        if table == "estimators":
            if not compare:
                raise InputError("table='estimators' needs compare=[estimator names]")
            return landed.by_estimator(self.handle, self.name, list(compare), source=source, steps=steps)
        tokens = landed.landed_tokens(self.handle, self.name, estimator, params, source=source, steps=steps)
        if table == "steps":
            return landed.by_step(tokens)
        if table == "rollouts":
            return landed.by_rollout(tokens)
        if table == "tokens":
            return tokens.tokens
        return landed.by_class(tokens, per_step=table == "classes_by_step")
