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
