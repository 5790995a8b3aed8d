"""Which filesystem a store file lives on: SQLite's WAL mode needs working file locks and shared memory,
which network filesystems (NFS, Lustre, GPFS, WekaFS, CIFS/SMB, BeeGFS) do not give reliably
(https://www.sqlite.org/wal.html: "WAL does not work over a network filesystem"). A store there can be
corrupted, or two writers can both believe they hold the lock.

Linux: the mount table is ``/proc/self/mountinfo``; the mount of a path is the longest mount point that is
a prefix of its real path. Elsewhere nothing is detected (the check passes).
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

MOUNTINFO = "/proc/self/mountinfo"

#: fstype (as the kernel names it) → the name users know.
NETWORK_FS = {
    "nfs": "NFS", "nfs4": "NFS", "lustre": "Lustre", "gpfs": "GPFS", "wekafs": "WekaFS", "cifs": "CIFS/SMB",
    "smb3": "CIFS/SMB", "smbfs": "CIFS/SMB", "beegfs": "BeeGFS", "fuse.sshfs": "SSHFS",
}

#: Set (to 1) by ``grpo-doctor --unsafe-fs``; processes it starts inherit it.
UNSAFE_ENV = "GRPO_DOCTOR_UNSAFE_FS"


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash in paths as octal escapes (``\\040``)."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[tuple[str, str]]:
    """``[(mount point, fstype)]`` from the text of ``/proc/self/mountinfo``; lines it cannot read are skipped."""
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if sep and len(fields) >= 5 and tail:
            mounts.append((_unescape(fields[4]), tail[0]))
    return mounts


def mount_of(path: str, mounts: list[tuple[str, str]]) -> tuple[str, str] | None:
    """The ``(mount point, fstype)`` holding ``path`` (an absolute, resolved path): the longest matching
    mount point; a later mount over the same point wins."""
    best = None
    for point, fstype in mounts:
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best[0])):
            best = (point, fstype)
    return best


@lru_cache(maxsize=64)
def _mount_table(source: str) -> tuple[tuple[str, str], ...]:
    try:
        return tuple(parse_mountinfo(Path(source).read_text(errors="replace")))
    except OSError:
        return ()


def network_fs(folder: str | os.PathLike, table: str | None = None) -> tuple[str, str] | None:
    """``(name users know, mount point)`` when ``folder`` is on a network filesystem, else None (``table``: a
    mountinfo file, default ``MOUNTINFO``)."""
    found = mount_of(os.path.realpath(folder), list(_mount_table(table or MOUNTINFO)))
    if found is None or found[1] not in NETWORK_FS:
        return None
    return NETWORK_FS[found[1]], found[0]


def refusal(path: str, kind: str, point: str) -> str:
    """The one line shown when a store is refused."""
    return (f"{path} is on {kind} (mounted at {point}), where SQLite's locking is unreliable and the store can be "
            f"corrupted; keep the run store on a local disk (--db /local/path/runs.db) and copy or import the "
            f"logs from the shared folder, or pass --unsafe-fs to use it anyway")


def unsafe_allowed() -> bool:
    return os.environ.get(UNSAFE_ENV, "") not in ("", "0")
