"""Full-state checkpoints, exact resume, and stopping cleanly on SIGINT/SIGTERM.

Layout of one run (`<checkpoint-dir>/<run-name>/`):

    metrics.jsonl            one record per chunk (appended by a resumed run)
    <update>/                one orbax checkpoint per save, named by the PPO update it was taken after
        state/               the whole RunnerState (params, optimizer, env states, keys, accumulators, counters)
        meta/                JSON: resolved config, package version, env, network shape, update, env_steps,
                             the last metrics record
    params_<update>.npz      the parameters beside each checkpoint, loadable with numpy alone (export.py)
                             (with --num-seeds S: every leaf of state/ and of the npz has a leading [S] seed axis,
                             except the update counter; meta's config records num_seeds)
    final_params.npz         the parameters at the end of the run (or where it was stopped)

orbax writes each step into a temporary directory and renames it when complete, so a crash or kill during a
save leaves the previous checkpoint valid; the write happens in a background thread after a blocking copy to
host, so training continues (and may donate the device buffers) while it is written. The last
`--keep-checkpoints` steps are kept.

Resume (`--resume DIR`) restores into the structure and dtypes of the freshly built `trainer.runner_state`,
so the restored state is strongly typed exactly like a fresh one and hits the same compiled program.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

STATE, META = "state", "meta"
# SIGHUP: the ssh session the run was started from closed (no tmux): stop and save like a preemption (not under
# nohup, which ignores SIGHUP so that the run goes on).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}  # 128 + signal number


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


def _quiet_closed_event_loops() -> None:
    """After a refused (corrupt) checkpoint, tensorstore reads still in flight finish on an event loop that orbax
    has already closed, and each prints an "Event loop is closed" traceback through sys.unraisablehook. They
    mean nothing once the one-line error is out: drop exactly those, pass everything else on."""
    import sys

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
    """Finalized checkpoint steps in a run directory (orbax's temporary directories are not listed)."""
    try:
        names = os.listdir(run_dir)
    except OSError:
        return []
    return sorted(int(n) for n in names
                  if n.isdigit() and os.path.isdir(os.path.join(run_dir, n))
                  and os.path.exists(os.path.join(run_dir, n, "_CHECKPOINT_METADATA")))


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
    if base.isdigit() and os.path.exists(os.path.join(clean, "_CHECKPOINT_METADATA")):
        run_dir, step = os.path.dirname(clean), int(base)
        steps = _step_dirs(run_dir)
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


def check_saved_config(where: str, meta: dict) -> None:
    """The metadata's config (and network) are what a resume builds its flags from: a damaged or hand-edited
    value is one line naming the field, not an error about a flag the user never passed."""
    import dataclasses

    from hephaestus.config import TrainConfig

    config, network = meta.get("config", {}), meta.get("network", {})
    for name, value in (("config", config), ("network", network)):
        if not isinstance(value, dict):
            raise CheckpointError(f"{where}: {name} is a {type(value).__name__}, not a mapping (damaged metadata)")
    defaults = TrainConfig()
    for f in dataclasses.fields(TrainConfig):
        if f.name not in config:
            continue  # older checkpoints lack newer fields; their defaults apply
        value, default = config[f.name], getattr(defaults, f.name)
        if default is None or (value is None and f.default is None):
            ok = value is None or isinstance(value, bool)  # wandb: None/True/False; optional numbers may be null
        elif isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(default, int):
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif isinstance(default, float):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        elif isinstance(default, tuple):
            ok = isinstance(value, (list, tuple))
        else:
            ok = isinstance(value, type(default))
        if not ok:
            expected = "a list" if isinstance(default, tuple) else type(default).__name__
            raise CheckpointError(f"{where}: config field {f.name} is {value!r}, expected {expected} (damaged "
                                  "metadata)")


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
                  "obs_cells", "cell_dim")


def check_compatible(ckpt: Checkpoint, config, network_meta: dict) -> None:
    """Refuse a checkpoint of another env, seed count or network shape with one line naming the mismatch."""
    theirs = ckpt.meta
    saved_seeds = ckpt.config.get("num_seeds", 1)  # checkpoints before --num-seeds hold one agent
    if saved_seeds != config.num_seeds:
        raise CheckpointError(f"{ckpt.path}: checkpoint holds {saved_seeds} seed(s), this run asks for --num-seeds "
                              f"{config.num_seeds}; resume with --num-seeds {saved_seeds}")
    if theirs.get("env") != config.env:
        raise CheckpointError(f"{ckpt.path}: checkpoint is for env {theirs.get('env')!r}, this run is "
                              f"{config.env!r}")
    from hephaestus.networks import NetworkSpec

    # A field a checkpoint predates means what NetworkSpec says (checkpoints before the cells encoder are MLPs).
    net = {**NetworkSpec.META_DEFAULTS, **theirs.get("network", {})}
    network_meta = {**NetworkSpec.META_DEFAULTS, **network_meta}
    for name in NETWORK_FIELDS:
        if name in net and net[name] != network_meta.get(name):
            hint = f" (pass --encoder {net[name]} to continue it)" if name == "encoder" else ""
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
            raise CheckpointError(f"{ckpt.path}: checkpoint is unreadable ({_one_line(err)})") from None
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
                raise CheckpointError(f"{ckpt.path}: checkpoint is unreadable ({_one_line(err)})") from None
            # The schedule follows this run's config (identical when the config is unchanged).
            state = state.replace(hyper=fresh.hyper)
            _verify_finite(state, ckpt)
            return Restored(runner_state=_place(trainer, state), notes=notes, exact=True)

        # Partial restore: decide which subtrees come fresh.
        fresh_prefixes = set()
        for name, old, new in differ:
            if old is None and name.startswith(("hyper.", "train_state.opt_state.hyperparams.")):
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
            why = (f"--num-envs changed ({old_envs} -> {trainer.config.num_envs})" if old_envs != trainer.config.num_envs
                   else "the rollout state differs (a checkpoint from before per-episode statistics, or another env)")
            msg = f"resume: {why}: weights kept, environments re-created, "
            if keep_optimizer:
                msg += "optimizer state kept (--keep-optimizer)"
            else:
                msg += "optimizer state reset (--keep-optimizer keeps it)"
                fresh_prefixes.add("train_state.opt_state.")
            notes.append(msg)
        others = sorted(p[len("stages."):-1] for p in fresh_prefixes if p.startswith("stages.") and p != "stages.rollout.")
        if others:
            notes.append(f"resume: stage state re-initialised for {', '.join(others)} (changed or new stage)")
        try:
            raw = mgr.restore(ckpt.step, args=ocp.args.Composite(**{STATE: ocp.args.StandardRestore()}))[STATE]
        except Exception as err:  # noqa: BLE001
            raise CheckpointError(f"{ckpt.path}: checkpoint is unreadable ({_one_line(err)})") from None
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
    from hephaestus.ppo import strongly_typed

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


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    first = text[0] if text else ""
    if len(first) > 160:
        first = first[:157] + "..."
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


def _network_meta(trainer) -> dict:
    """The trainer's network description (networks.NetworkSpec), as checkpoints and exports store it."""
    from hephaestus.networks import NetworkSpec

    return NetworkSpec.of(trainer.env.spec, trainer.config).to_meta()


def read_state(path: str):
    """(Checkpoint, raw restored state as nested dicts of arrays) without building a trainer (inspection)."""
    ckpt = locate(path)
    ocp = _ocp()
    mgr = _read_manager(ckpt.run_dir)
    try:
        raw = mgr.restore(ckpt.step, args=ocp.args.Composite(**{STATE: ocp.args.StandardRestore()}))[STATE]
    except Exception as err:  # noqa: BLE001
        raise CheckpointError(f"{ckpt.path}: checkpoint is unreadable ({_one_line(err)})") from None
    finally:
        mgr.close()
    return ckpt, raw


# ----------------------------------------------------------------------------------------------------------
# Resuming from the command line: checkpoint config as the defaults, explicit flags win


def args_for_resume(parser_factory: Callable, argv, ckpt: Checkpoint):
    """Re-parse `argv` with the checkpoint's config as defaults, so only flags given again change anything.

    The run continues in the checkpoint's run directory unless --run-name/--checkpoint-dir say otherwise."""
    parser = parser_factory()
    saved = dict(ckpt.config)
    defaults = {}
    for action in parser._actions:  # noqa: SLF001 - argparse has no public list of destinations
        dest = action.dest
        if dest in ("help", "resume") or dest not in saved:
            continue
        value = saved[dest]
        if dest == "extra_stages":
            value = ",".join(value or ())
        elif dest in ("num_minibatches", "update_epochs"):
            value = value if saved.get(f"user_set_{dest.split('_')[-1]}") else None
        elif isinstance(value, list):
            value = tuple(value)
        defaults[dest] = value
    # Checkpoints from before --encoder/--obs-dtype were float32 MLPs: continue them as such, not as "auto".
    defaults.setdefault("encoder", "mlp")
    defaults.setdefault("obs_dtype", "float32")
    defaults["run_name"] = os.path.basename(ckpt.run_dir)
    defaults["checkpoint_dir"] = os.path.dirname(ckpt.run_dir)
    parser.set_defaults(**defaults)
    return parser.parse_args(argv)


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
        from hephaestus import __version__

        config = self.trainer.config
        from hephaestus.sinks import json_clean

        clean = json_clean(dict(record or {}))
        return {"format": FORMAT, "version": __version__, "env": config.env, "network": self.network,
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
            self._unexported = (step, jax.device_get(runner_state.train_state.params))
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
        step, params = self._unexported
        self._unexported = None
        self._write_npz(os.path.join(self.run_dir, f"params_{step}.npz"), params, step)
        self._prune_exports(step)
        return step

    def export(self, path: str, runner_state, step: int | None = None) -> str:
        if step is None:
            step = int(jax.device_get(runner_state.update_step))
        return self._write_npz(path, jax.device_get(runner_state.train_state.params), step)

    def _write_npz(self, path: str, params, step: int) -> str:
        from hephaestus.export import save_params_npz

        config = self.trainer.config
        return save_params_npz(path, params, env=config.env, network=self.network, update=step,
                               env_steps=step * config.batch_size, config=config.to_dict(),
                               num_seeds=config.num_seeds)

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


# ----------------------------------------------------------------------------------------------------------
# Hooks for loop.run


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
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.signum, 1) if self.signum is not None else 0

    def after_chunk(self, runner_state, record) -> bool:
        if jax.process_count() > 1:  # every host must stop after the same chunk: the final save is collective
            from jax.experimental import multihost_utils

            signums = np.asarray(multihost_utils.process_allgather(np.int32(self.signum or 0)))
            if self.signum is None and signums.max() > 0:
                self.signum = int(signums.max())
        if self.signum is not None and not self._announced:
            self._announced = True
            self.message(f"{signal.Signals(self.signum).name} received: saving and exiting")
        return self.signum is not None

    def at_end(self, runner_state, record) -> None:
        pass


def _write_fd(fd: int, text: str) -> None:
    try:
        os.write(fd, text.encode())
    except OSError:
        pass


class NanGuard:
    """A non-finite loss or parameter stops the run before anything saves it (put it before the checkpoint
    hook): the last good checkpoint stays untouched."""

    METRICS = ("total_loss", "pg_loss", "vf_loss", "entropy", "approx_kl", "grad_norm")

    def after_chunk(self, runner_state, record) -> bool:
        from hephaestus.loop import TrainingError

        update = record.get("update")
        for key in self.METRICS + tuple(k for k in record if k not in self.METRICS):
            value = record.get(key)
            if isinstance(value, float) and not math.isfinite(value) and key != "eta_seconds":
                raise TrainingError(f"non-finite {key} ({value}) in the chunk ending at update {update}; "
                                    "stopped without saving this state")
        if not bool(all_finite(runner_state.train_state.params)):
            raise TrainingError(f"non-finite parameters after update {update}; stopped without saving this state")
        return False

    def at_end(self, runner_state, record) -> None:
        pass


class CheckpointHook:
    """Saves every `every_updates` updates if set, else every `every_minutes`; at the end (including a stop by
    signal); exports final_params.npz. Call `close()` when the loop is left for any reason."""

    def __init__(self, checkpointer: Checkpointer, every_updates: int = 0, every_minutes: float = 10.0,
                 message: Callable[[str], None] = print, on_saved: Callable[[str, int], None] | None = None,
                 final_export: bool = True, start_update: int = 0):
        self.ckpt = checkpointer
        self.every_updates = every_updates
        self.every_minutes = every_minutes
        self.message = message
        self.on_saved = on_saved  # (step dir, update) once the save is complete, e.g. to upload an artifact
        self.final_export = final_export
        self.last_update = start_update  # update of the last save (or where this run started)
        self.last_time = time.monotonic()
        self._pending = None  # (path, update) of an async save not yet reported to on_saved

    def _save(self, runner_state, record, final=False):
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
            self.message(f"checkpoint: saving {path}" + (" (final)" if final else ""))
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
                self.message(f"wandb: could not log checkpoint {update} as an artifact ({_one_line(err)})")

    def after_chunk(self, runner_state, record) -> bool:
        if self._pending is not None and not self.ckpt.saving():  # finished (or failed) in the background
            self._flush_pending()
        if self.every_updates:
            due = record["update"] - self.last_update >= self.every_updates
        else:
            due = time.monotonic() - self.last_time >= self.every_minutes * 60
        if due:
            self._save(runner_state, record)
        return False

    def at_end(self, runner_state, record) -> None:
        path = self._save(runner_state, record, final=True)
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
            self.message(f"checkpoint: the last save did not complete ({_one_line(err)}); earlier ones are intact")


def _save_failed(update: int, err: BaseException, run_dir: str):
    from hephaestus.loop import TrainingError

    kept = "earlier checkpoints are intact" if os.path.isdir(run_dir) else f"the run folder {run_dir} is gone"
    return TrainingError(f"saving the checkpoint at update {update} failed ({_one_line(err)}); {kept}")


# ----------------------------------------------------------------------------------------------------------
# metrics.jsonl on resume


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


# ----------------------------------------------------------------------------------------------------------
# Wiring for train.py: everything a run needs for checkpoints, resume and the extra sinks


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


def prepare_run(config, trainer, run_dir: str, resume: Checkpoint | None = None, main_process: bool = True,
                message: Callable[[str], None] = print) -> RunSession:
    """Restore (if resuming) into `trainer.runner_state`, and build the checkpoint/NaN/signal hooks and the
    wandb/TensorBoard sinks. Raises CheckpointError (one line) before anything is written on disk."""
    run_dir = os.path.abspath(run_dir)
    existing = _step_dirs(run_dir)
    if resume is not None:
        same_dir = os.path.abspath(resume.run_dir) == run_dir
        if same_dir and existing and resume.step < existing[-1]:
            raise CheckpointError(f"{resume.path}: update {resume.step} is older than this run's latest checkpoint "
                                  f"({existing[-1]}); pass --run-name NEW to branch from it without touching "
                                  f"{run_dir}")
        if not same_dir and existing:
            raise CheckpointError(f"{run_dir} already has checkpoints (latest update {existing[-1]}); choose another "
                                  "--run-name to branch into")
        restored = restore(resume, trainer, keep_optimizer=config.keep_optimizer)
        trainer.runner_state = restored.runner_state
        for note in restored.notes:
            message(note)
    elif existing:
        raise CheckpointError(f"{run_dir} already has checkpoints (latest update {existing[-1]}); continue it with "
                              f"--resume {run_dir}, or pick another --run-name")
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

    from hephaestus.sinks import TensorBoardSink, WandbSink, wandb_mode

    sinks = []
    wandb_sink = None
    if main_process:
        mode = wandb_mode(config)
        if mode is not None:
            try:
                wandb_sink = WandbSink(config, run_dir, mode=mode, skip_until=last_logged, message=message,
                                       artifacts=config.wandb_artifacts)
                sinks.append(wandb_sink)
            except Exception as err:  # noqa: BLE001 - logging must never cost the run
                message(f"wandb: could not start ({_one_line(err)}); continuing without wandb")
        if config.tensorboard_dir:
            try:
                sinks.append(TensorBoardSink(config.tensorboard_dir, purge_step=start + 1 if resume else None))
            except (OSError, ImportError) as err:
                for sink in sinks:
                    sink.close()
                why = "tensorboardX is not installed (pip install tensorboardX)" if isinstance(err, ImportError) \
                    else f"cannot write TensorBoard files to {config.tensorboard_dir}: {err.strerror or err}"
                raise CheckpointError(why) from None

    try:
        checkpointer = Checkpointer(run_dir, trainer, keep=config.keep_checkpoints, export_params=main_process,
                                    message=message)
    except OSError as err:
        for sink in sinks:
            sink.close()
        raise CheckpointError(f"cannot write checkpoints to {run_dir}: {err.strerror or err}") from None
    stop = StopSignals(message=message).install()
    hook = CheckpointHook(checkpointer, every_updates=config.save_interval,
                          every_minutes=config.save_interval_minutes, message=message,
                          on_saved=wandb_sink.log_checkpoint if wandb_sink is not None else None,
                          final_export=main_process, start_update=start)
    return RunSession(hooks=[stop, NanGuard(), hook], sinks=sinks, stop=stop, checkpoint_hook=hook,
                      run_dir=run_dir, resumed_from=resume)
