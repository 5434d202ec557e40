"""Scripted HackMatrix policies: simple baselines a trained agent should beat, played by
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
* ``exit-rush-safe``: the rusher with one step of look-ahead: each direction is played with the env's own
  move-or-attack, and the hits the enemy phase after it would deal (seen enemies beside, viruses within two)
  weigh ``DAMAGE_STEPS`` steps each. It steps around an enemy it would end beside and shoots one in line.
* ``exit-rush-deep``: ``exit-rush-safe`` two turns deep: each direction is played with the env's own move and
  enemy phase, then costed by the safe rusher's best next step from where it leaves the player.
* ``exit-rush-programs``: ``exit-rush-safe`` toward a waypoint: a pick-up or a siphon cross worth its detour
  (new programs and credits/energy, less the transmissions its blocks release), siphoning there; and it plays
  an owned program when its moment comes (``PROGRAM_ORDER``). Its weights were set by hand on evaluation seed 0
  (specs/hackmatrix.md). The step look-ahead uses only what the observation shows (no cryptog out of line,
  no disabled turns) and question blocks count at their mean spawn; the program moments also read state the
  observation hides (disabled turns, cryptogs out of line, siphoned floor cells), which a student must guess.
* ``exit-rush-collector``: ``exit-rush-programs`` that values a game's first program (a cross with a new program
  while the player owns none) at ``FIRST_PROGRAM_VALUE`` steps of detour instead of ``NEW_PROGRAM_VALUE``, and
  plays any program it owns (but UNDO) as a last resort, when the step it chose would take its last HP: a
  teacher that owns and plays programs far more often, at a price in stages (the students own few).
"""
import jax
import jax.numpy as jnp

from . import pathfinding as pf
from .constants import (
    A_SIPHON, BLOCK, CELL_COL, CELL_ROW, CROSS, CRYPTOG, DAEMON, DATA_SIPHON, NBR_IDX, NUM_PROGRAMS,
    P_ATKP, P_CALM, P_COL, P_CRASH, P_DBOM, P_DEBUG, P_DELAY, P_EXCH, P_HACK, P_POLY, P_PULL, P_PUSH, P_REDUC,
    P_RESET, P_ROW, P_SCORE, P_SHOW, P_SIPHP, P_STEP, P_ANTIV, P_WAIT, P_WARP, PROGRAM_ENERGY, VIRUS,
)
from . import rng
from .enemies import enemy_phase
from .observe import action_mask
from .state import select
from .step import move_or_attack

UNREACHED = 99  # pathfinding.bfs_layers_dist's distance of a cell it cannot reach


def _distances_from(cell, state):
    """int32[36]: steps from ``cell`` to each cell around the blocks; UNREACHED where no path leads."""
    return pf.bfs_layers_dist(pf.bit(cell), pf.pack(state.content != BLOCK))


def _exit_distances(state):
    """int32[36]: steps from each cell to the exit around the blocks; UNREACHED where no path leads."""
    return _distances_from(state.exit_pos, state)


def exit_rush(state, mask, key):
    """The move (0..3) toward the exit: the allowed direction whose neighbour is nearest it (random among
    equals); a random allowed action where no direction is allowed."""
    return _step_toward(_exit_distances(state), state, mask, key)


def _step_toward(dist, state, mask, key):
    """The allowed direction whose neighbour is nearest by ``dist`` (random among equals); a random allowed
    action where no direction is allowed."""
    return _cheapest_direction(dist[jnp.asarray(NBR_IDX)[state.player_pos]], mask, key)[0]


def _cheapest_direction(cost, mask, key):
    """(action, direction): the allowed direction (0..3) of least ``cost`` (float[4], random among equals),
    and a random allowed action where no direction is allowed (the mask allows only in-bound directions, R37).
    ``direction`` is the argmin either way, for reading per-direction values."""
    key_tie, key_any = jax.random.split(key)
    direction = jnp.argmin(jnp.where(mask[:4], cost.astype(jnp.float32), jnp.inf)
                           + jax.random.uniform(key_tie, (4,), maxval=0.5)).astype(jnp.int32)
    fallback = jax.random.categorical(key_any, jnp.where(mask, 0.0, -jnp.inf)).astype(jnp.int32)
    return jnp.where(jnp.any(mask[:4]), direction, fallback), direction


def exit_rush_siphon(state, mask, key):
    """``exit_rush``, but SIPHON first whenever the player holds a data siphon and may use it."""
    return jnp.where((state.siphons > 0) & mask[A_SIPHON], jnp.int32(A_SIPHON), exit_rush(state, mask, key))


DAMAGE_STEPS = 4.0             # exit-rush-safe/-programs: one HP lost weighs as much as this many steps
# exit-rush-programs: how much a waypoint is worth, in steps of detour from the shortest way to the exit.
PICKUP_VALUE = 6.0             # a data-siphon pick-up: +1 reward (R107) and the siphon it holds
NEW_PROGRAM_VALUE = 3.0        # each block of a program not yet owned in a siphon cross
FIRST_PROGRAM_VALUE = 8.0      # exit-rush-collector: a cross's new programs while the player owns none, at least
RESOURCE_VALUE = 1.0           # each credit or energy in a siphon cross
SPAWN_COST = 1.0               # each transmission the cross's blocks would release (R49, R50)
QUESTION_SPAWN = 5             # a question block's spawn count is hidden (R102): about the mean
SIPHON_WORTH = 1.0             # a cross must be worth this much to spend a siphon on it
ENERGY_RESERVE = 4             # energy kept for RESET (R88) by the programs that are not emergencies
# Programs in the order they are considered; the first whose moment has come (and the mask allows) is played.
# PULL, POLY and WAIT have no moment of their own: only exit-rush-collector's last resort plays them. UNDO is in
# none: it would restore the turn before and loop.
PROGRAM_ORDER = (P_RESET, P_DBOM, P_CRASH, P_ANTIV, P_ROW, P_COL, P_DEBUG, P_HACK, P_STEP, P_PUSH, P_WARP,
                 P_DELAY, P_REDUC, P_SIPHP, P_EXCH, P_CALM, P_ATKP, P_SHOW, P_SCORE, P_PULL, P_POLY, P_WAIT)


def _program_moments(state, to_exit, siphon_here, hits, last_resort=False):
    """bool[23]: for each program, whether now is a moment to play it (before the mask and costs). ``to_exit``:
    each cell's steps to the exit; ``hits``: what the chosen step would take in the next enemy phase. With
    ``last_resort``, every program is a moment when those hits would take the player's last HP (UNDO, which would
    replay the same turn, is in no ``PROGRAM_ORDER``)."""
    rows, cols = jnp.asarray(CELL_ROW), jnp.asarray(CELL_COL)
    pr, pc = rows[state.player_pos], cols[state.player_pos]
    er, ec = rows[state.ent_pos], cols[state.ent_pos]
    manhattan = jnp.abs(er - pr) + jnp.abs(ec - pc)
    chebyshev = jnp.maximum(jnp.abs(er - pr), jnp.abs(ec - pc))
    enemy = state.ent_active & state.ent_enemy
    transmission = state.ent_active & ~state.ent_enemy
    # an enemy that acts in the next enemy phase (R22, R55)
    acting = enemy & ~state.ent_stunned & (state.ent_disabled == 0)
    attacker = acting & (manhattan == 1)
    spare_energy = state.energy - jnp.asarray(PROGRAM_ENERGY) >= ENERGY_RESERVE * state.owned[P_RESET]
    n_entities = jnp.sum(state.ent_active)
    lone = jnp.argmax(state.ent_active)
    lone_nearer_exit = to_exit[state.ent_pos[lone]] < to_exit[state.player_pos]
    moment = jnp.zeros(NUM_PROGRAMS, bool)
    moment = moment.at[P_RESET].set(state.hp == 1)
    moment = moment.at[P_DBOM].set(jnp.any(acting & (state.ent_type == DAEMON) & (manhattan <= 3)))
    moment = moment.at[P_CRASH].set(jnp.any((acting | transmission) & (chebyshev == 1)))
    moment = moment.at[P_ANTIV].set(jnp.any(acting & (state.ent_type == VIRUS) & (manhattan <= 4)))
    moment = moment.at[P_ROW].set(jnp.any(acting & (er == pr)))
    moment = moment.at[P_COL].set(jnp.any(acting & (ec == pc)))
    moment = moment.at[P_DEBUG].set(jnp.any(acting & (state.content[state.ent_pos] == BLOCK)))
    moment = moment.at[P_HACK].set(jnp.any(acting & state.siphoned[state.ent_pos]))
    moment = moment.at[P_STEP].set((hits > 0) & ~siphon_here & ~state.step_active)
    moment = moment.at[P_PUSH].set(jnp.any(attacker) & (hits > 0) & ~state.step_active)
    moment = moment.at[P_WARP].set((n_entities == 1) & lone_nearer_exit)
    moment = moment.at[P_DELAY].set(jnp.any(transmission & (state.ent_turns <= 1) & (manhattan <= 3)))
    moment = moment.at[P_REDUC].set(siphon_here)
    moment = moment.at[P_SIPHP].set(state.siphons == 0)
    moment = moment.at[P_EXCH].set((state.energy < ENERGY_RESERVE) & (state.credits >= 8))
    moment = moment.at[P_CALM].set(state.stage >= 2)
    moment = moment.at[P_ATKP].set(True)
    moment = moment.at[P_SHOW].set(jnp.any(enemy & (state.ent_type == CRYPTOG)))
    moment = moment.at[P_SCORE].set(True)
    spare = jnp.zeros(NUM_PROGRAMS, bool).at[jnp.array([P_DELAY, P_CALM, P_ATKP, P_SCORE])].set(True)
    desperate = last_resort & (hits >= state.hp)
    return (moment & (spare_energy | ~spare)) | desperate


def _cross_worth(state, first_program_value=NEW_PROGRAM_VALUE):
    """float32[36]: what siphoning from each cell would bring (R47-R49) less what it would release; -inf on
    blocks. Question blocks count for their expected spawn and nothing else: their payload is hidden. While the
    player owns no program, a cross's new programs are worth at least ``first_program_value``."""
    block = state.content == BLOCK
    live_block = block & ~state.siphoned
    new_program = live_block & ~state.blk_data & ~state.blk_question & ~state.owned[state.blk_program]
    spawn = jnp.where(live_block, jnp.where(state.blk_question, QUESTION_SPAWN, state.blk_spawn), 0)
    resources = jnp.where(~block & ~state.siphoned, state.res_credits + state.res_energy, 0)
    cross = jnp.asarray(CROSS, jnp.float32)
    programs = NEW_PROGRAM_VALUE * (cross @ new_program.astype(jnp.float32))
    first = ~jnp.any(state.owned) & (programs > 0)
    programs = jnp.where(first, jnp.maximum(programs, first_program_value), programs)
    worth = (programs
             + RESOURCE_VALUE * (cross @ resources.astype(jnp.float32))
             - SPAWN_COST * (cross @ spawn.astype(jnp.float32)))
    return jnp.where(block, -jnp.inf, worth)


def _seen_enemies(state):
    """bool[MAX_ENTITIES]: the enemies the observation shows (R20, R101): a cryptog only in the player's row or
    column or under SHOW."""
    rows, cols = jnp.asarray(CELL_ROW), jnp.asarray(CELL_COL)
    in_line = (rows[state.ent_pos] == rows[state.player_pos]) | (cols[state.ent_pos] == cols[state.player_pos])
    return (state.ent_active & state.ent_enemy
            & ((state.ent_type != CRYPTOG) | in_line | state.show_activated))


def _safe_costs(goal_dist, state):
    """(cost, hits), float32[4] and int32[4]: for each direction, the steps from where the env's own
    move-or-attack (R41-R45) leaves the player to the goal (``goal_dist``) plus ``DAMAGE_STEPS`` per hit the next
    enemy phase would deal there, and those hits. An attack stuns or kills its target and stays; a move onto the
    exit skips the enemy phase (R39). A hit is an unstunned seen enemy beside the player after the action, or a
    virus within two steps (it moves twice, R54)."""
    def outcome(d):
        after, _, _, reached = move_or_attack(state, d)
        return after.player_pos, after.ent_active & ~after.ent_stunned, reached

    pos, acting, reached = jax.vmap(outcome)(jnp.arange(4))
    rows, cols = jnp.asarray(CELL_ROW), jnp.asarray(CELL_COL)
    gap = (jnp.abs(rows[pos][:, None] - rows[state.ent_pos][None, :])
           + jnp.abs(cols[pos][:, None] - cols[state.ent_pos][None, :]))
    reach = jnp.where(state.ent_type == VIRUS, 2, 1)[None, :]
    hits = jnp.sum(acting & _seen_enemies(state)[None, :] & (gap <= reach), axis=1)
    hits = jnp.where(reached, 0, hits)
    return goal_dist[pos] + DAMAGE_STEPS * hits, hits


def _step_safely(goal_dist, state, mask, key):
    """(action, hits): the direction that best trades steps toward the goal (``goal_dist``) against the hits
    the next enemy phase would deal after it (``_safe_costs``), and those hits."""
    cost, hits = _safe_costs(goal_dist, state)
    action, direction = _cheapest_direction(cost, mask, key)
    return action, jnp.where(jnp.any(mask[:4]), hits[direction], 0)


def exit_rush_safe(state, mask, key):
    """``exit_rush`` that weighs each step against the hits the enemy phase after it would deal
    (``_step_safely``): it steps around an enemy it would end beside, or shoots one in line. It never siphons
    and never plays a program."""
    return _step_safely(_exit_distances(state), state, mask, key)[0]


DEATH_STEPS = 100.0           # exit-rush-deep: a turn that ends the game weighs as much as this many steps
NO_WAY = 1000.0               # exit-rush-deep: the cost of a turn after which no direction is allowed (not on 6 x 6)


def exit_rush_deep(state, mask, key):
    """``exit_rush_safe`` two turns deep. Each direction is played with the env's own move-or-attack and enemy
    phase (R52; its random order drawn from ``key``, and every enemy acts, seen or not); the turn after is
    costed by ``_safe_costs`` from where that leaves the player, its cheapest allowed direction counted. A hit
    in the played phase weighs ``DAMAGE_STEPS``, a death ``DEATH_STEPS``, a move onto the exit nothing. It never
    siphons and never plays a program."""
    to_exit = _exit_distances(state)    # moves, attacks and enemy phases move no block: one search serves both turns
    key_phase, key_tie = jax.random.split(key)
    phase_seed = rng.seed(key_phase)

    def turn(d):
        moved, _, _, reached = move_or_attack(state, d)
        after = select(reached, moved, enemy_phase(moved, phase_seed)[0])
        next_cost, _ = _safe_costs(to_exit, after)
        best_next = jnp.min(jnp.where(action_mask(after)[:4], next_cost, NO_WAY))
        cost = DAMAGE_STEPS * (state.hp - after.hp) + best_next
        return jnp.where(reached, 0.0, jnp.where(after.hp == 0, DEATH_STEPS, cost))

    return _cheapest_direction(jax.vmap(turn)(jnp.arange(4)), mask, key_tie)[0]


def exit_rush_programs(state, mask, key, first_program_value=NEW_PROGRAM_VALUE, last_resort=False):
    """A player that uses what it finds: it plays an owned program when its moment comes (an enemy in line
    for ROW/COL, a daemon near for D_BOM, HP 1 for RESET, ...; ``PROGRAM_ORDER``, programs do not end the
    turn, R40), detours a few steps for data-siphon pick-ups, siphons where the cross pays (new programs and
    resources, less the transmissions it releases), and otherwise runs for the exit like ``exit_rush``.
    ``first_program_value``: what a cross's new programs are worth at least while the player owns none;
    ``last_resort``: also play any owned program (but UNDO) when the step chosen would take the last HP."""
    to_exit = _exit_distances(state)
    from_player = _distances_from(state.player_pos, state)
    detour = (from_player + to_exit - to_exit[state.player_pos]).astype(jnp.float32)
    reachable = (from_player < UNREACHED) & (to_exit < UNREACHED)
    cross_worth = _cross_worth(state, first_program_value)
    pickup_worth = jnp.where(state.content == DATA_SIPHON, PICKUP_VALUE, -jnp.inf)
    siphon_worth = jnp.where(state.siphons > 0, cross_worth, -jnp.inf)
    worth = jnp.where(reachable, jnp.maximum(pickup_worth, siphon_worth - SIPHON_WORTH) - detour, -jnp.inf)
    waypoint = jnp.argmax(worth)
    has_waypoint = worth[waypoint] >= 0
    siphon_here = has_waypoint & (waypoint == state.player_pos) & mask[A_SIPHON]

    goal_dist = jnp.where(has_waypoint, _distances_from(waypoint, state), to_exit)
    move, hits = _step_safely(goal_dist, state, mask, key)

    order = jnp.asarray(PROGRAM_ORDER)
    playable = (_program_moments(state, to_exit, siphon_here, hits, last_resort) & mask[5:])[order]
    program_action = (5 + order[jnp.argmax(playable)]).astype(jnp.int32)
    action = jnp.where(siphon_here, jnp.int32(A_SIPHON), move)
    return jnp.where(jnp.any(playable), program_action, action)


def exit_rush_collector(state, mask, key):
    """``exit_rush_programs`` that values a game's first program at ``FIRST_PROGRAM_VALUE`` steps of detour and
    plays any program it owns as a last resort."""
    return exit_rush_programs(state, mask, key, FIRST_PROGRAM_VALUE, last_resort=True)


POLICIES = {"exit-rush": exit_rush, "exit-rush-siphon": exit_rush_siphon, "exit-rush-safe": exit_rush_safe,
            "exit-rush-deep": exit_rush_deep, "exit-rush-programs": exit_rush_programs,
            "exit-rush-collector": exit_rush_collector}
