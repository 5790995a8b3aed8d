"""GRPO Doctor for ms-swift: stream a `swift rlhf --rlhf_type grpo` run into the GRPO Doctor store, live.

Copy this file next to your launch script (GRPO Doctor must be installed in ms-swift's environment), then add
two arguments; ms-swift imports the file (``--external_plugins``) and builds the callback it registers by name
(``--callbacks``), passing its own GRPO trainer, whose completions are then stored with the metrics:

    GRPO_DOCTOR_DB=runs.db swift rlhf --rlhf_type grpo ... \
        --external_plugins ms_swift_plugin.py --callbacks grpo_doctor
    grpo-doctor dashboard --db runs.db

Optional environment: ``GRPO_DOCTOR_DB`` (default ``./grpo_runs.db``), ``GRPO_DOCTOR_RUN`` (the run's name; default
the output folder's name, e.g. ``v0-20260101-120000``), ``GRPO_DOCTOR_STOP_ON`` (``critical`` or ``warning``: a
finding that severe saves a checkpoint and stops training).
"""

import os

from swift.callbacks import callbacks_map

from grpo_doctor import GRPODoctorCallback


def grpo_doctor(args, trainer):
    """ms-swift calls ``callbacks_map[name](args, trainer)`` for each name in ``--callbacks``."""
    return GRPODoctorCallback(run_name=os.environ.get("GRPO_DOCTOR_RUN") or None, trainer=trainer,
                              stop_on=os.environ.get("GRPO_DOCTOR_STOP_ON") or None)


callbacks_map["grpo_doctor"] = grpo_doctor
