"""Start-up watchdog: a run that makes no progress before its first update says so and exits, instead of hanging.

A deadlocked XLA thread pool (specs/pipeline.md, "Start-up") blocks the main thread inside C++ at ~0% CPU, where no Python code of
the main thread runs again; a slow compile, however long, keeps burning CPU. So a daemon thread samples the
process's own CPU time, and when it grew by less than `min_cpu_fraction` of the window over `timeout` seconds of a
watched phase (setup, first compile, first chunk), prints one line naming the phase, flushes, and `os._exit(1)`s,
so a run left in tmux shows a failure rather than silence. Phases that legitimately wait (restoring a checkpoint,
connecting to wandb, a first chunk running on an accelerator) are not watched. It stops after the first chunk.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Callable

EXIT_CODE = 1  # a fault, not bad input (README: exit codes)


class StartupWatchdog:
    def __init__(self, timeout: float, min_cpu_fraction: float = 0.02, *, clock: Callable[[], float] = time.monotonic,
                 cpu: Callable[[], float] = time.process_time):
        self.timeout = float(timeout)
        self.min_cpu = min_cpu_fraction * self.timeout
        self.poll = min(5.0, self.timeout / 10)
        self.clock, self.cpu = clock, cpu
        self.phase: str | None = None  # None: not watching (paused or stopped)
        self._samples: list[tuple[float, float]] = []  # (clock, cpu) since the watched phase began
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def enter(self, phase: str | None) -> None:
        """Watch `phase` from now on (None: watch nothing until the next enter); starts the thread on first use."""
        with self._lock:
            self.phase = phase
            self._samples = [(self.clock(), self.cpu())] if phase else []
        if phase and self._thread is None and self.timeout > 0:
            self._thread = threading.Thread(target=self._run, name="startup-watchdog", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop watching for good; returns once the thread has ended (it wakes at once)."""
        self.enter(None)
        self._stopped.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def check(self) -> str | None:
        """Take one sample; the one-line message if the watched phase made no CPU progress for `timeout` seconds."""
        with self._lock:
            if not self.phase:
                return None
            now, cpu = self.clock(), self.cpu()
            if self._samples and now - self._samples[-1][0] > 3 * max(self.poll, 1.0):
                # This thread did not run for a while: the process was stopped (Ctrl-Z) or the machine slept.
                # That time is not the run's fault; start the window again.
                self._samples = []
            self._samples.append((now, cpu))
            while len(self._samples) > 1 and now - self._samples[1][0] >= self.timeout:
                self._samples.pop(0)  # keep one sample at least `timeout` old
            start_time, start_cpu = self._samples[0]
            if now - start_time >= self.timeout and cpu - start_cpu < self.min_cpu:
                return (f"error: stuck in {self.phase} for {now - start_time:.0f} s with no CPU progress "
                        f"({cpu - start_cpu:.1f} s of CPU); probably a deadlock in XLA's CPU thread pool "
                        f"(specs/pipeline.md, start-up); start the run again, or set --startup-timeout "
                        f"(seconds, 0 = off)")
            return None

    def _run(self) -> None:
        while not self._stopped.wait(self.poll):
            message = self.check()
            if message:
                sys.stdout.flush()
                print(message, file=sys.stderr, flush=True)
                os._exit(EXIT_CODE)
