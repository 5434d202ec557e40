"""The enemy phase (R52-R67)."""
import jax
import jax.numpy as jnp

from . import pathfinding as pf
from .constants import (
    BIG, BLOCK, CELL_COL, CELL_ROW, ENEMY_MAX_HP, ENEMY_SPEED, GLITCH, MAX_ENTITIES,
    NBR_IDX, NBR_INB,
)
from . import rng
from .generate import place_transmissions
from .state import select

i32 = jnp.int32
_U = jnp.uint32


def _occ_bits(pos, active):
    """Bitboard of cells holding any active entity."""
    lo, hi = pf.bit(pos)
    lo = jnp.where(active, lo, _U(0))
    hi = jnp.where(active, hi, _U(0))
    return (jax.lax.reduce(lo, _U(0), jax.lax.bitwise_or, (0,)),
            jax.lax.reduce(hi, _U(0), jax.lax.bitwise_or, (0,)))


def hatch(state):
    """R59 / R24: tick transmissions in list order; hatched ones become enemies appended to
    the enemy list in transmission order (new list-order keys)."""
    tr = state.ent_active & ~state.ent_enemy
    h = tr & (state.ent_turns <= 1)
    # new keys keep the hatchers' relative (transmission) order and exceed every existing key:
    # next_order + (key - smallest hatcher key); next_order advances by the hatchers' key span
    lo = jnp.min(jnp.where(h, state.ent_order, BIG * 64))
    hi = jnp.max(jnp.where(h, state.ent_order, -1))
    rank = state.ent_order - lo
    n = jnp.where(jnp.any(h), hi - lo + 1, 0)
    return state.replace(
        ent_enemy=state.ent_enemy | h,
        ent_hp=jnp.where(h, jnp.asarray(ENEMY_MAX_HP)[state.ent_type], state.ent_hp),
        ent_disabled=jnp.where(h, 1, state.ent_disabled),
        ent_stunned=jnp.where(h, False, state.ent_stunned),
        ent_turns=jnp.where(tr & ~h, state.ent_turns - 1, jnp.where(h, 0, state.ent_turns)),
        ent_order=jnp.where(h, state.next_order + rank, state.ent_order),
        next_order=state.next_order + n,
    )


def adjacent_to_player(pos, player_pos):
    """Whether cells `pos` are orthogonally adjacent to the player's cell (Manhattan distance 1): where an enemy
    attacks instead of moving. The enemy phase, R116's siphon-death penalty and the death statistics all ask this."""
    return (jnp.abs(pos // 6 - player_pos // 6) + jnp.abs(pos % 6 - player_pos % 6)) == 1


def enemies_beside_player(state):
    """The active enemies adjacent to the player, per entity slot."""
    return state.ent_active & state.ent_enemy & adjacent_to_player(state.ent_pos, state.player_pos)


def _choose_move(state, ent_pos, slot, blocks, dist2):
    """New cell for the enemy in ``slot`` that is not adjacent to the player (R63-R66).
    ``ent_pos`` are the current positions (earlier moves of this sub-step included)."""
    p = ent_pos[slot]
    glitch = state.ent_type[slot] == GLITCH
    player = state.player_pos
    blk_e = (jnp.where(glitch, _U(0), blocks[0]), jnp.where(glitch, _U(0), blocks[1]))
    occ = _occ_bits(ent_pos, state.ent_active)
    pbit = pf.bit(player)
    player_ok = ~pf.test_bit(blk_e, player)
    src = (jnp.where(player_ok, pbit[0], _U(0)), jnp.where(player_ok, pbit[1], _U(0)))
    passable = pf.b_or(pf.b_andnot(pf.b_not(blk_e), occ), src)
    # Tier 1 (R64)
    d1 = pf.first_step_bfs(src, p, passable)
    nb = jnp.asarray(NBR_IDX)[p]
    inb = jnp.asarray(NBR_INB)[p]
    nbc = jnp.where(inb, nb, 0)
    nb_block = jnp.where(glitch, False, state.content[nbc] == BLOCK)
    nb_occ = jax.vmap(lambda c: pf.test_bit(occ, c))(nbc)
    # Tier 2 (R65): distances ignoring occupancy (precomputed per phase)
    dd = jnp.where(glitch, dist2[1], dist2[0])[nbc]
    dd = jnp.where(inb & ~nb_block, dd, 99)
    d2 = jnp.argmin(dd).astype(i32)
    t2 = (dd[d2] < 99) & ~nb_occ[d2]
    # Tier 3 (R66): greedy Manhattan
    man = jnp.abs(jnp.asarray(CELL_ROW)[nbc] - CELL_ROW_of(player)) + jnp.abs(
        jnp.asarray(CELL_COL)[nbc] - player % 6)
    man = jnp.where(inb & ~nb_block & ~nb_occ, man, 99)
    d3 = jnp.argmin(man).astype(i32)
    t3 = man[d3] < 99
    d = jnp.where(d1 >= 0, d1, jnp.where(t2, d2, jnp.where(t3, d3, -1)))
    return jnp.where(d >= 0, nbc[jnp.clip(d, 0, 3)], p).astype(i32)


def CELL_ROW_of(c):
    return c // 6


def _substep(state, key, s, attacked, blocks, dist2):
    """One sub-step (R54-R56): random order, sequential processing of acting enemies."""
    speed = jnp.asarray(ENEMY_SPEED)[state.ent_type]
    acting = (state.ent_active & state.ent_enemy & (state.ent_disabled == 0) & ~state.ent_stunned
              & ~attacked & (s < speed))
    # uniformly random order of the acting enemies: unique keys (random bits | slot), taken
    # smallest first inside the loop (no sort)
    slots = jnp.arange(MAX_ENTITIES, dtype=i32)
    keys = jnp.where(acting, ((rng.bits(key, slots) >> 8).astype(i32) << 6) | slots, jnp.int32(2 ** 31 - 1))
    n_act = jnp.sum(acting, dtype=i32)

    def cond(c):
        return c[0] < n_act

    def body(c):
        # only the changing quantities are carried (a batched while_loop selects its whole carry)
        j, pos, hp, att, keys = c
        slot = jnp.min(keys) & 63
        keys = jnp.where(slots == slot, jnp.int32(2 ** 31 - 1), keys)
        p = pos[slot]
        adjacent = adjacent_to_player(p, state.player_pos)
        newp = _choose_move(state, pos, slot, blocks, dist2)
        hp = jnp.where(adjacent, jnp.maximum(hp - 1, 0), hp)
        pos = jnp.where(slots == slot, jnp.where(adjacent, p, newp), pos)
        att = att | ((slots == slot) & adjacent)
        return j + 1, pos, hp, att, keys

    _, pos, hp, attacked, _ = jax.lax.while_loop(
        cond, body, (jnp.int32(0), state.ent_pos, state.hp, attacked, keys))
    return state.replace(ent_pos=pos, hp=hp), attacked


def move_enemies(st, k0, k1):
    """E3: the two sub-steps of moves and attacks (R54-R67), with sub-step seeds ``k0`` and ``k1``."""
    blocks = pf.pack(st.content == BLOCK)
    src = pf.bit(st.player_pos)
    src_ng = (jnp.where(pf.test_bit(blocks, st.player_pos), _U(0), src[0]),
              jnp.where(pf.test_bit(blocks, st.player_pos), _U(0), src[1]))
    # a glitch's distances ignore blocks (R65): on the open 6x6 board they are the Manhattan distances from the
    # player's cell, so only the other enemies' need a search
    manhattan = (jnp.abs(jnp.asarray(CELL_ROW) - st.player_pos // 6)
                 + jnp.abs(jnp.asarray(CELL_COL) - st.player_pos % 6)).astype(i32)
    dist2 = jnp.stack([pf.bfs_layers_dist(src_ng, pf.b_not(blocks)), manhattan])

    # the two sub-steps share one loop body (half the program to compile); only what they change is carried
    def substep(s, carry):
        pos, hp, attacked = carry
        sub_key = jnp.where(s == 0, k0, k1)
        moved, attacked = _substep(st.replace(ent_pos=pos, hp=hp), sub_key, s, attacked, blocks, dist2)
        return moved.ent_pos, moved.hp, attacked

    pos, hp, _ = jax.lax.fori_loop(0, 2, substep, (st.ent_pos, st.hp, jnp.zeros(MAX_ENTITIES, bool)))
    return st.replace(ent_pos=pos, hp=hp)


def enemy_phase(state, sd):
    """R52 E0-E6, random draws from the uint32 seed ``sd`` (rng.py). Returns (state, n_dropped_transmissions,
    ran): ``ran`` is False when STEP skipped the phase (R53); the caller pushes the E7 snapshot when it is True."""
    k0, k1, k_sched = (rng.hash32(sd ^ rng.U(c)) for c in (0x1111, 0x2222, 0x3333))
    skip = state.step_active

    def run(st):
        st = st.replace(turn=st.turn + 1)                       # E1
        st = move_enemies(hatch(st), k0, k1)                    # E2, E3
        # E4 scheduled task (R60) and E5 siphon spawns (R50): one placement loop, the scheduled
        # transmission first, then the pending siphon spawns
        fire = ((~st.sched_disabled) & (st.turn >= st.next_sched_turn)).astype(i32)
        nth = jnp.arange(MAX_ENTITIES, dtype=i32)
        st, dropped = place_transmissions(st, k_sched, fire + st.pending_siphon, nth < fire, nth >= fire)
        st = st.replace(next_sched_turn=jnp.where(fire > 0, st.turn + st.sched_interval, st.next_sched_turn),
                        pending_siphon=i32(0))
        # E6 clear stuns / decrement disables
        en = st.ent_active & st.ent_enemy
        st = st.replace(
            ent_disabled=jnp.where(en, jnp.maximum(st.ent_disabled - 1, 0), st.ent_disabled),
            ent_stunned=jnp.where(en, False, st.ent_stunned))
        # E7, the UNDO snapshot, is pushed by step() once the step's state is final (history.py)
        return st, dropped

    ran, dropped = run(state)
    skipped = state.replace(step_active=jnp.bool_(False))       # E0 (R53)
    out = select(skip, skipped, ran)
    return out, jnp.where(skip, 0, dropped).astype(i32), ~skip
