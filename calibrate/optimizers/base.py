"""The ask/tell contract every optimizer keeps, and the bookkeeping they share.

An optimizer minimizes a noisy function on the unit cube [0, 1]^dim (the free parameters of a
`calibrate.space.SearchSpace`).  The evaluation loop drives it:

    xs = opt.ask(n)             # n points; may be called again while earlier ones still run
    ...                         # evaluate (slowly, in parallel)
    opt.tell(xs, ys, noise)     # any subset, in any order, as results arrive
    opt.best()                  # the incumbent among evaluated points
    opt.expected_improvement_negligible()   # one of the stop signals (with budget and time)

No I/O happens inside.  Proposals are a pure function of (constructor arguments, history, pending
points, n): the random streams are seeded from the seed and the sizes of history and pending, so
an optimizer rebuilt from `state()` (the history is enough; `calibrate resume`) asks exactly what
the original would have asked with the same pending points.

Every optimizer proposes in the same order: the warm-start points first (each once), then a
scrambled Sobol initial design of `n_initial` points, then its model.  A point counts as used
once it is pending or told, so a resumed run re-proposes a warm-start or design point whose
evaluation was lost, and never one that was evaluated.
"""

from __future__ import annotations

import math
import warnings
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike

from calibrate.errors import InputError

#: Two points closer than this (max-norm in the unit cube) are the same point.
SAME_POINT = 1e-9

#: Default stop threshold: EI below this many percentage points of f is not worth an evaluation.
DEFAULT_EI_THRESHOLD = 0.1


#: How far (in its own reported standard errors) the model may pull a point's estimate of f
#: away from the point's measurement when choosing the incumbent (`Optimizer.estimates`).
INCUMBENT_SE = 2.0


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


def stream_seed(*parts: int) -> int:
    """A 32-bit seed from the optimizer's seed and the state sizes (reproducible streams)."""
    return int(np.random.SeedSequence([abs(int(p)) for p in parts]).generate_state(1)[0])


def sobol(dim: int, seed: int, n: int) -> np.ndarray:
    """The first n points of the scrambled Sobol sequence for `seed`."""
    from scipy.stats import qmc

    engine = qmc.Sobol(dim, scramble=True, seed=seed)
    with warnings.catch_warnings():
        # balance is a property of the whole design, which a run does not always use up
        warnings.simplefilter("ignore", UserWarning)
        return engine.random(n)


class Optimizer(ABC):
    """Base of all optimizers: history, pending points, warm starts, initial design, state."""

    #: the name used by the CLI (`--optimizer`) and in serialized state
    name: ClassVar[str]

    #: fewest observations a model needs; below it more design points are proposed
    min_observations: ClassVar[int] = 2

    def __init__(
        self,
        dim: int,
        *,
        seed: int = 0,
        warm_start: Sequence[ArrayLike] = (),
        n_initial: int | None = None,
        ei_threshold: float = DEFAULT_EI_THRESHOLD,
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
        self.ei_threshold = float(ei_threshold)
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
             noise: Sequence[float] | None = None) -> None:
        """Record evaluations: f(xs[i]) = ys[i] with standard error noise[i] (NaN = unknown).

        Points need not have been asked (e.g. evaluated elsewhere); asked ones stop being pending.
        """
        xs = [_as_point(x, self.dim, "told point") for x in xs]
        ys = [float(y) for y in ys]
        noise = [math.nan] * len(xs) if noise is None else [
            math.nan if v is None else float(v) for v in noise]
        if not len(xs) == len(ys) == len(noise):
            raise InputError(f"tell got {len(xs)} points, {len(ys)} values and {len(noise)} "
                             f"noise estimates; give one of each per point")
        for x, y, s in zip(xs, ys, noise):
            if not math.isfinite(y):
                raise InputError(f"f({x}) = {y} is not a number; penalize failed evaluations "
                                 f"(calibrate.objective) instead of telling NaN")
            if s < 0:
                raise InputError(f"noise {s} at {x} is negative; give a standard error ≥ 0")
        for x, y, s in zip(xs, ys, noise):
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
        that the replicates show are real (runs over a lossless link repeat to 0.0 %: a 2.3 %
        warm start lost to a 3.8 % point whose posterior mean was lower).  So the posterior
        mean is kept within `INCUMBENT_SE` of the point's own reported standard errors of its
        measurement; a point without a reported noise takes the posterior mean, and without a
        model the observations are the estimates.
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
        if len(self._y) < self.min_observations:
            return None
        return self._posterior_mean(np.array(self._x))

    def expected_improvement(self) -> float:
        """The largest expected improvement of one more evaluation, in f's units (NaN: no model)."""
        if len(self._y) < self.min_observations:
            return math.nan
        return self._max_expected_improvement()

    def expected_improvement_negligible(self, threshold: float | None = None) -> bool:
        """Stop signal: EI everywhere is below `threshold` (default `ei_threshold`, f's units).

        Never true before the warm starts and the initial design are evaluated, nor for an
        optimizer without a model.
        """
        if len(self._y) < len(self.warm_start) + self.n_initial:
            return False
        ei = self.expected_improvement()
        return bool(ei < (self.ei_threshold if threshold is None else threshold))

    # -- views and state

    @property
    def history(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(xs (n, dim), ys (n,), noise (n,)) in the order told."""
        return (np.array(self._x).reshape(-1, self.dim), np.array(self._y), np.array(self._noise))

    @property
    def pending(self) -> list[np.ndarray]:
        return [x.copy() for x in self._pending]

    def options(self) -> dict[str, Any]:
        """Constructor keyword arguments beyond the common ones (JSON-able)."""
        return {}

    def state(self) -> dict[str, Any]:
        """Everything needed to rebuild this optimizer (JSON-able; NaN noise becomes None)."""
        return {
            "optimizer": self.name,
            "dim": self.dim,
            "seed": self.seed,
            "n_initial": self.n_initial,
            "ei_threshold": self.ei_threshold,
            "warm_start": [x.tolist() for x in self.warm_start],
            "options": self.options(),
            "x": [x.tolist() for x in self._x],
            "y": list(self._y),
            "noise": [None if math.isnan(s) else s for s in self._noise],
        }

    # -- shared helpers

    def _design(self, n: int) -> np.ndarray:
        """Enough of this seed's Sobol sequence to find n unused design points."""
        return sobol(self.dim, stream_seed(self.seed, 1), n + len(self.warm_start) + self.n_initial)

    @staticmethod
    def _design_used(design: np.ndarray, used: Sequence[np.ndarray]) -> int:
        return sum(find_point(d, used) >= 0 for d in design)

    def _invalidate(self) -> None:
        """Drop caches that depend on the history (models)."""

    # -- what a model-based optimizer supplies

    @abstractmethod
    def _propose(self, n: int, pending: np.ndarray) -> Sequence[np.ndarray]:
        """n points from the model, given pending points (m, dim) still being evaluated."""

    def _posterior_mean(self, xs: np.ndarray) -> np.ndarray | None:
        return None

    def _max_expected_improvement(self) -> float:
        return math.nan
