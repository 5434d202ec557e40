#!/usr/bin/env python3
"""Create a Cloud TPU VM (single host like v4-8, or a multi-host pod slice like v4-32).

    python scripts/tpu/create.py hephaestus-v4 --zone us-central2-b --type v4-8 --spot

runs

    gcloud compute tpus tpu-vm create hephaestus-v4 --zone=us-central2-b --accelerator-type=v4-8 \
        --version=tpu-ubuntu2204-base --spot
"""

from __future__ import annotations


import _common as c


def build_parser() -> c.Parser:
    parser = c.make_parser(__doc__.splitlines()[0], epilog=__doc__.split("\n", 1)[1])
    parser.add_argument(
        "--type",
        required=True,
        type=c.accelerator_type,
        help="accelerator type, e.g. v4-8 (one host) or v4-16..v4-64 (pod slice, several hosts)",
    )
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument(
        "--spot",
        dest="spot",
        action="store_true",
        default=True,
        help="spot VM: cheaper or TRC spot quota, can be preempted at any time (default)",
    )
    kind.add_argument(
        "--on-demand", dest="spot", action="store_false", help="on-demand VM (needs on-demand quota)"
    )
    parser.add_argument(
        "--version",
        help=f"TPU software version (default: {c.DEFAULT_VERSION} for v4 and older, "
        "the matching v2-alpha-tpuv5/v6 image for newer types)",
    )
    return parser


def body(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    c.preflight(args)
    version = args.version or c.runtime_version_for(args.type)
    flags = [f"--accelerator-type={args.type}", f"--version={version}"]
    if args.spot:
        flags.append("--spot")
    c.run(c.tpu_vm(args, "create", args.name, flags=flags), dry_run=args.dry_run)
    if not args.dry_run:
        print(f"next: python scripts/tpu/setup.py {c.target(args)}")
    return 0


if __name__ == "__main__":
    c.main(body)
