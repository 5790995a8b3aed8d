"""The Runs page's "Start a new run" form: widgets for the key hyperparameters (TRL's names, the trainer's
defaults and choices), plus free ``key=value`` options; an option set in the form and differently in the free
options is refused, and what it returns goes to ``processes.new_run``, which validates it with the trainer's own parser
(no torch) before anything starts."""

from __future__ import annotations

import dataclasses
import math

import streamlit as st

from grpo_doctor.app.launch import processes
from grpo_doctor.trainer.config import GRPOConfig
from grpo_doctor.trainer.tasks import REWARD_FUNCS, TASKS
from grpo_doctor.trainer.variant_names import (
    ADVANTAGES,
    GROUP_BY,
    KL_ESTIMATORS,
    LOSS_TYPES,
    SCALE_REWARDS,
)

DEFAULTS = GRPOConfig()
#: Checkpoints kept by runs started here: enough that one before a late symptom's onset is still on disk
#: for "Restart with this fix" (the tiny model's checkpoint is about 8 MB).
SAVE_TOTAL_LIMIT = 10


def _help(name: str) -> str:
    return next(f.metadata.get("help", "") for f in dataclasses.fields(GRPOConfig) if f.name == name)


def new_run_form(key: str = "runs.new") -> dict | None:
    """Draw the form; the values (option name → value) once it is submitted, else None."""
    with st.form(key, border=False):
        c1, c2, c3 = st.columns(3)
        values = {
            "run_name": c1.text_input("run_name", placeholder="made from the time", help=_help("run_name")),
            "task": c2.selectbox("task", list(TASKS), help=_help("task")),
            "reward_funcs": c3.multiselect("reward_funcs", list(REWARD_FUNCS), placeholder="the task's default",
                                           help=_help("reward_funcs")),
            "advantage": c1.selectbox("advantage", ADVANTAGES, index=ADVANTAGES.index(DEFAULTS.advantage),
                                      help=_help("advantage")),
            "scale_rewards": c2.selectbox("scale_rewards", SCALE_REWARDS,
                                          index=SCALE_REWARDS.index(DEFAULTS.scale_rewards),
                                          help=_help("scale_rewards")),
            "loss_type": c3.selectbox("loss_type", LOSS_TYPES, index=LOSS_TYPES.index(DEFAULTS.loss_type),
                                      help=_help("loss_type")),
            "group_by": c1.selectbox("group_by", GROUP_BY, index=GROUP_BY.index(DEFAULTS.group_by),
                                     help=_help("group_by")),
            "num_generations": c2.number_input("num_generations", 2, 256, DEFAULTS.num_generations,
                                               help=_help("num_generations")),
            "per_device_train_batch_size": c3.number_input(
                "per_device_train_batch_size", 2, 8192, DEFAULTS.per_device_train_batch_size,
                help=_help("per_device_train_batch_size")),
            "learning_rate": c1.number_input("learning_rate", 1e-9, 1.0, DEFAULTS.learning_rate, 1e-5, format="%g",
                                             help=_help("learning_rate")),
            "beta": c2.number_input("beta", 0.0, 10.0, DEFAULTS.beta, 0.01, format="%g", help=_help("beta")),
            "kl_estimator": c3.selectbox("kl_estimator", KL_ESTIMATORS,
                                         index=KL_ESTIMATORS.index(DEFAULTS.kl_estimator), help=_help("kl_estimator")),
            "epsilon": c1.number_input("epsilon", 0.0, 0.99, DEFAULTS.epsilon, format="%g", help=_help("epsilon")),
            "temperature": c2.number_input("temperature", 0.01, 10.0, DEFAULTS.temperature, format="%g",
                                           help=_help("temperature")),
            "num_iterations": c3.number_input("num_iterations", 1, 64, DEFAULTS.num_iterations,
                                              help=_help("num_iterations")),
            "max_steps": c1.number_input("max_steps", 1, 10_000_000, DEFAULTS.max_steps, help=_help("max_steps")),
            "save_steps": c2.number_input("save_steps", 0, 10_000_000, DEFAULTS.save_steps, help=_help("save_steps")),
            "save_total_limit": c3.number_input("save_total_limit", 0, 10_000, SAVE_TOTAL_LIMIT,
                                                help=_help("save_total_limit") + " (0 = keep all)"),
            "dynamic_sampling": c1.checkbox("dynamic_sampling", DEFAULTS.dynamic_sampling,
                                            help=_help("dynamic_sampling")),
            "mask_truncated_completions": c2.checkbox("mask_truncated_completions",
                                                      DEFAULTS.mask_truncated_completions,
                                                      help=_help("mask_truncated_completions")),
        }
        extra = st.text_input("More options", placeholder="key=value key=value (e.g. epsilon_high=0.28 kl_target=0.03)",
                              help="Any other trainer option, by its name (grpo-doctor train --help lists them)")
        if not st.form_submit_button("Start run", type="primary"):
            return None
    values["reward_funcs"] = values["reward_funcs"] or None  # none chosen: the task's default
    more = processes.parse_extra(extra)
    clashes = contradictions(values, more)
    if clashes:
        raise processes.LaunchError(clashes)
    return {**values, **more}


def contradictions(form: dict, more: dict) -> list[str]:
    """One message per option set in the form and differently in "More options" (a field left empty in the form,
    such as run_name, can be given there)."""
    return [f"{key} is {_shown(form[key])} in the form and {_shown(value)} in More options: set it in one place"
            for key, value in more.items() if key in form and not _same(form[key], value)]


def _same(form_value, text) -> bool:
    if form_value is None or form_value == "":
        return True  # left to its default in the form
    if isinstance(form_value, bool):
        return str(text).strip().lower() in (("true", "1", "yes") if form_value else ("false", "0", "no"))
    if isinstance(form_value, (int, float)):
        try:
            return math.isclose(float(text), float(form_value), rel_tol=1e-9, abs_tol=0.0)
        except (TypeError, ValueError):
            return False
    if isinstance(form_value, (list, tuple)):
        return list(form_value) == (list(text) if isinstance(text, (list, tuple)) else [text])
    return str(form_value) == str(text)


def _shown(value) -> str:
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else f"{value:g}" \
        if isinstance(value, float) else str(value)
