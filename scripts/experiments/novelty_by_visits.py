#!/usr/bin/env python3
"""Does a novelty signal single out the DeepSea cells an agent has never visited?

DTC's world model (surprise, every draw from the last rollout; --prior-scale 1 --replay-ratio 4 for the randomized
prior of configs/deepsea-dtc.yaml) and RND's
predictor learn from the same stream of DeepSea-N transitions, made by a random policy that goes right with
probability 0.3, so the cells near the right diagonal stay unvisited. Then both score fresh probe transitions from
policies of every bias (0 to 1: the probes reach those cells), each before learning from them, and each signal is
averaged over the visit count of the transition's destination cell in the training stream, relative to its mean over
cells visited 100-999 times. A signal that directs exploration pays far more for a cell never visited.

    python scripts/experiments/novelty_by_visits.py --size 20 --updates 300 --out novelty_by_visits
    python scripts/experiments/novelty_by_visits.py --quick      # a smoke run (the test suite's)
    python scripts/experiments/novelty_by_visits.py --merge A.json B.json --out both   # DTC of each run, RND of A's

The stream is 16 envs x 32 steps per update, as the DeepSea experiment's rollouts; the env is written here in numpy
(DeepSea's rules: one step down per action, right or left by a random per-cell action map, the episode ends at the
bottom row) so that the behaviour policy is exactly the stated one. Writes OUT.json and OUT.png.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from hephaestus.tools.experiment import add_out, check_out, write_json

BINS = ((0, 0), (1, 9), (10, 99), (100, 999), (1000, None))
REFERENCE = (100, 999)


def bin_name(lo, hi) -> str:
    return f"{lo}" if lo == hi else f"{lo}+" if hi is None else f"{lo}-{hi}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", type=int, default=20)
    p.add_argument("--updates", type=int, default=300, help="training batches of 16 envs x 32 steps")
    p.add_argument("--p-right", type=float, default=0.3, help="the training stream's chance of moving right")
    p.add_argument("--wm-dim", type=int, default=64, help="RSSM deter and hidden width")
    p.add_argument("--replay-ratio", type=float, default=1.0,
                   help="DTC world model: sequences replayed per env step (DeepSea experiment default: 1)")
    p.add_argument("--prior-scale", type=float, default=0.0, help="DTC: randomized prior scale (0: none)")
    p.add_argument("--aleatoric-weight", type=float, default=1.0, help="DTC: weight of the members' own variance")
    p.add_argument("--probes", type=int, default=20, help="probe batches (16 envs x 32 steps, biases 0..1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="N = 6, 20 updates, 3 probes")
    add_out(p, "novelty_by_visits", "writes OUT.json")
    p.add_argument("--merge", nargs="+", metavar="JSON", help="runs nothing: one plot of the DTC column of each "
                   "earlier OUT.json (labelled by its settings) beside the first one's RND column")
    args = p.parse_args(argv)
    args.out = check_out(p, args.out, "novelty_by_visits")
    if args.merge:
        return merge(args.merge, args.out)
    if args.quick:
        args.size, args.updates, args.probes = 6, 20, 3
    if args.size < 2 or args.updates < 1 or args.probes < 1 or not 0 < args.p_right < 1 or args.replay_ratio <= 0:
        p.error("--size >= 2, --updates >= 1, --probes >= 1, 0 < --p-right < 1 and --replay-ratio > 0")

    import jax
    import jax.numpy as jnp
    import numpy as np

    from hephaestus.agents.bonus.stages import make_rnd
    from hephaestus.config.train_config import TrainConfig, resolve
    from hephaestus.agents.dtc.agent import make_world_model
    from hephaestus.envs.registry import make_env

    n, envs, steps = args.size, 16, 32
    config = resolve(TrainConfig.from_flat(
        env=f"deepsea:{n}", agent="dtc", num_envs=envs, num_steps=steps, dtc_seq_len=8, dtc_frontier_window=64,
        dtc_frontier_fraction=1.0, dtc_novelty_signal="surprise", dtc_deter_dim=args.wm_dim,
        dtc_hidden_dim=args.wm_dim, dtc_replay_ratio=args.replay_ratio, dtc_prior_scale=args.prior_scale,
        dtc_aleatoric_weight=args.aleatoric_weight))[0]
    spec = make_env(config.env.name).spec
    _, wm_init, wm_train = make_world_model(config, spec)
    wm_train = jax.jit(wm_train)
    rnd_init, rnd_apply = make_rnd(config, spec)
    rnd_apply = jax.jit(rnd_apply)
    rng = np.random.default_rng(args.seed)
    right_action = rng.integers(0, 2, (n, n))  # the action that moves right, per cell

    def stream(p_right, row, col):
        """One batch [steps, envs] from (row, col); returns it, each transition's destination cell (-1: the
        episode ended) and where the envs are after it."""
        obs, nxt, act, term, dest = [], [], [], [], []
        for _ in range(steps):
            right = rng.random(envs) < p_right
            action = np.where(right, right_action[row, col], 1 - right_action[row, col])
            o = np.zeros((envs, n * n), np.float32)
            o[np.arange(envs), row * n + col] = 1
            new_col = np.where(right, np.minimum(col + 1, n - 1), np.maximum(col - 1, 0))
            new_row = row + 1
            done = new_row >= n
            o_next = np.zeros((envs, n * n), np.float32)  # gymnax's DeepSea: all zeros below the bottom row
            o_next[np.arange(envs)[~done], (new_row * n + new_col)[~done]] = 1
            obs.append(o), nxt.append(o_next), act.append(action), term.append(done)
            dest.append(np.where(done, -1, new_row * n + new_col))
            row, col = np.where(done, 0, new_row), np.where(done, 0, new_col)
        batch = {"obs": jnp.asarray(np.stack(obs)), "next_obs": jnp.asarray(np.stack(nxt)),
                 "action": jnp.asarray(np.stack(act).astype(np.int32)), "reward": jnp.zeros((steps, envs)),
                 "terminated": jnp.asarray(np.stack(term)), "truncated": jnp.zeros((steps, envs), bool)}
        return batch, np.stack(dest), row, col

    t0 = time.perf_counter()
    key_wm, key_rnd, key_train, key_probe = jax.random.split(jax.random.PRNGKey(args.seed), 4)
    wm, rnd = wm_init(key_wm), rnd_init(key_rnd)
    visits = np.zeros(n * n, np.int64)
    row, col = np.zeros(envs, int), np.zeros(envs, int)
    for key in jax.random.split(key_train, args.updates):
        batch, dest, row, col = stream(np.full(envs, args.p_right), row, col)
        np.add.at(visits, dest[dest >= 0], 1)
        wm, _, _ = wm_train(key, wm, batch)
        rnd, _, _ = rnd_apply(rnd, batch["next_obs"])
    train_s = time.perf_counter() - t0

    scores = {"dtc": {b: [] for b in BINS}, "rnd": {b: [] for b in BINS}}
    for key in jax.random.split(key_probe, args.probes):
        batch, dest, _, _ = stream(np.linspace(0, 1, envs), np.zeros(envs, int), np.zeros(envs, int))
        start = wm.replace(h=jnp.zeros_like(wm.h), first=jnp.ones_like(wm.first))  # probes start episodes afresh
        _, dtc_novelty, _ = wm_train(key, start, batch)  # scored before learning; the trained state is kept
        _, rnd_novelty, _ = rnd_apply(rnd, batch["next_obs"])
        count = visits[np.maximum(dest, 0)]
        for name, novelty in (("dtc", np.asarray(dtc_novelty)), ("rnd", np.asarray(rnd_novelty))):
            for lo, hi in BINS:
                chosen = (dest >= 0) & (count >= lo) & (count <= (hi if hi is not None else np.inf))
                scores[name][(lo, hi)] += novelty[chosen].tolist()

    rows = []
    reference = {name: float(np.mean(s[REFERENCE])) if s[REFERENCE] else float("nan") for name, s in scores.items()}
    for lo, hi in BINS:
        if scores["dtc"][(lo, hi)]:
            rows.append({"visits": bin_name(lo, hi), "transitions": len(scores["dtc"][(lo, hi)]),
                         **{name: float(np.mean(scores[name][(lo, hi)])) / reference[name] for name in scores}})
    reachable = n * (n + 1) // 2
    result = {"size": n, "updates": args.updates, "p_right": args.p_right, "wm_dim": args.wm_dim,
              "replay_ratio": args.replay_ratio, "prior_scale": args.prior_scale,
              "aleatoric_weight": args.aleatoric_weight,
              "probes": args.probes, "seed": args.seed, "cells_visited": int(np.sum(visits > 0)),
              "reachable_cells": reachable, "train_seconds": round(train_s, 1), "rows": rows}
    print(f"DeepSea-{n}: {args.updates} updates of a p(right) = {args.p_right} stream ({train_s:.0f} s); "
          f"{result['cells_visited']} of {reachable} reachable cells visited")
    print("| destination cell's visits | probe transitions | DTC novelty | RND novelty |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['visits']} | {r['transitions']} | {r['dtc']:.2f} | {r['rnd']:.2f} |")
    print(f"(each signal relative to its mean over cells visited {bin_name(*REFERENCE)} times)")
    write_json(args.out, result)
    plot([result], args.out)
    return 0


def dtc_label(result) -> str:
    settings = [f"{name} {result.get(key, default):g}" for name, key, default in
                (("prior", "prior_scale", 0.0), ("replay ratio", "replay_ratio", 1.0), ("width", "wm_dim", 64))
                if result.get(key, default) != default]
    return "DTC world model" + (f" ({', '.join(settings)})" if settings else "")


def by_visits(results):
    """The first result's visit bins, and (label, {bin: relative novelty}) per column: each result's DTC, then the
    first one's RND. Columns are matched by bin, not by row position."""
    visits = [r["visits"] for r in results[0]["rows"]]
    series = [(dtc_label(res), {r["visits"]: r["dtc"] for r in res["rows"]}) for res in results]
    series.append(("RND", {r["visits"]: r["rnd"] for r in results[0]["rows"]}))
    return visits, series


def plot(results, out) -> None:
    """Bars per visit bin: the DTC column of every result, then the first result's RND column (log scale)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import numpy as np
    except ImportError:
        print(f"wrote {out}.json (no plot: matplotlib is not installed)")
        return
    first = results[0]
    visits, series = by_visits(results)
    fig, ax = plt.subplots(figsize=(5.2 + 0.6 * (len(series) - 2), 3.4), dpi=100)
    x, width = np.arange(len(visits)), 0.8 / len(series)
    for i, (label, values) in enumerate(series):
        ax.bar(x + (i - (len(series) - 1) / 2) * width, [max(values.get(v, np.nan), 1e-3) for v in visits],
               width=width, label=label)
    ax.set_yscale("log")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(x, visits)
    ax.set_xlabel("visits of the destination cell in the training stream")
    ax.set_ylabel(f"novelty / its mean at {bin_name(*REFERENCE)} visits")
    ax.set_title(f"DeepSea-{first['size']}: novelty by visits, after {first['updates']} updates, seed {first['seed']}",
                 fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(f"{out}.png")
    print(f"wrote {out}.png" if len(results) > 1 else f"wrote {out}.json, {out}.png")


def merge(paths, out) -> int:
    results = []
    for path in paths:
        try:
            with open(path) as f:
                results.append(json.load(f))
        except (OSError, ValueError) as err:
            print(f"error: cannot read {path}: {err}", file=sys.stderr)
            return 2
        needed = {"size", "updates", "seed", "p_right", "rows"}
        if not isinstance(results[-1], dict) or not needed <= results[-1].keys():
            print(f"error: {path} is not a result of this script (OUT.json)", file=sys.stderr)
            return 2
    if len({(r["size"], r["updates"], r["seed"], r["p_right"]) for r in results}) > 1:
        print("error: --merge needs runs of one size, number of updates, seed and --p-right", file=sys.stderr)
        return 2
    visits, series = by_visits(results)
    print("| destination cell's visits | " + " | ".join(label for label, _ in series) + " |")
    print("|---" * (len(series) + 1) + "|")
    for v in visits:
        print(f"| {v} | " + " | ".join(f"{values[v]:.2f}" if v in values else "–" for _, values in series) + " |")
    plot(results, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
