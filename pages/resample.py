"""Resample: Monte Carlo values V̂(s_t) at chosen positions of a rollout — positions by click or
suggestion, M suffixes each, a progress bar and a cancel; results stored for the `suffix_mc` estimator.
Below, the model-based scores (OAR-P, OAR-G, GCPO) of the rollout's group, computed on demand and stored."""

import streamlit as st

from app import access, data, jobs, keys, state
from app.ui import charts, heatmaps, panels, sections, widgets
from app.view_data import resample as resample_data
from app.view_data import shared

sel = panels.rollout_selection()
st.title(f"Resample suffixes · rollout #{sel.rollout}")
record = panels.prompt_and_response(sel)
info = data.run_info(sel.db, sel.run)
view = panels.compute_or_explain(shared.rollout_view, sel.db, sel.run, sel.group, sel.rollout, "grpo", ())
L = len(view.tokens)

settings = data.settings()
env, env_problem = resample_data.environment(info)
used, no_model = data.rollout_model(sel.db, sel.run, sel.rollout)  # the rollout's step checkpoint
model_dir = used["model"] if used else None
# a model that cannot be loaded is said in place: the page still renders
model_problem = no_model or resample_data.model_folder_problem(model_dir)
if used:
    st.caption(f"Model: {used['why']} ({used['label']}).")
if not settings.read_only:
    st.caption(
        "Click tokens in the heatmap to add them as positions (V̂(s_t) keeps y_<t and samples the rest)."
    )
if env is not None and record.get("turns"):
    st.caption(
        f"Agent run: each suffix is the rest of the episode through the run's tool loop ({env.name}): the "
        f"policy writes, the tool answers (its tokens untrained), up to {env.max_turns} turns; the whole "
        "response is scored. Positions inside a tool's output are refused."
    )
elif env_problem:
    st.warning(env_problem)
# A click reruns the page with the clicked cell in the chart's state; the chosen positions are outlined.
clicked = panels.new_click(keys.RESAMPLE_HEATMAP, n_rows=1)
values = data.resample_values(sel.db, sel.run, sel.rollout)
if keys.RESAMPLE_POSITIONS not in st.session_state:
    # a link's positions, else the positions already resampled (the chart below shows them), else a suggestion
    from_url = [int(p) for p in (state.url_value(keys.URL_POSITIONS) or "").split(",") if p.strip().isdigit()]
    stored = [int(p) for p in values["pos"] if p < L]
    entropies = view.token_info["entropy"].dropna().tolist() or None
    st.session_state[keys.RESAMPLE_POSITIONS] = (
        [p for p in from_url if p < L]
        or stored
        or resample_data.suggested("entropy", record, view.tokens, entropies, 3, env)
    )
if clicked is not None:
    st.session_state[keys.RESAMPLE_POSITIONS] = sorted({*st.session_state[keys.RESAMPLE_POSITIONS], clicked})
start, stop = panels.token_window(L, keys.RESAMPLE_WINDOW, view.final)
st.plotly_chart(
    heatmaps.credit_heatmap(
        {"final": view.final[start:stop]},
        view.tokens[start:stop],
        token_info=view.token_info.iloc[start:stop].reset_index(drop=True),
        offset=start,
        highlight=[] if settings.read_only else st.session_state[keys.RESAMPLE_POSITIONS],
        untrained=None if view.dimmed is None else view.dimmed[start:stop],
    ),
    key=keys.RESAMPLE_HEATMAP,
    on_select="rerun",
    selection_mode="points",
    width="stretch",
    config={"displayModeBar": False},
)


def suggest(kind: str) -> None:
    entropies = view.token_info["entropy"].dropna().tolist() or None
    st.session_state[keys.RESAMPLE_POSITIONS] = resample_data.suggested(
        kind, record, view.tokens, entropies, 5, env
    )
    st.session_state[keys.RESAMPLE_SUGGESTED] = kind


job = st.session_state.get(keys.RESAMPLE_JOB)
if settings.read_only:
    st.info("This server runs in read-only mode: resampling is switched off. Stored values are shown below.")
else:
    left, mid, right = st.columns([3, 1, 1])
    with left:
        positions = st.multiselect(
            "Positions",
            list(range(L)),
            key=keys.RESAMPLE_POSITIONS,
            format_func=lambda p: f"{p} {view.tokens[p]!r}",
        )
        b1, b2 = st.columns(2)
        b1.button(
            "Suggest: high entropy", on_click=suggest, args=("entropy",), key="resample_suggest_entropy"
        )
        b2.button("Suggest: step ends", on_click=suggest, args=("steps",), key="resample_suggest_steps")
    with mid:
        samples = state.url_widget(
            st.number_input,
            "M samples per position",
            key=keys.RESAMPLE_SAMPLES,
            url=keys.URL_SAMPLES,
            default=8,
            cast=int,
            min_value=1,
            max_value=256,
            step=1,
        )
    with right:
        engine_name = state.url_widget(
            st.selectbox,
            "Engine",
            key=keys.RESAMPLE_ENGINE,
            url=keys.URL_ENGINE,
            default="auto",
            options=["auto", "transformers", "vllm"],
        )
        st.caption(resample_data.engine_note(engine_name))
    state.publish(keys.URL_POSITIONS, ",".join(map(str, positions)))
    st.caption(f"At most {settings.max_suffixes} suffixes (positions × M) per request on this server.")

    if model_problem:
        st.warning(f"Resampling is off for this run. {model_problem}")

    if job is not None and job.running:
        if st.button("Cancel", key="resample_cancel", type="secondary"):
            job.cancel.set()
    elif st.button(
        "Run resampling", key="resample_run", type="primary", disabled=bool(model_problem or not positions)
    ):
        try:
            job = jobs.start_resample(
                settings,
                sel.db,
                data.handle_for(sel.db),
                sel.run,
                sel.rollout,
                lambda: resample_data.engine(model_dir, engine_name),
                record,
                info.get("verifier"),
                positions,
                samples,
                used["on_policy"],
                env,
            )
            st.session_state[keys.RESAMPLE_JOB] = job
        except access.Refused as exc:
            st.error(f"Resampling refused: {exc}")
        except (ValueError, RuntimeError) as exc:  # the model did not load: said here, the page goes on
            st.error(f"Resampling did not start: {exc}")

if widgets.follow_job(job, keys.RESAMPLE_SHOWN, "resampling", "suffixes"):
    r = job.result
    note = " (cancelled; finished samples kept)" if r.cancelled else ""
    st.success(
        f"{len(r.samples)} new suffixes, {r.tokens} tokens in {r.seconds:.2f} s with {r.engine}"
        f"{note}; stored. V̂ below pools them with any stored before at the same positions (its n "
        "counts all)."
    )

values = data.resample_values(sel.db, sel.run, sel.rollout)  # again: a finished job added samples
# The values, their tables and the model-based scores: tabs, each drawn only while open (a fresh load draws
# the first alone)
TABS = {
    "values": "V̂(s_t) along the rollout",
    "samples": "The values and the suffixes, as tables",
    "model": "Model-based credit: OAR-P, OAR-G, GCPO",
}
tabs = sections.lazy_tabs(TABS, keys.RESAMPLE_TAB, keys.URL_TAB)
if tabs["values"] is not None:
    with tabs["values"]:
        if values.empty:
            st.info("No resampled positions for this rollout yet.")
        else:
            st.caption(
                "Each V̂(s_t) pools every sample stored at its position (this view's runs, `creditlens "
                "resample`, the teacher): n counts them, and the suffixes table (the next tab) names each "
                "one's engine, model and the time it was drawn."
            )
            # the run's main score
            outcome = resample_data.score_on(record["rewards"], data.main_channel(sel.db, sel.run))
            st.plotly_chart(
                charts.value_estimates_figure(values, L, outcome), key="resample_values", width="stretch"
            )
if tabs["samples"] is not None:
    with tabs["samples"]:
        if values.empty:
            st.info("No resampled positions for this rollout yet.")
        else:
            st.dataframe(
                values,
                hide_index=True,
                width="stretch",
                column_config={
                    "value": st.column_config.NumberColumn("V̂(s_t)", format="%.3f"),
                    "stderr": st.column_config.NumberColumn("s.e.", format="%.3f"),
                },
            )
            st.subheader("Suffixes and their rewards")
            samples_frame = data.resample_samples(sel.db, sel.run, sel.rollout)
            st.dataframe(
                samples_frame[["pos", "sample_idx", "suffix_text", "reward", "engine", "model", "created"]],
                hide_index=True,
                width="stretch",
                column_config={
                    "suffix_text": st.column_config.TextColumn("suffix"),
                    "created": st.column_config.DatetimeColumn("sampled"),
                },
            )

if tabs["model"] is not None:
    with tabs["model"]:
        st.caption(
            "Per-token scores from the policy itself (OAR: each reasoning token's influence on the final "
            "answer; GCPO: the log-prob contrast under a negative prompt), for this rollout's whole group. "
            "Once stored, the estimators oar_p, oar_g and gcpo work in every view, like "
            "`creditlens model-credit`."
        )
        credit_job = st.session_state.get(keys.MODEL_CREDIT_JOB)
        if not settings.read_only and model_problem:
            st.info(f"Model-based scores are off for this run. {model_problem}")
        elif not settings.read_only:
            method = st.selectbox("Method", list(jobs.MODEL_CREDIT_METHODS), key="resample_mc_method")
            if credit_job is not None and credit_job.running:
                if st.button("Cancel", key="resample_mc_cancel", type="secondary"):
                    credit_job.cancel.set()
            elif st.button("Compute for this group", key="resample_mc_run", type="primary"):
                chosen = (
                    "transformers"
                    if method == "oar_g"
                    else st.session_state.get(keys.RESAMPLE_ENGINE, "auto")
                )
                try:
                    credit_job = jobs.start_model_credit(
                        settings,
                        sel.db,
                        data.handle_for(sel.db),
                        sel.run,
                        sel.rollout,
                        lambda: resample_data.engine(model_dir, chosen),
                        method,
                        model_dir,
                        chosen,
                    )
                    st.session_state[keys.MODEL_CREDIT_JOB] = credit_job
                except access.Refused as exc:
                    st.error(f"Refused: {exc}")
                except (
                    ValueError,
                    RuntimeError,
                ) as exc:  # the model did not load: said here, the page goes on
                    st.error(f"Scoring did not start: {exc}")
        if widgets.follow_job(credit_job, keys.MODEL_CREDIT_SHOWN, "scoring", "sequences"):
            r = credit_job.result
            st.success(
                f"{r.method}: nothing stored (cancelled)"
                if r.cancelled
                else f"{r.method}: {r.stored} rollouts scored, {r.model_rows} model sequences in "
                f"{r.seconds:.1f} s with {r.engine}; stored"
            )
        cached = data.model_credit(sel.db, sel.run, sel.rollout)
        if cached.empty:
            st.info("No model-based scores for this rollout yet.")
        else:
            columns = ["method", "engine", "model", "settings", "created"]
            st.dataframe(cached[columns], hide_index=True, width="stretch")
