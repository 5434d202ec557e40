"""Stored programs: a warm start that does not trace the chunk again.

With the compilation cache warm, XLA's work is read back from disk, but every start still traced the whole chunk in
Python first (the env step inside the rollout, the update, every stage) only to find the cache key: about 2 s of a
HackMatrix start on a 2-core CPU (specs/speed.md). jax.export serialises the lowered chunk (StableHLO, ~0.3 MB for
HackMatrix); a later start with the same config and the same code deserialises it (~10 ms), wraps it in a jit
(lowering in ~0.2 s) and compiles that, which the compilation cache answers.

The key of a stored chunk is everything that shapes its program: the resolved config less the fields that only say
where and how a run is kept and logged (RUN_ONLY), the source of this package, the versions of jax and of the env
libraries, the backend, its devices and XLA_FLAGS. Anything else different is a miss: the chunk is traced and
stored again. Each run's chunk is exported once (the cold start pays ~0 extra: exporting is the tracing and
lowering `.lower()` did anyway) and then always called through its export, so the cold and the warm start compile
the same program and share one compilation-cache entry.

Only the chunk: the fresh state's program returns flax TrainStates whose tree carries the optimizer's functions,
which no file can hold, so that one is still traced (specs/speed.md says what that costs).

A stored file that cannot be read or written is a miss and nothing else: this is a cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import sys
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

FORMAT = "hephaestus-stored-chunk-v1"
KEEP = 64  # stored chunks kept per cache directory, newest first (~0.1-0.5 MB each)

# Config fields that never reach the chunk's program: names, places, schedules of saving and logging; the seed
# (an input of the fresh state's program); and --total-timesteps, which reaches it only as data (the anneal horizon
# in RunnerState.hyper) and through --log-interval, itself in the key. (The PPO hyperparameters that are data,
# config.DATA_HYPERPARAMETERS, stay in the key: --scale-rewards bakes gamma into the program.) A run differing in
# anything else is a miss.
RUN_ONLY = ("seed", "run_name", "checkpoint_dir", "resume", "keep_checkpoints", "save_interval_minutes",
            "save_interval", "keep_optimizer", "startup_timeout", "wandb", "wandb_project", "wandb_entity",
            "wandb_artifacts", "tensorboard_dir", "profile_dir", "final_eval_episodes", "total_timesteps")
# Libraries whose code can end up inside the chunk (the envs' step functions, the network, the optimizer).
LIBRARIES = ("jax", "jaxlib", "flax", "optax", "gymnax", "jumanji", "craftax", "chex")


def _package_digest() -> str:
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _versions() -> dict:
    from importlib import metadata

    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def key_material(config) -> dict:
    """What the stored chunk of a run with `config` (resolved) depends on, as JSON-able data."""
    return {
        "format": FORMAT,
        "config": {name: value for name, value in config.to_dict().items() if name not in RUN_ONLY},
        "code": _package_digest(),
        "python": sys.version_info[:2],
        "versions": _versions(),
        "backend": jax.default_backend(),
        "devices": [d.device_kind for d in jax.devices()],
        "processes": jax.process_count(),
        "x64": bool(jax.config.jax_enable_x64),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
    }


def _leaf_specs(runner) -> list:
    """The runner's leaves as ShapeDtypeStructs, with their shardings where they have them."""
    return [jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=getattr(x, "sharding", None))
            for x in jax.tree.leaves(runner)]


class StoredChunk:
    """A run's chunk through its export: `compile(runner, num_updates)` gives the callable loop.run dispatches,
    (runner_state, num_updates) -> (runner_state, metrics), as `jit(chunk).lower(...).compile()` does."""

    def __init__(self, exported, metrics_tree):
        self.exported = exported
        self.metrics_tree = metrics_tree
        self._jitted = jax.jit(lambda leaves, n: exported.call(leaves, n), donate_argnums=0)

    def fits(self, runner) -> bool:
        """Whether `runner` (arrays or ShapeDtypeStructs) has the leaves the stored program takes."""
        leaves = jax.tree.leaves(runner)
        avals = self.exported.in_avals[:-1]
        return len(leaves) == len(avals) and all(
            tuple(x.shape) == tuple(a.shape) and jnp.dtype(x.dtype) == a.dtype for x, a in zip(leaves, avals))

    def compile(self, runner, num_updates: int):
        runner_tree = jax.tree.structure(runner)
        leaves = _leaf_specs(runner)
        compiled = self._jitted.lower(leaves, np.int32(num_updates)).compile()
        metrics_tree = self.metrics_tree

        def run_chunk(state, n):
            new_leaves, metric_leaves = compiled(jax.tree.leaves(state), n)
            return jax.tree.unflatten(runner_tree, new_leaves), jax.tree.unflatten(metrics_tree, metric_leaves)

        return run_chunk


def export_chunk(jitted_chunk, runner) -> StoredChunk:
    """Trace and lower `jitted_chunk` (ppo.chunk under jit, donating the runner) for `runner`'s shapes, exported
    with the runner as a flat list of leaves (the runner's tree holds functions, which jax.export cannot store)."""
    runner_tree = jax.tree.structure(runner)
    leaves = _leaf_specs(runner)
    out = {}

    def flat_chunk(leaves, n):
        new_runner, metrics = jitted_chunk(jax.tree.unflatten(runner_tree, leaves), n)
        metric_leaves, out["metrics_tree"] = jax.tree.flatten(metrics)
        return jax.tree.leaves(new_runner), metric_leaves

    exported = jax.export.export(jax.jit(flat_chunk, donate_argnums=0))(
        leaves, jax.ShapeDtypeStruct((), jnp.int32))
    return StoredChunk(exported, out["metrics_tree"])


class ProgramStore:
    """The stored chunks of runs, one file per key in `directory` (the compilation cache's `exported/`)."""

    def __init__(self, directory: str, material: dict):
        self.material = material
        name = hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()[:32]
        self.path = os.path.join(directory, f"chunk-{name}.bin")

    @classmethod
    def for_run(cls, config, cache_dir: str) -> ProgramStore | None:
        """The store for a run, or None where chunks are not stored: several processes (each would export its
        own slice of a multi-host program), or the stored format unavailable (jax.export's serialisation needs
        the `flatbuffers` package)."""
        if jax.process_count() > 1:
            return None
        try:
            import flatbuffers  # noqa: F401 (jax.export.serialize imports it)
        except ImportError:
            return None
        return cls(os.path.join(cache_dir, "exported"), key_material(config))

    def load(self) -> StoredChunk | None:
        try:
            with open(self.path, "rb") as f:
                blob = pickle.load(f)
            if blob.get("format") != FORMAT or blob.get("material") != json.loads(
                    json.dumps(self.material, default=str)):
                return None
            return StoredChunk(jax.export.deserialize(bytearray(blob["exported"])), blob["metrics_tree"])
        except Exception:  # noqa: BLE001 (missing, truncated, from another version: a miss)
            return None

    def save(self, chunk: StoredChunk) -> bool:
        blob = {"format": FORMAT, "material": json.loads(json.dumps(self.material, default=str)),
                "exported": bytes(chunk.exported.serialize()), "metrics_tree": chunk.metrics_tree}
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(self.path), prefix=".chunk-")
            try:
                with os.fdopen(fd, "wb") as f:
                    pickle.dump(blob, f)
                os.replace(tmp, self.path)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
            self._prune()
            return True
        except (OSError, pickle.PicklingError, TypeError, AttributeError):  # a full disk, a tree with a function
            return False

    def _prune(self) -> None:
        """Keep the KEEP most recently written chunks (each change of code or config stores a new one)."""
        directory = os.path.dirname(self.path)
        stored = [os.path.join(directory, n) for n in os.listdir(directory) if n.startswith("chunk-")]
        for path in sorted(stored, key=os.path.getmtime, reverse=True)[KEEP:]:
            try:
                os.unlink(path)
            except OSError:
                pass

    def compile_chunk(self, jitted_chunk, runner, num_updates: int):
        """The run's chunk compiled for `runner`: from the stored export where one fits, else exported (and stored)
        now; where exporting fails, the plain `jitted_chunk.lower(...).compile()`."""
        stored = self.load()
        if stored is None or not stored.fits(runner):
            try:
                stored = export_chunk(jitted_chunk, runner)
            except Exception:  # noqa: BLE001 (what jax.export cannot hold: compile as before)
                return jitted_chunk.lower(runner, np.int32(num_updates)).compile()
            self.save(stored)
        return stored.compile(runner, num_updates)

