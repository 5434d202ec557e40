"""RGB rendering of one (unbatched) HackMatrix `EnvState`: `render_rgb(state) -> uint8[H, W, 3]`.

Pure `jax.numpy` with fixed shapes, so it can be jitted and vmapped (`jax.jit(render_rgb)`). Layout:

* the board, 6 x 6 cells of `CELL` (64) px, row 5 at the top, column 0 at the left;
* below it a status panel (`PANEL` px): HP, credits, energy, siphons, score, attack, stage, turn, step and the
  number of programs owned.

Inside a cell (text in a built-in 3x5 bitmap font scaled x2, no font files):

* background: empty (dark), exit (green, `EXIT`), data-siphon pick-up (teal, `SIPH`), data block (blue,
  `D<points>`), program block (purple, program name), question block (orange, `??`); a siphoned block is
  drawn darker with a `*`, a siphoned empty cell slightly lighter; a siphon centre gets a `+` in its corner;
* the player: a yellow disc in the middle;
* the first entity on the cell (list order): an enemy as `<V|D|G|C><hp>` in red (`!` stunned, `~` disabled),
  a transmission as `T<turns>` in magenta, `+n` when more entities share the cell;
* the bottom line: resource stacks `C<n>` (gold) and `E<n>` (cyan).

The font is `hephaestus/envs/bitmap_font.py` (the watch tool captions its frames with it too).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from hephaestus.envs.bitmap_font import CODE, SCALE, SPACE, draw_text_np, encode, glyph_block  # noqa: F401

from .constants import BLOCK, DATA_SIPHON, EXIT, NCELLS, PROGRAM_NAMES

CELL = 64
BOARD = 6 * CELL
PANEL = 56
HEIGHT, WIDTH = BOARD + PANEL, BOARD
CHAR_W, CHAR_H = 4 * SCALE, 6 * SCALE
CELL_LINES, CELL_CHARS = 5, 7
TEXT_X0, TEXT_Y0 = 4, 3  # text origin inside a cell
PANEL_CHARS = (WIDTH - 8) // CHAR_W

# ------------------------------------------------------------------------------------------------ colours
COL_BG = (28, 28, 38)
COL_GRID = (70, 70, 90)
COL_SIPHONED_EMPTY = (48, 48, 62)
COL_EXIT = (40, 160, 70)
COL_PICKUP = (0, 130, 140)
COL_DATA = (50, 90, 200)
COL_PROGRAM = (140, 60, 180)
COL_QUESTION = (200, 120, 30)
COL_PLAYER = (245, 215, 40)
COL_ENEMY = (255, 80, 80)
COL_TRANS = (255, 120, 255)
COL_CREDITS = (255, 200, 60)
COL_ENERGY = (90, 220, 255)
COL_TEXT = (235, 235, 235)
COL_PANEL = (14, 14, 20)
SIPHONED_DIM = 0.5  # siphoned blocks: background times this

# --------------------------------------------------------------------------------------- jnp text helpers
_DIGITS = jnp.asarray(encode("0123456789"))
_LETTERS_ENEMY = encode("VDGC")
_PROGRAM_CODES = np.stack([encode(n.replace("_", ""), CELL_CHARS) for n in PROGRAM_NAMES])  # [23, 7]


def _num(x, width):
    """Left-aligned decimal codes of int x >= 0 (clipped to `width` digits), blank padded: int32[..., width]."""
    x = jnp.clip(jnp.asarray(x, jnp.int32), 0, 10**width - 1)
    ndig = jnp.ones_like(x) + sum((x >= 10**k).astype(jnp.int32) for k in range(1, width))
    i = jnp.arange(width)
    power = jnp.asarray([10**k for k in range(width)], jnp.int32)
    exp = jnp.clip(ndig[..., None] - 1 - i, 0, width - 1)
    digit = (x[..., None] // power[exp]) % 10
    return jnp.where(i < ndig[..., None], _DIGITS[digit], SPACE), ndig


def _const(text, shape_prefix=()):
    return jnp.broadcast_to(jnp.asarray(encode(text)), tuple(shape_prefix) + (len(text),))


def _place(line, codes, pos):
    """Write codes[..., k] into line[..., width] at column `pos` (per-row int array), clipped at the end."""
    width, k = line.shape[-1], codes.shape[-1]
    col = jnp.arange(width)
    rel = col - pos[..., None]
    inside = (rel >= 0) & (rel < k)
    picked = jnp.take_along_axis(codes, jnp.clip(rel, 0, k - 1), axis=-1)
    return jnp.where(inside & (picked != SPACE), picked, line)


def _rgb(c):
    return jnp.asarray(c, jnp.float32)


# ------------------------------------------------------------------------------------------------ render
def _entity_summary(state):
    """Per cell: (has entity, is enemy, type, hp, turns, stunned, disabled, count) of its first entity."""
    on = state.ent_active[None, :] & (state.ent_pos[None, :] == jnp.arange(NCELLS)[:, None])  # [36, E]
    big = jnp.iinfo(jnp.int32).max
    slot = jnp.argmin(jnp.where(on, state.ent_order[None, :], big), axis=1)
    count = jnp.sum(on, axis=1)
    return (count > 0, state.ent_enemy[slot], state.ent_type[slot], state.ent_hp[slot], state.ent_turns[slot],
            state.ent_stunned[slot], state.ent_disabled[slot] > 0, count)


def _cell_text(state):
    """Character codes [36, CELL_LINES, CELL_CHARS] and colours [36, CELL_LINES, CELL_CHARS, 3]."""
    n, w = NCELLS, CELL_CHARS
    content = state.content
    is_block = content == BLOCK
    blank = jnp.full((n, w), SPACE, jnp.int32)
    zeros = jnp.zeros((n,), jnp.int32)

    # line 0: block / exit / pick-up label
    pts, nd = _num(state.blk_points, 2)
    data_lbl = _place(_place(blank, _const("D", (n,)), zeros), pts, zeros + 1)
    data_lbl = _place(data_lbl, _const("*", (n,)), 1 + nd)
    prog_lbl = jnp.asarray(_PROGRAM_CODES)[jnp.clip(state.blk_program, 0, len(PROGRAM_NAMES) - 1)]
    prog_len = jnp.sum(prog_lbl != SPACE, axis=1)
    prog_lbl = _place(prog_lbl, _const("*", (n,)), jnp.minimum(prog_len, w - 1))
    q_lbl = _place(blank, _const("??*", (n,)), zeros)
    q_lbl = jnp.where(jnp.arange(w) == 2, jnp.where(state.siphoned[:, None], q_lbl, SPACE), q_lbl)
    data_lbl = jnp.where((jnp.arange(w) == (1 + nd)[:, None]) & ~state.siphoned[:, None], SPACE, data_lbl)
    prog_lbl = jnp.where((jnp.arange(w) == jnp.minimum(prog_len, w - 1)[:, None]) & ~state.siphoned[:, None],
                         SPACE, prog_lbl)
    block_lbl = jnp.where(state.blk_question[:, None], q_lbl, jnp.where(state.blk_data[:, None], data_lbl, prog_lbl))
    line0 = jnp.where(is_block[:, None], block_lbl,
                      jnp.where((content == EXIT)[:, None], _place(blank, _const("EXIT", (n,)), zeros),
                                jnp.where((content == DATA_SIPHON)[:, None],
                                          _place(blank, _const("SIPH", (n,)), zeros), blank)))
    # siphon centre marker at the right end of line 0
    line0 = jnp.where((jnp.arange(w) == w - 1) & state.siphon_center[:, None], CODE["+"], line0)

    # line 2: first entity (centred-ish) and how many more
    has, enemy, etype, hp, turns, stunned, disabled, count = _entity_summary(state)
    letter = jnp.where(enemy, jnp.asarray(_LETTERS_ENEMY)[jnp.clip(etype, 0, 3)], CODE["T"])
    val, nv = _num(jnp.where(enemy, hp, turns), 2)
    ent = _place(_place(blank, letter[:, None], zeros + 2), val, zeros + 3)
    flag = jnp.where(stunned, CODE["!"], jnp.where(disabled, CODE["~"], SPACE))
    ent = _place(ent, jnp.where(enemy, flag, SPACE)[:, None], 3 + nv)
    more, _ = _num(count - 1, 1)
    ent = jnp.where((jnp.arange(w) == 5) & (count > 1)[:, None], CODE["+"], ent)
    ent = jnp.where((jnp.arange(w) == 6) & (count > 1)[:, None], more[:, :1], ent)
    line2 = jnp.where(has[:, None], ent, blank)
    ent_col = jnp.where(enemy, 1, 0)[:, None]  # 1 enemy, 0 transmission

    # line 4: resources
    cnum, nc = _num(state.res_credits, 2)
    enum_, _ = _num(state.res_energy, 2)
    hasc, hase = state.res_credits > 0, state.res_energy > 0
    line4 = jnp.where(hasc[:, None], _place(_place(blank, _const("C", (n,)), zeros), cnum, zeros + 1), blank)
    epos = jnp.where(hasc, nc + 2, 0)
    line4 = jnp.where(hase[:, None], _place(_place(line4, _const("E", (n,)), epos), enum_, epos + 1), line4)
    col_idx = jnp.arange(w)[None, :]
    res_col = jnp.where((hase[:, None] & (col_idx >= epos[:, None]))[..., None], _rgb(COL_ENERGY), _rgb(COL_CREDITS))

    codes = jnp.stack([line0, blank, line2, blank, line4], axis=1)
    white = jnp.broadcast_to(_rgb(COL_TEXT), (n, w, 3))
    ent_rgb = jnp.where(ent_col[..., None] == 1, _rgb(COL_ENEMY), _rgb(COL_TRANS))
    ent_rgb = jnp.broadcast_to(ent_rgb, (n, w, 3))
    colors = jnp.stack([white, white, ent_rgb, white, jnp.broadcast_to(res_col, (n, w, 3))], axis=1)
    return codes, colors


def _cell_backgrounds(state):
    content = state.content
    is_block = content == BLOCK
    block_col = jnp.where(state.blk_question[:, None], _rgb(COL_QUESTION),
                          jnp.where(state.blk_data[:, None], _rgb(COL_DATA), _rgb(COL_PROGRAM)))
    block_col = jnp.where(state.siphoned[:, None], block_col * SIPHONED_DIM, block_col)
    empty_col = jnp.where(state.siphoned[:, None], _rgb(COL_SIPHONED_EMPTY), _rgb(COL_BG))
    return jnp.where(is_block[:, None], block_col,
                     jnp.where((content == EXIT)[:, None], _rgb(COL_EXIT),
                               jnp.where((content == DATA_SIPHON)[:, None], _rgb(COL_PICKUP), empty_col)))


def _panel_codes(state):
    w = PANEL_CHARS

    def field(label, value, width):
        v, _ = _num(value, width)
        return jnp.concatenate([jnp.asarray(encode(label)), v])

    hp, _ = _num(state.hp, 1)
    line1 = jnp.concatenate([jnp.asarray(encode("HP ")), hp, jnp.asarray(encode("/3 ")),
                             field("CRED ", state.credits, 3), jnp.asarray(encode(" ")),
                             field("ENER ", state.energy, 3), jnp.asarray(encode(" ")),
                             field("SIPH ", state.siphons, 2)])
    line2 = jnp.concatenate([field("SCORE ", state.score, 4), jnp.asarray(encode(" ")),
                             field("ATK ", state.attack, 1), jnp.asarray(encode(" ")),
                             field("STAGE ", state.stage, 1), jnp.asarray(encode(" ")),
                             field("TURN ", state.turn, 4)])
    line3 = jnp.concatenate([field("STEP ", state.time, 4), jnp.asarray(encode(" ")),
                             field("PROGRAMS ", jnp.sum(state.owned.astype(jnp.int32)), 2)])

    def fit(line):
        line = line[:w]
        return jnp.pad(line, (0, w - line.shape[0]), constant_values=SPACE)

    return jnp.stack([fit(line1), fit(line2), fit(line3)])


def render_rgb(state) -> jnp.ndarray:
    """uint8[HEIGHT, WIDTH, 3] picture of one EnvState (see the module docstring)."""
    n = NCELLS
    bg = _cell_backgrounds(state)  # [36, 3]
    img = jnp.broadcast_to(bg[:, None, None, :], (n, CELL, CELL, 3))
    yy, xx = jnp.meshgrid(jnp.arange(CELL), jnp.arange(CELL), indexing="ij")
    # player disc
    disc = ((yy - 34) ** 2 + (xx - 31.5) ** 2) <= 15.5 ** 2
    is_player = jnp.arange(n) == state.player_pos
    img = jnp.where(is_player[:, None, None, None] & disc[None, :, :, None], _rgb(COL_PLAYER), img)
    # text
    codes, colors = _cell_text(state)
    mask = glyph_block(jnp, codes)  # [36, 5, 12, 28*...]: per line [12, 7*8]
    th, tw = mask.shape[-2], mask.shape[-1]
    char_of_x = jnp.arange(tw) // CHAR_W  # [tw]
    color_px = colors[:, :, char_of_x, :]  # [36, L, tw, 3]
    color_px = jnp.broadcast_to(color_px[:, :, None], (n, CELL_LINES, th, tw, 3)).reshape(n, CELL_LINES * th, tw, 3)
    mask = mask.reshape(n, CELL_LINES * th, tw)
    text_rgb = jnp.zeros((n, CELL, CELL, 3), jnp.float32).at[:, TEXT_Y0:TEXT_Y0 + CELL_LINES * th,
                                                             TEXT_X0:TEXT_X0 + tw].set(color_px)
    text_mask = jnp.zeros((n, CELL, CELL), bool).at[:, TEXT_Y0:TEXT_Y0 + CELL_LINES * th,
                                                    TEXT_X0:TEXT_X0 + tw].set(mask)
    # text on the player disc is drawn dark so it stays readable
    on_disc = is_player[:, None, None] & disc[None]
    text_rgb = jnp.where(on_disc[..., None], jnp.asarray((20.0, 20.0, 20.0)), text_rgb)
    img = jnp.where(text_mask[..., None], text_rgb, img)
    # grid lines
    grid = (yy == 0) | (xx == 0) | (yy == CELL - 1) | (xx == CELL - 1)
    img = jnp.where(grid[None, :, :, None], _rgb(COL_GRID), img)
    # cells -> board, row 5 at the top
    board = img.reshape(6, 6, CELL, CELL, 3)[::-1].transpose(0, 2, 1, 3, 4).reshape(BOARD, BOARD, 3)
    # status panel
    pcodes = _panel_codes(state)
    pmask = glyph_block(jnp, pcodes)  # [3, 12, w*8]
    pmask = pmask.reshape(-1, pmask.shape[-1])
    panel = jnp.broadcast_to(_rgb(COL_PANEL), (PANEL, WIDTH, 3))
    pm = jnp.zeros((PANEL, WIDTH), bool).at[8:8 + pmask.shape[0], 4:4 + pmask.shape[1]].set(pmask)
    panel = jnp.where(pm[..., None], _rgb(COL_TEXT), panel)
    out = jnp.concatenate([board, panel], axis=0)
    return jnp.clip(jnp.round(out), 0, 255).astype(jnp.uint8)


def cell_origin(row: int, col: int) -> tuple[int, int]:
    """(y, x) pixel of the top-left corner of board cell (row, col) in a `render_rgb` image."""
    return (5 - row) * CELL, col * CELL
