"""pretrain/run.py that sends itself a signal at an exact training step, so that a test of SIGTERM
or SIGKILL does not depend on catching a moment from outside (which a busy machine may miss).

``SIGNAL_AT_STEP=N SIGNAL_NAME=SIGTERM [SIGNAL_RANK=R] python tests/_run_with_signal.py ARGS``
runs ``pretrain/run.py ARGS`` and sends the signal to itself as the N-th training step of this
process starts (steps before it are logged and their metrics written; with SIGTERM the run stops
after step N), on rank R only when given (msrun's RANK_ID).
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from pretrain.trainer import Trainer


def main() -> int:
    at = int(os.environ["SIGNAL_AT_STEP"])
    sig = getattr(signal, os.environ["SIGNAL_NAME"])
    rank = os.environ.get("SIGNAL_RANK")
    if rank is None or os.environ.get("RANK_ID", "0") == rank:
        step = Trainer.train_step
        calls = [0]

        def signalled(self: Trainer, micro: list[Any]) -> dict[str, Any]:
            calls[0] += 1
            if calls[0] == at:
                os.kill(os.getpid(), sig)
            return step(self, micro)

        Trainer.train_step = signalled  # type: ignore[method-assign]
    from pretrain.run import main as run_main

    return run_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
