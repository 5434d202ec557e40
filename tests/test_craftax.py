"""Craftax (`craftax:<id>`): achievements as declared episode statistics, Crafter's score in training records and
evaluations, and the presentation watch_agent.py shows. The score's arithmetic and the wrapper's reporting are
checked on a stand-in env; the tests that need the craftax package skip only where it is not installed."""

import math
import os

import numpy as np
import pytest

from hephaestus.core.evaluation import summarise, summary_lines
from hephaestus.core.sinks import chunk_reduce, seeds_reduce
from hephaestus.envs.episode_stats import EpisodeScore, EpisodeStat, as_scores, crafter_score, score_values


def test_crafter_score_is_the_geometric_mean_of_one_plus_success_percent():
    assert crafter_score([0.0] * 22) == 0.0
    assert crafter_score([1.0] * 22) == pytest.approx(100.0)
    # two achievements at 100% and 0%: exp((ln 101 + ln 1) / 2) - 1 = sqrt(101) - 1
    assert crafter_score([1.0, 0.0]) == pytest.approx(math.sqrt(101.0) - 1.0)
    # the score rewards breadth: one achievement always beats two half the time less than the mean says
    assert crafter_score([0.5, 0.5]) > crafter_score([1.0, 0.0])


def test_a_score_must_name_declared_rate_statistics():
    stats = (EpisodeStat("wood", "max", rate=True), EpisodeStat("kills", "sum"))
    assert as_scores((EpisodeScore("score", ("wood",)),), stats)
    with pytest.raises(ValueError, match="kills"):
        as_scores((EpisodeScore("score", ("wood", "kills")),), stats)
    with pytest.raises(ValueError):
        EpisodeScore("a/b", ("wood",))
    with pytest.raises(ValueError, match="ends in '_score'"):  # summaries tell scores from means by the name
        EpisodeScore("crafter", ("wood",))


def test_training_records_carry_the_score_of_the_chunks_rates_per_seed():
    scores = (EpisodeScore("score", ("wood", "table")),)
    # per-update sums over the episodes that ended: 4 episodes, wood in all 4, table in 1
    metrics = {"num_episodes": np.array([2.0, 2.0]), "episode/wood_rate": np.array([2.0, 2.0]),
               "episode/table_rate": np.array([0.0, 1.0])}
    record = chunk_reduce(metrics, scores)
    assert record["episode/score"] == pytest.approx(crafter_score([1.0, 0.25]))
    assert "episode/score" not in chunk_reduce(metrics)  # only where the env declares one
    # no episode ended: no rates, so no score (not a score of 0)
    assert "episode/score" not in chunk_reduce({k: v * 0 for k, v in metrics.items()}, scores)
    # two seeds: each seed's own score, then their mean and spread
    two = {k: np.stack([v, v * np.array([1.0, 0.0]) if k != "num_episodes" else v], axis=1)
           for k, v in metrics.items()}
    record = seeds_reduce(two, scores)
    per_seed = record["per_seed"]["episode/score"]
    assert per_seed[0] == pytest.approx(crafter_score([1.0, 0.25]))
    assert per_seed[1] == pytest.approx(crafter_score([0.5, 0.0]))
    assert record["episode/score"] == pytest.approx(np.mean(per_seed)) and "episode/score/std" in record


def test_evaluations_report_the_score_beside_the_rates():
    stats = (EpisodeStat("wood", "max", rate=True), EpisodeStat("table", "max", rate=True))
    out = {"return": np.array([1.0, 2.0]), "length": np.array([10, 20]), "finished": np.array([True, True]),
           "stats": {"wood": np.array([1.0, 1.0]), "table": np.array([0.0, 1.0])}}
    metrics = summarise(out, stats, "eval/", (EpisodeScore("score", ("wood", "table")),))
    assert metrics["eval/table_rate"] == 0.5
    assert metrics["eval/score"] == pytest.approx(crafter_score([1.0, 0.5]))
    assert score_values((EpisodeScore("score", ("wood", "missing")),), metrics, "eval/") == {}
    # the summary shows the score on its own line, not among the per-episode means
    lines = summary_lines({**metrics, "eval/steps_alive": 15.0}, "eval/")
    assert any(line.startswith("  scores: score ") for line in lines)
    per_episode = next(line for line in lines if "per episode" in line)
    assert "steps_alive" in per_episode and "score" not in per_episode


class _State:
    def __init__(self, achievements):
        self.achievements = np.asarray(achievements, bool)


class _StandIn:
    """The craftax env API the wrapper uses: step_env returning the state's cumulative achievements."""

    default_params = None

    def step_env(self, key, state, action, params):
        unlocked = state.achievements.copy()
        unlocked[action] = True
        return np.zeros(3), _State(unlocked), 1.0, False, {"discount": 1.0}


def test_the_wrapper_reports_each_achievement_of_the_state_it_landed_on(monkeypatch):
    from hephaestus.envs import craftax_env

    names = ("collect_wood", "place_table", "eat_cow")
    monkeypatch.setattr(craftax_env, "achievement_names", lambda env_id: names)
    env = craftax_env.CraftaxWithStats(_StandIn(), "Craftax-Classic-Symbolic-v1")
    assert [s.name for s in env.episode_stats] == list(names)
    assert all(s.rate and s.aggregate == "max" for s in env.episode_stats)
    assert env.episode_scores[0].stats == names
    _, state, _, _, info = env.step_env(None, _State([False, False, True]), 1, None)
    assert {k: float(v) for k, v in info["episode_stats"].items()} == {"collect_wood": 0.0, "place_table": 1.0,
                                                                       "eat_cow": 1.0}
    assert info["discount"] == 1.0 and env.default_params is None  # the rest is the env's own


def test_classic_declares_crafters_22_achievements():
    pytest.importorskip("craftax")
    from hephaestus.envs.craftax_env import achievement_names

    names = achievement_names("Craftax-Classic-Symbolic-v1")
    assert len(names) == 22 and names[0] == "collect_wood" and names[-1] == "make_iron_sword"


def test_an_unknown_craftax_id_is_a_one_line_error():
    pytest.importorskip("craftax")
    from hephaestus.envs.registry import UnknownEnvError, make_env

    with pytest.raises(UnknownEnvError, match="Craftax-Classic-Symbolic-v1"):
        make_env("craftax:Craftax-Clasic-Symbolic-v1")


def test_watch_names_the_actions_and_shows_vitals_and_unlocked_achievements():
    pytest.importorskip("craftax")
    from types import SimpleNamespace

    from hephaestus.envs.craftax_env import achievement_names, make_presentation

    names = achievement_names("Craftax-Classic-Symbolic-v1")
    present = make_presentation("Craftax-Classic-Symbolic-v1", names)
    assert len(present.action_names) == 17 and present.action_names[:2] == ("noop", "left")
    assert present.action_names[5] == "do" and present.outcome({}) == "died"
    state = SimpleNamespace(player_health=np.int32(7), player_food=np.int32(9), player_drink=np.int32(3),
                            player_energy=np.int32(8), achievements=np.eye(22, dtype=bool)[0] | np.eye(22, dtype=bool)[4])
    assert present.status(state) == "health 7  food 9  drink 3  energy 8  achievements 2/22"
    note = present.episode_note({"collect_wood": 1.0, "place_table": 0.0, "collect_drink": 1.0})
    assert note == "2 achievements: collect_wood, collect_drink"
    assert present.episode_note({}) == "0 achievements"


def test_only_the_envs_whose_episode_ended_get_a_new_world(monkeypatch):
    """step_and_reset under vmap: a fresh reset (drawn with the auto-reset's key) where the episode ended, the
    stepped state elsewhere, and the observation the episode ended on as final_observation."""
    from typing import NamedTuple

    import jax
    import jax.numpy as jnp

    from hephaestus.envs import craftax_env

    class State(NamedTuple):
        t: jax.Array
        world: jax.Array
        achievements: jax.Array

    class Env:
        def reset_env(self, key, limit):
            world = jax.random.randint(key, (), 1, 1_000_000)
            return jnp.float32(world)[None], State(jnp.int32(0), world, jnp.zeros(3, bool))

        def step_env(self, key, state, action, limit):
            s = State(state.t + 1, state.world, state.achievements.at[action].set(True))
            return jnp.float32(s.t)[None], s, jnp.float32(1), s.t >= limit, {}

    monkeypatch.setattr(craftax_env, "achievement_names", lambda env_id: ("a", "b", "c"))
    env = craftax_env.CraftaxWithStats(Env(), "Craftax-Classic-Symbolic-v1")
    state = State(jnp.array([0, 1, 0, 1]), jnp.array([7, 8, 9, 10]), jnp.zeros((4, 3), bool))
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    obs, new, reward, terminated, truncated, info = jax.jit(jax.vmap(env.step_and_reset, (0, 0, 0, None)))(
        keys, state, jnp.array([0, 1, 2, 0]), 2)
    assert terminated.tolist() == [False, True, False, True] and not truncated.any()
    assert new.t.tolist() == [1, 0, 1, 0]
    fresh = [int(Env().reset_env(jax.random.split(k)[1], 2)[1].world) for k in keys]
    assert new.world.tolist() == [7, fresh[1], 9, fresh[3]]
    assert obs[:, 0].tolist() == [1.0, fresh[1], 1.0, fresh[3]]
    assert info["final_observation"][:, 0].tolist() == [1.0, 2.0, 1.0, 2.0]
    assert info["episode_stats"]["b"].tolist() == [0.0, 1.0, 0.0, 0.0]  # the achievement of the ending step
    # an env without is_truncated never truncates: its spec says so, and the rollout computes no bootstrap value
    from hephaestus.envs.adapters import EnvSpec, with_obs_structure

    assert env.may_truncate is False and with_obs_structure(EnvSpec("c", 1, True, 3), env).may_truncate is False
    Env.is_truncated = lambda self, state, limit: state.t >= limit
    assert craftax_env.CraftaxWithStats(Env(), "Craftax-Classic-Symbolic-v1").may_truncate is True
    assert with_obs_structure(EnvSpec("g", 1, True, 3), object()).may_truncate is True  # the default: it may


def _side_by_side_script():
    from hephaestus.tools.entry_points import load_script

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return load_script(os.path.join(root, "scripts", "experiments", "craftax_baselines.py"), "craftax_baselines")


def test_the_side_by_side_reads_their_defaults_maps_the_networks_and_merges_our_per_seed_programs(tmp_path):
    """scripts/experiments/craftax_baselines.py without running either side: their argparse defaults read from the
    file, the same network on ours (the GRU with the Dense in front of its cell), one-line errors for a folder
    without their code, and our per-seed programs merged into one program's per-update [updates, seeds] metrics."""
    cb = _side_by_side_script()
    (tmp_path / "ppo_rnn.py").write_text('import argparse\np = argparse.ArgumentParser()\n'
                                         'p.add_argument("--layer_size", type=int, default=512)\n'
                                         'p.add_argument("--seed", type=int, default=np.random.randint(2**31))\n')
    assert cb.their_defaults(str(tmp_path / "ppo_rnn.py")) == {"LAYER_SIZE": 512}  # the seed's default is no literal
    config = {"NUM_ENVS": 64, "NUM_STEPS": 64, "TOTAL_TIMESTEPS": 4096, "LR": 2e-4, "ANNEAL_LR": True,
              "GAMMA": 0.99, "GAE_LAMBDA": 0.8, "CLIP_EPS": 0.2, "ENT_COEF": 0.01, "VF_COEF": 0.5,
              "MAX_GRAD_NORM": 1.0, "NUM_MINIBATCHES": 8, "UPDATE_EPOCHS": 4, "LAYER_SIZE": 512, "SEED": 0,
              "NUM_REPEATS": 3}
    rnn = cb.our_options("rnn", config)
    assert rnn["recurrent"] == "gru" and rnn["recurrent_embed"] == 512 and rnn["num_layers"] == 2
    assert cb.our_options("mlp", config)["recurrent"] == "none"
    with pytest.raises(SystemExit) as exit_info:
        cb.main(["--reference-dir", str(tmp_path / "missing"), "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    runs = [{"setup_s": 1.0, "chunks": [{"seconds": 2.0, "cpu_seconds": 3.0, "updates": 2,
                                         "metrics": {"num_episodes": [[s], [s + 1]]}}]} for s in (1, 5)]
    merged = cb.merge_programs({"runs": runs, "num_updates": 2, "batch": 4096})
    assert merged["setup_s"] == 2.0 and merged["chunks"][0]["seconds"] == 4.0
    assert merged["chunks"][0]["metrics"]["num_episodes"] == [[1, 5], [2, 6]]
