#!/usr/bin/env python3
"""Copy a run's checkpoints from this machine to a (re-created) TPU VM, to resume training there.

    python scripts/tpu/push.py hephaestus-v4 --zone us-central2-b --run RUN
    python scripts/tpu/train.py hephaestus-v4 --zone us-central2-b -- --resume checkpoints/RUN/ ...

runs `gcloud compute tpus tpu-vm scp --recurse SRC/RUN NAME:~/hephaestus/checkpoints/ --worker=all`
(every host of a pod slice gets a copy). A deleted or preempted TPU VM loses its disk, so this is how a
run fetched with fetch.py continues on a new VM. Run setup.py on the new VM first.
"""

from __future__ import annotations

import os

import _common as c


def build_parser() -> c.Parser:
    parser = c.make_parser(__doc__.splitlines()[0], epilog=__doc__.split("\n", 1)[1])
    parser.add_argument("--run", required=True, type=c.run_name, help="run directory to copy")
    parser.add_argument(
        "--src", default="checkpoints/", help="local directory holding RUN (default: checkpoints/)"
    )
    c.add_remote_dir(parser)
    return parser


def body(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    source = os.path.join(args.src, args.run)
    if not args.dry_run and not os.path.isdir(source):
        raise c.ScriptError(f"no run directory {source} here (fetch it first with fetch.py)", 2)
    c.preflight(args)
    dest = c.remote_join(args.remote_dir, "checkpoints") + "/"
    cmd = c.tpu_vm(args, "scp", "--recurse", c.local_arg(source), f"{args.name}:{dest}", flags=["--worker=all"])
    c.run(cmd, dry_run=args.dry_run)
    return 0


if __name__ == "__main__":
    c.main(body)
