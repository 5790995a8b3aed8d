"""A trainer ends with the process that started it (``grpo-doctor train``, ``demo``, ``scenarios``, the dashboard),
even when that process is killed with SIGKILL: no orphan keeps writing the run.

Two ties, both ending the trainer with SIGTERM (it finishes its step, saves a checkpoint and marks the run
stopped; before its loop starts, SIGTERM simply ends it):

* the launcher passes its pid in ``$GRPO_DOCTOR_PARENT_PID``; the trainer checks at once that this is still its
  parent (the launcher may have died before the trainer started) and then watches it every second
  (``watch_parent``: any platform, and any thread of the launcher may have started it);
* on Linux, a launcher starting the trainer from its main thread also sets ``PR_SET_PDEATHSIG`` in the child
  (``child_options``): the kernel signals the trainer the moment the launcher dies. Not from other threads:
  the kernel ties that signal to the thread that started the child (a dashboard starts trainers from a thread
  that ends after each page run).

Only the standard library here: the command line imports it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading

PARENT_ENV = "GRPO_DOCTOR_PARENT_PID"
PR_SET_PDEATHSIG = 1


def _find_prctl():
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _find_prctl()  # looked up before any fork: the child only calls it


def child_options(env: dict[str, str] | None = None) -> dict:
    """``subprocess.Popen`` keyword arguments that tie the child's life to this process."""
    options: dict = {"env": {**(os.environ if env is None else env), PARENT_ENV: str(os.getpid())}}
    if _PRCTL is not None and threading.current_thread() is threading.main_thread():
        parent = os.getpid()

        def die_with_parent() -> None:  # runs in the child between fork and exec
            _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
            if os.getppid() != parent:  # the parent died before the tie was made
                os._exit(1)

        options["preexec_fn"] = die_with_parent
    return options


_PARENT_GONE = threading.Event()


def parent_gone() -> bool:
    """Whether ``watch_parent`` saw the launcher go. Its SIGTERM may have reached the process before the training
    loop's handler did (and met a handler inherited by a fork rather than the default that ends the process):
    the loop's handler reads this once installed, so that SIGTERM is never lost."""
    return _PARENT_GONE.is_set()


def watch_parent(every: float = 1.0) -> threading.Thread | None:
    """In the child: end this process (SIGTERM) once the launcher named by ``$GRPO_DOCTOR_PARENT_PID`` is gone.
    Nothing when the variable is not set (a trainer started by hand, or under torchrun, lives on its own)."""
    value = os.environ.pop(PARENT_ENV, "")
    if not value.isdigit():
        return None
    parent = int(value)
    if os.getppid() != parent:
        print("grpo-doctor train: error: the process that started this trainer is gone; not starting",
              file=sys.stderr)
        sys.exit(1)
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(every):
            if os.getppid() != parent:
                _PARENT_GONE.set()  # for a stop handler installed after this signal (``parent_gone``)
                os.kill(os.getpid(), signal.SIGTERM)
                return

    thread = threading.Thread(target=watch, daemon=True, name="parent-watch")
    thread.start()
    return thread
