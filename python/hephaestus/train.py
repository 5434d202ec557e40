"""Entry point behind scripts/train_purejaxrl.py: parse, build, run the loop. Thin on purpose."""

from __future__ import annotations

import os
import sys
import time

from hephaestus.cli import build_parser, config_from_args, fail
from hephaestus.config import ConfigError, resolve


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    resume = None
    if args.resume:  # the checkpoint's config supplies every flag not given again
        from hephaestus.checkpoint import CheckpointError, args_for_resume, locate
        try:
            resume = locate(args.resume)
        except CheckpointError as err:
            fail(str(err))
        args = args_for_resume(build_parser, argv, resume)
    try:
        config, note = resolve(config_from_args(args))
    except ConfigError as err:
        fail(str(err))

    # Multi-host: jax.distributed.initialize() must come before anything touches a device.
    from hephaestus import distributed
    distributed.initialize(config.distributed)
    main_process = distributed.is_main_process()  # only process 0 prints, writes metrics and exports
    import builtins
    print = builtins.print if main_process else (lambda *a, **k: None)  # noqa: A001 (fail() still reports)

    # Imported after parsing so --help and flag errors answer instantly.
    from hephaestus.envs.registry import UnknownEnvError, make_env
    from hephaestus.loop import TrainingError, enable_compilation_cache, run
    from hephaestus.ppo import make_train
    from hephaestus.sinks import ConsoleSink, JsonlSink

    cache = enable_compilation_cache()
    try:
        env = make_env(config.env)
    except UnknownEnvError as err:
        fail(str(err))
    if note:
        print(note)
    run_dir = os.path.join(config.checkpoint_dir, config.run_name)
    print(f"run {config.run_name}: {config.env}, {config.num_envs} envs x {config.num_steps} steps, "
          f"{config.num_updates} updates, {config.num_minibatches} minibatches x {config.update_epochs} epochs, "
          f"compile cache {cache}")
    t_setup = time.perf_counter()
    try:
        trainer = make_train(config, env)
    except ValueError as err:
        fail(str(err))
    print(f"setup: {time.perf_counter() - t_setup:.1f}s (initial state and tracing)")
    from hephaestus.checkpoint import CheckpointError, prepare_run
    try:  # restores a --resume checkpoint into trainer.runner_state; refuses before writing anything
        session = prepare_run(config, trainer, run_dir, resume, main_process=main_process, message=print)
    except CheckpointError as err:
        fail(str(err))
    try:
        os.makedirs(run_dir, exist_ok=True)
        sinks = [ConsoleSink(), JsonlSink(os.path.join(run_dir, "metrics.jsonl"))] if main_process else []
    except OSError as err:
        session.close()
        fail(f"cannot write to {run_dir}: {err.strerror}")
    sinks += session.sinks
    t0 = time.perf_counter()
    try:
        print(distributed.describe(trainer.mesh, config.num_envs))
        result = run(trainer, sinks, hooks=session.hooks, message=print)
    except TrainingError as err:
        fail(str(err), code=1)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        session.close()  # waits for an async save in flight
        for sink in sinks:
            sink.close()
    if session.stop.signum is not None:
        print(session.stop_message(result))
        return session.stop.exit_code
    last = result.records[-1] if result.records else {}
    print(f"done: {last.get('env_steps', 0):,} env steps in {time.perf_counter() - t0:.1f}s "
          f"(compile {result.compile_seconds:.1f}s); final mean return {last.get('mean_episode_return', float('nan')):.2f}; "
          f"metrics in {os.path.join(run_dir, 'metrics.jsonl')}")
    return 0
