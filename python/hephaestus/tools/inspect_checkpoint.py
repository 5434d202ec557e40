"""Show what a Hephaestus checkpoint holds, and check that it loads.

    python scripts/inspect_checkpoint.py checkpoints/<run>/          # its latest checkpoint
    python scripts/inspect_checkpoint.py checkpoints/<run>/120/      # one step
    python scripts/inspect_checkpoint.py checkpoints/<run>/final_params.npz

Prints the update and env-step counters, the package version, the environment and network shape, the
config, every array's shape and dtype, and the last metrics record. A bad path or a checkpoint that does not
load is one line on stderr and exit code 2 (bad input, as every script).
"""

import os
import sys


def fail(message: str, code: int = 2):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(code)


def _shapes(tree, prefix=""):
    import numpy as np

    if isinstance(tree, dict):
        for key in sorted(tree, key=str):
            yield from _shapes(tree[key], f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(tree, (list, tuple)):
        for i, item in enumerate(tree):
            yield from _shapes(item, f"{prefix}.{i}")
    elif tree is not None:
        arr = np.asarray(tree)
        yield prefix, arr.shape, arr.dtype, arr


def main(argv=None) -> int:
    from hephaestus.run.cli import OneLineParser

    p = OneLineParser(prog="inspect_checkpoint.py", description=__doc__.split("\n\n")[0])
    p.add_argument("path", help="a run directory, a step directory, or a .npz parameter export")
    p.add_argument("--config", action="store_true", help="print the whole config (default: the main fields)")
    p.add_argument("--export-pretrained", metavar="DIR",
                   help="write a shipped-agent folder (e.g. checkpoints/pretrained/NAME): one agent's parameters "
                        "and the metadata that rebuilds it, no optimizer state, and agent.json with the run's final "
                        "evaluation; watch_agent.py and evaluate.py take DIR")
    p.add_argument("--seed-index", type=int, default=None, metavar="I",
                   help="with --export-pretrained: which agent of a --num-seeds run (default 0)")
    args = p.parse_args(argv)

    if args.export_pretrained:
        from hephaestus.core.export import ExportError
        from hephaestus.tools.saved_agent import export_pretrained

        try:
            out = export_pretrained(args.path, args.export_pretrained, args.seed_index)
        except ExportError as err:
            fail(str(err), code=2)
        except OSError as err:
            fail(f"cannot write {args.export_pretrained}: {err.strerror or err}")
        size = sum(os.path.getsize(os.path.join(args.export_pretrained, n)) for n in os.listdir(args.export_pretrained))
        print(f"exported {out} ({size / 1024:.0f} KiB in {args.export_pretrained}); watch it with "
              f"`python scripts/watch_agent.py {args.export_pretrained}`")
        return 0

    import numpy as np

    if args.path.endswith(".npz"):
        from hephaestus.core.export import ExportError, load_params_npz

        try:
            params, meta = load_params_npz(args.path)
        except ExportError as err:
            fail(str(err))
        print(f"{args.path}: parameter export, update {meta['update']}, {meta['env_steps']:,} env steps, "
              f"version {meta['version']}")
        print(f"env {meta['env']}; network {meta['network']}")
        for name, shape, dtype, _ in _shapes(params):
            print(f"  {name:<48} {str(shape):<14} {dtype}")
        print("loads: ok")
        return 0

    from hephaestus.run.checkpoint import CheckpointError, read_state

    try:
        ckpt, raw = read_state(args.path)
    except CheckpointError as err:
        fail(str(err))
    meta = ckpt.meta
    config = meta.get("config", {})
    print(f"{ckpt.path}: update {meta.get('update')}, {meta.get('env_steps', 0):,} env steps, "
          f"version {meta.get('version')}; checkpoints in this run: {', '.join(map(str, ckpt.all_steps))}")
    print(f"env {meta.get('env')}; network {meta.get('network')}")
    keys = sorted(config) if args.config else ("env", "num_envs", "num_steps", "total_timesteps", "lr", "seed",
                                               "num_minibatches", "update_epochs", "hidden_dim", "num_layers",
                                               "extra_stages", "run_name")
    print("config: " + ", ".join(f"{k}={config.get(k)!r}" for k in keys if k in config))
    total, finite = 0, True
    print("state:")
    for name, shape, dtype, arr in _shapes(raw):
        total += arr.size
        if np.issubdtype(arr.dtype, np.floating):
            finite = finite and bool(np.all(np.isfinite(arr)))
        print(f"  {name:<64} {str(shape):<16} {dtype}")
    last = meta.get("last_metrics") or {}
    if last:
        print("last metrics: " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                           for k, v in sorted(last.items())))
    if not finite:
        fail(f"{ckpt.path}: checkpoint holds non-finite values")
    print(f"loads: ok ({total:,} values)")
    return 0

