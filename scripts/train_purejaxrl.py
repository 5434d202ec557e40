#!/usr/bin/env python3
"""Train PPO (and pipeline stages such as DTC) with the whole update compiled into one XLA program.

    python scripts/train_purejaxrl.py --env gymnax:CartPole-v1 --total-timesteps 5e5
    python scripts/train_purejaxrl.py --num-envs 2048 --total-timesteps 1e8     # HackMatrix on a TPU VM
"""

import sys

from hephaestus.tools import entry_points

if __name__ == "__main__":
    sys.exit(entry_points.train(__file__))
