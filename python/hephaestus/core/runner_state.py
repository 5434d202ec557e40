"""What one agent carries from update to update (`RunnerState`), and how a fresh one is made.

The PPO code (ppo.py) reads and writes a `RunnerState`; checkpoints save and restore it whole. The optimizer
keeps the learning rate and the clip norm in its *state* (optax.inject_hyperparams) and the data hyperparameters
live in `RunnerState.hyper`, so runs that differ only in those values share one compiled program.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct
from flax.training.train_state import TrainState

from hephaestus.config.train_config import DATA_HYPERPARAMETERS, TrainConfig
from hephaestus.core.networks import init_params


@struct.dataclass
class RunnerState:
    train_state: TrainState
    stages: dict  # stage name -> that stage's own state
    key: jax.Array
    update_step: jax.Array  # int32[], PPO updates done so far
    hyper: dict  # float32 scalars kept as data (DATA_HYPERPARAMETERS, anneal horizon), not baked into the program


# With --num-seeds S > 1 every leaf of the runner state carries a leading [S] seed axis except the update counter:
# the agents step in lockstep, so one scalar counts for all (checkpoints, the loop and the schedule read it).
SEED_AXES = RunnerState(train_state=0, stages=0, key=0, update_step=None, hyper=0)


def strongly_typed(tree):
    """Every leaf as its own strongly typed device array. A restored checkpoint is always strongly typed;
    starting that way means a resumed run reuses the compiled program. Fresh buffers per leaf also keep
    donation valid where initialisers returned one shared buffer for several leaves (e.g. Adam's zeros).
    `device_put`, not `jnp.asarray`: in jax 0.10 the latter compiles a copy program per leaf shape (~60 small
    compiles, about 1 s of a warm HackMatrix start; specs/speed.md)."""
    return jax.tree.map(lambda x: jax.device_put(np.array(x)), tree)


def make_optimizer(config: TrainConfig):
    # inject_hyperparams keeps the learning rate and the clip norm in the optimizer *state*, so runs that differ
    # only in --lr or --max-grad-norm share one compiled program (and the persistent compilation cache).
    def chain(learning_rate, max_grad_norm):
        return optax.chain(optax.clip_by_global_norm(max_grad_norm), optax.adam(learning_rate, eps=1e-5))

    return optax.inject_hyperparams(chain)(learning_rate=config.ppo.lr, max_grad_norm=config.ppo.max_grad_norm)


def with_optimizer_hyperparams(train_state: TrainState, lr: jax.Array, max_grad_norm: jax.Array) -> TrainState:
    """`train_state` whose optimizer (optax.inject_hyperparams) steps with `lr` and clips at `max_grad_norm`."""
    opt_state = train_state.opt_state
    hyperparams = {**opt_state.hyperparams, "learning_rate": lr, "max_grad_norm": max_grad_norm}
    return train_state.replace(opt_state=opt_state._replace(hyperparams=hyperparams))


def initial_hyper(config: TrainConfig, **overrides) -> dict:
    """An agent's `RunnerState.hyper`: the data hyperparameters (config values, or `overrides`) and the anneal
    horizon, as Python floats (the caller makes them float32 arrays)."""
    unknown = set(overrides) - set(DATA_HYPERPARAMETERS)
    if unknown:
        raise ValueError(f"not data hyperparameters: {', '.join(sorted(unknown))}")
    hyper = {name: float(getattr(config.ppo, name)) for name in DATA_HYPERPARAMETERS if name != "ent_coef_final"}
    hyper.update({k: float(v) for k, v in overrides.items()})
    # No --ent-coef-final: the bonus stays at this agent's own ent_coef (a sweep point's, where it sets one).
    final = overrides.get("ent_coef_final", config.ppo.ent_coef_final)
    hyper["ent_coef_final"] = hyper["ent_coef"] if final is None else float(final)
    hyper["num_updates"] = float(config.num_updates)
    return hyper


def fresh_agent(network: Any, tx, pipeline: list, obs_dim: int, key: jax.Array, hyper: dict) -> RunnerState:
    """One agent's initial state: network and optimizer, every stage's `init`, the key it goes on with. The
    optimizer's initial learning rate and clip norm are replaced by `hyper`'s (data, not constants)."""
    key, key_net, *stage_keys = jax.random.split(key, len(pipeline) + 2)
    params = init_params(network, key_net, obs_dim)
    train_state = with_optimizer_hyperparams(TrainState.create(apply_fn=network.apply, params=params, tx=tx),
                                             hyper["lr"], hyper["max_grad_norm"])
    stages = {s.name: s.init(k) for s, k in zip(pipeline, stage_keys)}
    return RunnerState(train_state=train_state, stages=stages, key=key, update_step=jnp.int32(0), hyper=hyper)


def fresh_agents(fresh, keys: jax.Array, hyper: dict) -> RunnerState:
    """S agents' initial states stacked on a leading axis (SEED_AXES): `fresh(key, hyper)` for each row of `keys`
    and `hyper`, one agent after another (`lax.map`), not `vmap`. A vmapped flax orthogonal initialiser becomes a
    *batched* LAPACK QR, which jaxlib's CPU backend splits over XLA's intra-op pool while blocking a pool thread;
    with several such QRs ready at once on a 2-core machine every pool thread waits and the program never ends
    (specs/pipeline.md, "Start-up"). Made one agent at a time, every QR is unbatched; agent i's state is also
    exactly the state of a single run with key i (same ops, not their batched forms). Start-up only: the cost is
    S small programs' worth of init, not anything per update."""
    stacked = jax.lax.map(lambda row: fresh(*row), (keys, hyper))
    return stacked.replace(update_step=stacked.update_step[0])  # one counter for all agents (SEED_AXES)

