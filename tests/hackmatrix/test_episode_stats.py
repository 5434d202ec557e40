"""HackMatrix's declared episode statistics (env.EPISODE_STATS) against hand-played episodes."""

import numpy as np
import pytest

from hephaestus.envs import episode_stats
from hephaestus.envs.hackmatrix import make_state
from hephaestus.envs.hackmatrix.constants import A_SIPHON, A_WAIT
from hephaestus.envs.hackmatrix.env import EPISODE_STATS
from hm_helpers import ENV, PARAMS, step

# The HackMatrix tests' xdist group: one worker compiles the shared step (hm_helpers.step) once (tests/conftest.py).
pytestmark = pytest.mark.xdist_group("hackmatrix")

UP, PUSH = 0, 5  # R5: up = (+1, 0); PUSH is action 5 (not owned below, so masked)


def play(state, actions):
    """Step the actions; returns the episode's values of every declared stat and the last (terminated, info)."""
    values = episode_stats.zeros(EPISODE_STATS, (), np)
    for i, action in enumerate(actions):
        _, state, _, terminated, info = step(state, action, seed=i)
        values = episode_stats.accumulate(EPISODE_STATS, values, {k: np.asarray(v) for k, v in
                                                                  info["episode_stats"].items()}, np)
    return {k: float(v) for k, v in values.items()}, bool(terminated), info


def expect(**nonzero):
    return {s.name: float(nonzero.get(s.name, 0.0)) for s in EPISODE_STATS}


def test_declared_stats_match_a_hand_played_episode():
    # (0,0): up onto the data siphon at (1,0); siphon there (its cross holds 3 credits at (1,1) and 2 energy at
    # (0,0)); WAIT (costs 1 energy); up onto the exit at (2,0) -> stage 2; then PUSH, not owned: invalid, the end.
    state = make_state(player=(0, 0), owned=["WAIT"], energy=1, exit=(2, 0), data_siphons=[(1, 0)],
                       resources={(1, 1): ("credits", 3), (0, 0): ("energy", 2)})
    done_so_far = dict(stage_reached=2, stages_cleared=1, siphons_used=1, siphons_collected=1, programs_played=1,
                       program_WAIT=1, programs_owned=1, credits_gathered=3, energy_gathered=2)
    values, terminated, _ = play(state, [UP, A_SIPHON, A_WAIT, UP])  # the exit step itself reaches stage 2
    assert not terminated and values == expect(**done_so_far)
    values, terminated, info = play(state, [UP, A_SIPHON, A_WAIT, UP, PUSH])
    assert terminated and bool(info["invalid_action"])
    assert values == expect(invalid_action=1, **done_so_far)


def test_kills_death_and_cause_of_end():
    # A 1-HP virus right above: the attack kills it. Then a second virus two cells away reaches the 1-HP player
    # in its move (speed 2) and attacks: death.
    state = make_state(player=(0, 0), hp=1, owned=["WAIT"], energy=2,
                       enemies=[{"type": "virus", "pos": (1, 0), "hp": 1}, {"type": "virus", "pos": (0, 3)}])
    values, terminated, _ = play(state, [UP, A_WAIT])
    assert terminated
    # The death's context: hit once (at 1 HP), the second virus beside the player, WAIT still owned.
    assert values == expect(stage_reached=1, kills=1, death=1, programs_played=1, program_WAIT=1, damage_taken=1,
                            death_beside_virus=1, death_enemies_beside=1, death_holding_programs=1, programs_owned=1)


def test_a_death_names_the_enemies_beside_the_player_and_what_it_held():
    # 1 HP, a daemon above and a glitch to the right, one data siphon held, no program. Attacking the daemon
    # (3 HP) stuns it; the glitch attacks: death, with both beside the player and the siphon unused.
    state = make_state(player=(0, 0), hp=1, siphons=1,
                       enemies=[{"type": "daemon", "pos": (1, 0)}, {"type": "glitch", "pos": (0, 1)}])
    values, terminated, _ = play(state, [UP])
    assert terminated
    assert values == expect(stage_reached=1, death=1, damage_taken=1, death_beside_daemon=1, death_beside_glitch=1,
                            death_enemies_beside=2, death_holding_siphons=1)
    # The same death with the daemon spawned by a siphon: R116's penalty is paid, and the stat says so.
    spawned = make_state(player=(0, 0), hp=1, siphons=1, enemies=[{"type": "daemon", "pos": (1, 0), "siphon": True},
                                                                  {"type": "glitch", "pos": (0, 1)}])
    _, _, info = play(spawned, [UP])
    assert float(info["reward_terms"]["siphonDeathPenalty"]) == -PARAMS.siphon_death_penalty
    assert play(spawned, [UP])[0] == {**values, "death_beside_siphon_spawn": 1.0}
    # Survived (3 HP): damage is counted, no death context.
    values, terminated, _ = play(state.replace(hp=state.hp * 0 + 3), [UP])
    assert not terminated and values == expect(stage_reached=1, damage_taken=1)


def test_programs_owned_counts_acquisitions_and_keeps_a_played_program():
    # Two unsiphoned program blocks in the cross of (2,2), WAIT not yet owned: the siphon acquires both (R49), so
    # the episode owned 2 at once; playing WAIT costs energy, not the program (R51), and the count stays 2.
    state = make_state(player=(2, 2), siphons=1, energy=3,
                       blocks=[{"pos": (3, 2), "kind": "program", "program": "WAIT", "spawn": 0},
                               {"pos": (2, 3), "kind": "program", "program": "PUSH", "spawn": 0}])
    values, terminated, info = play(state, [A_SIPHON, A_WAIT])
    assert not terminated
    assert values["programs_owned"] == 2 and values["programs_played"] == 1 and values["program_WAIT"] == 1
    # Siphoned nothing: owned none, whatever else it did.
    values, _, _ = play(make_state(player=(2, 2), siphons=1), [A_SIPHON, UP])
    assert values["programs_owned"] == 0 and values["siphons_used"] == 1


def test_step_limit_is_the_cause_when_the_episode_is_truncated():
    state = make_state(player=(0, 0), time=PARAMS.max_steps_in_episode - 1)
    values, terminated, _ = play(state, [UP])
    assert not terminated and bool(ENV.is_truncated(step(state, UP)[1], PARAMS))
    assert values == expect(stage_reached=1, step_limit=1)


def test_report_keys_name_rates_thresholds_and_counts():
    keys = episode_stats.report_keys(EPISODE_STATS)
    for key in ("stage_reached", "stage_reached>=2", "stage_reached>=8", "victory_rate", "death_rate",
                "step_limit_rate", "invalid_action_rate", "siphons_used_per_episode", "kills_per_episode",
                "credits_gathered_per_episode", "program_PUSH_per_episode", "program_HACK_per_episode",
                "damage_taken_per_episode", "death_beside_virus_rate", "death_beside_cryptog_rate",
                "death_enemies_beside_per_episode", "death_beside_siphon_spawn_rate", "death_holding_siphons_rate",
                "death_holding_programs_rate", "siphons_used>=1", "programs_played>=1", "programs_owned>=1"):
        assert key in keys, key
    assert sum(k.startswith("program_") for k in keys) == 23


def test_a_count_with_a_threshold_reports_the_share_of_episodes_reaching_it():
    # Issue 22's goals are shares of episodes (siphons used in >= 80%), not means: 4 episodes, siphons 0, 2, 1, 0.
    values = {s.name: np.zeros(4, np.float32) for s in EPISODE_STATS}
    values["siphons_used"] = np.array([0, 2, 1, 0], np.float32)
    values["programs_played"] = np.array([0, 0, 0, 3], np.float32)
    out = episode_stats.summarise(EPISODE_STATS, values, "eval/")
    assert out["eval/siphons_used_per_episode"] == 0.75 and out["eval/siphons_used>=1"] == 0.5
    assert out["eval/programs_played_per_episode"] == 0.75 and out["eval/programs_played>=1"] == 0.25
    values["programs_owned"] = np.array([0, 1, 2, 3], np.float32)  # a max over the episode, thresholded the same
    assert episode_stats.summarise(EPISODE_STATS, values, "eval/")["eval/programs_owned>=1"] == 0.75
