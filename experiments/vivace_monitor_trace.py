"""Records what PCC Vivace's binary (Pantheon's 2018-2020 vivace) decides at every monitor
interval, for the replay test of the port's law (`vivace_2018.rs`,
`the_law_replays_the_binarys_monitor_trace`).

Two uses of one file:

* inside gdb (the reference wrapper `experiments/pantheon_2018/vivace` runs the sender under
  `gdb -x` this file when `VIVACE_MONITOR_TRACE=DIR` is set): breakpoints on the binary's
  `PCC::onMonitorStart` and `PCC::onMonitorEnds` (it has DWARF) write one JSON line per call to
  `DIR/trace-PID.jsonl`: the arguments and, when the call returns, PCC's decision state;
* from the shell, `python3 experiments/vivace_monitor_trace.py TRACE.jsonl > TABLE.txt` turns
  such a file into the whitespace table the test reads (columns in its header).

A breakpoint costs the sender well under a millisecond per MI (tens per second), which is why
the traces are for the law, not for the benchmark's numbers.
"""

import importlib
import json
import os
import sys
from typing import Any

# PCC's fields after each call, in the table's column order.
FIELDS = (
    "state",
    "base",
    "rate",
    "amp",
    "bamp",
    "pamp",
    "trend",
    "swing",
    "prev",
    "nprobes",
    "guess",
    "start_mi",
    "dcheck",
    "stop",
    "last_u",
    "ref_rate",
    "ref_mi",
    "tgt_rate",
    "tgt_mi",
)
STATES = {"START": 0, "SEARCH": 1, "RECORDING": 2, "MOVING": 3, "HIBERNATE": 4}
HEADER = """\
# PCC Vivace's decisions as StanfordSNR/vivace 2baf862's vivace_sender made them, one line per
# PCC::onMonitorStart (S) or PCC::onMonitorEnds (E) call, recorded with
# experiments/vivace_monitor_trace.py; ROW.
# S current dirs | after        dirs: the order of each probe pair laid out by this call (1: up
#                                first), '-' if none
# E total loss secs current monitor rtt_us latency_info | after
# after: state (0 start, 1 search, 2 recording, 3 moving) base_rate rate amplifier
#   boundary_amplifier probe_amplifier trend_count swing_buffer prev_change number_of_probes
#   guess_time monitor_in_start_phase double_check last_stop_monitor last_utility
#   reference_rate reference_monitor target_rate target_monitor
"""


def _state_of(pcc):
    """PCC's decision state (a `gdb.Value` of class PCC) as a dict."""
    ms = pcc["move_stat"]
    vec = pcc["guess_measurement_bucket"]["_M_impl"]
    first, end = vec["_M_start"], vec["_M_finish"]
    bucket = [
        [int(first[i]["monitor"]), float(first[i]["rate"]), bool(first[i]["isup"])] for i in range(int(end - first))
    ]
    return dict(
        state=str(pcc["state_"]).split("::")[-1],
        base=float(pcc["base_rate_"]),
        rate=float(pcc["rate_"]),
        amp=float(pcc["amplifier"]),
        bamp=float(pcc["boundary_amplifier"]),
        pamp=int(pcc["probe_amplifier"]),
        trend=int(pcc["trend_count_"]),
        swing=float(pcc["swing_buffer"]),
        prev=float(pcc["prev_change_"]),
        nprobes=int(pcc["number_of_probes_"]),
        guess=int(pcc["guess_time_"]),
        start_mi=int(pcc["monitor_in_start_phase_"]),
        dcheck=int(pcc["double_check"]),
        stop=int(pcc["last_stop_monitor"]),
        last_u=float(pcc["last_utility_"]),
        ref_rate=float(ms["reference_rate"]),
        ref_mi=int(ms["reference_monitor"]),
        tgt_rate=float(ms["target_rate"]),
        tgt_mi=int(ms["target_monitor"]),
        bucket=bucket,
    )


def trace_in_gdb(gdb: Any, path: str) -> None:
    """Sets the breakpoints (x86-64 SysV: `this` in rdi, ints in esi.., doubles in xmm0..)."""
    out = open(path, "a", buffering=1)

    def signed(v):
        v &= 0xFFFFFFFF
        return v - 2**32 if v >= 2**31 else v

    class Returned(gdb.FinishBreakpoint):
        def __init__(self, record, pcc):
            super().__init__(gdb.newest_frame(), internal=True)
            self.record, self.pcc = record, pcc

        def stop(self):
            self.record["after"] = _state_of(self.pcc.dereference())
            out.write(json.dumps(self.record) + "\n")
            return False

        def out_of_scope(self):
            out.write(json.dumps(dict(self.record, lost=True)) + "\n")

    class Call(gdb.Breakpoint):
        def stop(self):
            frame = gdb.selected_frame()

            def reg(name):
                return int(frame.read_register(name))

            def xmm(i):
                return float(frame.read_register(f"xmm{i}")["v2_double"][0])

            if self.location.endswith("Start"):
                record = dict(ev="S", current=signed(reg("rsi")))
            else:
                record = dict(
                    ev="E",
                    total=signed(reg("rsi")),
                    loss=signed(reg("rdx")),
                    secs=xmm(0),
                    current=signed(reg("rcx")),
                    monitor=signed(reg("r8")),
                    rtt=xmm(1),
                    lat=xmm(2),
                )
            Returned(record, gdb.parse_and_eval("(PCC*)$rdi"))
            return False

    Call("PCC::onMonitorStart")
    Call("PCC::onMonitorEnds")


def table(lines, row):
    """The test's table from a trace's JSON lines."""
    yield HEADER.replace("ROW", row)
    before: list[list] = []
    for line in lines:
        record = json.loads(line)
        if record.get("lost"):
            raise SystemExit("a call never returned: the trace is incomplete")
        after = record["after"]
        values = [STATES[after["state"]]] + [after[k] for k in FIELDS[1:]]
        bucket = [p[:3] for p in after["bucket"]]
        if record["ev"] == "S":
            if bucket == before:
                new = []
            elif len(bucket) > len(before) and bucket[: len(before)] == before:
                new = bucket[len(before) :]
            else:
                new = bucket
            dirs = "".join("1" if p[2] else "0" for p in new[0::2]) or "-"
            head = ["S", record["current"], dirs]
        else:
            head = ["E"] + [record[k] for k in ("total", "loss", "secs", "current", "monitor", "rtt", "lat")]
        yield " ".join(repr(v) if isinstance(v, float) else str(v) for v in head + values) + "\n"
        before = bucket


if __name__ == "__main__":
    gdb: Any = None
    try:
        gdb = importlib.import_module("gdb")  # present only inside gdb
    except ImportError:
        pass
    if gdb is None:
        if len(sys.argv) != 3:
            raise SystemExit("usage: vivace_monitor_trace.py TRACE.jsonl ROW-LABEL > TABLE.txt")
        with open(sys.argv[1]) as f:
            sys.stdout.writelines(table(f, sys.argv[2]))
    else:
        trace_in_gdb(gdb, os.path.join(os.environ["VIVACE_MONITOR_TRACE"], f"trace-{os.getpid()}.jsonl"))
        gdb.execute("run")
