"""The episodic k-nearest-neighbour bonus (Never Give Up's episodic novelty, bonus.py `episodic_novelty`, --agent
episodic): the exact top-k against brute force, the stage against a plain-Python reference of the same rules
(per-env memories that empty at episode ends and keep their latest `capacity` entries), and the agent's run with
exact resume. Sizes are tiny (2-core CI)."""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hephaestus.agents.bonus.stages import make_episodic, nearest_sq_distances
from hephaestus.config.train_config import ConfigError, TrainConfig, resolve
from hephaestus.envs.adapters import EnvSpec
from train_cli import assert_same_params, main, resume_cut_back_copy


def test_nearest_neighbours_are_exact_and_ignore_empty_slots():
    rng = np.random.default_rng(0)
    n, capacity, dim, k = 5, 7, 3, 3
    memory = rng.normal(size=(n, capacity, dim)).astype(np.float32)
    query = rng.normal(size=(n, dim)).astype(np.float32)
    filled = np.array([0, 1, 2, 5, 7], np.int32)  # empty, fewer than k, k-1, more than k, full
    sq, valid = nearest_sq_distances(jnp.asarray(query), jnp.asarray(memory), jnp.asarray(filled), k)
    for i in range(n):
        brute = np.sort(((memory[i, :filled[i]] - query[i]) ** 2).sum(-1))[:k]
        assert int(np.sum(np.asarray(valid[i]))) == len(brute)
        np.testing.assert_allclose(np.asarray(sq[i])[:len(brute)], brute, rtol=1e-5, atol=1e-6)
        assert np.all(np.isinf(np.asarray(sq[i])[len(brute):]))


def reference_novelty(embedded, done, opts):
    """The stage's rules in plain Python (float64): each env's list of this episode's embeddings, the latest
    `capacity` of them searched by sorting."""
    steps, n, _ = embedded.shape
    memories = [[] for _ in range(n)]
    sq_mean = sq_count = 0.0
    out = np.zeros((steps, n))
    for t in range(steps):
        nearest = [sorted(float(((e - embedded[t, i]) ** 2).sum()) for e in memories[i][-opts.capacity:])[:opts.k]
                   for i in range(n)]
        seen = sum(len(d) for d in nearest)
        if seen:
            total = sq_count + seen
            sq_mean += (sum(map(sum, nearest)) / seen - sq_mean) * seen / total
            sq_count = total
        for i, d in enumerate(nearest):
            if d:
                kernel = sum(opts.kernel_epsilon / (max(x / sq_mean - opts.cluster_distance, 0.0) + opts.kernel_epsilon)
                             for x in d)
                similarity = math.sqrt(kernel) + opts.pseudo_count
                out[t, i] = 0.0 if similarity > opts.max_similarity else 1.0 / similarity
            memories[i].append(embedded[t, i])
            if done[t, i]:
                memories[i] = []
    return out


def test_the_stage_follows_the_rules_with_episode_ends_and_a_full_ring():
    config = TrainConfig.from_flat(num_envs=3, episodic_capacity=4, episodic_k=2, episodic_embed_dim=4)
    opts = config.stages.episodic
    init, update = make_episodic(config, EnvSpec(name="toy", obs_dim=5, discrete=True, action_dim=2))
    # Six distinct states visited at random, so that states come back within an episode; env 0's episode ends at
    # step 6, env 1's never (its memory wraps), env 2's at steps 2 and 9.
    rng = np.random.default_rng(1)
    states = rng.integers(0, 3, size=(6, 5)).astype(np.float32)
    next_obs = states[rng.integers(0, 6, size=(12, 3))]
    done = np.zeros((12, 3), bool)
    done[6, 0] = done[2, 2] = done[9, 2] = True
    state = init(jax.random.PRNGKey(0))
    state, novelty, metrics = jax.jit(update)(state, jnp.asarray(next_obs), jnp.asarray(done))
    embedded = np.sign(next_obs) * np.log1p(np.abs(next_obs)) @ np.asarray(state.projection, np.float64)
    expected = reference_novelty(embedded, done, opts)
    np.testing.assert_allclose(np.asarray(novelty), expected, rtol=1e-4, atol=1e-6)
    assert np.all(expected[0] == 0) and expected[3, 2] == 0  # nothing to compare with at an episode's start
    assert list(np.asarray(state.filled)) == [5, 12, 2]
    # A state still in this episode's memory (its kernel is 1: similarity >= 1) pays under 1; one that is not pays
    # more than 1.
    in_memory = [(t, i) for t in range(12) for i in range(3) if expected[t, i] > 0 and any(
        (next_obs[s, i] == next_obs[t, i]).all() for s in range(max(t - opts.capacity, 0), t) if not done[s:t, i].any())]
    others = [(t, i) for t in range(12) for i in range(3) if expected[t, i] > 0 and (t, i) not in in_memory]
    assert in_memory and others
    assert max(expected[x] for x in in_memory) < 1 < min(expected[x] for x in others)
    assert float(metrics["episodic/novelty_raw"]) == pytest.approx(float(np.mean(expected)), rel=1e-4)


def test_bad_episodic_settings_are_one_line_errors():
    with pytest.raises(ConfigError, match="--episodic-k 9 must be <= --episodic-capacity 8"):
        resolve(TrainConfig.from_flat(agent="episodic", episodic_k=9, episodic_capacity=8))
    with pytest.raises(ConfigError, match="--episodic-kernel-epsilon must be positive"):
        resolve(TrainConfig.from_flat(agent="episodic", episodic_kernel_epsilon=0.0))


@pytest.mark.heavy
def test_the_episodic_agent_trains_and_resumes_exactly(tmp_path, capsys):
    """Four updates saving at update 2, and a copy cut back to that checkpoint and resumed, end on bit-identical
    parameters: the memories, filled counts and running means come back with the checkpoint (a resumed run with
    empty memories would pay other bonuses and learn other parameters)."""
    tiny = ["--env", "gymnax:CartPole-v1", "--agent", "episodic", "--num-envs", "4", "--num-steps", "16",
            "--hidden-dim", "16", "--num-layers", "1", "--log-interval", "2", "--episodic-capacity", "8", "--episodic-k", "3", "--no-wandb",
            "--total-timesteps", str(4 * 64), "--save-interval", "2", "--checkpoint-dir", str(tmp_path)]
    straight, split = tmp_path / "straight", tmp_path / "split"
    assert main(*tiny, "--run-name", "straight") == 0
    assert resume_cut_back_copy(straight, split, 4) == 0
    assert "resume: update 2 of 4" in capsys.readouterr().out
    assert_same_params(straight / "final_params.npz", split / "final_params.npz")
    with open(straight / "metrics.jsonl") as f:
        last = [json.loads(line) for line in f if '"update"' in line][-1]
    assert last["episodic/novelty_raw"] > 0 and last["episodic/intrinsic_reward"] > 0
    assert 0 < last["episodic/memory_fill"] <= 1
