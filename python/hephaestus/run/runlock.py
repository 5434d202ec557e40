"""One training process per run folder: an advisory lock on `<run-dir>/.lock`.

`fcntl.flock` on an open file: the kernel releases it when the process ends, however it ends (SIGKILL, OOM,
power loss of a spot VM's process), so a dead run never leaves its folder stuck. The file holds the owner's pid,
host, start time and command line, so a refused second process can name the one that holds the folder. The
owner removes the file when it lets go; a new owner checks that the file it locked is still the one at the path
(a removal between its open and its lock would otherwise let two processes hold two different files).
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import sys
import time

LOCK_NAME = ".lock"


class RunLockedError(RuntimeError):
    """Another live process holds the run folder; the message is one line naming it."""


class RunLock:
    def __init__(self, run_dir: str):
        self.run_dir = os.path.abspath(run_dir)
        self.path = os.path.join(self.run_dir, LOCK_NAME)
        self.fd: int | None = None
        self._made_dirs: list[str] = []  # folders this lock created, deepest first
        self._dir_times = None  # (atime_ns, mtime_ns) of an existing run folder before the lock file appeared
        self._dir_mtime_locked = None  # its mtime right after the lock file appeared

    def acquire(self) -> "RunLock":
        """Take the lock or raise RunLockedError; OSError when the folder cannot be created or written."""
        missing, parent = [], self.run_dir
        while not os.path.isdir(parent) and parent != os.path.dirname(parent):
            missing.append(parent)
            parent = os.path.dirname(parent)
        if missing:
            self._made_dirs = missing
            try:
                os.makedirs(self.run_dir)
            except OSError:  # a full disk part of the way down: no empty folders left behind
                self._undo_dir()
                raise
        elif not os.path.lexists(self.path):
            st = os.stat(self.run_dir)
            self._dir_times = (st.st_atime_ns, st.st_mtime_ns)
        try:
            return self._lock()
        except OSError:  # a full disk, an unwritable folder: leave no folder that this call made
            self._undo_dir()
            raise

    def _lock(self) -> "RunLock":
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                holder = _read(fd)
                os.close(fd)
                if err.errno in (errno.EWOULDBLOCK, errno.EACCES, errno.EAGAIN):
                    self._undo_dir()
                    raise RunLockedError(f"{self.run_dir} is in use by another training process "
                                         f"({holder or 'owner unknown'}); wait for it to end or stop it "
                                         "first") from None
                raise
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)  # the owner before us removed the file between our open and our lock: take the new one
        try:
            os.ftruncate(fd, 0)
            write_owner(fd)
        except OSError:  # (a full disk): the lock file goes while it is still ours, then the flock
            try:
                os.unlink(self.path)
            except OSError:
                pass
            os.close(fd)
            raise
        self.fd = fd
        if self._dir_times is not None:
            self._dir_mtime_locked = os.stat(self.run_dir).st_mtime_ns
        return self

    def release(self) -> None:
        """Remove the lock file (and the run folder, if this lock created it and nothing else was written)."""
        if self.fd is None:
            return
        try:
            untouched = self._dir_times is not None and os.stat(self.run_dir).st_mtime_ns == self._dir_mtime_locked
            os.unlink(self.path)
            if untouched:  # a run refused before writing anything leaves the folder exactly as it found it
                os.utime(self.run_dir, ns=self._dir_times)
        except OSError:
            pass
        os.close(self.fd)  # closing drops the flock
        self.fd = None
        self._undo_dir()

    def _undo_dir(self) -> None:
        for directory in self._made_dirs:
            try:
                os.rmdir(directory)  # only if empty
            except FileNotFoundError:  # never made (makedirs failed above it)
                continue
            except OSError:
                break
        self._made_dirs = []

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()


def write_owner(fd: int) -> None:
    """The lock file's text: who holds the folder (what a refused second process prints)."""
    os.write(fd, (f"pid {os.getpid()} on {socket.gethostname()}, started "
                  f"{time.strftime('%Y-%m-%d %H:%M:%S')}: {' '.join(sys.argv)[:300]}\n").encode())


def _read(fd: int) -> str:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        return os.read(fd, 1000).decode("utf-8", "replace").strip()
    except OSError:
        return ""
