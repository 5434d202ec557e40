"""Checkpoint I/O: full-state checkpoints, finding them, and restoring them for an exact resume.

Saving on a schedule and on a signal is training_hooks.py; a run's resume and logging wiring is run_setup.py.

Layout of one run (`<checkpoint-dir>/<run-name>/`):

    metrics.jsonl            one record per chunk (appended by a resumed run)
    <update>/                one orbax checkpoint per save, named by the PPO update it was taken after
        state/               the whole RunnerState (params, optimizer, env states, keys, accumulators, counters)
        meta/                JSON: the resolved config ({flat option name: value}, config/train_config.py), package version,
                             env, network shape, update, env_steps, the last metrics record
    params_<update>.npz      the parameters beside each checkpoint, loadable with numpy alone (export.py)
                             (with --num-seeds S: every leaf of state/ and of the npz has a leading [S] seed axis,
                             except the update counter; meta's config records num_seeds)
    final_params.npz         the parameters at the end of the run (or where it was stopped)

orbax writes each step into a temporary directory and renames it when complete, so a crash or kill during a
save leaves the previous checkpoint valid; the write happens in a background thread after a blocking copy to
host, so training continues (and may donate the device buffers) while it is written. The last
`--keep-checkpoints` steps are kept.

Resume (`--resume DIR`) restores into the structure and dtypes of the freshly built `trainer.runner_state`,
so the restored state is strongly typed exactly like a fresh one and hits the same compiled program. Its
config is the checkpoint's stored resolved config (`config_of`) with the options given again on top (cli.parse).
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from hephaestus.config.registry import STORED_DEFAULTS

STATE, META = "state", "meta"
EPISODE_STAT_PREFIX = "stages.rollout.episode_stats."  # where the running episode statistics live in the state


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message is one line, fit for the console."""


def _ocp():
    import logging

    import orbax.checkpoint as ocp

    # orbax logs every save at WARNING/INFO through absl, and a failed save as hundreds of lines of tracebacks
    # from each of its threads; the hooks below report every failure in one line of their own.
    logging.getLogger("absl").setLevel(logging.CRITICAL)
    _quiet_closed_event_loops()
    return ocp


class _DropUnretrievedFutures:
    """logging filter: drops asyncio's "Future exception was never retrieved" records, and the same unread
    tensorstore reads when the race leaves them wrapped in a Task (asyncio's `_wrap_awaitable`, "Task exception
    was never retrieved" with a tensorstore error); see below."""

    def filter(self, record) -> bool:
        message = str(record.msg)
        if message.startswith("Future exception was never retrieved"):
            return False
        error = record.exc_info[1] if record.exc_info else None
        return not (message.startswith("Task exception was never retrieved") and "_wrap_awaitable" in message
                    and error is not None and "tensorstore_spec" in str(error))


def _quiet_closed_event_loops() -> None:
    """After a refused (corrupt) checkpoint, tensorstore reads still in flight finish on an event loop that orbax
    has already closed, and each prints an "Event loop is closed" traceback through sys.unraisablehook; the
    reads that failed beside the one reported are garbage-collected unread, and asyncio logs each as "Future
    exception was never retrieved" (how many depends on which read fails first: a race). They mean nothing once
    the one-line error is out: drop exactly those, pass everything else on. (orbax is this process's only user
    of asyncio; a failed save is reported by the hooks in one line of their own.)"""
    import logging
    import sys

    asyncio_logger = logging.getLogger("asyncio")
    if not any(isinstance(f, _DropUnretrievedFutures) for f in asyncio_logger.filters):
        asyncio_logger.addFilter(_DropUnretrievedFutures())
    previous = sys.unraisablehook
    if getattr(previous, "_drops_closed_loops", False):
        return

    def hook(unraisable):
        if isinstance(unraisable.exc_value, RuntimeError) and str(unraisable.exc_value) == "Event loop is closed":
            return
        previous(unraisable)

    hook._drops_closed_loops = True
    sys.unraisablehook = hook


def _handlers(ocp):
    return {STATE: ocp.StandardCheckpointHandler(), META: ocp.JsonCheckpointHandler()}


def _read_manager(run_dir: str):
    ocp = _ocp()
    options = ocp.CheckpointManagerOptions(read_only=True, create=False, save_interval_steps=0)
    return ocp.CheckpointManager(os.path.abspath(run_dir), options=options, item_handlers=_handlers(ocp))


def _step_dirs(run_dir: str) -> list[int]:
    """Finalized checkpoint steps in a run directory, as orbax's own step discovery lists them (its temporary
    directories of unfinished saves are not steps)."""
    if not os.path.isdir(run_dir):
        return []
    try:
        mgr = _read_manager(run_dir)
    except Exception:  # noqa: BLE001 - orbax raises many kinds; a directory it cannot read holds no steps
        return []
    try:
        return sorted(int(s) for s in mgr.all_steps(read=True))
    except Exception:  # noqa: BLE001
        return []
    finally:
        mgr.close()


# ----------------------------------------------------------------------------------------------------------
# Finding and reading a checkpoint


@dataclass
class Checkpoint:
    """A located, readable checkpoint: its run directory, step, and metadata (config, version, ...)."""

    run_dir: str
    step: int
    meta: dict
    all_steps: list = field(default_factory=list)

    @property
    def path(self) -> str:
        return os.path.join(self.run_dir, str(self.step))

    @property
    def config(self) -> dict:
        return self.meta.get("config", {})


def locate(path: str) -> Checkpoint:
    """`path` is a run directory (latest step) or one step directory inside it. Reads only the metadata."""
    if not path:
        raise CheckpointError("no checkpoint path given")
    clean = os.path.normpath(os.path.abspath(path))
    if not os.path.exists(clean):
        raise CheckpointError(f"{path}: no such file or directory")
    if not os.path.isdir(clean):
        raise CheckpointError(f"{path}: not a checkpoint directory")
    base = os.path.basename(clean)
    parent_steps = _step_dirs(os.path.dirname(clean)) if base.isdigit() else []
    if base.isdigit() and int(base) in parent_steps:
        run_dir, step = os.path.dirname(clean), int(base)
        steps = parent_steps
    elif base in (STATE, META) and os.path.basename(os.path.dirname(clean)).isdigit():
        return locate(os.path.dirname(clean))
    else:
        run_dir = clean
        steps = _step_dirs(run_dir)
        if not steps:
            if base.isdigit() or re.match(r"^\d+\.orbax-checkpoint-tmp", base):
                raise CheckpointError(f"{path}: incomplete checkpoint (the save never finished)")
            raise CheckpointError(f"{path}: no checkpoints in this directory")
        step = steps[-1]
    meta_path = os.path.join(run_dir, str(step), META, "metadata")
    try:
        with open(meta_path) as f:
            meta = json.load(f)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: checkpoint {step} has no metadata (not a Hephaestus "
                              "checkpoint, or truncated)") from None
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{path}: checkpoint {step} metadata is unreadable ({type(err).__name__})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a Hephaestus checkpoint (format {meta.get('format') if isinstance(meta, dict) else None!r})")
    check_saved_config(f"{path}: checkpoint {step} metadata", meta)
    return Checkpoint(run_dir=run_dir, step=step, meta=meta, all_steps=steps)


FORMAT = "hephaestus-checkpoint-v1"


# Options of older versions that a stored config may still hold; they mean nothing now (num_minibatches and
# update_epochs were stored resolved beside them; stage_options became the stage families' own options).
RETIRED_OPTIONS = ("user_set_minibatches", "user_set_epochs", "stage_options")
# What an option means when a checkpoint predates it: runs before --encoder/--obs-dtype were float32 MLPs, runs
# before --teacher had none (HackMatrix's default teacher must not join a resumed older run); the agent families
# declare theirs (config.registry's STORED_DEFAULTS: world models before --dtc-encoder read the flat observation, ...).
STORED_CONFIG_DEFAULTS = {"encoder": "mlp", "obs_dtype": "float32", "teacher": "none"}


def check_saved_config(where: str, meta: dict) -> None:
    """The metadata's config (and network) are what a resume builds its config from: a damaged or hand-edited
    value is one line naming the field, not an error about a flag the user never passed."""
    config, network = meta.get("config", {}), meta.get("network", {})
    for name, value in (("config", config), ("network", network)):
        if not isinstance(value, dict):
            raise CheckpointError(f"{where}: {name} is a {type(value).__name__}, not a mapping (damaged metadata)")
    try:
        stored_config(config, f"{where}: config field")
    except ValueError as err:
        raise CheckpointError(f"{err} (damaged metadata)") from None


def stored_config(values: dict, where: str):
    """TrainConfig of a checkpoint's stored {flat name: value} config, every value type-checked; `where` starts
    the error line."""
    from hephaestus.config.train_config import from_flat_dict

    return from_flat_dict({**STORED_CONFIG_DEFAULTS, **STORED_DEFAULTS, **values}, where, ignore=RETIRED_OPTIONS)


def config_of(ckpt: "Checkpoint"):
    """The resolved config `ckpt` was trained with, continuing in the checkpoint's own run folder (what --resume
    starts from; options given again change it). Nothing is re-parsed: the stored values are the config."""
    config = stored_config(ckpt.config, f"{ckpt.path}: checkpoint {ckpt.step} metadata: config field")
    return config.replace(run_name=os.path.basename(ckpt.run_dir), checkpoint_dir=os.path.dirname(ckpt.run_dir),
                          resume=ckpt.path)


def _path_str(path) -> str:
    parts = []
    for k in path:
        if isinstance(k, jax.tree_util.DictKey):
            parts.append(str(k.key))
        elif isinstance(k, jax.tree_util.GetAttrKey):
            parts.append(k.name)
        elif isinstance(k, jax.tree_util.SequenceKey):
            parts.append(str(k.idx))
        else:  # FlattenedIndexKey and friends
            parts.append(str(getattr(k, "key", k)))
    return ".".join(parts)


def _lookup(tree, path):
    """Follow a jax key path through orbax's restored/metadata tree (nested dicts and lists)."""
    node = tree
    for k in path:
        if isinstance(k, jax.tree_util.DictKey):
            name = k.key
        elif isinstance(k, jax.tree_util.GetAttrKey):
            name = k.name
        elif isinstance(k, jax.tree_util.SequenceKey):
            name = k.idx
        else:
            name = getattr(k, "key", k)
        if isinstance(node, dict) or (hasattr(node, "keys") and hasattr(node, "__getitem__")):
            keys = set(node.keys())
            if name in keys:
                node = node[name]
            elif str(name) in keys:
                node = node[str(name)]
            else:
                raise KeyError(_path_str(path))
        elif isinstance(node, (list, tuple)) and isinstance(name, int) and name < len(node):
            node = node[name]
        elif hasattr(node, str(name)):
            node = getattr(node, str(name))
        else:
            raise KeyError(_path_str(path))
    return node


# The networks.NetworkSpec fields a resume must match (the storage and matmul dtypes may change: the parameters
# are float32 either way).
NETWORK_FIELDS = ("obs_dim", "action_dim", "discrete", "hidden_dim", "num_layers", "activation", "encoder",
                  "obs_cells", "obs_board", "cell_dim", "salience_heads", "recurrent", "recurrent_embed")


def check_compatible(ckpt: Checkpoint, config, network_meta: dict) -> None:
    """Refuse a checkpoint of another env, seed count or network shape with one line naming the mismatch."""
    theirs = ckpt.meta
    saved_seeds = ckpt.config.get("num_seeds", 1)  # checkpoints before --num-seeds hold one agent
    if saved_seeds != config.run.num_seeds:
        raise CheckpointError(f"{ckpt.path}: checkpoint holds {saved_seeds} seed(s), this run asks for --num-seeds "
                              f"{config.run.num_seeds}; resume with --num-seeds {saved_seeds}")
    if theirs.get("env") != config.env.name:
        raise CheckpointError(f"{ckpt.path}: checkpoint is for env {theirs.get('env')!r}, this run is "
                              f"{config.env.name!r}")
    from hephaestus.core.networks import NetworkSpec

    # A field a checkpoint predates means what NetworkSpec says (checkpoints before the cells encoder are MLPs).
    net = {**NetworkSpec.META_DEFAULTS, **theirs.get("network", {})}
    network_meta = {**NetworkSpec.META_DEFAULTS, **network_meta}
    for name in NETWORK_FIELDS:
        if name in net and net[name] != network_meta.get(name):
            flag = "--" + name.replace("_", "-")
            hint = f" (pass {flag} {net[name]} to continue it)" if name in ("encoder", "recurrent", "recurrent_embed") else ""
            raise CheckpointError(f"{ckpt.path}: network mismatch: {name} is {net[name]!r} in the checkpoint, "
                                  f"{network_meta.get(name)!r} in this run{hint}")


@dataclass
class Restored:
    runner_state: Any
    notes: list  # one-line messages for the console
    exact: bool  # True when every leaf came from the checkpoint


def restore(ckpt: Checkpoint, trainer, keep_optimizer: bool = False) -> Restored:
    """Restore `ckpt` into the structure of `trainer.runner_state`.

    Same shapes everywhere: the whole state is restored (exact resume). Otherwise only a changed env count
    (the rollout stage's shapes) is accepted: weights, counters and keys are kept, the environment states are
    the fresh ones, and the optimizer state is reset unless `keep_optimizer`. Anything else is refused.
    """
    ocp = _ocp()
    fresh = trainer.runner_state
    check_compatible(ckpt, trainer.config, _network_meta(trainer))
    mgr = _read_manager(ckpt.run_dir)
    try:
        try:
            saved = mgr.item_metadata(ckpt.step)[STATE]
        except Exception as err:  # noqa: BLE001 - orbax raises many kinds; all mean "unreadable"
            raise CheckpointError(f"{ckpt.path}: checkpoint is unreadable ({one_line(err)})") from None
        if saved is None:
            raise CheckpointError(f"{ckpt.path}: checkpoint has no state (truncated or not a Hephaestus checkpoint)")
        leaves, treedef = jax.tree_util.tree_flatten_with_path(fresh)
        differ = []  # (path string, saved shape/dtype, fresh shape/dtype); None when missing
        for path, leaf in leaves:
            try:
                m = _lookup(saved, path)
                same = tuple(m.shape) == tuple(leaf.shape) and np.dtype(m.dtype) == np.dtype(leaf.dtype)
                if not same:
                    differ.append((_path_str(path), (tuple(m.shape), str(np.dtype(m.dtype))),
                                   (tuple(leaf.shape), str(leaf.dtype))))
            except (KeyError, AttributeError, TypeError):
                differ.append((_path_str(path), None, (tuple(leaf.shape), str(leaf.dtype))))
        notes = []
        if not differ:
            abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, fresh)
            try:
                state = mgr.restore(ckpt.step, args=ocp.args.Composite(**{STATE: ocp.args.StandardRestore(abstract)}))[STATE]
            except Exception as err:  # noqa: BLE001
                raise CheckpointError(f"{ckpt.path}: checkpoint is unreadable ({one_line(err)})") from None
            # The schedule follows this run's config (identical when the config is unchanged).
            state = state.replace(hyper=fresh.hyper)
            _verify_finite(state, ckpt)
            return Restored(runner_state=_place(trainer, state), notes=notes, exact=True)

        # Partial restore: decide which subtrees come fresh.
        fresh_prefixes = set()
        new_stats = []  # episode statistics the env declares since the checkpoint was written
        for name, old, new in differ:
            if old is None and name.startswith(EPISODE_STAT_PREFIX):
                # Only the new statistic's running values start at 0 (the episodes in progress under-count it
                # once); the env states, the other statistics and the optimizer resume as they were.
                fresh_prefixes.add(name + ".")
                new_stats.append(name[len(EPISODE_STAT_PREFIX):])
            elif old is None and name.startswith(("hyper.", "train_state.opt_state.hyperparams.")):
                # A hyperparameter that became data after the checkpoint was written: this run sets it from its
                # config every update, so the fresh value is the right one.
                fresh_prefixes.add(name + ".")
            elif name.startswith("stages.rollout."):
                fresh_prefixes.add("stages.rollout.")
            elif name.startswith("stages."):
                fresh_prefixes.add("stages." + name.split(".")[1] + ".")
            elif name.startswith("train_state.params.") or name.startswith("train_state.opt_state."):
                what = f"{old[0]} {old[1]} in the checkpoint, {new[0]} {new[1]} here" if old else "missing in the checkpoint"
                raise CheckpointError(f"{ckpt.path}: network mismatch at {name}: {what}")
            else:
                what = f"{old} in the checkpoint, {new} here" if old else "missing in the checkpoint"
                raise CheckpointError(f"{ckpt.path}: incompatible checkpoint at {name}: {what}")
        if "stages.rollout." in fresh_prefixes:
            old_envs = ckpt.config.get("num_envs")
            why = (f"--num-envs changed ({old_envs} -> {trainer.config.env.num_envs})" if old_envs != trainer.config.env.num_envs
                   else "the rollout state differs (a checkpoint written by an older layout of the env state or "
                        "its episode statistics)")
            msg = f"resume: {why}: weights kept, environments re-created, "
            if keep_optimizer:
                msg += "optimizer state kept (--keep-optimizer)"
            else:
                msg += "optimizer state reset (--keep-optimizer keeps it)"
                fresh_prefixes.add("train_state.opt_state.")
            notes.append(msg)
        if new_stats and "stages.rollout." not in fresh_prefixes:
            notes.append(f"resume: episode statistics new since the checkpoint ({', '.join(sorted(new_stats))}) count "
                         f"from 0 in the episodes in progress; the rest of the state is restored as it was")
        others = sorted(p[len("stages."):-1] for p in fresh_prefixes
                        if p.startswith("stages.") and p != "stages.rollout." and not p.startswith(EPISODE_STAT_PREFIX))
        if others:
            notes.append(f"resume: stage state re-initialised for {', '.join(others)} (changed or new stage)")
        try:
            raw = mgr.restore(ckpt.step, args=ocp.args.Composite(**{STATE: ocp.args.StandardRestore()}))[STATE]
        except Exception as err:  # noqa: BLE001
            raise CheckpointError(f"{ckpt.path}: checkpoint is unreadable ({one_line(err)})") from None
        out = []
        for path, leaf in leaves:
            name = _path_str(path) + "."
            if any(name.startswith(p) for p in fresh_prefixes) or name.startswith("hyper."):
                out.append(leaf)
            else:
                out.append(np.asarray(_lookup(raw, path)))
        state = jax.tree_util.tree_unflatten(treedef, out)
        _verify_finite(state, ckpt)
        exact = all(p.startswith(("hyper.", "train_state.opt_state.hyperparams.")) for p in fresh_prefixes)
        return Restored(runner_state=_place(trainer, state), notes=notes, exact=exact)
    finally:
        mgr.close()


def _place(trainer, state):
    """Strongly typed leaves, on the trainer's mesh when it has one (distributed.Sharder.place)."""
    from hephaestus.core.ppo import strongly_typed

    sharder = getattr(trainer, "sharder", None)
    if sharder is not None and getattr(sharder, "active", False):
        return sharder.place(state)  # from host copies; orbax already restored strongly typed arrays
    return strongly_typed(state)


def _verify_finite(state, ckpt):
    if not bool(all_finite(state.train_state.params)):
        raise CheckpointError(f"{ckpt.path}: checkpoint parameters are not finite")


@jax.jit
def all_finite(tree) -> jax.Array:
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.floating)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.bool_(True)


def one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    first = text[0] if text else ""
    if len(first) > 160:
        first = first[:157] + "..."
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


def _network_meta(trainer) -> dict:
    """The trainer's network description (networks.NetworkSpec), as checkpoints and exports store it."""
    from hephaestus.core.export import network_meta

    return network_meta(trainer.env.spec, trainer.config)


def read_state(path: str):
    """(Checkpoint, raw restored state as nested dicts of arrays) without building a trainer (inspection)."""
    ckpt = locate(path)
    ocp = _ocp()
    mgr = _read_manager(ckpt.run_dir)
    try:
        raw = mgr.restore(ckpt.step, args=ocp.args.Composite(**{STATE: ocp.args.StandardRestore()}))[STATE]
    except Exception as err:  # noqa: BLE001
        raise CheckpointError(f"{ckpt.path}: checkpoint is unreadable ({one_line(err)})") from None
    finally:
        mgr.close()
    return ckpt, raw


# ----------------------------------------------------------------------------------------------------------
# Saving


class Checkpointer:
    """Saves the runner state into `run_dir/<update>/` with orbax (async, atomic), plus `params_<update>.npz`."""

    def __init__(self, run_dir: str, trainer, keep: int = 3, export_params: bool = True,
                 message: Callable[[str], None] = print):
        ocp = _ocp()
        self.run_dir = os.path.abspath(run_dir)
        self.trainer = trainer
        self.keep = keep
        self.export_params = export_params
        self.message = message
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True, enable_async_checkpointing=True)
        self.manager = ocp.CheckpointManager(self.run_dir, options=options, item_handlers=_handlers(ocp))
        self.saved_step = None  # last step handed to orbax
        self.network = _network_meta(trainer)
        self.failed = False  # a save failed: orbax's threads may wait on each other for minutes; never join them
        self._unexported = None  # (step, host copy of the params) for params_<step>.npz once the save is complete

    def meta(self, update: int, record: dict | None) -> dict:
        from hephaestus.version import __version__

        config = self.trainer.config
        from hephaestus.core.sinks import json_clean

        clean = json_clean(dict(record or {}))
        return {"format": FORMAT, "version": __version__, "env": config.env.name, "network": self.network,
                "update": int(update), "env_steps": int(update) * config.batch_size, "config": config.to_dict(),
                "last_metrics": clean, "saved_at": time.time()}

    def save(self, runner_state, record: dict | None = None) -> str | None:
        """Start an async save of `runner_state`; returns the step directory (complete once `wait()` returns)."""
        ocp = _ocp()
        step = int(jax.device_get(runner_state.update_step))
        if step == self.saved_step or step in self.manager.all_steps():
            return None
        meta = self.meta(step, record)
        self.manager.save(step, args=ocp.args.Composite(**{STATE: ocp.args.StandardSave(runner_state),
                                                         META: ocp.args.JsonSave(meta)}), force=True)
        self.saved_step = step
        if self.export_params:  # a host copy now: the next chunk may donate the device buffers
            self._unexported = (step, jax.device_get(runner_state.train_state.params),
                                self.trainer.eval_instance(runner_state))
        return os.path.join(self.run_dir, str(step))

    def saving(self) -> bool:
        """Whether an async save is still being written (does not block)."""
        return bool(self.manager.is_saving_in_progress())

    def complete(self) -> int | None:
        """Wait for the save in flight; once it is complete, write its params_<step>.npz beside it (never before,
        so an npz always has its checkpoint). Raises orbax's error when the save failed. Returns the step."""
        try:
            self.manager.wait_until_finished()
        except BaseException:
            self.failed = True
            self._unexported = None
            raise
        if self._unexported is None:
            return None
        step, params, instance = self._unexported
        self._unexported = None
        self._write_npz(os.path.join(self.run_dir, f"params_{step}.npz"), params, step, instance)
        self._prune_exports(step)
        return step

    def export(self, path: str, runner_state, step: int | None = None) -> str:
        if step is None:
            step = int(jax.device_get(runner_state.update_step))
        return self._write_npz(path, jax.device_get(runner_state.train_state.params), step,
                               self.trainer.eval_instance(runner_state))

    def _write_npz(self, path: str, params, step: int, instance=None) -> str:
        from hephaestus.core.export import save_params_npz

        config = self.trainer.config
        return save_params_npz(path, params, env=config.env.name, network=self.network, update=step,
                               env_steps=step * config.batch_size, config=config.to_dict(),
                               num_seeds=config.run.num_seeds, env_instance=instance)

    def _prune_exports(self, newest: int) -> None:
        keep = set(self.manager.all_steps()) | {newest}
        if len(keep) > self.keep:  # the in-flight step is not listed yet: keep the newest `keep`
            keep = set(sorted(keep)[-self.keep:])
        for name in os.listdir(self.run_dir):
            m = re.fullmatch(r"params_(\d+)\.npz", name)
            if m and int(m.group(1)) not in keep and int(m.group(1)) < newest:
                try:
                    os.remove(os.path.join(self.run_dir, name))
                except OSError:
                    pass

    def wait(self) -> None:
        self.manager.wait_until_finished()

    def close(self) -> None:
        if self.failed:  # joining orbax's threads after a failed save can block for its 300 s barrier timeout
            return
        try:
            self.manager.wait_until_finished()
        finally:
            self.manager.close()

