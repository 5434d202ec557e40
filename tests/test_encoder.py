"""The cells encoder and compact observation storage (--encoder, --cell-dim, --obs-dtype).

A toy env declares `obs_cells` the way HackMatrix does (flat features, then cells x channels), with values such
as t/3 that bfloat16 cannot hold exactly, so rounding is visible. Configs are tiny: no HackMatrix compile.
"""

import dataclasses
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments import spaces

from hephaestus.run import checkpoint as ck
from hephaestus.core import networks as nets
from hephaestus.config import train_config as cfg
from hephaestus.config.train_config import ConfigError, TrainConfig, resolve
from hephaestus.core.networks import resolve_encoder, resolve_obs_dtype
from hephaestus.envs.adapters import EnvSpec, adapt_gymnax
from hephaestus.core.export import load_params_npz, network_from_meta, network_meta, save_params_npz
from hephaestus.core.ppo import make_train
from toy_envs import RandomWalk

SMALL = dict(hidden_dim=16, num_layers=1, num_envs=4, num_steps=8, num_minibatches=2, update_epochs=1,
             log_interval=1, total_timesteps=4 * 8 * 2, encoder="cells", cell_dim=4)


class CellWalk(RandomWalk):
    """RandomWalk whose observation is [pos, time, start] + 4 cells x 3 channels: a one-hot of the position,
    time / 3 and start / 10 (neither exact in bfloat16)."""

    obs_cells = (3, 4, 3)

    def get_obs(self, state, params=None, key=None):
        flat = jnp.stack([state.pos, state.time, state.start]).astype(jnp.float32)
        board = jnp.zeros((4, 3), jnp.float32).at[jnp.clip(state.pos + 2, 0, 3), 0].set(1.0)
        board = board.at[:, 1].set(state.time / 3.0).at[:, 2].set(state.start / 10.0)
        return jnp.concatenate([flat, board.ravel()])

    def observation_space(self, params):
        return spaces.Box(-10, 10, (15,), jnp.float32)


class QuantWalk(CellWalk):
    """CellWalk shifted to non-negative values and declaring obs_quanta: time / 3 and start / 10 are exact in
    uint8 storage though not in bfloat16."""

    obs_quanta = (1.0, 1.0, 1.0) + (1.0, 3.0, 10.0) * 4

    def get_obs(self, state, params=None, key=None):
        shifted = state.replace(pos=state.pos + 10, start=state.start + 2)
        return super().get_obs(shifted)


class BadCells(CellWalk):
    obs_cells = (3, 5, 3)  # 3 + 15 != 15


def cell_env(cls=CellWalk):
    env = cls()
    return adapt_gymnax(env, env.default_params, "cellwalk")


def trainer(**overrides):
    config, _ = resolve(TrainConfig.from_flat(env="cellwalk", **{**SMALL, **overrides}))
    return make_train(config, cell_env())


def rollout_batch(tr):
    runner = tr.runner_state
    return jax.jit(tr.pipeline[0].apply)(jax.random.PRNGKey(0), runner.train_state, None,
                                         runner.stages["rollout"])[1]


def assert_batch_scored_on(tr, batch, obs):
    """The batch's log-probabilities and values are the network's on `obs`, and an update on it is finite."""
    params = tr.runner_state.train_state.params
    logits, value = jax.jit(tr.network.apply)(params, obs)
    np.testing.assert_allclose(batch["value"], value, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(batch["log_prob"],
                               nets.categorical_log_prob(logits, batch["action_mask"], batch["action"]),
                               rtol=1e-6, atol=1e-6)
    _, metrics = tr.train_chunk(tr.runner_state)
    assert metrics["total_loss"].dtype == jnp.float32 and np.all(np.isfinite(metrics["total_loss"]))


def test_adapter_reads_obs_cells_and_checks_them():
    assert cell_env().spec.obs_cells == (3, 4, 3) and cell_env().spec.obs_dim == 15
    walk = RandomWalk()
    assert adapt_gymnax(walk, walk.default_params, "walk").spec.obs_cells is None
    with pytest.raises(ValueError, match="obs_cells"):
        cell_env(BadCells)


def test_auto_resolution_of_encoder_and_obs_dtype():
    hm = EnvSpec(name="hackmatrix", obs_dim=1545, discrete=True, action_dim=28, obs_cells=(33, 36, 42),
                 obs_quanta=(1.0,) * 1545)
    small = EnvSpec(name="gymnax:CartPole-v1", obs_dim=4, discrete=True, action_dim=2)
    wide = dataclasses.replace(small, obs_dim=1000)
    auto = TrainConfig()
    # auto storage: exact uint8 where the env declares obs_quanta, float32 elsewhere; auto encoder: mlp.
    assert (resolve_encoder(auto, hm), resolve_obs_dtype(auto, hm)) == ("mlp", "uint8")
    for spec in (small, wide):
        assert (resolve_encoder(auto, spec), resolve_obs_dtype(auto, spec)) == ("mlp", "float32")
    assert resolve_encoder(auto.replace(encoder="cells"), hm) == "cells"
    assert resolve_obs_dtype(auto.replace(obs_dtype="bfloat16"), small) == "bfloat16"
    dtc = auto.replace(extra_stages=("world_model", "intrinsic_reward"))
    assert resolve_obs_dtype(dtc, hm) == "float32"  # the world model reads float observations
    assert resolve_obs_dtype(dtc.replace(obs_dtype="bfloat16"), hm) == "bfloat16"
    with pytest.raises(ConfigError, match="--obs-dtype uint8 cannot be used with --agent dtc"):
        resolve_obs_dtype(dtc.replace(obs_dtype="uint8"), hm)
    with pytest.raises(ConfigError, match="--obs-dtype uint8 needs an env that declares obs_quanta"):
        resolve_obs_dtype(auto.replace(obs_dtype="uint8"), small)
    assert resolve_encoder(auto.replace(encoder="mlp"), hm) == "mlp"
    # auto takes the env family's encoder from config.ENV_DEFAULTS where the env declares what it reads: ego is
    # HackMatrix's, so ego where the board layout is declared, mlp where not, and mlp for the dreamers.
    hm_board = dataclasses.replace(hm, obs_board=(6, 6, 0, 1))
    assert resolve_encoder(auto, hm_board) == "ego" and resolve_encoder(auto, hm) == "mlp"
    assert resolve(TrainConfig.from_flat(agent="dreamer"), hm_board)[0].network.encoder == "mlp"
    assert resolve_encoder(auto.replace(env="gymnax:CartPole-v1"), hm_board) == "mlp"  # ego is HackMatrix's default
    with mock.patch.dict(cfg.ENV_DEFAULTS, {"hackmatrix": {**cfg.ENV_DEFAULTS["hackmatrix"], "encoder": "cells"}}):
        assert resolve_encoder(auto, hm) == "cells"  # any family default is read from the table
    with pytest.raises(ConfigError, match="needs an env that declares obs_cells"):
        resolve_encoder(auto.replace(encoder="cells"), small)


@pytest.mark.parametrize("field,value,needle", [("encoder", "conv", "--encoder must be one of"),
                                                ("obs_dtype", "float16", "--obs-dtype must be one of"),
                                                ("cell_dim", 0, "--cell-dim must be positive")])
def test_bad_values_are_config_errors(field, value, needle):
    with pytest.raises(ConfigError, match=needle):
        resolve(TrainConfig.from_flat(**{field: value}))


def test_cells_network_shapes():
    spec = cell_env().spec
    config, _ = resolve(TrainConfig.from_flat(env="cellwalk", **SMALL), spec)
    net = nets.make_network(spec, config)
    params = net.init(jax.random.PRNGKey(0), jnp.zeros((1, spec.obs_dim)))["params"]
    # One cell kernel [channels, cell_dim], whatever the number of cells; the MLPs see flat + cells x cell_dim.
    assert params["encoder"]["cell"]["kernel"].shape == (3, 4)
    assert params["actor"]["Dense_0"]["kernel"].shape == (3 + 4 * 4, 16)
    assert params["critic"]["Dense_0"]["kernel"].shape == (3 + 4 * 4, 16)
    logits, value = net.apply({"params": params}, jnp.ones((5, spec.obs_dim)))
    assert logits.shape == (5, 2) and value.shape == (5,)
    assert logits.dtype == jnp.float32 and value.dtype == jnp.float32
    # --encoder mlp on the same env: no encoder, the MLP reads the flat 15-wide observation.
    mlp = nets.make_network(spec, config.replace(encoder="mlp"))
    mlp_params = mlp.init(jax.random.PRNGKey(0), jnp.zeros((1, spec.obs_dim)))["params"]
    assert "encoder" not in mlp_params and mlp_params["actor"]["Dense_0"]["kernel"].shape == (15, 16)


def test_cell_encoder_shares_one_set_of_weights_over_cells():
    enc = nets.CellEncoder((3, 4, 3), cell_dim=5)
    x = jax.random.uniform(jax.random.PRNGKey(1), (6, 15))
    params = enc.init(jax.random.PRNGKey(0), x)
    out = enc.apply(params, x)
    assert out.shape == (6, 3 + 4 * 5)
    np.testing.assert_array_equal(out[:, :3], x[:, :3])  # flat features pass through
    # Swapping the channels of cells 0 and 2 swaps their embeddings exactly: same weights for every cell.
    cells = x[:, 3:].reshape(6, 4, 3)
    swapped = jnp.concatenate([x[:, :3], cells[:, jnp.array([2, 1, 0, 3])].reshape(6, 12)], axis=1)
    emb, emb_swapped = out[:, 3:].reshape(6, 4, 5), enc.apply(params, swapped)[:, 3:].reshape(6, 4, 5)
    np.testing.assert_allclose(emb_swapped, emb[:, jnp.array([2, 1, 0, 3])], rtol=1e-6, atol=1e-6)
    # ... and each embedding is tanh(channels @ W + b) of that cell alone.
    w, b = params["params"]["cell"]["kernel"], params["params"]["cell"]["bias"]
    np.testing.assert_allclose(emb, jnp.tanh(cells @ w + b), rtol=1e-5, atol=1e-6)


def test_cells_network_sees_which_cell_holds_what():
    """Moving a cell's channels to another cell changes the policy (the torso knows the positions), while
    permuting channels *within* the board layout the encoder expects is not a no-op either."""
    spec = cell_env().spec
    net = nets.make_network(spec, resolve(TrainConfig.from_flat(env="cellwalk", **SMALL), spec)[0])
    params = net.init(jax.random.PRNGKey(0), jnp.zeros((1, spec.obs_dim)))
    x = jax.random.uniform(jax.random.PRNGKey(3), (1, 15))
    cells = x[:, 3:].reshape(1, 4, 3)
    moved = jnp.concatenate([x[:, :3], cells[:, jnp.array([1, 0, 2, 3])].reshape(1, 12)], axis=1)
    across = jnp.concatenate([x[:, :3], cells.swapaxes(1, 2).reshape(1, 12)], axis=1)  # channel c of cell k <-> ...
    base = net.apply(params, x)[0]
    assert not np.allclose(base, net.apply(params, moved)[0])
    assert not np.allclose(base, net.apply(params, across)[0])


def test_rollout_stores_bfloat16_observations_and_acts_on_exactly_those():
    tr = trainer(obs_dtype="bfloat16")
    batch = rollout_batch(tr)
    obs = batch["obs"]
    assert obs.dtype == jnp.bfloat16 and obs.shape == (8, 4, 15)
    # Stored values are the env's rounded to bfloat16 (time/3 is not exact in bfloat16, so rounding happened).
    time = obs[..., 1].astype(jnp.float32)
    np.testing.assert_array_equal(obs[..., 3 + 1], (time / 3.0).astype(jnp.bfloat16))
    assert np.any(np.asarray(obs[..., 3 + 1].astype(jnp.float32)) != np.asarray(time / 3.0))
    # The network itself rounds its input to the storage dtype, so watch/export see what training saw.
    params = tr.runner_state.train_state.params
    full = jnp.full((2, 15), 1.0 / 3.0, jnp.float32)
    np.testing.assert_array_equal(tr.network.apply(params, full)[1],
                                  tr.network.apply(params, full.astype(jnp.bfloat16))[1])
    assert_batch_scored_on(tr, batch, obs)


def test_float32_storage_keeps_observations_exact():
    batch = rollout_batch(trainer(obs_dtype="float32"))
    assert batch["obs"].dtype == jnp.float32
    np.testing.assert_array_equal(batch["obs"][..., 3 + 1], batch["obs"][..., 1] / 3.0)


def test_uint8_storage_is_exact_and_a_quarter_of_float32():
    env = QuantWalk()
    adapted = adapt_gymnax(env, env.default_params, "quantwalk")
    assert adapted.spec.obs_quanta == QuantWalk.obs_quanta
    config, _ = resolve(TrainConfig.from_flat(env="quantwalk", **SMALL))
    tr = make_train(config, adapted)
    batch = rollout_batch(tr)
    stored = batch["obs"]
    assert stored.dtype == jnp.uint8 and stored.shape == (8, 4, 15)  # auto picked uint8
    # Decoded, the observations are the env's own, bit for bit (time / 3 included, which bfloat16 rounds).
    decoded = np.asarray(stored, np.float32) / np.asarray(QuantWalk.obs_quanta, np.float32)
    np.testing.assert_array_equal(decoded[..., 3 + 1], decoded[..., 1] / np.float32(3.0))
    assert np.any(decoded[..., 1] % 3 != 0)  # some time / 3 that is not a whole number was stored
    # The network does not round exact storage: float32 inputs go through unchanged.
    params = tr.runner_state.train_state.params
    x = jnp.full((2, 15), 1.0 / 3.0, jnp.float32)
    assert not np.array_equal(tr.network.apply(params, x)[1], tr.network.apply(params, x.astype(jnp.bfloat16))[1])
    # Exports record the storage, and the network rebuilt from them (watch_agent.py) reads floats the same way.
    meta = network_meta(adapted.spec, tr.config)
    assert meta["obs_dtype"] == "uint8"
    np.testing.assert_array_equal(network_from_meta({"network": meta}).apply(params, x)[1],
                                  tr.network.apply(params, x)[1])
    assert_batch_scored_on(tr, batch, decoded)


def test_export_rebuilds_the_cells_network(tmp_path):
    tr = trainer()
    meta = network_meta(tr.env.spec, tr.config)
    assert meta["encoder"] == "cells" and meta["obs_cells"] == [3, 4, 3] and meta["cell_dim"] == 4
    assert meta["obs_dtype"] == "float32"  # auto
    path = save_params_npz(str(tmp_path / "p.npz"), tr.runner_state.train_state.params, env="cellwalk",
                           network=meta)
    params, loaded = load_params_npz(path)
    net = network_from_meta(loaded)
    x = jax.random.uniform(jax.random.PRNGKey(2), (3, 15))
    for a, b in zip(net.apply(jax.tree.map(jnp.asarray, params), x), tr.network.apply(tr.runner_state.train_state.params, x)):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    # Files from before the encoder existed have no "encoder": they rebuild as the plain MLP.
    old = {"network": {k: v for k, v in network_meta(tr.env.spec, tr.config.replace(encoder="mlp")).items()
                       if k not in ("encoder", "obs_dtype")}}
    assert network_from_meta(old).obs_cells is None


def test_resume_refuses_a_checkpoint_of_the_other_encoder(tmp_path):
    cells = trainer()
    saver = ck.Checkpointer(str(tmp_path / "run"), cells, export_params=False, message=lambda _: None)
    saver.save(cells.runner_state)
    saver.close()
    found = ck.locate(str(tmp_path / "run"))
    assert found.meta["network"]["encoder"] == "cells"
    ck.restore(found, cells)  # same encoder: fine
    with pytest.raises(ck.CheckpointError, match="encoder is 'cells' in the checkpoint, 'mlp' in this run"):
        ck.restore(found, trainer(encoder="mlp"))
    with pytest.raises(ck.CheckpointError, match="cell_dim is 4 in the checkpoint, 8 in this run"):
        ck.restore(found, trainer(cell_dim=8))
    # A checkpoint from before --encoder (no "encoder" in its metadata) was an MLP.
    old = dataclasses.replace(found, meta={**found.meta, "network": {
        k: v for k, v in found.meta["network"].items() if k not in ("encoder", "obs_cells", "cell_dim")}})
    with pytest.raises(ck.CheckpointError, match="encoder is 'mlp' in the checkpoint"):
        ck.check_compatible(old, cells.config, network_meta(cells.env.spec, cells.config))
