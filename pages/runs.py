"""Runs: the runs in the store with their summaries; import (upload or path) and delete."""

import tempfile
from pathlib import Path

import pandas as pd
import streamlit as st

from app import data, state, views
from backend.errors import InputError, StoreError
from backend.uploads import safe_upload_path

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
    table["model"] = table["model"].map(lambda m: m or "–")
    st.dataframe(table, hide_index=True, width="stretch")
else:
    st.info("No runs yet.")

if sel.run is not None:
    st.subheader(f"Reward rates · {views.plain(sel.run)}")
    means = data.step_channel_means(sel.db, sel.run)
    if len(means):
        st.dataframe(means.pivot(index="step", columns="channel", values="mean"), width="stretch")

st.subheader("Import a run")
name = st.text_input("Run name", key="runs_import_name", placeholder="my-run")
fmt = st.selectbox("Format", ["detect", "native", "verl", "trl"], key="runs_import_format")
source = st.radio("From", ["upload", "path on this machine"], key="runs_import_source", horizontal=True)
upload = path = None
if source == "upload":
    upload = st.file_uploader(
        "Rollout file (JSONL or Parquet)", type=["jsonl", "json", "parquet"], key="runs_import_upload"
    )
else:
    path = st.text_input("File or folder", key="runs_import_path", placeholder="/path/to/rollouts.jsonl")
model = st.text_input(
    "Model folder (optional)", key="runs_import_model", placeholder="/path/to/hf-model",
    help="A local Hugging Face folder: its tokenizer cuts responses that have no token ids, and Resample and "
         "`creditlens score` use it. Without one, the simple tokenization is used.",
)


def run_import(target: Path, shown_as: str | None = None) -> None:
    from backend.ingest import import_path

    bar = st.progress(0.0, text="importing…")

    def progress(fraction: float) -> None:
        bar.progress(min(max(float(fraction), 0.0), 1.0), text=f"importing… {fraction:.0%}")

    try:
        with data.handle().write() as store:
            report = import_path(store, target, name, fmt=None if fmt == "detect" else fmt,
                                 model_dir=(model or "").strip() or None, on_progress=progress)
    except (InputError, StoreError) as exc:
        if shown_as is None:
            raise
        # name the file the user uploaded, not the temporary copy it was read from
        message = str(exc).replace(str(target), shown_as).replace(str(target.parent), shown_as)
        raise type(exc)(message) from None
    bar.progress(1.0, text="done")
    data.invalidate()
    st.session_state["runs_flash"] = report.message()
    st.rerun()


if st.button("Import", key="runs_import_button", type="primary"):
    try:
        if not name.strip():
            raise InputError("give the run a name")
        if source == "upload":
            if upload is None:
                raise InputError("choose a file to upload")
            # keep the uploaded file's own name, made safe, so import errors name the file the user knows
            with tempfile.TemporaryDirectory() as tmp:
                target = safe_upload_path(tmp, upload.name)
                target.write_bytes(upload.getvalue())
                run_import(target, shown_as=upload.name)
        else:
            if not (path or "").strip():
                raise InputError("give a file or folder path")
            run_import(Path(path).expanduser())
    except (InputError, StoreError) as exc:
        st.error(f"Import failed, nothing was written: {exc}")

st.subheader("Delete a run")
if runs:
    victim = st.selectbox("Run", [r["name"] for r in runs], key="runs_delete_name")
    confirm = st.checkbox(f"Yes, delete {victim!r} and everything stored for it", key="runs_delete_confirm")
    if st.button("Delete", key="runs_delete_button", disabled=not confirm):
        with data.handle().write() as store:
            store.delete_run(victim)
        data.invalidate()
        st.session_state["runs_flash"] = f"Deleted run {victim!r}."
        st.rerun()
