#!/usr/bin/env python3
"""DeepSea, bsuite's deep_sea protocol, in our pipeline: which agents explore deeply enough to solve it.

Protocol (bsuite/experiments/deep_sea: sweep.py and analysis.py):
* sizes N (bsuite sweeps 10..50); `--episodes` per size and seed (bsuite: 10,000);
* each seed its own random action map (env `deepsea:N`: the map is drawn from the run's key);
* a seed *solves* size N at the first episode where the running fraction of bad episodes (cumulative bad / episodes;
  bad = a move left while on the treasure path, the env's `bad_episode` statistic; in deterministic DeepSea an
  episode is bad iff it misses the treasure) drops below 0.9 (analysis.find_solution's `thresh=0.9`), and it
  *scores* only if that episode is < 2^N + 100 (analysis.score's `forgiveness=100`);
* `--stochastic`: deep_sea_stochastic (random transitions, N(0, 1) reward noise at the chain's ends), solved below
  0.8 and only from episode 100 on, as its analysis.py has it; no analytic random row there;
* constant learning rate; `--num-seeds` seeds per agent in one compiled program (the training command's
  --num-seeds).

Agents: random (analytic), ppo (entropy coefficient tuned over --ppo-ent-coefs on the smallest size, the best then
used everywhere), count (tabular count bonus: the oracle), rnd, disagreement (DTC with competence off), dtc,
dreamer (actor-critic in the imagination of a one-member world model, no bonus) and dreamer-dtc (the ensemble's
disagreement on imagined states in the imagined reward; specs/dreamer.md). The dreamers have no bonus on real
transitions, so their rows have no novelty-vs-visits correlation.

Reported per size and agent: seeds solved and scored, episodes to solve, episodes to the first treasure (censored
at the budget), coverage of the N(N+1)/2 reachable cells, and the Spearman correlation between a cell's last
intrinsic reward and its visit count (negative = the bonus falls with visits). Episode counts are measured at the
end of the PPO update in which the event happened (resolution: num_envs x num_steps / N episodes).

    python scripts/experiments/deepsea.py                        # full: sizes 10 14 20 24 30, 10 seeds, 10k episodes
    python scripts/experiments/deepsea.py --quick                # 2 sizes, 3 seeds, small budget
    python scripts/experiments/deepsea.py --sizes 10 14 --agents count dtc --seeds 5 --episodes 2000
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

from hephaestus.tools.entry_points import require_this_checkout
import jax
import jax.numpy as jnp
import numpy as np

from hephaestus.config.train_config import AGENTS as AGENT_SETTINGS
from hephaestus.config.train_config import TrainConfig, agent_config, resolve
from hephaestus.envs.registry import make_env
from hephaestus.tools.experiment import add_out, check_out
from hephaestus.core.ppo import make_train
from hephaestus.config.registry import ConfigError
from hephaestus.core.stages import Stage, register_stage

AGENTS = ("random", "ppo", "count", "rnd", "disagreement", "dtc", "dreamer", "dreamer-dtc")
BAD_THRESHOLD = 0.9  # bsuite deep_sea analysis.find_solution(thresh=0.9)
# bsuite deep_sea_stochastic's analysis: a harsher threshold, counted only from episode 100 on (few bad episodes
# can be luck of the noise there).
STOCHASTIC_BAD_THRESHOLD, STOCHASTIC_MIN_EPISODES = 0.8, 100
FORGIVENESS = 100  # bsuite analysis.score(forgiveness=100.)


@register_stage("deepsea_probe")
def deepsea_probe(ctx):
    """First after the rollout: episodes per update, and each cell's visit count (the cell an action was taken
    from; DeepSea observations are one-hot grids). Bad episodes and treasures come from the env's own per-episode
    statistics (envs/adapters.adapt_deepsea), which the reward noise of the stochastic variant does not hide."""
    cells = ctx.env_spec.obs_dim

    def apply(key, train_state, batch, visits):
        done = jnp.logical_or(batch["terminated"], batch["truncated"])
        cell = jnp.argmax(batch["obs"], -1).reshape(-1)
        visits = visits.at[cell].add(1)
        metrics = {"probe/episodes": jnp.sum(done).astype(jnp.float32)}
        return train_state, batch, visits, metrics

    return Stage(name="deepsea_probe", apply=apply, init=lambda key: jnp.zeros((cells,), jnp.int32))


@register_stage("bonus_probe")
def bonus_probe(ctx):
    """Last after the rollout: each cell's intrinsic reward the last time an action was taken from it (NaN until
    then), for the novelty-vs-visits correlation."""
    cells = ctx.env_spec.obs_dim

    def apply(key, train_state, batch, last):
        if "intrinsic_reward" not in batch:
            return train_state, batch, last, {}
        cell = jnp.argmax(batch["obs"], -1).reshape(-1)
        bonus = batch["intrinsic_reward"].reshape(-1)
        total = jnp.zeros((cells,), jnp.float32).at[cell].add(bonus)
        count = jnp.zeros((cells,), jnp.float32).at[cell].add(1.0)
        last = jnp.where(count > 0, total / jnp.maximum(count, 1.0), last)
        return train_state, batch, last, {}

    return Stage(name="bonus_probe", apply=apply, init=lambda key: jnp.full((cells,), jnp.nan, jnp.float32))


def frontier_window(args) -> int:
    """DTC replay's recent window in sequences: --frontier-window, or a quarter of the capacity when it is 0."""
    return args.frontier_window or args.replay_capacity // 4


def seed_ids(args) -> list:
    return list(range(args.first_seed, args.first_seed + args.seeds))


def make_config(size: int, agent: str, ent_coef: float, args) -> TrainConfig:
    batch = args.num_envs * args.num_steps
    steps = args.episodes * size
    family = "deepsea-stochastic" if args.stochastic else "deepsea"
    config = TrainConfig.from_flat(env=f"{family}:{size}", num_envs=args.num_envs, num_steps=args.num_steps,
                         total_timesteps=-(-steps // batch) * batch, lr=args.lr, anneal_lr=False, ent_coef=ent_coef,
                         hidden_dim=args.hidden_dim, num_layers=2, num_minibatches=args.num_minibatches,
                         update_epochs=args.update_epochs,
                         dtc_intrinsic_coef=args.intrinsic_coef, dtc_aleatoric_weight=args.aleatoric_weight,
                         dtc_novelty_signal=args.novelty_signal,
                         dtc_seq_len=args.seq_len,
                         dtc_replay_ratio=args.replay_ratio, dtc_replay_capacity=args.replay_capacity,
                         dtc_frontier_window=frontier_window(args),
                         dtc_frontier_fraction=args.frontier_fraction, dtc_reward_fraction=args.reward_fraction,
                         dtc_reward_power=args.reward_power,
                         dtc_wm_batch=args.wm_batch,
                         dtc_wm_lr=args.wm_lr,
                         # an agent that sets its own member count (its --agent values: the plain dreamer's 1) keeps it
                         dtc_ensemble_size=None if "dtc_ensemble_size" in AGENT_SETTINGS[agent][1]
                         else args.ensemble_size,
                         dtc_deter_dim=args.wm_dim, dtc_hidden_dim=args.wm_dim, dtc_prior_scale=args.prior_scale,
                         dtc_norm_rate=args.norm_rate,
                         rnd_coef=args.rnd_coef,
                         count_coef=args.count_coef)
    if agent == "dtc":  # the competence flags are DTC's; disagreement is DTC with competence off (its gain 0, and
        # no second scoring pass for a progress it would not use)
        config = config.replace(dtc_competence=args.competence)
        if args.competence_coef is not None:  # else the agent's own gain, 1
            config = config.replace(dtc_competence_coef=args.competence_coef)
    # None (not given) leaves them auto: resolve settles the dreamer's defaults (agents/dreamer/options.py's tables)
    config = config.replace(dreamer_entropy=args.dreamer_entropy, dreamer_advantage_norm=args.dreamer_advantage_norm)
    config = agent_config(config, agent)
    critic = ("intrinsic_critic",) if args.intrinsic_critic and agent in BONUS_AGENTS else ()
    config = config.replace(extra_stages=("deepsea_probe",) + config.extra_stages + critic + ("bonus_probe",))
    return resolve(config.replace(log_interval=config.num_updates))[0]  # the whole run: one compiled chunk


def run(size: int, agent: str, ent_coef: float, args) -> dict:
    # The seeds are the training command's --num-seeds agents in one program: seed --first-seed + i is agent i, with
    # its own init key, so its own network, env resets and DeepSea action map (the same numbers as one run per seed).
    ids = seed_ids(args)
    config = resolve(make_config(size, agent, ent_coef, args).replace(num_seeds=len(ids), seed=ids[0]))[0]
    trainer = make_train(config, make_env(config.env.name))  # the pipeline's own training entry, one config per agent
    t0 = time.perf_counter()
    compiled = trainer.compiled_chunk.lower(trainer.runner_state, jnp.int32(config.num_updates)).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    final, metrics = compiled(trainer.runner_state, jnp.int32(config.num_updates))
    # [updates, seeds, ...] -> [seeds, updates, ...] in that memory order, as the rows below read and average them
    # (one seed: no seed axis, so one added)
    several = config.run.num_seeds > 1
    metrics = {k: np.ascontiguousarray(np.swapaxes(v, 0, 1)) if several else np.asarray(v)[None]
               for k, v in jax.device_get(metrics).items()}
    run_s = time.perf_counter() - t0
    stages = jax.device_get(final.stages if several else jax.tree.map(lambda x: x[None], final.stages))
    maps = np.asarray(stages["rollout"].env_state.action_mapping)[:, 0]  # [seeds, N, N]
    # the bonus agents' signals over training (mean over seeds, at most 100 points): is novelty falling or rising?
    keys = [k for k in metrics if k.startswith(("dtc/", "rnd/", "count/", "wm/")) and np.ndim(metrics[k]) == 2]
    every = max(1, config.num_updates // 100)
    curves = {k: np.asarray(metrics[k]).mean(0)[::every].round(6).tolist() for k in keys}
    # per update: the episodes that ended, and (the rollout's episode/ sums) how many of them were bad, found it
    return summarise(size, agent, np.asarray(metrics["probe/episodes"]), np.asarray(metrics["episode/bad_episode_rate"]),
                     np.asarray(metrics["episode/treasure_rate"]), np.asarray(stages["deepsea_probe"]),
                     np.asarray(stages["bonus_probe"]), maps, args.stochastic,
                     {"compile_s": compile_s, "run_s": run_s, "ent_coef": ent_coef, "label": label(agent, args),
                      "seed_ids": seed_ids(args),
                      "curves": curves, "curve_every": every,
                      "env_steps_per_seed": config.num_updates * config.batch_size,
                      "share": float(np.mean([np.mean(v) for k, v in metrics.items() if k.endswith("intrinsic_share")]
                                             or [0.0]))})


def label(agent: str, args) -> str:
    """The agent's name in tables and plots: the DTC family's rows name their novelty signal; the disagreement
    agent is DTC with competence off."""
    noisy = " [stochastic]" if args.stochastic else ""
    noisy += " + intrinsic critic" if args.intrinsic_critic and agent in BONUS_AGENTS else ""
    if agent in ("dreamer", "dreamer-dtc"):
        variant = changed_flags(args, DREAMER_VARIANT_FLAGS)
        return agent + (f" ({', '.join(variant)})" if variant else "") + noisy
    if agent not in ("dtc", "disagreement"):
        return agent + noisy
    variant = [args.novelty_signal] + ([] if args.aleatoric_weight == 1.0 else [f"aleatoric {args.aleatoric_weight:g}"])
    defaults = args.variant_defaults  # the parser's (--quick's where given): a row names what differs
    if (args.frontier_window, args.frontier_fraction) != (defaults["frontier_window"], defaults["frontier_fraction"]):
        variant.append(f"replay: {args.frontier_fraction:g} from the last {frontier_window(args)}")
    flags = VARIANT_FLAGS if agent == "dtc" else {k: v for k, v in VARIANT_FLAGS.items() if v not in COMPETENCE_FLAGS}
    variant += changed_flags(args, flags)
    return f"{'dtc' if agent == 'dtc' else 'dtc, competence off'} ({', '.join(variant)}){noisy}"


def changed_flags(args, flags: dict) -> list:
    """'name value' for each of `flags` (label name -> argument) that differs from the parser's default (--quick's
    where given), in the order of `flags`."""
    show = lambda value: value if isinstance(value, str) else f"{value:g}"
    return [f"{name} {show(getattr(args, field))}" for name, field in flags.items()
            if getattr(args, field) != args.variant_defaults[field]]


# DTC settings a row's label names when they differ from the parser's defaults.
VARIANT_FLAGS = {"bonus": "intrinsic_coef", "replay ratio": "replay_ratio", "wm batch": "wm_batch", "wm lr": "wm_lr",
                 "wm width": "wm_dim", "prior": "prior_scale", "norm rate": "norm_rate",
                 "competence": "competence", "competence gain": "competence_coef",
                 "reward-rich replay": "reward_fraction", "reward power": "reward_power"}
COMPETENCE_FLAGS = ("competence", "competence_coef")  # DTC's alone: the disagreement agent runs with competence off
# The dreamers' settings a row's label names likewise (they have no bonus of their own on real transitions).
DREAMER_VARIANT_FLAGS = {"reward-rich replay": "reward_fraction", "reward power": "reward_power",
                         "entropy": "dreamer_entropy", "advantages": "dreamer_advantage_norm",
                         "replay": "replay_capacity", "replay ratio": "replay_ratio", "sequences of": "seq_len"}
BONUS_AGENTS = ("count", "rnd", "dtc", "disagreement")  # the agents --intrinsic-critic applies to


def spearman(x, y) -> float:
    if len(x) < 3 or np.std(x) == 0 or np.std(y) == 0:
        return float("nan")
    rx, ry = np.argsort(np.argsort(x)), np.argsort(np.argsort(y))
    return float(np.corrcoef(rx, ry)[0, 1])


def summarise(size, agent, episodes, bad, treasures, visits, last_bonus, maps, stochastic, extra) -> dict:
    """episodes/bad/treasures [seeds, updates] (episodes ended in each update, how many of them bad, how many found
    the treasure); visits/last_bonus [seeds, N*N]. Solved: bsuite's rule for the variant."""
    budget = None
    threshold, min_episodes = (STOCHASTIC_BAD_THRESHOLD, STOCHASTIC_MIN_EPISODES) if stochastic else (BAD_THRESHOLD, 1)
    cum_ep, cum_bad, cum_tr = np.cumsum(episodes, 1), np.cumsum(bad, 1), np.cumsum(treasures, 1)
    reachable = np.array([c <= r for r in range(size) for c in range(size)])  # row-major cells with col <= row
    per_seed = []
    for s in range(episodes.shape[0]):
        bad_frac = cum_bad[s] / np.maximum(cum_ep[s], 1)
        below = np.nonzero((bad_frac < threshold) & (cum_ep[s] >= min_episodes))[0]
        solve_ep = int(cum_ep[s, below[0]]) if below.size else None
        first = np.nonzero(cum_tr[s] > 0)[0]
        seen = visits[s] > 0
        corr_cells = seen & np.isfinite(last_bonus[s])
        per_seed.append({"solved_episode": solve_ep,
                         "scored": solve_ep is not None and solve_ep < 2 ** size + FORGIVENESS,
                         "first_treasure": int(cum_ep[s, first[0]]) if first.size else None,
                         "coverage": float(seen[reachable].mean()),
                         "corr": spearman(last_bonus[s][corr_cells], visits[s][corr_cells])})
        budget = int(cum_ep[s, -1])
    distinct_maps = len({m.tobytes() for m in maps})
    return {"size": size, "agent": agent, "seeds": per_seed, "episodes": budget, "distinct_maps": distinct_maps,
            "stochastic": bool(stochastic), **extra}


def random_agent(size: int, episodes: int, seeds: int) -> dict:
    """Uniform random actions, analytically: an episode finds the treasure with probability p = 2^-N (each of the
    N moves goes right with probability 1/2 whatever the map). Solving needs a cumulative success rate > 10%,
    i.e. never for N >= 4 in practice; the first treasure is geometric with mean 2^N."""
    p = 2.0 ** -size
    found = 1.0 - (1.0 - p) ** episodes
    return {"size": size, "agent": "random", "analytic": True, "p_first_within_budget": found,
            "expected_first": 1.0 / p, "expected_coverage": float(np.mean(
                [1.0 - (1.0 - math.comb(r, c) * 2.0 ** -r) ** episodes for r in range(size) for c in range(r + 1)])),
            "episodes": episodes, "seeds": [{"solved_episode": None, "scored": False}] * seeds}


def row(r) -> str:
    n = len(r["seeds"])
    if r.get("analytic"):
        return (f"| {r['size']} | random (analytic) | 0/{n} | 0/{n} | – | P(found) {r['p_first_within_budget']:.3f}, "
                f"mean 2^N = {r['expected_first']:,.0f} | {r['expected_coverage']:.2f} | – |")
    solved = [s["solved_episode"] for s in r["seeds"] if s["solved_episode"] is not None]
    scored = sum(s["scored"] for s in r["seeds"])
    firsts = [s["first_treasure"] for s in r["seeds"]]
    found = [f for f in firsts if f is not None]
    corr = [s["corr"] for s in r["seeds"] if np.isfinite(s["corr"])]
    first_txt = (f"median {int(np.median([f if f is not None else r['episodes'] + 1 for f in firsts])):,}"
                 f"{'' if len(found) == n else '+'} ({len(found)}/{n} found)")
    name = r.get("label", r["agent"]) + (f" (ent {r['ent_coef']})" if r["agent"] == "ppo" else "")
    return (f"| {r['size']} | {name} | {len(solved)}/{n} | {scored}/{n} | "
            f"{'median ' + format(int(np.median(solved)), ',') if solved else '–'} | {first_txt} | "
            f"{np.mean([s['coverage'] for s in r['seeds']]):.2f} | {np.mean(corr):+.2f} |" if corr else
            f"| {r['size']} | {name} | {len(solved)}/{n} | {scored}/{n} | "
            f"{'median ' + format(int(np.median(solved)), ',') if solved else '–'} | {first_txt} | "
            f"{np.mean([s['coverage'] for s in r['seeds']]):.2f} | – |")


HEADER = ("| N | agent | solved | scored (< 2^N+100) | episodes to solve | episodes to first treasure | coverage | "
          "corr(bonus, visits) |\n|---|---|---|---|---|---|---|---|")


def plot(results, ppo_ent, path) -> str:
    """Episodes to solve and share of seeds solved against N, one line per trained agent (PPO at its chosen entropy
    coefficient; the analytic random rows have no episodes). Returns the file written, or why there is none."""
    results = [r for r in results if not r.get("analytic") and (r["agent"] != "ppo" or r["ent_coef"] == ppo_ent)]
    if not results:
        return "no plot: no trained agent's rows"
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted({r["size"] for r in results})
    budget = max(r["episodes"] for r in results)
    if len(sizes) == 1:  # variants at one size: every seed a point, not a median over a line of one
        return plot_seeds(plt, results, sizes[0], budget, path)
    fig, (ax_solved, ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name in dict.fromkeys(r.get("label", r["agent"]) for r in results):  # in order of appearance
        rs = sorted((r for r in results if r.get("label", r["agent"]) == name), key=lambda r: r["size"])
        xs, meds, los, his, solved = [], [], [], [], []
        for r in rs:
            eps = np.array([s["solved_episode"] if s["solved_episode"] is not None else np.inf for s in r["seeds"]])
            xs.append(r["size"])
            solved.append(np.mean(np.isfinite(eps)))
            with np.errstate(invalid="ignore"):  # inf - inf between two unsolved seeds: nan, drawn as missing
                meds.append(np.median(eps))
                los.append(np.percentile(eps, 25))
                his.append(np.percentile(eps, 75))
        meds = np.where(np.isfinite(meds), meds, np.nan)
        line, = ax.plot(xs, meds, "o-", label=name)
        ax.fill_between(xs, np.where(np.isfinite(los), los, np.nan), np.where(np.isfinite(his), his, budget),
                        color=line.get_color(), alpha=0.12)
        ax_solved.plot(xs, solved, "o-", color=line.get_color(), label=name)
    bar, = ax.plot(sizes, [2.0 ** n + FORGIVENESS for n in sizes], "k--", label="2^N + 100 (bsuite's dithering bar)")
    ax.legend(handles=[bar], fontsize=7, loc="lower right")
    ax.axhline(budget, color="grey", lw=0.8)
    ax.set(xlabel="DeepSea size N", ylabel="episodes to solve (median over seeds; band: IQR)", yscale="log",
           ylim=(10, budget * 3))
    ax.set_title("missing points: median seed did not solve within the budget", fontsize=8)
    ax_solved.set(xlabel="DeepSea size N", ylabel="share of seeds solved", ylim=(-0.03, 1.03))
    ax_solved.legend(fontsize=7)
    variants = {bool(r.get("stochastic")) for r in results}
    rule = {frozenset({False}): "bad-episode share < 0.9", frozenset({True}): "stochastic: bad-episode share < 0.8 "
            "from episode 100"}.get(frozenset(variants), "< 0.9, stochastic rows < 0.8 from episode 100")
    ax_solved.set_title(f"solved within {budget:,} episodes (bsuite: {rule})", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def plot_seeds(plt, results, size, budget, path) -> str:
    """One size: a row per agent variant, each seed's episodes to solve (filled) and to its first treasure (hollow);
    seeds that did not solve are drawn at the budget as crosses."""
    labels = [r.get("label", r["agent"]) for r in results]  # a row each: rows of one label are separate runs
    import textwrap

    fig, ax = plt.subplots(figsize=(10, 1.6 + 0.5 * len(labels)))
    for y, r in enumerate(results):
        seeds = r["seeds"]
        jitter = np.linspace(-0.15, 0.15, len(seeds)) if len(seeds) > 1 else np.zeros(1)
        solved = [(s["solved_episode"], y + j) for s, j in zip(seeds, jitter) if s["solved_episode"] is not None]
        missed = [y + j for s, j in zip(seeds, jitter) if s["solved_episode"] is None]
        firsts = [(s["first_treasure"], y + j) for s, j in zip(seeds, jitter) if s.get("first_treasure") is not None]
        if firsts:
            ax.scatter(*zip(*firsts), facecolors="none", edgecolors="C0", s=18, label="first treasure" if y == 0 else None)
        if solved:
            ax.scatter(*zip(*solved), color="C2", s=22, label="solved" if not ax.collections[1:] else None)
        if missed:
            ax.scatter([budget] * len(missed), missed, marker="x", color="C3", s=22)
        ax.text(budget * 1.15, y, f"{len(solved)}/{len(seeds)}", va="center", fontsize=8)
    ax.axvline(2.0 ** size + FORGIVENESS, color="k", ls="--", lw=0.8, label="2^N + 100 (scored if solved before)")
    ax.axvline(budget, color="grey", lw=0.8, label="budget (crosses: not solved)")
    ax.set_yticks(range(len(labels)), [textwrap.fill(name, 48) for name in labels], fontsize=7)
    ax.set(xscale="log", xlim=(40, budget * 1.6), ylim=(-0.6, len(labels) - 0.4), xlabel="episodes")
    ax.invert_yaxis()
    ax.set_title(f"DeepSea-{size}: each seed's episodes to its first treasure and to solve (bad-episode share < "
                 f"{BAD_THRESHOLD:g})", fontsize=8)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.22 - 0.3 / len(labels)), ncol=4)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def pool_seeds(results: list) -> list:
    """One row per experiment: rows of the same size, agent label, entropy coefficient and variant whose seeds are
    disjoint (runs from different --first-seed) become one row over all their seeds. Rows whose seeds overlap stay
    apart (the same seeds run twice are two measurements, not more seeds). Rows from before `seed_ids` was
    recorded hold seeds 0..n-1."""
    def setting(r):  # what must match for two rows to be one experiment
        return r["size"], r.get("label", r["agent"]), r.get("ent_coef"), r.get("stochastic"), r.get("env_steps_per_seed")

    pooled = []
    for r in results:
        ids = r.get("seed_ids", list(range(len(r["seeds"]))))
        same = None if r.get("analytic") else next(
            (p for p in pooled if not p.get("analytic") and setting(p) == setting(r) and not set(p["seed_ids"]) & set(ids)),
            None)
        if same is None:
            pooled.append({**r, "seed_ids": list(ids)})
            continue
        same.update(seeds=same["seeds"] + r["seeds"], seed_ids=same["seed_ids"] + list(ids),
                    distinct_maps=same["distinct_maps"] + r["distinct_maps"],  # disjoint seeds: maps of their own keys
                    run_s=same.get("run_s", 0.0) + r.get("run_s", 0.0),
                    episodes=max(same["episodes"], r["episodes"]))  # the same env steps: episodes differ by a few
    return pooled


def merge(paths, out):
    results, ppo_ent = [], None
    for path in paths:
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, ValueError) as err:
            sys.exit(f"error: --merge {path}: {err}")
        results += data["results"]
        ppo_ent = ppo_ent if ppo_ent is not None else data.get("ppo_ent")
    results = pool_seeds(results)
    results.sort(key=lambda r: r["size"])  # stable: each size keeps its files' order
    with open(out + ".md", "w") as f:
        f.write(HEADER + "\n" + "\n".join(row(r) for r in results) + "\n")
    plotted = plot(results, ppo_ent, out + ".png")
    print(f"wrote {out}.md, {plotted} ({len(results)} rows from {len(paths)} files)")


def parse_args(argv=None):
    """(parser, args) for `argv` (default: the command line), with `args.variant_defaults`, the defaults that row
    labels compare against. The probe and the tests build the experiment's settings through this too."""
    argv = sys.argv[1:] if argv is None else list(argv)
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[10, 14, 20, 24, 30])
    p.add_argument("--agents", nargs="+", default=list(AGENTS), choices=AGENTS)
    p.add_argument("--num-seeds", "--seeds", dest="seeds", type=int, default=10,
                   help="seeds (the training command's --num-seeds; --seeds says the same)")
    p.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + seeds - 1 (more seeds "
                   "for a row: run again from --first-seed 10 and --merge)")
    p.add_argument("--episodes", type=int, default=10_000, help="episodes per size and seed (bsuite: 10,000)")
    p.add_argument("--ppo-ent-coefs", type=float, nargs="+", default=[0.01, 0.05, 0.1],
                   help="PPO's entropy coefficient is tuned over these on the smallest size")
    p.add_argument("--ent-coef", type=float, default=0.01, help="entropy coefficient of the bonus agents")
    p.add_argument("--num-envs", type=int, default=16)
    p.add_argument("--num-steps", type=int, default=32)
    p.add_argument("--num-minibatches", type=int, default=4)
    p.add_argument("--update-epochs", type=int, default=4)
    p.add_argument("--hidden-dim", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3, help="constant (no annealing)")
    p.add_argument("--intrinsic-coef", type=float, default=0.05, help="DTC / disagreement bonus weight")
    p.add_argument("--aleatoric-weight", type=float, default=1.0,
                   help="DTC / disagreement novelty: disagreement minus this x the members' variance (0: plain)")
    p.add_argument("--novelty-signal", choices=("disagreement", "surprise"), default="surprise",
                   help="DTC / disagreement novelty: the members' disagreement, or their error against the outcome")
    p.add_argument("--rnd-coef", type=float, default=0.05)
    p.add_argument("--count-coef", type=float, default=0.05)
    p.add_argument("--seq-len", type=int, default=8)
    p.add_argument("--replay-ratio", type=float, default=1.0, help="DTC world model: replayed per env step")
    p.add_argument("--replay-capacity", type=int, default=1024)
    p.add_argument("--frontier-window", type=int, default=0,
                   help="DTC replay: sequences in the recent window (0: a quarter of the capacity)")
    p.add_argument("--frontier-fraction", type=float, default=0.5, help="DTC replay: share of draws from the window")
    p.add_argument("--reward-fraction", type=float, default=0.0,
                   help="world-model replay (and the dreamers' dream starts): share of draws in proportion to a "
                        "sequence's largest |reward| (0: off)")
    p.add_argument("--reward-power", type=float, default=2.0,
                   help="reward-rich draws: a sequence's weight is its largest |reward| to this power (1: proportional)")
    p.add_argument("--dreamer-entropy", type=float, default=None,
                   help="the dreamers' entropy regulariser (default: the dreamer's own, --dreamer-entropy of the "
                        "training script)")
    p.add_argument("--dreamer-advantage-norm", choices=("batch", "range"), default=None,
                   help="the dreamers' advantage normalisation: batch (mean 0, std 1) or range (divided by max(1, "
                        "the returns' 5th-95th percentile range), DreamerV3's); default: the dreamer's own")
    p.add_argument("--wm-batch", type=int, default=16, help="DTC world model: sequences per gradient step")
    p.add_argument("--wm-lr", type=float, default=1e-3, help="DTC world model: learning rate")
    p.add_argument("--ensemble-size", type=int, default=5,
                   help="world-model members of the ensemble agents (dtc, disagreement, dreamer-dtc); the plain "
                        "dreamer trains one, the member its dreams read")
    p.add_argument("--prior-scale", type=float, default=0.0, help="DTC world model: randomized prior scale (0: none)")
    p.add_argument("--norm-rate", type=float, default=0.0,
                   help="DTC novelty normaliser: EMA rate of its second moment per update (0: the mean over the run)")
    p.add_argument("--competence", choices=("global", "progress"), default="global",
                   help="DTC competence: global (two EMAs of the batch's novelty) or progress (per transition, the "
                        "share of its novelty the update's world-model steps removed)")
    p.add_argument("--competence-coef", type=float, default=None,
                   help="DTC competence's gain on novelty (default: the agent's own, 1 for dtc)")
    p.add_argument("--wm-dim", type=int, default=64, help="RSSM deter and hidden width")
    p.add_argument("--intrinsic-critic", action="store_true", help="the bonus agents (count, rnd, dtc, "
                   "disagreement) with the intrinsic_critic stage: the bonus's own critic and non-episodic returns")
    p.add_argument("--stochastic", action="store_true", help="bsuite's deep_sea_stochastic: random transitions "
                   "and N(0, 1) reward noise at the chain's ends; solved below 0.8 bad episodes, from episode 100")
    p.add_argument("--quick", action="store_true", help="defaults for a smoke run: 2 sizes (6, 8), 3 seeds, 300 "
                   "episodes, small models (explicit flags still win)")
    add_out(p, "deepsea", "writes OUT.json, OUT.md (table) and OUT.png")
    p.add_argument("--merge", nargs="+", metavar="JSON", help="runs nothing: the rows of these earlier OUT.json "
                   "files in one OUT.md table and OUT.png plot (PPO: the entropy coefficient the first file chose)")
    if "--quick" in argv:  # quick defaults; flags given explicitly still win
        p.set_defaults(sizes=[6, 8], seeds=3, episodes=300, ppo_ent_coefs=[0.01, 0.1], num_envs=8, num_steps=16,
                       ensemble_size=2, wm_dim=16, replay_capacity=64, hidden_dim=32)
    args = p.parse_args(argv)
    args.variant_defaults = {field: p.get_default(field) for field in
                                 ("frontier_window", "frontier_fraction", *VARIANT_FLAGS.values(),
                                  *DREAMER_VARIANT_FLAGS.values())}
    if args.out.endswith(".json"):  # --out x.json means x (x.json, x.md, x.png), not x.json.json
        args.out = args.out[:-len(".json")]
    return p, args


def main():
    p, args = parse_args()
    args.out = check_out(p, args.out, "deepsea")
    if args.merge:
        return merge(args.merge, args.out)
    if min(args.sizes) < 2 or args.seeds < 1 or args.episodes < 1 or args.first_seed < 0:
        p.error("sizes must be >= 2, seeds and episodes >= 1, first seed >= 0")
    for size in args.sizes:  # every run's config checked before the first one trains: a bad flag costs no work
        for agent in [a for a in dict.fromkeys(args.agents) if a != "random"]:
            try:
                make_config(size, agent, args.ent_coef, args)
            except (ConfigError, ValueError) as err:
                p.error(f"{agent} at size {size}: {err}")

    results = []

    def report(r):  # each row is saved as it finishes: a long run that is stopped keeps the rows it has
        results.append(r)
        print(row(r) + ("" if r.get("analytic") else
                        f"  [{r['compile_s']:.0f}s compile, {r['run_s']:.0f}s run, {r['distinct_maps']} maps]"),
              flush=True)
        with open(args.out + ".json", "w") as f:
            json.dump({"args": vars(args), "ppo_ent": ppo_ent, "results": results}, f, indent=1, default=float)
        with open(args.out + ".md", "w") as f:
            f.write(HEADER + "\n" + "\n".join(row(r) for r in results) + "\n")

    print(HEADER)
    ppo_ent = args.ppo_ent_coefs[0] if len(args.ppo_ent_coefs) == 1 else None  # None until tuned
    if "ppo" in args.agents and len(args.ppo_ent_coefs) > 1:  # tune on the smallest size: most seeds solved, then
        tuning = [run(min(args.sizes), "ppo", e, args) for e in args.ppo_ent_coefs]  # fewest episodes
        for r in tuning:
            report(r)
        key = lambda r: (-sum(s["solved_episode"] is not None for s in r["seeds"]),
                         np.median([s["solved_episode"] or 10 ** 9 for s in r["seeds"]]))
        ppo_ent = min(tuning, key=key)["ent_coef"]
        print(f"ppo: entropy coefficient {ppo_ent} chosen on size {min(args.sizes)}", flush=True)
    for size in sorted(args.sizes):
        for agent in args.agents:
            if agent == "random":
                if args.stochastic:  # the analytic row is the deterministic chain's
                    print(f"random: no analytic row for the stochastic variant (size {size})", flush=True)
                    continue
                report(random_agent(size, args.episodes, args.seeds))
            elif agent == "ppo":
                if not (size == min(args.sizes) and len(args.ppo_ent_coefs) > 1):
                    report(run(size, "ppo", ppo_ent, args))
            else:
                report(run(size, agent, args.ent_coef, args))
    print(f"wrote {args.out}.json, {args.out}.md, {plot(results, ppo_ent, args.out + '.png')}")


if __name__ == "__main__":
    require_this_checkout(__file__)
    main()
