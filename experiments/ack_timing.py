"""What a sender sees of the path's timing, under real Mahimahi and the engine's two timings.

The measurement behind the engine's Mahimahi timing model (`emulators/src/ferry.rs`): one Linux
BBR flow (our `calibrate-scheme bbr`, kernel TCP) over 12 Mbit/s, 20 ms, a 100-packet DropTail
queue (`--row` for another, with random uplink loss if wanted), through

- real Mahimahi (`--backend mahimahi`, needs its mm-* shells on PATH and an unprivileged user),
- the engine with Mahimahi's timing (each shell direction a process with its own ms clock), and
- the engine with the idealised timing (every stage exactly on the ms boundary; the old engine).

For each it prints, from the run's own Pantheon logs and `ss -tin` samples of the sender:

- the spacing of ACK arrivals at the sender (percentiles; ideal timing keeps them on the ms grid),
  and where its tail arises: the p99 gap of the same ACKs as the receiver sent them, and how far
  the ACK path's p99 delay lies above its median,
- the sub-millisecond phase at which ACKs arrive (how spread over the ms they are),
- BBR's bandwidth estimate (`ss`'s bbr:(bw:...)) against the link's payload rate: a max-filtered
  estimate above the link rate makes BBR cwnd-limited, i.e. it keeps a standing queue,
- BBR's other cwnd terms: its min-RTT estimate, its cwnd against the path's BDP, how often the
  window is full and how often it enters ProbeRTT,
- how the sender met its losses, per second: retransmissions (`ss`), and from its namespace's
  `nstat` counters SACK recoveries, tail-loss probes, timeouts, reorderings seen and lost
  retransmissions,
- the mean and p95 one-way delay of the data, and the p95 of what departs after 5 s (past BBR's
  start-up, whose overfilled queue holds a few % of a 20 s run's packets, near where the p95
  falls),

and plots each run's one-way delay over time, per system, to experiments/out/. Last, it measures
how late this host wakes a task from a 1 ms `poll()`, as each Mahimahi shell waits for its next
millisecond (the engine's model draws that lateness from `WAKE_LATE_US` in emulators/src/ferry.rs).

With `--sched` it also prints, per process of each system (each Mahimahi shell's uplink and
downlink ferry, the engine, the endpoints), what the kernel's scheduler counted for it over the
middle half of each run (`/proc/TID/schedstat`, which costs the run nothing): how often it was
scheduled in, the CPU time each such slice took and how long it waited for a CPU before it.
A Mahimahi shell's loop pass is not instantaneous as in the engine's model; this measures what
it costs. `--perf` adds the distribution of those waits for a task once woken (`perf sched
record` through the run, then `perf sched timehist`'s "sch delay"; Debian's linux-perf): the
tail that the engine's model, one process drawing each shell's lateness independently, lacks.
Recording every context switch slows the run's processes down (on this host it took each shell
two to three times the CPU), so read its waits as an upper bound.

Run as root, alone:  .venv/bin/python experiments/ack_timing.py --mahimahi-user mahimahi [--runs 3]
                     [--row 24/30/150 | --row 30/10/400/0.2] [--sched [--perf]]
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd

from calibrate import binaries, engine
from calibrate.emulator import EmulatorConfig, Queue
from calibrate.engine import Backend, Endpoint, Logs
from calibrate.metrics import parse_datalink_log

#: BBR counts payload: one 1448-byte segment of each 1500-byte opportunity.
PAYLOAD_SHARE = 1448 / 1500
PORT = 50001


def ss_samples(text: str) -> pd.DataFrame:
    """The BBR connections' `ss -tin` samples: BBR's bandwidth estimate (Mbit/s) and min-RTT
    estimate (ms), cwnd and packets in flight (segments)."""
    rows = []
    for line in text.splitlines():
        bbr, cwnd = re.search(r"bbr:\(bw:(\d+)bps,mrtt:([\d.]+)", line), re.search(r"\bcwnd:(\d+)", line)
        if bbr and cwnd:
            unacked = re.search(r"\bunacked:(\d+)", line)
            retrans = re.search(r"\bretrans:\d+/(\d+)", line)
            rows.append({"bw": int(bbr[1]) / 1e6, "mrtt": float(bbr[2]), "cwnd": int(cwnd[1]),
                         "inflight": int(unacked[1]) if unacked else 0,
                         "retrans": int(retrans[1]) if retrans else 0})
    return pd.DataFrame(rows, columns=["bw", "mrtt", "cwnd", "inflight", "retrans"])


#: The sender's namespace's TCP counters (`nstat`) per second of the run: how its losses were found.
NSTAT = {"sack recoveries": "TcpExtTCPSackRecovery", "loss probes": "TcpExtTCPLossProbes",
         "timeouts": "TcpExtTCPTimeouts", "reorderings": "TcpExtTCPSACKReorder",
         "lost retransmits": "TcpExtTCPLostRetransmit"}


def nstat_counters(text: str) -> dict[str, int]:
    """`nstat -asz`'s absolute counters, by name."""
    fields = (line.split() for line in text.splitlines())
    return {f[0]: int(f[1]) for f in fields if len(f) >= 2 and f[1].isdigit()}


def wake_lateness(priority: int, samples: int = 3000) -> np.ndarray:
    """How late this host wakes a task from a 1 ms `poll()`, as each Mahimahi shell's loop waits
    for its next millisecond (µs past the timeout; priority 0: a normal task, else SCHED_FIFO)."""
    if priority:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    poller, late = select.poll(), np.empty(samples)
    for i in range(samples):
        start = time.perf_counter_ns()
        poller.poll(1)
        late[i] = (time.perf_counter_ns() - start) / 1e3 - 1000
    return late


#: Mahimahi's shells: each forks an uplink ferry (the parent of the next shell inward) and a
#: downlink ferry (no children) from its main process.
SHELLS = ("mm-delay", "mm-link", "mm-loss")


def process_roles() -> dict[int, str]:
    """Every task on the host now, by thread id: which part of a run it is."""
    tasks = {}
    for stat in Path("/proc").glob("[0-9]*/task/[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # ended meanwhile
        comm = text[text.index("(") + 1:text.rindex(")")]
        tasks[int(stat.parent.name)] = (comm, int(text[text.rindex(")") + 2:].split()[1]))
    parents = {ppid for _, ppid in tasks.values()}
    roles = {}
    for tid, (comm, ppid) in tasks.items():
        if comm in SHELLS:
            if tasks.get(ppid, ("", 0))[0] != comm:
                roles[tid] = f"{comm} main"
            else:
                roles[tid] = f"{comm} {'uplink' if tid in parents else 'downlink'} ferry"
        elif comm.startswith("calibrate-link"):
            roles[tid] = "engine (calibrate-link)"
        elif comm.startswith("calibrate-sche"):
            roles[tid] = "endpoints (calibrate-scheme)"
        elif comm.startswith("ksoftirqd"):
            roles[tid] = "ksoftirqd"
    return roles


#: `perf sched timehist --state` rows: time, cpu, task[tid(/pid)], wait time, sch delay and run time
#: (ms) of the slice that ends here, and the task's state as it ends.
TIMEHIST = re.compile(r"^\s*([\d.]+)\s+\[(\d+)\]\s+(.+?)\[(\d+)(?:/\d+)?\]\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)")


def sched_delays(perf_data: Path, roles: dict[int, str], seconds: float) -> pd.DataFrame:
    """Per role of `roles`: how long one of its tasks, once woken (its last slice ended asleep, not
    preempted), waited for a CPU (ms)."""
    out = subprocess.run(["perf", "sched", "timehist", "--state", "-i", str(perf_data)], capture_output=True,
                         text=True, check=True).stdout
    rows = [(int(m[4]), float(m[6]), m[8]) for m in map(TIMEHIST.match, out.splitlines()) if m]
    slices = pd.DataFrame(rows, columns=["tid", "sch_delay", "state"])
    slices["role"] = slices.tid.map(roles)
    slices["woken"] = ~slices.groupby("tid").state.shift().fillna("R").str.startswith("R")
    table = {}
    for role, group in slices.dropna(subset=["role"]).groupby("role"):
        woken = group.sch_delay[group.woken]
        table[role] = {**{f"wait p{q:g}": np.percentile(woken, q) if len(woken) else np.nan
                          for q in (50, 99, 99.9)},
                       "wait max": woken.max() if len(woken) else np.nan,
                       "waits > 0.5 ms / s": float((woken > 0.5).sum()) / seconds}
    return pd.DataFrame(table).T


def schedstat(tids: list[int]) -> dict[int, tuple[int, int, int]]:
    """`/proc/TID/schedstat` of each task still running: ns on a CPU, ns waiting for one, slices."""
    counts = {}
    for tid in tids:
        try:
            run, wait, slices = map(int, Path(f"/proc/{tid}/schedstat").read_text().split())
        except OSError:
            continue
        counts[tid] = (run, wait, slices)
    return counts


class SchedCounts:
    """What the scheduler counted for each process of a run between two moments of it."""

    def __init__(self, start_s: float, end_s: float) -> None:
        self.table = pd.DataFrame()
        self.roles: dict[int, str] = {}  # the run's processes, as `process_roles` found them at start_s
        self.thread = threading.Thread(target=self._sample, args=(start_s, end_s), daemon=True)
        self.thread.start()

    def _sample(self, start_s: float, end_s: float) -> None:
        time.sleep(start_s)
        self.roles = roles = process_roles()
        before = schedstat(list(roles))
        time.sleep(end_s - start_s)
        after = schedstat(list(before))
        rows = [(roles[tid], *(b - a for a, b in zip(before[tid], counts, strict=True)))
                for tid, counts in after.items()]
        sums = pd.DataFrame(rows, columns=["role", "run", "wait", "slices"]).groupby("role").sum()
        sums = sums[sums.slices > 0]
        seconds = end_s - start_s
        self.table = pd.DataFrame({"slices / s": sums.slices / seconds, "cpu %": 100 * sums.run / 1e9 / seconds,
                                   "µs per slice": sums.run / 1e3 / sums.slices,
                                   "µs waited per slice": sums.wait / 1e3 / sums.slices})

    def result(self) -> pd.DataFrame:
        self.thread.join()
        return self.table


#: Where perf finds the kernel's tracepoints.
TRACEFS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")


class SchedRecording:
    """`perf sched record` of the whole host while a run lasts."""

    def __init__(self, work: Path) -> None:
        self.data = work / "perf.data"
        self.perf: subprocess.Popen | None = None

    def __enter__(self) -> SchedRecording:
        self.perf = subprocess.Popen(["perf", "sched", "record", "-a", "-q", "-o", str(self.data)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)  # perf has its events on
        return self

    def __exit__(self, *_: object) -> None:
        assert self.perf is not None
        self.perf.send_signal(signal.SIGINT)
        self.perf.wait(timeout=60)


def host_wake_lateness() -> pd.DataFrame:
    """Percentiles of `wake_lateness`, a normal task's and a real-time one's (Mahimahi's shells run
    real-time under `--backend mahimahi`), measured in a child process each."""
    rows = {}
    for name, priority in (("normal task", 0), ("SCHED_FIFO 11", 11)):
        with multiprocessing.get_context("fork").Pool(1) as pool:
            late = pool.apply(wake_lateness, (priority,))
        rows[name] = {f"p{q:g}": np.percentile(late, q) for q in (5, 50, 90, 99, 99.9)} | {"max": late.max()}
    return pd.DataFrame(rows).T


def train_gaps(times_ms: np.ndarray) -> np.ndarray:
    """The gaps between ACK arrivals, in ms; ACKs within 0.2 ms of each other (a train of one
    wake-up) are one arrival."""
    gaps = np.diff(times_ms)
    return gaps[gaps > 0.2]


def one_run(backend: Backend, row: tuple[float, int, int, float], seconds: float, seed: int,
            sched: bool = False, perf: bool = False) -> tuple[dict[str, float], pd.Series, pd.DataFrame | None]:
    """The run's figures, its one-way delay over time (mean per 100 ms, indexed by seconds) and,
    with `sched`, what the scheduler counted for its processes (`SchedCounts`), with `perf` their
    waits once woken (`sched_delays`) too."""
    rate, delay, queue, loss = row
    payload_mbps = rate * PAYLOAD_SHARE
    emulator = EmulatorConfig(rate_mbps=rate, delay_ms=delay, queue=Queue.droptail(queue), uplink_loss=loss,
                              loss_seed=seed)
    tool = shlex.quote(str(binaries.find(binaries.SCHEME)))
    with tempfile.TemporaryDirectory(prefix="calibrate-ack-timing-") as work:
        w = Path(work)
        ss = w / "ss.txt"
        nstat = w / "nstat.txt"
        sender = (f"(while sleep 0.02; do ss -tin dst $EMU_PEER; done > {ss}) & "
                  f"(while sleep 0.5; do nstat -asz > {nstat}.part && mv {nstat}.part {nstat}; done) & "
                  f"exec {tool} bbr sender $EMU_PEER {PORT}")
        endpoints = [Endpoint("receiver", f"exec {tool} bbr receiver {PORT}"),
                     Endpoint("sender", sender, start_s=1.0)]
        datalink, acklink = w / "datalink.log", w / "acklink.log"
        logs = Logs(datalink=datalink, acklink=acklink)
        counts = SchedCounts(1 + seconds / 4, 1 + 3 * seconds / 4) if sched else None
        recording = SchedRecording(w) if perf else None
        with recording or contextlib.nullcontext():
            engine.run(emulator, endpoints, workdir=w, stop_after=1 + seconds, logs=logs, backend=backend)
        waits = None
        if counts:
            waits = counts.result()
            if recording:
                # the processes as SchedCounts found them: Mahimahi's shells are gone when the run ends
                waits = waits.join(sched_delays(recording.data, counts.roles, 1 + seconds), how="outer")
        data = parse_datalink_log(datalink)
        acks = parse_datalink_log(acklink)
        sampled = ss_samples(ss.read_text())
        counters = nstat_counters(nstat.read_text()) if nstat.exists() else {}
    steady = acks.departure_ts > acks.departure_ts[0] + 3000  # after start-up
    t = acks.departure_ts[steady]
    gaps = train_gaps(t)
    # where the ACK stalls arise: already as the receiver sends them (the data path and the
    # receiver), or on their way back (the ACK path's shells)
    ack_delay = acks.departure_delay[steady]
    sent_gaps = train_gaps(np.sort(t - ack_delay))
    phase = t % 1.0
    sampled = sampled[sampled.bw > 0.5 * payload_mbps]  # the data connection, past start-up
    bdp = payload_mbps * 1e6 / 8 / 1448 * 2 * delay / 1e3  # segments over the path's own RTT
    since = (data.departure_ts - data.departure_ts[0]) / 1e3
    # BBR's start-up overfills the queue for a few hundred ms: a few % of a 20 s run's packets, about
    # where the p95 falls, so the p95 of what departs after 5 s is the steady state's alone
    after_start_up = data.departure_delay[since > 5]
    series = pd.Series(data.departure_delay).groupby((since * 10).astype(int)).mean()
    series.index = series.index / 10
    figures = {"ack gap p5": np.percentile(gaps, 5), "ack gap p50": np.percentile(gaps, 50),
               "ack gap p95": np.percentile(gaps, 95), "ack gap p99": np.percentile(gaps, 99),
               "ack gap p99 as sent": np.percentile(sent_gaps, 99),
               "ack path p99 - p50": float(np.percentile(ack_delay, 99) - np.percentile(ack_delay, 50)),
               "ack phase sd": float(np.std(phase)),
               "bbr bw / link %": 100 * (sampled.bw.median() / payload_mbps - 1),
               "bbr mrtt": float(sampled.mrtt.median()),
               "cwnd / BDP": float(sampled.cwnd.median() / bdp),
               "cwnd-limited %": 100 * float((sampled.inflight >= sampled.cwnd).mean()),
               "retransmits / s": float(sampled.retrans.max()) / seconds if len(sampled) else 0.0,
               **{f"{name} / s": counters.get(counter, 0) / seconds for name, counter in NSTAT.items()},
               "probe-rtts / 10 s": 10 * int(np.sum(np.diff((sampled.cwnd <= 4).astype(int)) == 1)) / seconds,
               "mean delay": float(np.mean(data.departure_delay)),
               "p95 delay": float(np.percentile(data.departure_delay, 95, method="nearest")),
               "p95 after 5 s": float(np.percentile(after_start_up, 95, method="nearest"))}
    return figures, series, waits


def plot(series: dict[tuple[str, int], pd.Series], path: Path, title: str) -> None:
    """One panel per system: each run's one-way delay over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems = list(dict.fromkeys(name for name, _ in series))
    fig, axes = plt.subplots(len(systems), 1, figsize=(10, 2.2 * len(systems)), sharex=True, sharey=True)
    for ax, name in zip(np.atleast_1d(axes), systems, strict=True):
        for (system, run), delays in series.items():
            if system == name:
                ax.plot(delays.index, delays.to_numpy(), lw=0.8, label=f"run {run}")
        ax.set_title(name, fontsize=9)
        ax.set_ylabel("one-way delay (ms)")
        ax.legend(fontsize=7, loc="upper right")
    np.atleast_1d(axes)[-1].set_xlabel("seconds since the flow's first packet (mean per 100 ms)")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mahimahi-user", metavar="NAME")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--runtime", type=float, default=20.0)
    parser.add_argument("--row", default="12/20/100", metavar="RATE/DELAY/QUEUE[/LOSS%]",
                        help="the link: Mbit/s, one-way ms, DropTail packets and, optionally, the uplink's "
                             "random loss in percent (default 12/20/100)")
    parser.add_argument("--sched", action="store_true",
                        help="print what the scheduler counted for each process of each system over the middle "
                             "half of each run: slices, CPU time and waits for a CPU")
    parser.add_argument("--perf", action="store_true",
                        help="with --sched: record the scheduler through each run (perf) and print how long each "
                             "process waited for a CPU once woken (perturbs the run)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out",
                        help="where the plot of the delays over time goes (default experiments/out)")
    args = parser.parse_args()
    try:
        rate, delay, queue, *loss = args.row.split("/")
        row = (float(rate), int(delay), int(queue), float(loss[0].rstrip("%")) / 100 if loss else 0.0)
        if len(loss) > 1 or not 0 <= row[3] < 1:
            raise ValueError
    except ValueError:
        parser.error(f"--row {args.row!r}: give RATE/DELAY/QUEUE[/LOSS%], e.g. 24/30/150 or 30/10/400/0.2")
    if args.perf and not args.sched:
        parser.error("--perf adds to --sched: give both")
    if args.perf and not shutil.which("perf"):
        parser.error("--perf needs perf on PATH (Debian: apt-get install linux-perf)")
    if args.perf and not any(Path(d, "events/sched").is_dir() for d in TRACEFS):
        parser.error("--perf needs the kernel's scheduler tracepoints: mount tracefs first "
                     "(mount -t tracefs nodev /sys/kernel/tracing)")
    systems = [("engine, ideal timing", Backend(timing="ideal")), ("engine, Mahimahi timing", Backend())]
    if shutil.which("mm-link") and args.mahimahi_user:
        systems.insert(0, ("real Mahimahi", Backend("mahimahi", args.mahimahi_user)))
    else:
        print("(no mm-link on PATH or no --mahimahi-user: the engine only)", file=sys.stderr)
    rows, series, waits = [], {}, []
    for run in range(1, args.runs + 1):
        for name, backend in systems:
            figures, series[name, run], sched = one_run(backend, row, args.runtime, run, args.sched, args.perf)
            rows.append({"system": name, "run": run, **figures})
            if sched is not None:
                waits.append(sched.assign(system=name, run=run).rename_axis("process").reset_index())
            print(f"run {run}: {name}: p95 {figures['p95 delay']:.1f} ms, after 5 s {figures['p95 after 5 s']:.1f}",
                  file=sys.stderr, flush=True)
    runs = pd.DataFrame(rows)
    lateness = host_wake_lateness()
    table = runs.groupby("system", sort=False).mean(numeric_only=True).drop(columns="run")
    pd.set_option("display.width", 200)
    lossy = f", {100 * row[3]:g} % uplink loss" if row[3] else ""
    title = (f"Linux BBR, {row[0]:g} Mbit/s, {row[1]} ms, DropTail {row[2]}{lossy}; {args.runs} runs of "
             f"{args.runtime:g} s")
    print(f"{title} (ACK gaps, BBR's min RTT and delays one-way in ms; from `ss` every 20 ms: cwnd against "
          f"the path's BDP, the share of samples with the window full, and how often BBR entered ProbeRTT)")
    print(table.to_string(float_format=lambda v: f"{v:.2f}"))
    print("\nper run, p95 one-way delay (ms), whole run / after 5 s:")
    per_run = runs.pivot(index="run", columns="system", values=["p95 delay", "p95 after 5 s"])
    print(per_run.to_string(float_format=lambda v: f"{v:.1f}"))
    print("\nthis host: how late a 1 ms poll() wakes (µs past the timeout; the engine's model of Mahimahi's "
          "shells draws it from 50–100, ferry.rs's WAKE_LATE_US):")
    print(lateness.to_string(float_format=lambda v: f"{v:.0f}"))
    if waits:
        print(f"\nper process, mean of {args.runs} runs, from the scheduler's counts over the middle half of each run: "
              "slices (scheduled in) per s, share of a CPU, CPU time per slice and time waited for a CPU before it"
              + (" (µs); from perf, waits for a CPU once woken (ms: percentiles, max, and longer than 0.5 ms per s)"
                 if args.perf else " (µs)") + ":")
        per_process = pd.concat(waits).groupby(["system", "process"], sort=False).mean(numeric_only=True)
        print(per_process.drop(columns="run").to_string(float_format=lambda v: f"{v:.2f}"))
    args.out.mkdir(parents=True, exist_ok=True)
    figure = args.out / f"ack_timing_{args.row.replace('/', '-').rstrip('%')}_{time.strftime('%Y%m%dT%H%M%S')}.png"
    plot(series, figure, title)
    print(f"plot: {figure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
