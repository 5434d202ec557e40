"""HackMatrix's step against the step of another git revision (`--reference REV`, e.g. the commit before a
rewrite for speed): both step the same games with the same keys and the same random legal actions, with the
auto-reset, and every output is compared to the bit at every step (observation, state, reward, terminated,
truncated, info). Exits 1 on the first difference, naming the outputs that differ. The reference is the revision's
python/hephaestus/envs/hackmatrix, exported with `git archive` and imported beside the package under another name.

    python benchmarks/hackmatrix_step_differential.py --reference ce78ab6 --games 2048 --steps 400

tests/hackmatrix/test_step_differential.py checks the rewritten parts' properties at a small size.
"""
import argparse
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


REFERENCE = "reference_hackmatrix"  # the package name the reference revision's env is imported under


def reference_env(rev: str):
    """HackMatrix as git revision `rev` of this checkout has it (None if `rev` is not a revision holding it)."""
    import importlib
    import importlib.util
    import subprocess
    import tarfile
    import tempfile

    folder = tempfile.mkdtemp(prefix="hm-reference-")
    archive = subprocess.run(["git", "-C", ROOT, "archive", rev, "python/hephaestus/envs/hackmatrix"],
                             capture_output=True)
    if archive.returncode:
        return None
    tar_path = os.path.join(folder, "env.tar")
    with open(tar_path, "wb") as f:
        f.write(archive.stdout)
    with tarfile.open(tar_path) as tar:
        tar.extractall(folder, filter="data")
    package = os.path.join(folder, REFERENCE)
    os.rename(os.path.join(folder, "python", "hephaestus", "envs", "hackmatrix"), package)
    # The modules alone, under another name (their imports within the env are relative), not the package's lazy names.
    spec = importlib.util.spec_from_file_location(REFERENCE, os.path.join(package, "__init__.py"),
                                                  submodule_search_locations=[package])
    with open(spec.origin, "w") as f:
        f.write("")
    sys.modules[REFERENCE] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sys.modules[REFERENCE])
    return importlib.import_module(f"{REFERENCE}.env").HackMatrix()


def run(old, num_games, num_steps, seed=0, params=None, chunk=50):
    """Step ``num_games`` games ``num_steps`` times with both steps. Returns (steps compared, episodes ended,
    names of the outputs that differed at the first difference, or [] if none did)."""
    from hephaestus.envs.hackmatrix import HackMatrix

    new = HackMatrix()
    params = new.default_params if params is None else params
    old_state_def = jax.tree.structure(jax.eval_shape(lambda k: old.reset_env(k, params)[1], jax.random.PRNGKey(0)))

    def as_old(state):
        return jax.tree.unflatten(old_state_def, jax.tree.leaves(state))

    keys = jax.random.split(jax.random.PRNGKey(seed), num_games + 1)
    obs, state = jax.jit(jax.vmap(lambda k: new.reset_env(k, params)))(keys[1:])
    obs_old, state_old = jax.jit(jax.vmap(lambda k: old.reset_env(k, params)))(keys[1:])
    names = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path((obs, state))]
    for n, a, b in zip(names, jax.tree.leaves((obs, state)), jax.tree.leaves((obs_old, state_old))):
        if not np.array_equal(np.asarray(a), np.asarray(b)):
            return 0, 0, [f"reset {n}"]

    def one(carry, key):
        state, state_old, mask = carry
        k_act, k_step = jax.random.split(key)
        action = jax.random.categorical(k_act, jnp.where(mask, 0.0, -1e9), axis=-1).astype(jnp.int32)
        step_keys = jax.random.split(k_step, num_games)
        out = jax.vmap(lambda k, s, a: new.step_and_reset(k, s, a, params))(step_keys, state, action)
        out_old = jax.vmap(lambda k, s, a: old.step_and_reset(k, s, a, params))(step_keys, as_old(state_old), action)
        same = jnp.stack([jnp.array_equal(a, b) for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(out_old))])
        ended = jnp.sum(out[3] | out[4], dtype=jnp.int32)
        return (out[1], out_old[1], out[0]["action_mask"]), (same, ended)

    @jax.jit
    def steps(carry, key):
        return jax.lax.scan(one, carry, jax.random.split(key, chunk))

    probe = jax.eval_shape(lambda k, s, a: jax.vmap(lambda kk, ss, aa: new.step_and_reset(kk, ss, aa, params))(
        k, s, a), jax.random.split(keys[0], num_games), state, jnp.zeros(num_games, jnp.int32))
    out_names = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(probe)]
    carry, key, done, ended = (state, state_old, obs["action_mask"]), keys[0], 0, 0
    while done < num_steps:
        key, sub = jax.random.split(key)
        carry, (same, n_ended) = steps(carry, sub)
        same = np.asarray(same)
        if not same.all():
            first = int(np.argmin(same.all(axis=1)))
            return done + first, ended, [n for n, ok in zip(out_names, same[first]) if not ok]
        done += chunk
        ended += int(np.asarray(n_ended).sum())
    return done, ended, []


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reference", required=True, metavar="REV",
                    help="the git revision whose step is the reference (e.g. the commit before a rewrite)")
    ap.add_argument("--games", type=int, default=2048, help="games stepped side by side (default 2048)")
    ap.add_argument("--steps", type=int, default=400, help="steps of each (a multiple of 50; default 400)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--curriculum-share", type=float, default=0.0,
                    help="EnvParams.curriculum_share of both (late starts; default 0, the rules' game)")
    args = ap.parse_args()
    if args.games < 1 or args.steps < 50 or args.steps % 50:
        print("error: --games must be >= 1 and --steps a positive multiple of 50", file=sys.stderr)
        return 2
    from hephaestus.envs.hackmatrix.state import EnvParams

    old = reference_env(args.reference)
    if old is None:
        print(f"error: --reference {args.reference}: not a git revision of {ROOT} with HackMatrix's env",
              file=sys.stderr)
        return 2
    params = EnvParams(curriculum_share=args.curriculum_share)
    steps, ended, differ = run(old, args.games, args.steps, args.seed, params)
    if differ:
        print(f"DIFFERENT after {steps} steps of {args.games} games: {', '.join(differ)}")
        return 1
    print(f"identical: {args.games} games x {steps} steps ({args.games * steps:,} steps, {ended:,} episodes ended "
          f"and auto-reset; seed {args.seed}, curriculum_share {args.curriculum_share}; reference {args.reference})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
