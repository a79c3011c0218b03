"""Which link kinds a calibration searches: those asked for, else what the target's logs show."""

from __future__ import annotations

from pathlib import Path

import pytest

from calibrate.runs.config import LINK_KINDS
from calibrate.runs.problem import links_for
from calibrate.targets.load import load_target

TARGETS = Path(__file__).resolve().parents[2] / "shared" / "data" / "mahimahi-targets"
needs_targets = pytest.mark.skipif(not TARGETS.is_dir(), reason=f"the real-Mahimahi targets are not at {TARGETS}")


@needs_targets
@pytest.mark.parametrize(("name", "kind"), [("M1", "constant"), ("M2", "constant"), ("M3", "poisson")])
def test_the_kind_the_link_logs_show_is_the_one_searched(name, kind):
    assert links_for(load_target(str(TARGETS / name))) == (kind,)


@needs_targets
def test_kinds_asked_for_are_searched_whatever_the_logs_show():
    assert links_for(load_target(str(TARGETS / "M1")), ("poisson",)) == ("poisson",)


def test_a_target_without_link_logs_gets_both_searches():
    assert links_for(load_target("nepal")) == LINK_KINDS
