"""Where metrics go after a chunk: the console line, metrics.jsonl, and the training-health monitor.

Each sink has `write(record)` and `close()`. A record is a flat dict of Python floats/ints for one chunk:
`env_steps`, `total_env_steps`, `update`, `wall_seconds`, `steps_per_second`, `eta_seconds`, and every metric
the chunk returned, reduced over the chunk's updates (`chunk_reduce`). wandb and TensorBoard sinks follow the
same interface.

A multi-seed run (--num-seeds S) reduces each seed's metrics the same way, then `seeds_reduce` makes the record:
every key holds the mean over seeds, headline keys add `<key>/std` and `<key>/iqm`, and `per_seed` holds the
per-seed values (`{"<key>": [v0, v1, ...]}`; only metrics.jsonl keeps it - wandb/TensorBoard get the numbers).
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections import deque

import numpy as np

# How a per-update metric becomes one number per chunk.
SUMMED = ("num_episodes", "num_curriculum_episodes", "fully_masked_rows")


def chunk_reduce(metrics: dict, scores=()) -> dict:
    """One number per metric for a chunk. `episode/<key>` metrics arrive as per-update sums over the fresh
    episodes that ended (maxes for `*_max` keys), `curriculum/<key>` over those begun as a curriculum's late start
    (`num_curriculum_episodes` of them): each becomes a mean over the chunk's episodes of its kind (the max), and
    is left out of a chunk in which no episode of its kind ended (`num_curriculum_episodes` too, where none did).
    `scores`: the env's declared scores (episode_stats.EpisodeScore), added as `episode/<name>` from the chunk's
    rates."""
    from hephaestus.envs.episode_stats import is_max_key, score_values

    out = {}
    episodes = float(np.sum(metrics["num_episodes"])) if "num_episodes" in metrics else 0.0
    late = float(np.sum(metrics["num_curriculum_episodes"])) if "num_curriculum_episodes" in metrics else 0.0
    counts = {"episode/": episodes - late, "curriculum/": late}
    for key, values in metrics.items():
        values = np.asarray(values, dtype=np.float64)
        prefix = next((p for p in counts if key.startswith(p)), None)
        if prefix is not None:
            if counts[prefix] > 0:
                out[key] = float(values.max()) if is_max_key(key) else float(values.sum() / counts[prefix])
        elif key == "num_curriculum_episodes" and late == 0:
            continue
        elif key in SUMMED:
            out[key] = float(values.sum())
        elif key in ("mean_episode_return", "mean_episode_length"):
            out[key] = float(values[-1])  # the latest estimate, not an average of stale ones
        else:
            out[key] = float(values.mean())
    out.update(score_values(scores, out, "episode/"))
    return out


# Keys that, in a multi-seed record, also get `<key>/std` and `<key>/iqm` (eval/ and episode/ keys do too).
HEADLINE = ("mean_episode_return", "mean_episode_length", "stats/highest_stage")
SPREAD_SUFFIXES = ("/std", "/iqm")


def iqm(values) -> float:
    """Interquartile mean: the mean of the middle half, cutting int(n/4) values from each end (as
    scipy.stats.trim_mean(x, 0.25) and rliable do; with fewer than 4 values it is the mean)."""
    values = np.sort(np.asarray(values, dtype=np.float64))
    cut = len(values) // 4
    return float(values[cut:len(values) - cut].mean())


def seeds_reduce(metrics: dict, scores=()) -> dict:
    """Metrics of a multi-seed chunk, each [updates, seeds] -> one record: every key holds the mean over seeds of
    the per-seed `chunk_reduce` value; headline keys add `<key>/std` (sample std over seeds) and `<key>/iqm`;
    `per_seed` maps every key to the list of per-seed values."""
    num_seeds = np.shape(next(iter(metrics.values())))[1]
    return combine_seeds([chunk_reduce({k: np.asarray(v)[:, i] for k, v in metrics.items()}, scores)
                          for i in range(num_seeds)])


def combine_seeds(per_seed: list[dict]) -> dict:
    """One record from one record per seed: each key the mean over seeds, headline, `eval/` and `episode/` keys
    also `<key>/std` and `<key>/iqm`, and `per_seed` mapping every key to the per-seed values."""
    out = {}
    keys = list(dict.fromkeys(k for r in per_seed for k in r))  # episode/ keys: absent where no episode ended
    per_seed = [{k: r.get(k, float("nan")) for k in keys} for r in per_seed]
    for key in keys:
        values = np.array([r[key] for r in per_seed])
        if key.startswith(("episode/", "curriculum/")):
            values = values[np.isfinite(values)]
        out[key] = float(values.mean())
        if key in HEADLINE or key.startswith(("eval/", "episode/", "curriculum/")):
            out[f"{key}/std"] = float(values.std(ddof=1)) if len(values) > 1 else 0.0
            out[f"{key}/iqm"] = iqm(values)
    out["per_seed"] = {key: [r[key] for r in per_seed] for key in per_seed[0]}
    return out


def json_clean(value):
    """A record value as JSON: non-finite floats become null, nested dicts and lists included."""
    if isinstance(value, dict):
        return {k: json_clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_clean(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def format_duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}"


def format_count(n: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.1f}{unit}"
    return f"{n:.0f}"


def spread(r: dict, key: str, digits: int) -> str:
    """"12.30", or "12.30 ± 4.50" (mean ± std over seeds) in a multi-seed record."""
    text = f"{r[key]:.{digits}f}"
    return text + f" ± {r[key + '/std']:.{digits}f}" if key + "/std" in r else text


class ConsoleSink:
    """One line per chunk; with episode statistics or evaluations, a brief suffix of each (`headline` keys)."""

    def __init__(self, stream=None, headline=()):
        self.stream = stream or sys.stdout
        self.headline = tuple(headline)  # report keys (episode_stats.report_keys) worth a place on the line

    def write(self, r: dict) -> None:
        line = (f"[{r['env_steps']:>12,}/{r['total_env_steps']:,}] {format_count(r['steps_per_second'])} steps/s "
                f"ETA {format_duration(r['eta_seconds'])} | return {spread(r, 'mean_episode_return', 2)} "
                f"len {spread(r, 'mean_episode_length', 1)} | ent {r['entropy']:.3f}")
        if "approx_kl" in r:  # PPO's (the dreamer has no ratio to clip)
            line += f" kl {r['approx_kl']:.4f} clip {r['clip_frac']:.3f}"
        for prefix in ("episode/", "curriculum/", "eval/"):
            shown = [f"{k} {r[prefix + k]:.2f}" for k in self.headline if prefix + k in r]
            if prefix == "eval/" and "eval/return_mean" in r:
                shown.insert(0, f"return {r['eval/return_mean']:.2f} len {r['eval/length_mean']:.0f}")
            if shown:
                line += f" | {prefix[:-1]} " + " ".join(shown)
        print(line, file=self.stream, flush=True)

    def message(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def close(self) -> None:
        pass


class JsonlSink:
    """checkpoints/<run>/metrics.jsonl: one JSON object per chunk, appended (a resumed run continues it)."""

    def __init__(self, path: str):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self.path = path
        self.file = open(path, "a", buffering=1)
        if self.file.tell() > 0:  # never glue a record onto a line cut short by a kill mid-write
            with open(path, "rb") as f:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    self.file.write("\n")

    def write(self, record: dict) -> None:
        self.file.write(json.dumps(json_clean(record)) + "\n")

    def close(self) -> None:
        self.file.close()


class HealthMonitor:
    """The warnings users watch for in PPO runs. Each kind is printed at most once every `quiet` chunks."""

    KL_LIMIT = 0.08
    CLIP_LIMIT = 0.35
    ENTROPY_FLOOR = 0.05  # fraction of the run's first entropy
    STALL_WINDOW = 5

    def __init__(self, quiet: int = 10):
        self.quiet = quiet
        self.first_entropy = None
        self.history = deque(maxlen=self.STALL_WINDOW)
        self.last_warned: dict[str, int] = {}
        self.chunk = 0

    def check(self, r: dict) -> list[str]:
        self.chunk += 1
        found = []
        if r.get("approx_kl", 0.0) > self.KL_LIMIT:
            found.append(("kl", f"approx KL {r['approx_kl']:.3f} > {self.KL_LIMIT}: policy moving too far per "
                                "update (lower --lr or --update-epochs)"))
        if r.get("clip_frac", 0.0) > self.CLIP_LIMIT:
            found.append(("clip", f"clip fraction {r['clip_frac']:.2f} > {self.CLIP_LIMIT}: most samples clipped "
                                  "(lower --lr)"))
        entropy = r.get("entropy")
        if entropy is not None:
            if self.first_entropy is None:
                self.first_entropy = entropy
            elif self.first_entropy > 0 and entropy < self.ENTROPY_FLOOR * self.first_entropy:
                found.append(("entropy", f"entropy {entropy:.4f} collapsing towards 0 (started at "
                                         f"{self.first_entropy:.3f}; raise --ent-coef)"))
        if r.get("num_episodes", 0) > 0:
            self.history.append((r["mean_episode_length"], r["mean_episode_return"]))
        if len(self.history) == self.STALL_WINDOW:
            (len0, ret0), (len1, ret1) = self.history[0], self.history[-1]
            if len1 > 1.2 * len0 + 1 and abs(ret1 - ret0) <= 0.05 * max(abs(ret0), 1.0):
                found.append(("stall", f"episode length rising ({len0:.0f} -> {len1:.0f}) while return stays flat "
                                       f"({ret0:.2f} -> {ret1:.2f}): the agent stalls instead of progressing"))
        out = []
        for kind, text in found:
            if self.chunk - self.last_warned.get(kind, -self.quiet) >= self.quiet:
                self.last_warned[kind] = self.chunk
                out.append(f"warning: {text}")
        return out


# ------------------------------------------------------------------------------------------------------------
# wandb and TensorBoard. Both log from the record the loop hands them, so nothing runs inside the compiled
# program. One name per quantity: a metric has the same key in metrics.jsonl, wandb and TensorBoard
# (`mean_episode_return`, `entropy`, `episode/stage_reached>=2`, `eval/return_mean`; TensorBoard writes `>=` as
# `_ge`, which its tags cannot hold). The x axis is `env_steps` (one agent's experience: a 64-env and a 2048-env
# run compare at the same step), in wandb through define_metric, in TensorBoard as the global step.

BOOKKEEPING = ("update", "env_steps", "total_env_steps", "eta_seconds")
STEP_METRIC = "env_steps"


def metric_key(key: str) -> str | None:
    """The key a record's entry is logged under (the record's own), or None for bookkeeping nobody plots."""
    if key in ("total_env_steps", "eta_seconds"):
        return None
    return key


def per_seed_key(key: str) -> bool:
    """Whether a --num-seeds record's per-seed values of `key` are logged too (`seed<i>/<key>`)."""
    return key in HEADLINE or key.startswith(("eval/", "episode/", "curriculum/"))


def loggable(record: dict) -> dict:
    """The record's numbers by their logged key; in a --num-seeds record also `seed<i>/<key>` for the headline,
    episode and evaluation keys, so each seed's curve can be drawn beside the mean."""
    out = {}
    for key, value in record.items():
        name = metric_key(key)
        if name is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = value
    for key, values in (record.get("per_seed") or {}).items():
        if per_seed_key(key):
            for i, value in enumerate(values):
                if isinstance(value, (int, float)) and math.isfinite(value):
                    out[f"seed{i}/{key}"] = value
    return out


# Extra stage -> the option families (stages.<family>) it reads. A run logs only the families of its stages.
STAGE_FAMILIES = {"world_model": ("dtc",), "intrinsic_reward": ("dtc",), "dreamer": ("dtc", "dreamer"),
                  "rnd": ("rnd",), "count_bonus": ("count",), "episodic_novelty": ("episodic",),
                  "intrinsic_critic": ("intrinsic_critic",), "reward_bonus": ("reward_bonus",)}


def logged_config(config) -> dict:
    """The run's config nested by section (`env`, `ppo`, `network`, `run`, `logging`, `agent`, `extra_stages`,
    `stages.<family>`), with only the option families of the stages the run has: a PPO run logs no dtc or dreamer
    options."""
    from hephaestus.config.train_config import options

    used = {family for stage in config.extra_stages for family in STAGE_FAMILIES.get(stage, (stage,))}
    out: dict = {}
    for option in options().values():
        path = option.path
        if path[0] == "stages" and path[1] not in used:
            continue
        value = option.get(config)
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = list(value) if isinstance(value, tuple) else value
    return out


def wandb_run_id(run_name: str) -> str:
    """A stable wandb run id for a run name, so a resumed run continues the same wandb run. wandb ids allow
    letters, digits, `-` and `_` (no `/ \\ # ? % :`), at most 64 characters."""
    import hashlib

    digest = hashlib.sha1(run_name.encode()).hexdigest()[:10]
    clean = "".join(c if c.isalnum() or c in "-_" else "-" for c in run_name)[:48].strip("-") or "run"
    return f"{clean}-{digest}"


def wandb_api_key_configured() -> bool:
    """WANDB_API_KEY, or a ~/.netrc entry for the wandb host (what `wandb login` writes). Reads only whether
    an entry exists."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    import netrc
    from urllib.parse import urlparse

    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or "api.wandb.ai"
    path = os.environ.get("NETRC") or os.path.join(os.path.expanduser("~"), ".netrc")
    try:
        return netrc.netrc(path).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def wandb_api_key() -> str:
    """The key wandb itself would use: WANDB_API_KEY, else the netrc password for the wandb host."""
    if os.environ.get("WANDB_API_KEY"):
        return os.environ["WANDB_API_KEY"]
    import netrc
    from urllib.parse import urlparse

    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or "api.wandb.ai"
    path = os.environ.get("NETRC") or os.path.join(os.path.expanduser("~"), ".netrc")
    try:
        entry = netrc.netrc(path).authenticators(host)
    except (OSError, netrc.NetrcParseError):
        return ""
    return (entry[2] or "") if entry else ""


def wandb_online_problem(timeout: float = 3.0) -> str | None:
    """Why an online wandb run would fail here, or None. One authenticated request to the server's GraphQL
    endpoint (what wandb.init talks to), bounded by `timeout` per connect/read: a server that is reachable but
    failing (TLS error, key refused, an error status, no answer) is found in seconds instead of after wandb's own
    init timeout and retries (about 50 s), and the run logs offline."""
    import base64
    import urllib.error
    import urllib.request

    base = os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai").rstrip("/")
    token = base64.b64encode(f"api:{wandb_api_key()}".encode()).decode()
    request = urllib.request.Request(f"{base}/graphql", data=json.dumps({"query": "query { viewer { id } }"}).encode(),
                                     headers={"Authorization": f"Basic {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read(1)
        return None
    except urllib.error.HTTPError as err:
        if err.code in (401, 403):
            return f"refused the API key (HTTP {err.code})"
        return f"answered HTTP {err.code}"
    except urllib.error.URLError as err:
        reason = err.reason
        return "unreachable" if isinstance(reason, ConnectionRefusedError) or "refused" in str(reason) \
            else f"gave no usable answer ({type(reason).__name__}: {str(reason)[:80]})"
    except (OSError, ValueError) as err:  # timeouts, TLS errors, bad URLs
        return f"gave no usable answer ({type(err).__name__}{': ' + str(err)[:80] if str(err) else ''})"


def wandb_mode(config) -> str | None:
    """'online', 'offline' or None (off), and why, from --wandb/--no-wandb, WANDB_MODE and the API key."""
    env_mode = os.environ.get("WANDB_MODE", "").lower()
    if config.logging.wandb is False or env_mode in ("disabled", "off"):
        return None
    key = wandb_api_key_configured()
    if config.logging.wandb is None and not key and env_mode not in ("offline", "online", "dryrun"):
        return None
    if env_mode in ("offline", "dryrun"):
        return "offline"
    return "online" if key else "offline"


def _quiet_wandb_telemetry() -> None:
    """wandb's own telemetry still posts to the failing server after an offline fallback and prints a retry line
    per attempt at exit; the server is known to fail, so turn it off (where this wandb version has it)."""
    try:
        from wandb.analytics.opentelemetry import opentelemetry_proxy

        opentelemetry_proxy.disable()
    except (ImportError, AttributeError):
        pass


WANDB_ID_FILE = "wandb_run_id"


def stored_wandb_run_id(run_dir: str, run_name: str) -> str:
    """The wandb run id of a run folder: the one stored in `<run_dir>/wandb_run_id` (so a resumed run continues its
    wandb run, whatever its name), else a new one from the run name, stored there."""
    path = os.path.join(run_dir, WANDB_ID_FILE)
    try:
        with open(path) as f:
            stored = f.read().strip()
        if stored:
            return stored
    except OSError:
        pass
    run_id = wandb_run_id(run_name)
    try:
        os.makedirs(run_dir, exist_ok=True)
        with open(path, "w") as f:
            f.write(run_id + "\n")
    except OSError:
        pass  # a read-only folder: the id from the name still resumes the same wandb run
    return run_id


def read_wandb_records(path: str) -> list:
    """The records of a `.wandb` run file (LevelDB-log framing around wandb's protobuf `Record`s): what an
    offline run wrote, read back without the network."""
    import struct

    from wandb.proto import wandb_internal_pb2 as pb

    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b":W&B":
        return []
    pos, block, out, pending = 7, 32768, [], b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST
            record = pb.Record()
            try:
                record.ParseFromString(pending)
            except Exception:  # noqa: BLE001 - a file cut short by a kill: what came before it counts
                break
            out.append(record)
            pending = b""
        elif kind == 0:
            pending = b""
    return out


def offline_steps_logged(wandb_dir: str, run_id: str) -> int:
    """How many history steps earlier offline sessions of wandb run `run_id` logged (the next step to use), so a
    resumed offline run continues their step count and `wandb sync` of its directories, in order, uploads one
    run whose history only grows."""
    import glob
    import re

    # wandb names a session's folder offline-run-<time>-<id>, with "-1", "-2", ... where one of that second exists
    session = re.compile(rf"offline-run-[\d_]+-{re.escape(run_id)}(-\d+)?")
    steps = -1
    for run_file in glob.glob(os.path.join(wandb_dir, "wandb", f"offline-run-*-{run_id}*", f"run-{run_id}.wandb")):
        if not session.fullmatch(os.path.basename(os.path.dirname(run_file))):
            continue
        for record in read_wandb_records(run_file):
            if record.WhichOneof("record_type") == "history":
                steps = max(steps, record.history.step.num)
    return steps + 1


# The settings of every wandb run this package starts. silent: wandb's own banners and progress lines would
# interleave with the console sink, which prints the lines that matter; console="off": no stdout wrapping
# (signals, subprocess pipes).
WANDB_SETTINGS = dict(init_timeout=30, console="off", silent=True, x_disable_stats=True, save_code=False,
                      disable_git=True)


def settle_wandb_mode(mode: str, directory: str, asked: bool, message=print) -> str:
    """The mode runs logging under `directory` will use, said in one line where it is not what the user may
    expect: an online mode whose server fails one bounded probe becomes offline (wandb's telemetry to it quieted);
    an offline mode that `--wandb` asked for (`asked`) without a key says so."""
    problem = wandb_online_problem() if mode == "online" else None
    if problem:
        message(f"wandb: {os.environ.get('WANDB_BASE_URL', 'api.wandb.ai')} {problem}; logging offline "
                f"(upload later with `wandb sync {directory}/wandb/offline-run-*`)")
        _quiet_wandb_telemetry()
        return "offline"
    if mode == "offline" and not wandb_api_key_configured() and asked:
        message(f"wandb: no API key configured; logging offline (upload later with "
                f"`wandb sync {directory}/wandb/offline-run-*`)")
    return mode


def init_wandb_run(mode: str, message=print, settings: dict | None = None, **kwargs):
    """(run, mode): `wandb.init(**kwargs)` in `mode` with WANDB_SETTINGS (and `settings` over them), every metric on
    `env_steps`. An online start that fails anyway goes offline, in one line, and training goes on."""
    import wandb

    settings = wandb.Settings(**{**WANDB_SETTINGS, **(settings or {})})
    try:
        run = wandb.init(mode=mode, settings=settings, **kwargs)
    except Exception as err:  # noqa: BLE001 - any failure to reach the server: go offline, keep training
        if mode != "online":
            raise
        message(f"wandb: could not start an online run ({type(err).__name__}); logging offline instead")
        mode = "offline"
        run = wandb.init(mode="offline", settings=settings, **kwargs)
    run.define_metric(STEP_METRIC)
    run.define_metric("*", step_metric=STEP_METRIC)
    return run, mode


class WandbSink:
    """Logs each record against `env_steps` (define_metric). The run id is stored in the run folder and
    `resume="allow"`, so a resumed run continues the same wandb run; records up to update `skip_until` (already
    logged before the interruption) are not logged again. Evaluation videos (`log_video`), the final evaluation
    in the run's summary (`summarize`) and the final parameters as an artifact (`log_final_params`) come from
    train.py and the loop."""

    def __init__(self, config, run_dir: str, mode: str = "offline", skip_until: int = 0,
                 message=print, artifacts: bool = True):
        import wandb

        self.wandb = wandb
        self.skip_until = skip_until
        self.artifacts = artifacts
        self.message = message
        self.run_id = stored_wandb_run_id(run_dir, config.run.run_name)
        directory = os.environ.get("WANDB_DIR") or run_dir
        os.makedirs(directory, exist_ok=True)
        mode = settle_wandb_mode(mode, directory, bool(config.logging.wandb), message)
        first_step = offline_steps_logged(directory, self.run_id) if mode == "offline" else 0
        tags = [config.env.name, config.agent] + ([f"{config.run.num_seeds}-seeds"] if config.run.num_seeds > 1 else [])
        kwargs = dict(project=config.logging.wandb_project, entity=config.logging.wandb_entity or None,
                      name=config.run.run_name, id=self.run_id, resume="allow", config=logged_config(config),
                      dir=directory, group=config.logging.wandb_group or None, tags=tags)
        self.run, mode = init_wandb_run(mode, message, **kwargs)
        # wandb's own step (the history row), explicit: an online resume continues the server's count
        # (run.step), an offline one the count of the earlier offline sessions of this run.
        self.step = max(int(getattr(self.run, "step", 0) or 0), first_step if mode == "offline" else 0)
        if first_step and mode == "offline":
            message(f"wandb: offline run {self.run_id} continues at step {first_step}; upload its sessions in order "
                    f"with `wandb sync {directory}/wandb/offline-run-*-{self.run_id}*`")
        self.mode = mode
        self.directory = directory
        self.video_dir = os.path.join(run_dir, "videos")  # the evaluation videos, kept beside the run
        os.makedirs(self.video_dir, exist_ok=True)
        if mode == "online" and getattr(self.run, "url", None):
            message(f"wandb: {self.run.url}")

    def write(self, record: dict) -> None:
        if int(record.get("update", 0)) <= self.skip_until:
            return
        self._log(loggable(record))

    def _log(self, data: dict) -> None:
        self.run.log(data, step=self.step)
        self.step += 1

    def log_video(self, path: str, env_steps: int, key: str = "eval/video", caption: str = "") -> None:
        """An evaluation episode's video file (.mp4 or .gif) at `env_steps`."""
        fmt = os.path.splitext(path)[1].lstrip(".")
        self._log({key: self.wandb.Video(path, format=fmt, caption=caption or None), STEP_METRIC: env_steps})

    def summarize(self, metrics: dict) -> None:
        """The final evaluation in the run's summary: `eval/<stat>` as `final_eval/<stat>` (and
        `eval_sampled/` as `final_eval_sampled/`), beside the last value of every logged metric."""
        for key, value in metrics.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and "/" in key:
                prefix, rest = key.split("/", 1)
                self.run.summary[f"final_{prefix}/{rest}"] = value

    def log_checkpoint(self, path: str, update: int) -> None:
        """Upload a finished checkpoint directory (and its params_<update>.npz) as an artifact."""
        if not self.artifacts:
            return
        art = self.wandb.Artifact(f"{self.run_id}-checkpoint", type="checkpoint", metadata={"update": update})
        art.add_dir(path, name=str(update))
        npz = os.path.join(os.path.dirname(path), f"params_{update}.npz")
        if os.path.exists(npz):
            art.add_file(npz)
        self.run.log_artifact(art, aliases=["latest", f"update-{update}"])

    def log_final_params(self, npz_path: str, update: int) -> None:
        """The final parameters (final_params.npz: what watch_agent.py and evaluate.py load) as a `model`
        artifact `<run id>-params`, which `watch_agent.py wandb:ENTITY/PROJECT/<run id>` fetches."""
        if not self.artifacts or not os.path.exists(npz_path):
            return
        art = self.wandb.Artifact(f"{self.run_id}-params", type="model", metadata={"update": update})
        art.add_file(npz_path, name="final_params.npz")
        self.run.log_artifact(art, aliases=["latest", f"update-{update}"])

    def close(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None


class TensorBoardSink:
    """Event files for TensorBoard (tensorboardX, no torch), the global step `env_steps`. A resumed run purges
    the events past the env step it resumed from (`purge_step`), so the curves show each step once."""

    def __init__(self, logdir: str, purge_step: int | None = None):
        from tensorboardX import SummaryWriter

        self.writer = SummaryWriter(logdir=logdir, purge_step=purge_step, flush_secs=30)

    def write(self, record: dict) -> None:
        step = int(record.get(STEP_METRIC, 0))
        for key, value in loggable(record).items():
            if key != STEP_METRIC:  # TensorBoard tags allow [-/\w.]: `stage_reached>=2` -> `stage_reached_ge2`
                self.writer.add_scalar(key.replace(">=", "_ge"), value, global_step=step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
