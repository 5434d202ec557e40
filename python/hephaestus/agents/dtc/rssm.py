"""RSSM world model and its K-member ensemble (parameters stacked on a leading axis, run with `jax.vmap`).

One member:

    h_t      = GRU(h_{t-1}, [z_{t-1}, a_{t-1}])        deterministic state (reset to 0 at episode starts)
    p(z_t | h_t)                                      prior: what imagination samples, needs no observation
    q(z_t | h_t, o_t)                                 posterior: filtering on real observations
    symlog(o_t) ~ N(decoder(h_t, z_t), diag(exp(v)))   learned per-dimension log-variance v (per member)
    r_t, c_t = heads(h_{t+1}, z_{t+1} ~ p(.|h_{t+1}))  reward and continuation of the transition (o_t, a_t)

z is `stoch_groups` categoricals of `stoch_classes` classes each, sampled one-hot with straight-through
gradients and a 1% uniform mixture ("unimix") so no class probability collapses to 0 (KL stays finite).
Reward and continuation heads sit on the state *after* the action, predicted from the prior, which is the
state imagination (part 2) produces; so terminal rewards are learned even though the batch never stores the
final observation of an episode.

Precision: Dense/GRU matmuls run in `dtype` (bfloat16 if the pipeline's --dtype asks); parameters, logits,
log-variances, KLs and every reduction are float32.
"""

from __future__ import annotations

from dataclasses import dataclass

import flax.linen as nn
import jax
import jax.numpy as jnp

from hephaestus.core.networks import around_player

LOGVAR_MIN, LOGVAR_MAX = -10.0, 4.0


def symlog(x):
    return jnp.sign(x) * jnp.log1p(jnp.abs(x))


def symexp(x):
    return jnp.sign(x) * jnp.expm1(jnp.abs(x))


# Two-hot regression over symlog bins (DreamerV3): a scalar y is the distribution over `n` bins evenly spaced in
# symlog space on [-20, 20] that puts weight on the two bins around symlog(y), split so that its mean is exactly
# symlog(y); the head predicts logits over the bins and is trained by cross-entropy against that target; its
# prediction is symexp of the mean bin under softmax(logits). The loss is bounded whatever the scale of y.
TWOHOT_LOW, TWOHOT_HIGH = -20.0, 20.0


def twohot_bins(n: int):
    """The `n` bin centres, in symlog space, float32[n]: built from the negative half and its mirror, so that they
    are exactly symmetric about 0 (and an odd count holds 0 itself)."""
    if n % 2:  # the negative half with 0, then its mirror without 0
        half = jnp.linspace(TWOHOT_LOW, 0.0, n // 2 + 1, dtype=jnp.float32)
        tail = -half[:-1][::-1]
    else:  # the negative half of an even grid over [low, high], then its mirror
        half = jnp.linspace(TWOHOT_LOW, TWOHOT_LOW / (n - 1), n // 2, dtype=jnp.float32)
        tail = -half[::-1]
    return jnp.concatenate([half, tail])


def twohot_encode(y, n: int):
    """The two-hot target [..., n] of symlog-space values `y` [...] (clipped to the bins' range): weights on the two
    neighbouring bins, summing to 1, whose mean over the bins is y."""
    bins = twohot_bins(n)
    y = jnp.clip(y.astype(jnp.float32), TWOHOT_LOW, TWOHOT_HIGH)
    # The bin at or below y (the last but one at most), found by comparison with the centres themselves, so that a
    # value on a centre puts all its weight there.
    below = jnp.clip(jnp.sum(bins <= y[..., None], axis=-1) - 1, 0, n - 2)
    weight_above = jnp.clip((y - bins[below]) / (bins[below + 1] - bins[below]), 0.0, 1.0)
    return (jax.nn.one_hot(below, n, dtype=jnp.float32) * (1.0 - weight_above)[..., None]
            + jax.nn.one_hot(below + 1, n, dtype=jnp.float32) * weight_above[..., None])


def twohot_mean(logits):
    """The mean bin (symlog space) under softmax(logits) [..., n], summed from both ends towards the middle so that
    uniform logits (a zero-initialised head) predict exactly 0."""
    n = logits.shape[-1]
    probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
    weighted = probs * twohot_bins(n)
    m = n // 2
    middle = weighted[..., m] if n % 2 else 0.0
    return jnp.sum(weighted[..., :m][..., ::-1] + weighted[..., n - m:], axis=-1) + middle


def twohot_loss(logits, y):
    """Cross-entropy of softmax(logits) [..., n] against the two-hot target of symlog-space values y [...]."""
    target = jax.lax.stop_gradient(twohot_encode(y, logits.shape[-1]))
    return -jnp.sum(target * jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1), axis=-1)


@dataclass(frozen=True)
class RSSMSizes:
    obs_dim: int
    action_dim: int
    discrete: bool
    deter: int = 64
    groups: int = 8
    classes: int = 8
    hidden: int = 64
    unimix: float = 0.01
    dtype: str = "float32"
    mask_dim: int = 0  # actions of the env's action mask (a mask head predicts it from the state); 0: no mask
    prior_scale: float = 0.0  # randomized prior on the next-observation prediction (RandomPrior); 0: none
    # The decoder's log-variance starts at this (a small predicted variance), so an untrained ensemble's
    # disagreement is not hidden under a large aleatoric term; training then fits the variance to the residuals.
    logvar_init: float = -8.0
    # The encoder's input: None reads the flat observation; (flat, cells, channels, rows, cols, row_feature,
    # col_feature) reads it laid out around the player (`ego_view`, --dtc-encoder ego). The decoder and every
    # prediction stay in the flat observation's layout.
    ego_layout: tuple[int, ...] | None = None
    # 0: the reward head regresses symlog(reward) by squared error; n > 0: it predicts logits over n symlog bins,
    # trained by two-hot cross-entropy (DreamerV3: 255; --dtc-reward-bins). `heads` returns symlog space either way.
    reward_bins: int = 0

    @property
    def stoch(self) -> int:
        return self.groups * self.classes


def _dense(features, dtype, name=None, scale=1.0):
    return nn.Dense(features, dtype=dtype, param_dtype=jnp.float32, name=name,
                    kernel_init=nn.initializers.variance_scaling(scale, "fan_avg", "truncated_normal"))


class _MLP(nn.Module):
    hidden: int
    out: int
    dtype: jnp.dtype
    layers: int = 1
    out_scale: float = 1.0
    norm: bool = False

    @nn.compact
    def __call__(self, x, hidden_only: bool = False):
        """The output; with `hidden_only`, the last hidden layer's features (float32), which the output layer
        (`Dense_<layers>`) maps linearly: `decoded_disagreement` works on them."""
        x = x.astype(self.dtype)
        for _ in range(self.layers):
            x = _dense(self.hidden, self.dtype)(x)
            if self.norm:
                x = nn.LayerNorm(dtype=jnp.float32, param_dtype=jnp.float32)(x.astype(jnp.float32)).astype(self.dtype)
            x = nn.silu(x)
        if hidden_only:
            return x.astype(jnp.float32)
        return _dense(self.out, self.dtype, scale=self.out_scale)(x).astype(jnp.float32)


class RandomPrior(nn.Module):
    """A fixed random function of a transition's input (symlog o_t, a_t) -> one value per observation dimension,
    O(1) each (Osband et al. 2018, "randomized prior functions"). Its output is stop-gradient'ed where it is used, so
    its parameters get zero gradients and Adam leaves them where they started: each member keeps its own draw."""
    hidden: int
    out: int

    @nn.compact
    def __call__(self, x):
        normal = nn.initializers.normal(1.0)  # one-hot inputs still reach O(1) pre-activations
        x = jnp.tanh(nn.Dense(self.hidden, kernel_init=normal, bias_init=normal)(x.astype(jnp.float32)))
        return nn.Dense(self.out, kernel_init=nn.initializers.variance_scaling(1.0, "fan_in", "normal"))(x)


class RSSM(nn.Module):
    sizes: RSSMSizes

    def setup(self):
        s = self.sizes
        dt = jnp.bfloat16 if s.dtype == "bfloat16" else jnp.float32
        self.encoder = _MLP(s.hidden, s.hidden, dt)
        self.img_in = _MLP(s.hidden, s.hidden, dt, layers=0)
        self.gru = nn.GRUCell(features=s.deter, dtype=dt, param_dtype=jnp.float32)
        self.prior_net = _MLP(s.hidden, s.stoch, dt)
        self.post_net = _MLP(s.hidden, s.stoch, dt)
        self.decoder = _MLP(s.hidden, s.obs_dim, dt, layers=2)
        # Per-dimension log-variance, not a function of the state: a state-dependent variance head extrapolates
        # freely on unseen states and can hide exactly the disagreement novelty is meant to find.
        self.obs_logvar = self.param("obs_logvar", nn.initializers.zeros, (s.obs_dim,), jnp.float32)
        # A two-hot head starts at zero output (uniform over the bins: a prediction of exactly 0), as DreamerV3's.
        self.reward_head = _MLP(s.hidden, s.reward_bins or 1, dt, out_scale=0.0 if s.reward_bins else 0.1)
        self.cont_head = _MLP(s.hidden, 1, dt)
        if s.mask_dim:  # which actions the env allows in this state: dreams need it to act (dreamer.py)
            self.mask_head = _MLP(s.hidden, s.mask_dim, dt)
        if s.prior_scale > 0:  # the next-observation prediction adds prior_fit(o, a) + scale * random_prior(o, a)
            self.prior_fit = _MLP(s.hidden, s.obs_dim, dt, layers=2)
            self.random_prior = RandomPrior(s.hidden, s.obs_dim)

    def __call__(self, obs, action_vec, key):
        """Touches every submodule once (for `init`)."""
        h = jnp.zeros(obs.shape[:-1] + (self.sizes.deter,), jnp.float32)
        post = self.post_logits(h, self.encode(obs))
        z = sample_latent(key, post)
        h2 = self.gru_step(h, z, action_vec)
        mean, logvar = self.predict_next_obs(h2, sample_latent(key, self.prior_logits(h2)), obs, action_vec)
        reward, cont = self.heads(h2, z)
        if self.sizes.mask_dim:
            self.mask_logits(h2, z)
        return mean, logvar, reward, cont

    # --- pieces, each usable on its own (vmap/scan-friendly) ---------------------------------------

    def encode(self, obs):
        if self.sizes.ego_layout is not None:
            obs = ego_view(obs, self.sizes.ego_layout)
        return self.encoder(symlog(obs))

    def _logits(self, raw):
        s = self.sizes
        logits = raw.reshape(raw.shape[:-1] + (s.groups, s.classes)).astype(jnp.float32)
        probs = jax.nn.softmax(logits, -1)
        probs = (1.0 - s.unimix) * probs + s.unimix / s.classes
        return jnp.log(probs)  # normalised log-probabilities with the uniform mixture folded in

    def prior_logits(self, h):
        return self._logits(self.prior_net(h))

    def post_logits(self, h, emb):
        return self._logits(self.post_net(jnp.concatenate([h, emb], -1)))

    def gru_step(self, h, z_flat, action_vec):
        x = self.img_in(jnp.concatenate([z_flat, action_vec.astype(jnp.float32)], -1))
        h_new, _ = self.gru(h.astype(jnp.float32), nn.silu(x))
        return h_new.astype(jnp.float32)

    def decode(self, h, z_flat):
        mean = self.decoder(jnp.concatenate([h, z_flat], -1))
        logvar = jnp.clip(self.obs_logvar + self.sizes.logvar_init, LOGVAR_MIN, LOGVAR_MAX)
        return mean, jnp.broadcast_to(logvar, mean.shape)

    def decode_features(self, h, z_flat):
        """The decoder's last hidden layer at (h, z): `decode`'s mean is `decoder_output_layer`'s affine map of it."""
        return self.decoder(jnp.concatenate([h, z_flat], -1), hidden_only=True)

    def predict_next_obs(self, h_next, z_next, obs, action_vec):
        """The one-step prediction of symlog(o_{t+1}) from the state after a_t: the decoder's, plus, with a
        randomized prior, a trained correction and the member's fixed random function, both of the transition's
        input (symlog o_t, a_t) (Osband et al.: the trained part and the prior read the same input). The correction
        learns to cancel the prior on the transitions the member has fitted; on others the members' priors differ,
        so they disagree and err there until they have fitted them. (Reading the world model's state (h, z)
        instead, the correction fitted too slowly: novelty by visits 2.5 / 2.4 / 2.2 for 0 / 1-9 / 10-99 visits
        against 5.0 / 4.0 / 2.5 reading the input, DeepSea-20, specs/dtc.md.)"""
        mean, logvar = self.decode(h_next, z_next)
        if self.sizes.prior_scale > 0:
            x = jnp.concatenate([symlog(obs), action_vec.astype(jnp.float32)], -1)
            fixed = jax.lax.stop_gradient(self.random_prior(x))
            mean = mean + self.prior_fit(x) + self.sizes.prior_scale * fixed
        return mean, logvar

    def heads(self, h, z_flat):
        """(reward in symlog space: the scalar head's output or the two-hot head's mean bin, continuation logit)."""
        feat = jnp.concatenate([h, z_flat], -1)
        reward = self.reward_head(feat)
        reward = twohot_mean(reward) if self.sizes.reward_bins else reward[..., 0]
        return reward, self.cont_head(feat)[..., 0]

    def reward_logits(self, h, z_flat):
        """The two-hot reward head's logits over its bins [..., reward_bins] (reward_bins > 0)."""
        return self.reward_head(jnp.concatenate([h, z_flat], -1))

    def mask_logits(self, h, z_flat):
        """Logit, per action, that the env allows it in state (h, z) (sizes.mask_dim > 0 only)."""
        return self.mask_head(jnp.concatenate([h, z_flat], -1))


def ego_view(obs, layout):
    """[..., flat + cells * channels] -> [..., flat + window * channels]: the flat features, then each cell's channels
    laid out on the (2 rows - 1) x (2 cols - 1) window centred on the player (`networks.around_player`, PPO's ego
    encoder's layout), zeros where the window leaves the board. Input k then always means "this channel at this offset
    from the player"; on HackMatrix a reward such as "the cell I step to holds the exit" reads fixed inputs, where the
    flat layout makes a network first find the player (specs/dreamer.md, "What the world model reads")."""
    flat, cells, channels, rows, cols, row_feature, col_feature = layout
    board = obs[..., flat:].reshape(obs.shape[:-1] + (cells, channels))
    window = around_player(board, jnp.zeros((channels,), board.dtype), obs, (rows, cols, row_feature, col_feature))
    return jnp.concatenate([obs[..., :flat], window.reshape(obs.shape[:-1] + (-1,))], -1)


def sample_latent(key, logits):
    """One-hot sample per group with straight-through gradients; returns flat [..., groups * classes]."""
    probs = jnp.exp(logits)
    idx = jax.random.categorical(key, logits, axis=-1)
    onehot = jax.nn.one_hot(idx, logits.shape[-1], dtype=jnp.float32)
    z = onehot + probs - jax.lax.stop_gradient(probs)
    return z.reshape(z.shape[:-2] + (-1,))


def latent_mean(logits):
    """Expected one-hot (the class probabilities), flat: a deterministic stand-in for a sample."""
    probs = jnp.exp(logits)
    return probs.reshape(probs.shape[:-2] + (-1,))


def categorical_kl(p_logits, q_logits):
    """KL(p || q), summed over classes and groups; float32."""
    p = jnp.exp(p_logits)
    return jnp.sum(p * (p_logits - q_logits), axis=(-2, -1))


def action_vector(action, sizes: RSSMSizes):
    if sizes.discrete:
        return jax.nn.one_hot(action, sizes.action_dim, dtype=jnp.float32)
    return action.astype(jnp.float32)


# ---------------------------------------------------------------------------------------------------
# Single-member functions. The ensemble vmaps them over stacked parameters (and per-member keys).

def latent_mode(logits):
    """The most likely class of each group, one-hot, flat: deterministic and on the training distribution."""
    onehot = jax.nn.one_hot(jnp.argmax(logits, -1), logits.shape[-1], dtype=jnp.float32)
    return onehot.reshape(onehot.shape[:-2] + (-1,))


def observe(model: RSSM, params, obs, action, first, h0, key, sample: bool = True):
    """Filter a batch of sequences with the posterior.

    obs [L, B, D], action [L, B] (or [L, B, A]), first bool[L, B] (episode starts here: state reset), h0 [B, H].
    Returns dict of [L, B, ...]: h (state at t), z (posterior sample), post/prior (logits at t), h_next (state
    after a_t, not reset), prior_next (logits of p(z_{t+1} | h_next)); and the carry h after the last step.
    `sample=False` filters with the posterior's mode instead of a sample (deterministic: for novelty, so
    members disagree about the world rather than about their random draws).
    """
    sizes = model.sizes
    emb = model.apply(params, obs, method=RSSM.encode)
    a_vec = action_vector(action, sizes)

    def step(h, x):
        emb_t, a_t, first_t, key_t = x
        h = jnp.where(first_t[:, None], 0.0, h)
        post = model.apply(params, h, emb_t, method=RSSM.post_logits)
        z = sample_latent(key_t, post) if sample else latent_mode(post)
        h_next = model.apply(params, h, z, a_t, method=RSSM.gru_step)
        return h_next, (h, z, post, h_next)

    keys = jax.random.split(key, obs.shape[0])
    h_last, (h, z, post, h_next) = jax.lax.scan(step, h0, (emb, a_vec, first, keys))
    prior = model.apply(params, h, method=RSSM.prior_logits)
    prior_next = model.apply(params, h_next, method=RSSM.prior_logits)
    return {"h": h, "z": z, "post": post, "prior": prior, "h_next": h_next, "prior_next": prior_next}, h_last


def imagine(model: RSSM, params, h, z, actions, key):
    """Prior-only rollout (no observations): from state (h [B, H], z [B, S]) take actions [L, B(, A)].
    Returns dict of [L, B, ...]: h, z, reward (symlog space), cont_logit, obs_mean, obs_logvar (symlog space)."""
    a_vec = action_vector(actions, model.sizes)

    def step(carry, x):
        h, z = carry
        a_t, key_t = x
        h = model.apply(params, h, z, a_t, method=RSSM.gru_step)
        z = sample_latent(key_t, model.apply(params, h, method=RSSM.prior_logits))
        reward, cont = model.apply(params, h, z, method=RSSM.heads)
        mean, logvar = model.apply(params, h, z, method=RSSM.decode)
        return (h, z), {"h": h, "z": z, "reward": reward, "cont_logit": cont, "obs_mean": mean,
                        "obs_logvar": logvar}

    _, out = jax.lax.scan(step, (h, z), (a_vec, jax.random.split(key, a_vec.shape[0])))
    return out


def gaussian_fit(target, mean, logvar, recon_loss: str = "nll"):
    """(loss, nll), each the mean over the batch of the sum over dimensions, fitting (mean, logvar) to `target`.
    "nll": the Gaussian NLL, whose gradient weighs each dimension's error on the mean by exp(-logvar). "mse": half
    the squared error for the mean (unit variance, DreamerV3's), plus the NLL of the variance against the stopped
    mean, so the variance is the same estimate and the mean's gradient does not depend on it. `nll` is the NLL's
    value either way (the metric)."""
    if recon_loss not in ("nll", "mse"):  # None: an auto --dtc-recon-loss that config.resolve never settled
        raise ValueError(f"recon_loss must be 'nll' or 'mse', got {recon_loss!r}")
    fit_mean = mean if recon_loss == "nll" else jax.lax.stop_gradient(mean)
    nll = jnp.mean(jnp.sum(0.5 * (logvar + (target - fit_mean) ** 2 * jnp.exp(-logvar) + jnp.log(2 * jnp.pi)), -1))
    if recon_loss == "nll":
        return nll, nll
    return nll + 0.5 * jnp.mean(jnp.sum((target - mean) ** 2, -1)), nll


def member_loss(model: RSSM, params, seq, key, free_bits=1.0, kl_dyn=0.5, kl_rep=0.1, head_scale=1.0,
                recon_loss="nll"):
    """World-model loss of one member on sequences [L, B]: the fit (`gaussian_fit`, learned variance) of
    symlog(obs), the same of the prior's one-step prediction of symlog(next_obs) where `seq` has it, KL balancing
    with free bits, symlog-MSE reward and Bernoulli continuation of each transition (those two weighed by
    `head_scale`)."""
    key_obs, key_prior = jax.random.split(key)
    first = seq["first"]
    h0 = jnp.zeros((first.shape[1], model.sizes.deter), jnp.float32)
    out, _ = observe(model, params, seq["obs"], seq["action"], first, h0, key_obs)
    mean, logvar = model.apply(params, out["h"], out["z"], method=RSSM.decode)
    target = symlog(seq["obs"])
    recon, recon_nll = gaussian_fit(target, mean, logvar, recon_loss)
    mse = jnp.mean(jnp.sum((target - mean) ** 2, -1))
    sg = jax.lax.stop_gradient
    dyn = jnp.mean(jnp.maximum(categorical_kl(sg(out["post"]), out["prior"]), free_bits))
    rep = jnp.mean(jnp.maximum(categorical_kl(out["post"], sg(out["prior"])), free_bits))
    kl = jnp.mean(categorical_kl(out["post"], out["prior"]))
    z_next = sample_latent(key_prior, out["prior_next"])
    # One-step prediction of the next observation from the prior after the action: exactly what novelty scores
    # (predict_next). Trained on the true next observation, the pre-reset one where the episode ended, so the
    # novelty of an episode's last transition falls with visits like every other transition's.
    if "next_obs" in seq:
        pred_mean, pred_logvar = model.apply(params, out["h_next"], z_next, seq["obs"],
                                             action_vector(seq["action"], model.sizes), method=RSSM.predict_next_obs)
        pred, pred_nll = gaussian_fit(symlog(seq["next_obs"]), pred_mean, pred_logvar, recon_loss)
    else:
        pred = pred_nll = jnp.float32(0.0)
    reward, cont_logit = model.apply(params, out["h_next"], z_next, method=RSSM.heads)
    if model.sizes.reward_bins:
        logits = model.apply(params, out["h_next"], z_next, method=RSSM.reward_logits)
        reward_loss = jnp.mean(twohot_loss(logits, symlog(seq["reward"])))
    else:
        reward_loss = jnp.mean((reward - symlog(seq["reward"])) ** 2)
    cont = 1.0 - seq["terminated"].astype(jnp.float32)
    cont_loss = jnp.mean(optax_sigmoid_bce(cont_logit, cont))
    total = recon + pred + kl_dyn * dyn + kl_rep * rep + head_scale * (reward_loss + cont_loss)
    stats = {"wm/reward_loss": reward_loss, "wm/cont_loss": cont_loss}
    if model.sizes.mask_dim:  # the mask of o_t from the state that decodes o_t, as the observation itself is
        mask_logits = model.apply(params, out["h"], out["z"], method=RSSM.mask_logits)
        stats["wm/mask_loss"] = jnp.mean(optax_sigmoid_bce(mask_logits, seq["action_mask"].astype(jnp.float32)))
        total = total + stats["wm/mask_loss"]
    return total, {"wm/loss": total, "wm/recon_nll": recon_nll, "wm/pred_nll": pred_nll, "wm/recon_mse": mse, "wm/kl": kl,
                   **stats}


def optax_sigmoid_bce(logits, labels):
    return jnp.maximum(logits, 0) - logits * labels + jnp.log1p(jnp.exp(-jnp.abs(logits)))


def predict_next(model: RSSM, params, out, obs, action):
    """Each transition's one-step prediction of the next observation from the prior after the action:
    (mean, variance) in symlog space, float32 [L, B, D]. Uses the prior's mode in place of a sample, so the
    prediction is deterministic given the state. `obs`, `action` [L, B, ...]: the transitions' inputs (read by the
    randomized prior only)."""
    mean, logvar = model.apply(params, out["h_next"], latent_mode(out["prior_next"]), obs,
                               action_vector(action, model.sizes), method=RSSM.predict_next_obs)
    return mean, jnp.exp(logvar)


def clean_novelty(means, variances, reduce: str = "mean", aleatoric_weight: float = 1.0):
    """Ensemble "clean novelty" per transition: per dimension, the variance of the K members' predicted
    means minus `aleatoric_weight` x the members' mean predicted variance, floored at 0; then reduced over
    dimensions (weight 0: plain disagreement). means/variances: [K, ..., D] -> [...] float32."""
    means = means.astype(jnp.float32)
    disagreement = jnp.var(means, axis=0)
    aleatoric = jnp.mean(variances.astype(jnp.float32), axis=0)
    per_dim = jnp.maximum(disagreement - aleatoric_weight * aleatoric, 0.0)
    return jnp.mean(per_dim, -1) if reduce == "mean" else jnp.sum(per_dim, -1)


def clean_surprise(means, variances, target, aleatoric_weight: float = 1.0):
    """Ensemble "clean surprise" per transition: per dimension, the members' mean squared error of their predicted
    means against the observed `target` minus `aleatoric_weight` x their mean predicted variance, floored at 0;
    then the mean over dimensions. Epistemic error plus noise, less the noise the members expect: unlike
    disagreement it needs the outcome, and it is high wherever the members have not yet fitted the transition.
    means/variances: [K, ..., D], target: [..., D] (symlog space) -> [...] float32."""
    error = jnp.mean((target.astype(jnp.float32) - means.astype(jnp.float32)) ** 2, axis=0)
    aleatoric = jnp.mean(variances.astype(jnp.float32), axis=0)
    return jnp.mean(jnp.maximum(error - aleatoric_weight * aleatoric, 0.0), -1)


def decoder_output_layer(params):
    """The decoder's output layer of (stacked) member params: kernel [K, hidden, obs_dim], bias [K, obs_dim]."""
    decoder = params["params"]["decoder"]
    last = max((name for name in decoder if name.startswith("Dense_")), key=lambda name: int(name.split("_")[1]))
    return decoder[last]["kernel"], decoder[last]["bias"]


def disagreement_form(kernel, bias):
    """The quadratic form [K (hidden + 1), K (hidden + 1)] that `decoded_disagreement` applies, from the members'
    stacked output layers (kernel [K, hidden, D], bias [K, D]). Member k decodes m_k = u_k A_k with u_k = [x_k, 1]
    (its decoder features) and A_k = [kernel_k; bias_k], so
        sum_d Var_k(m_kd) = sum_jk C_jk u_j (A_j A_k^T) u_k^T,   C = I / K - 1 / K^2:
    the D-wide decode is folded into the K^2 Gram blocks A_j A_k^T once per dream, not done at every imagined step.
    float32 at full precision (a TPU's or GPU's default bfloat16/TF32 passes would drown the small difference of
    large sums that a variance is here)."""
    k = kernel.shape[0]
    a = jnp.concatenate([kernel, bias[:, None, :]], 1).astype(jnp.float32)  # [K, hidden + 1, D]
    gram = jnp.einsum("jad,kbd->jakb", a, a, precision=jax.lax.Precision.HIGHEST)
    centring = jnp.eye(k, dtype=jnp.float32) / k - 1.0 / k**2
    n = k * a.shape[1]
    return (gram * centring[:, None, :, None]).reshape(n, n)


def decoded_disagreement(features, form, obs_dim: int):
    """mean_d Var_k of the K members' decoded means (the dream's novelty, Plan2Explore's disagreement) from their
    decoder features [K, S, hidden] (`RSSM.decode_features`) and `disagreement_form`: [S]. Equal to
    `jnp.mean(jnp.var(means, 0), -1)` of the decoded means up to float32 rounding, without building the [K, S, D]
    means: on HackMatrix (D = 1545, hidden 64, K = 5) ~5x fewer multiply-adds per imagined step. The rounding is
    absolute, ~1e-7 of the predictions' mean square per dimension (a variance taken as a difference of sums of
    squares), so where the members agree to ~1e-4 of their outputs it is a few per cent of the disagreement;
    negative round-off is clipped to 0 (tests/test_dreamer.py measures both)."""
    k, s, _ = features.shape
    u = jnp.concatenate([features.astype(jnp.float32), jnp.ones((k, s, 1), jnp.float32)], -1)
    v = jnp.transpose(u, (1, 0, 2)).reshape(s, -1)  # [S, K (hidden + 1)], member-major as the form
    quad = jnp.sum(jnp.matmul(v, form, precision=jax.lax.Precision.HIGHEST) * v, -1)
    return jnp.maximum(quad, 0.0) / obs_dim


def init_ensemble(model: RSSM, key, k: int):
    """Stacked parameters with a leading ensemble axis of length k (each member its own init key), made one member
    at a time (`lax.map`): a vmapped orthogonal initialiser is a batched LAPACK QR, which can deadlock XLA's CPU
    thread pool on a small machine (runner_state.fresh_agents)."""
    s = model.sizes
    obs = jnp.zeros((1, s.obs_dim), jnp.float32)
    act = jnp.zeros((1, s.action_dim), jnp.float32)

    def one(key):
        k_init, k_sample = jax.random.split(key)
        return model.init(k_init, obs, act, k_sample)

    return jax.jit(lambda keys: jax.lax.map(one, keys))(jax.random.split(key, k))
