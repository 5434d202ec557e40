"""Hephaestus: a PureJaxRL-style training pipeline compiled into one XLA program.

The Python API (api.py), imported on first use so that `import hephaestus` loads no jax:

    agent = hephaestus.load_agent("checkpoints/<run>")     # a run folder, a params file, a checkpoint step
    action = agent.act(step)                               # greedy; agent.act(step, key) samples
    env = agent.env  or  hephaestus.make_env("gymnax:CartPole-v1")
    run = hephaestus.train("configs/x.yaml", total_timesteps=2e4)   # -> run.run_dir, run.params

Importing the package declares every env family's training defaults (envs/) and every agent family (agents/)
into config/registry.py, without jax: the options tree is built from what they declared."""

from hephaestus.version import __version__  # noqa: F401

from hephaestus import envs  # noqa: E402,F401  env families' training defaults
from hephaestus import agents  # noqa: E402,F401  agent families: options, --agent names, stages

__all__ = ["__version__", "Agent", "LoadError", "TrainError", "TrainResult", "load_agent", "make_env", "train"]
_API = tuple(__all__[1:])


def __getattr__(name: str):
    if name in _API:
        from hephaestus import api

        return getattr(api, name)
    raise AttributeError(f"module 'hephaestus' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_API))
