#!/usr/bin/env python3
"""Evaluate a saved agent: K complete episodes in parallel with its parameters (greedy by default), the same
statistics a training run logs under eval/ (see `--help`).

    python scripts/evaluate.py checkpoints/<run> --episodes 1000
    python scripts/evaluate.py --random --env hackmatrix --episodes 1000     # the masked-uniform baseline
"""

import sys

from hephaestus.tools import entry_points

if __name__ == "__main__":
    sys.exit(entry_points.evaluate(__file__))
