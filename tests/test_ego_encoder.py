"""The ego encoder (--encoder ego, networks.player_window / EgoEncoder): the board's cell embeddings laid out
around the player, so an input means "what is at this offset from the player". A toy 1 x 4 board (no
HackMatrix compile); tests/hackmatrix/test_env.py checks HackMatrix's own `obs_board` declaration."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hephaestus.core import networks as nets
from hephaestus.config.train_config import ConfigError, TrainConfig, resolve
from hephaestus.core.export import load_params_npz, network_from_meta, network_meta, save_params_npz
from hephaestus.core.ppo import make_train
from test_encoder import SMALL, CellWalk, cell_env


class EgoWalk(CellWalk):
    """CellWalk on a 1 x 4 board whose flat features place the player: [row (0), col / 3, time]."""

    obs_board = (1, 4, 0, 1)

    def get_obs(self, state, params=None, key=None):
        obs = super().get_obs(state)
        col = jnp.clip(state.pos + 2, 0, 3)  # the cell CellWalk marks
        return obs.at[:3].set(jnp.stack([0.0, col / 3.0, state.time / 3.0]))


class BadBoard(CellWalk):
    obs_board = (2, 3, 0, 1)  # 6 cells, the env has 4


def reference_window(row, col, rows, cols):
    """player_window written out with loops."""
    out = []
    for d_row in range(-(rows - 1), rows):
        for d_col in range(-(cols - 1), cols):
            r, c = row + d_row, col + d_col
            out.append(r * cols + c if 0 <= r < rows and 0 <= c < cols else rows * cols)
    return out


@pytest.mark.parametrize("row,col", [(0, 0), (1, 2), (2, 1), (2, 2)])
def test_player_window_lays_the_board_around_the_player(row, col):
    rows, cols = 3, 3
    obs = jnp.zeros(5).at[3].set(row / (rows - 1)).at[1].set(col / (cols - 1))
    window = np.asarray(nets.player_window(obs, (rows, cols, 3, 1)))
    assert window.shape == (5 * 5,)
    assert list(window) == reference_window(row, col, rows, cols)
    assert window[12] == row * cols + col  # the centre slot is the player's cell
    # Batched and stored as bfloat16 (1/2 is exact, and rounding recovers row and col either way).
    batch = jnp.stack([obs, obs]).astype(jnp.bfloat16)
    np.testing.assert_array_equal(nets.player_window(batch, (rows, cols, 3, 1)), np.stack([window, window]))


def test_what_is_beside_the_player_reaches_the_same_inputs_wherever_the_player_is():
    enc = nets.EgoEncoder((3, 4, 3), (1, 4, 0, 1), cell_dim=5)
    # A marked cell right of the player, with the player at col 1 and then at col 2; other cells empty.
    def obs(player_col):
        board = jnp.zeros((4, 3)).at[player_col + 1, 2].set(1.0)
        return jnp.concatenate([jnp.array([0.0, player_col / 3.0, 0.5]), board.ravel()])
    x = jnp.stack([obs(1), obs(2)])
    params = enc.init(jax.random.PRNGKey(0), x, x)
    window = enc.apply(params, x, x)[:, 3:].reshape(2, 7, 5)
    # Slots: offsets -3..3. Left of, at and right of the player hold the same cells' embeddings in both.
    np.testing.assert_allclose(window[0, 2:5], window[1, 2:5], rtol=1e-6)
    assert not np.allclose(window[0, 4], window[0, 3])  # the marked cell is not an empty one
    # Off the board: the learned embedding (player at col 1: offsets -3, -2 and +3; at col 2: -3, +2, +3).
    off = params["params"]["off_board"]
    for k, slots in enumerate([(0, 1, 6), (0, 5, 6)]):
        for slot in slots:
            np.testing.assert_array_equal(window[k, slot], off)
    # The cells encoder reads the same two observations at different inputs (it does not centre).
    cells = nets.CellEncoder((3, 4, 3), cell_dim=5)
    out = cells.apply(cells.init(jax.random.PRNGKey(0), x), x)[:, 3:].reshape(2, 4, 5)
    assert not np.allclose(out[0, 2], out[1, 2])


def ego_env(cls=EgoWalk):
    env = cls()
    from hephaestus.envs.adapters import adapt_gymnax
    return adapt_gymnax(env, env.default_params, "egowalk")


def test_ego_needs_a_declared_board_and_the_adapter_checks_it():
    assert ego_env().spec.obs_board == (1, 4, 0, 1)
    assert cell_env().spec.obs_board is None
    with pytest.raises(ValueError, match="obs_board"):
        ego_env(BadBoard)
    with pytest.raises(ConfigError, match="--encoder ego needs an env that declares obs_board"):
        resolve(TrainConfig.from_flat(env="cellwalk", **{**SMALL, "encoder": "ego"}), cell_env().spec)


def test_ego_network_trains_exports_and_rebuilds(tmp_path):
    config, _ = resolve(TrainConfig.from_flat(env="egowalk", **{**SMALL, "encoder": "ego"}), ego_env().spec)
    tr = make_train(config, ego_env())
    params = tr.runner_state.train_state.params
    # The MLPs read the 3 flat features and a 7-slot window of 4-wide embeddings.
    assert params["params"]["actor"]["Dense_0"]["kernel"].shape == (3 + 7 * 4, 16)
    state, metrics = tr.train_chunk(tr.runner_state)
    assert np.all(np.isfinite(metrics["total_loss"]))
    meta = network_meta(tr.env.spec, tr.config)
    assert meta["encoder"] == "ego" and meta["obs_board"] == [1, 4, 0, 1]
    path = save_params_npz(str(tmp_path / "p.npz"), state.train_state.params, env="egowalk", network=meta)
    loaded_params, loaded = load_params_npz(path)
    x = jnp.stack([EgoWalk().get_obs(s) for s in [EgoWalk().reset_env(jax.random.PRNGKey(k), None)[1]
                                                   for k in range(3)]])
    rebuilt = network_from_meta(loaded).apply(jax.tree.map(jnp.asarray, loaded_params), x)
    for a, b in zip(rebuilt, tr.network.apply(state.train_state.params, x)):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    with pytest.raises(ValueError, match="obs_board"):
        network_from_meta({"network": {k: v for k, v in meta.items() if k != "obs_board"}})
