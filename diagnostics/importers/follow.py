"""Follow a growing training log into the store as a live run (``grpo-doctor follow``).

The importers decode (no second parser). A log whose every line stands alone (JSON lines: verl's file logger,
ms-swift's ``logging.jsonl``, ours, a plain JSONL; a CSV, with its header line) is read from where the last poll
stopped, complete lines only: a line still being written waits for its newline. Other logs (console output,
TensorBoard folders, ``trainer_state.json``) are parsed again whenever they change, and only steps from the last one
written on are stored. Each step is upserted (a step written again replaces its values). A file that shrank or was
replaced (verl reopens its file with ``"wb"`` on relaunch) is a new segment: reading starts again from its first
byte, the steps already stored stay, and a ``resume`` event tells the live diagnosis to start over.
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from grpo_doctor.diagnostics.importers import parse
from grpo_doctor.diagnostics.importers._base import NEW_RUN, LogFormatError, ParsedLog
from grpo_doctor.diagnostics.importers.detect import resolve
from grpo_doctor.diagnostics.importers.tabular import ROW_ORDER_NOTE
from grpo_doctor.diagnostics.metrics.names import canonical_row

#: formats whose complete lines parse on their own (a CSV with its header line in front)
LINE_FORMATS = frozenset({"verl_jsonl", "swift_jsonl", "jsonl", "grpo_doctor_jsonl", "csv", "wandb_csv"})
CSV_FORMATS = frozenset({"csv", "wandb_csv"})
ROW_ORDER = ROW_ORDER_NOTE.split("(")[0]  # "no step column "


@dataclass
class Follower:
    """One followed log and the run it feeds. ``poll()`` reads what was added since the last call."""

    store: object
    path: Path
    fmt: str | None = None
    name: str | None = None
    step_key: str | None = None
    run_id: int | None = None
    offset: int = 0                  # bytes of the file already read (line formats)
    header: bytes = b""              # a CSV's header line, put in front of every later chunk
    identity: tuple | None = None    # (device, inode) of the file being read
    changed: tuple | None = None     # (size, mtime) when a whole-file format was last parsed
    last_step: int | None = None
    rows_read: int = 0               # rows read so far, when the row order is the step
    row_order: bool = False
    segments: int = 1
    notes: list[str] = field(default_factory=list)
    last_growth: float = field(default_factory=time.monotonic)

    def __post_init__(self):
        self.fmt, self.target = resolve(Path(self.path), self.fmt)
        self.lines = self.fmt in LINE_FORMATS and self.target.is_file() and not _json_array(self.target)

    # ------------------------------------------------------------------ polling
    def poll(self) -> int:
        """Store what the log gained since the last poll; the number of steps written."""
        if self.lines:
            rows, config, parsed = self._new_lines()
        else:
            rows, config, parsed = self._changed_whole()
        if parsed is None:
            return 0
        self.last_growth = time.monotonic()
        if self.run_id is None:
            self._create_run(parsed, config)
        if rows:
            self.store.write_steps(self.run_id, rows)
            self.last_step = max(self.last_step or 0, max(step for step, _ in rows))
        self.store.heartbeat(self.run_id)
        return len(rows)

    def _create_run(self, parsed: ParsedLog, config: dict) -> None:
        name = self.name or self.store.unique_name(parsed.name or "followed")
        self.run_id = self.store.create_run(name, config=config, source=parsed.source,
                                            source_path=str(self.target.resolve()), pid=os.getpid())
        self.notes = parsed.notes()

    def _new_lines(self):
        """The complete lines added since the last poll, parsed by the format's importer."""
        st = os.stat(self.target)
        identity = (st.st_dev, st.st_ino)
        if self.identity is not None and (identity != self.identity or st.st_size < self.offset):
            self._new_segment("the log was truncated or replaced (a relaunch)")
        self.identity = identity
        if st.st_size <= self.offset:
            return [], {}, None
        with open(self.target, "rb") as f:
            f.seek(self.offset)
            chunk = f.read(st.st_size - self.offset)
        end = chunk.rfind(b"\n")
        if end < 0:
            return [], {}, None  # a line still being written
        chunk = chunk[:end + 1]
        first = self.offset == 0
        if first and self.fmt in CSV_FORMATS:
            self.header = chunk[:chunk.find(b"\n") + 1]
        parsed, rows = self._parse_chunk(chunk if first else self.header + chunk)
        if first:
            self.row_order = any(note.startswith(ROW_ORDER) for note in parsed.notes())
        self.offset += len(chunk)
        if self.row_order:
            rows = [(step + self.rows_read, values) for step, values in rows]
            self.rows_read += len(rows)
        return rows, parsed.config, parsed

    def _parse_chunk(self, data: bytes) -> tuple[ParsedLog, list]:
        with tempfile.TemporaryDirectory() as tmp:
            part = Path(tmp) / self.target.name  # the same name: the importers read it from the name too
            part.write_bytes(data)
            parsed = parse(part, self.fmt, step_key=self.step_key)
            rows = _rows(parsed)
        parsed.path = str(self.target)
        return parsed, rows

    def _changed_whole(self):
        """The whole log parsed again when it changed; the rows from the last step stored on."""
        changed = _signature(self.target)
        if changed == self.changed:
            return [], {}, None
        if self.changed is not None and changed[0] < self.changed[0]:
            self._new_segment("the log was truncated or replaced (a relaunch)")
        self.changed = changed
        parsed = parse(self.target, self.fmt, step_key=self.step_key)
        rows = _rows(parsed)
        if self.last_step is not None and self.segments == 1:
            rows = [(step, values) for step, values in rows if step >= self.last_step]
        return rows, parsed.config, parsed

    def _new_segment(self, reason: str) -> None:
        self.offset, self.header, self.rows_read, self.segments = 0, b"", 0, self.segments + 1
        if self.run_id is not None:
            self.store.add_event(self.run_id, self.last_step, "resume", {"reason": reason, "segment": self.segments})

    # ------------------------------------------------------------------ the loop
    def follow(self, *, every: float = 0.5, idle_exit: float | None = None, on_poll=None,
               interrupt_on: tuple = ()) -> str:
        """Poll until ``idle_exit`` seconds pass without growth (the run is then ``finished``) or until
        interrupted (Ctrl-C, or a signal of ``interrupt_on``: ``stopped``, following stopped, not necessarily
        training); the final status."""
        status = "finished"
        previous = {signum: signal.signal(signum, _interrupt) for signum in interrupt_on}
        try:
            while True:
                written = self.poll()
                if on_poll is not None:
                    on_poll(self, written)
                if idle_exit is not None and time.monotonic() - self.last_growth >= idle_exit:
                    break
                time.sleep(every)
        except KeyboardInterrupt:
            status = "stopped"
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        if self.run_id is not None:
            self.store.set_status(self.run_id, status)
        return status


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _rows(parsed: ParsedLog) -> list[tuple[int, dict]]:
    """The parsed rows under the catalogue's names; a restarted step counter (``NEW_RUN``) is a relaunch of the
    same run here, so its steps are upserted."""
    out = []
    for step, raw in parsed.rows:
        if step is NEW_RUN:
            continue
        values = dict(raw) if parsed.canonical else canonical_row(raw)
        if values:
            out.append((step, values))
    return out


def _signature(path: Path) -> tuple[int, int]:
    """(total size, newest mtime) of a file, or of every file under a folder (a TensorBoard run folder, whose
    events files grow while the folder's own mtime stays)."""
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    stats = [p.stat() for p in files]
    return sum(st.st_size for st in stats), max((st.st_mtime_ns for st in stats), default=0)


def _json_array(path: Path) -> bool:
    """A JSON document read whole (one array of records, or an object holding the table), not JSON lines."""
    with open(path, "rb") as f:
        head = f.read(4096).lstrip()
    if head.startswith(b"["):
        return True
    first = head.split(b"\n", 1)[0].strip()
    return head.startswith(b"{") and not first.endswith(b"}")  # a pretty-printed object spans lines


__all__ = ["Follower", "LINE_FORMATS", "LogFormatError"]
