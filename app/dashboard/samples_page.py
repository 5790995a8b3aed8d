"""The Samples page: sampled completions per step with reward, length and truncation, repeated n-grams
highlighted; filtered by step range, reward range and truncation."""

from __future__ import annotations

import html
import math

import pandas as pd
import streamlit as st

from grpo_doctor.app.dashboard.ngrams import highlight, repeated_spans
from grpo_doctor.diagnostics.formatting import number
from grpo_doctor.diagnostics.metrics.repetition import text_repetition

STEPS_PER_PAGE = 10
_STYLE = (
    "<style>.gd-samples{width:100%;border-collapse:collapse;font-size:0.9rem}"
    ".gd-samples th,.gd-samples td{border-bottom:1px solid rgba(128,128,128,.25);padding:4px 8px;"
    "text-align:left;vertical-align:top}.gd-samples td.c{font-family:monospace;white-space:pre-wrap;"
    "word-break:break-word}.gd-samples mark{background:#ffd8a8;color:inherit;padding:0 1px}"
    ".gd-samples .t{color:#c92a2a;font-weight:600}</style>"
)


_COLUMNS = "".join(f'<col style="width:{w}%">' for w in (6, 16, 44, 8, 8, 9, 9))


def filtered(samples: pd.DataFrame, steps: tuple[int, int], rewards: tuple[float, float] | None,
             truncated_only: bool) -> pd.DataFrame:
    """Samples with steps[0] <= step <= steps[1], reward in the range (a missing reward is kept only when no
    reward range is asked), and only truncated ones when asked."""
    keep = samples["step"].between(*steps)
    if rewards is not None:
        keep &= samples["reward"].between(*rewards)
    if truncated_only:
        keep &= samples["truncated"]
    return samples.loc[keep]


def _reward_text(value) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else number(float(value), 3)


def step_table(rows: pd.DataFrame, n: int) -> str:
    """One step's completions as an HTML table (prompt, completion with repeated n-grams marked, reward,
    length, truncated, and its repetition: the share of n-grams repeating an earlier one); all text escaped."""
    lines = [_STYLE, '<table class="gd-samples">', _COLUMNS, "<tr><th>group</th><th>prompt</th><th>completion</th>"
             "<th>reward</th><th>length</th><th>truncated</th><th>repeated</th></tr>"]
    for row in rows.itertuples(index=False):
        text = str(row.completion)
        share = text_repetition(text, n)
        truncated = "–" if pd.isna(row.length) else '<span class="t">yes</span>' if row.truncated else "no"
        lines.append(
            f"<tr><td>{int(row.group)}</td><td class='c'>{html.escape(str(row.prompt))}</td>"
            f"<td class='c'>{highlight(text, repeated_spans(text, n)) or '<i>(empty)</i>'}</td>"
            f"<td>{_reward_text(row.reward)}</td><td>{'–' if pd.isna(row.length) else int(row.length)}</td>"
            f"<td>{truncated}</td><td>{'–' if share is None else f'{share:.0%}'}</td></tr>")
    lines.append("</table>")
    return "".join(lines)


def length_summary(rows: pd.DataFrame) -> str:
    """"mean length 180 · 2 truncated" from the lengths recorded, or that none were (a log without token counts)."""
    lengths = rows["length"].dropna()
    if not len(lengths):
        return "lengths not recorded"
    return f"mean length {number(float(lengths.mean()), 3)} · {int(rows['truncated'].sum())} truncated"


def show(samples: pd.DataFrame, n: int, page: int) -> None:
    """Newest steps first, ``STEPS_PER_PAGE`` steps per page."""
    steps = sorted(samples["step"].unique(), reverse=True)
    for step in steps[page * STEPS_PER_PAGE:(page + 1) * STEPS_PER_PAGE]:
        rows = samples.loc[samples["step"] == step]
        rewards = rows["reward"].dropna()
        summary = f"mean reward {number(float(rewards.mean()), 3)}" if len(rewards) else "no reward"
        st.markdown(f"**Step {int(step)}** · {len(rows)} completions · {summary} · {length_summary(rows)}")
        st.markdown(step_table(rows, n), unsafe_allow_html=True)


def pages(samples: pd.DataFrame) -> int:
    return max(1, -(-samples["step"].nunique() // STEPS_PER_PAGE))
