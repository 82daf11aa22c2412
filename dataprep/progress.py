"""Progress display for long passes: documents/s, MB/s and ETA (tqdm, on stderr)."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any


class Progress:
    """A progress bar over input bytes (ETA from bytes) or, when total_bytes is None, documents.

    ``update(docs, nbytes)`` is thread-safe; the postfix shows docs/s (and MB/s over input bytes).
    """

    def __init__(
        self,
        title: str,
        total_bytes: int | None = None,
        total_docs: int | None = None,
        quiet: bool = False,
        done_tasks: int = 0,
        total_tasks: int = 0,
    ):
        from tqdm import tqdm

        self.by_bytes = total_bytes is not None
        self._lock = threading.Lock()
        self._start = time.monotonic()
        self.docs = 0
        self.nbytes = 0
        resumed = f" [resuming: {done_tasks}/{total_tasks} tasks done]" if done_tasks else ""
        self._bar = tqdm(
            total=total_bytes if self.by_bytes else total_docs,
            desc=title + resumed,
            unit="B" if self.by_bytes else "doc",
            unit_scale=True,
            unit_divisor=1024 if self.by_bytes else 1000,
            disable=quiet,
            file=sys.stderr,
            mininterval=0.5 if sys.stderr.isatty() else 15.0,
            dynamic_ncols=True,
            leave=True,
        )

    def update(self, docs: int, nbytes: int) -> None:
        with self._lock:
            self.docs += docs
            self.nbytes += nbytes
            self._bar.update(nbytes if self.by_bytes else docs)
            elapsed = max(time.monotonic() - self._start, 1e-9)
            rate = f"{self.docs / elapsed:,.0f} docs/s"
            if self.by_bytes:
                rate += f", {self.nbytes / elapsed / 1e6:.1f} MB/s"
            self._bar.set_postfix_str(rate, refresh=False)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.close()


def phase_bar(
    title: str, total: int | None, unit: str = "it", unit_scale: bool = False, quiet: bool = False
) -> Any:
    """A tqdm bar on stderr for one phase of driver-side work (e.g. a global stage's decide),
    refreshed like :class:`Progress`: twice a second on a terminal, every 15 s in a log; nothing
    when ``quiet`` (pass ``DriverContext.quiet``). Without a ``total`` (rounds whose number is not
    known ahead) it shows the current step's description and the time so far, no count;
    ``set_description`` replaces the title as it is (no ": " appended)."""
    from tqdm import tqdm

    class PhaseBar(tqdm):  # type: ignore[misc, type-arg]
        def set_description(self, desc: str | None = None, refresh: bool = True) -> None:
            self.set_description_str(desc, refresh)

    return PhaseBar(
        total=total,
        desc=title,
        unit=unit,
        unit_scale=unit_scale,
        disable=quiet,
        file=sys.stderr,
        mininterval=0.5 if sys.stderr.isatty() else 15.0,
        dynamic_ncols=True,
        leave=True,
        bar_format=None if total is not None else "{desc} [{elapsed}]",
    )


def log(msg: str) -> None:
    """One line for the user on stderr, flushed at once (between progress bars)."""
    print(msg, file=sys.stderr, flush=True)
