"""A driver for test_driver_death.py: starts children the way a run does and keeps them busy
until it is killed. ``python _driver_death_helpers.py isolated_process|pool DIR``: each child
writes DIR/<its pid> once it runs its call, then spins at 100% CPU."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def touch_then_spin(directory: str) -> None:
    """Write ``directory``/<pid>, then burn CPU for good (a task that never ends)."""
    (Path(directory) / str(os.getpid())).touch()
    n = 0
    while True:
        n += 1


def main(where: str, directory: str) -> None:
    if where == "isolated_process":
        from dataprep.stage import IsolatedProcess

        IsolatedProcess().run(touch_then_spin, directory)
    else:
        from dataprep.executor.pool import LocalExecutor

        LocalExecutor(2).map(touch_then_spin, [directory, directory])


if __name__ == "__main__":
    # by its module name (this file's directory is sys.path[0], which spawned children inherit),
    # so that the children unpickle touch_then_spin from the module and not from __main__
    from _driver_death_helpers import main as imported_main

    imported_main(sys.argv[1], sys.argv[2])
