"""Laptop export: parameters as a plain `.npz`, loadable with numpy alone (no orbax, no pickle).

Layout of the file:
  `<dotted.name>`   one float32 array per parameter, e.g. `params.actor.Dense_0.kernel`
  `__meta__`        a 0-d unicode array holding JSON: format version, package version, env name, network shape
                    (networks.NetworkSpec.to_meta: `obs_dim`, `action_dim`, `discrete`, action bounds,
                    `hidden_dim`, `num_layers`, `activation`, `encoder`, `obs_dtype`, `dtype`, and
                    `obs_cells`/`cell_dim` for the cells encoder, `recurrent` for a --recurrent network), `update`,
                    `env_steps`, `num_seeds`, and the resolved config.
                    With `num_seeds` S > 1 (a --num-seeds run) every parameter has a leading [S] axis, one row per
                    seed (seed --seed + i in row i); `select_seed` picks one agent's parameters.
                    A sweep's file (scripts/sweep.py, `<out>/<group>/final_params.npz`) also has `agents`: per
                    row, that agent's sweep point and seed (`agent_label` names it).
                    Envs with a per-run instance (DeepSea's action map, `AdaptedEnv.instance_of`) also store
                    `env_instance`: the trained run's, as nested lists (one per row with S > 1), so that
                    evaluate.py and watch_agent.py play the map the agent learned (`instance_of_meta`).

`load_params_npz` rebuilds the flax params tree and the metadata; `network_from_meta` rebuilds the module.
"""

from __future__ import annotations

import json
import os
import tempfile
import zipfile

import numpy as np

FORMAT = "hephaestus-params-v1"
META_KEY = "__meta__"


class ExportError(ValueError):
    """A file that is not a Hephaestus parameter export; the message is one line."""


def flatten_params(tree, prefix="") -> dict[str, np.ndarray]:
    out = {}
    for key, value in tree.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) or hasattr(value, "items"):
            out.update(flatten_params(dict(value), name))
        else:
            out[name] = np.asarray(value)
    return out


def unflatten_params(flat: dict[str, np.ndarray]) -> dict:
    tree: dict = {}
    for name, value in flat.items():
        node = tree
        *parents, leaf = name.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return tree


def network_meta(spec, config) -> dict:
    """The resolved network description (networks.NetworkSpec.to_meta) of `config` on the env `spec`."""
    from hephaestus.core.networks import NetworkSpec

    return NetworkSpec.of(spec, config).to_meta()


def save_params_npz(path: str, params, *, env: str, network: dict, update: int = 0, env_steps: int = 0,
                    config: dict | None = None, num_seeds: int = 1, agents: list[dict] | None = None,
                    env_instance=None) -> str:
    """Write atomically (temp file + rename), so a crash never leaves a half-written export. `agents`: one dict
    per row ({"point": {...}, "seed": s}) where the rows differ in more than their seed (a sweep)."""
    from hephaestus.version import __version__

    if agents is not None and len(agents) != num_seeds:
        raise ValueError(f"{len(agents)} agent descriptions for {num_seeds} rows")
    meta = {"format": FORMAT, "version": __version__, "env": env, "network": network, "update": int(update),
            "env_steps": int(env_steps), "num_seeds": int(num_seeds), "config": config or {}}
    if agents is not None:
        meta["agents"] = agents
    if env_instance is not None:
        meta["env_instance"] = np.asarray(env_instance).tolist()
    arrays = flatten_params(params)
    arrays[META_KEY] = np.array(json.dumps(meta))
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, suffix=".npz.tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return path


def load_params_npz(path: str) -> tuple[dict, dict]:
    """(params tree, metadata). Raises ExportError with a one-line reason for anything else."""
    if not os.path.isfile(path):
        raise ExportError(f"{path}: no such file")
    try:
        with np.load(path, allow_pickle=False) as data:
            if META_KEY not in data.files:
                raise ExportError(f"{path}: not a Hephaestus parameter file (no {META_KEY})")
            meta = json.loads(str(data[META_KEY]))
            flat = {k: data[k] for k in data.files if k != META_KEY}
    except ExportError:
        raise
    except (OSError, ValueError, zipfile.BadZipFile, json.JSONDecodeError, EOFError) as err:
        raise ExportError(f"{path}: not a readable .npz parameter file ({type(err).__name__})") from None
    if meta.get("format") != FORMAT:
        raise ExportError(f"{path}: unknown parameter format {meta.get('format')!r}")
    return unflatten_params(flat), meta


def num_seeds_of(meta: dict) -> int:
    """Agents in a parameter file (files before --num-seeds hold one)."""
    return int(meta.get("num_seeds", 1))


def select_seed(params: dict, meta: dict, index: int | None, path: str = "parameters") -> tuple[dict, int]:
    """(one agent's parameters, its index) from a file's params: row `index` of a multi-seed file (default 0),
    or the file's only agent (index 0 or None). Raises ExportError (one line) for an index out of range."""
    import jax

    n = num_seeds_of(meta)
    chosen = 0 if index is None else index
    if not 0 <= chosen < n:
        held = f"seed indices 0..{n - 1}" if n > 1 else "one seed (index 0)"
        raise ExportError(f"--seed-index {chosen} is out of range: {path} holds {held}")
    if n == 1:
        return params, 0
    return jax.tree.map(lambda x: np.asarray(x)[chosen], params), chosen


def instance_of_meta(meta: dict, index: int | None):
    """The env instance agent row `index` trained on (`env_instance`, e.g. DeepSea's action map) as an int32
    array, or None where the file holds none (envs without one, or files from before it was stored)."""
    held = meta.get("env_instance")
    if held is None:
        return None
    held = np.asarray(held, np.int32)
    return held[index or 0] if num_seeds_of(meta) > 1 else held


def agent_label(meta: dict, index: int) -> str:
    """Row `index` of a file in words: a sweep agent's point and seed ("gae_lambda=0.8, seed 2"), else ""."""
    agents = meta.get("agents") or []
    if not 0 <= index < len(agents):
        return ""
    values = point_text(agents[index].get("point") or {})
    return ", ".join(x for x in (values, f"seed {agents[index].get('seed')}") if x)


def point_text(point: dict, sep: str = ", ") -> str:
    """A sweep point in words, floats in %g: "ent_coef=0.05, lr=0.001" (sweep.py's labels use it too)."""
    return sep.join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in point.items())


def network_from_meta(meta: dict, dtype: str | None = None):
    """Rebuild the ActorCritic module an export was made from (matmuls in `dtype`, default: as trained).
    Raises ExportError (one line) for a damaged network description."""
    import dataclasses

    from hephaestus.core.networks import NetworkSpec

    try:
        spec = NetworkSpec.from_meta(meta.get("network") or {})
    except ValueError as err:
        raise ExportError(str(err)) from None
    return (dataclasses.replace(spec, dtype=dtype) if dtype else spec).build()


# ------------------------------------------------------------------------------------------------------------
# Shipped agents: checkpoints/pretrained/<name>/ (tracked in git) holds `final_params.npz` (one agent's
# parameters and the metadata that rebuilds its network and names its env, its resolved config included; no
# optimizer state) and `agent.json` (where it came from and what its final evaluation measured). watch_agent.py and
# evaluate.py take the folder as they take a run folder.
