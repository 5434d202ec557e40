"""Game start, stage initialisation, level generation and transmission placement (R25-R35, R62)."""
import jax
import jax.numpy as jnp

from . import pathfinding as pf
from .constants import (
    ATTEMPT_BATCH, BLOCK, BLOCK_ATTEMPTS, CORNERS, DATA_SIPHON, EMPTY, EXIT,
    IS_CORNER, MAX_ENTITIES, NUM_PROGRAMS, PROGRAM_SPAWN, RAY_IDX, RAY_INB,
)
from . import rng
from .history import empty_history
from .state import EnvState

i32 = jnp.int32
_U = jnp.uint32


def occupancy(state):
    """bool[36]: some active enemy or transmission stands on the cell."""
    return jnp.zeros(36, bool).at[state.ent_pos].max(state.ent_active)


def enemy_transmission_at(state):
    enemy = jnp.zeros(36, bool).at[state.ent_pos].max(state.ent_active & state.ent_enemy)
    trans = jnp.zeros(36, bool).at[state.ent_pos].max(state.ent_active & ~state.ent_enemy)
    return enemy, trans


def line_of_fire_cells(state, enemy_at):
    """R62: bool[36], cells sharing the player's row/col with no enemy and no block strictly
    between (transmissions do not stop the trace)."""
    p = state.player_pos
    idx = jnp.asarray(RAY_IDX)[p]      # [4,5]
    inb = jnp.asarray(RAY_INB)[p]
    obst = (enemy_at | (state.content == BLOCK))[idx] & inb
    before = jnp.cumsum(obst.astype(i32), axis=1) - obst.astype(i32)
    ok = inb & (before == 0)
    return jnp.zeros(36, bool).at[idx.reshape(-1)].max(ok.reshape(-1))


def place_transmissions(state, key_seed, count, sched, siphon, turns=1, ctr0=0):
    """Place ``count`` transmissions one by one (R62, D4). Returns (state, n_dropped).

    Each placement is uniform among the eligible cells out of the line of fire, or if there are
    none among the eligible cells in the line of fire (placing a transmission never changes the
    line of fire, which only enemies and blocks stop).  Draws use popcount / select-bit on
    bitboards, one scalar draw per placement.  New entries get increasing list-order keys and the
    lowest free slots; without a free slot or an eligible cell they are dropped (D2).
    ``key_seed`` is a uint32 seed (rng.seed); ``sched`` / ``siphon`` are the new entries' flags,
    one for all or one per placement (bool[36], the j-th placement reads element j)."""
    enemy_at, trans_at = enemy_transmission_at(state)
    eligible = ~(enemy_at | trans_at | (state.content == BLOCK))
    eligible = eligible & (jnp.arange(36) != state.player_pos)
    lof = line_of_fire_cells(state, enemy_at)
    a_lo, a_hi = pf.pack(eligible & ~lof)
    b_lo, b_hi = pf.pack(eligible & lof)
    free = ~state.ent_active
    n_place = jnp.minimum(jnp.minimum(count, jnp.sum(eligible, dtype=i32)), jnp.sum(free, dtype=i32))
    pc = lambda w: jax.lax.population_count(w).astype(i32)
    idx36 = jnp.arange(36, dtype=i32)

    def cond(c):
        return c[0] < n_place

    def body(c):
        j, a_lo, a_hi, b_lo, b_hi, cells = c
        use_a = (pc(a_lo) + pc(a_hi)) > 0
        w_lo = jnp.where(use_a, a_lo, b_lo)
        w_hi = jnp.where(use_a, a_hi, b_hi)
        n = pc(w_lo) + pc(w_hi)
        t = rng.randint(key_seed, ctr0 + j, jnp.maximum(n, 1))
        in_lo = t < pc(w_lo)
        pos = _select_bit(jnp.where(in_lo, w_lo, w_hi), jnp.where(in_lo, t, t - pc(w_lo))).astype(i32)
        cell = (pos // 7 + jnp.where(in_lo, 0, 3)) * 6 + pos % 7
        bb = _U(1) << pos.astype(_U)
        clr_lo = jnp.where(in_lo, ~bb, _U(0xFFFFFFFF))
        clr_hi = jnp.where(in_lo, _U(0xFFFFFFFF), ~bb)
        a_lo, a_hi = jnp.where(use_a, a_lo & clr_lo, a_lo), jnp.where(use_a, a_hi & clr_hi, a_hi)
        b_lo, b_hi = jnp.where(use_a, b_lo, b_lo & clr_lo), jnp.where(use_a, b_hi, b_hi & clr_hi)
        cells = jnp.where(idx36 == j, cell, cells)
        return j + 1, a_lo, a_hi, b_lo, b_hi, cells

    cells = jax.lax.while_loop(cond, body, (jnp.int32(0), a_lo, a_hi, b_lo, b_hi, jnp.zeros(36, i32)))[-1]
    types = rng.randint(key_seed, ctr0 + 64 + idx36, 4)     # type of the j-th placement
    rank = jnp.cumsum(free.astype(i32)) - 1                 # j-th placement -> j-th free slot
    put = free & (rank < n_place)
    rk = jnp.clip(rank, 0, 35)
    per_placement = lambda flag: jnp.broadcast_to(jnp.asarray(flag, bool), (36,))[rk]
    new = dict(
        ent_active=state.ent_active | put,
        ent_enemy=jnp.where(put, False, state.ent_enemy),
        ent_type=jnp.where(put, types[rk], state.ent_type),
        ent_pos=jnp.where(put, cells[rk], state.ent_pos),
        ent_hp=jnp.where(put, 0, state.ent_hp),
        ent_turns=jnp.where(put, turns, state.ent_turns),
        ent_disabled=jnp.where(put, 0, state.ent_disabled),
        ent_stunned=jnp.where(put, False, state.ent_stunned),
        ent_sched=jnp.where(put, per_placement(sched), state.ent_sched),
        ent_siphon=jnp.where(put, per_placement(siphon), state.ent_siphon),
        ent_order=jnp.where(put, state.next_order + rank, state.ent_order),
        next_order=state.next_order + n_place,
    )
    return state.replace(**new), (count - n_place).astype(i32)


# ----------------------------------------------------------------------------- blocks (R30-R32, D8)
def _select_bit(w, t):
    """Bit position of the t-th (0-based) set bit of the uint32 word ``w``."""
    pos = _U(0)
    t = t.astype(_U)
    for width in (16, 8, 4, 2, 1):
        c = jax.lax.population_count((w >> pos) & _U((1 << width) - 1))
        go = t >= c
        pos = jnp.where(go, pos + _U(width), pos)
        t = jnp.where(go, t - c, t)
    return pos


def _attempt(s, a, e_lo, e_hi, n_e, bc):
    """One attempt of R31: ``bc`` distinct cells drawn uniformly one by one from the eligible
    set (rejection of Swift == uniform draw among the remaining eligible cells)."""
    def draw(j, c):
        sel_lo, sel_hi, rem_lo, rem_hi = c
        take = j < bc
        t = rng.randint(s, a * 16 + j, jnp.maximum(n_e - j, 1))
        c_lo = jax.lax.population_count(rem_lo).astype(i32)
        in_lo = t < c_lo
        pos = _select_bit(jnp.where(in_lo, rem_lo, rem_hi), jnp.where(in_lo, t, t - c_lo))
        b = _U(1) << pos
        blo = jnp.where(take & in_lo, b, _U(0))
        bhi = jnp.where(take & ~in_lo, b, _U(0))
        return sel_lo | blo, sel_hi | bhi, rem_lo & ~blo, rem_hi & ~bhi

    # a loop, not 11 unrolled draws: same numbers, a much smaller program to compile
    sel_lo, sel_hi, _, _ = jax.lax.fori_loop(0, 11, draw, (_U(0), _U(0), e_lo, e_hi))
    return sel_lo, sel_hi


def gen_positions(need, s, e_lo, e_hi, n_e, bc, exit_cell):
    """First valid of up to 100 attempts (R32), ATTEMPT_BATCH at a time; (0, 0) if all fail
    or if not ``need``. Under vmap the search stops once every lane has found a layout; lanes
    without ``need`` (the padding of a compacted batch, compact.py) do not search."""
    K = ATTEMPT_BATCH
    n_batches = -(-BLOCK_ATTEMPTS // K)

    def cond(c):
        b, found, _, _ = c
        return need & ~found & (b < n_batches)

    def body(c):
        b, _, _, _ = c
        a = b * K + jnp.arange(K, dtype=i32)
        lo, hi = jax.vmap(lambda aa: _attempt(s, aa, e_lo, e_hi, n_e, bc))(a)
        ok = jax.vmap(lambda l, h: pf.layout_connected((l, h), exit_cell) & pf.siphonable((l, h)))(lo, hi)
        ok = ok & (a < BLOCK_ATTEMPTS)
        j = jnp.argmax(ok)
        return b + 1, jnp.any(ok), lo[j], hi[j]

    _, found, lo, hi = jax.lax.while_loop(cond, body, (jnp.int32(0), jnp.bool_(False), _U(0), _U(0)))
    return jnp.where(found, lo, _U(0)), jnp.where(found, hi, _U(0))


def initialize_stage(state: EnvState, key, need=True) -> EnvState:
    """R28: reset stage globals, fresh grid (corners, blocks, resources), starting transmissions.
    ``need`` = False skips the block search (the caller discards the result)."""
    return initialize_stage_seeded(state, rng.seed(key), need)


def initialize_stage_seeded(state: EnvState, s, need=True) -> EnvState:
    return _initialize_stage(state, jnp.asarray(s, _U), jnp.asarray(need, bool))


# Jitted so that Python traces generation once: it is called from the auto-reset and from the stage advance, and
# each `compacted` call traces its function twice (custom_vmap's own jaxpr and its batched rule), four traces of
# ~0.8 s each otherwise. Inside another jit, the inner one is only a call in the same program.
@jax.jit
def _initialize_stage(state: EnvState, s, need) -> EnvState:
    state = state.replace(
        turn=i32(0), next_sched_turn=state.sched_interval, show_activated=jnp.bool_(False),
        sched_disabled=jnp.bool_(False), step_active=jnp.bool_(False), atk_plus_uses=i32(0))
    cells = jnp.arange(36)
    # R29 corners: exit uniform among the corners other than the player's cell
    corners = jnp.asarray(CORNERS)
    remaining = corners != state.player_pos
    pick = rng.randint(s, 1, jnp.sum(remaining, dtype=i32))
    nth = jnp.cumsum(remaining.astype(i32)) - 1
    exit_cell = jnp.sum(jnp.where(remaining & (nth == pick), corners, 0)).astype(i32)
    is_corner = jnp.asarray(IS_CORNER)
    content = jnp.where(is_corner & (cells != state.player_pos), DATA_SIPHON, EMPTY)
    content = jnp.where(cells == exit_cell, EXIT, content).astype(i32)
    # R30-R32 blocks
    occ = occupancy(state)
    eligible = ~is_corner & ~occ
    n_e = jnp.sum(eligible, dtype=i32)
    block_count = jnp.minimum(5 + rng.randint(s, 2, 7), n_e)
    e_lo, e_hi = pf.pack(eligible)
    sel = pf.unpack(gen_positions(jnp.asarray(need, bool), rng.bits(s, 3), e_lo, e_hi, n_e,
                                  block_count, exit_cell))
    # block types (R31): i.i.d. per block, distinct programs (uniform injective assignment)
    is_data = (rng.bits(s, 100 + cells) & _U(1)) == _U(1)
    is_q = rng.bernoulli16(s, 200 + cells, 0.1)
    pts = 1 + rng.randint(s, 300 + cells, 9)
    prog_rank = rng.rank(rng.uniform(s, 400 + jnp.arange(NUM_PROGRAMS)))   # program -> position
    blk_rank = jnp.cumsum(sel.astype(i32)) - 1                            # block -> position
    prog = jnp.zeros(NUM_PROGRAMS, i32).at[prog_rank].set(jnp.arange(NUM_PROGRAMS, dtype=i32))[
        jnp.clip(blk_rank, 0, NUM_PROGRAMS - 1)]
    content = jnp.where(sel, BLOCK, content).astype(i32)
    spawn = jnp.where(is_data, pts, jnp.asarray(PROGRAM_SPAWN)[prog])
    # R34 resources
    u = rng.uniform(s, 500 + cells)
    amount = jnp.where(u < 0.45, 1, jnp.where(u < 0.9, 2, 3)).astype(i32)
    has_res = (content == EMPTY) | (content == DATA_SIPHON)
    is_cred = (rng.bits(s, 600 + cells) & _U(1)) == _U(1)
    state = state.replace(
        exit_pos=exit_cell,
        content=content,
        blk_data=sel & is_data,
        blk_question=sel & is_q,
        blk_points=jnp.where(sel & is_data, pts, 0).astype(i32),
        blk_program=jnp.where(sel & ~is_data, prog, 0).astype(i32),
        blk_spawn=jnp.where(sel, spawn, 0).astype(i32),
        res_credits=jnp.where(has_res & is_cred, amount, 0).astype(i32),
        res_energy=jnp.where(has_res & ~is_cred, amount, 0).astype(i32),
        siphoned=jnp.zeros(36, bool),
        siphon_center=jnp.zeros(36, bool),
    )
    # R35 starting transmissions
    state, _ = place_transmissions(state, rng.hash32(s ^ _U(0x5EED)), state.stage, False, False)
    return state


def blank_state() -> EnvState:
    """R27 globals with an empty grid and no entities (player at (0,0))."""
    z = lambda: jnp.zeros((), i32)
    N = MAX_ENTITIES
    return EnvState(
        time=z(), player_pos=z(), hp=i32(3), credits=z(), energy=z(), siphons=z(), score=z(),
        attack=i32(1), owned=jnp.zeros(NUM_PROGRAMS, bool),
        played=jnp.zeros(NUM_PROGRAMS, bool), played_unpaid=z(), acquired_unpaid=z(), stage=i32(1),
        start_stage=i32(1), turn=z(),
        sched_interval=i32(12), next_sched_turn=i32(12), pending_siphon=z(), atk_plus_uses=z(),
        history=empty_history(), history_len=z(), history_top=z(),
        show_activated=jnp.bool_(False), sched_disabled=jnp.bool_(False),
        step_active=jnp.bool_(False), exit_pos=i32(35),
        content=jnp.zeros(36, i32), blk_data=jnp.zeros(36, bool), blk_question=jnp.zeros(36, bool),
        blk_points=jnp.zeros(36, i32), blk_program=jnp.zeros(36, i32), blk_spawn=jnp.zeros(36, i32),
        res_credits=jnp.zeros(36, i32), res_energy=jnp.zeros(36, i32),
        siphoned=jnp.zeros(36, bool), siphon_center=jnp.zeros(36, bool),
        ent_active=jnp.zeros(N, bool), ent_enemy=jnp.zeros(N, bool), ent_type=jnp.zeros(N, i32),
        ent_pos=jnp.zeros(N, i32), ent_hp=jnp.zeros(N, i32), ent_turns=jnp.zeros(N, i32),
        ent_disabled=jnp.zeros(N, i32), ent_stunned=jnp.zeros(N, bool), ent_sched=jnp.zeros(N, bool),
        ent_siphon=jnp.zeros(N, bool), ent_order=jnp.zeros(N, i32), next_order=z(),
    )


def new_game(key, need=True, curriculum=None) -> EnvState:
    """R25-R27: random corner, starting bonus, stage 1 (or a later stage for a ``curriculum`` start, see
    ``curriculum_start``)."""
    return new_game_seeded(rng.seed(key), need, curriculum)


def new_game_seeded(sd, need=True, curriculum=None) -> EnvState:
    start = new_game_start(sd)
    if curriculum is not None:
        start = curriculum_start(start, sd, *curriculum)
    return initialize_stage_seeded(start, new_game_stage_seed(sd), need)


# Resources a curriculum start grants per skipped stage: up to this many credits and as many energy (uniform),
# and one data siphon with probability 1/2 once any stage is skipped; each program is owned with probability
# EnvParams.curriculum_program_prob per skipped stage (0.05: 1.15 programs per skipped stage). A guess at what a
# player who cleared those stages holds, not a rule.
CURRICULUM_RESOURCES_PER_STAGE = 8


def curriculum_start(start: EnvState, sd, share, max_stage, program_prob) -> EnvState:
    """A training curriculum (not a rule of the game): with probability ``share`` the new game ``start``
    (``new_game_start``'s, before its first stage is generated) is moved to a stage uniform in 2..``max_stage``,
    as a player who cleared the stages before it: the scheduled-task interval of that stage (13 - stage, R68) and
    the resources of CURRICULUM_RESOURCES_PER_STAGE, each program with probability ``program_prob`` per skipped
    stage. Stage generation (R28-R35) then builds that stage, its ``stage`` starting transmissions included. With ``share`` 0 the start is returned unchanged: the draws below use counters that
    ``new_game_start`` does not, so the game of every seed is the same as without a curriculum."""
    share = jnp.asarray(share, jnp.float32)
    max_stage = jnp.clip(jnp.asarray(max_stage, i32), 2, 8)
    late = rng.uniform(sd, 16) < share
    stage = 2 + rng.randint(sd, 17, max_stage - 1)
    skipped = stage - 1
    most = CURRICULUM_RESOURCES_PER_STAGE * skipped + 1
    late_start = start.replace(
        stage=stage.astype(i32),
        start_stage=stage.astype(i32),
        sched_interval=(13 - stage).astype(i32),
        credits=start.credits + rng.randint(sd, 18, most),
        energy=start.energy + rng.randint(sd, 19, most),
        siphons=start.siphons + rng.randint(sd, 20, 2),
        owned=start.owned | (rng.uniform(sd, 32 + jnp.arange(NUM_PROGRAMS))
                             < jnp.asarray(program_prob, jnp.float32) * skipped.astype(jnp.float32)),
    )
    return jax.tree.map(lambda a, b: jnp.where(late, a, b), late_start, start)


def new_game_start(sd) -> EnvState:
    """A new game before its first stage is generated (R25-R27): the player in a random corner with a random
    starting bonus. ``initialize_stage_seeded(new_game_start(sd), new_game_stage_seed(sd))`` is the game."""
    s = blank_state()
    corner = jnp.asarray(CORNERS)[rng.randint(sd, 0, 4)]
    bonus = rng.randint(sd, 1, 3)
    return s.replace(
        player_pos=corner.astype(i32),
        credits=jnp.where(bonus == 0, 10, 0).astype(i32),
        energy=jnp.where(bonus == 1, 11, 0).astype(i32),
        siphons=jnp.where(bonus == 2, 1, 0).astype(i32),
    )


def new_game_stage_seed(sd):
    """The seed that generates stage 1 of the new game of seed ``sd``."""
    return rng.hash32(sd ^ _U(0xA5A5A5A5))
