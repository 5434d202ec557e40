"""make_state: hand-built states from a readable description (D12)."""
import jax.numpy as jnp
import numpy as np

from .constants import (
    BLOCK, DATA_SIPHON, ENEMY_MAX_HP, EXIT, MAX_ENTITIES, PROGRAM_NAMES, PROGRAM_SPAWN,
)
from .generate import blank_state
from .history import push_pop, snapshot

_TYPES = {"virus": 0, "daemon": 1, "glitch": 2, "cryptog": 3, "v": 0, "d": 1, "g": 2, "c": 3}


_BLOCK_KEYS = ("pos", "kind", "points", "program", "payload", "spawn", "siphoned")
_ENEMY_KEYS = ("type", "pos", "hp", "disabled", "stunned", "sched", "siphon")
_TRANSMISSION_KEYS = ("type", "pos", "turns", "sched", "siphon")
_BLOCK_KINDS = ("data", "program", "question")


def _check_keys(what, entry, known):
    """A misspelt key would silently fall back to its default and build another position."""
    unknown = [k for k in entry if k not in known]
    if unknown:
        raise ValueError(f"make_state: unknown {what} key {unknown[0]!r} in {entry!r}; "
                         f"known keys: {', '.join(known)}")
    if "pos" not in entry:
        raise ValueError(f"make_state: {what} {entry!r} has no 'pos'")


def _cell(rc):
    r, c = rc
    if not (0 <= r < 6 and 0 <= c < 6):
        raise ValueError(f"make_state: cell {rc!r} is off the 6x6 board (R4)")
    return int(r) * 6 + int(c)


def _etype(t):
    if isinstance(t, str) and t.lower() not in _TYPES:
        raise ValueError(f"make_state: unknown enemy type {t!r}; known types: virus, daemon, glitch, cryptog")
    return _TYPES[t.lower()] if isinstance(t, str) else int(t)


def _prog(p):
    return PROGRAM_NAMES.index(p.upper()) if isinstance(p, str) else int(p)


def make_state(
    player=(0, 0), hp=3, credits=0, energy=0, siphons=0, score=0, attack=1, owned=(),
    stage=1, turn=0, sched_interval=12, next_sched_turn=None, pending_siphon=0,
    atk_plus_uses=0, history=(), show_activated=False, sched_disabled=False,
    step_active=False, exit=(5, 5), exit_pos=None, data_siphons=(), blocks=(), resources=None,
    siphoned=(), siphon_centers=(), enemies=(), transmissions=(), time=0,
):
    """Build an EnvState. Defaults follow R27 (exit at (5,5), no grid contents, no entities).

    - ``player``: (row, col); ``owned``: program names or indices (0..22).
    - ``exit``: (row, col) of the exit cell (content = exit) and, unless ``exit_pos`` is given, of
      exitPosition too.
    - ``exit_pos``: (row, col) of exitPosition when it differs from the exit cell, as after an UNDO
      across a stage boundary (R13, R94): moving onto the exit cell completes the stage (R45), while
      WARP (R74) and the exit distance (R108, R118) use exitPosition.
    - ``data_siphons``: cells with a data-siphon pick-up.
    - ``blocks``: dicts ``{"pos": (r,c), "kind": "data"|"program"|"question", "points": n,
      "program": name|k, "payload": "data"|"program" (question only), "spawn": n (default: R31
      rule), "siphoned": bool}``.
    - ``resources``: dict ``{(r,c): ("credits"|"energy", n)}``.
    - ``siphoned`` / ``siphon_centers``: cells with isSiphoned / siphonCenter.
    - ``enemies``: dicts ``{"type": "virus"|..|0..3, "pos": (r,c), "hp": n (default max),
      "disabled": n, "stunned": bool, "sched": bool, "siphon": bool}`` in list order.
    - ``transmissions``: dicts ``{"pos", "turns": 1, "type": 0, "sched", "siphon"}`` in list order.
    - A key a dict does not know, a block kind other than the three, or a cell off the board raises
      ValueError naming it (a misspelt key would otherwise build another position).
    - ``history``: EnvStates, oldest first, whose snapshots (R92) form the UNDO stack; the newest
      16 are kept (D7).
    """
    s = blank_state()
    i32 = np.int32
    content = np.zeros(36, i32)
    blk_data = np.zeros(36, bool)
    blk_q = np.zeros(36, bool)
    pts = np.zeros(36, i32)
    prog = np.zeros(36, i32)
    spawn = np.zeros(36, i32)
    cred = np.zeros(36, i32)
    ener = np.zeros(36, i32)
    sif = np.zeros(36, bool)
    ctr = np.zeros(36, bool)
    ex = _cell(exit)
    content[ex] = EXIT
    for rc in data_siphons:
        content[_cell(rc)] = DATA_SIPHON
    for b in blocks:
        _check_keys("block", b, _BLOCK_KEYS)
        i = _cell(b["pos"])
        kind = b.get("kind", "data")
        if kind not in _BLOCK_KINDS:
            raise ValueError(f"make_state: unknown block kind {kind!r}; known kinds: {', '.join(_BLOCK_KINDS)}")
        content[i] = BLOCK
        is_data = kind == "data" or (kind == "question" and b.get("payload", "data") == "data")
        blk_data[i] = is_data
        blk_q[i] = kind == "question"
        if is_data:
            pts[i] = b.get("points", 1)
            spawn[i] = b.get("spawn", pts[i])
        else:
            prog[i] = _prog(b.get("program", 0))
            spawn[i] = b.get("spawn", PROGRAM_SPAWN[prog[i]])
        sif[i] = b.get("siphoned", False)
    for rc, (kind, n) in (resources or {}).items():
        if kind not in ("credits", "energy"):
            raise ValueError(f"make_state: unknown resource kind {kind!r}; known kinds: credits, energy")
        (cred if kind == "credits" else ener)[_cell(rc)] = n
    for rc in siphoned:
        sif[_cell(rc)] = True
    for rc in siphon_centers:
        ctr[_cell(rc)] = True
    N = MAX_ENTITIES
    ents = [(True, e) for e in enemies] + [(False, t) for t in transmissions]
    assert len(ents) <= N
    a = {k: np.zeros(N, bool) for k in ("active", "enemy", "stunned", "sched", "siphon")}
    a.update({k: np.zeros(N, i32) for k in ("type", "pos", "hp", "turns", "disabled", "order")})
    for j, (is_en, e) in enumerate(ents):
        if is_en:
            _check_keys("enemy", e, _ENEMY_KEYS)
        else:
            _check_keys("transmission", e, _TRANSMISSION_KEYS)
        t = _etype(e.get("type", 0))
        a["active"][j] = True
        a["enemy"][j] = is_en
        a["type"][j] = t
        a["pos"][j] = _cell(e["pos"])
        a["hp"][j] = e.get("hp", ENEMY_MAX_HP[t]) if is_en else 0
        a["turns"][j] = 0 if is_en else e.get("turns", 1)
        a["disabled"][j] = e.get("disabled", 0) if is_en else 0
        a["stunned"][j] = e.get("stunned", False)
        a["sched"][j] = e.get("sched", False)
        a["siphon"][j] = e.get("siphon", False)
        a["order"][j] = j
    owned_m = np.zeros(23, bool)
    for p in owned:
        owned_m[_prog(p)] = True
    J = lambda x, dt=jnp.int32: jnp.asarray(x, dt)
    s = s.replace(
        time=J(time), player_pos=J(_cell(player)), hp=J(hp), credits=J(credits), energy=J(energy),
        siphons=J(siphons), score=J(score), attack=J(attack), owned=J(owned_m, bool), stage=J(stage),
        turn=J(turn), sched_interval=J(sched_interval),
        next_sched_turn=J(sched_interval if next_sched_turn is None else next_sched_turn),
        pending_siphon=J(pending_siphon), atk_plus_uses=J(atk_plus_uses),
        show_activated=J(show_activated, bool), sched_disabled=J(sched_disabled, bool),
        step_active=J(step_active, bool),
        exit_pos=J(ex if exit_pos is None else _cell(exit_pos)),
        content=J(content), blk_data=J(blk_data, bool), blk_question=J(blk_q, bool), blk_points=J(pts),
        blk_program=J(prog), blk_spawn=J(spawn), res_credits=J(cred), res_energy=J(ener),
        siphoned=J(sif, bool), siphon_center=J(ctr, bool),
        ent_active=J(a["active"], bool), ent_enemy=J(a["enemy"], bool), ent_type=J(a["type"]),
        ent_pos=J(a["pos"]), ent_hp=J(a["hp"]), ent_turns=J(a["turns"]), ent_disabled=J(a["disabled"]),
        ent_stunned=J(a["stunned"], bool), ent_sched=J(a["sched"], bool), ent_siphon=J(a["siphon"], bool),
        ent_order=J(a["order"]), next_order=J(len(ents)),
    )
    for earlier in history:
        s = push_pop(s, True, False, snapshot(earlier))
    return s
