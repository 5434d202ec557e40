"""The step's rewritten parts against their frozen reference (frozen_hackmatrix: the package's step before it was
rewritten for speed), on the same inputs, to the bit: the bitboard searches on random boards, the two exit
distances of the reward, and the enemy phase on the mid-game states of the shared random rollout.
scripts/experiments/hackmatrix_step_differential.py compares the whole step (auto-reset included) over thousands
of games; this is its small version."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from frozen_hackmatrix import enemies as old_enemies, pathfinding as old_pf, step as old_step
from hephaestus.envs.hackmatrix import enemies, pathfinding as pf, rng, step
from hephaestus.envs.hackmatrix.constants import GLITCH
from hm_helpers import ROLL_B, random_rollout, resets

pytestmark = pytest.mark.xdist_group("hackmatrix")


def _equal(a, b):
    leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(leaves_a) == len(leaves_b)
    for x, y in zip(leaves_a, leaves_b):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_searches_match_the_frozen_ones_on_random_boards():
    n = 4096
    k_block, k_cells, k_density = jax.random.split(jax.random.key(7), 3)
    density = jax.random.uniform(k_density, (n, 1), maxval=0.6)     # open boards to mazes
    blocks = pf.pack(jax.random.uniform(k_block, (n, 36)) < density)
    a, b, c = jax.random.randint(k_cells, (3, n), 0, 36)

    def searches(m, a, b, c, blocks):
        passable = m.b_not(blocks)
        src = m.bit(a)
        return (m.bfs_layers_dist(src, passable), m.bfs_layers_dist(src, m.full()),
                m.first_step_bfs(src, b, m.b_andnot(passable, m.bit(b))), m.exit_distance(a, c, blocks))

    new = jax.jit(jax.vmap(lambda *x: searches(pf, *x)))(a, b, c, blocks)
    old = jax.jit(jax.vmap(lambda *x: searches(old_pf, *x)))(a, b, c, blocks)
    _equal(new, old)
    assert np.asarray(new[2] >= 0).mean() > 0.3 and np.asarray(new[3] > 4).mean() > 0.1  # real searches


def _mid_game_states():
    _, start = resets()
    out = random_rollout(jax.random.key(3), jax.tree.map(lambda x: x[:ROLL_B], start))
    return jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), out["st"])    # [ROLL_T * ROLL_B] states


def test_enemy_phase_and_exit_distances_match_the_frozen_ones():
    states = _mid_game_states()
    enemy = states.ent_active & states.ent_enemy
    assert np.asarray(jnp.sum(enemy, axis=1)).max() >= 3                      # enemies to move
    assert np.asarray(jnp.sum(enemy & (states.ent_type == GLITCH))) > 0       # and glitches (no blocks in the way)
    seeds = jax.vmap(rng.seed)(jax.random.split(jax.random.key(11), states.hp.shape[0]))
    _equal(jax.jit(jax.vmap(enemies.enemy_phase))(states, seeds),
           jax.jit(jax.vmap(old_enemies.enemy_phase))(states, seeds))
    # the reward's before/after exit distances, by one search, against two of the frozen one
    after = jax.tree.map(lambda x: jnp.roll(x, 1, axis=0), states)
    _equal(jax.jit(jax.vmap(step.exit_dists))(states, after),
           jax.jit(jax.vmap(lambda s, t: (old_step.exit_dist(s), old_step.exit_dist(t))))(states, after))
