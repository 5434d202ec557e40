"""Data parallelism over devices and hosts (specs/distributed.md).

One mesh axis, `data`, over every device of every host. The environment batch and everything derived from it
(env states, observations, the rollout, advantages, minibatches) is split along it; parameters, optimizer state,
the PRNG key and counters are replicated. A stage's own state is laid out as the stage declares
(`Stage.partition`: per leaf, split with the envs or replicated), never guessed from its shape. The compiled
program keeps the *global* view (every stage sees `[num_steps, num_envs]` arrays) and GSPMD partitions it: the
mesh axis is `AxisType.Auto` and the layout is pinned with sharding constraints at stage boundaries (`Sharder`).
The PPO update shuffles within each device's shard, so env data never crosses devices; the gradient of the
global minibatch mean becomes one all-reduce.

With one device (`mesh is None`) none of this runs: the single-device program is unchanged.

Multi-host: `initialize()` calls `jax.distributed.initialize()` when asked (`--distributed`) or on a TPU pod
slice; every host then runs the same program over its local devices. Each host computes the same initial
runner state from the seed and builds the global arrays from the slices its own devices hold (`place`), so
no host ever needs another host's data. Only process 0 prints, logs and exports (`is_main_process`).
"""

from __future__ import annotations

import os
from typing import Any

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

DATA = "data"


# ---------------------------------------------------------------------------------------------------
# Processes


def tpu_pod_detected(environ=None) -> bool:
    """True on a multi-host TPU slice: TPU VMs list every worker of the slice in TPU_WORKER_HOSTNAMES
    (one name on a single-host VM); multislice jobs set MEGASCALE_COORDINATOR_ADDRESS."""
    environ = os.environ if environ is None else environ
    hosts = [h for h in environ.get("TPU_WORKER_HOSTNAMES", "").split(",") if h.strip()]
    return len(hosts) > 1 or bool(environ.get("MEGASCALE_COORDINATOR_ADDRESS"))


def initialize(requested: bool = False) -> bool:
    """Call `jax.distributed.initialize()` (cluster auto-detection) if `requested` or on a TPU pod slice.
    Must run before anything touches a device. Returns whether this is a multi-process run."""
    if jax.distributed.is_initialized():
        return jax.process_count() > 1
    if requested or tpu_pod_detected():
        jax.distributed.initialize()
    return jax.process_count() > 1


def is_main_process() -> bool:
    """Process 0 prints, writes metrics and the npz export; checkpoint saves are collective (every process)."""
    return jax.process_index() == 0


# ---------------------------------------------------------------------------------------------------
# The mesh


def device_count(config) -> int:
    """Devices the run uses: `config.run.num_devices` (0 = all devices of all hosts)."""
    requested = config.run.num_devices
    available = jax.device_count()
    if requested > available:
        raise ValueError(f"--num-devices {requested} asks for more devices than the {available} available")
    if requested and jax.process_count() > 1 and requested != available:
        raise ValueError(f"--num-devices must be 0 (all) in a multi-host run, got {requested} of {available}")
    return requested or available


def check_divisible(config, num_devices: int) -> None:
    """One-line errors, raised before anything compiles."""
    if num_devices <= 1:
        return
    if config.env.num_envs % num_devices:
        options = sorted({m for m in ((config.env.num_envs // num_devices) * num_devices,
                                      (config.env.num_envs // num_devices + 1) * num_devices) if m > 0})
        raise ValueError(f"--num-envs {config.env.num_envs} must divide by the {num_devices} devices "
                         f"(try {' or '.join(map(str, options))}, or --num-devices)")
    per_device = config.batch_size // num_devices
    if per_device % config.ppo.num_minibatches:
        raise ValueError(f"per-device batch {config.env.num_envs // num_devices} envs x {config.env.num_steps} steps = "
                         f"{per_device:,} does not divide into {config.ppo.num_minibatches} minibatches")
    if config.network.recurrent != "none" and (config.env.num_envs // num_devices) % config.ppo.num_minibatches:
        raise ValueError(f"--recurrent {config.network.recurrent}: the {config.env.num_envs // num_devices} envs per "
                         f"device do not divide into {config.ppo.num_minibatches} minibatches of whole env sequences")


def make_mesh(num_devices: int | None = None) -> Mesh:
    """A 1-D `data` mesh. Auto axis type: the program is written for global arrays and GSPMD propagates the
    shardings we pin with constraints (Explicit sharding-in-types would need every op annotated)."""
    n = num_devices or jax.device_count()
    devices = jax.devices()[:n] if n < jax.device_count() else None
    return jax.make_mesh((n,), (DATA,), axis_types=(AxisType.Auto,), devices=devices)


def mesh_for(config) -> Mesh | None:
    """The run's mesh, or None for one device (then nothing is sharded and the program is unchanged)."""
    n = device_count(config)
    check_divisible(config, n)
    return make_mesh(n) if n > 1 else None


# ---------------------------------------------------------------------------------------------------
# What is sharded


class Sharder:
    """Sharding rules for one run. Every method is the identity when `mesh is None`.

    Stage states are laid out as their stage declares (`Stage.partition`, stages.py: `partitions` maps a stage
    name to its declaration; stages not named are replicated): ENVS leaves split over `data` along their leading
    (env) axis, the rest replicated. The train state, key, counters and hyperparameters are replicated. Batch
    leaves (stages.BATCH_KEYS: [T, N, ...], and [N] `last_value`) are split along the env axis."""

    def __init__(self, mesh: Mesh | None, num_envs: int, num_steps: int, num_seeds: int = 1,
                 partitions: dict | None = None):
        self.mesh, self.num_envs, self.num_steps = mesh, num_envs, num_steps
        self.num_devices = 1 if mesh is None else mesh.size
        # --num-seeds S > 1: runner-state leaves have a leading [S] seed axis, replicated (every device holds its
        # share of every seed's envs). Inside the vmapped update the per-seed rules below apply unchanged.
        self.seed_axis = num_seeds > 1
        self.partitions = dict(partitions or {})

    @property
    def active(self) -> bool:
        return self.mesh is not None

    def named(self, *spec) -> NamedSharding:
        return NamedSharding(self.mesh, P(*spec))

    # -- rules ------------------------------------------------------------------------------------
    def batch_spec(self, shape) -> tuple:
        """Batch leaves: [T, N, ...] -> P(None, data), then [N, ...] (e.g. last_value) -> P(data); else ()."""
        if len(shape) >= 2 and shape[0] == self.num_steps and shape[1] == self.num_envs:
            return (None, DATA)
        return (DATA,) if len(shape) >= 1 and shape[0] == self.num_envs else ()

    def state_specs(self, name: str, state, seed_axis: bool = False):
        """PartitionSpec per leaf of stage `name`'s state, as its `Stage.partition` declares. `seed_axis`:
        the leaves carry a leading (replicated) seed axis before the env axis."""
        from hephaestus.core.stages import ENVS, REPLICATED

        lead = (None,) if seed_axis else ()

        def leaf(part, x):
            if part == REPLICATED:
                return P()
            shape = np.shape(x)
            if part != ENVS or len(shape) <= len(lead) or shape[len(lead)] != self.num_envs:
                raise ValueError(f"stage {name!r} declares {part!r} for a leaf shaped {shape}: expected "
                                 f"{ENVS!r} (leading axis num_envs = {self.num_envs}) or {REPLICATED!r}")
            return P(*lead, DATA)

        return jax.tree.map(lambda part, sub: jax.tree.map(lambda x: leaf(part, x), sub),
                            self.partitions.get(name, REPLICATED), state)

    def runner_shardings(self, runner) -> Any:
        """NamedSharding per leaf of a RunnerState: stage states as declared (`state_specs`), everything else
        replicated. With several seeds the env axis is the second one, after the replicated seed axis."""
        replicated = self.named()
        shardings = jax.tree.map(lambda _: replicated, runner)
        stage_shardings = {name: jax.tree.map(lambda spec: NamedSharding(self.mesh, spec),
                                              self.state_specs(name, state, self.seed_axis))
                           for name, state in runner.stages.items()}
        return shardings.replace(stages=stage_shardings)

    # -- placing and constraining -------------------------------------------------------------------
    def place(self, runner):
        """Put a runner state (host or single-device arrays) on the mesh. Multi-host safe: each process holds
        the same full value (computed from the seed or read from a checkpoint) and contributes the slices
        that its own devices hold."""
        if not self.active:
            return runner
        shardings = self.runner_shardings(runner)

        def put(x, sharding):
            if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
                return jax.device_put(x, sharding)  # typed keys have no numpy form (single-process path)
            if isinstance(x, jax.Array) and not x.is_fully_addressable:  # already global (e.g. orbax restore)
                return x if x.sharding.is_equivalent_to(sharding, x.ndim) else jax.device_put(x, sharding)
            host = np.asarray(jax.device_get(x))
            return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

        return jax.tree.map(put, runner, shardings)

    def constrain_runner(self, runner):
        if not self.active:
            return runner
        return jax.lax.with_sharding_constraint(runner, self.runner_shardings(runner))

    def constrain_state(self, name: str, state):
        """Pin one agent's state of stage `name` (no seed axis: inside the update) to its declared layout."""
        if not self.active:
            return state
        return jax.tree.map(lambda x, spec: jax.lax.with_sharding_constraint(x, NamedSharding(self.mesh, spec)),
                            state, self.state_specs(name, state))

    def constrain_envs(self, tree):
        """Pin every leaf of `tree` (each has a leading env axis [N, ...], e.g. a transition) to the env split."""
        return self.constrain(tree, DATA)

    def constrain_batch(self, tree):
        """Pin batch leaves shaped [T, N, ...] or [N, ...] to the env split; leave others to the compiler."""
        if not self.active:
            return tree

        def pin(x):
            spec = self.batch_spec(np.shape(x))
            return jax.lax.with_sharding_constraint(x, self.named(*spec)) if spec else x

        return jax.tree.map(pin, tree)

    def per_device(self, fn):
        """Run `fn` (a vmapped env step: every argument and output has a leading env axis) on each device's
        own envs with `jax.shard_map`, so the env code is compiled as single-device code and never
        communicates (GSPMD propagation through env internals can otherwise insert small gathers)."""
        if not self.active:
            return fn
        return jax.shard_map(fn, mesh=self.mesh, in_specs=P(DATA), out_specs=P(DATA), check_vma=False)

    def constrain(self, tree, *spec):
        if not self.active:
            return tree
        return jax.lax.with_sharding_constraint(tree, self.named(*spec))

    def replicate(self, tree):
        return self.constrain(tree)


def describe(mesh: Mesh | None, num_envs: int) -> str:
    """One console line about the layout."""
    if mesh is None:
        return f"devices: 1 ({jax.devices()[0].platform})"
    return (f"devices: {mesh.size} over {jax.process_count()} host(s) ({mesh.devices.flat[0].platform}), "
            f"{num_envs // mesh.size} envs per device")
