"""Small files that must not exhaust a machine (issue 24): each is refused within seconds, with a peak memory under
1.5 GB, measured in a child process (its own ``ru_maxrss``), as an import would meet it."""

from __future__ import annotations

import io
import json
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from grpo_doctor.diagnostics.importers.safe_pickle import UnsafeToRead, read_training_args

PEAK_MB = 1500

PROBE = """
import json, resource, sys, time
from grpo_doctor.diagnostics.importers import LogFormatError, import_runs
from grpo_doctor.diagnostics.importers.safe_pickle import UnsafeToRead, read_training_args
from grpo_doctor.diagnostics.store import RunStore
path, how = sys.argv[1], sys.argv[2]
start = time.perf_counter()
try:
    if how == "pickle":
        read_training_args(path)
        outcome = "read"
    else:
        with RunStore(":memory:") as store:
            import_runs(store, path)
        outcome = "imported"
except (UnsafeToRead, LogFormatError) as e:
    outcome = "refused: " + str(e)
print(json.dumps({"outcome": outcome, "seconds": time.perf_counter() - start,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def probe(path: Path, how: str) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, str(path), how], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_trainer_state_nested_100000_levels_deep_is_refused(tmp_path):
    path = tmp_path / "trainer_state.json"
    path.write_text('{"log_history": [' + '{"a": ' * 100_000 + "1" + "}" * 100_000 + "]}")
    found = probe(path, "import")
    assert found["outcome"] == f"refused: {path}: JSON nested more than 256 levels deep", found
    assert found["seconds"] < 10 and found["peak_mb"] < PEAK_MB, found


def test_a_pickle_that_calls_bytearray_of_4_gib_builds_nothing(tmp_path):
    path = tmp_path / "training_args.bin"
    path.write_bytes(b"cbuiltins\nbytearray\n(I4294967296\ntR.")  # 43 bytes: bytearray(2**32)
    found = probe(path, "pickle")
    assert found["outcome"].startswith("refused:") and found["peak_mb"] < PEAK_MB, found
    with pytest.raises(UnsafeToRead, match="holds a builtins.bytearray, not training arguments"):
        read_training_args(path)


def test_a_billion_laughs_pickle_is_refused(tmp_path):
    laughs: list = []
    for _ in range(30):
        laughs = [laughs, laughs]  # 2**30 references, each list pickled once (memoised)
    path = tmp_path / "training_args.bin"
    path.write_bytes(pickle.dumps({"output_dir": "x", "laughs": laughs}, protocol=2))
    assert path.stat().st_size < 1000
    found = probe(path, "pickle")
    assert found["outcome"] == "refused: refers to more than 200,000 objects", found
    assert found["seconds"] < 10 and found["peak_mb"] < PEAK_MB, found


def test_a_zip_bomb_is_refused_at_the_inflation_cap(tmp_path):
    path = tmp_path / "training_args.bin"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open("archive/data.pkl", "w", force_zip64=True) as member:
            chunk = b"\0" * 2**20
            for _ in range(512):  # 512 MiB of zeros, about half a megabyte deflated
                member.write(chunk)
    path.write_bytes(buffer.getvalue())
    assert path.stat().st_size < 4 * 2**20
    found = probe(path, "pickle")
    assert found["outcome"] == "refused: its pickle inflates to more than 16 MiB", found
    assert found["seconds"] < 10 and found["peak_mb"] < PEAK_MB, found
