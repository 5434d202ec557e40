#!/usr/bin/env python3
"""Why does the dreamer find DeepSea's treasure and not go back? One training seed, then a look inside.

Trains `--agent dreamer` on DeepSea-N with the DeepSea experiment's settings (scripts/experiments/deepsea.py: 16
envs x 32 steps, lr 1e-3, sequences of 8, `--episodes` episodes) for one seed, then reads the final state:

* **the reward head, teacher-forced**: every stored sequence filtered with the posterior; each transition's
  predicted reward (symexp of the head, the mean over 8 prior samples of the next latent, as training draws one)
  grouped by the real reward: the treasure (> 0.5), the move cost (< 0), nothing (0);
* **the dreams**: from the stored sequences without a treasure and from those with one, the actor's dreams of 15
  steps; each step weighted by the chance the dream is still going (the actor-critic loss's weight), the share of
  dreams whose weighted imagined treasure (reward > 0.5) sums past 0.5;
* **the actor along the treasure**: for the first stored sequence with a treasure, per step the real cell, the
  action taken and the actor's probability of it on the real and on the decoded observation; and the actor's
  probability of each action at the start cell;
* the share of episodes that found the treasure in ten equal parts of the run, and the reward-rich draws' share of the treasure
  sequences at power 1 and at the run's power.

    python scripts/experiments/dreamer_deepsea_probe.py --seed 4 --reward-fraction 0.25 --replay-capacity 16384
    python scripts/experiments/dreamer_deepsea_probe.py --quick          # a smoke run (the test suite's)

Prints the report and writes it to OUT.json. Training is the experiment's own config, with its probe stages
(episodes per update, visits per cell), which read the batch and change nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from hephaestus.tools.experiment import add_out, check_out, write_json


def load_deepsea():
    """scripts/experiments/deepsea.py as a module: its make_config is the experiment's, so the settings match."""
    from hephaestus.tools.entry_points import load_script

    return load_script(os.path.join(os.path.dirname(os.path.abspath(__file__)), "deepsea.py"), "deepsea_experiment")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", type=int, default=10)
    p.add_argument("--seed", type=int, default=4)
    p.add_argument("--episodes", type=int, default=10_000)
    p.add_argument("--reward-fraction", type=float, default=0.0)
    p.add_argument("--reward-power", type=float, default=2.0)
    p.add_argument("--replay-capacity", type=int, default=1024)
    p.add_argument("--replay-ratio", type=float, default=None, help="world-model and actor-critic replay per env "
                   "step (default: the experiment's)")
    p.add_argument("--dreamer-entropy", type=float, default=None, help="default: the dreamer's own")
    p.add_argument("--advantage-norm", choices=("batch", "range"), default=None, help="default: the dreamer's own")
    p.add_argument("--quick", action="store_true", help="N = 6, 1,000 episodes, small models")
    add_out(p, "dreamer_deepsea_probe", "writes OUT.json")
    args = p.parse_args(argv)
    args.out = check_out(p, args.out, "dreamer_deepsea_probe")
    if args.size < 2 or args.episodes < 1 or args.seed < 0:
        p.error("--size >= 2, --episodes >= 1 and --seed >= 0")

    ds = load_deepsea()
    import jax
    import jax.numpy as jnp
    import numpy as np

    from hephaestus.core import networks as nets
    from hephaestus.agents.dreamer import dreamer as dr
    from hephaestus.agents.dtc import replay as rp
    from hephaestus.agents.dtc import rssm
    from hephaestus.agents.dtc.agent import sizes_from
    from hephaestus.config.registry import ConfigError

    small = dict(hidden_dim=32, wm_dim=16) if args.quick else dict(hidden_dim=64, wm_dim=64)
    if args.quick:
        args.size, args.episodes = 6, 1000
    # the experiment's own settings: deepsea.py's parser, its defaults but for the flags named here
    flags = ["--sizes", str(args.size), "--episodes", str(args.episodes), "--reward-fraction", str(args.reward_fraction),
             "--reward-power", str(args.reward_power), "--replay-capacity", str(args.replay_capacity),
             "--hidden-dim", str(small["hidden_dim"]), "--wm-dim", str(small["wm_dim"])]
    flags += ["--dreamer-entropy", str(args.dreamer_entropy)] if args.dreamer_entropy is not None else []
    flags += ["--dreamer-advantage-norm", args.advantage_norm] if args.advantage_norm else []
    flags += ["--replay-ratio", str(args.replay_ratio)] if args.replay_ratio is not None else []
    _, settings = ds.parse_args(flags)
    try:
        config = ds.make_config(args.size, "dreamer", settings.ent_coef, settings)
    except ConfigError as err:
        sys.exit(f"error: {err}")
    env = ds.make_env(config.env.name)
    trainer = ds.make_train(config, env)
    t0 = time.perf_counter()
    final, metrics = jax.jit(trainer.compiled_chunk)(trainer.init_runner_state(args.seed), jnp.int32(config.num_updates))
    metrics = jax.device_get(metrics)
    report = {"settings": {k: getattr(args, k) for k in ("size", "seed", "episodes", "reward_fraction", "reward_power",
                                                         "replay_capacity")},
              # what the run used, read back from its config (the dreamer's defaults where no flag was given)
              "dreamer": {"entropy": config.stages.dreamer.entropy,
                          "advantage_norm": config.stages.dreamer.advantage_norm},
              "updates": config.num_updates, "train_s": round(time.perf_counter() - t0, 1)}
    tenths = lambda x: [round(float(np.mean(c)), 4) for c in np.array_split(np.asarray(x), 10)]
    # the rollout's episode/ statistics are sums over the episodes that ended in the update
    treasures, episodes = np.asarray(metrics["episode/treasure_rate"]), np.asarray(metrics["probe/episodes"])
    report["episodes"], report["treasures_found"] = int(episodes.sum()), int(round(float(treasures.sum())))
    report["treasure_rate_by_tenth"] = [round(float(t.sum() / max(e.sum(), 1)), 4) for t, e in
                                        zip(np.array_split(treasures, 10), np.array_split(episodes, 10))]
    report["entropy_by_tenth"] = tenths(metrics["entropy"])
    report["imagined_reward_by_tenth"] = tenths(metrics["dreamer/imagined_reward"])

    world = final.stages["dreamer"].world
    model = rssm.RSSM(sizes_from(config, env.spec))
    lead = dr.member(world.params, 0)
    data, seq = rp.stored_sequences(world.replay)  # [B, L] numpy, [L, B] with first flags
    count = len(data["obs"])
    treasure_seqs = np.where((data["reward"] > 0.5).any(1))[0]
    others = np.where(~(data["reward"] > 0.5).any(1))[0]
    priority = lambda power: np.asarray(rp.reward_priority(world.replay, power))[:count] + 1e-12
    report["replay"] = {"sequences": count, "treasure_transitions": int((data["reward"] > 0.5).sum()),
                        "treasure_share_of_reward_rich_draws": {
                            f"power {power:g}": round(float(priority(power)[treasure_seqs].sum() / priority(power).sum()), 4)
                            for power in sorted({1.0, args.reward_power})}}

    # the reward head, teacher-forced
    out, _ = rssm.observe(model, lead, seq["obs"], seq["action"], seq["first"], jnp.zeros((count, model.sizes.deter)),
                          jax.random.PRNGKey(0))
    latents = jax.vmap(lambda k: rssm.sample_latent(k, out["prior_next"]))(jax.random.split(jax.random.PRNGKey(1), 8))
    head = lambda z: rssm.symexp(model.apply(lead, out["h_next"], z, method=rssm.RSSM.heads)[0])
    predicted = np.asarray(jnp.mean(jax.vmap(head)(latents), 0))
    real = np.asarray(seq["reward"])
    report["reward_head"] = {name: {"n": int(sel.sum()), "predicted_mean": round(float(predicted[sel].mean()), 4),
                                    "predicted_std": round(float(predicted[sel].std()), 4)}
                             for name, sel in (("treasure", real > 0.5), ("move cost", real < 0), ("zero", real == 0))
                             if sel.any()}

    # the dreams, weighted as the actor-critic loss weighs them
    network, actor = trainer.network, final.train_state.params
    gamma = float(config.ppo.gamma)

    def dreams(idx):
        s = {k: v[:, idx] for k, v in seq.items()}
        traj, _ = dr.imagine_from_replay(model, network, world.params, actor, s, jax.random.PRNGKey(10), 15, False)
        reward, cont = np.asarray(traj["reward"]), np.asarray(traj["cont"])
        weight = np.concatenate([np.ones_like(cont[:1]), np.cumprod(gamma * cont[:-1], 0)], 0)
        return {"starts": int(reward.shape[1]), "mean_imagined_reward": round(float(reward.mean()), 4),
                "weighted_mean_imagined_reward": round(float((weight * reward).sum() / weight.sum()), 4),
                "share_reaching_treasure": round(float(((weight * (reward > 0.5)).sum(0) > 0.5).mean()), 4)}

    rng = np.random.default_rng(0)
    report["dreams"] = {"from sequences without a treasure": dreams(rng.choice(others, min(256, len(others)), False))}
    if len(treasure_seqs):
        report["dreams"]["from sequences with a treasure"] = dreams(treasure_seqs[:256])

    # the actor along the first stored treasure, on real and on decoded observations
    n = args.size
    decoded = np.asarray(rssm.symexp(model.apply(lead, out["h"], out["z"], method=rssm.RSSM.decode)[0]))
    obs = np.asarray(seq["obs"])
    report["decoder_argmax_correct"] = round(float((decoded.argmax(-1) == obs.argmax(-1)).mean()), 4)

    def prob(o, action):
        o = jnp.asarray(o)
        mask = jnp.ones(o.shape[:-1] + (env.spec.action_dim,), bool)
        return np.exp(np.asarray(nets.evaluate(network, actor, o, mask, jnp.asarray(action, jnp.int32))[0]))

    if len(treasure_seqs):
        b = int(treasure_seqs[0])
        taken = np.asarray(seq["action"])[:, b]
        p_real, p_decoded = prob(obs[:, b], taken), prob(decoded[:, b], taken)
        report["treasure_sequence"] = [
            {"cell": [int(obs[t, b].argmax()) // n, int(obs[t, b].argmax()) % n], "action": int(taken[t]),
             "reward": round(float(real[t, b]), 4), "p_action_real_obs": round(float(p_real[t]), 3),
             "p_action_decoded_obs": round(float(p_decoded[t]), 3)} for t in range(obs.shape[0])]
    start = np.zeros((env.spec.action_dim, n * n), np.float32)
    start[:, 0] = 1.0
    report["start_cell_action_probs"] = [round(float(x), 4) for x in prob(start, np.arange(env.spec.action_dim))]

    print(json.dumps({k: v for k, v in report.items() if k != "treasure_sequence"}, indent=1))
    for step in report.get("treasure_sequence", []):
        print("treasure sequence: cell {cell} action {action} reward {reward:+.3f}  P(action | real obs) "
              "{p_action_real_obs:.3f}  P(action | decoded obs) {p_action_decoded_obs:.3f}".format(**step))
    write_json(args.out, report)
    print(f"wrote {args.out}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
