"""--recurrent: the cell's state resets at episode starts and is carried otherwise, the PPO update replays exactly what
the rollout computed, a GRU learns bsuite's MemoryChain (which no memoryless policy can beat chance on), its
exported agent needs its state to do so, a GRU run resumes bit-identically, and what does not combine is a one-line
error.

MemoryChain at memory_length 2: the cue (one bit) is in view for the first two of three steps and the third step's
action is rewarded +1 if it names the cue, else -1. gymnax draws the cue at random, so a memoryless policy scores 0
in expectation whatever it learned; a policy that remembers scores 1.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hephaestus.core import networks as nets
from train_cli import assert_same_params, main, resume_cut_back_copy

pytestmark = pytest.mark.xdist_group("test_recurrent")  # one worker: the module's training run is made once

MEMORY = ["--env", "gymnax:MemoryChain-bsuite", "--env-params", "memory_length=2", "--recurrent", "gru",
          "--num-envs", "16", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "4", "--lr", "3e-3",
          "--ent-coef", "0.01", "--hidden-dim", "32", "--num-layers", "1", "--total-timesteps", str(60 * 256),
          "--log-interval", "20", "--save-interval", "20", "--final-eval-episodes", "0", "--no-wandb"]


@pytest.fixture(scope="module")
def memory_run(tmp_path_factory):
    """A GRU trained 60 updates (15k env steps) on MemoryChain, checkpoints at 20, 40 and 60."""
    base = tmp_path_factory.mktemp("memory")
    assert main(*MEMORY, "--run-name", "gru", "--checkpoint-dir", str(base)) == 0
    return base / "gru"


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_the_cell_resets_where_an_episode_starts_and_carries_its_state_otherwise(cell):
    spec = nets.NetworkSpec(obs_dim=3, action_dim=2, discrete=True, hidden_dim=8, num_layers=1, recurrent=cell)
    network = spec.build()
    params = nets.init_params(network, jax.random.PRNGKey(0), 3)
    carry = jax.random.normal(jax.random.PRNGKey(1), (4, nets.carry_dim(network)))
    obs = jax.random.normal(jax.random.PRNGKey(2), (4, 3))
    zeros = nets.initial_carry(network, (4,))
    first = jnp.array([True, False, True, False])
    stepped, (logits, _) = network.apply(params, carry, obs, first, method="step")
    from_zero, (logits_zero, _) = network.apply(params, zeros, obs, jnp.zeros(4, bool), method="step")
    stepped, logits, from_zero, logits_zero, first = map(np.asarray, (stepped, logits, from_zero, logits_zero, first))
    np.testing.assert_array_equal(stepped[first], from_zero[first])  # reset: as if the state were zeros
    np.testing.assert_array_equal(logits[first], logits_zero[first])
    assert np.all(np.abs(stepped[~first] - from_zero[~first]).max(axis=-1) > 1e-3)  # carried: it matters


@pytest.mark.parametrize("embed", [0, 6])
def test_the_update_replays_the_rollouts_log_probs_and_values_across_episode_ends(embed):
    """Two rollouts of 5 steps on 3-step episodes: the second starts mid-episode from a non-zero state, and both
    cross episode ends. The update's replay from the stored initial state with the stored resets gives back the
    rollout's log-probabilities and values, with the cell reading the observation or (--recurrent-embed) a Dense
    layer's output that the replay computes for the whole sequence outside the scan."""
    from hephaestus.config.train_config import TrainConfig, resolve
    from hephaestus.core.ppo import make_train, rollout_apply

    config, _ = resolve(TrainConfig.from_flat(env="gymnax:MemoryChain-bsuite", env_params=("memory_length=2",),
                                              recurrent="gru", recurrent_embed=embed, num_envs=4, num_steps=5,
                                              num_minibatches=2, hidden_dim=8, num_layers=1, total_timesteps=40))
    trainer = make_train(config)
    runner = trainer.runner_state
    params, ctx = runner.train_state.params, trainer.context
    cell_inputs = params["params"]["cell"]["ir"]["kernel"].shape[0]  # the GRU's input width
    assert cell_inputs == (embed or ctx.network.obs_dim)
    assert ("cell_embed" in params["params"]) == bool(embed)
    rollout = jax.jit(lambda key, rs: rollout_apply(ctx, key, runner.train_state, None, rs)[1:3])
    rs = runner.stages["rollout"]
    for key in jax.random.split(jax.random.PRNGKey(3), 2):
        batch, rs = rollout(key, rs)
        assert batch["first"][1:].any() and batch["carry0"].shape == (4, 8)
        log_prob, _, value = nets.evaluate_sequences(ctx.network, params, batch["carry0"], batch["obs"],
                                                     batch["first"], batch["action_mask"], batch["action"])
        np.testing.assert_allclose(log_prob, batch["log_prob"], atol=1e-5)
        np.testing.assert_allclose(value, batch["value"], atol=1e-5)
    assert np.abs(np.asarray(batch["carry0"])).max() > 0  # the second rollout started from a carried state


def test_the_network_description_carries_the_cell_and_its_input_layer():
    spec = nets.NetworkSpec(obs_dim=5, action_dim=2, discrete=True, hidden_dim=8, num_layers=1, recurrent="gru",
                            recurrent_embed=6)
    meta = spec.to_meta()
    assert meta["recurrent"] == "gru" and meta["recurrent_embed"] == 6
    assert nets.NetworkSpec.from_meta(meta) == spec
    plain = nets.NetworkSpec(obs_dim=5, action_dim=2, discrete=True, hidden_dim=8, num_layers=1, recurrent="gru")
    assert "recurrent_embed" not in plain.to_meta()  # files without the layer read back as before
    assert nets.NetworkSpec.from_meta(plain.to_meta()).recurrent_embed == 0


def play(agent, games: int, carry_state: bool) -> float:
    """Mean greedy return of `games` MemoryChain games played together through Agent.act; without `carry_state` the
    agent is handed a fresh state at every step (what a policy without memory sees)."""
    env = agent.env
    keys = jax.random.split(jax.random.PRNGKey(7), games)
    env_state, step = jax.vmap(env.reset)(keys)
    state, total, done = None, np.zeros(games), np.zeros(games, bool)
    for t in range(3):
        action, next_state = agent.act(step, state=state)
        state = next_state if carry_state else None
        env_state, step = jax.vmap(env.step)(jax.random.split(jax.random.PRNGKey(t), games), env_state, action)
        total += np.where(done, 0.0, np.asarray(step.reward))
        done |= np.asarray(step.terminated | step.truncated)
    assert done.all()
    return float(total.mean())


def test_a_gru_learns_memory_chain_and_its_exported_agent_needs_its_state(memory_run):
    import hephaestus

    agent = hephaestus.load_agent(memory_run / "final_params.npz", env_params={"memory_length": 2})
    assert agent.recurrent
    assert play(agent, 64, carry_state=True) > 0.9  # remembers the cue: near +1 every game
    assert abs(play(agent, 64, carry_state=False)) < 0.5  # forgets it: chance (0), as any memoryless policy
    with pytest.raises(ValueError, match="state shaped"):
        agent.act(np.zeros((2, 3), np.float32), state=np.zeros((3, 32), np.float32))


def test_a_gru_run_resumes_bit_identically(memory_run, tmp_path):
    assert resume_cut_back_copy(memory_run, tmp_path / "cut", 60) == 0
    assert_same_params(tmp_path / "cut" / "final_params.npz", memory_run / "final_params.npz")


@pytest.mark.parametrize("flags, needle", [
    (["--agent", "dreamer"], "--recurrent gru needs the PPO update"),
    (["--num-envs", "6", "--num-minibatches", "4", "--num-steps", "8"], "must divide by --num-minibatches"),
    (["--recurrent", "none", "--recurrent-embed", "64"], "--recurrent-embed 64 is the input layer of a recurrent cell"),
    (["--recurrent-embed", "-1"], "--recurrent-embed must be 0 (none) or a positive width"),
])
def test_what_does_not_combine_is_a_one_line_error(flags, needle, capsys):
    code = main("--env", "gymnax:CartPole-v1", "--recurrent", "gru", "--no-wandb", *flags)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(err) == 1 and needle in err[0], err


def test_a_bonus_stage_trains_beside_a_recurrent_policy(tmp_path):
    """--agent rnd --recurrent gru: the bonus stage scores the rollout the recurrent policy played, its reward reaches
    the update, and the exported agent carries its cell."""
    import json

    import hephaestus

    code = main("--env", "gymnax:CartPole-v1", "--agent", "rnd", "--recurrent", "gru", "--num-envs", "4",
                "--num-steps", "16", "--total-timesteps", "256", "--num-minibatches", "2", "--update-epochs", "1",
                "--hidden-dim", "16", "--num-layers", "1", "--final-eval-episodes", "0", "--no-wandb",
                "--run-name", "rnd-gru", "--checkpoint-dir", str(tmp_path))
    assert code == 0
    last = json.loads((tmp_path / "rnd-gru" / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["rnd/intrinsic_reward"] > 0 and 0 < last["rnd/intrinsic_share"] < 1, last
    agent = hephaestus.load_agent(tmp_path / "rnd-gru" / "final_params.npz")
    assert agent.recurrent
