"""Run wiring for train.py: before the loop, restore a --resume checkpoint, settle metrics.jsonl (trim what a
resumed run redoes, set aside a killed run's file), start the wandb/TensorBoard sinks, and build the hooks
(training_hooks.py); after it, say how a stopped run continues."""

from __future__ import annotations

import json
import os
import signal
from dataclasses import dataclass
from typing import Callable

import jax

from hephaestus.run.checkpoint import Checkpoint, CheckpointError, Checkpointer, one_line, _step_dirs, restore
from hephaestus.run.training_hooks import CheckpointHook, NanGuard, StopSignals


def trim_metrics(path: str, update: int) -> tuple[int, int]:
    """Drop records past `update` (a resumed run redoes those updates), and a last line cut short by a kill
    mid-write (so the next record is not glued onto it). Returns (last logged update before trimming, number of
    records dropped). Lines that are not records (not UTF-8, not JSON) are kept byte for byte. Atomic: temp file
    + rename. Raises CheckpointError (one line) when the file cannot be read or rewritten."""
    if not os.path.lexists(path):
        return 0, 0
    try:
        with open(path, "rb") as f:
            lines = f.readlines()
    except OSError as err:
        raise CheckpointError(f"cannot read {path}: {err.strerror or err}; move it away to resume") from None
    keep, dropped, last = [], 0, 0
    cut_short = bool(lines) and not lines[-1].endswith(b"\n")
    for i, line in enumerate(lines):
        try:
            u = int(json.loads(line.decode("utf-8")).get("update", 0))
        except (ValueError, AttributeError, TypeError):
            if not (cut_short and i == len(lines) - 1):
                keep.append(line)
            continue
        last = max(last, u)
        if u > update:
            dropped += 1
        else:
            keep.append(line if line.endswith(b"\n") else line + b"\n")
    if dropped or cut_short:
        tmp = path + ".tmp"
        try:
            with open(tmp, "wb") as f:
                f.writelines(keep)
            os.replace(tmp, path)
        except OSError as err:
            raise CheckpointError(f"cannot rewrite {path}: {err.strerror or err}") from None
    return last, dropped


def set_aside_metrics(run_dir: str) -> str | None:
    """A run starting a run folder that has no checkpoint but a metrics.jsonl (left by a run killed before its
    first save) moves that file to metrics.<n>.jsonl instead of appending to it. Returns the new name, if any."""
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.lexists(path):
        return None
    if os.path.isdir(path):
        raise CheckpointError(f"{path} is a directory, not a metrics file; move it away")
    n = 1
    while os.path.lexists(os.path.join(run_dir, f"metrics.{n}.jsonl")):
        n += 1
    target = os.path.join(run_dir, f"metrics.{n}.jsonl")
    try:
        os.replace(path, target)
    except OSError as err:
        raise CheckpointError(f"cannot move the old {path} aside: {err.strerror or err}") from None
    return target


@dataclass
class RunSession:
    hooks: list
    sinks: list
    stop: StopSignals
    checkpoint_hook: CheckpointHook | None
    run_dir: str
    resumed_from: Checkpoint | None = None

    def close(self) -> None:
        self.stop.uninstall()
        if self.checkpoint_hook is not None:
            self.checkpoint_hook.close()

    def stop_message(self, result) -> str:
        update = int(jax.device_get(result.runner_state.update_step))
        name = signal.Signals(self.stop.signum).name
        return (f"stopped by {name} after update {update}; checkpoint in {os.path.join(self.run_dir, str(update))}; "
                f"continue with --resume {self.run_dir}")


def check_run_dir(run_dir: str, resume: Checkpoint | None = None):
    """The refusals that need only the run folder and the --resume checkpoint's place: a fresh run over existing
    checkpoints, a branch into a folder that has some, a resume from an update older than its folder's latest.
    train.py asks before it builds or traces anything (a HackMatrix setup takes seconds); prepare_run asks again.
    Raises CheckpointError (one line)."""
    run_dir = os.path.abspath(run_dir)
    existing = _step_dirs(run_dir)
    if resume is None:
        if existing:
            raise CheckpointError(f"{run_dir} already has checkpoints (latest update {existing[-1]}); continue it "
                                  f"with --resume {run_dir}, or pick another --run-name")
        return
    same_dir = os.path.abspath(resume.run_dir) == run_dir
    if same_dir and existing and resume.step < existing[-1]:
        raise CheckpointError(f"{resume.path}: update {resume.step} is older than this run's latest checkpoint "
                              f"({existing[-1]}); pass --run-name NEW to branch from it without touching {run_dir}")
    if not same_dir and existing:
        raise CheckpointError(f"{run_dir} already has checkpoints (latest update {existing[-1]}); choose another "
                              "--run-name to branch into")


def prepare_run(config, trainer, run_dir: str, resume: Checkpoint | None = None, main_process: bool = True,
                message: Callable[[str], None] = print) -> RunSession:
    """Restore (if resuming) into `trainer.runner_state`, and build the checkpoint/NaN/signal hooks and the
    wandb/TensorBoard sinks. Raises CheckpointError (one line) before anything is written on disk."""
    run_dir = os.path.abspath(run_dir)
    check_run_dir(run_dir, resume)
    if resume is not None:
        restored = restore(resume, trainer, keep_optimizer=config.run.keep_optimizer)
        trainer.runner_state = restored.runner_state
        for note in restored.notes:
            message(note)
    start = int(jax.device_get(trainer.runner_state.update_step))
    if start >= config.num_updates:
        raise CheckpointError(f"the checkpoint is at update {start}, and this run has {config.num_updates} updates: "
                              "nothing left to do (raise --total-timesteps to train longer)")

    last_logged = 0
    if main_process:
        metrics = os.path.join(run_dir, "metrics.jsonl")
        dropped = 0
        if resume is not None and os.path.abspath(resume.run_dir) == run_dir:
            last_logged, dropped = trim_metrics(metrics, start)
        else:  # a new run folder, or one left by a run killed before its first checkpoint
            moved = set_aside_metrics(run_dir)
            if moved:
                message(f"metrics: {metrics} belonged to an earlier run that saved no checkpoint; moved to {moved}")
        if resume is not None:
            message(f"resume: update {start} of {config.num_updates} from {resume.path}"
                    + (f" (dropped {dropped} metrics.jsonl records past it; they are recomputed)" if dropped else ""))

    from hephaestus.core.sinks import TensorBoardSink, WandbSink, wandb_mode

    sinks = []
    wandb_sink = None
    if main_process:
        mode = wandb_mode(config)
        if mode is not None:
            try:
                wandb_sink = WandbSink(config, run_dir, mode=mode, skip_until=last_logged, message=message,
                                       artifacts=config.logging.wandb_artifacts)
                sinks.append(wandb_sink)
            except Exception as err:  # noqa: BLE001 - logging must never cost the run
                message(f"wandb: could not start ({one_line(err)}); continuing without wandb")
        if config.logging.tensorboard_dir:
            try:
                sinks.append(TensorBoardSink(config.logging.tensorboard_dir, purge_step=start * config.batch_size + 1 if resume else None))
            except (OSError, ImportError) as err:
                for sink in sinks:
                    sink.close()
                why = "tensorboardX is not installed (pip install tensorboardX)" if isinstance(err, ImportError) \
                    else f"cannot write TensorBoard files to {config.logging.tensorboard_dir}: {err.strerror or err}"
                raise CheckpointError(why) from None

    try:
        checkpointer = Checkpointer(run_dir, trainer, keep=config.run.keep_checkpoints, export_params=main_process,
                                    message=message)
    except OSError as err:
        for sink in sinks:
            sink.close()
        raise CheckpointError(f"cannot write checkpoints to {run_dir}: {err.strerror or err}") from None
    stop = StopSignals(message=message).install()
    hook = CheckpointHook(checkpointer, every_updates=config.run.save_interval,
                          every_minutes=config.run.save_interval_minutes, message=message,
                          on_saved=wandb_sink.log_checkpoint if wandb_sink is not None else None,
                          final_export=main_process, start_update=start, stop=stop)
    return RunSession(hooks=[stop, NanGuard(), hook], sinks=sinks, stop=stop, checkpoint_hook=hook,
                      run_dir=run_dir, resumed_from=resume)

