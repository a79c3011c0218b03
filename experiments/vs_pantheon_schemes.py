"""Our ports of Pantheon's 2017 schemes against their upstream builds, same emulators: a
differential benchmark.

For every row of the matrix and every Pantheon label (LABELS by default: those of the 2017 set
with an upstream build) it runs the UPSTREAM build and OUR PORT over the same engine emulator,
alternating (which side goes first alternates per replicate), `--replicates` times each, in
Pantheon-style runs (`calibrate.scripted.run_scheme`: throughput, mean and p95 one-way delay,
loss). A replicate's two runs share the emulator's traces, loss draws and start-up phase, so the
pair differs only in the scheme; each replicate draws its own (`replicate_emulator`: a Poisson
row's traces too, so the replicates of a side sample the row's link, not one trace). Per row and
label it prints both sides' means, the upstream's own run-to-run spread (the standard deviation
of its replicates), the deltas and whether the row passes:

    |Δ throughput| ≤ 5 %   and   |Δ p95| ≤ 5 ms,   or each Δ within the upstream's own spread

(`by` says which: `bounds`, or `spread (…)` naming the metrics that passed only by the spread).
Then per label: the median and worst |Δ| per metric, the rows passing, and the verdict
(faithful: every row passes).

The upstream builds are either Pantheon-contract programs, `--reference-dir DIR/<label>` (built
outside the project at Pantheon's pinned commits; `X run_first`, `X receiver PORT`,
`X sender IP PORT`), or a Pantheon checkout's own wrappers (`--pantheon-dir`). Our port of a
label is the registry entry (calibrate/data/schemes.json) whose `port_of` names the label for
`--era`; it runs through the installed calibrate-scheme, or `--ports-program` (a binary with
calibrate-scheme's command line, or a directory of them named after the port or the label).

It also runs every port, and the upstream builds it has, over the shared known emulator A
(`mm-delay 28 mm-link 10mbps_trace 10mbps_trace`, unbounded queue, no loss; `--known-emulators`)
and sets throughput and p95 beside Pantheon's 2017 numbers (its `pantheon-2017.csv`): a port
passes within 10 % of each. default_tcp runs our kernel cubic there, vegas its port (no upstream
build of tcp_vegas runs here).

`--write-fidelity` writes each port's measured fidelity into calibrate/data/schemes.json (its
entry's "fidelity" line); `--report RUNS_CSV` prints the tables (and writes fidelity) from an
earlier invocation's runs, or from several pooled (comma-separated: more replicates of a law
whose runs scatter widely, such as PCC's randomized trials). Run as root, alone on the machine
(the engine is real-time):

    .venv/bin/python experiments/vs_pantheon_schemes.py                        # matrix + known emulator
    .venv/bin/python experiments/vs_pantheon_schemes.py --quick --schemes copa,ledbat --replicates 2
    .venv/bin/python experiments/vs_pantheon_schemes.py --known-only --write-fidelity
    .venv/bin/python experiments/vs_pantheon_schemes.py --report out/vs_pantheon_schemes_runs_X.csv --write-fidelity

Writes the runs (after each row and label), the summaries and a plot (port against upstream,
throughput and p95 per row) to experiments/out/; `--keep-logs DIR` also keeps each run's
Pantheon logs, to compare the two sides' sending over time.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from calibrate import binaries, engine, scratch
from calibrate.emulator import EmulatorConfig, Queue
from calibrate.engine import Backend
from calibrate.errors import CalibrateError, Interrupted
from calibrate.metrics import parse_datalink_log
from calibrate.schemes import Registry, Scheme, Side, load_registry, pantheon_schemes
from calibrate.scripted import FIRST_SIDE_SETUP_S, MAX_RUNTIME_S, run_scheme
from calibrate.targets.model import Workload

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "experiments" / "out"
REGISTRY_JSON = REPO / "calibrate" / "data" / "schemes.json"
REFERENCE_DIR = Path("/work/ref/bin")
KNOWN_SUBDIR = Path("shared") / "data" / "pantheon-known-emulators"
KNOWN_TABLE = "pantheon-2017.csv"
KNOWN_TRACE = "10mbps_trace"
KNOWN_EMULATOR = f"mm-delay 28 mm-link {KNOWN_TRACE} {KNOWN_TRACE}"  # Pantheon's emulator A
KNOWN_AGAINST = "Pantheon's 2017 table (known emulator A)"

TPUT_TOLERANCE_PCT = 5.0  # |Δ throughput|, per cent of the upstream's
P95_TOLERANCE_MS = 5.0  # |Δ p95 one-way delay|
KNOWN_TOLERANCE_PCT = 10.0  # throughput and p95 against Pantheon's 2017 table

#: The 2017 labels with an upstream build (run in the matrix by default).
LABELS = ("saturator", "greg_saturator", "koho_cc", "copa", "ledbat", "sprout", "pcc", "verus", "scream", "quic")
#: Labels scored on the known emulator besides those: ours for each is a kernel scheme or a port.
KNOWN_EXTRA = ("default_tcp", "vegas")
#: Labels whose scheme here is the kernel's own (not a port): the registry scheme that runs.
KERNEL = {"default_tcp": "cubic"}
RUN_FIRST_TIMEOUT_S = 20.0
#: Pantheon's multi-flow runs (`-f 3 --interval 10`, the paper's P1237 and later reports): flow i
#: starts (i - 1) x 10 s after the first, all stop at the end of a 30 s run.
FLOW_INTERVAL_S = 10.0
MULTI_FLOW_RUNTIME_S = 30.0
#: Upstream programs (label, era) whose first side cannot listen on the port it is given: it binds
#: a port of its own choosing and prints it, and Pantheon's harness read that line. The 2017
#: sprout server (alfalfa edcb255 sproutbt2, network.cc try_bind) binds the first free UDP port of
#: 60001-60999 and prints "Listening on port: N"; in the engine's own namespaces, where it is the
#: only listener (one flow), that is 60001, so the second side is given 60001. Were it another, the
#: sender would reach nothing and the run would fail its validity check (no data), not pass. The
#: 2018 sprout (keithw/sprout 366e35c, sproutbt2.cc `argc == 2`) listens on the port it is given.
OWN_PORT = {("sprout", "2017"): 60001}
#: Upstream programs (label, era) that take longer than Pantheon's 3 s setup to listen on this
#: 2-core host, and the setup both sides of their rows get instead (their runs are otherwise
#: unchanged). The 2018 quic_server (proto-quic 77961f1) reads its 500 MB page before it binds:
#: 1.6 s alone, 3.0 s for three at once (a 3-flow row) with the host otherwise idle, 5.0-5.2 s
#: beside the engine; its client then found no server, and Pantheon's wrapper tried again a second
#: later, so the upstream's flows started over a second after the port's (the 2017 quic_server
#: binds within 0.1 s). Pantheon's hosts, not this one, set what its results saw.
SETUP_S = {("quic", "2018"): 8.0}
METRICS = ("tput", "mean", "p95", "loss")


@dataclass(frozen=True)
class Row:
    rate: float  # Mbit/s
    delay: int  # one-way ms
    queue: int | None  # DropTail packets (both directions' default); None: unbounded
    loss: float  # uplink, a fraction
    link: str = "constant"
    flows: int = 1  # > 1: Pantheon's multi-flow workload (FLOW_INTERVAL_S apart)

    @property
    def name(self) -> str:
        queue = "inf" if self.queue is None else str(self.queue)
        kind = "" if self.link == "constant" else f" {self.link}"
        flows = f"{self.flows}x " if self.flows > 1 else ""
        return f"{flows}{self.rate:g}/{self.delay}/{queue}/{self.loss * 100:g}%{kind}"

    def workload(self, runtime: float) -> Workload:
        """One run's workload: one flow for `runtime`, or the multi-flow one (at least 30 s)."""
        if self.flows == 1:
            return Workload(1, 0.0, runtime, 1)
        return Workload(self.flows, FLOW_INTERVAL_S, max(runtime, MULTI_FLOW_RUNTIME_S), 1)

    def emulator(self, seed: int) -> EmulatorConfig:
        queue = Queue() if self.queue is None else Queue.droptail(self.queue)
        return EmulatorConfig(rate_mbps=self.rate, delay_ms=self.delay, queue=queue, uplink_loss=self.loss,
                              link=self.link, trace_seed=seed)  # type: ignore[arg-type]


#: Rates 2–100 Mbit/s, one-way delays 5–150 ms, queues 20 packets to unbounded, loss 0–1 %,
#: constant and Poisson deliveries, one flow and three (named "3x ..."); the first row is the
#: known emulator's setting.
MATRIX: tuple[Row, ...] = (
    Row(10, 28, None, 0.0),
    Row(2, 5, 20, 0.0),
    Row(12, 20, 100, 0.0),
    Row(24, 50, 60, 0.005),
    Row(50, 10, 200, 0.0),
    Row(100, 5, 300, 0.0),
    Row(6, 150, None, 0.0, "poisson"),
    Row(12, 40, 100, 0.01, "poisson"),
    Row(10, 28, None, 0.0, flows=3),
    Row(12, 20, 100, 0.0, flows=3),
)
QUICK = ("10/28/inf/0%", "12/40/100/1% poisson")


def select_rows(spec: str | None, quick: bool = False) -> list[Row]:
    """The rows `spec` names by prefix (comma-separated, as vs_mahimahi.py's --rows), or with
    `quick` the two rows of QUICK, or all."""
    if not spec:
        return [r for r in MATRIX if r.name in QUICK] if quick else list(MATRIX)
    wanted = [s.strip() for s in spec.split(",") if s.strip()]
    rows = [r for r in MATRIX if any(r.name.startswith(w) for w in wanted)]
    if not rows:
        raise SystemExit(f"--rows {spec!r} matches none of: {', '.join(r.name for r in MATRIX)}")
    return rows


# ----------------------------------------------------------------------------------------------
# The schemes: ports (the registry's port_of), upstream builds


@dataclass(frozen=True)
class Port:
    """A registry entry that ports a Pantheon label of some eras."""

    label: str
    name: str  # the registry entry
    eras: tuple[str, ...]
    upstream: str  # what it ports, as the registry says


def ports_of(registry: Mapping[str, Any], era: str) -> dict[str, Port]:
    """Label -> our port of it for `era`, from the registry file's `port_of` fields (the first
    entry wins where several port a label for one era)."""
    ports: dict[str, Port] = {}
    for entry in registry["schemes"]:
        of = entry.get("port_of")
        if not of or era not in [str(e) for e in of.get("eras", ())]:
            continue
        ports.setdefault(of["label"], Port(of["label"], entry["name"], tuple(map(str, of["eras"])),
                                           str(of.get("upstream", ""))))
    return ports


def ask_run_first(argv: Sequence[str]) -> tuple[Side | None, str | None]:
    """What `argv run_first` prints (receiver or sender), or why it printed neither."""
    try:
        out = subprocess.run([*argv, "run_first"], capture_output=True, text=True, timeout=RUN_FIRST_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, f"`run_first` did not answer in {RUN_FIRST_TIMEOUT_S:g} s"
    except OSError as error:
        return None, f"cannot run {argv[0]}: {error.strerror or error}"
    answer = out.stdout.strip()
    if out.returncode == 0 and answer in ("receiver", "sender"):
        return answer, None  # type: ignore[return-value]
    lines = out.stderr.strip().splitlines()
    return None, f"`run_first` failed ({lines[-1] if lines else f'printed {answer!r}'})"


def executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def reference_scheme(label: str, directory: Path, upstream: str = "", era: str = "2017") -> Scheme | None:
    """The Pantheon-contract program DIR/<label> of `era` as a scheme (None if there is none)."""
    program = directory / label
    if not executable(program):
        return None
    run_first, reason = ask_run_first([str(program)])
    what = f"reference build of {upstream}" if upstream else "reference build"
    fields = dict(name=f"upstream-{label}", run_first=run_first or "receiver", program=(str(program),),
                  aliases=(label,), description=f"{what}: {program}", kind="reference-build",
                  available=run_first is not None, unavailable_reason=reason)
    if (label, era) in OWN_PORT:
        return OwnPortScheme(**fields, own_port=OWN_PORT[label, era])  # type: ignore[arg-type]
    return Scheme(**fields)  # type: ignore[arg-type]


@dataclass(frozen=True)
class OwnPortScheme(Scheme):
    """An upstream program whose first side binds `own_port` whatever port it is given
    (OWN_PORT): the second side connects to that port instead of the harness's."""

    own_port: int = 0

    def argv(self, side: Side, port: int, address: str | None = None) -> list[str]:
        return super().argv(side, port if side == self.run_first else self.own_port, address)


def upstream_schemes(labels: Iterable[str], ports: Mapping[str, Port], reference_dir: Path,
                     pantheon_dir: Path | None, interpreter: str | None, era: str = "2017") -> dict[str, Scheme]:
    """Label -> its upstream build, for the labels that have one (available or not)."""
    if pantheon_dir is not None:
        wrappers = {s.aliases[0]: s for s in pantheon_schemes(pantheon_dir, interpreter)}
        found = {label: wrappers[label] for label in labels if label in wrappers}
        for label, wrapper in found.items():
            upstream = ports[label].upstream if label in ports else ""
            found[label] = replace(wrapper, description=f"Pantheon's wrapper {wrapper.program[-1]}"
                                   + (f" ({upstream})" if upstream else ""))
        return found
    built = {label: reference_scheme(label, reference_dir, ports[label].upstream if label in ports else "", era)
             for label in labels}
    return {label: scheme for label, scheme in built.items() if scheme is not None}


def port_scheme(port: Port, registry: Registry, ports_program: Path | None) -> Scheme:
    """Our port as a scheme: the installed calibrate-scheme's, or `ports_program`'s (a binary
    with its command line, or a directory holding one per port, named after the port or label)."""
    program: Path | None = None
    if ports_program is not None and ports_program.is_dir():
        program = next((ports_program / n for n in (port.name, port.label) if executable(ports_program / n)), None)
        if program is None:
            print(f"{ports_program} has no {port.name} or {port.label}: {port.name} runs through the installed "
                  "calibrate-scheme", file=sys.stderr)
    elif ports_program is not None:
        program = ports_program
    if program is None:
        installed = registry.get(port.name)
        if installed is None:
            return Scheme(port.name, "receiver", (port.name,), (port.label,), kind="port", available=False,
                          unavailable_reason="the installed calibrate-scheme does not know it")
        return installed
    run_first, reason = ask_run_first([str(program), port.name])
    return Scheme(port.name, run_first or "receiver", (str(program), port.name), (port.label,),
                  f"port {port.name} run by {program}", kind="port (development build)",
                  available=run_first is not None, unavailable_reason=reason)


def ours_scheme(label: str, ports: Mapping[str, Port], registry: Registry,
                ports_program: Path | None) -> Scheme | None:
    """What runs for `label` on our side: the kernel's own scheme, or the port (None: neither)."""
    if label in KERNEL:
        return registry.get(KERNEL[label])
    return port_scheme(ports[label], registry, ports_program) if label in ports else None


# ----------------------------------------------------------------------------------------------
# Runs


def measure(emulator: EmulatorConfig, scheme: Scheme, replicate: int, workload: Workload, backend: Backend,
            workdir: Path, keep_as: Path | None = None, setup_s: float = FIRST_SIDE_SETUP_S) -> dict[str, object]:
    """One Pantheon-style run; its metrics (of all flows together, and each flow's throughput in a
    multi-flow run), how many connections crossed the link (more than the flows: a program
    connected again), and how late the engine wrote its packets out. `keep_as`: where its data
    directory (Pantheon's logs, the engine's summary) goes instead of being deleted."""
    if not scheme.available:
        return {"valid": False, "reason": f"unavailable: {scheme.unavailable_reason}"}
    data_dir = Path(tempfile.mkdtemp(dir=workdir))
    try:
        outcome = run_scheme(emulator, scheme, replicate, workload, data_dir, backend=backend, setup_s=setup_s)
        if not outcome.valid or outcome.stats is None:
            return {"valid": False, "reason": outcome.validity.reason or outcome.failure,
                    "loss_seed": outcome.loss_seed}
        m = outcome.stats.total
        delays = parse_datalink_log(outcome.paths.datalink).departure_delay
        return {"valid": True, "tput": m.tput_mbps, "mean": float(np.mean(delays)) if len(delays) else np.nan,
                "p95": m.delay_ms, "loss": (m.loss or 0.0) * 100, "loss_seed": outcome.loss_seed,
                # a flow that never sent (its program could not connect) counts as 0 Mbit/s
                **({f"tput {flow}": outcome.stats.flows[flow].tput_mbps if flow in outcome.stats.flows else 0.0
                    for flow in range(1, workload.flows + 1)} if workload.flows > 1 else {}),
                "connections": engine.connections(outcome.paths.engine_summary),
                "ended alone": len(outcome.ended_alone), "ended alone how": "; ".join(outcome.ended_alone),
                **engine.lateness(outcome.paths.engine_summary)}
    finally:
        if keep_as is None:
            shutil.rmtree(data_dir, ignore_errors=True)
        else:
            keep_as.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(data_dir, keep_as)


def engine_build() -> str:
    """Which calibrate-link made a run: the first 12 hex digits of the binary's SHA-256."""
    return hashlib.sha256(binaries.find(binaries.LINK).read_bytes()).hexdigest()[:12]


def replicate_emulator(emulator: EmulatorConfig, replicate: int) -> EmulatorConfig:
    """Replicate N's emulator, the same for both sides: Poisson traces of its own, from the seed
    `EmulatorConfig.for_run` gives run N (the row's seed·1000 + N), and with them its own losses
    and start-up phase. With one trace for every replicate a side's runs met the same few
    opportunities at their start, so a start-up decided by them (taova-2018 at 6/150 Poisson:
    its first two datagrams delivered in one millisecond or not) came out alike in every run of
    a side, and a pair compared one draw of the trace rather than the schemes
    (experiments/README)."""
    return replace(emulator, trace_seed=emulator.for_run(replicate).loss_seed)


# The PCC ports and their reference wrappers (pcc-2017, pcc_experimental-2018) give srand this
# seed in place of the clock, so that both sides draw the same random probe directions.
SRAND_ENV = "PCC_SRAND"


def srand_of(emulator: EmulatorConfig) -> int:
    """Replicate N's `srand` seed under `--srand`: its trace seed's low 32 bits, the same for both
    sides of the replicate (the emulator is), another for every replicate."""
    return emulator.trace_seed % 2**32


@contextlib.contextmanager
def srand_for_run(seed: int | None) -> Iterator[None]:
    """`SRAND_ENV` set to `seed` for the programs started meanwhile (left alone where None), then
    restored."""
    before = os.environ.get(SRAND_ENV)
    if seed is not None:
        os.environ[SRAND_ENV] = str(seed)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(SRAND_ENV, None)
        else:
            os.environ[SRAND_ENV] = before


@dataclass(frozen=True)
class Job:
    """One (emulator, label) pair of the benchmark: both sides, `replicates` runs each."""

    bench: str  # "matrix" or "known"
    row: str
    emulator: EmulatorConfig
    label: str
    sides: tuple[tuple[str, Scheme], ...]  # ("upstream" | "port", scheme)
    workload: Workload
    setup_s: float = FIRST_SIDE_SETUP_S  # both sides' (SETUP_S)


class Runner:
    """Runs jobs one run at a time, alternating sides, printing a line per run and writing the
    runs so far to `runs_csv` after every job (whole, then renamed: a stopped benchmark keeps them)."""

    def __init__(self, args: argparse.Namespace, runs_csv: Path, total: int) -> None:
        self.args, self.runs_csv, self.total = args, runs_csv, total
        self.backend = Backend("engine", realtime_priority=args.realtime_priority)
        self.build = engine_build()
        self.records: list[dict[str, object]] = []
        self.done = 0
        self.started = time.monotonic()

    def run(self, job: Job, workdir: Path) -> None:
        for replicate in range(1, self.args.replicates + 1):
            sides = job.sides if replicate % 2 else tuple(reversed(job.sides))
            emulator = replicate_emulator(job.emulator, replicate)
            srand = srand_of(emulator) if self.args.srand else None
            for side, scheme in sides:
                keep_as = (self.args.keep_logs / re.sub(r"[^A-Za-z0-9.]+", "_", f"{job.bench} {job.row}")
                           / f"{job.label}-{side}-{replicate}" if self.args.keep_logs else None)
                with srand_for_run(srand):
                    m = measure(emulator, scheme, replicate, job.workload, self.backend, workdir, keep_as,
                                job.setup_s)
                self.records.append({"bench": job.bench, "row": job.row, "label": job.label, "side": side,
                                     "scheme": scheme.name, "source": scheme.description, "replicate": replicate,
                                     "runtime": job.workload.runtime_s, "flows": job.workload.flows,
                                     "setup_s": job.setup_s,
                                     "trace_seed": emulator.trace_seed,
                                     **({"srand": srand} if srand is not None else {}),
                                     "date": dt.date.today().isoformat(), "build": self.build, **m})
                self.done += 1
                self.progress(job, side, scheme, replicate, m)
        partial = self.runs_csv.with_name(self.runs_csv.name + ".part")
        pd.DataFrame(self.records).to_csv(partial, index=False)
        partial.replace(self.runs_csv)

    def progress(self, job: Job, side: str, scheme: Scheme, replicate: int, m: Mapping[str, object]) -> None:
        elapsed = time.monotonic() - self.started
        eta = elapsed / self.done * (self.total - self.done) / 60
        if m["valid"]:
            shown = f"{m['tput']:.2f} Mbit/s, mean {m['mean']:.1f} ms, p95 {m['p95']:.1f} ms, loss {m['loss']:.2f} %"
            if "late p99" in m:
                shown += f", engine late p99 {m['late p99']:.2f} ms"
        else:
            shown = f"invalid: {m['reason']}"
        print(f"[{self.done}/{self.total} {elapsed / 60:.0f} min, ETA {eta:.0f} min] {job.bench} {job.row} "
              f"{job.label} {side} ({scheme.name}) #{replicate}: {shown}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------
# Tables (pure: from the runs)


def verdict(d_tput_pct: float, d_p95_ms: float, sd_tput_pct: float, sd_p95_ms: float) -> tuple[bool, str]:
    """Whether a row passes: each Δ within its bound (5 %, 5 ms) or within the upstream's own
    spread; and how (`bounds`, `spread (tput, p95)` naming those passing only by the spread, or
    `fails tput, p95` naming those failing). A missing Δ (nan) fails."""
    checks = {"tput": (abs(d_tput_pct) <= TPUT_TOLERANCE_PCT, abs(d_tput_pct) <= np.nan_to_num(sd_tput_pct)),
              "p95": (abs(d_p95_ms) <= P95_TOLERANCE_MS, abs(d_p95_ms) <= np.nan_to_num(sd_p95_ms))}
    failed = [name for name, (bound, spread) in checks.items() if not (bound or spread)]
    if failed:
        return False, "fails " + ", ".join(failed)
    by_spread = [name for name, (bound, _) in checks.items() if not bound]
    return True, f"spread ({', '.join(by_spread)})" if by_spread else "bounds"


def valid_runs(runs: pd.DataFrame) -> pd.DataFrame:
    return runs[runs["valid"].astype(str).str.lower().isin(["true", "1"])]


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """Per matrix row and label: both sides' means over their valid replicates, the upstream's
    spread (sd), the deltas (port − upstream) and the verdict."""
    matrix = valid_runs(runs[runs["bench"] == "matrix"])
    out = []
    for (row, label), group in matrix.groupby(["row", "label"], sort=False):
        up, port = group[group["side"] == "upstream"], group[group["side"] == "port"]
        if up.empty or port.empty:
            continue
        u = {k: float(up[k].mean()) for k in METRICS}
        p = {k: float(port[k].mean()) for k in METRICS}
        sd_tput = 100 * float(np.nan_to_num(up["tput"].std())) / u["tput"] if u["tput"] else np.nan
        sd_p95 = float(np.nan_to_num(up["p95"].std()))
        d_tput = 100 * (p["tput"] - u["tput"]) / u["tput"] if u["tput"] else np.nan
        d_p95 = p["p95"] - u["p95"]
        ok, how = verdict(d_tput, d_p95, sd_tput, sd_p95)
        # a multi-flow row: how far each flow's share moved (shown; the verdict is the total's)
        flow_d = [100 * abs(float(port[c].mean()) - float(up[c].mean())) / float(up[c].mean())
                  for c in group.columns if c.startswith("tput ") and float(up[c].mean() or 0) > 0]
        out.append({"row": row, "label": label, "n up": len(up), "n port": len(port),
                    "up tput": u["tput"], "port tput": p["tput"], "Δtput %": d_tput, "up sd tput %": sd_tput,
                    "up mean": u["mean"], "port mean": p["mean"],
                    "up p95": u["p95"], "port p95": p["p95"], "Δp95": d_p95, "up sd p95": sd_p95,
                    "up loss %": u["loss"], "port loss %": p["loss"], "Δloss": p["loss"] - u["loss"],
                    "worst |Δflow tput| %": max(flow_d) if flow_d else np.nan,
                    # connections per run beyond the flows: a program that connected again
                    "up extra conns": extra_connections(up), "port extra conns": extra_connections(port),
                    # programs per run that exited on their own while the run went on (a flow
                    # of a multi-flow run that could not connect, as Pantheon's tunnels allow)
                    "up ended alone": ended_alone(up), "port ended alone": ended_alone(port),
                    "pass": "PASS" if ok else "FAIL", "by": how})
    return pd.DataFrame(out)


def extra_connections(runs: pd.DataFrame) -> float:
    """Mean connections per run beyond the run's flows (nan where the CSV predates the count)."""
    if "connections" not in runs.columns or runs["connections"].isna().all():
        return np.nan
    return float((runs["connections"] - runs["flows"]).mean())


def ended_alone(runs: pd.DataFrame) -> float:
    """Mean programs per run that exited on their own while the run went on (nan where the CSV
    predates the count)."""
    if "ended alone" not in runs.columns or runs["ended alone"].isna().all():
        return np.nan
    return float(runs["ended alone"].mean())


def label_summary(rows: pd.DataFrame) -> pd.DataFrame:
    """Per label: median and worst |Δ| per metric over the rows, rows passing, faithful (all)."""
    out: list[dict[str, object]] = []
    if rows.empty:
        return pd.DataFrame(out)
    for label, group in rows.groupby("label", sort=False):
        d = {name: group[column].abs() for name, column in
             (("tput %", "Δtput %"), ("p95 ms", "Δp95"), ("loss pp", "Δloss"))}
        passing = int((group["pass"] == "PASS").sum())
        out.append({"label": label, "rows": len(group), "rows passing": passing,
                    **{f"{stat} |Δ{name}|": float(getattr(d[name], stat)()) for name in d
                       for stat in ("median", "max")},
                    "faithful": passing == len(group)})
    return pd.DataFrame(out).rename(columns=lambda c: c.replace("max |", "worst |"))


def known_summary(runs: pd.DataFrame, pantheon: pd.DataFrame) -> pd.DataFrame:
    """Per label on the known emulator: ours (and the upstream build, if it ran) beside
    Pantheon's 2017 numbers (emulator A), signed differences in per cent, and the 10 % verdict."""
    known = valid_runs(runs[runs["bench"] == "known"])
    table = pantheon[pantheon["emulator"] == "A"].set_index("scheme")
    out = []
    for label, group in known.groupby("label", sort=False):
        if label not in table.index:
            continue
        ref_tput, ref_p95 = float(table.loc[label, "tput_mbps"]), float(table.loc[label, "p95_delay_ms"])
        row: dict[str, object] = {"label": label, "pantheon tput": ref_tput, "pantheon p95": ref_p95}
        deltas: dict[str, tuple[float, float]] = {}
        for side, prefix in (("port", "ours"), ("upstream", "up")):
            runs_of = group[group["side"] == side]
            if runs_of.empty:
                continue
            tput, p95 = float(runs_of["tput"].mean()), float(runs_of["p95"].mean())
            deltas[prefix] = 100 * (tput - ref_tput) / ref_tput, 100 * (p95 - ref_p95) / ref_p95
            row.update({f"{prefix} scheme": runs_of["scheme"].iloc[0], f"{prefix} n": len(runs_of),
                        f"{prefix} tput": tput, f"{prefix} p95": p95,
                        f"{prefix} Δtput %": deltas[prefix][0], f"{prefix} Δp95 %": deltas[prefix][1]})
        if "ours" in deltas:
            ok = all(abs(d) <= KNOWN_TOLERANCE_PCT for d in deltas["ours"])
            row["pass"] = "PASS" if ok else "FAIL"
        out.append(row)
    return pd.DataFrame(out)


# ----------------------------------------------------------------------------------------------
# Fidelity into the registry file


def _r(value: float) -> float:
    return round(float(value), 1)


def fidelity(ports: Mapping[str, Port], labels: pd.DataFrame, known: pd.DataFrame, runs: pd.DataFrame,
             ) -> dict[str, dict[str, object]]:
    """Port name -> its measured fidelity: against its upstream build over the matrix (with the
    known-emulator comparison, signed, beside it) where the matrix ran it; else, where only the
    known emulator did, against Pantheon's 2017 table alone (faithful by the 10 % rule)."""
    out: dict[str, dict[str, object]] = {}
    by_label = labels.set_index("label") if not labels.empty else pd.DataFrame()
    known_by = known.set_index("label") if not known.empty else pd.DataFrame()
    for label, port in ports.items():
        k = known_by.loc[label] if label in known_by.index and "ours tput" in known_by.columns \
            and pd.notna(known_by.loc[label, "ours tput"]) else None
        known_emulator = None if k is None else {"tput_pct": _r(k["ours Δtput %"]), "p95_pct": _r(k["ours Δp95 %"])}
        if label in by_label.index:
            s = by_label.loc[label]
            mine = runs[(runs["bench"] == "matrix") & (runs["label"] == label)]
            sources = mine.loc[mine["side"] == "upstream", "source"].dropna().unique()
            # valid runs per row: the fewer of its two sides
            per_row = valid_runs(mine).groupby(["row", "side"]).size().groupby(level="row").min()
            entry: dict[str, object] = {
                # what was run, not where it lay on the machine that ran it
                "against": "; ".join(str(x).split(": /")[0] for x in sources) or port.upstream,
                "measured": str(mine["date"].max()),
                # the fewest valid runs a side has in any row; where rows differ (pooled
                # invocations, an invalid run), every row's count is in replicates_by_row
                "rows": int(s["rows"]), "replicates": int(per_row.min()),
                "runtime_s": _r(single_flow_runtime(mine)),
                "tput_pct": {"median": _r(s["median |Δtput %|"]), "worst": _r(s["worst |Δtput %|"])},
                "p95_ms": {"median": _r(s["median |Δp95 ms|"]), "worst": _r(s["worst |Δp95 ms|"])},
                "loss_pct": {"median": _r(s["median |Δloss pp|"]), "worst": _r(s["worst |Δloss pp|"])},
                "rows_passing": int(s["rows passing"]), "faithful": bool(s["faithful"]),
            }
            if per_row.nunique() > 1:
                entry["replicates_by_row"] = {str(row): int(n) for row, n in per_row.items()}
            if known_emulator is not None:
                entry["known_emulator"] = known_emulator
            out[port.name] = entry
        elif known_emulator is not None:
            mine = runs[(runs["bench"] == "known") & (runs["label"] == label) & (runs["side"] == "port")]
            out[port.name] = {
                "against": KNOWN_AGAINST, "measured": str(mine["date"].max()),
                "replicates": int(mine["replicate"].max()), "runtime_s": _r(mine["runtime"].max()),
                "known_emulator": known_emulator,
                "faithful": bool(abs(known_emulator["tput_pct"]) <= KNOWN_TOLERANCE_PCT
                                 and abs(known_emulator["p95_pct"]) <= KNOWN_TOLERANCE_PCT),
            }
    return out


def single_flow_runtime(runs: pd.DataFrame) -> float:
    """The runtime of the 1-flow runs among `runs` (`--runtime`; the 3-flow rows run at least
    MULTI_FLOW_RUNTIME_S); all runs' where the CSV predates the flows column."""
    one = runs[runs["flows"] == 1] if "flows" in runs.columns else runs
    return float((one if len(one) else runs)["runtime"].max())


def with_fidelity(text: str, fidelities: Mapping[str, Mapping[str, object]]) -> str:
    """The registry file's text with each named entry's "fidelity" set, touching nothing else:
    an existing "fidelity" value is replaced in place, else a line `"fidelity": {...},` goes in
    before the entry's "implementation" line, at its indentation. Checks the result parses and
    says what was written."""
    decoder = json.JSONDecoder()
    for name, value in fidelities.items():
        found = re.search(r'\{\s*"name"\s*:\s*' + re.escape(json.dumps(name)) + r"\s*,", text)
        if found is None:
            raise ValueError(f"{REGISTRY_JSON.name}: no entry named {name!r}")
        start = found.start()
        entry, end = decoder.raw_decode(text, start)  # the index where the entry ends
        block = text[start:end]
        rendered = json.dumps(value, ensure_ascii=False)
        if "fidelity" in entry:
            key = re.search(r'"fidelity"\s*:\s*', block)
            assert key is not None
            _, value_end = decoder.raw_decode(block, key.end())
            block = block[:key.end()] + rendered + block[value_end:]
        else:
            line = re.search(r'^([ \t]*)"implementation"\s*:', block, re.MULTILINE)
            if line is not None:
                block = block[:line.start()] + f'{line.group(1)}"fidelity": {rendered},\n' + block[line.start():]
            else:  # a one-line entry: the field goes last
                block = block[:-1].rstrip() + f', "fidelity": {rendered}' + "}"
        text = text[:start] + block + text[end:]
    written = {e["name"]: e.get("fidelity") for e in json.loads(text)["schemes"]}
    for name, value in fidelities.items():
        if written.get(name) != json.loads(json.dumps(value)):
            raise AssertionError(f"the fidelity of {name} did not land in the registry text")
    return text


def write_fidelity(fidelities: dict[str, dict[str, object]], path: Path = REGISTRY_JSON) -> None:
    """Writes `fidelities` into the registry file, keeping what this invocation did not measure:
    the earlier matrix fidelity of a port it scored only on the known emulator (with the new
    known-emulator numbers beside it), and the earlier known-emulator numbers of a port it
    scored only on the matrix (`--skip-known`)."""
    text = path.read_text()
    earlier = {e["name"]: e.get("fidelity") or {} for e in json.loads(text)["schemes"]}
    new: dict[str, dict[str, object]] = {}
    for name, f in fidelities.items():
        before = earlier.get(name, {})
        if "rows" not in f and "rows" in before:
            known = {"known_emulator": f["known_emulator"]} if "known_emulator" in f else {}
            new[name] = {**before, **known}
            beside = ", with this run's known-emulator numbers" if known else ""
            print(f"{name}: kept its earlier fidelity against its upstream build{beside} (this run scored it only on "
                  "the known emulator; run the matrix for it)", file=sys.stderr)
        elif "rows" in f and "known_emulator" not in f and "known_emulator" in before:
            new[name] = {**f, "known_emulator": before["known_emulator"]}
            print(f"{name}: kept its earlier known-emulator numbers (this run did not score it there)",
                  file=sys.stderr)
        else:
            new[name] = f
    if new:
        path.write_text(with_fidelity(text, new))
    print(f"fidelity written to {path}: {', '.join(new) or 'none'}")


# ----------------------------------------------------------------------------------------------
# Output


def plot(rows: pd.DataFrame, path: Path, title: str) -> None:
    """Per row and label: the port's throughput against the upstream's (Δ %, with the upstream's
    own sd and the ±5 % bound), and both p95s (the upstream's ± its sd)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [f"{r} {c}" for r, c in zip(rows["row"], rows["label"], strict=True)]
    y = np.arange(len(names))
    height = 0.3 * len(names) + 2.0
    fig, (tput, p95) = plt.subplots(1, 2, figsize=(11, height), sharey=True, gridspec_kw={"width_ratios": [1, 1.4]})
    tput.axvspan(-TPUT_TOLERANCE_PCT, TPUT_TOLERANCE_PCT, color="0.9", label="±5 % bound")
    tput.errorbar(np.zeros(len(y)), y, xerr=rows["up sd tput %"], fmt="o", color="C0",
                  label="upstream build (± run-to-run sd)")
    tput.plot(rows["Δtput %"], y, "x", color="C3", label="our port")
    tput.set_xlabel("throughput: port − upstream (%)")
    tput.set_yticks(y, names, fontsize=7)
    tput.invert_yaxis()
    low = np.minimum(rows["up sd p95"], rows["up p95"] * 0.9)  # a log axis cannot go below 0
    p95.errorbar(rows["up p95"], y, xerr=(low, rows["up sd p95"]), fmt="o", color="C0")
    p95.plot(rows["port p95"], y, "x", color="C3")
    p95.set_xscale("log")
    p95.set_xlabel("p95 one-way delay (ms)")
    fig.suptitle(title, fontsize=9)
    fig.legend(loc="lower center", ncol=3, fontsize=8)
    fig.tight_layout(rect=(0, 0.4 / height, 1, 1))
    fig.savefig(path, dpi=130)
    plt.close(fig)


def show(title: str, frame: pd.DataFrame) -> None:
    print(f"\n{title}")
    print(frame.to_string(index=False, float_format=lambda v: f"{v:.1f}") if len(frame) else "(nothing ran)")


def report(runs: pd.DataFrame, args: argparse.Namespace, ports: Mapping[str, Port], stamp: str) -> None:
    """Prints and writes the tables of `runs`; with --write-fidelity, the registry's fidelity."""
    rows = summarize(runs)
    labels = label_summary(rows)
    if (runs["bench"] == "matrix").any():
        show(f"Ports against their upstream builds, up to {args.replicates} × {args.runtime:g} s per side "
             f"(3x rows: {max(args.runtime, MULTI_FLOW_RUNTIME_S):g} s) "
             f"(PASS: |Δtput| ≤ {TPUT_TOLERANCE_PCT:g} % and |Δp95| ≤ {P95_TOLERANCE_MS:g} ms, or within the "
             "upstream's own sd)", rows)
        show("Per label (|Δ| over the rows: throughput %, p95 ms, loss percentage points)", labels)
    known = pd.DataFrame()
    if (runs["bench"] == "known").any():
        table = pd.read_csv(args.known_emulators / KNOWN_TABLE)
        known = known_summary(runs, table)
        show(f"Known emulator A ({KNOWN_EMULATOR}, unbounded, no loss) against Pantheon's 2017 table "
             f"(PASS: within {KNOWN_TOLERANCE_PCT:g} % of throughput and p95)", known)
    for name, frame in (("rows", rows), ("labels", labels), ("known", known)):
        if len(frame):
            frame.to_csv(args.out / f"vs_pantheon_schemes_{name}_{stamp}.csv", index=False)
    if len(rows):
        figure = args.out / f"vs_pantheon_schemes_{stamp}.png"
        plot(rows, figure, "our ports against their upstream builds, over the engine")
        print(f"plot: {figure}")
    if args.write_fidelity:
        write_fidelity(fidelity(ports, labels, known, runs))


def find_known_dir() -> Path:
    """../shared/data/pantheon-known-emulators beside the repository, or beside the nearest
    directory above it that has one (a git worktree sits deeper than the main checkout)."""
    for directory in REPO.parents:
        if (directory / KNOWN_SUBDIR).is_dir():
            return directory / KNOWN_SUBDIR
    return REPO.parent / KNOWN_SUBDIR


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference-dir", type=Path, default=REFERENCE_DIR,
                        help="upstream builds: one Pantheon-contract program per label, DIR/<label> "
                             "(default: %(default)s)")
    parser.add_argument("--pantheon-dir", type=Path, metavar="CHECKOUT",
                        help="run the upstream builds through a Pantheon checkout's wrappers instead")
    parser.add_argument("--pantheon-python", metavar="INTERPRETER", help="interpreter for Pantheon's wrappers")
    parser.add_argument("--ports-program", type=Path, metavar="PATH",
                        help="run the ports with this calibrate-scheme build (or a directory of them named "
                             "after the port or the label) instead of the installed one")
    parser.add_argument("--era", default="2017", help="the era whose ports run (default: %(default)s)")
    parser.add_argument("--rows", metavar="A,B", help="matrix rows to run, by name prefix, e.g. 10/28/inf,12/40")
    parser.add_argument("--quick", action="store_true", help=f"only the rows {' and '.join(QUICK)}".replace("%", "%%"))
    parser.add_argument("--schemes", metavar="A,B",
                        help=f"labels to run (default: {','.join(LABELS)} in the matrix, and "
                             f"{','.join(KNOWN_EXTRA)} too on the known emulator)")
    parser.add_argument("--runtime", type=float, default=20.0, help="seconds per matrix run (default: %(default)s)")
    parser.add_argument("--known-runtime", type=float, default=30.0,
                        help="seconds per known-emulator run (default: %(default)s, as Pantheon's table)")
    parser.add_argument("--replicates", type=int, default=3, help="runs per side (default: %(default)s)")
    parser.add_argument("--known-emulators", type=Path, default=find_known_dir(), metavar="DIR",
                        help="Pantheon's 2017 table and its trace (default: %(default)s)")
    parser.add_argument("--known-only", action="store_true", help="only the known emulator")
    parser.add_argument("--skip-known", action="store_true", help="only the matrix")
    parser.add_argument("--seed", type=int,
                        help="replicate N's Poisson traces come from seed·1000 + N, and its losses and "
                             "start-up phase from those, the same for both sides (default: a fresh one per "
                             "invocation, printed)")
    parser.add_argument("--realtime-priority", type=int, metavar="N",
                        help="SCHED_FIFO priority of the engine (default: calibrate-link's)")
    parser.add_argument("--write-fidelity", action="store_true",
                        help=f"write each port's measured fidelity into {REGISTRY_JSON.relative_to(REPO)}")
    parser.add_argument("--report", metavar="RUNS_CSV",
                        help="the tables (and --write-fidelity) of earlier runs files (comma-separated)")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--srand", action="store_true",
                        help=f"give both sides of replicate N one seed for srand ({SRAND_ENV}: the low 32 bits of "
                             "its trace seed, in the runs CSV's `srand`), so that the PCC ports and their "
                             "reference wrappers draw the same probe directions; without it each program "
                             "seeds from the clock")
    parser.add_argument("--keep-logs", type=Path, metavar="DIR",
                        help="keep each run's data directory (Pantheon's logs) as DIR/<bench_row>/<label>-<side>-<N>")
    args = parser.parse_args()
    if args.known_only and args.skip_known:
        parser.error("--known-only and --skip-known exclude each other")
    if args.replicates < 1:
        parser.error("--replicates must be at least 1")
    if not (0 < args.runtime <= MAX_RUNTIME_S and 0 < args.known_runtime <= MAX_RUNTIME_S):
        parser.error(f"--runtime and --known-runtime must be in (0, {MAX_RUNTIME_S:g}] seconds, as in Pantheon")
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 40)
    ports = ports_of(json.loads(REGISTRY_JSON.read_text()), args.era)
    if args.report:
        runs = pd.concat([pd.read_csv(p) for p in args.report.split(",") if p], ignore_index=True)
        matrix = runs[runs["bench"] == "matrix"]
        # several invocations' runs may be pooled: the most runs any side has in a row
        args.replicates = int((matrix if len(matrix) else runs).groupby(["row", "label", "side"]).size().max())
        args.runtime = single_flow_runtime(matrix if len(matrix) else runs)
        report(runs, args, ports, stamp)
        return 0
    if args.seed is None:
        args.seed = int(time.time()) % 1_000_000
    print(f"seed {args.seed} (traces and losses; again with --seed {args.seed})", file=sys.stderr)

    wanted = [s.strip() for s in args.schemes.split(",") if s.strip()] if args.schemes else None
    matrix_labels = wanted or list(LABELS)
    known_table = None
    known_labels: list[str] = []
    if not args.skip_known:
        table_path = args.known_emulators / KNOWN_TABLE
        if not table_path.is_file():
            parser.error(f"--known-emulators: no {table_path} (or --skip-known)")
        known_table = pd.read_csv(table_path)
        in_table = set(known_table.loc[known_table["emulator"] == "A", "scheme"])
        known_labels = [x for x in (wanted or [*LABELS, *KNOWN_EXTRA]) if x in in_table]
    registry = load_registry()
    everything = list(dict.fromkeys(matrix_labels + known_labels))
    try:
        upstream = upstream_schemes(everything, ports, args.reference_dir, args.pantheon_dir, args.pantheon_python,
                                    args.era)
    except CalibrateError as error:
        parser.error(str(error))
    ours = {label: ours_scheme(label, ports, registry, args.ports_program) for label in everything}
    where = args.pantheon_dir or args.reference_dir
    for label in everything:
        up, mine = upstream.get(label), ours[label]
        print(f"{label}: upstream {up.name + ' ' + repr(' '.join(up.program)) if up else f'none in {where}'}"
              f"{'' if up is None or up.available else f' (unavailable: {up.unavailable_reason})'}; "
              f"ours {mine.name + ' ' + repr(' '.join(mine.program)) if mine else 'none'}"
              f"{'' if mine is None or mine.available else f' (unavailable: {mine.unavailable_reason})'}",
              file=sys.stderr)

    jobs: list[Job] = []
    if not args.known_only:
        for row in select_rows(args.rows, args.quick):
            emulator = row.emulator(args.seed)
            for label in matrix_labels:
                up, mine = upstream.get(label), ours.get(label)
                if up is None or mine is None:
                    continue
                if row.flows > 1 and (label, args.era) in OWN_PORT:
                    # its first sides all start at once, each binding the first free port: which
                    # flow got which is a race this harness cannot see (Pantheon's read stdout)
                    print(f"{row.name}: {label} skipped (its upstream picks its own ports: "
                          "one flow only)", file=sys.stderr)
                    continue
                jobs.append(Job("matrix", row.name, emulator, label, (("upstream", up), ("port", mine)),
                                row.workload(args.runtime), SETUP_S.get((label, args.era), FIRST_SIDE_SETUP_S)))
        skipped = [x for x in matrix_labels if upstream.get(x) is None or ours.get(x) is None]
        if skipped:
            print(f"not in the matrix (no upstream build or no port): {', '.join(skipped)}", file=sys.stderr)
    if known_table is not None:
        emulator = EmulatorConfig.parse(KNOWN_EMULATOR, trace_dirs=(args.known_emulators,), trace_seed=args.seed)
        for label in known_labels:
            sides = tuple((side, s) for side, s in (("upstream", upstream.get(label)), ("port", ours.get(label)))
                          if s is not None)
            if any(side == "port" for side, _ in sides):
                jobs.append(Job("known", "A", emulator, label, sides, Workload(1, 0.0, args.known_runtime, 1)))
    if not jobs:
        parser.error("nothing to run: no label has both an upstream build and a port (see above)")
    total = sum(len(job.sides) for job in jobs) * args.replicates
    seconds = sum(len(job.sides) * (job.workload.runtime_s + 6) for job in jobs) * args.replicates
    runs_csv = args.out / f"vs_pantheon_schemes_runs_{stamp}.csv"
    print(f"{total} runs, about {seconds / 60:.0f} min; runs: {runs_csv} (after each row and label)",
          file=sys.stderr, flush=True)
    runner = Runner(args, runs_csv, total)
    # SIGTERM stops the benchmark as Ctrl-C does, so the scratch directory goes with it; one left
    # by a benchmark killed outright is named after its owner and swept by the next run.
    def stop(signum: int, frame: Any) -> None:
        raise Interrupted(signum)

    signal.signal(signal.SIGTERM, stop)
    scratch.sweep()
    work = scratch.make("vs-pantheon")
    try:
        for job in jobs:
            runner.run(job, work)
    except KeyboardInterrupt:
        print(f"\nstopped; the runs so far are in {runs_csv} (--report {runs_csv})", file=sys.stderr)
        return 130
    except CalibrateError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(pd.DataFrame(runner.records), args, ports, stamp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
