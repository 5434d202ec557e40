"""Data parallelism on 8 simulated CPU devices, and bfloat16 precision.

The main pytest process has already imported jax with one CPU device, so every multi-device check runs this
file as a script in a subprocess with XLA_FLAGS=--xla_force_host_platform_device_count=8 (`scenario(name)`),
which prints one JSON line of results for the test to check.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEVICES = 8
XLA_FLAGS = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={DEVICES}".strip()  # + conftest's
TINY = dict(env="gymnax:CartPole-v1", num_envs=8, num_steps=16, hidden_dim=16, num_layers=1, log_interval=4)


def scenario(name: str, timeout: int = 240) -> dict:
    env = {**os.environ, "XLA_FLAGS": XLA_FLAGS, "PYTHONPATH": os.path.join(ROOT, "python"),
           "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, os.path.abspath(__file__), name], capture_output=True, text=True,
                         env=env, timeout=timeout, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------------
# Tests (main process)


def test_sharded_run_matches_single_device_and_keeps_env_data_on_its_device():
    r = scenario("equivalence")
    assert r["device_count"] == DEVICES
    # The env-state arrays are split over all 8 devices, one block of envs each; params are replicated.
    for leaf in r["env_leaves"]:
        assert leaf["devices"] == DEVICES and leaf["spec"] == "P('data',)", leaf
        assert leaf["shard_rows"] == [TINY["num_envs"] // DEVICES] * DEVICES, leaf
    assert r["obs_shards"] == DEVICES and r["params_spec"] == "P()"
    assert r["after_chunk_env_devices"] == DEVICES  # still split after a chunk: the next chunk reuses the program
    # Only gradients (and scalar statistics) cross devices: no all-gather, all-to-all or permute of env data.
    assert r["collectives"]["all-reduce"] > 0
    for op in ("all-gather", "all-to-all", "collective-permute", "reduce-scatter"):
        assert r["collectives"][op] == 0, r["collectives"]
    # Same seed, same global config, one full-batch minibatch per update: the rollout is identical (env keys
    # are split globally, then sharded; threefry is partitionable) and the gradient is the same full-batch
    # mean, so the parameters agree up to float summation order.
    assert r["full_batch_param_diff"] < 1e-5, r
    assert r["full_batch_metric_diff"] < 1e-4, r
    # With several minibatches the runs differ by design: each device shuffles only its own shard (row d of
    # the [D, T*N/D] view), so minibatch i holds other samples than minibatch i of the one-device global
    # shuffle, and Adam steps on different minibatch gradients. Everything before the first gradient step
    # (initial state, the first rollout) is identical; the parameters then drift apart by a few 1e-4 per
    # update (measured 7e-4 after 2 updates of 2 x 2 minibatches). Not run here: two more compiles.


def test_a_recurrent_policy_on_eight_devices_splits_its_carries_with_the_envs_and_matches_one_device():
    r = scenario("recurrent")
    # --recurrent gru: each env's policy state follows its env onto that env's device, before and after a chunk.
    for name in ("carry", "carry_after_chunk"):
        assert r[name]["spec"] == "P('data',)" and r[name]["shard_rows"] == [TINY["num_envs"] // DEVICES] * DEVICES, r
    # One full-batch minibatch of whole sequences per update: the same rollout and the same mean gradient as one
    # device, so the parameters agree up to float summation order; the cell itself trained.
    assert r["cell_moved"] > 1e-4, r
    assert r["full_batch_param_diff"] < 1e-5, r


def test_sharded_cartpole_learns():
    r = scenario("learn", timeout=400)
    assert r["device_count"] == DEVICES and r["params_float32"]
    # A random CartPole policy averages ~22.
    assert r["last_return"] > 100, r["returns"]


def test_two_seeds_on_eight_devices_replicate_seeds_split_envs_and_match_one_device():
    r = scenario("seeds")
    # --num-seeds 2: the seed axis is replicated and each seed's envs are split over the devices (specs/distributed.md).
    for leaf in r["env_leaves"]:
        assert leaf["spec"] == "P(None, 'data')" and leaf["devices"] == DEVICES, leaf
        assert leaf["shard_shape"][:2] == [2, TINY["num_envs"] // DEVICES], leaf
    assert r["params_spec"] == "P()" and r["params_seed_axis"] == 2
    assert r["full_batch_param_diff"] < 1e-5, r
    assert r["seeds_differ"]


def test_stage_state_is_split_only_where_the_stage_declares_envs():
    r = scenario("partition")
    # A replay buffer whose capacity equals num_envs, declared replicated: every device holds all of it, before
    # and after a chunk (the old rule, "leading axis == num_envs", split it).
    for name in ("replay", "replay_after_chunk", "count_table", "undeclared"):
        assert r[name]["shape"][0] == TINY["num_envs"], r[name]  # the coincidence under test
        assert r[name]["spec"] == "P()" and r[name]["shard_shape"] == r[name]["shape"], (name, r[name])
    # The leaf declared ENVS follows the envs.
    for name in ("per_env", "per_env_after_chunk"):
        assert r[name]["spec"] == "P('data',)" and r[name]["shard_shape"][0] == TINY["num_envs"] // DEVICES, r[name]
    assert r["replay_values_kept"]
    assert r["bad_declaration"].startswith("stage 'partition_probe' declares 'envs' for a leaf shaped (3,)")


@pytest.mark.skipif(os.environ.get("HEPHAESTUS_DREAMER_DEVICES_TEST") != "1",
                    reason="two dreamer chunks compiled, ~64 s on 2 cores, past CI's 15 minutes with the rest: "
                           "set HEPHAESTUS_DREAMER_DEVICES_TEST=1")
def test_the_dreamer_on_eight_devices_splits_envs_and_matches_one_device():
    r = scenario("dreamer")
    # The dreamer (issue 21) in the same one compiled chunk: env state split over the devices, its world model,
    # replay and actor-critic replicated, and the chunk's result that of one device.
    for leaf in r["env_leaves"]:
        assert leaf["devices"] == DEVICES and leaf["spec"].startswith("P('data'"), leaf
    assert r["replay_spec"] == "P()" and r["wm_params_spec"] == "P()", r
    assert r["updates_done"] == 2 and r["wm_loss_finite"]
    assert r["params_moved"] > 1e-4, r  # the actor-critic trained: a comparison of two untouched states proves nothing
    assert r["param_diff"] < 1e-5 and r["world_model_diff"] < 1e-5, r


@pytest.mark.skipif(os.environ.get("HEPHAESTUS_MULTIHOST_TEST") != "1",
                    reason="2 processes x 4 CPU devices, ~2 min on 2 cores: set HEPHAESTUS_MULTIHOST_TEST=1")
def test_two_processes_drive_one_mesh_and_match_one_device():
    import socket

    with socket.socket() as sock:
        sock.bind(("localhost", 0))
        port = str(sock.getsockname()[1])
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "python"), "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": XLA_FLAGS.replace(f"count={DEVICES}", f"count={DEVICES // 2}")}
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "multihost", str(pid), port],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
             for pid in (0, 1)]
    results = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=400)
        assert proc.returncode == 0, stderr[-3000:]
        results.append(json.loads(stdout.strip().splitlines()[-1]))
    for pid, r in enumerate(results):
        assert (r["process"], r["processes"], r["devices"], r["local_devices"]) == (pid, 2, DEVICES, DEVICES // 2)
    # Each host holds the env shards of its own devices and the same replicated parameters ...
    assert results[0]["params"] == results[1]["params"]
    # ... which equal a one-device run of the same global config (one full-batch minibatch per update).
    _, runner, _ = _train(_full_batch_config().replace(num_devices=1), 4)
    assert np.abs(np.asarray(results[0]["params"]) - _params_vector(runner)).max() < 1e-5
    assert results[0]["main"] and not results[1]["main"]


def test_indivisible_num_envs_is_a_one_line_error_before_compiling():
    env = {**os.environ, "XLA_FLAGS": XLA_FLAGS, "PYTHONPATH": os.path.join(ROOT, "python")}
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "train_purejaxrl.py"), "--env",
                          "gymnax:CartPole-v1", "--num-envs", "12", "--num-steps", "16", "--checkpoint-dir", "/tmp"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 2
    lines = [line for line in out.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert "--num-envs 12 must divide by the 8 devices (try 8 or 16" in lines[0]
    assert "compile:" not in out.stdout


def test_tpu_pod_detection():
    from hephaestus.core.distributed import tpu_pod_detected

    assert not tpu_pod_detected({})
    assert not tpu_pod_detected({"TPU_WORKER_HOSTNAMES": "t1v-n-0"})  # a single-host TPU VM
    assert tpu_pod_detected({"TPU_WORKER_HOSTNAMES": "t1v-n-0,t1v-n-1"})
    assert tpu_pod_detected({"MEGASCALE_COORDINATOR_ADDRESS": "10.0.0.2:8080"})


def test_bfloat16_learns_and_keeps_parameters_statistics_and_losses_float32_on_one_device():
    import jax
    import jax.numpy as jnp

    from hephaestus.config.train_config import TrainConfig, resolve
    from hephaestus.run.loop import run
    from hephaestus.core.ppo import make_train

    config, _ = resolve(TrainConfig.from_flat(env="gymnax:CartPole-v1", num_envs=4, num_steps=128, total_timesteps=40_000,
                                    hidden_dim=64, num_minibatches=4, update_epochs=4, log_interval=20,
                                    dtype="bfloat16"))
    with pytest.raises(ValueError, match="more devices than"):
        make_train(config.replace(num_devices=64))  # checked first, before anything is built
    trainer = make_train(config)
    assert trainer.mesh is None and not trainer.sharder.active  # one device: the single-device program
    # The matmuls really run in bfloat16 ...
    params = trainer.runner_state.train_state.params
    hlo = jax.jit(trainer.network.apply).lower(params, jnp.zeros((2, 4), jnp.float32)).as_text()
    assert "bf16" in hlo
    # ... while every stage output the update reads is float32.
    runner = trainer.runner_state
    stages = {s.name: s for s in trainer.pipeline}

    @jax.jit
    def batch_of(runner):
        ts, batch = runner.train_state, None
        metrics = {}
        for i, name in enumerate(("rollout", "advantage", "ppo_update")):
            ts, batch, _, m = stages[name].apply(jax.random.PRNGKey(i), ts, batch, runner.stages.get(name))
            metrics.update(m)
        return ts, batch, metrics

    ts, batch, metrics = batch_of(runner)
    for key in ("obs", "log_prob", "value", "reward", "bootstrap_value", "last_value", "advantage", "target"):
        assert batch[key].dtype == jnp.float32, key
    for name, value in metrics.items():
        assert value.dtype == jnp.float32, name
    for leaf in jax.tree.leaves((ts.params, ts.opt_state)):  # params, Adam moments, lr: float32
        assert leaf.dtype in (jnp.float32, jnp.int32), leaf.dtype

    result = run(trainer, message=lambda _: None)
    for leaf in jax.tree.leaves(result.runner_state.train_state.params):
        assert leaf.dtype == jnp.float32
    returns = [r["mean_episode_return"] for r in result.records]  # 4 records of 20 updates each
    # Random play averages ~22. The second half of the run, not its last record: PPO on CartPole can dip for a
    # chunk after learning (this run at another instruction order: 52, 168, 234, 81).
    assert np.mean(returns[len(returns) // 2:]) > 100, returns


# ---------------------------------------------------------------------------------------------------
# Scenarios (run in a subprocess with 8 CPU devices)


def _params_vector(runner):
    import jax

    return np.concatenate([np.ravel(x) for x in jax.tree.leaves(jax.device_get(runner.train_state.params))])


def _train(config, updates):
    import jax

    from hephaestus.core.ppo import make_train

    trainer = make_train(config)
    runner, metrics = trainer.train_chunk(trainer.runner_state, updates)
    return trainer, runner, jax.device_get(metrics)


def _full_batch_config():
    from hephaestus.config.train_config import TrainConfig, resolve

    return resolve(TrainConfig.from_flat(**TINY, total_timesteps=8 * 16 * 4, num_minibatches=1, update_epochs=1))[0]


def _multihost(pid: str, port: str) -> dict:
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(f"localhost:{port}", num_processes=2, process_id=int(pid))
    from hephaestus.core import distributed

    assert distributed.initialize(True)  # already initialised: reports a multi-process run, no second init
    trainer, runner, metrics = _train(_full_batch_config(), 4)
    env_leaf = jax.tree.leaves(runner.stages["rollout"].env_state)[0]
    assert len(env_leaf.addressable_shards) == DEVICES // 2 and len(env_leaf.sharding.device_set) == DEVICES
    params = np.concatenate([np.ravel(np.asarray(x.addressable_data(0)))
                             for x in jax.tree.leaves(runner.train_state.params)])
    return {"process": jax.process_index(), "processes": jax.process_count(), "devices": jax.device_count(),
            "local_devices": jax.local_device_count(), "params": params.tolist(),
            "main": distributed.is_main_process()}


def _equivalence() -> dict:
    import jax

    from hephaestus.core.ppo import make_train

    out = {"device_count": jax.device_count()}
    base = _full_batch_config()
    trainer = make_train(base.replace(num_devices=DEVICES))
    rollout = trainer.runner_state.stages["rollout"]
    out["env_leaves"] = [{"devices": len(x.sharding.device_set), "spec": str(x.sharding.spec),
                          "shard_rows": [s.data.shape[0] for s in x.addressable_shards]}
                         for x in jax.tree.leaves(rollout.env_state)]
    out["obs_shards"] = len(rollout.obs.addressable_shards)
    out["params_spec"] = str(jax.tree.leaves(trainer.runner_state.train_state.params)[0].sharding.spec)
    compiled = trainer.compiled_chunk.lower(trainer.runner_state, np.int32(4)).compile()
    text = compiled.as_text()
    out["collectives"] = {op: text.count(f" {op}(") + text.count(f" {op}-start(")
                          for op in ("all-reduce", "all-gather", "all-to-all", "collective-permute", "reduce-scatter")}

    runner8, m8 = compiled(trainer.runner_state, np.int32(4))
    m8 = jax.device_get(m8)
    out["after_chunk_env_devices"] = len(jax.tree.leaves(runner8.stages["rollout"].env_state)[0].sharding.device_set)
    _, runner1, m1 = _train(base.replace(num_devices=1), 4)
    out["full_batch_param_diff"] = float(np.abs(_params_vector(runner1) - _params_vector(runner8)).max())
    out["full_batch_metric_diff"] = max(float(np.abs(m1[k] - m8[k]).max() / max(1.0, np.abs(m1[k]).max()))
                                        for k in ("mean_episode_return", "pg_loss", "vf_loss", "entropy", "grad_norm"))

    return out


def _recurrent() -> dict:
    import jax

    from hephaestus.core.ppo import make_train

    def layout(x):
        return {"spec": str(x.sharding.spec), "shard_rows": [s.data.shape[0] for s in x.addressable_shards]}

    base = _full_batch_config().replace(recurrent="gru")
    trainer = make_train(base.replace(num_devices=DEVICES))
    out = {"carry": layout(jax.tree.leaves(trainer.runner_state.stages["rollout"].carry)[0])}
    cell_before = _cell_vector(trainer.runner_state)
    runner8, _ = trainer.train_chunk(trainer.runner_state, 4)
    out["carry_after_chunk"] = layout(jax.tree.leaves(runner8.stages["rollout"].carry)[0])
    out["cell_moved"] = float(np.abs(_cell_vector(runner8) - cell_before).max())
    _, runner1, _ = _train(base.replace(num_devices=1), 4)
    out["full_batch_param_diff"] = float(np.abs(_params_vector(runner1) - _params_vector(runner8)).max())
    return out


def _cell_vector(runner):
    import jax

    cells = [x for path, x in jax.tree_util.tree_leaves_with_path(jax.device_get(runner.train_state.params))
             if "cell" in jax.tree_util.keystr(path).lower()]
    assert cells, "no recurrent cell in the parameters"
    return np.concatenate([np.ravel(x) for x in cells])


def _seeds() -> dict:
    import jax

    from hephaestus.core.ppo import make_train

    base = _full_batch_config().replace(num_seeds=2)
    trainer = make_train(base.replace(num_devices=DEVICES))
    rollout = trainer.runner_state.stages["rollout"]
    params = jax.tree.leaves(trainer.runner_state.train_state.params)[0]
    out = {"env_leaves": [{"devices": len(x.sharding.device_set), "spec": str(x.sharding.spec),
                           "shard_shape": list(x.addressable_shards[0].data.shape)}
                          for x in jax.tree.leaves(rollout.env_state) if x.ndim > 1],
           "params_spec": str(params.sharding.spec), "params_seed_axis": params.shape[0]}
    runner8, _ = trainer.train_chunk(trainer.runner_state, 4)
    _, runner1, _ = _train(base.replace(num_devices=1), 4)
    p1, p8 = _params_vector(runner1), _params_vector(runner8)
    out["full_batch_param_diff"] = float(np.abs(p1 - p8).max())
    first = jax.device_get(jax.tree.leaves(runner8.train_state.params)[0])
    out["seeds_differ"] = bool(not np.allclose(first[0], first[1]))
    return out


def _partition() -> dict:
    import jax
    import jax.numpy as jnp

    from hephaestus.core.ppo import make_train
    from hephaestus.core.stages import ENVS, REPLICATED, Stage, register_stage

    n = TINY["num_envs"]

    @register_stage("partition_probe")
    def probe(ctx):
        def init(key):  # a "replay buffer" of capacity num_envs, a per-env counter, an undeclared [num_envs] leaf
            return {"replay": jnp.arange(n * 3, dtype=jnp.float32).reshape(n, 3), "per_env": jnp.zeros((n,)),
                    "undeclared": jnp.zeros((n,))}

        def apply(key, train_state, batch, state):
            state = {**state, "replay": state["replay"] + 1.0, "per_env": state["per_env"] + batch["reward"].sum(0)}
            return train_state, batch, state, {}

        return Stage("partition_probe", apply, init, partition={"replay": REPLICATED, "per_env": ENVS,
                                                                "undeclared": REPLICATED})

    @register_stage("partition_probe_undeclared")
    def undeclared(ctx):  # no partition given: replicated
        return Stage("partition_probe_undeclared", lambda k, ts, b, s: (ts, b, s, {}), lambda key: jnp.zeros((n,)))

    base = _full_batch_config().replace(num_devices=DEVICES, count_table_size=n)
    trainer = make_train(base.replace(extra_stages=("partition_probe", "partition_probe_undeclared", "count_bonus")))
    describe = lambda x: {"spec": str(x.sharding.spec), "shape": list(x.shape),
                          "shard_shape": list(x.addressable_shards[0].data.shape)}
    stages = trainer.runner_state.stages
    out = {"replay": describe(stages["partition_probe"]["replay"]),
           "per_env": describe(stages["partition_probe"]["per_env"]),
           "undeclared": describe(stages["partition_probe_undeclared"]),
           "count_table": describe(stages["count_bonus"])}
    runner, _ = trainer.train_chunk(trainer.runner_state, 2)
    out["replay_after_chunk"] = describe(runner.stages["partition_probe"]["replay"])
    out["per_env_after_chunk"] = describe(runner.stages["partition_probe"]["per_env"])
    replay = jax.device_get(runner.stages["partition_probe"]["replay"])
    out["replay_values_kept"] = bool((replay == np.arange(n * 3).reshape(n, 3) + 2.0).all())
    try:  # a leaf declared ENVS without a leading env axis is a clear error, not a silent layout
        from hephaestus.core.distributed import Sharder

        Sharder(trainer.mesh, n, TINY["num_steps"], partitions={"partition_probe": {"x": ENVS}}).place(
            trainer.runner_state.replace(stages={"partition_probe": {"x": jnp.zeros((3,))}}))
        out["bad_declaration"] = "no error"
    except ValueError as err:
        out["bad_declaration"] = str(err)
    return out


def _dreamer() -> dict:
    import jax

    from hephaestus.config.train_config import TrainConfig, resolve
    from hephaestus.core.ppo import make_train

    tiny = {**TINY, "agent": "dreamer", "dtc_seq_len": 8, "dtc_wm_batch": 4, "dtc_deter_dim": 16,
            "dtc_hidden_dim": 16, "dtc_stoch_groups": 2, "dtc_stoch_classes": 4, "dtc_replay_capacity": 64,
            "dreamer_starts": 4, "dreamer_horizon": 5, "log_interval": 2}
    base = resolve(TrainConfig.from_flat(**tiny, total_timesteps=8 * 16 * 2))[0]
    trainer = make_train(base.replace(num_devices=DEVICES))
    world = trainer.runner_state.stages["dreamer"].world
    out = {"replay_spec": str(jax.tree.leaves(world.replay)[0].sharding.spec),
           "wm_params_spec": str(jax.tree.leaves(world.params)[0].sharding.spec)}
    p0 = _params_vector(trainer.runner_state)  # read before the chunk, which donates the state
    runner8, m8 = trainer.train_chunk(trainer.runner_state, 2)
    m8 = jax.device_get(m8)
    out.update({"env_leaves": [{"devices": len(x.sharding.device_set), "spec": str(x.sharding.spec)}
                               for x in jax.tree.leaves(runner8.stages["rollout"].env_state)],
                "updates_done": int(jax.device_get(runner8.update_step)),
                "wm_loss_finite": bool(np.all(np.isfinite(m8["wm/reward_loss"])))})
    _, runner1, _ = _train(base.replace(num_devices=1), 2)
    vector = lambda tree: np.concatenate([np.ravel(x) for x in jax.tree.leaves(jax.device_get(tree))])
    out["params_moved"] = float(np.abs(_params_vector(runner8) - p0).max())
    out["param_diff"] = float(np.abs(_params_vector(runner1) - _params_vector(runner8)).max())
    out["world_model_diff"] = float(np.abs(vector(runner1.stages["dreamer"].world.params)
                                           - vector(runner8.stages["dreamer"].world.params)).max())
    return out


def _learn() -> dict:
    import jax
    import jax.numpy as jnp

    from hephaestus.config.train_config import TrainConfig, resolve
    from hephaestus.run.loop import run
    from hephaestus.core.ppo import make_train

    config, _ = resolve(TrainConfig.from_flat(env="gymnax:CartPole-v1", num_envs=8, num_steps=64, total_timesteps=40_000,
                                    hidden_dim=64, num_minibatches=4, update_epochs=4, log_interval=20))
    trainer = make_train(config)
    result = run(trainer, message=lambda _: None)
    returns = [r["mean_episode_return"] for r in result.records]
    params = jax.tree.leaves(result.runner_state.train_state.params)
    return {"device_count": jax.device_count(), "returns": returns, "first_return": returns[0],
            "last_return": returns[-1], "params_float32": all(p.dtype == jnp.float32 for p in params)}


if __name__ == "__main__":
    scenarios = {"equivalence": _equivalence, "learn": _learn, "multihost": _multihost, "seeds": _seeds,
                 "partition": _partition, "dreamer": _dreamer, "recurrent": _recurrent}
    print(json.dumps(scenarios[sys.argv[1]](*sys.argv[2:])))
