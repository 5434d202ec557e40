"""The public Python API: `hephaestus.load_agent`, `Agent.act`, `hephaestus.make_env`, `hephaestus.train`.

    import jax, hephaestus
    run = hephaestus.train(env="gymnax:CartPole-v1", total_timesteps=20_000)  # the CLI's flags, as keywords
    agent = hephaestus.load_agent(run.run_dir)  # or whatever watch_agent.py takes: a params file, a step directory
    state, step = agent.env.reset(jax.random.PRNGKey(0))
    action = agent.act(step)  # greedy; agent.act(step, key) samples; the step's action mask applies

* `load_agent(path)` reads what watch_agent.py and evaluate.py read (saved_agent.py): a `final_params.npz` or
  `params_<n>.npz`, a run directory (its final parameters, else its newest), or a checkpoint step directory (the
  export beside it). The network comes from the file's metadata, its observation statistics (--normalize-obs)
  included, so `act` sees observations as training did.
* `Agent.act` is the one policy of training, evaluation and watch_agent.py (`networks.act`): greedy is the
  argmax over the valid actions, a key samples. It takes one observation [obs_dim] or a batch [..., obs_dim],
  or an env step (`EnvStep`, what `env.reset`/`env.step` return), whose action mask it applies; an env with action
  masks (HackMatrix, jumanji) needs the step or `mask=`. A recurrent agent (`agent.recurrent`, --recurrent gru |
  lstm) remembers: `action, state = agent.act(step, state=state)`, the caller holding one state per game and
  passing `state=None` at each game's start.
* `agent.env` is the env the agent trained on, built from the name its file stores with the env's own parameters:
  the rules evaluations play (a training reward set by --env-params is not applied; `env_params=` plays a variant).
* `make_env(name, **params)`: the env of `--env NAME` with `--env-params` as keywords.
* `train(config_or_yaml, **overrides)` runs the training command's own code path (train.py) and returns the run
  directory, the resolved config and the final parameters.

Nothing here imports jax before it is used: `import hephaestus` stays light for the command-line entry points.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

from hephaestus.core.agent import Agent
from hephaestus.tools.saved_agent import LoadError, load_agent


class TrainError(RuntimeError):
    """A training run started through `train()` that did not finish; the message says how it ended."""


def make_env(name: str, **params):
    """The env `--env NAME` trains on, with `params` as `--env-params` gives them (values or text): an
    `AdaptedEnv` with `reset(key) -> (state, step)` and `step(key, state, action) -> (state, step)`."""
    from hephaestus.tools.saved_agent import load_env

    return load_env(name, **params)


@dataclass
class TrainResult:
    """What `train()` returns: where the run lies, its resolved config, its final parameters."""

    run_dir: str
    config: Any  # config.TrainConfig, resolved
    params: Any  # the final parameters as final_params.npz holds them (a leading [seeds] axis with --num-seeds)
    meta: dict  # that file's metadata
    metrics: list = field(default_factory=list)  # the records of metrics.jsonl this run wrote, one per chunk

    def agent(self, seed_index: int | None = None) -> Agent:
        """The trained agent (`load_agent(run_dir)`)."""
        return load_agent(self.run_dir, seed_index=seed_index)


def _coerce(name: str, value):
    """A keyword's value as its option expects it: 2e4 for an int option is 20000; a dict of env params is
    --env-params' NAME=VALUE list; a comma-separated string is a list option's items."""
    from hephaestus.config.train_config import options

    option = options().get(name)
    if option is None:
        return value
    kind, _ = option.kind()
    if kind == "int" and isinstance(value, float) and math.isfinite(value) and value == int(value):
        return int(value)
    if kind == "tuple":
        if isinstance(value, dict):
            return tuple(f"{k}={v}" for k, v in value.items())
        if isinstance(value, str):
            from hephaestus.run.cli import comma_separated, whole_numbers

            return comma_separated(value) if option.element is str else whole_numbers(value)
    return value


def train(config=None, **overrides) -> TrainResult:
    """Train as `scripts/train_purejaxrl.py` does (the same code: train.run_config) and return the run.

    `config`: a TrainConfig, a YAML file (what --config takes) or None (the defaults); `overrides`: options by
    their flat names, the flags' names with `_` (`env="gymnax:CartPole-v1"`, `total_timesteps=2e4`,
    `num_seeds=2`, `env_params={"distance_coef": 0}`). The run is written to `<checkpoint_dir>/<run_name>`
    as the command writes it. ConfigError (one line) on a bad option; TrainError when the run did not finish."""

    from hephaestus.config.train_config import ConfigError, TrainConfig, from_flat_dict, options
    from hephaestus.config.train_config import _did_you_mean as did_you_mean
    from hephaestus.core.export import load_params_npz

    if config is None:
        base = TrainConfig()
    elif isinstance(config, TrainConfig):
        base = config
    elif isinstance(config, (str, os.PathLike)):
        from hephaestus.config.files import load_config_file

        base = load_config_file(os.fspath(config))
    else:
        raise ConfigError(f"train(): expected a TrainConfig, a YAML path or None, got {type(config).__name__}")
    known = options()
    for name in overrides:
        if name not in known:
            raise ConfigError(f"train(): unknown option {name!r}{did_you_mean(name)}")
    config = from_flat_dict({k: _coerce(k, v) for k, v in overrides.items()}, "train():", base)
    from hephaestus.run import train as trainer
    outcome: dict = {}
    try:
        code = trainer.run_config(config, outcome=outcome)
    except SystemExit as exit_:  # a one-line error, already printed on stderr
        code = exit_.code if isinstance(exit_.code, int) else 1
    if code != 0 or "run_dir" not in outcome:
        raise TrainError(f"training did not finish (exit code {code}; its message is above)")
    final = os.path.join(outcome["run_dir"], "final_params.npz")
    params, meta = load_params_npz(final)
    return TrainResult(run_dir=outcome["run_dir"], config=outcome["config"], params=params, meta=meta,
                       metrics=list(outcome.get("records") or []))


__all__ = ["Agent", "LoadError", "TrainError", "TrainResult", "load_agent", "make_env", "train"]
