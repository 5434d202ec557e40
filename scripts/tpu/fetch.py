#!/usr/bin/env python3
"""Copy a training run's checkpoints from a TPU VM to this machine.

    python scripts/tpu/fetch.py hephaestus-v4 --zone us-central2-b --run RUN        # -> checkpoints/RUN/
    python scripts/tpu/fetch.py hephaestus-v4 --zone us-central2-b --run RUN --params-only
    python scripts/tpu/fetch.py hephaestus-v4 --zone us-central2-b                  # newest run

runs `gcloud compute tpus tpu-vm scp --recurse NAME:~/hephaestus/checkpoints/RUN DEST --worker=0`
(with --params-only, just RUN/final_params.npz into DEST/RUN/). Worker 0 is the host that writes
checkpoints on a pod slice. Without --run, the newest directory under ~/hephaestus/checkpoints is fetched.
Then: python scripts/watch_agent.py checkpoints/RUN/final_params.npz
"""

from __future__ import annotations

import os
import shlex

import _common as c

PARAMS_FILE = "final_params.npz"
NEWEST_PLACEHOLDER = "<newest-run>"


def build_parser() -> c.Parser:
    parser = c.make_parser(__doc__.splitlines()[0], epilog=__doc__.split("\n", 1)[1])
    parser.add_argument(
        "--run", type=c.run_name, help="run directory under checkpoints/ (default: the newest one)"
    )
    parser.add_argument(
        "--dest", default="checkpoints/", help="local directory to copy the run into (default: checkpoints/)"
    )
    parser.add_argument(
        "--params-only", action="store_true", help=f"fetch only RUN/{PARAMS_FILE} (small; enough to watch)"
    )
    parser.add_argument(
        "--worker", type=c.worker_id, default="0", help="worker to copy from (default: 0)"
    )
    c.add_remote_dir(parser)
    return parser


def newest_run(args) -> str:
    """Ask worker 0 for the most recently modified run directory."""
    remote = c.shell_path(c.remote_join(args.remote_dir, "checkpoints"))
    listing = f"cd {remote} 2>/dev/null && ls -1td -- */ 2>/dev/null | head -n 1; true"
    out = c.run(c.ssh(args, args.worker, listing), dry_run=args.dry_run, capture=True)
    if args.dry_run:
        return NEWEST_PLACEHOLDER
    lines = [line.strip().rstrip("/") for line in out.splitlines() if line.strip()]
    if not lines:
        raise c.ScriptError(f"no runs in {c.remote_join(args.remote_dir, 'checkpoints')} on {args.name}")
    try:
        run = c.run_name(lines[-1])
    except Exception:
        raise c.ScriptError(f"unexpected run directory name from {args.name}: {lines[-1]!r}") from None
    print(f"newest run on {args.name}: {run}", flush=True)
    return run


def body(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.worker == "all":
        parser.error("--worker must be a single worker, not all")
    c.preflight(args)

    run = args.run or newest_run(args)
    source = c.remote_join(args.remote_dir, "checkpoints", run)
    dest = args.dest
    if args.params_only:
        source = c.remote_join(source, PARAMS_FILE)
        dest = os.path.join(args.dest, run)
    dest = c.local_arg(dest if dest.endswith(("/", os.sep)) else dest + "/")
    if not args.dry_run:
        try:
            os.makedirs(dest, exist_ok=True)
        except OSError as exc:
            raise c.ScriptError(f"cannot create {dest}: {exc.strerror or exc}") from None

    flags = [f"--worker={args.worker}"]
    cmd = c.tpu_vm(args, "scp", "--recurse", f"{args.name}:{source}", dest, flags=flags)
    if args.params_only:
        cmd.remove("--recurse")
    c.run(cmd, dry_run=args.dry_run)
    if not args.dry_run:
        params = os.path.join(args.dest, run, PARAMS_FILE)
        print(f"next: python scripts/watch_agent.py {shlex.quote(params)}")
    return 0


if __name__ == "__main__":
    c.main(body)
