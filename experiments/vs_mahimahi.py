"""The engine against real Mahimahi, same flows: a differential benchmark.

With Mahimahi's shells on PATH (mm-delay, mm-loss, mm-link, setuid root; build them from
https://github.com/ravinet/mahimahi, see experiments/README.md), every row of the matrix runs
the same Pantheon-style runs (our scheme endpoints, `calibrate.scripted.run_scheme`) through
real Mahimahi (`--backend mahimahi`) and through the engine, alternating, `--replicates` times
each, and prints per setting and scheme: throughput, mean and p95 one-way delay and loss under
both, Mahimahi's own run-to-run spread, the deltas, Mann-Whitney tests of whether the two
systems' throughputs and p95s could come from one distribution ("p same tput", "p same p95"),
and whether the row passes:

    |Δ throughput| ≤ 2 %   and   |Δ p95| ≤ 3 ms,   or either Δ within Mahimahi's own spread
    (the standard deviation of its replicates).

Losses are random in both emulators: Mahimahi's mm-loss seeds itself afresh each run, and the
engine's run N draws from loss seed `--seed`·1000 + N. `--seed` is a fresh one per invocation
unless given (printed, and recorded per run as `loss_seed`), so that runs pooled from several
invocations (`--report A.csv,B.csv`) are independent draws; an engine run that repeats another's
(row, scheme, loss seed) draws the very same losses, and `--report` counts it once.

Without Mahimahi it compares against the reference table measured on a real Mahimahi build
(../shared/data/mahimahi-reference/iperf3-10s.csv, read from there): the same 10 s iperf3 flows
through the engine, the same metrics from its Mahimahi-format uplink log.

Run as root, alone on the machine (both emulators are real-time):

    .venv/bin/python experiments/vs_mahimahi.py --mahimahi-user mahimahi        # the matrix
    .venv/bin/python experiments/vs_mahimahi.py --rows 12/20/100/0 --schemes bbr --timing ideal
    .venv/bin/python experiments/vs_mahimahi.py --reference                     # no Mahimahi here

Writes a CSV per run and a plot (engine vs Mahimahi p95, with spreads) to experiments/out/.
Each engine run records how late the engine's loop wrote its data packets out against the
model's times (`late p99`, `late max` in ms and `late >1ms %`, from the summary's
`release_lateness`), so that a run the host held off the CPU can be told from the path, and the
build of calibrate-link that made it (`build`: the first 12 hex digits of the binary's SHA-256),
so a change to the engine can be run alone and set against Mahimahi's runs of earlier
invocations, without pooling it with another build's:

    .venv/bin/python experiments/vs_mahimahi.py --systems engine --against out/vs_mahimahi_runs_A.csv,...
    .venv/bin/python experiments/vs_mahimahi.py --report A.csv,B.csv --build 1a2b3c
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import mannwhitneyu

from calibrate import binaries, engine
from calibrate.emulator import EmulatorConfig, Queue
from calibrate.engine import Backend, Endpoint, Logs
from calibrate.metrics import parse_datalink_log
from calibrate.schemes import load_registry
from calibrate.scripted import run_scheme
from calibrate.targets.model import Workload

OUT = Path(__file__).resolve().parent / "out"
REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "data" / "mahimahi-reference" / "iperf3-10s.csv"
TPUT_TOLERANCE = 0.02  # relative
P95_TOLERANCE_MS = 3.0
KERNEL = ("cubic", "reno", "bbr")
UDP = ("udp-vegas", "udp-copa", "udp-ledbat", "udp-saturator")


@dataclass(frozen=True)
class Row:
    rate: float  # Mbit/s
    delay: int  # one-way ms
    queue: int  # DropTail packets (uplink)
    loss: float  # uplink
    link: str = "constant"
    schemes: tuple[str, ...] = KERNEL

    @property
    def name(self) -> str:
        kind = "" if self.link == "constant" else " poisson"
        return f"{self.rate:g}/{self.delay}/{self.queue}/{self.loss * 100:g}%{kind}"

    def emulator(self, seed: int) -> EmulatorConfig:
        # link is "constant" or "poisson" (MATRIX's rows); EmulatorConfig checks it again
        return EmulatorConfig(rate_mbps=self.rate, delay_ms=self.delay, queue=Queue.droptail(self.queue),
                              uplink_loss=self.loss, link=self.link, trace_seed=seed)  # type: ignore[arg-type]


#: Rates 3–100 Mbit/s, delays 5–80 ms, queues 30–400 packets, losses 0–1 %, constant and
#: Poisson deliveries; the reference table's six settings first.
MATRIX: tuple[Row, ...] = (
    Row(12, 20, 100, 0.0),
    Row(3, 80, 100, 0.01),
    Row(96, 10, 300, 0.0),
    Row(24, 30, 150, 0.0),
    Row(48, 5, 100, 0.002),
    Row(8, 50, 200, 0.003),
    Row(100, 5, 30, 0.0),
    Row(30, 10, 400, 0.002),
    Row(12, 20, 100, 0.0, "poisson"),
    Row(3, 80, 100, 0.01, "poisson"),
    Row(12, 20, 100, 0.0, schemes=UDP),
    Row(8, 50, 200, 0.003, schemes=UDP),
)


def one_way_delays(datalink: Path) -> np.ndarray:
    return parse_datalink_log(datalink).departure_delay


def measure(row: Row, scheme_name: str, backend: Backend, replicate: int, runtime: float,
            seed: int, scratch: Path) -> dict[str, object]:
    """One Pantheon-style run; its metrics."""
    scheme = load_registry().resolve(scheme_name)
    workload = Workload(1, 0.0, runtime, 1)
    data_dir = Path(tempfile.mkdtemp(dir=scratch))
    try:
        outcome = run_scheme(row.emulator(seed), scheme, replicate, workload, data_dir, backend=backend)
        # Mahimahi's mm-loss ignores the seed (it seeds itself afresh every run)
        loss_seed = outcome.loss_seed if backend.name == "engine" else None
        if not outcome.valid or outcome.stats is None:
            return {"valid": False, "reason": outcome.validity.reason or outcome.failure, "loss_seed": loss_seed}
        delays = one_way_delays(outcome.paths.datalink)
        m = outcome.stats.total
        return {"valid": True, "tput": m.tput_mbps, "p95": m.delay_ms, "mean": float(np.mean(delays)),
                "loss": (m.loss or 0.0) * 100, "loss_seed": loss_seed, **engine.lateness(outcome.paths.engine_summary)}
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


#: What runs the flows: real Mahimahi, or the engine with either timing model.
SYSTEMS = {"mahimahi": None, "engine": "mahimahi", "ideal": "ideal"}


def p_same(group: pd.DataFrame, system: str, metric: str) -> float:
    """Mann-Whitney: whether Mahimahi's and `system`'s runs of one row and scheme could come from
    one distribution of `metric` (nan with fewer than 3 runs a side, or all values equal). A
    random process such as cubic under random loss lands far apart run to run in either emulator."""
    mine = group[group["system"] == "mahimahi"][metric], group[group["system"] == system][metric]
    return (mannwhitneyu(*mine).pvalue if min(len(mine[0]), len(mine[1])) >= 3
            and mine[0].nunique() + mine[1].nunique() > 2 else float("nan"))


def summarize(runs: pd.DataFrame, system: str = "engine") -> pd.DataFrame:
    """Per (row, scheme): Mahimahi's and `system`'s means, Mahimahi's spread, deltas, verdict."""
    valid = runs[runs["valid"].astype(bool)]
    stats = valid.groupby(["row", "scheme", "system"])[["tput", "mean", "p95", "loss"]].agg(["mean", "std", "count"])
    out = []
    for (row, scheme), group in valid.groupby(["row", "scheme"], sort=False):
        s = stats.loc[(row, scheme)]
        if "mahimahi" not in s.index or system not in s.index:
            continue
        mm, en = s.loc["mahimahi"], s.loc[system]
        d_tput = (en[("tput", "mean")] - mm[("tput", "mean")]) / mm[("tput", "mean")]
        d_p95 = en[("p95", "mean")] - mm[("p95", "mean")]
        spread_tput = float(np.nan_to_num(mm[("tput", "std")])) / mm[("tput", "mean")]
        spread_p95 = float(np.nan_to_num(mm[("p95", "std")]))
        tput_ok = abs(d_tput) <= max(TPUT_TOLERANCE, spread_tput)
        p95_ok = abs(d_p95) <= max(P95_TOLERANCE_MS, spread_p95)
        out.append({
            "setting": row, "scheme": scheme, "n": int(min(mm[("tput", "count")], en[("tput", "count")])),
            "mm tput": mm[("tput", "mean")], "eng tput": en[("tput", "mean")], "Δtput %": 100 * d_tput,
            "mm sd tput %": 100 * spread_tput, "p same tput": p_same(group, system, "tput"),
            "mm mean": mm[("mean", "mean")], "eng mean": en[("mean", "mean")],
            "mm p95": mm[("p95", "mean")], "eng p95": en[("p95", "mean")], "Δp95": d_p95,
            "mm sd p95": spread_p95,
            "mm loss %": mm[("loss", "mean")], "eng loss %": en[("loss", "mean")],
            "p same p95": p_same(group, system, "p95"),
            "pass": "yes" if tput_ok and p95_ok else "NO",
        })
    return pd.DataFrame(out)


def run_matrix(args: argparse.Namespace, runs_csv: Path) -> pd.DataFrame:
    """Every run of the selected rows, alternating the systems; the runs so far are in `runs_csv`
    after each row and scheme (written whole, then renamed), so a long matrix that is stopped keeps
    them for `--report`."""
    rows = select_rows(args.rows)
    priority = args.realtime_priority
    systems = [(name, Backend("mahimahi", args.mahimahi_user, realtime_priority=priority) if timing is None
                else Backend("engine", timing=timing, realtime_priority=priority))
               for name, timing in SYSTEMS.items() if name in args.systems]
    records: list[dict[str, object]] = []
    build = engine_build()
    total = sum(len(filter_schemes(r, args.schemes)) for r in rows) * args.replicates * len(systems)
    done = 0
    started = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix="calibrate-vs-mahimahi-"))
    try:
        for row in rows:
            for scheme in filter_schemes(row, args.schemes):
                for replicate in range(1, args.replicates + 1):
                    for system, backend in systems:
                        m = measure(row, scheme, backend, replicate, args.runtime, args.seed, scratch)
                        records.append({"row": row.name, "scheme": scheme, "system": system,
                                        "replicate": replicate, **m,
                                        "build": build if system != "mahimahi" else None})
                        done += 1
                        elapsed = time.monotonic() - started
                        shown = (f"p95 {m['p95']:.1f} ms, {m['tput']:.2f} Mbit/s" if m["valid"]
                                 else f"invalid: {m['reason']}")
                        if "late p99" in m:
                            shown += f", engine late p99 {m['late p99']:.2f} ms, max {m['late max']:.1f} ms"
                        eta_min = elapsed / done * (total - done) / 60
                        print(f"[{done}/{total} {elapsed / 60:.0f} min, ETA {eta_min:.0f} min] "
                              f"{row.name} {scheme} {system} #{replicate}: {shown}", file=sys.stderr, flush=True)
                partial = runs_csv.with_name(runs_csv.name + ".part")
                runs_frame(records).to_csv(partial, index=False)
                partial.replace(runs_csv)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return runs_frame(records)


def engine_build() -> str:
    """Which calibrate-link made a run: the first 12 hex digits of the binary's SHA-256."""
    return hashlib.sha256(binaries.find(binaries.LINK).read_bytes()).hexdigest()[:12]


def runs_frame(records: list[dict[str, object]]) -> pd.DataFrame:
    return pd.DataFrame(records).astype({"loss_seed": "Int64"})


def select_rows(spec: str | None) -> list[Row]:
    if not spec:
        return list(MATRIX)
    wanted = [s.strip() for s in spec.split(",") if s.strip()]
    rows = [r for r in MATRIX if any(r.name.startswith(w) for w in wanted)]
    if not rows:
        raise SystemExit(f"--rows {spec!r} matches none of: {', '.join(r.name for r in MATRIX)}")
    return rows


def filter_schemes(row: Row, spec: str | None) -> list[str]:
    if not spec:
        return list(row.schemes)
    wanted = {s.strip() for s in spec.split(",")}
    return [s for s in row.schemes if s in wanted]


# ----------------------------------------------------------------------------------------------
# Without Mahimahi: the reference table


def reference_run(rate: float, delay: int, queue: int, loss: float, cc: str, seed: int, replicate: int,
                  backend: Backend) -> dict[str, float]:
    """The reference's iperf3 flow through the engine, its metrics from the uplink log as the
    table computed Mahimahi's: IP bytes of departures over first to last departure; p95 (linear)
    and mean of link delay + D."""
    emulator = EmulatorConfig(rate_mbps=rate, delay_ms=delay, queue=Queue.droptail(queue),
                              uplink_loss=loss, trace_seed=seed).for_run(replicate)
    with tempfile.TemporaryDirectory(prefix="calibrate-vs-reference-") as work:
        log = Path(work) / "uplink.log"
        endpoints = [Endpoint("receiver", "exec iperf3 -s -p 5201"),
                     Endpoint("sender", f"iperf3 -c $EMU_PEER -p 5201 -C {cc} -t 10 > /dev/null", start_s=1.0)]
        result = engine.run(emulator, endpoints, workdir=Path(work), stop_after=13, logs=Logs(uplink=log),
                            backend=backend, check=False)
        lines = [line.split() for line in log.read_text().splitlines() if not line.startswith("#")]
    # Mahimahi's shell ended with the iperf3 client; the engine stops the server later, and the
    # client's kernel answers its closing with a few segments (seconds after the flow) that
    # would stretch the span the throughput is taken over.
    sender_end_ms = next(e["ended_at_s"] for e in result.summary["endpoints"] if e["side"] == "sender") * 1000
    dep = np.array([(int(w[0]), int(w[2]), int(w[3])) for w in lines
                    if len(w) == 4 and w[1] == "-" and int(w[0]) <= sender_end_ms])
    t, size, d = dep[:, 0], dep[:, 1], dep[:, 2]
    tput = (size - 4).sum() * 8 / ((t[-1] - t[0]) / 1000) / 1e6
    one_way = d + delay
    return {"tput": tput, "p95": float(np.percentile(one_way, 95)), "mean": float(one_way.mean())}


def run_reference(args: argparse.Namespace) -> pd.DataFrame:
    if shutil.which("iperf3") is None:
        raise SystemExit("the reference rows are iperf3 flows: install iperf3 (apt-get install iperf3)")
    table = pd.read_csv(REFERENCE)
    setting = table.apply(lambda r: f"{r.rate:g}/{r.delay}/{r.queue}/{r.loss * 100:g}%", axis=1)
    if args.rows:
        table = table[setting.map(lambda s: any(s.startswith(w) for w in args.rows.split(",")))]
    if args.schemes:
        table = table[table.cc.isin(args.schemes.split(","))]
    if table.empty:
        raise SystemExit(f"--rows/--schemes select none of the reference's rows ({', '.join(sorted(set(setting)))})")
    backend = Backend("engine", timing=args.timing)
    out = []
    for i, r in table.iterrows():
        runs = [reference_run(r.rate, int(r.delay), int(r.queue), float(r.loss), r.cc, args.seed, k + 1,
                              backend) for k in range(args.replicates)]
        p95 = np.array([x["p95"] for x in runs])
        mean = np.array([x["mean"] for x in runs])
        tput = np.array([x["tput"] for x in runs])
        out.append({"setting": f"{r.rate:g}/{r.delay}/{r.queue}/{r.loss * 100:g}%", "cc": r.cc,
                    "mm tput": r.mm_tput, "eng tput": tput.mean(),
                    "Δtput %": 100 * (tput.mean() - r.mm_tput) / r.mm_tput,
                    "mm mean": r.mm_mean, "eng mean": mean.mean(), "mm p95": r.mm_p95, "eng p95": p95.mean(),
                    "eng p95 min-max": f"{p95.min():.0f}-{p95.max():.0f}", "Δp95": p95.mean() - r.mm_p95})
        print(f"[{i + 1}/{len(table)}] {out[-1]['setting']} {r.cc}: engine p95 {p95.mean():.1f} vs "
              f"Mahimahi {r.mm_p95:.1f} ms", file=sys.stderr, flush=True)
    return pd.DataFrame(out)


def plot(summary: pd.DataFrame, path: Path, title: str) -> None:
    """Per row: the engine's throughput against Mahimahi's (Δ %, with Mahimahi's own run-to-run
    sd and the ±2 % tolerance), and both p95s (Mahimahi's ± its sd)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{s} {c}" for s, c in zip(summary["setting"], summary["scheme"], strict=True)]
    y = np.arange(len(labels))
    fig, (tput, p95) = plt.subplots(1, 2, figsize=(11, 0.3 * len(labels) + 2.0), sharey=True,
                                    gridspec_kw={"width_ratios": [1, 1.4]})
    tput.axvspan(-100 * TPUT_TOLERANCE, 100 * TPUT_TOLERANCE, color="0.9", label="±2 % tolerance")
    tput.errorbar(np.zeros(len(y)), y, xerr=summary["mm sd tput %"], fmt="o", color="C0",
                  label="real Mahimahi (± run-to-run sd)")
    tput.plot(summary["Δtput %"], y, "x", color="C3", label="calibrate-link")
    tput.set_xlabel("throughput: engine − Mahimahi (%)")
    tput.set_yticks(y, labels, fontsize=7)
    tput.invert_yaxis()
    low = np.minimum(summary["mm sd p95"], summary["mm p95"] * 0.9)  # a log axis cannot go below 0
    p95.errorbar(summary["mm p95"], y, xerr=(low, summary["mm sd p95"]), fmt="o", color="C0")
    p95.plot(summary["eng p95"], y, "x", color="C3")
    p95.set_xscale("log")
    p95.set_xlabel("p95 one-way delay (ms)")
    fig.suptitle(title, fontsize=9)
    fig.legend(loc="lower center", ncol=3, fontsize=8)
    fig.tight_layout(rect=(0, 0.4 / (0.3 * len(labels) + 2.0), 1, 1))
    fig.savefig(path, dpi=130)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mahimahi-user", metavar="NAME", help="unprivileged account Mahimahi's shells run as")
    parser.add_argument("--reference", action="store_true",
                        help="compare with the reference table instead of running Mahimahi "
                             "(the default without mm-link)")
    parser.add_argument("--rows", metavar="A,B", help="settings to run, by name prefix, e.g. 12/20/100/0%%,3/80")
    parser.add_argument("--schemes", metavar="A,B", help="schemes to run (default: each row's)")
    parser.add_argument("--runtime", type=float, default=20.0, help="seconds per run (default: %(default)s)")
    parser.add_argument("--replicates", type=int, default=3, help="runs per system (default: %(default)s)")
    parser.add_argument("--systems", default="mahimahi,engine",
                        help="what runs the flows, of mahimahi (real), engine (Mahimahi's timing, the "
                             "default) and ideal (the engine with one exact millisecond clock, as before "
                             "the fix) (default: %(default)s)")
    parser.add_argument("--timing", choices=engine.TIMINGS, default="mahimahi",
                        help="--reference only: the engine's timing model")
    parser.add_argument("--realtime-priority", type=int, metavar="N",
                        help="SCHED_FIFO priority of the engine and of Mahimahi's shells (default: calibrate-link's, "
                             "10); 0 runs both under normal scheduling, as Mahimahi is run by hand")
    parser.add_argument("--seed", type=int,
                        help="the engine's run N draws its losses from seed·1000 + N (and Poisson traces "
                             "come from seed) (default: a fresh one per invocation, printed)")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--report", metavar="RUNS_CSV",
                        help="print the tables of an earlier run's vs_mahimahi_runs_*.csv (several: comma-separated)")
    parser.add_argument("--against", metavar="RUNS_CSV",
                        help="with --systems lacking mahimahi: the runs files (comma-separated) whose Mahimahi "
                             "runs the engine's are set against")
    parser.add_argument("--build", metavar="PREFIX",
                        help="with --report: keep only the engine runs of the calibrate-link build whose SHA-256 "
                             "starts with PREFIX (the runs' `build` column; runs from before builds were recorded "
                             "have none)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 30)
    if args.report:
        runs = independent_runs(of_build(read_runs(args.report, "--report", parser), args.build, parser))
        args.systems = ["mahimahi", *[s for s in SYSTEMS if s != "mahimahi" and s in set(runs["system"])]]
        report(runs, args, stamp)
        return 0
    if args.seed is None:
        args.seed = int(time.time()) % 1_000_000
    print(f"seed {args.seed} (the engine's losses; again with --seed {args.seed})", file=sys.stderr)
    if args.reference or shutil.which("mm-link") is None:
        if not args.reference:
            print("mm-link is not on PATH: comparing with the reference table instead", file=sys.stderr)
        result = run_reference(args)
        result.to_csv(args.out / f"vs_mahimahi_reference_{args.timing}_{stamp}.csv", index=False)
        print(result.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
        return 0
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = set(args.systems) - set(SYSTEMS)
    engines = [s for s in args.systems if s != "mahimahi"]
    if unknown or not engines:
        parser.error(f"--systems: choose one or more of engine, ideal, with or without mahimahi (got {args.systems})")
    if "mahimahi" in args.systems and not args.mahimahi_user:
        parser.error("--mahimahi-user NAME is needed to run Mahimahi's shells (they refuse root)")
    earlier = None
    if "mahimahi" not in args.systems:
        if not args.against:
            parser.error("--systems without mahimahi: name earlier runs files with Mahimahi's runs (--against "
                         "A.csv,B.csv), or add mahimahi")
        earlier = read_runs(args.against, "--against", parser)
        earlier = earlier[earlier["system"] == "mahimahi"]
        if earlier.empty:
            parser.error(f"--against {args.against}: no Mahimahi runs in these files")
    runs_csv = args.out / f"vs_mahimahi_runs_{stamp}.csv"
    print(f"runs: {runs_csv} (after each row and scheme)", file=sys.stderr, flush=True)
    runs = run_matrix(args, runs_csv)
    if earlier is not None:
        ran = earlier.set_index(["row", "scheme"]).index.isin(runs.set_index(["row", "scheme"]).index)
        runs = pd.concat([earlier[ran], runs], ignore_index=True)
        args.systems = ["mahimahi", *engines]
    report(independent_runs(runs), args, stamp)
    return 0


def read_runs(spec: str, option: str, parser: argparse.ArgumentParser) -> pd.DataFrame:
    """The runs of the comma-separated runs files `spec`, each named once; files from before runs
    recorded their build have it empty."""
    files = [Path(p).resolve() for p in spec.split(",") if p]
    named_twice = sorted({str(f) for f in files if files.count(f) > 1})
    if named_twice:
        parser.error(f"{option} names {', '.join(named_twice)} more than once: its runs would count twice")
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        parser.error(f"{option}: no such runs file: {', '.join(missing)}")
    runs = pd.concat([pd.read_csv(f) for f in files], ignore_index=True)
    return runs if "build" in runs else runs.assign(build=None)


def of_build(runs: pd.DataFrame, prefix: str | None, parser: argparse.ArgumentParser) -> pd.DataFrame:
    """Mahimahi's runs, and the engine runs of the build `prefix` names (all, if none); says which
    builds the engine runs pooled come from when they are several."""
    engine_runs = runs["system"] != "mahimahi"
    builds = runs.loc[engine_runs, "build"].fillna("not recorded")
    if prefix is not None:
        keep = builds.str.startswith(prefix)
        if not keep.any():
            parser.error(f"--build {prefix}: no engine run of such a build (builds: {', '.join(sorted(set(builds)))})")
        return runs[~engine_runs | keep.reindex(runs.index, fill_value=False)]
    counts = builds.value_counts()
    if len(counts) > 1:
        print("engine runs of several calibrate-link builds pooled (--build PREFIX keeps one): "
              + ", ".join(f"{b}: {n}" for b, n in counts.items()), file=sys.stderr)
    return runs


def independent_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Runs pooled from several invocations, each engine draw of losses once: a run that repeats
    another's (row, scheme, system, loss seed) with the same build saw the very same losses. Files
    written before runs recorded their seed came from the old default, --seed 0, whose run N drew
    seed N."""
    runs = runs.copy()
    if "loss_seed" not in runs:
        runs["loss_seed"] = np.nan
    engine_runs = runs["system"] != "mahimahi"
    runs.loc[engine_runs & runs["loss_seed"].isna(), "loss_seed"] = runs["replicate"]
    repeated = engine_runs & runs.duplicated(["row", "scheme", "system", "loss_seed", "build"])
    if repeated.any():
        print(f"{int(repeated.sum())} engine runs repeat another's loss seed (the same losses): "
              "each counted once", file=sys.stderr)
    return runs[~repeated]


def report(runs: pd.DataFrame, args: argparse.Namespace, stamp: str) -> None:
    for system in [s for s in args.systems if s != "mahimahi"]:
        summary = summarize(runs, system)
        what = {"engine": "the engine (Mahimahi's timing)", "ideal": "the engine with ideal timing (before)"}[system]
        counts = runs[runs["system"].isin(["mahimahi", system])].groupby(["row", "scheme", "system"]).size()
        many = f"{counts.min()}" if counts.nunique() == 1 else f"{counts.min()}–{counts.max()} (n)"
        print(f"\n{what} vs real Mahimahi; {many} runs of {args.runtime:g} s per system, row and scheme")
        print(summary.to_string(index=False, float_format=lambda v: f"{v:.1f}"))
        passed = int((summary["pass"] == "yes").sum()) if len(summary) else 0
        print(f"rows passing: {passed} of {len(summary)}")
        if len(summary):
            summary.to_csv(args.out / f"vs_mahimahi_{system}_{stamp}.csv", index=False)
            figure = args.out / f"vs_mahimahi_{system}_{stamp}.png"
            plot(summary, figure, f"{what} vs real Mahimahi")
            print(f"plot: {figure}")


if __name__ == "__main__":
    sys.exit(main())
