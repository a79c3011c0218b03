"""Calibration-efficiency benchmark: GP-EI (gpytorch, skopt) vs random search on synthetic targets.

Prints a table of the hidden emulators, a per-seed table and a summary table, and writes CSV and a
convergence plot to experiments/out/.  The question: per optimizer, how many
evaluations and how much wall time it needs to get within 1.1 × the final best f, and the f it
ends with.  Goal: GP-EI gets there in ≤ 40 evaluations and clearly beats random search.

Definitions (also printed with the tables):

- f: the project's replication error (`calibrate.objective.replication_error`: the paper's mean of
  throughput and p95-delay % differences, `RunConfig`'s aggregate and loss settings), observed,
  i.e. noisy, exactly as the optimizer is told it.
- f_best(seed): the lowest f observed by ANY optimizer on that seed's target within the budget,
  a common reference so that every optimizer is judged against the same number.
- evals to 1.1×: the first evaluation (1-based, in the order told) after which the best f observed
  so far is ≤ 1.1 × f_best(seed); "–" when never within the budget.
- wall to 1.1×: seconds from the optimizer's creation to the tell of that evaluation.
- final f: the best f observed at the budget.
- rate err / delay err: the incumbent's error vs the hidden x* (rate relative, %; delay, ms).  The
  incumbent is `Optimizer.best()` (for the GPs the lowest posterior mean kept within two reported
  standard errors of each measurement, for random search the lowest observation), the emulator
  `calibrate run` would report.
- EI stop: the evaluation after which `improvement_ruled_out()`, the loop's stop rule (the model
  is confident no point beats the incumbent by more than the noise; calibrate.optimizers.rules),
  first held (the model evaluator checks it after each batch, as the loop (calibrate.runs.controller)
  does after each evaluation, but keeps going to the budget); "–" when it never held.

Two evaluators (``--evaluator``):

``model`` (default): real emulation is far too slow here for 3 optimizers × 5 seeds × 40
evaluations, so a seed's target is the *fluid model* (`calibrate.fluid`, its rules and replicate
noise documented there) of saturator, cubic, vegas and copa over a hidden emulator x* = <rate,
one-way delay, DropTail queue, uplink loss>, drawn per seed from `MODEL_RANGES`, with constant
deliveries.  Replicate noise is seeded per (seed, stream, evaluation, replicate), so evaluation i
of every optimizer sees the same noise (common random numbers).  The target is the model at x*
averaged over 10 replicates; the space and the warm start come from the target's statistics
(`space_from_target`, `warm_start`, the default Pantheon hints: saturator and cubic saturate,
vegas and copa are delay-based, the saturator probes the rate), the initial design size from
`RunConfig.initial_design`, the warm start is passed as the loop passes it.  Each optimizer is driven through ask/tell
directly, in synchronous batches of ``--batch`` points (the slots of the host), each scored with
``--replicates`` noisy replicates, and told f and its delta-method noise as the loop tells
them.  The targets have constant deliveries, and one link kind is searched (the goal's "per link
kind" is this one).  Wall times are the optimizers' own overhead (the model costs microseconds);
with real evaluations add the evaluations' time, about (runtime + 3 s) per batch.

``emulator``: the real thing.  Per seed a hidden emulator (drawn from `EMULATOR_RANGES`, small
rates for a small host) runs ``--schemes`` ``--target-runs`` times like `calibrate emulate`
(`calibrate.scripted.run_experiment`); that data dir is the target of a real
`Calibration(...).run(Evaluator(...))` per optimizer (constant deliveries only, like the hidden
emulator; `calibrate run --links constant`), on one embedded Ray (or ``--address``).  The
columns come from each run's journal (evaluations.jsonl: f, elapsed_s) and result.json (the
incumbent); its searches end their global phase early when the stop rule holds and refine
locally, as `calibrate run` does (EI stop: the first journal line marked "confident").
f(x*) is the hidden emulator itself scored like a candidate (`Calibration.evaluate`).  Run
directories stay under OUT/bench_calibration-runs-<time>/.  Needs root.

``mahimahi-targets``: the targets made by **real Mahimahi** with Linux cubic, reno and bbr
(../shared/data/mahimahi-targets/M1..M3, read from there; their true emulators and run-to-run
noise floors from its README): per target and optimizer a real `calibrate run` (both link kinds,
``--budget`` evaluations each, ``--replicates`` runs of the target's 30 s), and the table
of the goals below: the winner's parameters against the truth, its f against the floor, the reported
ranges and whether they hold the truth, evaluations and wall time.  ``--no-evidence`` drops the
targets' per-packet logs (throughput, p95 and loss only, as a perf table gives), to measure the
search without them.  ``--rescore N`` also scores the winner and the true emulator on fresh runs (N of
each scheme, a seed no search uses): the search's own f of its winner is one draw, and with one
replicate per scheme it scatters by about the floor.  Goals: f ≤ 1.5 × the floor on
every target; where the floor is low (M1), rate within 5 %, delay within 2 ms, queue within 25 %;
elsewhere the truth inside the ranges.  Needs root.

Run:  .venv/bin/python experiments/bench_calibration.py                       # model, 5 seeds
      .venv/bin/python experiments/bench_calibration.py --seeds 2 --budget 20 --optimizers gpytorch,random
      .venv/bin/python experiments/bench_calibration.py --cold              # no warm start: the search alone
      sudo .venv/bin/python experiments/bench_calibration.py --evaluator emulator --seeds 1 --budget 12
      sudo .venv/bin/python experiments/bench_calibration.py --evaluator mahimahi-targets --optimizers gpytorch
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime as dt
import json
import math
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from calibrate.fluid import NOISE_SD, bdp_packets, model_replicates
from calibrate.metrics import Stats
from calibrate.objective import Key, replication_error
from calibrate.optimizers import OPTIMIZERS, make_optimizer
from calibrate.physics import SchemeMeasurement, space_from_target, warm_start
from calibrate.runs.calibration import Calibration
from calibrate.runs.config import RunConfig, emulator_of, emulator_seed
from calibrate.runs.evaluate import score_emulator
from calibrate.runs.journal import RunDir
from calibrate.runs.problem import links_for
from calibrate.space import SearchSpace

OUT = Path(__file__).resolve().parent / "out"
console = Console(width=None if sys.stdout.isatty() else 150)  # piped tables stay whole

#: within this factor of f_best(seed) counts as "reached"
REACH = 1.1

MODEL_SCHEMES = ("saturator", "cubic", "vegas", "copa")
TARGET_REPLICATES = 10
TARGET_STREAM, EVALUATION_STREAM, TRUTH_STREAM = 0, 1, 2
TRUTH_DRAWS = 5  # model evaluations at x* behind its typical f (their median)


@dataclass(frozen=True)
class Ranges:
    """Where a seed's hidden emulator is drawn from."""

    rate: tuple[float, float]  # Mbit/s, log-uniform
    delay: tuple[int, int]  # ms, uniform integers
    queue_bdp: tuple[float, float] = (0.1, 7.0)  # queue / BDP, log-uniform (the paper's six: 0.14–6.5)
    loss: tuple[float, float] = (1e-4, 0.05)  # log-uniform when lossy; lossless with probability 1/2
    min_queue: int = 4


#: the paper's six calibrated emulators span 0.57–115 Mbit/s, 27–130 ms, loss 0–4.8 %
MODEL_RANGES = Ranges(rate=(1.0, 100.0), delay=(5, 150))
#: what a 2-core host emulates a few schemes at, side by side, without distortion
EMULATOR_RANGES = Ranges(rate=(2.0, 16.0), delay=(10, 60))


def draw_hidden(seed: int, ranges: Ranges) -> dict[str, float]:
    """The seed's hidden emulator x*."""
    rng = np.random.default_rng([seed, 99])

    def log_uniform(lo: float, hi: float) -> float:
        return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))

    rate = log_uniform(*ranges.rate)
    delay = int(rng.integers(ranges.delay[0], ranges.delay[1] + 1))
    queue = max(ranges.min_queue, round(bdp_packets(rate, delay) * log_uniform(*ranges.queue_bdp)))
    loss = log_uniform(*ranges.loss) if rng.random() < 0.5 else 0.0
    return {"rate": rate, "delay": delay, "queue": queue, "loss": loss}


@dataclass(frozen=True)
class ModelProblem:
    """One seed's synthetic target and what the calibration derives from it."""

    seed: int
    hidden: Mapping[str, float]
    real: Mapping[Key, Stats]
    space: SearchSpace
    warm_start: Mapping[str, float]
    config: RunConfig

    @classmethod
    def of(cls, seed: int, config: RunConfig) -> ModelProblem:
        hidden = draw_hidden(seed, MODEL_RANGES)
        runs = model_replicates(hidden, seed, TARGET_STREAM, 0, TARGET_REPLICATES,
                                schemes=MODEL_SCHEMES)
        values = {s: np.array([[r.throughput, r.delay, r.loss] for r in rs]) for s, rs in runs.items()}
        real: dict[Key, Stats] = {s: Stats(*map(float, v.mean(axis=0))) for s, v in values.items()}
        # as a Target holds them: means, Pantheon's (ddof 0) standard deviations, the runs
        stats = {}
        for s, v in values.items():
            (tput, delay, loss), (tput_sd, delay_sd, loss_sd) = v.mean(axis=0), v.std(axis=0)
            stats[s] = SchemeMeasurement(float(tput), float(delay), float(loss), float(tput_sd), float(delay_sd),
                                         float(loss_sd), runs=len(v))
        return cls(seed, hidden, real, space_from_target(stats), warm_start(stats), config)

    def evaluate(self, x: Mapping[str, float], stream: int, index: int, replicates: int) -> tuple[float, float]:
        """(f, its noise) of emulator x, as the loop scores and tells it."""
        emulated: dict[Key, list[Stats]] = dict(
            model_replicates(x, self.seed, stream, index, replicates, schemes=MODEL_SCHEMES).items())
        error = replication_error(self.real, emulated,  # RunConfig checks aggregate: "mean" or "median"
                                  aggregate=self.config.aggregate,  # type: ignore[arg-type]
                                  include_loss=self.config.include_loss)
        return error.f, (error.noise if math.isfinite(error.noise) else math.nan)


# ----------------------------------------------------------------------------------------------
# One search's outcome, from either evaluator


@dataclass
class Trace:
    """One (seed, optimizer) search."""

    seed: int
    optimizer: str
    hidden: Mapping[str, float]
    f: list[float]  # observed f per evaluation, in the order told
    elapsed_s: list[float]  # seconds since the search began, when each was told
    incumbent: Mapping[str, float]  # the optimizer's chosen emulator
    ei_stop: int | None  # evaluations done when the EI stop signal first fired

    @property
    def final_f(self) -> float:
        return min(self.f)

    def reached(self, reference: float) -> int | None:
        """The first evaluation (1-based) after which the best f so far ≤ REACH × reference."""
        hits = np.flatnonzero(np.minimum.accumulate(self.f) <= REACH * reference)
        return int(hits[0]) + 1 if hits.size else None

    def rate_error_pct(self) -> float:
        return 100 * (self.incumbent["rate"] / self.hidden["rate"] - 1)

    def delay_error_ms(self) -> float:
        return float(self.incumbent["delay"]) - float(self.hidden["delay"])


def model_search(problem: ModelProblem, name: str, budget: int, batch: int, replicates: int,
                 cold: bool = False) -> Trace:
    """ask/tell in synchronous batches of `batch`, warm start and design as the loop
    (`cold`: without the warm start, to measure the search alone)."""
    space, config = problem.space, problem.config
    started = time.monotonic()
    opt = make_optimizer(name, space.dim, seed=config.seed,
                         warm_start=[] if cold else [space.from_values(problem.warm_start, clip=True)],
                         n_initial=config.initial_design(space.dim))
    f: list[float] = []
    elapsed: list[float] = []
    ei_stop = None
    while len(f) < budget:
        xs = opt.ask(min(batch, budget - len(f)))
        scored = [problem.evaluate(space.to_values(x), EVALUATION_STREAM, len(f) + i, replicates)
                  for i, x in enumerate(xs)]
        opt.tell(xs, [s[0] for s in scored], [s[1] for s in scored])
        f += [s[0] for s in scored]
        if ei_stop is None and len(f) < budget and opt.improvement_ruled_out():
            ei_stop = len(f)
        elapsed += [time.monotonic() - started] * len(xs)
    return Trace(problem.seed, name, problem.hidden, f, elapsed, space.to_values(opt.best().x), ei_stop)


def run_model(args: argparse.Namespace, optimizers: list[str]) -> tuple[list[Trace], list[dict]]:
    traces, hidden_rows = [], []
    with console.status("model ...") as status:
        for seed in range(args.seeds):
            config = RunConfig(target=f"model-seed{seed}", budget=args.budget, replicates=args.replicates,
                               links=("constant",), seed=seed)
            problem = ModelProblem.of(seed, config)
            truth = float(np.median([problem.evaluate(problem.hidden, TRUTH_STREAM, i, args.replicates)[0]
                                     for i in range(TRUTH_DRAWS)]))
            hidden_rows.append(hidden_row(seed, problem.hidden, problem.space, problem.warm_start, truth))
            for name in optimizers:
                status.update(f"model: seed {seed + 1}/{args.seeds}, {name}")
                traces.append(model_search(problem, name, args.budget, args.batch, args.replicates,
                                           args.cold))
    return traces, hidden_rows


def hidden_row(seed: int, hidden: Mapping[str, float], space: SearchSpace,
               start: Mapping[str, float], truth: float | None) -> dict[str, Any]:
    inside = all(lo - 1e-9 <= float(hidden[n]) <= hi + 1e-9 for n, (lo, hi) in space.bounds.items())
    return {"seed": seed, **{f"hidden_{k}": v for k, v in hidden.items()},
            **{f"start_{k}": v for k, v in start.items()},
            **{f"bound_{k}": f"{lo:.3g}–{hi:.3g}" for k, (lo, hi) in space.bounds.items()},
            "hidden_in_space": inside, "f_at_hidden": truth}


# ----------------------------------------------------------------------------------------------
# The real emulator


def run_emulator(args: argparse.Namespace, optimizers: list[str]) -> tuple[list[Trace], list[dict]]:
    from calibrate.cluster.evaluator import Evaluator
    from calibrate.evaluation import RaySettings
    from calibrate.schemes import load_registry
    from calibrate.scripted import Experiment, run_experiment
    from calibrate.targets.load import load_target
    from calibrate.targets.model import Workload

    if os.geteuid() != 0:
        sys.exit("bench_calibration: --evaluator emulator runs emulations: run as root")
    schemes = tuple(load_registry().select(args.schemes))
    root = args.out / f"bench_calibration-runs-{dt.datetime.now().strftime('%Y%m%dT%H%M%S')}"
    traces, hidden_rows = [], []
    with Evaluator(RaySettings(address=args.address, slots=args.slots)) as evaluator:
        for seed in range(args.seeds):
            hidden = draw_hidden(seed, EMULATOR_RANGES)
            data_dir = root / f"seed{seed}" / "target"
            emulator = emulator_of(hidden, "constant", seed)
            console.print(f"seed {seed}: target: {len(schemes)} schemes × {args.target_runs} runs over "
                          f"{emulator.mahimahi_command()}", highlight=False)
            run_experiment(Experiment(emulator, schemes, Workload(1, 0.0, args.runtime, args.target_runs),
                                      data_dir, seed=seed, parallel=2))
            target = load_target(str(data_dir))
            truth = None
            for name in optimizers:
                config = RunConfig(target=str(data_dir), budget=args.budget, optimizer=name,
                                   runtime_s=args.runtime, replicates=args.replicates,
                                   links=("constant",), seed=seed)
                run_dir = root / f"seed{seed}" / name
                console.print(f"seed {seed}: {name}: calibrating into {run_dir}", highlight=False)
                calibration = Calibration.start(run_dir, config, target)
                result = calibration.run(evaluator)
                records = RunDir.open(run_dir).evaluations()
                link = result["links"]["constant"]
                confident = next((i + 1 for i, r in enumerate(records) if r.confident), None)
                traces.append(Trace(seed, name, hidden, [r.f for r in records],
                                    [r.elapsed_s for r in records], link["params"], confident))
                if truth is None:
                    truth = calibration.evaluate(evaluator, hidden, "constant").f
                    hidden_rows.append(hidden_row(seed, hidden, calibration.problem.space,
                                                  calibration.problem.warm_start, truth))
    console.print(f"run directories under {root}", highlight=False)
    return traces, hidden_rows


# ----------------------------------------------------------------------------------------------
# Targets made by real Mahimahi

MAHIMAHI_TARGETS = Path(__file__).resolve().parents[2] / "shared" / "data" / "mahimahi-targets"
#: the goal's tolerances where the floor is low
LOW_FLOOR_PCT = 5.0
TOLERANCE = {"rate": 0.05, "delay": 2.0, "queue": 0.25, "loss": 0.30}


def read_truths(readme: Path) -> dict[str, dict[str, Any]]:
    """The README's table of true emulators: target -> link, rate, delay, queue, loss, floor."""
    import re

    row = re.compile(r"^\|\s*(M\d+)\s*\|\s*(constant|poisson)\s*\|\s*([\d.]+)\s*\|\s*(\d+)\s*\|"
                     r"\s*(\d+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)\s*%\s*\|", re.M)
    return {m[1]: {"link": m[2], "rate": float(m[3]), "delay": int(m[4]), "queue": int(m[5]),
                   "loss": float(m[6]), "floor": float(m[7])} for m in row.finditer(readme.read_text())}


def recovery(params: Mapping[str, float], truth: Mapping[str, Any]) -> dict[str, Any]:
    """Each parameter's error against the truth and whether it is within the goal's tolerance."""
    rate_err = params["rate"] / truth["rate"] - 1
    queue_err = params["queue"] / truth["queue"] - 1
    loss_err = (params["loss"] / truth["loss"] - 1) if truth["loss"] > 0 else None
    return {"rate_err_pct": 100 * rate_err, "delay_err_ms": params["delay"] - truth["delay"],
            "queue_err_pct": 100 * queue_err, "loss_err_pct": None if loss_err is None else 100 * loss_err,
            "within_tolerance": (abs(rate_err) <= TOLERANCE["rate"] and abs(params["delay"] - truth["delay"])
                                 <= TOLERANCE["delay"] and abs(queue_err) <= TOLERANCE["queue"]
                                 and (loss_err is None or abs(loss_err) <= TOLERANCE["loss"]))}


def truth_in_ranges(ranges: Mapping[str, Sequence[float]] | None, truth: Mapping[str, Any]) -> str:
    if not ranges:
        return "no ranges"
    outside = [n for n, (lo, hi) in ranges.items()
               if not lo - 1e-9 <= (truth[n] if n != "rate" else truth["rate"]) <= hi + 1e-9]
    return "yes" if not outside else "no: " + ", ".join(outside)


#: seed of the fresh runs that re-score a winner and the truth (`--rescore`): one the searches never use
RESCORE_SEED = 7


def rescored_f(calibration: Calibration, evaluator: Any, params: Mapping[str, float], link: str,
               replicates: int) -> float:
    """f of one emulator on fresh runs (`RESCORE_SEED`, `replicates` of each scheme): a search's
    own f of its winner is one draw, and with one replicate it scatters by about the floor."""
    config = dataclasses.replace(calibration.config, replicates=replicates, seed=RESCORE_SEED)
    emulator = emulator_of(params, link, emulator_seed(RESCORE_SEED, link))
    return score_emulator(calibration.problem, config, calibration.schemes(), evaluator, emulator).f


def run_mahimahi_targets(args: argparse.Namespace, optimizers: list[str]) -> list[dict[str, Any]]:
    from calibrate.cluster.evaluator import Evaluator
    from calibrate.evaluation import RaySettings
    from calibrate.targets.load import load_target

    if os.geteuid() != 0:
        sys.exit("bench_calibration: --evaluator mahimahi-targets runs emulations: run as root")
    truths = read_truths(MAHIMAHI_TARGETS / "README.md")
    names = [t.strip() for t in args.targets.split(",") if t.strip()]
    root = args.out / f"bench_calibration-mahimahi-{dt.datetime.now().strftime('%Y%m%dT%H%M%S')}"
    rows = []
    with Evaluator(RaySettings(address=args.address, slots=args.slots)) as evaluator:
        for name in names:
            truth = truths[name]
            target = load_target(str(MAHIMAHI_TARGETS / name))
            if args.no_evidence:
                target = dataclasses.replace(target, evidence=None)
            for optimizer in optimizers:
                config = RunConfig(target=str(MAHIMAHI_TARGETS / name), budget=args.budget, optimizer=optimizer,
                                   runtime_s=target.workload.runtime_s, replicates=args.replicates, seed=0,
                                   links=links_for(target))
                run_dir = root / f"{name}-{optimizer}"
                console.print(f"{name}: {optimizer}: calibrating into {run_dir}", highlight=False)
                started = time.monotonic()
                calibration = Calibration.start(run_dir, config, target)
                inside = all(lo - 1e-9 <= float(truth[n]) <= hi + 1e-9
                             for n, (lo, hi) in calibration.problem.space.bounds.items())
                result = calibration.run(evaluator)
                wall = time.monotonic() - started
                winner = result["best"]
                true_link = result["links"].get(truth["link"], {})
                fresh: dict[str, Any] = {}
                if args.rescore:
                    console.print(f"{name}: re-scoring the winner and the truth on fresh runs "
                                  f"({args.rescore} of each scheme)", highlight=False)
                    truth_params = {n: float(truth[n]) for n in ("rate", "delay", "queue", "loss")}
                    fresh = {"rescored_f": rescored_f(calibration, evaluator, winner["params"], result["winner"],
                                                      args.rescore),
                             "rescored_truth_f": rescored_f(calibration, evaluator, truth_params, truth["link"],
                                                            args.rescore)}
                    fresh["rescored_over_truth"] = fresh["rescored_f"] / fresh["rescored_truth_f"]
                rows.append({
                    "target": name, "optimizer": optimizer, "evidence": not args.no_evidence,
                    "truth": f"{truth['link']} {truth['rate']:g}/{truth['delay']}/{truth['queue']}/"
                             f"{100 * truth['loss']:g}%",
                    "truth_in_bounds": inside, "winner_link": result["winner"],
                    "params": winner["params"], "f": winner["f"], "best_observed_f": winner["best_observed_f"],
                    "floor": truth["floor"], "f_over_floor": winner["f"] / truth["floor"],
                    **recovery(winner["params"], truth),
                    "ranges": winner.get("ranges"), "truth_in_ranges": truth_in_ranges(winner.get("ranges"), truth),
                    "true_link_f": true_link.get("f"), **fresh,
                    "evaluations": result["evaluations"], "wall_s": wall, "run_dir": str(run_dir)})
    return rows


def _range_text(name: str, low: float, high: float) -> str:
    """A parameter's range at the precision that means something: Mbit/s to 3 digits, whole ms
    and packets, loss in % to 2 significant digits."""
    if name == "loss":
        return f"loss {100 * low:.2g}–{100 * high:.2g} %"
    if name == "rate":
        return f"rate {low:.3g}–{high:.3g} Mbit/s"
    return f"{name} {low:.0f}–{high:.0f} {'ms' if name == 'delay' else 'packets'}"


def print_mahimahi_targets(rows: list[dict[str, Any]], budget: int) -> None:
    table = Table(title=f"targets made by real Mahimahi (cubic, reno, bbr): the calibration's winner vs the "
                        f"truth (rate Mbit/s / delay ms / queue packets / loss; {budget} evaluations per link kind)")
    for column in ("target", "optimizer", "logs", "truth", "in bounds", "winner", "rate", "delay", "queue",
                   "loss %", "f %", "floor %", "f/floor", "rate err %", "delay err", "queue err %",
                   "truth in ranges", "evals", "wall min"):
        table.add_column(column, justify="right", no_wrap=True)
    for r in rows:
        p = r["params"]
        table.add_row(r["target"], r["optimizer"], "yes" if r["evidence"] else "no", r["truth"],
                      "yes" if r["truth_in_bounds"] else "NO", r["winner_link"], f"{p['rate']:.2f}",
                      str(p["delay"]), str(p["queue"]), f"{100 * p['loss']:.2f}", f"{r['f']:.1f}",
                      f"{r['floor']:.1f}", f"{r['f_over_floor']:.2f}", f"{r['rate_err_pct']:+.1f}",
                      f"{r['delay_err_ms']:+d}", f"{r['queue_err_pct']:+.0f}", r["truth_in_ranges"],
                      str(r["evaluations"]), f"{r['wall_s'] / 60:.0f}")
    Console(width=max(console.width, 200)).print(table)
    for r in rows:
        if r["ranges"]:
            shown = ", ".join(_range_text(n, lo, hi) for n, (lo, hi) in r["ranges"].items())
            console.print(f"{r['target']} {r['optimizer']}: ranges {shown}", highlight=False)
        if "rescored_f" in r:
            console.print(f"{r['target']} {r['optimizer']}: on fresh runs the winner's f is {r['rescored_f']:.1f} %, "
                          f"the truth's {r['rescored_truth_f']:.1f} % (ratio {r['rescored_over_truth']:.2f}); "
                          f"the floor is {r['floor']:.1f} %", highlight=False)
    console.print(f"goals: f ≤ 1.5 × floor; where the floor is below {LOW_FLOOR_PCT:g} %, rate within 5 %, delay "
                  f"within 2 ms, queue within 25 %, loss within 30 %; elsewhere the truth inside the ranges.",
                  highlight=False)


# ----------------------------------------------------------------------------------------------
# Tables, CSV, plot


def _num(value: float | None, fmt: str) -> str:
    return "–" if value is None or not math.isfinite(value) else format(value, fmt)


def _center(values: Sequence[float], unreached: str) -> str:
    """Median / mean where "not reached" is +inf, shown as `unreached` when it decides."""
    out = []
    for m in (float(np.median(values)), float(np.mean(values))):
        out.append(unreached if m == math.inf else _num(m, ".1f"))
    return " / ".join(out)


def result_rows(traces: list[Trace]) -> list[dict[str, Any]]:
    reference = {s: min(t.final_f for t in traces if t.seed == s) for s in {t.seed for t in traces}}
    rows = []
    for t in traces:
        n = t.reached(reference[t.seed])
        rows.append({"seed": t.seed, "optimizer": t.optimizer, "evaluations": len(t.f),
                     "f_best_all": reference[t.seed], "evals_to_reach": n,
                     "wall_s_to_reach": t.elapsed_s[n - 1] if n else None, "final_f": t.final_f,
                     "wall_s_total": t.elapsed_s[-1], "ei_stop": t.ei_stop,
                     "rate_err_pct": t.rate_error_pct(), "delay_err_ms": t.delay_error_ms(),
                     **{f"incumbent_{k}": v for k, v in t.incumbent.items()}})
    return rows


def print_hidden(rows: list[dict], evaluator: str) -> None:
    table = Table(title="hidden emulators x* (one per seed), the warm start and the search space "
                        "derived from each target")
    for column in ("seed", "x*: rate Mbit/s", "delay ms", "queue pkts", "loss %", "warm start",
                   "rate bounds", "delay bounds", "queue bounds", "loss bounds", "x* inside", "f(x*) %"):
        table.add_column(column, justify="right")
    for r in rows:
        table.add_row(str(r["seed"]), f"{r['hidden_rate']:.2f}", str(r["hidden_delay"]), str(r["hidden_queue"]),
                      f"{100 * r['hidden_loss']:.3f}",
                      f"{r['start_rate']:.2f}/{r['start_delay']}/{r['start_queue']}/{100 * r['start_loss']:.3f}%",
                      r["bound_rate"], r["bound_delay"], r["bound_queue"], r["bound_loss"],
                      "yes" if r["hidden_in_space"] else "NO", _num(r["f_at_hidden"], ".2f"))
    console.print(table)
    what = (f"median of {TRUTH_DRAWS} noisy model evaluations" if evaluator == "model"
            else "one evaluation, scored like a candidate")
    console.print(f"f(x*): the hidden emulator's own f ({what}): the noise floor.\n", highlight=False)


def print_tables(rows: list[dict], optimizers: list[str], budget: int) -> None:
    console.print(f"[bold]definitions[/bold]: f_best = lowest f observed by ANY optimizer on the seed's "
                  f"target; evals/wall to {REACH}× = first evaluation (and seconds since the search "
                  f"began) after which the optimizer's best observed f ≤ {REACH} × f_best; final f = "
                  f"its best observed f at the budget; rate/delay err = its incumbent (best()) vs x*; "
                  f"EI stop = evaluations done when the stop rule first held.", highlight=False)
    table = Table(title="per seed")
    for column in ("seed", "optimizer", "f_best %", f"evals to {REACH}×", f"wall s to {REACH}×",
                   "final f %", "rate err %", "delay err ms", "EI stop", "evals", "wall s"):
        table.add_column(column, justify="right")
    for r in sorted(rows, key=lambda r: (r["seed"], optimizers.index(r["optimizer"]))):
        table.add_row(str(r["seed"]), r["optimizer"], f"{r['f_best_all']:.2f}",
                      "–" if r["evals_to_reach"] is None else str(r["evals_to_reach"]),
                      _num(r["wall_s_to_reach"], ".1f"), f"{r['final_f']:.2f}", f"{r['rate_err_pct']:+.1f}",
                      f"{r['delay_err_ms']:+.0f}", "–" if r["ei_stop"] is None else str(r["ei_stop"]),
                      str(r["evaluations"]), f"{r['wall_s_total']:.1f}")
    console.print(table)

    seeds = sorted({r["seed"] for r in rows})
    summary = Table(title=f"summary over {len(seeds)} seeds (median / mean; not reached counts as "
                          f"> budget {budget})")
    for column in ("optimizer", "reached", f"evals to {REACH}×", f"wall s to {REACH}×", "final f %",
                   "|rate err| %", "|delay err| ms", "wall s total"):
        summary.add_column(column, justify="right")
    for name in optimizers:
        mine = [r for r in rows if r["optimizer"] == name]
        evals = [math.inf if r["evals_to_reach"] is None else r["evals_to_reach"] for r in mine]
        walls = [math.inf if r["wall_s_to_reach"] is None else r["wall_s_to_reach"] for r in mine]
        finals = [r["final_f"] for r in mine]
        summary.add_row(name, f"{sum(r['evals_to_reach'] is not None for r in mine)}/{len(mine)}",
                        _center(evals, f"> {budget}"), _center(walls, "not reached"),
                        f"{np.median(finals):.2f} / {np.mean(finals):.2f}",
                        f"{np.median([abs(r['rate_err_pct']) for r in mine]):.1f}",
                        f"{np.median([abs(r['delay_err_ms']) for r in mine]):.1f}",
                        f"{np.median([r['wall_s_total'] for r in mine]):.1f}")
    console.print(summary)
    by = {(r["seed"], r["optimizer"]): r for r in rows}

    def reach(r: dict) -> float:
        return math.inf if r["evals_to_reach"] is None else r["evals_to_reach"]

    if "random" in optimizers:
        for name in (o for o in optimizers if o != "random"):
            pairs = [(by[s, name], by[s, "random"]) for s in seeds]
            lower = sum(a["final_f"] < b["final_f"] for a, b in pairs)
            faster = sum(reach(a) < reach(b) for a, b in pairs)
            ratio = float(np.exp(np.mean([math.log(a["final_f"] / b["final_f"]) for a, b in pairs])))
            console.print(f"{name} vs random: lower final f on {lower} of {len(pairs)} seeds (geometric "
                          f"mean ratio of final f {ratio:.2f}); reaches {REACH}× f_best in fewer "
                          f"evaluations on {faster} of {len(pairs)}", highlight=False)


def write_csv(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def convergence_rows(traces: list[Trace]) -> list[dict]:
    return [{"seed": t.seed, "optimizer": t.optimizer, "evaluation": i + 1, "f": f, "best_so_far": b,
             "elapsed_s": e}
            for t in traces
            for i, (f, b, e) in enumerate(zip(t.f, np.minimum.accumulate(t.f), t.elapsed_s, strict=True))]


def plot(traces: list[Trace], optimizers: list[str], budget: int, floor: float | None, path: Path,
         title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import ScalarFormatter

    reference = {s: min(t.final_f for t in traces if t.seed == s) for s in {t.seed for t in traces}}
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for name in optimizers:
        mine = [t for t in traces if t.optimizer == name]
        # a search the EI signal stopped early keeps its best f to the budget
        best = np.array([np.pad(np.minimum.accumulate(t.f), (0, budget - len(t.f)), mode="edge")
                         for t in mine])
        ratio = best / np.array([[reference[t.seed]] for t in mine])
        n = np.arange(1, budget + 1)
        axes[0].plot(n, np.median(best, axis=0), label=name)
        axes[1].plot(n, np.median(ratio, axis=0), label=name)
    if floor is not None and math.isfinite(floor):
        axes[0].axhline(floor, color="gray", ls=":", lw=1, label="f(x*), median over seeds")
    axes[0].set(xlabel="evaluation", ylabel="best f so far (%), median over seeds", yscale="log",
                title=title)
    axes[1].axhline(REACH, color="gray", ls="--", lw=1, label=f"{REACH}× f_best")
    axes[1].set(xlabel="evaluation", ylabel="best f so far / f_best(seed), median", yscale="log",
                title="relative to the best of all optimizers")
    for ax in axes:
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(ScalarFormatter())
        ax.legend()
        ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--evaluator", choices=("model", "emulator", "mahimahi-targets"), default="model",
                        help="synthetic fluid model (fast), real emulations of synthetic targets, or the "
                             "targets made by real Mahimahi (root; slow) (default: %(default)s)")
    parser.add_argument("--seeds", type=int, default=5,
                        help="seeds, each its own hidden emulator (default: %(default)s)")
    parser.add_argument("--budget", type=int, default=40, help="evaluations per search (default: %(default)s)")
    parser.add_argument("--optimizers", default="gpytorch,skopt,random", help="comma-separated (default: %(default)s)")
    parser.add_argument("--replicates", type=int, default=3,
                        help="runs of each scheme per evaluation (default: %(default)s)")
    parser.add_argument("--batch", type=int, default=2,
                        help="model: points per ask, i.e. evaluations at once (default: %(default)s, the slots of "
                             "this 2-core host); emulator: the loop keeps Ray's --slots busy instead")
    parser.add_argument("--cold", action="store_true",
                        help="model: leave out the analytic warm start, to measure the search alone")
    parser.add_argument("--out", type=Path, default=OUT, help="CSV and plot directory (default: experiments/out)")
    emu = parser.add_argument_group("emulator evaluator")
    emu.add_argument("--schemes", default="cubic,udp-vegas,udp-saturator", help="schemes (default: %(default)s)")
    emu.add_argument("--runtime", type=float, default=5.0, help="seconds per run (default: %(default)s)")
    emu.add_argument("--target-runs", type=int, default=3,
                     help="runs of each scheme in the target (default: %(default)s)")
    emu.add_argument("--slots", type=int, help="embedded Ray: engines at once (default: 4 per core)")
    emu.add_argument("--address", help="join this Ray cluster instead of starting one")
    emu.add_argument("--targets", default="M1,M2,M3", help="mahimahi-targets: which (default: %(default)s)")
    emu.add_argument("--rescore", type=int, default=0, metavar="N",
                     help="mahimahi-targets: also score the winner and the truth on fresh runs, N of each "
                          "scheme (default: no)")
    emu.add_argument("--no-evidence", action="store_true",
                     help="mahimahi-targets: ignore the targets' per-packet logs (throughput, p95, loss only)")
    args = parser.parse_args()
    optimizers = [o.strip() for o in args.optimizers.split(",") if o.strip()]
    unknown = [o for o in optimizers if o not in OPTIMIZERS]
    if unknown or not optimizers:
        parser.error(f"--optimizers: unknown {unknown}; choose among {', '.join(OPTIMIZERS)}")
    if args.seeds < 1 or args.budget < 2 or args.batch < 1 or args.replicates < 1:
        parser.error("--seeds, --batch and --replicates must be ≥ 1, --budget ≥ 2")
    if args.cold and args.evaluator != "model":
        parser.error("--cold: a calibration always starts from its warm start; use it with --evaluator model")

    started = time.monotonic()
    if args.evaluator == "mahimahi-targets":
        rows = run_mahimahi_targets(args, optimizers)
        print_mahimahi_targets(rows, args.budget)
        stamp = dt.datetime.now().strftime("%Y%m%dT%H%M%S")
        flat = [{k: (json.dumps(v) if isinstance(v, dict) else v) for k, v in r.items()} for r in rows]
        path = write_csv(args.out / f"bench_calibration_mahimahi_{stamp}.csv", flat)
        console.print(f"CSV: {path}; {time.monotonic() - started:.0f} s", highlight=False)
        return 0
    run = run_model if args.evaluator == "model" else run_emulator
    traces, hidden_rows = run(args, optimizers)
    if args.evaluator == "model":
        console.print(f"evaluator: fluid model (calibrate.fluid), constant deliveries, batches of "
                      f"{args.batch}, {args.replicates} replicates, noise {100 * NOISE_SD:g} % per metric"
                      + (", NO warm start (--cold)" if args.cold else ""), highlight=False)
    print_hidden(hidden_rows, args.evaluator)
    rows = result_rows(traces)
    print_tables(rows, optimizers, args.budget)
    stem = "bench_calibration" + ("_emulator" if args.evaluator == "emulator" else "_cold" if args.cold else "")
    write_csv(args.out / f"{stem}.csv", rows)
    write_csv(args.out / f"{stem}_convergence.csv", convergence_rows(traces))
    write_csv(args.out / f"{stem}_hidden.csv", hidden_rows)
    floors = [r["f_at_hidden"] for r in hidden_rows if r["f_at_hidden"] is not None]
    figure = plot(traces, optimizers, args.budget, float(np.median(floors)) if floors else None,
                  args.out / f"{stem}.png",
                  f"{args.evaluator} evaluator{' (cold)' if args.cold else ''}, {args.seeds} seeds, batches of "
                  f"{args.batch if args.evaluator == 'model' else 'Ray slots'}")
    console.print(f"CSV and plot in {args.out}: {figure.name}; wall time {time.monotonic() - started:.0f} s",
                  highlight=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
