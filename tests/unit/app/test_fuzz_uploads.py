"""Fuzzing the Import page's upload path (``app/dashboard/uploads.py`` as ``app_pages/import_log.py`` calls it).

Each example uploads, into a real store file, one of: a valid fixture of a format (``test_importers.build``),
the same damaged by ``support.fuzzing.mutate``, or random bytes; under a hostile name (path traversal,
absolute paths, NUL and control characters, very long, unicode, empty) or its own name behind such a prefix;
with or without a run name and a forced format, as the page's form passes them. The only acceptable outcomes:
a run with steps, or one of the errors the page shows (``UploadError``, ``LogFormatError``, or ``StoreError``
for a run name already taken) whose message is one line and names neither the temporary folder nor its path;
within 20 s. Whatever the outcome, the file is written only inside a fresh folder of the temporary directory,
that folder is gone afterwards, nothing else appears anywhere under the test's folder, and a failure leaves
the store's runs as they were. Two AppTest checks then upload broken files through the page itself.
"""

from __future__ import annotations

import json
import signal
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from streamlit.testing.v1 import AppTest
from support import apptest
from support.fuzzing import OPS, Hang, alarm, mutate
from support.logs import build

from grpo_doctor.app.dashboard import SCRIPT, uploads
from grpo_doctor.diagnostics.importers import FORMATS, LogFormatError
from grpo_doctor.diagnostics.store import RunStore, StoreError, run_name_problem

loopback = pytest.fixture(autouse=True)(apptest.loopback)  # the Import page acts as a loopback dashboard

DASHBOARD = str(SCRIPT)
SUBMIT = "FormSubmitter:import.form-Import and diagnose"
#: Formats an upload can be (one file each); grpo_doctor_jsonl is our own export, fuzzed by the importers' test.
UPLOAD_FORMATS = [f for f in FORMATS if f != "grpo_doctor_jsonl"]
LONG = "a" * 300 + ".jsonl"
HOSTILE = [
    "../../x", "../../../../../../etc/passwd", "/etc/passwd", "/tmp/evil.jsonl", "C:\\Windows\\evil.csv",
    "..\\..\\evil.csv", "a\x00b.jsonl", "\x00", "", ".", "..", "...", "/", "./", "~/.bashrc", LONG,
    "é" * 200 + ".csv", "日本語のログ.jsonl", "line\nbreak.jsonl", "cr\rlf\r\n.csv", "\t", " ", "-rf",
    "$(touch pwned).jsonl", "%2e%2e%2fx.csv", "a/" * 200 + "deep.csv", "." * 300, "events.out.tfevents.",
    "trainer_state.json", "\u202egnp.jsonl", "nul\x00/../x.jsonl",
]
#: Put before a fixture's own name: it keeps a name the importers recognise (trainer_state.json, events.*).
PREFIXES = ["", "../../", "/abs/path/", "C:\\logs\\", "..\\", "dir/../../", "\x00", "ü", "a" * 250]
#: Names over the file systems' 255 bytes, of any characters.
LONG_TEXT = st.text(min_size=1, max_size=8).map(lambda t: t * (300 // len(t) + 1))
RUN_NAMES = st.one_of(st.none(), st.just("taken"), st.text(max_size=40))
FUZZ = settings(max_examples=50, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    """One valid log file per format: (its name, its bytes)."""
    root = tmp_path_factory.mktemp("upload-seeds")
    files = {fmt: build(fmt, root / fmt)[1] for fmt in UPLOAD_FORMATS}
    return {fmt: (path.name, path.read_bytes()) for fmt, path in files.items()}


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


class Workspace:
    """A store file with one run ("taken") in ``root/store``, uploads' temporary folders in ``root/a/b/tmp``
    (deep, so ``../..`` from an upload folder still lands inside ``root``), and a spy on where uploads go."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch):
        self.root, self.tmp = root, root / "a" / "b" / "tmp"
        self.tmp.mkdir(parents=True)
        (root / "store").mkdir()
        self.db = root / "store" / "uploads.db"
        with RunStore(self.db) as store:
            store.write_steps(store.create_run("taken", source="jsonl", status="finished"), [(1, {"reward": 0.5})])
        monkeypatch.setattr("tempfile.tempdir", str(self.tmp))
        self.written: list[Path] = []
        self.outcomes: Counter[str] = Counter()  # "run" or the error's type, per upload
        real = uploads.import_runs

        def spy(store, path, **kw):
            self.written.append(Path(path))
            assert Path(path).is_file(), f"{path}: the upload is not where it is imported from"
            return real(store, path, **kw)

        monkeypatch.setattr(uploads, "import_runs", spy)

    def upload(self, filename: str, data: bytes, *, name: str | None = None, fmt: str | None = None) -> None:
        """Import one upload as the page does; every check of the upload path's promises."""
        before_tree = tree(self.root)
        self.written.clear()
        store = RunStore(self.db)
        runs_before = store.list_runs()
        previous = signal.signal(signal.SIGALRM, alarm)
        signal.alarm(20)
        try:
            made = uploads.import_upload(store, filename, _Reader(data), len(data), name=name, fmt=fmt)
            run_id = made[0].run_id
        except (uploads.UploadError, LogFormatError, StoreError) as e:
            message = str(e)
            self.outcomes[type(e).__name__] += 1
            assert "\n" not in message and "\r" not in message, f"a message of several lines: {message!r}"
            assert "grpo-doctor-upload" not in message and str(self.tmp) not in message, message
            if isinstance(e, StoreError):
                assert name in set(runs_before["name"]) or run_name_problem(name) is not None, \
                    f"a StoreError for a good name not taken: {message}"
            else:
                assert message.startswith(uploads.shown_name(filename) + ": "), message
            runs_after = store.list_runs()
            assert runs_after.equals(runs_before), f"a failed upload changed the store's runs ({message})"
        except Hang:
            pytest.fail(f"the upload of {filename!r} ({len(data)} bytes, fmt={fmt}) hung")
        else:
            run = store.get_run(run_id)
            self.outcomes["run"] += 1
            assert len(store.list_runs()) == len(runs_before) + len(made)  # a restarted step counter: several runs
            assert run["status"] == "finished" and run["last_step"] is not None and len(store.metrics(run_id))
            assert run["name"] not in set(runs_before["name"]) and (not name or run["name"] == name)
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
            store.close()
        for path in self.written:  # written only directly inside a fresh folder of the temporary directory
            assert path.parent.parent.parent == self.tmp and path.parent.name == "upload", path
            assert path.parent.parent.name.startswith("grpo-doctor-upload-"), path
            assert path.resolve().parent == path.parent.resolve() and len(path.name.encode()) <= 255, path
        left = [p for p in self.tmp.iterdir() if p.name.startswith("grpo-doctor-upload-")]
        assert left == [], "an upload's temporary folder was left behind"
        stray = tree(self.root) - before_tree - {"store/uploads.db-wal", "store/uploads.db-shm"}
        assert not stray, f"the upload of {filename!r} left files behind: {sorted(stray)}"


class _Reader:
    """Streamlit's UploadedFile as the upload path uses it: ``read(n)`` in chunks."""

    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def read(self, n: int = -1) -> bytes:
        end = len(self.data) if n < 0 else self.at + n
        chunk, self.at = self.data[self.at:end], min(end, len(self.data))
        return chunk


@pytest.mark.parametrize("fmt", UPLOAD_FORMATS)
def test_uploads_of_damaged_logs_under_hostile_names_fail_cleanly(fmt, seeds, tmp_path, monkeypatch):
    real_name, original = seeds[fmt]
    space = Workspace(tmp_path, monkeypatch)

    @FUZZ
    @given(content=st.one_of(st.just(None), OPS, st.binary(max_size=2048)),
           filename=st.one_of(st.sampled_from(HOSTILE), st.text(max_size=300), LONG_TEXT,
                              st.sampled_from(PREFIXES).map(lambda p: p + real_name)),
           name=RUN_NAMES, forced=st.booleans())
    def check(content, filename, name, forced):
        data = original if content is None else mutate(original, content) if isinstance(content, list) else content
        space.upload(filename, data, name=(name or "").strip() or None, fmt=fmt if forced else None)

    check()
    assert space.outcomes["run"] and space.outcomes["LogFormatError"], space.outcomes  # both ways were tried


@pytest.mark.parametrize("prefix", PREFIXES)
def test_a_valid_log_under_a_hostile_path_imports_inside_the_upload_folder(prefix, seeds, tmp_path, monkeypatch):
    """The name's folders are dropped, never followed: the log imports (every format) from the upload folder."""
    space = Workspace(tmp_path, monkeypatch)
    for fmt in UPLOAD_FORMATS:
        real_name, data = seeds[fmt]
        space.upload(prefix + real_name, data)
        assert len(space.written) == 1 and space.written[0].name == uploads.safe_name(prefix + real_name)
    with RunStore(space.db) as store:
        assert len(store.list_runs()) == 1 + len(UPLOAD_FORMATS)


@pytest.mark.parametrize("filename", HOSTILE)
def test_every_hostile_name(filename, seeds, tmp_path, monkeypatch):
    """Under each name: a valid log imports, junk and an empty file are refused naming the upload in one line."""
    space = Workspace(tmp_path, monkeypatch)
    for data in (b"\xff\xfe\x00 not a log \x1b[0m" * 40, b""):
        space.upload(filename, data)
    space.upload(filename, seeds["jsonl"][1])
    assert space.outcomes == {"LogFormatError": 2, "run": 1}, space.outcomes


def test_a_very_long_name_is_cut_keeping_its_suffix(seeds, tmp_path, monkeypatch):
    space = Workspace(tmp_path, monkeypatch)
    space.upload(LONG, seeds["jsonl"][1])
    assert space.outcomes == {"run": 1}
    (written,) = space.written
    assert written.name == "a" * 114 + ".jsonl"
    with RunStore(space.db) as store:
        assert "a" * 114 in set(store.list_runs()["name"])


# ------------------------------------------------------------------------------------- through the page
@pytest.fixture
def page_store(tmp_path, monkeypatch) -> Path:
    db = tmp_path / "page.db"
    with RunStore(db) as store:
        store.write_steps(store.create_run("taken", source="jsonl", status="finished"), [(1, {"reward": 0.5})])
    monkeypatch.setenv("GRPO_DOCTOR_DB", str(db))
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "uploads"))
    (tmp_path / "uploads").mkdir()
    return db


def upload_on_the_page(filename: str, data: bytes, name: str = "") -> AppTest:
    at = AppTest.from_file(DASHBOARD, default_timeout=60).run()
    at.switch_page("app_pages/import_log.py").run()
    assert not at.exception
    at.file_uploader(key="import.file").upload(filename, data)
    at.text_input(key="import.name").set_value(name)
    at.button(key=SUBMIT).click().run()
    return at


@pytest.mark.parametrize("filename, damage", [
    # a trainer_state.json cut off before its first entry (nothing to read), path traversal
    ("../../trainer_state.json", lambda b: b[: b.index(b'"log_history"') + len(b'"log_history": [')]),
    ("a" * 300 + "\n.csv", lambda b: b"\xff\xfe\x00garbage" * 50),  # binary junk, a long two-line name
])
def test_the_import_page_shows_a_broken_upload_as_an_error(filename, damage, seeds, page_store):
    fmt = "trainer_state" if "trainer_state" in filename else "csv"
    at = upload_on_the_page(filename, damage(seeds[fmt][1]))
    assert not at.exception, at.exception
    assert at.title[0].value == "Import a log"  # stayed on the page
    (error,) = [e.value for e in at.error]
    assert error.startswith(f"Not imported: {uploads.shown_name(filename)}: ") and "\n" not in error
    assert "grpo-doctor-upload" not in error
    with RunStore(page_store) as store:
        assert list(store.list_runs()["name"]) == ["taken"]
    assert list((page_store.parent / "uploads").iterdir()) == []


def test_the_import_page_shows_a_taken_run_name_as_an_error(seeds, page_store):
    at = upload_on_the_page("metrics.jsonl", seeds["jsonl"][1], name="taken")
    assert not at.exception, at.exception
    (error,) = [e.value for e in at.error]
    assert error.startswith("Not imported: a run named 'taken' already exists")
    with RunStore(page_store) as store:
        assert list(store.list_runs()["name"]) == ["taken"]


def test_an_upload_never_reads_the_shared_temp_folder(seeds, tmp_path, monkeypatch):
    """A trainer_state.json looks for training_args.bin beside it and one folder up, ms-swift's args.json beside it:
    files another local user planted in the shared temp folder are never read as an upload's config."""
    import pickle

    space = Workspace(tmp_path, monkeypatch)
    (space.tmp / "training_args.bin").write_bytes(pickle.dumps({"num_generations": 99, "beta": 0.5}))
    (space.tmp / "args.json").write_text(json.dumps({"num_generations": 77, "beta": 0.7}))
    real_name, data = seeds["trainer_state"]
    space.upload(real_name, data, name="mine")
    with RunStore(space.db) as store:
        config = store.get_run("mine")["config"]
    assert config.get("num_generations") not in (99, 77) and config.get("beta") not in (0.5, 0.7), config


def test_the_import_page_imports_in_a_limited_child_that_can_fail_alone(seeds, tmp_path):
    """Through ``isolated_import.importer`` an upload is imported by a child process into the same store; a child
    that runs out of its address space is one refused import, and the store keeps nothing of it."""
    import io

    from grpo_doctor.app.dashboard import isolated_import

    db = str(tmp_path / "iso.db")
    real_name, data = seeds["trainer_state"]
    with RunStore(db) as store:
        made = uploads.import_upload(store, real_name, io.BytesIO(data), len(data), name="child",
                                     run=isolated_import.importer(db))
        assert [r.name for r in made] == ["child"] and store.get_run("child")["last_step"] is not None
        starved = isolated_import.importer(db, memory=64 * 2**20)  # too little to even start Python's numpy
        with pytest.raises(LogFormatError, match="ran out of the 64 MiB of memory .* not imported"):
            uploads.import_upload(store, real_name, io.BytesIO(data), len(data), name="starved", run=starved)
        assert list(store.list_runs()["name"]) == ["child"]
