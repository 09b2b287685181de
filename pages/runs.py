"""Runs: the runs in the store with their summaries; import (upload or path) and delete (unless read-only)."""

import pandas as pd
import streamlit as st

from app import access, actions, data, keys, state
from app.ui import live, text
from app.view_data import shared

sel = state.selection()
if sel.run is not None:
    live.follow(sel.db, sel.run)  # Live: the page redraws when the selected run receives a step
st.title("Runs")
st.caption(f"Store: {data.db_path()}")
if keys.RUNS_FLASH in st.session_state:
    # the import summary is several lines (skipped records, tokenization, warnings): markdown joins lines
    # unless each ends in a hard break; run names and paths are untrusted text
    st.success(text.plain(st.session_state.pop(keys.RUNS_FLASH)).replace("\n", "  \n"))

runs = data.list_runs(sel.db)
if runs:
    table = pd.DataFrame(runs)[
        [
            "name",
            "source",
            "rollouts",
            "groups",
            "steps",
            "last_step",
            "tokens",
            "updated",
            "main_channel",
            "channels",
            "metrics",
            "model",
            "created",
        ]
    ]
    for listed in ("channels", "metrics"):
        table[listed] = table[listed].map(lambda names: ", ".join(names) or "–")
    table["model"] = table["model"].fillna("").replace("", "–")  # pandas 3 keeps NA through map()
    table["updated"] = pd.to_datetime(table["updated"], unit="s", utc=True)  # its latest import (UTC)
    st.dataframe(
        table,
        hide_index=True,
        width="stretch",
        column_config={
            "main_channel": st.column_config.TextColumn(
                "main channel", help="What every view and command reads when no channel is chosen"
            ),
            "channels": st.column_config.TextColumn(help="The reward channels the run scores"),
            "last_step": st.column_config.NumberColumn("last step", help="The run's highest training step"),
            "updated": st.column_config.DatetimeColumn(
                help="When the run last received rollouts (its latest import, UTC); a followed run grows",
                format="YYYY-MM-DD HH:mm:ss",
            ),
            "metrics": st.column_config.TextColumn(
                help="Per-rollout numbers that are not rewards (e.g. verl's acc): the Explorer's "
                "metric_<name> columns, charted in Trends"
            ),
        },
    )
else:
    st.info("No runs yet.")

if sel.run is not None:
    st.subheader(f"Mean score per step and channel · {text.plain(sel.run)}")
    means = data.step_channel_means(sel.db, sel.run)
    if len(means):
        st.caption("The mean of each channel's sequence score over the step's rollouts (not a success rate).")
        st.dataframe(means.pivot(index="step", columns="channel", values="mean"), width="stretch")

settings = data.settings()
if settings.read_only:
    st.info("This server runs in read-only mode: importing and deleting runs are switched off.")
    state.stop()

if sel.run is not None:
    st.subheader(f"Main channel · {text.plain(sel.run)}")
    channels = data.run_channels(sel.db, sel.run)
    choices = channels + ([shared.ALL_CHANNELS] if shared.ALL_CHANNELS not in channels else [])
    current = data.main_channel(sel.db, sel.run)
    pick, button = st.columns([3, 1], vertical_alignment="bottom")
    wanted = pick.selectbox(
        "The channel every view and command reads by default",
        choices,
        index=choices.index(current) if current in choices else 0,
        key=f"runs_main_channel_{sel.run}",
        help="all: the channel scores summed per rollout first (TRL's combined reward). Each view can still "
        "pick another channel.",
    )
    if button.button("Set main channel", key="runs_main_channel_button", disabled=wanted == current):
        try:
            actions.set_main_channel(settings, data.handle(), sel.run, wanted)
        except (actions.InputError, actions.StoreError, access.Refused) as exc:
            st.error(f"Main channel unchanged: {exc}")
        else:
            data.invalidate()
            st.session_state[keys.RUNS_FLASH] = f"Main channel of {sel.run!r}: {wanted}."
            state.rerun()

st.subheader("Import a run")
name = st.text_input("Run name", key="runs_import_name", placeholder="my-run")
fmt = st.selectbox("Format", ["detect", *actions.FORMATS], key="runs_import_format")
source = st.radio("From", ["upload", "path on this machine"], key="runs_import_source", horizontal=True)
upload = path = None
roots = ", ".join(str(r) for r in settings.import_roots)
if source == "upload":
    upload = st.file_uploader(
        "Rollout file (JSONL or Parquet)", type=["jsonl", "json", "parquet"], key="runs_import_upload"
    )
else:
    path = st.text_input(
        "File or folder",
        key="runs_import_path",
        placeholder="/path/to/rollouts.jsonl",
        help=f"Inside one of the folders this server imports from: {roots}",
    )
    st.caption(f"Path imports read only inside: {text.plain(roots)}")
model = st.text_input(
    "Model folder (optional)",
    key="runs_import_model",
    placeholder="/path/to/hf-model",
    help=f"A local Hugging Face folder inside the folders this server imports from ({roots}): its "
    "tokenizer cuts responses that have no token ids. Without one, the simple tokenization is used.",
)

channel_box, main_box = st.columns(2)
channel_names = channel_box.text_input(
    "Reward channels (optional; trl and verl)",
    key="runs_import_channels",
    placeholder="correctness,format",
    help="The columns (TRL) or keys (verl) that become reward channels, separated by commas; other numbers "
    "become per-rollout metrics, the rest is kept as metadata. Default: TRL's float columns; verl's "
    "score.",
)
main_name = main_box.text_input(
    "Main channel (optional)",
    key="runs_import_main_channel",
    placeholder="task, a channel name, or all",
    help="What every view and command reads by default. Default: task when the run has it, else its one "
    "channel, else all (the channel scores summed per rollout, as TRL trains).",
)

append = st.checkbox(
    "Append to an existing run",
    key="runs_import_append",
    help="Add the rollouts to the run of this name on purpose (its model and channels must match). Without "
    "it, importing other content into an existing run is refused; the same content again adds nothing.",
)

if st.button("Import", key="runs_import_button", type="primary"):
    try:
        if not name.strip():
            raise actions.InputError("give the run a name")
        if source == "upload" and upload is None:
            raise actions.InputError("choose a file to upload")
        if source != "upload" and not (path or "").strip():
            raise actions.InputError("give a file or folder path")
        bar = st.progress(0.0, text="importing…")

        def progress(fraction: float) -> None:
            bar.progress(min(max(float(fraction), 0.0), 1.0), text=f"importing… {fraction:.0%}")

        kind = None if fmt == "detect" else fmt
        options = {
            "channels": [c.strip() for c in channel_names.split(",") if c.strip()] or None,
            "main_channel": main_name.strip() or None,
            "append": append,
        }
        if source == "upload":
            report = actions.import_upload(
                settings,
                data.handle(),
                upload.name,
                upload.getvalue(),
                name,
                kind,
                progress,
                model,
                **options,
            )
        else:
            report = actions.import_from_path(
                settings, data.handle(), path.strip(), name, kind, progress, model, **options
            )
        bar.progress(1.0, text="done")
        data.invalidate()
        st.session_state[keys.RUNS_FLASH] = report.message()
        state.rerun()
    except (actions.InputError, actions.StoreError, access.Refused) as exc:
        st.error(f"Import failed, nothing was written: {exc}")

st.subheader("Delete a run")
if runs:
    victim = st.selectbox("Run", [r["name"] for r in runs], key="runs_delete_name")
    confirm = st.checkbox(f"Yes, delete {victim!r} and everything stored for it", key="runs_delete_confirm")
    if st.button("Delete", key="runs_delete_button", disabled=not confirm):
        try:
            actions.delete_run(settings, data.handle(), victim)
        except (actions.StoreError, access.Refused) as exc:
            st.error(f"Delete failed: {exc}")
        else:
            data.invalidate()
            st.session_state[keys.RUNS_FLASH] = f"Deleted run {victim!r}."
            state.rerun()
