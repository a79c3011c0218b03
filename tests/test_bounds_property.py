"""The search bounds contain the emulator that made the target, across the whole physical range.

Hidden emulators are drawn over rate 0.5–500 Mbit/s, one-way delay 0–300 ms, DropTail queue
2–10 000 packets, uplink loss 0–5 % and both link kinds; a target is 2–3 noisy runs of a subset
of schemes (all loss-based, bbr only, delay-based only, or a mix) from the fluid model
(`calibrate.fluid`), aggregated as a Target aggregates them (mean and Pantheon's ddof-0 standard
deviation over runs).  `bounds_from_target` must contain the hidden emulator every time, and the
warm start must lie inside the bounds.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calibrate.fluid import DELAY_BASED, LOSS_BASED, SCHEMES, model_replicates
from calibrate.parameters import PARAMETERS
from calibrate.physics import BoundsRule, SchemeMeasurement, bounds_from_target, warm_start
from calibrate.space import SearchSpace

RUNTIME_S = 30.0
GROUPS: dict[str, tuple[str, ...]] = {
    "loss-based": LOSS_BASED, "bbr": ("bbr",), "delay-based": DELAY_BASED, "mixed": SCHEMES,
}


def log_uniform(low: float, high: float) -> st.SearchStrategy[float]:
    return st.floats(math.log(low), math.log(high)).map(math.exp)


@st.composite
def hidden_targets(draw: st.DrawFn) -> tuple[dict[str, float], str, tuple[str, ...], int, int]:
    hidden = {"rate": draw(log_uniform(0.5, 500.0)), "delay": draw(st.integers(0, 300)),
              "queue": int(round(draw(log_uniform(2.0, 10_000.0)))),
              "loss": draw(st.one_of(st.just(0.0), st.floats(0.0, 0.05)))}
    link = draw(st.sampled_from(["constant", "poisson"]))
    group = draw(st.sampled_from(sorted(GROUPS)))
    pool = GROUPS[group]
    schemes = tuple(draw(st.lists(st.sampled_from(pool), min_size=2 if group == "mixed" else 1,
                                  max_size=len(pool), unique=True)))
    return hidden, link, schemes, draw(st.integers(2, 3)), draw(st.integers(0, 2**32 - 1))


def measured(hidden: dict[str, float], link: str, schemes: tuple[str, ...], runs: int,
             seed: int) -> dict[str, SchemeMeasurement]:
    """A target's per-scheme statistics as a Target holds them: mean and ddof-0 std over runs."""
    # link is drawn from "constant" and "poisson" (the strategy above), as a plain str
    replicates = model_replicates(hidden, seed, 0, 0, runs, link=link,  # type: ignore[arg-type]
                                  runtime_s=RUNTIME_S, schemes=schemes)
    out = {}
    for scheme, rs in replicates.items():
        values = np.array([[r.throughput, r.delay, r.loss] for r in rs])
        mean, sd = values.mean(axis=0), values.std(axis=0)
        out[scheme] = SchemeMeasurement(*mean, *sd, runs=runs)
    return out


def outside(bounds: dict[str, tuple[float, float]], values: dict[str, float]) -> list[str]:
    return [f"{n} {values[n]:g} not in [{bounds[n][0]:g}, {bounds[n][1]:g}]"
            for n in PARAMETERS if not bounds[n][0] <= values[n] <= bounds[n][1]]


@settings(max_examples=400, deadline=None, derandomize=True)
@given(hidden_targets())
def test_bounds_contain_the_hidden_emulator(case):
    hidden, link, schemes, runs, seed = case
    stats = measured(hidden, link, schemes, runs, seed)
    bounds = bounds_from_target(stats, runtime_s=RUNTIME_S)
    assert not outside(bounds, hidden), (outside(bounds, hidden), link, stats)
    space = SearchSpace.from_bounds(bounds)  # valid bounds: non-empty, integers hold two values
    start = warm_start(stats, runtime_s=RUNTIME_S)
    assert not outside(space.bounds, start)


def test_the_property_can_fail():
    # The same draw with a rule that trusts the measured numbers exactly (no noise margins, a
    # rate-probing scheme taken as keeping the link fully busy) loses the truth: the property
    # test above exercises the margins, it does not pass by construction.
    hidden = {"rate": 3.0, "delay": 80, "queue": 100, "loss": 0.01}
    stats = measured(hidden, "poisson", ("bbr", "cubic"), 2, seed=1)
    naive = BoundsRule(noise_sds=0.0, counting_ses=0.0, busy_utilization=1.0)
    assert outside(bounds_from_target(stats, runtime_s=RUNTIME_S, rule=naive), hidden)
    assert not outside(bounds_from_target(stats, runtime_s=RUNTIME_S), hidden)


@pytest.mark.parametrize("schemes", [("cubic",), ("reno",), ("vegas", "copa"), ("cubic", "reno")])
def test_without_a_rate_probing_scheme_the_rate_reaches_the_top(schemes):
    stats = measured({"rate": 12.0, "delay": 30, "queue": 60, "loss": 0.01}, "constant", schemes,
                     2, seed=3)
    assert bounds_from_target(stats)["rate"][1] == BoundsRule().rate_top
