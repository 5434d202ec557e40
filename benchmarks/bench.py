#!/usr/bin/env python3
"""Speed benchmarks. Prints one line per case: compile seconds, env steps per second (median of 3 timed chunks
after compile) and peak memory. Each case runs in its own process so its peak memory is its own.

    python scripts/bench.py                      # every case
    python scripts/bench.py --cases cartpole-4x128,cartpole-4x128-reference
    python scripts/bench.py --devices 1,2,4,8     # one data-parallel workload over 1, 2, 4, 8 devices
    python scripts/bench.py --device-check --out device-check.txt   # a GPU/TPU session's check, under 8 minutes
    python scripts/bench.py --reference-dir ~/purejaxrl/purejaxrl --reference-python ~/pjr-venv/bin/python
    python scripts/bench.py --port-dir ~/HackMatrix/python --cases hackmatrix-ppo-2048x128,hackmatrix-ppo-2048x128-port
    python scripts/bench.py --cases hackmatrix-random-2048 --baseline main   # this checkout against main's package

--reference-dir DIR (a folder holding PureJaxRL's own, unmodified ppo.py and wrappers.py) adds the case
cartpole-4x128-purejaxrl and, with no --cases, runs the comparison a PureJaxRL user makes: our training script
against PureJaxRL's `train` on the identical configuration (CartPole-v1, 4 envs x 128 steps, 4 minibatches x 4
epochs, 2 x 64 tanh, 5e5 steps), alternating --rounds times; it prints env steps/s after compile and the whole
run's wall time for each, and their ratios. PureJaxRL's ppo.py needs distrax and gymnax < 1 (its wrapper unpacks
five values from env.step); --reference-python names an interpreter that has them (default: this one). Its
wrappers.py imports brax and navix at the top, which CartPole never uses: where they are not installed, empty
stand-ins are put in their place.

--port-dir DIR (the python/ folder of the public JAX port of HackMatrix, charleseff/HackMatrix; measured at its
commit 357f916) adds the case hackmatrix-ppo-2048x128-port: the port's own trainer, `make_train(TrainConfig(...))`
from hackmatrix.purejaxrl with its defaults at 2048 envs x 128 steps (shared 2 x 256 ReLU torso, 4 minibatches x 4
epochs, float32 observations), compiled once and then called TIMED_RUNS times in a fresh process; its package
__init__ imports the Swift bridge's gymnasium wrapper, which the trainer never uses: where gymnasium is missing, a
stand-in takes its place. Every HackMatrix 2048 x 128 case of the same call is then printed as a ratio to it.

Peak memory is the process's peak resident set on the CPU (which includes compilation), or the device's peak
bytes in use where the backend reports it (GPU/TPU). PPO cases also print the compiled program's own buffers
(XLA's memory analysis: arguments, outputs and temporaries), which is what the program needs on a device, and
the setup seconds before the compile (building the env and the initial state, which compiles the reset).
"""

# The benchmarks' one home: the cases and the code that times them. `python scripts/bench.py` is its command (this
# file runs as well, and each case runs in a fresh process of it).
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

from hephaestus.tools.entry_points import require_this_checkout

HERE = os.path.dirname(os.path.abspath(__file__))  # benchmarks/: this file and the reference it times
ROOT = os.path.dirname(HERE)
TIMED_RUNS = 3


def peak_memory_mib() -> float:
    import jax

    stats = jax.devices()[0].memory_stats() or {}
    if "peak_bytes_in_use" in stats:
        return stats["peak_bytes_in_use"] / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def time_chunks(run_chunk, state, steps_per_chunk):
    import jax

    rates = []
    for _ in range(TIMED_RUNS):
        t0 = time.perf_counter()
        state, out = run_chunk(state)
        jax.block_until_ready(out)
        rates.append(steps_per_chunk / (time.perf_counter() - t0))
    return statistics.median(rates)


def matmul_flops(jaxpr) -> float:
    """Floating-point operations of every matrix product (dot_general: 2 x output size x contracted size) in a
    traced program (a ClosedJaxpr or Jaxpr), a scan's body counted once per step of its length, each branch of a
    cond counted (one runs), a while loop's body once. A load-independent measure of work: on a 2-core CPU the
    small DTC world model is bound by these multiply-adds, not by per-op overhead (specs/results/dtc.md), so a
    case's ratio of them to PPO's says what its time ratio will be on any load."""
    import math

    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    total = 0.0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            (lhs_contract, _), _ = eqn.params["dimension_numbers"]
            lhs = eqn.invars[0].aval
            total += 2.0 * math.prod(eqn.outvars[0].aval.shape) * math.prod(lhs.shape[d] for d in lhs_contract)
        steps = eqn.params["length"] if eqn.primitive.name == "scan" else 1
        for param in eqn.params.values():
            for sub in param if isinstance(param, (list, tuple)) else (param,):
                if hasattr(sub, "eqns") or hasattr(getattr(sub, "jaxpr", None), "eqns"):
                    total += steps * matmul_flops(sub)
    return total


def case_config(env_name, num_envs, num_steps, updates_per_chunk, config_file=None, **overrides):
    """A bench_hephaestus case's TrainConfig, resolved (the agent's stages in place): what the case trains. With
    `config_file` (relative to the checkout), that file's options are the base the case's own settings override."""
    from hephaestus.config.train_config import TrainConfig, resolve
    from hephaestus.config.files import load_config_file

    base = load_config_file(os.path.join(ROOT, config_file)) if config_file else TrainConfig()
    return resolve(base.replace(env=env_name, num_envs=num_envs, num_steps=num_steps, log_interval=updates_per_chunk,
                                total_timesteps=10**9, **overrides))[0]


def bench_hephaestus(env_name, num_envs, num_steps, updates_per_chunk, **overrides):
    import jax
    import numpy as np

    from hephaestus.config.train_config import update_summary
    from hephaestus.run.loop import release_freed_memory
    from hephaestus.core.ppo import make_train

    config = case_config(env_name, num_envs, num_steps, updates_per_chunk, **overrides)
    t0 = time.perf_counter()
    trainer = make_train(config)  # builds the env and the initial state (compiles the reset)
    setup_s = time.perf_counter() - t0
    config = trainer.config  # resolved for the env: encoder and observation storage settled
    n = np.int32(updates_per_chunk)
    t0 = time.perf_counter()
    compiled = trainer.compiled_chunk.lower(trainer.runner_state, n).compile()
    compile_s = time.perf_counter() - t0
    release_freed_memory()  # as the training loop does
    state, _ = compiled(trainer.runner_state, n)  # warm-up run
    # With --num-seeds S the chunk trains S agents: its throughput counts all of their env steps.
    sps = time_chunks(lambda s: compiled(s, n), state, updates_per_chunk * config.batch_size * config.run.num_seeds)
    # The program's own buffers as XLA planned them (arguments + outputs + temporaries, aliased donations
    # counted once): what a GPU/TPU needs, without the compiler's and Python's share of the process peak.
    # Matrix-product work per env step of the chunk as traced (its scan of `log_interval` update slots, each run)
    flops = matmul_flops(jax.make_jaxpr(trainer.compiled_chunk)(trainer.runner_state, n)) / (
        config.run.log_interval * config.batch_size * config.run.num_seeds)
    mem = compiled.memory_analysis()
    program_mib = (mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes
                   - mem.alias_size_in_bytes) / 2**20 if mem is not None else float("nan")
    return {"compile_s": compile_s, "steps_per_s": sps, "matmul_flops_per_step": flops,
            "detail": f"setup {setup_s:.1f}s, " + (f"{config.run.num_seeds} seeds, " if config.run.num_seeds > 1 else "") +
                      f"{update_summary(config)}, hidden {config.network.hidden_dim}, "
                      f"{config.network.encoder} encoder, obs {config.network.obs_dtype}, "
                      f"XLA buffers {program_mib:,.0f} MiB, {flops / 1e6:,.2f} MFLOP of matmuls per env step"}


def bench_world_model_stage(env_name, num_envs, num_steps, updates_per_chunk, config_file=None, **overrides):
    """DTC's world_model stage alone, as the case's chunk runs it once per update: its compile seconds and env steps
    per second (one call = one update's scoring, replay write and gradient steps), and, in `detail`, the compile
    seconds of its two parts on their own (one member's loss gradient; the ensemble's scoring of a rollout) and
    the optimised program's size. Set beside the whole chunk's case, it says what the chunk's compile and run time
    are made of (specs/dtc.md, "Cost and evidence")."""
    import jax
    import jax.numpy as jnp

    from hephaestus.config.train_config import resolve_for_env
    from hephaestus.agents.dtc import agent as dtc_agent
    from hephaestus.agents.dtc import rssm
    from hephaestus.envs.registry import make_training_env

    # The config and env spec as make_train settles them, without building and compiling a whole fresh agent.
    config = case_config(env_name, num_envs, num_steps, updates_per_chunk, config_file, **overrides)
    spec = make_training_env(config.env).spec
    config = resolve_for_env(config, spec)
    dtc = config.stages.dtc
    model, init, train = dtc_agent.make_world_model(config, spec)
    state = init(jax.random.PRNGKey(0))
    t, n = config.env.num_steps, config.env.num_envs
    action = jnp.zeros((t, n), jnp.int32) if spec.discrete else jnp.zeros((t, n, spec.action_dim), jnp.float32)
    batch = {"obs": jnp.zeros((t, n, spec.obs_dim)), "next_obs": jnp.zeros((t, n, spec.obs_dim)), "action": action,
             "reward": jnp.zeros((t, n)), "terminated": jnp.zeros((t, n), bool), "truncated": jnp.zeros((t, n), bool)}
    if spec.discrete and spec.has_action_mask:
        batch["action_mask"] = jnp.ones((t, n, spec.action_dim), bool)

    def compile_seconds(fn, *args):
        t0 = time.perf_counter()
        compiled = jax.jit(fn).lower(*args).compile()
        return time.perf_counter() - t0, compiled

    flops = matmul_flops(jax.make_jaxpr(train)(jax.random.PRNGKey(1), state, batch)) / config.batch_size
    compile_s, stage = compile_seconds(train, jax.random.PRNGKey(1), state, batch)
    hlo_lines = sum(" = " in line for line in stage.as_text().splitlines())
    keys = iter(jax.random.split(jax.random.PRNGKey(2), 1 + TIMED_RUNS))
    state, _, _ = stage(next(keys), state, batch)  # warm-up
    sps = time_chunks(lambda s: stage(next(keys), s, batch)[::2], state, config.batch_size)
    seq = train.sample(jax.random.PRNGKey(3), state.replay)
    member = jax.tree.map(lambda x: x[0], state.params)
    grad_s, _ = compile_seconds(jax.grad(lambda p, k: rssm.member_loss(model, p, seq, k, dtc.free_bits, dtc.kl_dyn,
                                                                        dtc.kl_rep)[0]), member, jax.random.PRNGKey(4))
    first = jnp.zeros((t, n), bool)
    score_s, _ = compile_seconds(
        lambda p, h, k: dtc_agent.ensemble_novelty(model, p, batch["obs"], batch["action"], first, h, k,
                                                   dtc.aleatoric_weight, dtc.novelty_signal, batch["next_obs"]),
        state.params, state.h, jax.random.PRNGKey(5))
    return {"compile_s": compile_s, "steps_per_s": sps, "matmul_flops_per_step": flops,
            "detail": f"world_model stage alone ({dtc.wm_steps(config.batch_size)} gradient steps per update, "
                      f"{flops / 1e6:,.2f} MFLOP of matmuls per env step); "
                      f"compile of one member's loss gradient {grad_s:.1f}s, of scoring a rollout {score_s:.1f}s; "
                      f"{hlo_lines:,} optimised HLO instructions"}


def bench_reference(env_id, num_envs, num_steps, updates_per_chunk, hidden_dim, num_layers):
    import jax

    from hephaestus.config.train_config import auto_scale_for_batch_size
    from hephaestus.envs.gymnax_import import import_gymnax

    from hephaestus.tools.entry_points import load_script

    # benchmarks/ is not an installed package: load the reference implementation from its file beside this one
    make_reference_train = load_script(os.path.join(HERE, "purejaxrl_reference.py")).make_reference_train
    env, params = import_gymnax().make(env_id)
    minibatches, epochs = auto_scale_for_batch_size(num_envs, num_steps)
    init, chunk = make_reference_train(env, params, num_envs, num_steps, minibatches, epochs, hidden_dim, num_layers)
    state = init(jax.random.PRNGKey(0))
    t0 = time.perf_counter()
    compiled = jax.jit(lambda s: chunk(s, updates_per_chunk)).lower(state).compile()
    compile_s = time.perf_counter() - t0
    state, _ = compiled(state)
    sps = time_chunks(compiled, state, updates_per_chunk * num_envs * num_steps)
    return {"compile_s": compile_s, "steps_per_s": sps, "detail": f"{minibatches} mb x {epochs} ep, hidden {hidden_dim}"}


# PureJaxRL's ppo.py configuration as its __main__ has it (DEBUG off: its per-step host callback prints returns).
PUREJAXRL_CONFIG = {"LR": 2.5e-4, "NUM_ENVS": 4, "NUM_STEPS": 128, "TOTAL_TIMESTEPS": 5e5, "UPDATE_EPOCHS": 4,
                    "NUM_MINIBATCHES": 4, "GAMMA": 0.99, "GAE_LAMBDA": 0.95, "CLIP_EPS": 0.2, "ENT_COEF": 0.01,
                    "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.5, "ACTIVATION": "tanh", "ENV_NAME": "CartPole-v1",
                    "ANNEAL_LR": True, "DEBUG": False}
# The same run through our training script (its defaults already match: lr, gamma, lambda, clip, ent/vf coef, max
# grad norm, tanh, lr annealing, 2 x 64 for CartPole through config.ENV_DEFAULTS).
OURS_ARGS = ["--env", "gymnax:CartPole-v1", "--num-envs", "4", "--num-steps", "128", "--total-timesteps", "5e5",
             "--num-minibatches", "4", "--update-epochs", "4", "--hidden-dim", "64", "--no-wandb"]

PUREJAXRL_RUNNER = r"""
import importlib, json, sys, time, types
t_start = time.perf_counter()
for name in ("brax", "brax.envs", "brax.envs.wrappers", "brax.envs.wrappers.training", "navix"):
    try:
        importlib.import_module(name)
    except ImportError:  # wrappers.py imports them at the top; CartPole never uses them
        stand_in = types.ModuleType(name)
        stand_in.__getattr__ = lambda attr: None
        sys.modules[name] = stand_in
import jax
import ppo
config = json.loads(sys.argv[1])
t0 = time.perf_counter()
compiled = jax.jit(ppo.make_train(config)).lower(jax.random.PRNGKey(30)).compile()
t1 = time.perf_counter()
out = compiled(jax.random.PRNGKey(30))
jax.block_until_ready(out)
t2 = time.perf_counter()
steps = config["NUM_UPDATES"] * config["NUM_ENVS"] * config["NUM_STEPS"]
ret = float(out["metrics"]["returned_episode_returns"][-1].mean())
import resource
print("RESULT " + json.dumps({"peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "compile_s": t1 - t0, "steps_per_s": steps / (t2 - t1), "train_call_s": t2 - t0,
                              "process_s": t2 - t_start, "final_return": ret,
                              "detail": f"PureJaxRL's ppo.py, one train call of {int(config['NUM_UPDATES'])} updates"}))
"""


PORT_RUNNER = r"""
import importlib, json, resource, statistics, sys, time, types
try:
    importlib.import_module("gymnasium")
except ImportError:  # hackmatrix/__init__ imports the Swift bridge's gymnasium env; the JAX trainer never uses it
    for name in ("gymnasium", "gymnasium.spaces"):
        stand_in = types.ModuleType(name)
        stand_in.__getattr__ = lambda attr: type(attr, (), {})
        sys.modules[name] = stand_in
import jax
from hackmatrix.purejaxrl import TrainConfig, make_train
num_envs, num_steps, updates, timed_runs = (int(a) for a in sys.argv[1:5])
config = TrainConfig(num_envs=num_envs, num_steps=num_steps, total_timesteps=num_envs * num_steps * updates)
key = jax.random.PRNGKey(0)
t0 = time.perf_counter()
compiled = jax.jit(make_train(config)).lower(key).compile()
compile_s = time.perf_counter() - t0
rates = []
for _ in range(timed_runs):  # each call: its reset and network initialisation, then `updates` updates
    t0 = time.perf_counter()
    jax.block_until_ready(compiled(key))
    rates.append(config.num_updates * config.batch_size / (time.perf_counter() - t0))
print("RESULT " + json.dumps({"peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                              "compile_s": compile_s, "steps_per_s": statistics.median(rates),
                              "detail": f"the public port's trainer, {config.num_updates} updates per call, "
                                        f"{config.num_minibatches} mb x {config.update_epochs} ep, "
                                        f"{config.num_layers} x {config.hidden_dim} shared torso"}))
"""


def run_foreign(who: str, folder: str, python: str, runner: str, *args: str) -> dict:
    """Another project's code (`runner`, with `folder` first on its path) in a fresh `python` process -> the
    figures it prints on its RESULT line; a failure is a RuntimeError naming `who` and its last error line."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (folder, os.environ.get("PYTHONPATH")) if p)}
    out = subprocess.run([python, "-c", runner, *args], capture_output=True, text=True, env=env)
    line = next((l for l in out.stdout.splitlines() if l.startswith("RESULT ")), None)
    if out.returncode or line is None:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{who} failed: {last[:200]}")
    return json.loads(line[len("RESULT "):])


def run_port(port_dir: str, python: str, num_envs: int, num_steps: int, updates_per_call: int) -> dict:
    """The public HackMatrix port's own `make_train` (from `port_dir`, its python/ folder), compiled once and called
    TIMED_RUNS times in a fresh process -> its figures, as bench_hephaestus reports ours."""
    return run_foreign("the port's trainer", port_dir, python, PORT_RUNNER, str(num_envs), str(num_steps),
                       str(updates_per_call), str(TIMED_RUNS))


def run_purejaxrl(reference_dir: str, python: str, config: dict) -> dict:
    """PureJaxRL's own `make_train(config)`, compiled and run once in a fresh process -> its figures."""
    return run_foreign("PureJaxRL's ppo.py", reference_dir, python, PUREJAXRL_RUNNER, json.dumps(config))


def run_ours_script(run_dir: str, cold_cache: bool = False) -> dict:
    """scripts/train_purejaxrl.py on the PureJaxRL configuration, as a user starts it -> steps/s after compile
    (env steps / the chunks' wall seconds, from its metrics.jsonl) and the wall time from starting the process to
    the final checkpoint's "complete" line."""
    env = dict(os.environ)
    if cold_cache:  # an empty persistent compilation cache: the compile a first run pays
        env["JAX_COMPILATION_CACHE_DIR"] = os.path.join(run_dir, "compile-cache")
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "scripts", "train_purejaxrl.py"), *OURS_ARGS,
                             "--checkpoint-dir", run_dir, "--run-name", "cartpole"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    to_checkpoint = None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if to_checkpoint is None and line.startswith("checkpoint: ") and " complete" in line:
            to_checkpoint = time.perf_counter() - t0
    if proc.wait() or to_checkpoint is None:
        raise RuntimeError(f"train_purejaxrl.py failed: {(lines or ['no output'])[-1].strip()[:200]}")
    records = [json.loads(l) for l in open(os.path.join(run_dir, "cartpole", "metrics.jsonl"))]
    last = [r for r in records if "steps_per_second" in r][-1]
    compile_s = next((float(l.split()[1].rstrip("s")) for l in lines if l.startswith("compile: ")), float("nan"))
    return {"steps_per_s": last["env_steps"] / last["wall_seconds"], "run_s": to_checkpoint, "compile_s": compile_s,
            "final_return": last["mean_episode_return"]}


def compare_with_purejaxrl(reference_dir: str, python: str, rounds: int, cold_cache: bool) -> int:
    """Alternate our script and PureJaxRL's ppo.py `rounds` times; print each round and the medians' ratios.
    PureJaxRL has no persistent compilation cache: it compiles every time. Ours uses its cache (a second run of
    the same configuration finds the program there) unless `cold_cache`."""
    import tempfile

    print(f"CartPole-v1, 4 envs x 128 steps, 4 minibatches x 4 epochs, 2 x 64 tanh, 5e5 env steps; {rounds} "
          f"alternating rounds on {os.cpu_count()} cores; our compilation cache "
          f"{'empty every run' if cold_cache else 'as a user has it'}")
    print(f"{'round':>5} {'who':<10} {'steps/s after compile':>22} {'whole run s':>12} {'compile s':>9} {'return':>7}")
    ours, theirs = [], []
    for i in range(rounds):
        for who in (("hephaestus", "purejaxrl") if i % 2 == 0 else ("purejaxrl", "hephaestus")):
            if who == "purejaxrl":
                r = run_purejaxrl(reference_dir, python, PUREJAXRL_CONFIG)
                r["run_s"] = r["train_call_s"]  # its `train` call including the compile (imports not counted)
                theirs.append(r)
            else:
                with tempfile.TemporaryDirectory() as run_dir:
                    r = run_ours_script(run_dir, cold_cache)
                ours.append(r)
            print(f"{i + 1:>5} {who:<10} {r['steps_per_s']:>22,.0f} {r['run_s']:>12.2f} {r['compile_s']:>9.2f} "
                  f"{r['final_return']:>7.1f}", flush=True)
    med = lambda rows, key: statistics.median(r[key] for r in rows)  # noqa: E731
    print(f"env steps/s after compile, hephaestus / PureJaxRL: {med(ours, 'steps_per_s') / med(theirs, 'steps_per_s'):.2f}x "
          f"(medians {med(ours, 'steps_per_s'):,.0f} / {med(theirs, 'steps_per_s'):,.0f})")
    print(f"whole run, hephaestus (process start to final checkpoint) / PureJaxRL (train call with compile): "
          f"{med(ours, 'run_s') / med(theirs, 'run_s'):.2f}x (medians {med(ours, 'run_s'):.2f}s / {med(theirs, 'run_s'):.2f}s)")
    return 0


def bench_random_policy(env_name, num_envs, steps_per_chunk):
    """Env alone: masked-uniform random actions, `steps_per_chunk` vectorised steps in one scan."""
    import jax
    import jax.numpy as jnp

    from hephaestus.envs.registry import make_env

    env = make_env(env_name)
    v_reset, v_step = jax.vmap(env.reset), jax.vmap(env.step)

    def chunk(carry):
        def one(carry, key):
            state, mask = carry
            k_act, k_env = jax.random.split(key)
            action = jax.random.categorical(k_act, jnp.where(mask, 0.0, -1e9))
            state, step = v_step(jax.random.split(k_env, num_envs), state, action)
            return (state, step.action_mask), step.reward.sum()

        (state, mask), key = carry
        key, sub = jax.random.split(key)
        (state, mask), rewards = jax.lax.scan(one, (state, mask), jax.random.split(sub, steps_per_chunk))
        return ((state, mask), key), rewards

    state, first = v_reset(jax.random.split(jax.random.PRNGKey(0), num_envs))
    carry = ((state, first.action_mask), jax.random.PRNGKey(1))
    t0 = time.perf_counter()
    compiled = jax.jit(chunk, donate_argnums=0).lower(carry).compile()
    compile_s = time.perf_counter() - t0
    carry, _ = compiled(carry)
    sps = time_chunks(compiled, carry, steps_per_chunk * num_envs)
    return {"compile_s": compile_s, "steps_per_s": sps, "detail": "random policy, env only"}


# scripts/experiments/deepsea.py's PPO settings, for the DeepSea cases.
DEEPSEA_PROTOCOL = dict(num_envs=16, num_steps=32, updates_per_chunk=8, hidden_dim=64, num_layers=2,
                        num_minibatches=4, update_epochs=4, lr=1e-3, anneal_lr=False)


# The default HackMatrix training workload at 2048 envs; its cases change one option each.
HACKMATRIX_2048X128 = dict(env_name="hackmatrix", num_envs=2048, num_steps=128, updates_per_chunk=1)
HACKMATRIX_64X128 = dict(env_name="hackmatrix", num_envs=64, num_steps=128, updates_per_chunk=2)
HACKMATRIX_512X128 = dict(env_name="hackmatrix", num_envs=512, num_steps=128, updates_per_chunk=1)


# name -> (function, kwargs). Sizes keep the whole default run under ~5 minutes on 2 CPU cores.
CASES = {
    "cartpole-4x128": (bench_hephaestus, dict(env_name="gymnax:CartPole-v1", num_envs=4, num_steps=128,
                                              updates_per_chunk=100, hidden_dim=64, num_layers=2)),
    "cartpole-4x128-reference": (bench_reference, dict(env_id="CartPole-v1", num_envs=4, num_steps=128,
                                                       updates_per_chunk=100, hidden_dim=64, num_layers=2)),
    # --num-seeds 4 in one program: its aggregate env steps/s against one seed's (4 separate runs one after
    # another have the single run's rate). specs/pipeline.md, "Many seeds", has the measured ratios.
    "cartpole-4x128-seeds4": (bench_hephaestus, dict(env_name="gymnax:CartPole-v1", num_envs=4, num_steps=128,
                                                     updates_per_chunk=100, hidden_dim=64, num_layers=2, num_seeds=4)),
    "cartpole-2048x128": (bench_hephaestus, dict(env_name="gymnax:CartPole-v1", num_envs=2048, num_steps=128,
                                                 updates_per_chunk=1, hidden_dim=64, num_layers=2)),
    # The accelerator sizes: CartPole and HackMatrix at 2048 and 8192 envs on a GPU.
    "cartpole-8192x128": (bench_hephaestus, dict(env_name="gymnax:CartPole-v1", num_envs=8192, num_steps=128,
                                                 updates_per_chunk=1, hidden_dim=64, num_layers=2)),
    "cartpole-2048x128-reference": (bench_reference, dict(env_id="CartPole-v1", num_envs=2048, num_steps=128,
                                                          updates_per_chunk=1, hidden_dim=64, num_layers=2)),
    # PPO vs PPO + DTC (world_model + intrinsic_reward stages, default DTC sizes), same PPO config; goal <= 2x cost.
    "cartpole-64x128": (bench_hephaestus, dict(env_name="gymnax:CartPole-v1", num_envs=64, num_steps=128,
                                               updates_per_chunk=4)),
    "cartpole-64x128-dtc": (bench_hephaestus, dict(env_name="gymnax:CartPole-v1", num_envs=64, num_steps=128,
                                                   updates_per_chunk=4,
                                                   extra_stages=("world_model", "intrinsic_reward"))),
    "cartpole-64x128-rnd": (bench_hephaestus, dict(env_name="gymnax:CartPole-v1", num_envs=64, num_steps=128,
                                                   updates_per_chunk=4, extra_stages=("rnd",))),
    "cartpole-64x128-rnd-critic": (bench_hephaestus, dict(env_name="gymnax:CartPole-v1", num_envs=64, num_steps=128,
                                                          updates_per_chunk=4, extra_stages=("rnd", "intrinsic_critic"))),
    # The dreamer agents (rollout -> dreamer: world model + actor-critic in imagination, no PPO update) at the same
    # env batch as cartpole-64x128, default sizes (replay ratio 1, horizon 15); the goal: <= 3x PPO per env step.
    "cartpole-64x128-dreamer": (bench_hephaestus, dict(env_name="gymnax:CartPole-v1", num_envs=64, num_steps=128,
                                                       updates_per_chunk=4, agent="dreamer")),
    "cartpole-64x128-dreamer-dtc": (bench_hephaestus, dict(env_name="gymnax:CartPole-v1", num_envs=64,
                                                           num_steps=128, updates_per_chunk=4, agent="dreamer-dtc")),
    # The boredom-driven horizon (--dreamer-horizons): what a bored agent's 8-step dreams save against 64-step ones,
    # and what compiling the four lengths side by side costs (a fresh agent is not bored: it dreams 64).
    "cartpole-64x128-dreamer-dtc-h8": (bench_hephaestus, dict(env_name="gymnax:CartPole-v1", num_envs=64,
                                                              num_steps=128, updates_per_chunk=4, agent="dreamer-dtc",
                                                              dreamer_horizon=8)),
    "cartpole-64x128-dreamer-dtc-h64": (bench_hephaestus, dict(env_name="gymnax:CartPole-v1", num_envs=64,
                                                               num_steps=128, updates_per_chunk=4, agent="dreamer-dtc",
                                                               dreamer_horizon=64)),
    "cartpole-64x128-dreamer-dtc-horizons": (bench_hephaestus, dict(env_name="gymnax:CartPole-v1", num_envs=64,
                                                                    num_steps=128, updates_per_chunk=4,
                                                                    agent="dreamer-dtc",
                                                                    dreamer_horizons=(8, 16, 32, 64))),
    # DeepSea-20 at the bsuite experiment's settings (scripts/experiments/deepsea.py: 16 envs x 32 steps, 2 x 64,
    # 4 minibatches x 4 epochs, constant lr 1e-3): what each exploration bonus costs per env step against PPO, and
    # DTC both at its defaults and at configs/deepsea-dtc.yaml's setting (randomized prior 1, replay ratio 4, every
    # world-model draw from the last rollout), the one that solves DeepSea-30 (specs/dtc.md).
    "deepsea20-16x32": (bench_hephaestus, dict(env_name="deepsea:20", **DEEPSEA_PROTOCOL)),
    "deepsea20-16x32-count": (bench_hephaestus, dict(env_name="deepsea:20", agent="count", **DEEPSEA_PROTOCOL)),
    "deepsea20-16x32-rnd": (bench_hephaestus, dict(env_name="deepsea:20", agent="rnd", **DEEPSEA_PROTOCOL)),
    "deepsea20-16x32-dtc": (bench_hephaestus, dict(env_name="deepsea:20", agent="dtc", **DEEPSEA_PROTOCOL)),
    "deepsea20-16x32-dtc-prior": (bench_hephaestus, dict(env_name="deepsea:20", config_file="configs/deepsea-dtc.yaml",
                                                         **DEEPSEA_PROTOCOL)),
    # The chunk above taken apart (a `-wm` case beside its chunk's): DTC's world_model stage alone at the same setting.
    "deepsea20-16x32-dtc-prior-wm": (bench_world_model_stage, dict(env_name="deepsea:20",
                                                                   config_file="configs/deepsea-dtc.yaml",
                                                                   **DEEPSEA_PROTOCOL)),
    "hackmatrix-random-2048": (bench_random_policy, dict(env_name="hackmatrix", num_envs=2048, steps_per_chunk=64)),
    # Defaults (configs/hackmatrix-tpu.yaml's: the ego encoder at half width, 128 and cell 8, the exit-rush-collector
    # teacher (the -h128c8 case below keeps the exit-rush-programs one), exact uint8 observation storage, R94's quirk
    # off in training, programs acquired paid on the clear, and the late-start curriculum, whose resets build stages
    # 2-8: -acquired2 is the training env without the curriculum, to measure what it costs), then one option changed
    # each: two former defaults (-safe256: full width, exit-rush-safe; -mlp: MLP, exit-rush teacher), the other
    # encoders, float32 storage (the default before uint8). The targets at 2048 x 128: >= 18,000 env steps/s,
    # peak < 2 GiB, compile < 15 s.
    "hackmatrix-ppo-2048x128": (bench_hephaestus, dict(HACKMATRIX_2048X128)),
    "hackmatrix-ppo-2048x128-acquired2": (bench_hephaestus, dict(HACKMATRIX_2048X128, env_params=(
        "program_played_coef=10", "siphon_death_penalty=0", "program_played_at_clear=1", "undo_across_stages=0",
        "program_acquired_coef=2", "program_acquired_at_clear=1"))),
    "hackmatrix-ppo-2048x128-safe256": (bench_hephaestus, dict(HACKMATRIX_2048X128, encoder="ego", hidden_dim=256,
                                                               cell_dim=16, teacher="exit-rush-safe")),
    "hackmatrix-ppo-8192x128": (bench_hephaestus, dict(env_name="hackmatrix", num_envs=8192, num_steps=128,
                                                       updates_per_chunk=1)),
    "hackmatrix-random-8192": (bench_random_policy, dict(env_name="hackmatrix", num_envs=8192, steps_per_chunk=64)),
    # Accelerator sizes (the --device-check set): on a 2-core CPU these take minutes each.
    "hackmatrix-random-32768": (bench_random_policy, dict(env_name="hackmatrix", num_envs=32768, steps_per_chunk=64)),
    "hackmatrix-ppo-32768x128": (bench_hephaestus, dict(env_name="hackmatrix", num_envs=32768, num_steps=128,
                                                        updates_per_chunk=1)),
    # The same comparison on HackMatrix at a small size (CPU-sized): 64 envs x 32 steps, 1 seed vs 4 seeds.
    "hackmatrix-ppo-64x32": (bench_hephaestus, dict(env_name="hackmatrix", num_envs=64, num_steps=32,
                                                    updates_per_chunk=4)),
    "hackmatrix-ppo-64x32-seeds4": (bench_hephaestus, dict(env_name="hackmatrix", num_envs=64, num_steps=32,
                                                           updates_per_chunk=4, num_seeds=4)),
    # Every agent on HackMatrix at its CPU-sized default batch (64 envs x 128 steps), the dreamers' cost per env step
    # (goal <= 3x PPO's) on a second env: PPO at the defaults (ego encoder, the collector teacher), PPO on the
    # dreamers' own network (the MLP, no teacher: what --agent dreamer settles), PPO + DTC's bonus (replay ratio 1,
    # and 0.25 as the exploration screen of specs/hackmatrix.md ran it), RND, and the two dreamers (replay ratio 1,
    # horizon 15).
    "hackmatrix-ppo-64x128": (bench_hephaestus, dict(HACKMATRIX_64X128)),
    "hackmatrix-ppo-64x128-mlp": (bench_hephaestus, dict(HACKMATRIX_64X128, encoder="mlp", teacher="none")),
    "hackmatrix-64x128-dtc": (bench_hephaestus, dict(HACKMATRIX_64X128, agent="dtc")),
    "hackmatrix-64x128-dtc-r025": (bench_hephaestus, dict(HACKMATRIX_64X128, agent="dtc", dtc_replay_ratio=0.25)),
    "hackmatrix-64x128-rnd": (bench_hephaestus, dict(HACKMATRIX_64X128, agent="rnd")),
    # Never Give Up's episodic bonus (exact top-k over each env's 128-slot memory) against PPO at the same batch.
    "hackmatrix-512x128-episodic": (bench_hephaestus, dict(HACKMATRIX_512X128, agent="episodic")),
    "hackmatrix-64x128-dreamer": (bench_hephaestus, dict(HACKMATRIX_64X128, agent="dreamer")),
    "hackmatrix-64x128-dreamer-dtc": (bench_hephaestus, dict(HACKMATRIX_64X128, agent="dreamer-dtc")),
    # The dreamer of the 2e7 comparison (configs/hackmatrix-dreamer-2e7.yaml: 512 envs, replay ratio 1/16, the ego
    # world model) against PPO at the same env batch (HackMatrix's defaults at 512 x 128); PPO's own 2e7 row ran
    # hackmatrix-ppo-2048x128's config (configs/hackmatrix-tpu.yaml).
    "hackmatrix-512x128-dreamer-2e7": (bench_hephaestus, dict(HACKMATRIX_512X128,
                                                             config_file="configs/hackmatrix-dreamer-2e7.yaml")),
    "hackmatrix-512x128-dreamer-dtc-2e7": (bench_hephaestus, dict(HACKMATRIX_512X128, agent="dreamer-dtc",
                                                                 config_file="configs/hackmatrix-dreamer-2e7.yaml")),
    "hackmatrix-ppo-512x128": (bench_hephaestus, dict(HACKMATRIX_512X128)),
    "hackmatrix-ppo-2048x128-cells": (bench_hephaestus, dict(HACKMATRIX_2048X128, encoder="cells")),
    "hackmatrix-ppo-2048x128-salience": (bench_hephaestus, dict(HACKMATRIX_2048X128, encoder="salience")),
    "hackmatrix-ppo-2048x128-mlp": (bench_hephaestus, dict(HACKMATRIX_2048X128, encoder="mlp", teacher="exit-rush")),
    "hackmatrix-ppo-2048x128-f32": (bench_hephaestus, dict(HACKMATRIX_2048X128, obs_dtype="float32")),
    # The teachers' cost on the MLP (measured beside -mlp's exit-rush): --teacher none, and the
    # look-ahead teachers (four move-or-attacks and up to three breadth-first searches per env per step, not one).
    "hackmatrix-ppo-2048x128-noteacher": (bench_hephaestus, dict(HACKMATRIX_2048X128, encoder="mlp", teacher="none")),
    # The port's network size on our pipeline (bench.py --port-dir, hackmatrix-ppo-2048x128-port): the MLP at 2 x 256,
    # no teacher, our default minibatches (auto-scaled: 32 x 2) and uint8 storage; the port shares one 2 x 256 torso
    # between actor and critic and runs 4 x 4 on float32 observations.
    "hackmatrix-ppo-2048x128-mlp256": (bench_hephaestus, dict(HACKMATRIX_2048X128, encoder="mlp", hidden_dim=256,
                                                              teacher="none")),
    # The defaults without their teacher: the collector's cost, which a run pays after its weight reaches 0 too.
    "hackmatrix-ppo-2048x128-ego-noteacher": (bench_hephaestus, dict(HACKMATRIX_2048X128, teacher="none")),
    "hackmatrix-ppo-2048x128-safe": (bench_hephaestus, dict(HACKMATRIX_2048X128, encoder="mlp",
                                                            teacher="exit-rush-safe")),
    "hackmatrix-ppo-2048x128-programs": (bench_hephaestus, dict(HACKMATRIX_2048X128, encoder="mlp",
                                                                teacher="exit-rush-programs")),
    # Two turns deep: four enemy phases and twenty move-or-attacks per env per step, on the ego student it teaches.
    "hackmatrix-ppo-2048x128-deep": (bench_hephaestus, dict(HACKMATRIX_2048X128, encoder="ego", teacher="exit-rush-deep")),
    # Half-width MLP (128): 1.65x the width-256 MLP's speed. Not the default width: in 2e6-step runs at HackMatrix's entropy
    # bonus it cleared stages on 4 of 5 seeds against 5 of 5 for width 256, and less of them (specs/hackmatrix.md).
    "hackmatrix-ppo-2048x128-h128": (bench_hephaestus, dict(HACKMATRIX_2048X128, hidden_dim=128, encoder="mlp")),
    # The ego student at half width and half the cell embedding (--hidden-dim 128 --cell-dim 8), with the programs
    # teacher: trained 2.0-2.1x faster than the full width at 2048 envs on the 2-core CPU, learning slower per env
    # step (specs/hackmatrix.md, "A narrower ego student"); a former HackMatrix default, named in full.
    "hackmatrix-ppo-2048x128-h128c8": (bench_hephaestus, dict(HACKMATRIX_2048X128, encoder="ego", hidden_dim=128, cell_dim=8,
                                                              teacher="exit-rush-programs")),
}


# --device-check: what a GPU or TPU session measures in one call of under 8 minutes on one card: HackMatrix's env
# alone and its PPO at 2048, 8192 and 32,768 envs, and CartPole's PPO at 8192; compile seconds, env steps/s and
# peak device memory, one line per case, appended to --out as each case ends (a cut-short session keeps the lines
# it has).
DEVICE_CHECK = ("hackmatrix-random-2048", "hackmatrix-random-8192", "hackmatrix-random-32768",
                "hackmatrix-ppo-2048x128", "hackmatrix-ppo-8192x128", "hackmatrix-ppo-32768x128", "cartpole-8192x128")
DEVICE_CHECK_CASE_TIMEOUT_S = 150  # a case that does not finish in this time is reported as such; the rest run


# --devices: one global workload (envs split over the `data` mesh axis) per device count. On a CPU the devices
# are simulated (XLA_FLAGS=--xla_force_host_platform_device_count) and share the same cores, so the figures
# measure the overhead of sharding, not a speed-up.
DEVICES_CASE = dict(env_name="gymnax:CartPole-v1", num_envs=64, num_steps=64, updates_per_chunk=4, hidden_dim=64,
                    num_layers=2)
CPU_DEVICE_FLAGS = "--xla_force_host_platform_device_count={n}"  # added to the user's XLA_FLAGS


def run_devices_worker(n: int) -> None:
    import jax

    result = bench_hephaestus(**DEVICES_CASE, num_devices=n)
    result["peak_mib"] = peak_memory_mib()
    result["devices"] = jax.device_count()
    print("RESULT " + json.dumps(result), flush=True)


def run_devices(counts: list[int]) -> int:
    import jax

    platform, available = jax.devices()[0].platform, jax.device_count()
    simulated = platform == "cpu"
    c = DEVICES_CASE
    print(f"jax {jax.__version__} on {platform}; {c['env_name']}, {c['num_envs']} envs x {c['num_steps']} steps "
          f"(global), hidden {c['hidden_dim']}; median of {TIMED_RUNS} timed chunks of {c['updates_per_chunk']} updates")
    if simulated:
        print(f"note: {platform} devices are simulated and share the same {os.cpu_count()} cores: this measures "
              "sharding overhead, not speed-up")
    print(f"{'devices':>7} {'compile s':>9} {'env steps/s':>12} {'vs 1 device':>11} {'peak MiB':>9}")
    base = None
    for n in counts:
        if c["num_envs"] % n:
            print(f"{n:>7} skipped: {c['num_envs']} envs do not divide by {n}")
            continue
        env = dict(os.environ)
        if simulated:
            env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + CPU_DEVICE_FLAGS.format(n=n)).strip()
        elif n > available:
            print(f"{n:>7} skipped: only {available} {platform} devices")
            continue
        out = subprocess.run([sys.executable, __file__, "--devices-worker", str(n)], capture_output=True, text=True,
                             env=env)
        line = next((l for l in out.stdout.splitlines() if l.startswith("RESULT ")), None)
        if out.returncode or line is None:
            last = (out.stderr.strip().splitlines() or ["no output"])[-1]
            print(f"{n:>7} failed: {last[:120]}")
            continue
        r = json.loads(line[len("RESULT "):])
        base = base or (r["steps_per_s"] if n == 1 else None)
        ratio = f"{r['steps_per_s'] / base:.2f}x" if base else "-"
        print(f"{n:>7} {r['compile_s']:>9.1f} {r['steps_per_s']:>12,.0f} {ratio:>11} {r['peak_mib']:>9,.0f}", flush=True)
    return 0


def run_worker(name: str) -> None:
    fn, kwargs = CASES[name]  # the purejaxrl case is added by main() from --reference-dir
    result = fn(**kwargs)
    result.setdefault("peak_mib", peak_memory_mib())  # the purejaxrl case reports its own process's
    print("RESULT " + json.dumps(result), flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", help="comma-separated case names (default: all)")
    p.add_argument("--devices", help="comma-separated device counts, e.g. 1,2,4,8: run one data-parallel "
                   "workload on each instead of the cases (simulated devices on a CPU)")
    p.add_argument("--reference-dir", metavar="DIR", help="folder with PureJaxRL's own ppo.py and wrappers.py: adds "
                   "the case cartpole-4x128-purejaxrl; without --cases, runs the script-against-PureJaxRL comparison")
    p.add_argument("--reference-python", metavar="PYTHON", default=sys.executable,
                   help="interpreter for PureJaxRL's ppo.py (it needs distrax and gymnax < 1; default: this one)")
    p.add_argument("--port-dir", metavar="DIR", help="the python/ folder of the public HackMatrix port "
                   "(charleseff/HackMatrix): adds the case hackmatrix-ppo-2048x128-port, its own trainer")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds of that comparison (default 3)")
    p.add_argument("--cold-cache", action="store_true", help="in that comparison, start our script with an empty "
                   "compilation cache every time (PureJaxRL has none)")
    p.add_argument("--device-check", action="store_true", help="the accelerator check: HackMatrix env alone and "
                   f"PPO at 2048/8192/32768 envs, CartPole PPO at 8192 ({', '.join(DEVICE_CHECK)}), each case at most "
                   f"{DEVICE_CHECK_CASE_TIMEOUT_S} s; with --out, the lines go to that file too")
    p.add_argument("--out", metavar="FILE", help="also append the printed lines to FILE (written as each case ends)")
    p.add_argument("--case-timeout", type=float, default=None, metavar="S",
                   help="report a case that runs longer than S seconds as timed out and go on")
    p.add_argument("--baseline", metavar="REV", help="also run every case on the package as git revision REV "
                   "has it (its python/ folder, exported to a temporary folder), each case right after this "
                   "checkout's, and print this checkout's env steps/s and compile as ratios to it")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--devices-worker", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.reference_dir:  # in the main process and in its workers alike
        args.reference_dir = os.path.abspath(args.reference_dir)
        CASES["cartpole-4x128-purejaxrl"] = (run_purejaxrl, dict(reference_dir=args.reference_dir,
                                                                 python=args.reference_python, config=PUREJAXRL_CONFIG))
    if args.port_dir:
        args.port_dir = os.path.abspath(args.port_dir)
        CASES["hackmatrix-ppo-2048x128-port"] = (run_port, dict(port_dir=args.port_dir, python=sys.executable,
                                                                num_envs=2048, num_steps=128, updates_per_call=1))
    if args.worker:
        run_worker(args.worker)
        return 0
    if args.devices_worker:
        run_devices_worker(args.devices_worker)
        return 0
    if args.devices:
        try:
            counts = [int(n) for n in args.devices.split(",") if n.strip()]
        except ValueError:
            counts = []
        if not counts or min(counts) < 1:
            print(f"error: --devices takes positive counts like 1,2,4,8, got {args.devices!r}", file=sys.stderr)
            return 2
        return run_devices(counts)
    if args.port_dir and not os.path.isfile(os.path.join(args.port_dir, "hackmatrix", "purejaxrl", "train.py")):
        print(f"error: --port-dir {args.port_dir}: no hackmatrix/purejaxrl/train.py there (the port's python/ folder)",
              file=sys.stderr)
        return 2
    if args.reference_dir:
        if not os.path.isfile(os.path.join(args.reference_dir, "ppo.py")):
            print(f"error: --reference-dir {args.reference_dir}: no ppo.py there (PureJaxRL's purejaxrl/ folder)",
                  file=sys.stderr)
            return 2
        if args.cases is None:
            if args.rounds < 1:
                print(f"error: --rounds must be >= 1, got {args.rounds}", file=sys.stderr)
                return 2
            try:
                return compare_with_purejaxrl(args.reference_dir, args.reference_python, args.rounds, args.cold_cache)
            except RuntimeError as err:
                print(f"error: {err}", file=sys.stderr)
                return 1
    if args.device_check and args.cases:
        print("error: give --device-check or --cases, not both", file=sys.stderr)
        return 2
    if args.out:
        from hephaestus.tools.outputs import output_file_problem

        problem = output_file_problem("--out", args.out, "device-check.txt")
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            return 2
    timeout = args.case_timeout or (DEVICE_CHECK_CASE_TIMEOUT_S if args.device_check else None)
    names = list(DEVICE_CHECK) if args.device_check else \
        [n.strip() for n in (args.cases or ",".join(CASES)).split(",") if n.strip()]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        print(f"error: unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}", file=sys.stderr)
        return 2
    import jax

    def say(line: str) -> None:  # every line of the table, also appended to --out
        print(line, flush=True)
        if args.out:
            with open(args.out, "a") as f:
                print(line, file=f)

    device = jax.devices()[0]
    say(f"jax {jax.__version__} on {device.platform} ({getattr(device, 'device_kind', '')}; {os.cpu_count()} "
          f"cores); median of {TIMED_RUNS} timed chunks after compile")
    say(f"{'case':<30} {'compile s':>9} {'env steps/s':>12} {'peak MiB':>9}  detail")
    results = {}
    foreign = ["--reference-dir", args.reference_dir, "--reference-python", args.reference_python] \
        if args.reference_dir else []  # the workers add the same foreign cases
    foreign += ["--port-dir", args.port_dir] if args.port_dir else []
    runs = [(name, name, None) for name in names]
    if args.baseline:
        base_dir = export_baseline(args.baseline)
        if base_dir is None:
            print(f"error: --baseline {args.baseline}: not a git revision of {ROOT} with a python/ folder",
                  file=sys.stderr)
            return 2
        base_env = {**os.environ, "PYTHONPATH": os.path.join(base_dir, "python"), BASELINE_ENV: args.baseline}
        runs = [run for name in names for run in ((name, name, None), (f"{name}@{args.baseline}", name, base_env))]
    for shown, name, env in runs:
        try:
            out = subprocess.run([sys.executable, __file__, "--worker", name, *foreign], capture_output=True,
                                 text=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            say(f"{shown:<30} timed out after {timeout:.0f} s")
            continue
        line = next((l for l in out.stdout.splitlines() if l.startswith("RESULT ")), None)
        if out.returncode or line is None:
            last = (out.stderr.strip().splitlines() or ["no output"])[-1]
            say(f"{shown:<30} failed: {last[:120]}")
            continue
        r = results[shown] = json.loads(line[len("RESULT "):])
        say(f"{shown:<30} {r['compile_s']:>9.1f} {r['steps_per_s']:>12,.0f} {r['peak_mib']:>9,.0f}  {r['detail']}")
    for name in names if args.baseline else ():
        ours, base = results.get(name), results.get(f"{name}@{args.baseline}")
        if ours and base:
            say(f"{name}: this checkout / {args.baseline} = {ours['steps_per_s'] / base['steps_per_s']:.2f}x env "
                f"steps/s, compile {ours['compile_s']:.1f} s vs {base['compile_s']:.1f} s "
                f"({ours['compile_s'] / base['compile_s']:.2f}x)")
    for name in names:
        whole = results.get(name[:-len("-wm")]) if name.endswith("-wm") else None
        if name in results and whole:  # the world_model stage's share of its DTC chunk
            say(f"{name}: the world_model stage takes {whole['steps_per_s'] / results[name]['steps_per_s']:.0%} of "
                  f"the chunk's time per env step; compiled alone, {results[name]['compile_s'] / whole['compile_s']:.0%}"
                  " of its compile")
        ref = results.get(f"{name}-reference")
        if name in results and ref:
            say(f"{name}: hephaestus / our PureJaxRL-style reference = "
                  f"{results[name]['steps_per_s'] / ref['steps_per_s']:.2f}x")
        port = results.get("hackmatrix-ppo-2048x128-port")
        if name in results and port and name.startswith("hackmatrix-ppo-2048x128") and not name.endswith("-port"):
            say(f"{name}: hephaestus / the public port's trainer = {results[name]['steps_per_s'] / port['steps_per_s']:.2f}x "
                  f"env steps/s, {results[name]['peak_mib'] / port['peak_mib']:.2f}x peak memory")
        theirs = results.get(f"{name}-purejaxrl")
        if name in results and theirs:
            say(f"{name}: hephaestus chunk / PureJaxRL's ppo.py = {results[name]['steps_per_s'] / theirs['steps_per_s']:.2f}x")
        variants = {"dtc": "PPO+DTC", "dtc-prior": "PPO+DTC at configs/deepsea-dtc.yaml's setting",
                    "count": "PPO+count bonus", "rnd": "PPO+RND", "rnd-critic": "PPO+RND with its intrinsic critic",
                    "dreamer": "the dreamer",
                    "dreamer-dtc": "the dreamer with DTC novelty"}
        if name not in results or any(name.endswith(f"-{v}") for v in variants):
            continue  # not run, or a variant itself rather than the PPO case the variants are compared with
        for suffix, label in variants.items():
            other = results.get(f"{name}-{suffix}")
            if other:
                work = ""
                if other.get("matmul_flops_per_step") and results[name].get("matmul_flops_per_step"):
                    work = f", {other['matmul_flops_per_step'] / results[name]['matmul_flops_per_step']:.1f}x its matmul FLOPs"
                say(f"{name}: {label} costs {results[name]['steps_per_s'] / other['steps_per_s']:.2f}x PPO per env "
                      f"step{work} (compile {other['compile_s']:.1f}s vs {results[name]['compile_s']:.1f}s)")
    return 0


# Set in the workers of --baseline, whose `import hephaestus` is the baseline's exported package, not this checkout's.
BASELINE_ENV = "HEPHAESTUS_BENCH_BASELINE"


def export_baseline(rev: str) -> str | None:
    """A temporary folder holding git revision ``rev``'s python/ folder (None if there is no such revision)."""
    import tempfile

    folder = tempfile.mkdtemp(prefix="bench-baseline-")
    archive = subprocess.run(["git", "-C", ROOT, "archive", rev, "python"], capture_output=True)
    if archive.returncode:
        return None
    subprocess.run(["tar", "-x", "-C", folder], input=archive.stdout, check=True)
    return folder


if __name__ == "__main__":
    if not os.environ.get(BASELINE_ENV):
        require_this_checkout(__file__)
    sys.exit(main())
