"""Stored programs: a warm start that does not trace the chunk, the fresh state or the evaluation again.

With the compilation cache warm, XLA's work is read back from disk, but every start still traced the whole chunk in
Python first (the env step inside the rollout, the update, every stage) only to find the cache key: about 2 s of a
HackMatrix start on a 2-core CPU (specs/speed.md). jax.export serialises the lowered chunk (StableHLO, ~0.3 MB for
HackMatrix); a later start with the same config and the same code deserialises it (~10 ms), wraps it in a jit
(lowering in ~0.2 s) and compiles that, which the compilation cache answers.

The key of a stored chunk is everything that shapes its program: the resolved config less the fields that only say
where and how a run is kept and logged (RUN_ONLY), the source of this package, the versions of jax and of the env
libraries, the backend, its devices, XLA_FLAGS and the jax settings that change a trace without changing a shape
(the PRNG implementation, matmul precision, dtype promotion). Anything else different is a miss: the chunk is traced and
stored again. Each run's chunk is exported once (the cold start pays ~0 extra: exporting is the tracing and
lowering `.lower()` did anyway) and then always called through its export, so the cold and the warm start compile
the same program and share one compilation-cache entry.

The fresh state's program is stored the same way (`fresh-<key>.bin`), so a warm start traces neither. Its output
tree holds the run's optimizer and the network's apply function (flax's TrainState keeps them as static fields), and
optax's functions cannot be pickled: the file names them instead (`persistent_id`), and a later start puts its own
optimizer and network back in their place (the same objects a trace would have put there: a test compares the trees).

The evaluation program is stored the same way (`eval-<key>.bin`, `ProgramStore.for_evaluation`): its key is
`base_material` plus what builds its agent (the env's name and the network's metadata, a run's as a parameter
file's) and its shape (parallel episodes, step limit, agents).

A stored file that cannot be read or written is a miss and nothing else: this is a cache.
"""

from __future__ import annotations

import hashlib
import inspect
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
KEEP = 64  # stored files of each kind kept per cache directory, newest first (~0.1-0.5 MB each)

# Config fields that never reach the chunk's program: names, places, schedules of saving and logging; the seed
# (an input of the fresh state's program); and --total-timesteps, which reaches it only as data (the anneal horizon
# in RunnerState.hyper) and through --log-interval, itself in the key. (The PPO hyperparameters that are data,
# config.DATA_HYPERPARAMETERS, stay in the key: --scale-rewards bakes gamma into the program.) A run differing in
# anything else is a miss.
RUN_ONLY = ("seed", "run_name", "checkpoint_dir", "resume", "keep_checkpoints", "save_interval_minutes",
            "save_interval", "keep_optimizer", "startup_timeout", "wandb", "wandb_project", "wandb_entity",
            "wandb_artifacts", "wandb_group", "eval_video", "tensorboard_dir", "profile_dir", "final_eval_episodes", "total_timesteps")
# Libraries whose code can end up inside the chunk (the envs' step functions, the network, the optimizer).
LIBRARIES = ("jax", "jaxlib", "flax", "optax", "gymnax", "jumanji", "craftax", "chex", "distrax", "tfp-nightly")
# jax settings that change what a trace produces without changing any input's shape or dtype, so the shape check of
# a stored program cannot catch them: JAX_DEFAULT_PRNG_IMPL=rbg and =unsafe_rbg both use [4] uint32 keys and split
# them differently. jit keys its own caches on these (jax's trace context, added below where jax exposes it); the
# PRNG implementation is not part of that context (jit sees it in the key's type), so it is named here.
TRACE_SETTINGS = ("jax_default_prng_impl", "jax_enable_custom_prng", "jax_legacy_prng_key",
                  "jax_threefry_partitionable", "jax_default_matmul_precision", "jax_numpy_dtype_promotion",
                  "jax_numpy_rank_promotion", "jax_softmax_custom_jvp", "jax_high_dynamic_range_gumbel",
                  "jax_random_seed_offset", "jax_enable_x64", "jax_disable_jit")


def _package_digest() -> str:
    root = Path(__file__).resolve().parents[1]  # the whole package
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


def _trace_settings() -> dict:
    names = set(TRACE_SETTINGS)
    try:  # jax's own list of the settings its jit caches are keyed on (private, so optional)
        from jax._src import config as jax_config

        listed = jax_config.trace_context_names
        names.update(name for name in (listed() if callable(listed) else listed) if name.startswith("jax_"))
    except (ImportError, AttributeError, TypeError):
        pass
    values = jax.config.values
    return {name: str(values[name]) for name in sorted(names) if name in values}


def key_material(config) -> dict:
    """What the stored programs of a run with `config` (resolved) depends on, as JSON-able data."""
    return {"config": {name: value for name, value in config.to_dict().items() if name not in RUN_ONLY},
            **base_material()}


def base_material() -> dict:
    """What every stored program depends on besides its own settings: this package's code, the libraries, the
    backend and its devices, XLA's flags, the jax settings that change a trace (TRACE_SETTINGS)."""
    return {
        "format": FORMAT,
        "code": _package_digest(),
        "python": sys.version_info[:2],
        "versions": _versions(),
        "backend": jax.default_backend(),
        "devices": [d.device_kind for d in jax.devices()],
        "processes": jax.process_count(),
        "jax_settings": _trace_settings(),  # jax_enable_x64 among them
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
    }


def _fits(leaves, avals) -> bool:
    """Whether `leaves` (arrays or ShapeDtypeStructs) have the shapes and dtypes of an exported program's inputs."""
    return len(leaves) == len(avals) and all(
        tuple(x.shape) == tuple(a.shape) and jnp.dtype(x.dtype) == a.dtype for x, a in zip(leaves, avals))


def _leaf_specs(runner) -> list:
    """The runner's leaves as ShapeDtypeStructs, with their shardings where they span several devices. A
    one-device sharding is left out: the fresh state's shapes (Trainer.fresh_state_shapes) have none on one
    device, and a leaf lowered with one is another program (an `sdy.sharding` annotation instead of the buffer's
    aliasing), so a resumed run, whose restored arrays carry theirs, compiled its chunk again instead of reading
    the compilation cache's entry."""
    def spec(x):
        sharding = getattr(x, "sharding", None)
        return jax.ShapeDtypeStruct(x.shape, x.dtype,
                                    sharding=sharding if sharding is not None and len(sharding.device_set) > 1
                                    else None)

    return [spec(x) for x in jax.tree.leaves(runner)]


class StoredChunk:
    """A run's chunk through its export: `compile(runner, num_updates)` gives the callable loop.run dispatches,
    (runner_state, num_updates) -> (runner_state, metrics), as `jit(chunk).lower(...).compile()` does."""

    def __init__(self, exported, metrics_tree):
        self.exported = exported
        self.metrics_tree = metrics_tree
        self._jitted = jax.jit(lambda leaves, n: exported.call(leaves, n), donate_argnums=0)

    def fits(self, runner) -> bool:
        """Whether `runner` (arrays or ShapeDtypeStructs) has the leaves the stored program takes."""
        return _fits(jax.tree.leaves(runner), self.exported.in_avals[:-1])  # the last input: num_updates

    def compile(self, runner, num_updates: int):
        runner_tree = jax.tree.structure(runner)
        leaves = _leaf_specs(runner)
        compiled = self._jitted.lower(leaves, np.int32(num_updates)).compile()
        metrics_tree = self.metrics_tree

        def run_chunk(state, n):
            new_leaves, metric_leaves = compiled(jax.tree.leaves(state), n)
            return jax.tree.unflatten(runner_tree, new_leaves), jax.tree.unflatten(metrics_tree, metric_leaves)

        return run_chunk


class StoredFunction:
    """A jitted function of arrays through its export: `(*args) -> tree`, as the function itself. The fresh-agent
    program ((key, hyper) -> the runner state, as `fresh_runner_state`) and the evaluation program ((params, key,
    policy) -> per-episode arrays, evaluation.make_evaluator) are stored this way."""

    def __init__(self, exported, out_tree):
        self.exported = exported
        self.out_tree = out_tree
        self._jitted = jax.jit(lambda leaves: exported.call(leaves))
        self._compiled = {}

    def fits(self, *args) -> bool:
        return _fits(jax.tree.leaves(args), self.exported.in_avals)

    def shapes(self):
        """The output's tree of ShapeDtypeStructs, without running anything."""
        return jax.tree.unflatten(self.out_tree, [jax.ShapeDtypeStruct(a.shape, a.dtype)
                                                  for a in self.exported.out_avals])

    def __call__(self, *args):
        """Compiled ahead for the leaves' shapes without their one-device shardings (`_leaf_specs`): inputs that
        came out of an earlier program are committed to their device, and lowered as they are they make another
        program (one the compilation cache does not share with a process whose inputs are not, e.g. evaluate.py
        after a training run's final evaluation)."""
        leaves = jax.tree.leaves(args)
        signature = tuple((spec.shape, spec.dtype, spec.sharding) for spec in _leaf_specs(leaves))
        if signature not in self._compiled:
            self._compiled[signature] = self.lower(*args).compile()
        return jax.tree.unflatten(self.out_tree, self._compiled[signature](leaves))

    def lower(self, *args):
        """The program `__call__` compiles for `args`."""
        return self._jitted.lower(_leaf_specs(jax.tree.leaves(args)))


def export_function(jitted, *args) -> StoredFunction:
    """Trace and lower `jitted` for the shapes of `args` (trees of arrays), exported with its inputs and outputs
    as flat lists of leaves (jax.export stores no Python trees)."""
    in_tree = jax.tree.structure(args)
    out = {}

    def flat(leaves):
        result = jitted(*jax.tree.unflatten(in_tree, leaves))
        leaves, out["tree"] = jax.tree.flatten(result)
        return leaves

    exported = jax.export.export(jax.jit(flat))(
        [jax.ShapeDtypeStruct(np.shape(x), x.dtype) for x in jax.tree.leaves(args)])
    return StoredFunction(exported, out["tree"])


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


class _Pickler(pickle.Pickler):
    """Pickles a tree's static data, writing the run's live objects (`live`: name -> object) as their names."""

    def __init__(self, file, live: dict):
        super().__init__(file)
        self.live = live

    def persistent_id(self, obj):
        for name, live in self.live.items():
            if obj is live or (inspect.ismethod(obj) and inspect.ismethod(live) and obj == live):
                return name
        return None


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, live: dict):
        super().__init__(file)
        self.live = live

    def persistent_load(self, name):
        return self.live[name]


class ProgramStore:
    """The stored programs of runs, one file per kind (chunk, fresh) and key in `directory` (the compilation
    cache's `exported/`)."""

    def __init__(self, directory: str, material: dict):
        self.directory = directory
        self.material = json.loads(json.dumps(material, default=str))
        self.name = hashlib.sha256(json.dumps(self.material, sort_keys=True).encode()).hexdigest()[:32]
        self.path = os.path.join(directory, f"chunk-{self.name}.bin")
        self.fresh_path = os.path.join(directory, f"fresh-{self.name}.bin")

    @classmethod
    def for_run(cls, config, cache_dir: str) -> ProgramStore | None:
        """The store for a run, or None where programs are not stored: several processes (each would export its
        own slice of a multi-host program), or the stored format unavailable (jax.export's serialisation needs
        the `flatbuffers` package)."""
        return cls(os.path.join(cache_dir, "exported"), key_material(config)) if _can_store() else None

    @classmethod
    def for_evaluation(cls, cache_dir: str | None, agent: dict, batch: int, max_steps: int,
                       num_seeds: int) -> ProgramStore | None:
        """The store of an evaluation program (evaluation.Evaluator): `agent` is what builds its env and network
        (the env's name and the network's metadata: evaluations build both from those alone), then its shape:
        `batch` parallel episodes of at most `max_steps` steps, `num_seeds` agents. None without a cache, where
        programs are not stored, or on several devices (the evaluation's inputs may then be sharded; it is traced
        as before)."""
        if not cache_dir or not _can_store() or jax.device_count() > 1:
            return None
        material = {**base_material(), **agent, "program": "evaluation", "batch": int(batch),
                    "max_steps": int(max_steps), "num_seeds": int(num_seeds)}
        return cls(os.path.join(cache_dir, "exported"), material)

    def _read(self, path: str, live: dict) -> dict | None:
        try:
            with open(path, "rb") as f:
                blob = _Unpickler(f, live).load()
            if blob.get("format") != FORMAT or blob.get("material") != self.material:
                return None
            blob["exported"] = jax.export.deserialize(bytearray(blob["exported"]))
            return blob
        except Exception:  # noqa: BLE001 (missing, truncated, from another version: a miss)
            return None

    def _write(self, path: str, exported, tree_fields: dict, live: dict) -> bool:
        blob = {"format": FORMAT, "material": self.material, "exported": bytes(exported.serialize()), **tree_fields}
        directory = os.path.dirname(path)
        try:
            os.makedirs(directory, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=".stored-")
            try:
                with os.fdopen(fd, "wb") as f:
                    _Pickler(f, live).dump(blob)
                os.replace(tmp, path)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
        except (OSError, pickle.PicklingError, TypeError, AttributeError):  # a full disk, an unpicklable tree
            return False
        self._prune(os.path.basename(path).split("-")[0] + "-")
        return True

    def _prune(self, prefix: str) -> None:
        """Keep the KEEP most recently written files of a kind (each change of code or config stores new ones)."""
        directory = os.path.dirname(self.path)
        stored = [os.path.join(directory, n) for n in os.listdir(directory) if n.startswith(prefix)]
        for path in sorted(stored, key=os.path.getmtime, reverse=True)[KEEP:]:
            try:
                os.unlink(path)
            except OSError:
                pass

    def load(self) -> StoredChunk | None:
        blob = self._read(self.path, {})
        return None if blob is None else StoredChunk(blob["exported"], blob["metrics_tree"])

    def save(self, chunk: StoredChunk) -> bool:
        return self._write(self.path, chunk.exported, {"metrics_tree": chunk.metrics_tree}, {})

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

    def fresh_program(self, jitted_fresh, key, hyper, live: dict) -> StoredFunction | None:
        """The run's fresh-agent program for inputs shaped like `key` and `hyper` (arrays or shapes): read back
        where a stored one fits, else exported and stored now; None where exporting fails (the caller then runs
        `jitted_fresh`). `live`: the objects the state's tree holds that a file cannot (name -> object)."""
        return self.function_program(self.fresh_path, jitted_fresh, (key, hyper), live)

    def evaluation_program(self, jitted_run, params, key, policy, instance=None) -> StoredFunction | None:
        """The evaluation program (evaluation.make_evaluator's, (params, key, policy, instance) -> per-episode
        arrays) for inputs shaped like these, as `fresh_program` (no instance: no leaves, the program of before)."""
        return self.function_program(os.path.join(self.directory, f"eval-{self.name}.bin"), jitted_run,
                                     (params, key, policy, instance), {})

    def function_program(self, path: str, jitted, args: tuple, live: dict) -> StoredFunction | None:
        """`jitted` for `args`' shapes through the export stored at `path`: read back where it fits, else exported
        and stored now; None where exporting fails."""
        blob = self._read(path, live)
        if blob is not None:
            stored = StoredFunction(blob["exported"], blob["out_tree"])
            if stored.fits(*args):
                return stored
        try:
            stored = export_function(jitted, *args)
        except Exception:  # noqa: BLE001 (what jax.export cannot hold: run the jitted program as before)
            return None
        self._write(path, stored.exported, {"out_tree": stored.out_tree}, live)
        return stored


def _can_store() -> bool:
    """Whether programs can be stored here: one process (several would each export their own slice of a
    multi-host program), and jax.export's serialisation available (it needs the `flatbuffers` package)."""
    if jax.process_count() > 1:
        return False
    try:
        import flatbuffers  # noqa: F401 (jax.export.serialize imports it)
    except ImportError:
        return False
    return True
