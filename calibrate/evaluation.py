"""The work of an evaluation on Ray, as values: one task per (candidate, scheme, replicate).

The unit of remote work is `run_task`, a plain function of values: it runs one scheme once over
one candidate emulator (`calibrate.scripted.run_scheme`, its own engine instance, its own
network namespaces, its own temporary work directory) and returns plain metrics.  What crosses
the wire is here — the task (`RunTask`), what it measured (`RunMetrics`, as the journal records
it), the failure recorded for a task Ray gave up on (`lost`) — with the resources a task
declares and how to reach a Ray (`RaySettings`).  Nothing here imports Ray: run directories,
their journals and exports read these values without it.  The Ray client that submits the
tasks and streams their metrics back is `calibrate.cluster.evaluator.Evaluator`; Ray
schedules, retries and collects, and nothing queues or talks to workers by hand.

Resources each task declares (why: a node must run only as many emulations as it can without
distorting them, because an emulation that misses its deadlines measures the host, not the path):

- ``emulator_slot: 1`` — a custom resource each node advertises: how many engines it can run
  side by side (`ray start --resources='{"emulator_slot": N}'`; the embedded Ray, the nodes of
  `calibrate cluster local` and the KubeRay workers of `calibrate cluster up` get
  `SLOTS_PER_CORE` per core of their own unless told otherwise).  This bounds concurrency even
  when the CPU shares below are small.  Tasks are spread over the nodes (Ray's SPREAD
  strategy): an emulation measures its host too, so it goes where the fewest others run.
- ``num_cpus = cpu_share(rate)`` — grows with the emulated rate, because the engine's per-packet
  work and the endpoints' sending both scale with packets per second:
  ``min(1, 0.1 + rate_mbps / 100)``: a tenth of a core for the task's worker, idle engine and
  endpoints, plus a whole core per 100 Mbit/s (≈ 8,300 packets/s each way), capped at one core
  since the engine's real-time loop is one thread and a task must fit on any node.

  Measured here (2 cores): the engine takes 5–8 % of a core at 12–96 Mbit/s with all its logs,
  and 64 engines at 12 Mbit/s at once matched one alone within 0.2 %
  (experiments/bench_emulator.py); the six Nepal schemes (cubic, QUIC, Vegas, Copa, LEDBAT,
  saturator) at 10 Mbit/s, 28 ms, 188 packets, 8 runs at once vs 2 at once: throughput, p95 delay
  and loss equal within run-to-run scatter (cubic 9.85/9.85 Mbit/s, 252.0/252.5 ms), 3× faster.
  Most of a Pantheon-style run is waiting (3 s of setup, then rate-limited sending), so a
  core holds several.  At 10 Mbit/s a task takes 0.2 CPU: a 2-core node runs its 8 slots; at
  ≥ 90 Mbit/s one task per core.
- ``num_cpus = 1`` at any rate for a scheme whose sender spins between sends (`Scheme.busy_wait`,
  from the controller's own pacer: UDT's send queue, so pcc-2017, vivace-2018 and
  pcc_experimental-2018, as upstream; and Pantheon's own wrapper of a label whose program spins,
  `PortOf.busy_wait`, which adds verus): it holds a core for the whole run.  Measured here
  (experiments/bench_spinning.py, 12 Mbit/s, 20 ms, 100 packets, 4 runs each of
  pcc_experimental-2018 and cubic): one at a time 11.21 ± 0.10 Mbit/s, packed 8 at once as the
  rate rule would pack them 10.66 ± 0.20 (−4.9 %), cubic unchanged (11.94) and the engine never
  late (p99 ≤ 0.6 ms): the spinning senders starve each other, not the engine.

Retries: a worker that dies (the node is lost, the process crashes) is retried by Ray
(`max_retries`).  An *invalid* run (an endpoint quit early, too little data, the engine failed)
is re-run once inside the task with a fresh loss seed, because the next run of a scheme usually
succeeds; if that one is invalid too, the task returns the failure with both reasons, and the
objective penalizes it.  Errors of input or host (InputError, EnvironmentProblem) are not
retried: every other run would fail the same way, so they stop the calibration.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from calibrate import scratch
from calibrate.emulator import EmulatorConfig
from calibrate.engine import Backend
from calibrate.metrics import TOTAL, Stats
from calibrate.objective import Failure
from calibrate.schemes import Scheme
from calibrate.scripted import run_scheme
from calibrate.targets.model import Workload

#: the custom resource: one per engine a node can run at once
SLOT = "emulator_slot"

#: cpu_share's rule (module docstring)
CPU_BASE = 0.1
MBPS_PER_CPU = 100.0
CPU_CAP = 1.0

#: the embedded Ray's emulator slots per core (module docstring: measured)
SLOTS_PER_CORE = 4

#: Ray's retries of a task whose worker died (not of a task that returned a failure)
MAX_RETRIES = 2

#: the re-run of an invalid replicate uses run id replicate + this, so its loss seed differs
#: (`EmulatorConfig.for_run`: trace seed·1000 + run id) and never collides with another
#: replicate's
RERUN_OFFSET = 500

#: the embedded Ray's object store: results are a few hundred bytes each
OBJECT_STORE_BYTES = 100 * 1024 * 1024



def cpu_share(rate_mbps: float) -> float:
    """CPUs one task asks for at this emulated rate (rule and reasons: module docstring)."""
    return round(min(CPU_CAP, CPU_BASE + max(rate_mbps, 0.0) / MBPS_PER_CPU), 3)


# ----------------------------------------------------------------------------------------------
# Values that cross the wire


@dataclass(frozen=True)
class RunTask:
    """One (candidate, scheme, replicate): everything the task needs, as values."""

    candidate: int  # the calibration's candidate id
    label: str  # the target's scheme label (names the key in the objective)
    scheme: Scheme
    replicate: int  # 1-based; the run id (its loss seed: `EmulatorConfig.for_run`)
    emulator: EmulatorConfig
    workload: Workload
    backend: Backend = Backend()

    @property
    def cpus(self) -> float:
        # Real Mahimahi ferries packets through half a dozen normal-priority processes per path
        # and is distorted by competition for the CPU: one core per run.
        if self.backend.name == "mahimahi":
            return CPU_CAP
        # A sender that spins between sends (UDT's send queue: pcc, vivace, pcc_experimental)
        # holds a whole core at any rate (module docstring).
        if self.scheme.busy_wait:
            return CPU_CAP
        return cpu_share(self.emulator.rate_mbps or 0.0)


@dataclass(frozen=True)
class RunMetrics:
    """What one task measured: per flow key ("all", "1", ...) its statistics, or the reason it
    produced nothing usable."""

    candidate: int
    label: str
    replicate: int
    flows: Mapping[str, Stats] | None  # None when the run failed
    reason: str | None  # why the replicate does not count (None: valid)
    attempts: int  # runs made (1, or 2 after an invalid first run)
    loss_seeds: tuple[int, ...]  # one per attempt
    seconds: float  # wall time of the task
    host: str = ""

    @property
    def valid(self) -> bool:
        return self.reason is None and self.flows is not None

    def replicate_of(self, flow: str = TOTAL) -> Stats | Failure:
        """The objective's view of one flow of this replicate."""
        if not self.valid:
            return Failure(self.reason or "no statistics")
        assert self.flows is not None
        if flow not in self.flows:
            return Failure(f"flow {flow} sent nothing in this run")
        return self.flows[flow]

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "replicate": self.replicate,
                "flows": None if self.flows is None else {k: v.to_json() for k, v in self.flows.items()},
                "reason": self.reason, "attempts": self.attempts, "loss_seeds": list(self.loss_seeds),
                "seconds": round(self.seconds, 3), "host": self.host}

    @classmethod
    def from_json(cls, candidate: int, data: Mapping[str, Any]) -> RunMetrics:
        flows = data.get("flows")
        return cls(candidate, str(data["label"]), int(data["replicate"]),
                   None if flows is None else {k: _stats(v) for k, v in flows.items()},
                   data.get("reason"), int(data.get("attempts", 1)),
                   tuple(int(s) for s in data.get("loss_seeds", ())), float(data.get("seconds", 0.0)),
                   str(data.get("host", "")))


def _stats(value: Any) -> Stats:
    """A flow's statistics as the journal holds them: {"tput", "delay", "loss"}; journals written
    before that spelling hold [tput, delay, loss] lists."""
    if isinstance(value, Mapping):
        return Stats.from_json(value)
    tput, delay, loss = (float(x) for x in value)
    return Stats(tput, delay, loss)


def _flows(outcome: Any) -> dict[str, Stats] | None:
    """Statistics per flow key; a flow with no delay or loss measured is left out (it cannot
    be scored, and the objective then reports it as missing)."""
    if outcome.stats is None:
        return None
    return {key: m for key, m in outcome.stats.metrics().items()
            if m.delay is not None and m.loss is not None}


def lost(task: RunTask) -> RunMetrics:
    """The failure recorded for a task Ray could not complete after its retries."""
    return RunMetrics(task.candidate, task.label, task.replicate, None,
                      f"the Ray worker running it died {MAX_RETRIES + 1} times", 0, (), math.nan)


@dataclass(frozen=True)
class RaySettings:
    """How to get a Ray: join `address` (or $RAY_ADDRESS), else start an embedded one."""

    address: str | None = None
    num_cpus: int | None = None  # embedded only; default: this host's cores
    slots: int | None = None  # embedded only; default: SLOTS_PER_CORE engines per core
    object_store_bytes: int = OBJECT_STORE_BYTES

    def resolved_address(self) -> str | None:
        return self.address or os.environ.get("RAY_ADDRESS") or None


# ----------------------------------------------------------------------------------------------
# The remote function (plain; Ray's decoration happens in `calibrate.cluster.evaluator.Evaluator`)


def run_task(task: RunTask, workdir: str | None = None) -> RunMetrics:
    """Run one replicate in its own scratch directory (`calibrate.scratch`: removed when the
    run ends, also when the task is cancelled); re-run once if invalid."""
    scratch.sweep(workdir)  # what killed workers on this node left behind
    started = time.monotonic()
    reasons: list[str] = []
    seeds: list[int] = []
    host = os.uname().nodename
    for attempt, run_id in enumerate((task.replicate, task.replicate + RERUN_OFFSET), start=1):
        with scratch.directory(f"c{task.candidate}-{task.label}", workdir) as data_dir:
            outcome = run_scheme(task.emulator, task.scheme, run_id, task.workload, data_dir,
                                 cc=task.label, backend=task.backend)
        seeds.append(outcome.loss_seed)
        if outcome.valid:
            return RunMetrics(task.candidate, task.label, task.replicate, _flows(outcome), None,
                              attempt, tuple(seeds), time.monotonic() - started, host)
        reasons.append(f"run {attempt}: {outcome.validity.reason or outcome.failure or 'invalid'}")
    return RunMetrics(task.candidate, task.label, task.replicate, None, "; ".join(reasons),
                      len(seeds), tuple(seeds), time.monotonic() - started, host)


__all__ = ["SLOT", "RaySettings", "RunMetrics", "RunTask", "cpu_share", "lost", "run_task"]
