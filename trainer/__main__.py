"""``python -m trainer ...``: what ``grpo-doctor train`` execs (the app starts trainers as processes)."""

import sys

from trainer.run import main

sys.exit(main(sys.argv[1:]))
