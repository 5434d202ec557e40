#!/usr/bin/env python3
"""Can the dreamer's world model learn HackMatrix at all, given the data? An offline study.

The probe (`dreamer_hackmatrix_probe.py`) found the world model of a dreamer run carrying almost none of the reward
after 3e5 env steps at replay ratio 1 (1,184 gradient steps, each transition seen about once). This separates the
model from the run: it plays HackMatrix once with a fixed behaviour policy (the exit-rush-collector teacher, with a
share of masked-uniform random actions), keeps the transitions as the replay keeps them, and trains one world-model
member (`rssm.member_loss`, the dreamer's optimizer) on them for many gradient steps, scoring it at set steps on
held-out games (other envs of the same collection) teacher-forced through the posterior:

* the decoder: squared error in symlog space over the observations' variance (1 = predicts the mean);
* the reward head one step ahead (prior's next latent): correlation with the reward, and its mean on the large
  rewards (stage exits, siphon pickups, >= 0.9);
* the continuation head at episode ends and elsewhere;
* KL(posterior || prior) per step (what the posterior tells the model beyond its prediction).

The references for the reward head: a ridge regression and an MLP (2 x 256) fitted to the reward on the true input
(symlog of what the encoder reads, and the action) of the same split, with no world model in between.

    python scripts/experiments/dreamer_hackmatrix_offline.py --steps 1000,4000,16000 [--deter 64 --hidden 64 ...]
    python scripts/experiments/dreamer_hackmatrix_offline.py --quick          # a smoke run (the test suite's)

Prints one line per scoring point and writes OUT.json.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

from hephaestus.tools.experiment import add_out, check_out, write_json


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--envs", type=int, default=64, help="games played side by side for the data")
    p.add_argument("--length", type=int, default=1024, help="steps per game lane (a multiple of --seq-len)")
    p.add_argument("--held-out", type=int, default=8, help="lanes kept out of training, scored")
    p.add_argument("--random-share", type=float, default=0.3, help="share of the behaviour's actions drawn at random")
    p.add_argument("--teacher", default="exit-rush-collector", help="HackMatrix scripted policy of the behaviour")
    p.add_argument("--steps", default="1000,4000,16000", help="gradient steps at which to score (ascending)")
    p.add_argument("--batch", type=int, default=16, help="sequences per gradient step (the dreamer's --dtc-wm-batch)")
    p.add_argument("--seq-len", type=int, default=16)
    p.add_argument("--deter", type=int, default=64)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--groups", type=int, default=8)
    p.add_argument("--classes", type=int, default=8)
    p.add_argument("--logvar-init", type=float, default=-8.0)
    p.add_argument("--head-scale", type=float, default=1.0)
    p.add_argument("--recon-loss", choices=("nll", "mse"), default="nll")
    p.add_argument("--encoder", choices=("flat", "ego"), default="flat", help="what the encoder reads (--dtc-encoder)")
    p.add_argument("--free-bits", type=float, default=1.0)
    p.add_argument("--kl-rep", type=float, default=0.1)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--reference-steps", type=int, default=4000,
                   help="gradient steps of the direct reward MLP (the reference for the reward head); 0: none")
    p.add_argument("--env-params", nargs="*", default=[], help="HackMatrix params NAME=VALUE (default: the env's own)")
    p.add_argument("--quick", action="store_true", help="8 lanes x 64 steps, small model, steps 5,10")
    add_out(p, "dreamer_hackmatrix_offline", "writes OUT.json")
    args = p.parse_args(argv)
    args.out = check_out(p, args.out, "dreamer_hackmatrix_offline")
    if args.quick:
        args.envs, args.length, args.held_out, args.steps = 8, 64, 2, "5,10"
        args.deter = args.hidden = 16
        args.reference_steps = 10
    if args.length % args.seq_len or args.held_out >= args.envs:
        sys.exit("error: --length must be a multiple of --seq-len and --held-out below --envs")
    score_at = sorted({int(s) for s in args.steps.split(",")})

    from hephaestus.tools.entry_points import require_this_checkout

    require_this_checkout(__file__)
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    from hephaestus.config.train_config import TrainConfig
    from hephaestus.agents.dtc import replay as rp
    from hephaestus.agents.dtc import rssm
    from hephaestus.agents.dtc.agent import make_wm_optimizer, sizes_from
    from hephaestus.envs.registry import make_env, parse_env_params

    env = make_env("hackmatrix", **parse_env_params(args.env_params))
    spec = env.spec
    # The world model as a dreamer run configures it (its --dtc-* options), so sizes, optimizer and loss weights
    # are the pipeline's own (dtc/agent.py), not a copy.
    config = TrainConfig().replace(
        env="hackmatrix", agent="dreamer", dtc_deter_dim=args.deter, dtc_hidden_dim=args.hidden,
        dtc_stoch_groups=args.groups, dtc_stoch_classes=args.classes, dtc_logvar_init=args.logvar_init,
        dtc_head_loss_scale=args.head_scale, dtc_recon_loss=args.recon_loss, dtc_encoder=args.encoder,
        dtc_free_bits=args.free_bits, dtc_kl_rep=args.kl_rep, dtc_wm_lr=args.lr)
    dtc = config.stages.dtc
    sizes = sizes_from(config, spec)
    teacher = env.scripted_policy(args.teacher)
    key = jax.random.PRNGKey(args.seed)

    # --- the data: one fixed behaviour, every lane's transitions in order -------------------------------------
    def collect(key):
        state, first = jax.vmap(env.reset)(jax.random.split(key, args.envs))

        def one(carry, key):
            state, obs, mask = carry
            k_teacher, k_random, k_pick, k_env = jax.random.split(key, 4)
            scripted = jax.vmap(teacher)(state, mask, jax.random.split(k_teacher, args.envs))
            random = jax.random.categorical(k_random, jnp.where(mask, 0.0, -1e9))
            action = jnp.where(jax.random.uniform(k_pick, (args.envs,)) < args.random_share, random, scripted)
            state, step = jax.vmap(env.step)(jax.random.split(k_env, args.envs), state, action)
            done = step.terminated | step.truncated
            out = {"obs": obs, "action": action, "action_mask": mask, "reward": step.reward,
                   "terminated": step.terminated, "done": done, "next_obs": step.final_obs}
            return (state, step.obs, step.action_mask), out

        _, data = jax.lax.scan(one, (state, first.obs, first.action_mask), jax.random.split(key, args.length))
        return data  # [T, N, ...]

    key, k_data = jax.random.split(key)
    t0 = time.perf_counter()
    data = jax.device_get(jax.jit(collect)(k_data))
    collect_s = time.perf_counter() - t0
    train_lanes = args.envs - args.held_out

    def windows(x, lanes):  # [T, N, ...] -> [N' * T / L, L, ...]: each lane cut into sequences of seq_len
        x = x[:, lanes]
        x = np.swapaxes(x, 0, 1)
        return x.reshape((-1, args.seq_len) + x.shape[2:])

    train = {k: jnp.asarray(windows(v, slice(0, train_lanes))) for k, v in data.items()}
    held = {k: np.asarray(v[:, train_lanes:]) for k, v in data.items()}  # [T, H, ...]: whole lanes, filtered in order
    rewards = data["reward"]
    summary = {"transitions": int(rewards.size), "episode_ends": int(data["done"].sum()),
               "reward_mean": float(rewards.mean()), "large_rewards": int((rewards >= 0.9).sum()),
               "negative_rewards": int((rewards < -0.01).sum()), "collect_s": round(collect_s, 1)}
    print("data:", json.dumps(summary), flush=True)

    # --- the model and its training, as the dreamer's world-model stage has them --------------------------------
    model = rssm.RSSM(sizes)
    key, k_init = jax.random.split(key)
    params = jax.tree.map(lambda x: x[0], rssm.init_ensemble(model, k_init, 1))
    tx = make_wm_optimizer(config)
    opt_state = tx.init(params)
    count = train["obs"].shape[0]

    def to_seq(idx, train):  # the replay's draw: time-major, a zero state at each sequence's start
        return rp.with_first_flags({k: jnp.swapaxes(v[idx], 0, 1) for k, v in train.items()})

    def train_steps(carry, n, train):  # the training data an argument, not a constant folded into the program
        def one(carry, key):
            params, opt_state = carry
            k_idx, k_loss = jax.random.split(key)
            seq = to_seq(jax.random.randint(k_idx, (args.batch,), 0, count), train)
            (_, stats), grads = jax.value_and_grad(
                lambda q: rssm.member_loss(model, q, seq, k_loss, dtc.free_bits, dtc.kl_dyn, dtc.kl_rep,
                                           dtc.head_loss_scale, dtc.recon_loss), has_aux=True)(params)
            updates, opt_state = tx.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), stats

        (params, opt_state), key = carry
        key, sub = jax.random.split(key)
        (params, opt_state), stats = jax.lax.scan(one, (params, opt_state), jax.random.split(sub, n))
        return ((params, opt_state), key), jax.tree.map(jnp.mean, stats)

    first_held = rp.with_first_flags(held)["first"]  # each held-out lane filtered whole, from a zero state

    @jax.jit
    def score(params, key, held, first_held):  # the held-out games are arguments: as constants XLA would fold them
        out, _ = rssm.observe(model, params, held["obs"], held["action"], first_held,
                              jnp.zeros((held["obs"].shape[1], sizes.deter)), key)
        mean, _ = model.apply(params, out["h"], out["z"], method=rssm.RSSM.decode)
        target = rssm.symlog(held["obs"])
        z_next = jax.vmap(lambda k: rssm.sample_latent(k, out["prior_next"]))(jax.random.split(key, 8))
        reward, cont = jax.vmap(lambda z: model.apply(params, out["h_next"], z, method=rssm.RSSM.heads))(z_next)
        kl = rssm.categorical_kl(out["post"], out["prior"])
        return {"sq_err": jnp.mean((target - mean) ** 2), "reward": jnp.mean(rssm.symexp(reward), 0),
                "cont": jnp.mean(jax.nn.sigmoid(cont), 0), "kl": jnp.mean(kl)}

    target_var = float(np.mean(np.var(np.asarray(rssm.symlog(held["obs"])), axis=(0, 1))))
    real_r, ends = held["reward"], held["done"].astype(bool)
    large = real_r >= 0.9
    layout = sizes.ego_layout
    read = np.asarray(rssm.ego_view(jnp.asarray(data["obs"]), layout)) if layout else data["obs"]  # what the encoder reads
    features = np.concatenate([np.asarray(rssm.symlog(read)),
                               np.eye(spec.action_dim, dtype=np.float32)[data["action"]]], -1)
    inputs, targets = windows_flat(features), windows_flat(data["reward"])  # lane by lane: the training lanes first
    reference = ridge_corr(inputs, targets, cut=train_lanes * args.length)  # scored on the held-out lanes
    direct = mlp_reward_corr(inputs, targets, train_lanes * args.length, args.reference_steps,
                             args.seed) if args.reference_steps else None
    report = {"args": vars(args), "data": summary, "ridge_on_obs_and_action_reward_corr": reference,
              "mlp_on_obs_and_action_reward_corr": direct, "points": []}
    print(f"reward from (symlog {args.encoder} obs, action) on the held-out lanes: ridge corr {reference}, "
          f"MLP 2 x 256 ({args.reference_steps} steps) corr {direct}", flush=True)

    carry, done_steps, t_train = ((params, opt_state), key), 0, 0.0
    per_chunk = math.gcd(*score_at)  # one compiled program of this many steps, run until each scoring point
    chunk = jax.jit(lambda carry, train: train_steps(carry, per_chunk, train))
    for target_steps in score_at:
        t0 = time.perf_counter()
        while done_steps < target_steps:
            carry, stats = chunk(carry, train)
            done_steps += per_chunk
        stats = jax.device_get(stats)
        t_train += time.perf_counter() - t0
        s = jax.device_get(score(carry[0][0], jax.random.PRNGKey(1), held, first_held))
        pred = np.asarray(s["reward"])
        point = {"steps": done_steps, "train_s": round(t_train, 1),
                 "decoder_err_over_var": round(float(s["sq_err"]) / target_var, 4),
                 "reward_corr": round(float(np.corrcoef(pred.ravel(), real_r.ravel())[0, 1]), 4),
                 "reward_on_large": round(float(pred[large].mean()), 3) if large.any() else None,
                 "large_real_mean": round(float(real_r[large].mean()), 3) if large.any() else None,
                 "cont_at_ends": round(float(np.asarray(s["cont"])[ends].mean()), 3) if ends.any() else None,
                 "cont_elsewhere": round(float(np.asarray(s["cont"])[~ends].mean()), 3),
                 "kl": round(float(s["kl"]), 2),
                 "train_loss_last": {k: round(float(v), 4) for k, v in stats.items()}}
        report["points"].append(point)
        print(json.dumps({k: v for k, v in point.items() if k != "train_loss_last"}), flush=True)
    write_json(args.out, report)
    print(f"wrote {args.out}.json")
    return 0


def windows_flat(x):
    """[T, N, ...] -> [N * T, ...], each lane's steps in order, lanes one after another."""
    import numpy as np

    x = np.swapaxes(np.asarray(x), 0, 1)
    return x.reshape((-1,) + x.shape[2:])


def mlp_reward_corr(x, y, cut, steps, seed, batch=256, width=256):
    """Held-out correlation of an MLP (2 x `width`, silu) fitted by symlog-MSE to y on x's rows before `cut`: the
    reward a model could read from the true (observation, action), with no world model in between."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from flax import linen as nn

    from hephaestus.agents.dtc.rssm import symexp, symlog

    net = nn.Sequential([nn.Dense(width), nn.silu, nn.Dense(width), nn.silu, nn.Dense(1)])
    xs, ys = jnp.asarray(x[:cut], jnp.float32), jnp.asarray(y[:cut], jnp.float32)
    key = jax.random.PRNGKey(seed)
    params = net.init(key, xs[:1])
    tx = optax.adam(1e-3)

    def step(carry, key):
        params, opt = carry
        idx = jax.random.randint(key, (batch,), 0, cut)
        loss, grads = jax.value_and_grad(lambda q: jnp.mean((net.apply(q, xs[idx])[:, 0] - symlog(ys[idx])) ** 2))(params)
        updates, opt = tx.update(grads, opt, params)
        return (optax.apply_updates(params, updates), opt), loss

    (params, _), _ = jax.jit(lambda c, k: jax.lax.scan(step, c, k))((params, tx.init(params)),
                                                                     jax.random.split(key, steps))
    pred = np.asarray(jax.jit(lambda q, v: symexp(net.apply(q, v)[:, 0]))(params, jnp.asarray(x[cut:], jnp.float32)))
    return round(float(np.corrcoef(pred, y[cut:])[0, 1]), 4) if y[cut:].std() > 0 and pred.std() > 0 else None


def ridge_corr(x, y, cut, alpha=1.0):
    """Held-out correlation of a ridge regression of y on x (rows before `cut` fit, the rest scored)."""
    import numpy as np

    x = np.concatenate([x, np.ones((len(x), 1), x.dtype)], 1).astype(np.float64)
    w = np.linalg.solve(x[:cut].T @ x[:cut] + alpha * np.eye(x.shape[1]), x[:cut].T @ y[:cut])
    pred = x[cut:] @ w
    return round(float(np.corrcoef(pred, y[cut:])[0, 1]), 4) if y[cut:].std() > 0 and pred.std() > 0 else None


if __name__ == "__main__":
    sys.exit(main())
