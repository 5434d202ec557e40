"""What a rollout reports. Nothing is stored per step: each env step adds to running sums in the rollout's scan
carry, and after the scan the sums become the update's metrics.

* episodes that ended on the step: their return and length (-> mean_episode_return, mean_episode_length,
  num_episodes, over every episode) and the env's declared per-episode statistics (episode_stats.py ->
  `episode/<key>`, sums over the episodes, or maxes for `*_max` keys; sinks.chunk_reduce divides the sums by the
  chunk's fresh episodes). An env whose step reports `info["curriculum_start"]` (HackMatrix's training
  curriculum: a game begun on a later stage) has those episodes' statistics summed apart, under `curriculum/<key>`
  with their count `num_curriculum_episodes`, so `episode/` describes games begun as the rules begin them;
* the env's reward terms (`info["reward_terms"]` -> `reward/<term>`, mean per env step);
* the fractions of actions in each named range (EnvSpec.action_groups -> `actions/<name>_frac`);
* fully masked rows met (`fully_masked_rows`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from hephaestus.envs import episode_stats
from hephaestus.core import networks as nets


def zero_sums(stats, reward_terms, action_groups) -> dict:
    keys = (["return", "length", "episodes", "curriculum_episodes", "masked"] + [f"reward/{k}" for k in reward_terms]
            + [f"{prefix}{k}" for prefix in ("episode/", "curriculum/") for k in episode_stats.report_keys(stats)]
            + [f"actions/{g}_frac" for g, _, _ in action_groups])
    return dict.fromkeys(keys, jnp.float32(0))


def add_step(sums: dict, stats, action_groups, done, ep_return, ep_length, ep_stats, reward_terms: dict,
             action_mask, action, curriculum_start=None) -> dict:
    """`sums` after one step of all envs: `done` [N] marks the envs whose episode ended, with its return, length
    and running statistics (`ep_*`, the values including this step); `curriculum_start` [N] (or None) the ended
    episodes that began as a curriculum's late start, whose statistics go to `curriculum/` instead of `episode/`."""
    where_done = lambda v: jnp.where(done, v, 0.0)
    late = jnp.zeros_like(done) if curriculum_start is None else jnp.logical_and(done, curriculum_start)
    fresh = jnp.logical_and(done, jnp.logical_not(late))
    ended = episode_stats.report_values(stats, ep_stats, jnp)  # per env, counted where done

    def add(key, v, where):
        v = jnp.where(where, v, 0.0)
        return jnp.maximum(sums[key], jnp.max(v)) if episode_stats.is_max_key(key) else sums[key] + jnp.sum(v)

    return {
        "return": sums["return"] + jnp.sum(where_done(ep_return)),
        "length": sums["length"] + jnp.sum(where_done(ep_length)),
        "episodes": sums["episodes"] + jnp.sum(done).astype(jnp.float32),
        "curriculum_episodes": sums["curriculum_episodes"] + jnp.sum(late).astype(jnp.float32),
        "masked": sums["masked"] + nets.fully_masked_rows(action_mask).astype(jnp.float32),
        **{f"reward/{k}": sums[f"reward/{k}"] + jnp.sum(v) for k, v in reward_terms.items()},
        **{f"episode/{k}": add(f"episode/{k}", v, fresh) for k, v in ended.items()},
        **{f"curriculum/{k}": add(f"curriculum/{k}", v, late) for k, v in ended.items()},
        **{f"actions/{g}_frac": sums[f"actions/{g}_frac"] + jnp.sum((action >= lo) & (action < hi)).astype(jnp.float32)
           for g, lo, hi in action_groups},
    }


def to_metrics(sums: dict, last_mean_return, last_mean_length, num_env_steps: int) -> dict:
    """The update's metrics from a rollout's sums. An update in which no episode ended reports the last known
    means (`last_mean_*`)."""
    episodes = sums["episodes"]
    mean_return = jnp.where(episodes > 0, sums["return"] / jnp.maximum(episodes, 1), last_mean_return)
    mean_length = jnp.where(episodes > 0, sums["length"] / jnp.maximum(episodes, 1), last_mean_length)
    return {"mean_episode_return": mean_return, "mean_episode_length": mean_length, "num_episodes": episodes,
            "num_curriculum_episodes": sums["curriculum_episodes"], "fully_masked_rows": sums["masked"],
            **{k: v / jnp.float32(num_env_steps) for k, v in sums.items() if k.startswith(("reward/", "actions/"))},
            **{k: v for k, v in sums.items() if k.startswith(("episode/", "curriculum/"))}}


def reward_terms(v_reset, v_step, spec, num_envs: int) -> tuple[str, ...]:
    """The reward terms an env step reports (`info["reward_terms"]` keys), read from the step's output shapes:
    they fix which `reward/<term>` sums a rollout carries. `v_reset`/`v_step`: the env's vmapped functions."""
    keys = jax.eval_shape(lambda: jax.random.split(jax.random.PRNGKey(0), num_envs))
    state, _ = jax.eval_shape(v_reset, keys)
    action = jax.ShapeDtypeStruct((num_envs,) if spec.discrete else (num_envs, spec.action_dim),
                                  jnp.int32 if spec.discrete else jnp.float32)
    return tuple(jax.eval_shape(v_step, keys, state, action)[1].info.get("reward_terms", {}))
