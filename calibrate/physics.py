"""Target physics: what a target's measurements say about the emulator that made it.

`bounds_from_target` gives search bounds that contain that emulator (the rule, documented there,
is physical: it holds whatever the target's schemes), which may be overridden
(`space_from_target` makes the `calibrate.space.SearchSpace`); the same data gives the analytic
`warm_start`, a heuristic clipped into them.

The target input is plain data, so this module plugs into any Target class:
``stats: Mapping[scheme, SchemeMeasurement]`` (aggregates and run-to-run scatter; a bare
(throughput Mbit/s, p95 one-way delay ms, loss fraction) triple also does), the optional
per-packet `calibrate.evidence.PathEvidence`, the runs' length, and the optional hint sets
`saturating`, `delay_based` and `rate_probing` (scheme names).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass

import numpy as np

from calibrate.errors import InputError
from calibrate.evidence import LINK_TICK_MS, PathEvidence
from calibrate.metrics import Stats
from calibrate.parameters import PARAMETER_TABLE, PARAMETERS
from calibrate.scheme_registry import having
from calibrate.space import LOSS_KNEE, SearchSpace

#: Bits per packet: Pantheon's tunnels and Mahimahi's trace opportunities are MTU-sized (1500 B).
MTU_BITS = 1500 * 8

#: Seconds per run when a target does not say (Pantheon's -t default).
DEFAULT_RUNTIME_S = 30.0

# The default hints, when the caller gives none, are the schemes' characters in the registry file
# (calibrate/data/schemes.json, `calibrate.scheme_registry`): every name and label of the schemes
# with that character, Pantheon's and ours.

#: Schemes that keep sending until the DropTail queue overflows (loss-based TCPs and the
#: saturators): their best throughput approaches the bottleneck rate and their p95 delay
#: approaches propagation delay + a full queue.
SATURATING: frozenset[str] = having("saturating")

#: Schemes that back off on rising delay and keep the queue short, so the loss they see is
#: (mostly) the path's random loss.
DELAY_BASED: frozenset[str] = having("delay-based")


#: Packets the least-delayed scheme's p95 packet finds ahead of it: a delay-based scheme's
#: standing queue (~3) plus the delivery slot it waits for (`_estimate`).
QUEUED_PACKETS = 4


def packet_time_ms(rate_mbps: float) -> float:
    """Time one MTU-sized packet occupies the bottleneck, in ms (12 / rate); arrays work too."""
    return MTU_BITS / (rate_mbps * 1e3)


# ---------------------------------------------------------------------------------------------
# Bounds and warm start from a target

SchemeStats = tuple[float, float, float]
"""(mean throughput Mbit/s, mean p95 one-way delay ms, mean loss fraction) of one scheme."""


@dataclass(frozen=True)
class SchemeMeasurement:
    """One scheme's target statistics: aggregates over its runs and their run-to-run scatter.

    A bare `SchemeStats` triple stands for one run with no scatter known.
    """

    throughput: float  # Mbit/s
    delay: float  # p95 one-way delay, ms
    loss: float  # fraction, not percent
    throughput_sd: float = 0.0  # standard deviation over the runs (Pantheon's: ddof 0)
    delay_sd: float = 0.0
    loss_sd: float = 0.0
    runs: int = 1

    def packets(self, runtime_s: float) -> float:
        """MTU packets this scheme delivered over all its runs (at least 1)."""
        return max(self.throughput * 1e6 * runtime_s * self.runs / MTU_BITS, 1.0)


#: Schemes that keep the bottleneck busy whatever the random loss (below `BoundsRule.busy_loss_max`):
#: their sending rate follows the delivery rate they measure (BBR's pacing at its bandwidth
#: estimate, the saturators' 1.2–1.25 × the delivered rate), not a loss-driven window.  Their
#: throughput bounds the link rate from above.  Default hint: the registry's "rate-probing".
RATE_PROBING: frozenset[str] = having("rate-probing")


@dataclass(frozen=True)
class BoundsRule:
    """The constants of `bounds_from_target`'s rule (documented there); defaults are the rule."""

    #: run-to-run standard deviations of a scheme's aggregate counted as its measurement noise
    noise_sds: float = 2.0
    #: standard errors of a count (a run's delivery opportunities, its lost packets) allowed for;
    #: a bound must hold on every target, and a calibration looks at tens of schemes and runs
    counting_ses: float = 5.0
    #: the least share of the link a rate-probing scheme keeps busy (BBR measured 0.93–0.98 on
    #: shared/data/mahimahi-targets; the rest covers ProbeRTT, start-up and its gain cycle)
    busy_utilization: float = 0.75
    #: ... as long as the path's loss stays below this (Linux BBR v1's tolerance)
    busy_loss_max: float = 0.2
    #: Mbit/s: the rate's top without evidence of a busy link (Mahimahi itself cannot keep up
    #: past ~650 Mbit/s: StanfordSNR/pantheon issue #72)
    rate_top: float = 500.0
    #: relative: a logged capacity's own uncertainty (whole-ms rounding, the log's ends)
    capacity_slack: float = 0.01
    #: packets: the smallest DropTail queue (Pantheon's "policer" emulators use packets=1)
    queue_low: float = 1.0
    #: the queue's top: this many seconds of the rate's upper bound, ...
    queue_seconds: float = 4.0
    #: ... and never fewer packets than this (15 MB: deeper than any router's buffer; at 0.5
    #: Mbit/s it is four minutes of queue)
    queue_top: float = 10_000.0
    #: relative widening of a queue that link-log evidence pins, for an emulator under calibration
    #: that counts the packet in transit differently
    queue_slack: float = 0.1
    #: the loss bound never closes below this (the loss map's knee)
    loss_floor: float = LOSS_KNEE


def _check_stats(stats: Mapping[str, SchemeStats | SchemeMeasurement]) -> dict[str, SchemeMeasurement]:
    if not stats:
        raise InputError("the target has no schemes; give at least one scheme's statistics")
    out = {}
    for scheme, s in stats.items():
        if isinstance(s, SchemeMeasurement):
            m = s
        else:
            try:
                tput, delay, loss = (float(v) for v in s)
            except (TypeError, ValueError):
                raise InputError(f"statistics of {scheme} must be (throughput Mbit/s, p95 delay "
                                 f"ms, loss fraction), got {s!r}") from None
            m = SchemeMeasurement(tput, delay, loss)
        why = Stats(m.throughput, m.delay, m.loss).problem("reference")  # the one rule
        if why:
            raise InputError(f"statistics of {scheme} are not usable: {why}")
        sds = (m.throughput_sd, m.delay_sd, m.loss_sd)
        if not all(map(math.isfinite, sds)) or min(sds) < 0 or m.runs < 1:
            raise InputError(f"statistics of {scheme}: standard deviations must be >= 0 and runs "
                             f">= 1, got {m}")
        out[scheme] = m
    return out


def _present(stats: Mapping[str, object], hint: Collection[str] | None, default: frozenset[str]) -> list[str]:
    names = default if hint is None else set(hint)
    return [s for s in stats if s in names]


def wilson_upper(fraction: float, n: float, z: float) -> float:
    """Upper end of the Wilson score interval of a binomial `fraction` observed over `n` trials,
    `z` standard errors wide."""
    z2n = z * z / n
    centre = fraction + z2n / 2
    spread = z * math.sqrt(fraction * (1 - fraction) / n + z2n / (4 * n))
    return min((centre + spread) / (1 + z2n), 1.0)


def bounds_from_target(
    stats: Mapping[str, SchemeStats | SchemeMeasurement],
    *,
    rate_probing: Collection[str] | None = None,
    evidence: PathEvidence | None = None,
    runtime_s: float | None = None,
    rule: BoundsRule = BoundsRule(),
) -> dict[str, tuple[float, float]]:
    """Search bounds that contain the emulator that made the target (pure; the rule, in full).

    The bounds are physical statements, not a neighbourhood of the warm start: each holds for any
    mix of schemes.  Noise margins use `rule`: m·σ of a scheme's run-to-run scatter (σ = its
    standard deviation over runs, m = `noise_sds`, 2) and z standard errors of a count (z =
    `counting_ses`, 5); N_s = the MTU packets scheme s delivered per run (throughput × runtime).

    - **rate**, log scale.  Where the target's link logs record delivery opportunities
      (`evidence.capacity_mbps`, C): C·(1 ± ε), ε = max(1 %, z/√opportunities of a run) (the rate
      is what the link delivers, for Poisson deliveries too: `calibrate.trace.poisson`).
      Otherwise:
      low: no run delivers more than the link offered, so the rate is at least the largest
      throughput any scheme measured, less its noise: max_s (T_s − m·σ_s) / (1 + z/√N_s) — the
      division covers a Poisson trace's own count of opportunities;
      high: a rate-probing scheme (`RATE_PROBING`: BBR, the saturators) keeps the link
      busy at least `busy_utilization` (75 %) of the time while the loss stays below 20 %, so the
      rate is at most max_s (T_s + m·σ_s)·(1 + z/√N_s) / (0.75·(1 − loss's upper bound)); without
      one, or where its bound falls below the low end, `rate_top` (500 Mbit/s).  A loss-based
      scheme's queue is no such evidence: a p95 above the others' shows the queue of its
      slow-start overshoot as well as a busy link (M2 of shared/data/mahimahi-targets: Reno at
      half the 30 Mbit/s rate with a p95 10 ms above Cubic's; Cubic at 0.44 of M3's rate with a
      p95 133 ms above Reno's), so it bounds nothing.
    - **delay** (one-way, whole ms), linear: [0, the smallest delay any packet saw]: the smallest
      p95 of any scheme (every packet's delay includes the propagation delay), tightened by the
      logs where they exist — the smallest one-way delay of any packet (Pantheon tunnel logs) and
      each logged run's p95 one-way delay less its link log's time in the link at the 95th
      percentile less 4 standard errors (`PathEvidence.propagation_max_ms`).  Rounded down.
    - **queue** (DropTail packets), log scale: [1 (`queue_low`), max(4 s (`queue_seconds`) of the
      rate's upper bound, 10 000 (`queue_top`))]: without link logs nothing bounds a queue no
      scheme filled.  Link logs pin it: the DropTail limit is at least the most packets ever in
      the link less the one in transit, and, where the queue dropped, at most the packets waiting
      at a drop (`PathEvidence.queue_at_least`/`queue_at_most`); those are widened by 10 %
      (`queue_slack`) for an emulator that counts the packet in transit differently.
    - **loss**, the log-with-zero map: [0, min_s (Wilson upper bound of L_s over N_s·runs packets,
      z wide) + m·σ_s], at least `loss_floor`: every scheme sees at least the path's random loss —
      Pantheon's loss also counts queue overflow and the packets in flight when the run stops,
      which only add — so the least lossy scheme's loss, plus its counting noise and scatter,
      bounds it.

    `stats` maps scheme -> `SchemeMeasurement` (or a bare (throughput, p95, loss) triple: one run,
    no scatter); for multi-flow targets each scheme's whole-connection ("all") statistics.
    `evidence` is the target's per-packet evidence (`calibrate.evidence`), `runtime_s` its runs'
    length (Pantheon's 30 s when unknown), `rate_probing` defaults to `RATE_PROBING`.
    Integer parameters' bounds are rounded inward, and always hold two whole values.
    """
    m = _check_stats(stats)
    runtime = runtime_s or DEFAULT_RUNTIME_S

    # loss first: the rate's upper bound divides by it
    loss_hi = min(wilson_upper(s.loss, s.packets(runtime), rule.counting_ses)
                  + rule.noise_sds * s.loss_sd for s in m.values())
    loss_hi = min(max(loss_hi, rule.loss_floor), PARAMETER_TABLE["loss"].limits[1])

    rate_lo, rate_hi = _rate_bounds(m, loss_hi, evidence, runtime, rate_probing, rule)

    delay_hi = min(s.delay for s in m.values())
    if evidence is not None:
        delay_hi = min([delay_hi] + [v for v in (evidence.min_delay_ms, evidence.propagation_max_ms)
                                     if v is not None])
    delay_hi = min(max(math.floor(delay_hi + 1e-9), 1), int(PARAMETER_TABLE["delay"].limits[1]))

    queue_lo = rule.queue_low
    queue_hi = max(rule.queue_top, rule.queue_seconds * rate_hi * 1e6 / MTU_BITS)
    if evidence is not None:
        if evidence.queue_at_least is not None:
            queue_lo = max(queue_lo, evidence.queue_at_least * (1 - rule.queue_slack))
        if evidence.queue_at_most is not None:
            queue_hi = evidence.queue_at_most * (1 + rule.queue_slack)
    queue_lo = max(math.floor(queue_lo), int(PARAMETER_TABLE["queue"].limits[0]))
    queue_hi = min(max(math.ceil(queue_hi), queue_lo + 1), int(PARAMETER_TABLE["queue"].limits[1]))
    return {
        "rate": (rate_lo, rate_hi),
        "delay": (0.0, float(delay_hi)),
        "queue": (float(queue_lo), float(queue_hi)),
        "loss": (0.0, loss_hi),
    }


def _rate_bounds(m: Mapping[str, SchemeMeasurement], loss_hi: float, evidence: PathEvidence | None,
                 runtime_s: float, rate_probing: Collection[str] | None, rule: BoundsRule
                 ) -> tuple[float, float]:
    """The rate part of `bounds_from_target` (rule documented there)."""
    lowest, highest = PARAMETER_TABLE["rate"].limits
    if evidence is not None and evidence.capacity_mbps and evidence.capacity_noise is not None:
        capacity = evidence.capacity_mbps
        margin = max(rule.capacity_slack, rule.counting_ses * evidence.capacity_noise)
        lo, hi = capacity * (1 - margin), capacity * (1 + margin)
        return max(lo, lowest), min(hi, highest)

    def counting(s: SchemeMeasurement) -> float:  # relative noise of a run's opportunity count
        return rule.counting_ses / math.sqrt(s.packets(runtime_s) / s.runs)

    lo = max(max(s.throughput - rule.noise_sds * s.throughput_sd, 0.0) / (1 + counting(s))
             for s in m.values())
    lo = max(lo, lowest)
    busy = [(m[name].throughput + rule.noise_sds * m[name].throughput_sd) * (1 + counting(m[name]))
            / (rule.busy_utilization * (1 - loss_hi))
            for name in _present(m, rate_probing, RATE_PROBING)]
    hi = min(max(busy), rule.rate_top) if busy and loss_hi < rule.busy_loss_max else rule.rate_top
    if hi <= lo:  # the evidence contradicts itself (or the link is faster than the top)
        hi = max(rule.rate_top, 2 * lo)
    return lo, min(hi, highest)


def _estimate(
    stats: Mapping[str, SchemeMeasurement],
    saturating: Collection[str] | None,
    delay_based: Collection[str] | None,
    runtime_s: float | None,
    evidence: PathEvidence | None,
) -> dict[str, float]:
    """The analytic first guess behind `warm_start` (unrounded, unclipped).

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
    - rate: the link's logged capacity where the target has link logs; otherwise the best
      throughput of any scheme (no scheme exceeds the rate, so the best is the nearest — BBR
      often, and only the saturating schemes' best missed it by half on M2 of
      shared/data/mahimahi-targets), divided by (1 − loss) because Mahimahi's `mm-loss uplink`
      drops after the link.
    - delay: from per-packet logs where the target has them: the median over logged runs of the
      p95 one-way delay less the p95 of the time in the link (exact for Mahimahi: M1–M3 give
      30, 10 and 80 ms), else the smallest one-way delay of any packet less one delivery tick.
      Without logs, a documented guess: with a delay-based scheme present, the smallest p95 delay
      minus `QUEUED_PACKETS` packet times at that rate (the least-delayed scheme is a delay-based
      one, which keeps a few packets queued — Vegas α–β = 2–4, Copa 1/δ = 2 — and its p95 packet
      also waits for a delivery slot); with none, every scheme's p95 carries a queue of unknown
      length, and half the smallest p95 (a queue as long as the path) is the guess.
    - queue: where the queue dropped in a link log, the packets waiting at a drop (the DropTail
      limit); otherwise the largest p95 delay of the saturating schemes (queue full) minus the
      delay estimate above (queue empty), times the rate, in packets, and at least what the link
      logs saw queued.
    """
    sat = _present(stats, saturating, SATURATING) or list(stats)
    dly = _present(stats, delay_based, DELAY_BASED)
    best_tput = max(s.throughput for s in stats.values())
    # the in-flight correction's own resolution (0 when the runtime is unknown)
    resolution = QUEUED_PACKETS * packet_time_ms(best_tput) / 1e3 / runtime_s if runtime_s else 0.0

    def path_loss(s: str) -> float:
        m = stats[s]
        return max(m.loss - (m.delay / 1e3 / runtime_s if runtime_s else 0.0), 0.0)

    loss = float(np.median([path_loss(s) for s in dly])) if dly else min(map(path_loss, stats))
    loss = 0.0 if loss < resolution else min(loss, PARAMETER_TABLE["loss"].limits[1])

    capacity = evidence.capacity_mbps if evidence is not None else None
    if capacity:
        rate = capacity
    else:
        rate = best_tput / (1.0 - loss)

    base_delay = min(s.delay for s in stats.values())
    if evidence is not None and evidence.propagation_ms is not None:
        delay = evidence.propagation_ms
    elif evidence is not None and evidence.min_delay_ms is not None:
        delay = evidence.min_delay_ms - LINK_TICK_MS
    elif dly:
        delay = base_delay - QUEUED_PACKETS * packet_time_ms(rate)
    else:
        delay = base_delay / 2
    delay = max(delay, 0.0)

    at_most = evidence.queue_at_most if evidence is not None else None
    if at_most is not None:
        queue = float(at_most)
    else:
        full_delay = max(stats[s].delay for s in sat)
        queue = (full_delay - delay) * rate * 1e3 / MTU_BITS
        if evidence is not None and evidence.queue_at_least is not None:
            queue = max(queue, float(evidence.queue_at_least))
    return {"rate": rate, "delay": delay, "queue": max(queue, 1.0), "loss": loss}


def warm_start(
    stats: Mapping[str, SchemeStats | SchemeMeasurement],
    saturating: Collection[str] | None = None,
    delay_based: Collection[str] | None = None,
    runtime_s: float | None = None,
    *,
    rate_probing: Collection[str] | None = None,
    evidence: PathEvidence | None = None,
    rule: BoundsRule = BoundsRule(),
) -> dict[str, float]:
    """The analytic first guess {rate, delay, queue, loss} (a heuristic: formulas in `_estimate`),
    clipped into `bounds_from_target`'s bounds of the same target, which it may miss.

    Delay and queue are rounded to whole ms / packets, as the emulator takes them.  Pass the
    result through `SearchSpace.from_values(..., clip=True)` to get its unit-cube point (user
    bounds may be narrower).  Hints default to `SATURATING` / `DELAY_BASED` /
    `RATE_PROBING`.
    """
    m = _check_stats(stats)
    e = _estimate(m, saturating, delay_based, runtime_s, evidence)
    bounds = bounds_from_target(m, rate_probing=rate_probing, evidence=evidence,
                                runtime_s=runtime_s, rule=rule)
    clipped = {n: min(max(e[n], bounds[n][0]), bounds[n][1]) for n in PARAMETERS}
    return {"rate": clipped["rate"], "delay": int(round(clipped["delay"])),
            "queue": int(round(clipped["queue"])), "loss": clipped["loss"]}


def space_from_target(
    stats: Mapping[str, SchemeStats | SchemeMeasurement],
    *,
    rate_probing: Collection[str] | None = None,
    evidence: PathEvidence | None = None,
    runtime_s: float | None = None,
    rule: BoundsRule = BoundsRule(),
    overrides: Mapping[str, tuple[float, float]] | None = None,
    fixed: Mapping[str, float] | None = None,
) -> SearchSpace:
    """`bounds_from_target`, with user `overrides` of some bounds, and some parameters `fixed`."""
    bounds = {**bounds_from_target(stats, rate_probing=rate_probing, evidence=evidence,
                                   runtime_s=runtime_s, rule=rule), **(overrides or {})}
    return SearchSpace.from_bounds(bounds, fixed)
