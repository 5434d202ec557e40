"""Hyperparameter sweeps (scripts/sweep.py): a grid or a random search, seeds vmapped with the data
hyperparameters in one program where shapes allow, the rest one program after another.

A sweep point is a dict of options by flat name (config.options). Points are grouped by their *static* fields (anything that
changes shapes or the program: --num-envs, --hidden-dim, --update-epochs, ...): each group is one program that
trains (points in the group) x (seeds) agents, each agent its own seed and its own data hyperparameters
(`config.DATA_HYPERPARAMETERS`, held in `RunnerState.hyper`). Seeds are shared across points (common random
numbers): point p's seed j starts from `--seed + j`, as a single run with that seed and those values would.

Outputs in `--out`: `<group>/metrics.jsonl` per program (the usual multi-seed records, `per_seed` in agent order),
`<group>/final_params.npz` (every agent's final parameters, row = agent), `<group>/eval.json` (the final evaluation),
`<group>/result.json` (written last: the program is complete), `results.csv` and `results.md` (final metrics per
point, mean and std over its seeds), `curves.png`. An `--out` holding an earlier sweep is refused unless `--resume`
(programs completed with the same settings are kept, the rest run) or `--overwrite` (the earlier sweep's files go).
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import os
import random
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from hephaestus.config.train_config import (DATA_HYPERPARAMETERS, ConfigError, TrainConfig, env_params_of, options,
                                            overlay_env_params, resolve)
from hephaestus.config.values import parse_untyped
from hephaestus.core.export import network_meta, point_text, save_params_npz

# The final training metrics the results report (mean and std over seeds), plus every eval/ and episode/ key a run
# writes; the final evaluation's keys (EVAL_PREFIXES) come first. results.csv has them all; results.md only
# `table_columns`, so that a HackMatrix table stays readable.
TABLE_METRICS = ("mean_episode_return", "mean_episode_length")
EVAL_PREFIXES = ("eval/", "eval_sampled/")


class SweepError(ValueError):
    """Bad sweep specification; one line."""


# ---------------------------------------------------------------------------------------------------------
# The search space


# A grid or space name `env.NAME` sweeps the env parameter NAME (--env-params NAME=V): e.g.
# `--grid env.curriculum_share=0,0.5`. Each value is its own program (the env is part of the compiled program).
ENV_PARAM_PREFIX = "env."


def field_name(name: str) -> str:
    """"ent-coef" or "ent_coef" -> "ent_coef", checked against the config's options; "env.NAME" stays as it is
    (an env parameter, checked against the env when the sweep starts)."""
    if name.strip().startswith(ENV_PARAM_PREFIX) and len(name.strip()) > len(ENV_PARAM_PREFIX):
        return name.strip()
    clean = name.strip().lstrip("-").replace("-", "_")
    if clean == "env_params":
        raise SweepError(f"cannot sweep {name!r} as a whole: sweep one env parameter as env.NAME=V1,V2")
    if clean not in options() or clean in ("seed", "num_seeds", "run_name", "resume"):
        raise SweepError(f"cannot sweep {name!r}: not a training hyperparameter")
    return clean


def point_config(base: TrainConfig, point: dict) -> TrainConfig:
    """`base` with a point's options; its env.NAME values replace or join base's --env-params."""
    env = {k[len(ENV_PARAM_PREFIX):]: v for k, v in point.items() if k.startswith(ENV_PARAM_PREFIX)}
    config = base.replace(**{k: v for k, v in point.items() if not k.startswith(ENV_PARAM_PREFIX)})
    if env:
        config = config.replace(env_params=overlay_env_params(env_params_of(base.env),
                                                              [f"{k}={v}" for k, v in env.items()]))
    return config


def parse_grid(items: list[str]) -> dict:
    """["ent_coef=0.01,0.03", "lr=1e-3"] -> {"ent_coef": [0.01, 0.03], "lr": [0.001]}. Each value is checked
    against its option's type; a name given twice, a list with no value, or a value of the wrong type is one line
    naming the flag and the value."""
    grid, given_as = {}, {}
    for item in items:
        name, sep, values = item.partition("=")
        if not sep or not values.strip():
            raise SweepError(f"--grid {item!r}: expected NAME=V1,V2,...")
        key = field_name(name)
        if key in grid:
            raise SweepError(f"--grid {key} is given twice ({given_as[key]!r} and {item!r}); list every value in one "
                             f"--grid {key}=V1,V2,...")
        texts = [v.strip() for v in values.split(",") if v.strip()]
        if not texts:
            raise SweepError(f"--grid {item!r}: no values (expected NAME=V1,V2,...)")
        grid[key], given_as[key] = [grid_value(key, text, item) for text in texts], item
    return grid


def grid_value(name: str, text: str, item: str):
    """One --grid value as its option's type (an env.NAME value untyped: the env checks it)."""
    if name.startswith(ENV_PARAM_PREFIX):
        return parse_untyped(text)
    option = options()[name]
    kind, _ = option.kind()
    value = text if kind == "str" else (text == "1" if kind == "bool" and text in ("0", "1") else parse_untyped(text))
    try:
        return option.check(value, "")
    except ConfigError:
        expected = {"int": "a whole number", "float": "a number", "bool": "0 or 1"}.get(kind, f"a {kind}")
        choices = option.kind()[1]
        if choices:
            expected = f"one of {', '.join(choices)}"
        raise SweepError(f"--grid {item!r}: {text!r} is not {expected} for {name}") from None


def parse_space(items: list[str]) -> dict:
    """["lr=1e-4:1e-2:log", "ent_coef=0:0.05"] -> {"lr": (1e-4, 1e-2, True), "ent_coef": (0.0, 0.05, False)}."""
    space = {}
    for item in items:
        name, sep, spec = item.partition("=")
        parts = spec.split(":")
        try:
            low, high = float(parts[0]), float(parts[1])
        except (ValueError, IndexError):
            raise SweepError(f"--space {item!r}: expected NAME=LOW:HIGH or NAME=LOW:HIGH:log") from None
        log = len(parts) > 2 and parts[2] == "log"
        if not sep or high < low or (log and low <= 0):
            raise SweepError(f"--space {item!r}: need LOW <= HIGH (and LOW > 0 for log)")
        space[field_name(name)] = (low, high, log)
    return space


def expand_grid(grid: dict) -> list[dict]:
    """Every combination, in the order the names and values were given (the last name varies fastest)."""
    names = list(grid)
    return [dict(zip(names, values)) for values in itertools.product(*(grid[n] for n in names))]


def sample_space(space: dict, count: int, seed: int = 0) -> list[dict]:
    """`count` points drawn uniformly (log-uniformly for log ranges) from `space`, reproducibly from `seed`."""
    rng = random.Random(seed)
    points = []
    for _ in range(count):
        point = {}
        for name, (low, high, log) in space.items():
            point[name] = math.exp(rng.uniform(math.log(low), math.log(high))) if log else rng.uniform(low, high)
        points.append(point)
    return points


def split_point(point: dict) -> tuple[dict, dict]:
    """(static fields, data hyperparameters) of a point."""
    static = {k: v for k, v in point.items() if k not in DATA_HYPERPARAMETERS}
    data = {k: float(v) for k, v in point.items() if k in DATA_HYPERPARAMETERS}
    return static, data


@dataclass
class Group:
    """One program: points sharing their static fields; agent a = point a // seeds, seed a % seeds."""

    static: dict
    points: list = field(default_factory=list)  # full points (static + data), in sweep order

    @property
    def name(self) -> str:
        return "g_" + "_".join(f"{k}-{v}" for k, v in self.static.items()) if self.static else "g"


def group_points(points: list[dict]) -> list[Group]:
    groups: dict = {}
    for point in points:
        static, _ = split_point(point)
        key = json.dumps(static, sort_keys=True)
        groups.setdefault(key, Group(static=static)).points.append(point)
    return list(groups.values())


# ---------------------------------------------------------------------------------------------------------
# Running


def point_label(point: dict) -> str:
    return point_text(point, " ")


def run_group(base: TrainConfig, group: Group, seeds: int, out_dir: str, message=print,
              wandb: "SweepWandb | None" = None) -> list[dict]:
    """Train one group's agents in one program; returns per point {"point", "final": {key: [per seed]},
    "curves": {"env_steps": [...], key: [[per seed] per record]}}."""
    from hephaestus.run.watchdog import StartupWatchdog

    config = group_config(base, group, seeds)
    for point in group.points:  # every point's values must be valid on their own (one-line errors)
        resolve(config.replace(**split_point(point)[1], num_seeds=1))
    # As in a training run: set-up, first compile or first chunk with no CPU progress for --startup-timeout
    # seconds ends the sweep with one line (watchdog.py), instead of a sweep left waiting forever.
    watchdog = StartupWatchdog(config.run.startup_timeout)
    try:
        watchdog.enter("setup")
        return _run_group(config, group, seeds, out_dir, message, watchdog, wandb)
    finally:
        watchdog.stop()


def group_config(base: TrainConfig, group: Group, seeds: int) -> TrainConfig:
    """The resolved config of a group's program: its static fields, one agent per point and seed."""
    return resolve(point_config(base, group.static).replace(num_seeds=len(group.points) * seeds,
                                                            run_name=group.name))[0]


# A sweep's files in --out: the summary, and per program a folder g[_...] holding its metrics, parameters and
# evaluation; RESULT_FILE is written last, when the program is complete (what --resume keeps).
SUMMARY_FILES = ("results.csv", "results.md", "curves.png")
GROUP_FILES = ("metrics.jsonl", "final_params.npz", "eval.json")
RESULT_FILE = "result.json"


def earlier_sweep(out: str) -> list[str]:
    """The names of an earlier sweep's summary files and program folders in `out` (none: [])."""
    if not os.path.isdir(out):
        return []
    found = [name for name in SUMMARY_FILES if os.path.lexists(os.path.join(out, name))]
    for name in sorted(os.listdir(out)):
        folder = os.path.join(out, name)
        if (name == "g" or name.startswith("g_")) and os.path.isdir(folder) and \
                any(os.path.lexists(os.path.join(folder, f)) for f in GROUP_FILES + (RESULT_FILE,)):
            found.append(name)
    return found


def remove_earlier_sweep(out: str, names: list[str]) -> None:
    """--overwrite: the earlier sweep's summary files and program folders go (nothing else in `out`)."""
    import shutil

    for name in names:
        path = os.path.join(out, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)


def group_settings(config: TrainConfig, group: Group, seeds: int) -> str:
    """What a program's results depend on, as a canonical string: its resolved config, its points and seeds."""
    return json.dumps({"config": config.to_dict(), "points": group.points, "seeds": seeds}, sort_keys=True,
                      default=str)


def write_group_result(out_dir: str, group: Group, settings: str, results: list[dict]) -> str:
    """<out>/<group>/result.json: the program's per-point results and the settings that made them (atomic)."""
    path = os.path.join(out_dir, group.name, RESULT_FILE)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"settings": json.loads(settings), "results": results}, f,
                  default=lambda x: x.tolist() if hasattr(x, "tolist") else str(x))  # numpy values
    os.replace(tmp, path)
    return path


def kept_group_result(out_dir: str, group: Group, settings: str) -> list[dict] | None:
    """The results of a program an earlier run of this sweep completed with the same settings; None otherwise
    (no result.json: killed or not reached; other settings; an unreadable file)."""
    path = os.path.join(out_dir, group.name, RESULT_FILE)
    try:
        with open(path) as f:
            saved = json.load(f)
        same = json.dumps(saved["settings"], sort_keys=True, default=str) == settings
        return saved["results"] if same and isinstance(saved["results"], list) else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _run_group(config, group: Group, seeds: int, out_dir: str, message, watchdog, wandb=None) -> list[dict]:
    from hephaestus.core.evaluation import final_evaluation
    from hephaestus.run.loop import run
    from hephaestus.core.ppo import make_train
    from hephaestus.core.sinks import ConsoleSink, JsonlSink

    agents = len(group.points) * seeds
    trainer = make_train(config)
    agent_seeds = [config.run.seed + j for _ in group.points for j in range(seeds)]
    trainer.runner_state = trainer.init_agents(agent_seeds, [split_point(p)[1] for p in group.points for _ in range(seeds)])
    directory = os.path.join(out_dir, group.name)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "metrics.jsonl")
    if os.path.exists(path):
        os.remove(path)
    sink = JsonlSink(path)
    message(f"{group.name}: {len(group.points)} point(s) x {seeds} seed(s) = {agents} agents in one program, "
            f"{config.num_updates} updates of {config.batch_size} env steps each")
    points_sink = SweepWandbSink(config, group, seeds, wandb.group, wandb.mode, wandb.directory, message) \
        if wandb else None
    try:
        try:
            # one console line per chunk (means over all the group's agents; the table separates the points)
            result = run(trainer, sinks=[sink, ConsoleSink()] + ([points_sink] if points_sink else []),
                         message=message, startup=watchdog)
        finally:
            sink.close()
        save_agents(trainer, result.runner_state, group, seeds, agent_seeds,
                    os.path.join(directory, "final_params.npz"))
        # The final evaluation (--final-eval-episodes greedy episodes per agent, each agent with its own seed's
        # key), written to <out>/<group>/eval.json; its eval/ keys are the table's headline.
        evaluated = final_evaluation(trainer, result.runner_state, directory, message, agent_seeds) or {}
        if points_sink:
            points_sink.summarize(evaluated)
    finally:
        if points_sink:
            points_sink.close()
    records = result.records
    evaluated_keys = [k for k in evaluated.get("per_seed", evaluated) if k.startswith(EVAL_PREFIXES)]

    def per_seed(record, key):
        """`key`'s value for every agent of `record`; NaN where the record has none (an `episode/` statistic in a
        chunk in which no episode ended yet: long episodes, few envs)."""
        values = record.get("per_seed", {}) if agents > 1 else record
        if key not in values:
            return [math.nan] * agents
        return values[key] if agents > 1 else [values[key]]

    out = []
    for p, point in enumerate(group.points):
        rows = slice(p * seeds, (p + 1) * seeds)
        last = records[-1]
        present = last.get("per_seed", last)
        keys = [k for k in TABLE_METRICS if k in present] + sorted(k for k in present
                                                                     if k.startswith(("eval/", "episode/")))
        final = {k: per_seed(evaluated, k)[rows] for k in evaluated_keys}  # first, and over a periodic eval's
        final.update({k: per_seed(last, k)[rows] for k in keys if k not in final})
        out.append({"point": point, "final": final,
                    "curves": {"env_steps": [r["env_steps"] for r in records],
                               **{k: [per_seed(r, k)[rows] for r in records] for k in keys}}})
    return out


@dataclass(frozen=True)
class SweepWandb:
    """A sweep's wandb settings: the settled mode, the group of its runs, the folder wandb writes in."""

    mode: str
    group: str
    directory: str

    @classmethod
    def settle(cls, mode: str, config: TrainConfig, out: str, message=print) -> "SweepWandb":
        """`--group`, else the `--out` folder's name; WANDB_DIR, else `--out` (offline-run-* beside the results)."""
        from hephaestus.core.sinks import settle_wandb_mode

        directory = os.environ.get("WANDB_DIR") or out
        os.makedirs(directory, exist_ok=True)
        group = config.logging.wandb_group or os.path.basename(os.path.abspath(out))
        return cls(settle_wandb_mode(mode, directory, bool(config.logging.wandb), message), group, directory)


class SweepWandbSink:
    """wandb for a sweep: one run per point, live, in one group per sweep command (`--wandb-group`, else the
    `--out` folder's name). A point, not a seed, is a run because a point is what a sweep compares: its config
    (the point's values, nested as a training run's) is what wandb's tables and parallel-coordinates plots sort
    by, and its seeds are replicates, logged as the mean and as `seed<j>/<key>` as a --num-seeds run logs them.
    Each record of the group's program is split by the agents' order (point p owns rows p*seeds..). Every metric
    is on `env_steps` (per agent), and the final evaluation goes in each run's summary. A program that runs again
    after an interrupted sweep (--resume) logs new runs; the interrupted ones stay as wandb left them."""

    def __init__(self, config: TrainConfig, group: "Group", seeds: int, sweep_group: str, mode: str,
                 directory: str, message=print):
        """`mode`: the sweep's settled wandb mode (sinks.settle_wandb_mode), `directory`: where wandb writes."""
        import secrets

        from hephaestus.core.sinks import STEP_METRIC, init_wandb_run, logged_config

        self.seeds = seeds
        self.step_metric = STEP_METRIC
        attempt = secrets.token_hex(3)  # a program run again after an interruption logs runs of its own
        self.runs = []
        for point in group.points:
            logged = logged_config(config.replace(**split_point(point)[1], num_seeds=seeds))
            logged["sweep"] = {"point": point, "seeds": seeds, "program": group.name}
            run, mode = init_wandb_run(mode, message, settings=dict(reinit="create_new"),
                                       project=config.logging.wandb_project,
                                       entity=config.logging.wandb_entity or None, group=sweep_group,
                                       job_type="sweep-point", name=f"{sweep_group} {point_label(point) or 'base'}",
                                       id=wandb_run_id_for_point(sweep_group, point, attempt), config=logged,
                                       dir=directory, tags=[config.env.name, config.agent, "sweep"])
            self.runs.append(run)
        message(f"wandb: {len(self.runs)} {mode} run(s) in group {sweep_group}, one per point")

    def point_values(self, record: dict, p: int) -> dict:
        """Point p's part of a record: each per-agent statistic as the mean over its seeds (finite values) and,
        for the keys a --num-seeds run logs per seed, each seed's value."""
        from hephaestus.core.sinks import loggable, per_seed_key

        rows = slice(p * self.seeds, (p + 1) * self.seeds)
        per_agent = record.get("per_seed")
        if not per_agent:  # one agent in all: the record is its own
            return loggable(record)
        out = {self.step_metric: record.get(self.step_metric, 0), "update": record.get("update", 0)}
        for key, values in per_agent.items():
            mine = [float(v) for v in values[rows] if isinstance(v, (int, float)) and math.isfinite(v)]
            if mine:
                out[key] = float(np.mean(mine))
            if per_seed_key(key) and self.seeds > 1:
                out.update({f"seed{j}/{key}": float(v) for j, v in enumerate(values[rows])
                            if isinstance(v, (int, float)) and math.isfinite(v)})
        return out

    def write(self, record: dict) -> None:
        for p, run in enumerate(self.runs):
            run.log(self.point_values(record, p))

    def summarize(self, evaluated: dict) -> None:
        """The final evaluation, per point (mean over its seeds), as `final_eval/<stat>` in each run's summary."""
        for p, run in enumerate(self.runs):
            for key, value in self.point_values(evaluated, p).items():
                if "/" in key and not key.startswith("seed") and isinstance(value, (int, float)):
                    prefix, rest = key.split("/", 1)
                    run.summary[f"final_{prefix}/{rest}"] = value

    def close(self) -> None:
        for run in self.runs:
            run.finish()
        self.runs = []


def wandb_run_id_for_point(sweep_group: str, point: dict, attempt: str) -> str:
    """A valid wandb id (letters, digits, `-`) for one point of one attempt at a sweep program."""
    import hashlib

    digest = hashlib.sha1(f"{sweep_group}\n{json.dumps(point, sort_keys=True)}".encode()).hexdigest()[:12]
    return f"sweep-{digest}-{attempt}"


def save_agents(trainer, runner_state, group: Group, seeds: int, agent_seeds: list[int], path: str) -> str:
    """Every agent's final parameters in one parameter file (export.py), row a = agent a (point a // seeds, seed
    a % seeds), each row labelled with its point and seed: any sweep agent can then be watched
    (watch_agent.py --seed-index a) or scored again on more episodes (evaluate.py --seed-index a) without
    training it again. Written before the final evaluation, so that a failed evaluation loses no training."""
    import jax

    config = trainer.config
    agents = [{"point": point, "seed": seed}
              for point, seed in zip((p for p in group.points for _ in range(seeds)), agent_seeds)]
    return save_params_npz(path, jax.device_get(runner_state.train_state.params), env=config.env.name,
                           network=network_meta(trainer.env.spec, config), update=config.num_updates,
                           env_steps=config.num_updates * config.batch_size, config=config.to_dict(),
                           num_seeds=len(agents), agents=agents, env_instance=trainer.eval_instance(runner_state))


def summarise(results: list[dict], names: list[str], out_dir: str) -> tuple[str, str, str]:
    """results.csv, results.md and curves.png in `out_dir`; returns their paths."""
    metrics = list(dict.fromkeys(k for r in results for k in r["final"]))
    csv_path, md_path, png_path = (os.path.join(out_dir, n) for n in ("results.csv", "results.md", "curves.png"))
    with open(csv_path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(names + [f"{m}_{s}" for m in metrics for s in ("mean", "std")] + ["seeds"])
        for r in results:
            row = [r["point"].get(n, "") for n in names]
            for m in metrics:
                values = np.asarray(r["final"].get(m, [np.nan]), np.float64)
                row += [f"{values.mean():.6g}", f"{values.std(ddof=1) if values.size > 1 else 0.0:.6g}"]
            writer.writerow(row + [len(next(iter(r["final"].values()), []))])
    shown = table_columns(results, metrics)
    lines = ["| " + " | ".join(names + shown) + " |", "|" + "---|" * (len(names) + len(shown))]
    for r in results:
        cells = [f"{r['point'][n]:g}" if isinstance(r["point"].get(n), float) else str(r["point"].get(n, ""))
                 for n in names]
        for m in shown:
            values = np.asarray(r["final"].get(m, [np.nan]), np.float64)
            spread = values.std(ddof=1) if values.size > 1 else 0.0
            cells.append(f"{values.mean():.3g} ± {spread:.2g}")
        lines.append("| " + " | ".join(cells) + " |")
    seeds = len(next(iter(results[0]["final"].values()), [])) if results else 0
    evaluated = any(m.startswith(EVAL_PREFIXES) for m in shown)
    with open(md_path, "w") as f:
        f.write("\n".join(lines) + f"\n\nMean ± sample std over {seeds} seed(s). "
                + ("`eval/`: the final greedy evaluation (eval.json of each program); " if evaluated else "")
                + "`episode/` and the rest: the last training record. Every metric: results.csv.\n")
    plot_curves(results, png_path)
    return csv_path, md_path, png_path


def table_columns(results: list[dict], metrics: list[str]) -> list[str]:
    """The columns results.md shows: the training return, then the evaluation's and the training episodes'
    return, length, rates and per-episode counts, without per-program counts (program_<NAME>_per_episode) and
    without a statistic that is zero at every point (e.g. victories nobody reached)."""
    def nonzero(m):
        return any(np.nanmax(np.abs(np.asarray(r["final"].get(m, [0.0]), np.float64))) > 0 for r in results)

    def wanted(m):
        if m in TABLE_METRICS:
            return True
        name = m.split("/", 1)[-1]
        return (m.startswith(EVAL_PREFIXES + ("episode/",)) and not name.startswith("program_")
                and name not in ("episodes", "return_std", "return_min", "return_max", "stage_reached_max")
                and nonzero(m))

    return [m for m in metrics if wanted(m)]


def plot_curves(results: list[dict], path: str, metric: str = "mean_episode_return") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for r in results:
        if metric not in r["curves"]:
            continue
        x = np.asarray(r["curves"]["env_steps"], np.float64)
        y = np.asarray(r["curves"][metric], np.float64)  # [records, seeds]
        mean, std = y.mean(1), (y.std(1, ddof=1) if y.shape[1] > 1 else np.zeros(len(y)))
        line, = ax.plot(x, mean, label=point_label(r["point"]) or "base")
        ax.fill_between(x, mean - std, mean + std, color=line.get_color(), alpha=0.2)
    ax.set(xlabel="env steps (per agent)", ylabel=f"{metric} (mean ± std over seeds)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------------------
# Command line


def build_parser():
    from hephaestus.run.cli import OneLineParser, add_train_arguments

    p = OneLineParser(prog="sweep.py", description=__doc__.split("\n\n")[0],
                      epilog="Any training flag sets the base config, e.g. --env gymnax:CartPole-v1 --num-envs 4.")
    g = p.add_argument_group("sweep")
    g.add_argument("--grid", action="append", default=[], metavar="NAME=V1,V2",
                   help="values of one hyperparameter (repeat for a product), e.g. --grid ent-coef=0.01,0.03; "
                        "env.NAME sweeps an env parameter, e.g. --grid env.curriculum_share=0,0.5")
    g.add_argument("--random", type=int, default=None, metavar="N", help="N random points from --space instead")
    g.add_argument("--space", action="append", default=[], metavar="NAME=LOW:HIGH[:log]",
                   help="range of one hyperparameter for --random, e.g. --space lr=1e-4:1e-3:log")
    g.add_argument("--seeds", type=int, default=3, help="seeds per point (--seed, --seed+1, ...; default 3)")
    g.add_argument("--sweep-seed", type=int, default=0, help="seed of the --random draw (default 0)")
    g.add_argument("--out", required=True, help="output directory (metrics per program, results.csv/.md, curves.png)")
    g.add_argument("--resume", action="store_true", dest="resume_sweep", help="--out holds an earlier run of this sweep (finished or "
                   "killed): keep the programs it completed with the same settings, run the rest")
    g.add_argument("--overwrite", action="store_true", help="--out holds an earlier sweep: delete its results "
                   "(results.*, curves.png, its program folders) and run this one")
    add_train_arguments(p, skip=("resume",))
    return p


def points_from_args(args) -> list[dict]:
    if args.random is not None and args.random < 1:
        raise SweepError(f"--random N draws N points: N must be at least 1, got {args.random}")
    if args.random:
        if args.grid or not args.space:
            raise SweepError("--random N needs --space NAME=LOW:HIGH (and no --grid)")
        return sample_space(parse_space(args.space), args.random, args.sweep_seed)
    if args.space:
        raise SweepError("--space is for --random N")
    if not args.grid:
        raise SweepError("give --grid NAME=V1,V2,... or --random N --space NAME=LOW:HIGH")
    return expand_grid(parse_grid(args.grid))


def check_env_params(base: TrainConfig, points: list[dict]) -> None:
    """Every distinct set of env parameters the points ask for builds its env (EnvParamError -> SweepError)."""
    from hephaestus.envs.registry import UnknownEnvError, make_training_env

    for env_params in dict.fromkeys(point_config(base, p).env.env_params for p in points):
        try:
            make_training_env(base.replace(env_params=env_params).env)
        except UnknownEnvError as err:
            raise SweepError(str(err)) from None


def write_failure_text(err, stopped_group, done: list[str], out: str) -> str:
    """One line for a sweep that could not write (``err``: an OSError or the loop's SinkError): which write
    failed, which program it stopped (a sweep keeps no checkpoint: its training is lost unless its
    final_params.npz was written), and which programs' results (metrics.jsonl, final_params.npz, eval.json) are
    complete on disk."""
    what = getattr(err, "write_failure", None) or f"writing {err.filename or out} failed ({err.strerror or err})"
    if stopped_group:
        stopped = f"; program {stopped_group} did not finish (a sweep keeps no checkpoint)"
    else:  # every program finished (or none started: the --out folder itself)
        stopped = "; the summary (results.csv, results.md, curves.png) was not written" if done else ""
    kept = f"; complete: {', '.join(os.path.join(out, name) for name in done)}" if done else ""
    return f"sweep: {what}{stopped}{kept}"


def main(argv=None) -> int:
    from hephaestus.run.cli import config_from_args, fail

    args = build_parser().parse_args(argv)
    try:
        if args.seeds < 1:
            raise SweepError(f"--seeds must be positive, got {args.seeds}")
        if getattr(args, "num_seeds", 1) != 1:
            raise SweepError("--num-seeds is not a sweep flag (use --seeds)")
        if args.resume_sweep and args.overwrite:
            raise SweepError("give --resume or --overwrite, not both")
        if os.path.lexists(args.out) and not os.path.isdir(args.out):
            raise SweepError(f"--out {args.out} is a file, not a folder")
        earlier = earlier_sweep(args.out)
        if earlier and not (args.resume_sweep or args.overwrite):
            shown = ", ".join(earlier[:4]) + (f" and {len(earlier) - 4} more" if len(earlier) > 4 else "")
            raise SweepError(f"--out {args.out} holds an earlier sweep ({shown}); pass --resume to keep the "
                             "programs it completed and run the rest, --overwrite to replace it, or another --out")
        points = points_from_args(args)
        from hephaestus.core.sinks import wandb_mode

        asked = config_from_args(args)
        mode = wandb_mode(asked)  # the sweep's own runs (one per point); the programs inside log no run of their own
        base = asked.replace(wandb=False)  # unresolved: each point settles its own autos
        resolve(base)
        for point in points:  # every point valid before anything compiles
            resolve(point_config(base, point))
        check_env_params(base, points)
    except (SweepError, ConfigError, TypeError) as err:
        fail(str(err))
    from hephaestus.core.compilation_cache import enable_compilation_cache
    from hephaestus.run.loop import SinkError

    enable_compilation_cache()
    names = list(points[0])
    groups = group_points(points)
    print(f"sweep: {len(points)} point(s) x {args.seeds} seed(s) in {len(groups)} program(s)", flush=True)
    t0 = time.perf_counter()
    results, done, group = [], [], None
    try:
        if earlier and args.overwrite:
            remove_earlier_sweep(args.out, earlier)
            print(f"sweep: --overwrite: removed the earlier sweep in {args.out} ({', '.join(earlier)})", flush=True)
        os.makedirs(args.out, exist_ok=True)
        wandb = SweepWandb.settle(mode, asked, args.out) if mode else None  # one server probe for the whole sweep
        for group in groups:
            settings = group_settings(group_config(base, group, args.seeds), group, args.seeds)
            kept = kept_group_result(args.out, group, settings) if args.resume_sweep else None
            if kept is not None:
                print(f"{group.name}: completed earlier with the same settings; kept "
                      f"({os.path.join(args.out, group.name)})", flush=True)
            else:
                kept = run_group(base, group, args.seeds, args.out, wandb=wandb)
                write_group_result(args.out, group, settings, kept)
            results += kept
            done.append(group.name)
        order = {json.dumps(p, sort_keys=True): i for i, p in enumerate(points)}
        results.sort(key=lambda r: order[json.dumps(r["point"], sort_keys=True)])
        paths = summarise(results, names, args.out)
    except ValueError as err:  # e.g. --num-envs not divisible by the devices
        fail(str(err))
    except (OSError, SinkError) as err:  # a full disk, the folder gone: one line, and what is kept
        stopped = group.name if group is not None and len(done) < len(groups) else None
        fail(write_failure_text(err, stopped, done, args.out), code=1)
    except KeyboardInterrupt:  # Ctrl-C: the completed programs stay, and --resume keeps them
        kept = f"; complete: {', '.join(done)}; rerun with --resume to keep them" if done else ""
        print(f"sweep: interrupted{f' during program {group.name}' if group is not None else ''}{kept}",
              file=sys.stderr)
        return 130
    print(open(paths[1]).read().rstrip())
    print(f"sweep done in {time.perf_counter() - t0:.0f}s: {', '.join(paths)}")
    return 0
