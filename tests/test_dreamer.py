"""The dreamer (DTC part 2, dtc/dreamer.py): lambda-returns, the stop-gradient wall between the actor-critic and the
world model, the stage list of --agent dreamer, its config checks, and exact resume. Sizes are tiny (2-core CI)."""

import functools
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from hephaestus.core import networks as nets
from hephaestus.config.train_config import ConfigError, TrainConfig, resolve
from hephaestus.agents.dtc import rssm
from hephaestus.agents.dreamer.dreamer import actor_critic_loss, dream, imagine_from_replay, lambda_returns
from hephaestus.agents.dreamer.options import DreamerOptions
from hephaestus.core.stages import Stage, build_pipeline
from train_cli import assert_same_params, main, resume_cut_back_copy

# One worker runs this module, so the parts fixture and the program two tests share are built once (tests/conftest.py).
pytestmark = pytest.mark.xdist_group("test_dreamer")

optax_norm = optax.tree.norm

SIZES = rssm.RSSMSizes(obs_dim=3, action_dim=2, discrete=True, deter=16, groups=4, classes=4, hidden=32)
HYPER = {"gamma": jnp.float32(0.9), "gae_lambda": jnp.float32(0.8), "vf_coef": jnp.float32(0.5)}
TINY = ["--env", "gymnax:CartPole-v1", "--agent", "dreamer", "--num-envs", "4", "--num-steps", "16",
        "--hidden-dim", "16", "--num-layers", "1", "--log-interval", "2", "--dtc-seq-len", "8", "--dtc-wm-batch", "4",
        "--dtc-deter-dim", "16", "--dtc-hidden-dim", "16", "--dtc-stoch-groups", "2", "--dtc-stoch-classes", "4",
        "--dtc-replay-capacity", "64", "--dreamer-starts", "4", "--dreamer-horizon", "5", "--no-wandb"]


@pytest.fixture(scope="module")
def parts():
    model = rssm.RSSM(SIZES)
    wm_params = rssm.init_ensemble(model, jax.random.PRNGKey(0), 2)
    network = nets.ActorCritic(action_dim=2, discrete=True, hidden_dim=16, num_layers=1)
    ac_params = network.init(jax.random.PRNGKey(1), jnp.zeros((1, 3)))
    length, batch = 6, 3
    seq = {"obs": jax.random.normal(jax.random.PRNGKey(2), (length, batch, 3)),
           "action": jax.random.randint(jax.random.PRNGKey(3), (length, batch), 0, 2),
           "first": jnp.zeros((length, batch), bool).at[0].set(True)}
    return model, wm_params, network, ac_params, seq


def test_lambda_returns_follow_the_recursion():
    rng = np.random.default_rng(0)
    h, s, gamma, lam = 5, 3, 0.9, 0.7
    reward, cont, next_value = rng.normal(size=(h, s)), rng.uniform(size=(h, s)), rng.normal(size=(h, s))
    expected = np.zeros((h, s))
    tail = next_value[-1]
    for t in reversed(range(h)):
        tail = reward[t] + gamma * cont[t] * ((1 - lam) * next_value[t] + lam * tail)
        expected[t] = tail
    got = lambda_returns(jnp.asarray(reward, jnp.float32), jnp.asarray(cont, jnp.float32),
                         jnp.asarray(next_value, jnp.float32), gamma, lam)
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-5, atol=1e-5)


def test_dreams_need_no_observation_and_all_members_take_the_same_actions(parts):
    model, wm_params, network, ac_params, seq = parts
    traj, final_obs = imagine_from_replay(model, network, wm_params, ac_params, seq, jax.random.PRNGKey(4), 7, True)
    starts = seq["obs"].shape[0] * seq["obs"].shape[1]
    assert traj["obs"].shape == (7, starts, 3) and traj["action"].shape == (7, starts) and final_obs.shape == (starts, 3)
    assert bool(jnp.all((traj["cont"] > 0) & (traj["cont"] < 1)))
    assert float(jnp.mean(traj["novelty"])) > 0  # two members with different weights disagree
    late, _ = imagine_from_replay(model, network, wm_params, ac_params, seq, jax.random.PRNGKey(4), 2, False, burn_in=2)
    assert late["obs"].shape[1] == (seq["obs"].shape[0] - 2) * seq["obs"].shape[1]  # no dreams from the first 2 steps
    # A one-member dream of the same starts asks for no disagreement and gets none.
    one = jax.tree.map(lambda x: x[:1], wm_params)
    h = jnp.zeros((1, 4, SIZES.deter))
    z = jax.nn.one_hot(jnp.zeros((1, 4, SIZES.groups), int), SIZES.classes).reshape(1, 4, -1)
    traj1, _ = dream(model, one, network, ac_params, h, z, jax.random.PRNGKey(5), 3, False)
    assert float(jnp.max(jnp.abs(traj1["novelty"]))) == 0.0


@pytest.mark.parametrize("symlog_critic", [False, True])
def test_the_actor_critic_loss_sends_no_gradient_into_the_world_model(parts, symlog_critic):
    model, wm_params, network, ac_params, seq = parts
    opts = DreamerOptions(entropy=1e-2, advantage_norm="batch", symlog_critic=symlog_critic)

    def loss(ac, wm):
        traj, final_obs = imagine_from_replay(model, network, wm, ac, seq, jax.random.PRNGKey(6), 5, False)
        return actor_critic_loss(network, ac, ac, traj, final_obs, traj["reward"], jnp.float32(0.0), HYPER, opts)[0]

    grad_ac, grad_wm = jax.grad(loss, argnums=(0, 1))(ac_params, wm_params)
    assert all(float(jnp.max(jnp.abs(g))) == 0.0 for g in jax.tree.leaves(grad_wm))
    actor_grads = jax.tree.leaves(grad_ac["params"]["actor"])
    critic_grads = jax.tree.leaves(grad_ac["params"]["critic"])
    assert max(float(jnp.max(jnp.abs(g))) for g in actor_grads) > 0
    assert max(float(jnp.max(jnp.abs(g))) for g in critic_grads) > 0


def _with_mask_bias(params, bias):
    """Member params whose mask head says `bias` (logits) whatever the state: last layer's kernel 0."""
    head = params["params"]["mask_head"]
    last = sorted(head)[-1]
    fixed = {**head, last: {"kernel": jnp.zeros_like(head[last]["kernel"]),
                            "bias": jnp.broadcast_to(jnp.asarray(bias, jnp.float32), head[last]["bias"].shape)}}
    return {"params": {**params["params"], "mask_head": fixed}}


def test_the_mask_head_learns_the_env_mask_and_dreams_obey_it(parts):
    """Envs with action masks (HackMatrix): the world model's mask head is trained on each observation's mask, and
    an imagined state's actions come from what the head allows there."""
    _, _, network, ac_params, seq = parts
    sizes = rssm.RSSMSizes(**{**SIZES.__dict__, "mask_dim": 2})
    model = rssm.RSSM(sizes)
    wm_params = rssm.init_ensemble(model, jax.random.PRNGKey(0), 2)
    only_1 = jnp.broadcast_to(jnp.array([False, True]), seq["obs"].shape[:2] + (2,))
    full = {**seq, "action_mask": only_1, "reward": jnp.zeros(seq["obs"].shape[:2]),
            "terminated": jnp.zeros(seq["obs"].shape[:2], bool)}
    one = lambda p: jax.tree.map(lambda x: x[0], p)
    loss = lambda p: rssm.member_loss(model, p, full, jax.random.PRNGKey(1))[1]["wm/mask_loss"]
    right, wrong = _with_mask_bias(one(wm_params), [-20.0, 20.0]), _with_mask_bias(one(wm_params), [20.0, -20.0])
    assert float(loss(right)) < 1e-3 < 10.0 < float(loss(wrong))
    grad = jax.grad(lambda p: rssm.member_loss(model, p, full, jax.random.PRNGKey(1))[0])(one(wm_params))
    assert float(optax_norm(grad["params"]["mask_head"])) > 0
    # Dreams: with a head that allows only action 1, every imagined action is 1 (the actor alone picks both).
    stacked = jax.tree.map(lambda a, b: jnp.stack([a, b]), right, right)
    traj, _ = imagine_from_replay(model, network, stacked, ac_params, seq, jax.random.PRNGKey(4), 6, False)
    assert bool(jnp.all(traj["action"] == 1)) and bool(jnp.all(traj["mask"] == jnp.array([False, True])))
    plain = rssm.RSSM(SIZES)
    free, _ = imagine_from_replay(plain, network, rssm.init_ensemble(plain, jax.random.PRNGKey(0), 2), ac_params, seq,
                                  jax.random.PRNGKey(4), 6, False)
    assert bool(jnp.any(free["action"] == 0)) and bool(jnp.all(free["mask"]))  # no mask head: all allowed


def _shift_value(params, by):
    """The critic's output moved by a constant `by` (its last bias)."""
    critic = params["params"]["critic"]
    last = sorted(critic)[-1]
    moved = {**critic, last: {**critic[last], "bias": critic[last]["bias"] + by}}
    return {"params": {**params["params"], "critic": moved}}


@pytest.mark.parametrize("bootstrap", ["critic", "slow"])
def test_lambda_returns_bootstrap_from_the_critic_or_its_slow_copy(parts, bootstrap):
    model, wm_params, network, ac_params, seq = parts
    traj, final_obs = imagine_from_replay(model, network, wm_params, ac_params, seq, jax.random.PRNGKey(6), 5, False)
    slow = _shift_value(ac_params, 3.0)  # a slow critic that differs from the critic
    opts = DreamerOptions(bootstrap=bootstrap, entropy=3e-4, advantage_norm="batch")
    _, (_, returns) = actor_critic_loss(network, ac_params, slow, traj, final_obs, traj["reward"], jnp.float32(0.0),
                                        HYPER, opts)
    source = ac_params if bootstrap == "critic" else slow
    values = network.apply(source, jnp.concatenate([traj["obs"], final_obs[None]]), method="value")
    expected = lambda_returns(traj["reward"], traj["cont"], values[1:], HYPER["gamma"], HYPER["gae_lambda"])
    np.testing.assert_allclose(np.asarray(returns), np.asarray(expected), rtol=1e-5, atol=1e-5)


def test_batch_advantage_normalisation_ignores_a_constant_offset_of_the_critic(parts):
    """--dreamer-advantage-norm batch centres the advantages: a critic that is off by a constant everywhere (as a
    lagging critic is) moves the actor's gradient not at all; divided by the return range, it does."""
    model, wm_params, network, ac_params, seq = parts
    traj, final_obs = imagine_from_replay(model, network, wm_params, ac_params, seq, jax.random.PRNGKey(6), 5, False)

    def actor_grad(params, norm):
        opts = DreamerOptions(bootstrap="slow", advantage_norm=norm, entropy=0.0)  # the slow copy fixes the returns
        grad = jax.grad(lambda p: actor_critic_loss(network, p, ac_params, traj, final_obs, traj["reward"],
                                                    jnp.float32(0.0), HYPER, opts)[0])(params)
        return jnp.concatenate([g.ravel() for g in jax.tree.leaves(grad["params"]["actor"])])

    for norm, same in (("batch", True), ("range", False)):
        base, shifted = actor_grad(ac_params, norm), actor_grad(_shift_value(ac_params, 5.0), norm)
        assert float(jnp.max(jnp.abs(base))) > 0
        assert np.allclose(np.asarray(base), np.asarray(shifted), rtol=1e-4, atol=1e-6) == same, norm


def test_agent_dreamer_replaces_advantage_and_the_ppo_update():
    config, _ = resolve(TrainConfig().replace(env="gymnax:CartPole-v1", agent="dreamer"))
    assert config.extra_stages == ("dreamer",) and config.stages.dtc.ensemble_size == 1
    both, _ = resolve(TrainConfig().replace(env="gymnax:CartPole-v1", agent="dreamer-dtc"))
    assert both.stages.dreamer.novelty_coef > 0 and both.stages.dtc.ensemble_size >= 2
    with pytest.raises(ConfigError, match="--dtc-ensemble-size >= 2"):
        resolve(TrainConfig().replace(env="gymnax:CartPole-v1", extra_stages=("dreamer",), dtc_ensemble_size=1,
                                      dreamer_novelty_coef=0.5))
    with pytest.raises(ConfigError, match="--dreamer-burn-in must be in"):
        resolve(TrainConfig().replace(env="gymnax:CartPole-v1", agent="dreamer", dreamer_burn_in=16, dtc_seq_len=16))
    with pytest.raises(ConfigError, match="--dreamer-horizon must be positive"):
        resolve(TrainConfig().replace(env="gymnax:CartPole-v1", agent="dreamer", dreamer_horizon=0))
    noop = lambda *a, **k: None
    core = {name: Stage(name, noop) for name in ("rollout", "advantage", "ppo_update")}
    dreamer = Stage("dreamer", noop, replaces=("advantage", "ppo_update"))
    assert [s.name for s in build_pipeline(core, [dreamer])] == ["rollout", "dreamer"]
    with pytest.raises(ValueError, match="which stage 'dreamer' replaces"):
        build_pipeline(core, [dreamer, Stage("late", noop, after="ppo_update")])
    with pytest.raises(ValueError, match="cannot replace 'rollout'"):
        build_pipeline(core, [Stage("bad", noop, replaces=("rollout",))])


@pytest.mark.heavy
def test_dreamer_trains_and_resumes_exactly(tmp_path, capsys):
    """A run of four updates saving at update 2, and a copy of it cut back to that checkpoint and resumed, end on
    bit-identical parameters; the run trains both the actor-critic and the world model."""
    straight, split = tmp_path / "straight", tmp_path / "split"
    assert main(*TINY, "--total-timesteps", str(4 * 64), "--save-interval", "2", "--run-name", "straight",
                "--checkpoint-dir", str(tmp_path)) == 0
    out = capsys.readouterr().out
    assert "ent " in out and " kl " not in out  # the console shows the dreamer's entropy, no PPO ratio
    assert resume_cut_back_copy(straight, split, 4) == 0
    assert "resume: update 2 of 4" in capsys.readouterr().out
    assert assert_same_params(straight / "final_params.npz", split / "final_params.npz")["update"] == 4
    with open(straight / "metrics.jsonl") as f:
        records = [json.loads(line) for line in f if '"update"' in line]
    last = records[-1]
    assert last["grad_norm"] > 0 and last["wm/grad_norm"] > 0 and last["dreamer/ac_steps"] >= 1
    assert {"pg_loss", "vf_loss", "entropy", "wm/loss", "dreamer/imagined_return"} <= set(last)


@functools.lru_cache(maxsize=None)  # pure functions and arrays: the two tests on the default program share it
def dreamer_dtc_update(**overrides):
    """A tiny dreamer-dtc stage (one world-model and one actor-critic step per update) on a fake rollout: returns
    (update(state) -> (train_state, new_state, metrics), the initial stage state, the initial train state)."""
    from hephaestus.agents.dreamer.dreamer import make_dreamer
    from hephaestus.envs.registry import make_env
    from hephaestus.core.runner_state import fresh_agent, make_optimizer

    flags = dict(env="gymnax:CartPole-v1", agent="dreamer-dtc", num_envs=2, num_steps=8, dtc_seq_len=8,
                 dtc_wm_batch=2, dtc_ensemble_size=2, dtc_deter_dim=8, dtc_hidden_dim=8, dtc_stoch_groups=2,
                 dtc_stoch_classes=2, dtc_replay_capacity=8, dreamer_starts=2, dreamer_horizon=3, hidden_dim=8,
                 num_layers=1)
    config, _ = resolve(TrainConfig().replace(**{**flags, **overrides}))
    spec = make_env(config.env.name).spec
    network = nets.make_network(spec, config)
    init, apply = make_dreamer(config, spec, network)
    hyper = {k: jnp.float32(v) for k, v in {**HYPER, "lr": 1e-3, "max_grad_norm": 1.0}.items()}
    runner = fresh_agent(network, make_optimizer(config), [], spec.obs_dim, jax.random.PRNGKey(0), hyper)
    t, n = 8, 2
    obs = jax.random.normal(jax.random.PRNGKey(1), (t, n, spec.obs_dim))
    batch = {"obs": obs, "next_obs": jnp.roll(obs, -1, 0), "action": jnp.zeros((t, n), jnp.int32),
             "reward": jnp.ones((t, n)), "terminated": jnp.zeros((t, n), bool).at[-1].set(True),
             "truncated": jnp.zeros((t, n), bool)}
    jitted = jax.jit(apply)

    def update(state):
        train_state, _, new_state, metrics = jitted(jax.random.PRNGKey(3), runner.train_state, batch, state, hyper)
        return train_state, new_state, metrics

    return update, init(jax.random.PRNGKey(2)), runner.train_state


def test_dreamer_dtc_adds_the_members_disagreement_to_the_imagined_reward():
    """One update of the dreamer-dtc stage on a fake rollout: the imagined reward holds a positive novelty bonus
    (members disagree), competence is tracked, and both the actor-critic and the world model learn."""
    update, state, first_train_state = dreamer_dtc_update()
    train_state, new_state, metrics = update(state)
    assert float(metrics["dtc/novelty_raw"]) > 0 and float(metrics["dtc/intrinsic_reward"]) > 0
    assert float(new_state.intrinsic.updates) == metrics["dreamer/ac_steps"]  # one competence step per AC step
    moved = lambda a, b: any(bool(jnp.any(x != y)) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))
    assert moved(train_state.params, first_train_state.params) and moved(new_state.world.params, state.world.params)
    assert bool(new_state.slow_ready) and not bool(state.slow_ready)


def test_the_survival_penalty_charges_each_imagined_step_its_predicted_chance_of_ending():
    """--dreamer-survival-penalty p: the same dreams (same keys and state), each imagined reward lower by exactly
    p x (1 - the continuation head's probability)."""
    update, state, _ = dreamer_dtc_update()
    penalised, _, _ = dreamer_dtc_update(dreamer_survival_penalty=2.0)
    (_, _, plain), (_, _, charged) = update(state), penalised(state)
    assert float(plain["dreamer/imagined_cont"]) == float(charged["dreamer/imagined_cont"]) < 1.0
    expected = float(plain["dreamer/imagined_reward"]) - 2.0 * (1.0 - float(plain["dreamer/imagined_cont"]))
    assert float(charged["dreamer/imagined_reward"]) == pytest.approx(expected, rel=1e-5, abs=1e-6)
    with pytest.raises(ConfigError, match="--dreamer-survival-penalty must be >= 0"):
        resolve(TrainConfig().replace(env="gymnax:CartPole-v1", agent="dreamer", dreamer_survival_penalty=-1.0))


@pytest.mark.parametrize("actor_input", ["obs", "state"])
def test_the_replay_value_loss_reaches_the_critic_in_the_stage(actor_input):
    """--dreamer-replay-value 0.3 in the stage, with the actor-critic on observations or on the model state: the
    critic's loss holds the replay term (over the replayed real steps, the terminated one's target its reward)."""
    update, state, first_train_state = dreamer_dtc_update(dreamer_replay_value=0.3, dreamer_actor_input=actor_input)
    train_state, _, metrics = update(state)
    loss = float(metrics["dreamer/replay_value_loss"])
    assert np.isfinite(loss) and loss > 0 and np.isfinite(float(metrics["dreamer/replay_return"]))
    assert float(metrics["vf_loss"]) >= 0.3 * loss
    moved = lambda a, b: any(bool(jnp.any(x != y)) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))
    assert moved(train_state.params["params"]["critic"], first_train_state.params["params"]["critic"])


def test_boredom_picks_the_dream_length_among_compiled_ones():
    """--dreamer-horizons: the longest compiled length not above the boredom-driven horizon; a bored agent's step
    is exactly the fixed-length step at the shortest length, a fresh one's dreams the longest."""
    from hephaestus.agents.dreamer.dreamer import horizon_index

    lengths = (8, 16, 32, 64)
    assert [int(horizon_index(jnp.float32(b), lengths, 8, 64)) for b in (0.0, 0.5, 0.9, 1.0)] == [3, 2, 0, 0]
    assert int(horizon_index(jnp.float32(1.0), (16, 32), 8, 64)) == 0  # none short enough: the shortest
    switch, state, _ = dreamer_dtc_update(dreamer_horizons=(3, 6), dtc_min_horizon=3, dtc_max_horizon=6)
    fixed, _, _ = dreamer_dtc_update()  # dreamer_horizon 3: the program of the test above
    bored = state.replace(intrinsic=state.intrinsic.replace(boredom=jnp.float32(1.0)))
    (ts_switch, _, m_switch), (ts_fixed, _, m_fixed) = switch(bored), fixed(bored)
    assert float(m_switch["dreamer/horizon"]) == 3.0 == float(m_fixed["dreamer/horizon"])
    for a, b in zip(jax.tree.leaves(ts_switch.params), jax.tree.leaves(ts_fixed.params)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    ts_fresh, _, m_fresh = switch(state)  # boredom 0: the longest
    assert float(m_fresh["dreamer/horizon"]) == 6.0
    assert not np.allclose(jax.tree.leaves(ts_fresh.params)[0], jax.tree.leaves(ts_fixed.params)[0])
    with pytest.raises(ConfigError, match="--dreamer-horizons are chosen by boredom"):
        resolve(TrainConfig().replace(env="gymnax:CartPole-v1", agent="dreamer", dreamer_horizons=(8, 16)))
    # vmapped seeds (--num-seeds) each pick a length, and a switch with a batched index runs every branch: said
    seeds = TrainConfig().replace(env="gymnax:CartPole-v1", agent="dreamer-dtc", dreamer_horizons=(8, 16, 32, 64))
    assert "every dream runs all 4 lengths (8+16+32+64 = 120 steps)" in resolve(seeds.replace(num_seeds=3))[1]
    assert "dreamer-horizons" not in resolve(seeds)[1]


@pytest.mark.heavy
@pytest.mark.skipif(os.environ.get("HEPHAESTUS_EXPERIMENT_QUICK_TESTS") != "1",
                    reason="a dreamer HackMatrix study's --quick run, 30-50 s on 2 cores, past CI's 15 minutes with "
                           "the rest: set HEPHAESTUS_EXPERIMENT_QUICK_TESTS=1")
def test_dreamer_hackmatrix_probe_quick_reads_every_replayed_transition(tmp_path):
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "experiments",
                          "dreamer_hackmatrix_probe.py")
    proc = subprocess.run([sys.executable, script, "--quick", "--out", str(tmp_path / "p"), "--",
                           "--dtc-logvar-init", "-2", "--dtc-encoder", "ego"], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads((tmp_path / "p.json").read_text())
    assert data["world_model"]["logvar_init"] == -2.0  # flags after -- reach the trained config
    assert data["world_model"]["encoder"] == "ego"  # and the board-around-the-player encoder trains in the pipeline
    # 2 updates of 8 envs x 16 steps, cut into sequences of 16: 16 sequences, 256 transitions, each scored once
    assert data["updates"] == 2 and data["replay"]["sequences"] == 16
    heads = data["reward_head"]
    assert sum(heads[k]["n"] for k in ("positive", "negative", "near zero") if k in heads) == 256
    assert data["reward_head_on_large_rewards"]["n"] <= heads.get("positive", {"n": 0})["n"]  # a subset of them
    mask = data["mask_head"]
    assert 0 < mask["allowed_share_real"] < 0.5  # HackMatrix allows a few of its 28 actions in any state
    assert 0 <= mask["right"] <= 1 and 0 <= data["actor_real_vs_decoded"]["argmax_agreement"] <= 1
    assert set(data["linear_probe_reward_corr"]) == {"obs_and_action", "world_model_features"}
    bad = subprocess.run([sys.executable, script, "--quick", "--", "--dtc-stoch-groups", "0"], capture_output=True,
                         text=True, timeout=300, cwd=tmp_path)
    assert bad.returncode != 0 and "stoch" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.heavy
@pytest.mark.skipif(os.environ.get("HEPHAESTUS_EXPERIMENT_QUICK_TESTS") != "1",
                    reason="a dreamer HackMatrix study's --quick run, 30-50 s on 2 cores, past CI's 15 minutes with "
                           "the rest: set HEPHAESTUS_EXPERIMENT_QUICK_TESTS=1")
def test_dreamer_hackmatrix_offline_quick_scores_a_world_model_on_held_out_games(tmp_path):
    """scripts/experiments/dreamer_hackmatrix_offline.py: 8 lanes x 64 steps of the teacher's play, 2 held out; one
    world-model member with the board-around-the-player encoder scored at 5 and 10 gradient steps on the 128
    held-out transitions, against the direct reward MLP and ridge on the true input."""
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "experiments",
                          "dreamer_hackmatrix_offline.py")
    proc = subprocess.run([sys.executable, script, "--quick", "--encoder", "ego", "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads((tmp_path / "o.json").read_text())
    assert data["data"]["transitions"] == 8 * 64 and data["args"]["encoder"] == "ego"
    assert [p["steps"] for p in data["points"]] == [5, 10]
    for point in data["points"]:
        assert 0 < point["decoder_err_over_var"] < 10 and -1 <= point["reward_corr"] <= 1 and point["kl"] >= 0
        assert 0 <= point["cont_elsewhere"] <= 1
    assert data["mlp_on_obs_and_action_reward_corr"] is not None  # the reference was fitted
    bad = subprocess.run([sys.executable, script, "--quick", "--seq-len", "60"], capture_output=True, text=True,
                         timeout=300, cwd=tmp_path)
    assert bad.returncode != 0 and "multiple of --seq-len" in bad.stderr and "Traceback" not in bad.stderr


def test_boredom_experiment_reads_dream_lengths_time_and_the_evaluation_from_a_run(tmp_path):
    """scripts/experiments/dreamer_boredom.py's reading of one run: the dream length averaged by updates, the scan
    steps dreamt (length x actor-critic steps x updates), the chunks' seconds after the first (the compile's chunk
    left out), the first chunk at the threshold, and the greedy evaluation from eval.json."""
    from hephaestus.tools.entry_points import load_script

    boredom = load_script(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts",
                                       "experiments", "dreamer_boredom.py"))
    run = tmp_path / "adaptive_s0"
    run.mkdir()
    chunks = [(16, 4096, 60.0, 8.0, 100.0), (32, 8192, 70.0, 64.0, 480.0), (48, 12288, 90.0, 16.0, 500.0)]
    with open(run / "metrics.jsonl", "w") as f:
        for update, steps, clock, horizon, ret in chunks:
            f.write(json.dumps({"update": update, "env_steps": steps, "wall_seconds": clock, "mean_episode_return": ret,
                                "dreamer/horizon": horizon, "dreamer/ac_steps": 8.0, "dtc/boredom": 0.5,
                                "dtc/competence": 0.01}) + "\n")
        f.write(json.dumps({"update": 48, "env_steps": 12288, "eval/return_mean": 1.0}) + "\n")  # no dream keys
    (run / "eval.json").write_text(json.dumps({"metrics": {"eval/return_mean": 432.5}}))
    r = boredom.read_run(str(run), threshold=475.0)
    assert r["mean_horizon"] == pytest.approx((8 + 64 + 16) / 3)
    assert r["imagined_steps"] == pytest.approx(16 * 8 * (8 + 64 + 16))
    assert r["seconds_after_first_chunk"] == pytest.approx(30.0)
    assert r["steps_to_threshold"] == 8192 and r["eval_return"] == 432.5
    results = {"threshold": 475.0, "variants": {"boredom picks the length": {"0": r}}}
    assert "| boredom picks the length | 0 | 29.3 | 11k | 30 | 8,192 | 360 | 432 |" in boredom.summarise(results)


def test_the_dreams_disagreement_is_the_variance_of_the_members_decoded_means():
    """rssm.decoded_disagreement (a quadratic form on the members' decoder features, the dream's novelty) equals the
    variance over members of their decoded means, for members far apart and for near copies of one member, where a
    variance taken as a difference of sums of squares loses the most to rounding."""
    sizes = rssm.RSSMSizes(obs_dim=300, action_dim=2, discrete=True, deter=16, groups=4, classes=4, hidden=32)
    model, k, s = rssm.RSSM(sizes), 3, 64
    apart = rssm.init_ensemble(model, jax.random.PRNGKey(7), k)
    leaves, treedef = jax.tree.flatten(apart)
    noise = [1e-3 * jax.random.normal(key, x.shape[1:]) for key, x in zip(jax.random.split(jax.random.PRNGKey(8),
                                                                                           len(leaves)), leaves)]
    near = jax.tree.unflatten(treedef, [x[0] + n * jnp.arange(k).reshape((k,) + (1,) * n.ndim)
                                        for x, n in zip(leaves, noise)])
    # Every member at the same states, so that the near copies' predictions differ only by their weights.
    h = jnp.broadcast_to(jax.random.normal(jax.random.PRNGKey(9), (s, sizes.deter)), (k, s, sizes.deter))
    z = jnp.broadcast_to(jax.nn.one_hot(jax.random.randint(jax.random.PRNGKey(10), (s, sizes.groups), 0,
                                                           sizes.classes), sizes.classes).reshape(s, -1),
                         (k, s, sizes.stoch))
    spreads = []
    for params in (apart, near):
        means = jax.vmap(lambda p, h, z: model.apply(p, h, z, method=rssm.RSSM.decode)[0])(params, h, z)
        direct = np.var(np.asarray(means, np.float64), 0).mean(-1)
        features = jax.vmap(lambda p, h, z: model.apply(p, h, z, method=rssm.RSSM.decode_features))(params, h, z)
        form = rssm.disagreement_form(*rssm.decoder_output_layer(params))
        got = np.asarray(rssm.decoded_disagreement(features, form, sizes.obs_dim))
        assert got.shape == (s,)
        np.testing.assert_allclose(got, direct, rtol=1e-3, atol=1e-6 * float(jnp.mean(means ** 2)))
        spreads.append(float(direct.mean()))
    assert spreads[1] < 1e-3 * spreads[0]  # the near copies do test the small-variance case
