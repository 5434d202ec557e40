"""XLA flags every entry point sets before jax starts its backend. No jax import here, on purpose.

On the CPU backend, jaxlib 0.10's LAPACK kernels (QR, Cholesky, eigh, ... as custom calls) split a *batched*
call over XLA's intra-op thread pool and block a pool thread until the pieces finish. When as many such calls run
at once as the pool has threads (its size is the CPU count: 2 on a small machine), every pool thread waits for
pieces that no thread is left to run: a deadlock at ~0% CPU, forever. Batched QRs are what `jax.vmap` makes of
flax's orthogonal initialiser, so the exposed programs are those that vmap an initialiser: DTC's ensemble
initialisation (in the fresh runner state's program), and any vmap over seeds of a network init. XLA's
concurrency-optimised scheduler (the default) orders a program so independent calls are ready together; turning
it off gives the memory-minimising order, in which these calls run one after another. Details and measurements:
specs/pipeline.md, "Start-up: the XLA CPU flag and the watchdog".
"""

from __future__ import annotations

import importlib.util
import os

FLAG = "--xla_cpu_enable_concurrency_optimized_scheduler"
SETTING = f"{FLAG}=false"
# Accelerator plugins: where one is installed, jax picks it over the CPU unless JAX_PLATFORMS says cpu.
ACCELERATOR_PLUGINS = ("libtpu", "jax_cuda12_plugin", "jax_cuda13_plugin", "jax_rocm60_plugin", "jax_rocm7_plugin")


def backend_will_be_cpu(environ=os.environ) -> bool:
    """True when jax's default backend will be the CPU: JAX_PLATFORMS (jax's own variable; also the
    lowercase jax_platforms) names cpu first, or names nothing and no accelerator plugin is installed."""
    platforms = (environ.get("JAX_PLATFORMS") or environ.get("jax_platforms") or "").strip().lower()
    if platforms:
        return platforms.split(",")[0].strip() == "cpu"
    return not any(importlib.util.find_spec(name) is not None for name in ACCELERATOR_PLUGINS)


def configure(environ=os.environ) -> bool:
    """Add `SETTING` to XLA_FLAGS when the backend will be the CPU and the user has not set the flag either way
    (other flags in XLA_FLAGS are kept). Returns whether it changed XLA_FLAGS. XLA reads XLA_FLAGS once, when
    jax starts its first backend; call this before anything touches a device."""
    flags = environ.get("XLA_FLAGS", "")
    if FLAG in flags or not backend_will_be_cpu(environ):
        return False
    environ["XLA_FLAGS"] = f"{flags} {SETTING}".strip()
    return True

