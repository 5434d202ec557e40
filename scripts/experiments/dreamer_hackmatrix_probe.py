#!/usr/bin/env python3
"""Why does the dreamer not learn HackMatrix? One training seed, then a look inside its world model.

Trains `--agent dreamer` on HackMatrix through the pipeline's own config (the training script's flags: anything
after `--` goes to it, e.g. `-- --dreamer-entropy 0.1`), for one seed as one compiled chunk, then reads the
final state on the sequences its replay holds (teacher-forced through member 0's posterior):

* **the decoder**: its reconstruction error, and how the actor's choice on the decoded observation (what it
  learns from in imagination) compares with its choice on the real one (what it acts on): argmax agreement and
  the total-variation distance between the two action distributions;
* **the mask head** on the posterior state against the env's real mask: share of actions right, share of the
  allowed actions it allows, share of the forbidden actions it forbids;
* **the reward head** one step ahead (prior next latent, mean over 8 samples): its error grouped by the real
  reward's sign, and the correlation of prediction and reward;
* **the continuation head** against real episode ends.

    python scripts/experiments/dreamer_hackmatrix_probe.py --steps 3e5 -- --dreamer-entropy 0.1
    python scripts/experiments/dreamer_hackmatrix_probe.py --quick         # a smoke run (the test suite's)

Prints the report and writes it to OUT.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from hephaestus.tools.experiment import add_out, check_out, write_json


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=float, default=3e5, help="env steps of training")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="8 envs x 16 steps, 2 updates, small models")
    add_out(p, "dreamer_hackmatrix_probe", "writes OUT.json")
    args = p.parse_args(argv)
    args.out = check_out(p, args.out, "dreamer_hackmatrix_probe")

    from hephaestus.tools.entry_points import require_this_checkout

    require_this_checkout(__file__)
    import jax
    import jax.numpy as jnp
    import numpy as np

    from hephaestus.core import networks as nets
    from hephaestus.run.cli import parse
    from hephaestus.config.train_config import resolve
    from hephaestus.agents.dreamer import dreamer as dr
    from hephaestus.agents.dtc import replay as rp
    from hephaestus.agents.dtc import rssm
    from hephaestus.agents.dtc.agent import sizes_from
    from hephaestus.core.ppo import make_train
    from hephaestus.config.registry import ConfigError

    flags = ["--env", "hackmatrix", "--agent", "dreamer", "--seed", str(args.seed), "--total-timesteps",
             str(args.steps)]
    if args.quick:
        flags += ["--num-envs", "8", "--num-steps", "16", "--total-timesteps", "256", "--hidden-dim", "32",
                  "--dtc-deter-dim", "16", "--dtc-hidden-dim", "16"]
    try:
        config, _ = parse(flags + extra)
        config, _ = resolve(config)
        config = config.replace(log_interval=config.num_updates)  # the whole run: one compiled chunk
        trainer = make_train(config)
    except ConfigError as err:
        sys.exit(f"error: {err}")
    spec = trainer.env.spec
    t0 = time.perf_counter()
    final, metrics = jax.jit(trainer.compiled_chunk)(trainer.init_runner_state(args.seed), jnp.int32(config.num_updates))
    metrics = jax.device_get(metrics)
    dtc = config.stages.dtc
    report = {"flags": flags + extra, "updates": config.num_updates, "train_s": round(time.perf_counter() - t0, 1),
              # what the run used, read back from its config
              "world_model": {"deter": dtc.deter_dim, "hidden": dtc.hidden_dim, "stoch": [dtc.stoch_groups,
                              dtc.stoch_classes], "logvar_init": dtc.logvar_init, "encoder": dtc.encoder, "replay_ratio": dtc.replay_ratio,
                              "gradient_steps": config.num_updates * dtc.wm_steps(config.batch_size)}}
    tenths = lambda x: [round(float(np.mean(c)), 4) for c in np.array_split(np.asarray(x), min(10, len(x)))]
    for name in sorted(metrics):
        if name in ("entropy", "dreamer/imagined_reward", "dreamer/imagined_cont") or name.startswith(("wm/", "episode/")):
            report[name + " by tenth"] = tenths(metrics[name])

    world = final.stages["dreamer"].world
    model = rssm.RSSM(sizes_from(config, spec))
    lead = dr.member(world.params, 0)
    data, seq = rp.stored_sequences(world.replay, limit=2048)  # [B, L] numpy, [L, B] with first flags
    count = len(data["obs"])
    report["replay"] = {"sequences": count, "keys": sorted(data)}
    out, _ = rssm.observe(model, lead, seq["obs"], seq["action"], seq["first"], jnp.zeros((count, model.sizes.deter)),
                          jax.random.PRNGKey(0))
    obs = np.asarray(seq["obs"], np.float32)

    # the decoder, and the actor on what it decodes
    decoded = np.asarray(rssm.symexp(model.apply(lead, out["h"], out["z"], method=rssm.RSSM.decode)[0]))
    binary = binary_features(obs)
    report["decoder"] = {"mse": round(float(np.mean((decoded - obs) ** 2)), 5),
                         "obs_variance": round(float(np.mean(np.var(obs.reshape(-1, obs.shape[-1]), 0))), 5),
                         "binary_features_rounded_right": round(float(np.mean(
                             (decoded[..., binary] > 0.5) == (obs[..., binary] > 0.5))), 4)}
    network, actor = trainer.network, final.train_state.params
    real_mask = np.asarray(seq["action_mask"], bool) if "action_mask" in seq else np.ones(obs.shape[:-1] + (spec.action_dim,), bool)

    def probs(o, mask):
        """The actor's action distribution [..., A] on observations `o` among the allowed actions `mask`: one forward
        pass, masked as the policy's categorical_log_prob masks it."""
        logits = network.apply(actor, jnp.asarray(o))[0]
        return np.asarray(jax.nn.softmax(nets.masked_logits(logits, jnp.asarray(mask)), -1))

    p_real, p_dec = probs(obs, real_mask), probs(decoded, real_mask)
    report["actor_real_vs_decoded"] = {
        "argmax_agreement": round(float(np.mean(p_real.argmax(-1) == p_dec.argmax(-1))), 4),
        "total_variation": round(float(np.mean(0.5 * np.abs(p_real - p_dec).sum(-1))), 4),
        "max_prob_real": round(float(p_real.max(-1).mean()), 4), "max_prob_decoded": round(float(p_dec.max(-1).mean()), 4)}

    if model.sizes.mask_dim:
        head = np.asarray(model.apply(lead, out["h"], out["z"], method=rssm.RSSM.mask_logits)) > 0
        report["mask_head"] = {"right": round(float(np.mean(head == real_mask)), 4),
                               "allowed_kept": round(float(head[real_mask].mean()), 4),
                               "forbidden_kept_out": round(float((~head[~real_mask]).mean()), 4),
                               "allowed_share_real": round(float(real_mask.mean()), 4),
                               "allowed_share_head": round(float(head.mean()), 4)}
        p_head = probs(decoded, head)
        report["actor_real_vs_imagined_input"] = {  # decoded observation and head mask: the dream's inputs
            "argmax_agreement": round(float(np.mean(p_real.argmax(-1) == p_head.argmax(-1))), 4),
            "total_variation": round(float(np.mean(0.5 * np.abs(p_real - p_head).sum(-1))), 4)}

    latents = jax.vmap(lambda k: rssm.sample_latent(k, out["prior_next"]))(jax.random.split(jax.random.PRNGKey(1), 8))
    heads = jax.vmap(lambda z: model.apply(lead, out["h_next"], z, method=rssm.RSSM.heads))(latents)
    reward_pred = np.asarray(jnp.mean(rssm.symexp(heads[0]), 0))
    cont_pred = np.asarray(jnp.mean(jax.nn.sigmoid(heads[1]), 0))
    real_r, done = np.asarray(seq["reward"]), np.asarray(seq["done"], bool)
    report["reward_head"] = {
        "corr": round(float(np.corrcoef(reward_pred.ravel(), real_r.ravel())[0, 1]), 4) if real_r.std() > 0 else None,
        **{name: {"n": int(sel.sum()), "real_mean": round(float(real_r[sel].mean()), 4),
                  "predicted_mean": round(float(reward_pred[sel].mean()), 4),
                  "abs_error": round(float(np.abs(reward_pred - real_r)[sel].mean()), 4)}
           for name, sel in (("positive", real_r > 0.01), ("negative", real_r < -0.01),
                             ("near zero", np.abs(real_r) <= 0.01)) if sel.any()}}
    # The large rewards alone (HackMatrix: a stage's exit, 1 at the first; a data siphon's pickup), which the
    # positive class above shares with the many small shaping terms
    large = real_r >= 0.9
    report["reward_head_on_large_rewards"] = {"n": int(large.sum()), **({
        "real_mean": round(float(real_r[large].mean()), 4), "predicted_mean": round(float(reward_pred[large].mean()), 4),
        "predicted_mean_elsewhere": round(float(reward_pred[~large].mean()), 4)} if large.any() else {})}
    # Ridge regressions fitted on 80% of the transitions and scored on the rest: how much of the reward the real
    # input (o_t, a_t) carries linearly, and how much the features the reward head reads (h_next, z_next) carry.
    onehot = np.eye(spec.action_dim, dtype=np.float32)[np.asarray(seq["action"])] if spec.discrete else \
        np.asarray(seq["action"], np.float32)
    feats = {"obs_and_action": np.concatenate([np.log1p(np.abs(obs)) * np.sign(obs), onehot], -1),
             "world_model_features": np.concatenate([np.asarray(out["h_next"]), np.asarray(latents[0])], -1)}
    report["linear_probe_reward_corr"] = {name: ridge_corr(x.reshape(-1, x.shape[-1]), real_r.ravel())
                                          for name, x in feats.items()}
    report["cont_head"] = {"at episode ends": round(float(cont_pred[done].mean()), 4) if done.any() else None,
                           "elsewhere": round(float(cont_pred[~done].mean()), 4), "episode_ends": int(done.sum())}
    print(json.dumps(report, indent=1))
    write_json(args.out, report)
    print(f"wrote {args.out}.json")
    return 0


def ridge_corr(x, y, alpha=1.0):
    """Held-out correlation of a ridge regression of y on x (first 80% of rows fit, last 20% scored)."""
    import numpy as np

    cut = int(0.8 * len(y))
    x = np.concatenate([x, np.ones((len(x), 1), x.dtype)], 1).astype(np.float64)
    w = np.linalg.solve(x[:cut].T @ x[:cut] + alpha * np.eye(x.shape[1]), x[:cut].T @ y[:cut])
    pred = x[cut:] @ w
    return round(float(np.corrcoef(pred, y[cut:])[0, 1]), 4) if y[cut:].std() > 0 and pred.std() > 0 else None


def binary_features(obs):
    """The features that are 0/1 everywhere in `obs` (HackMatrix's one-hot and flag features)."""
    import numpy as np

    flat = obs.reshape(-1, obs.shape[-1])
    return np.all((flat == 0) | (flat == 1), 0)


if __name__ == "__main__":
    sys.exit(main())
