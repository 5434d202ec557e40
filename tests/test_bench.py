"""scripts/bench.py's PureJaxRL case (--reference-dir): it runs a folder's own ppo.py in a fresh interpreter,
with stand-ins for wrappers.py's brax/navix imports, and reports its figures; a folder without ppo.py is one line
and exit 2. The public HackMatrix port's case (--port-dir) likewise, with its own trainer. Stand-ins for ppo.py and
the port keep the tests fast; the real comparisons are in specs/speed.md."""

import dataclasses
import os
import subprocess
import sys

from hephaestus.config.train_config import resolve
from hephaestus.core.networks import resolve_encoder
from hephaestus.config.files import load_config_file
from hephaestus.envs.registry import make_training_env

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


# What bench.py relies on in the public HackMatrix port (its python/ folder): hackmatrix.purejaxrl exports
# TrainConfig (num_envs, num_steps, total_timesteps; num_updates, batch_size, ...) and make_train(config) -> train(key);
# the package's __init__ imports the gymnasium bridge, as the port's does.
FAKE_PORT = {
    "hackmatrix/__init__.py": "from gymnasium import spaces\n",
    "hackmatrix/purejaxrl/train.py": '''
import dataclasses, jax.numpy as jnp

@dataclasses.dataclass
class TrainConfig:
    num_envs: int = 256
    num_steps: int = 128
    total_timesteps: int = 10_000_000
    num_minibatches: int = 4
    update_epochs: int = 4
    hidden_dim: int = 256
    num_layers: int = 2
    @property
    def num_updates(self):
        return self.total_timesteps // (self.num_envs * self.num_steps)
    @property
    def batch_size(self):
        return self.num_envs * self.num_steps

def make_train(config):
    def train(key):
        return jnp.zeros((config.num_updates, config.num_envs)) + key[0]
    return train
''',
    "hackmatrix/purejaxrl/__init__.py": "from .train import TrainConfig, make_train\n",
}


def write_fake_port(root, files=FAKE_PORT):
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_bench_runs_the_public_ports_own_trainer_as_a_case(tmp_path):
    write_fake_port(tmp_path)
    out = subprocess.run([sys.executable, BENCH, "--port-dir", str(tmp_path), "--cases", "hackmatrix-ppo-2048x128-port"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    line = next(l for l in out.stdout.splitlines() if l.startswith("hackmatrix-ppo-2048x128-port"))
    assert "failed" not in line
    assert "the public port's trainer, 1 updates per call, 4 mb x 4 ep, 2 x 256 shared torso" in line


def test_bench_says_in_one_line_when_the_port_folder_has_no_trainer(tmp_path):
    out = subprocess.run([sys.executable, BENCH, "--port-dir", str(tmp_path), "--cases", "hackmatrix-ppo-2048x128-port"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [f"error: --port-dir {tmp_path}: no hackmatrix/purejaxrl/train.py there "
                                               "(the port's python/ folder)"]


def test_a_failing_port_trainer_is_reported_by_the_case_not_a_traceback(tmp_path):
    write_fake_port(tmp_path, {**FAKE_PORT, "hackmatrix/purejaxrl/__init__.py": "raise ImportError('No module named distrax')\n"})
    out = subprocess.run([sys.executable, BENCH, "--port-dir", str(tmp_path), "--cases", "hackmatrix-ppo-2048x128-port"],
                         capture_output=True, text=True, timeout=300)
    line = next(l for l in out.stdout.splitlines() if l.startswith("hackmatrix-ppo-2048x128-port"))
    assert "failed" in line and "the port's trainer failed" in line and "distrax" in line


def load_bench(path=BENCH):
    """scripts/bench.py (or another script at `path`) as a module (scripts/ and benchmarks/ are run, not imported)."""
    from hephaestus.tools.entry_points import load_script

    return load_script(path)


def test_every_pipeline_case_builds_the_config_it_names():
    """Each bench case of our pipeline resolves to a valid config with the agent and settings its name promises: a
    misspelt option or an agent's stages lost would otherwise show only as a 'failed' line in a long benchmark."""
    bench = load_bench()
    cases = {name: kwargs for name, (fn, kwargs) in bench.CASES.items() if fn is bench.bench_hephaestus}
    configs = {name: bench.case_config(**kwargs) for name, kwargs in cases.items()}
    assert len(configs) >= 20
    prior = configs["deepsea20-16x32-dtc-prior"]
    assert prior.extra_stages[:2] == ("world_model", "intrinsic_reward")
    assert (prior.stages.dtc.prior_scale, prior.stages.dtc.replay_ratio, prior.stages.dtc.frontier_window) == (1.0, 4.0, 64)
    assert configs["deepsea20-16x32-dtc"].stages.dtc.prior_scale == 0.0
    assert "rnd" in configs["deepsea20-16x32-rnd"].extra_stages
    assert "count_bonus" in configs["deepsea20-16x32-count"].extra_stages
    assert configs["hackmatrix-512x128-episodic"].extra_stages == ("episodic_novelty",)
    assert configs["deepsea20-16x32"].extra_stages == ()
    narrow = configs["hackmatrix-ppo-2048x128-h128c8"]  # the narrower ego student of specs/hackmatrix.md
    assert (narrow.network.hidden_dim, narrow.network.cell_dim, narrow.network.encoder, narrow.ppo.teacher) == \
        (128, 8, "ego", "exit-rush-programs")
    default, bare = configs["hackmatrix-ppo-2048x128"], configs["hackmatrix-ppo-2048x128-ego-noteacher"]
    assert (default.ppo.teacher, bare.ppo.teacher) == ("exit-rush-collector", "none")  # the defaults less their teacher
    assert (bare.network.hidden_dim, bare.network.cell_dim) == (default.network.hidden_dim, default.network.cell_dim)
    # The training env without the late-start curriculum and with acquisitions paid 2 beside the default (what the
    # curriculum costs): that list, the rest the defaults.
    acquired2 = configs["hackmatrix-ppo-2048x128-acquired2"]
    assert acquired2.env.env_params == ("program_played_coef=10", "siphon_death_penalty=0", "program_played_at_clear=1",
                                        "undo_across_stages=0", "program_acquired_coef=2",
                                        "program_acquired_at_clear=1") != default.env.env_params
    assert dataclasses.replace(acquired2, env=default.env) == default
    port_size = configs["hackmatrix-ppo-2048x128-mlp256"]  # the port's network size, set against its trainer
    assert (port_size.network.encoder, port_size.network.hidden_dim, port_size.network.num_layers,
            port_size.ppo.teacher) == ("mlp", 256, 2, "none")
    hackmatrix = make_training_env(bare.env).spec  # both leave the encoder "auto": settled, it is the name's ego
    assert resolve_encoder(bare, hackmatrix) == resolve_encoder(default, hackmatrix) == "ego"
    agents = {name: (config.agent, config.env.num_envs, config.env.num_steps) for name, config in configs.items()
              if name.startswith(("hackmatrix-ppo-64x128", "hackmatrix-64x128"))}  # issue 21's cost on HackMatrix
    assert agents == {"hackmatrix-ppo-64x128": ("ppo", 64, 128), "hackmatrix-ppo-64x128-mlp": ("ppo", 64, 128),
                      "hackmatrix-64x128-dtc": ("dtc", 64, 128), "hackmatrix-64x128-dtc-r025": ("dtc", 64, 128),
                      "hackmatrix-64x128-rnd": ("rnd", 64, 128), "hackmatrix-64x128-dreamer": ("dreamer", 64, 128),
                      "hackmatrix-64x128-dreamer-dtc": ("dreamer-dtc", 64, 128)}
    like_dreamer = configs["hackmatrix-ppo-64x128-mlp"]  # PPO on the network the dreamers settle on HackMatrix
    dreamer = configs["hackmatrix-64x128-dreamer"]
    assert (like_dreamer.network.hidden_dim, like_dreamer.ppo.teacher) == (dreamer.network.hidden_dim, dreamer.ppo.teacher)
    assert resolve_encoder(like_dreamer, hackmatrix) == resolve_encoder(dreamer, hackmatrix) == "mlp"
    assert configs["hackmatrix-64x128-dtc-r025"].stages.dtc.replay_ratio == 0.25
    dreamer_2e7, ppo_512 = configs["hackmatrix-512x128-dreamer-2e7"], configs["hackmatrix-ppo-512x128"]
    shipped_2e7 = load_config_file(os.path.join(ROOT, "configs", "hackmatrix-dreamer-2e7.yaml"))
    assert dreamer_2e7.stages == resolve(shipped_2e7)[0].stages and dreamer_2e7.agent == "dreamer"
    assert (dreamer_2e7.batch_size, ppo_512.batch_size, ppo_512.agent) == (512 * 128, 512 * 128, "ppo")
    dtc_2e7 = configs["hackmatrix-512x128-dreamer-dtc-2e7"]  # the same with the ensemble's novelty in imagination
    assert (dtc_2e7.agent, dtc_2e7.stages.dtc.ensemble_size, dtc_2e7.stages.dreamer.novelty_coef) == ("dreamer-dtc", 5, 1.0)
    assert dataclasses.replace(dtc_2e7.stages.dtc, ensemble_size=1) == dreamer_2e7.stages.dtc
    for name, config in configs.items():  # the DeepSea cases share the experiment's PPO settings
        if name.startswith("deepsea"):
            assert (config.env.num_envs, config.env.num_steps, config.ppo.num_minibatches, config.ppo.update_epochs,
                    config.network.hidden_dim, config.ppo.anneal_lr) == (16, 32, 4, 4, 64, False), name


def test_world_model_case_times_the_stage_of_its_chunk_case():
    """The `-wm` case takes DTC's world_model stage out of its chunk case: same config, and on a tiny DeepSea it
    compiles and runs the stage with the gradient steps that config asks for."""
    import math

    bench = load_bench()
    fn, kwargs = bench.CASES["deepsea20-16x32-dtc-prior-wm"]
    assert fn is bench.bench_world_model_stage
    assert bench.case_config(**kwargs) == bench.case_config(**bench.CASES["deepsea20-16x32-dtc-prior"][1])
    tiny = dict(env_name="deepsea:6", num_envs=4, num_steps=8, updates_per_chunk=1,
                config_file="configs/deepsea-dtc.yaml", dtc_deter_dim=8, dtc_hidden_dim=8, dtc_ensemble_size=2,
                dtc_frontier_window=4, dtc_wm_batch=4, hidden_dim=8)
    config = bench.case_config(**tiny)
    result = bench.bench_world_model_stage(**tiny)
    steps = config.stages.dtc.wm_steps(config.batch_size)
    assert steps > 1
    assert f"({steps} gradient steps per update, " in result["detail"]
    assert math.isfinite(result["steps_per_s"]) and result["steps_per_s"] > 0 and result["compile_s"] > 0
    assert result["matmul_flops_per_step"] > 0


def test_matmul_flops_counts_every_product_a_program_runs():
    """The bench's load-independent work measure: 2 x output x contracted size per product, a scan's body once per
    step, a cond's branches each; elementwise work is not counted."""
    import jax
    import jax.numpy as jnp

    bench = load_bench()
    a, b = jnp.ones((2, 3)), jnp.ones((3, 4))

    def program(a, b):
        looped = jax.lax.scan(lambda c, _: (c, (a @ b) * 2.0), 0.0, None, length=5)[1]  # 5 x (2 x 2*4 x 3)
        chosen = jax.lax.cond(a[0, 0] > 0, lambda: jnp.einsum("ij,jk->ik", a, b), lambda: jnp.zeros((2, 4)))
        return looped, chosen, jnp.tanh(a)

    assert bench.matmul_flops(jax.make_jaxpr(program)(a, b)) == 6 * (2 * 2 * 4 * 3)


def test_network_cost_benchmark_times_the_network_hackmatrix_trains(capsys):
    """benchmarks/network_cost.py (the widths of specs/hackmatrix.md, "A narrower ego student") builds the ego
    actor-critic a HackMatrix run builds at each size: its parameter count is the one the encoder's layout implies
    (cell embedding, off-board embedding, two MLPs on the flat features plus the 11 x 11 window); bad sizes are one
    line and exit 2."""
    import pytest

    network_cost = load_bench(os.path.join(ROOT, "benchmarks", "network_cost.py"))
    network_cost.main(["--sizes", "16,4", "8,2", "--batch", "32", "--repeats", "1"])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("hidden")]
    assert len(lines) == 2

    def expected_params(hidden, cell, flat=33, channels=42, window=121, actions=28):
        mlp = lambda out: (flat + window * cell) * hidden + hidden + hidden * hidden + hidden + hidden * out + out
        return channels * cell + cell + cell + mlp(actions) + mlp(1)

    for line, (hidden, cell) in zip(lines, [(16, 4), (8, 2)]):
        assert f"{expected_params(hidden, cell):,d} parameters" in line, line
    with pytest.raises(SystemExit) as exit_info:
        network_cost.main(["--sizes", "128"])
    assert exit_info.value.code == 2 and "HIDDEN,CELL_DIM" in capsys.readouterr().err
