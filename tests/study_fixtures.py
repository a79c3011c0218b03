"""Studies and calibrations without emulation, for the loop tests and the notebooks' test: a
synthetic target drawn from the fluid model (`calibrate.fluid`) over a hidden emulator, and an
evaluator with Ray's interface that answers every run from the same model."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from calibrate.evaluation import RunMetrics, RunTask
from calibrate.fluid import fluid_model, model_replicates
from calibrate.runs.config import UNLIMITED_QUEUE

#: the hidden lossy, buffered path
HIDDEN = {"rate": 10.0, "delay": 40, "queue": 150, "loss": 0.01}
#: target label -> the fluid model's scheme (and ours)
SCHEMES = {"cubic": "cubic", "bbr": "bbr", "vegas": "vegas", "saturator": "saturator"}
FLUID = {"cubic": "cubic", "bbr": "bbr", "udp-vegas": "vegas", "udp-saturator": "saturator",
         "udp-copa": "copa", "reno": "reno", "vegas-2017": "vegas", "saturator-2017": "saturator",
         "copa-2017": "copa"}
RUNTIME_S = 30.0


def write_target(path: Path, hidden: Mapping[str, float] = HIDDEN, link: str = "constant",
                 labels=tuple(SCHEMES)) -> Path:
    """A summary-table target (CSV) of the fluid model over `hidden`, with 3 % scatter."""
    stats = fluid_model(hidden, link, [SCHEMES[label] for label in labels])
    lines = [f"# name: fluid {link} {hidden}", f"# runtime_s: {RUNTIME_S:g}",
             "scheme,runs,tput_mbps_mean,tput_mbps_std,delay_p95_ms_mean,delay_p95_ms_std,"
             "loss_pct_mean,loss_pct_std"]
    for label in labels:
        s = stats[SCHEMES[label]]
        lines.append(f"{label},5,{s.throughput:.6g},{0.03 * s.throughput:.6g},{s.delay:.6g},"
                     f"{0.03 * (s.delay - hidden['delay']) + 0.5:.6g},{100 * s.loss:.6g},"
                     f"{max(10 * s.loss, 0.01):.6g}")
    path.write_text("\n".join(lines) + "\n")
    return path


class FluidEvaluator:
    """`calibrate.cluster.evaluator.Evaluator`'s interface, `slots` candidates' tasks at once, every
    run answered by the fluid model with its replicate noise (seeded by the emulator and the
    replicate, so the same run twice gives the same numbers).  `submitted` keeps every task."""

    def __init__(self, slots: int = 1) -> None:
        self.slots = slots
        self.done: dict[int, RunMetrics] = {}
        self.submitted: list[RunTask] = []

    def submit(self, task: RunTask) -> int:
        e = task.emulator
        queue = e.queue.packets if e.queue.kind == "droptail" else UNLIMITED_QUEUE
        x = {"rate": e.rate_mbps, "delay": e.delay_ms, "queue": queue, "loss": e.uplink_loss}
        seed = int(np.random.SeedSequence([int(e.rate_mbps * 1e6), e.delay_ms, int(queue),
                                           int(e.uplink_loss * 1e9), e.trace_seed]).generate_state(1)[0])
        scheme = FLUID[task.scheme.name]
        s = model_replicates(x, seed, 0, 0, task.replicate, link=e.link, runtime_s=task.workload.runtime_s,
                             schemes=[scheme])[scheme][-1]
        ref = len(self.submitted)
        self.submitted.append(task)
        self.done[ref] = RunMetrics(task.candidate, task.label, task.replicate,
                                    {"all": s}, None, 1,
                                    (e.for_run(task.replicate).loss_seed,), 0.0)
        return ref

    def wait(self, refs: list[int], timeout: float | None) -> list[tuple[int, RunMetrics]]:
        return [(ref, self.done[ref]) for ref in refs]

    def cancel(self, refs: list[int]) -> None:
        pass
