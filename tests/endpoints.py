"""Minimal traffic endpoints for the engine's integration tests (run inside the emulator's
namespaces by `calibrate-link --sender/--receiver`): a kernel-TCP bulk sender and sink, and a
UDP probe that sends numbered datagrams at a fixed rate and a sink that counts them.

    python3 endpoints.py tcp-sink PORT
    python3 endpoints.py tcp-source HOST PORT CONGESTION_CONTROL
    python3 endpoints.py udp-sink PORT REPORT_FILE
    python3 endpoints.py udp-probe HOST PORT COUNT RATE_PPS
"""

import json
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
    for _ in range(100):  # the sink may not be listening yet
        try:
            sock = socket.socket()
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, congestion_control.encode())
            sock.connect((host, port))
            break
        except ConnectionRefusedError:
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


if __name__ == "__main__":
    command, *args = sys.argv[1:]
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
