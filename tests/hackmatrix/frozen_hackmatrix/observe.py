"""Observation vector (R95-R102) and action mask (R37-R38)."""
import jax.numpy as jnp

from .constants import (
    BIG, BLOCK, CELL_COL, CELL_ROW, CRYPTOG, DAEMON, DATA_SIPHON, EXIT,
    NBR_IDX, NBR_INB, NUM_PROGRAMS, PROGRAM_CREDITS, PROGRAM_ENERGY, VIRUS,
)

f32 = jnp.float32

# Each observation entry is an integer divided by its quantum (R95-R102's normalisations; flags are /1), in
# the order `observation` builds them. The rollout stores obs * quanta in uint8 and decodes with the same
# float32 division, bit for bit (obs_storage.py); tests/hackmatrix check it over random rollouts.
PLAYER_QUANTA = (5, 5, 3, 50, 50, 7, 10, 2, 1, 1)
CELL_QUANTA = ((1,) * 4 + (3, 1, 1)             # enemy type one-hot, hp / 3, stunned, siphon-spawned
               + (1, 1, 1, 9, 1)                # data, program, question, points / 9, siphoned
               + (1,) * NUM_PROGRAMS + (9, 4)   # program one-hot, spawn / 9, transmission turns / 4
               + (3, 3, 1, 1, 1))               # credits / 3, energy / 3, data siphon, exit, siphon centre
OBS_QUANTA = PLAYER_QUANTA + (1,) * NUM_PROGRAMS + CELL_QUANTA * 36


def first_at_cell(state, kind_mask):
    """For each cell: (exists, slot of the first entity in list order (D3) among kind_mask).
    Scatter-min of (order * 64 + slot) keyed by cell (order keys are unique)."""
    ok = kind_mask & state.ent_active
    key = jnp.where(ok, state.ent_order * 64 + jnp.arange(ok.shape[0], dtype=jnp.int32), BIG * 64)
    best = jnp.full(36, BIG * 64, jnp.int32).at[state.ent_pos].min(key)
    return best < BIG * 64, best % 64


def program_rule_mask(state):
    """R38 for all 23 programs: owned, affordable and applicable (§9 table)."""
    en = state.ent_active & state.ent_enemy
    tr = state.ent_active & ~state.ent_enemy
    any_en = jnp.any(en)
    pr, pc = state.player_pos // 6, state.player_pos % 6
    er, ec = state.ent_pos // 6, state.ent_pos % 6
    block = state.content == BLOCK
    near8 = (jnp.maximum(jnp.abs(jnp.asarray(CELL_ROW) - pr), jnp.abs(jnp.asarray(CELL_COL) - pc)) == 1)
    ent_near8 = jnp.any(state.ent_active & (jnp.maximum(jnp.abs(er - pr), jnp.abs(ec - pc)) == 1))
    t = jnp.bool_(True)
    app = jnp.stack([
        any_en, any_en,                                           # PUSH, PULL
        jnp.any(near8 & block) | ent_near8,                       # CRASH
        jnp.any(state.ent_active),                                # WARP
        any_en, t,                                                # POLY, WAIT
        jnp.any(en & block[state.ent_pos]),                       # DEBUG
        jnp.any(en & (er == pr)), jnp.any(en & (ec == pc)),       # ROW, COL
        state.history_len > 0, t, t,                              # UNDO, STEP, SIPH+
        state.credits >= 4, ~state.show_activated, state.hp < 3,  # EXCH, SHOW, RESET
        ~state.sched_disabled,                                    # CALM
        jnp.any(en & (state.ent_type == DAEMON)),                 # D_BOM
        jnp.any(tr),                                              # DELAY
        jnp.any(en & (state.ent_type == VIRUS)),                  # ANTI-V
        state.stage < 8,                                          # SCORE
        jnp.any(block & ~state.siphoned & (state.blk_spawn > 0)),  # REDUC
        state.atk_plus_uses < 2,                                  # ATK+
        jnp.any(state.siphoned),                                  # HACK
    ])
    afford = (state.credits >= jnp.asarray(PROGRAM_CREDITS)) & (state.energy >= jnp.asarray(PROGRAM_ENERGY))
    return state.owned & afford & app


def action_mask(state):
    """bool[28]. Directions per R37, SIPHON and programs per R38."""
    nb = jnp.asarray(NBR_IDX)[state.player_pos]
    inb = jnp.asarray(NBR_INB)[state.player_pos]
    enemy_here, _ = first_at_cell(state, state.ent_enemy)
    nbc = jnp.where(inb, nb, 0)
    dirs = inb & ((state.content[nbc] != BLOCK) | enemy_here[nbc])
    siphon = state.siphons > 0
    progs = program_rule_mask(state)
    return jnp.concatenate([dirs, siphon[None], progs])


def observation(state):
    pr, pc = state.player_pos // 6, state.player_pos % 6
    player = jnp.stack([
        pr / 5.0, pc / 5.0, state.hp / 3.0,
        jnp.minimum(state.credits / 50.0, 1.0), jnp.minimum(state.energy / 50.0, 1.0),
        (state.stage - 1) / 7.0, state.siphons / 10.0, (state.attack - 1) / 2.0,
        state.show_activated.astype(f32), state.sched_disabled.astype(f32),
    ]).astype(f32)
    programs = state.owned.astype(f32)
    # enemies (R101)
    has_e, es = first_at_cell(state, state.ent_enemy)
    etype = state.ent_type[es]
    erow, ecol = jnp.asarray(CELL_ROW), jnp.asarray(CELL_COL)
    visible = (etype != CRYPTOG) | (erow == pr) | (ecol == pc) | state.show_activated
    show_e = has_e & visible
    onehot_e = (etype[:, None] == jnp.arange(4)) & show_e[:, None]
    e_hp = jnp.where(show_e, state.ent_hp[es] / 3.0, 0.0)
    e_stun = show_e & state.ent_stunned[es]
    e_siph = show_e & state.ent_siphon[es]
    # blocks (R98)
    block = state.content == BLOCK
    q = block & state.blk_question
    data = block & ~q & state.blk_data
    prog = block & ~q & ~state.blk_data
    points = jnp.where(data, state.blk_points / 9.0, 0.0)
    bsiph = block & ~q & state.siphoned
    prog_onehot = (state.blk_program[:, None] == jnp.arange(NUM_PROGRAMS)) & prog[:, None]
    spawn = jnp.where(block & ~q, state.blk_spawn / 9.0, 0.0)
    has_t, ts = first_at_cell(state, ~state.ent_enemy)
    trans = jnp.where(has_t, jnp.minimum(state.ent_turns[ts] / 4.0, 1.0), 0.0)
    res_vis = ~block | state.siphoned                                   # R100
    cred = jnp.where(res_vis, state.res_credits / 3.0, 0.0)
    ener = jnp.where(res_vis, state.res_energy / 3.0, 0.0)
    grid = jnp.concatenate([
        onehot_e.astype(f32), e_hp[:, None], e_stun[:, None].astype(f32), e_siph[:, None].astype(f32),
        data[:, None].astype(f32), prog[:, None].astype(f32), q[:, None].astype(f32),
        points[:, None], bsiph[:, None].astype(f32), prog_onehot.astype(f32), spawn[:, None],
        trans[:, None], cred[:, None], ener[:, None],
        (state.content == DATA_SIPHON)[:, None].astype(f32), (state.content == EXIT)[:, None].astype(f32),
        state.siphon_center[:, None].astype(f32),
    ], axis=1).astype(f32)
    return jnp.concatenate([player, programs, grid.reshape(-1)])
