"""Learning curves from metrics.jsonl: `scripts/plot_runs.py`.

    python scripts/plot_runs.py checkpoints/hm_s0 checkpoints/hm_s1 checkpoints/wide_s0 \\
        --metric eval/stage_reached>=2 --metric episode/siphons_used_per_episode --out fig.png

Each RUN is a run directory holding `metrics.jsonl`, a metrics.jsonl file, or a run name under
`--checkpoint-dir`. Runs whose names differ only by a `_s<seed>` suffix are one curve (the seeds of one
configuration); `--group LABEL=RUN,RUN` names a curve explicitly. x is `env_steps`. Each curve is the mean over its
seeds with a band: min-max over seeds (default) or mean ± one standard deviation (`--band std`). A multi-seed run
(one metrics.jsonl for several seeds) stores each metric's mean under its key and the seeds' values under
`"per_seed": {"<key>": [v0, v1, ...]}`; its band comes from those. Seeds whose records fall at different env steps
are linearly interpolated onto the union of their steps, within each seed's own range. One panel per metric,
PNG out (matplotlib, Agg backend).

`RUN[A:B]` takes only agents A..B-1 of a multi-seed file: a sweep program's agents are point-major (agent
p * seeds + j is point p, seed j; sweep.py), so `--group "ent 0.03=sweeps/hm/g[3:6]"` is the second point of a
3-seed sweep.
"""

from __future__ import annotations

import json
import os
import re
import sys
import warnings

import numpy as np

SEED_SUFFIX = re.compile(r"_s\d+$")
AGENTS = re.compile(r"^(.*)\[(\d*):(\d*)\]$")  # RUN[A:B]
BANDS = ("minmax", "std")


class PlotError(Exception):
    """Bad input; the message is one line."""


def metrics_path(run: str, checkpoint_dir: str) -> str:
    for candidate in (run, os.path.join(checkpoint_dir, run)):
        if os.path.isfile(candidate):
            return candidate
        if os.path.isdir(candidate) and os.path.isfile(os.path.join(candidate, "metrics.jsonl")):
            return os.path.join(candidate, "metrics.jsonl")
    raise PlotError(f"{run}: no metrics.jsonl there (nor under {checkpoint_dir}/)")


def split_agents(run: str) -> tuple[str, slice]:
    """`RUN[A:B]` -> (RUN, slice(A, B)); a plain RUN -> (RUN, every agent)."""
    m = AGENTS.match(run)
    if not m:
        return run, slice(None)
    return m.group(1), slice(int(m.group(2)) if m.group(2) else None, int(m.group(3)) if m.group(3) else None)


def run_label(run: str) -> str:
    path = os.path.normpath(run)
    if os.path.basename(path) == "metrics.jsonl":
        path = os.path.dirname(path)
    return os.path.basename(path)


def load_records(path: str) -> list[dict]:
    """The records of a metrics.jsonl file. A last line cut short (a run killed mid-write, which --resume drops
    too) is left out; any other line that is not JSON is an error naming it."""
    records = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
    except OSError as err:
        raise PlotError(f"{path}: cannot read ({err.strerror or err})") from None
    for n, line in enumerate(lines, 1):
        cut_short = n == len(lines) and not line.endswith("\n")
        line = line.strip()
        if not line:
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if cut_short:
                continue
            raise PlotError(f"{path}: line {n} is not JSON") from None
        if isinstance(record, dict) and "env_steps" in record:
            records.append(record)
    if not records:
        raise PlotError(f"{path}: no records with env_steps")
    # a resumed run appends; keep the last record for each env_steps
    by_step = {r["env_steps"]: r for r in records}
    return [by_step[k] for k in sorted(by_step)]


def seed_series(records: list[dict], metric: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """One (x, y) per seed in this file: per_seed values where present, else the plain key."""
    per_seed = [(r["env_steps"], r["per_seed"][metric]) for r in records
                if isinstance(r.get("per_seed"), dict) and metric in r["per_seed"]]
    if per_seed:
        width = max(len(v) for _, v in per_seed)
        out = []
        for i in range(width):
            pts = [(x, v[i]) for x, v in per_seed if i < len(v) and v[i] is not None]
            if pts:
                out.append((np.array([p[0] for p in pts], float), np.array([p[1] for p in pts], float)))
        return out
    pts = [(r["env_steps"], r[metric]) for r in records if isinstance(r.get(metric), (int, float))]
    if not pts:
        return []
    return [(np.array([p[0] for p in pts], float), np.array([p[1] for p in pts], float))]


def curve(series: list[tuple[np.ndarray, np.ndarray]], band: str):
    """(x, mean, low, high, seeds) over the seeds' series, each interpolated within its own range."""
    xs = np.unique(np.concatenate([x for x, _ in series]))
    ys = np.full((len(series), len(xs)), np.nan)
    for i, (x, y) in enumerate(series):
        inside = (xs >= x.min()) & (xs <= x.max())
        ys[i, inside] = np.interp(xs[inside], x, y)
    counts = np.sum(~np.isnan(ys), axis=0)
    with warnings.catch_warnings():  # a step where every seed's value is NaN stays NaN (a gap in the curve)
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(ys, axis=0)
        if band == "std":
            spread = np.nanstd(ys, axis=0)
            low, high = mean - spread, mean + spread
        else:
            low, high = np.nanmin(ys, axis=0), np.nanmax(ys, axis=0)
    return xs, mean, low, high, counts


def group_runs(runs: list[str], groups: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for spec in groups:
        label, sep, members = spec.partition("=")
        members = [m for m in members.split(",") if m]
        if not sep or not label or not members:
            raise PlotError(f"--group {spec!r}: expected LABEL=RUN[,RUN...]")
        out.setdefault(label, []).extend(members)
    for run in runs:
        out.setdefault(SEED_SUFFIX.sub("", run_label(run)), []).append(run)
    return out


def parse_hlines(specs: list[str]) -> dict[str, list[tuple[float, str]]]:
    """`METRIC=VALUE[:LABEL]` -> {metric: [(value, label)]}: reference lines such as a random-policy baseline."""
    out: dict = {}
    for spec in specs:
        head, _, label = spec.partition(":")
        metric, sep, value = head.rpartition("=")  # metrics may hold "=" themselves (stage_reached>=2)
        try:
            out.setdefault(metric, []).append((float(value), label or "baseline"))
        except ValueError:
            raise PlotError(f"--hline {spec!r}: expected METRIC=VALUE[:LABEL]") from None
        if not sep or not metric:
            raise PlotError(f"--hline {spec!r}: expected METRIC=VALUE[:LABEL]")
    return out


def plot(groups: dict[str, list[str]], metrics: list[str], out: str, band: str = "minmax",
         checkpoint_dir: str = "checkpoints", title: str = "", hlines: dict | None = None) -> dict:
    """Draw and save; returns {metric: {label: number of seeds}}."""
    import matplotlib.pyplot as plt

    fig, drawn = draw(groups, metrics, band, checkpoint_dir, title, hlines)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return drawn


def draw(groups: dict[str, list[str]], metrics: list[str], band: str = "minmax", checkpoint_dir: str = "checkpoints",
         title: str = "", hlines: dict | None = None):
    """(figure, {metric: {label: number of seeds}}): one panel per metric, one curve per group. A group keeps its
    colour in every panel, also where another group lacks the metric (a teacher's metrics, say)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colors = {label: cycle[i % len(cycle)] for i, label in enumerate(groups)}
    loaded = {label: [(load_records(metrics_path(path, checkpoint_dir)), agents)
                      for path, agents in map(split_agents, runs)] for label, runs in groups.items()}
    fig, axes = plt.subplots(len(metrics), 1, figsize=(7, 3.2 * len(metrics)), squeeze=False)
    drawn: dict = {}
    for ax, metric in zip(axes[:, 0], metrics):
        drawn[metric] = {}
        for label, files in loaded.items():
            series = [s for records, agents in files for s in seed_series(records, metric)[agents]]
            if not series:
                continue
            x, mean, low, high, counts = curve(series, band)
            n = len(series)
            ax.plot(x, mean, color=colors[label], label=f"{label} ({n} seed{'s' if n != 1 else ''})")
            if n > 1:
                ax.fill_between(x, low, high, color=colors[label], alpha=0.2, linewidth=0)
            drawn[metric][label] = n
        if not drawn[metric]:
            plt.close(fig)
            raise PlotError(f"metric {metric!r} is in none of the runs' metrics.jsonl")
        for value, label in (hlines or {}).get(metric, ()):
            ax.axhline(value, color="gray", linestyle="--", linewidth=1, label=label)
        ax.set_ylabel(metric)
        ax.set_xlabel("env steps")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    band_text = "band: min-max over seeds" if band == "minmax" else "band: mean ± 1 std over seeds"
    fig.suptitle(f"{title + ' - ' if title else ''}mean over seeds; {band_text}", fontsize=10)
    fig.tight_layout()
    return fig, drawn


def build_parser():
    from hephaestus.run.cli import OneLineParser

    p = OneLineParser(prog="plot_runs.py", description="Learning curves (x = env steps) from runs' metrics.jsonl: mean "
                      "and a band over seeds, several runs on one figure, PNG out.")
    p.add_argument("runs", nargs="*", help="run directories, metrics.jsonl files or run names under "
                   "--checkpoint-dir; names differing only by _s<seed> form one curve; RUN[A:B] takes agents "
                   "A..B-1 of a multi-seed run or sweep program")
    p.add_argument("--metric", action="append", required=True, help="a metrics.jsonl key, e.g. "
                   "eval/return_mean (repeat for one panel each)")
    p.add_argument("--group", action="append", default=[], metavar="LABEL=RUN,RUN",
                   help="runs plotted as the seeds of one curve named LABEL")
    p.add_argument("--band", choices=BANDS, default="minmax", help="min-max over seeds or mean ± 1 std "
                   "(default: minmax)")
    p.add_argument("--out", required=True, help="the PNG to write")
    p.add_argument("--hline", action="append", default=[], metavar="METRIC=VALUE[:LABEL]",
                   help="a dashed reference line on METRIC's panel, e.g. a random-policy baseline")
    p.add_argument("--title", default="")
    p.add_argument("--checkpoint-dir", default="checkpoints", help="where run names are looked up")
    return p


def check_out(path: str) -> None:
    """--out before anything is read or drawn (tools/outputs.py): PlotError naming the path."""
    from hephaestus.tools.outputs import output_file_problem

    problem = output_file_problem("--out", path, "curves.png")
    if problem:
        raise PlotError(problem)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if not args.runs and not args.group:
            raise PlotError("give at least one run (or --group)")
        if not args.out.lower().endswith(".png"):
            raise PlotError(f"--out {args.out}: a .png file name is needed")
        check_out(args.out)
        drawn = plot(group_runs(args.runs, args.group), args.metric, args.out, args.band, args.checkpoint_dir,
                     args.title, parse_hlines(args.hline))
    except PlotError as err:
        print(f"plot_runs.py: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # writing the PNG after the checks: a full disk
        print(f"plot_runs.py: error: writing {args.out} failed: {err.strerror or err}", file=sys.stderr)
        return 1
    for metric, curves in drawn.items():
        print(f"{metric}: " + ", ".join(f"{label} ({n} seeds)" for label, n in curves.items()))
    print(f"wrote {args.out}")
    return 0
