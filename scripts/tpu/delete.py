#!/usr/bin/env python3
"""Delete a TPU VM (all its hosts, disks and anything not fetched).

    python scripts/tpu/delete.py hephaestus-v4 --zone us-central2-b          # asks first
    python scripts/tpu/delete.py hephaestus-v4 --zone us-central2-b --yes

runs `gcloud compute tpus tpu-vm delete NAME --zone=Z --quiet`. Without --yes it asks for confirmation on
the terminal, and refuses when there is no terminal to ask on. Fetch checkpoints first (fetch.py).
"""

from __future__ import annotations

import sys

import _common as c


def build_parser() -> c.Parser:
    parser = c.make_parser(__doc__.splitlines()[0], epilog=__doc__.split("\n", 1)[1])
    parser.add_argument("--yes", "-y", action="store_true", help="delete without asking")
    return parser


def confirmed(args) -> bool:
    if args.yes or args.dry_run:
        return True
    if not (sys.stdin and sys.stdin.isatty()):
        raise c.ScriptError(f"refusing to delete {args.name} without confirmation: no terminal to ask on; pass --yes", 2)
    where = f"zone {args.zone}" + (f", project {args.project}" if args.project else "")
    try:
        answer = input(f"Delete TPU VM {args.name} ({where}) and everything on it? [y/N] ")
    except EOFError:
        answer = ""
    return answer.strip().lower() in ("y", "yes")


def body(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    c.preflight(args)
    if not confirmed(args):
        print("not deleted", file=sys.stderr)
        return 1
    c.run(c.tpu_vm(args, "delete", args.name, flags=["--quiet"]), dry_run=args.dry_run)
    return 0


if __name__ == "__main__":
    c.main(body)
