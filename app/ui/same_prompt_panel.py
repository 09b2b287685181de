"""Compare's "same prompt across runs": for a prompt two or more of the runs side by side
were asked (`creditlens compare-runs --same-prompt`), each run's group at a chosen step drawn as one heatmap,
a row per response, with one estimator and one colour scale. Each row is the Group view's row of that run
(final advantage, the run's main channel), labelled with the run."""

from __future__ import annotations

import streamlit as st

from app import data, keys
from app.ui import heatmaps, scales, text, widgets
from app.view_data import group as group_data
from app.view_data import runs as runs_data

LATEST = "each run's latest"


def _latest(rows):
    """Each run's rows at the latest step it asked the prompt."""
    last = rows.groupby("run")["step"].transform("max")
    return rows[rows["step"] == last]


def _short(prompt: str) -> str:
    flat = " ".join(str(prompt).split())
    return flat if len(flat) <= 90 else flat[:89] + "…"


def draw(sel, runs: list[str], estimator: str) -> None:
    st.subheader("Same prompt across runs")
    if len(runs) < 2:
        st.caption(
            "Pick two to four runs under 'Runs side by side' in the sidebar to see their responses to the "
            "same prompt here."
        )
        return
    rows = runs_data.same_prompt(sel.db, tuple(runs))
    if rows.empty:
        st.info(f"No prompt is shared by two of the runs {', '.join(map(text.plain, runs))}.")
        return
    prompts = list(dict.fromkeys(rows["prompt"]))
    current = data.rollout(sel.db, sel.run, sel.rollout)["prompt"]
    pick, step_box = st.columns([3, 1])
    prompt = pick.selectbox(
        f"Prompt ({len(prompts)} asked in two or more of the runs)",
        prompts,
        index=prompts.index(current) if current in prompts else 0,
        format_func=_short,  # a selectbox shows its options as plain text
        key=keys.COMPARE_SAME_PROMPT,
    )
    mine = rows[rows["prompt"] == prompt]
    steps = sorted(set(mine["step"].tolist()))
    asking = mine.groupby("step")["run"].nunique()
    together = [s for s in steps if asking[s] == mine["run"].nunique()]  # every run asking it, asked it then
    options = [LATEST, *steps]
    step = step_box.selectbox(
        "Step",
        options,
        index=options.index(together[-1]) if together else 0,
        key=keys.COMPARE_SAME_STEP,
        help="A step at which the runs asked this prompt, or each run's latest step that asked it (runs "
        "count their steps each their own way)",
    )
    at = mine[mine["step"] == step] if step != LATEST else _latest(mine)
    values, tokens, untrained, missing, shown = {}, {}, {}, [], []
    for run in runs:
        groups = at.loc[at["run"] == run, ["group_id", "step"]].values.tolist()
        if not groups:
            missing.append(run)
            continue
        shown.append(f"{run} step {groups[0][1]}")
        channel = data.main_channel(sel.db, run)
        config = widgets.with_channel(estimator, (), channel)
        v, t, _, u = group_data.group_rows(sel.db, run, int(groups[0][0]), estimator, config, (), channel)
        for label in v:
            values[f"{run} · {label}"], tokens[f"{run} · {label}"] = v[label], t[label]
            untrained[f"{run} · {label}"] = u[label]
    flags = " ".join(f"--run {r}" for r in runs)
    when = f"at step {step}" if step != LATEST else f"at its latest step asking it ({', '.join(shown)})"
    st.caption(
        text.with_code(
            f"Each run's group asked this prompt {text.plain(when)}, one row per response: its final "
            f"advantage with {text.plain(estimator)} on the run's main channel, as the Group view draws it, "
            "on one colour scale (the largest |A| of all rows). Rows labelled run · rollout id and R, the "
            f"score. The groups: `creditlens compare-runs {flags} --same-prompt"
            + (f" --step {step}" if step != LATEST else "")
            + " --json`"
        )
    )
    if missing:
        never = "Never asked this prompt" if step == LATEST else f"Not asked this prompt at step {step}"
        st.caption(f"{never}: {', '.join(map(text.plain, missing))}.")
    if not values:
        return
    st.plotly_chart(
        heatmaps.credit_heatmap(
            values,
            [],
            row_tokens=tokens,
            peaks=scales.scale_peaks(values, "shared"),
            clickable=False,
            untrained=untrained,
        ),
        key="compare_same_prompt_heatmap",
        width="stretch",
        config={"displayModeBar": False},
    )
