"""Traces of Pantheon's 2018-2020 reference programs run under gdb, for the replay tests of the
ports' laws: what each binary's controller was told and decided, call by call.

* `vivace`: PCC Vivace's `vivace_sender` (StanfordSNR/vivace 2baf862, prebuilt, with DWARF).
  Breakpoints on `PCC::onMonitorStart` and `PCC::onMonitorEnds` write one JSON line per call:
  the arguments and, when the call returns, PCC's decision state. Replayed by `vivace_2018.rs`,
  `the_law_replays_the_binarys_monitor_trace`. A breakpoint comes with each monitor interval
  (tens per second).
* `pcc_experimental`: PCC-Uspace cd43e34's `pccclient` (the reference build keeps `-g`).
  Breakpoints on `PccSender::OnPacketSent` and `PccSender::OnCongestionEvent` write each call's
  arguments and the sender's state at entry (the state the call before left), read as raw
  memory at the offsets the DWARF gives, since a breakpoint comes with every packet and ACK.
  Replayed by `pcc_experimental_2018.rs`, `the_law_replays_the_binarys_trace`.

Two uses of one file:

* inside gdb: the reference wrappers `experiments/pantheon_2018/vivace` and `pcc_experimental`
  run the sender under `gdb -x` this file when `VIVACE_MONITOR_TRACE=DIR`, respectively
  `PCC_EXPERIMENTAL_TRACE=DIR`, is set; each run's trace goes to `DIR/trace-PID-µs.jsonl` or
  `.txt` (µs since the epoch: the pid alone repeats);
* from the shell, `python3 experiments/reference_traces.py vivace|pcc_experimental TRACE ROW >
  TABLE` writes the table the test reads (format in its header).

The breakpoints slow the sender, which is why the traces are for the laws, not for the
benchmark's numbers.

The port writes the same trace of its own law: `calibrate-scheme pcc_experimental-2018` puts
its calls in `DIR/trace-port-PID-µs.txt`, in the raw format of the binary's (`P`/`C` lines with
the full state), when `PCC_EXPERIMENTAL_TRACE=DIR` is set. The benchmark passes the variable to
both sides, so one `vs_pantheon_schemes.py` run gives the two traces of one row side by side,
and this script's table writer reads either.
"""

import importlib
import json
import os
import struct
import sys
import time
from typing import Any

# vivace

# PCC's fields after each call, in the table's column order.
VIVACE_FIELDS = (
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
VIVACE_STATES = {"START": 0, "SEARCH": 1, "RECORDING": 2, "MOVING": 3, "HIBERNATE": 4}
VIVACE_HEADER = """\
# PCC Vivace's decisions as StanfordSNR/vivace 2baf862's vivace_sender made them, one line per
# PCC::onMonitorStart (S) or PCC::onMonitorEnds (E) call, recorded with
# experiments/reference_traces.py vivace; ROW.
# S current dirs | after        dirs: the order of each probe pair laid out by this call (1: up
#                                first), '-' if none
# E total loss secs current monitor rtt_us latency_info | after
# after: state (0 start, 1 search, 2 recording, 3 moving) base_rate rate amplifier
#   boundary_amplifier probe_amplifier trend_count swing_buffer prev_change number_of_probes
#   guess_time monitor_in_start_phase double_check last_stop_monitor last_utility
#   reference_rate reference_monitor target_rate target_monitor
"""


def _vivace_state(pcc):
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


def vivace_trace_in_gdb(gdb: Any, path: str) -> None:
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
            self.record["after"] = _vivace_state(self.pcc.dereference())
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


def vivace_table(lines, row):
    """The test's table from a trace's JSON lines."""
    yield VIVACE_HEADER.replace("ROW", row)
    before: list[list] = []
    for line in lines:
        record = json.loads(line)
        if record.get("lost"):
            raise SystemExit("a call never returned: the trace is incomplete")
        after = record["after"]
        values = [VIVACE_STATES[after["state"]]] + [after[k] for k in VIVACE_FIELDS[1:]]
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


# pcc_experimental

# PccSender's fields, the struct format and offset of each (x86-64 build of cd43e34).
PCC_EXPERIMENTAL_FIELDS = (
    ("mode", "i", 0x0),
    ("sending_rate", "d", 0x8),
    ("latest_utility.sending_rate", "d", 0x10),
    ("latest_utility.utility", "f", 0x18),
    ("monitor_duration", "q", 0x20),
    ("direction", "i", 0x28),
    ("rounds", "Q", 0x30),
    ("num_useful", "Q", 0x38 + 0x50),  # interval_queue_.num_useful_intervals_
    ("avg_gradient", "f", 0xA4),
    ("avg_rtt", "q", 0xF8),
    ("swing_buffer", "Q", 0x100),
    ("rate_change_amplifier", "f", 0x108),
    ("rate_change_proportion_allowance", "Q", 0x110),
    ("previous_change", "d", 0x118),
)
PCC_SENDER_SIZE = 0x120
CONGESTION_EVENT_SIZE = 24  # sizeof(CongestionEvent): int32 packet_number, bytes_acked, bytes_lost; uint64 time
PCC_EXPERIMENTAL_HEADER = """\
# pcc_experimental's PccSender as PCC-Uspace cd43e34's pccclient (Pantheon 2018-2020) ran it: one
# line per OnPacketSent (P) or OnCongestionEvent (C) call, recorded with
# experiments/reference_traces.py pcc_experimental; ROW.
# P time_us packet bytes | state
# C time_us rtt_us acked lost | state      acked, lost: packet:bytes_acked:bytes_lost,... or '-'
# time_us from the first call. state: the sender's fields at the call's entry that differ from
# the line before, as INDEX=VALUE, indexes into: PCC_EXPERIMENTAL_FIELDS
"""


def pcc_experimental_trace_in_gdb(gdb: Any, path: str) -> None:
    """Sets the breakpoints (x86-64 SysV: `this` in rdi, then rsi, rdx, rcx, r8, r9, stack)."""
    out = open(path, "a", buffering=1 << 16)
    inferior = gdb.selected_inferior()

    def state(this):
        raw = bytes(inferior.read_memory(this, PCC_SENDER_SIZE))
        return " ".join(repr(struct.unpack_from("<" + fmt, raw, off)[0]) for _, fmt, off in PCC_EXPERIMENTAL_FIELDS)

    def events(vector):
        first, end = struct.unpack("<QQ", bytes(inferior.read_memory(vector, 16)))
        if end == first:
            return "-"
        raw = bytes(inferior.read_memory(first, end - first))
        return ",".join(
            "{}:{}:{}".format(*struct.unpack_from("<iii", raw, CONGESTION_EVENT_SIZE * i))
            for i in range((end - first) // CONGESTION_EVENT_SIZE)
        )

    class Call(gdb.Breakpoint):
        def stop(self):
            frame = gdb.selected_frame()

            def reg(name):
                return int(frame.read_register(name))

            if self.location.endswith("OnPacketSent"):
                call = f"P {reg('rsi')} {reg('rcx') & 0xFFFFFFFF} {reg('r8')}"
            else:
                (lost,) = struct.unpack("<Q", bytes(inferior.read_memory(reg("rsp") + 8, 8)))
                call = f"C {reg('rcx')} {reg('r8')} {events(reg('r9'))} {events(lost)}"
            out.write(f"{call} | {state(reg('rdi'))}\n")
            return False

    Call("PccSender::OnPacketSent")
    Call("PccSender::OnCongestionEvent")


def pcc_experimental_table(lines, row):
    """The test's table from a trace's lines."""
    names = " ".join(f"{i}={name}" for i, (name, _, _) in enumerate(PCC_EXPERIMENTAL_FIELDS))
    yield PCC_EXPERIMENTAL_HEADER.replace("ROW", row).replace("PCC_EXPERIMENTAL_FIELDS", names)
    t0 = None
    before: list[str] = []
    for line in lines:
        call, state = line.rstrip("\n").split(" | ")
        parts = call.split()
        t0 = int(parts[1]) if t0 is None else t0
        parts[1] = str(int(parts[1]) - t0)
        values = state.split()
        changed = [f"{i}={v}" for i, v in enumerate(values) if not before or before[i] != v]
        yield " ".join(parts) + " | " + " ".join(changed) + "\n"
        before = values


# Per program: the wrapper's variable naming the trace directory, the tracer, the table
# writer and the trace file's extension.
PROGRAMS = {
    "vivace": ("VIVACE_MONITOR_TRACE", vivace_trace_in_gdb, vivace_table, "jsonl"),
    "pcc_experimental": ("PCC_EXPERIMENTAL_TRACE", pcc_experimental_trace_in_gdb, pcc_experimental_table, "txt"),
}

if __name__ == "__main__":
    gdb: Any = None
    try:
        gdb = importlib.import_module("gdb")  # present only inside gdb
    except ImportError:
        pass
    if gdb is None:
        if len(sys.argv) != 4 or sys.argv[1] not in PROGRAMS:
            raise SystemExit(f"usage: reference_traces.py {'|'.join(PROGRAMS)} TRACE ROW-LABEL > TABLE.txt")
        with open(sys.argv[2]) as f:
            sys.stdout.writelines(PROGRAMS[sys.argv[1]][2](f, sys.argv[3]))
    else:
        variable, trace_in_gdb, _, extension = next(p for p in PROGRAMS.values() if os.environ.get(p[0]))
        # The pid alone repeats from run to run (each endpoint has a PID namespace of its own).
        name = f"trace-{os.getpid()}-{time.time_ns() // 1000}.{extension}"
        trace_in_gdb(gdb, os.path.join(os.environ[variable], name))
        gdb.execute("run")
