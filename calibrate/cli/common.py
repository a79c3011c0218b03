"""What several commands share: options, the objects built from them, and how results print.

Options: how a TARGET is fetched (`add_source_options`, `load_target_of`: target, run,
score), the Pantheon checkout (`add_pantheon_options`: schemes, emulate, run,
score), the emulator backend (`add_backend_options`: emulate, run, score), how one evaluation
runs and is scored (`add_evaluation_options`: run, score) and Ray (`add_ray_options`: run,
resume, score).  Output: the numbers (`fmt_f`, `fmt_duration`) and tables (`scheme_rows`,
`print_result`) that `run`, `resume`, `score` and `export` print alike.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from calibrate.engine import BACKENDS, Backend
from calibrate.errors import EnvironmentProblem, InputError
from calibrate.schemes import Registry, load_registry

if TYPE_CHECKING:
    from calibrate.runs.result import CalibrationResult

TARGET_HELP = ("a Pantheon result ID (P188, 188 or its URL), an archive (.tar.xz/.tar.gz/.zip) or "
               "data directory, a summary table (CSV, JSON, compare_two_experiments text), a saved "
               "target JSON, or a bundled name (nepal, or bundled:nepal where a file or directory "
               "here has that name)")


# ----------------------------------------------------------------------------------------------
# One vocabulary (README, "Options"): every output path is --out; --json prints JSON on stdout
# instead of tables, --json-out FILE writes it to FILE as well; --runtime S, --replicates N and
# --schemes A,B|all mean the same in every command.  The spellings they replaced stay, hidden
# from --help, for one release.


class _OldSpelling(argparse.Action):
    """An option's former spelling: stores into the new option's place and says, on stderr,
    what it is called now."""

    def __init__(self, option_strings: list[str], dest: str, new: str = "", **kwargs: Any) -> None:
        self.new = new
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        print(f"calibrate: note: {option_string} is now spelled {self.new}; the old spelling "
              f"goes in a later release", file=sys.stderr)
        setattr(namespace, self.dest, values)


def old_spelling(parser: argparse.ArgumentParser | Any, old: str, new: str, dest: str,
                 **kwargs: Any) -> None:
    """Keep `old` working as `new` (stored in `dest`), hidden from --help.  Add it after `new`,
    whose default then stands."""
    parser.add_argument(old, dest=dest, action=_OldSpelling, new=new, help=argparse.SUPPRESS,
                        default=argparse.SUPPRESS, **kwargs)


def requested_links(args: argparse.Namespace) -> tuple[str, ...]:
    """--links KINDS: the link kinds named (checked), or () when the option is not given."""
    from calibrate.runs.options import values_of_arguments

    return tuple(values_of_arguments(args, ["links"])["links"] or ())


# ----------------------------------------------------------------------------------------------
# The target


def add_source_options(parser: argparse.ArgumentParser) -> None:
    """How result IDs and archives are fetched (`target`, `run`, `score`)."""
    from calibrate.targets import result_id as r

    group = parser.add_argument_group("fetching result IDs and archives")
    group.add_argument("--base-url", help=f"Pantheon website (env {r.ENV_BASE_URL}; default "
                                          f"{r.DEFAULT_BASE_URL})")
    group.add_argument("--index", help=f"archive index, a JSON file or URL (env {r.ENV_INDEX})")
    group.add_argument("--cache-dir", type=Path,
                       help=f"download and extraction cache (env {r.ENV_CACHE_DIR}; default "
                            "~/.cache/calibrate)")
    group.add_argument("--offline", action="store_const", const=True, default=None,
                       help=f"use only the cache, never the network (env {r.ENV_OFFLINE}=1)")
    group.add_argument("--max-extract-bytes", type=int,
                       help=f"refuse archives expanding past this (env {r.ENV_MAX_EXTRACT}; "
                            f"default {r.DEFAULT_MAX_BYTES})")


def load_target_of(args: argparse.Namespace):
    """The target `args.target` names, fetched as `add_source_options` say."""
    from calibrate.targets.load import load_target
    from calibrate.targets.result_id import FetchOptions

    options = FetchOptions.from_environment(
        base_url=args.base_url, index=args.index, cache_dir=args.cache_dir, offline=args.offline,
        max_extract_bytes=args.max_extract_bytes, progress=sys.stderr.isatty())
    return load_target(args.target, fetch=options)


# ----------------------------------------------------------------------------------------------
# Schemes and the emulator backend


def add_pantheon_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pantheon-dir", type=Path, metavar="DIR",
                        help="a Pantheon checkout: add its src/wrappers/<key>.py as pantheon-<key> "
                             "(preferred for the label <key> when available)")
    parser.add_argument("--pantheon-python", metavar="PYTHON",
                        help="interpreter for Pantheon's wrappers (default: python2 if one runs, "
                             "else python3)")


def registry_from(args: argparse.Namespace) -> Registry:
    return load_registry(args.pantheon_dir, args.pantheon_python)


def add_backend_options(parser: argparse.ArgumentParser) -> None:
    """`--backend engine|mahimahi` and `--mahimahi-user` (emulate, score, run)."""
    group = parser.add_argument_group("emulator backend")
    group.add_argument("--backend", choices=BACKENDS, default="engine",
                       help="engine (default): this project's calibrate-link; mahimahi: the same "
                            "runs through your real mm-delay/mm-loss/mm-link (on PATH, setuid "
                            "root), to calibrate on or check an export in real Mahimahi")
    group.add_argument("--mahimahi-user", metavar="NAME",
                       help="with --backend mahimahi: the unprivileged account Mahimahi's shells "
                            "run as (they refuse root)")


def backend_from(args: argparse.Namespace) -> Backend:
    """The Backend the options name (checked: a mahimahi backend needs its user)."""
    return Backend(args.backend, args.mahimahi_user)


def require_root() -> None:
    if os.geteuid() != 0:
        raise EnvironmentProblem("calibration runs emulators in network namespaces, which needs "
                                 "root (CAP_NET_ADMIN); run calibrate as root")


# ----------------------------------------------------------------------------------------------
# One evaluation, and Ray


def add_evaluation_options(parser: argparse.ArgumentParser) -> None:
    """TARGET and how one evaluation runs and is scored (`run` and `score`)."""
    from calibrate.runs.options import EVALUATION, add_arguments

    parser.add_argument("target", metavar="TARGET", help=TARGET_HELP)
    add_arguments(parser, EVALUATION)
    add_pantheon_options(parser)
    add_backend_options(parser)
    add_source_options(parser)


def run_config(args: argparse.Namespace, *search: str, links: tuple[str, ...] | None = None):
    """RunConfig from `add_evaluation_options`, plus the `search` options of
    `calibrate.runs.options` (their arguments) and the link kinds to search."""
    from calibrate.runs.options import EVALUATION, config_of, values_of_arguments

    values = values_of_arguments(args, [*EVALUATION, *search])
    if links is not None:
        values["links"] = list(links)
    return config_of(args.target, values,
                     pantheon_dir=None if args.pantheon_dir is None else str(args.pantheon_dir.resolve()),
                     pantheon_python=args.pantheon_python, backend=args.backend,
                     mahimahi_user=args.mahimahi_user)


def add_ray_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Ray")
    group.add_argument("--address", help="join this Ray cluster (env RAY_ADDRESS); default: start "
                                         "an embedded one on this host")
    group.add_argument("--slots", type=int, metavar="N",
                       help="engines at once (default: an embedded Ray's 4 per core, a joined cluster's "
                            "slots; on an autoscaling cluster, the most it grows to)")
    group.add_argument("--quiet", action="store_true", help="no live display; one line per evaluation")


def ray_settings(args: argparse.Namespace):
    """The RaySettings `add_ray_options` name."""
    from calibrate.evaluation import RaySettings

    if args.slots is not None and args.slots < 1:
        raise InputError(f"--slots must be at least 1, got {args.slots}")
    return RaySettings(address=args.address, slots=args.slots)


# ----------------------------------------------------------------------------------------------
# Output


def writable(path: Path, option: str, *, directory: bool = False) -> Path:
    """Check, before any work starts, that the output `path` (`option`'s) can be written: a
    file in an existing, writable directory; or a directory that exists or can be made (its
    nearest existing parent is writable).  Nothing is created."""
    import tempfile

    path = Path(path).expanduser()
    if path.is_dir() and not directory:
        raise InputError(f"{option} {path} is a directory; give a file name in it, e.g. "
                         f"{path / 'result.json'}")
    if path.exists() and directory and not path.is_dir():
        raise InputError(f"{option} {path} is a file, not a directory; choose another {option}")
    if directory:
        base = path
        while not base.exists() and base != base.parent:
            base = base.parent
    else:
        base = path.parent
        if not base.is_dir():
            raise InputError(f"cannot write {option} {path}: {base} is not a directory"
                             + ("" if base.exists() else " (no such directory): create it first")
                             + f", or choose another {option}")
    if not base.is_dir():
        raise InputError(f"cannot write {option} {path}: {base} is a file; choose another {option}")
    try:
        with tempfile.NamedTemporaryFile(dir=base, prefix=".calibrate-write-test-"):
            pass
    except OSError as error:
        raise InputError(f"cannot write {option} {path}: {base} is not writable "
                         f"({error.strerror or error}); choose another {option}") from None
    if not directory and path.exists() and not os.access(path, os.W_OK):
        raise InputError(f"cannot write {option} {path}: the file is not writable; choose another "
                         f"{option}")
    return path


def plural(count: int, word: str) -> str:
    """``1 scheme``, ``2 schemes``: a count and its noun, for the commands' one-line notes."""
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def workload_text(problem: Any, config: Any) -> str:
    """What one evaluation runs, as `run`, the studies and `score` announce it: e.g. "3 schemes
    (bbr, cubic, reno), 2 replicates of 30 s"."""
    return (f"{plural(len(problem.schemes), 'scheme')} ({', '.join(problem.schemes)}), "
            f"{plural(config.replicates, 'replicate')} of {config.runtime_s:g} s")


def dropped_lines(problem: Any) -> list[str]:
    """The notes for the target's schemes that are not scored (the ones without an
    implementation here on one line, every other with its reason), a warning per stand-in
    scored, the era assumed for a target without a date, and runs shorter than the target's."""
    unknown = [label for label, why in problem.dropped.items() if why.startswith("unknown scheme")]
    lines = [f"calibrate: not scored, no implementation on this host (see `calibrate schemes`): "
             f"{', '.join(unknown)}"] if unknown else []
    lines += [f"calibrate: not scored: {label}: {why}" for label, why in problem.dropped.items()
              if label not in unknown]
    lines += [f"calibrate: warning: {label} runs as a stand-in: {why}"
              for label, why in problem.substitutes.items()]
    if problem.era_assumed:
        lines.append(f"calibrate: note: the target has no date; its labels are read as the schemes "
                     f"Pantheon ran in {problem.era} (a saturator or koho_cc label means 2017, "
                     "else 2018-2020)")
    ours, theirs = problem.workload.runtime_s, problem.target_runtime_s
    if theirs is not None and ours < theirs:
        lines.append(f"calibrate: note: runs of {ours:g} s against the target's {theirs:g} s: a scheme "
                     f"that ramps up slowly (scream) is scored short of the steady state the target "
                     f"measured; --runtime {theirs:g} matches the target")
    return lines


def fmt_f(value: float | None) -> str:
    """A replication error (or its noise): one decimal and %, or – when unknown."""
    return "–" if value is None or not math.isfinite(value) else f"{value:.1f} %"


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _num(value: float | None, digits: int, scale: float = 1.0) -> str:
    return "–" if value is None else f"{value * scale:.{digits}f}"


def scheme_rows(schemes: list[dict[str, Any]], title: str):
    """The per-scheme real-vs-emulated table (rows of `calibrate.runs.evaluate.scheme_table`)."""
    from rich.table import Table

    rows = Table(title=title, title_justify="left")
    for column in ("scheme", "flow", "tput real", "tput emu", "p95 real", "p95 emu",
                   "loss real %", "loss emu %", "error %"):
        rows.add_column(column)
    for s in schemes:
        real, emu = s["real"], s["emulated"] or {}
        err = s["error_pct"]
        rows.add_row(s["scheme"], s["flow"], f"{real['tput']:.2f}", _num(emu.get("tput"), 2),
                     f"{real['delay']:.1f}", _num(emu.get("delay"), 1),
                     f"{100 * real['loss']:.2f}", _num(emu.get("loss"), 2, 100),
                     f"{(err['tput'] + err['delay']) / 2:.1f}")
    return rows


def print_result(result: CalibrationResult, run_dir: Path, exported: Path | None) -> None:
    """A calibration's result as `run`, `resume` and `export` print it."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 160)
    table = Table(title=f"calibration of {result.target}: {result.evaluations} evaluations, "
                        f"{fmt_duration(result.wall_s)}", title_justify="left")
    # "stopped": why the search ended (budget, time limit, no improvement possible), or "not
    # yet" for a run still going or interrupted (`calibrate resume` continues it)
    for column in ("link kind", "f", "noise", "rate Mbit/s", "delay ms", "queue pkts", "loss %",
                   "evals", "stopped"):
        table.add_column(column)
    for link, v in result.links.items():
        if v.params is None:
            table.add_row(link, "–", "–", "–", "–", "–", "–", "0", v.stopped or "not yet")
            continue
        p = v.params
        mark = " *" if link == result.winner else ""
        table.add_row(link + mark, fmt_f(v.f), fmt_f(v.noise), f"{p['rate']:.2f}",
                      f"{p['delay']:.0f}", f"{p['queue']:.0f}", f"{100 * p['loss']:.3f}",
                      str(v.evaluations), v.stopped or "not yet")
    console.print(table)
    for link, v in result.links.items():
        if v.scored:
            console.print(f"{link}: {v.ranges_of().sentence()}", highlight=False)
    best = result.best
    if best:
        console.print(scheme_rows([dict(row) for row in best.schemes],
                                  f"per scheme, {result.winner} (* = winner): real vs emulated"))
        console.print(f"emulator: {best.emulator}", highlight=False)
    if result.dropped:
        console.print(f"not scored: {', '.join(result.dropped)} (reasons in run.json)",
                      highlight=False)
    console.print(f"run directory: {run_dir}" + (f"; export: {exported}" if exported else ""),
                  highlight=False)
