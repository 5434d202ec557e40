#!/usr/bin/env python3
"""Start training on a TPU VM inside a detached tmux session.

    python scripts/tpu/train.py hephaestus-v4 --zone us-central2-b -- --env hackmatrix --total-timesteps 1e9
    python scripts/tpu/train.py hephaestus-pod --zone us-central2-b --multi-host -- --env hackmatrix

Everything after `--` goes to scripts/train_purejaxrl.py. On each host it runs

    cd ~/hephaestus && tmux new-session -d -s SESSION bash -c '<training command>'

where the training command exports JAX_COMPILATION_CACHE_DIR, activates ~/hephaestus/.venv, runs
`python3 scripts/train_purejaxrl.py ARGS` and tees its output to ~/hephaestus/logs/SESSION.log.
Single host: worker 0 only. --multi-host (pod slices, v4-16 and up): every worker (--worker=all) runs the
same program with --distributed appended, so each host calls jax.distributed.initialize().
Detach-safe: the session survives the ssh connection; follow it with scripts/tpu/status.py.
"""

from __future__ import annotations

import shlex

import _common as c


def build_parser() -> c.Parser:
    parser = c.make_parser(__doc__.splitlines()[0], epilog=__doc__.split("\n", 1)[1])
    parser.usage = "%(prog)s NAME --zone ZONE [options] -- [training arguments...]"
    c.add_session(parser)
    parser.add_argument(
        "--multi-host",
        action="store_true",
        help="pod slice: run on every worker (--worker=all) and pass --distributed to training",
    )
    c.add_remote_dir(parser)
    return parser


def training_command(remote_dir: str, session: str, train_args: list[str]) -> str:
    """The bash program run inside tmux (one line, few quotes: it is quoted once more for ssh).

    The output goes through `tee` to the log. tee ignores SIGTERM/SIGINT/SIGHUP and python ignores
    SIGHUP, so on a spot preemption (SIGTERM to every process) or a dropped tmux server, training can
    still write its checkpoint and its last lines instead of dying of SIGHUP or a broken pipe.
    Stop a run with Ctrl-C in the session (scripts/tpu/stop.py does that).
    """
    log = c.shell_path(c.log_path(remote_dir, session))
    train = " ".join(["python3", c.TRAIN_SCRIPT, *map(shlex.quote, train_args)])
    stamp = "[hephaestus] $(date -u +%FT%TZ) $(hostname)"
    steps = [
        f"cd {c.shell_path(remote_dir)}",
        "mkdir -p logs",
        c.COMPILE_CACHE_EXPORT,
        "export PYTHONUNBUFFERED=1",
        f". {c.VENV_DIR}/bin/activate",
        'trap "" HUP',
        f'{{ echo "{stamp}: starting {c.TRAIN_SCRIPT}"; {train} 2>&1; }}'
        f' | (trap "" TERM INT HUP; exec tee -a {log})',
        "code=${PIPESTATUS[0]}",  # training's status, not tee's; taken before any $(...) resets it
        f'echo "{stamp}: training exited with code $code" | tee -a {log}',
    ]
    return "; ".join(steps)


def remote_command(remote_dir: str, session: str, train_args: list[str]) -> str:
    """Start the training program in a detached tmux session, unless that session already exists.

    `tmux new-session -d -s S bash -c PROGRAM`: with more than one argument tmux (>= 3.0) runs the
    command directly instead of through another shell, which saves a level of quoting.
    """
    q = shlex.quote
    program = training_command(remote_dir, session, train_args)
    taken = f"[hephaestus] $(hostname): tmux session {session} already exists; stop it first or pick --session"
    return (
        f"set -eu; cd {c.shell_path(remote_dir)} && [ -f {c.VENV_DIR}/bin/activate ]"
        f" || {{ echo \"[hephaestus] $(hostname): no {remote_dir}/{c.VENV_DIR}; run setup.py first\" >&2; exit 1; }}"
        f"; if tmux has-session -t {q('=' + session)} 2>/dev/null; then echo \"{taken}\" >&2; exit 3; fi"
        f"; tmux new-session -d -s {q(session)} bash -c {q(program)}"
        f"; echo \"[hephaestus] $(hostname): started tmux session {session},"
        f" log {c.log_path(remote_dir, session)}\""
    )


def body(argv: list[str]) -> int:
    own, train_args = c.split_passthrough(argv)
    parser = build_parser()
    args, unknown = parser.parse_known_args(own)
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}; put training arguments after `--`")
    if args.multi_host and "--distributed" not in train_args:
        train_args = [*train_args, "--distributed"]
    c.preflight(args)
    worker = "all" if args.multi_host else "0"
    c.run(c.ssh(args, worker, remote_command(args.remote_dir, args.session, train_args)), dry_run=args.dry_run)
    if not args.dry_run:
        follow = c.target(args) + (f" --session {args.session}" if args.session != c.DEFAULT_SESSION else "")
        print(f"follow: python scripts/tpu/status.py {follow}   (add --attach to attach)")
    return 0


if __name__ == "__main__":
    c.main(body)
