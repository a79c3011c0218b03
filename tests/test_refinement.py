"""The local refinement around the incumbent (calibrate.refinement), through ask/tell on noisy
analytic functions of the emulator's parameters."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("botorch")

import torch

from calibrate import refinement
from calibrate.optimizers import make_optimizer
from calibrate.space import SearchSpace

FAST = {"num_restarts": 2, "raw_samples": 64, "mc_samples": 32}
SPACE = SearchSpace.from_bounds({"rate": (2.0, 50.0), "delay": (0.0, 100.0), "queue": (4.0, 1000.0),
                                 "loss": (0.0, 0.05)})
TRUTH = {"rate": 10.0, "delay": 30, "queue": 12, "loss": 0.0}


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def values_of(u: np.ndarray) -> dict[str, float]:
    return SPACE.to_values(u)


def test_neighbours_step_one_parameter_at_a_time():
    center = {"rate": 10.0, "delay": 30, "queue": 5, "loss": 0.01}
    moves: dict[str, list[float]] = {}
    for u in refinement.neighbours(SPACE, SPACE.from_values(center)):
        v = values_of(u)
        changed = [k for k in center if not math.isclose(v[k], center[k], rel_tol=1e-9)]
        assert len(changed) == 1, v
        moves.setdefault(changed[0], []).append(v[changed[0]])
    assert moves["delay"] == [29, 31, 28, 32]
    # a small queue's neighbours are the neighbouring integers, then two packets away
    assert moves["queue"] == [4, 6, 7]  # 3 is below the bound of 4
    assert np.allclose(moves["rate"], [10 / 1.02, 10 * 1.02, 10 / 1.05, 10 * 1.05])
    assert np.allclose(moves["loss"], [0.01 / 1.1, 0.011, 0.01 / 1.25, 0.0125])
    # a large queue steps by 10 % and 25 %; at a bound and at zero loss nothing moves that way
    edge = {"rate": 50.0, "delay": 0, "queue": 400, "loss": 0.0}
    values = [values_of(u) for u in refinement.neighbours(SPACE, SPACE.from_values(edge))]
    assert sorted(v["queue"] for v in values if v["queue"] != 400) == [320, 364, 440, 500]
    assert sorted(v["delay"] for v in values if v["delay"] != 0) == [1, 2]
    assert all(v["rate"] <= 50.0 and v["loss"] == 0.0 for v in values)


def f(values: dict[str, float]) -> float:
    """A sharp optimum at whole numbers: f = 4 % at TRUTH, 1.5 points per ms of delay, about a
    point per packet of queue near 12, steep in rate and loss."""
    return (4.0 + 1.5 * abs(values["delay"] - TRUTH["delay"])
            + 12.0 * abs(math.log(values["queue"] / TRUTH["queue"]))
            + 60.0 * abs(math.log(values["rate"] / TRUTH["rate"])) + 400.0 * values["loss"])


def searched(seed: int = 0):
    """A GP that has been told a Sobol design and one point close to the truth, off by 2 ms of
    delay and 3 packets of queue: where a global search often ends."""
    rng = np.random.default_rng(seed)
    opt = make_optimizer("gpytorch", SPACE.dim, seed=seed, n_initial=8, **FAST)
    xs = opt.ask(8)
    near = SPACE.from_values({"rate": 10.0, "delay": 32, "queue": 15, "loss": 0.0})
    xs.append(near)
    opt.tell(xs, [f(values_of(x)) + rng.normal(0.0, 0.1) for x in xs], [0.1] * len(xs))
    return opt, rng


def test_refinement_reaches_the_integer_optimum():
    opt, rng = searched()
    start = values_of(opt.best().x)
    assert (start["delay"], start["queue"]) == (32, 15)
    evaluated = {tuple(values_of(x).values()) for x in opt.history[0]}
    for _ in range(14):
        center = values_of(opt.best().x)
        (x,) = refinement.propose(opt, SPACE)
        v = values_of(x)
        # one parameter of the incumbent moved, to an emulator not evaluated before
        assert sum(not math.isclose(v[k], center[k], rel_tol=1e-9) for k in v) == 1
        assert tuple(v.values()) not in evaluated
        evaluated.add(tuple(v.values()))
        opt.tell([x], [f(v) + rng.normal(0.0, 0.1)], [0.1])
    best = values_of(opt.best().x)
    assert (best["delay"], best["queue"], best["loss"]) == (30, 12, 0.0), best
    assert f(best) < f(start) - 5.0


def test_refinement_proposals_are_a_function_of_the_history():
    opt, _ = searched(1)
    # what a resumed run rebuilds from the journal: the same settings, told the same history
    again = make_optimizer("gpytorch", SPACE.dim, seed=1, n_initial=8, **FAST)
    again.tell(*opt.history)
    first = refinement.propose(opt, SPACE, 2)
    assert np.allclose(first, refinement.propose(again, SPACE, 2))
    # the pending ones are not proposed again; once every neighbour is evaluated or running,
    # there is nothing left to propose
    rest = refinement.propose(opt, SPACE, 100)
    assert not any(np.allclose(r, p) for r in rest for p in first)
    assert refinement.propose(opt, SPACE) == []
