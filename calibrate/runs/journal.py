"""The run directory: its files, their durable writes, the journal's records, reading it back.

RUN_DIR holds

- ``run.json``: the settings (`RunConfig`) and the problem as derived at the start (`Problem`:
  the space, the warm start, the schemes scored and those dropped, the workload, the target
  numbers scored), and each link kind's emulator seed — written once, before anything runs;
- ``target.json``: the target as loaded, so nothing later depends on fetching it again;
- ``evaluations.jsonl``: the journal, one finished evaluation (`Evaluation`) per line, in the
  order the optimizers were told;
- ``proposals.jsonl``: every candidate the loop proposed (`Proposal`), appended and fsync'ed
  before its runs start, so the candidates that were running when a run stopped — proposed,
  never journaled (`RunDir.unfinished`) — are the first a resume runs again (a run written
  before this file existed has none: its resume proposes afresh);
- ``result.json``: the outcome, written by the loop when it ends (`calibrate.runs.controller`);
- ``writer.lock``: the one writer's lock (`calibrate.runs.lock`);
- ``export/``: what `calibrate export` writes (`calibrate.export`).

`RunDir.open` reads all of it back, and is the only reader: resume, export, the CLI and the
experiments open runs through it.  The problem comes back from run.json as recorded; nothing is
derived again from the host (which schemes it has) or the code (how bounds are derived).

Durability: run.json, target.json and result.json are written whole or not at all (temporary
file, fsync, rename, fsync the directory).  A journal line is appended and fsync'ed before the
loop goes on, so a crash, Ctrl-C or kill -9 loses at most the evaluations still running, never
a finished one; a last line cut short by a crash mid-write was never acknowledged, and is
ignored with a note (`calibrate.errors.Notice`), and cut off by a run that continues
(`evaluations(repair=True)`).  A damaged line elsewhere stops the reader with its line number:
deleting that line loses only its record.

Format versions (run.json's "version"; each journal line's "version", absent in version 1):

- 1: run.json holds config, space, warm_start, schemes (label -> scheme name), dropped,
  workload and seeds; journal lines have no version (lines from before the loop's phases also
  lack "phase" and "confident": they read as search lines, not confident).  The target numbers
  scored are taken again from target.json when such a run is opened, as they were at its start.
- 2: run.json also holds "real", the target numbers scored (scheme, flow, tput, delay, loss),
  so the problem reads back whole; journal lines carry "version": 2.  Nothing else differs.
  A version-1 run opens, resumes (its new journal lines are version 2; run.json is not
  rewritten) and exports.  A study (leave-one-out, ablation: `calibrate.runs.kinds`) is a
  version-2 run whose run.json also names its "kind" and holds its "study" settings, and whose
  journal lines carry "study" (which of its searches proposed the line, and what the study
  records with it); a run.json without "kind" is a calibration's.
- 3: each flow of a journal line's runs is {"tput", "delay", "loss"} (a measurement's one
  spelling, `calibrate.metrics.Stats`) where 1 and 2 held [tput, delay, loss] lists; nothing
  else differs.  A version-1 or -2 run opens, resumes (its new lines are version 3) and exports.

One writer at a time: `RunDir.writing()` is where a run holds its directory's lock while it
writes (`calibrate.runs.lock`: released by the kernel when the writer dies); the CLI claims it
(`RunDir.claim`) before it creates or repairs anything.  A second writer is refused, with the
first named.  Readers take no lock.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from calibrate.errors import InputError, Notice, RunBusy
from calibrate.jsonfile import read_json
from calibrate.runs import lock
from calibrate.runs.config import LINK_KINDS, RunConfig, emulator_seed
from calibrate.runs.problem import Problem
from calibrate.targets.model import Target

RUN_FILE = "run.json"
TARGET_FILE = "target.json"
JOURNAL = "evaluations.jsonl"
PROPOSALS = "proposals.jsonl"
RESULT = "result.json"
FORMAT = "calibrate-run"
FORMAT_VERSION = 3
#: run.json's "kind" of a calibration (`calibrate run`), and when it has none
CALIBRATION = "calibration"


# ----------------------------------------------------------------------------------------------
# JSON written durably


def json_number(value: float | None) -> float | None:
    """JSON has no NaN: unknown numbers are null."""
    return None if value is None or not math.isfinite(value) else float(value)


def jsonable(value: Any) -> Any:
    """NaN/inf -> None, numpy scalars -> Python, tuples -> lists, for strict JSON."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (np.floating, float)):
        return json_number(float(value))
    if isinstance(value, np.integer):
        return int(value)
    return value


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: Any) -> None:
    """JSON written whole or not at all (temp file, fsync, rename, fsync the directory)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps(data, indent=2, allow_nan=False) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _append_line(path: Path, data: Mapping[str, Any]) -> None:
    """One line, flushed and fsync'ed before returning (the durability promise)."""
    line = json.dumps(data, allow_nan=False, separators=(",", ":")) + "\n"
    new = not path.exists()
    with open(path, "a") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())
    if new:
        _fsync_dir(path.parent)


def damaged_line(path: Path, number: int) -> str:
    """What to do about a damaged line of a journal: remove that line, not the file."""
    return (f"line {number} of {path.name} is damaged: delete that line (only its record is "
            f"lost; every other line is kept), then continue with `calibrate resume "
            f"{path.parent}`")


def _read_lines(path: Path, *, repair: bool) -> list[tuple[int, Any]]:
    """The journal's lines, parsed, with their line numbers.  A last line without its newline
    (cut short by a crash) is dropped with a `Notice`, and with `repair` cut from the file."""
    if not path.exists():
        return []
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end < len(data):
        number = data.count(b"\n") + 1
        done = "cut off before the run continues" if repair else "ignored"
        warnings.warn(f"{path}: line {number} ({len(data) - end} bytes) is incomplete: the run "
                      f"stopped while writing it, so that record was never finished; {done}",
                      Notice, stacklevel=2)
    if end < len(data) and repair:
        with open(path, "r+b") as f:
            f.truncate(end)
            os.fsync(f.fileno())
    lines = []
    for number, line in enumerate(data[:end].decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            lines.append((number, json.loads(line)))
        except json.JSONDecodeError as error:
            raise InputError(f"{path}:{number}:{error.colno}: not a JSON record ({error.msg}); "
                             f"{damaged_line(path, number)}") from None
    return lines


# ----------------------------------------------------------------------------------------------
# One journal record


#: what every journal line has had since the first version
REQUIRED = ("link", "candidate", "x", "f", "params", "seed", "schemes")


@dataclass(frozen=True)
class Evaluation:
    """One finished evaluation of a candidate emulator, as the journal records it."""

    index: int  # its position in the run's journal (both link kinds)
    link: str  # the link kind whose search proposed it
    candidate: int  # the candidate's id in the run
    x: tuple[float, ...]  # its point in the unit cube, as the optimizer was told it
    params: Mapping[str, float]  # rate, delay, queue, loss
    emulator: str  # its Mahimahi command line
    seed: int  # the emulator seed: the candidate's trace seed (its runs' loss seeds: loss_seeds)
    f: float  # the replication error, %
    noise: float | None  # f's standard error, % (None: unknown)
    floor: float | None  # the noise floor of f, %
    errors_pct: Mapping[str, float | None]  # mean throughput / delay / loss errors
    schemes: tuple[Mapping[str, Any], ...]  # per scheme and flow: real vs emulated (`scheme_table`)
    penalized: Mapping[str, str] = field(default_factory=dict)  # key -> why its runs failed
    loss_seeds: tuple[int, ...] = ()  # every loss seed its runs used
    runs: tuple[Mapping[str, Any], ...] = ()  # every run's metrics (`RunMetrics.to_json`)
    started_at: str | None = None  # ISO times, UTC
    finished_at: str | None = None
    seconds: float | None = None  # its wall time
    elapsed_s: float = 0.0  # the run's calibration time when it was journaled
    phase: str = "search"  # "search" (the optimizer's proposal) or "refine" (the local refinement)
    confident: bool = False  # after it, the search's model ruled out improvement elsewhere
    version: int = FORMAT_VERSION  # the format version of the line
    study: Mapping[str, Any] = field(default_factory=dict)  # a study's tags (`calibrate.runs.controller.Run.tags`)

    def to_json(self) -> dict[str, Any]:
        """The journal line (strict JSON: unknown numbers are null)."""
        return jsonable({
            "index": self.index, "link": self.link, "candidate": self.candidate,
            "x": list(self.x), "params": dict(self.params), "emulator": self.emulator,
            "seed": self.seed, "loss_seeds": list(self.loss_seeds), "f": self.f,
            "noise": self.noise, "floor": self.floor, "errors_pct": dict(self.errors_pct),
            "schemes": list(self.schemes), "penalized": dict(self.penalized),
            "runs": list(self.runs), "started_at": self.started_at,
            "finished_at": self.finished_at, "seconds": self.seconds,
            "elapsed_s": self.elapsed_s, "phase": self.phase, "confident": self.confident,
            "version": self.version, **({"study": dict(self.study)} if self.study else {})})

    @classmethod
    def from_json(cls, data: Any, where: str = "journal record", index: int = 0,
                  damage: str = "the journal is damaged") -> Evaluation:
        """A journal line read back, any version up to ours; `index` stands in for a line that
        lacks its own.  Errors say which line (`where`), what is wrong with it, and `damage`:
        what to do about it."""
        if not isinstance(data, dict) or any(k not in data for k in REQUIRED):
            raise InputError(f"{where} lacks some of {', '.join(REQUIRED)}; this is not a "
                             f"journal written by `calibrate run`")
        version = data.get("version", 1)
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise InputError(f"{where} is of format version {version!r}; this calibrate reads up "
                             f"to {FORMAT_VERSION}: upgrade calibrate to read this run")
        f = data["f"]
        if data["link"] not in LINK_KINDS or isinstance(f, bool) or not isinstance(f, (int, float)):
            raise InputError(f"{where}: link kind {data['link']!r} or f {f!r} is not "
                             f"valid; {damage}")
        try:
            return cls(
                index=int(data.get("index", index)), link=data["link"],
                candidate=int(data["candidate"]), x=tuple(float(v) for v in data["x"]),
                params=dict(data["params"]), emulator=str(data.get("emulator", "")),
                seed=int(data["seed"]), f=float(f), noise=_number(data.get("noise")),
                floor=_number(data.get("floor")), errors_pct=dict(data.get("errors_pct", {})),
                schemes=tuple(data["schemes"]), penalized=dict(data.get("penalized", {})),
                loss_seeds=tuple(int(s) for s in data.get("loss_seeds", ())),
                runs=tuple(data.get("runs", ())), started_at=data.get("started_at"),
                finished_at=data.get("finished_at"), seconds=_number(data.get("seconds")),
                elapsed_s=float(data.get("elapsed_s") or 0.0),
                phase=str(data.get("phase", "search")),
                confident=bool(data.get("confident", False)), version=version,
                study=dict(data.get("study") or {}))
        except (TypeError, ValueError) as error:
            raise InputError(f"{where}: {error}; {damage}") from None


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True)
class Proposal:
    """A candidate as the loop proposed it, recorded (proposals.jsonl) before its runs start:
    a resume runs the ones never journaled again, first, with the same id and point."""

    candidate: int
    link: str  # the link kind whose search proposed it
    x: tuple[float, ...]  # its point in the unit cube of its search's space
    params: Mapping[str, float]
    phase: str = "search"  # as `Evaluation.phase`
    proposed_at: str | None = None  # ISO time, UTC
    study: Mapping[str, Any] = field(default_factory=dict)  # a study's tags (`Evaluation.study`)

    def to_json(self) -> dict[str, Any]:
        return jsonable({"candidate": self.candidate, "link": self.link, "x": list(self.x),
                         "params": dict(self.params), "phase": self.phase,
                         "proposed_at": self.proposed_at, "version": FORMAT_VERSION,
                         **({"study": dict(self.study)} if self.study else {})})

    @classmethod
    def from_json(cls, data: Any, where: str) -> Proposal:
        try:
            if not isinstance(data, dict):
                raise TypeError("not a JSON object")
            return cls(int(data["candidate"]), str(data["link"]),
                       tuple(float(v) for v in data["x"]), dict(data["params"]),
                       str(data.get("phase", "search")), data.get("proposed_at"),
                       dict(data.get("study") or {}))
        except (KeyError, TypeError, ValueError) as error:
            raise InputError(f"{where}: {type(error).__name__}: {error}; the record of proposed "
                             f"candidates is damaged: remove the file to continue the run without "
                             f"re-running the candidates that were running when it stopped") from None


# ----------------------------------------------------------------------------------------------
# The directory


@dataclass(frozen=True)
class RunDir:
    """An opened run directory: its settings, target and problem as recorded; its journal and
    result on demand."""

    path: Path
    config: RunConfig
    target: Target
    problem: Problem
    meta: Mapping[str, Any]  # run.json as written (the export's provenance quotes it)

    @property
    def version(self) -> int:
        return int(self.meta.get("version", 1))

    @property
    def kind(self) -> str:
        """What made the run: a calibration, or a study (`calibrate.runs.kinds`)."""
        return str(self.meta.get("kind", CALIBRATION))

    @property
    def journal(self) -> Path:
        return self.path / JOURNAL

    @property
    def result_file(self) -> Path:
        return self.path / RESULT

    # -- making and opening

    @property
    def proposals_file(self) -> Path:
        return self.path / PROPOSALS

    @staticmethod
    def check_new(path: Path | str) -> None:
        """Refuse a directory that already holds a run (it is resumed, never overwritten), or
        that another process is writing."""
        path = Path(path)
        busy = lock.holder(path)
        if busy is not None and busy.pid != os.getpid():
            raise RunBusy(f"{path} holds a run that {busy.describe()} is writing now; wait for it "
                          f"to finish (and export it with `calibrate export {path}`), or choose "
                          f"another --out", busy)
        if (path / RUN_FILE).exists() or (path / JOURNAL).exists():
            raise InputError(f"{path} already holds a calibration; continue it with "
                             f"`calibrate resume {path}`, or choose another --out")

    @classmethod
    def create(cls, path: Path | str, config: RunConfig, target: Target,
               problem: Problem, *, kind: str = CALIBRATION,
               study: Mapping[str, Any] | None = None) -> RunDir:
        """Write target.json and run.json into a new run directory (a study: its `kind` and
        settings)."""
        path = Path(path)
        cls.check_new(path)
        meta = {"format": FORMAT, "version": FORMAT_VERSION,
                "created": dt.datetime.now(dt.UTC).isoformat(),
                "config": config.to_json(), **problem.to_json(),
                "seeds": {link: emulator_seed(config.seed, link) for link in config.links},
                **({} if kind == CALIBRATION else {"kind": kind, "study": dict(study or {})})}
        meta = jsonable(meta)
        with lock.hold(path, make=True):
            cls.check_new(path)  # again: no other writer can start one now
            write_atomic(path / TARGET_FILE, target.to_json())
            write_atomic(path / RUN_FILE, meta)
        return cls(path, config, target, problem, meta)

    @staticmethod
    @contextmanager
    def claim(path: Path | str, *, make: bool = False) -> Iterator[None]:
        """Hold RUN_DIR's writer lock for the block (`calibrate.runs.lock.hold`; `make`: create
        the directory, removed again if nothing but the lock was written): what a command that
        writes a run does before it creates or repairs anything, so that no other writer starts
        between its checks and its writes.  `writing` inside the block shares the lock."""
        with lock.hold(path, make=make):
            yield

    @classmethod
    def open(cls, path: Path | str, kind: str | None = CALIBRATION) -> RunDir:
        """Read a run directory's settings, target and problem, with errors that say what is
        wrong and what to do; a run of another `kind` than asked is refused (None: any kind).
        Reads only; the journal is read by `evaluations`."""
        path = Path(path)
        if not path.exists():
            raise InputError(f"{path} is not a calibration run directory (no such run directory); "
                             f"give the RUN_DIR that `calibrate run --out` wrote (default "
                             f"runs/<target>-<time>)")
        if not path.is_dir():
            raise InputError(f"{path} is a file, not a calibration run directory")
        if not (path / RUN_FILE).exists():
            raise InputError(f"{path} is not a calibration run directory (no {RUN_FILE}); "
                             f"start one with `calibrate run TARGET --out {path}`")
        meta = read_json(path / RUN_FILE, what="run settings")
        if not isinstance(meta, dict) or meta.get("format") != FORMAT or "config" not in meta:
            raise InputError(f"{path / RUN_FILE} is not the settings file of a calibration run")
        version = meta.get("version", 1)
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise InputError(f"{path / RUN_FILE} is of run format {version!r}; this calibrate "
                             f"reads formats 1 to {FORMAT_VERSION}: upgrade calibrate to "
                             f"continue or export this run")
        target = Target.from_json(read_json(path / TARGET_FILE, what="target"),
                                  str(path / TARGET_FILE))
        try:
            config = RunConfig.from_json(meta["config"])
            problem = Problem.from_json(meta, target, config)
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise InputError(f"{path / RUN_FILE} is malformed ({type(error).__name__}: "
                             f"{error}); it was not written by this calibrate") from None
        except InputError as error:  # settings no run may have (a run refused at its start)
            raise InputError(f"{path} cannot be continued: {error}") from None
        run = cls(path, config, target, problem, meta)
        if kind is not None and run.kind != kind:
            raise InputError(f"{path} holds a {run.kind} run, not a {kind}; `calibrate resume "
                             f"{path}` and `calibrate export {path}` handle every kind")
        return run

    def narrowed(self, problem: Problem) -> RunDir:
        """The directory as one search of a study sees it: `problem` (its space, the schemes it
        scores) in place of the run's, and run.json's space with it (what its export quotes)."""
        space = problem.space
        meta = {**self.meta, "space": {"bounds": {k: list(v) for k, v in space.bounds.items()},
                                       "fixed": dict(space.fixed), "free": list(space.free)}}
        return replace(self, problem=problem, meta=meta)

    # -- the journal

    def evaluations(self, *, repair: bool = False) -> list[Evaluation]:
        """The journal's records, in order.  `repair` (a run about to continue) cuts off a last
        line torn by a crash; without it (export, inspection) the files are left as they are:
        the run may still be writing its last line."""
        try:
            lines = _read_lines(self.journal, repair=repair)
        except (OSError, UnicodeDecodeError) as error:
            raise InputError(f"{self.journal}: cannot read the journal "
                             f"({getattr(error, 'strerror', None) or error}); check the file's "
                             f"permissions") from None
        return [Evaluation.from_json(line, f"{self.journal}:{number} (evaluation {count})", count - 1,
                                     damaged_line(self.journal, number))
                for count, (number, line) in enumerate(lines, start=1)]

    def append(self, evaluation: Evaluation) -> None:
        """Journal one evaluation: flushed and fsync'ed before returning."""
        _append_line(self.journal, evaluation.to_json())

    def propose(self, proposal: Proposal) -> None:
        """Record a proposed candidate before its runs start: flushed and fsync'ed."""
        _append_line(self.proposals_file, proposal.to_json())

    def unfinished(self, records: Sequence[Evaluation] | None = None, *,
                   repair: bool = False) -> list[Proposal]:
        """The proposed candidates the journal (`records`, default: read it) does not hold —
        those running when the run stopped — in the order proposed, each once.  `repair` cuts
        off a last line torn by a crash, as `evaluations` does."""
        try:
            lines = _read_lines(self.proposals_file, repair=repair)
        except (OSError, UnicodeDecodeError) as error:
            raise InputError(f"{self.proposals_file}: cannot read it "
                             f"({getattr(error, 'strerror', None) or error}); check the file's "
                             f"permissions") from None
        done = {r.candidate for r in (self.evaluations() if records is None else records)}
        out: list[Proposal] = []
        for number, line in lines:
            proposal = Proposal.from_json(line, f"{self.proposals_file}:{number}")
            if proposal.candidate not in done:
                done.add(proposal.candidate)
                out.append(proposal)
        return out

    @contextmanager
    def writing(self) -> Iterator[RunDir]:
        """Hold the directory's writer lock while writing to it (`calibrate.runs.lock`): a
        second writer is refused at once (`RunBusy`, naming the first); the kernel releases the
        lock when its holder dies, so a crashed writer never blocks a resume.  Shares a lock
        this process holds already (`claim`)."""
        with lock.hold(self.path):
            yield self

    # -- the result

    def write_result(self, result: Mapping[str, Any]) -> None:
        write_atomic(self.result_file, jsonable(result))

    def read_result(self) -> Any:
        """result.json's content, or None when there is none (an interrupted run)."""
        if not self.result_file.exists():
            return None
        return read_json(self.result_file, what="calibration result")
