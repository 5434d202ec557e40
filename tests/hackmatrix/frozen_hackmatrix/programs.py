"""The 23 programs (actions 5-27): effects R71-R93, one function per program.

Most effects are ``effect(state, seed) -> (state, kills, reached_exit)``, applied after the cost is paid;
``seed`` (uint32, rng.py) feeds the randomised ones (WARP, POLY) through their own counters. The six that
damage enemies (DEBUG, ROW, COL, D_BOM, ANTI-V, HACK) only say whom and by how much (a damage plan), and
PUSH and PULL are one function with the direction as an argument: ``run_program`` carries out the chosen
plan with one damage pass and one displacement, then keeps the chosen effect field by field
(``state.select`` passes through the fields an effect did not rebuild). Under vmap every effect is computed
for every lane, so the shared passes mean less to compute and to compile. ``run_program_where`` is
what ``step`` calls: under ``vmap`` it runs programs only for the lanes that chose one (compact.py), since
most steps are moves.
Applicability (the mask bits) is in observe.program_rule_mask; the mask guarantees it here.
"""
import jax.numpy as jnp

from . import history, rng
from .compact import compacted
from .constants import (
    BIG, BLOCK, DAEMON, EMPTY, ENEMY_MAX_HP, MAX_ENTITIES, NUM_PROGRAMS, PROGRAM_CREDITS,
    PROGRAM_ENERGY, PROGRAM_NAMES, VIRUS,
)
from .observe import first_at_cell
from .state import select

i32 = jnp.int32
NO_KILLS = jnp.zeros((), i32)
NOT_REACHED = jnp.bool_(False)


def damage_enemies(state, hit, amount):
    """R21: enemies in ``hit`` lose ``amount`` HP; the dead are removed, survivors stunned.
    Returns (state, kills), kills excluding scheduled-task enemies (R106)."""
    hit = hit & state.ent_active & state.ent_enemy
    hp = jnp.where(hit, jnp.maximum(state.ent_hp - amount, 0), state.ent_hp)
    dead = hit & (hp == 0)
    return state.replace(
        ent_hp=hp,
        ent_active=state.ent_active & ~dead,
        ent_stunned=state.ent_stunned | (hit & ~dead),
    ), jnp.sum(dead & ~state.ent_sched, dtype=i32)


def _rowcol(cell):
    return cell // 6, cell % 6


def _enemies(state):
    return state.ent_active & state.ent_enemy


def _around(cell_a, cell_b):
    """The 8 cells around: Chebyshev distance exactly 1 (R7)."""
    (ra, ca), (rb, cb) = _rowcol(cell_a), _rowcol(cell_b)
    return jnp.maximum(jnp.abs(ra - rb), jnp.abs(ca - cb)) == 1


def _displace(state, toward):
    """R71 PUSH (toward False) / R72 PULL (toward True); ``toward`` may be traced, so both share one pass."""
    pr, pc = _rowcol(state.player_pos)
    er, ec = _rowcol(state.ent_pos)
    sign = jnp.where(toward, -1, 1)
    dr, dc = sign * jnp.sign(er - pr), sign * jnp.sign(ec - pc)
    # candidates in order: diagonal, row step, column step
    cr = jnp.stack([er + dr, er + dr, er], axis=-1)
    cc = jnp.stack([ec + dc, ec, ec + dc], axis=-1)
    ok = jnp.stack([(dr != 0) & (dc != 0), dr != 0, dc != 0], axis=-1)
    ok = ok & (cr >= 0) & (cr < 6) & (cc >= 0) & (cc < 6)
    dist = jnp.abs(cr - pr[..., None]) + jnp.abs(cc - pc[..., None])
    ok = ok & ~(toward & (dist == 0))                          # PULL never moves onto the player
    score = jnp.where(ok, jnp.where(toward, dist, -dist), BIG)  # PULL: smallest distance, PUSH: largest
    best = jnp.argmin(score, axis=-1)                          # first in order on ties
    target = jnp.take_along_axis(cr * 6 + cc, best[:, None], axis=-1)[:, 0]
    has = _enemies(state) & jnp.any(ok, axis=-1)
    # applied in list order, an enemy stays if an earlier one already moved to its target; the
    # first enemy aiming at a cell always moves, so "moves" == "first in list order with that target"
    aim = jnp.where(has, target, 36)                           # 36: a spare bucket for "no target"
    first = jnp.full(37, BIG, i32).at[aim].min(state.ent_order)
    moves = has & (first[aim] == state.ent_order)
    return state.replace(ent_pos=jnp.where(moves, target, state.ent_pos).astype(i32)), NO_KILLS, NOT_REACHED


def crash(state, seed):
    """R73: the 8 surrounding cells lose their blocks and every entity; one kill per cell and kind,
    decided by the first entity of that kind there (list order)."""
    cells = jnp.arange(36, dtype=i32)
    near = _around(cells, state.player_pos)
    kills = NO_KILLS
    for kind in (state.ent_enemy, ~state.ent_enemy):
        has, slot = first_at_cell(state, kind)
        kills = kills + jnp.sum(near & has & ~state.ent_sched[slot], dtype=i32)
    return state.replace(
        content=jnp.where(near & (state.content == BLOCK), EMPTY, state.content).astype(i32),
        ent_active=state.ent_active & ~near[state.ent_pos],
    ), kills, NOT_REACHED


def warp(state, seed):
    """R74: jump to a uniformly chosen enemy or transmission, removing everything of its kind there."""
    active = state.ent_active
    pick = rng.randint(seed, 0x3A8, jnp.sum(active, dtype=i32))
    slot = jnp.argmax(active & (jnp.cumsum(active) - 1 == pick))
    cell = state.ent_pos[slot]
    gone = active & (state.ent_pos == cell) & (state.ent_enemy == state.ent_enemy[slot])
    return state.replace(
        player_pos=cell,
        ent_active=active & ~gone,
    ), (~state.ent_sched[slot]).astype(i32), cell == state.exit_pos


def poly(state, seed):
    """R75: every enemy becomes one of the 3 other types, keeping its damage taken."""
    en = _enemies(state)
    slots = jnp.arange(state.ent_type.shape[0], dtype=i32)
    new_type = (state.ent_type + 1 + rng.randint(seed, 0x9017 + slots, 3)) % 4
    max_hp = jnp.asarray(ENEMY_MAX_HP)
    hp = max_hp[new_type] - (max_hp[state.ent_type] - state.ent_hp)
    dead = en & (hp <= 0)
    return state.replace(
        ent_type=jnp.where(en, new_type, state.ent_type).astype(i32),
        ent_hp=jnp.where(en, jnp.maximum(hp, 0), state.ent_hp).astype(i32),
        ent_active=state.ent_active & ~dead,
    ), jnp.sum(dead & ~state.ent_sched, dtype=i32), NOT_REACHED


def wait(state, seed):
    """R76: nothing; the caller ends the turn."""
    return state, NO_KILLS, NOT_REACHED


def undo(state, seed):
    """R93: restore the newest snapshot (the caller pops it from the stack)."""
    return history.restore(state, history.newest(state)), NO_KILLS, NOT_REACHED


def step_program(state, seed):
    """R91: the next enemy phase that would run is skipped."""
    return state.replace(step_active=jnp.bool_(True)), NO_KILLS, NOT_REACHED


def siph_plus(state, seed):
    """R90: one more data siphon (no pick-up reward)."""
    return state.replace(siphons=state.siphons + 1), NO_KILLS, NOT_REACHED


def exch(state, seed):
    """R89: the 4 credits are the cost; +4 energy."""
    return state.replace(energy=state.energy + 4), NO_KILLS, NOT_REACHED


def show(state, seed):
    """R82: cryptogs visible until the stage ends."""
    return state.replace(show_activated=jnp.bool_(True)), NO_KILLS, NOT_REACHED


def reset(state, seed):
    """R88: HP back to 3."""
    return state.replace(hp=jnp.int32(3)), NO_KILLS, NOT_REACHED


def calm(state, seed):
    """R83: no scheduled spawns for the rest of the stage."""
    return state.replace(sched_disabled=jnp.bool_(True)), NO_KILLS, NOT_REACHED


def delay(state, seed):
    """R84: every transmission waits 3 more turns."""
    tr = state.ent_active & ~state.ent_enemy
    return state.replace(ent_turns=jnp.where(tr, state.ent_turns + 3, state.ent_turns)), NO_KILLS, NOT_REACHED


def score(state, seed):
    """R85: score += 8 - currentStage."""
    return state.replace(score=state.score + 8 - state.stage), NO_KILLS, NOT_REACHED


def reduc(state, seed):
    """R86: unsiphoned blocks (question blocks included) spawn one transmission fewer."""
    live = (state.content == BLOCK) & ~state.siphoned
    return state.replace(blk_spawn=jnp.where(live, jnp.maximum(state.blk_spawn - 1, 0), state.blk_spawn)), \
        NO_KILLS, NOT_REACHED


def atk_plus(state, seed):
    """R87: +1 attack damage, at most twice per stage (the mask enforces it); no other cap (R17)."""
    return state.replace(attack=state.attack + 1, atk_plus_uses=state.atk_plus_uses + 1), NO_KILLS, NOT_REACHED


# The six programs that damage enemies (R21) differ only in which enemies, by how much and, for D_BOM, a daemon
# removed first: each returns that plan, (hit: bool[slots], amount, removed: bool[slots]), and run_program
# carries out the chosen one with a single damage_enemies, so the compiled step holds one damage pass, not six.
NONE_REMOVED = jnp.zeros(MAX_ENTITIES, bool)


def debug(state):
    """R77: enemies standing on blocks take attackDamage."""
    return state.content[state.ent_pos] == BLOCK, state.attack, NONE_REMOVED


def row(state):
    """R78: enemies in the player's row take attackDamage, whatever is in between."""
    return state.ent_pos // 6 == state.player_pos // 6, state.attack, NONE_REMOVED


def col(state):
    """R78: enemies in the player's column take attackDamage."""
    return state.ent_pos % 6 == state.player_pos % 6, state.attack, NONE_REMOVED


def d_bom(state):
    """R80: remove the nearest daemon (list order on ties); 1 damage to enemies on the 8 cells around it."""
    pr, pc = _rowcol(state.player_pos)
    er, ec = _rowcol(state.ent_pos)
    daemon = _enemies(state) & (state.ent_type == DAEMON)
    dist = jnp.where(daemon, jnp.abs(er - pr) + jnp.abs(ec - pc), BIG)
    nearest = daemon & (dist == jnp.min(dist))
    slot = jnp.argmin(jnp.where(nearest, state.ent_order, BIG))
    return _around(state.ent_pos, state.ent_pos[slot]), i32(1), jnp.arange(MAX_ENTITIES) == slot


def anti_v(state):
    """R81: every virus takes exactly 1 damage."""
    return state.ent_type == VIRUS, i32(1), NONE_REMOVED


def hack(state):
    """R79: enemies on siphoned cells take attackDamage; blocks are not touched."""
    return state.siphoned[state.ent_pos], state.attack, NONE_REMOVED


# Program index (§9 order) -> its effect or damage plan. PUSH and PULL share _displace (the direction traced).
_INDEX = {name: i for i, name in enumerate(PROGRAM_NAMES)}
EFFECTS = {_INDEX[name]: effect for name, effect in (
    ("CRASH", crash), ("WARP", warp), ("POLY", poly), ("WAIT", wait), ("UNDO", undo), ("STEP", step_program),
    ("SIPH+", siph_plus), ("EXCH", exch), ("SHOW", show), ("RESET", reset), ("CALM", calm), ("DELAY", delay),
    ("SCORE", score), ("REDUC", reduc), ("ATK+", atk_plus))}
DAMAGE_PLANS = {_INDEX[name]: plan for name, plan in (
    ("DEBUG", debug), ("ROW", row), ("COL", col), ("D_BOM", d_bom), ("ANTI-V", anti_v), ("HACK", hack))}
PUSH, PULL = _INDEX["PUSH"], _INDEX["PULL"]
assert sorted([PUSH, PULL, *EFFECTS, *DAMAGE_PLANS]) == list(range(NUM_PROGRAMS))


def run_program(state, program, seed):
    """R51: pay the program's costs, apply its effect. Returns (state, kills, reached_exit)."""
    k = jnp.clip(program, 0, NUM_PROGRAMS - 1)
    paid = state.replace(credits=state.credits - jnp.asarray(PROGRAM_CREDITS)[k],
                         energy=state.energy - jnp.asarray(PROGRAM_ENERGY)[k])
    hit, amount, removed = jnp.zeros(MAX_ENTITIES, bool), i32(0), NONE_REMOVED
    for i, plan in DAMAGE_PLANS.items():
        h, a, r = plan(paid)
        hit, amount, removed = jnp.where(k == i, h, hit), jnp.where(k == i, a, amount), jnp.where(k == i, r, removed)
    damaged, kills = damage_enemies(paid.replace(ent_active=paid.ent_active & ~removed), hit, amount)
    out = damaged, kills + jnp.sum(removed & ~paid.ent_sched, dtype=i32), NOT_REACHED
    out = select((k == PUSH) | (k == PULL), _displace(paid, k == PULL), out)
    for i, effect in EFFECTS.items():
        out = select(k == i, effect(paid, seed), out)
    return out


_run_compact = compacted(lambda need, state, program, seed: run_program(state, program, seed))


def run_program_where(need, state, program, seed):
    """``run_program`` where ``need``, else ``(state, 0, False)``. The program branch sees the history
    as just its newest snapshot (all UNDO reads), so packing lanes moves 120 words each, not 1,920;
    programs never write the history, the caller's push/pop does."""
    slim = state.replace(history=history.newest(state)[None], history_top=jnp.int32(1))
    out, kills, reached = _run_compact(need, (slim, NO_KILLS, NOT_REACHED), slim, program, seed)
    return out.replace(history=state.history, history_top=state.history_top), kills, reached
