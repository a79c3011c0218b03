"""The search space: unit-cube map, fixed parameters, bounds rule and warm start on Nepal and
the README numbers of shared/data/mahimahi-targets (the property test is test_bounds_property.py)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calibrate.errors import InputError
from calibrate.parameters import PARAMETERS
from calibrate.physics import SchemeMeasurement, bounds_from_target, space_from_target, warm_start
from calibrate.space import LOSS_KNEE, SearchSpace

# /work/shared/data/nepal-2017-01-03.csv, inline: scheme -> (tput Mbit/s, p95 delay ms, loss
# fraction = loss_pct_mean / 100)
NEPAL = {
    "saturator": (9.57, 220.21, 0.0141),
    "copa": (1.92, 37.25, 0.0041),
    "quic": (1.19, 39.27, 0.0045),
    "koho_cc": (8.90, 54.09, 0.0060),
    "webrtc": (2.86, 43.95, 0.0076),
    "vegas": (4.04, 126.93, 0.0116),
    "default_tcp": (5.08, 57.70, 0.0051),
    "verus": (9.24, 214.34, 0.0269),
    "sprout": (4.80, 57.12, 0.0066),
    "greg_saturator": (9.34, 271.54, 0.0321),
    "pcc": (6.61, 69.96, 0.0150),
    "scream": (0.75, 36.34, 0.0039),
    "ledbat": (4.68, 43.53, 0.0049),
}

BOUNDS = {"rate": (1.0, 100.0), "delay": (0.0, 200.0), "queue": (2.0, 2000.0), "loss": (0.0, 0.1)}


# -- warm start and bounds on the bundled Nepal numbers (hand-computed)

def test_warm_start_on_nepal():
    w = warm_start(NEPAL)
    # loss: median loss of the delay-based schemes present (scream .39, copa .41, ledbat .49,
    # koho_cc .60, sprout .66, webrtc .76, vegas 1.16 %) = koho_cc's .60
    assert w["loss"] == pytest.approx(0.0060)
    # rate: best saturating throughput (saturator 9.57) / (1 - loss)
    assert w["rate"] == pytest.approx(9.57 / (1 - 0.0060))
    # delay: smallest p95 (scream 36.34) - 4 packet times 4 x 12 / 9.628 = 31.35 -> 31 ms
    assert w["delay"] == 31
    # queue: (largest saturating p95 271.54 - delay 31.35) ms x 9.625 Mbit/s / 12 kbit = 192.7
    assert w["queue"] == 193


def _wilson_upper(p: float, n: float, z: float = 5.0) -> float:
    """The Wilson score interval's upper end, written out independently of calibrate.physics."""
    return (p + z * z / (2 * n) + z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))) / (1 + z * z / n)


def test_bounds_rule_on_nepal():
    # The rule changed from a neighbourhood of the warm start (rate x0.5-2, queue /4-x4, loss
    # 2 x the smallest loss with a 1 % floor) to physical bounds (bounds_from_target's docstring)
    b = bounds_from_target(NEPAL)  # bare triples: one run each, no scatter; runtime 30 s

    def packets(tput: float) -> float:  # MTU packets in a 30 s run
        return tput * 1e6 * 30 / 12000

    # loss: the least lossy scheme's Wilson upper bound (5 standard errors) over its packets:
    # koho_cc's 0.60 % over 8.90 Mbit/s x 30 s (scream's 0.39 % is over only 0.75 Mbit/s)
    loss_hi = _wilson_upper(0.0060, packets(8.90))
    assert b["loss"] == pytest.approx((0.0, loss_hi)) and loss_hi == pytest.approx(0.0092, abs=1e-4)
    # rate low: the best throughput (saturator 9.57) less 5/sqrt(N) for a Poisson trace's count
    low = 9.57 / (1 + 5 / math.sqrt(packets(9.57)))
    # rate high: the rate-probing saturator keeps >= 75 % of the link busy
    high = 9.57 * (1 + 5 / math.sqrt(packets(9.57))) / (0.75 * (1 - loss_hi))
    assert b["rate"] == pytest.approx((low, high))
    assert b["delay"] == (0.0, 36.0)  # floor of the smallest p95 (scream 36.34)
    # queue: 1 packet to max(4 s of 13.3 Mbit/s = 4431 packets, 10 000)
    assert b["queue"] == (1.0, 10_000.0)


def test_rate_bounds_with_and_without_a_rate_probing_scheme():
    # M2 of shared/data/mahimahi-targets (30 Mbit/s, 10 ms, 400 packets, 0.2 % loss), its README's
    # means: Reno's p95 sits 10.5 ms above Cubic's though Reno used half the link (its slow-start
    # overshoot), so a loss-based scheme's queue is no evidence of a busy link
    m2 = {"bbr": (29.37, 38.5, 0.0020), "cubic": (14.59, 25.5, 0.0020), "reno": (15.29, 36.0, 0.0056)}
    loss_based = {k: v for k, v in m2.items() if k != "bbr"}
    low, high = bounds_from_target(loss_based)["rate"]
    assert low < 15.29 and high == 500.0  # nothing bounds the rate from above: the top
    low, high = bounds_from_target(m2)["rate"]
    assert low < 29.37 < 30 < high < 45  # BBR's throughput / 0.75 bounds it
    # the rate-probing hint decides which schemes count
    assert bounds_from_target(m2, rate_probing=())["rate"][1] == 500.0


def test_scatter_widens_the_bounds():
    one_run = {"bbr": SchemeMeasurement(10.0, 50.0, 0.01)}
    scattered = {"bbr": SchemeMeasurement(10.0, 50.0, 0.01, throughput_sd=1.0, loss_sd=0.002)}
    a, b = bounds_from_target(one_run), bounds_from_target(scattered)
    assert b["rate"][0] < a["rate"][0] and b["rate"][1] > a["rate"][1]
    assert b["loss"][1] == pytest.approx(a["loss"][1] + 2 * 0.002)
    # more runs mean more packets counted: a tighter loss bound
    three = {"bbr": SchemeMeasurement(10.0, 50.0, 0.01, runs=3)}
    assert bounds_from_target(three)["loss"][1] < a["loss"][1]


def test_warm_start_lies_inside_derived_space():
    # the bounds are not centred on the warm start; the warm start is clipped into them
    space = space_from_target(NEPAL)
    u = space.from_values(warm_start(NEPAL))
    assert np.all((u >= 0) & (u <= 1))
    assert space.to_values(u) == pytest.approx(warm_start(NEPAL))


def test_warm_start_without_a_delay_based_scheme_halves_the_smallest_p95():
    # every scheme fills the queue (M1 of shared/data/mahimahi-targets: 12 Mbit/s, 30 ms, 60
    # packets): the former rule (smallest p95 - 4 packet times) said 62 ms
    m1 = {"bbr": (11.58, 66.0, 0.0053), "cubic": (11.83, 90.0, 0.0021), "reno": (11.77, 89.0, 0.0044)}
    w = warm_start(m1, runtime_s=30.0)
    assert w["delay"] == 33
    # the best throughput of any scheme; loss 0 after the in-flight correction (Cubic's 0.21 %
    # less 90 ms / 30 s)
    assert w["rate"] == pytest.approx(11.83) and w["loss"] == 0.0
    assert w["queue"] == round((90.0 - 33.0) * 11.83 / 12)


def test_warm_start_is_clipped_into_the_bounds():
    # a lossy delay-based scheme makes the loss heuristic (its median) exceed what the least
    # lossy scheme allows
    stats = {"vegas": (5.0, 40.0, 0.05), "cubic": (9.0, 90.0, 0.001)}
    bounds = bounds_from_target(stats)
    assert warm_start(stats)["loss"] == bounds["loss"][1] < 0.05


def test_hints_change_the_estimate():
    # only the saturator counts as saturating -> same rate, smaller delay spread
    w = warm_start(NEPAL, saturating={"saturator"}, delay_based={"vegas"})
    rate = 9.57 / (1 - 0.0116)  # Vegas's loss, the only delay-based scheme's
    assert w["rate"] == pytest.approx(rate)
    assert w["queue"] == round((220.21 - (36.34 - 4 * 12 / rate)) * rate / 12)
    # ... but Vegas's 1.16 % is above what the least lossy scheme allows: clipped to the bound
    assert w["loss"] == pytest.approx(bounds_from_target(NEPAL)["loss"][1])
    # no saturating scheme present: fall back to the best throughput of all schemes;
    # no delay-based one: the smallest loss of all
    w = warm_start({"a": (3.0, 50.0, 0.02), "b": (1.0, 40.0, 0.01)}, saturating=(), delay_based=())
    assert w["loss"] == pytest.approx(0.01)
    assert w["rate"] == pytest.approx(3.0 / 0.99)


def test_overrides_and_fixed_from_target():
    space = space_from_target(NEPAL, overrides={"rate": (1.0, 50.0)}, fixed={"loss": 0.0})
    assert space.bounds["rate"] == (1.0, 50.0)
    assert space.free == ("rate", "delay", "queue")
    assert space.to_values([0.5, 0.5, 0.5])["loss"] == 0.0


@pytest.mark.parametrize("bad", [
    {"x": (1.0, 30.0, 1.41)},  # loss in percent
    {"x": (0.0, 30.0, 0.01)},  # no throughput
    {"x": (1.0, math.nan, 0.01)},
    {"x": (1.0, 30.0)},
    {},
])
def test_unusable_target_stats_are_input_errors(bad):
    with pytest.raises(InputError):
        bounds_from_target(bad)


# -- the unit-cube map

def test_scales():
    space = SearchSpace.from_bounds(BOUNDS)
    mid = space.to_values([0.5, 0.5, 0.5, 0.5])
    assert mid["rate"] == pytest.approx(10.0)  # log: geometric mean of 1 and 100
    assert mid["delay"] == 100  # linear, whole ms
    assert mid["queue"] == round(math.sqrt(2 * 2000))  # log, whole packets
    # loss: the 2017 harness map x = 1e-4 (10^(c u) - 1), c = log10(max 1e4 + 1)
    c = math.log10(0.1 / LOSS_KNEE + 1)
    assert mid["loss"] == pytest.approx(1e-4 * (10 ** (c * 0.5) - 1))
    lo = space.to_values([0, 0, 0, 0])
    hi = space.to_values([1, 1, 1, 1])
    assert (lo["rate"], lo["delay"], lo["queue"], lo["loss"]) == (1.0, 0, 2, 0.0)  # 0 reachable
    assert hi["rate"] == pytest.approx(100.0) and hi["loss"] == pytest.approx(0.1)


@settings(max_examples=60, deadline=None)
@given(
    rate=st.floats(1.0, 100.0), delay=st.integers(0, 200), queue=st.integers(2, 2000),
    loss=st.floats(0.0, 0.1),
)
def test_values_round_trip(rate, delay, queue, loss):
    space = SearchSpace.from_bounds(BOUNDS)
    values = {"rate": rate, "delay": delay, "queue": queue, "loss": loss}
    u = space.from_values(values)
    assert np.all((u >= 0) & (u <= 1))
    back = space.to_values(u)
    assert back["delay"] == delay and back["queue"] == queue
    assert back["rate"] == pytest.approx(rate, rel=1e-9)
    assert back["loss"] == pytest.approx(loss, rel=1e-9, abs=1e-15)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=4, max_size=4))
def test_unit_round_trip(u):
    space = SearchSpace.from_bounds(BOUNDS)
    u = np.array(u)
    again = space.encode(space.decode(u))[0]
    # continuous parameters come back exactly; integers snap to the point of their whole value,
    # and snapping is idempotent
    assert again[[0, 3]] == pytest.approx(u[[0, 3]], abs=1e-9)
    once, twice = space.decode(u)[0], space.decode(again)[0]
    assert np.array_equal(twice[[1, 2]], once[[1, 2]])
    assert twice[[0, 3]] == pytest.approx(once[[0, 3]], rel=1e-12)


def test_decode_is_vectorized_in_parameter_order():
    space = SearchSpace.from_bounds(BOUNDS)
    v = space.decode(np.array([[0, 0, 0, 0], [1, 1, 1, 1], [0.5, 0.5, 0.5, 0.5]]))
    assert v.shape == (3, len(PARAMETERS))
    assert np.allclose(v[:, 0], [1, 100, 10])


def test_fixed_parameters_are_not_dimensions():
    space = SearchSpace.from_bounds(BOUNDS).fix(delay=30.4, loss=0.0)
    assert space.dim == 2 and space.free == ("rate", "queue")
    values = space.to_values([0.5, 0.5])
    assert values["delay"] == 30 and values["loss"] == 0.0  # integer parameters stay whole
    assert space.from_values({"rate": 10.0, "queue": 63}) == pytest.approx([0.5, 0.5], abs=1e-3)
    # fixed values are ignored by encode, even outside the bounds
    assert space.encode([[10.0, 999.0, 63, 0.5]]).shape == (1, 2)
    with pytest.raises(InputError):
        space.to_values([0.5, 0.5, 0.5])
    assert space.unfix("delay").free == ("rate", "delay", "queue")
    # ablation: everything fixed but the rate (the paper's "rate only")
    only_rate = SearchSpace.from_bounds({"rate": (1, 100)}, fixed={"delay": 20, "queue": 100,
                                                                   "loss": 0})
    assert only_rate.dim == 1 and only_rate.to_values([1.0])["queue"] == 100


def test_bounds_and_values_are_validated():
    space = SearchSpace.from_bounds(BOUNDS)
    with pytest.raises(InputError):
        space.from_values({"rate": 500.0, "delay": 10, "queue": 10, "loss": 0.0})
    clipped = space.from_values({"rate": 500.0, "delay": 10, "queue": 10, "loss": 0.0}, clip=True)
    assert clipped[0] == 1.0
    for bad in ({"rate": (10.0, 5.0)}, {"rate": (0.0, 5.0)}, {"loss": (0.0, 1.5)},
                {"queue": (3.0, 3.5)}):
        with pytest.raises(InputError):
            space.with_bounds(**bad)
    with pytest.raises(InputError):
        space.fix(bandwidth=3.0)
    with pytest.raises(InputError):
        SearchSpace.from_bounds({"rate": (1, 10)})  # the others neither bounded nor fixed
    assert space.with_bounds(rate=(2.0, 4.0)).to_values([1, 0, 0, 0])["rate"] == pytest.approx(4.0)


def test_space_is_a_value():
    a = SearchSpace.from_bounds(BOUNDS, fixed={"loss": 0.0})
    b = SearchSpace.from_bounds(BOUNDS).fix(loss=0.0)
    assert a == b and hash(a) == hash(b)
    fixed = {"loss": 0.0}
    c = SearchSpace.from_bounds(BOUNDS, fixed=fixed)
    fixed["delay"] = 3.0  # the caller's dict does not leak into the frozen space
    assert c.free == ("rate", "delay", "queue")


def test_warm_start_loss_discounts_packets_in_flight_at_the_end():
    # Pantheon counts packets still in flight when a run stops as lost: about p95/runtime of
    # them.  A 6 s run of Vegas at 36 ms p95 over a lossless path measured 0.65 % loss.
    stats = {"udp-vegas": (7.56, 36.0, 0.0065), "udp-saturator": (7.73, 119.9, 0.2392)}
    assert warm_start(stats)["loss"] == pytest.approx(0.0065)
    # 0.65 - 0.6 = 0.05 % is below the correction's resolution, 4 packet times (4 x 12 / 7.73
    # ms) over 6 s = 0.10 %: no loss
    assert warm_start(stats, runtime_s=6.0)["loss"] == 0.0
    assert warm_start(stats, runtime_s=1.0)["loss"] == 0.0  # never negative
    # a 1 % path loss is kept: 1.65 - 0.6 = 1.05 %
    lossy = {**stats, "udp-vegas": (7.56, 36.0, 0.0165)}
    assert warm_start(lossy, runtime_s=6.0)["loss"] == pytest.approx(0.0105)
