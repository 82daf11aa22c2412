"""Set-up of a pool worker process, run before anything heavy is imported in it.

A worker runs one task per CPU beside the others, so a library that starts a thread per core in
every process (OpenBLAS / OpenMP under numpy, the tokenizers encoder) would put N x N threads on
N cores, and idle BLAS threads spin for a while after each call (the report's plots took 2.8
CPU-s instead of 1.5 on 2 cores). Workers therefore get one such thread each, as Ray gives its
workers OMP_NUM_THREADS=1; a variable the user has set is left alone. OpenBLAS reads these when
numpy loads, so this module imports nothing but the standard library: a spawned worker imports it
to run :func:`init_pool_worker` before any task brings numpy in.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

ONE_THREAD = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "RAYON_NUM_THREADS": "1",  # Rust libraries' thread pools (fastokens)
    "FASTOKENS_BPE_THREADS": "1",
}

progress_queue: Any = None  # where a pool worker reports (documents, bytes) as its task goes
numpy_was_loaded = False  # numpy was imported before the set-up ran (too late for OpenBLAS)


def one_thread_per_worker() -> None:
    """Give libraries one thread in this process (unless the variable is set already)."""
    for name, value in ONE_THREAD.items():
        os.environ.setdefault(name, value)


@contextlib.contextmanager
def single_threaded_encoders() -> Iterator[None]:
    """Within the block, tokenizers encode with one thread, as in pool workers: for a run whose
    tasks run in this process (one worker). Only the tokenizer variable can still take effect
    here (numpy is loaded already); it is restored afterwards."""
    name = "TOKENIZERS_PARALLELISM"
    saved = os.environ.get(name)
    os.environ[name] = ONE_THREAD[name]
    try:
        yield
    finally:
        if saved is None:
            del os.environ[name]
        else:
            os.environ[name] = saved


def init_pool_worker(queue: Any) -> None:
    """A local pool worker's initializer: thread variables, then the progress queue."""
    global progress_queue, numpy_was_loaded
    numpy_was_loaded = "numpy" in sys.modules
    one_thread_per_worker()
    progress_queue = queue


def worker_setup(_: Any = None) -> dict[str, Any]:
    """What :func:`init_pool_worker` found and set in this process (for tests)."""
    return {"numpy_was_loaded": numpy_was_loaded, **{k: os.environ.get(k) for k in ONE_THREAD}}
