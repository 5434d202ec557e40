"""Evaluation episodes: K complete episodes with given parameters, as their own compiled program.

`make_evaluator(env, network, episodes, max_steps)` returns a jitted pure function `(params, key, policy) ->
per-episode arrays`: K envs step in parallel (`vmap` of the adapter's step), each runs one episode from its reset
to its end or to `max_steps`, inside one `lax.while_loop` that stops when every episode has ended. A lane whose
episode ended keeps stepping (the adapter auto-resets it) but nothing it does is counted. Nothing depends on
Python state, so the function can later be vmapped over seeds' parameters and keys.

Policies: `greedy` (argmax over the valid actions, or the Gaussian mean), `sampled` (the training policy),
`random` (masked-uniform over the valid actions, or uniform in the action bounds; `params` unused), all through
`networks.act` (a recurrent network's `act_carried`: its state starts at zeros at each game's reset and goes on
through the game). The policy is an argument of the one compiled program, not a program of its own. `scripted`: one
of the env's scripted baselines (`AdaptedEnv.scripted_policies`, which read the env's state), in a program of its
own without a network (`evaluate.py --scripted NAME`).

`summarise(out, stats, prefix)` reduces the arrays on the host to `<prefix>return_mean/_std/_min/_max`,
`<prefix>length_mean`, `<prefix>episodes`, `<prefix>capped_rate` (episodes cut by `max_steps`; their return,
length and statistics are those of the part played) and every declared episode statistic
(episode_stats.summarise: e.g. `eval/stage_reached>=2`, `eval/victory_rate`, `eval/siphons_per_episode`).

`Evaluator` compiles that program once and runs the policies a caller asks for in batches, for one agent or a --num-seeds
stack of them. The training loop runs it every `--eval-every` updates (loop.py), train.py once at the end of a
run (`final_evaluation`, eval.json), and `scripts/evaluate.py` for any saved agent (evaluate_agent.py).
`GameKeys` gives one game's keys of such an evaluation, so `watch_agent.py --eval-game` can replay it.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np

POLICIES = ("greedy", "sampled", "random")  # the branches of one program, in its `policy` argument's order
SCRIPTED = "scripted"  # an env's scripted baseline: a program of its own (make_evaluator's `scripted`)
PREFIXES = {"greedy": "eval/", "sampled": "eval_sampled/", "random": "eval/", SCRIPTED: "eval/"}  # metric prefix
EVAL_JSON = "eval.json"


def policy_index(policy: str):
    """The `policy` argument of `make_evaluator`'s program for a policy's name (unused by a scripted program)."""
    if policy == SCRIPTED:
        return np.int32(0)
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
    return np.int32(POLICIES.index(policy))


def make_evaluator(env, network, episodes: int, max_steps: int, scripted=None):
    """The jitted `(params, key, policy, instance=None) -> {"return", "length", "finished", "stats": {name: ...}}`,
    arrays of [episodes]. `instance`: what the trained run's envs shared (`env.instance_of`, DeepSea: its action
    map), set on every game's state after the reset; None plays the env's default instance (for DeepSea a map no
    run trained on). `policy` (`policy_index(name)`) is data, not part of the program: one compile serves an agent's
    greedy, sampled and random episodes (a HackMatrix evaluation program takes seconds to trace and a minute to
    compile cold), and a `lax.switch` runs only the chosen policy's branch. Without a `network` (None) every
    policy is the random one, or the `scripted` one (a function `(env_state, action_mask, key) -> action`, one of
    `env.scripted_policies`) where that is given."""
    import jax
    import jax.numpy as jnp

    from hephaestus.envs import episode_stats
    from hephaestus.core import networks as nets

    if episodes < 1 or max_steps < 1:
        raise ValueError(f"evaluation needs at least 1 episode and 1 step (got {episodes}, {max_steps})")
    spec = env.spec
    stats = spec.episode_stats
    v_reset, v_step = jax.vmap(env.reset), jax.vmap(env.step)

    if scripted is not None and network is not None:
        raise ValueError("a scripted policy plays without a network")

    def choose(params, carry, first, env_state, obs, mask, key, policy):
        """(the policy's next carry, the actions): a recurrent network's carry goes on, else it is None."""
        def random(_):
            return carry, nets.random_action(key, mask, spec.discrete, spec.action_low, spec.action_high)

        if scripted is not None:
            return carry, jax.vmap(scripted)(env_state, mask, jax.random.split(key, mask.shape[0]))
        if network is None:
            return random(None)

        def policy_branch(greedy):
            def branch(_):
                next_carry, acted = nets.act_carried(network, params, carry, obs, first, mask, key, greedy=greedy)
                return next_carry, acted[0]
            return branch

        return jax.lax.switch(policy, [policy_branch(True), policy_branch(False), random], None)  # in POLICIES order

    def run(params, key, policy, instance=None):  # keys: game_reset_keys, game_step_keys (GameKeys replays one lane's)
        reset_keys, key = game_reset_keys(key, episodes)
        env_state, first = v_reset(reset_keys)
        if instance is not None:  # the trained run's instance (DeepSea: its action map), not the env's default
            env_state = env.set_instance(env_state, instance)
        # --recurrent: each game's policy state, zeros at its reset (a game is one episode: no other reset counts)
        policy_carry = None if network is None else nets.initial_carry(network, (episodes,))
        carry = {"env_state": env_state, "obs": first.obs, "mask": first.action_mask, "key": key,
                 "policy_carry": policy_carry,
                 "t": jnp.int32(0), "active": jnp.ones((episodes,), bool), "finished": jnp.zeros((episodes,), bool),
                 "return": jnp.zeros((episodes,), jnp.float32), "length": jnp.zeros((episodes,), jnp.int32),
                 "stats": episode_stats.zeros(stats, (episodes,), jnp)}

        def cond(c):
            return (c["t"] < max_steps) & jnp.any(c["active"])

        def body(c):
            key, key_act, env_keys = game_step_keys(c["key"], episodes)
            policy_carry, action = choose(params, c["policy_carry"], c["t"] == 0, c["env_state"], c["obs"], c["mask"],
                                          key_act, policy)
            env_state, step = v_step(env_keys, c["env_state"], action)
            active = c["active"]
            done = jnp.logical_or(step.terminated, step.truncated)
            ran = episode_stats.accumulate(stats, c["stats"], step.info.get("episode_stats", {}), jnp)
            return {"env_state": env_state, "obs": step.obs, "mask": step.action_mask, "key": key,
                    "policy_carry": policy_carry,
                    "t": c["t"] + 1, "active": active & ~done, "finished": c["finished"] | (active & done),
                    "return": c["return"] + jnp.where(active, step.reward, 0.0),
                    "length": c["length"] + active.astype(jnp.int32),
                    "stats": {k: jnp.where(active, ran[k], c["stats"][k]) for k in ran}}

        c = jax.lax.while_loop(cond, body, carry)
        return {"return": c["return"], "length": c["length"], "finished": c["finished"], "stats": c["stats"]}

    return jax.jit(run)


def game_reset_keys(key, episodes: int):
    """(one reset key per game [episodes], the run's key after it): the start of `make_evaluator`'s run."""
    import jax

    key_reset, key = jax.random.split(key)
    return jax.random.split(key_reset, episodes), key


def game_step_keys(key, episodes: int):
    """(the run's next key, the policy's key, one env key per game [episodes]) of one step of that run."""
    import jax

    key, key_act, key_env = jax.random.split(key, 3)
    return key, key_act, jax.random.split(key_env, episodes)


class GameKeys:
    """The keys of game `game` (0-based, as `evaluate.py --json` lists its games) of the greedy games that
    `Evaluator` played from `PRNGKey(seed)` (evaluate.py --seed), `batch` at a time (its --batch-size, else its
    --episodes), one at a time for `watch_agent.py --eval-game` (`reset()`, then `step()` per step, as
    watch.WatchKeys): greedy is the Evaluator's first policy (`fold_in(key, 0)`), the game's batch is
    `fold_in(key, game // batch)` (run_in_batches), and in `make_evaluator`'s run the game is lane `game % batch`
    of `game_reset_keys` and of each step's `game_step_keys`, the same functions. The run steps with the adapter's
    auto-resetting `step(key)`; the replay steps without reset on that key's transition half
    (`adapters.split_step_key`). tests/test_watch.py replays evaluate.py's games. Greedy only: a sampled action of
    one lane is drawn from a key the whole batch shares."""

    def __init__(self, seed: int, game: int, batch: int):
        import jax

        self.batch, self.lane = batch, game % batch
        key = fold_in(fold_in(jax.random.PRNGKey(seed), 0), game // batch)
        reset_keys, self.key = game_reset_keys(key, batch)
        self._reset_key = reset_keys[self.lane]

    def reset(self):
        """The key of the game's reset."""
        return self._reset_key

    def step(self):
        """(policy key, key of `step_no_reset`) for the game's next step."""
        from hephaestus.envs.adapters import split_step_key

        self.key, k_act, env_keys = game_step_keys(self.key, self.batch)
        return k_act, split_step_key(env_keys[self.lane])[0]


def summarise(out: dict, stats, prefix: str = "eval/", scores=()) -> dict:
    """Host-side metrics of one evaluation (see the module docstring); `scores`: the env's declared scores over
    its statistics' rates (episode_stats.EpisodeScore)."""
    from hephaestus.envs import episode_stats

    out = {k: (np.asarray(v) if k != "stats" else {n: np.asarray(x) for n, x in v.items()}) for k, v in out.items()}
    returns = out["return"].astype(np.float64)
    metrics = {f"{prefix}episodes": int(returns.size),
               f"{prefix}return_mean": float(returns.mean()), f"{prefix}return_std": float(returns.std()),
               f"{prefix}return_min": float(returns.min()), f"{prefix}return_max": float(returns.max()),
               f"{prefix}length_mean": float(out["length"].mean()),
               f"{prefix}capped_rate": float(1.0 - out["finished"].mean())}
    metrics.update(episode_stats.summarise(stats, out["stats"], prefix))
    metrics.update(episode_stats.score_values(scores, metrics, prefix))
    return metrics


def fold_in(key, i: int, seeds: bool = False):
    """jax.random.fold_in, or with `seeds` the same for each key of a [seeds] stack."""
    import jax

    return jax.vmap(jax.random.fold_in, in_axes=(0, None))(key, i) if seeds else jax.random.fold_in(key, i)


def run_in_batches(program, params, key, episodes: int, batch: int, seeds: bool = False) -> dict:
    """`episodes` episodes from a program compiled for `batch` parallel ones: ceil(episodes / batch) calls with
    keys fold_in(key, i), concatenated and cut to `episodes`. One compiled program then serves evaluations of
    any size (the HackMatrix step makes each new size a compile of a minute or more). `seeds`: the program is
    vmapped over a leading seed axis of `params` and `key` (one key per seed); outputs are [seeds, episodes]."""
    import jax

    outs = [jax.device_get(program(params, fold_in(key, i, seeds))) for i in range(-(-episodes // batch))]
    # per-episode arrays: [batch] or [seeds, batch], the episodes last
    return jax.tree.map(lambda *xs: np.concatenate(xs, axis=-1)[..., :episodes], *outs)


class Evaluator:
    """Compiles the evaluation program once and runs the policies a run asks for (the loop and train.py use it):
    `episodes` episodes each time, `batch` of them in parallel (default: all).

    With `num_seeds` S > 1 the parameters carry a leading [S] axis (a --num-seeds run) and the program is vmapped
    over it: one call evaluates every agent, agent i with its own key."""

    def __init__(self, env, network, episodes: int, max_steps: int, sampled: bool = False, batch: int = 0,
                 num_seeds: int = 1, policies: tuple[str, ...] | None = None, cache_dir: str | None = None,
                 agent: dict | None = None, scripted: str | None = None):
        """`policies` (default: greedy, and sampled if `sampled`) run one after another, each under its prefix
        (PREFIXES), policy i with the key fold_in(key, i). `scripted`: the name of one of the env's scripted
        baselines (`env.scripted_policies`), played instead, without a network, under the policy name "scripted".

        `cache_dir` (the compilation cache's) and `agent` (what builds `env` and `network`: the env's name and the
        network's metadata): the program is exported there on its first call and read back by a later start
        instead of traced again (stored_programs.py; a warm evaluate.py of a HackMatrix agent on a 2-core CPU went
        from ~8.1 s to ~5.5 s, specs/speed.md)."""
        import jax

        from hephaestus.core.stored_programs import ProgramStore

        self.stats = env.spec.episode_stats
        self.scores = env.spec.episode_scores
        self.episodes, self.batch, self.num_seeds = episodes, min(batch or episodes, episodes), num_seeds
        self.policies = tuple(policies or ("greedy",) + (("sampled",) if sampled else ()))
        scripted_fn = None
        if scripted is not None:
            scripted_fn, self.policies = env.scripted_policy(scripted), (SCRIPTED,)
            agent = None if agent is None else {**agent, "scripted": scripted}
        if len({PREFIXES[p] for p in self.policies}) != len(self.policies):
            raise ValueError(f"policies {self.policies} would share a metric prefix (greedy and random both log eval/)")
        if network is None and scripted is None and set(self.policies) != {"random"}:
            raise ValueError(f"policies {self.policies} need a network; without one only the random policy plays")
        self.program = make_evaluator(env, network, self.batch, max_steps, scripted_fn)  # one for every policy
        if num_seeds > 1:  # each agent its own parameters, key and instance
            self.program = jax.jit(jax.vmap(self.program, in_axes=(0, 0, None, 0)))
        self.store = (ProgramStore.for_evaluation(cache_dir, agent, self.batch, max_steps, num_seeds)
                      if agent is not None else None)
        self.compiled = False

    def _stored_program(self, params, key, instance):
        """The program through its stored export, read back or exported now (once per Evaluator); the jitted
        program itself where there is no store or exporting fails."""
        if self.store is not None:
            self.program = self.store.evaluation_program(self.program, params, key, policy_index("greedy"),
                                                         instance) or self.program
            self.store = None
        return self.program

    @property
    def prefixes(self) -> list[str]:
        """The metric prefix of each policy, in the order they run."""
        return [PREFIXES[policy] for policy in self.policies]

    def __call__(self, params, key, instance=None) -> tuple[dict, dict]:
        """(metrics, raw per-episode arrays by prefix). Blocks until done. With several seeds `key` holds one key
        per seed, the raw arrays are [seeds, episodes] and the metrics are those of `sinks.combine_seeds` (mean
        over seeds, `/std`, `/iqm`, `per_seed`). `instance`: the trained run's env instance (`env.instance_of`;
        one per seed with several), or None for the env's default."""
        import jax

        from hephaestus.core.sinks import combine_seeds

        seeds = self.num_seeds > 1
        self._stored_program(params, key, instance)
        per_seed, raw = [{} for _ in range(self.num_seeds)], {}
        for i, policy in enumerate(self.policies):
            prefix, index = PREFIXES[policy], policy_index(policy)
            program = lambda p, k, index=index: self.program(p, k, index, instance)  # noqa: E731
            out = run_in_batches(program, params, fold_in(key, i, seeds), self.episodes, self.batch, seeds=seeds)
            raw[prefix] = out
            for s, metrics in enumerate(per_seed):
                metrics.update(summarise(jax.tree.map(lambda x: x[s], out) if seeds else out, self.stats, prefix,
                                         self.scores))
        self.compiled = True
        return (combine_seeds(per_seed) if seeds else per_seed[0]), raw


def eval_key(seed: int, update: int, num_seeds: int = 1, agent_seeds: list[int] | None = None):
    """The evaluation key after `update` updates: its own stream, so evaluating never changes training. With
    `num_seeds` S > 1, S keys: agent i (seeded seed + i, or `agent_seeds[i]` where agents do not count up from
    `seed`, as in a sweep) gets the key a single run with that seed would use."""
    import jax
    import jax.numpy as jnp

    def one(s):
        return jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(s), 0x65766C), update)

    if num_seeds == 1:
        return one(seed if agent_seeds is None else agent_seeds[0])
    return jnp.stack([one(s) for s in (agent_seeds or [seed + i for i in range(num_seeds)])])


# ------------------------------------------------------------------------------------------------ text
def summary_lines(metrics: dict, prefix: str = "eval/") -> list[str]:
    """A few readable lines: return, length, how episodes ended, the env's scores over the episodes (Crafter's),
    then every other statistic."""
    from hephaestus.envs.episode_stats import is_score_name
    # a --num-seeds run's metrics also hold <key>/std and <key>/iqm over seeds: the lines show the means
    m = {k[len(prefix):]: v for k, v in metrics.items() if k.startswith(prefix) and "/" not in k[len(prefix):]}
    if not m:
        return []
    lines = [f"{prefix.rstrip('/')}: {m.get('episodes', 0):g} episodes: return {m['return_mean']:+.3f} ± {m['return_std']:.3f} "
             f"(min {m['return_min']:+.3f}, max {m['return_max']:+.3f}), length {m['length_mean']:.1f}, "
             f"capped {m['capped_rate']:.1%}"]
    rest = {k: v for k, v in m.items() if k not in ("episodes", "return_mean", "return_std", "return_min",
                                                     "return_max", "length_mean", "capped_rate")}
    rates = {k: v for k, v in rest.items() if k.endswith("_rate") or ">=" in k}
    scores = {k: v for k, v in rest.items() if is_score_name(k)}  # over all the episodes' rates, not per episode
    counts = {k: v for k, v in rest.items()
              if k not in rates and k not in scores and not (k.startswith("program_") and v == 0)}
    if scores:
        lines.append("  scores: " + ", ".join(f"{k} {v:.3g}" for k, v in scores.items()))
    if rates:
        lines.append("  rates: " + ", ".join(f"{k} {v:.3f}" for k, v in rates.items()))
    if counts:
        lines.append("  per episode: " + ", ".join(f"{k} {v:.3g}" for k, v in counts.items()))
    return lines


def write_eval_json(path: str, metrics: dict, raw: dict, info: dict) -> str:
    """eval.json: what was evaluated (`info`), the metrics, and per episode its return, length, whether it
    finished, and each of the env's episode statistics under `stats` (e.g. HackMatrix's `program_UNDO`: how many
    UNDOs that game played), so a rate can be broken down by game; one list per seed for a --num-seeds run."""
    from hephaestus.core.sinks import json_clean

    episodes = {prefix: {"return": np.asarray(out["return"], float).tolist(),
                         "length": np.asarray(out["length"], int).tolist(),
                         "finished": np.asarray(out["finished"], bool).tolist(),
                         "stats": {name: np.asarray(v, float).tolist() for name, v in out["stats"].items()}}
                for prefix, out in raw.items()}
    clean = json_clean(metrics)
    tmp = path + ".tmp"
    try:
        with open(tmp, "w") as f:
            json.dump({**info, "metrics": clean, "per_episode": episodes}, f, indent=1)
        os.replace(tmp, path)
    except OSError as err:  # no stray temporary file, and the error names the file the caller asked for
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise OSError(err.errno, err.strerror, path) from None
    return path


def append_eval_curve(path: str, metrics: dict, info: dict) -> str:
    """One line of a JSON-lines curve file (evaluate.py --curve): where the agent was in training (`env_steps`,
    `update`), what was evaluated, and the metrics, without the per-episode lists. A file of such lines is what
    plot_runs.py reads as a run's records, so evaluations of a run's kept checkpoints draw a greedy learning curve.
    Over several evaluation seeds the record holds their means; the per-seed values go under `per_eval_seed`,
    not `per_seed`, which plot_runs reads as training seeds (the band of a curve)."""
    from hephaestus.core.sinks import JsonlSink  # metrics.jsonl's writer: appends, never onto a line cut short

    record = {**info, **{k: v for k, v in metrics.items() if k != "per_seed"}}
    if "per_seed" in metrics:
        record["per_eval_seed"] = metrics["per_seed"]
    sink = JsonlSink(path)
    try:
        sink.write(record)
    finally:
        sink.close()
    return path


def final_evaluation(trainer, runner_state, run_dir: str, message=print,
                     agent_seeds: list[int] | None = None) -> dict | None:
    """The end-of-run evaluation (`--final-eval-episodes`, greedy, plus sampled with `--eval-sampled`), written
    to `<run_dir>/eval.json` and printed. None when turned off. `agent_seeds`: each agent's seed where they are
    not --seed, --seed+1, ... (a sweep's agents)."""
    import jax

    config = trainer.config
    if config.logging.final_eval_episodes <= 0:
        return None
    num_seeds = config.run.num_seeds
    log = config.logging
    update = int(jax.device_get(runner_state.update_step))
    t0 = time.perf_counter()
    # in batches of --eval-episodes: the periodic evaluation's compiled program serves this one too
    evaluator = trainer.evaluator(log.final_eval_episodes, log.eval_max_steps, log.eval_sampled,
                                  batch=min(log.eval_episodes, log.final_eval_episodes))
    metrics, raw = evaluator(runner_state.train_state.params,
                             eval_key(config.run.seed, update, num_seeds, agent_seeds),
                             trainer.eval_instance(runner_state))
    info = {"source": "final evaluation of the run", "env": config.env.name, "update": update,
            "env_steps": update * config.batch_size, "episodes": log.final_eval_episodes,
            "max_steps": log.eval_max_steps,
            "batch": evaluator.batch, "policies": ["greedy"] + (["sampled"] if log.eval_sampled else []),
            "seed": config.run.seed, "num_seeds": num_seeds, **({"agent_seeds": agent_seeds} if agent_seeds else {})}
    path = write_eval_json(os.path.join(run_dir, EVAL_JSON), metrics, raw, info)
    message(f"final evaluation ({time.perf_counter() - t0:.1f}s, compile included):")
    for prefix in evaluator.prefixes:
        for line in summary_lines(metrics, prefix):
            message(line)
    message(f"final evaluation in {path}")
    return metrics


def random_policy_returns(env_name: str, num_envs: int, num_steps: int, seed: int = 0) -> np.ndarray:
    """The first episode's return of each of `num_envs` envs acting masked-uniformly (the evaluation program's
    `random` policy, as `evaluate.py --random`), over those whose first episode ends within `num_steps` (make it
    longer than the env's time limit: later, shorter episodes would bias a count towards short ones). The baseline
    the learning experiments (scripts/experiments/) print next to their curves."""
    import jax

    from hephaestus.envs.registry import make_env

    evaluator = Evaluator(make_env(env_name), None, num_envs, num_steps, policies=("random",))
    _, raw = evaluator(None, jax.random.PRNGKey(seed))
    out = raw["eval/"]
    return np.asarray(out["return"])[np.asarray(out["finished"])]
