"""Values read from text: numbers as the options and env parameters read them, and values of no declared type."""

from __future__ import annotations

import math


def number_text(text: str, whole: bool):
    """1e8 -> 100000000 (whole numbers for int options), 3e-4 -> 0.0003; anything else is returned unchanged (and
    then refused by the type check). Also reads env parameters (envs/registry.py) by their fields' types."""
    try:
        value = float(text.replace("_", ""))
    except ValueError:
        return text
    if not math.isfinite(value) or (whole and value != int(value)):
        return text
    return int(value) if whole else value


def parse_untyped(text: str):
    """A value whose type is not declared (a sweep's grid value, a jumanji make() argument): "0.01" -> 0.01,
    "64" -> 64, "1e-3" -> 0.001, "relu" -> "relu", "true" -> True."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        number = float(text)
    except ValueError:
        return text.strip()
    whole = math.isfinite(number) and number == int(number) and not any(c in low for c in ".e")
    return int(number) if whole else number
