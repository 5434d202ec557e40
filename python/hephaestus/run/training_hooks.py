"""Hooks for loop.run that guard a training run: stop cleanly on a signal, stop on a non-finite loss before
anything saves it, and save checkpoints periodically and at the end (checkpoint.Checkpointer does the I/O).

Each hook has `needs_state(update) -> bool` (whether its `after_chunk` at that update reads the runner state: the
loop queues the next chunk first where no hook does, and passes None), `after_chunk(runner_state, record) -> bool`
(True: stop the loop) and `at_end(runner_state, record)`.
"""

from __future__ import annotations

import math
import os
import signal
import time
from typing import Callable

import jax
import numpy as np

from hephaestus.run.checkpoint import Checkpointer, one_line, all_finite

# SIGHUP: the ssh session the run was started from closed (no tmux): stop and save like a preemption (not under
# nohup, which ignores SIGHUP so that the run goes on).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}  # 128 + signal number


class StopSignals:
    """First SIGINT/SIGTERM/SIGHUP: finish the chunk in flight, then the loop stops, saves and exits. A second
    SIGINT exits at once (exit code 130) without touching checkpoints: orbax's temporary directory of an unfinished
    save is ignored, the previous checkpoint stays valid."""

    def __init__(self, message: Callable[[str], None] = print):
        self.message = message
        self.signum: int | None = None
        self._announced = False
        self._previous = {}

    def install(self) -> "StopSignals":
        import threading

        if threading.current_thread() is not threading.main_thread():
            return self
        for sig in STOP_SIGNALS:
            if sig == signal.SIGHUP and signal.getsignal(sig) == signal.SIG_IGN:
                continue  # started under nohup: the user asked for the run to outlive the terminal
            self._previous[sig] = signal.getsignal(sig)
            signal.signal(sig, self._handle)
        return self

    def uninstall(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}

    def _handle(self, signum, frame):
        # Only os.write in here: print() from a signal handler can hit "reentrant call" on a buffered stream
        # that the main thread is writing to at that moment.
        if self.signum is not None:
            if signum == signal.SIGINT:
                _write_fd(2, "second Ctrl-C: exiting now without saving (the last checkpoint is intact)\n")
                os._exit(130)
            return
        self.signum = signum
        more = " (Ctrl-C again to quit at once)" if signum == signal.SIGINT else ""
        _write_fd(2, f"{signal.Signals(signum).name}: finishing the current chunk, then saving and exiting{more}\n")

    @property
    def stop_requested(self) -> bool:
        """A signal came: the loop queues no further chunk (loop.run asks before each dispatch). With several
        hosts, False: they stop together after the chunk `after_chunk` agrees on."""
        return self.signum is not None and jax.process_count() == 1

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.signum, 1) if self.signum is not None else 0

    def needs_state(self, update: int) -> bool:
        return False  # it stops the loop; the final save reads the state in at_end

    def after_chunk(self, runner_state, record) -> bool:
        if jax.process_count() > 1:  # every host must stop after the same chunk: the final save is collective
            from jax.experimental import multihost_utils

            signums = np.asarray(multihost_utils.process_allgather(np.int32(self.signum or 0)))
            if self.signum is None and signums.max() > 0:
                self.signum = int(signums.max())
        self._announce()
        return self.signum is not None

    def _announce(self) -> None:
        if self.signum is not None and not self._announced:
            self._announced = True
            self.message(f"{signal.Signals(self.signum).name} received: saving and exiting")

    def at_end(self, runner_state, record) -> None:
        # A signal that came after the last chunk's after_chunk (the loop then queued nothing more) is announced here.
        self._announce()


def _write_fd(fd: int, text: str) -> None:
    try:
        os.write(fd, text.encode())
    except OSError:
        pass


class NanGuard:
    """A non-finite loss or parameter stops the run before anything saves it (put it before the checkpoint
    hook): the last good checkpoint stays untouched. The metrics are checked after every chunk; the parameters
    wherever the loop hands over the state, which includes every chunk after which something is saved or
    evaluated (non-finite parameters in between show in the next chunk's losses and gradient norm)."""

    def needs_state(self, update: int) -> bool:
        return False

    METRICS = ("total_loss", "pg_loss", "vf_loss", "entropy", "approx_kl", "grad_norm")

    def after_chunk(self, runner_state, record) -> bool:
        from hephaestus.run.loop import TrainingError

        update = record.get("update")
        for key in self.METRICS + tuple(k for k in record if k not in self.METRICS):
            value = record.get(key)
            if isinstance(value, float) and not math.isfinite(value) and key != "eta_seconds":
                raise TrainingError(f"non-finite {key} ({value}) in the chunk ending at update {update}; "
                                    "stopped without saving this state")
        if runner_state is not None and not bool(all_finite(runner_state.train_state.params)):
            raise TrainingError(f"non-finite parameters after update {update}; stopped without saving this state")
        return False

    def at_end(self, runner_state, record) -> None:
        pass


class CheckpointHook:
    """Saves every `every_updates` updates if set, else every `every_minutes`; at the end (including a stop by
    signal); exports final_params.npz. Call `close()` when the loop is left for any reason."""

    def __init__(self, checkpointer: Checkpointer, every_updates: int = 0, every_minutes: float = 10.0,
                 message: Callable[[str], None] = print, on_saved: Callable[[str, int], None] | None = None,
                 final_export: bool = True, start_update: int = 0, stop: StopSignals | None = None):
        self.ckpt = checkpointer
        self.every_updates = every_updates
        self.every_minutes = every_minutes
        self.message = message
        self.on_saved = on_saved  # (step dir, update) once the save is complete, e.g. to upload an artifact
        self.final_export = final_export
        self.stop = stop  # the run's StopSignals: a save at the end after a signal is not called final
        self.last_update = start_update  # update of the last save (or where this run started)
        self.last_time = time.monotonic()
        self._pending = None  # (path, update) of an async save not yet reported to on_saved

    def _save(self, runner_state, record, final: str = ""):
        update = int(jax.device_get(runner_state.update_step))
        self._flush_pending()
        try:
            path = self.ckpt.save(runner_state, record)
        except (OSError, ValueError, RuntimeError) as err:  # disk full, permissions, an orbax write error
            self.ckpt.failed = True
            raise _save_failed(update, err, self.ckpt.run_dir) from None
        self.last_update, self.last_time = update, time.monotonic()
        if path:
            self._pending = (path, update)
            self.message(f"checkpoint: saving {path}" + (f" ({final})" if final else ""))
        return path

    def _flush_pending(self):
        """Wait for the save in flight (if any), then export its npz and report it; a failure names its update."""
        if self._pending is None:
            return
        path, update = self._pending
        self._pending = None
        try:
            self.ckpt.complete()
        except (OSError, ValueError, RuntimeError) as err:  # raised in orbax's thread, re-raised by the wait
            raise _save_failed(update, err, self.ckpt.run_dir) from None
        if self.on_saved and os.path.isdir(path):
            try:
                self.on_saved(path, update)
            except Exception as err:  # noqa: BLE001 - an artifact upload must never cost the run
                self.message(f"wandb: could not log checkpoint {update} as an artifact ({one_line(err)})")

    def needs_state(self, update: int) -> bool:
        """Whether a save is due after the chunk that ends at `update` (asked before the next chunk is queued)."""
        if self.every_updates:
            return update - self.last_update >= self.every_updates
        return time.monotonic() - self.last_time >= self.every_minutes * 60

    def after_chunk(self, runner_state, record) -> bool:
        if self._pending is not None and not self.ckpt.saving():  # finished (or failed) in the background
            self._flush_pending()
        # Due by the clock only when the loop asked (needs_state) and kept the state for it; else at a later chunk.
        if runner_state is not None and self.needs_state(record["update"]):
            self._save(runner_state, record)
        return False

    def at_end(self, runner_state, record) -> None:
        signum = self.stop.signum if self.stop is not None else None
        path = self._save(runner_state, record,
                          final=f"stopped by {signal.Signals(signum).name}" if signum is not None else "final")
        update = int(jax.device_get(runner_state.update_step))
        if self.final_export:
            self.ckpt.export(os.path.join(self.ckpt.run_dir, "final_params.npz"), runner_state, update)
        self._flush_pending()
        where = path or os.path.join(self.ckpt.run_dir, str(update))
        self.message(f"checkpoint: {where} (update {update}) complete; parameters in "
                     f"{os.path.join(self.ckpt.run_dir, 'final_params.npz')}")

    def close(self) -> None:
        if self.ckpt.failed:  # already reported as the run's error
            self.ckpt.close()
            return
        try:
            self._flush_pending()
            self.ckpt.close()
        except Exception as err:  # noqa: BLE001 - called from `finally`: report, never mask the first error
            self.message(f"checkpoint: the last save did not complete ({one_line(err)}); earlier ones are intact")


def _save_failed(update: int, err: BaseException, run_dir: str):
    from hephaestus.run.loop import TrainingError

    kept = "earlier checkpoints are intact" if os.path.isdir(run_dir) else f"the run folder {run_dir} is gone"
    return TrainingError(f"saving the checkpoint at update {update} failed ({one_line(err)}); {kept}")

