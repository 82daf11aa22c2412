"""``python -m dataprep``: the same as the ``dataprep`` command."""

import sys

from dataprep.cli import main

sys.exit(main())
