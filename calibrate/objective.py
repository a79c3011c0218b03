"""The replication error f(x) of the paper, its noise, and the per-scheme table behind it.

Pantheon paper (Yan et al., USENIX ATC 2018) §5.2: f is the average, across the reference schemes,
of the percentage differences between real and emulated mean throughput and mean 95th-percentile
one-way delay:

    f = 100 · mean_k ( |T̂_k − T_k| / T_k + |D̂_k − D_k| / D_k ) / 2

where T_k, D_k are the target's aggregates (mean over runs by default; the caller aggregates the
target) and T̂_k, D̂_k the same aggregate over this evaluation's replicates.

Choices, all documented here once:

- **Units k.**  A key is a scheme name, or ``(scheme, flow_id)`` for a multi-flow target: each
  flow is scored like a scheme and all flows of all schemes are averaged together (the 2018
  `plot_real_emu.py` scoring on per-flow means; with the same number of flows per scheme this
  equals averaging flows within a scheme first).
- **Intersection.**  Only keys present in both the target and the evaluation count; target keys
  with no emulated entry (scheme not available on this host) are listed in `dropped`.
- **Failures.**  A key that ran but has no valid replicate (all runs failed after the caller's
  retries, or produced unusable numbers) is *penalized*: each of its error terms is `penalty`
  (default 2 = 200 %, worse than any working scheme near the optimum yet bounded so a GP's
  outcome standardization is not swamped), and the reasons are recorded.
- **Loss.**  The loss error |L̂ − L| / max(L, 0.1 %) is always computed and reported; it enters f,
  as a third term in the per-key average, only with ``include_loss=True``.  The floor keeps a
  near-lossless target from turning one dropped packet into a huge relative error.
- **Noise** (`noise`): the standard error of f by the delta method.  Per key, the replicates'
  sample covariance of (throughput, delay, loss) gives the covariance of their aggregate
  (÷R for the mean, ×π/2 ÷R for the median, its large-sample efficiency); the gradient of the
  key's term is sign(Δ)/reference per metric; keys are independent, so the variances add.  The
  delta method is chosen over per-replicate errors because replicates of different schemes are
  independent, so pairing "replicate r of every scheme" into one f_r would be arbitrary.  A key
  with one valid replicate borrows the mean per-replicate variance of the others; with no key
  having two, noise is NaN (the optimizers then fit the noise).
- **Floor** (`floor`): the f an exact emulator would still show because of the replicates'
  scatter: E|m − μ| = √(2/π)·sd(m) per term.  It counts only the emulated side's scatter (the
  target is passed as aggregates); the target's own run-to-run noise adds to it.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from calibrate.errors import InputError
from calibrate.metrics import Stats

#: Error assigned to each term of a key with no valid replicate (a fraction: 2 = 200 %).
DEFAULT_PENALTY = 2.0

#: Smallest reference loss in the relative loss error (a fraction: 0.1 %).
LOSS_ERROR_FLOOR = 1e-3

Aggregate = Literal["mean", "median"]
Key = Hashable  # a scheme name, or (scheme, flow_id)


@dataclass(frozen=True)
class Failure:
    """A replicate that produced no statistics, and why (from the runner)."""

    reason: str


Replicate = Stats | Failure


@dataclass(frozen=True)
class SchemeError:
    """The error terms of one key, as fractions (multiply by 100 for percent)."""

    key: Key
    real: Stats
    emulated: Stats | None  # aggregate over valid replicates; None when penalized
    replicates: int  # valid replicates behind `emulated`
    throughput: float  # |ΔT| / T, or the penalty
    delay: float  # |ΔD| / D, or the penalty
    loss: float  # |ΔL| / max(L, LOSS_ERROR_FLOOR), or the penalty
    failures: tuple[str, ...] = ()  # reasons of failed or invalid replicates (may be partial)

    @property
    def penalized(self) -> bool:
        return self.emulated is None


@dataclass(frozen=True)
class ReplicationError:
    """f(x) and everything reported with it.  Percentages throughout."""

    f: float  # the replication error, %
    noise: float  # standard error of f, % (NaN when not estimable)
    floor: float  # expected f of an exact emulator given the replicates' scatter, %
    throughput: float  # mean throughput error, %
    delay: float  # mean delay error, %
    loss: float  # mean loss error, % (in f only if include_loss)
    include_loss: bool
    schemes: tuple[SchemeError, ...]  # the keys scored, in target order
    dropped: tuple[Key, ...]  # target keys with no emulated entry (not on this host)
    ignored: tuple[Key, ...]  # emulated keys the target lacks

    @property
    def penalized(self) -> dict[Key, str]:
        """Keys scored with the penalty, and why."""
        return {s.key: "; ".join(s.failures) for s in self.schemes if s.penalized}

    @property
    def dropped_schemes(self) -> tuple[str, ...]:
        """Scheme names among `dropped` (flow ids folded)."""
        return tuple(dict.fromkeys(_scheme_of(k) for k in self.dropped))


def _scheme_of(key: Key) -> str:
    return str(key[0]) if isinstance(key, tuple) else str(key)


def _as_stats(value: object, where: str) -> Replicate:
    if isinstance(value, (Stats, Failure)):
        return value
    try:
        # any iterable of three numbers; what is not one raises here and is reported below
        tput, delay, loss = (float(v) for v in value)  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        raise InputError(f"{where}: expected Stats, Failure or (throughput, delay, loss), "
                         f"got {value!r}") from None
    return Stats(tput, delay, loss)


# Per metric (throughput, delay, loss): the smallest reference a relative error divides by.
_FLOORS = np.array([0.0, 0.0, LOSS_ERROR_FLOOR])


def relative_error(emulated: np.ndarray, real: np.ndarray, floor: np.ndarray | float = 0.0) -> np.ndarray:
    """|emulated − real| / max(real, floor): the paper's "percentage difference", as a fraction."""
    return np.abs(np.asarray(emulated) - real) / np.maximum(real, floor)


def replication_error(
    real: Mapping[Key, Stats | Sequence[float]],
    emulated: Mapping[Key, Replicate | Sequence[Replicate] | Sequence[float]],
    *,
    aggregate: Aggregate = "mean",
    include_loss: bool = False,
    penalty: float = DEFAULT_PENALTY,
) -> ReplicationError:
    """The paper's replication error of one evaluation (formula and choices: module docstring).

    `real` maps key -> the target's aggregate Stats (or a (throughput, delay, loss) tuple).
    `emulated` maps key -> this evaluation's replicates: a sequence of Stats / Failure, or a
    single one.  Keys are scheme names or (scheme, flow_id) pairs.
    """
    if aggregate not in ("mean", "median"):
        raise InputError(f"aggregate must be 'mean' or 'median', got {aggregate!r}")
    if not penalty > 0:
        raise InputError(f"penalty must be positive, got {penalty}")
    target: dict[Key, Stats] = {}
    for key, value in real.items():
        s = _as_stats(value, f"target {key}")
        problem = s.problem("reference") if isinstance(s, Stats) else s.reason
        if problem:
            raise InputError(f"the target's statistics for {key} cannot be scored ({problem}); "
                             f"drop that scheme from the target")
        # a Failure has a reason, so only a Stats gets here
        target[key] = s  # type: ignore[assignment]

    common = [k for k in target if k in emulated]
    if not common:
        raise InputError(
            f"no scheme is both in the target ({', '.join(map(str, target)) or 'none'}) and in "
            f"the evaluation ({', '.join(map(str, emulated)) or 'none'}); choose schemes this "
            f"host can run"
        )
    dropped = tuple(k for k in target if k not in emulated)
    ignored = tuple(k for k in emulated if k not in target)

    n_terms = 3 if include_loss else 2
    in_f = np.array([1.0, 1.0, 1.0 if include_loss else 0.0])
    # aggregate's variance per replicate-variance unit (mean: 1/R; median: π/2 / R)
    efficiency = 1.0 if aggregate == "mean" else math.pi / 2
    reduce = np.mean if aggregate == "mean" else np.median

    rows: list[SchemeError] = []
    variances: list[float | None] = []  # per key, var of its term; None = unknown (one replicate)
    per_replicate: list[float] = []  # var·R of keys with ≥ 2 replicates, to impute the others
    floors: list[float | None] = []  # per key, expected term of an exact emulator; None = unknown
    floor_units: list[float] = []  # floor·√R of keys with ≥ 2 replicates, to impute the others
    for key in common:
        ref = target[key]
        raw = emulated[key]
        given = [raw] if isinstance(raw, (Stats, Failure)) or _looks_like_triple(raw) else list(raw)
        reps = [_as_stats(r, f"emulated {key}") for r in given]
        failures = tuple(r.reason if isinstance(r, Failure) else f"invalid run: {r.problem('emulated')}"
                         for r in reps if isinstance(r, Failure) or r.problem("emulated"))
        valid = np.array([[r.throughput, r.delay, r.loss] for r in reps
                          if isinstance(r, Stats) and not r.problem("emulated")]).reshape(-1, 3)
        if len(valid) == 0:
            rows.append(SchemeError(key, ref, None, 0, penalty, penalty, penalty,
                                    failures or ("no replicate",)))
            variances.append(0.0)  # a penalty is deterministic
            floors.append(0.0)
            continue
        agg = reduce(valid, axis=0)
        actual = np.array([ref.throughput, ref.delay, ref.loss])
        refs = np.maximum(actual, _FLOORS)
        errors = relative_error(agg, actual, _FLOORS)
        rows.append(SchemeError(key, ref, Stats(*map(float, agg)), len(valid),
                                float(errors[0]), float(errors[1]), float(errors[2]), failures))
        # delta method: d term / d aggregate = sign(Δ) / reference / n_terms, for terms in f
        gradient = np.where(agg >= actual, 1.0, -1.0)
        gradient = gradient / refs * in_f / n_terms
        if len(valid) >= 2:
            cov = np.atleast_2d(np.cov(valid, rowvar=False, ddof=1)) * efficiency
            unit = float(gradient @ cov @ gradient)
            per_replicate.append(unit)
            variances.append(unit / len(valid))
            sd = np.sqrt(np.diag(cov) / len(valid))
            floor = float(np.sum(math.sqrt(2 / math.pi) * sd / refs * in_f) / n_terms)
            floors.append(floor)
            floor_units.append(floor * math.sqrt(len(valid)))
        else:
            variances.append(None)
            floors.append(None)

    k = len(rows)
    terms = np.array([[r.throughput, r.delay, r.loss] for r in rows])
    f = float(100.0 * np.mean(terms @ in_f / n_terms))
    if per_replicate:  # a key with one replicate borrows the others' per-replicate scatter
        borrowed = float(np.mean(per_replicate))
        noise = 100.0 / k * math.sqrt(sum(borrowed if v is None else v for v in variances))
        borrowed_floor = float(np.mean(floor_units))
        floor = 100.0 * float(np.mean([borrowed_floor if v is None else v for v in floors]))
    elif any(v is None for v in variances):
        noise = floor = math.nan
    else:  # every key penalized: deterministic
        noise = floor = 0.0
    means = 100.0 * terms.mean(axis=0)
    return ReplicationError(
        f=f,
        noise=noise,
        floor=floor,
        throughput=float(means[0]),
        delay=float(means[1]),
        loss=float(means[2]),
        include_loss=include_loss,
        schemes=tuple(rows),
        dropped=dropped,
        ignored=ignored,
    )


def _looks_like_triple(value: object) -> bool:
    """A bare (throughput, delay, loss) tuple rather than a sequence of replicates."""
    return (isinstance(value, (tuple, list)) and len(value) == 3
            and all(isinstance(v, (int, float)) for v in value))
