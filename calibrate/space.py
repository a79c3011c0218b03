"""The search space x = <rate, delay, queue, loss> and its unit cube.

The paper (spec/pantheon.md §5.1) searches four numbers per link kind: the bottleneck link rate,
the one-way propagation delay, the DropTail threshold of the sender's queue and the i.i.d. uplink
loss rate.  Constant and Poisson deliveries are two separate searches over this same space, so the
link kind is not a dimension here.

The optimizers only ever see the unit cube [0, 1]^d of the *free* parameters; this module owns the
map between that cube and emulator parameters:

- rate (Mbit/s): log scale, because a 10 % error matters as much at 1 Mbit/s as at 100 Mbit/s;
- delay (ms, whole milliseconds): linear, since `mm-delay` takes integer milliseconds and the
  delay's effect on every scheme is additive;
- queue (packets, integer): log scale, because the queueing delay it allows is multiplicative in it;
- loss (fraction): the 2017 harness's log-with-zero map x = k·(10^t − 1), t linear in u, with knee
  k = 1e-4: logarithmic above the knee, linear below, and u = 0 is exactly zero loss.

A parameter can be fixed (ablations: "rate only", "+ delay", ...); a fixed parameter is not a
search dimension.  Bounds come from a target by `bounds_from_target` (rule documented there) and
can be overridden; the same per-scheme data gives the analytic `warm_start`.

The target input is plain data, so this module plugs into any Target class:
``stats: Mapping[scheme, (throughput Mbit/s, p95 one-way delay ms, loss fraction)]``, plus the
optional hint sets `saturating` and `delay_based` (scheme names).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from calibrate.errors import InputError

Scale = Literal["linear", "log", "log1p"]

#: All parameters in canonical order (the order of `SearchSpace.decode`'s columns).
PARAMETERS: tuple[str, ...] = ("rate", "delay", "queue", "loss")

#: Loss knee of the 2017 harness's map x = k·(10^(c·u) − 1) (spec/pantheon.md §5.1).
LOSS_KNEE = 1e-4

#: Bits per packet: Pantheon's tunnels and Mahimahi's trace opportunities are MTU-sized (1500 B).
MTU_BITS = 1500 * 8

# How each parameter is searched; only the bounds vary between targets.
_SPEC: dict[str, tuple[str, Scale, bool]] = {
    # name: (unit, scale, integer)
    "rate": ("Mbit/s", "log", False),
    "delay": ("ms", "linear", True),
    "queue": ("packets", "log", True),
    "loss": ("fraction", "log1p", False),
}

# Physical limits: what an emulator can be configured with at all.
_LIMITS: dict[str, tuple[float, float]] = {
    "rate": (1e-3, 1e5),
    "delay": (0.0, 1e4),
    "queue": (1.0, 1e7),
    "loss": (0.0, 0.99),
}

#: Schemes that keep sending until the DropTail queue overflows (loss-based TCPs and the
#: saturators): their best throughput approaches the bottleneck rate and their p95 delay
#: approaches propagation delay + a full queue.  Default hint when the caller gives none.
#: Pantheon's labels and calibrate.aliases' canonical names are both listed.
PANTHEON_SATURATING: frozenset[str] = frozenset({
    "saturator", "greg_saturator", "default_tcp", "tcp_cubic", "cubic", "reno", "verus",
    "pcc", "pcc_allegro", "quic", "quic_cubic", "quic-cubic",
})

#: Schemes that back off on rising delay and keep the queue short, so the loss they see is
#: (mostly) the path's random loss.  Default hint when the caller gives none.
PANTHEON_DELAY_BASED: frozenset[str] = frozenset({
    "vegas", "tcp_vegas", "ledbat", "copa", "sprout", "scream", "webrtc", "taova", "indigo",
    "vivace",
})


#: Packets the least-delayed scheme's p95 packet finds ahead of it: a delay-based scheme's
#: standing queue (~3) plus the delivery slot it waits for (`_estimate`).
QUEUED_PACKETS = 4


def packet_time_ms(rate_mbps: float) -> float:
    """Time one MTU-sized packet occupies the bottleneck, in ms (12 / rate); arrays work too."""
    return MTU_BITS / (rate_mbps * 1e3)


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
        lo_limit, hi_limit = _LIMITS[self.name]
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
    if name not in _SPEC:
        raise InputError(f"unknown parameter {name!r}; use one of {', '.join(PARAMETERS)}")
    unit, scale, integer = _SPEC[name]
    return Parameter(name, float(low), float(high), unit, scale, integer)


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
            lo, hi = _LIMITS[name]
            if not (math.isfinite(value) and lo <= value <= hi):
                raise InputError(f"fixed {name} = {value} is outside [{lo:g}, {hi:g}]")
            fixed[name] = round(value) if _SPEC[name][2] else value
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
        params = tuple(make_parameter(n, *bounds.get(n, _LIMITS[n])) for n in PARAMETERS)
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
        return {n: (int(x) if _SPEC[n][2] else float(x)) for n, x in zip(PARAMETERS, row)}

    def from_values(self, values: Mapping[str, float], *, clip: bool = False) -> np.ndarray:
        """{name: value} -> one unit-cube point (dim,). Fixed parameters may be omitted."""
        missing = [n for n in self.free if n not in values]
        if missing:
            raise InputError(f"values lack {', '.join(missing)}")
        row = [float(values.get(n, self.fixed.get(n, np.nan))) for n in PARAMETERS]
        return self.encode(np.array([row]), clip=clip)[0]


# ---------------------------------------------------------------------------------------------
# Bounds and warm start from a target

SchemeStats = tuple[float, float, float]
"""(mean throughput Mbit/s, mean p95 one-way delay ms, mean loss fraction) of one scheme."""


@dataclass(frozen=True)
class BoundsRule:
    """Knobs of `bounds_from_target`; the defaults are the documented rule."""

    #: rate bounds = warm-start rate × these factors (log-symmetric, warm start at u = 0.5)
    rate_factors: tuple[float, float] = (0.5, 2.0)
    #: delay upper bound = smallest p95 delay − this margin (ms); lower bound 0
    delay_margin_ms: float = 1.0
    #: queue bounds = warm-start queue ÷ / × this factor (log-symmetric)
    queue_factor: float = 4.0
    #: loss upper bound = min(cap, max(factor × smallest scheme loss, floor)); lower bound 0
    loss_factor: float = 2.0
    loss_cap: float = 0.1
    loss_floor: float = 0.01


def _check_stats(stats: Mapping[str, SchemeStats]) -> dict[str, tuple[float, float, float]]:
    if not stats:
        raise InputError("the target has no schemes; give at least one scheme's statistics")
    out = {}
    for scheme, s in stats.items():
        try:
            tput, delay, loss = (float(v) for v in s)
        except (TypeError, ValueError):
            raise InputError(f"statistics of {scheme} must be (throughput Mbit/s, p95 delay ms, "
                             f"loss fraction), got {s!r}") from None
        if not (tput > 0 and delay > 0 and 0 <= loss <= 1) or not all(
            map(math.isfinite, (tput, delay, loss))
        ):
            raise InputError(
                f"statistics of {scheme} are not usable: throughput {tput} Mbit/s and p95 delay "
                f"{delay} ms must be positive, loss {loss} a fraction in [0, 1] (not a percentage)"
            )
        out[scheme] = (tput, delay, loss)
    return out


def _present(stats: Mapping[str, object], hint: Collection[str] | None, default: frozenset[str]) -> list[str]:
    names = default if hint is None else set(hint)
    return [s for s in stats if s in names]


def _estimate(
    stats: Mapping[str, SchemeStats],
    saturating: Collection[str] | None,
    delay_based: Collection[str] | None,
    runtime_s: float | None = None,
) -> dict[str, float]:
    """The analytic estimate behind both the warm start and the bounds (unrounded).

    - loss: the median loss of the delay-based schemes, which keep the queue short and so see
      mostly the path's random loss (median: one of them, e.g. Vegas, sometimes fills the queue);
      without any, the smallest loss of all schemes (every scheme sees at least the random loss).
      Pantheon's loss is 1 − received/sent over the run, so the packets still in flight when the
      run stops count as lost: about one p95 delay's worth of sending, a fraction
      p95 / runtime.  With the target's `runtime_s` known, that is subtracted first (it is
      0.6 % for a 36 ms path and a 6 s run, as large as the random loss being estimated).
      That correction is itself uncertain by the packets a delay-based scheme keeps queued
      (`QUEUED_PACKETS` packet times of sending, over the runtime: 0.1 % in the same case), so
      a loss left below it is indistinguishable from none and is taken as 0 — a spurious
      0.02 % costs a loss-based scheme's short run a whole window halving.
    - rate: the best throughput of the saturating schemes (they keep the bottleneck busy), divided
      by (1 − loss) because Mahimahi's `mm-loss uplink` drops after the link; without any
      saturating scheme, the best throughput of all schemes.
    - delay: the smallest p95 delay of all schemes minus `QUEUED_PACKETS` packet times at that
      rate: the least-delayed scheme is a delay-based one, which keeps a few packets queued
      (Vegas α–β = 2–4, Copa 1/δ = 2), and its p95 packet also waits for a delivery slot.  (One
      packet time alone left the warm start 5–6 ms above a hidden 30 ms path whose Vegas p95
      was 36.3 ms.)
    - queue: the largest p95 delay of the saturating schemes (queue full) minus the delay
      estimate above (queue empty), times the rate, in packets.
    """
    stats = _check_stats(stats)
    sat = _present(stats, saturating, PANTHEON_SATURATING) or list(stats)
    dly = _present(stats, delay_based, PANTHEON_DELAY_BASED)
    best_tput = max(stats[s][0] for s in sat)
    # the in-flight correction's own resolution (0 when the runtime is unknown)
    resolution = QUEUED_PACKETS * packet_time_ms(best_tput) / 1e3 / runtime_s if runtime_s else 0.0

    def path_loss(s: str) -> float:
        tput, delay, loss = stats[s]
        return max(loss - (delay / 1e3 / runtime_s if runtime_s else 0.0), 0.0)

    loss = float(np.median([path_loss(s) for s in dly])) if dly else min(map(path_loss, stats))
    loss = 0.0 if loss < resolution else min(loss, _LIMITS["loss"][1])
    rate = best_tput / (1.0 - loss)
    base_delay = min(v[1] for v in stats.values())
    delay = max(base_delay - QUEUED_PACKETS * packet_time_ms(rate), 0.0)
    full_delay = max(stats[s][1] for s in sat)
    queue = max((full_delay - delay) * rate * 1e3 / MTU_BITS, 1.0)
    return {"rate": rate, "delay": delay, "queue": queue, "loss": loss, "base_delay": base_delay}


def bounds_from_target(
    stats: Mapping[str, SchemeStats],
    saturating: Collection[str] | None = None,
    delay_based: Collection[str] | None = None,
    rule: BoundsRule = BoundsRule(),
) -> dict[str, tuple[float, float]]:
    """Search bounds from a target's per-scheme statistics (pure; the rule, in full):

    - rate: [0.5, 2] × the warm-start rate (best saturating throughput / (1 − loss)), log scale;
    - delay: [0, smallest p95 delay − 1 ms]: the propagation delay cannot exceed the delay of the
      least-delayed scheme, whose packets also spend at least part of a delivery slot queued;
    - queue: [÷4, ×4] × the warm-start queue (full-queue delay − delay, × rate, packets), at
      least 1 packet;
    - loss: [0, min(10 %, max(2 × smallest loss of any scheme, 1 %))]: every scheme sees at
      least the random loss, so the least-lossy scheme's loss bounds it (× 2 for that scheme's
      run-to-run scatter); the floor keeps the dimension open.  Queue-filling schemes' losses
      (a saturator's tens of %) are overflow, not path loss, and must not widen the range.

    `stats` maps scheme -> (throughput Mbit/s, p95 delay ms, loss fraction); for multi-flow
    targets pass each scheme's whole-connection ("all") statistics.  Hints default to
    `PANTHEON_SATURATING` / `PANTHEON_DELAY_BASED`.  Integer parameters' bounds are rounded inward.
    """
    e = _estimate(stats, saturating, delay_based)
    loss_min = min(v[2] for v in _check_stats(stats).values())
    lo_f, hi_f = rule.rate_factors
    delay_hi = max(e["base_delay"] - rule.delay_margin_ms, 1.0)
    queue_lo = max(math.ceil(e["queue"] / rule.queue_factor), 1)
    queue_hi = max(math.floor(e["queue"] * rule.queue_factor), queue_lo + 1)
    return {
        "rate": (e["rate"] * lo_f, e["rate"] * hi_f),
        "delay": (0.0, float(math.floor(delay_hi))),
        "queue": (float(queue_lo), float(queue_hi)),
        "loss": (0.0, min(rule.loss_cap, max(rule.loss_factor * loss_min, rule.loss_floor))),
    }


def warm_start(
    stats: Mapping[str, SchemeStats],
    saturating: Collection[str] | None = None,
    delay_based: Collection[str] | None = None,
    runtime_s: float | None = None,
) -> dict[str, float]:
    """The analytic first guess {rate, delay, queue, loss} (formulas in `_estimate`).

    Delay and queue are rounded to whole ms / packets, as the emulator takes them.  Pass the
    result through `SearchSpace.from_values(..., clip=True)` to get its unit-cube point.
    """
    e = _estimate(stats, saturating, delay_based, runtime_s)
    return {"rate": e["rate"], "delay": int(round(e["delay"])), "queue": int(round(e["queue"])),
            "loss": e["loss"]}


def space_from_target(
    stats: Mapping[str, SchemeStats],
    saturating: Collection[str] | None = None,
    delay_based: Collection[str] | None = None,
    *,
    rule: BoundsRule = BoundsRule(),
    overrides: Mapping[str, tuple[float, float]] | None = None,
    fixed: Mapping[str, float] | None = None,
) -> SearchSpace:
    """`bounds_from_target`, with user `overrides` of some bounds, and some parameters `fixed`."""
    bounds = {**bounds_from_target(stats, saturating, delay_based, rule), **(overrides or {})}
    return SearchSpace.from_bounds(bounds, fixed)
