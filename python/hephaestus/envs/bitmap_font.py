"""A 3x5 bitmap font, no font files: `encode` turns text into glyph codes, `glyph_block` into a pixel mask
(numpy or jax.numpy, so renderers can jit it), `draw_text_np` draws a string on a numpy image. HackMatrix's
frames (envs/hackmatrix/render_rgb.py) and the watch tool's captions use it."""

from __future__ import annotations

import numpy as np

SCALE = 2  # default scale: glyphs 6 x 10 px, advance 8 x 12 px

_GLYPHS = {
    " ": "000000000000000", "0": "111101101101111", "1": "010110010010111", "2": "111001111100111",
    "3": "111001111001111", "4": "101101111001001", "5": "111100111001111", "6": "111100111101111",
    "7": "111001001001001", "8": "111101111101111", "9": "111101111001111", "A": "010101111101101",
    "B": "110101110101110", "C": "011100100100011", "D": "110101101101110", "E": "111100110100111",
    "F": "111100110100100", "G": "011100101101011", "H": "101101111101101", "I": "111010010010111",
    "J": "001001001101010", "K": "101101110101101", "L": "100100100100111", "M": "101111111101101",
    "N": "110101101101101", "O": "010101101101010", "P": "110101110100100", "Q": "010101101110011",
    "R": "110101110101101", "S": "011100010001110", "T": "111010010010010", "U": "101101101101111",
    "V": "101101101101010", "W": "101101111111101", "X": "101101010101101", "Y": "101101010010010",
    "Z": "111001010100111", "+": "000010111010000", "-": "000000111000000", "*": "000101010101000",
    "/": "001001010100100", "?": "111001010000010", "!": "010010010000010", ":": "000010000010000",
    ".": "000000000000010", "_": "000000000000111", "=": "000111000111000", "~": "000011110000000",
    "@": "010101111100011", "$": "011110010011110", "(": "010100100100010", ")": "010001001001010",
    "#": "101111101111101", "%": "101001010100101", ">": "100010001010100", "<": "001010100010001",
    ",": "000000000010100", "'": "010010000000000", "|": "010010010010010", "&": "010101010101011",
}
CHARSET = "".join(_GLYPHS)
FONT = np.array([[int(b) for b in _GLYPHS[ch]] for ch in CHARSET], bool).reshape(len(CHARSET), 5, 3)
CODE = {ch: i for i, ch in enumerate(CHARSET)}
SPACE = CODE[" "]


def encode(text: str, width: int | None = None) -> np.ndarray:
    """Character codes of `text` (upper-cased; unknown characters become '?'), padded/cut to `width`."""
    text = text.upper()
    if width is not None:
        text = text[:width].ljust(width)
    return np.array([CODE.get(ch, CODE["?"]) for ch in text], np.int32)


def glyph_block(xp, codes, scale: int = SCALE):
    """codes[..., n] -> bool[..., 6*scale, n*4*scale] text mask (1 px column / row of spacing per glyph)."""
    font = xp.asarray(FONT)
    g = font[codes]  # [..., n, 5, 3]
    pad = [(0, 0)] * (g.ndim - 2) + [(0, 1), (0, 1)]
    g = xp.pad(g, pad)  # [..., n, 6, 4]
    g = xp.repeat(xp.repeat(g, scale, axis=-2), scale, axis=-1)  # [..., n, 6s, 4s]
    g = xp.moveaxis(g, -3, -2)  # [..., 6s, n, 4s]
    return g.reshape(g.shape[:-2] + (g.shape[-2] * g.shape[-1],))


def draw_text_np(img: np.ndarray, text: str, x: int, y: int, color, scale: int = SCALE) -> np.ndarray:
    """Draw `text` in place on a uint8[H, W, 3] image with its top-left corner at (x, y); clipped."""
    if not text:
        return img
    mask = glyph_block(np, encode(text), scale)
    h, w = img.shape[:2]
    mh, mw = min(mask.shape[0], h - y), min(mask.shape[1], w - x)
    if mh <= 0 or mw <= 0:
        return img
    region = img[y:y + mh, x:x + mw]
    region[mask[:mh, :mw]] = np.asarray(color, np.uint8)
    return img
