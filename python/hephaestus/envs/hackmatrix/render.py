"""Compact ASCII rendering of a (single, unbatched) EnvState."""
import numpy as np

from .constants import BLOCK, DATA_SIPHON, ENEMY_LETTERS, EXIT, PROGRAM_NAMES


def render_text(state) -> str:
    """Board with row 5 at the top. Cell = up to two tokens:
    ``@`` player, ``V2`` enemy type letter + hp (``!`` stunned, ``~`` disabled, lowercase =
    hidden cryptog is still shown), ``t1`` transmission + turns, ``D7``/``P03``/``??`` data /
    program / question block (``*`` = siphoned), ``EX`` exit, ``$S`` data-siphon pick-up,
    ``c2``/``e3`` credits/energy stack, ``+`` siphon centre."""
    s = {k: np.asarray(v) for k, v in vars(state).items()} if not hasattr(state, "__dataclass_fields__") \
        else {k: np.asarray(getattr(state, k)) for k in state.__dataclass_fields__}
    cells = [[] for _ in range(36)]
    p = int(s["player_pos"])
    cells[p].append("@")
    ents = [j for j in np.argsort(s["ent_order"]) if s["ent_active"][j]]
    for j in ents:
        c = int(s["ent_pos"][j])
        if s["ent_enemy"][j]:
            flag = "!" if s["ent_stunned"][j] else ("~" if s["ent_disabled"][j] > 0 else "")
            cells[c].append(f"{ENEMY_LETTERS[s['ent_type'][j]]}{s['ent_hp'][j]}{flag}")
        else:
            cells[c].append(f"t{s['ent_turns'][j]}")
    for c in range(36):
        ct = s["content"][c]
        star = "*" if s["siphoned"][c] else ""
        if ct == BLOCK:
            if s["blk_question"][c]:
                cells[c].append("??" + star)
            elif s["blk_data"][c]:
                cells[c].append(f"D{s['blk_points'][c]}{star}")
            else:
                cells[c].append(f"P{s['blk_program'][c]:02d}{star}")
        elif ct == EXIT:
            cells[c].append("EX")
        elif ct == DATA_SIPHON:
            cells[c].append("$S")
        if s["res_credits"][c]:
            cells[c].append(f"c{s['res_credits'][c]}")
        if s["res_energy"][c]:
            cells[c].append(f"e{s['res_energy'][c]}")
        if s["siphon_center"][c]:
            cells[c].append("+")
        if not cells[c] and s["siphoned"][c]:
            cells[c].append("*")
    lines = []
    for r in range(5, -1, -1):
        row = []
        for col in range(6):
            tok = " ".join(cells[r * 6 + col][:2]) or "."
            row.append(f"{tok:<8.8}")
        lines.append(f"{r} |" + "|".join(row) + "|")
    lines.append("   " + "".join(f"{c:<9}" for c in range(6)))
    owned = [PROGRAM_NAMES[k] for k in range(23) if s["owned"][k]]
    lines.append(
        f"HP {s['hp']}/3  credits {s['credits']}  energy {s['energy']}  siphons {s['siphons']}  "
        f"score {s['score']}  attack {s['attack']}  stage {s['stage']}  turn {s['turn']}  "
        f"step {s['time']}  next_sched {s['next_sched_turn']} (every {s['sched_interval']})  "
        f"pending {s['pending_siphon']}")
    active = [name for name, on in (("SHOW", s["show_activated"]), ("CALM", s["sched_disabled"]),
                                    ("STEP", s["step_active"])) if on]
    lines.append("programs: " + (", ".join(owned) if owned else "-")
                 + f"  active: {', '.join(active) or '-'}  ATK+ used {s['atk_plus_uses']}/2"
                 + f"  undo stack {s['history_len']}")
    ent_desc = []
    for j in ents:
        r, c = divmod(int(s["ent_pos"][j]), 6)
        flags = ("S" if s["ent_sched"][j] else "") + ("F" if s["ent_siphon"][j] else "")
        if s["ent_enemy"][j]:
            ent_desc.append(f"{ENEMY_LETTERS[s['ent_type'][j]]}@({r},{c}) hp{s['ent_hp'][j]}"
                            f" dis{s['ent_disabled'][j]}{' stun' if s['ent_stunned'][j] else ''} {flags}".rstrip())
        else:
            ent_desc.append(f"t[{ENEMY_LETTERS[s['ent_type'][j]]}]@({r},{c}) turns{s['ent_turns'][j]} {flags}".rstrip())
    lines.append("entities: " + ("; ".join(ent_desc) if ent_desc else "-"))
    return "\n".join(lines)
