"""Command-line entry points: the `hephaestus-*` commands (pyproject's [project.scripts]) and scripts/*.py.

Each entry point checks its checkout, then imports the module that does the work; this module imports no jax, so
`--help` and a one-line error need no jax start. A function takes `script`, the path of the scripts/ file that calls it, or None when run
as an installed command.

scripts/ import the installed package (requirements.txt installs this checkout editable) and edit no sys.path.
A script run from one checkout while `import hephaestus` finds another checkout's package (two clones, one
installed) would silently run the other code: `require_this_checkout` stops it with a one-line error instead.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]


def require_this_checkout(script: str) -> None:
    """Exit 2 if `script` lies in a checkout whose python/hephaestus is not the package imported."""
    for root in Path(script).resolve().parents:
        if (root / "pyproject.toml").is_file() and (root / "python" / "hephaestus").is_dir():
            if (root / "python" / "hephaestus").resolve() != PACKAGE_DIR:
                print(f"error: {script} belongs to the checkout {root}, but `import hephaestus` finds "
                      f"{PACKAGE_DIR}; run `pip install -e .` in {root} or set PYTHONPATH={root / 'python'}",
                      file=sys.stderr)
                sys.exit(2)
            return


def load_script(path: str | os.PathLike, name: str | None = None):
    """A script (scripts/, scripts/experiments/, benchmarks/: run, not installed) as a module, loaded from its file:
    an experiment that reuses a sibling's settings, a benchmark its reference, a test the script's functions."""
    import importlib.util

    path = os.fspath(path)
    spec = importlib.util.spec_from_file_location(name or os.path.splitext(os.path.basename(path))[0], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _start(script: str | None) -> None:
    if script is not None:
        require_this_checkout(script)


def train(script: str | None = None) -> int:
    """hephaestus-train = scripts/train_purejaxrl.py."""
    _start(script)
    from hephaestus.run.train import script_main

    return script_main()


def watch(script: str | None = None) -> int:
    """hephaestus-watch = scripts/watch_agent.py (on the CPU unless JAX_PLATFORMS says otherwise)."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # leave an accelerator to a training run on the same machine
    _start(script)
    from hephaestus.tools.watch import main

    return main()


def evaluate(script: str | None = None) -> int:
    """hephaestus-evaluate = scripts/evaluate.py."""
    _start(script)
    from hephaestus.tools.evaluate_agent import main

    return main()


def inspect(script: str | None = None) -> int:
    """hephaestus-inspect = scripts/inspect_checkpoint.py."""
    _start(script)
    from hephaestus.tools.inspect_checkpoint import main

    return main()


def sweep(script: str | None = None) -> int:
    """hephaestus-sweep = scripts/sweep.py."""
    _start(script)
    from hephaestus.tools.sweep import main

    return main()


def plot(script: str | None = None) -> int:
    """hephaestus-plot = scripts/plot_runs.py."""
    _start(script)
    from hephaestus.tools.plotting import main

    return main()
