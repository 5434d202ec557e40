"""UNDO snapshots (R92-R94, D7): a fixed-capacity ring of bit-packed snapshots inside EnvState.

A snapshot holds exactly the fields R92 lists, packed into SNAP_SIZE int32 words: 12 player/global
scalars, one word per cell (content, block payload and flags, resources, siphon flags) and one word
plus a list-order key per entity slot.  Packing keeps the 16-deep history at 7.5 KB per environment
(15 MB at 2048 envs), so carrying it through every step costs little.  The push (E7 of a real enemy
phase) and the pop (UNDO) are applied once at the end of ``step`` so no other branch copies it.
"""
import jax.numpy as jnp

from .constants import HISTORY_CAP, NUM_PROGRAMS

i32 = jnp.int32

# R92: the player, turnCount, ownedPrograms (packed as a bit set) and the three stage flags/counters.
SCALARS = ("player_pos", "hp", "credits", "energy", "siphons", "score", "attack", "turn", "owned",
           "show_activated", "sched_disabled", "atk_plus_uses")
# (field, bits). Widths cover every value the rules produce: points 1-9, spawn 0-9, resource stacks
# 1-3, hp 0-3, disabledTurns 0-1, turnsRemaining grows by 3 per DELAY (< 2**14 within any episode).
CELL_BITS = (("content", 2), ("blk_data", 1), ("blk_question", 1), ("blk_points", 4),
             ("blk_program", 5), ("blk_spawn", 5), ("res_credits", 4), ("res_energy", 4),
             ("siphoned", 1), ("siphon_center", 1))
ENTITY_BITS = (("ent_active", 1), ("ent_enemy", 1), ("ent_type", 2), ("ent_pos", 6), ("ent_hp", 3),
               ("ent_disabled", 3), ("ent_stunned", 1), ("ent_turns", 14))
NUM_SCALARS = len(SCALARS)
SNAP_SIZE = NUM_SCALARS + 3 * 36
_PROGRAM_BITS = jnp.left_shift(1, jnp.arange(NUM_PROGRAMS, dtype=i32))


def empty_history():
    """The snapshot ring of an empty stack (R27); its length and top start at 0."""
    return jnp.zeros((HISTORY_CAP, SNAP_SIZE), i32)


def _pack(state, fields):
    word, shift = jnp.zeros(36, i32), 0
    for name, bits in fields:
        word = word | ((getattr(state, name).astype(i32) & ((1 << bits) - 1)) << shift)
        shift += bits
    return word


def _unpack(state, word, fields):
    out, shift = {}, 0
    for name, bits in fields:
        out[name] = ((word >> shift) & ((1 << bits) - 1)).astype(getattr(state, name).dtype)
        shift += bits
    return out


def snapshot(state):
    """int32[SNAP_SIZE]: the R92 fields of ``state``."""
    scalars = [jnp.sum(jnp.where(state.owned, _PROGRAM_BITS, 0), dtype=i32) if name == "owned"
               else getattr(state, name).astype(i32) for name in SCALARS]
    return jnp.concatenate([jnp.stack(scalars), _pack(state, CELL_BITS), _pack(state, ENTITY_BITS),
                            state.ent_order.astype(i32)])


def restore(state, snap):
    """R93: overwrite the snapshot's fields; the enemy/transmission flags come back False.
    Everything else (stage, exitPosition, stepActive, pending spawns, scheduling) is kept."""
    fields = {}
    for i, name in enumerate(SCALARS):
        v = snap[i]
        fields[name] = ((v & _PROGRAM_BITS) != 0) if name == "owned" else v.astype(getattr(state, name).dtype)
    fields.update(_unpack(state, snap[NUM_SCALARS:NUM_SCALARS + 36], CELL_BITS))
    fields.update(_unpack(state, snap[NUM_SCALARS + 36:NUM_SCALARS + 72], ENTITY_BITS))
    fields["ent_order"] = snap[NUM_SCALARS + 72:]
    fields["ent_sched"] = jnp.zeros_like(state.ent_sched)
    fields["ent_siphon"] = jnp.zeros_like(state.ent_siphon)
    return state.replace(**fields)


def newest(state):
    """The snapshot UNDO would restore (garbage when the stack is empty; the mask forbids UNDO then)."""
    return state.history[(state.history_top - 1) % HISTORY_CAP]


def push_pop(state, push, pop, snap=None):
    """Apply E7's push (R92) or UNDO's pop (R93) of this step; at most one of them is True.
    A full ring drops its oldest snapshot (D7). Only one row is written, whatever the flags.
    ``snap`` defaults to the snapshot of ``state`` itself."""
    top = state.history_top
    row = jnp.where(push, snapshot(state) if snap is None else snap, state.history[top])
    return state.replace(
        history=state.history.at[top].set(row),
        history_top=jnp.where(push, (top + 1) % HISTORY_CAP,
                              jnp.where(pop, (top - 1) % HISTORY_CAP, top)).astype(i32),
        history_len=jnp.where(push, jnp.minimum(state.history_len + 1, HISTORY_CAP),
                              jnp.where(pop, state.history_len - 1, state.history_len)).astype(i32),
    )
