#!/usr/bin/env python3
"""Learning curves from runs' metrics.jsonl, mean and a band over seeds, one PNG (see `--help`).

    python scripts/plot_runs.py checkpoints/hm_s0 checkpoints/hm_s1 --metric eval/return_mean --out fig.png
"""

import sys

from hephaestus.tools import entry_points

if __name__ == "__main__":
    sys.exit(entry_points.plot(__file__))
