"""Console health warnings and the chunk reduction users read."""

import numpy as np

from hephaestus.core.sinks import HealthMonitor, chunk_reduce


def record(**kw):
    base = {"approx_kl": 0.01, "clip_frac": 0.1, "entropy": 1.0, "num_episodes": 5,
            "mean_episode_length": 50.0, "mean_episode_return": 10.0}
    return {**base, **kw}


def test_kl_clip_and_entropy_warnings_fire_only_past_their_limits():
    monitor = HealthMonitor()
    assert monitor.check(record()) == []
    warnings = monitor.check(record(approx_kl=0.09, clip_frac=0.4, entropy=0.01))
    text = " ".join(warnings)
    assert "approx KL" in text and "clip fraction" in text and "entropy" in text
    assert HealthMonitor().check(record(approx_kl=0.07, clip_frac=0.34)) == []


def test_warnings_are_not_repeated_every_chunk():
    monitor = HealthMonitor(quiet=10)
    assert monitor.check(record(approx_kl=0.2))
    assert not any("KL" in w for w in monitor.check(record(approx_kl=0.2)))


def test_stall_warning_when_length_rises_and_return_stays_flat():
    monitor = HealthMonitor()
    out = []
    for i in range(5):
        out += monitor.check(record(mean_episode_length=50.0 + 20 * i, mean_episode_return=10.0))
    assert any("stalls" in w for w in out)
    learning = HealthMonitor()
    out = []
    for i in range(5):
        out += learning.check(record(mean_episode_length=50.0 + 20 * i, mean_episode_return=10.0 + 5 * i))
    assert not any("stalls" in w for w in out)


def test_chunk_reduce_sums_counts_maxes_stages_and_keeps_latest_return():
    # episode/ metrics arrive as per-update sums over the episodes that ended (maxes for *_max keys)
    reduced = chunk_reduce({"num_episodes": np.array([2, 3]), "episode/stage_reached_max": np.array([1, 4]),
                            "episode/stage_reached>=2": np.array([1, 2]), "episode/kills_per_episode": np.array([4, 6]),
                            "mean_episode_return": np.array([1.0, 7.0]), "entropy": np.array([1.0, 3.0])})
    assert reduced == {"num_episodes": 5.0, "episode/stage_reached_max": 4.0, "episode/stage_reached>=2": 0.6,
                       "episode/kills_per_episode": 2.0, "mean_episode_return": 7.0, "entropy": 2.0}
    # a chunk in which no episode ended has no episode/ values (not zeros)
    reduced = chunk_reduce({"num_episodes": np.array([0, 0]), "episode/kills_per_episode": np.array([0, 0])})
    assert reduced == {"num_episodes": 0.0}


def test_curriculum_episodes_are_reported_apart_from_fresh_ones():
    """Episodes begun as a curriculum's late start count under curriculum/, not in the fresh games' episode/."""
    import jax.numpy as jnp

    from hephaestus.core import rollout_metrics
    from hephaestus.envs.episode_stats import EpisodeStat

    stats = (EpisodeStat("stage_reached", "max", thresholds=(2,)),)
    sums = rollout_metrics.zero_sums(stats, (), ())
    done = jnp.array([True, True, True, False])
    late = jnp.array([False, True, True, True])  # env 3's episode goes on: not counted at all
    sums = rollout_metrics.add_step(sums, stats, (), done, jnp.zeros(4), jnp.ones(4, jnp.int32),
                                    {"stage_reached": jnp.array([1.0, 5.0, 3.0, 8.0])}, {}, jnp.ones((4, 2), bool),
                                    jnp.zeros(4, jnp.int32), late)
    metrics = rollout_metrics.to_metrics(sums, jnp.float32(0), jnp.float32(0), 4)
    reduced = chunk_reduce({k: np.asarray(v)[None] for k, v in metrics.items()})
    assert reduced["num_episodes"] == 3 and reduced["num_curriculum_episodes"] == 2
    assert reduced["episode/stage_reached"] == 1.0 and reduced["episode/stage_reached>=2"] == 0.0
    assert reduced["curriculum/stage_reached"] == 4.0 and reduced["curriculum/stage_reached_max"] == 5.0
    # an env without a curriculum: no curriculum/ keys, episode/ over every episode
    sums = rollout_metrics.add_step(rollout_metrics.zero_sums(stats, (), ()), stats, (), done, jnp.zeros(4),
                                    jnp.ones(4, jnp.int32), {"stage_reached": jnp.array([1.0, 5.0, 3.0, 8.0])}, {},
                                    jnp.ones((4, 2), bool), jnp.zeros(4, jnp.int32))
    reduced = chunk_reduce({k: np.asarray(v)[None] for k, v in
                            rollout_metrics.to_metrics(sums, jnp.float32(0), jnp.float32(0), 4).items()})
    assert reduced["episode/stage_reached"] == 3.0 and not any(k.startswith("curriculum") for k in reduced)
    assert "num_curriculum_episodes" not in reduced


def test_hackmatrix_reports_its_late_starts():
    """HackMatrix's step says whether the game began on a later stage (the training curriculum's late start)."""
    import jax

    from hephaestus.envs.registry import make_env

    for share, expected in ((1.0, True), (0.0, False)):
        env = make_env("hackmatrix", curriculum_share=share, curriculum_max_stage=4)
        keys = jax.random.split(jax.random.PRNGKey(0), 8)
        state, out = jax.vmap(env.reset)(keys)
        _, step = jax.vmap(env.step)(keys, state, np.argmax(np.asarray(out.action_mask), axis=1))
        assert np.asarray(step.info["curriculum_start"]).tolist() == [expected] * 8
