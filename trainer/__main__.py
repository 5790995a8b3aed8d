"""``python -P -m grpo_doctor.trainer ...``: what ``grpo-doctor train`` execs (the app starts trainers as processes)."""

import sys

from grpo_doctor.trainer.lifeline import watch_parent

watch_parent()  # first, before the slow imports: a launcher killed meanwhile ends this trainer

from grpo_doctor.trainer.run import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
