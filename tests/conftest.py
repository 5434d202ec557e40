"""Test-wide settings.

* No test ever talks to wandb's servers, whatever keys the machine has.
* One persistent compilation cache for the whole session (both xdist workers and every training script a test
  starts), so a program compiled once - the HackMatrix step, a CartPole chunk - is not compiled again.
"""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

os.environ["WANDB_MODE"] = "disabled"
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(ROOT, ".jax_cache", "tests"))

from hephaestus.loop import enable_compilation_cache  # noqa: E402

enable_compilation_cache(os.environ["JAX_COMPILATION_CACHE_DIR"])
