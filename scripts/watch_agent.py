#!/usr/bin/env python3
"""Watch a trained agent play, on a laptop (CPU jax is enough).

    python scripts/watch_agent.py checkpoints/<run>/final_params.npz          # in the terminal
    python scripts/watch_agent.py checkpoints/<run> --save agent.gif --fps 8  # to a GIF (or .mp4), headless
    python scripts/watch_agent.py --latest --window                            # newest run, in a window

The environment and the network shape come from the parameter file. See `--help`.
"""

import os
import sys

# CPU is enough to watch; leave an accelerator to a training run on the same machine.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from hephaestus.tools import entry_points

if __name__ == "__main__":
    sys.exit(entry_points.watch(__file__))
