"""Cheap counter-based randomness for the hot paths (see specs/hackmatrix.md, "Randomness").

Each purpose draws one 32-bit seed from the threefry key (``jax.random.bits``) and expands it
with an integer hash of (seed, counter) (the ``lowbias32`` mixer).  This is much cheaper on CPU
than one threefry call per random number and statistically adequate for game dynamics."""
import jax
import jax.numpy as jnp

U = jnp.uint32


def seed(key):
    return jax.random.bits(key, (), jnp.uint32)


def seeds(key, n):
    """``n`` independent seeds from one threefry call (each call is its own loop in the compiled program)."""
    return tuple(jax.random.bits(key, (n,), jnp.uint32))


def hash32(x):
    x = x.astype(U)
    x = x ^ (x >> 16)
    x = x * U(0x7FEB352D)
    x = x ^ (x >> 15)
    x = x * U(0x846CA68B)
    x = x ^ (x >> 16)
    return x


def bits(s, ctr):
    """uint32 random word for counter(s) ``ctr`` under seed ``s``."""
    return hash32(hash32(jnp.asarray(ctr, U) * U(0x9E3779B9) + U(0x632BE5AB)) ^ s)


def uniform(s, ctr):
    return (bits(s, ctr) >> 8).astype(jnp.float32) * (1.0 / (1 << 24))


def randint(s, ctr, n):
    """Uniform integer in [0, n) (24-bit multiply-shift; bias < n / 2**24)."""
    return (((bits(s, ctr) >> 8).astype(U) * jnp.asarray(n, U)) >> 24).astype(jnp.int32)


def bernoulli16(s, ctr, p):
    """True with probability round(p * 65536) / 65536."""
    return (bits(s, ctr) & U(0xFFFF)) < U(int(round(p * 65536)))


def rank(pri):
    """Rank of each element of a 1-D array (ties broken by index): a sort-free permutation."""
    n = pri.shape[-1]
    i = jnp.arange(n)
    less = (pri[None, :] < pri[:, None]) | ((pri[None, :] == pri[:, None]) & (i[None, :] < i[:, None]))
    return (less.astype(jnp.float32) @ jnp.ones(n, jnp.float32)).astype(jnp.int32)
