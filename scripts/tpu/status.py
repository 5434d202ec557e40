#!/usr/bin/env python3
"""Show a TPU VM's state and its training session, or attach to the session.

    python scripts/tpu/status.py hephaestus-v4 --zone us-central2-b            # state + last 30 log lines
    python scripts/tpu/status.py hephaestus-v4 --zone us-central2-b --attach   # interactive tmux

Runs `gcloud compute tpus tpu-vm describe` for the VM's state (READY, PREEMPTED, ...). When it is READY,
runs over ssh `tmux has-session -t SESSION` and `tail -n LINES ~/hephaestus/logs/SESSION.log` on
--worker (default 0; `all` shows every host of a pod slice), or with --attach
`gcloud compute tpus tpu-vm ssh NAME --worker=W -- -t tmux attach -t SESSION`
(detach again with Ctrl-b d; Ctrl-c there stops training).
"""

from __future__ import annotations

import shlex

import _common as c

DESCRIBE_FORMAT = "value(state,acceleratorType,health)"


def build_parser() -> c.Parser:
    parser = c.make_parser(__doc__.splitlines()[0], epilog=__doc__.split("\n", 1)[1])
    c.add_session(parser)
    parser.add_argument("--attach", action="store_true", help="attach to the tmux session (interactive)")
    parser.add_argument(
        "--lines", type=c.positive_int, default=30, help="log lines to show (default: 30)"
    )
    parser.add_argument(
        "--worker", type=c.worker_id, default="0", help="worker to look at: 0, 1, ... or all (default: 0)"
    )
    c.add_remote_dir(parser)
    return parser


def status_command(remote_dir: str, session: str, lines: int) -> str:
    q = shlex.quote
    log_shown = c.log_path(remote_dir, session)
    log = c.shell_path(log_shown)
    return (
        f"if tmux has-session -t {q('=' + session)} 2>/dev/null;"
        f' then echo "[$(hostname)] tmux session {session}: running";'
        f' else echo "[$(hostname)] tmux session {session}: not running"; fi'
        f"; if [ -f {log} ]; then echo \"--- last {lines} lines of {log_shown} ---\"; tail -n {lines} {log};"
        f' else echo "(no log at {log_shown})"; fi'
    )


def body(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.attach and args.worker == "all":
        parser.error("--attach needs one worker, not --worker=all")
    c.preflight(args)

    out = c.run(
        c.tpu_vm(args, "describe", args.name, flags=[f"--format={DESCRIBE_FORMAT}"]),
        dry_run=args.dry_run,
        capture=True,
    )
    if not args.dry_run:
        fields = (out.strip().splitlines() or [""])[-1].split("\t")
        state, accel, health = (fields + ["", "", ""])[:3]
        print(f"{args.name}: state={state or '?'} type={accel or '?'} health={health or '-'}", flush=True)
        if state != "READY":
            hint = ""
            if state in ("PREEMPTED", "TERMINATED", "STOPPED"):
                hint = (
                    "; its disk is gone: delete.py, create.py, setup.py, push.py --run RUN (your last"
                    " fetch), then train.py ... -- --resume checkpoints/RUN/"
                )
            raise c.ScriptError(f"TPU VM {args.name} is {state or 'in an unknown state'}, not READY{hint}", 1)

    if args.attach:
        c.run(
            c.ssh(args, args.worker, ssh_args=["-t", "tmux", "attach", "-t", args.session]),
            dry_run=args.dry_run,
        )
    else:
        c.run(
            c.ssh(args, args.worker, status_command(args.remote_dir, args.session, args.lines)),
            dry_run=args.dry_run,
        )
    return 0


if __name__ == "__main__":
    c.main(body)
