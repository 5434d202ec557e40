"""Actor-critic networks and the two policy distributions (masked categorical, Gaussian).

Separate actor and critic MLPs (as PureJaxRL and CleanRL do): a shared torso lets the value loss pull the
policy features around. Orthogonal init with gain sqrt(2) in the torso, 0.01 on the policy head (near-uniform
initial policy) and 1.0 on the value head. Matmuls run in `dtype` (bfloat16 on TPU if asked); parameters and
every output are float32.

Encoders (`--encoder`): `mlp` feeds the flat observation to each MLP. `cells`, for envs that declare
`obs_cells = (flat, cells, channels)` (obs = flat features, then cells x channels row-major), first maps every
cell's channels through one Dense(channels -> cell_dim) shared by all cells (a 1x1 convolution over the board),
then concatenates the flat features and the cell embeddings before the usual MLPs (`salience`: the cell
embeddings, each with a learned position embedding, are salience-pooled into a few vectors instead: SaliencePool,
the DTC design's bottleneck; the flat features are the pooling's context; `ego`, for envs that also declare
`obs_board`: the embeddings laid out on a window centred on the player, EgoEncoder). On HackMatrix `cells` turns the
1545-wide first layer (85% of the arithmetic) into 42 -> 16 per cell plus 609 -> hidden: about half the
multiply-adds of the whole network. The encoder (688 parameters) is shared by actor and critic, so it runs once
per observation; a shared torso would halve the rest too, but the torsos stay separate for the reason above.

Recurrent (`--recurrent gru | lstm`): flax's GRUCell or OptimizedLSTMCell (hidden_dim wide) sits between the
encoder and the actor and critic MLPs, which then read the cell's output (PureJaxRL's ppo_rnn layout; with
`--recurrent-embed N` a Dense(N) in front of the cell, as ppo_rnn has). Its state,
the *carry* (one float32 array per env; an LSTM's c and h concatenated), is reset to zeros where an observation
starts an episode. `act_carried` is the policy's one step with its carry (the rollout, evaluation, Agent.act);
`evaluate_sequences` replays whole sequences for the PPO loss. A feed-forward network carries None.

`NetworkSpec` is the whole description of a network (sizes, encoder and cell layout, storage and matmul dtypes,
action bounds): training builds it from the env and the config, exports and checkpoints store it, and the watch
and evaluate tools rebuild the network from it; `NetworkSpec.build` is the one place an ActorCritic is made.

With bfloat16 observation storage the network's input is the observation rounded to bfloat16, so the policy
acting in the rollout, the PPO update on stored observations, and a replay in watch.py all see the same
numbers; float32 and uint8 storage (exact, obs_storage.py) leave observations as they are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from hephaestus.config.registry import (ConfigError, env_defaults, learns_by_dreaming, obs_reading_stages,
                                       register_env_settler)

CELL_ENCODERS = ("cells", "salience", "ego")  # the encoders that read an env's obs_cells (ego: and obs_board)


# ----------------------------------------------------------------------------------------------------------
# The encoder and the observation storage an env allows: `--encoder auto` and `--obs-dtype auto` settled (the part of
# config.resolve that needs the env; registered below, config.resolve_for_env runs it).


def undeclared_structure(encoder: str, spec) -> str | None:
    """What `encoder` reads that the env (`spec`) does not declare, or None: obs_cells for the encoders of cells,
    and obs_board as well for ego (the network's --encoder, and the world model's --dtc-encoder ego)."""
    if encoder in CELL_ENCODERS and not getattr(spec, "obs_cells", None):
        return "obs_cells (flat, cells, channels)"
    if encoder == "ego" and not getattr(spec, "obs_board", None):
        return "obs_board (rows, cols, row_feature, col_feature)"
    return None


def resolve_encoder(config, spec) -> str:
    """The encoder for this env (`spec`: envs.adapters.EnvSpec), "auto" settled. Raises ConfigError for an
    encoder of cells on an env that does not declare its cell structure (ego: and its board layout)."""
    encoder = config.network.encoder
    if encoder == "auto":  # the env family's default (config.registry's ENV_DEFAULTS), where the env declares it
        # The dreamers' actor also reads decoded (imagined) observations, whose player features are not exact
        # cell coordinates: they keep the MLP they were measured with.
        default = "mlp" if learns_by_dreaming(config) else env_defaults(config.env.name)["encoder"]
        return "mlp" if undeclared_structure(default, spec) else default
    missing = undeclared_structure(encoder, spec)
    if missing:
        fallback = "cells or mlp" if missing.startswith("obs_board") else "mlp"
        raise ConfigError(f"--encoder {encoder} needs an env that declares {missing}; {config.env.name} does not "
                          f"(use --encoder {fallback})")
    return encoder


def resolve_obs_dtype(config, spec) -> str:
    """"float32", "bfloat16" or "uint8": how the rollout stores observations (obs_storage.py)."""
    quantised = getattr(spec, "obs_quanta", None) is not None
    # stages that read the batch's observations as floats (DTC's world model and replay, RND, the count bonus, ...)
    reads_obs = any(name in obs_reading_stages() for name in config.extra_stages)
    obs_dtype = config.network.obs_dtype
    if obs_dtype == "uint8":
        if not quantised:
            raise ConfigError(f"--obs-dtype uint8 needs an env that declares obs_quanta; {config.env.name} does not "
                              "(use float32 or bfloat16)")
        if reads_obs:
            raise ConfigError("--obs-dtype uint8 cannot be used with --agent dtc, disagreement, rnd, count or the dreamers (they "
                              "read float observations); use float32 or bfloat16")
    if obs_dtype != "auto":
        return obs_dtype
    return "uint8" if quantised and not reads_obs else "float32"


def settle_for_env(config, spec):
    """`config` with its encoder and observation storage dtype settled for the env `spec`."""
    return config.replace(encoder=resolve_encoder(config, spec), obs_dtype=resolve_obs_dtype(config, spec))


register_env_settler(settle_for_env)


# Finite, so masked entries give exp() == 0 exactly and 0 * logit stays 0 (−inf would make NaNs).
MASKED_LOGIT = -1e9


def activation_fn(name: str):
    """The hidden layers' nonlinearity of --activation: tanh or relu."""
    return nn.tanh if name == "tanh" else nn.relu


class MLP(nn.Module):
    hidden_dims: Sequence[int]
    out_dim: int
    out_gain: float
    activation: str = "tanh"
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x):
        act = activation_fn(self.activation)
        x = x.astype(self.dtype)
        for width in self.hidden_dims:
            x = nn.Dense(width, kernel_init=nn.initializers.orthogonal(math.sqrt(2)),
                         bias_init=nn.initializers.zeros, dtype=self.dtype, param_dtype=jnp.float32)(x)
            x = act(x)
        x = nn.Dense(self.out_dim, kernel_init=nn.initializers.orthogonal(self.out_gain),
                     bias_init=nn.initializers.zeros, dtype=self.dtype, param_dtype=jnp.float32)(x)
        return x.astype(jnp.float32)


class CellEncoder(nn.Module):
    """[..., flat + cells * channels] -> [..., flat + cells * cell_dim]: one Dense per cell, weights shared."""

    obs_cells: tuple[int, int, int]  # (flat, cells, channels)
    cell_dim: int
    activation: str = "tanh"
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x):
        emb = embed_cells(x, self.obs_cells, self.cell_dim, self.activation, self.dtype)
        emb = emb.reshape(x.shape[:-1] + (-1,))
        return jnp.concatenate([x[..., :self.obs_cells[0]].astype(emb.dtype), emb], axis=-1)


def embed_cells(x, obs_cells, cell_dim, activation, dtype):
    """[..., flat + cells * channels] -> [..., cells, cell_dim]: act(Dense(board cell)), one Dense (named "cell")
    for every cell. Called inside a compact module (CellEncoder, EgoEncoder), whose parameter it creates."""
    flat, cells, channels = obs_cells
    board = x[..., flat:].reshape(x.shape[:-1] + (cells, channels))
    # Dense acts on the last axis, so the same kernel [channels, cell_dim] embeds every cell.
    emb = nn.Dense(cell_dim, kernel_init=nn.initializers.orthogonal(math.sqrt(2)), bias_init=nn.initializers.zeros,
                   dtype=dtype, param_dtype=jnp.float32, name="cell")(board)
    return nn.tanh(emb) if activation == "tanh" else nn.relu(emb)


def player_window(obs, obs_board):
    """For each slot of the (2 rows - 1) x (2 cols - 1) window centred on the player, row-major: the board
    cell (row-major index) at that offset from the player, or `rows * cols` where the offset leaves the board.
    `obs` [..., obs_dim] as stored (not standardised): obs[row_feature] * (rows - 1) is the player's row.
    int32[..., window]."""
    rows, cols, row_feature, col_feature = obs_board
    row = jnp.round(obs[..., row_feature].astype(jnp.float32) * (rows - 1)).astype(jnp.int32)
    col = jnp.round(obs[..., col_feature].astype(jnp.float32) * (cols - 1)).astype(jnp.int32)
    d_row = jnp.repeat(jnp.arange(-(rows - 1), rows), 2 * cols - 1)  # the window's offsets, row-major
    d_col = jnp.tile(jnp.arange(-(cols - 1), cols), 2 * rows - 1)
    r, c = row[..., None] + d_row, col[..., None] + d_col
    on_board = (r >= 0) & (r < rows) & (c >= 0) & (c < cols)
    return jnp.where(on_board, r * cols + c, rows * cols)


def around_player(cells, off_board, stored_obs, obs_board):
    """cells [..., rows * cols, D] (row-major) -> [..., window, D]: the cells laid out on the (2 rows - 1) x (2 cols - 1)
    window centred on the player (`player_window`), `off_board` [D] in the slots the window leaves the board. The
    one layout of PPO's ego encoder (cell embeddings, a learned off-board value) and the world model's (dtc/rssm.py
    `ego_view`: raw channels, zeros)."""
    off_board = jnp.broadcast_to(off_board.astype(cells.dtype), cells.shape[:-2] + (1, cells.shape[-1]))
    cells = jnp.concatenate([cells, off_board], axis=-2)
    return jnp.take_along_axis(cells, player_window(stored_obs, obs_board)[..., None], axis=-2)


class EgoEncoder(nn.Module):
    """[..., flat + cells * channels] -> [..., flat + window * cell_dim]: each cell embedded as in CellEncoder
    (`embed_cells`), then the embeddings laid out on the (2 rows - 1) x (2 cols - 1) window centred on the player
    (`player_window`), off-board slots holding one learned embedding. Input k of the window then always means
    "what is at this offset from the player", so a rule such as "an enemy beside the cell I would step to" reads
    fixed inputs, where the cells encoder's board order makes the MLP find the player first. The layout is a
    gather (on the 2-core CPU 7x faster, forward and backward, than the same as a one-hot matmul)."""

    obs_cells: tuple[int, int, int]  # (flat, cells, channels)
    obs_board: tuple[int, int, int, int]  # (rows, cols, row_feature, col_feature)
    cell_dim: int
    activation: str = "tanh"
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x, stored_obs):
        emb = embed_cells(x, self.obs_cells, self.cell_dim, self.activation, self.dtype)
        off_board = self.param("off_board", nn.initializers.normal(1.0), (self.cell_dim,), jnp.float32)
        window = around_player(emb, off_board, stored_obs, self.obs_board)
        return jnp.concatenate([x[..., :self.obs_cells[0]].astype(window.dtype), window.reshape(x.shape[:-1] + (-1,))],
                               axis=-1)


class SaliencePool(nn.Module):
    """Salience pooling (the DTC design's actor-critic bottleneck): tokens [..., L, D] and a context [..., C] ->
    (pooled [..., heads * D], weights [..., heads, L]). Each head scores every token with a small additive-attention
    net, s_l = v . tanh(W_t z_l + W_c context), takes W = softmax over the L tokens and returns sum_l W_l z_l: a
    fixed-size summary whatever the number of tokens, made of the tokens the heads find salient. The context
    (e.g. the player's own features) lets what is salient depend on the situation. Scores and weights are float32."""

    heads: int
    hidden: int
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, tokens, context):
        dense = lambda n, name: nn.Dense(n, kernel_init=nn.initializers.orthogonal(1.0), bias_init=nn.initializers.zeros,
                                         dtype=self.dtype, param_dtype=jnp.float32, name=name)
        hidden = dense(self.hidden, "token")(tokens) + dense(self.hidden, "context")(context)[..., None, :]
        scores = dense(self.heads, "score")(jnp.tanh(hidden)).astype(jnp.float32)  # [..., L, heads]
        weights = jax.nn.softmax(scores, axis=-2)
        pooled = jnp.einsum("...lh,...ld->...hd", weights, tokens.astype(jnp.float32))
        return pooled.reshape(pooled.shape[:-2] + (-1,)), jnp.swapaxes(weights, -1, -2)


class SalienceEncoder(nn.Module):
    """[..., flat + cells * channels] -> [..., flat + heads * cell_dim]: each cell embedded by one shared Dense plus
    a learned embedding of its position (pooling forgets where a token was, the position embedding keeps it in the
    token), then salience-pooled with the flat features as context. `weights(x)`: [..., heads, cells]."""

    obs_cells: tuple[int, int, int]  # (flat, cells, channels)
    cell_dim: int
    heads: int
    activation: str = "tanh"
    dtype: jnp.dtype = jnp.float32

    def setup(self):
        _, cells, _ = self.obs_cells
        self.cell = nn.Dense(self.cell_dim, kernel_init=nn.initializers.orthogonal(math.sqrt(2)),
                             bias_init=nn.initializers.zeros, dtype=self.dtype, param_dtype=jnp.float32)
        self.position = self.param("position", nn.initializers.normal(0.1), (cells, self.cell_dim), jnp.float32)
        self.pool = SaliencePool(self.heads, self.cell_dim, self.dtype)

    def _pool(self, x):
        flat, cells, channels = self.obs_cells
        act = activation_fn(self.activation)
        board = x[..., flat:].reshape(x.shape[:-1] + (cells, channels))
        tokens = act(self.cell(board) + self.position.astype(self.dtype))
        return self.pool(tokens, x[..., :flat])

    def __call__(self, x):
        pooled, _ = self._pool(x)
        return jnp.concatenate([x[..., :self.obs_cells[0]].astype(jnp.float32), pooled], axis=-1).astype(self.dtype)

    def weights(self, x):
        return self._pool(x)[1]


def actor_critic_outputs(module, x):
    """(policy_params, the critic's raw output) of features `x` for a module with `actor`, `critic`, `discrete` and
    `unimix` (ActorCritic on its encoder's or cell's features, the dreamer's latent policy on model states)."""
    out = module.actor(x)
    if module.discrete and module.unimix > 0:
        out = mix_uniform(out, module.unimix)
    return out, module.critic(x)


class ActorCritic(nn.Module):
    """`__call__(obs) -> (policy_params, value)`; `policy_params` are logits (discrete) or means (continuous)."""

    action_dim: int
    discrete: bool
    hidden_dim: int = 256
    num_layers: int = 2
    activation: str = "tanh"
    dtype: jnp.dtype = jnp.float32
    obs_dtype: jnp.dtype = jnp.float32  # the rollout's storage dtype: bfloat16 rounds the inputs first
    obs_cells: tuple[int, int, int] | None = None  # (flat, cells, channels) for the cell encoder; None: MLP
    obs_board: tuple[int, int, int, int] | None = None  # (rows, cols, row_feature, col_feature): the ego encoder
    cell_dim: int = 16
    salience_heads: int = 0  # > 0: the cells are salience-pooled by this many heads (SalienceEncoder)
    unimix: float = 0.0  # discrete: the policy is (1 - unimix) softmax(logits) + unimix / action_dim
    # Continuous envs: the bounds `act` clips the action the env receives to (no parameters; empty if discrete).
    action_low: tuple[float, ...] = ()
    action_high: tuple[float, ...] = ()
    # --normalize-obs: inputs are standardised by running statistics held in the variable collection
    # OBS_NORM (normalization.py updates them); `obs_dim` sizes them.
    normalize_obs: bool = False
    obs_dim: int = 0
    # --recurrent: "gru" or "lstm" puts that cell (hidden_dim wide) between the encoder and the actor and critic
    # MLPs; its state is the carry of `step` (`initial_carry`; an LSTM's (c, h) concatenated into one array).
    # "none": the feed-forward network, `__call__`.
    recurrent: str = "none"
    # --recurrent-embed: > 0, a Dense(recurrent_embed) with the activation between the encoder and the cell (part of
    # `encode`, so the update computes it for a whole sequence at once, outside the cell's scan); 0: none.
    recurrent_embed: int = 0
    # The dreamer's --dreamer-critic-bins: 0, the critic outputs the value; n > 0, logits over n bins in symlog space
    # (two-hot regression, DreamerV3's critic; its output layer starts at zero) and the value is symexp of their mean.
    value_bins: int = 0

    def setup(self):
        dims = (self.hidden_dim,) * self.num_layers
        self.actor = MLP(dims, self.action_dim, 0.01, self.activation, self.dtype)
        self.critic = MLP(dims, self.value_bins or 1, 0.0 if self.value_bins else 1.0, self.activation, self.dtype)
        if self.obs_cells is not None and self.salience_heads > 0:
            self.encoder = SalienceEncoder(self.obs_cells, self.cell_dim, self.salience_heads, self.activation,
                                           self.dtype)
        elif self.obs_cells is not None and self.obs_board is not None:
            self.encoder = EgoEncoder(self.obs_cells, self.obs_board, self.cell_dim, self.activation, self.dtype)
        elif self.obs_cells is not None:
            self.encoder = CellEncoder(self.obs_cells, self.cell_dim, self.activation, self.dtype)
        if self.normalize_obs:
            self.obs_norm = self.variable(OBS_NORM, "moments", initial_moments, self.obs_dim)
        if self.recurrent == "gru":
            self.cell = nn.GRUCell(features=self.hidden_dim, dtype=self.dtype, param_dtype=jnp.float32)
        elif self.recurrent == "lstm":
            self.cell = nn.OptimizedLSTMCell(features=self.hidden_dim, dtype=self.dtype, param_dtype=jnp.float32)
        if self.recurrent != "none" and self.recurrent_embed:
            self.cell_embed = nn.Dense(self.recurrent_embed, kernel_init=nn.initializers.orthogonal(math.sqrt(2)),
                                       bias_init=nn.initializers.zeros, dtype=self.dtype, param_dtype=jnp.float32)
        if not self.discrete:
            # State-independent log std, as in PPO's continuous-control setup.
            self.log_std = self.param("log_std", nn.initializers.zeros, (self.action_dim,), jnp.float32)

    def _inputs(self, obs):
        x = round_obs(obs, self.obs_dtype)
        if self.normalize_obs:
            x = standardise(x, self.obs_norm.value)
        return x.astype(self.dtype)

    def encode(self, obs):
        """The features the actor and critic MLPs read (feed-forward) or the cell reads (recurrent)."""
        x = self._inputs(obs)
        if self.obs_board is not None:  # the player's cell is read from the observation as stored
            x = self.encoder(x, round_obs(obs, self.obs_dtype))
        elif self.obs_cells is not None:
            x = self.encoder(x)
        if self.recurrent != "none" and self.recurrent_embed:
            x = activation_fn(self.activation)(self.cell_embed(x.astype(self.dtype)))
        return x

    def salience(self, obs):
        """The salience encoder's weights [..., heads, cells] on `obs` (what each head attends to)."""
        return self.encoder.weights(self._inputs(obs))

    def __call__(self, obs):
        return self.heads(self.encode(obs))

    def heads(self, x):
        """(policy_params, value) of the features `x`: the encoder's (feed-forward) or the cell's (recurrent)."""
        out, raw = self.raw_heads(x)
        return out, critic_value(raw, self.value_bins)

    def raw_heads(self, x):
        """(policy_params, the critic's raw output [..., value_bins or 1]) of the features `x`."""
        return actor_critic_outputs(self, x)

    def outputs(self, obs):
        """(policy_params, the critic's raw output) of `obs`: what the dreamer's loss reads."""
        return self.raw_heads(self.encode(obs))

    def value(self, obs):
        return critic_value(self.critic(self.encode(obs)), self.value_bins)

    # -- recurrent (--recurrent gru | lstm) -------------------------------------------------------------
    def core(self, carry, x, first):
        """One step of the cell: `carry` [..., carry_dim] (zeroed where `first` [...], the observation that starts
        an episode: the done flag of the step before, as PureJaxRL's ScannedRNN resets), the features `x` ->
        (next carry, the cell's output [..., hidden_dim]). Float32 carry whatever the matmul dtype."""
        carry = jnp.where(first[..., None], 0.0, carry)
        if self.recurrent == "lstm":
            c, h = jnp.split(carry, 2, axis=-1)
            (c, h), y = self.cell((c, h), x)
            next_carry = jnp.concatenate([c, h], axis=-1)
        else:
            next_carry, y = self.cell(carry, x)
        return next_carry.astype(jnp.float32), y

    def step(self, carry, obs, first):
        """The recurrent policy's one step: (next carry, (policy_params, value))."""
        carry, y = self.core(carry, self.encode(obs), first)
        return carry, self.heads(y)

    def value_step(self, carry, obs):
        """The critic's value of `obs` seen after `carry` (no reset): the truncation bootstrap's."""
        _, y = self.core(carry, self.encode(obs), jnp.zeros(obs.shape[:-1], bool))
        return self.critic(y)[..., 0]

    def policy_log_std(self):
        return self.log_std


# --normalize-obs. The running mean and variance of the observations live in the network's variables, in their own
# collection next to "params": everything that applies the network (the rollout, the PPO loss, evaluation, watch,
# exports, checkpoints) then normalises with the same numbers, and no second copy of the policy needs them passed.
# The optimizer sees the collection as part of the parameter tree, but the gradient through it is stopped, so
# Adam's moments stay 0 and its step is exactly 0: only the obs_norm stage (normalization.py) changes them.
OBS_NORM = "obs_norm"
OBS_CLIP = 10.0  # standardised inputs are clipped to +-10 (as SB3's VecNormalize and gym's wrapper do)


def critic_value(raw, value_bins: int):
    """The value of a critic's raw output [..., value_bins or 1]: the output itself, or symexp of the two-hot mean."""
    if not value_bins:
        return raw[..., 0]
    from hephaestus.agents.dtc.rssm import symexp, twohot_mean  # pure functions of jax (no stage is loaded)

    return symexp(twohot_mean(raw))


def initial_moments(obs_dim: int) -> dict:
    """Before any data: mean 0, variance 1 (the identity transform), a tiny count so the first batch dominates."""
    return {"mean": jnp.zeros((obs_dim,), jnp.float32), "var": jnp.ones((obs_dim,), jnp.float32),
            "count": jnp.float32(1e-4)}


def standardise(x, moments: dict):
    moments = jax.lax.stop_gradient(moments)
    z = (x.astype(jnp.float32) - moments["mean"]) * jax.lax.rsqrt(moments["var"] + 1e-8)
    return jnp.clip(z, -OBS_CLIP, OBS_CLIP)


def round_obs(obs, obs_dtype):
    """The observation as stored: rounded for bfloat16 storage; float32 and uint8 storage are exact."""
    return obs.astype(jnp.bfloat16) if jnp.dtype(obs_dtype) == jnp.bfloat16 else obs


@dataclass(frozen=True)
class NetworkSpec:
    """Everything that fixes the network and how it reads observations, with no "auto" left: training builds
    it from the env and the config (`of`), exports and checkpoints store it (`to_meta`), and watch_agent.py,
    evaluate.py and resume read it back (`from_meta`). `build` is the one place an ActorCritic is made."""

    obs_dim: int
    action_dim: int  # number of actions (discrete) or action vector length (continuous)
    discrete: bool
    hidden_dim: int
    num_layers: int
    activation: str = "tanh"
    encoder: str = "mlp"  # mlp | cells | salience | ego
    obs_cells: tuple[int, int, int] | None = None  # (flat, cells, channels), with the cells, salience and ego encoders
    obs_board: tuple[int, int, int, int] | None = None  # (rows, cols, row_feature, col_feature), with the ego encoder
    cell_dim: int = 16  # per-cell embedding width, with the cells and salience encoders
    salience_heads: int = 4  # pooling heads, with the salience encoder only
    obs_dtype: str = "float32"  # the rollout's observation storage (obs_storage.py): bfloat16 rounds the inputs
    dtype: str = "float32"  # matmul dtype; parameters and outputs are float32
    action_low: tuple[float, ...] = ()  # continuous: the bounds `act` clips env actions to
    action_high: tuple[float, ...] = ()
    normalize_obs: bool = False  # running observation statistics in the OBS_NORM collection
    unimix: float = 0.0  # discrete: the uniform share mixed into the policy (--unimix)
    recurrent: str = "none"  # none | gru | lstm (--recurrent)
    recurrent_embed: int = 0  # the Dense in front of a recurrent cell (--recurrent-embed); 0: none
    value_bins: int = 0  # the dreamer's two-hot critic (--dreamer-critic-bins); 0: a scalar critic
    # The dreamer's --dreamer-actor-input state: the world model's sizes (rssm.RSSMSizes, as a dict); the network is
    # then the dreamer's LatentActorCritic, which filters observations with a copy of the world model and reads its
    # state (h, z). None: the network reads observations.
    world_model: tuple | None = None

    # What a field means when a file predates it (exports and checkpoints before the cells encoder, the storage
    # dtype and the recorded matmul dtype are float32 MLPs).
    META_DEFAULTS: ClassVar[dict] = {"activation": "tanh", "encoder": "mlp", "cell_dim": 16, "salience_heads": 4,
                                     "obs_dtype": "float32", "dtype": "float32", "normalize_obs": False,
                                     "unimix": 0.0, "recurrent": "none", "recurrent_embed": 0, "value_bins": 0,
                                     "world_model": None}
    META_REQUIRED: ClassVar[tuple] = ("obs_dim", "action_dim", "discrete", "hidden_dim", "num_layers")

    @classmethod
    def of(cls, env_spec, config) -> "NetworkSpec":
        """The network `config` asks for on the env `env_spec` (envs.adapters.EnvSpec). Raises ConfigError for
        --encoder cells on an env without cells."""
        encoder = resolve_encoder(config, env_spec)
        cells = encoder in CELL_ENCODERS
        net = config.network
        return cls(obs_dim=env_spec.obs_dim, action_dim=env_spec.action_dim, discrete=env_spec.discrete,
                   hidden_dim=net.hidden_dim, num_layers=net.num_layers, activation=net.activation,
                   encoder=encoder, obs_cells=tuple(env_spec.obs_cells) if cells else None,
                   obs_board=tuple(env_spec.obs_board) if encoder == "ego" else None,
                   cell_dim=net.cell_dim if cells else cls.META_DEFAULTS["cell_dim"],
                   salience_heads=net.salience_heads if encoder == "salience" else cls.META_DEFAULTS["salience_heads"],
                   obs_dtype=resolve_obs_dtype(config, env_spec), dtype=net.dtype,
                   action_low=tuple(env_spec.action_low), action_high=tuple(env_spec.action_high),
                   normalize_obs=bool(net.normalize_obs), unimix=float(net.unimix) if env_spec.discrete else 0.0,
                   recurrent=net.recurrent, recurrent_embed=net.recurrent_embed if net.recurrent != "none" else 0,
                   **dreamer_network(config, env_spec))

    def to_meta(self) -> dict:
        """JSON-ready; `obs_cells` and `cell_dim` only for the encoders of cells, `obs_board` for ego, `recurrent`
        only for a recurrent network (a feed-forward network's description is what it always was)."""
        meta = {"obs_dim": self.obs_dim, "action_dim": self.action_dim, "discrete": self.discrete,
                "action_low": list(self.action_low), "action_high": list(self.action_high),
                "hidden_dim": self.hidden_dim, "num_layers": self.num_layers, "activation": self.activation,
                "encoder": self.encoder, "obs_dtype": self.obs_dtype, "dtype": self.dtype,
                "normalize_obs": self.normalize_obs, "unimix": self.unimix}
        if self.encoder in CELL_ENCODERS:
            meta.update(obs_cells=list(self.obs_cells), cell_dim=self.cell_dim)
        if self.encoder == "salience":
            meta.update(salience_heads=self.salience_heads)
        if self.encoder == "ego":
            meta.update(obs_board=list(self.obs_board))
        if self.recurrent != "none":
            meta.update(recurrent=self.recurrent)
        if self.recurrent_embed:
            meta.update(recurrent_embed=self.recurrent_embed)
        if self.value_bins:
            meta.update(value_bins=self.value_bins)
        if self.world_model is not None:
            meta.update(world_model=dict(self.world_model))
        return meta

    @classmethod
    def from_meta(cls, meta: dict) -> "NetworkSpec":
        """The spec `to_meta` wrote (or an older file's, with META_DEFAULTS for what it lacks). Raises
        ValueError naming the fields a damaged description lacks."""
        missing = [k for k in cls.META_REQUIRED if k not in meta]
        if meta.get("encoder") in CELL_ENCODERS and "obs_cells" not in meta:
            missing.append("obs_cells")
        if meta.get("encoder") == "ego" and "obs_board" not in meta:
            missing.append("obs_board")
        if missing:
            raise ValueError(f"network metadata lacks {', '.join(missing)}")
        net = {**cls.META_DEFAULTS, **meta}
        cells = net["encoder"] in CELL_ENCODERS
        return cls(obs_dim=int(net["obs_dim"]), action_dim=int(net["action_dim"]), discrete=bool(net["discrete"]),
                   hidden_dim=int(net["hidden_dim"]), num_layers=int(net["num_layers"]),
                   activation=net["activation"], encoder=net["encoder"],
                   obs_cells=tuple(int(n) for n in net["obs_cells"]) if cells else None,
                   obs_board=tuple(int(n) for n in net["obs_board"]) if net["encoder"] == "ego" else None,
                   cell_dim=int(net["cell_dim"]), salience_heads=int(net["salience_heads"]),
                   obs_dtype=net["obs_dtype"], dtype=net["dtype"],
                   action_low=tuple(float(x) for x in net.get("action_low", ())),
                   action_high=tuple(float(x) for x in net.get("action_high", ())),
                   normalize_obs=bool(net["normalize_obs"]), unimix=float(net["unimix"]), recurrent=net["recurrent"],
                   recurrent_embed=int(net["recurrent_embed"]), value_bins=int(net["value_bins"]),
                   world_model=None if net["world_model"] is None else world_model_items(net["world_model"]))

    def build(self) -> ActorCritic:
        if self.world_model is not None:  # the dreamer's actor-critic on the model state (agents/dreamer/policy.py)
            from hephaestus.agents.dreamer.policy import LatentActorCritic
            from hephaestus.agents.dtc.rssm import RSSMSizes

            return LatentActorCritic(sizes=RSSMSizes(**dict(self.world_model)), action_dim=self.action_dim,
                                     discrete=self.discrete, hidden_dim=self.hidden_dim, num_layers=self.num_layers,
                                     activation=self.activation,
                                     dtype=jnp.bfloat16 if self.dtype == "bfloat16" else jnp.float32,
                                     action_low=self.action_low, action_high=self.action_high, unimix=self.unimix,
                                     value_bins=self.value_bins)
        return ActorCritic(action_dim=self.action_dim, discrete=self.discrete, hidden_dim=self.hidden_dim,
                           num_layers=self.num_layers, activation=self.activation,
                           dtype=jnp.bfloat16 if self.dtype == "bfloat16" else jnp.float32,
                           obs_dtype=jnp.dtype(self.obs_dtype), obs_cells=self.obs_cells, obs_board=self.obs_board,
                           cell_dim=self.cell_dim,
                           salience_heads=self.salience_heads if self.encoder == "salience" else 0,
                           action_low=self.action_low, action_high=self.action_high,
                           normalize_obs=self.normalize_obs, obs_dim=self.obs_dim, unimix=self.unimix,
                           recurrent=self.recurrent, recurrent_embed=self.recurrent_embed,
                           value_bins=self.value_bins)


def world_model_items(sizes: dict) -> tuple:
    """NetworkSpec.world_model of rssm.RSSMSizes' fields (a dict, from JSON: lists become tuples): hashable."""
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in sizes.items()))


def dreamer_network(config, env_spec) -> dict:
    """NetworkSpec's fields that the dreamer's options set (--dreamer-critic-bins, --dreamer-actor-input state), for a
    run that dreams; {} otherwise."""
    opts = getattr(config.stages, "dreamer", None)
    if opts is None or not learns_by_dreaming(config):
        return {}
    fields = {"value_bins": opts.critic_bins}
    if opts.actor_input == "state":
        import dataclasses

        from hephaestus.agents.dtc.agent import sizes_from

        fields["world_model"] = world_model_items(dataclasses.asdict(sizes_from(config, env_spec)))
    return fields


def make_network(spec, config) -> ActorCritic:
    """The network `config` asks for on the env `spec` (NetworkSpec.of(...).build())."""
    return NetworkSpec.of(spec, config).build()


# ---------------------------------------------------------------------------------------------------
# The one policy. Training (ppo.py), evaluation (evaluation.py) and replays (watch.py) all act through `act`,
# and the PPO loss scores stored actions through `evaluate`, so there is one definition of what the agent does;
# `random_action` is the parameter-free baseline evaluate.py --random measures against.


def is_recurrent(network) -> bool:
    """Whether `network` carries a state (--recurrent gru/lstm); any other flax module (a test's bare network) is
    feed-forward."""
    return getattr(network, "recurrent", "none") != "none"


def carry_dim(network: ActorCritic) -> int:
    """Width of a recurrent network's carry: hidden_dim (GRU), 2 x hidden_dim (LSTM: c and h); 0 feed-forward; a
    network that declares its own (`carry_width`, the dreamer's state filter) that."""
    if hasattr(network, "carry_width"):
        return network.carry_width
    return {"none": 0, "gru": 1, "lstm": 2}[network.recurrent] * network.hidden_dim


def initial_carry(network: ActorCritic, batch_shape=()):
    """The carry at the start of an episode: zeros [*batch_shape, carry_dim]; None for a feed-forward network
    (which carries nothing, so its runner state and programs are what they were before --recurrent)."""
    return jnp.zeros(tuple(batch_shape) + (carry_dim(network),), jnp.float32) if is_recurrent(network) else None


def init_params(network: ActorCritic, key, obs_dim: int):
    """The network's fresh variables (parameters, and --normalize-obs's moments)."""
    if not is_recurrent(network):
        return network.init(key, jnp.zeros((1, obs_dim), jnp.float32))
    return network.init(key, initial_carry(network, (1,)), jnp.zeros((1, obs_dim), jnp.float32),
                        jnp.ones((1,), bool), method="step")


def act_carried(network: ActorCritic, params, carry, obs, first, mask, key, greedy: bool = False):
    """`act` for any network, carrying a recurrent one's state: (next carry, (env_action, action, log_prob,
    value)). `carry` [..., carry_dim] is the state before `obs`; `first` [...] marks observations that start an
    episode (the carry is reset to zeros there). A feed-forward network's carry is None and stays None."""
    if not is_recurrent(network):
        return None, act(network, params, obs, mask, key, greedy)
    carry, (out, value) = network.apply(params, carry, obs, first, method="step")
    acted = _choose(network, params, out, value, mask, key, greedy)
    if getattr(network, "carries_action", False):  # the dreamer's state filter: the next state needs this action
        carry = network.with_action(carry, acted[1])
    return carry, acted


def act(network: ActorCritic, params, obs, mask, key, greedy: bool = False):
    """Choose actions for `obs` [..., obs_dim]. Returns (env_action, action, log_prob, value). Feed-forward
    networks; a recurrent one acts through `act_carried`.

    Discrete: a sample of the masked categorical, or with `greedy` the argmax over the valid actions;
    `env_action` is `action`. Continuous: a sample of the diagonal Gaussian, or with `greedy` its mean; `action`
    is the raw value (what PPO stores and scores) and `env_action` that value clipped to the action bounds.
    `greedy` is a Python bool (it selects the program, it is not data); `key` is unused when greedy."""
    out, value = network.apply(params, obs)
    return _choose(network, params, out, value, mask, key, greedy)


def _choose(network: ActorCritic, params, out, value, mask, key, greedy: bool):
    if network.discrete:
        if greedy:
            action = jnp.argmax(masked_logits(out, mask), axis=-1).astype(jnp.int32)
        else:
            action = categorical_sample(key, out, mask)
        return action, action, categorical_log_prob(out, mask, action), value
    log_std = params["params"]["log_std"]
    action = out if greedy else gaussian_sample(key, out, log_std)
    low = jnp.asarray(network.action_low, jnp.float32)
    high = jnp.asarray(network.action_high, jnp.float32)
    return jnp.clip(action, low, high), action, gaussian_log_prob(out, log_std, action), value


def random_action(key, mask, discrete: bool, action_low=(), action_high=()):
    """The baseline with no parameters: a valid action uniformly at random (discrete, `mask` [..., actions]), or
    a uniform point within the action bounds (continuous; `mask` [..., 1] gives the batch shape)."""
    if discrete:
        return categorical_sample(key, jnp.zeros(mask.shape, jnp.float32), mask)
    low, high = jnp.asarray(action_low, jnp.float32), jnp.asarray(action_high, jnp.float32)
    return jax.random.uniform(key, mask.shape[:-1] + low.shape, minval=low, maxval=high)


def evaluate(network: ActorCritic, params, obs, mask, action, teacher_action=None):
    """(log_prob, entropy, value) of stored actions under `params` (the PPO loss); with `teacher_action` (discrete),
    (log_prob, entropy, value, the teacher's actions' log_prob) from the same forward pass."""
    out, value = network.apply(params, obs)
    return _score(network, params, out, value, mask, action, teacher_action)


def evaluate_sequences(network: ActorCritic, params, carry0, obs, first, mask, action, teacher_action=None):
    """`evaluate` for a recurrent network on whole env sequences: `obs` [T, B, ...] in time order, `first` [T, B]
    (episode starts: the carry resets there), `carry0` [B, carry_dim] the carry before step 0. The encoder and
    the heads run on all T x B observations at once; only the cell is scanned over time."""
    x = network.apply(params, obs, method="encode")

    def cell_step(carry, inputs):
        return network.apply(params, carry, *inputs, method="core")

    _, y = jax.lax.scan(cell_step, carry0, (x, first))
    out, value = network.apply(params, y, method="heads")
    return _score(network, params, out, value, mask, action, teacher_action)


def _score(network: ActorCritic, params, out, value, mask, action, teacher_action):
    if network.discrete:
        scored = categorical_log_prob(out, mask, action), categorical_entropy(out, mask), value
        return scored if teacher_action is None else scored + (categorical_log_prob(out, mask, teacher_action),)
    log_std = params["params"]["log_std"]
    return gaussian_log_prob(out, log_std, action), gaussian_entropy(out, log_std), value


# ---------------------------------------------------------------------------------------------------
# Masked categorical. The same masked logits feed sampling, log-probabilities and entropy, so an invalid
# action has probability exactly 0 everywhere. A row with no valid action (a trapped jumanji Snake masks every
# move) means "every action is allowed" (jumanji's own agents and large-negative-logit categoricals behave so):
# the row falls back to the unmasked policy, sampling, log_prob and entropy alike, and the env ends the episode
# on whatever is taken. Callers count such rows (`fully_masked_rows`); the training loop warns once, or stops
# with an error for envs that declare such a row a bug (`EnvSpec.fully_masked_is_bug`, HackMatrix).


def mix_uniform(logits, unimix: float):
    """Log-probabilities of (1 - unimix) softmax(logits) + unimix / n over the last axis (DreamerV3's unimix),
    in float32. Used as logits: the masked functions below renormalise it over the valid actions, so each valid
    action keeps at least about unimix / n of the mass wherever the network puts the rest; the argmax is unchanged."""
    log_p = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return jnp.logaddexp(jnp.log1p(-unimix) + log_p, jnp.log(unimix / logits.shape[-1]))


def effective_mask(mask):
    """`mask`, with every action allowed in rows that allow none."""
    return jnp.logical_or(mask, ~jnp.any(mask, axis=-1, keepdims=True))


def masked_logits(logits, mask):
    return jnp.where(effective_mask(mask), logits, MASKED_LOGIT)


def fully_masked_rows(mask):
    return jnp.sum(~jnp.any(mask, axis=-1))


def masked_categorical(logits, mask):
    """The policy's distribution over discrete actions: distrax's categorical of the masked logits. distrax is
    imported here, when a program is traced (its import, with TensorFlow Probability's jax substrate, takes
    seconds; a start that reads its programs back from the store never traces them)."""
    import distrax

    return distrax.Categorical(logits=masked_logits(logits, mask))


def categorical_sample(key, logits, mask):
    return masked_categorical(logits, mask).sample(seed=key).astype(jnp.int32)


def categorical_log_prob(logits, mask, action):
    return masked_categorical(logits, mask).log_prob(action.astype(jnp.int32))


def categorical_entropy(logits, mask):
    return masked_categorical(logits, mask).entropy()


# ---------------------------------------------------------------------------------------------------
# Diagonal Gaussian. The raw sample is what is stored and scored; the env receives it clipped to the
# action bounds (clipping, not tanh-squashing, keeps log-probabilities exact and is what PPO uses).


def diagonal_gaussian(mean, log_std):
    """The policy's distribution over continuous actions: distrax's Gaussian with a diagonal covariance, the
    state-independent `log_std` broadcast over the batch (imported when traced, as `masked_categorical`)."""
    import distrax

    return distrax.MultivariateNormalDiag(mean, jnp.broadcast_to(jnp.exp(log_std), mean.shape))


def gaussian_sample(key, mean, log_std):
    return diagonal_gaussian(mean, log_std).sample(seed=key)


def gaussian_log_prob(mean, log_std, action):
    return diagonal_gaussian(mean, log_std).log_prob(action)


def gaussian_entropy(mean, log_std):
    return diagonal_gaussian(mean, log_std).entropy()
