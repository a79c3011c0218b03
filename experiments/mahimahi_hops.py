"""Where real Mahimahi holds packets: the time each packet spends at every hop through its shells.

`--backend mahimahi` sees a packet only where it enters and leaves the shells (the innermost and
outermost TUN devices), so the ACK path's delay is one number per ACK. To see which shell holds
what, a diagnostic build of calibrate-link taps every device of every shell's namespace
(`experiments/patches/trace-every-shell.diff`, not shipped: it adds a thread that reads every
packet of every hop). With `CALIBRATE_TRACE_TAPS=DIR` each `--backend mahimahi` run writes
DIR/trace-PID.csv and DIR/trace-PID.taps. Each packet is recognised at every hop by the identity
the backend's taps use (`emulators/src/tap.rs`), so each hop's time is one packet's own:
from the moment the kernel sent it into a shell's input device to the moment that shell wrote
it out (the shell's holding time: its queue, its delay, its loop's lateness), and from there to
the next shell's input device (the kernel's forwarding between namespaces).

For each run, and for the runs pooled, it prints per hop, ACKs and data apart, after the first
`--after` seconds (BBR's start-up): mean, p50, p90, p99, p99.9 and max in ms. With `--engine
DATA_DIR` (a `calibrate emulate` data dir of the engine, same row) it also prints the engine's
whole ACK path from its Pantheon acklink logs, the one hop the engine's model can be set against.

Build and run (as root, alone; Mahimahi's mm-* on PATH and an unprivileged user):

    git apply experiments/patches/trace-every-shell.diff
    cargo build --release --manifest-path emulators/Cargo.toml --bin calibrate-link
    cp .venv/bin/calibrate-link /tmp/calibrate-link.shipped          # put it back afterwards
    cp emulators/target/release/calibrate-link .venv/bin/calibrate-link
    git apply -R experiments/patches/trace-every-shell.diff
    mkdir -m 777 /tmp/hops
    CALIBRATE_TRACE_TAPS=/tmp/hops CALIBRATE_TRACE_SECONDS=19 .venv/bin/calibrate emulate \\
        --backend mahimahi --mahimahi-user mahimahi --schemes bbr --runtime 20 --replicates 3 \\
        --emulator "mm-delay 10 mm-loss uplink 0.002 mm-link 30mbps.trace 30mbps.trace \\
                    --uplink-queue=droptail --uplink-queue-args=packets=400" --out /tmp/hops/data
    cp /tmp/calibrate-link.shipped .venv/bin/calibrate-link
    .venv/bin/python experiments/mahimahi_hops.py /tmp/hops [--engine ENGINE_DATA_DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from calibrate.metrics import parse_datalink_log
from calibrate.scripted import RunPaths
from calibrate.targets.datadir import METADATA, read_metadata

TCP = 6
ACK_MAX_BYTES = 120  # an IP packet this short is a pure ACK (headers and SACK blocks, no payload)
DATA_MIN_BYTES = 1000
PERCENTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99, "p99.9": 0.999}


def tap_names(taps_file: Path) -> dict[int, str]:
    """Each tap's device, named by the shell whose namespace holds it ("outer" for the
    receiver's side, outside every shell)."""
    names = {}
    for line in taps_file.read_text().splitlines():
        if line.startswith("drops"):
            if any(int(n) for n in line.split()[1:]):
                print(f"{taps_file.name}: the kernel dropped packets before a tap read them ({line}): "
                      "the hops they missed are left out", file=sys.stderr)
            continue
        index, _pid, _netns, device, command = line.split("\t")
        program = Path(command.split()[0]).name if command else "?"
        names[int(index)] = f"{'outer' if program == 'calibrate-link' else program}:{device}"
    return names


def summary(delays_ms: pd.Series) -> dict[str, float]:
    return {"n": len(delays_ms), "mean": delays_ms.mean(), **{k: delays_ms.quantile(q) for k, q in PERCENTILES.items()},
            "max": delays_ms.max()}


def hops(trace: Path, after_s: float) -> dict[str, pd.DataFrame]:
    """Per hop, ACKs and data apart: one row per consecutive pair of sightings along the path,
    and a last row for the whole path through the shells."""
    names = tap_names(trace.with_suffix(".taps"))
    seen = pd.read_csv(trace)
    seen = seen[seen.proto == TCP]
    seen = seen.assign(t_ms=(seen.wall_us - seen.wall_us.min()) / 1e3,
                       where=seen.tap.map(names) + "/" + seen.seen)
    tables = {}
    for kind, packets in (("ACKs", seen[seen.len <= ACK_MAX_BYTES]), ("data", seen[seen.len >= DATA_MIN_BYTES])):
        first = packets.groupby("id").t_ms.transform("min")
        packets = packets[first >= after_s * 1000].drop_duplicates(["id", "where"])
        at = packets.pivot(index="id", columns="where", values="t_ms")
        # the path's order: where a packet is seen, by its median time after its first sighting
        order = (at.sub(at.min(axis=1), axis=0).median().sort_values())
        order = order[at.count().reindex(order.index) > 0.5 * len(at)].index.tolist()
        rows = []
        for a, b in [*zip(order, order[1:], strict=False), (order[0], order[-1])]:
            held = (at[b] - at[a]).dropna()
            rows.append({"from": a, "to": b, **summary(held[held >= 0])})
        tables[kind] = pd.DataFrame(rows)
    return tables


def engine_ack_path(data_dir: Path, after_s: float) -> pd.DataFrame:
    """The engine's whole ACK path per scheme and run, from the Pantheon acklink logs its
    metadata names."""
    if not (data_dir / METADATA).is_file():
        raise SystemExit(f"--engine {data_dir}: no {METADATA} there: give a `calibrate emulate` data dir")
    meta = read_metadata(data_dir / METADATA)
    rows = []
    for cc in meta.schemes:
        for run in range(meta.start_run_id, meta.start_run_id + (meta.run_times or 1)):
            acks = parse_datalink_log(RunPaths.of(data_dir, cc, run).acklink)
            delays = pd.Series(acks.departure_delay[acks.departure_ts >= after_s * 1000])
            rows.append({"scheme": cc, "run": run, **summary(delays)})
    return pd.DataFrame(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace_dir", type=Path, help="where the diagnostic build wrote trace-PID.csv/.taps")
    parser.add_argument("--after", type=float, default=5.0, metavar="S",
                        help="leave out packets first seen in the first S seconds (default 5: BBR's start-up)")
    parser.add_argument("--engine", type=Path, metavar="DATA_DIR",
                        help="a `calibrate emulate` data dir of the engine on the same row: its whole ACK path")
    args = parser.parse_args()
    traces = sorted(args.trace_dir.glob("trace-*.csv"))
    if not traces:
        parser.error(f"{args.trace_dir}: no trace-*.csv: run `--backend mahimahi` with the diagnostic build "
                     "and CALIBRATE_TRACE_TAPS set (see this script's help)")
    pd.set_option("display.width", 200)
    ms = {"float_format": lambda v: f"{v:.2f}"}
    pooled: dict[str, list[pd.DataFrame]] = {"ACKs": [], "data": []}
    for trace in traces:
        for kind, table in hops(trace, args.after).items():
            print(f"{trace.name}, {kind}, ms held per hop after {args.after:g} s:")
            print(table.to_string(index=False, **ms))
            pooled[kind].append(table)
    for kind, tables in pooled.items():
        mean = pd.concat(tables).groupby(["from", "to"], sort=False).mean(numeric_only=True).reset_index()
        mean["n"] = mean["n"].round().astype(int)
        print(f"\n{len(tables)} runs, {kind}: mean per hop of the runs' figures (ms)")
        print(mean.to_string(index=False, **ms))
    if args.engine:
        table = engine_ack_path(args.engine, args.after)
        print(f"\nthe engine's whole ACK path (ms), {args.engine}:")
        print(table.to_string(index=False, **ms))
        means = ", ".join(f"{k} {table[k].mean():.2f}" for k in PERCENTILES)
        print(f"mean of {len(table)} runs: {means}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
