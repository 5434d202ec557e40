"""Dual-timescale competence: normalised novelty, two EMAs, competence and boredom. All float32.

Per update, given the raw clean novelty x_t of every transition of the fresh rollout:

    m2      <- running mean of x^2 over every transition seen (count-weighted; this batch included), or with
               norm_rate > 0 an EMA of the batches' mean x^2 at that rate (once k / count falls below it)
    n_t      = x_t / sqrt(m2 + eps)                         per transition, >= 0 (no mean subtraction)
    xbar     = mean_t x_t                                   global, this update, RAW novelty
    C_fast  <- C_fast + fast_rate * (xbar - C_fast)         EMA(raw novelty, 0.1); both EMAs start at the
    C_slow  <- C_slow + slow_rate * (xbar - C_slow)         first update's xbar
    c        = relu(C_slow - C_fast) / C_slow               global: the relative fall of novelty, i.e. learning
    boredom <- clip(boredom + rise * [c < threshold] - decay * [c >= threshold], 0, 1)
    r_int_t  = coef * (n_t + competence_coef * c * n_t)     per transition

The EMAs run on raw novelty and competence is their relative gap, so it is scale-free and does not drift with
the normaliser (an earlier version ran them on n_t, whose divisor grows and shrinks with m2: a falling c could
mean "the normaliser moved" rather than "the model learned"). The competence c is one number per update; added to every reward as is, it would be a constant shift
(almost entirely absorbed by the critic's baseline, so the advantages barely move). It therefore acts as a
per-update *gain* on the per-transition novelty: while the ensemble is still getting better (novelty falling),
novel transitions pay more. Boredom is global and does not enter the reward; it sets the dream horizon of
part 2: horizon = max_h - boredom * (max_h - min_h).

With `competence = "progress"` (--dtc-competence progress) competence is local instead: the world_model stage
scores the fresh rollout a second time with the ensemble *after* this update's gradient steps (x'_t), and

    c_t      = relu(x_t - x'_t) / x_t                       per transition, in [0, 1]: the share of its novelty
                                                            this update's learning removed (learning progress)
    c        = sum_t relu(x_t - x'_t) / sum_t x_t           global, this update: what boredom reads
    r_int_t  = coef * (n_t + competence_coef * c_t * n_t)   per transition

so a transition pays more where the ensemble is learning it now, and plain novelty where it is not (already
fitted, or noise the members cannot learn). The EMAs still run for their metrics. Imagined states (the dreamer)
are never scored twice and keep the global competence.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

EPS = 1e-8


@struct.dataclass
class IntrinsicState:
    count: jax.Array  # float32[] transitions seen
    m2: jax.Array  # float32[] running mean of novelty^2
    c_fast: jax.Array
    c_slow: jax.Array
    boredom: jax.Array
    updates: jax.Array  # float32[] updates seen (0: EMAs not started)


def intrinsic_init() -> IntrinsicState:
    z = jnp.float32(0.0)
    return IntrinsicState(count=z, m2=z, c_fast=z, c_slow=z, boredom=z, updates=z)


def normalise(state: IntrinsicState, raw, rate: float = 0.0):
    """Fold the batch into the running second moment, then divide by its root. Returns (state, n).

    rate 0: m2 is the mean over every transition seen, so as the model learns and raw novelty falls, the early
    batches keep the divisor high and the bonus shrinks with the run. rate > 0: each batch moves m2 by at least
    that fraction (an EMA once the count-weighted step k / count falls below it), so the divisor follows the
    novelty of the present and a new transition is paid against today's familiar ones, not the first update's."""
    raw = raw.astype(jnp.float32)
    k = jnp.float32(raw.size)
    count = state.count + k
    m2 = state.m2 + (jnp.mean(raw ** 2) - state.m2) * jnp.maximum(k / count, rate)
    return state.replace(count=count, m2=m2), raw / jnp.sqrt(m2 + EPS)


def ema(prev, x, rate, started):
    """EMA step; the first observation initialises it."""
    return jnp.where(started, prev + rate * (x - prev), x)


def competence_step(state: IntrinsicState, xbar, fast_rate, slow_rate, threshold, rise, decay, progress=None):
    """Update both EMAs with this update's mean raw novelty, then competence (their relative gap, or with
    `progress` = learning_progress(...) the batch's share of novelty learned) and boredom."""
    started = state.updates > 0
    c_fast = ema(state.c_fast, xbar, fast_rate, started)
    c_slow = ema(state.c_slow, xbar, slow_rate, started)
    competence = jnp.maximum(c_slow - c_fast, 0.0) / jnp.maximum(c_slow, EPS)
    if progress is not None:
        competence = progress[1]
    learning = competence >= threshold
    boredom = jnp.clip(state.boredom + jnp.where(learning, -decay, rise), 0.0, 1.0)
    state = state.replace(c_fast=c_fast, c_slow=c_slow, boredom=boredom, updates=state.updates + 1.0)
    return state, competence


def dream_horizon(boredom, min_h: int, max_h: int):
    return max_h - boredom * (max_h - min_h)


def learning_progress(raw, raw_after):
    """Local competence: per element the share of its novelty `raw` that the ensemble's learning removed (`raw_after`
    is the same transition's novelty after this update's gradient steps), in [0, 1]; and the batch's share (one
    number, what boredom reads). Novelty that rose (a member drifted) counts as no progress."""
    raw, raw_after = raw.astype(jnp.float32), raw_after.astype(jnp.float32)
    progress = jnp.maximum(raw - raw_after, 0.0)
    per_transition = jnp.where(raw > EPS, progress / jnp.maximum(raw, EPS), 0.0)
    return per_transition, jnp.sum(progress) / jnp.maximum(jnp.sum(raw), EPS)


def novelty_bonus(state: IntrinsicState, raw, coef, opts, raw_after=None):
    """The whole dual-timescale step over one batch of raw novelty `raw` (any shape): normalise, update competence
    and boredom with its mean, and the bonus `coef * (n + competence_coef * c * n)` per element. `opts` is
    DTCOptions (rates, boredom, competence gain). With `raw_after` (the same transitions scored after the model's
    update; --dtc-competence progress) competence is local: `c` per element from `learning_progress`, and boredom
    reads the batch's share. Returns (state, n, competence, bonus), competence the number boredom read. Used by the
    intrinsic_reward stage on real transitions and by the dreamer on imagined ones (no `raw_after`: global)."""
    progress = None if raw_after is None else learning_progress(raw, raw_after)
    state, n = normalise(state, raw, opts.norm_rate)
    state, competence = competence_step(state, jnp.mean(raw), opts.fast_rate, opts.slow_rate, opts.boredom_threshold,
                                        opts.boredom_rise, opts.boredom_decay, progress)
    gain = competence if progress is None else progress[0]
    return state, n, competence, coef * (n + opts.competence_coef * gain * n)
