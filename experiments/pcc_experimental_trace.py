"""Records every call of Pantheon's 2018-2020 pcc_experimental (PCC-Uspace cd43e34's `pccclient`,
the reference build) into its `PccSender`, for the replay test of the port's law
(`pcc_experimental_2018.rs`, `the_law_replays_the_binarys_trace`).

Two uses of one file:

* inside gdb (the reference wrapper `experiments/pantheon_2018/pcc_experimental` runs the sender
  under `gdb -x` this file when `PCC_EXPERIMENTAL_TRACE=DIR` is set): breakpoints on
  `PccSender::OnPacketSent` and `PccSender::OnCongestionEvent` write each call's arguments and
  the sender's state at entry (the state the call before left) to `DIR/trace-PID.txt`. The
  state is read as raw memory at the offsets the build's DWARF gives, since a breakpoint comes
  with every packet and every ACK;
* from the shell, `python3 experiments/pcc_experimental_trace.py TRACE.txt ROW > TABLE.txt`
  writes the test's table: times from the first call, and after each call only the state
  fields that changed.
"""

import importlib
import os
import struct
import sys
from typing import Any

# PccSender's fields, the struct format and offset of each (x86-64 build of cd43e34).
FIELDS = (
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
SIZE = 0x120
EVENT = 24  # sizeof(CongestionEvent): int32 packet_number, bytes_acked, bytes_lost; uint64 time
HEADER = """\
# pcc_experimental's PccSender as PCC-Uspace cd43e34's pccclient (Pantheon 2018-2020) ran it: one
# line per OnPacketSent (P) or OnCongestionEvent (C) call, recorded with
# experiments/pcc_experimental_trace.py; ROW.
# P time_us packet bytes | state
# C time_us rtt_us acked lost | state      acked, lost: packet:bytes_acked:bytes_lost,... or '-'
# time_us from the first call. state: the sender's fields at the call's entry that differ from
# the line before, as INDEX=VALUE, indexes into: FIELDS
"""


def trace_in_gdb(gdb: Any, path: str) -> None:
    """Sets the breakpoints (x86-64 SysV: `this` in rdi, then rsi, rdx, rcx, r8, r9, stack)."""
    out = open(path, "a", buffering=1 << 16)
    inferior = gdb.selected_inferior()

    def state(this):
        raw = bytes(inferior.read_memory(this, SIZE))
        return " ".join(repr(struct.unpack_from("<" + fmt, raw, off)[0]) for _, fmt, off in FIELDS)

    def events(vector):
        first, end = struct.unpack("<QQ", bytes(inferior.read_memory(vector, 16)))
        if end == first:
            return "-"
        raw = bytes(inferior.read_memory(first, end - first))
        return ",".join(
            "{}:{}:{}".format(*struct.unpack_from("<iii", raw, EVENT * i)) for i in range((end - first) // EVENT)
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


def table(lines, row):
    """The test's table from a trace's lines."""
    names = " ".join(f"{i}={name}" for i, (name, _, _) in enumerate(FIELDS))
    yield HEADER.replace("ROW", row).replace("FIELDS", names)
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


if __name__ == "__main__":
    gdb: Any = None
    try:
        gdb = importlib.import_module("gdb")  # present only inside gdb
    except ImportError:
        pass
    if gdb is None:
        if len(sys.argv) != 3:
            raise SystemExit("usage: pcc_experimental_trace.py TRACE.txt ROW-LABEL > TABLE.txt")
        with open(sys.argv[1]) as f:
            sys.stdout.writelines(table(f, sys.argv[2]))
    else:
        trace_in_gdb(gdb, os.path.join(os.environ["PCC_EXPERIMENTAL_TRACE"], f"trace-{os.getpid()}.txt"))
        gdb.execute("run")
