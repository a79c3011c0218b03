"""The three statistical rules a model-based search applies, in full: when it may stop (the stop
rule), which points it cannot tell from its incumbent (the range rule), and which coordinates its
evaluations show f to depend on (the relevance rule).

Each reads an optimizer through `Posterior`: its history, its incumbent and its estimates, and the
posterior of the latent f its model supplies (the hooks of `calibrate.optimizers.base.Optimizer`,
whose methods of the same names apply these rules).  Nothing here changes the optimizer.

**The stop rule** (`improvement_ruled_out`).  A search may stop searching the whole space only
when its model is confident that no point of it beats the incumbent by more than the measured
noise: over a dense sample of the unit cube (`CONFIDENCE_SOBOL` scrambled Sobol points) and of the
incumbent's surroundings (`CONFIDENCE_LOCAL` Sobol points within `CONFIDENCE_RADIUS` of it in
every coordinate), the lower confidence bound of f — the `CONFIDENCE_Z`-sigma lower quantile of
the posterior of the latent f, taken on the model's outcome scale, so exact for a log-warped GP —
lies nowhere more than the tolerance below the incumbent's estimate (`Optimizer.estimates`).  The
tolerance is the incumbent's measured standard error (its replicates' noise; the median of the
reported ones when its own is unknown), and at least `STOP_FRACTION` of its f (runs over a
lossless link repeat exactly and report noise 0).  The rule never fires before the warm start and
the initial design are told, without a model (random search), or when no evaluation reported a
noise (one replicate each): those searches use their budget.  EI at the proposals is deliberately
not the criterion: a GP fitted on a design that missed a narrow basin expects little improvement
anywhere.  Three sigmas, not two: the bound is taken over thousands of points, where a two-sigma
bound is crossed by chance somewhere.

**The range rule** (`indistinguishable`).  A point's f is statistically indistinguishable from the
incumbent's when the posterior mean there exceeds the posterior mean at the incumbent by at most
`RANGE_Z` standard deviations of their difference: m(x) − m* ≤ RANGE_Z · sd(g(x) − g*), on the
model's outcome scale, under the joint posterior of the latent f at x and at the incumbent:
√(s(x)² + s*² − 2·c(x, x*)) (`Optimizer._latent_difference`).  Model against model: where the
model smooths over the incumbent's measurement (a basin narrower than it resolves), comparing with
the measurement would keep nothing and claim a precision the model does not have.  The
replicates' noise enters through the model's observation noise (fitted by default; each
evaluation's reported standard error with the GP's ``noise_model="fixed"``), not a second time:
adding the incumbent's raw replicate error on top would ignore that the model pools every
neighbour's runs.  Near the incumbent the two posteriors are correlated, which the difference's
deviation accounts for; far from it c → 0 and the rule is the independent one.  An optimizer
without a joint posterior (`Optimizer._latent_difference`'s default) takes them as independent,
which errs on the wide side.  The points examined are the stop rule's sample, the evaluated
points, and `SWEEP_POINTS` points along each coordinate through the incumbent (a flat direction
shows in a sweep even where no Sobol point lands in the incumbent's basin).

**The relevance rule** (`irrelevant`).  The range rule trusts the model's shape, and a GP fitted
on points that explored one parameter only near the incumbent's value may extrapolate a trend in
it that the data never showed.  So a parameter counts only where the data show that f depends on
it: the model without that input (refitted on the same evaluations) must explain them worse by at
least `RELEVANCE_LOG_BF` in log marginal likelihood (a Bayes factor of e³ ≈ 20, "strong" on Kass
and Raftery's scale).  Where it does not, every value of the parameter is indistinguishable from
the incumbent's, and its range is its whole search range.  An optimizer that cannot refit on
fewer inputs (`_log_evidence` NaN) treats every parameter as relevant.
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np
from numpy.typing import ArrayLike

from calibrate.optimizers.streams import sobol, stream_seed

#: the stop rule: sigmas of the lower confidence bound, the sample it is taken over, and the
#: least tolerance as a fraction of the incumbent's f
CONFIDENCE_Z = 3.0
CONFIDENCE_SOBOL = 4096
CONFIDENCE_LOCAL = 512
CONFIDENCE_RADIUS = 0.05
STOP_FRACTION = 0.01

#: the range rule: standard deviations of the difference from the incumbent, and the points of
#: each coordinate's sweep through it
RANGE_Z = 2.0
SWEEP_POINTS = 101

#: the relevance rule: the least log Bayes factor for a coordinate to count
RELEVANCE_LOG_BF = 3.0


class _Scale(Protocol):
    def f(self, g: ArrayLike) -> np.ndarray: ...


class _Best(Protocol):
    @property
    def x(self) -> np.ndarray: ...

    @property
    def index(self) -> int: ...


class Posterior(Protocol):
    """What the rules read of an optimizer (`calibrate.optimizers.base.Optimizer` has it all)."""

    dim: int
    seed: int

    @property
    def scale(self) -> _Scale: ...

    @property
    def has_model(self) -> bool: ...

    @property
    def design_done(self) -> bool: ...

    @property
    def history(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...

    def best(self) -> _Best: ...

    def estimates(self) -> np.ndarray: ...

    def _latent(self, xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...

    def _latent_difference(self, xs: np.ndarray, x0: np.ndarray) -> np.ndarray: ...

    def _log_evidence(self, inputs: tuple[int, ...]) -> float: ...


def confidence_sample(opt: Posterior, center: np.ndarray) -> np.ndarray:
    """The stop rule's sample: Sobol points over the cube, and around `center`."""
    local = sobol(opt.dim, stream_seed(opt.seed, 10), CONFIDENCE_LOCAL)
    return np.vstack([sobol(opt.dim, stream_seed(opt.seed, 9), CONFIDENCE_SOBOL),
                      np.clip(center + (2.0 * local - 1.0) * CONFIDENCE_RADIUS, 0.0, 1.0)])


def improvement_bound(opt: Posterior) -> float:
    """How far below the incumbent's estimate f may plausibly lie anywhere in the cube, in f's
    units: the largest estimate − lower confidence bound over the stop rule's sample (≤ 0:
    nowhere).  NaN without a model."""
    if not opt.has_model:
        return math.nan
    best = opt.best()
    mean, sd = opt._latent(confidence_sample(opt, best.x))
    lower = opt.scale.f(mean - CONFIDENCE_Z * sd)
    return float(np.min(opt.estimates()) - np.min(lower))


def noise_tolerance(opt: Posterior) -> float:
    """The stop rule's tolerance, in f's units: the incumbent's reported standard error (the
    median reported one when its own is unknown), at least `STOP_FRACTION` of its estimate; NaN
    when no evaluation reported a noise."""
    _, ys, reported = opt.history
    if not len(ys):
        return math.nan
    best = opt.best()
    se = reported[best.index]
    if not math.isfinite(se):
        finite = reported[np.isfinite(reported)]
        se = float(np.median(finite)) if finite.size else math.nan
    estimate = float(np.min(opt.estimates()))
    return max(se, STOP_FRACTION * max(estimate, 0.0)) if math.isfinite(se) else math.nan


def improvement_ruled_out(opt: Posterior) -> bool:
    """The stop rule: the model is confident that no point of the cube beats the incumbent by
    more than the measured noise."""
    if not (opt.has_model and opt.design_done):
        return False
    tolerance = noise_tolerance(opt)
    return math.isfinite(tolerance) and bool(improvement_bound(opt) <= tolerance)


def indistinguishable(opt: Posterior) -> np.ndarray | None:
    """The range rule: the examined points whose f the model cannot tell apart from the
    incumbent's, the incumbent first, as rows (n, dim); None without a model."""
    if not opt.has_model:
        return None
    best = opt.best()
    sweeps = np.repeat(best.x[None, :], SWEEP_POINTS * opt.dim, axis=0)
    for j in range(opt.dim):
        sweeps[j * SWEEP_POINTS:(j + 1) * SWEEP_POINTS, j] = np.linspace(0.0, 1.0, SWEEP_POINTS)
    sample = confidence_sample(opt, best.x)
    points = np.vstack([best.x[None, :], sample, sweeps, opt.history[0]])
    mean, _ = opt._latent(points)  # the incumbent is the first point
    keep = mean - mean[0] <= RANGE_Z * opt._latent_difference(points, best.x)
    for j in irrelevant(opt):  # its whole sweep: every value of it
        start = 1 + len(sample) + j * SWEEP_POINTS
        keep[start:start + SWEEP_POINTS] = True
    return points[keep]


def irrelevant(opt: Posterior) -> list[int]:
    """The relevance rule: the coordinates the evaluations do not show f to depend on; none
    without a model, or in one dimension."""
    if not opt.has_model or opt.dim < 2:
        return []
    full = opt._log_evidence(tuple(range(opt.dim)))
    if not math.isfinite(full):
        return []
    out = []
    for j in range(opt.dim):
        reduced = opt._log_evidence(tuple(k for k in range(opt.dim) if k != j))
        if math.isfinite(reduced) and full - reduced < RELEVANCE_LOG_BF:
            out.append(j)
    return out
