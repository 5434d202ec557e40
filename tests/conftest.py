"""Test-wide settings.

* No test ever talks to wandb's servers, whatever keys the machine has.
* One persistent compilation cache for the whole session (both xdist workers and every training script a test
  starts), so a program compiled once - the HackMatrix step, a CartPole chunk - is not compiled again.
"""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Vmapped training functions and flax initialisers (--num-seeds) can deadlock XLA's concurrency-optimised CPU
# scheduler on a 2-core machine; set before jax starts (results are identical either way).
if "--xla_cpu_enable_concurrency_optimized_scheduler" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               " --xla_cpu_enable_concurrency_optimized_scheduler=false").strip()
# Scripts a test starts (`python scripts/...`) import the package with a plain `import hephaestus`: make that this
# checkout's python/ whichever checkout `pip install -e .` installed (pytest's `pythonpath` reaches this process only).
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (os.path.join(ROOT, "python"), os.environ.get("PYTHONPATH"))))
os.environ["WANDB_MODE"] = "disabled"
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(ROOT, ".jax_cache", "tests"))

from hephaestus import xla_flags  # noqa: E402

xla_flags.configure()  # as every entry point does, before jax starts (also for the scripts tests start)

from hephaestus.loop import enable_compilation_cache  # noqa: E402

enable_compilation_cache(os.environ["JAX_COMPILATION_CACHE_DIR"])


def pytest_configure(config):
    config.addinivalue_line("markers", "heavy: a test that runs for a minute or more on 2 cores; scheduled first")


def pytest_collection_modifyitems(config, items):
    """Heavy tests first (a stable sort: the rest keep their order). pytest-xdist hands out tests in collection
    order, so a minute-long test collected last would leave the other worker idle at the end of the run."""
    items.sort(key=lambda item: item.get_closest_marker("heavy") is None)
