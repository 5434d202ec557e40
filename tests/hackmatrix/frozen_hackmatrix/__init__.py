"""HackMatrix's step as it was before its step program was rewritten for speed (the package's envs/hackmatrix at
commit ce78ab6, the modules the step uses, unchanged but for this file): the reference that
test_step_differential.py and scripts/experiments/hackmatrix_step_differential.py step beside the package's step,
with the same keys, asserting identical states, observations, rewards and dones. A change to the rules changes
the package's step and must change this copy with it."""
from .env import HackMatrix

__all__ = ["HackMatrix"]
