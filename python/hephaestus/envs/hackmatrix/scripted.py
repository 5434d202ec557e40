"""Scripted HackMatrix policies: simple baselines a trained agent should beat (issue 22), played by
``scripts/evaluate.py --scripted NAME --env hackmatrix`` through the evaluation program of training.

Each is a pure ``(state, mask, key) -> int32 action`` on one env's state and its action mask, so it vmaps and
jits like the env. They read the state, which an agent cannot: their numbers say what a strategy is worth, not
what the observation allows.

* ``exit-rush``: the direction whose neighbouring cell is nearest the exit (breadth-first search around the
  blocks), ties broken at random. The move-or-attack rule (R41-R46) makes a move toward an
  enemy or transmission in line an attack, so the rusher shoots what stands in its way and walks otherwise. It
  never siphons and never plays a program: what running for exits alone is worth.
* ``exit-rush-siphon``: the rusher, but it siphons (R47) whenever it holds a data siphon and the siphon is
  allowed, then rushes on. Siphoning at once is the simplest use of a siphon; its programs stay unplayed.
"""
import jax
import jax.numpy as jnp

from . import pathfinding as pf
from .constants import A_SIPHON, BLOCK, NBR_IDX, NBR_INB

UNREACHED = 99  # pathfinding.bfs_layers_dist's distance of a cell it cannot reach


def _exit_distances(state):
    """int32[36]: steps from each cell to the exit around the blocks; UNREACHED where no path leads."""
    passable = pf.pack(state.content != BLOCK)
    return pf.bfs_layers_dist(pf.bit(state.exit_pos), passable)


def exit_rush(state, mask, key):
    """The move (0..3) toward the exit: the allowed direction whose neighbour is nearest it (random among
    equals); a random allowed action where no direction is allowed."""
    dist = _exit_distances(state)
    nbr = jnp.asarray(NBR_IDX)[state.player_pos]
    inb = jnp.asarray(NBR_INB)[state.player_pos]
    step_dist = jnp.where(inb & mask[:4], dist[nbr], UNREACHED + 1).astype(jnp.float32)
    key_tie, key_any = jax.random.split(key)
    move = jnp.argmin(step_dist + jax.random.uniform(key_tie, (4,), maxval=0.5)).astype(jnp.int32)
    fallback = jax.random.categorical(key_any, jnp.where(mask, 0.0, -jnp.inf)).astype(jnp.int32)
    return jnp.where(jnp.any(mask[:4]), move, fallback)


def exit_rush_siphon(state, mask, key):
    """``exit_rush``, but SIPHON first whenever the player holds a data siphon and may use it."""
    return jnp.where((state.siphons > 0) & mask[A_SIPHON], jnp.int32(A_SIPHON), exit_rush(state, mask, key))


POLICIES = {"exit-rush": exit_rush, "exit-rush-siphon": exit_rush_siphon}
