"""The three optimizers through ask/tell on a noisy analytic function, and the shared contract."""

import json
import math

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("botorch")
pytest.importorskip("skopt")

import torch

from calibrate.errors import InputError
from calibrate.optimizers import OPTIMIZERS, make_optimizer

# Small settings: these tests run on a shared 2-core machine.
FAST = {
    "gpytorch": {"num_restarts": 2, "raw_samples": 64, "mc_samples": 32},
    "skopt": {"n_points": 500, "n_restarts": 2},
    "random": {},
}

OPTIMUM = np.array([0.3, 0.7, 0.55, 0.2])
WEIGHTS = np.array([1.0, 2.0, 0.5, 1.0])
F_MIN = 10.0  # like a replication error of 10 % at the best emulator
NOISE = 1.0  # standard error of one evaluation, in f's units


def quadratic(u: np.ndarray) -> float:
    """Shifted, anisotropic quadratic in 4 dimensions: f ∈ [10, ~200]."""
    return F_MIN + 100.0 * float(np.sum(WEIGHTS * (u - OPTIMUM) ** 2))


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def calibrate(name: str, seed: int, budget: int = 24, batch: int = 4, **options) -> float:
    """Run the loop the service runs; return the true regret of the chosen incumbent."""
    rng = np.random.default_rng(1000 + seed)
    opt = make_optimizer(name, 4, seed=seed, **{**FAST[name], **options})
    while len(opt.history[1]) < budget:
        xs = opt.ask(batch)
        ys = [quadratic(x) + rng.normal(0.0, NOISE) for x in xs]
        opt.tell(xs, ys, [NOISE] * len(xs))
    return quadratic(opt.best().x) - F_MIN


@pytest.fixture(scope="module")
def regrets():
    """Regret of each optimizer over three seeds (computed once, used by several tests)."""
    return {name: [calibrate(name, seed) for seed in range(3)] for name in OPTIMIZERS}


@pytest.mark.parametrize("name", ["gpytorch", "skopt"])
def test_gp_optimizers_reach_the_optimum(regrets, name):
    # 24 noisy evaluations in batches of 4: within 2 points of f (noise sd 1) every seed
    assert max(regrets[name]) < 2.0, regrets[name]


def test_random_search_makes_progress(regrets):
    # a Sobol design's best point is far from the optimum but well below a typical point (~45)
    assert max(regrets["random"]) < 25.0, regrets["random"]


@pytest.mark.parametrize("name", ["gpytorch", "skopt"])
def test_gp_ei_beats_random_search(regrets, name):
    assert np.mean(regrets[name]) < 0.25 * np.mean(regrets["random"]), regrets


def test_fixed_noise_model_also_converges():
    assert calibrate("gpytorch", 0, noise_model="fixed", outcome="raw") < 2.0


def test_raw_outcome_also_converges():
    # the default models log f; modelling f itself works on this benign quadratic too
    assert calibrate("gpytorch", 1, outcome="raw") < 2.0


# -- the contract, for every optimizer

@pytest.fixture(params=list(OPTIMIZERS))
def name(request):
    return request.param


def make(name, **kw):
    return make_optimizer(name, 3, seed=7, **{**FAST[name], **kw})


def f3(u):
    return 10.0 + 100.0 * float(np.sum((np.asarray(u) - 0.4) ** 2))


def drive(opt, rounds=3, batch=3):
    for _ in range(rounds):
        xs = opt.ask(batch)
        opt.tell(xs[::-1], [f3(x) for x in xs[::-1]])  # results arrive out of order


def test_ask_gives_points_in_the_cube(name):
    opt = make(name)
    drive(opt)
    xs = opt.ask(4)
    assert len(xs) == 4
    assert all(x.shape == (3,) and np.all((x >= 0) & (x <= 1)) for x in xs)


def test_warm_start_comes_first_and_once(name):
    warm = [np.array([0.4, 0.4, 0.4]), np.array([0.1, 0.9, 0.5])]
    opt = make(name, warm_start=warm)
    first = opt.ask(1)[0]
    assert np.allclose(first, warm[0])
    second = opt.ask(2)
    assert np.allclose(second[0], warm[1]) and not np.allclose(second[1], warm[0])
    opt.tell([first, *second], [f3(x) for x in [first, *second]])
    drive(opt)
    x, _, _ = opt.history
    assert sum(np.allclose(p, warm[0]) for p in x) == 1


def test_pending_points_are_not_proposed_again(name):
    opt = make(name)
    drive(opt, rounds=3)  # past the initial design: the model proposes
    first = opt.ask(2)
    second = opt.ask(2)  # asked while the first two still run
    assert len(opt.pending) == 4
    for a in first:
        assert all(np.max(np.abs(a - b)) > 1e-3 for b in second)
    opt.tell(first[:1], [f3(first[0])])
    assert len(opt.pending) == 3
    opt.cancel(second)
    assert len(opt.pending) == 1


def test_same_seed_same_proposals(name):
    a, b = make(name), make(name)
    drive(a), drive(b)
    assert np.allclose(a.ask(2), b.ask(2))
    c = make_optimizer(name, 3, seed=8, **FAST[name])
    drive(c)
    assert not np.allclose(a.history[0], c.history[0])


def retold(fresh, opt):
    """`fresh`, made with `opt`'s settings, told `opt`'s history in order as the journal holds
    it (JSON, unknown noise as null): how `calibrate resume` rebuilds an optimizer."""
    x, y, noise = opt.history
    lines = json.loads(json.dumps([[list(map(float, xi)), float(yi), None if math.isnan(s) else float(s)]
                                   for xi, yi, s in zip(x, y, noise, strict=True)]))
    if lines:
        fresh.tell([line[0] for line in lines], [line[1] for line in lines], [line[2] for line in lines])
    return fresh


def test_an_optimizer_retold_its_history_resumes_identically(name):
    opt = make(name, warm_start=[np.full(3, 0.5)])
    drive(opt)
    again = retold(make(name, warm_start=[np.full(3, 0.5)]), opt)  # what the journal rebuilds
    assert type(again) is type(opt)
    for h, g in zip(opt.history, again.history, strict=True):
        assert np.allclose(h, g, equal_nan=True)
    assert np.allclose(opt.ask(2), again.ask(2))


def test_lost_evaluation_is_proposed_again_after_resume(name):
    opt = make(name)
    xs = opt.ask(3)
    opt.tell(xs[1:], [f3(x) for x in xs[1:]])  # the first one was lost in a crash
    again = retold(make(name), opt)
    assert np.allclose(again.ask(1)[0], xs[0])


def test_best_is_an_evaluated_point(name):
    opt = make(name)
    with pytest.raises(InputError):
        opt.best()
    drive(opt, rounds=4)
    best = opt.best()
    x, y, _ = opt.history
    assert np.allclose(best.x, x[best.index]) and best.y == y[best.index]
    assert best.y <= np.median(y)
    assert (best.mean is None) == (name == "random")


@pytest.mark.parametrize("model", ["gpytorch", "skopt"])
def test_incumbent_estimates_stay_within_twice_the_reported_noise(model):
    rng = np.random.default_rng(3)
    opt = make(model)
    xs = opt.ask(10)
    ys = [f3(x) + rng.normal(0.0, 3.0) for x in xs]
    se = [0.0, 0.5, 1.0, 3.0, 0.0, 2.0, 0.25, 4.0, 1.5, 0.0]
    opt.tell(xs, ys, se)
    est, means = opt.estimates(), opt._means()
    assert np.all(np.abs(est - ys) <= 2.0 * np.array(se) + 1e-12)
    # where the measurement's error bar allows, the estimate is the model's
    inside = np.abs(means - ys) <= 2.0 * np.array(se)
    assert np.allclose(est[inside], means[inside])
    assert opt.best().index == int(np.argmin(est))
    # measurements that repeat exactly (noise 0.0) are taken as they are: the lowest is the
    # incumbent, whatever the fitted noise smooths
    exact = make(model)
    xs = exact.ask(10)
    exact.tell(xs, ys, [0.0] * 10)
    assert np.allclose(exact.estimates(), ys) and exact.best().index == int(np.argmin(ys))
    # without reported noise the posterior means decide
    unknown = make(model)
    xs = unknown.ask(10)
    unknown.tell(xs, ys)
    assert np.allclose(unknown.estimates(), unknown._means())


def test_bad_input_is_an_input_error(name):
    opt = make(name)
    with pytest.raises(InputError):
        opt.tell([np.zeros(3)], [math.nan])
    with pytest.raises(InputError):
        opt.tell([np.zeros(2)], [1.0])
    with pytest.raises(InputError):
        opt.tell([np.full(3, 1.5)], [1.0])
    with pytest.raises(InputError):
        opt.ask(0)
    with pytest.raises(InputError):
        make_optimizer("spearmint", 3)


# -- the stop rule (calibrate.optimizers.rules)

def test_stop_rule_waits_while_the_optimum_is_unexplored(name):
    steep = make(name)
    assert not steep.improvement_ruled_out()  # nothing evaluated yet
    drive(steep, rounds=3)  # f spans tens of points, no noise reported
    assert not steep.improvement_ruled_out()
    if name == "random":  # no model: random search simply uses its budget
        assert math.isnan(steep.improvement_bound()) and math.isnan(steep.expected_improvement())
        return
    # the model sees room for improvement far beyond any noise
    assert steep.improvement_bound() > 1.0


def flat(name: str, noise: float | None) -> list[bool]:
    """The stop rule after each batch on a flat function, f = 10 + N(0, 0.05²), told with its
    standard error `noise` (None: not reported)."""
    rng = np.random.default_rng(0)
    opt = make(name)
    fired = []
    while len(opt.history[1]) < 24:
        xs = opt.ask(3)
        opt.tell(xs, [10.0 + rng.normal(0.0, 0.05) for _ in xs],
                 None if noise is None else [noise] * len(xs))
        fired.append(opt.improvement_ruled_out())
    return fired


@pytest.mark.parametrize("name", ["gpytorch", "skopt"])
def test_stop_rule_fires_on_a_flat_function(name):
    # nothing to find: the model is soon confident that no point beats 10 by more than the noise
    assert any(flat(name, 0.05))


def test_stop_rule_needs_a_measured_noise():
    # the same function without reported noise (one replicate per evaluation): no tolerance to
    # compare with, so the search uses its budget
    assert not any(flat("gpytorch", None))


BASIN = np.array([0.9, 0.1, 0.85])


def basin(u: np.ndarray) -> float:
    """A bowl with its minimum (f = 20) in the middle of the cube, where the warm start and the
    design look, and off in a corner a basin 0.2 wide whose bottom is 7 points lower."""
    u = np.asarray(u)
    return (20.0 + 20.0 * float(np.sum((u - 0.5) ** 2))
            - 15.0 * math.exp(-float(np.sum((u - BASIN) ** 2)) / (2 * 0.2**2)))


@pytest.mark.parametrize("name, seed", [("gpytorch", 4), ("skopt", 0)])
def test_stop_rule_keeps_searching_for_a_basin_the_design_missed(name, seed):
    """Where "EI < 1 % of the best f" (the old stop) fired, the new rule does not, and the
    search goes on to find the basin."""
    rng = np.random.default_rng(seed)
    opt = make_optimizer(name, 3, seed=seed, warm_start=[np.array([0.45, 0.55, 0.5])],
                         n_initial=5, **FAST[name])
    old_stop = found = None
    while found is None and len(opt.history[1]) < 30:
        (x,) = opt.ask(1)
        opt.tell([x], [basin(x) + rng.normal(0.0, 0.3)], [0.3])
        told, best = len(opt.history[1]), float(np.min(opt.history[1]))
        assert not opt.improvement_ruled_out(), f"stopped after {told} evaluations at f = {best:.1f}"
        if old_stop is None and opt.design_done and opt.expected_improvement() < 0.01 * best:
            old_stop = told
        if best < 15.0:
            found = told
    assert found is not None, "the basin was not found in 30 evaluations"
    assert old_stop is not None and old_stop < found, (old_stop, found)


# -- ask_among: the model's pick among given points (the local refinement's neighbours)

def test_ask_among_picks_unused_points_lowest_mean_first(name):
    opt = make(name)
    drive(opt, rounds=3)
    x, _, _ = opt.history
    far, near, nearer = np.full(3, 0.95), np.full(3, 0.5), np.full(3, 0.42)
    picked = opt.ask_among([x[0], far, near, nearer], 2)
    # evaluated points are skipped; the model ranks the rest by posterior mean (f3's optimum is
    # at 0.4); without a model the given order decides
    expected, rest = ([far, near], nearer) if name == "random" else ([nearer, near], far)
    assert np.allclose(picked, expected)
    assert len(opt.pending) == 2
    assert np.allclose(opt.ask_among([near, nearer, far], 2), [rest])  # pending ones too
    assert opt.ask_among([near, far]) == []
    with pytest.raises(InputError):
        opt.ask_among([np.full(2, 0.5)])
