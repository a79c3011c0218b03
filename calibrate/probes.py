"""Minimal traffic probes for checking the engine (`calibrate selftest`, the tests): run
inside the emulator's namespaces, they depend on nothing but the kernel. A kernel-TCP bulk
sender and sink, and a UDP probe that sends numbered datagrams at a fixed rate to a sink that
counts them. HOST may be `-` for the other side's address ($EMU_PEER).

    python -m calibrate.probes tcp-sink PORT
    python -m calibrate.probes tcp-source HOST PORT CONGESTION_CONTROL
    python -m calibrate.probes udp-sink PORT REPORT_FILE
    python -m calibrate.probes udp-probe HOST PORT COUNT RATE_PPS
"""

import json
import os
import signal
import socket
import sys
import time


def tcp_sink(port: int) -> None:
    server = socket.create_server(("0.0.0.0", port))
    while True:
        connection, _ = server.accept()
        while connection.recv(1 << 20):
            pass


def tcp_source(host: str, port: int, congestion_control: str) -> None:
    source_port = 0
    for _ in range(100):  # the sink may not be listening yet
        try:
            sock = socket.socket()
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, congestion_control.encode())
            # Every try from the same port: a refused try is then the same connection (the same
            # 5-tuple, the same flow in the logs), not a flow of its own.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("0.0.0.0", source_port))
            source_port = sock.getsockname()[1]
            sock.connect((host, port))
            break
        except ConnectionRefusedError:
            sock.close()
            time.sleep(0.05)
    else:
        sys.exit("tcp-source: the sink never answered")
    block = b"x" * (1 << 16)
    while True:
        sock.sendall(block)


def udp_sink(port: int, report: str) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("0.0.0.0", port))
    received: set[int] = set()

    def write_report(*_):
        with open(report, "w") as out:
            json.dump({"received": len(received), "max_seq": max(received, default=-1)}, out)
        sys.exit(0)

    signal.signal(signal.SIGTERM, write_report)
    while True:
        data = sock.recv(2048)
        received.add(int.from_bytes(data[:4], "big"))


def udp_probe(host: str, port: int, count: int, rate_pps: float) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    start = time.monotonic()
    for seq in range(count):
        delay = start + seq / rate_pps - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        sock.sendto(seq.to_bytes(4, "big") + b"p" * 96, (host, port))
    time.sleep(3600)  # stay up until the engine stops us


def command_line(probe: str, *args: object) -> str:
    """A shell command running a probe with this interpreter."""
    return " ".join([sys.executable, "-m", "calibrate.probes", probe] + [str(a) for a in args])


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    if command in ("tcp-source", "udp-probe") and args[0] == "-":
        args[0] = os.environ["EMU_PEER"]
    if command == "tcp-sink":
        tcp_sink(int(args[0]))
    elif command == "tcp-source":
        tcp_source(args[0], int(args[1]), args[2])
    elif command == "udp-sink":
        udp_sink(int(args[0]), args[1])
    elif command == "udp-probe":
        udp_probe(args[0], int(args[1]), int(args[2]), float(args[3]))
    else:
        sys.exit(f"unknown command {command!r}")
