"""Entry point behind scripts/train_purejaxrl.py: parse, build, run the loop. Thin on purpose.

Exit codes: 0 done, 2 bad input (flags, checkpoint, a run folder in use), 1 a fault (save or metrics write failed,
out of memory, non-finite loss), 130/143/129 stopped by SIGINT/SIGTERM/SIGHUP after saving."""

from __future__ import annotations

import errno
import os
import re
import sys
import threading
import time

from hephaestus.run.cli import fail, parse
from hephaestus.config.train_config import resolve, update_summary


def main(argv=None) -> int:
    try:  # --resume: the checkpoint's stored config, with the options given again on top
        config, resume = parse(argv)
    except ValueError as err:  # ConfigError, CheckpointError: one line
        fail(str(err))
    return run_config(config, resume)


def run_config(config, resume=None, outcome: dict | None = None) -> int:
    """Train `config` (unresolved; `resume`: a located checkpoint or None): the command's whole run after its
    flags are parsed, and the one code path of `hephaestus.run.train` too. `outcome`, if given, receives the run's
    `run_dir` and resolved `config` once it has finished. A one-line error exits (SystemExit) as the command
    does."""
    try:
        config, note = resolve(config)  # what depends on the env (encoder, obs storage) settles in make_train
    except ValueError as err:  # ConfigError: one line
        fail(str(err))

    # Multi-host: jax.distributed.initialize() must come before anything touches a device.
    from hephaestus.core import distributed
    try:
        distributed.initialize(config.run.distributed)
        main_process = distributed.is_main_process()  # only process 0 prints, writes metrics and exports
    except (RuntimeError, AssertionError) as err:  # JAX_PLATFORMS=cuda on a machine without one: a bare assert
        platforms = os.environ.get("JAX_PLATFORMS", "")
        why = str(err).strip().splitlines()[0][:200] if str(err).strip() else "no backend initialised"
        fail(f"jax cannot use the requested platform{f' (JAX_PLATFORMS={platforms})' if platforms else ''}: "
             f"{why}; unset JAX_PLATFORMS or install jax for that platform (README, Installing for TPU or GPU)")
    run_dir = os.path.join(config.run.checkpoint_dir, config.run.run_name)
    from hephaestus.run.runlock import RunLock, RunLockedError
    lock = RunLock(run_dir)
    if main_process:  # one training process per run folder (processes of one multi-host run share it)
        try:
            lock.acquire()
        except RunLockedError as err:
            fail(str(err))
        except OSError as err:  # a full disk is a fault (1); a folder the user cannot write to, bad input (2)
            fail(f"cannot write to {run_dir}: {err.strerror or err}",
                 code=1 if err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO) else 2)
    from hephaestus.run.watchdog import StartupWatchdog
    # From here until the first chunk has run, a phase with no CPU progress for --startup-timeout seconds ends
    # the run with one line (watchdog.py). Stopped however _train leaves (a one-line error in setup included):
    # called in-process (a notebook, the tests), a watchdog left running would end the caller's process later.
    watchdog = StartupWatchdog(config.run.startup_timeout)
    try:
        return _train(config, note, resume, run_dir, main_process, watchdog, outcome)
    finally:
        watchdog.stop()
        lock.release()
        if not _END_AT_ONCE:  # in-process (the tests, a notebook): no chunk compile left running behind the caller
            from hephaestus.core.trainer import compiles_in_flight
            for thread in compiles_in_flight():
                thread.join()


# Set by script_main: the process ends right after main, so a chunk compile still running (a refused checkpoint,
# Ctrl-C during start-up) is not waited for; script_main ends the process with os._exit instead.
_END_AT_ONCE = False


def _train(config, note, resume, run_dir, main_process, watchdog, outcome=None) -> int:
    import builtins

    from hephaestus.core import distributed
    print = builtins.print if main_process else (lambda *a, **k: None)  # noqa: A001 (fail() still reports)

    # Imported after parsing so --help and flag errors answer instantly.
    from hephaestus.envs.registry import UnknownEnvError, make_training_env
    from hephaestus.core.compilation_cache import enable_compilation_cache
    from hephaestus.run.loop import TrainingError, run
    from hephaestus.core.ppo import make_train
    from hephaestus.envs import episode_stats
    from hephaestus.core.evaluation import final_evaluation
    from hephaestus.core.sinks import ConsoleSink, JsonlSink

    from hephaestus.run.checkpoint import CheckpointError
    from hephaestus.run.run_setup import check_run_dir, prepare_run

    try:  # the run folder's refusals first: they need nothing built
        check_run_dir(run_dir, resume)
    except CheckpointError as err:
        fail(str(err))
    cache = enable_compilation_cache() or "off"
    watchdog.enter("setup")
    try:
        env = make_training_env(config.env)
    except UnknownEnvError as err:
        fail(str(err))
    if note:
        print(note)
    print(f"run {config.run.run_name}: {config.env.name}, {config.env.num_envs} envs x {config.env.num_steps} steps, "
          f"{config.num_updates} updates, {update_summary(config)}, compile cache {cache}")
    will_run = config.num_updates * config.batch_size
    if will_run != config.env.total_timesteps:  # whole updates only: say what runs instead of the number asked
        print(f"total timesteps: asked {config.env.total_timesteps:,}, will run {will_run:,} ({config.num_updates} "
              f"updates of {config.env.num_envs:,} envs x {config.env.num_steps} steps, rounded up to whole updates)")
    if config.env.env_params:  # a reward other than the game's, say so: evaluations play the game's
        print(f"training env params: {','.join(config.env.env_params)} (evaluations play the env's defaults)")
    t_setup = time.perf_counter()
    try:
        # The chunk compiles while the fresh state is built. Not with --debug-nans, whose chunks run through the
        # jitted function (loop.py) traced with jax's NaN checks on; not on --resume, where the checkpoint may yet
        # be refused (a compile running then would have to be waited for, or abandoned inside XLA).
        # With the compilation cache on, the chunk and the fresh-agent program are exported beside it and a later
        # start reads them back instead of tracing them (stored_programs.py); --debug-nans traces the chunk anyway.
        trainer = make_train(config, env, compile_ahead=not config.logging.debug_nans and resume is None,
                             store_programs_in=None if cache == "off" or config.logging.debug_nans else cache)
    except ValueError as err:
        fail(str(err))
    except RuntimeError as err:
        _fail_if_out_of_memory(err, config, "setting up the initial state")
        raise
    print(f"setup: {time.perf_counter() - t_setup:.1f}s (initial state and tracing)")
    config = trainer.config  # resolved for the env: encoder and observation storage settled
    watchdog.enter(None)  # restoring a checkpoint and connecting to wandb may wait on a disk or the network
    try:  # restores a --resume checkpoint into trainer.runner_state; refuses before writing anything
        session = prepare_run(config, trainer, run_dir, resume, main_process=main_process, message=print)
    except CheckpointError as err:
        fail(str(err))
    except RuntimeError as err:
        _fail_if_out_of_memory(err, config, "restoring the checkpoint")
        raise
    try:
        os.makedirs(run_dir, exist_ok=True)
        headline = episode_stats.headline_keys(env.spec.episode_stats) + [s.name for s in env.spec.episode_scores]
        sinks = [ConsoleSink(headline=headline), JsonlSink(os.path.join(run_dir, "metrics.jsonl"))] \
            if main_process else []
    except OSError as err:
        session.close()
        fail(f"cannot write to {run_dir}: {err.strerror}",
             code=1 if err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO) else 2)
    sinks += session.sinks
    t0 = time.perf_counter()
    import jax

    debug_nans = jax.config.jax_debug_nans
    finished = False  # the loop returned: the sinks stay open for the final evaluation's summary and video
    try:
        print(distributed.describe(trainer.mesh, config.env.num_envs))
        if config.logging.debug_nans:
            jax.config.update("jax_debug_nans", True)  # restored below: main() may run in a caller's process
        result = run(trainer, sinks, hooks=session.hooks, message=print, startup=watchdog)
        finished = True
    except TrainingError as err:
        fail(str(err), code=1)
    except FloatingPointError as err:  # --debug-nans found the first operation that made a NaN
        first = str(err).strip().splitlines()[0] if str(err).strip() else "a NaN"
        fail(f"--debug-nans: {first} (the run stopped there; its last checkpoint is intact)", code=1)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except RuntimeError as err:
        _fail_if_out_of_memory(err, config, "compiling or running a chunk")
        raise
    finally:
        jax.config.update("jax_debug_nans", debug_nans)
        session.close()  # waits for an async save in flight
        if not finished:
            close_sinks(sinks)
    try:
        if session.stop.signum is not None:
            print(session.stop_message(result))
            return session.stop.exit_code
        if main_process:  # the end of a run (not a stop by signal): K episodes with the final parameters -> eval.json
            final = final_evaluation(trainer, result.runner_state, run_dir, message=print)
            finish_wandb(trainer, result, sinks, final, run_dir, print)
        if outcome is not None:
            outcome.update(run_dir=os.path.abspath(run_dir), config=config, records=result.records)
    finally:
        close_sinks(sinks)
    last = result.records[-1] if result.records else {}
    print(f"done: {last.get('env_steps', 0):,} env steps in {time.perf_counter() - t0:.1f}s "
          f"(compile {result.compile_seconds:.1f}s); final mean return {last.get('mean_episode_return', float('nan')):.2f}; "
          f"metrics in {os.path.join(run_dir, 'metrics.jsonl')}")
    return 0


def close_sinks(sinks) -> None:
    for sink in sinks:
        try:
            sink.close()
        except OSError:  # the sink's own write error (disk full) was already reported
            pass


def finish_wandb(trainer, result, sinks, final: dict | None, run_dir: str, message) -> None:
    """The end of a run's wandb run: the final evaluation in its summary, a video of one greedy episode of the
    final parameters (--eval-video), the final parameters as an artifact. A failure is one line, never the run's."""
    from hephaestus.run.checkpoint import one_line
    from hephaestus.run.loop import record_video, video_sink

    wandb_sink = next((s for s in sinks if hasattr(s, "summarize")), None)
    if wandb_sink is None:
        return
    config = trainer.config
    update = int(result.runner_state.update_step) if result.runner_state is not None else 0
    try:
        if final:
            wandb_sink.summarize(final)
        video = video_sink(sinks, config) if final else None  # with the final evaluation (not when it is off)
        if video is not None:
            path, seconds = record_video(trainer, result.runner_state, video, update, "final")
            if path:
                video.log_video(path, update * config.batch_size, key="final_eval/video")
                message(f"wandb: final evaluation video {path} ({seconds:.1f}s)")
        wandb_sink.log_final_params(os.path.join(run_dir, "final_params.npz"), update)
    except Exception as err:  # noqa: BLE001 - logging must never cost the run
        message(f"wandb: could not log the end of the run ({one_line(err)})")


def _fail_if_out_of_memory(err: RuntimeError, config, doing: str) -> None:
    """XLA's RESOURCE_EXHAUSTED as one line saying what it needed; any other error is left to the caller."""
    text = str(err)
    if "RESOURCE_EXHAUSTED" not in text and "Out of memory" not in text:
        return
    needed = re.search(r"allocat\w* (\d+) bytes", text)
    size = f"{int(needed.group(1)) / 2**30:,.1f} GiB" if needed else "more memory than the device has"
    fail(f"out of memory {doing}: XLA needed {size} for {config.env.num_envs:,} envs x {config.env.num_steps} steps "
         f"(batch {config.batch_size:,}, network width {config.network.hidden_dim}); lower --num-envs or --num-steps",
         code=1)


class OutputThatOutlivesItsTerminal:
    """sys.stdout/sys.stderr of the script. When the terminal they print to goes away (ssh closed: EIO) or the
    pipe's reader does (EPIPE), the output is dropped from then on and the run goes on, so it can still save on
    the SIGHUP that follows, instead of dying at its next print."""

    def __init__(self, stream):
        self._stream = stream

    def _lose(self) -> None:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())  # the buffered text of the old stream goes nowhere at exit
            os.close(devnull)
        except (OSError, ValueError):
            pass
        self._stream = open(os.devnull, "w")

    def write(self, text):
        try:
            return self._stream.write(text)
        except OSError as err:
            if err.errno not in (errno.EIO, errno.EPIPE):
                raise
            self._lose()
            return len(text)

    def flush(self):
        try:
            self._stream.flush()
        except OSError as err:
            if err.errno not in (errno.EIO, errno.EPIPE):
                raise
            self._lose()

    def __getattr__(self, name):
        return getattr(self._stream, name)


def script_main(argv=None) -> int:
    """scripts/train_purejaxrl.py: `main`, then exit. After a failed save orbax's background threads can wait on
    each other for 300 s; nothing of this run needs them (the failure is reported, earlier checkpoints are
    complete), so the process then ends at once instead of joining them at interpreter exit."""
    global _END_AT_ONCE
    sys.stdout, sys.stderr = OutputThatOutlivesItsTerminal(sys.stdout), OutputThatOutlivesItsTerminal(sys.stderr)
    _END_AT_ONCE = True
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    stray = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if "hephaestus.core.trainer" in sys.modules:  # (not imported by --help or a flag error)
        stray += sys.modules["hephaestus.core.trainer"].compiles_in_flight()
    if stray:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
    return code
