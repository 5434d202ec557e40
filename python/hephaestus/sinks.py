"""Where metrics go after a chunk: the console line, metrics.jsonl, and the training-health monitor.

Each sink has `write(record)` and `close()`. A record is a flat dict of Python floats/ints for one chunk:
`env_steps`, `total_env_steps`, `update`, `wall_seconds`, `steps_per_second`, `eta_seconds`, and every metric
the chunk returned, reduced over the chunk's updates (`chunk_reduce`). wandb and TensorBoard sinks follow the
same interface.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections import deque

import numpy as np

# How a per-update metric becomes one number per chunk.
SUMMED = ("num_episodes", "fully_masked_rows")
MAXED = ("stats/highest_stage",)


def chunk_reduce(metrics: dict) -> dict:
    out = {}
    for key, values in metrics.items():
        values = np.asarray(values, dtype=np.float64)
        if key in SUMMED:
            out[key] = float(values.sum())
        elif key in MAXED:
            out[key] = float(values.max())
        elif key in ("mean_episode_return", "mean_episode_length"):
            out[key] = float(values[-1])  # the latest estimate, not an average of stale ones
        else:
            out[key] = float(values.mean())
    return out


def format_duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}"


def format_count(n: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.1f}{unit}"
    return f"{n:.0f}"


class ConsoleSink:
    def __init__(self, stream=None):
        self.stream = stream or sys.stdout

    def write(self, r: dict) -> None:
        line = (f"[{r['env_steps']:>12,}/{r['total_env_steps']:,}] {format_count(r['steps_per_second'])} steps/s "
                f"ETA {format_duration(r['eta_seconds'])} | return {r['mean_episode_return']:.2f} "
                f"len {r['mean_episode_length']:.1f} | ent {r['entropy']:.3f} kl {r['approx_kl']:.4f} "
                f"clip {r['clip_frac']:.3f}")
        print(line, file=self.stream, flush=True)

    def message(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def close(self) -> None:
        pass


class JsonlSink:
    """checkpoints/<run>/metrics.jsonl: one JSON object per chunk, appended (a resumed run continues it)."""

    def __init__(self, path: str):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self.path = path
        self.file = open(path, "a", buffering=1)

    def write(self, record: dict) -> None:
        clean = {k: (v if isinstance(v, (int, str)) or math.isfinite(v) else None) for k, v in record.items()}
        self.file.write(json.dumps(clean) + "\n")

    def close(self) -> None:
        self.file.close()


class HealthMonitor:
    """The warnings users watch for in PPO runs. Each kind is printed at most once every `quiet` chunks."""

    KL_LIMIT = 0.08
    CLIP_LIMIT = 0.35
    ENTROPY_FLOOR = 0.05  # fraction of the run's first entropy
    STALL_WINDOW = 5

    def __init__(self, quiet: int = 10):
        self.quiet = quiet
        self.first_entropy = None
        self.history = deque(maxlen=self.STALL_WINDOW)
        self.last_warned: dict[str, int] = {}
        self.chunk = 0

    def check(self, r: dict) -> list[str]:
        self.chunk += 1
        found = []
        if r.get("approx_kl", 0.0) > self.KL_LIMIT:
            found.append(("kl", f"approx KL {r['approx_kl']:.3f} > {self.KL_LIMIT}: policy moving too far per "
                                "update (lower --lr or --update-epochs)"))
        if r.get("clip_frac", 0.0) > self.CLIP_LIMIT:
            found.append(("clip", f"clip fraction {r['clip_frac']:.2f} > {self.CLIP_LIMIT}: most samples clipped "
                                  "(lower --lr)"))
        entropy = r.get("entropy")
        if entropy is not None:
            if self.first_entropy is None:
                self.first_entropy = entropy
            elif self.first_entropy > 0 and entropy < self.ENTROPY_FLOOR * self.first_entropy:
                found.append(("entropy", f"entropy {entropy:.4f} collapsing towards 0 (started at "
                                         f"{self.first_entropy:.3f}; raise --ent-coef)"))
        if r.get("num_episodes", 0) > 0:
            self.history.append((r["mean_episode_length"], r["mean_episode_return"]))
        if len(self.history) == self.STALL_WINDOW:
            (len0, ret0), (len1, ret1) = self.history[0], self.history[-1]
            if len1 > 1.2 * len0 + 1 and abs(ret1 - ret0) <= 0.05 * max(abs(ret0), 1.0):
                found.append(("stall", f"episode length rising ({len0:.0f} -> {len1:.0f}) while return stays flat "
                                       f"({ret0:.2f} -> {ret1:.2f}): the agent stalls instead of progressing"))
        out = []
        for kind, text in found:
            if self.chunk - self.last_warned.get(kind, -self.quiet) >= self.quiet:
                self.last_warned[kind] = self.chunk
                out.append(f"warning: {text}")
        return out
