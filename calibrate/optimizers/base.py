"""The ask/tell contract every optimizer keeps, and the bookkeeping they share.

An optimizer minimizes a noisy function on the unit cube [0, 1]^dim (the free parameters of a
`calibrate.space.SearchSpace`).  The evaluation loop drives it:

    xs = opt.ask(n)             # n points; may be called again while earlier ones still run
    ...                         # evaluate (slowly, in parallel)
    opt.tell(xs, ys, noise)     # any subset, in any order, as results arrive
    opt.best()                  # the incumbent among evaluated points
    opt.improvement_ruled_out() # the model is confident no point beats the incumbent (stop rule)
    opt.ask_among(points)       # the model's pick among given points (a local refinement's)

No I/O happens inside.  Proposals are a pure function of (constructor arguments, history, pending
points, n): the random streams are seeded from the seed and the sizes of history and pending, so
an optimizer made with the same arguments and told the same history in the same order (what
`calibrate resume` does from the run's journal) asks exactly what the original would have asked
with the same pending points.

Every optimizer proposes in the same order: the warm-start points first (each once), then a
scrambled Sobol initial design of `n_initial` points, then its model.  A point counts as used
once it is pending or told, so a resumed run re-proposes a warm-start or design point whose
evaluation was lost, and never one that was evaluated.

The statistical rules the loop asks about (`improvement_ruled_out`, `indistinguishable`,
`irrelevant`) are `calibrate.optimizers.rules`, applied to the posterior a model-based optimizer
supplies through the hooks at the end of `Optimizer`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.typing import ArrayLike

from calibrate.errors import InputError
from calibrate.optimizers import rules
from calibrate.optimizers.streams import sobol, stream_seed

#: Two points closer than this (max-norm in the unit cube) are the same point.
SAME_POINT = 1e-9


#: How far (in its own reported standard errors) the model may pull a point's estimate of f
#: away from the point's measurement when choosing the incumbent (`Optimizer.estimates`).
INCUMBENT_SE = 2.0


@dataclass(frozen=True)
class OutcomeScale:
    """The scale g on which a model sees f, an increasing function of it: f itself, or
    g = log(f + log_offset) for a log-warped model.  Posterior quantiles of the latent g map to
    quantiles of f through `f`; the models' Gaussian statements are made on g."""

    log_offset: float | None = None

    def g(self, f: ArrayLike) -> np.ndarray:
        f = np.asarray(f, dtype=float)
        return f if self.log_offset is None else np.log(np.maximum(f, 0.0) + self.log_offset)

    def f(self, g: ArrayLike) -> np.ndarray:
        g = np.asarray(g, dtype=float)
        return g if self.log_offset is None else np.exp(g) - self.log_offset

    def se(self, f: ArrayLike, se: ArrayLike) -> np.ndarray:
        """A standard error `se` of f, at f, on the g scale (delta method)."""
        se = np.asarray(se, dtype=float)
        return se if self.log_offset is None else se / (np.maximum(f, 0.0) + self.log_offset)


@dataclass(frozen=True)
class Best:
    """The incumbent: an evaluated point, its observed f and, for model-based optimizers, the
    model's posterior mean there (see `Optimizer.estimates` for how the choice is made)."""

    x: np.ndarray
    y: float
    mean: float | None
    index: int  # position in the history


def _as_point(x: ArrayLike, dim: int, what: str) -> np.ndarray:
    p = np.asarray(x, dtype=float).reshape(-1)
    if p.shape != (dim,):
        raise InputError(f"{what} has {p.size} coordinates; this optimizer searches {dim}")
    if not np.all(np.isfinite(p)) or np.any(p < -SAME_POINT) or np.any(p > 1 + SAME_POINT):
        raise InputError(f"{what} {p} is not in the unit cube [0, 1]^{dim}; map it with "
                         f"SearchSpace.from_values(..., clip=True)")
    return np.clip(p, 0.0, 1.0)


def choice(option: str, value: str, allowed: tuple[str, str]) -> str:
    """An optimizer option that takes one of two words, checked with one message."""
    if value not in allowed:
        raise InputError(f"{option} must be {allowed[0]!r} or {allowed[1]!r}, got {value!r}")
    return value


def find_point(x: np.ndarray, points: Sequence[np.ndarray]) -> int:
    for i, p in enumerate(points):
        if np.max(np.abs(p - x)) <= SAME_POINT:
            return i
    return -1


class Optimizer(ABC):
    """Base of all optimizers: history, pending points, warm starts, initial design."""

    #: the name used by the CLI (`--optimizer`)
    name: ClassVar[str]

    #: fewest observations a model needs; below it more design points are proposed
    min_observations: ClassVar[int] = 2

    #: whether a model stands behind the proposals (the stop and range rules need one)
    model_based: ClassVar[bool] = True

    #: the scale the model sees f on (a log-warped model sets its own)
    scale: OutcomeScale = OutcomeScale()

    def __init__(
        self,
        dim: int,
        *,
        seed: int = 0,
        warm_start: Sequence[ArrayLike] = (),
        n_initial: int | None = None,
    ) -> None:
        if not (isinstance(dim, (int, np.integer)) and dim >= 1):
            raise InputError(f"dim must be a positive integer, got {dim!r}; fix fewer parameters")
        self.dim = int(dim)
        self.seed = int(seed)
        self.warm_start = [_as_point(x, self.dim, "warm-start point") for x in warm_start]
        # Sobol design size: 2·dim is the usual small design for a GP in a few dimensions
        self.n_initial = 2 * self.dim if n_initial is None else int(n_initial)
        if self.n_initial < 0:
            raise InputError(f"n_initial must be ≥ 0, got {n_initial}")
        self._x: list[np.ndarray] = []
        self._y: list[float] = []
        self._noise: list[float] = []
        self._pending: list[np.ndarray] = []

    # -- the contract

    def ask(self, n: int = 1) -> list[np.ndarray]:
        """n new points to evaluate, given the history and the points still pending."""
        if not (isinstance(n, (int, np.integer)) and n >= 1):
            raise InputError(f"ask(n) needs n ≥ 1, got {n!r}")
        out: list[np.ndarray] = []
        used = self._x + self._pending
        for x in self.warm_start:
            if len(out) < n and find_point(x, used + out) < 0:
                out.append(x.copy())
        design = self._design(len(self._x) + len(self._pending) + n)
        while len(out) < n and (self._design_used(design, used + out) < self.n_initial
                                or len(self._y) < self.min_observations):
            out.append(next(d for d in design if find_point(d, used + out) < 0).copy())
        if len(out) < n:
            batch = self._propose(n - len(out), np.array(self._pending + out).reshape(-1, self.dim))
            out.extend(np.clip(np.asarray(b, dtype=float), 0.0, 1.0) for b in batch)
        self._pending.extend(out)
        return [x.copy() for x in out]

    def tell(self, xs: Sequence[ArrayLike], ys: Sequence[float],
             noise: Sequence[float | None] | None = None) -> None:
        """Record evaluations: f(xs[i]) = ys[i] with standard error noise[i] (NaN or None = unknown).

        Points need not have been asked (e.g. evaluated elsewhere); asked ones stop being pending.
        """
        points = [_as_point(x, self.dim, "told point") for x in xs]
        values = [float(y) for y in ys]
        errors = [math.nan] * len(points) if noise is None else [
            math.nan if v is None else float(v) for v in noise]
        if not len(points) == len(values) == len(errors):
            raise InputError(f"tell got {len(points)} points, {len(values)} values and {len(errors)} "
                             f"noise estimates; give one of each per point")
        for x, y, s in zip(points, values, errors, strict=True):
            if not math.isfinite(y):
                raise InputError(f"f({x}) = {y} is not a number; penalize failed evaluations "
                                 f"(calibrate.objective) instead of telling NaN")
            if s < 0:
                raise InputError(f"noise {s} at {x} is negative; give a standard error ≥ 0")
        for x, y, s in zip(points, values, errors, strict=True):
            i = find_point(x, self._pending)
            if i >= 0:
                del self._pending[i]
            self._x.append(x)
            self._y.append(y)
            self._noise.append(s)
        self._invalidate()

    def cancel(self, xs: Sequence[ArrayLike]) -> None:
        """Forget pending points whose evaluation was abandoned (they may be proposed again)."""
        for x in xs:
            i = find_point(_as_point(x, self.dim, "cancelled point"), self._pending)
            if i >= 0:
                del self._pending[i]

    def best(self) -> Best:
        """The evaluated point with the lowest `estimates` (lowest observation without a model)."""
        if not self._y:
            raise InputError("no evaluation has been told yet; tell results before asking best()")
        means = self._means()
        i = int(np.argmin(self._estimates(means)))
        return Best(self._x[i].copy(), self._y[i], None if means is None else float(means[i]), i)

    def estimates(self) -> np.ndarray:
        """f at each evaluated point as the incumbent choice sees it (history order).

        With noisy f the lowest observation is often a lucky draw, so a model's posterior mean
        is the usual estimate; but a fitted homoskedastic noise also smooths away differences
        that the replicates show are real (runs over a lossless link repeat exactly).  So the
        posterior mean is kept within `INCUMBENT_SE` of the point's own reported standard errors
        of its measurement; a point without a reported noise takes the posterior mean, and
        without a model the observations are the estimates.
        """
        return self._estimates(self._means())

    def _estimates(self, means: np.ndarray | None) -> np.ndarray:
        """`estimates` from the posterior means at the evaluated points, already computed."""
        y = np.array(self._y, dtype=float)
        if means is None:
            return y
        se = np.array(self._noise, dtype=float)
        reach = INCUMBENT_SE * np.where(np.isfinite(se), se, np.inf)
        return np.clip(means, y - reach, y + reach)

    def _means(self) -> np.ndarray | None:
        """The model's posterior mean at the evaluated points (None: no model yet)."""
        if not self.has_model:
            return None
        return self._posterior_mean(np.array(self._x))

    def _posterior_mean(self, xs: np.ndarray) -> np.ndarray:
        """The posterior mean of f at xs (n, dim): the latent mean mapped back to f's units (for a
        log-warped model the median of the log-normal)."""
        mean, _ = self._latent(xs)
        return self.scale.f(mean)

    @property
    def has_model(self) -> bool:
        return self.model_based and len(self._y) >= self.min_observations

    @property
    def design_done(self) -> bool:
        """Whether the warm starts and the initial design have been told (the stop rule waits)."""
        return len(self._y) >= max(len(self.warm_start) + self.n_initial, self.min_observations)

    def expected_improvement(self) -> float:
        """The largest expected improvement of one more evaluation, in f's units (NaN: no model).
        A diagnostic, not a stop signal (the stop rule, `calibrate.optimizers.rules`, says why)."""
        if not self.has_model:
            return math.nan
        return self._max_expected_improvement()

    # -- the statistical rules (`calibrate.optimizers.rules`, where they are documented)

    def improvement_bound(self) -> float:
        """How far below the incumbent's estimate f may plausibly lie anywhere in the cube, in
        f's units (≤ 0: nowhere); NaN without a model."""
        return rules.improvement_bound(self)

    def noise_tolerance(self) -> float:
        """The stop rule's tolerance, in f's units; NaN when no evaluation reported a noise."""
        return rules.noise_tolerance(self)

    def improvement_ruled_out(self) -> bool:
        """The stop rule: the model is confident that no point of the cube beats the incumbent by
        more than the measured noise."""
        return rules.improvement_ruled_out(self)

    def indistinguishable(self) -> np.ndarray | None:
        """The range rule: the examined points whose f the model cannot tell apart from the
        incumbent's, the incumbent first, as rows (n, dim); None without a model."""
        return rules.indistinguishable(self)

    def irrelevant(self) -> list[int]:
        """The relevance rule: the coordinates the evaluations do not show f to depend on; none
        without a model, or in one dimension."""
        return rules.irrelevant(self)

    def ask_among(self, points: Sequence[ArrayLike], n: int = 1) -> list[np.ndarray]:
        """Up to n of the given points (e.g. a local refinement's neighbours of the incumbent)
        that are neither evaluated nor pending, the lowest posterior means first (in the given
        order without a model); they become pending like `ask`'s points.  Fewer than n, or
        none, when fewer remain."""
        if not (isinstance(n, (int, np.integer)) and n >= 1):
            raise InputError(f"ask_among(points, n) needs n ≥ 1, got {n!r}")
        fresh: list[np.ndarray] = []
        for p in points:
            x = _as_point(p, self.dim, "proposed point")
            if find_point(x, self._x + self._pending + fresh) < 0:
                fresh.append(x)
        if fresh and self.has_model:
            order = np.argsort(self._posterior_mean(np.array(fresh)), kind="stable")
            fresh = [fresh[i] for i in order]
        out = fresh[:n]
        self._pending.extend(out)
        return [x.copy() for x in out]

    # -- views

    @property
    def history(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(xs (n, dim), ys (n,), noise (n,)) in the order told."""
        return (np.array(self._x).reshape(-1, self.dim), np.array(self._y), np.array(self._noise))

    @property
    def pending(self) -> list[np.ndarray]:
        return [x.copy() for x in self._pending]

    # -- shared helpers

    def _design(self, n: int) -> np.ndarray:
        """Enough of this seed's Sobol sequence to find n unused design points."""
        return sobol(self.dim, stream_seed(self.seed, 1), n + len(self.warm_start) + self.n_initial)

    @staticmethod
    def _design_used(design: np.ndarray, used: Sequence[np.ndarray]) -> int:
        return sum(find_point(d, used) >= 0 for d in design)

    def _invalidate(self) -> None:  # noqa: B027  a hook: optimizers without caches need no override
        """Drop caches that depend on the history (models)."""

    # -- what a model-based optimizer supplies

    @abstractmethod
    def _propose(self, n: int, pending: np.ndarray) -> Sequence[np.ndarray]:
        """n points from the model, given pending points (m, dim) still being evaluated."""

    def _latent(self, xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The posterior of the latent f (no observation noise) at xs (n, dim) on the model's
        outcome scale `scale`: (mean, standard deviation).  Only called when `has_model`."""
        raise NotImplementedError(f"{self.name} has no model")

    def _latent_difference(self, xs: np.ndarray, x0: np.ndarray) -> np.ndarray:
        """The posterior standard deviation of g(x) − g(x0) for each x of xs (n, dim), on the
        model's outcome scale.  This default takes the two as independent (wider than the joint
        posterior near x0); an optimizer with a joint posterior overrides it."""
        _, sd = self._latent(np.vstack([x0[None, :], xs]))
        return np.sqrt(sd[1:] ** 2 + sd[0] ** 2)

    def _log_evidence(self, inputs: tuple[int, ...]) -> float:
        """The log marginal likelihood of the evaluations under the model fitted on the unit
        cube's coordinates `inputs` only (all of them: the model itself), on a scale common to
        every subset; NaN where the optimizer cannot refit."""
        return math.nan

    def _max_expected_improvement(self) -> float:
        return math.nan
