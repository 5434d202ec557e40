"""scripts/evaluate.py: evaluate a saved agent (or the random policy) with the evaluation program of training.

    python scripts/evaluate.py checkpoints/hackmatrix_s0 --episodes 1000 [--sampled] [--json out.json]
    python scripts/evaluate.py checkpoints/hackmatrix_s0 --episodes 1000 --seeds 0,1,2   # mean ± std over seeds
    python scripts/evaluate.py --random --env hackmatrix --episodes 1000
    python scripts/evaluate.py --scripted exit-rush --env hackmatrix --episodes 1000
"""

from __future__ import annotations

import sys
import time

from hephaestus.run.cli import comma_separated, whole_numbers
from hephaestus.core.evaluation import Evaluator, append_eval_curve, summary_lines, write_eval_json
from hephaestus.core.export import agent_label
from hephaestus.tools.outputs import output_file_problem
from hephaestus.tools.saved_agent import LoadError, load_agent, load_env, resolve_params_path


class EvalError(Exception):
    """Bad input to scripts/evaluate.py; the message is one line."""


def build_parser():
    from hephaestus.run.cli import OneLineParser

    p = OneLineParser(prog="evaluate.py", description="Evaluate a saved agent: K complete episodes in parallel, "
                      "greedy by default; the statistics training logs under eval/.")
    p.add_argument("path", nargs="?", help="final_params.npz, params_<n>.npz, a run directory, a checkpoint "
                   "step directory, a shipped agent (checkpoints/pretrained/NAME) or wandb:ENTITY/PROJECT/RUN_ID "
                   "(found and fetched as watch_agent.py does)")
    p.add_argument("--episodes", type=int, default=1000, help="episodes, in parallel batches of --batch-size "
                   f"(default: 1000, at most {MAX_EPISODES:,})")
    p.add_argument("--max-steps", type=int, default=1000, help="steps per episode at most (default: 1000)")
    p.add_argument("--seed", type=int, default=None, help="PRNG seed of the episodes (default: 0)")
    p.add_argument("--seeds", metavar="S,S,...", type=seed_list, default=None, help="several evaluation seeds "
                   "(e.g. 0,1,2): --episodes games for each with the one compiled program, each seed's line, then "
                   "the mean and sample std over seeds; --json holds them as a --num-seeds run's eval.json does "
                   "(<key>/std, per_seed, per-episode lists per seed)")
    p.add_argument("--batch-size", type=int, default=0, help="episodes run in parallel per call (default: all, at "
                   f"most {DEFAULT_BATCH}); a "
                   "training run's --eval-episodes reuses its compiled program from the compilation cache")
    p.add_argument("--sampled", action="store_true", help="also run sampled-policy episodes (eval_sampled/)")
    p.add_argument("--random", action="store_true", help="the masked-uniform random policy instead of an agent "
                   "(a baseline; needs --env or a path naming the env)")
    p.add_argument("--scripted", metavar="NAME", help="one of the env's scripted baselines instead of an agent "
                   "(HackMatrix: exit-rush, exit-rush-siphon, exit-rush-safe, exit-rush-deep, exit-rush-programs, "
                   "exit-rush-collector; needs --env)")
    p.add_argument("--env", help="environment for --random or --scripted, or for a file that names none")
    p.add_argument("--env-params", metavar="NAME=VALUE,...", type=comma_separated, default=(), help="play a variant of the env: its "
                   "parameters as training's --env-params takes them (e.g. HackMatrix undo_across_stages=0); "
                   "default: the env's own defaults, whatever the agent trained on")
    p.add_argument("--seed-index", type=int, default=None, help="which agent of a --num-seeds file (default: 0)")
    p.add_argument("--json", metavar="FILE", help="also write the metrics and per-episode results to FILE")
    p.add_argument("--curve", metavar="FILE", help="also append the metrics as one line of FILE (JSON lines, "
                   "with the agent's env_steps): evaluations of a run's kept params_<n>.npz in one file are a greedy "
                   "learning curve that plot_runs.py draws (one file per training seed)")
    return p


# The most episodes one evaluation holds (their per-episode results stay in memory and go to --json), and the
# most it plays in parallel when --batch-size is not given (the rest run in further calls of the same program).
MAX_EPISODES = 10_000_000
DEFAULT_BATCH = 4096


def check_output_path(flag: str, path: str) -> None:
    """Everything about an output file that can be checked before the evaluation (tools/outputs.py; --json is
    written through a temporary file beside it): EvalError naming `flag` and `path`."""
    problem = output_file_problem(flag, path, "eval.json" if flag == "--json" else "curve.jsonl",
                                  ".tmp" if flag == "--json" else None)
    if problem:
        raise EvalError(problem)


def seed_list(text: str) -> tuple[int, ...]:
    """--seeds: the training CLI's comma-separated whole numbers, at least one, none twice."""
    import argparse

    seeds = whole_numbers(text)
    if not seeds or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"{text!r}: at least one seed, none twice")
    return seeds


def over_seeds(results: list[tuple[dict, dict]]) -> tuple[dict, dict]:
    """One (metrics, raw) from one per evaluation seed: the metrics as a --num-seeds run's (sinks.combine_seeds:
    means, `<key>/std`, `<key>/iqm`, `per_seed`), the per-episode arrays stacked to [seeds, episodes]."""
    import jax
    import numpy as np

    from hephaestus.core.sinks import combine_seeds

    raws = [raw for _, raw in results]
    raw = jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *raws)
    return combine_seeds([metrics for metrics, _ in results]), raw


def spread_line(metrics: dict, prefix: str) -> str:
    """The mean return and length and every rate of `prefix`, each as its mean ± sample std over seeds (the
    episodes' own spread, min and max are per seed: each seed's lines)."""
    keys = [k for k in metrics if k.startswith(prefix) and "/" not in k[len(prefix):] and f"{k}/std" in metrics
            and (k.endswith(("_rate", "return_mean", "length_mean")) or ">=" in k)]
    return (f"{prefix.rstrip('/')}: " + ", ".join(f"{k[len(prefix):]} {metrics[k]:.3f} ± {metrics[k + '/std']:.3f}"
                                                  for k in keys))


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.episodes < 1 or args.max_steps < 1 or args.batch_size < 0:
            raise EvalError("--episodes and --max-steps must be at least 1, --batch-size at least 0")
        if args.seed is not None and args.seeds is not None:
            raise EvalError("give --seed or --seeds, not both")
        seeds = args.seeds or (0 if args.seed is None else args.seed,)
        if args.episodes > MAX_EPISODES:
            raise EvalError(f"--episodes {args.episodes:,}: more than {MAX_EPISODES:,} episodes' results do not fit in "
                            "memory (each episode's return, length and statistics are kept); evaluate fewer, or "
                            "several seeds with --seeds")
        for flag, out in (("--json", args.json), ("--curve", args.curve)):
            if out:  # before the games: a refused output after them would lose them
                check_output_path(flag, out)
        if args.curve and (args.random or args.scripted is not None):
            raise EvalError("--curve records an agent's point in training: give a parameter file, not --random "
                            "or --scripted")
        import jax

        from hephaestus.core.compilation_cache import enable_compilation_cache
        from hephaestus.envs.registry import EnvParamError, parse_env_params

        try:
            env_params = parse_env_params(args.env_params)
        except EnvParamError as err:
            raise EvalError(str(err)) from None
        cache_dir = enable_compilation_cache()
        if args.scripted is not None:
            if args.random or args.path or args.sampled:
                raise EvalError("--scripted plays without an agent: give --env, not a path, --random or --sampled")
            if not args.env:
                raise EvalError("--scripted needs --env")
            env, network, params, meta = load_env(args.env, **env_params), None, None, {}
            try:
                env.scripted_policy(args.scripted)  # before the "evaluating ..." line
            except ValueError as err:
                raise EvalError(f"--scripted {args.scripted}: {err}") from None
            source = f"scripted policy {args.scripted}"
        elif args.random and not args.path:
            if not args.env:
                raise EvalError("--random needs --env (or a parameter file naming the env)")
            env, network, params, meta, source = load_env(args.env, **env_params), None, None, {}, "random policy"
        elif not args.path:
            raise EvalError("give a parameter file or run directory (or --random --env ENV)")
        else:
            path = resolve_params_path(args.path)
            agent = load_agent(path, seed_index=args.seed_index, env_params=env_params, env=args.env)
            params, meta, env, network = agent.params, agent.meta, agent.env, agent.network
            index = args.seed_index or 0
            label = agent_label(meta, index)  # a sweep agent: its point and seed
            source = f"{path} (seed index {index}: {label})" if label else path
            if args.curve and meta.get("env_steps") is None:  # before the games, not after them
                raise EvalError(f"--curve {args.curve}: {path} does not say its env_steps (saved before they were "
                                "recorded?), so it has no place on a curve")
        if args.scripted is not None:
            policies = [args.scripted]
        elif args.random:
            policies = ["random"]
        else:
            policies = ["greedy"] + (["sampled"] if args.sampled else [])
        variant = f" with {','.join(args.env_params)}" if env_params else ""
        print(f"evaluating {source}: env {env.spec.name}{variant}, update {meta.get('update', '-')}, "
              f"{args.episodes} episodes x at most {args.max_steps} steps, {' and '.join(policies)} policy",
              flush=True)
        # The env and network come from the env's name and the file's network metadata alone: with those as the
        # key, a second evaluation of such an agent reads its stored program instead of tracing it again.
        evaluator = Evaluator(env, network, args.episodes, args.max_steps,
                              batch=args.batch_size or min(args.episodes, DEFAULT_BATCH),
                              policies=None if args.scripted else tuple(policies), cache_dir=cache_dir,
                              agent={"env": env.spec.name, "network": meta.get("network"),
                                     **({"env_params": env_params} if env_params else {})},
                              scripted=args.scripted)
        results = []
        for seed in seeds:
            t0 = time.perf_counter()
            results.append(evaluator(params, jax.random.PRNGKey(seed)))
            took = f"{time.perf_counter() - t0:.1f}s" + (" (compile included)" if len(results) == 1 else "")
            print(f"{f'seed {seed}: ' if len(seeds) > 1 else ''}{' and '.join(policies)}: {took}")
            for prefix in evaluator.prefixes:
                print("\n".join(summary_lines(results[-1][0], prefix)), flush=True)
        metrics, raw = results[0] if len(seeds) == 1 else over_seeds(results)
        if len(seeds) > 1:
            print(f"over {len(seeds)} seeds ({','.join(map(str, seeds))}; means, ± the sample std over seeds):")
            for prefix in evaluator.prefixes:
                print(spread_line(metrics, prefix), flush=True)
        info = {"source": source, "env": env.spec.name, "update": meta.get("update"),
                "env_steps": meta.get("env_steps"), "episodes": args.episodes, "max_steps": args.max_steps,
                "batch": evaluator.batch, "policies": policies,
                **({"seed": seeds[0]} if len(seeds) == 1 else {"seeds": list(seeds), "num_seeds": len(seeds)}),
                "env_params": env_params}
        if args.json:
            print(f"written {write_eval_json(args.json, metrics, raw, info)}")
        if args.curve:
            print(f"appended to {append_eval_curve(args.curve, metrics, info)}")
        return 0
    except (EvalError, LoadError) as err:
        print(f"evaluate.py: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # writing --json or --curve after the checks: a full disk
        print(f"evaluate.py: error: writing {err.filename or 'the output'} failed: {err.strerror or err}",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
        return 130
