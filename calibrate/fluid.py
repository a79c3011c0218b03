"""A fluid model of congestion-control schemes over a Mahimahi-style emulator.

Per scheme, the noise-free (throughput Mbit/s, p95 one-way delay ms, loss fraction) that it shows
over an emulator x = <rate, one-way delay, DropTail queue, uplink loss> with constant or Poisson
deliveries, and noisy replicates of it: the synthetic targets of the calibration benchmark
(experiments/bench_calibration.py) and of the search bounds' property test.  It is a model, not
the engine: no slow start, no timeouts, no trace shape beyond its mean rate and, for Poisson
deliveries, the waits for an opportunity.

Terms: c = the link's delivery rate (the rate, for Poisson deliveries too: `calibrate.trace.poisson`
delivers the rate it is given); pt = 12 / c ms, one MTU
packet's time at the bottleneck; BDP = (2·delay + pt) / pt packets.  Every p95 delay = delay + 1
ms (Mahimahi delivers at whole milliseconds) + the wait for a delivery slot (pt for constant
deliveries, ln 20 · pt — an exponential wait's 95th percentile — for Poisson ones) + the packets
queued ahead at the 95th percentile × pt.  Throughputs are × (1 − loss), as Pantheon measures them
after `mm-loss`.

- saturator: throughput = c; queue always full: p95 = … + queue·pt; loss = 1 − (1 − p)/1.2 (it
  sends 20 % over the rate, the excess overflows).
- cubic and reno (loss-based AIMD): the window sweeps linearly from β·W to W (CUBIC's β = 0.7,
  Reno's 0.5), where W is the smaller of the path's capacity BDP + queue (it fills the queue) and
  the window the random loss allows, the Mathis window C/√p packets as a mean (W = C/√p / ((1 +
  β)/2); C = 1.22 for cubic, √(3/4) ≈ 0.87 for Reno with delayed ACKs, Mathis et al. 1997's b = 2,
  so Reno's loss-limited throughput is the lower): throughput = c × the sweep's mean of min(window,
  BDP)/BDP (a queue below the BDP, or random loss, leaves the link idle part of the time); p95 queue
  = the window's 95th percentile minus the BDP, within [0, queue]; loss = max(p, the loss rate
  whose Mathis window is the sweep's mean), i.e. the overflow losses when the queue caps the window.
- vegas (delay-based, reacts to loss like Reno): keeps 4 packets queued (α..β = 2..4), window
  min(BDP + min(queue, 4), 1.22/√p): throughput = c × min(1, window/BDP); p95 queue = window −
  BDP ≥ 0; loss = p.
- copa (delay-based, ignores random loss): throughput = 0.95 × c; p95 queue = min(queue, 5) packets
  (its standing queue oscillates around 1/δ = 2, δ = 0.5); loss = p.
- bbr (Linux BBR v1, rate-based: random loss up to ~20 % does not slow it): throughput = 0.96 × c
  (M1 and M2 of shared/data/mahimahi-targets: 0.965 and 0.979; ProbeRTT and the gain cycle cost
  the rest); its bandwidth estimate runs high, so it keeps a standing queue of about one BDP
  beyond the base delay (two over Poisson deliveries, whose bursts its max filter catches), p95
  queue = that; where the queue cannot hold it, it overflows: p95 queue = 0.6 × queue and 0.5 %
  more loss (M1: 12 Mbit/s, 30 ms, 60 packets: p95 = 66 ms, loss 0.53 %; 12 Mbit/s, 20 ms, 100
  packets: p95 67–75 ms; M3: Poisson 3 Mbit/s, 80 ms, 100 packets: 439.5 ms).  Above 20 % loss
  it is modelled as Reno.

Replicates (`model_replicates`): each multiplies throughput, the part of the p95 delay above the
propagation delay (fixed in an emulator) and the loss above the path's by its own 1 + N(0, 3 %)
draws; the path's own loss is a binomial draw over the packets the run sent; and a run never
delivers more than the link offered — its throughput is capped at the run's capacity, which for
Poisson deliveries is the trace's own count of opportunities, c·(1 + N(0, 1)/√opportunities),
drawn once per emulator because every run replays the same trace.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Literal

import numpy as np

from calibrate.metrics import Stats
from calibrate.physics import DEFAULT_RUNTIME_S, MTU_BITS, packet_time_ms

LinkKind = Literal["constant", "poisson"]

TICK_MS = 1.0  # Mahimahi delivers at whole milliseconds
POISSON_WAIT_PACKETS = math.log(20.0)  # p95 of an exponential wait, in its means
SATURATOR_OVERDRIVE = 1.2  # the saturator sends this × the rate
CUBIC_BETA = 0.7  # CUBIC's multiplicative decrease
RENO_BETA = 0.5
MATHIS_C = 1.22  # Mathis et al.: mean window = C / √p packets (cubic's constant here)
RENO_MATHIS_C = math.sqrt(3 / 4)  # Mathis et al. with delayed ACKs (b = 2)
VEGAS_PACKETS = 4  # Vegas's β
COPA_PACKETS = 5  # p95 of Copa's standing queue
COPA_UTILIZATION = 0.95
BBR_UTILIZATION = 0.96
BBR_QUEUE_BDP: Mapping[str, float] = {"constant": 1.0, "poisson": 2.0}
BBR_OVERFULL_QUEUE = 0.6  # p95 queue / queue when the queue cannot hold BBR's standing queue
BBR_OVERFLOW_LOSS = 0.005
BBR_LOSS_LIMIT = 0.2
NOISE_SD = 0.03  # multiplicative replicate noise per metric

#: Every scheme the model knows, and its groups (for drawing targets of one kind of scheme)
SCHEMES: tuple[str, ...] = ("saturator", "cubic", "reno", "vegas", "copa", "bbr")
LOSS_BASED: tuple[str, ...] = ("cubic", "reno")
DELAY_BASED: tuple[str, ...] = ("vegas", "copa")


def bdp_packets(rate: float, delay: float) -> float:
    """Packets in flight that fill the path: one round trip (2·delay + one packet time)."""
    return (2 * delay + packet_time_ms(rate)) / packet_time_ms(rate)


def _mean_min(low: float, high: float, cap: float) -> float:
    """Mean of min(w, cap) for w uniform on [low, high]."""
    if high <= cap:
        return (low + high) / 2
    if low >= cap:
        return cap
    return ((cap * cap - low * low) / 2 + cap * (high - cap)) / (high - low)


def fluid_model(x: Mapping[str, float], link: LinkKind = "constant",
                schemes: Iterable[str] = SCHEMES) -> dict[str, Stats]:
    """Per scheme the noise-free (throughput Mbit/s, p95 one-way delay ms, loss) over emulator x."""
    c = float(x["rate"])
    delay, p = float(x["delay"]), float(x["loss"])
    queue = max(float(x["queue"]), 1.0)
    pt = packet_time_ms(c)
    bdp = bdp_packets(c, delay)
    wait = pt if link == "constant" else POISSON_WAIT_PACKETS * pt
    empty = delay + TICK_MS + wait  # p95 through an empty queue

    def aimd(beta: float, mathis_c: float) -> Stats:
        w_loss = mathis_c / math.sqrt(p) if p > 0 else math.inf
        half = (1 + beta) / 2  # the sweep's mean window / its top
        top = min(bdp + queue, w_loss / half)
        low = beta * top
        q95 = min(max(low + 0.95 * (top - low) - bdp, 0.0), queue)
        return Stats(c * _mean_min(low, top, bdp) / bdp * (1 - p), empty + q95 * pt,
                     min(max(p, (mathis_c / (half * top)) ** 2), 1.0))

    def bbr() -> Stats:
        if p > BBR_LOSS_LIMIT:
            return aimd(RENO_BETA, RENO_MATHIS_C)
        wanted = BBR_QUEUE_BDP[link] * bdp
        fits = wanted <= queue
        return Stats(c * BBR_UTILIZATION * (1 - p),
                     empty + (wanted if fits else BBR_OVERFULL_QUEUE * queue) * pt,
                     p + (0.0 if fits else BBR_OVERFLOW_LOSS))

    w_loss = MATHIS_C / math.sqrt(p) if p > 0 else math.inf
    vegas_w = min(bdp + min(queue, VEGAS_PACKETS), w_loss)
    models = {
        "saturator": lambda: Stats(c * (1 - p), empty + queue * pt,
                                   1 - (1 - p) / SATURATOR_OVERDRIVE),
        "cubic": lambda: aimd(CUBIC_BETA, MATHIS_C),
        "reno": lambda: aimd(RENO_BETA, RENO_MATHIS_C),
        "vegas": lambda: Stats(c * min(1.0, vegas_w / bdp) * (1 - p),
                               empty + max(vegas_w - bdp, 0.0) * pt, p),
        "copa": lambda: Stats(c * COPA_UTILIZATION * (1 - p), empty + min(queue, COPA_PACKETS) * pt, p),
        "bbr": bbr,
    }
    unknown = [s for s in schemes if s not in models]
    if unknown:
        raise ValueError(f"the fluid model has no scheme {', '.join(unknown)}; it knows "
                         f"{', '.join(SCHEMES)}")
    return {s: models[s]() for s in schemes}


def model_replicates(x: Mapping[str, float], seed: int, stream: int, index: int, replicates: int,
                     *, link: LinkKind = "constant", runtime_s: float = DEFAULT_RUNTIME_S,
                     schemes: Iterable[str] = SCHEMES) -> dict[str, list[Stats]]:
    """`replicates` noisy runs of every scheme (noise: module docstring); replicate r of
    evaluation `index` draws from its own stream (seed, stream, index, r), the emulator's trace
    from (seed, stream, index)."""
    clean = fluid_model(x, link, schemes)
    delay, p = float(x["delay"]), float(x["loss"])
    c = float(x["rate"])
    packets_per_mbps = runtime_s * 1e6 / MTU_BITS  # packets a run sends at 1 Mbit/s
    run_capacity = c
    if link == "poisson":
        trace = np.random.default_rng([seed, stream, index])
        run_capacity = c * (1 + trace.standard_normal() / math.sqrt(max(c * packets_per_mbps, 1.0)))
    out: dict[str, list[Stats]] = {s: [] for s in clean}
    for r in range(replicates):
        rng = np.random.default_rng([seed, stream, index, r])
        for scheme, s in clean.items():
            assert s.delay is not None and s.loss is not None  # the model gives every metric
            g = np.maximum(1 + NOISE_SD * rng.standard_normal(3), 0.1)
            throughput = min(s.throughput * run_capacity / c * g[0], run_capacity)
            sent = max(int(round(throughput * packets_per_mbps)), 1)
            path_loss = rng.binomial(sent, p) / sent
            loss = min(path_loss + max(s.loss - p, 0.0) * g[2], 1.0)
            out[scheme].append(Stats(throughput, delay + (s.delay - delay) * g[1], loss))
    return out
