"""Stream your own TRL (or any transformers ``Trainer``) run into the GRPO Doctor store, live.

    from grpo_doctor.trainer.callbacks import GRPODoctorCallback
    trainer = GRPOTrainer(..., callbacks=[GRPODoctorCallback()])       # or GRPODoctorCallback(trainer=trainer)

The store is ``db``, else ``$GRPO_DOCTOR_DB``, else ``./grpo_runs.db`` (as the CLI resolves it); open it with
``grpo-doctor dashboard`` to watch the run. ``on_train_begin`` records the run with its config (``args.to_dict()``,
normalised to TRL's names as the importers do) and the framework's version; ``on_log`` writes the step's metrics
under ``state.global_step`` through the same catalogue mapping as the importers, with the latest sampled
completions when the trainer is passed (TRL keeps them in ``trainer._logs``), else from the parquet files TRL
writes with ``log_completions=True``; ``on_save`` records the checkpoint.
Only the world-process-zero writes. The run ends ``finished``, ``stopped`` (by ``stop_on``) or, when the process
exits without ``on_train_end`` (an exception, a kill), ``crashed``.

The dashboard's *Save checkpoint now* and *Stop* buttons write requests to the store (``diagnostics.store.control_requests``);
the callback reads them at each step end and answers through ``control.should_save`` and
``control.should_training_stop`` (every rank agreeing through an all-reduce), and records when it did.
``alert_webhook=URL`` posts each new warning or critical finding once (Slack-compatible JSON; ``diagnostics.report.alerts``).
``stop_on="critical"`` (or ``"warning"``) diagnoses the run at every log; a finding that severe saves a checkpoint
and stops training. Every rank reads the same averaged logs and runs the same diagnosis (ranks other than zero on a
store in memory), so every rank takes the same decision through the trainer's own control flow: no rank waits on
another at a collective.

No torch here: the callback needs transformers and GRPO Doctor's ``diagnostics`` only.
"""

from __future__ import annotations

import atexit
import math
import os
import time
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path

from transformers import TrainerCallback

from grpo_doctor.diagnostics.config.frameworks import dialect_of
from grpo_doctor.diagnostics.config.keys import normalise_config
from grpo_doctor.diagnostics.engine import RANK, Diagnoser
from grpo_doctor.diagnostics.forecast import forecasts
from grpo_doctor.diagnostics.importers._base import SUMMARY_KEYS
from grpo_doctor.diagnostics.metrics.names import canonical_row
from grpo_doctor.diagnostics.report.alerts import Alerter, check_url
from grpo_doctor.diagnostics.store import (
    RunNotFound,
    RunStore,
    control_requests,
    default_db_path,
    safe_run_name,
)

STOP_ON = (None, "warning", "critical")
HEARTBEAT_EVERY = 10.0  # seconds between heartbeats while steps run without a log
SAMPLE_GROUPS = 1       # prompt groups of completions stored per log (as the embedded trainer stores)


def versions() -> dict[str, str]:
    """The installed versions of the frameworks a run may come from."""
    found = {}
    for package in ("trl", "transformers", "ms-swift", "accelerate"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    return found


def framework_of(args, raw: Mapping) -> str:
    """Whose names the arguments use: ms-swift's argument classes (``swift.*``) subclass TRL's, so their keys look
    like TRL's, but ms-swift's own knobs (``overlong_filter``, ``advantage_estimator``) decide; else from the keys."""
    if type(args).__module__.partition(".")[0] == "swift":
        return "ms-swift"
    return dialect_of(raw)


def log_row(logs: Mapping) -> dict[str, float]:
    """An ``on_log`` dict as a metrics row: numbers only (None, TRL's "no value", as NaN), evaluation keys
    (``eval_*``) under ``eval/``, under the catalogue's names. HF's end-of-training summary gives an empty row."""
    if any(k in SUMMARY_KEYS for k in logs):
        return {}
    row = {}
    for key, value in logs.items():
        if isinstance(value, bool) or not (value is None or isinstance(value, (int, float))):
            continue
        name = f"eval/{key[5:]}" if key.startswith("eval_") else key
        row[name] = math.nan if value is None else float(value)
    return canonical_row(row)


def first_group(prompts, completions, rewards: Mapping[str, list], advantages, G: int | None, weights=None,
                tokenizer=None, cap: int | None = None) -> list[dict]:
    """The store's sample rows for the first ``SAMPLE_GROUPS`` prompt groups of a generation batch: each reward
    function's score, their weighted sum and the advantage (a missing or non-finite value is None); with the
    trainer's ``tokenizer``, each completion's length in tokens, truncated when it reaches ``cap``
    (``max_completion_length``), as the Run page counts them."""
    G = G or len(completions)
    weights = weights or [1.0] * len(rewards)
    out = []
    for i in range(min(SAMPLE_GROUPS * G, len(completions))):
        scores = {f"rewards/{name}": _number(values[i]) for name, values in rewards.items() if i < len(values)}
        parts = [(w, v) for w, v in zip(weights, scores.values()) if v is not None]
        text = _text(completions[i])
        length = token_count(tokenizer, text)
        out.append({"group": i // G, "prompt": _text(prompts[i]) if i < len(prompts) else "", "completion": text,
                    "reward": sum(w * v for w, v in parts) if parts else None,
                    "advantage": _number(advantages[i]) if i < len(advantages) else None, **scores,
                    **({} if length is None else {"length": length,
                                                  "truncated": bool(cap) and length >= cap})})
    return out


def token_count(tokenizer, text: str) -> int | None:
    """A completion's length in tokens by the trainer's own tokenizer (or processor), None without one."""
    tokenize = getattr(tokenizer, "tokenizer", tokenizer)  # a multimodal processor holds the tokenizer
    if tokenize is None or not callable(tokenize):
        return None
    try:
        return len(tokenize(text, add_special_tokens=False)["input_ids"])
    except Exception:  # noqa: BLE001 - a tokenizer that cannot take the text leaves the length unrecorded
        return None


def trl_samples(trainer, num_generations: int | None, cap: int | None = None) -> list[dict]:
    """The first prompt group of TRL's latest generation batch (``trainer._logs``: gathered on every rank, filled
    whether or not ``log_completions`` is set), with lengths by the trainer's tokenizer."""
    logs = getattr(trainer, "_logs", None)
    if not isinstance(logs, Mapping) or not logs.get("completion"):
        return []
    rewards = {name: list(values) for name, values in (logs.get("rewards") or {}).items()}
    weights = getattr(getattr(trainer, "reward_weights", None), "tolist", lambda: None)()
    tokenizer = getattr(trainer, "processing_class", None) or getattr(trainer, "tokenizer", None)
    return first_group(list(logs.get("prompt", [])), list(logs["completion"]), rewards,
                       list(logs.get("advantages", [])), num_generations, weights, tokenizer, cap)


def parquet_samples(path: Path, num_generations: int | None, weights=None) -> list[dict]:
    """The first prompt group of one of TRL's ``completions_NNNNN.parquet`` files (``log_completions=True``;
    columns step, prompt, completion, one per reward function, advantage): the fallback without ``trainer=``."""
    import pandas as pd

    table = pd.read_parquet(path).to_dict("list")
    rewards = {name: values for name, values in table.items()
               if name not in ("step", "prompt", "completion", "advantage")}
    return first_group(table.get("prompt", []), table.get("completion", []), rewards, table.get("advantage", []),
                       num_generations, weights)


class GRPODoctorCallback(TrainerCallback):
    """Writes a transformers/TRL training run into the GRPO Doctor store as it trains (see the module doc)."""

    def __init__(self, db: str | os.PathLike | None = None, run_name: str | None = None, trainer=None,
                 stop_on: str | None = None, alert_webhook: str | None = None, alert_forecasts: bool = False,
                 stop_on_forecast: bool = False):
        if stop_on not in STOP_ON:
            raise ValueError(f"stop_on: {stop_on!r} is not one of None, 'warning', 'critical'")
        if alert_webhook is not None:
            check_url(alert_webhook, "alert_webhook")
        self.alert_webhook = alert_webhook
        self.alert_forecasts = alert_forecasts  # opted in: forecasts are posted too
        self.stop_on_forecast = stop_on_forecast  # opted in: a forecast saves a checkpoint and stops, as stop_on does
        self.alerter: Alerter | None = None
        self.db = default_db_path(str(db) if db is not None else None)
        self.run_name = run_name
        self.trainer = trainer
        self.stop_on = stop_on
        self.store: RunStore | None = None
        self.run_id: int | None = None
        self.diagnoser: Diagnoser | None = None
        self.stopped_by: str | None = None
        self.ended = False
        self._handled = time.time()  # dashboard requests older than the callback are not for this process
        self._completions_read = 0  # the last step whose log_completions parquet file is stored
        self.write_seconds = 0.0  # time spent in the store's writes
        self.log_seconds: list[float] = []  # each on_log's whole cost: write, and diagnosis under stop_on
        self._beat = 0.0

    # ------------------------------------------------------------------ events
    def on_train_begin(self, args, state, control, **kwargs):
        main = state.is_world_process_zero
        if not main and self.stop_on is None and not self.stop_on_forecast:
            return  # only process zero writes; the others need a store only to diagnose for stop_on
        raw = args.to_dict()
        framework = framework_of(args, raw)
        config = {**normalise_config(raw, framework), "framework_versions": versions()}
        self.store = RunStore(self.db if main else ":memory:")
        chosen = self.run_name or configured_run_name(args)  # a name the user chose: resuming it goes on the same run
        chosen = safe_run_name(chosen, framework) if chosen else None  # W&B-style "project/exp" names hold a '/'

        name = chosen or self.store.unique_name(Path(args.output_dir).name or framework)
        existing = _run_named(self.store, name) if chosen else None
        if existing is not None and state.global_step > 0:  # resume_from_checkpoint: the same run goes on
            self.run_id = existing
            self.store.acquire_lease(existing)  # refused, naming it, while another process still writes the run
            self.store.add_event(existing, state.global_step, "resume", {"from_step": state.global_step})
        else:
            self.run_id = self.store.create_run(name, config=config, source=framework, pid=os.getpid())
        if self.stop_on or self.stop_on_forecast or (self.alert_webhook and main):
            self.diagnoser = Diagnoser.for_run(self.store, self.run_id)
        if self.alert_webhook and main:
            self.alerter = Alerter(self.alert_webhook, name, forecasts=self.alert_forecasts)
        if main:
            atexit.register(self._at_exit)
            print(f"GRPO Doctor: run {name!r} (id {self.run_id}) → {self.db}")

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.store is None or not logs:
            return
        row = log_row(logs)
        if not row:
            return
        step, started = state.global_step, time.perf_counter()
        samples = (trl_samples(self.trainer, getattr(args, "num_generations", None),
                               getattr(args, "max_completion_length", None))
                   if self.trainer is not None and state.is_world_process_zero else [])
        if self.trainer is None and state.is_world_process_zero:
            self._completion_files(args)
        t = time.perf_counter()
        self.store.log_step(self.run_id, step, row, samples=samples)
        self.write_seconds += time.perf_counter() - t
        self._beat = time.monotonic()
        if self.diagnoser is not None:
            self.diagnoser.update(self.store)
        if self.alerter is not None:
            self.alerter.check(self.diagnoser)
        if self.stop_on and self.stopped_by is None:
            worst = [f for f in self.diagnoser.findings()
                     if f.status == "open" and RANK[f.severity] >= RANK[self.stop_on]]
            if worst:
                self._stop(control, step, worst[0].rule,
                           f"{worst[0].severity} finding {worst[0].rule}: {worst[0].title}", self.stop_on)
        if self.stop_on_forecast and self.stopped_by is None:
            coming = forecasts(self.diagnoser.series)
            if coming:
                self._stop(control, step, f"forecast:{coming[0].metric}", f"forecast: {coming[0].text()}", "forecast")
        self.log_seconds.append(time.perf_counter() - started)

    def _stop(self, control, step: int, by: str, reason: str, stop_on: str) -> None:
        """Save a checkpoint and stop (TRL saves in this same step: log, evaluate, then save), and say why."""
        self.stopped_by = by
        control.should_save = True
        control.should_training_stop = True
        self.store.add_event(self.run_id, step, "stop", {"reason": reason, "stop_on": stop_on})

    def on_step_end(self, args, state, control, **kwargs):
        main = state.is_world_process_zero
        if self.store is not None and main and time.monotonic() - self._beat > HEARTBEAT_EVERY:
            self.store.heartbeat(self.run_id)
            self._beat = time.monotonic()
        asked = self._requests(args) if main and self.store is not None else []
        wanted = agree(max((CONTROL_CODES[a] for _, a in asked), default=0), args)
        if wanted:  # the dashboard asked: saved in this step (on_step_end comes before the save), then stopped
            control.should_save = True
            control.should_training_stop = control.should_training_stop or wanted == CONTROL_CODES["stop"]
            if main and self.store is not None:
                for requested, action in asked:
                    control_requests.honoured(self.store, self.run_id, state.global_step, action, requested)
                if wanted == CONTROL_CODES["stop"]:
                    self.stopped_by = "the dashboard"

    def _requests(self, args) -> list[tuple[float, str]]:
        """The dashboard's requests written since the last step (read every step: one small query)."""
        found = control_requests.requests_since(self.store, self.run_id, self._handled)
        if found:
            self._handled = found[-1][0]
        return found

    def on_save(self, args, state, control, **kwargs):
        if self.store is not None and state.is_world_process_zero:
            path = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            self.store.add_event(self.run_id, state.global_step, "checkpoint", {"path": str(path.resolve())})

    def _completion_files(self, args) -> None:
        """TRL writes a log's completions after ``on_log``: each file not stored yet goes under its own step."""
        if not getattr(args, "log_completions", False):
            return
        for path in sorted((Path(args.output_dir) / "completions").glob("completions_*.parquet")):
            step = int(path.stem.split("_")[-1])
            if step > self._completions_read:
                self.store.add_samples(self.run_id, step, parquet_samples(
                    path, getattr(args, "num_generations", None), getattr(args, "reward_weights", None)))
                self._completions_read = step

    def on_train_end(self, args, state, control, **kwargs):
        if self.store is None:
            return
        if self.trainer is None and state.is_world_process_zero:
            self._completion_files(args)  # the last log's file
        self.ended = True
        self.store.set_status(self.run_id, "stopped" if self.stopped_by else "finished")
        if self.alerter is not None:
            self.alerter.flush()  # the last alerts go out (a bounded wait; training is over)

    def _at_exit(self):
        """The process ends without ``on_train_end``: an exception or a signal ended training."""
        if self.ended or self.store is None:
            return
        try:
            self.store.add_event(self.run_id, None, "crash", {"error": "the process exited before on_train_end"})
            self.store.set_status(self.run_id, "crashed")
        except Exception:  # the store may be gone at interpreter exit; never raise from atexit
            pass


CONTROL_CODES = {"save": 1, "stop": 2}


def agree(code: int, args) -> int:
    """Every rank takes the largest request any rank saw (only rank zero reads the store): an all-reduce when
    several processes train, so no rank saves or stops alone and the others hang at the next collective."""
    if getattr(args, "world_size", 1) <= 1:
        return code
    import torch
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return code
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
    flag = torch.tensor([code], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return int(flag.item())


def configured_run_name(args) -> str | None:
    """``run_name`` from the trainer's config (``GRPOConfig(run_name=...)``) when the user set it: transformers
    defaults it to ``output_dir``, which is no name of the user's choosing (the run is then named after that
    folder's last part)."""
    name = getattr(args, "run_name", None)
    output_dir = str(getattr(args, "output_dir", "") or "")
    if not isinstance(name, str) or not name.strip() or name in (output_dir, Path(output_dir).name):
        return None
    return name.strip()


def _run_named(store: RunStore, name: str) -> int | None:
    try:
        return store.resolve_run(name)
    except RunNotFound:
        return None


def _number(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _text(value) -> str:
    """A prompt or completion as text: TRL keeps conversational ones as lists of messages."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(m, Mapping) for m in value):
        return "\n".join(str(m.get("content", "")) for m in value)
    return str(value)
