"""The ways a run ends short: what ``prepare`` raises, each with a message that says what to do."""

from __future__ import annotations


class RunError(RuntimeError):
    """The run cannot go on; the message says what to do."""


class UsageError(RunError):
    """The command's INPUTs do not go with the recipe (both, or neither, name the inputs): the
    command line exits with its usage status."""


class NothingLeftError(RunError):
    """The run ended with no document left (its stats.json and report.html are written); the
    message counts the documents read and dropped by reason and says what to change."""
