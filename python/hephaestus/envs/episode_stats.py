"""Per-episode statistics an environment declares, and how the pipeline reports them.

An env declares its statistics once, as `episode_stats = (EpisodeStat(...), ...)` (a class attribute, copied into
`EnvSpec.episode_stats` by the adapter), and reports one float32 value per statistic on every step in
`info["episode_stats"]` (a dict name -> value). Each statistic says how its per-step values make one value per
episode (`aggregate`: "sum" or "max") and how a set of episodes is reported:

* a counted statistic (`sum`, e.g. siphons used): `<name>_per_episode`, the mean over episodes, and `<name>>=t`
  (the fraction of episodes counting at least t) for each declared threshold;
* a level (`max`, e.g. the highest stage reached): `<name>` (mean over episodes), `<name>_max` (the largest),
  and `<name>>=t` (the fraction of episodes reaching t) for each declared threshold;
* a flag (`rate=True`, a 0/1 value, e.g. victory): `<name>_rate`, the fraction of episodes where it happened.

An env may also declare scores over its flags' rates, `episode_scores = (EpisodeScore(...), ...)` (copied into
`EnvSpec.episode_scores`): a number computed on the host from the reported `<stat>_rate` means (`score_values`),
reported as `<prefix><name>` beside them (a score's name is `score` or ends in `_score`, which is how a summary
tells it from a per-episode mean), in training records (sinks.chunk_reduce, per seed) and evaluations
(evaluation.summarise). The one kind is Crafter's score, exp(mean(ln(1 + s_i))) - 1 over the success rates s_i in
percent (craftax_env.py declares it over the achievements).

`report_values` maps one episode's values to those report keys, so training (episodes that end during an update,
ppo.py), evaluation (evaluation.py) and replays (watch.py) report the same keys with no env-specific code. Nothing
here is HackMatrix's: its declaration lives in envs/hackmatrix/env.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

AGGREGATES = ("sum", "max")


@dataclass(frozen=True)
class EpisodeStat:
    name: str
    aggregate: str = "sum"  # "sum" or "max" of the per-step values over an episode
    rate: bool = False  # a 0/1 flag: report the fraction of episodes (<name>_rate)
    thresholds: tuple[float, ...] = ()  # levels and counts: report the fraction of episodes with value >= t
    doc: str = ""
    headline: bool = False  # shown on the console line (headline_keys), not only in the metrics file

    def __post_init__(self):
        if self.aggregate not in AGGREGATES:
            raise ValueError(f"episode stat {self.name!r}: aggregate must be one of {AGGREGATES}, "
                             f"got {self.aggregate!r}")
        if not self.name or "/" in self.name:
            raise ValueError(f"episode stat {self.name!r}: a name without '/' is needed")


@dataclass(frozen=True)
class EpisodeScore:
    """A score over flags' success rates (module docstring): `stats` names rate statistics of the same env."""
    name: str
    stats: tuple[str, ...]
    doc: str = ""

    def __post_init__(self):
        if not self.name or "/" in self.name or not self.stats:
            raise ValueError(f"episode score {self.name!r}: a name without '/' and at least one statistic are needed")
        if not is_score_name(self.name):  # how a summary tells a score from a per-episode mean (summary_lines)
            raise ValueError(f"episode score {self.name!r}: a score's name is 'score' or ends in '_score'")


def is_score_name(name: str) -> bool:
    """Whether a metric's name (without its prefix) is a declared score's: 'score' or '<what>_score'."""
    return name == "score" or name.endswith("_score")


def crafter_score(rates) -> float:
    """Crafter's score of success rates in [0, 1]: exp(mean(ln(1 + 100 s_i))) - 1, in percent (0 when nothing is
    ever unlocked, 100 when everything always is)."""
    import numpy as np

    rates = np.asarray(rates, np.float64)
    return float(np.exp(np.mean(np.log1p(100.0 * rates))) - 1.0)


def score_values(scores: Sequence[EpisodeScore], record: dict, prefix: str) -> dict:
    """`prefix` + name -> the score, for each declared score whose statistics' `<prefix><stat>_rate` are all in
    `record` (a reduced record: none where no episode ended)."""
    out = {}
    for score in scores:
        keys = [f"{prefix}{name}_rate" for name in score.stats]
        if all(k in record for k in keys):
            out[prefix + score.name] = crafter_score([record[k] for k in keys])
    return out


def as_scores(declared, stats: Sequence[EpisodeStat]) -> tuple[EpisodeScore, ...]:
    """An env's `episode_scores` attribute, checked against its statistics (each must be a declared rate)."""
    rates = {s.name for s in stats if s.rate}
    out = tuple(declared or ())
    for score in out:
        missing = [n for n in score.stats if n not in rates]
        if missing:
            raise ValueError(f"episode score {score.name!r}: {missing} are not declared rate statistics")
    return out


def as_stats(declared) -> tuple[EpisodeStat, ...]:
    """An env's `episode_stats` attribute as a tuple of EpisodeStat (tuples `(name, aggregate)` accepted)."""
    out = []
    for item in declared or ():
        out.append(item if isinstance(item, EpisodeStat) else EpisodeStat(*item))
    names = [s.name for s in out]
    if len(set(names)) != len(names):
        raise ValueError(f"episode stats declared twice: {sorted({n for n in names if names.count(n) > 1})}")
    return tuple(out)


def fmt_threshold(t: float) -> str:
    return str(int(t)) if float(t).is_integer() else str(t)


def report_keys(stats: Sequence[EpisodeStat]) -> list[str]:
    keys = []
    for s in stats:
        if s.rate:
            keys.append(f"{s.name}_rate")
        elif s.aggregate == "sum":
            keys += [f"{s.name}_per_episode"] + [f"{s.name}>={fmt_threshold(t)}" for t in s.thresholds]
        else:
            keys += [s.name, f"{s.name}_max"] + [f"{s.name}>={fmt_threshold(t)}" for t in s.thresholds]
    return keys


def headline_keys(stats: Sequence[EpisodeStat]) -> list[str]:
    """The report keys of the headline statistics: a rate, a count per episode, or a level's mean and its first
    threshold."""
    keys = []
    for s in stats:
        if not s.headline:
            continue
        if s.rate:
            keys.append(f"{s.name}_rate")
        elif s.aggregate == "sum":
            keys.append(f"{s.name}_per_episode")
        else:
            keys += [s.name] + [f"{s.name}>={fmt_threshold(t)}" for t in s.thresholds[:1]]
    return keys


def is_max_key(key: str) -> bool:
    """A report key reduced by max over episodes (and over a chunk's updates) rather than averaged."""
    return key.endswith("_max")


def report_values(stats: Sequence[EpisodeStat], values: dict, xp) -> dict:
    """Report key -> per-episode quantity (same shape as the values), to be averaged over episodes (or maxed,
    for `*_max` keys). `values`: stat name -> one value per episode; `xp`: numpy or jax.numpy."""
    out = {}
    for s in stats:
        v = values[s.name]
        if s.rate:
            out[f"{s.name}_rate"] = (v > 0).astype(xp.float32)
        elif s.aggregate == "sum":
            out[f"{s.name}_per_episode"] = v
        else:
            out[s.name] = v
            out[f"{s.name}_max"] = v
        if not s.rate:
            for t in s.thresholds:
                out[f"{s.name}>={fmt_threshold(t)}"] = (v >= t).astype(xp.float32)
    return out


def zeros(stats: Sequence[EpisodeStat], shape, xp) -> dict:
    """Running per-episode values at the start of an episode (0 for sums and for maxes: values are >= 0)."""
    return {s.name: xp.zeros(shape, xp.float32) for s in stats}


def accumulate(stats: Sequence[EpisodeStat], running: dict, step_values: dict, xp) -> dict:
    """The running per-episode values after one more step."""
    out = {}
    for s in stats:
        v = xp.asarray(step_values[s.name], xp.float32)
        out[s.name] = running[s.name] + v if s.aggregate == "sum" else xp.maximum(running[s.name], v)
    return out


def summarise(stats: Sequence[EpisodeStat], values: dict, prefix: str) -> dict:
    """Host side: `prefix` + report key -> mean over the episodes (max for `*_max` keys). `values`: stat name
    -> numpy array with one value per episode."""
    import numpy as np

    out = {}
    for key, q in report_values(stats, {k: np.asarray(v, np.float32) for k, v in values.items()}, np).items():
        if q.size:
            out[prefix + key] = float(q.max() if is_max_key(key) else q.mean())
    return out
