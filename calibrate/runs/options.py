"""The options of a run, declared once.

Every way of asking for a run is derived from `RUN_OPTIONS`: the arguments of `calibrate run`,
`loo`, `ablate` and `score` (`add_arguments`), those of `calibrate submit` (the same, without
defaults: the server fills them in), the service's request model (`request_fields`, which
`calibrate.service.intake.RunOptions` is made of), the flags a server's job runs with
(`flags_of`), and the web page's form (`form_html`).  A row's default is `RunConfig`'s
(`calibrate.runs.config`), the one place defaults are written.

A run's options have three spellings, converted here and nowhere else:
- on a command line, text: ``--schemes cubic,vegas --fix loss=0 --bound queue=10:400``
  (`values_of_arguments`);
- in a request and in a job's options, JSON: ``{"schemes": ["cubic", "vegas"], "fix": {"loss": 0},
  "bound": {"queue": [10, 400]}}`` — the *values* every other function here takes;
- in a run, `RunConfig`'s fields (`config_of`).
"""

from __future__ import annotations

import argparse
import html
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import MISSING, dataclass, fields
from typing import Any, Literal

from calibrate.errors import InputError
from calibrate.optimizers import OPTIMIZERS
from calibrate.parameters import PARAMETERS
from calibrate.runs.config import LINK_KINDS, RunConfig
from calibrate.scripted import MAX_RUNTIME_S

#: the most evaluations per search, and runs of a scheme per evaluation, a request may ask for
MAX_BUDGET = 1000
MAX_REPLICATES = 100
#: the longest time limit a request may give: 30 days
MAX_TIME_LIMIT_S = 30 * 86400
MAX_SEED = 2**31 - 1

Kind = Literal["int", "float", "choice", "switch", "names", "fixed", "bounds"]


@dataclass(frozen=True)
class RunOption:
    """One option of a run."""

    name: str  # its name in a request and a job's options; the flag is --name with '-' for '_'
    field: str  # `RunConfig`'s attribute
    kind: Kind
    help: str  # one phrase: the command line's help, the request's description, the form's hint
    label: str  # the web form's label
    metavar: str | None = None
    choices: tuple[str, ...] = ()
    low: float | None = None  # a request's value is at least this (more than it where `open_low`)
    high: float | None = None
    open_low: bool = False
    form: Literal["main", "more"] | None = "more"  # where the web form shows it; None: not at all
    request: bool = True  # a request may give it (else it is the server's)
    placeholder: str = ""  # the form's text where the option has no default

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def default(self) -> Any:
        """`RunConfig`'s default as a value of this option (None where the option is absent)."""
        if self.kind in ("names", "fixed", "bounds"):
            return None  # every scheme; the link kinds the target shows; nothing fixed or bounded
        spec = next(f for f in fields(RunConfig) if f.name == self.field)
        return None if spec.default is MISSING else spec.default


RUN_OPTIONS: tuple[RunOption, ...] = (
    RunOption("schemes", "schemes", "names", "target schemes to score (labels or names), or all (the "
              "default): every one this host runs", "Schemes", metavar="A,B|all", form="main",
              placeholder="all"),
    RunOption("links", "links", "names", "link kinds, each its own search: constant, poisson or both "
              "(default: the kind the target's link logs show, else both)", "Link kinds",
              metavar="KINDS", choices=LINK_KINDS, form="main"),
    RunOption("budget", "budget", "int", "evaluations per link kind", "Budget", low=1, high=MAX_BUDGET,
              form="main"),
    RunOption("replicates", "replicates", "int", "runs of each scheme per evaluation", "Replicates",
              metavar="K", low=1, high=MAX_REPLICATES, form="main"),
    RunOption("runtime", "runtime_s", "float", "seconds per scheme run, Pantheon's -t", "Runtime (s)",
              metavar="S", low=0, open_low=True, high=MAX_RUNTIME_S, form="main"),
    RunOption("optimizer", "optimizer", "choice", "GP with qLogNEI (BoTorch), scikit-optimize GP-EI, or "
              "random search", "Optimizer", choices=tuple(OPTIMIZERS)),
    RunOption("seed", "seed", "int", "seed of traces, losses and the optimizers", "Seed", low=0,
              high=MAX_SEED),
    RunOption("time_limit", "time_limit_s", "float", "stop proposing after this many seconds of the run",
              "Time limit (s)", metavar="S", low=0, open_low=True, high=MAX_TIME_LIMIT_S,
              placeholder="none"),
    RunOption("n_initial", "n_initial", "int", "size of each search's Sobol design after its warm start "
              "(default: 2 x dims, at most budget/4)", "Initial design", metavar="N", low=1,
              high=MAX_BUDGET, placeholder="automatic"),
    RunOption("fix", "fixed", "fixed", f"fix a parameter ({', '.join(PARAMETERS)}), e.g. loss=0",
              "Fix parameters", metavar="NAME=VALUE", placeholder="loss=0"),
    RunOption("bound", "bounds", "bounds", "override a parameter's search bounds, e.g. queue=10:400",
              "Bounds", metavar="NAME=LO:HI", placeholder="queue=10:400"),
    RunOption("aggregate", "aggregate", "choice", "the target's per-scheme aggregate", "Aggregate",
              choices=("mean", "median"), form=None, request=False),
    RunOption("include_loss", "include_loss", "switch", "add the loss error to f (reported either way)",
              "Include loss", form=None, request=False),
)

OPTIONS: Mapping[str, RunOption] = {o.name: o for o in RUN_OPTIONS}
#: what a run's evaluation is (`calibrate run` and `calibrate score` share them)
EVALUATION = ("schemes", "runtime", "replicates", "seed", "aggregate", "include_loss")
#: what a search is (`calibrate run`, `loo`, `ablate`)
SEARCH = ("budget", "optimizer", "links", "time_limit", "n_initial", "fix", "bound")
#: what a request may give
REQUEST = tuple(o.name for o in RUN_OPTIONS if o.request)


# ----------------------------------------------------------------------------------------------
# The command line


def add_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup, names: Iterable[str], *,
                  defaults: bool = True, helps: Mapping[str, str] | None = None) -> None:
    """The options `names` as arguments (without `defaults`: absent ones are None, for a request
    that leaves them to the server); `helps` replaces a row's help."""
    for name in names:
        o = OPTIONS[name]
        text = (helps or {}).get(name, o.help)
        if o.kind == "switch":
            parser.add_argument(o.flag, action="store_true", default=None if not defaults else False,
                                help=text)
            continue
        if o.kind in ("fixed", "bounds"):
            parser.add_argument(o.flag, action="append", default=[], metavar=o.metavar,
                                help=f"{text}; repeatable")
            continue
        default = o.default if defaults else None
        if default is not None:
            text += " (default: %(default)s)"
        kwargs: dict[str, Any] = {"default": default, "help": text}
        if o.kind == "choice":
            kwargs["choices"] = o.choices
        else:
            kwargs["metavar"] = o.metavar
            if o.kind in ("int", "float"):
                kwargs["type"] = int if o.kind == "int" else float
        parser.add_argument(o.flag, **kwargs)


# ----------------------------------------------------------------------------------------------
# The rules a value of a names, fixed or bounds option must keep, whoever reads it (the command
# line here, the service's request model in `calibrate.service.intake`): each raises ValueError
# with the problem, and the reader adds where it was given.

#: a scheme label as Pantheon and the registry spell them
SCHEME_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}")


def checked_links(kinds: Sequence[str]) -> list[str]:
    """The link kinds named, each once, in order."""
    if not kinds:
        raise ValueError(f"no link kind: give {' or '.join(LINK_KINDS)}, or both ({','.join(LINK_KINDS)})")
    unknown = [k for k in kinds if k not in LINK_KINDS]
    if unknown:
        raise ValueError(f"unknown link kind {unknown[0]!r}; the kinds are {' and '.join(LINK_KINDS)}")
    return list(dict.fromkeys(kinds))


def checked_schemes(names: Sequence[str]) -> list[str] | None:
    """The scheme labels named; None for `all` (every scheme of the target)."""
    if not names:
        raise ValueError("no scheme: name schemes (e.g. cubic,vegas), give `all` for every one, "
                         "or leave the option out")
    if "all" in names:
        if len(names) > 1:
            raise ValueError("`all` means every scheme; give it alone")
        return None
    bad = [n for n in names if not SCHEME_LABEL.fullmatch(n)]
    if bad:
        raise ValueError(f"{bad[0]!r} is not a scheme label (letters, digits, '_', '.', '+', '-')")
    return list(names)


def checked_parameter(name: str) -> str:
    if name not in PARAMETERS:
        raise ValueError(f"unknown parameter {name!r}; the parameters are {', '.join(PARAMETERS)}")
    return name


def checked_bound(name: str, low: float, high: float) -> tuple[float, float]:
    if not low < high:
        raise ValueError(f"{name}: the low bound must be below the high one (got {low:g}:{high:g})")
    return low, high


def values_of_arguments(args: argparse.Namespace, names: Iterable[str]) -> dict[str, Any]:
    """The values (JSON) the arguments `names` give; an option left out is None."""
    values: dict[str, Any] = {}
    for name in names:
        o = OPTIONS[name]
        given = getattr(args, name)
        if o.kind == "names":
            values[name] = _names(given, o)
        elif o.kind == "fixed":
            values[name] = {k: _number(v, f"--fix {k}") for k, v in _assignments(given, o).items()} or None
        elif o.kind == "bounds":
            values[name] = {k: list(_range(k, v)) for k, v in _assignments(given, o).items()} or None
        else:
            values[name] = given
    return values


def _names(text: str | None, o: RunOption) -> list[str] | None:
    """--schemes A,B|all, --links KINDS: the names given (checked), None for every one."""
    if text is None:
        return None
    names = [s.strip() for s in text.split(",") if s.strip()]
    links = o.name == "links"
    try:
        return checked_links(names) if links else checked_schemes(names)
    except ValueError as error:
        example = ",".join(LINK_KINDS) if links else "cubic,vegas"
        raise InputError(f"{o.flag} {text!r}: {error} (e.g. {o.flag} {example})") from None


def _assignments(items: Sequence[str], o: RunOption) -> dict[str, str]:
    form = f"{o.metavar}, e.g. {o.flag} {o.placeholder}"
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep:
            raise InputError(f"{o.flag} {item!r}: expected {form}")
        try:
            out[checked_parameter(name)] = value.strip()
        except ValueError as error:
            raise InputError(f"{o.flag} {item!r}: {error} ({form})") from None
    return out


def _number(text: str, option: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise InputError(f"{option}: {text!r} is not a number") from None


def _range(name: str, text: str) -> tuple[float, float]:
    lo, sep, hi = text.partition(":")
    if not sep:
        raise InputError(f"--bound {name}={text}: expected LO:HI, e.g. --bound {name}=1:10")
    try:
        return checked_bound(name, _number(lo, f"--bound {name}"), _number(hi, f"--bound {name}"))
    except ValueError as error:
        raise InputError(f"--bound {name}={text}: {error}") from None


# ----------------------------------------------------------------------------------------------
# Values -> a run's settings, a job's flags


def config_of(target: str, values: Mapping[str, Any], **host: Any) -> RunConfig:
    """The RunConfig of values (an option absent or None takes `RunConfig`'s default), with the
    host's settings (`host`: pantheon_dir, backend, ...)."""
    settings: dict[str, Any] = {}
    for name, value in values.items():
        o = OPTIONS[name]
        if value is None:
            continue
        if o.kind == "names":
            value = tuple(value)
        elif o.kind == "bounds":
            value = {k: (float(v[0]), float(v[1])) for k, v in value.items()}
        elif o.kind == "fixed":
            value = dict(value)
        settings[o.field] = value
    return RunConfig(target=target, **settings, **host)


def _flag_number(value: float) -> str:
    """A number as a flag's value: whole numbers without a decimal point, others exactly."""
    value = float(value)
    return str(int(value)) if value.is_integer() else repr(value)


def flags_of(values: Mapping[str, Any]) -> list[str]:
    """The command-line flags of values, one ``--name=value`` token each (None: left out)."""
    flags: list[str] = []
    for name, value in values.items():
        o = OPTIONS[name]
        if value is None or value == [] or value == {}:
            continue
        if o.kind == "names":
            flags.append(f"{o.flag}={','.join(value)}")
        elif o.kind == "fixed":
            flags += [f"{o.flag}={k}={_flag_number(v)}" for k, v in value.items()]
        elif o.kind == "bounds":
            flags += [f"{o.flag}={k}={_flag_number(lo)}:{_flag_number(hi)}" for k, (lo, hi) in value.items()]
        elif o.kind == "switch":
            flags += [o.flag] if value else []
        elif o.kind == "float":
            flags.append(f"{o.flag}={_flag_number(value)}")
        else:
            flags.append(f"{o.flag}={value}")
    return flags


# ----------------------------------------------------------------------------------------------
# The service's request model and the web form


def request_fields(names: Iterable[str]) -> dict[str, Any]:
    """Pydantic field definitions (`pydantic.create_model`'s keywords) of the options `names`:
    strict JSON numbers within each option's bounds, its default and description."""
    from pydantic import Field, StrictFloat

    out: dict[str, Any] = {}
    for name in names:
        o = OPTIONS[name]
        bounds: dict[str, Any] = {}
        if o.low is not None:
            bounds["gt" if o.open_low else "ge"] = o.low
        if o.high is not None:
            bounds["le"] = o.high
        if o.kind in ("int", "float"):
            kind: Any = int if o.kind == "int" else float
            if o.default is None:
                kind = kind | None
            out[name] = (kind, Field(default=o.default, strict=True, description=o.help, **bounds))
        elif o.kind == "choice":
            out[name] = (Literal[o.choices], Field(default=o.default, description=o.help))
        elif o.kind == "switch":
            out[name] = (bool, Field(default=o.default, strict=True, description=o.help))
        elif o.kind == "names":
            out[name] = (str | list[str] | None, Field(default=None, description=f"{o.help}: 'a,b' or a list"))
        elif o.kind == "fixed":
            out[name] = (dict[str, StrictFloat], Field(default_factory=dict, description=o.help))
        else:
            out[name] = (dict[str, tuple[StrictFloat, StrictFloat]], Field(default_factory=dict, description=o.help))
    return out


def form_html(where: Literal["main", "more"]) -> str:
    """The web form's fields of the options shown `where` (`calibrate.service.web`): each an
    input named and identified by its option (id with '-' for '_'), valued with its default,
    `data-kind` telling the page's script how to read it."""
    out = []
    for o in RUN_OPTIONS:
        if o.form != where:
            continue
        ident = o.name.replace("_", "-")
        hint = html.escape(o.help[0].upper() + o.help[1:])
        attrs = f'id="{ident}" name="{o.name}" data-option="{o.name}" data-kind="{o.kind}"'
        if o.kind == "choice" or (o.kind == "names" and o.choices):
            if o.kind == "names":  # the link kinds: one, or every one; none given: the target's
                pairs = [("", "as the target's logs show"), *((c, c) for c in o.choices),
                         (",".join(o.choices), " and ".join(o.choices))]
            else:
                pairs = [(c, c) for c in o.choices]
            options = "".join(f'<option value="{html.escape(v)}"{" selected" if v == o.default else ""}>'
                              f"{html.escape(t)}</option>" for v, t in pairs)
            control = f"<select {attrs}>{options}</select>"
        elif o.kind in ("int", "float"):
            low = "" if o.low is None else f' min="{o.low + (1 if o.open_low and o.kind == "int" else 0):g}"'
            high = "" if o.high is None else f' max="{o.high:g}"'
            step = "1" if o.kind == "int" else "any"
            value = "" if o.default is None else f' value="{o.default:g}"'
            holder = f' placeholder="{html.escape(o.placeholder)}"' if o.placeholder else ""
            control = f'<input {attrs} type="number"{low}{high} step="{step}"{value}{holder}>'
        else:
            holder = f' placeholder="{html.escape(o.placeholder)}"' if o.placeholder else ""
            control = f'<input {attrs} spellcheck="false"{holder}>'
        if o.kind == "names" and not o.choices:
            hint = f"Comma-separated; {hint[0].lower()}{hint[1:]}"
        if o.kind in ("fixed", "bounds"):
            hint = f"{html.escape(o.metavar or '')}, comma-separated"
        control = control.replace(">", f' aria-describedby="{ident}-help">', 1)
        wide = " wide" if o.kind == "names" and not o.choices else ""
        out.append(f'<div class="field{wide}">\n  <label for="{ident}">{html.escape(o.label)}</label>\n  {control}\n'
                   f'  <small id="{ident}-help">{hint}</small>\n</div>')
    return "\n".join(out)
