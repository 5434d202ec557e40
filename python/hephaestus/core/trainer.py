"""What `make_train` (ppo.py) returns: one run's compiled chunk, its stage list, and the ways to make fresh agents
for it (a single seed, --num-seeds S stacked agents, or a sweep's agents with their own hyperparameters)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from hephaestus.config.train_config import TrainConfig
from hephaestus.core.distributed import Sharder
from hephaestus.envs.adapters import AdaptedEnv
from hephaestus.core.runner_state import RunnerState, initial_hyper, strongly_typed


# Ahead-of-time chunk compiles still running (Trainer.compile_ahead). A process must not end while one is inside
# XLA (the interpreter's shutdown aborts it: SIGABRT): train.py joins them, or ends at once with os._exit.
_COMPILES: set = set()


def compiles_in_flight() -> list[threading.Thread]:
    return [thread for thread in list(_COMPILES) if thread.is_alive()]


@dataclass
class Trainer:
    config: TrainConfig
    env: AdaptedEnv
    network: Any
    pipeline: list
    compiled_chunk: Callable  # the jitted (runner_state, num_updates) -> ..., for AOT lowering and benchmarks
    fresh_runner_state: Callable  # the jitted (key, hyper) -> runner state it places, for AOT lowering
    sharder: Sharder  # the sharding rules; `sharder.place(runner)` puts a restored state on the mesh
    context: Any = None  # the ppo.PPOContext the stage functions were built with
    runner_state: RunnerState | None = None  # the fresh state of the run's agents (config.run.seed) unless given
    # The env evaluations play: the env's defaults, where --env-params changed the training env (a curriculum, a
    # reward coefficient), so that runs with different env parameters are scored on the same game; else `env`.
    eval_env: AdaptedEnv | None = None
    # Compile the chunk in a background thread while the fresh state is built (train.py asks for it): the
    # compile needs only the state's shapes, and on a cold HackMatrix start it is the longest step.
    compile_ahead: bool = False
    # Where the run's chunk and fresh-agent program are exported to and read back from (stored_programs.py): a
    # warm start then traces neither. None: both run from the jitted functions, as tests and benchmarks do.
    programs: Any = None
    # The optimizer the fresh program's TrainState holds: a stored fresh program's tree gets it back (with the
    # network's apply function) in place of what no file can hold.
    optimizer: Any = None

    def __post_init__(self):
        if self.eval_env is None:
            self.eval_env = self.env
        self._ahead = None
        self._stored_fresh = None
        if self.compile_ahead:
            self._ahead = self._start_compiling(self.config.run.log_interval)
        if self.runner_state is None:
            self.runner_state = self.init_runner_state(self.config.run.seed)

    def evaluator(self, episodes: int, max_steps: int, sampled: bool = False, batch: int = 0):
        """The evaluation of the run's agents (evaluation.Evaluator on `eval_env`, every --num-seeds agent at
        once): its program is stored beside the chunk's where the run stores programs, so a warm start does not
        trace it again either. The loop's periodic evaluations and the final one both come from here. The stored
        program's key names the agent as evaluate.py does (the env's name: evaluations play its defaults; the
        network's metadata, from which `self.network` is built), so evaluate.py on this run's agent reads it too."""
        import os

        from hephaestus.core.evaluation import Evaluator
        from hephaestus.core.export import network_meta

        stored = self.programs is not None
        return Evaluator(self.eval_env, self.network, episodes, max_steps, sampled, batch=batch,
                         num_seeds=self.config.run.num_seeds,
                         cache_dir=os.path.dirname(self.programs.directory) if stored else None,
                         agent={"env": self.eval_env.spec.name, "network": network_meta(self.env.spec, self.config)}
                         if stored else None)

    def eval_instance(self, runner_state: RunnerState):
        """What the run's envs share and an evaluation must play (`env.instance_of`: DeepSea's action map), read
        from `runner_state`'s rollout, one per --num-seeds agent ([S, ...]); None for envs without an instance."""
        if self.eval_env.set_instance is None or self.env.instance_of is None:
            return None
        env_state = runner_state.stages["rollout"].env_state
        of = jax.vmap(self.env.instance_of) if self.config.run.num_seeds > 1 else self.env.instance_of
        return jax.device_get(of(env_state))

    def fresh_state_shapes(self) -> RunnerState:
        """The shapes, dtypes and shardings of the run's fresh runner state, without building it (strongly typed,
        as `init_agents` makes it and a checkpoint restores it)."""
        seeds = list(range(self.config.run.num_seeds))  # only their count shapes the state
        key, hyper = jax.eval_shape(lambda: self.agent_inputs(seeds))
        stored = self.stored_fresh(key, hyper)
        shapes = stored.shapes() if stored is not None else jax.eval_shape(self.fresh_runner_state, key, hyper)
        shardings = self.sharder.runner_shardings(shapes) if self.sharder.active else jax.tree.map(lambda _: None,
                                                                                                   shapes)
        return jax.tree.map(lambda x, sharding: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), shapes,
                            shardings)

    def _start_compiling(self, num_updates: int):
        """A thread lowering and compiling the chunk for `fresh_state_shapes()`; its result (or error) is picked up
        by `chunk_executable`."""
        shapes = self.fresh_state_shapes()  # traced here, in the caller's thread: reused by the fresh state's call
        result: dict = {"shapes": shapes}

        def compile_chunk():
            try:
                result["executable"] = self.compile_chunk(shapes, num_updates)
            except BaseException as err:  # noqa: BLE001 (re-raised in the caller's thread)
                result["error"] = err

        thread = threading.Thread(target=compile_chunk, name="compile-chunk", daemon=True)
        _COMPILES.add(thread)
        thread.start()
        result["thread"] = thread
        return result

    def chunk_executable(self, runner: RunnerState, num_updates: int):
        """The compiled chunk for `runner` (chunks of up to `num_updates`): the one compiled ahead when it was
        compiled for these shapes and this length, else compiled now. An error of the ahead compile (out of
        memory) is raised here."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and num_updates == self.config.run.log_interval:
            ahead["thread"].join()
            _COMPILES.discard(ahead["thread"])
            if "error" in ahead:
                raise ahead["error"]
            def same(a, b):  # b: the runner's leaf; a sharding-less shape means one device
                return (a.shape == b.shape and a.dtype == b.dtype and not getattr(b, "weak_type", False)
                        and (a.sharding is None or b.sharding.is_equivalent_to(a.sharding, len(a.shape))))

            if jax.tree.structure(ahead["shapes"]) == jax.tree.structure(runner) and all(
                    jax.tree.leaves(jax.tree.map(same, ahead["shapes"], runner))):
                return ahead["executable"]
        return self.compile_chunk(runner, num_updates)

    def compile_chunk(self, runner, num_updates: int):
        """The chunk compiled for `runner`'s shapes (arrays or ShapeDtypeStructs): through the stored export where
        the run has a program store, else `compiled_chunk.lower(...).compile()`."""
        if self.programs is not None:
            return self.programs.compile_chunk(self.compiled_chunk, runner, num_updates)
        return self.compiled_chunk.lower(runner, np.int32(num_updates)).compile()

    @property
    def mesh(self):  # jax.sharding.Mesh over the `data` axis, or None with one device (distributed.py)
        return self.sharder.mesh

    def __iter__(self):  # `runner_state, train_chunk = make_train(config)`
        return iter((self.runner_state, self.train_chunk))

    def train_chunk(self, runner: RunnerState, num_updates: int | None = None):
        """(runner_state, num_updates=log_interval) -> (runner_state, metrics[log_interval]). The chunk donates
        its input."""
        n = self.config.run.log_interval if num_updates is None else num_updates
        if not 0 < n <= self.config.run.log_interval:
            raise ValueError(f"a chunk runs 1..{self.config.run.log_interval} updates, not {n}")
        return self.compiled_chunk(runner, jnp.int32(n))

    def agent_inputs(self, seeds, hypers=None):
        """(key, hyper): what `fresh_runner_state` builds agents from. Agent i's key is PRNGKey(seeds[i]) (the key
        of a single run with that seed); its data hyperparameters are the config's, overridden by `hypers[i]` (a
        dict, e.g. a sweep point; default none). With --num-seeds 1 neither has a seed axis. The one place these
        shapes are made: `fresh_state_shapes` traces it, `init_agents` runs it."""
        num_seeds = self.config.run.num_seeds
        hypers = list(hypers) if hypers is not None else [{}] * len(seeds)
        if len(seeds) != num_seeds or len(hypers) != num_seeds:
            raise ValueError(f"{len(seeds)} seeds and {len(hypers)} hyperparameter sets for {num_seeds} agents")
        rows = [initial_hyper(self.config, **h) for h in hypers]
        if num_seeds == 1:
            return jax.random.PRNGKey(seeds[0]), {k: jnp.float32(v) for k, v in rows[0].items()}
        key = jnp.stack([jax.random.PRNGKey(s) for s in seeds])
        return key, {k: jnp.asarray([r[k] for r in rows], jnp.float32) for k in rows[0]}

    def init_agents(self, seeds, hypers=None) -> RunnerState:
        """The fresh state of `num_seeds` agents (`agent_inputs`), placed on the mesh. With --num-seeds 1 the state
        has no seed axis."""
        key, hyper = self.agent_inputs(seeds, hypers)
        fresh = self.stored_fresh(key, hyper) or self.fresh_runner_state
        return self.sharder.place(strongly_typed(fresh(key, hyper)))

    def stored_fresh(self, key, hyper):
        """The fresh-agent program through its stored export (stored_programs.py) for inputs shaped like `key` and
        `hyper`, read back or exported on first use; None without a program store or where exporting fails."""
        if self.programs is None or self._stored_fresh is False:  # none, or exporting it failed once
            return None
        if self._stored_fresh is None or not self._stored_fresh.fits(key, hyper):
            live = {"optimizer": self.optimizer, "apply_fn": self.network.apply}
            self._stored_fresh = self.programs.fresh_program(self.fresh_runner_state, key, hyper, live) or False
        return self._stored_fresh or None

    def init_runner_state(self, seed: int) -> RunnerState:
        """The fresh state of the run's agents: one agent seeded `seed`, or with --num-seeds S agents seeded
        seed, seed+1, ..., seed+S-1 stacked on a leading axis (agent i's key is PRNGKey(seed + i), the key of a
        single-seed run with that seed)."""
        return self.init_agents([seed + i for i in range(self.config.run.num_seeds)])
