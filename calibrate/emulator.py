"""`EmulatorConfig`: one candidate emulated path, and its three spellings.

x = <bottleneck rate, one-way propagation delay, DropTail size, i.i.d. loss> plus the kind of
deliveries (constant or Poisson), as in the Pantheon paper §5. The same path can be written as

* a Mahimahi command line:
  ``mm-delay 28 mm-loss uplink 0.0477 mm-link UP DOWN --uplink-queue=droptail --uplink-queue-args=packets=14``
* Pantheon ``test.py local`` arguments:
  ``--uplink-trace UP --downlink-trace DOWN --prepend-mm-cmds "mm-delay 28 mm-loss uplink 0.0477"
  --extra-mm-link-args "--uplink-queue=droptail --uplink-queue-args=packets=14"``
* this project's engine arguments (``calibrate-link --uplink-trace ... --delay 28 ...``).

Chain order is Pantheon's: data crosses the link queue and rate, then loss, then delay; delay
and loss shells sit outside (before) mm-link.

Two seeds, two roles:

* ``trace_seed`` makes the Poisson traces (and is in their names, ``12mbps-poisson-7.trace``);
  whoever makes the path chooses it: a calibration, once per link kind's search
  (`calibrate.runs.config.emulator_seed`, from the run's --seed), so every candidate of a search
  sees the same deliveries; `calibrate emulate` and `score`, from --seed (or a trace name);
* ``loss_seed`` is the engine's ``--seed``, its i.i.d. loss draws (Mahimahi's mm-loss is
  unseeded, so it travels beside a Mahimahi command, never in it).  For each run it is derived
  in one place, `EmulatorConfig.for_run`: trace_seed·1000 + the run id, so replicates draw
  independent losses over the same emulator.  A path not made for one run says its own (default
  0; an export's engine command draws with its search's emulator seed, `calibrate.export`).
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import numpy as np

from calibrate import trace as traces
from calibrate.errors import InputError

#: significant digits of a loss rate and a rate as command lines and descriptions print them: a
#: loss of 0.0102 vs 0.010199999999999996 or a rate of 10.08 vs 10.0757 Mbit/s is well inside
#: what any measurement can tell apart, and the float noise of the search is not a parameter
SHOWN_DIGITS = 4

LinkKind = Literal["constant", "poisson"]
QueueKind = Literal["infinite", "droptail", "drophead"]
DIRECTIONS = ("uplink", "downlink")


@dataclass(frozen=True)
class Queue:
    """A link's queue; limits count waiting packets (IP length + 4 bytes), 0 = no limit."""

    kind: QueueKind = "infinite"
    packets: int = 0
    bytes: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ("infinite", "droptail", "drophead"):
            raise InputError(f"unknown queue type {self.kind!r}: use infinite, droptail or drophead")
        if self.packets < 0 or self.bytes < 0:
            raise InputError("queue limits must be non-negative")
        if self.kind == "infinite" and (self.packets or self.bytes):
            raise InputError("an infinite queue takes no limits; use kind='droptail'")
        if self.kind != "infinite" and not (self.packets or self.bytes):
            raise InputError(f"a {self.kind} queue needs packets= or bytes= (> 0)")

    @classmethod
    def droptail(cls, packets: int) -> Queue:
        return cls("droptail", packets=int(packets))

    def args(self) -> str:
        """Mahimahi's queue arguments, e.g. ``packets=14``."""
        parts = [f"packets={self.packets}"] if self.packets else []
        parts += [f"bytes={self.bytes}"] if self.bytes else []
        return ",".join(parts)


@dataclass(frozen=True)
class EmulatorConfig:
    """One emulated path. Rates are in Mbit/s of IP packets; ``delay_ms`` is one-way, in
    each direction (RTT = 2 x delay + link time). A trace file given for a direction
    replaces the generated one."""

    rate_mbps: float | None = None
    delay_ms: int = 0
    queue: Queue = field(default_factory=Queue)
    uplink_loss: float = 0.0
    downlink_loss: float = 0.0
    link: LinkKind = "constant"
    trace_seed: int = 0  # makes the Poisson traces (module docstring: seeds)
    loss_seed: int = 0  # the engine's --seed: its loss draws (set per run by `for_run`)
    downlink_rate_mbps: float | None = None
    downlink_queue: Queue = field(default_factory=Queue)
    uplink_trace: Path | None = None
    downlink_trace: Path | None = None

    def __post_init__(self) -> None:
        if self.link not in ("constant", "poisson"):
            raise InputError(f"link kind must be 'constant' or 'poisson', got {self.link!r}")
        for name in ("rate_mbps", "downlink_rate_mbps"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value >= traces.MIN_RATE_MBPS):
                raise InputError(f"{name} must be at least {traces.MIN_RATE_MBPS} Mbit/s, got {value!r}")
        if self.rate_mbps is None and self.uplink_trace is None:
            raise InputError("give the bottleneck rate (rate_mbps) or an uplink trace file")
        if self.rate_mbps is None and self.downlink_rate_mbps is None and self.downlink_trace is None:
            raise InputError("give a downlink rate or trace (the uplink is a file, so it cannot be reused)")
        if isinstance(self.delay_ms, bool) or not isinstance(self.delay_ms, int) or self.delay_ms < 0:
            raise InputError(f"delay_ms must be a non-negative integer (milliseconds), got {self.delay_ms!r}")
        for name in ("uplink_loss", "downlink_loss"):
            value = getattr(self, name)
            if not (0.0 <= value <= 1.0):
                raise InputError(f"{name} must be a probability in [0, 1], got {value!r}")
        for name in ("trace_seed", "loss_seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InputError(f"{name} must be a non-negative integer, got {value!r}")

    # -- traces -----------------------------------------------------------------------------

    def _rate(self, direction: str) -> float | None:
        return self.rate_mbps if direction == "uplink" else (self.downlink_rate_mbps or self.rate_mbps)

    def trace_name(self, direction: str) -> str:
        """File name of a direction's trace: Pantheon's names for generated ones."""
        given = self.uplink_trace if direction == "uplink" else self.downlink_trace
        if given is not None:
            return Path(given).name
        rate = f"{self._rate(direction):g}"
        return f"{rate}mbps.trace" if self.link == "constant" else f"{rate}mbps-poisson-{self.trace_seed}.trace"

    def check_trace_files(self) -> None:
        """Read the trace files given (not the generated ones) with Mahimahi's rules, so that an
        empty, decreasing, all-zero or garbled trace is refused before anything runs or is
        written (`calibrate.trace.describe` asks the engine, which reads them the same way)."""
        for direction, given in (("uplink", self.uplink_trace), ("downlink", self.downlink_trace)):
            if given is None:
                continue
            try:
                traces.describe(Path(given))
            except InputError as error:
                detail = str(error).removeprefix("bad trace: ")
                raise InputError(f"bad {direction} trace {detail}; a Mahimahi trace has one whole "
                                 f"millisecond per line, nondecreasing, the last one above 0") from None

    def trace_paths(self, directory: Path) -> tuple[Path, Path]:
        """Paths of both traces, generating the ones that are not files into ``directory``."""
        paths = []
        for direction in DIRECTIONS:
            given = self.uplink_trace if direction == "uplink" else self.downlink_trace
            if given is not None:
                paths.append(Path(given))
                continue
            path = Path(directory) / self.trace_name(direction)
            if not path.exists():
                rate = self._rate(direction)
                assert rate is not None  # __post_init__: a direction without a trace file has a rate
                times = traces.constant(rate) if self.link == "constant" else traces.poisson(rate, self.trace_seed)
                traces.write(times, path)
            paths.append(path)
        return paths[0], paths[1]

    # -- spellings --------------------------------------------------------------------------

    def _shells(self) -> list[str]:
        shells = [f"mm-delay {self.delay_ms}"] if self.delay_ms else []
        shells += [f"mm-loss uplink {shown(self.uplink_loss)}"] if self.uplink_loss else []
        shells += [f"mm-loss downlink {shown(self.downlink_loss)}"] if self.downlink_loss else []
        return shells

    def _link_args(self) -> list[str]:
        args = []
        for direction, queue in (("uplink", self.queue), ("downlink", self.downlink_queue)):
            if queue.kind != "infinite":
                args += [f"--{direction}-queue={queue.kind}", f"--{direction}-queue-args={queue.args()}"]
        return args

    def mahimahi_command(self, uplink: str | None = None, downlink: str | None = None) -> str:
        """The Mahimahi command line (trace arguments default to the trace file names)."""
        up = uplink or self.trace_name("uplink")
        down = downlink or self.trace_name("downlink")
        return " ".join(self._shells() + ["mm-link", up, down] + self._link_args())

    def pantheon_args(self, uplink: str | None = None, downlink: str | None = None) -> list[str]:
        """Arguments of Pantheon's ``src/experiments/test.py local`` for this path."""
        args = ["--uplink-trace", uplink or self.trace_name("uplink"),
                "--downlink-trace", downlink or self.trace_name("downlink")]
        if self._shells():
            args += ["--prepend-mm-cmds", " ".join(self._shells())]
        if self._link_args():
            args += ["--extra-mm-link-args", " ".join(self._link_args())]
        return args

    def engine_args(self, trace_dir: Path) -> list[str]:
        """Arguments of ``calibrate-link`` for this path (traces written into ``trace_dir``)."""
        up, down = self.trace_paths(trace_dir)
        args = ["--uplink-trace", str(up), "--downlink-trace", str(down), "--delay", str(self.delay_ms)]
        for direction, queue in (("uplink", self.queue), ("downlink", self.downlink_queue)):
            if queue.kind != "infinite":
                args += [f"--{direction}-queue", queue.kind, f"--{direction}-queue-args", queue.args()]
        for direction, loss in (("uplink", self.uplink_loss), ("downlink", self.downlink_loss)):
            if loss:
                args += [f"--{direction}-loss", shown(loss)]
        return args + ["--seed", str(self.loss_seed)]

    def describe(self) -> str:
        """A short human description, e.g. ``12 Mbit/s constant, 20 ms, droptail 100 pkts, loss 0``."""
        rate = f"{shown(self.rate_mbps)} Mbit/s" if self.rate_mbps else self.trace_name("uplink")
        queue = "infinite queue" if self.queue.kind == "infinite" else f"{self.queue.kind} {self.queue.args()}"
        return f"{rate} {self.link}, {self.delay_ms} ms, {queue}, loss {shown(self.uplink_loss)}"

    def for_run(self, run_id: int) -> EmulatorConfig:
        """The path as run `run_id` emulates it: the same traces (`trace_seed`), its own losses.
        The one place a loss seed is derived: trace_seed·1000 + run_id (run ids, Pantheon's from
        1 and a calibration's re-runs at +500, stay below 1000, so no two (trace seed, run)
        pairs share a loss seed)."""
        return replace(self, loss_seed=self.trace_seed * 1000 + run_id)

    # -- parsing ----------------------------------------------------------------------------

    @classmethod
    def parse(cls, text: str, trace_dirs: tuple[Path, ...] = (), trace_seed: int = 0,
              loss_seed: int = 0) -> EmulatorConfig:
        """Read a Mahimahi command line or Pantheon ``test.py`` arguments back.

        Trace arguments naming an existing file (as given, or inside one of ``trace_dirs``)
        are used as files; Pantheon-style names (``12mbps.trace``, ``0.57mbps-poisson.trace``)
        that are not files become generated traces of that rate and kind.  The seeds travel
        beside the command: ``trace_seed`` unless a Poisson trace's name carries one
        (``0.57mbps-poisson-7.trace``), and ``loss_seed``.
        """
        seeds = (trace_seed, loss_seed)
        tokens = shlex.split(text)
        if not tokens:
            raise InputError("empty emulator description: give a Mahimahi command (mm-delay ... mm-link UP DOWN ...) "
                             "or Pantheon test.py arguments")
        if tokens[0].startswith("--"):
            return cls._parse_pantheon(tokens, trace_dirs, seeds)
        return cls._parse_mahimahi(tokens, trace_dirs, seeds)

    @classmethod
    def _parse_pantheon(cls, tokens: list[str], trace_dirs: tuple[Path, ...],
                        seeds: tuple[int, int]) -> EmulatorConfig:
        options: dict[str, str] = {}
        i = 0
        while i < len(tokens):
            token = tokens[i]
            name, eq, value = token.partition("=")
            if name not in ("--uplink-trace", "--downlink-trace", "--prepend-mm-cmds", "--append-mm-cmds",
                            "--extra-mm-link-args"):
                raise InputError(f"unexpected Pantheon argument {token!r}: expected --uplink-trace, --downlink-trace, "
                                 "--prepend-mm-cmds, --extra-mm-link-args")
            if not eq:
                if i + 1 >= len(tokens):
                    raise InputError(f"{name} needs a value")
                value = tokens[i + 1]
                i += 1
            options[name] = value
            i += 1
        if options.get("--append-mm-cmds", "").strip():
            raise InputError("shells inside mm-link (--append-mm-cmds) are not supported: "
                             "put mm-delay/mm-loss in --prepend-mm-cmds")
        up = options.get("--uplink-trace")
        if up is None:
            raise InputError("Pantheon arguments need --uplink-trace")
        down = options.get("--downlink-trace", up)
        command = (f"{options.get('--prepend-mm-cmds', '')} mm-link {shlex.quote(up)} {shlex.quote(down)} "
                   f"{options.get('--extra-mm-link-args', '')}")
        return cls._parse_mahimahi(shlex.split(command), trace_dirs, seeds)

    @classmethod
    def _parse_mahimahi(cls, tokens: list[str], trace_dirs: tuple[Path, ...],
                        seeds: tuple[int, int]) -> EmulatorConfig:
        delay = 0
        losses = {"uplink": 0.0, "downlink": 0.0}
        i = 0
        while i < len(tokens) and tokens[i] != "mm-link":
            shell = tokens[i]
            if shell == "mm-delay" and i + 1 < len(tokens):
                try:
                    delay += int(tokens[i + 1])
                except ValueError:
                    raise InputError("mm-delay takes an integer number of milliseconds, "
                                     f"got {tokens[i + 1]!r}") from None
                i += 2
            elif shell == "mm-loss" and i + 2 < len(tokens):
                direction, value = tokens[i + 1], tokens[i + 2]
                if direction not in losses:
                    raise InputError(f"mm-loss takes uplink or downlink, got {direction!r}")
                try:
                    p = float(value)
                except ValueError:
                    raise InputError(f"mm-loss takes a probability, got {value!r}") from None
                # Nested loss shells compose: the packet must survive both.
                losses[direction] = p if not losses[direction] else 1.0 - (1.0 - losses[direction]) * (1.0 - p)
                i += 3
            else:
                raise InputError(f"unsupported or incomplete shell {shell!r} before mm-link: "
                                 "supported are mm-delay D and mm-loss uplink|downlink P")
        if i + 2 >= len(tokens):
            raise InputError("the emulator needs mm-link UPLINK-TRACE DOWNLINK-TRACE")
        up_name, down_name = tokens[i + 1], tokens[i + 2]
        queues = {"uplink": Queue(), "downlink": Queue()}
        kinds: dict[str, str] = {}
        queue_args: dict[str, str] = {}
        rest = tokens[i + 3 :]
        j = 0
        while j < len(rest):
            token = rest[j]
            if token == "--":
                break
            match = re.fullmatch(r"--(uplink|downlink)-queue(-args)?(?:=(.*))?", token)
            if not match:
                raise InputError(f"unsupported mm-link option {token!r}: supported are --uplink-queue=, "
                                 "--uplink-queue-args= and the downlink ones")
            value = match.group(3)
            if value is None:
                if j + 1 >= len(rest):
                    raise InputError(f"{token} needs a value")
                value = rest[j + 1]
                j += 1
            (queue_args if match.group(2) else kinds)[match.group(1)] = value
            j += 1
        for direction in DIRECTIONS:
            kind = kinds.get(direction, "infinite")
            args = queue_args.get(direction, "")
            limits = dict(re.findall(r"(packets|bytes)=(\d+)", args))
            leftover = re.sub(r"(packets|bytes)=\d+", "", args).strip(" ,")
            if leftover:
                raise InputError(f"unsupported {direction} queue arguments {args!r}: use packets=N and/or bytes=N")
            # the kind as the command line gave it: Queue.__post_init__ rejects an unknown one
            queues[direction] = Queue(kind, int(limits.get("packets", 0)),  # type: ignore[arg-type]
                                      int(limits.get("bytes", 0)))
        up_rate, up_kind, up_file = _resolve_trace(up_name, trace_dirs)
        down_rate, down_kind, down_file = _resolve_trace(down_name, trace_dirs)
        if up_file is None and down_file is None and up_kind != down_kind:
            raise InputError("both directions' traces must be of one kind (constant or poisson)")
        named = [s for s in (_trace_seed(up_name), _trace_seed(down_name)) if s is not None]
        return cls(
            rate_mbps=up_rate,
            downlink_rate_mbps=down_rate if down_rate != up_rate else None,
            delay_ms=delay,
            queue=queues["uplink"],
            downlink_queue=queues["downlink"],
            uplink_loss=losses["uplink"],
            downlink_loss=losses["downlink"],
            link=up_kind if up_file is None else down_kind,
            trace_seed=named[0] if named else seeds[0],
            loss_seed=seeds[1],
            uplink_trace=up_file,
            downlink_trace=down_file,
        )


def shown(value: float) -> str:
    """A loss rate or rate as commands and descriptions show it: `SHOWN_DIGITS` significant
    digits, positional (``0.0102``, ``0.000001074``, ``1``), which parses back within that
    precision.  Trace names keep their rate to 6 digits (`EmulatorConfig.trace_name`): they name
    the files an export ships, and parse back to the rate that regenerates them."""
    return np.format_float_positional(value, precision=SHOWN_DIGITS, unique=False, fractional=False,
                                      trim="-")


_TRACE_NAME = re.compile(r"(?P<rate>\d+(?:\.\d+)?)mbps(?P<poisson>-poisson(?:-(?P<seed>\d+))?)?\.trace")


def _trace_seed(name: str) -> int | None:
    match = _TRACE_NAME.fullmatch(Path(name).name)
    return int(match.group("seed")) if match and match.group("seed") else None


def _resolve_trace(name: str, trace_dirs: tuple[Path, ...]) -> tuple[float | None, LinkKind, Path | None]:
    """(rate, kind, file): a file when one exists, else a generated trace named by its rate."""
    for candidate in [Path(name)] + [Path(d) / name for d in trace_dirs]:
        if candidate.is_file():
            return None, "constant", candidate
    match = _TRACE_NAME.fullmatch(Path(name).name)
    if not match:
        raise InputError(
            f"trace {name!r} is not a file and not a rate name like 12mbps.trace or 0.57mbps-poisson.trace"
        )
    return float(match.group("rate")), ("poisson" if match.group("poisson") else "constant"), None
