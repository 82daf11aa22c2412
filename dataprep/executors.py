"""The executor registry: executors by name, from the ``dataprep.executors`` entry-point group.

Each entry point names an :class:`~dataprep.executor.base.Executor` class (``local =
"dataprep.executor.pool:LocalExecutor"`` in pyproject.toml), built as ``cls(workers, address)``.
``dataprep prepare --executor NAME`` offers these names; a plug-in package adds one by declaring
an entry point in the same group. Nothing is imported until an executor is made (this module
sits outside :mod:`dataprep.executor` so that the command line can list the names without
loading the run).
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dataprep.executor.base import Executor

GROUP = "dataprep.executors"


def _entry_points() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=GROUP)}


def executor_names() -> list[str]:
    """The names of the registered executors, sorted."""
    return sorted(_entry_points())


def make_executor(kind: str, workers: int, address: str | None = None) -> Executor:
    """The executor registered as ``kind``, of ``workers`` workers (``address``: a cluster to join,
    for executors that have one); ValueError naming the known ones if there is none."""
    found = _entry_points().get(kind)
    if found is None:
        known = ", ".join(executor_names()) or "none: reinstall dataprep (pip install -e .)"
        raise ValueError(f"unknown executor {kind!r} (known: {known})")
    return found.load()(workers, address)
