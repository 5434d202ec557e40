"""`main(*args)`: scripts/train_purejaxrl.py run in-process, returning its exit code (SystemExit included); and the
exact-resume check's two steps that the tests of several stages share."""

import pathlib
import shutil

import jax
import numpy as np

from hephaestus.run import train
from hephaestus.core.export import load_params_npz


def main(*args):
    try:
        return train.main(list(args))
    except SystemExit as exit_:
        return exit_.code


def resume_cut_back_copy(run_dir, copy_dir, drop_step, *flags):
    """Copy the finished run folder `run_dir` to `copy_dir` without its checkpoint `drop_step` and its final
    parameters (as if it had been killed after the checkpoint before) and resume the copy with `flags`: the exit code."""
    copy_dir = pathlib.Path(copy_dir)
    shutil.copytree(run_dir, copy_dir)
    shutil.rmtree(copy_dir / str(drop_step))
    (copy_dir / "final_params.npz").unlink()
    return main("--resume", str(copy_dir), *flags)


def assert_same_params(a, b):
    """Two exported parameter files (final_params.npz) hold bit-identical parameters of the same update; returns the
    first one's metadata."""
    params_a, meta_a = load_params_npz(str(a))
    params_b, meta_b = load_params_npz(str(b))
    assert meta_a["update"] == meta_b["update"]
    leaves_a, leaves_b = jax.tree.leaves(params_a), jax.tree.leaves(params_b)
    assert len(leaves_a) == len(leaves_b)
    for x, y in zip(leaves_a, leaves_b):
        np.testing.assert_array_equal(x, y)
    return meta_a
