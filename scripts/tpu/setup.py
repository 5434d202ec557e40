#!/usr/bin/env python3
"""Install the project on every host of a TPU VM (clone or update, venv, jax[tpu]).

    python scripts/tpu/setup.py hephaestus-v4 --zone us-central2-b --repo https://github.com/you/hephaestus

runs one `gcloud compute tpus tpu-vm ssh NAME --worker=all --command=...` that, on each host:
  - installs tmux and the Python interpreter (--python, default python3.11) with apt if missing;
  - clones --repo into REMOTE_DIR (default ~/hephaestus) at --branch, or fast-forwards an existing clone;
  - creates REMOTE_DIR/.venv and runs, inside it, `pip install -r requirements.txt`,
    `pip install -U "jax[tpu]==<the jax version pinned in requirements.txt>"` (plain
    `pip install -U "jax[tpu]"` when nothing is pinned; everything comes from PyPI) and `pip install -e .`;
  - creates ~/.jax_cache and appends `export JAX_COMPILATION_CACHE_DIR="$HOME/.jax_cache"` to ~/.bashrc once.
--worker=all matters for pod slices (v4-16 and up): every host runs the same training program, so every
host needs the same code and packages. Re-run it after pushing new commits to update all hosts.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import _common as c

REPO_ROOT = Path(__file__).resolve().parents[2]


def build_parser() -> c.Parser:
    parser = c.make_parser(__doc__.splitlines()[0], epilog=__doc__.split("\n", 1)[1])
    parser.add_argument(
        "--repo",
        help="git URL the TPU VM can clone without a prompt, e.g. a public https URL "
        "(default: this checkout's `origin` remote)",
    )
    parser.add_argument("--branch", default="main", type=c.branch_name, help="branch to check out (default: main)")
    parser.add_argument(
        "--python",
        default=c.DEFAULT_PYTHON,
        type=c.python_command,
        help=f"interpreter for the venv, Python >= {'.'.join(map(str, c.MIN_PYTHON))}; "
        f"python3.N is installed with apt when missing (default: {c.DEFAULT_PYTHON})",
    )
    c.add_remote_dir(parser)
    return parser


def origin_url() -> str | None:
    """This checkout's `origin` URL, or None (read-only; git missing is fine)."""
    try:
        proc = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "config", "--get", "remote.origin.url"],
            capture_output=True,
            text=True,
        )
    except OSError:
        return None
    url = proc.stdout.strip()
    return url if proc.returncode == 0 and url else None


def remote_script(repo: str, branch: str, remote_dir: str, python: str) -> str:
    """The one-line bash program setup runs on every host."""
    q = shlex.quote
    d = c.shell_path(remote_dir)
    py = q(python)
    # non-interactive apt that waits for a first-boot unattended-upgrades run instead of failing
    apt = "sudo DEBIAN_FRONTEND=noninteractive NEEDRESTART_MODE=a apt-get -o DPkg::Lock::Timeout=300 -qq"
    venv_py = f"{c.VENV_DIR}/bin/python"
    min_py = ", ".join(map(str, c.MIN_PYTHON))
    min_py_dotted = ".".join(map(str, c.MIN_PYTHON))
    # The jax version pinned in requirements.txt, as in `jax==0.10.2` or `jax[cpu]==0.10.2`.
    jax_pin = r"sed -n 's/^jax\(\[[^]]*\]\)\{0,1\}==\([0-9][0-9A-Za-z.]*\).*/\2/p' requirements.txt | head -n 1"
    steps = [
        "set -euo pipefail",
        "export GIT_TERMINAL_PROMPT=0",
        'echo "[hephaestus] $(hostname): setting up"',
        f"if ! command -v tmux >/dev/null 2>&1; then {apt} update && {apt} install -y tmux; fi",
    ]
    if not python.startswith("/"):
        steps.append(
            f"if ! command -v {py} >/dev/null 2>&1; then {apt} update && {apt} install -y {py} {py}-venv; fi"
        )
    steps += [
        # code: clone, or fast-forward an existing clone
        f"if [ -d {d}/.git ]; then git -C {d} fetch -q origin {q(branch)}"
        f" && git -C {d} checkout -q {q(branch)} && git -C {d} merge -q --ff-only FETCH_HEAD;"
        f" elif [ -e {d} ]; then echo {q(f'[hephaestus] {remote_dir} exists but is not a git clone')} >&2; exit 1;"
        f" else git clone -q --branch {q(branch)} -- {q(repo)} {d}; fi",
        f"cd {d}",
        'echo "[hephaestus] $(hostname): code at $(git rev-parse --short HEAD)"',
        # venv (Debian/Ubuntu need the pythonX.Y-venv package for `python -m venv`)
        f"if [ ! -x {venv_py} ]; then rm -rf {c.VENV_DIR}; {py} -m venv {c.VENV_DIR}"
        + (f" || {{ {apt} install -y {py}-venv && rm -rf {c.VENV_DIR} && {py} -m venv {c.VENV_DIR}; }}"
           if not python.startswith("/") else "")
        + "; fi",
        f"{venv_py} -c 'import sys; sys.exit(sys.version_info < ({min_py}))'"
        f" || {{ echo \"[hephaestus] $({venv_py} -V) in {remote_dir}/{c.VENV_DIR} is older than"
        f" {min_py_dotted}: delete that directory and re-run with --python python{min_py_dotted}\" >&2; exit 1; }}",
        f"PIP='{venv_py} -m pip --disable-pip-version-check --progress-bar off'",
        "$PIP install -q -U pip",
        "$PIP install -r requirements.txt",
        f"JAXV=$({jax_pin})",
        'if [ -n "$JAXV" ]; then $PIP install -U "jax[tpu]==$JAXV"; else $PIP install -U "jax[tpu]"; fi',
        "$PIP install -e .",
        # compile cache for interactive shells (train.py exports it for training itself)
        'mkdir -p "$HOME/.jax_cache" logs checkpoints',
        f"LINE={q(c.COMPILE_CACHE_EXPORT)}",
        'touch ~/.bashrc; grep -qxF "$LINE" ~/.bashrc || echo "$LINE" >> ~/.bashrc',
        f"{venv_py} -c 'import jax, socket; print(\"[hephaestus]\", socket.gethostname() + \": ready, jax\", jax.__version__)'",
    ]
    return "; ".join(steps)


def body(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    repo = args.repo or origin_url()
    if not repo:
        raise c.ScriptError("no --repo given and this checkout has no `origin` remote; pass --repo URL", 2)
    if not args.repo and not repo.startswith("https://"):
        print(f"note: cloning origin {repo}; the VM has no keys of yours, so if that fails pass "
              "--repo https://...", file=sys.stderr)
    c.preflight(args)
    script = remote_script(repo, args.branch, args.remote_dir, args.python)
    c.run(c.ssh(args, "all", script), dry_run=args.dry_run)
    if not args.dry_run:
        print(f"next: python scripts/tpu/train.py {c.target(args)} -- <training arguments>")
    return 0


if __name__ == "__main__":
    c.main(body)
