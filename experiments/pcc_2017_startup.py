"""pcc-2017's start-up, port against reference build, from the traces both write.

PCC Allegro doubles its rate each monitor interval (MI) from 2 Mbit/s and leaves start-up at
the best MI's rate when an MI's utility does not rise. On a 10 Mbit/s path the decision falls
at the 8 Mbit/s MI (MI 2): its utility carries the RTT of the receiver report that ended it,
whose last packet is usually of MI 3 (16 Mbit/s, a queue growing). How many MI-3 packets that
report holds is set by where the reports (one per 20 packets received) fall against the MI
boundaries, so by the MI lengths, which are UDT's smoothed RTT times 1.5–1.7 over the pacing
period: `k = 20 − (n0 + n1 + n2) mod 20`. A large `k` means a high RTT for MI 2, and start-up
ends at 4 Mbit/s (the "low mode").

With `PCC_2017_TRACE=DIR`, the port (`calibrate-scheme pcc-2017`) and the reference wrapper
(`experiments/pantheon_2017/pcc`, running a build that logs the same lines: experiments/README,
"the start-up of pcc-2017, traced") write each run's MI starts and ends to DIR
(`trace-port-*.txt`, `trace-*.txt`); the reference receiver's full ACKs go to `recv-*.txt`.
This prints, per run and per side, the start-up's exit rate, the MI lengths, `k`, UDT's RTT at
each MI's start, and MI 1's and MI 2's RTT and utility; then per side the share of runs in the
low mode and the mean RTT at MI 1's and MI 2's starts. Runs of different rows in one directory
are told apart by their path's RTT (MI 0's, to the nearest 10 ms).

With `--flows N` (Pantheon's multi-flow runs, `-f N`: a directory of one row's runs) each side's
traces are taken N at a time in the order they began, and the flows that join a running one are
shown instead: a flow joining an incumbent near 8 Mbit/s on a 12 Mbit/s path decides at MI 1
(4 Mbit/s, the total then near the link's rate) against MI 0 (2 Mbit/s), scored with the RTT of
the report that ended MI 1, `k1 = 20 − (n0 + n1) mod 20` packets into MI 2 (8 Mbit/s, a queue
growing). Per joining flow: its exit rate, `k1`, MI 0's and MI 1's RTT, and the incumbents'
paced rate in the second before it began; then per side and flow the share that left start-up
at 2 Mbit/s.

    .venv/bin/python experiments/pcc_2017_startup.py DIR [DIR ...]
    .venv/bin/python experiments/pcc_2017_startup.py --flows 3 DIR
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

MSS_BYTES = 1464  # UDT's MSS after Pantheon's pcc_mtu.patch: the pacing period is MSS·8/rate
REPORT_BATCH = 20  # packets per receiver report (the 0x7FFF control message)


def read_trace(path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The S (MI start) and E (MI end) lines of one run's trace; other lines are skipped, and so
    are the rare lines two threads of the reference build wrote into each other (its sender's
    send and receive threads both log to stderr, unsynchronized)."""
    starts, ends = [], []
    for line in path.read_text(errors="replace").splitlines():
        f = line.split()
        try:
            if f and f[0] == "S" and len(f) == 6:
                starts.append({"t_us": int(f[1]), "mi": int(f[2]), "starting": int(f[3]),
                               "period_us": float(f[4]), "rtt_us": float(f[5])})
            elif f and f[0] == "E" and len(f) == 12:
                ends.append({"t_us": int(f[1]), "mi": int(f[2]), "total": int(f[4]), "lost": int(f[5]),
                             "secs": float(f[6]), "rtt_us": float(f[7]), "utility": float(f[8]),
                             "starting": int(f[10])})
        except ValueError:
            continue
    return pd.DataFrame(starts), pd.DataFrame(ends)


def mbps(period_us):
    """The pacing rate, Mbit/s, of a pacing period in µs (a number or a column of them)."""
    return MSS_BYTES * 8 / period_us


def report_overlap(lengths: list[int]) -> int:
    """How many packets past MIs of `lengths` packets the report that ends the last of them
    holds (`k`): reports come one per REPORT_BATCH packets received, from the first."""
    return REPORT_BATCH - sum(lengths) % REPORT_BATCH


def side_of(path: Path) -> str:
    return "port" if path.name.startswith("trace-port-") else "upstream"


def began_us(path: Path) -> int:
    """When the trace began, µs since the epoch: the last field of its name (trace-PID-µs.txt)."""
    return int(path.stem.rsplit("-", 1)[1])


def epoch_trace(path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """`read_trace` with times in µs since the epoch: the reference build's lines have them; the
    port's count from its connection's start, and its file was named at its first line."""
    starts, ends = read_trace(path)
    if side_of(path) == "port" and len(starts):
        offset = began_us(path) - int(starts["t_us"].iloc[0])
        starts["t_us"] += offset
        if len(ends):
            ends["t_us"] += offset
    return starts, ends


def joiners(directory: Path, flows: int) -> list[dict]:
    """The start-ups of the flows that joined a running one, in `directory`'s runs of `flows`
    flows (each side's traces taken `flows` at a time, in the order they began)."""
    found = []
    for pattern in ("trace-[0-9]*.txt", "trace-port-*.txt"):
        paths = sorted(directory.glob(pattern), key=began_us)
        for first in range(0, len(paths) - flows + 1, flows):
            run = [epoch_trace(p) for p in paths[first:first + flows]]
            for j in range(1, flows):
                starts, ends = run[j]
                mis = ends[ends["starting"] == 1].set_index("mi")
                left = starts[starts["starting"] == 0]
                if not len(left) or not {0, 1} <= set(mis.index):
                    continue
                joined = starts["t_us"].iloc[0]
                incumbents = 0.0
                for s, _ in run[:j]:
                    before = s[(s["t_us"] >= joined - 1_000_000) & (s["t_us"] < joined)]
                    incumbents += mbps(before["period_us"]).mean() if len(before) else 0.0
                n0, n1 = int(mis.loc[0, "total"]), int(mis.loc[1, "total"])
                found.append({
                    "side": side_of(paths[first]), "run": first // flows + 1, "flow": j + 1,
                    "incumbents Mbit/s": incumbents, "exit Mbit/s": mbps(left["period_us"].iloc[0]),
                    "n0": n0, "n1": n1, "k1": report_overlap([n0, n1]),
                    "MI0 rtt ms": mis.loc[0, "rtt_us"] / 1000, "MI1 rtt ms": mis.loc[1, "rtt_us"] / 1000,
                })
    return found


def start_up(path: Path) -> dict | None:
    """One run's start-up, or None when the trace is too short to have one."""
    starts, ends = read_trace(path)
    if len(starts) < 4 or len(ends) < 3 or not (starts["starting"] == 0).any():
        return None
    exit_start = starts[starts["starting"] == 0].iloc[0]
    first = ends[ends["starting"] == 1].set_index("mi")
    if not {0, 1, 2} <= set(first.index):
        return None
    lengths = [int(first.loc[m, "total"]) for m in (0, 1, 2)]
    # MI numbers wrap at 100: start-up is the first lap.
    rtt_at = starts.drop_duplicates("mi").set_index("mi")["rtt_us"]
    return {
        "side": side_of(path),
        "path RTT ms": round(first.loc[0, "rtt_us"] / 10_000) * 10,
        "exit Mbit/s": mbps(exit_start["period_us"]),
        "n0": lengths[0], "n1": lengths[1], "n2": lengths[2],
        "k": report_overlap(lengths),
        "RTT@MI1 ms": rtt_at.get(1, float("nan")) / 1000,
        "RTT@MI2 ms": rtt_at.get(2, float("nan")) / 1000,
        "MI1 rtt ms": first.loc[1, "rtt_us"] / 1000, "MI1 u": first.loc[1, "utility"],
        "MI2 rtt ms": first.loc[2, "rtt_us"] / 1000, "MI2 u": first.loc[2, "utility"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", nargs="+", type=Path, metavar="DIR", help="a PCC_2017_TRACE directory")
    parser.add_argument("--flows", type=int, default=1, metavar="N",
                        help="the runs had N flows (-f N): show the start-ups of the flows that joined")
    args = parser.parse_args()
    pd.set_option("display.width", 200)
    if args.flows > 1:
        return show_joiners(args.dirs, args.flows)
    runs = [r for d in args.dirs for p in sorted(d.glob("trace-*.txt")) if (r := start_up(p))]
    if not runs:
        raise SystemExit(f"no start-up in the traces of {', '.join(map(str, args.dirs))} "
                         "(run with PCC_2017_TRACE=DIR and the logging reference build)")
    table = pd.DataFrame(runs)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    table["low mode"] = table["exit Mbit/s"] < 6
    summary = table.groupby(["path RTT ms", "side"]).agg(
        runs=("k", "size"), low_mode=("low mode", "sum"), k_mean=("k", "mean"),
        rtt_mi1_ms=("RTT@MI1 ms", "mean"), rtt_mi2_ms=("RTT@MI2 ms", "mean"),
    )
    print()
    print(summary.to_string(float_format=lambda v: f"{v:.1f}"))
    return 0


def show_joiners(dirs: list[Path], flows: int) -> int:
    table = pd.DataFrame([r for d in dirs for r in joiners(d, flows)])
    if not len(table):
        raise SystemExit(f"no joining flow's start-up in the traces of {', '.join(map(str, dirs))} "
                         f"(runs of {flows} flows, run with PCC_2017_TRACE=DIR)")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    table["at 2"] = table["exit Mbit/s"] < 3
    summary = table.groupby(["flow", "side"]).agg(
        flows=("k1", "size"), left_at_2=("at 2", "sum"), k1_mean=("k1", "mean"),
        incumbents_mbps=("incumbents Mbit/s", "mean"),
    )
    print()
    print(summary.to_string(float_format=lambda v: f"{v:.1f}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
