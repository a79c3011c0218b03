"""The ranges of values indistinguishable from the best (calibrate.ranges), from the optimizers'
models on a noisy analytic function with a known flat direction."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("botorch")
pytest.importorskip("skopt")

import torch

from calibrate.optimizers import make_optimizer
from calibrate.ranges import NOT_COMPUTED, Range, Ranges, ranges_of
from calibrate.space import SearchSpace

FAST = {"gpytorch": {"num_restarts": 2, "raw_samples": 64, "mc_samples": 32},
        "skopt": {"n_points": 500, "n_restarts": 2}, "random": {}}
# loss fixed: ranges are reported for the free parameters only
SPACE = SearchSpace.from_bounds({"rate": (2.0, 50.0), "delay": (0.0, 100.0), "queue": (4.0, 1000.0)},
                                fixed={"loss": 0.0})
TRUTH = {"rate": 10.0, "delay": 30}


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def f(values: dict[str, float]) -> float:
    """Sharp in rate and delay, and no dependence on the queue at all (e.g. a target of
    delay-based schemes only, which never fill it)."""
    return (5.0 + 400.0 * math.log(values["rate"] / TRUTH["rate"]) ** 2
            + 0.2 * (values["delay"] - TRUTH["delay"]) ** 2)


def searched(name: str, seed: int, budget: int = 30):
    rng = np.random.default_rng(seed)
    start = SPACE.from_values({"rate": 12.0, "delay": 35, "queue": 50})
    opt = make_optimizer(name, SPACE.dim, seed=seed, warm_start=[start], n_initial=6, **FAST[name])
    while len(opt.history[1]) < budget:
        xs = opt.ask(3)
        opt.tell(xs, [f(SPACE.to_values(x)) + rng.normal(0.0, 0.2) for x in xs], [0.2] * len(xs))
    return opt


def unit_width(r: Range) -> float:
    """How much of its search range a parameter's range spans, on the scale it is searched on."""
    return float(np.ptp(SPACE.parameter(r.name).to_unit(np.array([r.low, r.high]))))


@pytest.mark.parametrize("name, seed", [("gpytorch", 0), ("gpytorch", 1), ("skopt", 0)])
def test_ranges_cover_the_flat_direction_and_are_narrow_along_the_sharp_ones(name, seed):
    ranges = {r.name: r for r in ranges_of(searched(name, seed), SPACE).ranges}
    assert set(ranges) == {"rate", "delay", "queue"}
    assert unit_width(ranges["queue"]) > 0.9, ranges["queue"]
    for sharp in ("rate", "delay"):
        r = ranges[sharp]
        assert r.low <= TRUTH[sharp] <= r.high, r
        assert unit_width(r) < 0.3, r
    assert ranges["delay"].low == int(ranges["delay"].low)  # whole ms, as the emulator takes them


@pytest.mark.parametrize("name", ["gpytorch", "skopt"])
def test_the_difference_from_the_incumbent_is_taken_under_the_joint_posterior(name):
    from calibrate.optimizers.base import Optimizer

    opt = searched(name, 0, budget=18)
    best = opt.best().x
    xs = np.vstack([best, np.clip(best + 0.005, 0, 1), np.random.default_rng(3).random((40, SPACE.dim))])
    joint = opt._latent_difference(xs, best)
    independent = Optimizer._latent_difference(opt, xs, best)
    assert joint[0] == pytest.approx(0.0, abs=1e-6)  # the incumbent against itself
    assert joint[1] < 0.5 * independent[1]  # a close neighbour moves with the incumbent
    assert np.all(joint <= independent * 1.5 + 1e-9)
    assert np.allclose(joint[2:], independent[2:], rtol=0.5)  # far away: nearly independent


def test_link_logs_narrow_the_delay_range_to_what_they_allow():
    from calibrate.evidence import PathEvidence, RunEvidence

    opt = searched("gpytorch", 0)
    model = {r.name: r for r in ranges_of(opt, SPACE).ranges}
    best_delay = SPACE.to_values(opt.best().x)["delay"]
    runs = [RunEvidence("cubic", 1, 1000, propagation_ms=best_delay, propagation_max_ms=best_delay + 0.5)]
    narrowed = {r.name: r for r in ranges_of(opt, SPACE, PathEvidence(tuple(runs))).ranges}
    assert narrowed["delay"].low == max(model["delay"].low, best_delay - 2.0)
    assert narrowed["delay"].high == min(model["delay"].high, best_delay + 0.5)
    assert narrowed["rate"] == model["rate"] and narrowed["queue"] == model["queue"]
    # logs that rule the incumbent out (the losing link kind's) leave the model's range
    far = [RunEvidence("cubic", 1, 1000, propagation_ms=best_delay + 20, propagation_max_ms=best_delay + 21)]
    assert {r.name: r for r in ranges_of(opt, SPACE, PathEvidence(tuple(far))).ranges} == model


def test_no_model_no_range():
    random = ranges_of(searched("random", 0, budget=9), SPACE)
    assert not random.ranges and "random search has no model" in random.note
    early = make_optimizer("gpytorch", SPACE.dim, n_initial=6, **FAST["gpytorch"])
    xs = early.ask(4)
    early.tell(xs, [f(SPACE.to_values(x)) for x in xs])
    assert "too few evaluations" in ranges_of(early, SPACE).text()


def test_text_and_json():
    ranges = Ranges((Range("rate", 11.62, 12.31), Range("delay", 28, 31), Range("queue", 12, 18),
                     Range("loss", 0.0, 0.0012)))
    assert ranges.text() == "rate 11.6–12.3 Mbit/s, delay 28–31 ms, queue 12–18 packets, loss 0–0.120 %"
    assert ranges.sentence().startswith("indistinguishable from the best: rate 11.6–12.3 Mbit/s")
    # as many digits as it takes to show two values apart; one number when they are one
    assert Range("rate", 11.62, 11.64).text() == "rate 11.62–11.64 Mbit/s"
    assert Range("queue", 12, 12).text() == "queue 12 packets"
    assert Ranges.from_json(ranges.to_json()) == ranges
    none = Ranges(note="random search has no model to tell values apart")
    assert none.to_json() == {"ranges": None, "ranges_note": none.note}
    assert Ranges.from_json(none.to_json()) == none and none.text() == f"no range: {none.note}"
    # a result.json written before ranges existed
    assert Ranges.from_json({"f": 3.0}).note == NOT_COMPUTED
