"""The persistent compilation cache: where it lives and how a run turns it on (every entry point does, so a
program compiled once, e.g. the HackMatrix step in a chunk, is read back instead of compiled again)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import jax


def default_cache_dir() -> str:
    """`JAX_COMPILATION_CACHE_DIR` if set, else `.jax_cache/` in the project checkout (git-ignored)."""
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return os.environ["JAX_COMPILATION_CACHE_DIR"]
    root = Path(__file__).resolve().parents[3]
    if (root / "pyproject.toml").exists():
        return str(root / ".jax_cache")
    return str(Path.home() / ".cache" / "hephaestus" / "jax")


def enable_compilation_cache(path: str | None = None, message: Callable[[str], None] | None = None) -> str | None:
    """Turn on the persistent compilation cache in `path`. A directory that cannot be created or written (a
    read-only checkout, a bad JAX_COMPILATION_CACHE_DIR) is one warning, and the run goes on without the cache:
    returns None then."""
    path = path or default_cache_dir()
    try:
        os.makedirs(path, exist_ok=True)
        import tempfile

        with tempfile.NamedTemporaryFile(dir=path, prefix=".probe-"):
            pass
    except OSError as err:
        import sys

        (message or (lambda text: print(text, file=sys.stderr)))(
            f"warning: compilation cache {path} is not usable ({err.strerror or err}); compiling without it")
        return None
    jax.config.update("jax_compilation_cache_dir", path)
    # Cache every program that took noticeable time, including the small CPU ones.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return path
