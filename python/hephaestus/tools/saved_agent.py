"""Saved agents by path: the one loader behind `hephaestus.load_agent`, watch_agent.py, evaluate.py and the
experiments.

* `resolve_params_path` turns a file, a run directory, a checkpoint step directory or `--latest` into one
  `.npz` file (a laptop export, export.py: `final_params.npz` or `params_<update>.npz`).
* `read_agent` reads a parameter file, rebuilds its network from the `NetworkSpec` it stores and checks it
  against the env it names, built with the env's own parameters (the rules evaluations play) unless asked for a
  variant; `load_agent` (`hephaestus.load_agent`) does both steps and returns an `Agent` (core/agent.py).
* `export_pretrained` writes a shipped agent's folder (`checkpoints/pretrained/<name>/`) from a run.
* `load_env` builds an adapted env by name with one-line errors.

Errors a user can cause (bad path, not a parameter file, unknown env, ...) raise `LoadError` with a one-line
message. Nothing here imports jax at module level, so a script's `--help` stays instant.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys

import numpy as np

from hephaestus.core.agent import Agent

PARAMS_RE = re.compile(r"params_(\d+)\.npz")
FINAL = "final_params.npz"


class LoadError(Exception):
    """A problem the user can fix (a path, a file, an env name); the message is one line."""


# ------------------------------------------------------------------------------------------------ paths
def _params_in_dir(directory: str) -> str | None:
    """final_params.npz if present, else the params_<n>.npz with the largest n, else None."""
    final = os.path.join(directory, FINAL)
    if os.path.isfile(final):
        return final
    steps = []
    for name in os.listdir(directory):
        m = PARAMS_RE.fullmatch(name)
        if m:
            steps.append((int(m.group(1)), name))
    if steps:
        return os.path.join(directory, max(steps)[1])
    return None


WANDB_PREFIX = "wandb:"


def parse_wandb_path(path: str) -> tuple[str, str]:
    """`wandb:ENTITY/PROJECT/RUN_ID` -> (the run's final-parameters artifact `ENTITY/PROJECT/RUN_ID-params:latest`,
    a folder name for its download); `wandb:ENTITY/PROJECT/NAME:ALIAS` -> that artifact. LoadError (one line)
    for anything else."""
    spec = path[len(WANDB_PREFIX):].strip("/")
    parts = spec.split("/")
    if len(parts) != 3 or not all(parts):
        raise LoadError(f"{path}: a wandb path is wandb:ENTITY/PROJECT/RUN_ID or wandb:ENTITY/PROJECT/ARTIFACT:ALIAS")
    entity, project, last = parts
    artifact = last if ":" in last else f"{last}-params:latest"
    name, _, alias = artifact.partition(":")
    if not name or not alias:
        raise LoadError(f"{path}: an artifact needs a name and an alias or version (NAME:latest, NAME:v3)")
    folder = "".join(c if c.isalnum() or c in "-_." else "-" for c in f"{entity}-{project}-{name}-{alias}")
    return f"{entity}/{project}/{artifact}", folder


def fetch_wandb_params(path: str, cache_dir: str | None = None) -> str:
    """Download the parameters a wandb path names (`parse_wandb_path`: a training run logs its final_params.npz
    as the `model` artifact `<run id>-params`) into `cache_dir` (default ~/.cache/hephaestus/wandb) and return
    the folder. Only called for a `wandb:` path: nothing else reaches the network. LoadError (one line) without
    wandb, without a reachable server or key, or for an artifact that does not exist."""
    artifact, folder = parse_wandb_path(path)
    try:
        import wandb
    except ImportError:
        raise LoadError(f"{path}: fetching from wandb needs the wandb package (pip install wandb)") from None
    from hephaestus.core.sinks import wandb_api_key_configured, wandb_online_problem

    if not wandb_api_key_configured():
        raise LoadError(f"{path}: no wandb API key (set WANDB_API_KEY or run `wandb login`)")
    problem = wandb_online_problem()
    if problem:
        raise LoadError(f"{path}: the wandb server ({os.environ.get('WANDB_BASE_URL', 'api.wandb.ai')}) {problem}")
    target = os.path.join(cache_dir or os.path.join(os.path.expanduser("~"), ".cache", "hephaestus", "wandb"), folder)
    try:
        wandb.Api(timeout=30).artifact(artifact).download(root=target)
    except Exception as err:  # noqa: BLE001 - wandb's errors (not found, permission, network): one line
        why = str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
        raise LoadError(f"{path}: cannot fetch the artifact {artifact} ({why})") from None
    return target


def resolve_params_path(path: str | None, latest: bool = False, checkpoints_dir: str = "checkpoints") -> str:
    """One parameter file from what the user gave (see `scripts/watch_agent.py --help`); a `wandb:` path is
    fetched first (`fetch_wandb_params`)."""
    if path and path.startswith(WANDB_PREFIX):
        path = fetch_wandb_params(path)
    if latest:
        if not os.path.isdir(checkpoints_dir):
            raise LoadError(f"--latest: no {checkpoints_dir}/ directory here")
        found = []
        for run in os.listdir(checkpoints_dir):
            run_dir = os.path.join(checkpoints_dir, run)
            if os.path.isdir(run_dir):
                params = _params_in_dir(run_dir)
                if params:
                    found.append((os.path.getmtime(params), params))
        if not found:
            raise LoadError(f"--latest: no final_params.npz or params_<n>.npz under {checkpoints_dir}/")
        return max(found)[1]
    if not path:
        raise LoadError("give a parameter file or run directory, or --latest")
    if os.path.isfile(path):
        return path
    if not os.path.isdir(path):
        raise LoadError(f"{path}: no such file or directory")
    found = _params_in_dir(path)
    if found:
        return found
    # a checkpoint step directory (`<run>/<step>/`, or a folder inside it): its export lies beside it
    clean = os.path.normpath(os.path.abspath(path))
    for step_dir in (clean, os.path.dirname(clean)):
        name = os.path.basename(step_dir)
        if name.isdigit():
            beside = os.path.join(os.path.dirname(step_dir), f"params_{int(name)}.npz")
            if os.path.isfile(beside):
                return beside
            raise LoadError(f"{path}: checkpoint step directory without {os.path.basename(beside)} beside it")
    raise LoadError(f"{path}: no final_params.npz or params_<n>.npz in this directory")


# ------------------------------------------------------------------------------------------------ loading
def load_env(name: str, **env_params):
    """The adapted env by name (with `env_params`, as --env-params gives them), with one-line errors."""
    from hephaestus.envs.registry import UnknownEnvError, make_env

    try:
        return make_env(name, **env_params)
    except UnknownEnvError as err:
        raise LoadError(str(err)) from None
    except Exception as err:  # noqa: BLE001 - e.g. an optional env family that is not installed
        raise LoadError(f"cannot build env {name!r}: {type(err).__name__}: {err}".splitlines()[0]) from None


def read_agent(params_path: str, env_override: str | None = None, seed_index: int | None = None,
               env_params: dict | None = None):
    """(params, metadata, adapted env, network) of a parameter file (seed `seed_index` of a multi-seed file),
    checked against each other: the env it
    names (else `env_override`), built with `env_params` (a variant: evaluate.py --env-params; default the env's
    own), the network its metadata describes, the arrays' shapes. `load_agent` wraps it."""
    import jax
    import jax.numpy as jnp

    from hephaestus.envs.adapters import with_fixed_instance
    from hephaestus.core.export import ExportError, instance_of_meta, load_params_npz, select_seed
    from hephaestus.core.networks import NetworkSpec, init_params

    try:
        params, meta = load_params_npz(params_path)
        # A --num-seeds file holds every seed's agent: take one (--seed-index, default 0).
        params, chosen = select_seed(params, meta, seed_index, params_path)
    except ExportError as err:
        raise LoadError(str(err)) from None
    bad = [jax.tree_util.keystr(k) for k, v in jax.tree_util.tree_leaves_with_path(params)
           if np.issubdtype(np.asarray(v).dtype, np.floating) and not np.all(np.isfinite(np.asarray(v)))]
    if bad:  # NaN weights act (argmax of NaN logits is action 0) and would report a score
        raise LoadError(f"{params_path}: parameters are not finite (NaN or inf in {len(bad)} array(s), first "
                        f"{bad[0]}); the agent diverged before this file was saved: use an earlier params_<n>.npz")
    try:
        net = NetworkSpec.from_meta(meta.get("network") or {})
    except ValueError as err:
        raise LoadError(f"{params_path}: {err}") from None
    file_env = meta.get("env")
    if file_env and env_override and env_override != file_env:
        print(f"note: {params_path} was trained on {file_env}; ignoring --env {env_override}", file=sys.stderr)
    env_name = file_env or env_override
    if not env_name:
        raise LoadError(f"{params_path}: the file names no environment; pass --env")
    env = load_env(env_name, **(env_params or {}))
    if env.set_instance is not None:  # an env with a per-run instance (DeepSea's map): the one the agent trained on
        instance = instance_of_meta(meta, chosen)
        if instance is None:
            print(f"note: {params_path} does not store the {env_name} instance it trained on (saved before it was "
                  "stored); playing the env's default one", file=sys.stderr)
        else:
            env = with_fixed_instance(env, instance)
    spec = env.spec
    if (spec.obs_dim, spec.action_dim, spec.discrete) != (net.obs_dim, net.action_dim, net.discrete):
        raise LoadError(
            f"{params_path}: network expects obs {net.obs_dim} / actions {net.action_dim}, but "
            f"{env_name} has obs {spec.obs_dim} / actions {spec.action_dim} (trained on another version?)")
    if not spec.discrete and not net.action_low:  # files that do not carry the bounds: the env's
        net = dataclasses.replace(net, action_low=tuple(spec.action_low), action_high=tuple(spec.action_high))
        meta = {**meta, "network": net.to_meta()}
    network = net.build()
    # The arrays must fit the network the metadata describes (shapes only; nothing is computed).
    expected = jax.eval_shape(lambda key: init_params(network, key, spec.obs_dim), jax.random.PRNGKey(0))
    want = {jax.tree_util.keystr(k): tuple(v.shape) for k, v in jax.tree_util.tree_leaves_with_path(expected)}
    got = {jax.tree_util.keystr(k): tuple(np.shape(v)) for k, v in jax.tree_util.tree_leaves_with_path(params)}
    if want != got:
        bad = sorted(set(want) ^ set(got)) or sorted(k for k in want if want[k] != got[k])
        raise LoadError(f"{params_path}: parameters do not match the network in its metadata "
                        f"(first difference: {bad[0]})")
    return jax.tree.map(jnp.asarray, params), meta, env, network


def load_agent(path: str, seed_index: int | None = None, env_params: dict | None = None,
               env: str | None = None) -> Agent:
    """The agent saved at `path`: a params file, a run directory or a checkpoint step directory (what
    watch_agent.py takes). `seed_index`: which agent of a --num-seeds file (default 0); `env_params`: play a
    variant of its env (default: the env's own parameters); `env`: the env name for a file that names none.
    LoadError (one line) on a bad path or file."""
    params_path = resolve_params_path(os.fspath(path))
    params, meta, adapted, network = read_agent(params_path, env, seed_index, env_params)
    return Agent(params=params, network=network, env=adapted, meta=meta, path=params_path,
                 seed_index=0 if seed_index is None else seed_index)


PRETRAINED_DIR = os.path.join("checkpoints", "pretrained")
AGENT_JSON = "agent.json"


def export_pretrained(source: str, out_dir: str, seed_index: int | None = None) -> str:
    """Write the shipped-agent folder `out_dir` from a finished (or saving) run: `source` is a run folder (its
    final_params.npz, else its newest params_<n>.npz), a checkpoint step folder or a parameter file. One agent (row
    `seed_index` of a --num-seeds file, default 0), float32 parameters, the metadata of the file, and agent.json
    with the run's final evaluation (eval.json's metrics) where the run has one. Returns the parameter file
    written. Raises ExportError (one line) for a source that holds no parameters."""
    from hephaestus.core.export import (ExportError, instance_of_meta, load_params_npz, num_seeds_of,
                                        save_params_npz, select_seed)

    try:
        params_path = resolve_params_path(source)
    except LoadError as err:
        raise ExportError(str(err)) from None
    params, meta = load_params_npz(params_path)
    params, chosen = select_seed(params, meta, seed_index, params_path)
    instance = instance_of_meta(meta, chosen)
    config = dict(meta.get("config") or {})
    if num_seeds_of(meta) > 1:
        config["num_seeds"] = 1
        config["seed"] = int(config.get("seed", 0)) + chosen
    out = save_params_npz(os.path.join(out_dir, "final_params.npz"), params, env=meta["env"],
                          network=meta["network"], update=meta.get("update", 0), env_steps=meta.get("env_steps", 0),
                          config=config, env_instance=instance)
    info = {"env": meta["env"], "update": meta.get("update", 0), "env_steps": meta.get("env_steps", 0),
            "run": config.get("run_name"), "params_file": os.path.basename(params_path), "seed_index": chosen}
    eval_path = os.path.join(os.path.dirname(os.path.abspath(params_path)), "eval.json")
    if os.path.isfile(eval_path):
        try:
            with open(eval_path) as f:
                evaluation = json.load(f)
            if evaluation.get("update") == meta.get("update"):  # the evaluation of these parameters
                metrics = evaluation.get("metrics", {})
                info["final_evaluation"] = {"episodes": evaluation.get("episodes"), "max_steps": evaluation.get(
                    "max_steps"), "metrics": metrics if num_seeds_of(meta) == 1 else
                    {k: v[chosen] if isinstance(v, list) else v for k, v in metrics.items()}}
        except (OSError, ValueError):
            pass
    with open(os.path.join(out_dir, AGENT_JSON), "w") as f:
        json.dump(info, f, indent=1)
        f.write("\n")
    return out
