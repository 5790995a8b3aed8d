"""A user reward function, imported by path in the trainer tests (``support.reward_fixture:count_sevens``)."""


def count_sevens(prompts, completions, **columns):
    return [float(c.count("7")) for c in completions]


def flaky(prompts, completions, **columns):
    """Raises on every call: a reward function with a bug (or a remote scorer that is down)."""
    raise RuntimeError("scorer unavailable")
