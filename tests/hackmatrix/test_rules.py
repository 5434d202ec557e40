"""Hand-built scenarios, one action each, citing the rule numbers of specs/hackmatrix-rules.md."""
import numpy as np
import pytest

from hephaestus.envs.hackmatrix import make_state
from hephaestus.envs.hackmatrix.constants import BLOCK, DATA_SIPHON, EMPTY, EXIT, IS_CORNER, STAGE_REWARDS

from hm_helpers import cell, check_sum, enemies, nonzero_terms, step, terms, transmissions

# The HackMatrix tests' xdist group: one worker compiles the shared step (hm_helpers.step) once (tests/conftest.py).
pytestmark = pytest.mark.xdist_group("hackmatrix")

UP, DOWN, LEFT, RIGHT, SIPHON = 0, 1, 2, 3, 4
V, D, G, C = 0, 1, 2, 3


def test_R43_R103_R108_move_step_penalty_and_distance_shaping():
    s = make_state(player=(0, 0), exit=(5, 5))
    obs, s2, r, term, info = step(s, UP)
    assert int(s2.player_pos) == cell(1, 0)
    assert not bool(term)
    assert nonzero_terms(info) == {"step": -0.01, "distance": 0.05}
    check_sum(r, info)
    assert int(s2.turn) == 1  # R40: a move ends the turn, enemy phase ran (E1)


def test_R108_moving_away_gives_only_step_penalty():
    s = make_state(player=(1, 0), exit=(5, 5))
    _, s2, r, _, info = step(s, DOWN)
    assert int(s2.player_pos) == cell(0, 0)
    assert nonzero_terms(info) == {"step": -0.01}
    assert abs(float(r) + 0.01) < 1e-7


def test_R108_R118_distance_uses_shortest_path_around_blocks():
    # wall on row 1 except col 5: from (0,0) to exit (5,0) the path goes via (0,5)
    blocks = [{"pos": (1, c), "kind": "data", "points": 1} for c in range(0, 5)]
    s = make_state(player=(0, 0), exit=(5, 0), blocks=blocks)
    _, s2, r, _, info = step(s, RIGHT)  # Manhattan distance grows, path distance shrinks
    assert int(s2.player_pos) == cell(0, 1)
    assert abs(terms(info)["distance"] - 0.05) < 1e-7


def test_R44_R107_pickup_on_move_keeps_resource():
    s = make_state(player=(0, 0), data_siphons=[(0, 1)], resources={(0, 1): ("credits", 2)})
    _, s2, r, _, info = step(s, RIGHT)
    assert int(s2.siphons) == 1
    assert int(s2.content[cell(0, 1)]) == EMPTY
    assert int(s2.res_credits[cell(0, 1)]) == 2 and int(s2.credits) == 0   # R11
    assert terms(info)["dataSiphon"] == 1.0
    check_sum(r, info)


def test_R41_R42_R21_R22_attack_at_range_stuns_and_enemy_skips_phase():
    s = make_state(player=(0, 0), exit=(5, 5), enemies=[{"type": "daemon", "pos": (0, 4)}])
    _, s2, r, _, info = step(s, RIGHT)
    assert int(s2.player_pos) == cell(0, 0)            # attack: player does not move
    (e,) = enemies(s2)
    assert e[1] == (0, 4) and e[2] == 2                 # hit for 1, stunned -> did not move
    assert e[4] is False                                # stun cleared at E6
    assert int(s2.hp) == 3
    assert nonzero_terms(info) == {"step": -0.01}


def test_R41_block_stops_line_of_fire():
    s = make_state(player=(0, 0), exit=(5, 5), blocks=[{"pos": (0, 2), "points": 3}],
                   enemies=[{"type": "daemon", "pos": (0, 4), "disabled": 2}])
    _, s2, _, _, _ = step(s, RIGHT)
    assert int(s2.player_pos) == cell(0, 1)            # moved, no target
    assert enemies(s2)[0][2] == 3


def test_R41_transmission_before_enemy_is_the_target_and_counts_as_kill():
    s = make_state(player=(0, 0), exit=(5, 5), enemies=[{"type": "daemon", "pos": (0, 4), "disabled": 2}],
                   transmissions=[{"pos": (0, 2), "turns": 3}])
    _, s2, r, _, info = step(s, RIGHT)
    assert transmissions(s2) == []
    assert enemies(s2)[0][2] == 3
    assert abs(terms(info)["kills"] - 0.3) < 1e-7
    check_sum(r, info)


def test_R42_R106_kill_reward_and_scheduled_exclusion():
    s = make_state(player=(0, 0), exit=(5, 5), enemies=[{"type": "virus", "pos": (0, 3), "hp": 1}])
    _, s2, _, _, info = step(s, RIGHT)
    assert enemies(s2) == [] and abs(terms(info)["kills"] - 0.3) < 1e-7
    s = make_state(player=(0, 0), exit=(5, 5), enemies=[{"type": "virus", "pos": (0, 3), "hp": 1, "sched": True}])
    _, s2, _, _, info = step(s, RIGHT)
    assert enemies(s2) == [] and terms(info)["kills"] == 0.0


def test_R42_attack_damage_uses_attack_stat():
    s = make_state(player=(0, 0), exit=(5, 5), attack=3, enemies=[{"type": "daemon", "pos": (3, 0)}])
    _, s2, _, _, info = step(s, UP)
    assert enemies(s2) == [] and abs(terms(info)["kills"] - 0.3) < 1e-7


def test_R56_R58_R113_adjacent_enemy_attacks():
    s = make_state(player=(0, 0), exit=(5, 5), enemies=[{"type": "daemon", "pos": (1, 1)}])
    _, s2, r, term, info = step(s, RIGHT)  # move to (0,1): daemon now adjacent
    assert int(s2.player_pos) == cell(0, 1)
    assert int(s2.hp) == 2 and enemies(s2)[0][1] == (1, 1)
    assert terms(info)["damagePenalty"] == -1.0
    assert not bool(term)
    check_sum(r, info)


def test_R64_shortest_path_tie_break_up_down_left_right():
    # daemon at (2,2), player (0,0): down (1,2) and left (2,1) both at distance 3 -> down wins
    s = make_state(player=(0, 0), exit=(5, 5), enemies=[{"type": "daemon", "pos": (3, 2)}])
    _, s2, _, _, _ = step(s, UP)        # player -> (1,0); daemon at (3,2): down(2,2) d=3, left(3,1) d=3
    assert enemies(s2)[0][1] == (2, 2)
    s = make_state(player=(0, 0), exit=(5, 5), blocks=[{"pos": (2, 2)}],
                   enemies=[{"type": "daemon", "pos": (3, 2)}])
    _, s2, _, _, _ = step(s, UP)
    assert enemies(s2)[0][1] == (3, 1)


def test_R64_bfs_not_greedy():
    # wall on col 1 rows 0..2: a greedy step would go down (toward the player); BFS goes up
    blocks = [{"pos": (r, 1)} for r in range(3)]
    s = make_state(player=(0, 0), exit=(5, 5), blocks=blocks,
                   enemies=[{"type": "daemon", "pos": (1, 2)}])
    _, s2, _, _, _ = step(s, UP)        # player -> (1,0)
    assert enemies(s2)[0][1] == (2, 2)


def test_R18_R63_glitch_walks_onto_blocks_daemon_does_not():
    blocks = [{"pos": (0, 2)}, {"pos": (1, 3)}]
    kw = dict(player=(0, 0), exit=(5, 5), blocks=blocks, siphons=1)
    g = make_state(enemies=[{"type": "glitch", "pos": (0, 3)}], **kw)
    d = make_state(enemies=[{"type": "daemon", "pos": (0, 3)}], **kw)
    _, g2, _, _, _ = step(g, SIPHON)   # the player stays on (0,0)
    _, d2, _, _, _ = step(d, SIPHON)
    assert enemies(g2)[0][1] == (0, 2)           # onto the block (distance 2)
    assert enemies(d2)[0][1] == (0, 4)           # the only way around the blocks


def test_R57_glitch_on_block_attacks():
    s = make_state(player=(0, 0), exit=(5, 5), blocks=[{"pos": (1, 1)}],
                   enemies=[{"type": "glitch", "pos": (1, 1)}])
    _, s2, _, _, _ = step(s, RIGHT)      # player -> (0,1), glitch on block adjacent
    assert int(s2.hp) == 2


def test_R65_R66_occupied_corridor_falls_back_to_greedy():
    # row 1 blocked on cols 1..5; A (disabled) blocks B's only path; B must step away (R66)
    blocks = [{"pos": (1, c)} for c in range(1, 6)]
    s = make_state(player=(2, 0), exit=(5, 5), blocks=blocks,
                   enemies=[{"type": "daemon", "pos": (0, 2), "disabled": 3},
                            {"type": "daemon", "pos": (0, 3)}])
    _, s2, _, _, _ = step(s, UP)         # player (3,0)
    assert [e[1] for e in enemies(s2)] == [(0, 2), (0, 4)]


def test_R65_tier2_moves_toward_player_when_path_blocked_further_on():
    blocks = [{"pos": (1, c)} for c in range(1, 6)]
    s = make_state(player=(3, 0), exit=(5, 5), blocks=blocks,
                   enemies=[{"type": "daemon", "pos": (0, 1), "disabled": 3},
                            {"type": "daemon", "pos": (0, 3)}])
    _, s2, _, _, _ = step(s, RIGHT)      # player (3,1)
    assert [e[1] for e in enemies(s2)] == [(0, 1), (0, 2)]


def test_R54_R56_virus_moves_twice_and_attacks_after_moving_adjacent():
    s = make_state(player=(0, 0), exit=(5, 5), enemies=[{"type": "virus", "pos": (4, 1)}])
    _, s2, _, _, _ = step(s, RIGHT)      # player (0,1); virus 2 steps: (3,1) -> (2,1)
    assert enemies(s2)[0][1] == (2, 1) and int(s2.hp) == 3
    s = make_state(player=(0, 0), exit=(5, 5), enemies=[{"type": "virus", "pos": (3, 1)}])
    _, s2, _, _, _ = step(s, RIGHT)      # (2,1) then (1,1) adjacent -> no attack in the same sub-step
    assert enemies(s2)[0][1] == (1, 1) and int(s2.hp) == 3
    s = make_state(player=(0, 0), exit=(5, 5), enemies=[{"type": "virus", "pos": (2, 1)}])
    _, s2, _, _, _ = step(s, RIGHT)      # sub-step 0 -> (1,1) adjacent; sub-step 1 attacks
    assert enemies(s2)[0][1] == (1, 1) and int(s2.hp) == 2
    s = make_state(player=(0, 0), exit=(5, 5), enemies=[{"type": "daemon", "pos": (2, 1)}])
    _, s2, _, _, _ = step(s, RIGHT)      # a daemon only moves once
    assert enemies(s2)[0][1] == (1, 1) and int(s2.hp) == 3


def test_R59_R24_transmission_hatches_disabled_and_ticks():
    s = make_state(player=(0, 0), exit=(5, 5),
                   transmissions=[{"pos": (3, 3), "turns": 1, "type": "virus", "siphon": True},
                                  {"pos": (4, 4), "turns": 2, "type": "daemon"}])
    _, s2, _, _, _ = step(s, UP)
    assert enemies(s2) == [(V, (3, 3), 2, 0, False, False, True)]   # did not move, disable expired
    assert transmissions(s2) == [((4, 4), 1, D, False, False)]
    _, s3, _, _, _ = step(s2, UP)
    es = enemies(s3)
    assert es[0][1] != (3, 3)                                      # virus acts in the next phase
    assert es[1][:2] == (D, (4, 4)) and es[1][3] == 0               # daemon hatched, appended


def test_R60_R62_scheduled_spawn_outside_line_of_fire():
    s = make_state(player=(0, 0), exit=(5, 5), turn=11, next_sched_turn=12, sched_interval=12)
    _, s2, _, _, _ = step(s, UP)        # player (1,0)
    (t,) = transmissions(s2)
    (r, c), turns, _, sched, siph = t
    assert sched and not siph and turns == 1
    assert r != 1 and c != 0                                       # not in the line of fire
    assert int(s2.turn) == 12 and int(s2.next_sched_turn) == 24


def test_R60_no_scheduled_spawn_before_its_turn_or_when_disabled():
    s = make_state(player=(0, 0), exit=(5, 5), turn=10, next_sched_turn=12)
    _, s2, _, _, _ = step(s, UP)
    assert transmissions(s2) == []
    s = make_state(player=(0, 0), exit=(5, 5), turn=11, next_sched_turn=12, sched_disabled=True)
    _, s2, _, _, _ = step(s, UP)
    assert transmissions(s2) == []


def test_R47_R48_R49_R50_siphon_cross():
    blocks = [
        {"pos": (3, 2), "kind": "data", "points": 5},
        {"pos": (2, 3), "kind": "program", "program": "CRASH"},
        {"pos": (1, 2), "kind": "question", "payload": "data", "points": 3},
        {"pos": (2, 1), "kind": "program", "program": "WAIT", "siphoned": True, "spawn": 0},
    ]
    res = {(2, 2): ("credits", 2), (4, 2): ("energy", 3), (0, 0): ("energy", 1)}
    s = make_state(player=(2, 2), exit=(5, 5), siphons=1, blocks=blocks, resources=res)
    _, s2, r, _, info = step(s, SIPHON)
    assert int(s2.score) == 8 and int(s2.credits) == 2 and int(s2.energy) == 0
    owned = np.asarray(s2.owned)
    assert owned[2] and owned.sum() == 1                            # CRASH acquired, WAIT not
    assert not bool(s2.blk_question[cell(1, 2)])                    # revealed
    for c in [(2, 2), (3, 2), (2, 3), (1, 2), (2, 1)]:
        assert bool(s2.siphoned[cell(*c)])
    assert bool(s2.siphon_center[cell(2, 2)]) and int(s2.siphon_center.sum()) == 1
    assert int(s2.blk_spawn[cell(3, 2)]) == 0 and int(s2.blk_points[cell(3, 2)]) == 5   # R33
    assert int(s2.content[cell(3, 2)]) == BLOCK                     # R10: blocks stay
    ts = transmissions(s2)
    assert len(ts) == 5 + 6 + 3 and all(t[4] and t[1] == 1 for t in ts)   # R50 spawns at E5
    assert int(s2.pending_siphon) == 0 and int(s2.siphons) == 0
    assert int(s2.sched_interval) == 11 and int(s2.next_sched_turn) == 17
    assert nonzero_terms(info) == {"step": -0.01, "score": 4.0, "resourceGain": 0.1}
    check_sum(r, info)
    occupied = [t[0] for t in ts]
    assert len(set(occupied)) == len(occupied) and (2, 2) not in occupied


def test_R117_siphon_quality_penalty():
    s = make_state(player=(0, 0), exit=(5, 5), siphons=1, resources={(3, 3): ("credits", 3)})
    _, s2, r, _, info = step(s, SIPHON)
    assert abs(terms(info)["siphonQuality"] + 0.025 * 3) < 1e-7
    check_sum(r, info)
    # same resources but the player stands where they are: no penalty
    s = make_state(player=(3, 2), exit=(5, 5), siphons=1, resources={(3, 3): ("credits", 3)})
    _, s2, r, _, info = step(s, SIPHON)
    assert terms(info)["siphonQuality"] == 0.0 and int(s2.credits) == 3


def test_R117_blocks_restrict_candidates():
    # current cross holds a data block; a richer position that drops the block is not a candidate
    s = make_state(player=(0, 0), exit=(5, 5), siphons=1, blocks=[{"pos": (0, 1), "points": 4}],
                   resources={(4, 4): ("credits", 3), (1, 1): ("energy", 2)})
    _, _, _, _, info = step(s, SIPHON)
    # candidates whose cross contains (0,1): (0,0), (1,1), (0,2); (1,1) has energy 2 -> dominates
    assert abs(terms(info)["siphonQuality"] + 0.025 * 2) < 1e-7


def test_R68_R70_R104_R112_R114_stage_transition():
    s = make_state(player=(4, 5), exit=(5, 5), hp=2, credits=4, energy=6, score=3,
                   enemies=[{"type": "daemon", "pos": (5, 4)}],
                   transmissions=[{"pos": (0, 3), "turns": 2}])
    _, s2, r, term, info = step(s, UP, seed=3)
    assert not bool(term)
    assert int(s2.stage) == 2 and int(s2.hp) == 3 and int(s2.player_pos) == cell(5, 5)
    assert int(s2.turn) == 0 and int(s2.sched_interval) == 11 and int(s2.next_sched_turn) == 11
    content = np.asarray(s2.content)
    assert content[cell(5, 5)] == EMPTY
    corners = [0, 5, 30]
    assert sorted(content[corners].tolist()) == [DATA_SIPHON, DATA_SIPHON, EXIT]
    assert int(s2.exit_pos) in corners and content[int(s2.exit_pos)] == EXIT
    nb = int((content == BLOCK).sum())
    assert nb == 0 or 5 <= nb <= 11
    assert not (content[np.asarray(IS_CORNER)] == BLOCK).any()
    assert content[cell(0, 3)] != BLOCK and content[cell(5, 4)] != BLOCK   # R31: not on entities
    # no enemy phase: the adjacent daemon did not attack, old entities kept unchanged (R70)
    assert enemies(s2)[0][1] == (5, 4) and transmissions(s2)[0] == ((0, 3), 2, 0, False, False)
    assert len(transmissions(s2)) == 1 + 2                       # R35: stage 2 spawns 2
    assert nonzero_terms(info) == {"step": -0.01, "stage": 1.0, "distance": 0.05, "hpRecovery": 1.0,
                                   "resourceHolding": 0.1}
    check_sum(r, info)
    # R34: every empty / pick-up cell has a 1..3 resource stack, blocks and exit none
    amt = np.asarray(s2.res_credits) + np.asarray(s2.res_energy)
    has = (content == EMPTY) | (content == DATA_SIPHON)
    assert ((amt >= 1) & (amt <= 3))[has].all() and (amt[~has] == 0).all()


def test_R69_R104_R109_victory():
    s = make_state(player=(4, 5), exit=(5, 5), stage=8, score=7, credits=1)
    obs, s2, r, term, info = step(s, UP)
    assert bool(term) and bool(info["victory"])
    assert int(s2.stage) == 8 and float(obs["obs"][5]) == 1.0      # D11
    t = terms(info)
    assert t["stage"] == 64.0 and t["victory"] == 500.0 + 100 * 7
    check_sum(r, info)


def test_R110_R113_R116_R122_death_penalties():
    s = make_state(player=(0, 0), exit=(5, 5), stage=3, hp=1,
                   enemies=[{"type": "daemon", "pos": (1, 1), "siphon": True}])
    _, s2, r, term, info = step(s, RIGHT)
    assert bool(term) and int(s2.hp) == 0
    assert nonzero_terms(info) == {"step": -0.01, "death": -1.5, "damagePenalty": -1.0,
                                   "siphonDeathPenalty": -10.0}
    check_sum(r, info)


def test_R110_a_curriculum_start_is_not_charged_for_the_stages_it_skipped():
    """A game begun on a later stage (the training curriculum; start_stage > 1) pays R110 only for the stages
    cleared in it: on stage 3, begun on 2, half of T[1] = 2; begun on 3, nothing. Begun on 1: R110 (-1.5)."""
    s = make_state(player=(0, 0), exit=(5, 5), stage=3, hp=1, enemies=[{"type": "daemon", "pos": (1, 1)}])
    assert int(s.start_stage) == 1
    deaths = {}
    for start_stage in (1, 2, 3):
        _, s2, r, term, info = step(s.replace(start_stage=np.int32(start_stage)), RIGHT)
        assert bool(term) and int(s2.hp) == 0
        deaths[start_stage] = terms(info)["death"]
        check_sum(r, info)
    assert deaths == {1: -1.5, 2: -1.0, 3: 0.0}


def test_curriculum_reward_scale_puts_a_late_start_on_a_fresh_games_scale():
    """EnvParams.curriculum_reward_scale (training only; not a rule): every reward term of a game begun on stage s > 1
    is divided by what clearing stage s pays (T[s - 1]; 64 for stage 8), so its first clear pays 1; a fresh game
    (start_stage 1), and every game with the option off, pays the rules' rewards bit for bit."""
    s = make_state(player=(4, 5), exit=(5, 5), stage=5, hp=2, credits=4, energy=6)
    fresh = terms(step(s, UP)[4])
    assert fresh["stage"] == 16.0 and fresh["hpRecovery"] == 1.0
    for start_stage in (1, 3, 5):
        late = s.replace(start_stage=np.int32(start_stage))
        off = step(late, UP)[4]
        assert terms(off) == fresh
        _, _, r, _, on = step(late, UP, curriculum_reward_scale=True)
        check_sum(r, on)
        scale = 1.0 if start_stage == 1 else 1.0 / STAGE_REWARDS[start_stage - 1]
        for name, value in terms(on).items():
            assert value == pytest.approx(fresh[name] * scale, rel=1e-6), (start_stage, name)
    assert terms(step(s.replace(start_stage=np.int32(5)), UP, curriculum_reward_scale=True)[4])["stage"] == 1.0
    # stage 8: the victory's stage term (64) and its bonus are divided by 64
    s8 = make_state(player=(4, 5), exit=(5, 5), stage=8, score=7).replace(start_stage=np.int32(8))
    t8 = terms(step(s8, UP, curriculum_reward_scale=True)[4])
    assert t8["stage"] == 1.0 and t8["victory"] == pytest.approx((500.0 + 100 * 7) / 64)
    # a death on a late start: R110's part (the stages cleared in this game) and the damage, scaled alike
    s3 = make_state(player=(0, 0), exit=(5, 5), stage=4, hp=1, enemies=[{"type": "daemon", "pos": (1, 1)}])
    t3 = terms(step(s3.replace(start_stage=np.int32(2)), RIGHT, curriculum_reward_scale=True)[4])
    assert t3["death"] == pytest.approx(-0.5 * (2 + 4) / 2) and t3["damagePenalty"] == pytest.approx(-1.0 / 2)


def test_R116_no_siphon_death_penalty_without_siphon_enemy():
    s = make_state(player=(0, 0), exit=(5, 5), stage=1, hp=1,
                   enemies=[{"type": "daemon", "pos": (1, 1)}])
    _, s2, r, term, info = step(s, RIGHT)
    assert bool(term) and nonzero_terms(info) == {"step": -0.01, "damagePenalty": -1.0}


def test_R121_D5_invalid_actions_terminate_without_change():
    s = make_state(player=(0, 0), exit=(5, 5), blocks=[{"pos": (0, 1)}], owned=["WAIT"], energy=0)
    for a in (RIGHT, LEFT, DOWN, SIPHON, 5 + 5, 5 + 6, 28, -1):     # WAIT unaffordable, DEBUG not owned
        _, s2, r, term, info = step(s, a)
        assert bool(term) and bool(info["invalid_action"]) and float(r) == 0.0, a
        assert all(float(v) == 0.0 for v in info["reward_terms"].values())
        for k in s.__dataclass_fields__:
            if k != "time":
                assert np.array_equal(np.asarray(getattr(s, k)), np.asarray(getattr(s2, k))), (a, k)


def test_R37_R38_mask():
    s = make_state(player=(0, 0), exit=(5, 5), blocks=[{"pos": (0, 1)}, {"pos": (1, 0)}],
                   enemies=[{"type": "glitch", "pos": (1, 0)}], owned=["WAIT", "SIPH+"], credits=9, energy=9)
    obs, _, _, _, _ = step(make_state(), UP)  # compile path shared
    from hephaestus.envs.hackmatrix.observe import action_mask
    m = np.asarray(action_mask(s))
    assert m.tolist()[:5] == [True, False, False, False, False]   # up: block with enemy; siphon: 0
    assert np.flatnonzero(m[5:]).tolist() == [5, 11]               # owned + affordable: WAIT, SIPH+
    _, s2, _, _, info = step(s, UP)                               # attacks the glitch on the block
    assert int(s2.player_pos) == 0 and enemies(s2)[0][2] == 1
    assert np.array_equal(np.asarray(info["action_mask"]), np.asarray(action_mask(s2)))


def test_R52_R53_step_active_skips_the_whole_enemy_phase():
    s = make_state(player=(0, 0), exit=(5, 5), step_active=True, turn=11, next_sched_turn=12,
                   pending_siphon=2, enemies=[{"type": "daemon", "pos": (3, 3), "stunned": True}],
                   transmissions=[{"pos": (4, 4), "turns": 1}])
    _, s2, _, _, _ = step(s, UP)
    assert int(s2.player_pos) == cell(1, 0) and not bool(s2.step_active)
    assert int(s2.turn) == 11 and int(s2.pending_siphon) == 2 and int(s2.history_len) == 0
    assert enemies(s2) == [(D, (3, 3), 3, 0, True, False, False)]      # stun not cleared
    assert transmissions(s2) == [((4, 4), 1, 0, False, False)]         # no tick
    _, s3, _, _, _ = step(s2, UP)                                      # next phase runs
    assert int(s3.turn) == 12 and int(s3.pending_siphon) == 0 and int(s3.history_len) == 1
    assert sum(t[4] for t in transmissions(s3)) == 2                   # R50: pending placed now
    assert sum(t[3] for t in transmissions(s3)) == 1                   # R60 scheduled spawn


def test_R59_R3_hatched_enemies_appended_in_transmission_order():
    s = make_state(player=(0, 0), exit=(5, 5),
                   enemies=[{"type": "daemon", "pos": (5, 0), "disabled": 5}],
                   transmissions=[{"pos": (3, 5), "turns": 1, "type": "glitch"},
                                  {"pos": (5, 3), "turns": 4, "type": "virus"},
                                  {"pos": (2, 4), "turns": 1, "type": "cryptog"}])
    _, s2, _, _, _ = step(s, UP)
    assert [(e[0], e[1]) for e in enemies(s2)] == [(D, (5, 0)), (G, (3, 5)), (C, (2, 4))]
    assert transmissions(s2) == [((5, 3), 3, V, False, False)]


def test_R32_D8_all_attempts_fail_gives_no_blocks():
    import jax.numpy as jnp
    from hephaestus.envs.hackmatrix import pathfinding as pf
    from hephaestus.envs.hackmatrix.generate import gen_positions
    elig = np.zeros(36, bool)
    elig[[cell(0, 4), cell(1, 5)]] = True        # blocking both isolates corner (0,5): never valid
    lo, hi = pf.pack(jnp.asarray(elig))
    out = gen_positions(jnp.bool_(True), jnp.uint32(7), lo, hi, jnp.int32(2), jnp.int32(2), jnp.int32(35))
    assert not np.asarray(pf.unpack(out)).any()
    elig[cell(2, 2)] = True                      # now {(2,2), one of the two} is valid
    lo, hi = pf.pack(jnp.asarray(elig))
    out = np.asarray(pf.unpack(gen_positions(jnp.bool_(True), jnp.uint32(7), lo, hi, jnp.int32(3),
                                             jnp.int32(2), jnp.int32(35))))
    assert out.sum() == 2 and out[cell(2, 2)]
