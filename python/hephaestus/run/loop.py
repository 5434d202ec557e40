"""The Python loop: the only place that prints, logs or saves.

It runs compiled chunks until `total_timesteps` is reached, times them, reduces each chunk's metrics to one
record and hands the record to every sink. `hooks` (checkpointing, signal handling) see the runner state after
each chunk and at the end; they never run inside the compiled program. A hook's `needs_state(update)` says
whether its `after_chunk` at that update reads the runner state; where none does, the next chunk is already
running when the hooks see the record (and `runner_state` is None).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import jax
import numpy as np

from hephaestus.core.sinks import HealthMonitor, chunk_reduce, seeds_reduce


class TrainingError(RuntimeError):
    """A run that cannot go on (fully masked actions where the env calls them a bug, non-finite loss); the
    message is one line."""


class SinkError(TrainingError):
    """A sink could not write (disk full): the loop ran its hooks (a training run's saves its checkpoint), then
    raised this. ``write_failure`` says which write failed and why; ``update`` is where the run stopped."""

    def __init__(self, write_failure: str, update: int):
        super().__init__(f"{write_failure}; the run stopped at update {update} and saved its state there "
                         f"(continue with --resume)")
        self.write_failure, self.update = write_failure, update


class Hook(Protocol):
    def needs_state(self, update: int) -> bool: ...  # a hook without it is given the state after every chunk
    def after_chunk(self, runner_state, record: dict) -> bool: ...  # return True to stop the loop
    def at_end(self, runner_state, record: dict | None) -> None: ...


def release_freed_memory() -> None:
    """Hand memory the compiler freed back to the OS (glibc keeps it otherwise: measured at 2048 x 128 on
    HackMatrix, 740 MiB of a 1.6 GiB process after compiling), so the run's own buffers do not stack on top of
    it and raise the peak. A no-op where there is no glibc."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def wait_ready(tree, longest_sleep: float = 0.002) -> None:
    """Block until every array in `tree` is computed, sleeping in short steps: a blocking C++ wait would
    delay Python signal handlers (checkpoint.StopSignals) until the chunk ends. The longest sleep is short: an
    overshoot is time the device may sit idle (a 50 ms cap cost CartPole 4 x 128, whose chunks last ~35 ms,
    a quarter of its throughput)."""
    leaves = [x for x in jax.tree.leaves(tree) if hasattr(x, "is_ready")]
    pause = 1e-4
    while not all(x.is_ready() for x in leaves):
        time.sleep(pause)
        pause = min(pause * 2, longest_sleep)


@dataclass
class LoopResult:
    runner_state: Any
    records: list = field(default_factory=list)
    compile_seconds: float = 0.0
    stopped_early: bool = False


def evaluate_now(evaluator, runner, seed: int, update: int, message, instance=None) -> dict:
    """Evaluation episodes with the runner's current parameters (their own program, outside the chunk and its
    timing), on the run's env instance (`Trainer.eval_instance`); metrics under eval/ and `eval_seconds`."""
    from hephaestus.core.evaluation import eval_key

    first = not evaluator.compiled
    t0 = time.perf_counter()
    metrics, _ = evaluator(runner.train_state.params, eval_key(seed, update, evaluator.num_seeds), instance)
    seconds = time.perf_counter() - t0
    if first:
        message(f"eval: first evaluation {seconds:.1f}s (compile included)")
    return {**metrics, "eval_seconds": seconds}


def stop_requested(hooks) -> bool:
    """Whether a hook was asked to stop the run (training_hooks.StopSignals after a signal)."""
    return any(getattr(h, "stop_requested", False) for h in hooks)


def video_sink(sinks, config):
    """The sink that takes evaluation videos (wandb's), where --eval-video is on; else None."""
    if not config.logging.eval_video:
        return None
    return next((s for s in sinks if hasattr(s, "log_video")), None)


def record_video(trainer, runner, sink, update: int, name: str) -> tuple[str | None, float]:
    """One greedy episode of the runner's parameters (seed 0's in a --num-seeds run) on the evaluation env, written
    beside the run (`<sink.video_dir>/<name>.mp4`): the frames watch_agent.py renders. Returns (path or None
    where the env draws no pictures, seconds it took)."""
    from hephaestus.core.playback import episode_video

    t0 = time.perf_counter()
    params, instance = runner.train_state.params, trainer.eval_instance(runner)
    if trainer.config.run.num_seeds > 1:
        params = jax.tree.map(lambda x: x[0], params)
        instance = None if instance is None else jax.tree.map(lambda x: x[0], instance)
    try:
        path, _, _ = episode_video(params, trainer.eval_env, trainer.network, os.path.join(sink.video_dir, name),
                                   seed=trainer.config.run.seed + update,
                                   max_steps=trainer.config.logging.eval_max_steps, instance=instance)
    except NotImplementedError:  # an env without an RGB picture
        path = None
    return path, time.perf_counter() - t0


def run(trainer, sinks=(), hooks=(), message: Callable[[str], None] = print, startup=None) -> LoopResult:
    """`startup`: a watchdog.StartupWatchdog, told when the first compile and the first chunk begin and stopped
    after the first chunk (the first chunk is watched on the CPU only: on an accelerator the host waits idle).

    Dispatch ahead: the next chunk is queued before this chunk's metrics are read, so the device never waits
    for the host's logging (on CartPole 4 x 128, a chunk of 10 updates lasts ~35 ms and the host's share was
    ~40% of the run). A chunk donates its runner state to the next, so where something must read the state
    between two chunks (an evaluation, a hook whose `needs_state` says so, the last chunk) the loop waits for the
    chunk, lets it read, and dispatches after. Hooks are then given the state; otherwise None."""
    config = trainer.config
    runner = trainer.runner_state
    steps_per_update = config.batch_size
    num_seeds = config.run.num_seeds
    done_updates = int(jax.device_get(runner.update_step))
    total_updates = config.num_updates
    health = HealthMonitor()
    result = LoopResult(runner_state=runner)
    start_updates = done_updates
    run_seconds = 0.0
    record = None
    failed_sink = None
    spec = trainer.env.spec
    masked_is_bug = bool(getattr(spec, "fully_masked_is_bug", False))
    warned_masked = False
    if done_updates >= total_updates:
        for hook in hooks:
            hook.at_end(runner, record)
        return result

    evaluator = None
    eval_every = config.logging.eval_every
    if eval_every:
        evaluator = trainer.evaluator(config.logging.eval_episodes, config.logging.eval_max_steps,
                                      config.logging.eval_sampled)

    if startup is not None:
        startup.enter("first compile")
    t0 = time.perf_counter()
    compiled = trainer.chunk_executable(runner, config.run.log_interval)  # compiled ahead where make_train was asked
    result.compile_seconds = time.perf_counter() - t0
    if startup is not None:
        startup.enter("first chunk" if jax.default_backend() == "cpu" else None)
    release_freed_memory()
    message(f"compile: {result.compile_seconds:.1f}s (chunk of {config.run.log_interval} updates)")
    # --debug-nans goes through the jitted function: jax re-runs a chunk that made a NaN op by op to name the
    # operation (FloatingPointError); the AOT-compiled executable only says that its output holds a NaN.
    executable = trainer.compiled_chunk if config.logging.debug_nans else compiled
    # --profile DIR: a profiler trace of the first chunk run (compile excluded); it runs alone.
    profile = config.logging.profile_dir

    def dispatch(state, first_update):
        n = min(config.run.log_interval, total_updates - first_update)
        state, metrics = executable(state, np.int32(n))  # returns at once: the chunk runs in the background
        return state, metrics, n

    if profile:
        jax.profiler.start_trace(profile)
    t_last = time.perf_counter()  # when the previous chunk finished (here: when the first was queued)
    queued = dispatch(runner, done_updates)
    stopping = False
    while queued is not None:
        runner, metrics, n = queued
        before, done_updates = done_updates, done_updates + n
        evaluating = evaluator is not None and done_updates // eval_every > before // eval_every
        # The next chunk goes first unless someone reads this chunk's state (donated to the next chunk).
        # A stop asked for (Ctrl-C) while this chunk ran: queue nothing more, so the run ends after it.
        state_needed = (done_updates >= total_updates or stopping or evaluating or bool(profile)
                        or stop_requested(hooks)
                        or any(getattr(h, "needs_state", lambda u: True)(done_updates) for h in hooks))
        queued = None if state_needed else dispatch(runner, done_updates)
        wait_ready(metrics)  # in Python, not inside device_get, so a SIGINT/SIGTERM handler runs at once
        if profile:
            jax.profiler.stop_trace()
            message(f"profile: trace of the first chunk in {profile} (TensorBoard's profile plugin or Perfetto)")
            profile = ""
        metrics = jax.tree.map(lambda x: x[:n], jax.device_get(metrics))
        if startup is not None:  # the run has started: nothing more to watch
            startup.stop()
            startup = None
        t_now = time.perf_counter()
        seconds, t_last = t_now - t_last, t_now  # with a chunk queued behind, chunk to chunk: the throughput
        run_seconds += seconds

        masked = float(np.sum(metrics["fully_masked_rows"]))
        if masked and masked_is_bug:
            raise TrainingError(f"the environment produced {masked:.0f} observations with no valid action "
                                f"(fully masked action mask) before update {done_updates}; {spec.name} "
                                f"declares that a bug")
        if masked and not warned_masked:
            warned_masked = True
            message(f"note: {masked:.0f} observations with no valid action (fully masked action mask) before "
                    f"update {done_updates}; every action is allowed there and the env ends the episode "
                    f"(counted in fully_masked_rows; said once)")
        # env_steps count one agent's experience (the x axis of its learning curve); steps_per_second is the
        # program's throughput, all seeds together.
        record = {"update": done_updates, "env_steps": done_updates * steps_per_update,
                  "total_env_steps": total_updates * steps_per_update, "wall_seconds": run_seconds,
                  "steps_per_second": n * steps_per_update * num_seeds / max(seconds, 1e-9)}
        avg_sps = (done_updates - start_updates) * steps_per_update / max(run_seconds, 1e-9)
        record["eta_seconds"] = (total_updates - done_updates) * steps_per_update / max(avg_sps, 1e-9)
        scores = spec.episode_scores
        record.update(chunk_reduce(metrics, scores) if num_seeds == 1 else seeds_reduce(metrics, scores))
        video = video_path = None
        if evaluating:
            evaluation = evaluate_now(evaluator, runner, config.run.seed, done_updates, message,
                                      trainer.eval_instance(runner))
            if "per_seed" in evaluation:  # a --num-seeds run: the eval/ keys join the chunk's per-seed lists
                record["per_seed"].update(evaluation.pop("per_seed"))
            record.update(evaluation)
            video = video_sink(sinks, config)
            if video is not None:  # outside the chunk's timing, like the evaluation
                video_path, record["video_seconds"] = record_video(trainer, runner, video, done_updates,
                                                                   f"eval_{done_updates}")
        result.records.append(record)
        for sink in list(sinks):
            try:
                sink.write(record)
            except OSError as err:  # disk full, folder gone: save what there is (hooks below), then stop
                sinks = [s for s in sinks if s is not sink]
                failed_sink = failed_sink or (f"writing {getattr(sink, 'path', type(sink).__name__)} failed "
                                              f"({err.strerror or err}) after update {done_updates}")
        if video_path and video in sinks:
            try:
                video.log_video(video_path, record["env_steps"])
            except Exception as err:  # noqa: BLE001 - a video must never cost the run
                message(f"wandb: could not log the evaluation video ({type(err).__name__}: {err})")
        for warning in health.check(record):
            message(warning)
        stop = failed_sink is not None
        for hook in hooks:
            stop = bool(hook.after_chunk(None if queued else runner, record)) or stop
        if stop and not stopping:  # a chunk already queued still runs and is logged; nothing after it
            stopping = True
            result.stopped_early = True
        if queued is None and done_updates < total_updates and not stopping and not stop_requested(hooks):
            t_last = time.perf_counter()
            queued = dispatch(runner, done_updates)

    for hook in hooks:
        hook.at_end(runner, record)
    result.runner_state = runner
    if failed_sink:
        # The chunk already queued when the write failed has run: its state (not the failed record's) is saved.
        raise SinkError(failed_sink, done_updates)
    return result
