#!/usr/bin/env python3
"""Show what a Hephaestus checkpoint holds, and check that it loads.

    python scripts/inspect_checkpoint.py checkpoints/<run>/          # its latest checkpoint
    python scripts/inspect_checkpoint.py checkpoints/<run>/120/      # one step
    python scripts/inspect_checkpoint.py checkpoints/<run>/final_params.npz

Prints the update and env-step counters, the package version, the environment and network shape, the
config, every array's shape and dtype, and the last metrics record. A bad path or a checkpoint that does not
load is one line on stderr and exit code 2 (bad input, as every script).
"""

import sys

from hephaestus.tools import entry_points
from hephaestus.tools.inspect_checkpoint import main  # noqa: F401 (tests call main(argv))

if __name__ == "__main__":
    sys.exit(entry_points.inspect(__file__))
