"""``compacted(fn)``: ``f(need, base, *args)`` = ``fn(need, *args)`` where ``need``, else ``base``.

gymnax-style code computes both branches of every data-dependent choice for every environment of
a vmapped batch (``lax.cond`` becomes a select).  Level generation (auto-reset, stage advance) is
needed by ~1% of the lanes per step, so the batched rule of this ``custom_vmap`` packs the needing
lanes into groups of ``cap``, runs ``fn`` only on them and scatters the results into ``base``
(zero iterations when no lane needs it).  Unbatched calls compute ``fn`` and select."""
import jax
import jax.numpy as jnp
from jax import custom_batching

from .state import select


def compacted(fn, cap=32):
    # custom_vmap traces ``fn`` for its own jaxpr and again in the batched rule: jitted, Python traces it once.
    fn = jax.jit(fn)

    @custom_batching.custom_vmap
    def f(need, base, *args):
        return select(need, fn(need, *args), base)

    @f.def_vmap
    def rule(axis_size, in_batched, need, base, *args):
        def bcast(x, b):
            return x if b else jnp.broadcast_to(x, (axis_size,) + jnp.shape(x))

        need = bcast(need, in_batched[0])
        base = jax.tree.map(bcast, base, in_batched[1])
        args = [jax.tree.map(bcast, a, b) for a, b in zip(args, in_batched[2:])]
        c = min(cap, axis_size)
        n = jnp.sum(need, dtype=jnp.int32)
        idx = jnp.nonzero(need, size=axis_size, fill_value=0)[0].astype(jnp.int32)
        idx = jnp.concatenate([idx, jnp.zeros(c, jnp.int32)])

        def cond(carry):
            return carry[0] < n

        def body(carry):
            i, out = carry
            sl = jax.lax.dynamic_slice(idx, (i,), (c,))
            ok = (i + jnp.arange(c)) < n
            sub = [jax.tree.map(lambda x: x[sl], a) for a in args]
            res = jax.vmap(fn)(need[sl] & ok, *sub)
            tgt = jnp.where(ok, sl, axis_size)
            out = jax.tree.map(lambda o, r: o.at[tgt].set(r, mode="drop"), out, res)
            return i + c, out

        _, out = jax.lax.while_loop(cond, body, (jnp.int32(0), base))
        return out, jax.tree.map(lambda _: True, out)

    return f
