#!/usr/bin/env python3
"""Craftax-Classic-Symbolic side by side: the Craftax_Baselines repository's own PPO code (ppo.py, ppo_rnn.py) and
ours (hephaestus's PPO, feed-forward and --recurrent gru) on the same network and batch: env steps/s, learning
curves and the final Crafter score over seeds.

Their code is not in this repository: `--reference-dir` names a folder holding the Craftax_Baselines repository's
files, unmodified (github.com/MichaelTMatthews/Craftax_Baselines: ppo.py, ppo_rnn.py, wrappers.py, models/, logz/).
Their settings are read from their own argparse defaults (ppo.py, ppo_rnn.py, by parsing the files), and only the
env (Craftax-Classic-Symbolic-v1 instead of their default full Craftax), the number of envs and the budget are
changed where this script says so; ours gets the same values:

* mlp: their ActorCritic (separate actor and critic, 3 x LAYER_SIZE tanh) = ours with --num-layers 3 --activation
  tanh --hidden-dim LAYER_SIZE;
* rnn: their ActorCriticRNN (Dense(LAYER_SIZE) relu -> GRU(LAYER_SIZE) -> actor and critic 2 x LAYER_SIZE relu) =
  ours with --recurrent gru --recurrent-embed LAYER_SIZE --num-layers 2 --activation relu.

Each side runs in a fresh process (theirs with `--reference-python`, default this interpreter); by default all four
at once on a CPU (`--parallel`), one at a time, each with the machine to itself, with `--no-parallel` (the default
with `--gpu`). Theirs compiles its make_train once and calls it once per seed (their NUM_REPEATS vmaps the
seeds, but run that way here, jit of vmap with their per-update callback, both their processes hung: every thread
waiting, no CPU used for minutes, nothing printed), so their seeds run one after another; ours does the same by
default (one program per seed, `--our-seeds sequential`), or trains all its seeds in one vmapped program as
--num-seeds does (`--our-seeds vmapped`, three times the batch per call). Curves are the training episodes' own statistics (their LogWrapper's per-update means; our episode/ metrics), both reduced the same
way: each update's mean over the episodes that ended in it, averaged over the updates of each of `--points` equal
stretches of the run; the score of a stretch is Crafter's score of its mean achievement success rates. Steps/s:
env steps of all seeds per second of the run after its first point (compilation and the first stretch left out),
from their per-update callbacks' clock and our chunks' clock.

    python scripts/experiments/craftax_baselines.py --reference-dir /path/to/Craftax_Baselines      # CPU budget
    python scripts/experiments/craftax_baselines.py --reference-dir DIR --gpu    # their defaults: 1024 envs, 1e9 steps
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import time

from hephaestus.tools.entry_points import require_this_checkout
from hephaestus.tools.experiment import add_seeds, check_out, parser, save_figure, write_json, write_md

ENV = "Craftax-Classic-Symbolic-v1"
SCRIPTS = {"mlp": "ppo.py", "rnn": "ppo_rnn.py"}
# The CPU budget (a 2-core machine): a 64-env batch (their default is 1024), 64 steps per env per update as theirs
CPU_NUM_ENVS = 64
CPU_TIMESTEPS = 131_072  # 32 updates of 64 x 64 per seed
GPU_TIMESTEPS = 1_000_000_000  # their default --total_timesteps


def their_defaults(path: str) -> dict:
    """`--name` -> default of every `parser.add_argument` in their script (literal defaults only), as their
    config keys (upper case): read from the file, never imported (their module starts wandb at import)."""
    tree = ast.parse(open(path).read())
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument" and node.args:
            name = node.args[0].value if isinstance(node.args[0], ast.Constant) else None
            for kw in node.keywords:
                if kw.arg == "default" and name:
                    try:
                        out[name.lstrip("-").upper()] = ast.literal_eval(kw.value)
                    except ValueError:  # e.g. np.random.randint(2**31): the seed, set below
                        pass
    return out


def their_config(arch: str, reference_dir: str, num_envs: int, total: int, seed: int, num_seeds: int) -> dict:
    config = their_defaults(os.path.join(reference_dir, SCRIPTS[arch]))
    config.update(ENV_NAME=ENV, NUM_ENVS=num_envs, TOTAL_TIMESTEPS=total, SEED=seed, NUM_REPEATS=num_seeds,
                  DEBUG=True, USE_WANDB=True,  # their per-update callback (batch_log) on, as by default; no wandb run
                  SAVE_POLICY=False, TRAIN_ICM=False, USE_E3B=False)
    for key in ("WANDB_PROJECT", "WANDB_ENTITY"):
        config.setdefault(key, None)
    return config


def our_options(arch: str, config: dict) -> dict:
    """Our TrainConfig options for their `config` (the module docstring's mapping)."""
    options = dict(env=f"craftax:{ENV}", num_envs=config["NUM_ENVS"], num_steps=config["NUM_STEPS"],
                   total_timesteps=config["TOTAL_TIMESTEPS"], lr=config["LR"], anneal_lr=config["ANNEAL_LR"],
                   gamma=config["GAMMA"], gae_lambda=config["GAE_LAMBDA"], clip_eps=config["CLIP_EPS"],
                   ent_coef=config["ENT_COEF"], vf_coef=config["VF_COEF"], max_grad_norm=config["MAX_GRAD_NORM"],
                   num_minibatches=config["NUM_MINIBATCHES"], update_epochs=config["UPDATE_EPOCHS"],
                   hidden_dim=config["LAYER_SIZE"], encoder="mlp", seed=config["SEED"],
                   num_seeds=config["NUM_REPEATS"], wandb=False)
    if arch == "mlp":
        options.update(num_layers=3, activation=config.get("ACTIVATION", "tanh"), recurrent="none")
    else:
        options.update(num_layers=2, activation="relu", recurrent="gru", recurrent_embed=config["LAYER_SIZE"])
    return options


# Their code in a fresh process (the reference folder first on its path): their make_train, compiled, one call;
# their per-update callback (batch_log, called with create_log_dict's numbers) is replaced by a recorder.
THEIRS = r"""
import json, sys, time
import numpy as np
import jax
module_name, config, points = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
module = __import__(module_name)
calls, seed = [], [0]
def record(update_step, log, config):
    calls.append((seed[0], int(np.asarray(update_step).ravel()[0]), time.perf_counter(), time.process_time(),
                  {k: np.asarray(v, np.float64).tolist() for k, v in log.items()}))
    print(f"seed {seed[0]} update {calls[-1][1] + 1}/{config['NUM_UPDATES']} return "
          f"{calls[-1][4]['episode_return']} at {calls[-1][2]:.1f} s, {calls[-1][3]:.1f} CPU-s", flush=True)
module.batch_log = record
rngs = jax.random.split(jax.random.PRNGKey(config["SEED"]), config["NUM_REPEATS"])
config["NUM_REPEATS"] = 1  # one seed per call of the compiled program (the module docstring says why)
t0, c0 = time.perf_counter(), time.process_time()
compiled = jax.jit(module.make_train(config)).lower(rngs[0]).compile()
t1, c1 = time.perf_counter(), time.process_time()
for i, key in enumerate(rngs):
    seed[0] = i
    jax.block_until_ready(compiled(key))
t2 = time.perf_counter()
print("RESULT " + json.dumps({"compile_s": t1 - t0, "compile_cpu_s": c1 - c0, "run_s": t2 - t1, "calls": calls,
                              "num_updates": config["NUM_UPDATES"], "batch": config["NUM_ENVS"] * config["NUM_STEPS"]}))
"""

# Ours in a fresh process: make_train, one chunk per point, each timed; the chunks' per-update metrics kept. Its
# seeds run as theirs do, one program per seed, one after another (`sequential`), or as --num-seeds trains them,
# all in one vmapped program (`vmapped`).
OURS = r"""
import json, sys, time
import numpy as np
from hephaestus.config.train_config import TrainConfig, resolve
from hephaestus.core.ppo import make_train
options, points, vmapped = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "vmapped"
updates = options["total_timesteps"] // (options["num_envs"] * options["num_steps"])
programs = [options] if vmapped else [dict(options, seed=options["seed"] + i, num_seeds=1)
                                      for i in range(options["num_seeds"])]
runs = []
for i, program in enumerate(programs):
    config = resolve(TrainConfig.from_flat(**program, log_interval=max(1, updates // points)))[0]
    t0 = time.perf_counter()
    runner, chunk = make_train(config)
    t1 = time.perf_counter()
    chunks, done = [], 0
    while done < updates:
        t, c = time.perf_counter(), time.process_time()
        runner, metrics = chunk(runner)
        metrics = {k: np.asarray(v, np.float64) for k, v in metrics.items()
                   if k in ("mean_episode_return", "num_episodes") or (k.startswith("episode/") and k.endswith("_rate"))}
        n = len(metrics["num_episodes"])
        done += n
        print(f"program {i} update {done}/{updates} in {time.perf_counter() - t:.0f} s, {time.process_time() - c:.0f} CPU-s", flush=True)
        chunks.append({"seconds": time.perf_counter() - t, "cpu_seconds": time.process_time() - c, "updates": n,
                       "metrics": {k: v.reshape(n, -1).tolist() for k, v in metrics.items()}})
    runs.append({"setup_s": t1 - t0, "chunks": chunks})
print("RESULT " + json.dumps({"runs": runs, "num_updates": updates, "batch": options["num_envs"] * options["num_steps"]}))
"""


def merge_programs(result: dict) -> dict:
    """OURS's result as one program's: each chunk's time summed over the programs (seeds run one after another) and
    its metrics [updates, seeds] side by side in seed order."""
    import numpy as np

    runs = result["runs"]
    chunks = []
    for parts in zip(*(run["chunks"] for run in runs)):
        chunks.append({"seconds": sum(c["seconds"] for c in parts), "cpu_seconds": sum(c["cpu_seconds"] for c in parts),
                       "updates": parts[0]["updates"],
                       "metrics": {k: np.concatenate([np.asarray(c["metrics"][k]) for c in parts], axis=1).tolist()
                                   for k in parts[0]["metrics"]}})
    return {"setup_s": sum(run["setup_s"] for run in runs), "chunks": chunks, "num_updates": result["num_updates"],
            "batch": result["batch"]}


class Job:
    """One side's code in a fresh process (`path` first on its PYTHONPATH), its output in `log`.out/.err files
    (files, not pipes: a job never waits on a full pipe while another is read)."""

    def __init__(self, who: str, code: str, args: list[str], python: str, log: str, path: str | None = None):
        env = dict(os.environ)
        if path:
            env["PYTHONPATH"] = os.pathsep.join(p for p in (path, env.get("PYTHONPATH")) if p)
        self.who, self.log, self.start = who, log, time.time()
        with open(log + ".out", "w") as out, open(log + ".err", "w") as err:
            self.proc = subprocess.Popen([python, "-c", code, *args], stdout=out, stderr=err, env=env)

    def wait(self) -> int:
        code = self.proc.wait()
        if not hasattr(self, "wall_s"):
            self.wall_s = time.time() - self.start
        return code

    def result(self) -> dict:
        code = self.wait()
        lines = open(self.log + ".out").read().splitlines()
        line = next((l for l in lines if l.startswith("RESULT ")), None)
        if code or line is None:
            last = (open(self.log + ".err").read().strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"{self.who} failed: {last[:300]} (log: {self.log}.err)")
        return json.loads(line[len("RESULT "):])


def stretch_means(per_update: list[dict], points: int) -> list[dict]:
    """[update] -> {key: [seed values]} (nan where no episode ended) -> `points` stretches of mean values."""
    import numpy as np

    n = len(per_update)
    bounds = np.linspace(0, n, points + 1).round().astype(int)
    out = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        keys = per_update[a].keys()
        out.append({k: np.nanmean(np.array([u[k] for u in per_update[a:b]], np.float64), axis=0).tolist()
                    for k in keys})
    return out


def theirs_per_update(result: dict, achievements: list[str], num_seeds: int) -> list[dict]:
    """Their recorded callbacks -> per update {"return": [seeds], "<achievement>": [seeds] as 0..1}."""
    import numpy as np

    by_update: dict[int, dict[int, dict]] = {}
    for seed, update, _, _, log in result["calls"]:
        by_update.setdefault(update, {})[seed] = log
    rows = []
    for update in sorted(by_update):
        logs = [by_update[update][s] for s in sorted(by_update[update])]

        def values(key, scale=1.0):
            v = np.array([float(np.asarray(log[key], np.float64).ravel()[0]) for log in logs])
            return (v[:num_seeds] * scale).tolist()

        row = {"return": values("episode_return")}
        row.update({a: values(f"Achievements/{a}", 0.01) for a in achievements})
        rows.append(row)
    return rows


def ours_per_update(result: dict, achievements: list[str], num_seeds: int) -> list[dict]:
    import numpy as np

    rows = []
    for chunk in result["chunks"]:
        m = {k: np.asarray(v, np.float64).reshape(chunk["updates"], num_seeds) for k, v in chunk["metrics"].items()}
        for u in range(chunk["updates"]):
            ended = m["num_episodes"][u]
            mean = lambda s: np.where(ended > 0, s / np.maximum(ended, 1), np.nan).tolist()
            row = {"return": np.where(ended > 0, m["mean_episode_return"][u], np.nan).tolist()}
            row.update({a: mean(m[f"episode/{a}_rate"][u]) for a in achievements})
            rows.append(row)
    return rows


def summarise_side(rows: list[dict], achievements: list[str], points: int, batch: int, num_seeds: int) -> dict:
    """The curve (per stretch: env steps, per-seed return and score) and the final stretch's per-seed figures."""
    import numpy as np

    from hephaestus.envs.episode_stats import crafter_score

    stretches = stretch_means(rows, points)
    bounds = np.linspace(0, len(rows), points + 1).round().astype(int)
    curve = []
    for s, b in zip(stretches, bounds[1:]):
        scores = [crafter_score(np.nan_to_num([s[a][i] for a in achievements])) for i in range(num_seeds)]
        curve.append({"env_steps": int(b) * batch, "return": s["return"], "score": scores})
    last = stretches[-1]
    return {"curve": curve, "final_return": last["return"], "final_score": curve[-1]["score"],
            "final_rates": {a: last[a] for a in achievements}}


def start_jobs(arch: str, args, logs: str, one_at_a_time: bool = False) -> dict:
    """Theirs and ours for `arch`, each in its own process: started at once, or (`one_at_a_time`) theirs run to its
    end before ours starts, so each has the machine to itself."""
    config = their_config(arch, args.reference_dir, args.num_envs, args.env_steps, args.seed, args.num_seeds)
    options = our_options(arch, config)
    theirs = Job(f"their {SCRIPTS[arch]}", THEIRS, [SCRIPTS[arch][:-3], json.dumps(config), str(args.points)],
                 args.reference_python, f"{logs}_{arch}_theirs", args.reference_dir)
    if one_at_a_time:
        theirs.wait()
    ours = Job(f"ours ({arch})", OURS, [json.dumps(options), str(args.points), args.our_seeds], sys.executable,
               f"{logs}_{arch}_ours")
    return {"arch": arch, "their_config": config, "our_options": options, "jobs": {"theirs": theirs, "ours": ours}}


class Logged:
    """A job already run (--from-logs): its RESULT line read back from its .out file."""

    def __init__(self, log: str):
        self.log, self.wall_s = log, float("nan")

    def result(self) -> dict:
        line = next((l for l in open(self.log + ".out").read().splitlines() if l.startswith("RESULT ")), None)
        if line is None:
            raise RuntimeError(f"{self.log}.out holds no RESULT line")
        return json.loads(line[len("RESULT "):])


def finish_jobs(started: dict, args) -> dict:
    """The two sides' curves, final figures and speeds (module docstring)."""
    from hephaestus.envs.craftax_env import achievement_names

    achievements = list(achievement_names(ENV))
    arch, config, jobs = started["arch"], started["their_config"], started.pop("jobs")
    batch = config["NUM_ENVS"] * config["NUM_STEPS"]
    out = dict(started)

    theirs = jobs["theirs"].result()
    # per seed: the updates after its first stretch, on the clock of its own call of the program
    first_point = max(1, theirs["num_updates"] // args.points)
    steps = wall = cpu = 0.0
    for seed in range(args.num_seeds):
        timed = [c for c in theirs["calls"] if c[0] == seed and c[1] >= first_point - 1]
        steps += (len(timed) - 1) * batch
        wall += timed[-1][2] - timed[0][2]
        cpu += timed[-1][3] - timed[0][3]
    out["theirs"] = summarise_side(theirs_per_update(theirs, achievements, args.num_seeds), achievements, args.points,
                                   batch, args.num_seeds)
    out["theirs"].update(compile_s=theirs["compile_s"], compile_cpu_s=theirs["compile_cpu_s"], run_s=theirs["run_s"],
                         wall_s=jobs["theirs"].wall_s,
                         steps_per_s=steps / max(wall, 1e-9), steps_per_cpu_s=steps / max(cpu, 1e-9))

    ours = merge_programs(jobs["ours"].result())
    later = ours["chunks"][1:] or ours["chunks"]
    steps = sum(c["updates"] for c in later) * batch * args.num_seeds
    out["ours"] = summarise_side(ours_per_update(ours, achievements, args.num_seeds), achievements, args.points,
                                 batch, args.num_seeds)
    out["ours"].update(setup_s=ours["setup_s"], first_chunk_s=ours["chunks"][0]["seconds"],
                       first_chunk_cpu_s=ours["chunks"][0]["cpu_seconds"], wall_s=jobs["ours"].wall_s,
                       steps_per_s=steps / max(sum(c["seconds"] for c in later), 1e-9),
                       steps_per_cpu_s=steps / max(sum(c["cpu_seconds"] for c in later), 1e-9))
    for side in ("theirs", "ours"):
        print(f"{arch} {side}: {out[side]['steps_per_s']:.0f} steps/s, {out[side]['steps_per_cpu_s']:.0f} steps per "
              f"CPU-second, final score {out[side]['final_score']}", flush=True)
    return out


def table(results: list[dict], args) -> list[str]:
    import numpy as np

    lines = [f"Craftax-Classic-Symbolic-v1, {args.env_steps:.3g} env steps per seed, {args.num_envs} envs x 64 "
             f"steps per update, {args.num_seeds} seeds (mean ± std over seeds; final = the last "
             f"1/{args.points} of training's episodes)", "",
             "| network | code | env steps/s (wall) | env steps per CPU-second | ours / theirs (CPU) | "
             "final score (%) | final return | per-seed score |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        for side in ("theirs", "ours"):
            s = r[side]
            ratio = s["steps_per_cpu_s"] / r["theirs"]["steps_per_cpu_s"]
            score, ret = np.asarray(s["final_score"]), np.asarray(s["final_return"])
            lines.append(f"| {r['arch']} | {'Craftax_Baselines ' + SCRIPTS[r['arch']] if side == 'theirs' else 'ours'}"
                         f" | {s['steps_per_s']:.0f} | {s['steps_per_cpu_s']:.0f} | {ratio:.2f} | "
                         f"{score.mean():.2f} ± {score.std(ddof=1) if len(score) > 1 else 0:.2f} | "
                         f"{np.nanmean(ret):.2f} ± {np.nanstd(ret, ddof=1) if len(ret) > 1 else 0:.2f} | "
                         f"{', '.join(f'{x:.2f}' for x in score)} |")
    return lines


def plot(results: list[dict], out: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
    colors = {("mlp", "theirs"): "tab:blue", ("mlp", "ours"): "tab:orange", ("rnn", "theirs"): "tab:green",
              ("rnn", "ours"): "tab:red"}
    for r in results:
        for side in ("theirs", "ours"):
            curve = r[side]["curve"]
            x = np.array([c["env_steps"] for c in curve]) / 1e6
            for ax, key in zip(axes, ("score", "return")):
                y = np.array([c[key] for c in curve], np.float64)
                label = f"{r['arch']} {'Craftax_Baselines' if side == 'theirs' else 'ours'}"
                ax.plot(x, np.nanmean(y, 1), color=colors[(r["arch"], side)], label=label)
                ax.fill_between(x, np.nanmin(y, 1), np.nanmax(y, 1), color=colors[(r["arch"], side)], alpha=0.2)
    axes[0].set_ylabel("Crafter score (%)")
    axes[1].set_ylabel("episode return")
    for ax in axes:
        ax.set_xlabel("env steps per seed (millions)")
    axes[0].legend(fontsize=7)
    fig.suptitle("Craftax-Classic-Symbolic: seeds' mean, band = min..max", fontsize=9)
    fig.tight_layout()
    return save_figure(fig, out, dpi=80)


def build_parser():
    p = parser("craftax_baselines", __doc__.splitlines()[0])
    p.add_argument("--reference-dir", required=True, metavar="DIR",
                   help="a folder with the Craftax_Baselines repository's files (ppo.py, ppo_rnn.py, wrappers.py, ...)")
    p.add_argument("--reference-python", default=sys.executable, metavar="PYTHON",
                   help="the interpreter that runs their code (default: this one)")
    p.add_argument("--archs", nargs="+", default=["mlp", "rnn"], choices=list(SCRIPTS), help="default: both")
    p.add_argument("--gpu", action="store_true",
                   help=f"their own defaults' scale: their --num_envs and --total_timesteps ({GPU_TIMESTEPS:.0e})")
    p.add_argument("--num-envs", type=int, default=None, help=f"default {CPU_NUM_ENVS} (with --gpu: theirs)")
    p.add_argument("--env-steps", type=float, default=None,
                   help=f"env steps per seed (default {CPU_TIMESTEPS}; with --gpu {GPU_TIMESTEPS:.0e})")
    p.add_argument("--points", type=int, default=8, help="stretches of each curve (default 8)")
    p.add_argument("--parallel", action=argparse.BooleanOptionalAction, default=None,
                   help="run all sides' processes at once (default: on, off with --gpu); --no-parallel runs one "
                        "process at a time, each with the machine to itself, so wall-clock env steps/s compare")
    p.add_argument("--our-seeds", choices=("sequential", "vmapped"), default="sequential",
                   help="how ours runs its seeds: sequential, one program per seed, one after another, as theirs "
                        "(the same batch per call; default); vmapped, all in one program, as --num-seeds trains them")
    p.add_argument("--from-logs", action="store_true",
                   help="run nothing: read the jobs' OUT_<arch>_<side>.out files of an earlier run with these settings")
    add_seeds(p, num_seeds=3)
    return p


def main(argv=None) -> int:
    require_this_checkout(__file__)
    p = build_parser()
    args = p.parse_args(argv)
    for name in SCRIPTS.values():
        if not os.path.isfile(os.path.join(args.reference_dir, name)):
            p.error(f"--reference-dir {args.reference_dir}: no {name} there (the Craftax_Baselines repository)")
    args.reference_dir = os.path.abspath(args.reference_dir)
    defaults = their_defaults(os.path.join(args.reference_dir, "ppo.py"))
    if args.num_envs is None:
        args.num_envs = defaults["NUM_ENVS"] if args.gpu else CPU_NUM_ENVS
    if args.env_steps is None:
        args.env_steps = GPU_TIMESTEPS if args.gpu else CPU_TIMESTEPS
    args.env_steps = int(args.env_steps)
    if args.parallel is None:
        args.parallel = not args.gpu
    updates = args.env_steps // (args.num_envs * defaults["NUM_STEPS"])
    if args.num_seeds < 1 or args.points < 1 or updates < args.points or args.num_envs % defaults["NUM_MINIBATCHES"]:
        p.error(f"need --num-seeds >= 1, --points <= updates ({updates}) and --num-envs divisible by their "
                f"{defaults['NUM_MINIBATCHES']} minibatches")
    out = check_out(p, args.out, "craftax_baselines")
    results = []
    if args.from_logs:  # the jobs' .out files of an earlier run with the same settings
        for arch in args.archs:
            config = their_config(arch, args.reference_dir, args.num_envs, args.env_steps, args.seed, args.num_seeds)
            jobs = {side: Logged(f"{out}_{arch}_{side}") for side in ("theirs", "ours")}
            results.append(finish_jobs({"arch": arch, "their_config": config,
                                        "our_options": our_options(arch, config), "jobs": jobs}, args))
    elif args.parallel:  # every job at once: on a shared CPU each side gets the same share of the machine
        started = [start_jobs(arch, args, out) for arch in args.archs]
        results = [finish_jobs(s, args) for s in started]
    else:  # one process at a time (a GPU: the device to itself)
        for arch in args.archs:
            started = start_jobs(arch, args, out, one_at_a_time=True)
            results.append(finish_jobs(started, args))
    lines = table(results, args)
    paths = [write_json(out, {"args": vars(args), "results": results}), write_md(out, "\n".join(lines)),
             plot(results, out)]
    print("\n".join(lines))
    print(f"results: {', '.join(paths)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
