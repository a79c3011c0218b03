"""The search space x = <rate, delay, queue, loss> and its unit cube.

The Pantheon paper (USENIX ATC 2018, §5) searches four numbers per link kind: the bottleneck link
rate, the one-way propagation delay, the DropTail threshold of the sender's queue and the i.i.d.
uplink loss rate.  Constant and Poisson deliveries are two separate searches over this same space,
so the link kind is not a dimension here.

The optimizers only ever see the unit cube [0, 1]^d of the *free* parameters; this module owns the
map between that cube and emulator parameters (each one's scale is its row of
`calibrate.parameters.PARAMETER_TABLE`):

- rate (Mbit/s): log scale, because a 10 % error matters as much at 1 Mbit/s as at 100 Mbit/s;
- delay (ms, whole milliseconds): linear, since `mm-delay` takes integer milliseconds and the
  delay's effect on every scheme is additive;
- queue (packets, integer): log scale, because the queueing delay it allows is multiplicative in it;
- loss (fraction): the 2017 harness's log-with-zero map x = k·(10^t − 1), t linear in u, with knee
  k = 1e-4: logarithmic above the knee, linear below, and u = 0 is exactly zero loss.

A parameter can be fixed (ablations: "rate only", "+ delay", ...); a fixed parameter is not a
search dimension.  The bounds are given (`SearchSpace.from_bounds`); what a target says about them,
and the warm start, is `calibrate.physics`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

import numpy as np
from numpy.typing import ArrayLike

from calibrate.errors import InputError
from calibrate.parameters import PARAMETER_TABLE, PARAMETERS, Scale

#: Loss knee of the 2017 harness's map x = k·(10^(c·u) − 1) (Pantheon's calibration harness,
#: `proxy_master.py` in StanfordLPNG/replication_with_emulation).
LOSS_KNEE = 1e-4


# ---------------------------------------------------------------------------------------------
# One parameter


def _warp(x: np.ndarray, scale: Scale) -> np.ndarray:
    """The coordinate in which the parameter is searched linearly."""
    if scale == "log":
        return np.log(x)
    if scale == "log1p":
        return np.log10(1.0 + x / LOSS_KNEE)
    return x


def _unwarp(t: np.ndarray, scale: Scale) -> np.ndarray:
    if scale == "log":
        return np.exp(t)
    if scale == "log1p":
        return LOSS_KNEE * (10.0**t - 1.0)
    return t


@dataclass(frozen=True)
class Parameter:
    """One emulator parameter with bounds [low, high] and the scale it is searched on."""

    name: str
    low: float
    high: float
    unit: str
    scale: Scale
    integer: bool

    def __post_init__(self) -> None:
        lo_limit, hi_limit = PARAMETER_TABLE[self.name].limits
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            raise InputError(f"bounds of {self.name} must be finite numbers, got "
                             f"({self.low}, {self.high})")
        if not self.low < self.high:
            raise InputError(
                f"bounds of {self.name} are empty: low {self.low:g} must be below high "
                f"{self.high:g} {self.unit}; widen them, or fix {self.name} instead"
            )
        if self.low < lo_limit or self.high > hi_limit:
            raise InputError(
                f"bounds of {self.name} ({self.low:g}, {self.high:g}) {self.unit} leave the "
                f"range an emulator accepts [{lo_limit:g}, {hi_limit:g}]; narrow them"
            )
        if self.integer and self.high - self.low < 1:
            raise InputError(
                f"bounds of {self.name} ({self.low:g}, {self.high:g}) hold no two whole "
                f"{self.unit}; widen them, or fix {self.name} instead"
            )

    def from_unit(self, u: ArrayLike) -> np.ndarray:
        """Unit-cube coordinate(s) -> value(s); integers are rounded to the nearest whole."""
        u = np.clip(np.asarray(u, dtype=float), 0.0, 1.0)
        t_lo, t_hi = _warp(np.array([self.low, self.high]), self.scale)
        x = _unwarp(t_lo + u * (t_hi - t_lo), self.scale)
        if self.integer:
            x = np.clip(np.rint(x), math.ceil(self.low), math.floor(self.high))
        # exp/log round trips can step a hair outside; the bounds are a contract
        return np.clip(x, self.low, self.high)

    def to_unit(self, value: ArrayLike) -> np.ndarray:
        """Value(s) -> unit-cube coordinate(s). Values must lie within the bounds."""
        x = np.asarray(value, dtype=float)
        t_lo, t_hi = _warp(np.array([self.low, self.high]), self.scale)
        return (_warp(x, self.scale) - t_lo) / (t_hi - t_lo)


def make_parameter(name: str, low: float, high: float) -> Parameter:
    """A parameter of the standard kind (unit, scale, integrality) with the given bounds."""
    if name not in PARAMETER_TABLE:
        raise InputError(f"unknown parameter {name!r}; use one of {', '.join(PARAMETERS)}")
    spec = PARAMETER_TABLE[name]
    return Parameter(name, float(low), float(high), spec.unit, spec.scale, spec.integer)


# ---------------------------------------------------------------------------------------------
# The space


@dataclass(frozen=True, eq=False)
class SearchSpace:
    """Bounds for all four parameters, some of them fixed; the free ones span the unit cube.

    `parameters` always holds all four in `PARAMETERS` order (a fixed parameter keeps its bounds
    so that it can be freed again); `fixed` maps fixed names to their values.
    """

    parameters: tuple[Parameter, ...]
    fixed: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        names = tuple(p.name for p in self.parameters)
        if names != PARAMETERS:
            raise InputError(f"a search space needs the parameters {PARAMETERS}, got {names}")
        unknown = set(self.fixed) - set(PARAMETERS)
        if unknown:
            raise InputError(f"cannot fix unknown parameter(s) {sorted(unknown)}; "
                             f"use {', '.join(PARAMETERS)}")
        fixed = {}
        for name, value in self.fixed.items():
            value = float(value)
            lo, hi = PARAMETER_TABLE[name].limits
            if not (math.isfinite(value) and lo <= value <= hi):
                raise InputError(f"fixed {name} = {value} is outside [{lo:g}, {hi:g}]")
            fixed[name] = round(value) if PARAMETER_TABLE[name].integer else value
        # a private read-only copy in canonical order, so the frozen space cannot change under
        # a caller's dict
        ordered = {n: fixed[n] for n in PARAMETERS if n in fixed}
        object.__setattr__(self, "fixed", MappingProxyType(ordered))

    def __hash__(self) -> int:
        return hash((self.parameters, tuple(self.fixed.items())))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SearchSpace):
            return NotImplemented
        return self.parameters == other.parameters and dict(self.fixed) == dict(other.fixed)

    @classmethod
    def from_bounds(
        cls, bounds: Mapping[str, tuple[float, float]], fixed: Mapping[str, float] | None = None
    ) -> SearchSpace:
        """A space from {name: (low, high)} for every parameter that is not fixed.

        A fixed parameter needs no bounds; it gets the degenerate-safe placeholder of its
        physical limits.
        """
        fixed = dict(fixed or {})
        missing = [n for n in PARAMETERS if n not in bounds and n not in fixed]
        if missing:
            raise InputError(f"no bounds for {', '.join(missing)}; give (low, high) or fix them")
        params = tuple(make_parameter(n, *bounds.get(n, PARAMETER_TABLE[n].limits)) for n in PARAMETERS)
        return cls(params, fixed)

    # -- views

    @property
    def free(self) -> tuple[str, ...]:
        """Names of the searched parameters, in order of the unit-cube coordinates."""
        return tuple(n for n in PARAMETERS if n not in self.fixed)

    @property
    def dim(self) -> int:
        return len(self.free)

    @property
    def bounds(self) -> dict[str, tuple[float, float]]:
        return {p.name: (p.low, p.high) for p in self.parameters}

    def parameter(self, name: str) -> Parameter:
        if name not in PARAMETERS:
            raise InputError(f"unknown parameter {name!r}; use one of {', '.join(PARAMETERS)}")
        return self.parameters[PARAMETERS.index(name)]

    # -- derived spaces (ablations, overrides)

    def fix(self, **values: float) -> SearchSpace:
        """The same space with `values` fixed (no longer searched)."""
        return replace(self, fixed={**self.fixed, **values})

    def unfix(self, *names: str) -> SearchSpace:
        return replace(self, fixed={n: v for n, v in self.fixed.items() if n not in names})

    def with_bounds(self, **bounds: tuple[float, float]) -> SearchSpace:
        """The same space with some bounds overridden, e.g. ``with_bounds(rate=(1, 20))``."""
        for name in bounds:
            self.parameter(name)  # validates the name
        params = tuple(
            make_parameter(p.name, *bounds[p.name]) if p.name in bounds else p
            for p in self.parameters
        )
        return replace(self, parameters=params)

    # -- the map, vectorized: rows are points

    def decode(self, u: ArrayLike) -> np.ndarray:
        """Unit-cube points (n, dim) -> parameter values (n, 4) in `PARAMETERS` order."""
        u = np.atleast_2d(np.asarray(u, dtype=float))
        if u.shape[1] != self.dim:
            raise InputError(f"points have {u.shape[1]} coordinates but the space has "
                             f"{self.dim} free parameters {self.free}")
        out = np.empty((u.shape[0], len(PARAMETERS)))
        free = iter(range(self.dim))
        for j, p in enumerate(self.parameters):
            out[:, j] = self.fixed[p.name] if p.name in self.fixed else p.from_unit(u[:, next(free)])
        return out

    def encode(self, values: ArrayLike, *, clip: bool = False) -> np.ndarray:
        """Parameter values (n, 4) in `PARAMETERS` order -> unit-cube points (n, dim).

        Values of fixed parameters are ignored.  A value outside its bounds is an error unless
        `clip` (used for warm starts, which may fall outside bounds a user overrode).
        """
        v = np.atleast_2d(np.asarray(values, dtype=float))
        if v.shape[1] != len(PARAMETERS):
            raise InputError(f"values need {len(PARAMETERS)} columns {PARAMETERS}, got {v.shape[1]}")
        cols = []
        for j, p in enumerate(self.parameters):
            if p.name in self.fixed:
                continue
            x = v[:, j]
            if clip:
                x = np.clip(x, p.low, p.high)
            elif np.any((x < p.low - 1e-9 * abs(p.low)) | (x > p.high + 1e-9 * abs(p.high))):
                raise InputError(
                    f"{p.name} = {x} {p.unit} is outside the bounds ({p.low:g}, {p.high:g}); "
                    f"widen the bounds or pass a value inside them"
                )
            cols.append(np.clip(p.to_unit(x), 0.0, 1.0))
        return np.stack(cols, axis=1) if cols else np.empty((v.shape[0], 0))

    # -- the map, one point as a mapping (what an EmulatorConfig is built from)

    def to_values(self, u: ArrayLike) -> dict[str, float]:
        """One unit-cube point (dim,) -> {name: value} for all four parameters."""
        row = self.decode(np.asarray(u, dtype=float).reshape(1, -1))[0]
        return {n: (int(x) if PARAMETER_TABLE[n].integer else float(x)) for n, x in zip(PARAMETERS, row, strict=True)}

    def from_values(self, values: Mapping[str, float], *, clip: bool = False) -> np.ndarray:
        """{name: value} -> one unit-cube point (dim,). Fixed parameters may be omitted."""
        missing = [n for n in self.free if n not in values]
        if missing:
            raise InputError(f"values lack {', '.join(missing)}")
        row = [float(values.get(n, self.fixed.get(n, np.nan))) for n in PARAMETERS]
        return self.encode(np.array([row]), clip=clip)[0]
