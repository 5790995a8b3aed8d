"""The Import page's work: a log uploaded through the browser (size-limited, written to a temporary folder
that is deleted once it is parsed) or a path on this machine, imported as one run."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from grpo_doctor.diagnostics.importers import Imported, LogFormatError, import_runs
from grpo_doctor.diagnostics.store import safe_run_name

#: Largest upload accepted, in MB (Streamlit's own limit is checked first, in the browser).
MAX_UPLOAD_MB = 200
_CHUNK = 1 << 20
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")
#: Longest name an upload is written under (file systems take 255 bytes; the name is ASCII by then).
_MAX_NAME = 120
#: Longest upload name an error message repeats.
_MAX_SHOWN = 200


class UploadError(Exception):
    """An upload refused (its message is one line)."""


def safe_name(filename: str) -> str:
    """The upload's base name with anything but letters, digits and ``._+-`` replaced (``events.out.tfevents.*``
    and ``trainer_state.json`` keep their names: the importers recognise them)."""
    name = _UNSAFE.sub("_", Path(filename.replace("\\", "/")).name).lstrip(".")
    if len(name) > _MAX_NAME:  # cut, keeping the suffix the importers go by (.csv, .jsonl, ...)
        stem, dot, suffix = name.rpartition(".")
        suffix = dot + suffix if stem and len(suffix) < 16 else ""
        name = name[: _MAX_NAME - len(suffix)] + suffix
    return name or "upload.log"


def shown_name(filename: str) -> str:
    """The upload's name as an error message gives it: one line, no control characters, cut when long."""
    text = " ".join("".join(c if c.isprintable() else " " for c in filename).split())
    if len(text) > _MAX_SHOWN:
        text = text[: _MAX_SHOWN - 1] + "…"
    return text or "(unnamed upload)"


def import_upload(store, filename: str, data: BinaryIO, size: int, *, name: str | None = None,
                  fmt: str | None = None, split_runs: bool = False, limit_mb: int = MAX_UPLOAD_MB,
                  run: Callable[..., list[Imported]] | None = None) -> list[Imported]:
    """Import an uploaded log as runs (one per run the file holds). The file is written to a fresh temporary
    folder (removed afterwards, whatever happens); a problem is a ``LogFormatError`` naming the upload, not the
    folder."""
    shown = shown_name(filename)
    if size > limit_mb * 1024 * 1024:
        raise UploadError(f"{shown}: {size / 1e6:.0f} MB is over the {limit_mb} MB upload limit; "
                          "import it by path instead")
    safe = safe_name(filename)
    with tempfile.TemporaryDirectory(prefix="grpo-doctor-upload-") as folder:
        # One level down: the importers look beside the log and one folder up (a checkpoint's training_args.bin,
        # ms-swift's args.json), and both must be this upload's own folders, never the shared temp folder.
        path = Path(folder) / "upload" / safe
        path.parent.mkdir()
        written = 0
        with open(path, "wb") as out:
            while chunk := data.read(_CHUNK):
                written += len(chunk)
                if written > limit_mb * 1024 * 1024:
                    raise UploadError(f"{shown}: over the {limit_mb} MB upload limit")
                out.write(chunk)
        run_name = name or store.unique_name(safe_run_name(Path(safe).stem, "upload"))
        try:
            return (run or import_runs)(store, path, name=run_name, fmt=fmt, split_runs=split_runs)
        except LogFormatError as e:
            raise LogFormatError(shown, e.problem.replace(str(path), shown)) from None


def import_local(store, path: str, *, name: str | None = None, fmt: str | None = None,
                 split_runs: bool = False, run: Callable[..., list[Imported]] | None = None) -> list[Imported]:
    """Import a log file or folder on this machine (``grpo-doctor import PATH``). ``run``: how (``import_runs`` in
    this process by default; the Import page passes ``isolated_import.importer``, a limited child process)."""
    return (run or import_runs)(store, Path(path).expanduser(), name=name, fmt=fmt, split_runs=split_runs)
