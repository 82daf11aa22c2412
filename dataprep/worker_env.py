"""Set-up of a pool worker process, run before anything heavy is imported in it; the processes a
run starts end with it (:func:`exit_with_parent`, :class:`IsolatedProcess`).

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
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
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


def start_at_low_priority(fn: Callable[[], Any], name: str) -> threading.Thread:
    """Start ``fn()`` in a daemon thread of this process at the lowest CPU priority (niceness 19;
    on Linux a thread's niceness is its own, so the calling thread keeps its priority), its
    errors ignored; the thread is returned (join it to wait)."""

    def run() -> None:
        with contextlib.suppress(OSError, AttributeError):  # AttributeError: no setpriority
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        with contextlib.suppress(Exception):
            fn()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread


def init_pool_worker(queue: Any, driver_pid: int) -> None:
    """A local pool worker's initializer: ends with the driver (:func:`exit_with_parent`), thread
    variables, then the progress queue."""
    global progress_queue, numpy_was_loaded
    exit_with_parent(driver_pid)
    numpy_was_loaded = "numpy" in sys.modules
    one_thread_per_worker()
    progress_queue = queue


_watched: set[int] = set()


def exit_with_parent(parent_pid: int) -> None:
    """End this process (SIGKILL to itself) as soon as its parent ``parent_pid`` has ended, or at
    once when it already has (this process then belongs to another parent): a worker must not run
    on after its driver was killed. See :func:`exit_with`."""
    exit_with(parent_pid)
    if os.getppid() != parent_pid:
        _end_now()


def exit_with(pid: int) -> None:
    """End this process (SIGKILL to itself) as soon as the process ``pid`` on this machine has
    ended (at once when it has already). A daemon thread waits on a pidfd of ``pid`` (Linux 5.3+;
    elsewhere it polls every half second); it needs the GIL only to end the process, which a
    running Python task yields within milliseconds. Once per ``pid`` and process.

    Not the parent-death signal (``prctl(PR_SET_PDEATHSIG)``): Linux sends that when the *thread*
    that started the process ends, and a pool starts its workers from whichever thread submits
    work first, so a worker would be killed when, say, a warm-up thread of the driver ends."""
    if pid in _watched:
        return
    _watched.add(pid)
    fd: int | None = None
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        _end_now()
    except (AttributeError, OSError):  # no pidfd (not Linux, an old kernel): poll
        fd = None
    threading.Thread(target=_wait_for_end, args=(pid, fd), name=f"exit-with-{pid}", daemon=True).start()


def _wait_for_end(pid: int, fd: int | None) -> None:
    if fd is not None:
        select.select([fd], [], [])  # a pidfd becomes readable when its process has ended
    else:
        while _alive(pid):
            time.sleep(0.5)
    _end_now()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _end_now() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def worker_setup(_: Any = None) -> dict[str, Any]:
    """What :func:`init_pool_worker` found and set in this process (for tests)."""
    return {"numpy_was_loaded": numpy_was_loaded, **{k: os.environ.get(k) for k in ONE_THREAD}}


class IsolatedProcess:
    """A fresh (spawned) process for one call, after which it exits. Created ahead of the call
    with a ``warm_up`` (a module-level function of one ignored argument, e.g. imports), its
    start-up overlaps whatever the driver does until then. It ends when the process that created
    it does, killed included (:func:`exit_with_parent`)."""

    def __init__(self, warm_up: Callable[[Any], Any] | None = None):
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        self._pool = ProcessPoolExecutor(
            1, mp_context=mp.get_context("spawn"), initializer=exit_with_parent, initargs=(os.getpid(),)
        )
        if warm_up is not None:
            self._pool.submit(warm_up, None)  # the process starts with its first call

    def close(self) -> None:
        """End the process without a call."""
        self._pool.shutdown()

    def run(self, fn: Callable[[Any], Any], arg: Any, while_waiting: Callable[[], None] | None = None) -> Any:
        """fn(arg) in the process, which then exits; ``while_waiting()`` runs here meanwhile."""
        try:
            future = self._pool.submit(fn, arg)
            if while_waiting is not None:
                while_waiting()
            return future.result()
        finally:
            self._pool.shutdown()
