"""Removing a run's intermediates: many files unlinked at once from a few threads.

Unlinking a file whose blocks were just written waits on the file system (the journal, discards
of the freed blocks), not on the CPU, so a run's last clean-up of OUT/work (hundreds of files,
hundreds of MB) took 1-1.7 s of wall time on one thread; several unlinks in flight overlap
those waits."""

from __future__ import annotations

import contextlib
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

UNLINK_THREADS = 8


def remove_all(paths: list[Path], threads: int = UNLINK_THREADS, ignore_errors: bool = False) -> None:
    """Remove every path of ``paths`` (files, or directories with all they hold; missing ones are
    skipped). Symbolic links are removed, never followed. OSError on what cannot be removed,
    unless ``ignore_errors``."""
    try:
        _remove_all(paths, threads)
    except OSError:
        if not ignore_errors:
            raise
        for path in paths:  # what is left, as far as it goes
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    path.unlink()


def _remove_all(paths: list[Path], threads: int) -> None:
    files: list[str] = []
    dirs: list[str] = []
    for path in paths:
        if path.is_dir() and not path.is_symlink():
            for root, subdirs, names in os.walk(path):
                dirs.append(root)
                files += [os.path.join(root, n) for n in names]
                files += [os.path.join(root, d) for d in subdirs if os.path.islink(os.path.join(root, d))]
        elif path.exists() or path.is_symlink():
            files.append(str(path))
    if len(files) > 1 and threads > 1:
        with ThreadPoolExecutor(min(threads, len(files))) as pool:
            list(pool.map(_unlink, files))
    else:
        for f in files:
            _unlink(f)
    for d in reversed(dirs):  # os.walk lists a directory before what it holds
        try:
            os.rmdir(d)
        except FileNotFoundError:
            pass
        except OSError:  # something appeared meanwhile: removed the slow way
            shutil.rmtree(d, ignore_errors=True)


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
