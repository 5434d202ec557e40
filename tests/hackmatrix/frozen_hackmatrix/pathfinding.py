"""Bitboard breadth-first searches on the 6x6 board.

A board set is a pair ``(lo, hi)`` of uint32 words: rows 0-2 live in ``lo`` and rows 3-5 in
``hi``, 7 bits per row (bit 6 of each row is always 0 so horizontal shifts cannot wrap).
A BFS layer expansion is then ~20 scalar integer ops, which vectorises well under vmap.
"""
import jax
import jax.numpy as jnp
import numpy as np

from .constants import NBR_IDX, NBR_INB

U = jnp.uint32
# 7-bit row stride: cell (r, c) is bit 7*(r%3)+c of word r//3 (lo: rows 0-2, hi: rows 3-5);
# bit 6 of each row is a permanent zero gap, so horizontal shifts never leak across rows.
VM = 63 | (63 << 7) | (63 << 14)
M18 = VM  # name kept for the helpers below
_CELL_WORD = np.array([i // 18 for i in range(36)])
_SH = np.array([7 * ((i // 6) % 3) + i % 6 for i in range(36)], np.uint32)
_W_LO = np.array([1 << int(_SH[i]) if i < 18 else 0 for i in range(36)], np.uint32)
_W_HI = np.array([1 << int(_SH[i]) if i >= 18 else 0 for i in range(36)], np.uint32)
_IS_LO = np.arange(36) < 18


def _shift_of(i):
    i = jnp.asarray(i, jnp.int32)
    return (7 * ((i // 6) % 3) + i % 6).astype(U)


def empty():
    return (U(0), U(0))


def full():
    return (U(M18), U(M18))


def pack(mask):
    """bool[..., 36] -> (lo, hi)."""
    m = mask.astype(U)
    return (jnp.sum(m * _W_LO, axis=-1, dtype=U), jnp.sum(m * _W_HI, axis=-1, dtype=U))


def unpack(b):
    lo, hi = b
    w = jnp.where(_IS_LO, lo[..., None], hi[..., None])
    return ((w >> _SH) & U(1)).astype(bool)


def bit(i):
    i = jnp.asarray(i, jnp.int32)
    b = U(1) << _shift_of(i)
    return (jnp.where(i < 18, b, U(0)), jnp.where(i >= 18, b, U(0)))


def test_bit(b, i):
    i = jnp.asarray(i, jnp.int32)
    lo, hi = b
    w = jnp.where(i < 18, lo, hi)
    return ((w >> _shift_of(i)) & U(1)) == U(1)


def b_and(a, b):
    return (a[0] & b[0], a[1] & b[1])


def b_or(a, b):
    return (a[0] | b[0], a[1] | b[1])


def b_not(a):
    return (~a[0] & U(M18), ~a[1] & U(M18))


def b_andnot(a, b):
    return (a[0] & ~b[0], a[1] & ~b[1])


def b_any(a):
    return (a[0] | a[1]) != U(0)


def b_eq(a, b):
    return (a[0] == b[0]) & (a[1] == b[1])


def dilate(b):
    """Cells 4-adjacent to some cell of b (R5, R7)."""
    lo, hi = b
    up_lo = lo << 7
    up_hi = (hi << 7) | (lo >> 14)
    dn_lo = (lo >> 7) | ((hi & U(63)) << 14)
    dn_hi = hi >> 7
    return ((up_lo | dn_lo | (lo << 1) | (lo >> 1)) & U(VM),
            (up_hi | dn_hi | (hi << 1) | (hi >> 1)) & U(VM))


def _hfill(x, m):
    """Kogge-Stone fill of x along rows (both directions) through mask m."""
    g, y = m, x
    y = y | (g & (y << 1)); g = g & (g << 1)
    y = y | (g & (y << 2)); g = g & (g << 2)
    y = y | (g & (y << 4))
    g, z = m, x
    z = z | (g & (z >> 1)); g = g & (g >> 1)
    z = z | (g & (z >> 2)); g = g & (g >> 2)
    z = z | (g & (z >> 4))
    return (y | z) & m


def bfs_layers_dist(source, passable, max_iter=35):
    """int32[36] BFS distance from the cells of ``source`` through ``passable``; 99 if unreached."""
    dist0 = jnp.where(unpack(source), 0, 99).astype(jnp.int32)

    def cond(c):
        k, front, vis, dist = c
        return b_any(front) & (k < max_iter)

    def body(c):
        k, front, vis, dist = c
        nxt = b_andnot(b_and(dilate(front), passable), vis)
        dist = jnp.where(unpack(nxt), k + 1, dist)
        return k + 1, nxt, b_or(vis, nxt), dist

    _, _, _, dist = jax.lax.while_loop(cond, body, (jnp.int32(0), source, source, dist0))
    return dist


def first_step_bfs(player, enemy_pos, passable):
    """Tier-1 rule of R64: BFS from the player cell over ``passable``; return the index (0..3)
    of the first direction (R5 order) among the enemy's neighbours reached in the earliest
    layer, or -1 if none is reachable.  ``player`` must already be empty() if the player's
    cell is not passable for this enemy."""
    nb_idx = jnp.asarray(NBR_IDX)[enemy_pos]
    nb_inb = jnp.asarray(NBR_INB)[enemy_pos]
    nb_bits = [bit(jnp.where(nb_inb[d], nb_idx[d], 0)) for d in range(4)]
    nb_mask = empty()
    for d in range(4):
        nb_mask = b_or(nb_mask, (jnp.where(nb_inb[d], nb_bits[d][0], U(0)),
                                 jnp.where(nb_inb[d], nb_bits[d][1], U(0))))

    def cond(c):
        front, vis = c
        return b_any(front) & ~b_any(b_and(front, nb_mask))

    def body(c):
        front, vis = c
        nxt = b_andnot(b_and(dilate(front), passable), vis)
        return nxt, b_or(vis, nxt)

    front, _ = jax.lax.while_loop(cond, body, (player, player))
    hit = b_and(front, nb_mask)
    choice = jnp.int32(-1)
    for d in (3, 2, 1, 0):
        ok = nb_inb[d] & b_any(b_and(hit, nb_bits[d]))
        choice = jnp.where(ok, d, choice)
    return choice


def exit_distance(start, target, blocks):
    """R118: BFS distance from cell ``start`` to cell ``target``; blocks cannot be entered but
    the target counts as reached when it is a neighbour; 0 if start == target or unreachable."""
    tb = bit(target)
    passable = b_or(b_not(blocks), tb)
    sb = bit(start)

    def cond(c):
        k, front, vis, found = c
        return b_any(front) & ~found

    def body(c):
        k, front, vis, found = c
        nxt = b_andnot(b_and(dilate(front), passable), vis)
        return k + 1, nxt, b_or(vis, nxt), b_any(b_and(nxt, tb))

    k, _, _, found = jax.lax.while_loop(cond, body, (jnp.int32(0), sb, sb, start == target))
    return jnp.where(found & (start != target), k, 0).astype(jnp.int32)


def layout_connected(blocks, exit_cell):
    """R32(a): flood fill from (0,0) over non-block cells, the exit is a dead end unless it is
    the root; valid iff every non-block cell is visited.  The exit is never a block and is a
    corner, so "dead end" = it is removed from the propagation mask and counted as visited
    iff a neighbour was visited."""
    walk = b_not(blocks)
    root = bit(0)
    eb = bit(exit_cell)
    eb = (jnp.where(exit_cell == 0, U(0), eb[0]), jnp.where(exit_cell == 0, U(0), eb[1]))
    m = b_andnot(walk, eb)

    def fill(x):
        return (_hfill(x[0], m[0]), _hfill(x[1], m[1]))

    def cond(c):
        prev, vis = c
        return ~b_eq(prev, vis)

    def body(c):
        _, vis = c
        return vis, fill(b_or(vis, b_and(dilate(vis), m)))

    v0 = fill(root)
    _, vis = jax.lax.while_loop(cond, body, (empty(), v0))
    vis = b_or(vis, b_and(dilate(vis), eb))
    return b_eq(vis, walk)


def siphonable(blocks):
    """R32(b): every block has an in-bounds cardinal neighbour that is not a block."""
    return ~b_any(b_andnot(blocks, dilate(b_not(blocks))))
