"""Config files: `--config configs/<name>.yaml`, one YAML mapping shaped like TrainConfig's sections.

    base: cartpole.yaml          # optional: another file (relative to this one) whose options this one changes
    env: {name: gymnax:CartPole-v1, num_envs: 4}
    ppo: {lr: 2.5e-4}
    network: {hidden_dim: 64}
    stages: {dtc: {seq_len: 8}}  # a stage family's options (its agents/<family>/ folder)
    agent: dtc

`--config NAME` with a bare name is the preset configs/NAME.yaml of this repository, and a relative path that does
not exist from the current directory is looked up from the repository's root (so the documented
`--config configs/cartpole.yaml` works from any directory).

Keys are the dataclass fields (train_config.py), so a file reads like the config it builds. Values are type-checked.
A bad file (unreadable, not YAML, empty or only comments, nested too deeply, an unknown key, a wrong type, a missing
or circular base) is one ConfigError line.
"""

from __future__ import annotations

import os

from hephaestus.config.train_config import ConfigError, TrainConfig, options


REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def find_config_file(path: str) -> str:
    """`path` itself if it exists, else the repository's preset of that name or path (see the module doc)."""
    if os.path.exists(path) or os.path.isabs(path):
        return path
    candidates = [os.path.join(REPO_ROOT, path)]
    if os.sep not in path and not path.endswith((".yaml", ".yml")):
        candidates.insert(0, os.path.join(REPO_ROOT, "configs", path + ".yaml"))
    return next((c for c in candidates if os.path.exists(c)), path)


def read_config_file(path: str, _seen: tuple = ()) -> dict:
    """{flat name: value} of `path` with its `base:` chain applied (the file's own values win)."""
    import yaml

    if os.path.abspath(path) in _seen:
        raise ConfigError(f"{path}: circular base: {' -> '.join(_seen + (os.path.abspath(path),))}")
    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot read ({err.strerror or err})") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}: not valid YAML{where} ({getattr(err, 'problem', None) or type(err).__name__})") \
            from None
    except RecursionError:  # a document nested thousands of levels deep
        raise ConfigError(f"{path}: not a config: nested too deeply to read") from None
    if data is None:  # an empty or comment-only file would silently start the defaults' run
        raise ConfigError(f"{path}: the file sets no options (empty or only comments)")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of options, got {type(data).__name__}")
    values = {}
    base = data.pop("base", None)
    if base is not None:
        if not isinstance(base, str):
            raise ConfigError(f"{path}: base is {base!r}, expected a file name")
        base_path = os.path.join(os.path.dirname(path), base)
        if not os.path.exists(base_path):
            raise ConfigError(f"{path}: base {base!r} not found ({base_path})")
        values.update(read_config_file(base_path, _seen + (os.path.abspath(path),)))
    values.update(_flatten(data, path))
    return values


def _flatten(data: dict, path: str) -> dict:
    by_path = {option.path: option for option in options().values()}
    sections = {option.path[:i] for option in by_path.values() for i in range(1, len(option.path))}
    out = {}

    def walk(node: dict, prefix: tuple):
        for key, value in node.items():
            here = prefix + (str(key),)
            if here in sections:
                if not isinstance(value, dict):
                    raise ConfigError(f"{path}: {'.'.join(here)} must be a mapping, got {value!r}")
                walk(value, here)
            elif here in by_path:
                option = by_path[here]
                out[option.flat] = option.check(value, f"{path}:")
            else:
                known = sorted(p[-1] for p in list(by_path) + list(sections) if p[:-1] == prefix)
                raise ConfigError(f"{path}: unknown key {'.'.join(here)} (known here: {', '.join(known)})")

    walk(data, ())
    return out


def load_config_file(path: str, base: TrainConfig | None = None) -> TrainConfig:
    """`base` (default: the defaults) with the options of the file `path` (and its base chain)."""
    return (base or TrainConfig()).replace(**read_config_file(find_config_file(path)))
