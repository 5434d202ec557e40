"""The laptop export round-trips parameters and metadata, and refuses files that are not exports."""

import jax
import numpy as np
import pytest

from hephaestus.config.train_config import TrainConfig, resolve
from hephaestus.envs.registry import make_env
from hephaestus.core.export import ExportError, load_params_npz, network_from_meta, network_meta, save_params_npz
from hephaestus.core.networks import make_network


def test_round_trip_rebuilds_the_same_network(tmp_path):
    env = make_env("gymnax:CartPole-v1")
    config, _ = resolve(TrainConfig.from_flat(env="gymnax:CartPole-v1", hidden_dim=8, num_layers=2), env.spec)
    network = make_network(env.spec, config)
    params = network.init(jax.random.PRNGKey(0), np.zeros((1, env.spec.obs_dim), np.float32))
    path = save_params_npz(str(tmp_path / "final_params.npz"), params, env=config.env.name,
                           network=network_meta(env.spec, config), update=3, env_steps=96)
    with np.load(path) as raw:
        assert "params.actor.Dense_0.kernel" in raw.files
    loaded, meta = load_params_npz(path)
    assert meta["env"] == "gymnax:CartPole-v1" and meta["update"] == 3 and meta["network"]["hidden_dim"] == 8
    rebuilt = network_from_meta(meta)
    obs = np.random.default_rng(0).normal(size=(5, env.spec.obs_dim)).astype(np.float32)
    a, b = network.apply(params, obs), rebuilt.apply(loaded, obs)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert not list(tmp_path.glob("*.tmp"))


def test_non_exports_are_refused_with_one_line(tmp_path):
    with pytest.raises(ExportError, match="no such file"):
        load_params_npz(str(tmp_path / "missing.npz"))
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip")
    with pytest.raises(ExportError, match="not a readable"):
        load_params_npz(str(junk))
    other = tmp_path / "other.npz"
    np.savez(other, x=np.zeros(3))
    with pytest.raises(ExportError, match="not a Hephaestus parameter file"):
        load_params_npz(str(other))


def test_one_network_spec_is_stored_and_rebuilt():
    """NetworkSpec: what training builds from the env and config is what exports and checkpoints store and what
    watch_agent.py/evaluate.py rebuild; files that predate a field get its documented default."""
    import jax.numpy as jnp

    from hephaestus.core.networks import NetworkSpec

    env = make_env("gymnax:Pendulum-v1")
    config = TrainConfig.from_flat(env=env.spec.name, hidden_dim=8, num_layers=1, activation="relu", dtype="bfloat16")
    spec = NetworkSpec.of(env.spec, config)
    assert (spec.obs_dim, spec.action_dim, spec.discrete, spec.encoder, spec.dtype) == (3, 1, False, "mlp", "bfloat16")
    assert spec.action_low == (-2.0,) and spec.action_high == (2.0,)
    assert NetworkSpec.from_meta(spec.to_meta()) == spec
    net = spec.build()
    assert net.dtype == jnp.bfloat16 and net.activation == "relu" and net.action_high == (2.0,)
    assert network_from_meta({"network": spec.to_meta()}, dtype="float32").dtype == jnp.float32  # overridden
    old = {k: v for k, v in spec.to_meta().items() if k not in ("activation", "encoder", "obs_dtype", "dtype")}
    assert NetworkSpec.from_meta(old) == NetworkSpec(3, 1, False, 8, 1, action_low=(-2.0,), action_high=(2.0,))
    with pytest.raises(ValueError, match="network metadata lacks hidden_dim"):
        NetworkSpec.from_meta({k: v for k, v in old.items() if k != "hidden_dim"})
    with pytest.raises(ExportError, match="network metadata lacks"):
        network_from_meta({"network": {}})
