"""Scripted runs exactly like Pantheon's `src/experiments/test.py`, over our engine.

One run = one scheme, one run id, one fresh engine instance.  Per flow the first side starts at
once on its own port; after `FIRST_SIDE_SETUP_S` (Pantheon's `run_first_setup_time`) the second
sides start `interval` apart, each at a start-up phase of its own (`START_PHASE_SPREAD_S`);
everything stops `runtime` after the first second side (so flows of `-t 30 -f 3 --interval 10`
are active ~30/20/10 s).  The run leaves Pantheon's files in the data dir: merged
datalink/acklink logs, raw mm-link logs, the stats log; an experiment adds
`pantheon_metadata.json` (written first, as test.py does) and `pantheon_perf.json` (valid runs).

`run_scheme` is the unit a calibration's Ray task calls: a plain function of values, no
global state, returns what it measured.  `run_experiment` is `test.py`: schemes shuffled once,
run ids in order, several engine instances at a time if asked.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import random
import shutil
import tempfile
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from calibrate import engine, installed_version, scratch
from calibrate.emulator import EmulatorConfig
from calibrate.engine import Endpoint, Logs
from calibrate.errors import EnvironmentProblem, InputError
from calibrate.metrics import RunStats, Validity, analyze_datalink_log, check_run, write_perf_json, write_stats_log
from calibrate.schemes import Scheme
from calibrate.targets.model import Workload

FIRST_SIDE_SETUP_S = 3.0  # test.py's run_first_setup_time
MAX_SETUP_S = 30.0  # a longer setup, for a program slow to listen on this host, is at most this
# Pantheon's second side is a Python wrapper that the tunnel manager starts when test.py writes
# its command; nothing aligns that start with mm-link's clock, and the interpreter's start-up
# alone varies by milliseconds, so a flow's first packet meets the link's delivery schedule at
# an arbitrary phase. The engine starts endpoints to a fraction of a millisecond, so each second
# side is started up to this much later, uniformly: one 1500-byte packet's serialisation at
# 1 Mbit/s, a whole period of the delivery schedule of any link at 1 Mbit/s or more. Without it
# a port launched directly meets every run's schedule at the same phase, where the upstream's
# wrapper did not (experiments/README.md, "koho_cc's first datagram").
START_PHASE_SPREAD_S = 0.012
MAX_RUNTIME_S = 60.0  # test.py: 0 < runtime <= 60
BASE_PORT = 50000  # flow F listens on BASE_PORT + F; every engine has its own namespaces
METADATA = "pantheon_metadata.json"
PERF = "pantheon_perf.json"
ENGINE_NAME = "calibrate-link"


# ----------------------------------------------------------------------------------------------
# The workload


def check_workload(workload: Workload) -> None:
    """test.py's rules on -f, --interval, -t and --run-times (`calibrate emulate --replicates`),
    as one-line errors."""
    if isinstance(workload.flows, bool) or not isinstance(workload.flows, int) or workload.flows < 1:
        raise InputError(f"--flows must be a whole number >= 1, got {workload.flows!r} (Pantheon's "
                         "-f 0, no tunnel, has no equivalent: every flow is measured at the link)")
    if not 0 < workload.runtime_s <= MAX_RUNTIME_S:
        raise InputError(f"--runtime must be in (0, {MAX_RUNTIME_S:g}] seconds as in Pantheon, "
                         f"got {workload.runtime_s:g}")
    if not math.isfinite(workload.interval_s) or workload.interval_s < 0:
        raise InputError(f"--interval must be >= 0 seconds, got {workload.interval_s:g}")
    if (workload.flows - 1) * workload.interval_s > workload.runtime_s:
        raise InputError(f"(flows - 1) x interval = {(workload.flows - 1) * workload.interval_s:g} s "
                         f"exceeds the runtime {workload.runtime_s:g} s; the last flow would never "
                         "start (lower --interval or --flows, or raise --runtime)")
    if workload.run_times is not None and workload.run_times < 1:
        raise InputError(f"--replicates (runs per scheme) must be >= 1, got {workload.run_times}")


def stop_after_s(workload: Workload, setup_s: float = FIRST_SIDE_SETUP_S) -> float:
    """Engine deadline: setup time, then the runtime."""
    return setup_s + workload.runtime_s


def flow_ports(workload: Workload) -> list[int]:
    """Flow N's port: the flow number of the logs is Pantheon's tunnel, so every connection
    on it is that flow (a client that connects again, as Pantheon's quic wrapper may, too)."""
    return [BASE_PORT + flow for flow in range(1, workload.flows + 1)]


def flow_endpoints(scheme: Scheme, workload: Workload, phase: random.Random,
                   setup_s: float = FIRST_SIDE_SETUP_S) -> list[Endpoint]:
    """Per flow, the first side at t=0 on its own port and the second side at
    setup (3 s) + (flow-1) x interval, plus a start-up phase drawn from `phase` (up to
    START_PHASE_SPREAD_S), connecting to $EMU_PEER on that port."""
    endpoints = []
    for flow, port in enumerate(flow_ports(workload), start=1):
        endpoints.append(Endpoint(scheme.run_first, scheme.command(scheme.run_first, port), 0.0))
        start = (setup_s + (flow - 1) * workload.interval_s
                 + phase.uniform(0.0, START_PHASE_SPREAD_S))
        endpoints.append(Endpoint(scheme.run_second, scheme.command(scheme.run_second, port), start))
    return endpoints


# ----------------------------------------------------------------------------------------------
# One run


@dataclass(frozen=True)
class RunPaths:
    """Pantheon's per-run files in a data dir, plus the engine's summary (counters, exits)."""

    datalink: Path
    acklink: Path
    mm_datalink: Path
    mm_acklink: Path
    stats: Path
    engine_summary: Path

    @classmethod
    def of(cls, data_dir: Path, cc: str, run_id: int) -> RunPaths:
        d = Path(data_dir)
        return cls(d / f"{cc}_datalink_run{run_id}.log", d / f"{cc}_acklink_run{run_id}.log",
                   d / f"{cc}_mm_datalink_run{run_id}.log", d / f"{cc}_mm_acklink_run{run_id}.log",
                   d / f"{cc}_stats_run{run_id}.log", d / f"{cc}_engine_run{run_id}.json")


@dataclass(frozen=True)
class RunOutcome:
    """What one run measured.  `stats` is there whenever a datalink log was written, also for
    an invalid run (to see what went wrong); `validity` says whether it counts."""

    cc: str  # label: the data dir's file prefix
    scheme: str  # the scheme that ran
    run_id: int
    stats: RunStats | None
    validity: Validity
    failure: str | None  # the engine or an endpoint failed (the run is then invalid)
    paths: RunPaths
    start_at: dt.datetime  # test.py's "Start at": when the second sides began
    end_at: dt.datetime
    loss_seed: int
    stop_reason: str | None = None
    # In a multi-flow run, each endpoint that exited on its own while the others ran on (as a
    # flow of Pantheon's multi-flow runs ends alone in its tunnel): "flow 3's sender: status 1
    # after 24.10 s". The run stays valid, as Pantheon's analysis kept such runs.
    ended_alone: tuple[str, ...] = ()

    @property
    def valid(self) -> bool:
        return self.validity.valid

    def to_json(self) -> dict[str, object]:
        stats = self.stats
        return {
            "cc": self.cc, "scheme": self.scheme, "run": self.run_id, "valid": self.valid,
            "reason": self.validity.reason, "failure": self.failure, "stop_reason": self.stop_reason,
            "ended_alone": list(self.ended_alone),
            "loss_seed": self.loss_seed,
            "start_at": self.start_at.isoformat(), "end_at": self.end_at.isoformat(),
            "capacity_mbps": stats.capacity_mbps if stats else None,
            "utilization": stats.utilization if stats else None,
            "flows": {k: m.to_json() for k, m in stats.metrics().items()} if stats else None,
            "window_s": {k: (stats.total if k == "all" else stats.flows[int(k)]).window_ms / 1000
                         for k in stats.metrics()} if stats else None,
            "files": {name: str(path) for name, path in vars(self.paths).items()},
        }


def run_scheme(emulator: EmulatorConfig, scheme: Scheme, run_id: int, workload: Workload,
               data_dir: Path | str, *, cc: str | None = None, grace_s: float = 2.0,
               backend: engine.Backend = engine.Backend(),
               stop: threading.Event | None = None, setup_s: float = FIRST_SIDE_SETUP_S) -> RunOutcome:
    """Run one scheme once over one emulator, Pantheon-style, and measure it (over our engine,
    or through the user's real Mahimahi shells with `backend`).

    Writes `<cc>_{datalink,acklink,mm_datalink,mm_acklink,stats}_run<N>.log` into `data_dir`
    (`cc` defaults to the scheme's name); the engine's traces and temporary files live in a
    scratch directory (`calibrate.scratch`) for the length of the run.  A failed run is
    returned with its reason, not raised; only a problem with the input or the host raises
    (InputError, EnvironmentProblem), and an interruption (KeyboardInterrupt; `stop` set).
    `setup_s`: how long the first sides get before the second sides start, Pantheon's 3 s
    unless a program needs longer to listen on this host (the benchmark gives both of its sides
    the same; the run's behaviour does not otherwise depend on it).
    """
    check_workload(workload)
    if not math.isfinite(setup_s) or not 0 <= setup_s <= MAX_SETUP_S:
        raise InputError(f"the first sides' setup time must be in [0, {MAX_SETUP_S:g}] s, got {setup_s:g}")
    if not scheme.available:
        raise InputError(f"scheme {scheme.name} is not available here: {scheme.unavailable_reason}")
    cc = cc or scheme.name
    stop_after = stop_after_s(workload, setup_s)
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    paths = RunPaths.of(data_dir, cc, run_id)
    for path in vars(paths).values():
        path.unlink(missing_ok=True)  # never analyse a previous invocation's log
    logs = Logs(datalink=paths.datalink, acklink=paths.acklink, uplink=paths.mm_datalink,
                downlink=paths.mm_acklink)
    # Each run draws its own i.i.d. losses (replicates must be independent, as real runs are);
    # the traces stay the ones the emulator's trace seed made, so every run sees the same path.
    run = emulator.for_run(run_id)
    with scratch.directory(f"{cc}-run{run_id}") as workdir:
        up, down = run.trace_paths(Path(workdir))
        config = replace(run, uplink_trace=up, downlink_trace=down)
        launched = dt.datetime.now(dt.UTC)
        # The start-up phases are the run's, like its losses: a replicate draws its own.
        endpoints = flow_endpoints(scheme, workload, random.Random(run.loss_seed), setup_s)
        result = engine.run(config, endpoints, workdir=Path(workdir),
                            stop_after=stop_after, logs=logs, grace_s=grace_s, check=False,
                            backend=backend, stop=stop, flow_ports=flow_ports(workload),
                            flows_end_alone=workload.flows > 1)
        summary_file = Path(workdir) / "engine-summary.json"
        if summary_file.exists():
            shutil.copyfile(summary_file, paths.engine_summary)
    if result.returncode == engine.BAD_INPUT:
        raise InputError(result.message or "calibrate-link rejected its arguments")
    if result.returncode == engine.HOST_PROBLEM:
        raise EnvironmentProblem(result.message or "this host cannot run calibrate-link")

    summary = result.summary
    init_ms = summary.get("init_timestamp_ms")
    origin = dt.datetime.fromtimestamp(init_ms / 1000, dt.UTC) if init_ms else launched
    start_at = origin + dt.timedelta(seconds=setup_s)
    end_at = origin + dt.timedelta(seconds=summary.get("duration_s", stop_after))
    stop_reason = summary.get("stop_reason")
    failure = _failure(result, stop_after)
    stats = analyze_datalink_log(paths.datalink) if paths.datalink.exists() else None
    if failure:
        validity = Validity(False, failure)
    elif stats is None:
        validity = Validity(False, "the engine wrote no datalink log")
    else:
        validity = check_run(stats, workload.runtime_s)
    write_stats_log(paths.stats, start_at=start_at, end_at=end_at, stats=stats, validity=validity)
    return RunOutcome(cc, scheme.name, run_id, stats, validity, failure, paths, start_at, end_at,
                      run.loss_seed, stop_reason, ended_alone(result) if not failure else ())


def _quitters(result: engine.EngineResult) -> list[tuple[int, dict]]:
    """The endpoints (index in the engine's summary, entry) that exited on their own, not
    stopped by the engine."""
    return [(i, e) for i, e in enumerate(result.summary.get("endpoints", []))
            if e.get("exit_code") is not None and not e.get("stopped_by_engine")]


def ended_alone(result: engine.EngineResult) -> tuple[str, ...]:
    """The endpoints of a run that went to its deadline but exited on their own before it (in
    flow_endpoints' order: flow N's two sides are endpoints 2N-1 and 2N)."""
    return tuple(
        f"flow {i // 2 + 1}'s {e['side']}: status {e['exit_code']} after {e.get('ended_at_s') or 0:.2f} s"
        for i, e in _quitters(result))


def _failure(result: engine.EngineResult, stop_after: float) -> str | None:
    """Why the run did not go to its deadline, if it did not: an endpoint crashed or quit early
    (schemes run until killed), or the engine failed."""
    if result.returncode != 0:
        return result.message or f"{ENGINE_NAME} exited with status {result.returncode}"
    reason = result.summary.get("stop_reason")
    if reason in (None, "deadline"):
        return None
    quitters = _quitters(result)
    if quitters:
        _, e = quitters[0]
        return (f"the {e['side']} endpoint `{e['command']}` exited on its own (status "
                f"{e['exit_code']}) after {e.get('ended_at_s') or 0:.2f} s of "
                f"{stop_after:g} s; a scheme must run until it is stopped")
    return f"the emulation stopped early ({reason})"


# ----------------------------------------------------------------------------------------------
# An experiment: test.py


@dataclass(frozen=True)
class Experiment:
    """Everything `calibrate emulate` was asked to do; recorded in pantheon_metadata.json."""

    emulator: EmulatorConfig
    schemes: tuple[tuple[str, Scheme], ...]  # (label, scheme) in the order given
    workload: Workload  # run_times set
    data_dir: Path
    random_order: bool = False
    seed: int = 0
    parallel: int = 1
    start_run_id: int = 1
    backend: engine.Backend = engine.Backend()

    def order(self) -> list[str]:
        """Labels in run order: shuffled once (test.py's --random-order), seeded so an
        experiment can be repeated."""
        labels = [label for label, _ in self.schemes]
        if self.random_order:
            random.Random(self.seed).shuffle(labels)
        return labels

    def runs(self) -> list[tuple[int, str]]:
        """(run id, label) in Pantheon's order: every scheme for run 1, then run 2, ..."""
        run_times = self.workload.run_times or 1
        return [(run, label) for run in range(self.start_run_id, self.start_run_id + run_times)
                for label in self.order()]


def metadata(experiment: Experiment) -> dict[str, object]:
    """test.py's keys (vars(args) without None values, traces as basenames, sorted cc_schemes)
    and what makes the experiment reproducible here (emulator, engine, seeds, schemes)."""
    e, w = experiment, experiment.workload
    pantheon = e.emulator.pantheon_args()
    options = dict(zip(pantheon[::2], pantheon[1::2], strict=True))  # flag, value pairs
    data: dict[str, object] = {
        "cc_schemes": sorted(label for label, _ in e.schemes),
        "flows": w.flows,
        "interval": w.interval_s,
        "runtime": w.runtime_s,
        "run_times": w.run_times or 1,
        "start_run_id": e.start_run_id,
        "random_order": e.random_order,
        "mode": "local",
        "uplink_trace": Path(options["--uplink-trace"]).name,
        "downlink_trace": Path(options["--downlink-trace"]).name,
        "git_summary": f"calibrate {installed_version() or 'unknown'} (emulated by {e.backend.describe()})",
        # What Pantheon does not record, and a rerun needs:
        "emulator": e.emulator.mahimahi_command(),
        "emulator_description": e.emulator.describe(),
        "engine": ENGINE_NAME,
        "backend": e.backend.to_json(),
        "seed": e.seed,
        "loss_seed_rule": "run N uses loss seed seed*1000+N; traces come from seed",
        "scheme_order": e.order(),
        "parallel": e.parallel,
        "schemes": {label: {"scheme": s.name, "kind": s.kind, "run_first": s.run_first,
                            "first_command": s.command(s.run_first, BASE_PORT + 1),
                            "second_command": s.command(s.run_second, BASE_PORT + 1),
                            "note": s.note}
                    for label, s in e.schemes},
    }
    if "--prepend-mm-cmds" in options:
        data["prepend_mm_cmds"] = options["--prepend-mm-cmds"]
    if "--extra-mm-link-args" in options:
        data["extra_mm_link_args"] = options["--extra-mm-link-args"]
    for direction, path in (("uplink_trace_file", e.emulator.uplink_trace),
                            ("downlink_trace_file", e.emulator.downlink_trace)):
        if path is not None:
            data[direction] = str(Path(path).resolve())
    return data


def prepare_data_dir(data_dir: Path | str) -> Path:
    """Create the data dir, or say in one line why it cannot be written."""
    directory = Path(data_dir).expanduser()
    if directory.exists() and not directory.is_dir():
        raise InputError(f"--out {directory} exists and is not a directory; choose a directory")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".calibrate-write-test-"):
            pass
    except OSError as error:
        raise InputError(f"--out {directory} is not writable ({error.strerror or error}); "
                         "choose another directory") from None
    return directory


Progress = Callable[[str, str, int, "RunOutcome | None"], None]  # (event, cc, run, outcome)

#: the engine's stop reasons when a signal stopped it (the user's Ctrl-C reaches it too)
SIGNAL_STOPS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "a signal")


def run_experiment(experiment: Experiment, progress: Progress | None = None) -> list[RunOutcome]:
    """Pantheon's test.py over our engine: metadata first, then every (run id, scheme), up to
    `parallel` engine instances at a time, then pantheon_perf.json of the valid runs.
    Outcomes come back in run order."""
    check_workload(experiment.workload)
    if experiment.parallel < 1:
        raise InputError(f"--parallel must be >= 1, got {experiment.parallel}")
    data_dir = prepare_data_dir(experiment.data_dir)
    (data_dir / METADATA).write_text(json.dumps(metadata(experiment), sort_keys=True, indent=4) + "\n")
    schemes = dict(experiment.schemes)
    stop = threading.Event()

    def one(job: tuple[int, str]) -> RunOutcome:
        run_id, label = job
        if stop.is_set():
            raise KeyboardInterrupt
        if progress:
            progress("start", label, run_id, None)
        outcome = run_scheme(experiment.emulator, schemes[label], run_id, experiment.workload,
                             data_dir, cc=label, backend=experiment.backend, stop=stop)
        if outcome.stop_reason in SIGNAL_STOPS:  # stopped, not done: the user interrupted
            raise KeyboardInterrupt
        if progress:
            progress("done", label, run_id, outcome)
        return outcome

    pool = ThreadPoolExecutor(max_workers=experiment.parallel)
    try:
        outcomes = list(pool.map(one, experiment.runs()))
    finally:
        # On Ctrl-C, SIGTERM or a host problem, runs not yet started must not start, and the
        # running engines are stopped (they clean up after themselves).
        stop.set()
        pool.shutdown(wait=True, cancel_futures=True)
    write_perf(data_dir, outcomes, [label for label, _ in experiment.schemes])
    return outcomes


def write_perf(data_dir: Path, outcomes: Sequence[RunOutcome], labels: Sequence[str]) -> None:
    """pantheon_perf.json: valid runs only, as plot.py writes it."""
    runs: dict[str, dict[int, RunStats | None]] = {label: {} for label in labels}
    for o in outcomes:
        runs[o.cc][o.run_id] = o.stats if o.valid else None
    write_perf_json(Path(data_dir) / PERF, runs)
