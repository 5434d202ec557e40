"""Shared code for the Cloud TPU operations scripts in ``scripts/tpu/``.

Standard library only, so the scripts run on a laptop that has ``gcloud`` but no jax.

Every script builds ``gcloud compute tpus tpu-vm ...`` argument lists with the helpers here and hands
them to :func:`run`, which prints each one as a shell-quoted ``+ ...`` line before running it (or only
prints it with ``--dry-run``). Errors are one line on stderr and a non-zero exit status, never a
traceback: bad input exits 2, a missing ``gcloud`` exits 127, and a failing ``gcloud`` exits with its
own status.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
from typing import Callable, NoReturn, Sequence

# Where the project lives on every TPU VM host. `~` is expanded by the remote shell.
REMOTE_DIR = "~/hephaestus"
# The virtual environment setup.py creates inside REMOTE_DIR (ignored by the project's .gitignore).
VENV_DIR = ".venv"
# jax 0.10 (pinned in requirements.txt) requires Python >= 3.11; tpu-ubuntu2204-base ships 3.10,
# so setup.py builds the venv from python3.11 (installed with apt when missing) by default.
DEFAULT_PYTHON = "python3.11"
MIN_PYTHON = (3, 11)
DEFAULT_SESSION = "train"
DEFAULT_VERSION = "tpu-ubuntu2204-base"
TRAIN_SCRIPT = "scripts/train_purejaxrl.py"
# Exported for training; setup.py also appends it to ~/.bashrc for interactive shells.
COMPILE_CACHE_EXPORT = 'export JAX_COMPILATION_CACHE_DIR="$HOME/.jax_cache"'
GCLOUD_INSTALL_URL = "https://cloud.google.com/sdk/docs/install"

# TPU runtime ("software") versions for accelerator families other than v2-v4, from
# https://cloud.google.com/tpu/docs/runtimes ; v4 and older use DEFAULT_VERSION.
_RUNTIME_BY_FAMILY = {
    "v5litepod": "v2-alpha-tpuv5-lite",
    "v5e": "v2-alpha-tpuv5-lite",
    "v5p": "v2-alpha-tpuv5",
    "v6e": "v2-alpha-tpuv6e",
}


class ScriptError(Exception):
    """A failure reported as one line on stderr; ``code`` becomes the exit status."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


# --------------------------------------------------------------------------------------------------
# argument parsing


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is a single line (no usage block) and exits 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _validator(pattern: str, what: str, example: str) -> Callable[[str], str]:
    regex = re.compile(pattern)

    def check(value: str) -> str:
        if not regex.fullmatch(value):
            raise argparse.ArgumentTypeError(f"invalid {what} {value!r} (expected e.g. {example})")
        return value

    return check


# Cloud resource names: lower-case letter first, then lower-case letters, digits, hyphens.
tpu_name = _validator(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", "TPU name", "hephaestus-v4")
zone_name = _validator(r"[a-z]+-[a-z]+[0-9]+-[a-z]", "zone", "us-central2-b")
project_id = _validator(r"[a-z][-a-z0-9.:]{4,61}[a-z0-9]", "project id", "my-project-123")
accelerator_type = _validator(r"v[0-9]+[a-z]*-[0-9]+", "accelerator type", "v4-8, v4-32, v5litepod-8")
session_name = _validator(r"[A-Za-z0-9_-]{1,64}", "tmux session name", "train")
# Run directory names (train_purejaxrl.py --run-name; default <env>_s<seed>): no `/`, no `:` (scp's host mark).
run_name = _validator(r"(?!\.{1,2}$)[A-Za-z0-9._+@-]{1,200}", "run name", "hackmatrix_s0")
branch_name = _validator(r"[A-Za-z0-9._][A-Za-z0-9._/+-]{0,199}", "branch", "main")
worker_id = _validator(r"all|[0-9]{1,4}", "worker", "0, 3 or all")
remote_dir_path = _validator(r"~(/[A-Za-z0-9._/-]*)?|/[A-Za-z0-9._/-]*", "remote directory", "~/hephaestus")
python_command = _validator(r"python3(\.[0-9]{1,2})?|/[A-Za-z0-9._/-]+", "python", "python3.11")


def positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}")
    return number


def make_parser(description: str, epilog: str | None = None) -> Parser:
    """A parser with the arguments every script takes: NAME, --zone, --project, --dry-run."""
    parser = Parser(
        prog=os.path.basename(sys.argv[0]) or "tpu",
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("name", metavar="NAME", type=tpu_name, help="TPU VM name")
    parser.add_argument("--zone", required=True, type=zone_name, help="zone, e.g. us-central2-b")
    parser.add_argument(
        "--project", type=project_id, help="Google Cloud project (default: gcloud's configured project)"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the gcloud commands without running them"
    )
    return parser


def add_remote_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--remote-dir",
        default=REMOTE_DIR,
        type=remote_dir_path,
        help=f"project directory on the TPU VM (default: {REMOTE_DIR})",
    )


def add_session(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--session",
        default=DEFAULT_SESSION,
        type=session_name,
        help=f"tmux session name; the log is REMOTE_DIR/logs/SESSION.log (default: {DEFAULT_SESSION})",
    )


def target(args: argparse.Namespace) -> str:
    """``NAME --zone Z [--project P]``, for printing follow-up commands."""
    words = [args.name, "--zone", args.zone] + (["--project", args.project] if args.project else [])
    return shlex.join(words)


def split_passthrough(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split ``argv`` at the first ``--``: (script arguments, arguments passed through)."""
    argv = list(argv)
    if "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1 :]
    return argv, []


# --------------------------------------------------------------------------------------------------
# remote paths and shell snippets


def shell_path(path: str) -> str:
    """Quote a remote path for a remote shell, keeping a leading ``~`` expandable (as ``"$HOME"``)."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        rest = path[2:].rstrip("/")
        return '"$HOME"/' + shlex.quote(rest) if rest else '"$HOME"'
    return shlex.quote(path.rstrip("/") or "/")


def remote_join(base: str, *parts: str) -> str:
    """Join path components of a remote path without touching a leading ``~``."""
    return "/".join([base.rstrip("/")] + [p.strip("/") for p in parts])


def local_arg(path: str) -> str:
    """A local path as a command argument that cannot be mistaken for an option."""
    return "./" + path if path.startswith("-") else path


def log_path(remote_dir: str, session: str) -> str:
    return remote_join(remote_dir, "logs", f"{session}.log")


# --------------------------------------------------------------------------------------------------
# gcloud command lines


def runtime_version_for(accel_type: str) -> str:
    family = accel_type.split("-", 1)[0]
    return _RUNTIME_BY_FAMILY.get(family, DEFAULT_VERSION)


def tpu_vm(args: argparse.Namespace, verb: str, *words: str, flags: Sequence[str] = ()) -> list[str]:
    """``gcloud compute tpus tpu-vm VERB WORDS... --zone=Z FLAGS... [--project=P]``."""
    cmd = ["gcloud", "compute", "tpus", "tpu-vm", verb, *words, f"--zone={args.zone}", *flags]
    if args.project:
        cmd.append(f"--project={args.project}")
    return cmd


def ssh(args: argparse.Namespace, worker: str, command: str | None = None,
        ssh_args: Sequence[str] = ()) -> list[str]:
    """``gcloud ... ssh NAME --zone=Z --worker=W [--command=C] [--project=P] [-- SSH_ARGS...]``."""
    flags = [f"--worker={worker}"]
    if command is not None:
        if "\n" in command:  # keeps every printed `+ ...` line a single line
            raise ValueError("remote commands must be one line")
        flags.append(f"--command={command}")
    cmd = tpu_vm(args, "ssh", args.name, flags=flags)
    if ssh_args:
        cmd += ["--", *ssh_args]
    return cmd


# --------------------------------------------------------------------------------------------------
# running


def describe(cmd: Sequence[str]) -> str:
    """The command for an error message: shell-quoted, with a long ``--command=`` elided."""
    shown = [
        "--command=..." if arg.startswith("--command=") and len(arg) > 60 else arg for arg in cmd
    ]
    return shlex.join(shown)


def find_gcloud() -> str:
    path = shutil.which("gcloud")
    if path is None:
        raise ScriptError(f"gcloud not found on PATH; install the Google Cloud CLI ({GCLOUD_INSTALL_URL})", 127)
    return path


def run(cmd: Sequence[str], *, dry_run: bool, capture: bool = False) -> str:
    """Print ``cmd`` as ``+ <shell-quoted>``, then run it unless ``dry_run``.

    Returns the command's stdout when ``capture`` is set (stderr always goes to the terminal), else "".
    A non-zero exit raises :class:`ScriptError` with the command's exit status.
    """
    cmd = list(cmd)
    print("+ " + shlex.join(cmd), flush=True)
    if dry_run:
        return ""
    executable = find_gcloud() if cmd[0] == "gcloud" else cmd[0]
    try:
        proc = subprocess.run(
            [executable, *cmd[1:]], stdout=subprocess.PIPE if capture else None, text=True
        )
    except OSError as exc:
        raise ScriptError(f"could not run {cmd[0]}: {exc.strerror or exc}", 127) from None
    if proc.returncode != 0:
        code = proc.returncode if proc.returncode > 0 else 128 - proc.returncode
        raise ScriptError(f"command failed with exit code {code}: {describe(cmd)}", code)
    return (proc.stdout or "") if capture else ""


def main(body: Callable[[list[str]], int | None], argv: Sequence[str] | None = None) -> NoReturn:
    """Run a script's ``body(argv)`` and exit, turning every expected failure into one stderr line."""
    prog = os.path.basename(sys.argv[0]) or "tpu"
    try:
        code = body(list(sys.argv[1:] if argv is None else argv)) or 0
    except ScriptError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        code = exc.code
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        code = 130
    sys.stdout.flush()
    sys.exit(code)


def preflight(args: argparse.Namespace) -> None:
    """Fail early (before any prompt or partial work) when gcloud is missing, unless dry-running."""
    if not args.dry_run:
        find_gcloud()
