"""Run rare work only for the lanes of a vmapped batch that need it.

gymnax-style code computes both branches of every data-dependent choice for every environment of a vmapped
batch (``lax.cond`` becomes a select). Level generation (auto-reset, stage advance) and the programs are
needed by a few percent of the lanes per step, so the batched rules of these ``custom_vmap``s pack the
needing lanes into groups of ``cap``, run the function only on them (a ``while_loop``, zero iterations when
no lane needs it) and scatter the results into the batch. Unbatched calls compute and select.

* ``compacted(fn)``: ``f(need, base, *args)`` = ``fn(need, *args)`` where ``need``, else ``base``.
* ``compacted_pair(fn, keep)``: two kinds of work by one function, so its code is compiled once:
  ``f(need_a, need_b, base, *args) -> (out, kept)`` with ``a = fn(True, False, base, *args)`` where
  ``need_a``, ``b = fn(True, True, base, *args)`` where ``need_b`` (``b`` wins where both), ``base``
  elsewhere; ``kept`` is ``keep(a)`` where ``need_a``, else ``keep(base)``. ``fn`` reads its lane of
  ``base`` rather than a separate argument, so the batched rule can update ``base`` in place instead of
  copying it. The work items are the ``need_a`` lanes, then the ``need_b`` lanes; a lane that needs both is
  two items. (The HackMatrix step: the next stage's level and a fresh game, whose ``kept`` part is the
  observation the episode ended on.)
"""
import jax
import jax.numpy as jnp
from jax import custom_batching

from .state import select


def _broadcast(axis_size, in_batched, *trees):
    """Give every unbatched input a leading batch axis."""
    def bcast(x, batched):
        return x if batched else jnp.broadcast_to(x, (axis_size,) + jnp.shape(x))

    return [jax.tree.map(bcast, t, b) for t, b in zip(trees, in_batched)]


def _lanes(need, axis_size, pad):
    """Indices of the lanes with ``need``, first to last, then zeros (``axis_size + pad`` of them)."""
    idx = jnp.nonzero(need, size=axis_size, fill_value=0)[0].astype(jnp.int32)
    return jnp.concatenate([idx, jnp.zeros(pad, jnp.int32)])


def _in_groups(num_items, cap, body, carry):
    """``carry = body(first_item, carry)`` for first_item = 0, cap, 2 cap, ... below ``num_items``."""
    def step(c):
        i, carry = c
        return i + cap, body(i, carry)

    return jax.lax.while_loop(lambda c: c[0] < num_items, step, (jnp.int32(0), carry))[1]


def _gather(trees, lanes):
    return [jax.tree.map(lambda x: x[lanes], t) for t in trees]


def _scatter(out, lanes, res):
    """``out`` with rows ``lanes`` set to ``res``; a lane index past the end drops its row."""
    return jax.tree.map(lambda o, r: o.at[lanes].set(r, mode="drop"), out, res)


def compacted(fn, cap=32):
    # custom_vmap traces ``fn`` for its own jaxpr and again in the batched rule: jitted, Python traces it once.
    fn = jax.jit(fn)

    @custom_batching.custom_vmap
    def f(need, base, *args):
        return select(need, fn(need, *args), base)

    @f.def_vmap
    def rule(axis_size, in_batched, need, base, *args):
        need, base, *args = _broadcast(axis_size, in_batched, need, base, *args)
        c = min(cap, axis_size)
        n = jnp.sum(need, dtype=jnp.int32)
        idx = _lanes(need, axis_size, c)

        def body(i, out):
            lanes = jax.lax.dynamic_slice(idx, (i,), (c,))
            ok = (i + jnp.arange(c)) < n
            res = jax.vmap(fn)(need[lanes] & ok, *_gather(args, lanes))
            return _scatter(out, jnp.where(ok, lanes, axis_size), res)

        out = _in_groups(n, c, body, base)
        return out, jax.tree.map(lambda _: True, out)

    return f


def compacted_pair(fn, keep, cap=32):
    fn = jax.jit(fn)

    @custom_batching.custom_vmap
    def f(need_a, need_b, base, *args):
        a = fn(need_a, jnp.bool_(False), base, *args)
        b = fn(need_b, jnp.bool_(True), base, *args)
        out_a = select(need_a, a, base)
        return select(need_b, b, out_a), select(need_a, keep(a), keep(base))

    @f.def_vmap
    def rule(axis_size, in_batched, need_a, need_b, base, *args):
        need_a, need_b, base, *args = _broadcast(axis_size, in_batched, need_a, need_b, base, *args)
        c = min(cap, axis_size)
        n_a = jnp.sum(need_a, dtype=jnp.int32)
        n = n_a + jnp.sum(need_b, dtype=jnp.int32)
        idx_a, idx_b = _lanes(need_a, axis_size, c), _lanes(need_b, axis_size, c)

        def body(i, carry):
            out, kept = carry
            item = i + jnp.arange(c)
            ok = item < n
            is_b = item >= n_a
            last = axis_size + c - 1
            lanes = jnp.where(is_b, idx_b[jnp.clip(item - n_a, 0, last)], idx_a[jnp.clip(item, 0, last)])
            # An a-item reads its lane before anything wrote it (a-items come first, one per lane, and an a-item
            # whose lane also has a b-item does not write `out`); what a b-item reads is not used.
            res = jax.vmap(fn)(ok, is_b, *_gather([out, *args], lanes))
            # An a-item whose lane is also a b-item only writes `kept`: its b-item writes `out`, so no group
            # scatters one lane twice (the order of duplicate writes in a scatter is unspecified).
            writes_out = ok & (is_b | ~need_b[lanes])
            out = _scatter(out, jnp.where(writes_out, lanes, axis_size), res)
            kept = _scatter(kept, jnp.where(ok & ~is_b, lanes, axis_size), keep(res))
            return out, kept

        out, kept = _in_groups(n, c, body, (base, keep(base)))
        return (out, kept), jax.tree.map(lambda _: True, (out, kept))

    return f
