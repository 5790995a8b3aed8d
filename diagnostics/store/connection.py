"""Opening a store file (pragmas, the filesystem check, migrations) and its transactions.

``Connection`` is the base of every part of ``RunStore``: it holds ``conn`` and gives them ``atomic`` (one
write transaction), ``_snapshot`` (one read transaction) and ``_read`` (one SELECT as a DataFrame).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from grpo_doctor.diagnostics.store import filesystem, packing
from grpo_doctor.diagnostics.store.errors import StoreError
from grpo_doctor.diagnostics.store.schema import migrate

if TYPE_CHECKING:
    from grpo_doctor.diagnostics.store.bulk import BulkWrite
    from grpo_doctor.diagnostics.store.leases import Lease

# numpy integers (ids read from a DataFrame) would otherwise bind as blobs and match nothing.
for _np_int in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64):
    sqlite3.register_adapter(_np_int, int)

DEFAULT_DB = "grpo_runs.db"


def default_db_path(cli_value: str | None = None) -> str:
    """``--db``, else ``$GRPO_DOCTOR_DB``, else ``./grpo_runs.db``."""
    return cli_value or os.environ.get("GRPO_DOCTOR_DB") or DEFAULT_DB


class Connection:
    """A connection to one run-store file (or ``:memory:``); use as a context manager."""

    def __init__(self, path: str | os.PathLike = ":memory:", *, timeout: float = 30.0, unsafe_fs: bool | None = None):
        """``unsafe_fs``: open a file on a network filesystem anyway (None: as ``--unsafe-fs`` / ``$GRPO_DOCTOR_UNSAFE_FS``
        says); without it such a file is refused (``diagnostics.store.filesystem``)."""
        self.path = str(path)
        if self.path != ":memory:":
            folder = Path(self.path).resolve().parent
            if not folder.is_dir():
                raise StoreError(f"{self.path}: folder {folder} does not exist")
            _check_filesystem(self.path, folder, filesystem.unsafe_allowed() if unsafe_fs is None else unsafe_fs)
        try:
            self.conn = sqlite3.connect(
                self.path, timeout=timeout, isolation_level=None, check_same_thread=False
            )
            # A new file frees the pages of packed rows as it goes (set before any table exists).
            self.conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
            self.conn.execute("PRAGMA journal_mode = WAL")
            self.conn.execute("PRAGMA synchronous = NORMAL")
            self.conn.execute("PRAGMA foreign_keys = ON")
            migrate(self.conn)
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.path}: not a usable GRPO Doctor store ({e})") from None
        self._key_ids: dict[str, int] = {}  # metric name -> id, as committed (cleared on a rollback)
        self._bulk: dict[int, BulkWrite] = {}  # write_steps in progress, by run
        self.leases: dict[int, Lease] = {}  # the runs this connection writes under a lease: each write is checked

    def close(self) -> None:
        self.conn.close()

    def decode(self, steps_blob: bytes, values_blob: bytes | None, first: int | None = None,
               last: int | None = None):
        """``packing.decode``, a damaged block said in one line that names this store (never a wrong series)."""
        try:
            return packing.decode(steps_blob, values_blob, first, last)
        except packing.Damaged as e:
            raise StoreError(f"not a usable store: {self.path}: {e}; check it with `sqlite3 {self.path} "
                             f"'PRAGMA integrity_check'` and restore it from a copy") from None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextlib.contextmanager
    def atomic(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (``BEGIN IMMEDIATE``); nested calls join the outer one."""
        if self.conn.in_transaction:
            yield self.conn
            return
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            self._key_ids.clear()  # ids inserted in the rolled-back transaction are gone
            raise
        self.conn.execute("COMMIT")

    @contextlib.contextmanager
    def attempt(self) -> Iterator[sqlite3.Connection]:
        """Writes that are undone if they raise, inside a transaction or not (a savepoint): an importer's first try
        that may be abandoned for a second, within a caller's larger transaction."""
        with self.atomic():
            self.conn.execute("SAVEPOINT attempt")
            try:
                yield self.conn
            except BaseException:
                self.conn.execute("ROLLBACK TO attempt")
                self.conn.execute("RELEASE attempt")
                self._key_ids.clear()  # ids inserted since the savepoint are gone
                raise
            self.conn.execute("RELEASE attempt")

    @contextlib.contextmanager
    def _snapshot(self) -> Iterator[None]:
        """One read transaction, so several SELECTs see the same state."""
        if self.conn.in_transaction:
            yield
            return
        self.conn.execute("BEGIN")
        try:
            yield
        finally:
            self.conn.execute("COMMIT")

    def _read(self, sql: str, params: tuple = ()) -> pd.DataFrame:
        cur = self.conn.execute(sql, params)
        columns = [d[0] for d in cur.description]
        return pd.DataFrame.from_records(cur.fetchall(), columns=columns)


_WARNED: set[str] = set()


def _check_filesystem(path: str, folder: Path, unsafe: bool) -> None:
    """Refuse a store on a network filesystem (one line saying why and what to do), or warn once when allowed."""
    found = filesystem.network_fs(folder)
    if found is None:
        return
    message = filesystem.refusal(path, *found)
    if not unsafe:
        raise StoreError(message)
    if path not in _WARNED:
        _WARNED.add(path)
        print(f"grpo-doctor: warning: {message.split(', or pass')[0]}; opened anyway (--unsafe-fs)", file=sys.stderr)
