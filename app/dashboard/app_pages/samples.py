"""Samples: the completions a run sampled, per step, with reward, length and truncation; repeated n-grams
highlighted; filter by step range, reward and truncation."""

import streamlit as st

from grpo_doctor.app.dashboard import samples_page
from grpo_doctor.app.dashboard.session import all_runs, open_store, pick_run

st.title("Samples")
run_id = pick_run(all_runs(), "samples.select")
with open_store() as store:
    samples = store.samples(run_id)

if samples.empty:
    st.info("This run has no sampled completions (imported logs rarely carry them; the embedded trainer "
            "stores one group per step).")
    st.stop()

first, last = int(samples["step"].min()), int(samples["step"].max())
left, middle, right = st.columns([3, 3, 2])
steps = left.slider("Steps", first, last, (first, last), key="samples.steps") if last > first else (first, last)
rewards = samples["reward"].dropna()
reward_range = None
if len(rewards) and rewards.max() > rewards.min():
    low, high = float(rewards.min()), float(rewards.max())
    chosen = middle.slider("Reward", low, high, (low, high), key="samples.reward")
    reward_range = None if chosen == (low, high) else chosen
n = right.number_input("n-gram size", 2, 8, 3, key="samples.n", help="repeated n-grams are highlighted")
truncated_only = right.toggle("only truncated", key="samples.truncated")

shown = samples_page.filtered(samples, steps, reward_range, truncated_only)
st.caption(f"{len(shown):,} of {len(samples):,} completions, {shown['step'].nunique():,} steps")
if shown.empty:
    st.info("No completion matches these filters.")
    st.stop()
page = st.columns(4)[0].number_input(f"Page (of {samples_page.pages(shown)}, newest steps first)", 1,
                                     samples_page.pages(shown), 1, key="samples.page") - 1
samples_page.show(shown, n, page)
