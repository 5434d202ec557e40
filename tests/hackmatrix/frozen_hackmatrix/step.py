"""One environment step (R39-R50, R68-R69) and the reward (R103-R120)."""
import jax.numpy as jnp

from . import pathfinding as pf
from .constants import (
    A_RESET, A_SIPHON, A_UNDO, A_WAIT, BIG, BLOCK, CROSS, DATA_SIPHON, DEATH_PENALTY_SUMS, EMPTY, ENEMY_NAMES, EXIT,
    NBR_IDX, NUM_ACTIONS, NUM_PROGRAMS, PROGRAM_NAMES, RAY_IDX, RAY_INB, STAGE_REWARDS,
)
from .enemies import enemies_beside_player, enemy_phase
from . import rng
from .compact import compacted
from .generate import enemy_transmission_at, initialize_stage_seeded
from .history import push_pop
from .observe import action_mask
from .programs import damage_enemies, run_program_where
from .state import REWARD_TERMS, select

i32 = jnp.int32
f32 = jnp.float32


def blocks_bits(state):
    return pf.pack(state.content == BLOCK)


def exit_dist(state):
    return pf.exit_distance(state.player_pos, state.exit_pos, blocks_bits(state))


# ----------------------------------------------------------------------------- move/attack
def move_or_attack(state, d):
    """R41-R45. Returns (state, kills, pickup, reached_exit)."""
    p = state.player_pos
    idx = jnp.asarray(RAY_IDX)[p, d]
    inb = jnp.asarray(RAY_INB)[p, d]
    enemy_at, trans_at = enemy_transmission_at(state)
    t_on = trans_at[idx] & inb
    e_on = enemy_at[idx] & inb
    b_on = (state.content[idx] == BLOCK) & inb
    stop = ~inb | t_on | e_on | b_on
    k = jnp.argmax(stop)                         # first stopping cell (a ray always stops at the edge)
    cell = idx[k]
    hit_t = stop[k] & t_on[k]
    hit_e = stop[k] & ~t_on[k] & e_on[k]
    # target = first entity (list order) of that kind on the cell
    kind = jnp.where(hit_t, ~state.ent_enemy, state.ent_enemy)
    match = state.ent_active & kind & (state.ent_pos == cell) & (hit_t | hit_e)
    slot = jnp.argmin(jnp.where(match, state.ent_order, BIG))
    has_target = jnp.any(match)
    hit = (jnp.arange(match.shape[0]) == slot) & has_target
    attacked, kills = damage_enemies(state, hit & hit_e, state.attack)
    destroyed = hit & hit_t                                  # a transmission has no HP (R23)
    attacked = attacked.replace(ent_active=attacked.ent_active & ~destroyed)
    kills = kills + jnp.sum(destroyed & ~state.ent_sched, dtype=i32)
    # move (R43, R44, R45)
    dest = jnp.asarray(NBR_IDX)[p, d]
    pickup = state.content[dest] == DATA_SIPHON
    moved = state.replace(
        player_pos=dest,
        siphons=state.siphons + pickup.astype(i32),
        content=state.content.at[dest].set(jnp.where(pickup, EMPTY, state.content[dest])),
    )
    reached = state.content[dest] == EXIT
    out = select(has_target, attacked, moved)
    return out, kills, pickup & ~has_target, reached & ~has_target


# ----------------------------------------------------------------------------- siphon
def _cross_agg(x, op):
    """Aggregate a per-cell [36] array over each cell's siphon cross (R47) with ``op``."""
    g = jnp.pad(x.reshape(6, 6), 1)     # zero border = out of bounds (identity for + and |)
    c = g[1:-1, 1:-1]
    return op(op(op(op(c, g[2:, 1:-1]), g[:-2, 1:-1]), g[1:-1, :-2]), g[1:-1, 2:]).reshape(36)


def siphon_quality_missed(state):
    """R117: (missedC + missedN) of the best dominating position, 0 if none dominates."""
    block = state.content == BLOCK
    cross = jnp.asarray(CROSS)                                  # [p, q]
    live = ~state.siphoned
    data_pay = block & live & state.blk_data                   # question payloads included
    prog_pay = block & live & ~state.blk_data & ~state.owned[state.blk_program]
    dval = jnp.where(data_pay, jnp.left_shift(1, 3 * (state.blk_points - 1)), 0)  # base-8 multiset code
    pbit = jnp.where(prog_pay, jnp.left_shift(1, state.blk_program), 0)
    cval = jnp.where(~block & live, state.res_credits, 0)
    nval = jnp.where(~block & live, state.res_energy, 0)
    add = lambda a, b: a + b
    D = _cross_agg(dval, add)
    C = _cross_agg(cval, add)
    N = _cross_agg(nval, add)
    P = _cross_agg(pbit, jnp.bitwise_or)
    D, C, N, P = (jnp.where(block, 0, v) for v in (D, C, N, P))
    me = state.player_pos
    cur_has = (D[me] != 0) | (P[me] != 0)
    B = block & live & cross[me]                               # unsiphoned blocks in current cross
    covers = _cross_agg(B.astype(i32), add) == jnp.sum(B, dtype=i32)  # cross(q) contains all of B
    cand = ~block & jnp.where(cur_has, covers, True)
    dom = cand & (D == D[me]) & (P == P[me]) & (C >= C[me]) & (N >= N[me]) & ((C > C[me]) | (N > N[me]))
    missed_c = jnp.max(jnp.where(dom, C - C[me], 0))
    missed_n = jnp.max(jnp.where(dom, N - N[me], 0))
    return jnp.where(jnp.any(dom), missed_c + missed_n, 0).astype(i32)


def _siphon(state):
    """R47-R49 (quality is evaluated separately on the pre-state)."""
    me = state.player_pos
    block = state.content == BLOCK
    proc = jnp.asarray(CROSS)[me] & ~state.siphoned
    nb = proc & ~block
    bk = proc & block
    gained_prog = jnp.any(bk[:, None] & ~state.blk_data[:, None]
                          & (state.blk_program[:, None] == jnp.arange(NUM_PROGRAMS)), axis=0)
    return state.replace(
        siphon_center=state.siphon_center.at[me].set(True),
        credits=state.credits + jnp.sum(jnp.where(nb, state.res_credits, 0)),
        energy=state.energy + jnp.sum(jnp.where(nb, state.res_energy, 0)),
        res_credits=jnp.where(nb, 0, state.res_credits),
        res_energy=jnp.where(nb, 0, state.res_energy),
        score=state.score + jnp.sum(jnp.where(bk & state.blk_data, state.blk_points, 0)),
        owned=state.owned | gained_prog,
        pending_siphon=state.pending_siphon + jnp.sum(jnp.where(bk, state.blk_spawn, 0)),
        blk_spawn=jnp.where(bk, 0, state.blk_spawn),
        blk_question=jnp.where(bk, False, state.blk_question),
        siphoned=state.siphoned | proc,
        siphons=state.siphons - 1,
        sched_interval=jnp.maximum(4, state.sched_interval - 1),
        next_sched_turn=state.next_sched_turn + 5,
    )


# ----------------------------------------------------------------------------- stage
_generate_compact = compacted(lambda need, state, sd: initialize_stage_seeded(state, sd, need))


def generate_stage_where(need, state, sd):
    """``state`` with the next stage's level generated (R28) where ``need`` (the state already carries the new
    stage number, see ``play``). Level generation never reads or writes the UNDO history (R94 keeps it across
    stages), so the lanes are packed without it (120 words each instead of 1,920) and it is put back."""
    slim = state.replace(history=state.history[:1])
    return _generate_compact(need, slim, slim, sd).replace(history=state.history)


# ----------------------------------------------------------------------------- step
def earned_stage_rewards(state):
    """R110's sum: the stage rewards T[0 .. stage-2] of the stages cleared before the current one, less those of
    the stages a curriculum start skipped (``start_stage`` > 1; not a rule: that player never earned them, and a
    death on a late start should not cost them). ``start_stage`` is 1 in the rules' game, where this is R110's sum."""
    sums = jnp.asarray(DEATH_PENALTY_SUMS)
    return sums[jnp.clip(state.stage - 1, 0, 7)] - sums[jnp.clip(state.start_stage - 1, 0, 7)]


def step(state, action, key, params):
    """Returns (state, reward, terminated, info) for one agent action (R39)."""
    state, next_stage, sd_stage, reward, terminated, info = play(state, action, key, params)
    return generate_stage_where(next_stage, state, sd_stage), reward, terminated, info


def _paid_at_clear(earned, owed, at_clear, reached, valid):
    """(paid now, owed after) of a shaping count earned this step (`earned`, int32, 0 on an invalid action): at
    once, or with `at_clear` (EnvParams.program_*_at_clear) added to what is `owed` since the last clear and paid
    on the step that completes the stage; the caller's death or reset drops what is owed."""
    at_clear = jnp.asarray(at_clear, bool)
    owed = owed + earned
    paid = jnp.where(at_clear, jnp.where(reached, owed, 0), earned)
    return paid, jnp.where(at_clear & ~(reached & valid), owed, 0).astype(i32)


def play(state, action, key, params):
    """Everything of ``step`` except generating the level of a stage the action completed. Returns (state,
    next_stage, stage_seed, reward, terminated, info): where ``next_stage``, ``state`` is the completed stage
    moved to the next stage number (R68), whose level the caller generates with ``stage_seed``
    (``generate_stage_where``, or together with the auto-reset's new games, env.py). Generation touches none
    of what the step does after it (rewards, UNDO push/pop, time), so generating last gives the same state."""
    sd_stage, sd_enemy, sd_program = rng.seeds(key, 3)
    action = jnp.asarray(action, i32)
    mask = action_mask(state)
    in_range = (action >= 0) & (action < NUM_ACTIONS)
    valid = in_range & mask[jnp.clip(action, 0, NUM_ACTIONS - 1)]
    old_dist = exit_dist(state)
    is_siphon = action == A_SIPHON
    is_program = action > A_SIPHON
    d = jnp.clip(action, 0, 3)

    # player part: move/attack, siphon or program (every branch computed, one kept)
    mv, mv_kills, pickup, mv_reached = move_or_attack(state, d)
    sp = _siphon(state)
    pg, pg_kills, pg_reached = run_program_where(is_program & valid, state, action - 5, sd_program)
    st = select(is_program, pg, select(is_siphon, sp, mv))
    kills = jnp.where(is_program, pg_kills, jnp.where(is_siphon, 0, mv_kills))
    pickup = pickup & ~is_siphon & ~is_program
    reached = jnp.where(is_program, pg_reached, mv_reached & ~is_siphon)      # move onto exit or WARP (R74)
    missed = jnp.where(is_siphon, siphon_quality_missed(state), 0)
    # exit (R39.4), else the enemy phase if the action ends the turn (R39.5, R40)
    ends_turn = ~is_program | (action == A_WAIT)
    won = st.replace(hp=jnp.minimum(3, st.hp + 1))
    victory = reached & (st.stage >= 8)
    next_stage = reached & ~victory & valid                                     # R68: the caller generates it
    won = select(next_stage, won.replace(stage=won.stage + 1, sched_interval=13 - (won.stage + 1)), won)  # R28
    phased, dropped, phase_ran = enemy_phase(st, sd_enemy)
    run_phase = ends_turn & ~reached
    st = select(reached, won, select(run_phase, phased, st))
    forget = reached & ~params.undo_across_stages                               # D7 option
    st = st.replace(history_len=jnp.where(forget, 0, st.history_len).astype(i32))
    dropped = jnp.where(run_phase, dropped, 0)
    phase_ran = run_phase & phase_ran

    # reward (§11)
    hp0, hp1 = state.hp, st.hp
    dead = hp1 == 0
    new_dist = exit_dist(st)
    delta = jnp.where(dead, 0, jnp.where(reached, old_dist, old_dist - new_dist))
    stage_idx = jnp.clip(st.stage - 2, 0, 7)
    siphon_spawn_beside = enemies_beside_player(st) & st.ent_siphon
    played_now = (action - 5 == jnp.arange(NUM_PROGRAMS)) & valid              # one-hot of a program played
    first_play = jnp.any(played_now & ~state.played).astype(i32)              # its first play this game
    plays_paid, played_unpaid = _paid_at_clear(first_play, state.played_unpaid, params.program_played_at_clear,
                                               reached, valid)
    acquired_now = jnp.where(valid, jnp.sum(st.owned).astype(i32) - jnp.sum(state.owned).astype(i32), 0)  # UNDO: < 0
    acquired_paid, acquired_unpaid = _paid_at_clear(acquired_now, state.acquired_unpaid,
                                                    params.program_acquired_at_clear, reached, valid)
    terms = {
        "step": -params.step_penalty * jnp.ones((), f32),
        "stage": jnp.where(reached, params.stage_coef * jnp.asarray(STAGE_REWARDS)[stage_idx], 0.0),
        "score": params.score_coef * (st.score - state.score),
        "kills": params.kill_coef * kills,
        "dataSiphon": jnp.where(pickup, params.pickup_reward, 0.0),
        "distance": params.distance_coef * jnp.maximum(delta, 0),
        "victory": jnp.where(victory, params.victory_bonus + params.victory_score_coef * st.score, 0.0),
        "death": jnp.where(dead, -params.death_coef * earned_stage_rewards(st), 0.0),
        "resourceGain": params.resource_gain_coef * ((st.credits - state.credits) + (st.energy - state.energy)),
        "resourceHolding": jnp.where(reached, params.resource_holding_coef * (st.credits + st.energy), 0.0),
        "damagePenalty": -params.damage_coef * jnp.maximum(hp0 - hp1, 0),
        "hpRecovery": params.hp_recovery_coef * jnp.maximum(hp1 - hp0, 0),
        "siphonQuality": -params.siphon_quality_coef * missed,
        "programWaste": jnp.where((action == A_RESET) & (hp0 == 2), -params.program_waste, 0.0),
        "siphonDeathPenalty": jnp.where(dead & jnp.any(siphon_spawn_beside), -params.siphon_death_penalty, 0.0),
        "programAcquired": params.program_acquired_coef * acquired_paid,
        "programPlayed": params.program_played_coef * plays_paid,
    }
    # A late start's rewards on the scale of a fresh game's (EnvParams.curriculum_reward_scale; 1 in the rules' game)
    late = jnp.asarray(params.curriculum_reward_scale, bool) & (state.start_stage > 1)
    scale = jnp.where(late, 1.0 / jnp.asarray(STAGE_REWARDS, f32)[jnp.clip(state.start_stage - 1, 0, 6)], 1.0)
    program_scale = jnp.where(jnp.asarray(params.curriculum_programs_unscaled, bool), 1.0, scale)
    scales = {k: program_scale if k in ("programAcquired", "programPlayed") else scale for k in REWARD_TERMS}
    terms = {k: jnp.where(valid, scales[k] * jnp.asarray(terms[k], f32), jnp.float32(0.0)) for k in REWARD_TERMS}
    reward = jnp.float32(0.0)
    for k in REWARD_TERMS:
        reward = reward + terms[k]
    # invalid action (R121, D5): nothing changes
    st = select(valid, st, state)
    st = st.replace(played=state.played | played_now,                          # per game, whatever UNDO restores
                    played_unpaid=played_unpaid, acquired_unpaid=acquired_unpaid)
    # E7 snapshot of a real enemy phase (R92) or UNDO's pop (R93), after everything else
    st = push_pop(st, valid & phase_ran, valid & (action == A_UNDO))
    st = st.replace(time=state.time + 1)
    terminated = ~valid | dead & valid | victory & valid
    info = {
        "invalid_action": ~valid,
        "victory": victory & valid,
        "dropped_transmissions": jnp.where(valid, dropped, 0).astype(i32),
        "reward_terms": terms,
        "episode_stats": episode_stats(state, st, sp, action, valid, played_now, kills, pickup, reached, dead,
                                       victory),
    }
    return st, next_stage, sd_stage, reward, terminated, info


def episode_stats(before, after, siphoned, action, valid, played, kills, pickup, reached, dead, victory):
    """This step's contribution to each statistic of env.EPISODE_STATS but ``step_limit`` (the env adds it: the
    step limit is the env's truncation). ``after`` is the state the step landed on (``before`` for an invalid
    action), ``siphoned`` the siphon branch's state, ``played`` the one-hot of a valid program action."""
    is_siphon = (action == A_SIPHON) & valid
    # How the episode ended, where it ended in death: the enemies beside the player then (the killer is among
    # them: an attacker does not move, R56) and what the player held unused.
    died = dead & valid
    beside = enemies_beside_player(after)
    beside_type = jnp.any(beside[:, None] & (after.ent_type[:, None] == jnp.arange(len(ENEMY_NAMES))), axis=0)
    stats = {
        "stage_reached": after.stage,
        "stages_cleared": reached & valid,
        "victory": victory & valid,
        "death": dead & valid,
        "invalid_action": ~valid,
        "siphons_used": is_siphon,
        "siphons_collected": pickup & valid,
        "programs_played": jnp.sum(played),
        "programs_owned": jnp.sum(after.owned),
        "credits_gathered": jnp.where(is_siphon, siphoned.credits - before.credits, 0),
        "energy_gathered": jnp.where(is_siphon, siphoned.energy - before.energy, 0),
        "score_gained": jnp.maximum(after.score - before.score, 0),
        "kills": jnp.where(valid, kills, 0),
        "damage_taken": jnp.where(valid, jnp.maximum(before.hp - after.hp, 0), 0),
        **{f"death_beside_{name}": died & beside_type[i] for i, name in enumerate(ENEMY_NAMES)},
        "death_enemies_beside": jnp.where(died, jnp.sum(beside), 0),
        "death_beside_siphon_spawn": died & jnp.any(beside & after.ent_siphon),  # R116's -10 was paid
        "death_holding_siphons": died & (after.siphons > 0),
        "death_holding_programs": died & jnp.any(after.owned),
        **{f"program_{name}": played[i] for i, name in enumerate(PROGRAM_NAMES)},
    }
    return {k: jnp.asarray(v, f32) for k, v in stats.items()}
