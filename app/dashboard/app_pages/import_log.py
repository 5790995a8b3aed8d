"""Import: upload a training log (or give a path on this machine), in any format the importers read, and
go straight to its triage on the Run page."""

import streamlit as st

from grpo_doctor.app.dashboard import isolated_import, uploads
from grpo_doctor.app.dashboard.access import control_refusal
from grpo_doctor.app.dashboard.session import RUN_KEY, RUN_PAGE, RUN_PARAM, open_store, store_path
from grpo_doctor.diagnostics.importers import FORMATS, LogFormatError
from grpo_doctor.diagnostics.store import StoreError

st.title("Import a log")
st.caption("TRL/HF `trainer_state.json` or console output, ms-swift `logging.jsonl`, verl console or JSONL, "
           "TensorBoard events, W&B run files (`run-<id>.wandb`) and CSV exports, plain CSV or JSON lines, a training "
           "loop's printed `key=value` lines. The format is detected from the content; lines it cannot read are "
           "skipped and counted.")

AUTO = "detect from the content"
source = st.segmented_control("Source", ["Upload a file", "A path on this machine"], default="Upload a file",
                              key="import.source", required=True)
with st.form("import.form"):
    if source == "Upload a file":
        upload = st.file_uploader(f"Log file (up to {uploads.MAX_UPLOAD_MB} MB)", key="import.file",
                                  max_upload_size=uploads.MAX_UPLOAD_MB)
        path = None
    else:
        upload = None
        path = st.text_input("Path of a log file or folder", key="import.path",
                             placeholder="/path/to/output_dir/trainer_state.json")
    left, right = st.columns(2)
    fmt = left.selectbox("Format", [AUTO, *FORMATS], key="import.format",
                         format_func=lambda f: f if f == AUTO else f"{f}: {FORMATS[f].description}")
    name = right.text_input("Run name", key="import.name", placeholder="made from the file name")
    split_runs = st.checkbox("A run wherever the step counter starts again", key="import.split_runs",
                             help="By default a file is one run, split only at a new config, banner or run name, "
                                  "and into at most 3 runs.")
    submitted = st.form_submit_button("Import and diagnose", type="primary")

refused = control_refusal() if submitted else None  # importing writes runs (and reads this machine's paths)
if refused:
    st.error(f"Not imported: {refused}")
elif submitted:
    options = {"name": name.strip() or None, "fmt": None if fmt == AUTO else fmt, "split_runs": split_runs,
               "run": isolated_import.importer(store_path())}  # a limited child: a hostile file costs one import
    try:
        with open_store() as store:
            if upload is not None:
                made = uploads.import_upload(store, upload.name, upload, upload.size, **options)
            elif path:
                made = uploads.import_local(store, path.strip(), **options)
            else:
                raise uploads.UploadError("choose a file to upload, or give a path")
    except (uploads.UploadError, LogFormatError, StoreError, OSError) as e:
        st.error(f"Not imported: {e}")
    else:
        st.session_state[RUN_KEY] = made[0].run_id
        if len(made) == 1 and not made[0].notes:
            st.switch_page(RUN_PAGE, query_params={RUN_PARAM: str(made[0].run_id)})
        st.success(f"Imported {len(made)} run{'s' if len(made) > 1 else ''}.")
        for note in made[0].notes:
            st.info(note)
        for run in made:
            st.page_link(RUN_PAGE, label=f"{run.name}: {run.steps} steps", query_params={RUN_PARAM: str(run.run_id)})
