#!/usr/bin/env python3
"""Hyperparameter sweep over a grid or a random search; seeds and data hyperparameters vmapped in one program.

    python scripts/sweep.py --env gymnax:CartPole-v1 --num-envs 4 --total-timesteps 1e5 \\
        --grid ent-coef=0.0,0.01,0.03 --seeds 3 --out sweeps/cartpole-ent
    python scripts/sweep.py --env hackmatrix --total-timesteps 2e6 --random 8 --space lr=1e-4:1e-3:log \\
        --space ent-coef=0.01:0.05 --seeds 3 --out sweeps/hm-random
    python scripts/sweep.py --env hackmatrix --total-timesteps 2e6 --grid env.curriculum_share=0,0.5 --seeds 3 \
        --out sweeps/hm-curriculum                      # env parameters: env.NAME, one program per value

Writes <out>/results.csv, <out>/results.md (final metrics, mean ± std over seeds), <out>/curves.png and one
metrics.jsonl per program. See python/hephaestus/tools/sweep.py and specs/pipeline.md ("Sweeps").
"""

import sys

from hephaestus.tools import entry_points

if __name__ == "__main__":
    sys.exit(entry_points.sweep(__file__))
