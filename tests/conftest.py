"""Test-wide settings.

* No test ever talks to wandb's servers, whatever keys the machine has.
* One persistent compilation cache for the whole session (both xdist workers and every training script a test
  starts), so a program compiled once - the HackMatrix step, a CartPole chunk - is not compiled again.
* Programs compile with LLVM at -O0 (`--xla_backend_optimization_level=0`, added to XLA_FLAGS, so every script a
  test starts inherits it). The suite checks behaviour, not speed, and compiling is most of its time: on the 2-core
  machine the whole suite took 831 s at the default level and 699 s at -O0. Fusions are emitted by XLA's older
  elemental emitter (`--xla_cpu_use_fusion_emitters=false`): the HackMatrix step, most of the suite's compile
  time, compiles in 11-12 s of CPU instead of 17 at -O0. With it, gymnax's lighter import
  (envs/gymnax_import.py) and a smaller `dreamer_cartpole.py --quick`, the suite on the AVX2 machine (a fresh clone's
  `.ci/run`, alone) takes 939 s on the clock and 1,723 s of CPU, against 1,503 s and 2,778 s without the three. (The
  old emitter's programs run slower - CartPole's chunk 87k against ~150k env steps/s, specs/speed.md - so only tests
  use it.) Results change only in the last bits of floating point (a different instruction order), which no
  test may depend on; speed is measured by scripts/bench.py, which compiles as users do.
* A module whose tests share something costly to build (a module-scoped fixture, a cached compiled rollout) is one
  xdist group (`pytestmark = pytest.mark.xdist_group(...)`, run by one worker, `--dist loadgroup`): split over the
  two workers, each built it (a profile on the shared machine: test_watch's and test_dtc's module fixtures set up a
  second time on the other worker, 29 s and 24 s). Measured alone on the AVX2 machine (a fresh clone's `.ci/run`),
  the groups, matplotlib's stand-in (envs/gymnax_import.py) and one HackMatrix test folded into another take the
  suite 929 s and 1,709 s of CPU against 939 s and 1,723 s without them: within run-to-run noise.
  The HackMatrix rule and rollout tests (and the README's HackMatrix example, tests/test_readme.py) are one group,
  "hackmatrix": a batched or unbatched HackMatrix step compiles for 12-20 s of CPU, and split over two workers the
  shared step (hm_helpers.step), the random rollout and the unbatched env.step were each compiled twice, by two
  workers at once, or once per module. With that group, and dreamer_cartpole.py's open-loop check reading the
  run's stored fresh-agent program (its --quick trains 1024 steps), a fresh clone's `.ci/run` alone on the AVX2
  machine takes 751 s on the clock and 1,363 s of CPU, against 920 s and 1,678 s without them.
"""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Scripts a test starts (`python scripts/...`) import the package with a plain `import hephaestus`: make that this
# checkout's python/ whichever checkout `pip install -e .` installed (pytest's `pythonpath` reaches this process only).
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (os.path.join(ROOT, "python"), os.environ.get("PYTHONPATH"))))
os.environ["XLA_FLAGS"] = (f"{os.environ.get('XLA_FLAGS', '')} --xla_backend_optimization_level=0"
                           " --xla_cpu_use_fusion_emitters=false").strip()
os.environ["WANDB_MODE"] = "disabled"
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(ROOT, ".jax_cache", "tests"))

from hephaestus.core.compilation_cache import enable_compilation_cache  # noqa: E402

enable_compilation_cache(os.environ["JAX_COMPILATION_CACHE_DIR"])


def pytest_configure(config):
    config.addinivalue_line("markers", "heavy: a test that runs for a minute or more on 2 cores; scheduled first")


def pytest_collection_modifyitems(config, items):
    """Heavy tests first, then the other tests of xdist groups, then the rest (a stable sort: each keeps its order).
    pytest-xdist hands out work in collection order (`--no-loadscope-reorder`; a group is one unit of work, placed
    where its first test is), so a minute-long test or a group of many collected last would leave the other worker
    idle at the end of the run; the single short tests at the end fill both workers to the last."""
    items.sort(key=lambda item: 0 if item.get_closest_marker("heavy") else 1 if item.get_closest_marker("xdist_group")
               else 2)
