"""What the step's rewrite for speed rests on, checked where CI can check it: the glitch's block-free distance field
(R65) is the Manhattan distance from the player, which equals a breadth-first search through every cell of the
6x6 board from every cell; the reward's two exit distances by one search loop equal two single searches.
benchmarks/hackmatrix_step_differential.py compares the whole step with an earlier revision's over
thousands of games (specs/results/hackmatrix-speed.md)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hephaestus.envs.hackmatrix import pathfinding as pf, step
from hephaestus.envs.hackmatrix.constants import CELL_COL, CELL_ROW
from hm_helpers import ROLL_B, random_rollout, resets

pytestmark = pytest.mark.xdist_group("hackmatrix")


def test_a_search_through_every_cell_is_the_manhattan_distance_the_glitch_field_uses():
    cells = jnp.arange(36)
    searched = jax.jit(jax.vmap(lambda p: pf.bfs_layers_dist(pf.bit(p), pf.full())))(cells)
    manhattan = (np.abs(np.asarray(CELL_ROW)[None] - np.asarray(CELL_ROW)[:, None])
                 + np.abs(np.asarray(CELL_COL)[None] - np.asarray(CELL_COL)[:, None]))
    np.testing.assert_array_equal(np.asarray(searched), manhattan)
    assert manhattan.max() == 10  # corner to corner: the search went the whole board


def test_the_rewards_exit_distances_by_one_loop_equal_two_searches():
    _, start = resets()
    out = random_rollout(jax.random.key(3), jax.tree.map(lambda x: x[:ROLL_B], start))
    states = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), out["st"])  # [ROLL_T * ROLL_B] mid-game states
    after = jax.tree.map(lambda x: jnp.roll(x, 1, axis=0), states)
    one_loop = jax.jit(jax.vmap(step.exit_dists))(states, after)
    two = jax.jit(jax.vmap(lambda s, t: (step.exit_dist(s), step.exit_dist(t))))(states, after)
    for a, b in zip(one_loop, two):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert len(np.unique(np.asarray(one_loop[0]))) > 3  # real, varied distances
