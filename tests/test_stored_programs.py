"""Stored programs (issue 18, stored_programs.py): a start whose chunk was exported before reads it back instead of
tracing it, runs the same numbers, and treats anything else (another setting, a damaged file) as a miss."""

import os

import jax
import numpy as np
import pytest

from hephaestus.core import stored_programs
from hephaestus.config.train_config import TrainConfig, resolve
from hephaestus.core.ppo import make_train

TINY = dict(env="gymnax:CartPole-v1", num_envs=4, num_steps=16, hidden_dim=16, num_layers=1, num_minibatches=2,
            update_epochs=1, log_interval=3)


def config(**changes):
    return resolve(TrainConfig.from_flat(**{**TINY, "total_timesteps": 640, **changes}))[0]


def run_chunks(trainer, chunks=2):
    executable = trainer.chunk_executable(trainer.runner_state, trainer.config.run.log_interval)
    runner, returns = trainer.runner_state, []
    for _ in range(chunks):
        runner, metrics = executable(runner, np.int32(trainer.config.run.log_interval))
        returns.append(np.asarray(metrics["mean_episode_return"]))
    return runner, np.concatenate(returns)


def test_a_second_start_reads_the_stored_chunk_without_tracing_and_computes_the_same(tmp_path, monkeypatch):
    first = make_train(config(seed=3), store_programs_in=str(tmp_path))
    _, first_returns = run_chunks(first)
    stored = sorted(os.listdir(tmp_path / "exported"))
    assert [name.split("-")[0] for name in stored] == ["chunk", "fresh"]

    # Another seed, run name and length: the same program, so the same stored chunk; nothing is exported again
    # and the env step is never traced (the reward-term probe runs only when the rollout is traced).
    def no_export(*args, **kwargs):
        raise AssertionError("a program was exported again")

    monkeypatch.setattr(stored_programs, "export_chunk", no_export)
    monkeypatch.setattr(stored_programs, "export_function", no_export)
    second = make_train(config(seed=5, run_name="another", total_timesteps=960), store_programs_in=str(tmp_path))
    runner, second_returns = run_chunks(second)
    assert "reward_terms" not in vars(second.context)
    assert sorted(os.listdir(tmp_path / "exported")) == stored

    # The numbers are those of the jitted chunk itself, for both seeds.
    plain = make_train(config(seed=5, run_name="another", total_timesteps=960))
    plain_runner, plain_returns = run_chunks(plain)
    np.testing.assert_array_equal(second_returns, plain_returns)
    for leaf, plain_leaf in zip(jax.tree.leaves(runner), jax.tree.leaves(plain_runner), strict=True):
        np.testing.assert_array_equal(np.asarray(leaf), np.asarray(plain_leaf))
    np.testing.assert_array_equal(first_returns, run_chunks(make_train(config(seed=3)))[1])


def test_the_key_holds_what_shapes_the_program_and_leaves_out_what_does_not():
    base = stored_programs.key_material(config())
    for same in (dict(seed=9), dict(run_name="x", checkpoint_dir="/elsewhere"), dict(total_timesteps=6400),
                 dict(final_eval_episodes=3)):
        assert stored_programs.key_material(config(**same)) == base, same
    for other in (dict(hidden_dim=32), dict(num_envs=8), dict(lr=1e-3), dict(agent="rnd"), dict(log_interval=2)):
        assert stored_programs.key_material(config(**other)) != base, other


@pytest.mark.parametrize("setting, values", [("jax_default_prng_impl", ("rbg", "unsafe_rbg")),
                                             ("jax_default_matmul_precision", ("highest",))])
def test_the_key_holds_the_jax_settings_that_change_a_trace_but_no_shape(setting, values):
    # rbg and unsafe_rbg keys are both [4] uint32, so a program stored under one fits the other's inputs and would
    # split keys the other way: only the key can tell them apart.
    keys = {stored_programs.ProgramStore("unused", stored_programs.key_material(config())).name}
    before = jax.config.values[setting]
    try:
        for value in values:
            jax.config.update(setting, value)
            keys.add(stored_programs.ProgramStore("unused", stored_programs.key_material(config())).name)
    finally:
        jax.config.update(setting, before)
    assert len(keys) == 1 + len(values)
    assert stored_programs.ProgramStore("unused", stored_programs.key_material(config())).name in keys


def test_a_damaged_or_foreign_stored_file_is_a_miss_and_is_replaced(tmp_path):
    trainer = make_train(config(), store_programs_in=str(tmp_path))
    store = trainer.programs
    os.makedirs(os.path.dirname(store.path), exist_ok=True)
    with open(store.path, "wb") as f:  # what a full disk leaves behind: a truncated file
        f.write(b"\x80\x04truncated")
    assert store.load() is None
    _, returns = run_chunks(trainer, chunks=1)  # exported again and stored over the damaged file
    assert store.load() is not None and np.all(np.isfinite(returns))

    other = make_train(config(hidden_dim=32), store_programs_in=str(tmp_path))
    os.replace(store.path, other.programs.path)  # a file whose contents were stored for another config
    assert other.programs.load() is None


@pytest.mark.parametrize("cache", ["on", "off"])
def test_the_training_script_stores_its_chunk_only_with_the_compilation_cache(tmp_path, cache):
    from unittest import mock

    import hephaestus.run.train as train
    from hephaestus.core.trainer import Trainer

    made = {}
    original = Trainer.__post_init__

    def record(self):
        made["programs"] = self.programs
        original(self)

    argv = ["--env", "gymnax:CartPole-v1", "--num-envs", "4", "--num-steps", "16", "--total-timesteps", "64",
            "--hidden-dim", "16", "--num-layers", "1", "--no-wandb", "--final-eval-episodes", "0",
            "--checkpoint-dir", str(tmp_path)]
    off = mock.patch("hephaestus.core.compilation_cache.enable_compilation_cache", return_value=None)
    with mock.patch.object(Trainer, "__post_init__", record), (off if cache == "off" else mock.MagicMock()):
        assert train.main(argv) == 0
    if cache == "off":
        assert made["programs"] is None
    else:  # beside the session's compilation cache (conftest.py)
        path = made["programs"].path
        assert path.startswith(os.environ["JAX_COMPILATION_CACHE_DIR"]) and os.path.isfile(path)


def test_the_store_keeps_only_the_newest_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(stored_programs, "KEEP", 2)
    trainers = [make_train(config(hidden_dim=h), store_programs_in=str(tmp_path)) for h in (8, 16, 32)]
    for i, trainer in enumerate(trainers):
        trainer.chunk_executable(trainer.runner_state, trainer.config.run.log_interval)
        os.utime(trainer.programs.path, (1000 + i, 1000 + i))  # written in this order, whatever the clock's grain
    kept = sorted(n for n in os.listdir(tmp_path / "exported") if n.startswith("chunk-"))
    assert kept == sorted(os.path.basename(t.programs.path) for t in trainers[1:])


def test_a_stored_fresh_state_has_the_traced_tree_and_values(tmp_path, monkeypatch):
    """The fresh-agent program read back: its state's tree holds this start's own optimizer and network (what
    no file holds) exactly where a trace puts them, and its values are the jitted program's, for stacked seeds."""
    make_train(config(num_seeds=2), store_programs_in=str(tmp_path))  # exports and stores both programs
    monkeypatch.setattr(stored_programs, "export_function", lambda *a, **k: pytest.fail("exported again"))
    stored = make_train(config(num_seeds=2, seed=7), store_programs_in=str(tmp_path))
    assert stored.stored_fresh(*stored.agent_inputs([7, 8])) is not None
    key, hyper = stored.agent_inputs([7, 8])
    traced = jax.eval_shape(stored.fresh_runner_state, key, hyper)
    assert jax.tree.structure(stored.runner_state) == jax.tree.structure(traced)
    assert stored.runner_state.train_state.tx is stored.optimizer
    plain = make_train(config(num_seeds=2, seed=7))
    for leaf, plain_leaf in zip(jax.tree.leaves(stored.runner_state), jax.tree.leaves(plain.runner_state), strict=True):
        np.testing.assert_array_equal(np.asarray(leaf), np.asarray(plain_leaf))


def test_an_evaluation_program_is_stored_and_read_back_with_the_same_episodes(tmp_path, monkeypatch):
    """The evaluation program (evaluation.Evaluator with a cache directory and a description of its agent): the
    first evaluation exports it, a later Evaluator of the same agent and shape reads it back without tracing and
    plays the same episodes as the plain jitted program; another batch size is another program."""
    from hephaestus.core.evaluation import Evaluator
    from hephaestus.core.export import network_meta

    trainer = make_train(config(num_seeds=2))
    params, key = trainer.runner_state.train_state.params, jax.random.split(jax.random.PRNGKey(4), 2)
    agent = {"env": "gymnax:CartPole-v1", "network": network_meta(trainer.env.spec, trainer.config)}

    def evaluate(**store):
        evaluator = Evaluator(trainer.eval_env, trainer.network, 6, 30, sampled=True, batch=3, num_seeds=2, **store)
        return evaluator(params, key)

    plain_metrics, plain_raw = evaluate()
    assert evaluate(cache_dir=str(tmp_path), agent=agent)[0] == plain_metrics  # exported, then run from the export
    stored = os.listdir(tmp_path / "exported")
    assert [name.split("-")[0] for name in stored] == ["eval"]
    exports = []
    real_export = stored_programs.export_function
    monkeypatch.setattr(stored_programs, "export_function", lambda *a: exports.append(1) or real_export(*a))
    metrics, raw = evaluate(cache_dir=str(tmp_path), agent=agent)
    assert metrics == plain_metrics and not exports
    for prefix in plain_raw:
        np.testing.assert_array_equal(raw[prefix]["return"], plain_raw[prefix]["return"])
    assert os.listdir(tmp_path / "exported") == stored
    Evaluator(trainer.eval_env, trainer.network, 6, 30, batch=2, num_seeds=2, cache_dir=str(tmp_path),
              agent=agent)(params, key)  # batch 2: another program, exported and stored beside the first
    assert exports == [1] and len(os.listdir(tmp_path / "exported")) == 2


def test_a_restored_state_lowers_to_the_fresh_shapes_program(tmp_path):
    """A resumed run's chunk is the program a fresh start compiles (one compilation-cache entry): on one device
    its arrays (which carry a one-device sharding) lower exactly as the fresh state's sharding-less shapes do."""
    trainer = make_train(config(), store_programs_in=str(tmp_path))
    runner = trainer.runner_state
    trainer.chunk_executable(runner, trainer.config.run.log_interval)
    stored = trainer.programs.load()
    assert all(leaf.sharding is not None for leaf in jax.tree.leaves(runner))
    texts = [stored._jitted.lower(stored_programs._leaf_specs(x), np.int32(3)).as_text()
             for x in (trainer.fresh_state_shapes(), runner)]
    assert texts[0] == texts[1]


def test_committed_and_host_inputs_run_one_compiled_evaluation(tmp_path):
    """A training run evaluates parameters that came out of its chunk (committed to their device); evaluate.py
    evaluates a file's numpy arrays. Lowered as they are, the two make different programs (the committed inputs'
    one-device sharding is written into it) and evaluate.py after a training run missed the run's compilation-cache
    entry; the stored program compiles both for the same sharding-less shapes: one executable, the same episodes."""
    from hephaestus.core.evaluation import Evaluator
    from hephaestus.core.export import network_meta

    trainer = make_train(config())
    params = trainer.runner_state.train_state.params
    committed = jax.device_put(params, jax.devices()[0])
    host = jax.tree.map(np.asarray, params)
    assert all(leaf.committed for leaf in jax.tree.leaves(committed))
    evaluator = Evaluator(trainer.eval_env, trainer.network, 4, 30, cache_dir=str(tmp_path),
                          agent={"env": "gymnax:CartPole-v1", "network": network_meta(trainer.env.spec, trainer.config)})
    key = jax.random.PRNGKey(2)
    first = evaluator(committed, key)[0]
    assert first == evaluator(host, key)[0]
    program, policy = evaluator.program, np.int32(0)
    assert isinstance(program, stored_programs.StoredFunction) and len(program._compiled) == 1
    assert program.lower(committed, key, policy).as_text() == program.lower(host, key, policy).as_text()
