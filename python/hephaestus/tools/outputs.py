"""Output files checked before the work (watch_agent.py --save, evaluate.py --json/--curve, plot_runs.py --out), so
a bad path is one line at the start, never a failure after minutes of playing or drawing."""

from __future__ import annotations

import os


def output_file_problem(flag: str, path: str, example: str, temporary_suffix: str | None = None) -> str | None:
    """The one-line problem with writing `path` (given as `flag`), or None: its folder exists, it is not a folder,
    a file can be written there (and the temporary file `path + temporary_suffix` beside it, for a file written
    through one and renamed). `example`: a file name to suggest where a folder was given. Leaves nothing behind."""
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        return f"{flag} {path}: is a directory; give a file name such as {os.path.join(path, example)}"
    if not os.path.isdir(directory):
        return f"{flag} {path}: directory {directory} does not exist"
    existed = os.path.lexists(path)
    try:
        with open(path, "ab"):
            pass
        if temporary_suffix:
            probe = path + temporary_suffix
            with open(probe, "ab"):
                pass
            os.remove(probe)
    except OSError as err:
        return f"{flag} {path}: cannot write there ({err.strerror or err})"
    finally:
        if not existed and os.path.lexists(path):
            try:
                os.remove(path)
            except OSError:
                pass
    return None
