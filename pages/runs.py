"""Runs: the runs in the store with their summaries; import (upload or path) and delete (unless read-only)."""

import pandas as pd
import streamlit as st

from app import access, actions, data, state, views

sel = state.selection()
st.title("Runs")
st.caption(f"Store: {data.db_path()}")
if "runs_flash" in st.session_state:
    st.success(st.session_state.pop("runs_flash"))

runs = data.list_runs(sel.db)
if runs:
    table = pd.DataFrame(runs)[
        ["name", "source", "rollouts", "groups", "steps", "tokens", "channels", "model", "created"]
    ]
    table["channels"] = table["channels"].map(", ".join)
    table["model"] = table["model"].fillna("").replace("", "–")  # pandas 3 keeps NA through map()
    st.dataframe(table, hide_index=True, width="stretch")
else:
    st.info("No runs yet.")

if sel.run is not None:
    st.subheader(f"Reward rates · {views.plain(sel.run)}")
    means = data.step_channel_means(sel.db, sel.run)
    if len(means):
        st.dataframe(means.pivot(index="step", columns="channel", values="mean"), width="stretch")

settings = data.settings()
if settings.read_only:
    st.info("This server runs in read-only mode: importing and deleting runs are switched off.")
    st.stop()

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
    st.caption(f"Path imports read only inside: {views.plain(roots)}")
model = st.text_input(
    "Model folder (optional)", key="runs_import_model", placeholder="/path/to/hf-model",
    help=f"A local Hugging Face folder inside the folders this server imports from ({roots}): its "
         "tokenizer cuts responses that have no token ids. Without one, the simple tokenization is used.",
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
        if source == "upload":
            report = actions.import_upload(
                settings, data.handle(), upload.name, upload.getvalue(), name, kind, progress, model
            )
        else:
            report = actions.import_from_path(settings, data.handle(), path.strip(), name, kind, progress,
                                              model)
        bar.progress(1.0, text="done")
        data.invalidate()
        st.session_state["runs_flash"] = report.message()
        st.rerun()
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
            st.session_state["runs_flash"] = f"Deleted run {victim!r}."
            st.rerun()
