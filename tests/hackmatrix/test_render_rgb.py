"""render_rgb: a jittable picture of a HackMatrix state, checked by its size and a few pixel colours."""

import jax
import numpy as np
from PIL import Image

from hephaestus.envs.hackmatrix.render_rgb import (
    CELL, COL_DATA, COL_ENEMY, COL_EXIT, COL_PICKUP, COL_PLAYER, COL_PROGRAM, COL_QUESTION, COL_TRANS, HEIGHT,
    SIPHONED_DIM, WIDTH, cell_origin, draw_text_np, render_rgb,
)
from hephaestus.envs.hackmatrix.scenario import make_state


def mid_game():
    return make_state(
        player=(2, 1), hp=2, credits=12, energy=4, siphons=1, score=37, stage=3, turn=15, owned=("PUSH", "WAIT"),
        exit=(5, 5), data_siphons=[(0, 5)],
        blocks=[{"pos": (3, 3), "kind": "data", "points": 7},
                {"pos": (4, 1), "kind": "program", "program": "ANTI-V"},
                {"pos": (1, 4), "kind": "question"},
                {"pos": (3, 4), "kind": "data", "points": 12, "siphoned": True}],
        resources={(0, 0): ("credits", 3), (2, 2): ("energy", 2)},
        siphoned=[(2, 1), (2, 2)], siphon_centers=[(2, 1)],
        enemies=[{"type": "virus", "pos": (4, 4), "hp": 1, "stunned": True}, {"type": "daemon", "pos": (5, 0)}],
        transmissions=[{"pos": (1, 1), "turns": 2}])


def pixel(img, row, col, dy, dx):
    y, x = cell_origin(row, col)
    return tuple(int(v) for v in img[y + dy, x + dx])


def text_colours(img, row, col):
    y, x = cell_origin(row, col)
    return {tuple(int(v) for v in c) for c in img[y:y + CELL, x:x + CELL].reshape(-1, 3)}


def test_png_of_a_mid_game_state(tmp_path):
    img = np.asarray(jax.jit(render_rgb)(mid_game()))
    assert img.shape == (HEIGHT, WIDTH, 3) == (6 * CELL + 56, 6 * CELL, 3) and img.dtype == np.uint8
    path = tmp_path / "state.png"
    Image.fromarray(img).save(path)
    png = np.asarray(Image.open(path).convert("RGB"))
    assert png.shape == img.shape
    assert pixel(png, 2, 1, 34, 32) == COL_PLAYER  # the player's disc, row 2 col 1
    assert pixel(png, 5, 5, 40, 3) == COL_EXIT  # exit in the top-right cell: row 5 is drawn on top
    assert pixel(png, 3, 3, 40, 3) == COL_DATA
    assert pixel(png, 4, 1, 40, 3) == COL_PROGRAM
    assert pixel(png, 1, 4, 40, 3) == COL_QUESTION
    assert pixel(png, 0, 5, 40, 3) == COL_PICKUP
    assert pixel(png, 3, 4, 40, 3) == tuple(int(round(c * SIPHONED_DIM)) for c in COL_DATA)  # siphoned block
    assert COL_ENEMY in text_colours(png, 4, 4) and COL_ENEMY in text_colours(png, 5, 0)
    assert COL_TRANS in text_colours(png, 1, 1)
    assert COL_ENEMY not in text_colours(png, 0, 3)  # an empty cell has no entity text
    # the status panel has text in it
    assert len(np.unique(png[6 * CELL:].reshape(-1, 3), axis=0)) >= 2


def test_render_is_vmappable_and_text_helper_draws():
    s = mid_game()
    batch = jax.tree.map(lambda a: np.stack([a, a]), s)
    imgs = np.asarray(jax.jit(jax.vmap(render_rgb))(batch))
    assert imgs.shape == (2, HEIGHT, WIDTH, 3)
    np.testing.assert_array_equal(imgs[0], imgs[1])
    canvas = np.zeros((20, 80, 3), np.uint8)
    draw_text_np(canvas, "HP 3", 2, 2, (255, 255, 255))
    assert canvas.max() == 255 and canvas[:, 60:].max() == 0
