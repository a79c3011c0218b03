"""Run options declared once (`calibrate.runs.options`): the command line, `calibrate submit`, the
service's request model, a job's flags and the web form are all made of `RUN_OPTIONS`, so they
agree on names, defaults, bounds and choices."""

from __future__ import annotations

import re
from dataclasses import fields

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from calibrate.cli import build_parser
from calibrate.optimizers import OPTIMIZERS
from calibrate.runs.config import LINK_KINDS, RunConfig
from calibrate.runs.options import (
    OPTIONS,
    REQUEST,
    RUN_OPTIONS,
    config_of,
    flags_of,
    form_html,
    values_of_arguments,
)
from calibrate.service.intake import RunOptions

DEFAULTS = RunConfig(target="")


def test_every_option_is_a_field_of_runconfig_and_its_default_is_runconfigs() -> None:
    names = {f.name for f in fields(RunConfig)}
    for o in RUN_OPTIONS:
        assert o.field in names, o.name
        if o.kind in ("int", "float", "choice", "switch"):
            assert o.default == getattr(DEFAULTS, o.field), o.name


def test_the_command_line_request_and_form_share_defaults() -> None:
    args = build_parser().parse_args(["run", "nepal"])
    request = RunOptions.model_validate({})
    page = form_html("main") + form_html("more")
    for o in RUN_OPTIONS:
        if o.kind not in ("int", "float", "choice"):
            continue
        assert getattr(args, o.name) == o.default, o.name
        if o.request:
            assert getattr(request, o.name) == o.default, o.name
            field = re.search(rf'<(input|select)[^>]*data-option="{o.name}"[^>]*>', page)
            assert field is not None, f"the form has no field for {o.name}"
            if o.kind == "choice":
                assert re.search(rf'<option value="{o.default}" selected>', page), o.name
            elif o.default is not None:
                assert f'value="{o.default:g}"' in field.group(0), o.name


def test_the_optimizers_offered_are_the_registered_ones() -> None:
    assert OPTIONS["optimizer"].choices == tuple(OPTIMIZERS)
    parser = build_parser()
    for name in OPTIMIZERS:
        assert parser.parse_args(["run", "nepal", "--optimizer", name]).optimizer == name
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "nepal", "--optimizer", "annealing"])
    with pytest.raises(ValidationError):
        RunOptions.model_validate({"optimizer": "annealing"})
    assert all(f'<option value="{name}"' in form_html("more") for name in OPTIMIZERS)


def test_a_request_outside_an_options_bounds_is_refused_naming_it() -> None:
    for o in RUN_OPTIONS:
        if not o.request or o.kind not in ("int", "float"):
            continue
        if o.high is not None:
            with pytest.raises(ValidationError, match=o.name):
                RunOptions.model_validate({o.name: int(o.high) + 1})
        if o.low is not None:
            with pytest.raises(ValidationError, match=o.name):
                RunOptions.model_validate({o.name: int(o.low) - 1 if not o.open_low else int(o.low)})


# A request's values, drawn over each option's whole range
_VALUES = st.fixed_dictionaries({}, optional={
    "schemes": st.lists(st.sampled_from(["cubic", "vegas", "copa", "ledbat"]), min_size=1, max_size=3, unique=True),
    "links": st.lists(st.sampled_from(LINK_KINDS), min_size=1, max_size=2, unique=True),
    "budget": st.integers(1, 1000),
    "replicates": st.integers(1, 100),
    "runtime": st.floats(0.01, 60.0),
    "optimizer": st.sampled_from(list(OPTIMIZERS)),
    "seed": st.integers(0, 2**31 - 1),
    "time_limit": st.floats(0.5, 30 * 86400.0),
    "n_initial": st.integers(1, 1000),
    "fix": st.dictionaries(st.sampled_from(["loss", "delay"]), st.sampled_from([0.0, 0.01, 5.0]), max_size=1),
    "bound": st.dictionaries(st.sampled_from(["queue", "rate"]),
                             st.tuples(st.floats(1, 100), st.floats(101, 1e4)).map(list), max_size=2),
})


@settings(max_examples=200, deadline=None)
@given(_VALUES)
def test_values_survive_the_command_line_and_the_request_model(values: dict) -> None:
    """values -> a job's flags -> `calibrate run`'s parser -> values: the same RunConfig; and
    the request model reads the same values."""
    args = build_parser().parse_args(["run", "nepal", *flags_of(values)])
    parsed = values_of_arguments(args, REQUEST)
    given_config = config_of("nepal", values)
    assert config_of("nepal", parsed) == given_config
    request = RunOptions.model_validate(values).model_dump()
    assert config_of("nepal", {k: v for k, v in request.items() if v not in ({}, None)}) == given_config


def test_submit_sends_only_what_was_given() -> None:
    args = build_parser().parse_args(["submit", "nepal", "--budget", "4", "--fix", "loss=0",
                                      "--schemes", "all", "--links", "poisson"])
    values = {k: v for k, v in values_of_arguments(args, REQUEST).items() if v is not None}
    assert values == {"budget": 4, "fix": {"loss": 0.0}, "links": ["poisson"]}
    assert RunOptions.model_validate(values).budget == 4


@pytest.mark.parametrize(("argv", "message"), [
    (["--fix", "jitter=3"], "unknown parameter 'jitter'"),
    (["--fix", "loss"], "expected NAME=VALUE"),
    (["--bound", "queue=400:10"], "low bound must be below"),
    (["--links", "wifi"], "unknown link kind 'wifi'"),
    (["--schemes", "all,cubic"], "`all` means every scheme"),
])
def test_bad_options_name_the_problem(argv: list[str], message: str) -> None:
    from calibrate.errors import InputError

    args = build_parser().parse_args(["run", "nepal", *argv])
    with pytest.raises(InputError, match=re.escape(message)):
        values_of_arguments(args, [o.name for o in RUN_OPTIONS])
