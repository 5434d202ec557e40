#!/usr/bin/env python3
"""Stop training gracefully: press Ctrl-C in the tmux session (training saves, then exits).

    python scripts/tpu/stop.py hephaestus-v4 --zone us-central2-b
    python scripts/tpu/stop.py hephaestus-pod --zone us-central2-b --multi-host

runs `tmux send-keys -t SESSION C-c` over ssh on worker 0, or on every worker with --multi-host.
The training pipeline is written so that it survives a closed tmux session (it ignores SIGHUP, so a
spot preemption's SIGTERM can still save a checkpoint); Ctrl-C is the way to end it early.
"""

from __future__ import annotations

import shlex

import _common as c


def build_parser() -> c.Parser:
    parser = c.make_parser(__doc__.splitlines()[0], epilog=__doc__.split("\n", 1)[1])
    c.add_session(parser)
    parser.add_argument("--multi-host", action="store_true", help="stop it on every worker (--worker=all)")
    return parser


def body(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    c.preflight(args)
    session = shlex.quote(f"={args.session}")  # `=`: exactly this name, not a prefix match
    target = shlex.quote(f"={args.session}:")  # that session's active pane
    command = (
        f"if tmux has-session -t {session} 2>/dev/null; then tmux send-keys -t {target} C-c"
        f' && echo "[$(hostname)] sent Ctrl-C to tmux session {args.session}";'
        f' else echo "[$(hostname)] no tmux session {args.session}"; fi'
    )
    c.run(c.ssh(args, "all" if args.multi_host else "0", command), dry_run=args.dry_run)
    return 0


if __name__ == "__main__":
    c.main(body)
