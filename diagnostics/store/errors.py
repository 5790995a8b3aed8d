"""The store's errors: each message is one line, fit to print to a user."""

from __future__ import annotations


class StoreError(Exception):
    """A user-facing problem with the store (its message is one line, fit to print)."""


class RunNotFound(StoreError):
    pass


class LeaseHeld(StoreError):
    """Another live process writes the run (the message names it)."""


class LeaseLost(StoreError):
    """This process's lease on a run was taken over: it must stop writing the run."""
