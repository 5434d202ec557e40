"""API contract, observation layout (R95-R102), generation (R25-R35) and rollout properties."""
import functools

import pytest

import jax
import jax.numpy as jnp
import numpy as np

from hephaestus.envs import spaces
from hephaestus.envs.hackmatrix import EnvParams, EnvState, HackMatrix, make_state, render_text
from hephaestus.envs.hackmatrix.constants import (
    BLOCK, CORNERS, DATA_SIPHON, EMPTY, EXIT, IS_CORNER, PROGRAM_SPAWN,
)
from hephaestus.envs.hackmatrix.observe import OBS_QUANTA, observation
from hephaestus.envs.hackmatrix.state import REWARD_TERMS
from hephaestus.core.obs_storage import ObsStorage

from hm_helpers import ENV, PARAMS, ROLL_B, ROLL_T, py_bfs_connected, random_rollout, resets, step_with_key

# One worker runs this module and test_programs.py, so the resets and the random rollout they share compile once
# (hm_helpers.py, tests/conftest.py).
pytestmark = pytest.mark.xdist_group("hackmatrix")

B, T = ROLL_B, ROLL_T


def gi(r, c, ch):
    return 33 + (6 * r + c) * 42 + ch


@functools.lru_cache(maxsize=None)
def _rollout():
    """The shared random rollout (hm_helpers.random_rollout) from the first B of the cached new games."""
    start = jax.tree.map(lambda x: x[:B], resets()[1])
    return random_rollout(jax.random.key(7), start)


def test_api_contract():
    env = HackMatrix()
    assert env.num_actions == 28 and env.name == "HackMatrix"
    assert isinstance(env.action_space(PARAMS), spaces.Discrete) and env.action_space(PARAMS).n == 28
    assert env.observation_space(PARAMS).spaces["obs"].shape == (1545,)
    # gymnax's space contract, as envs/spaces.py copies it: samples lie in their space
    action = env.action_space(PARAMS).sample(jax.random.PRNGKey(0))
    assert action.shape == () and 0 <= int(action) < 28 and bool(env.action_space(PARAMS).contains(action))
    assert not bool(env.action_space(PARAMS).contains(jnp.int32(28)))
    sample = env.observation_space(PARAMS).sample(jax.random.PRNGKey(1))
    assert sample["obs"].shape == (1545,) and sample["action_mask"].shape == (28,)
    p = env.default_params
    assert isinstance(p, EnvParams) and p.max_steps_in_episode == 1000
    obs, st = resets()
    assert obs["obs"].shape == (96, 1545) and obs["obs"].dtype == np.float32
    assert obs["action_mask"].shape == (96, 28) and obs["action_mask"].dtype == np.bool_
    assert isinstance(st, EnvState)
    # strongly typed leaves only: int32 / bool / uint32-free, no weak types
    s0 = make_state()
    for k in s0.__dataclass_fields__:
        v = getattr(s0, k)
        assert isinstance(v, jax.Array) and not v.weak_type, k
        assert v.dtype in (jnp.int32, jnp.bool_, jnp.float32), (k, v.dtype)
        assert getattr(st, k).dtype == v.dtype and getattr(st, k).shape[1:] == v.shape, k


def test_rollout_properties_and_reward_sums():
    o = _rollout()
    obs = o["obs"]["obs"]
    assert obs.shape == (T, B, 1545) and obs.dtype == np.float32
    assert np.isfinite(obs).all() and (obs >= 0).all()
    capped = np.ones(1545, bool)
    capped[[6, 7]] = False                                  # R96: siphons/10, (attack-1)/2 uncapped
    assert (obs[..., capped] <= 1.0 + 1e-6).all()
    # masked policy never plays an invalid action
    assert not o["invalid"].any()
    assert np.array_equal(o["mask_in_info"], o["final_obs"]["action_mask"])
    # sampled actions came from the observed mask; episodes do end and reset
    assert (o["te"] | o["tr"]).any()
    st = o["st"]
    assert ((st.hp >= 0) & (st.hp <= 3)).all()
    # reward == sum of terms (exactly the float32 sum in REWARD_TERMS order)
    tot = np.zeros_like(o["r"])
    for k in REWARD_TERMS:
        tot = tot + o["terms"][k]
    assert np.allclose(tot, o["r"], atol=1e-5)
    assert (np.abs(o["terms"]["step"] + 0.01) < 1e-7).all()
    # occupancy invariants: entities never share a cell, never on the player cell or on a block (only glitches may
    # stand on blocks), in a game where no PUSH, PULL or UNDO has been played: those may break it (R71's quirk, R72,
    # restored states). A new game owns no program, but one siphoned from a block can be played at once.
    breaks = np.isin(o["action"], (5, 6, 14))  # PUSH, PULL, UNDO
    exempt, checked = np.zeros(B, bool), 0
    for t in range(T):
        exempt |= breaks[t]
        for b in np.nonzero(~exempt)[0]:
            checked += 1
            act = st.ent_active[t, b]
            pos = st.ent_pos[t, b][act]
            assert len(set(pos.tolist())) == len(pos), (t, b)
            assert st.player_pos[t, b] not in pos.tolist(), (t, b)
            on_block = st.content[t, b][st.ent_pos[t, b]] == BLOCK
            ok = ~act | ~on_block | (st.ent_enemy[t, b] & (st.ent_type[t, b] == 2))
            assert ok.all(), (t, b)
        exempt &= ~(o["te"][t] | o["tr"][t])  # the next state is a new game
    assert checked > T * B // 2 and breaks.any()  # most steps checked; some games did play them
    # episodes end by death/termination only with terminated flags; stage info is in range
    assert ((o["stage"] >= 1) & (o["stage"] <= 8)).all()
    # the observation is that of the post-step state (R95): recompute from the returned state
    t, b = T - 1, 0
    s_tb = jax.tree.map(lambda x: x[t, b], st)
    ref = np.asarray(observation(s_tb))
    bad = np.nonzero(np.abs(ref - obs[t, b]) > 1e-6)[0]
    assert bad.size == 0, (bad, ref[bad], obs[t, b][bad])


def test_observations_store_exactly_in_uint8():
    """obs * OBS_QUANTA is an integer in 0..255 and the uint8 round trip gives the same float32 bits, over
    random rollouts (auto-reset and final observations included) and a state with every value at its top."""
    o = _rollout()
    extreme = make_state(
        player=(5, 5), hp=3, credits=99, energy=250, siphons=25, stage=8, attack=3, owned=range(23),
        show_activated=True, sched_disabled=True, exit=(0, 0), data_siphons=[(4, 4)],
        blocks=[{"pos": (2, 2), "kind": "data", "points": 9, "spawn": 9},
                {"pos": (2, 3), "kind": "program", "program": 22, "spawn": 9, "siphoned": True}],
        resources={(1, 1): ("credits", 3), (1, 2): ("energy", 3)}, siphon_centers=[(1, 1)],
        enemies=[{"type": t, "pos": (3, t), "hp": 2, "stunned": True, "siphon": True} for t in range(4)],
        transmissions=[{"pos": (4, 0), "turns": 9}])
    samples = [o["obs"]["obs"].reshape(-1, 1545), o["final_obs"]["obs"].reshape(-1, 1545), resets()[0]["obs"],
               np.asarray(observation(extreme))[None]]
    obs = np.concatenate(samples)
    scaled = obs * np.asarray(OBS_QUANTA, np.float32)
    assert np.abs(scaled - np.round(scaled)).max() < 1e-3
    assert np.round(scaled).min() >= 0 and np.round(scaled).max() <= 255
    assert np.round(scaled[-1]).max() == 50                 # credits and energy at their cap (R96)
    storage = ObsStorage("uint8", OBS_QUANTA)
    stored = jax.jit(storage.to_storage)(obs)
    assert stored.dtype == jnp.uint8
    np.testing.assert_array_equal(np.asarray(jax.jit(storage.from_storage)(stored)).view(np.uint32), obs.view(np.uint32))
    # A quantum that does not fit (hp / 3 stored with quantum 2) does not round-trip: the check above can fail.
    assert set(np.unique(obs[:, 2] * 3)) > {3.0}             # some observed hp below 3
    wrong = ObsStorage("uint8", tuple(2 if i == 2 else q for i, q in enumerate(OBS_QUANTA)))
    assert not np.array_equal(np.asarray(wrong.from_storage(wrong.to_storage(obs))), obs)


def test_obs_board_places_the_player_for_the_ego_encoder():
    """HackMatrix's `obs_board` (rows, cols and the features holding the player's row and column) is right: over
    random rollouts the ego window's centre is the player's cell, and the exit sits at its offset from him."""
    from hephaestus.core.networks import player_window
    o = _rollout()
    obs, pos, exit_pos = o["obs"]["obs"].reshape(-1, 1545), o["st"].player_pos.ravel(), o["st"].exit_pos.ravel()
    window = np.asarray(player_window(obs, HackMatrix.obs_board))
    assert window.shape == (len(obs), 121)
    np.testing.assert_array_equal(window[:, 60], pos)
    offset = 60 + (exit_pos // 6 - pos // 6) * 11 + (exit_pos % 6 - pos % 6)
    np.testing.assert_array_equal(window[np.arange(len(obs)), offset], exit_pos)
    exit_channel = obs[:, 33:].reshape(-1, 36, 42)[:, :, 40]  # (R98) the exit flag, one cell per board
    np.testing.assert_array_equal(exit_channel[np.arange(len(obs)), exit_pos], 1.0)


@pytest.mark.heavy
def test_R68_D6_step_with_auto_reset_equals_step_env_then_reset_env_lane_by_lane():
    """The training pipeline's adapter (batched, eight lanes) and HackMatrix.step (gymnax's API, a lane at a time)
    generate the next stage's level and the new games in one compacted call (env.step_and_reset). Lane by lane
    each must equal step_env with the step key, then
    reset_env with the reset key where the episode ended: for a lane that only steps, only completes a stage,
    only ends (step limit D6, invalid action R121), and completes a stage on its last allowed step (R68 + D6:
    the observation it ended on is the new stage's, then a new game). Eight lanes make two groups of work
    items (the cap is the batch size), so a lane's two items also fall into different groups."""
    from hephaestus.envs.registry import make_env

    adapted = make_env("hackmatrix")
    at_exit = dict(player=(4, 5), exit=(5, 5))
    lanes = [(make_state(player=(0, 0), time=999), 0),      # 0: step limit -> new game
             (make_state(player=(0, 0), time=5), 0),        # 1: a move
             (make_state(**at_exit, time=5), 0),            # 2: onto the exit -> stage 2
             (make_state(**at_exit, time=999), 0),          # 3: stage 2 and the step limit
             (make_state(player=(0, 0), time=5), 5)]        # 4: PUSH, not owned: invalid, terminated
    lanes += [lanes[3]] * 3                                 # 5-7: as 3
    states = jax.tree.map(lambda *x: jnp.stack(x), *[s for s, _ in lanes])
    actions = jnp.asarray([a for _, a in lanes], jnp.int32)
    keys = jax.random.split(jax.random.PRNGKey(3), len(lanes))
    new, step = jax.jit(jax.vmap(adapted.step))(keys, states, actions)
    assert step.terminated.tolist() == [False, False, False, False, True, False, False, False]
    assert step.truncated.tolist() == [True, False, False, True, False, True, True, True]
    reset_env = jax.jit(ENV.reset_env)
    stages = []
    for lane, (s, a) in enumerate(lanes):
        key_step, key_reset = jax.random.split(keys[lane])
        landed_obs, landed, reward, terminated, _ = step_with_key(key_step, s, a)  # the suite's shared step_env
        done = bool(step.terminated[lane] | step.truncated[lane])
        want_obs, want = reset_env(key_reset, PARAMS) if done else (landed_obs, landed)
        # gymnax's API, env.step, unbatched and called as the README's example calls it (a typed key, a Python int
        # action): one program for both, compiled here, first in the group (tests/test_readme.py reads it back)
        g_obs, g_state, g_reward, g_term, g_trunc, g_info = ENV.step(jax.random.wrap_key_data(keys[lane]), s, a, PARAMS)
        for got in (jax.tree.map(lambda x: x[lane], new), g_state):
            for name in got.__dataclass_fields__:
                np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=f"{lane} {name}")
        np.testing.assert_array_equal(step.obs[lane], want_obs["obs"])
        np.testing.assert_array_equal(step.action_mask[lane], want_obs["action_mask"])
        np.testing.assert_array_equal(g_obs["obs"], want_obs["obs"])
        np.testing.assert_array_equal(step.final_obs[lane], landed_obs["obs"])
        np.testing.assert_array_equal(g_info["final_observation"]["obs"], landed_obs["obs"])
        assert float(step.reward[lane]) == float(g_reward) == float(reward)
        assert bool(g_term) == bool(terminated) and bool(g_trunc) == bool(step.truncated[lane])
        assert int(g_info["stage"]) == int(landed.stage)
        stages.append(int(g_info["stage"]))
        if lane == 0:  # D6: the step limit truncates, it does not terminate, and the game restarts (time 0)
            assert bool(g_trunc) and not bool(g_term) and bool(g_info["truncated"]) and int(g_state.time) == 0
    assert stages == [1, 1, 2, 2, 1, 2, 2, 2]
    assert int(new.stage[2]) == 2 and int(new.time[2]) == 6 and int(new.time[0]) == 0


def test_R25_R35_reset_and_generation_properties():
    obs, st = resets()
    n = st.hp.shape[0]
    seen_counts = set()
    for i in range(n):
        s = jax.tree.map(lambda x: x[i], st)
        p = int(s.player_pos)
        assert p in CORNERS.tolist()                                           # R25
        bonus = (int(s.credits) == 10, int(s.energy) == 11, int(s.siphons) == 1)
        assert sum(bonus) == 1 and int(s.credits) + int(s.energy) + int(s.siphons) in (10, 11, 1)  # R26
        assert (int(s.stage), int(s.turn), int(s.sched_interval), int(s.next_sched_turn)) == (1, 0, 12, 12)
        content = np.asarray(s.content)
        ex = int(s.exit_pos)
        assert ex in CORNERS.tolist() and ex != p and content[ex] == EXIT       # R29
        others = [c for c in CORNERS.tolist() if c not in (p, ex)]
        assert all(content[c] == DATA_SIPHON for c in others) and content[p] == EMPTY
        blocks = set(np.nonzero(content == BLOCK)[0].tolist())
        seen_counts.add(len(blocks))
        assert 5 <= len(blocks) <= 11                                          # R30 (0 only if 100 fail)
        assert not any(IS_CORNER[c] for c in blocks)                           # R6
        assert py_bfs_connected(blocks, ex)                                    # R32(a)
        for c in blocks:                                                       # R32(b)
            r, k = divmod(c, 6)
            nbs = [(r + dr) * 6 + k + dc for dr, dc in ((1, 0), (-1, 0), (0, -1), (0, 1))
                   if 0 <= r + dr < 6 and 0 <= k + dc < 6]
            assert any(nb not in blocks for nb in nbs)
        data = np.asarray(s.blk_data)
        pts = np.asarray(s.blk_points)
        progs = [int(s.blk_program[c]) for c in blocks if not data[c]]
        assert len(progs) == len(set(progs))                                   # R31 distinct programs
        for c in blocks:
            if data[c]:
                assert 1 <= pts[c] <= 9 and int(s.blk_spawn[c]) == pts[c]      # R33
            else:
                assert int(s.blk_spawn[c]) == PROGRAM_SPAWN[int(s.blk_program[c])]
        amt = np.asarray(s.res_credits) + np.asarray(s.res_energy)
        has = (content == EMPTY) | (content == DATA_SIPHON)                    # R34
        assert ((amt >= 1) & (amt <= 3))[has].all() and (amt[~has] == 0).all()
        assert not ((np.asarray(s.res_credits) > 0) & (np.asarray(s.res_energy) > 0)).any()
        act = np.asarray(s.ent_active)
        assert act.sum() == 1 and not s.ent_enemy[act].any()                   # R35: one transmission
        tpos = int(s.ent_pos[act][0])
        assert tpos != p and content[tpos] != BLOCK and int(s.ent_turns[act][0]) == 1
    assert len(seen_counts) >= 4                                               # block counts vary


def test_R98_R101_observation_channels():
    s = make_state(
        player=(2, 2), hp=2, credits=60, energy=5, siphons=3, attack=4, stage=3, owned=["CRASH"],
        exit=(5, 5), data_siphons=[(0, 0)],
        blocks=[{"pos": (4, 4), "kind": "data", "points": 6},
                {"pos": (4, 3), "kind": "program", "program": "HACK", "siphoned": True, "spawn": 0},
                {"pos": (3, 4), "kind": "question", "payload": "program", "program": "ROW"}],
        resources={(0, 1): ("energy", 3), (1, 1): ("credits", 2)},
        enemies=[{"type": "cryptog", "pos": (2, 5)}, {"type": "cryptog", "pos": (0, 4)},
                 {"type": "glitch", "pos": (4, 4), "stunned": True, "siphon": True, "hp": 1}],
        transmissions=[{"pos": (1, 3), "turns": 2}], siphon_centers=[(1, 1)],
    )
    o = np.asarray(observation(s))
    assert o.shape == (1545,)
    np.testing.assert_allclose(o[:10], [2 / 5, 2 / 5, 2 / 3, 1.0, 0.1, 2 / 7, 0.3, 1.5, 0, 0], rtol=1e-6)
    assert o[10 + 2] == 1 and o[10:33].sum() == 1
    assert o[gi(2, 5, 3)] == 1 and abs(o[gi(2, 5, 4)] - 2 / 3) < 1e-6      # cryptog in row: visible
    assert o[gi(0, 4, 0):gi(0, 4, 7)].sum() == 0                              # hidden cryptog (R101)
    assert o[gi(4, 4, 2)] == 1 and o[gi(4, 4, 5)] == 1 and o[gi(4, 4, 6)] == 1
    assert o[gi(4, 4, 7)] == 1 and abs(o[gi(4, 4, 10)] - 6 / 9) < 1e-6 and abs(o[gi(4, 4, 35)] - 6 / 9) < 1e-6
    assert o[gi(4, 3, 8)] == 1 and o[gi(4, 3, 11)] == 1 and o[gi(4, 3, 12 + 22)] == 1 and o[gi(4, 3, 35)] == 0
    q = o[gi(3, 4, 0):gi(3, 4, 42)]
    assert q[9] == 1 and q.sum() == 1                                         # payload hidden (R102)
    assert abs(o[gi(1, 3, 36)] - 0.5) < 1e-6
    assert o[gi(0, 1, 38)] == 1 and abs(o[gi(1, 1, 37)] - 2 / 3) < 1e-6
    assert o[gi(0, 0, 39)] == 1 and o[gi(5, 5, 40)] == 1 and o[gi(1, 1, 41)] == 1
    s2 = s.replace(show_activated=jnp.bool_(True))
    assert np.asarray(observation(s2))[gi(0, 4, 3)] == 1                      # SHOW reveals (R20)


def test_render_and_make_state_defaults():
    s = make_state(player=(0, 0), enemies=[{"type": "virus", "pos": (3, 3)}],
                   transmissions=[{"pos": (1, 1), "turns": 2}], blocks=[{"pos": (2, 2), "points": 7}])
    txt = render_text(s)
    lines = txt.splitlines()
    assert lines[0].startswith("5 |") and "EX" in lines[0]                   # row 5 on top
    assert "@" in lines[5] and "V2" in lines[2] and "t2" in lines[4] and "D7" in lines[3]
    assert "HP 3/3" in txt and "stage 1" in txt
    assert int(s.exit_pos) == 35 and int(s.sched_interval) == 12 and int(s.next_sched_turn) == 12
    assert "active: -" in txt and "undo stack 0" in txt
    flagged = render_text(make_state(owned=["CALM"], sched_disabled=True, step_active=True, history=[s, s]))
    assert "programs: CALM  active: CALM, STEP" in flagged and "undo stack 2" in flagged


def test_nested_vmap_and_jit_reset():
    keys = jax.random.split(jax.random.key(3), 6).reshape(2, 3)
    obs, st = jax.jit(jax.vmap(jax.vmap(ENV.reset, in_axes=(0, None)), in_axes=(0, None)))(keys, PARAMS)
    assert obs["obs"].shape == (2, 3, 1545)
    nb = (np.asarray(st.content) == BLOCK).sum(-1)
    assert ((nb >= 5) & (nb <= 11)).all()


def test_curriculum_starts_a_share_of_games_on_later_stages_and_share_zero_is_the_rules_game():
    """EnvParams.curriculum_share (a training curriculum, issue 22): that share of new games starts on a stage
    uniform in 2..curriculum_max_stage with that stage's scheduled-task interval (R68) and starting transmissions
    (R35) and a player's resources (programs with curriculum_program_prob per skipped stage, none at 0); share 0
    is exactly the game of the rules, whatever the maximum stage; the
    auto-reset of a step starts its new games the same way as reset_env."""
    from hephaestus.envs.hackmatrix.generate import CURRICULUM_RESOURCES_PER_STAGE, new_game

    keys = jax.random.split(jax.random.key(5), 256)
    reset = jax.jit(jax.vmap(ENV.reset_env, in_axes=(0, None)))
    rules = jax.device_get(jax.jit(jax.vmap(new_game))(keys))  # the game without any curriculum argument
    _, off = jax.device_get(reset(keys, PARAMS.replace(curriculum_max_stage=8)))
    for name in rules.__dataclass_fields__:
        np.testing.assert_array_equal(getattr(off, name), getattr(rules, name), err_msg=name)

    _, half = jax.device_get(reset(keys, PARAMS.replace(curriculum_share=0.5, curriculum_max_stage=4)))
    stage = np.asarray(half.stage)
    late = stage > 1
    assert 0.4 < late.mean() < 0.6 and set(stage[late].tolist()) == {2, 3, 4}
    np.testing.assert_array_equal(half.start_stage, stage)   # R110 then charges only the stages cleared after it
    np.testing.assert_array_equal(half.sched_interval, 13 - stage)                     # R68
    np.testing.assert_array_equal(half.next_sched_turn, 13 - stage)                    # R28
    np.testing.assert_array_equal(np.asarray(half.ent_active).sum(-1), stage)          # R35: `stage` transmissions
    for name in ("credits", "energy", "siphons", "owned", "player_pos", "content"):  # early starts: the rules' game
        np.testing.assert_array_equal(getattr(half, name)[~late], getattr(rules, name)[~late], err_msg=name)
    gained = np.asarray(half.credits) + np.asarray(half.energy) - np.asarray(rules.credits) - np.asarray(rules.energy)
    assert (gained[late] <= 2 * CURRICULUM_RESOURCES_PER_STAGE * (stage[late] - 1)).all() and gained[late].mean() > 4
    assert np.asarray(half.owned)[late].sum() > 0 and not np.asarray(half.owned)[~late].any()
    # curriculum_program_prob 0: programs only by siphoning; the same late starts, stages and resources
    _, bare = jax.device_get(reset(keys, PARAMS.replace(curriculum_share=0.5, curriculum_program_prob=0.0)))
    assert not np.asarray(bare.owned).any()
    for name in ("stage", "credits", "energy", "siphons", "player_pos"):
        np.testing.assert_array_equal(getattr(bare, name), getattr(half, name), err_msg=name)

    # the auto-reset: a lane at the step limit starts its new game as reset_env does with the reset key
    params = PARAMS.replace(curriculum_share=1.0, curriculum_max_stage=8)
    state = make_state(player=(0, 0), time=999)
    key = jax.random.key(11)
    # env.step is step_and_reset, jitted, called as R68 and the README's example call it: one program, compiled once
    # in this xdist group (by R68, which runs first: tests/test_readme.py then reads it from the compilation cache).
    _, new, *_ = ENV.step(key, state, 0, params)
    _, want = jax.jit(ENV.reset_env)(jax.random.split(key)[1], params)
    for name in want.__dataclass_fields__:
        np.testing.assert_array_equal(getattr(new, name), getattr(want, name), err_msg=name)
    assert int(new.stage) >= 2
