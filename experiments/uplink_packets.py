"""What entered the sender's side of the link in each phase of a run: data packets and small
control packets a second, how many more arrived than left, and the data's queueing delay.

Read from the raw mm-link uplink logs that `vs_pantheon_schemes.py --keep-logs DIR` keeps
(`DIR/<row>/<scheme>-<side>-<n>/*_mm_datalink_run<n>.log`). A DropTail queue counted in packets
gives a small packet a whole slot, so the share of small packets sets how much delay a full queue
holds for the data: UDT's receiver sends its full ACKs, each answered by an ACK2 on the data path
(a 48-byte IP packet, 52 bytes in the link log), every 10 ms, but not while a loss holds its ACK
number (experiments/README, "UDT's receiver holds its ACKs while a loss is outstanding"). Phases
are the times between `--edges` (seconds of the engine's clock; the senders of Pantheon's
`-f 3 --interval 10` start at about 3, 13 and 23 s), or with `--from-first-data` seconds from each
run's first data packet, which lines up runs whose senders started at different times (pcc-2017's
start-up on 2/5/20: experiments/README, "pcc-2017 declares a loss where UDT's receiver NAKs it").

    .venv/bin/python experiments/uplink_packets.py DIR [DIR ...] [--edges 3,13,23,33]
    .venv/bin/python experiments/uplink_packets.py DIR --from-first-data --edges 0,0.1,0.2,...
"""

from __future__ import annotations

import argparse
import sys
from itertools import pairwise
from pathlib import Path

import numpy as np
import pandas as pd

from calibrate.metrics import parse_datalink_log

# Smaller than any data packet of the schemes measured here (pcc's short tail packet is 648
# bytes in the link log), larger than their control packets (UDT's ACK2, a 48-byte IP packet: 52
# in the link log, which counts 4 bytes more than the IP packet).
SMALL_BYTES = 600


def phases(path: Path, edges: list[float], from_first_data: bool = False) -> list[dict]:
    """One row per phase of the run whose uplink log is `path`; with `from_first_data` the
    edges count from the first data packet's arrival."""
    log = parse_datalink_log(path)
    arrived_s, left_s = log.arrival_ts / 1000, log.departure_ts / 1000
    data_in, data_out = log.arrival_bytes >= SMALL_BYTES, log.departure_bytes >= SMALL_BYTES
    if from_first_data:
        if not data_in.any():
            return []
        first = arrived_s[data_in][0]
        arrived_s, left_s = arrived_s - first, left_s - first
    rows = []
    for start, end in pairwise(edges):
        arrived = (arrived_s >= start) & (arrived_s < end)
        left = (left_s >= start) & (left_s < end)
        queue_ms = log.departure_delay[left & data_out]
        seconds = end - start
        rows.append({
            "phase s": f"{start:g}-{end:g}",
            "small/s": np.sum(arrived & ~data_in) / seconds,
            "data/s": np.sum(arrived & data_in) / seconds,
            "arrived - left": int(arrived.sum() - left.sum()),
            "data queue p95 ms": float(np.percentile(queue_ms, 95)) if queue_ms.size else float("nan"),
            "data queue mean ms": float(np.mean(queue_ms)) if queue_ms.size else float("nan"),
        })
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", nargs="+", type=Path, help="directories of --keep-logs")
    parser.add_argument("--edges", default="3,13,23,33",
                        help="phase boundaries, seconds of the engine's clock (default 3,13,23,33)")
    parser.add_argument("--from-first-data", action="store_true",
                        help="count --edges from each run's first data packet, not the engine's clock")
    args = parser.parse_args()
    try:
        edges = [float(e) for e in args.edges.split(",")]
    except ValueError:
        parser.error(f"--edges {args.edges!r}: give increasing seconds, e.g. 3,13,23,33")
    if len(edges) < 2 or any(b <= a for a, b in pairwise(edges)) or edges[0] < 0 or edges[-1] > 600:
        parser.error(f"--edges {args.edges!r}: give at least two increasing seconds within 0-600")
    rows = []
    for directory in args.dirs:
        logs = sorted(directory.glob("**/*_mm_datalink_run*.log"))
        if not logs:
            print(f"{directory}: no *_mm_datalink_run*.log (keep a run's logs with --keep-logs DIR)",
                  file=sys.stderr)
            return 2
        for path in logs:
            run = path.parent.name.rsplit("-", 2)  # <scheme>-<side>-<n>
            if len(run) != 3 or not run[2].isdigit():
                print(f"{path}: not in a <scheme>-<side>-<n> directory of --keep-logs; skipped", file=sys.stderr)
                continue
            scheme, side, number = run
            for row in phases(path, edges, args.from_first_data):
                rows.append({"dir": directory.name, "row": path.parent.parent.name, "scheme": scheme,
                             "side": side, "run": int(number), **row})
    if not rows:
        print("no run's uplink log found", file=sys.stderr)
        return 2
    table = pd.DataFrame(rows)
    # Phases in time order, not as strings.
    table["phase s"] = pd.Categorical(table["phase s"], categories=list(dict.fromkeys(table["phase s"])),
                                      ordered=True)
    with pd.option_context("display.width", 200, "display.max_rows", None):
        print(table.round(1).to_string(index=False))
        print()
        print("Mean per side and phase")
        columns = ["small/s", "data/s", "arrived - left", "data queue p95 ms", "data queue mean ms"]
        print(table.groupby(["row", "side", "phase s"], observed=True)[columns].mean().round(1).to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
