"""scripts/bench.py's PureJaxRL case (--reference-dir): it runs a folder's own ppo.py in a fresh interpreter,
with stand-ins for wrappers.py's brax/navix imports, and reports its figures; a folder without ppo.py is one line
and exit 2. A stand-in ppo.py here keeps the test fast; the real comparison is specs/speed.md."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "scripts", "bench.py")

# What bench.py relies on in PureJaxRL's file: make_train(config) sets NUM_UPDATES and returns train(rng), whose
# output has metrics.returned_episode_returns; wrappers.py imports brax and navix at the top, as PureJaxRL's does.
FAKE_PPO = '''
import jax, jax.numpy as jnp
from wrappers import LogWrapper

def make_train(config):
    config["NUM_UPDATES"] = config["TOTAL_TIMESTEPS"] // config["NUM_STEPS"] // config["NUM_ENVS"]
    def train(rng):
        returns = jnp.full((int(config["NUM_UPDATES"]), config["NUM_STEPS"], config["NUM_ENVS"]), 21.0)
        return {"runner_state": rng, "metrics": {"returned_episode_returns": returns}}
    return train
'''
FAKE_WRAPPERS = '''
from brax import envs
from brax.envs.wrappers.training import EpisodeWrapper, AutoResetWrapper
import navix as nx

class LogWrapper:
    pass
'''


def test_bench_runs_a_reference_folders_own_ppo_py_as_a_case(tmp_path):
    (tmp_path / "ppo.py").write_text(FAKE_PPO)
    (tmp_path / "wrappers.py").write_text(FAKE_WRAPPERS)
    out = subprocess.run([sys.executable, BENCH, "--reference-dir", str(tmp_path), "--cases", "cartpole-4x128-purejaxrl"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    line = next(l for l in out.stdout.splitlines() if l.startswith("cartpole-4x128-purejaxrl"))
    assert "failed" not in line and "PureJaxRL's ppo.py, one train call of 976 updates" in line


def test_bench_says_in_one_line_when_the_reference_folder_has_no_ppo_py(tmp_path):
    out = subprocess.run([sys.executable, BENCH, "--reference-dir", str(tmp_path)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [f"error: --reference-dir {tmp_path}: no ppo.py there (PureJaxRL's "
                                               "purejaxrl/ folder)"]


def test_a_failing_reference_is_reported_by_the_case_not_a_traceback(tmp_path):
    (tmp_path / "ppo.py").write_text("raise ImportError('No module named distrax')\n")
    out = subprocess.run([sys.executable, BENCH, "--reference-dir", str(tmp_path), "--cases", "cartpole-4x128-purejaxrl"],
                         capture_output=True, text=True, timeout=300)
    line = next(l for l in out.stdout.splitlines() if l.startswith("cartpole-4x128-purejaxrl"))
    assert "failed" in line and "distrax" in line
