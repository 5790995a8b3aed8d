"""TensorBoard event files (``events.out.tfevents.*``): scalars, read record by record with
TensorBoard's own ``event_file_loader`` (memory stays bounded), plus HF's ``args`` text summary as
the config. A tag/step seen twice keeps the last value, as TensorBoard does after a restart."""

from __future__ import annotations

import json
import logging
import os
import re
import struct
from collections.abc import Iterator
from pathlib import Path

from grpo_doctor.diagnostics.config.keys import normalise_config
from grpo_doctor.diagnostics.importers._base import HELD_OUT_PREFIXES, SUMMARY_KEYS, ParsedLog, Source

EVENTS_GLOB = "events.out.tfevents."
MAX_FOLDER_ENTRIES = 100_000  # stop walking a huge tree


def looks_like_events(head: bytes) -> bool:
    """A TFRecord whose first record is an Event with a ``brain.Event:N`` file version."""
    if len(head) < 16:
        return False
    (length,) = struct.unpack("<Q", head[:8])
    return 0 < length < 1024 and b"brain.Event:" in head[12:12 + length]


def event_files(folder: Path) -> list[Path]:
    """Event files under ``folder`` (recursively), oldest first (by the timestamp in the name)."""
    found: list[Path] = []
    seen = 0
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in files:
            seen += 1
            if name.startswith(EVENTS_GLOB):
                found.append(Path(root) / name)
        seen += len(dirs)
        if seen > MAX_FOLDER_ENTRIES:
            break
    return sorted(found, key=_file_order)


def _file_order(path: Path) -> tuple:
    """Writers name files ``events.out.tfevents.<seconds>.<host>[.<pid>.<n>]``: order by the time,
    then by the per-process counter (two files of one second), then by path."""
    m = re.match(r"events\.out\.tfevents\.(\d+)", path.name)
    counter = re.search(r"\.(\d+)$", path.name)
    return (int(m[1]) if m else 0, int(counter[1]) if counter and m and counter.start() > m.end() else 0,
            str(path))


def _quiet() -> None:
    # The loader logs at debug/warning level on truncated records; keep the CLI clean.
    logging.getLogger("tensorboard").setLevel(logging.ERROR)


class CorruptRecord(Exception):
    """A record whose crc32 check failed before the end of the file (data would be lost silently)."""


def _events(path: Path):
    """The file's events, read with TensorBoard's own record reader. A truncated last record is
    the end of the file (a writer still running or killed, as TensorBoard reads it); a record that
    fails its crc32 check is corrupt data and raises ``CorruptRecord`` instead of stopping quietly."""
    from tensorboard.compat.proto import event_pb2
    from tensorboard.compat.tensorflow_stub import errors
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import PyRecordReader_New

    _quiet()
    reader = PyRecordReader_New(str(path))
    while True:
        try:
            reader.GetNext()
        except errors.OutOfRangeError:
            return
        except errors.DataLossError as e:
            if "crc32" in str(e):
                raise CorruptRecord(f"corrupt record ({str(e).rsplit(' ', 3)[-3]} crc32 check failed)") from None
            return  # truncated tail
        yield event_pb2.Event.FromString(reader.record())


def _scalar(value, plugin: str | None) -> float | None:
    kind = value.WhichOneof("value")
    if kind == "simple_value":
        return float(value.simple_value)
    if kind == "tensor" and plugin == "scalars":
        from tensorboard.util import tensor_util

        array = tensor_util.make_ndarray(value.tensor)
        if array.size == 1:
            return float(array.reshape(()).item())
    return None


def _text(value) -> str | None:
    if value.WhichOneof("value") == "tensor" and value.tensor.string_val:
        try:
            return value.tensor.string_val[0].decode("utf-8")
        except UnicodeDecodeError:
            return None
    return None


def parse_tensorboard(display: str, target: Path) -> ParsedLog:
    source = Source(display)
    files = event_files(target) if target.is_dir() else [target]
    if not files:
        raise source.error("no events.out.tfevents.* files in this folder")
    config = normalise_config(_args_config(files), "trl")
    name = target.name if target.is_dir() else (target.parent.name or target.stem)
    return ParsedLog(path=display, format="tensorboard", source="tensorboard", config=config,
                     rows=_rows(source, files), name=name, last_wins=True, reader=source)


def _args_config(files: list[Path]) -> dict:
    """The run's config: HF's ``args`` text summary (TrainingArguments as JSON) or, failing that, the hparams
    written by ``add_hparams``, each found before the file's first scalar."""
    found: dict = {}
    for path in files:
        try:
            args = _args_in(path)
        except Exception:  # noqa: BLE001 - an unreadable file has no config; the rows will say why
            args = None
        if args:
            found = {**args, **found}  # the first file's values win
    return found


def _hparams(value) -> dict | None:
    """``add_hparams``' session-start record as a dict of its values."""
    from tensorboard.plugins.hparams import plugin_data_pb2

    data = plugin_data_pb2.HParamsPluginData.FromString(value.metadata.plugin_data.content)
    if not data.HasField("session_start_info"):
        return None
    out = {}
    for key, v in data.session_start_info.hparams.items():
        kind = v.WhichOneof("kind")
        if kind in ("number_value", "string_value", "bool_value"):
            number = getattr(v, kind)
            out[key] = int(number) if kind == "number_value" and number == int(number) else number
    return out or None


def _args_in(path: Path) -> dict | None:
    plugins: dict[str, str] = {}
    for event in _events(path):
        if not event.HasField("summary"):
            continue
        for value in event.summary.value:
            plugin = value.metadata.plugin_data.plugin_name or plugins.get(value.tag)
            if value.metadata.plugin_data.plugin_name:
                plugins[value.tag] = plugin
            if plugin == "hparams" and value.tag == "_hparams_/session_start_info":
                return _hparams(value)
            if plugin == "text" and value.tag in ("args/text_summary", "args"):
                text = _text(value)
                try:
                    data = json.loads(text) if text else None
                except ValueError:
                    data = None
                if isinstance(data, dict):
                    return data
            elif plugin == "scalars" or value.WhichOneof("value") == "simple_value":
                return None  # scalars started: the args were not written to this file
    return None


def _rows(source: Source, files: list[Path]) -> Iterator[tuple[int, dict[str, float]]]:
    step: int | None = None
    row: dict[str, float] = {}
    for path in files:
        plugins: dict[str, str] = {}
        try:
            events = _events(path)
            for event in events:
                if not event.HasField("summary"):
                    continue
                for value in event.summary.value:
                    plugin = value.metadata.plugin_data.plugin_name
                    if plugin:
                        plugins[value.tag] = plugin
                    else:
                        plugin = plugins.get(value.tag)
                    tag = value.tag
                    if tag.startswith(HELD_OUT_PREFIXES) or tag.split("/", 1)[-1] in SUMMARY_KEYS:
                        continue
                    number = _scalar(value, plugin)
                    if number is None:
                        continue
                    if event.step != step:
                        if row:
                            yield step, row
                        step, row = event.step, {}
                    row[tag] = number
        except OSError as e:
            raise source.error(f"{path.name}: {e.strerror or e}") from None
        except CorruptRecord as e:
            raise source.error(f"{path.name}: {e}") from None
        except Exception as e:  # noqa: BLE001 - corrupt protobuf etc.
            raise source.error(f"{path.name}: not a readable TensorBoard event file ({type(e).__name__})") from None
    if row:
        yield step, row
