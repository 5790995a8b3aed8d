"""The names of the trainer's variants, without torch: the config's choices and the keys of grpo_math's tables.

Each tuple here is the key set of one name → function table in ``trainer.grpo_math`` (same name, a dict there);
tests/unit/trainer/test_variants.py checks that the two, the ``### `` headings of docs/variants.md and the dashboard's
new-run form all list the same names. The dashboard imports this module (through ``trainer.config``) on
machines without torch, so it imports nothing.
"""

ADVANTAGES = ("grpo", "dr_grpo", "rloo", "reinforce", "gae")    # config.advantage   → grpo_math.ADVANTAGES
SCALE_REWARDS = ("group", "batch", "none")                      # config.scale_rewards → grpo_math.SCALE_REWARDS
GROUP_BY = ("prompt", "length_quantile", "reward_bucket")       # config.group_by    → grpo_math.GROUP_BY
LOSS_TYPES = ("grpo", "bnpo", "dapo", "dr_grpo")                # config.loss_type   → grpo_math.LOSS_TYPES
KL_ESTIMATORS = ("k1", "k2", "k3")                              # config.kl_estimator → grpo_math.KL_ESTIMATORS

#: config field → its names, in the order docs/variants.md gives them a ``## `` section each.
BY_FIELD = {"advantage": ADVANTAGES, "scale_rewards": SCALE_REWARDS, "group_by": GROUP_BY,
            "loss_type": LOSS_TYPES, "kl_estimator": KL_ESTIMATORS}
