"""Schemes: Pantheon's wrapper contract (its `src/wrappers/*.py`) and the registry of the schemes
on this host.

A scheme is a program with Pantheon's command line: `run_first` prints which side starts first;
the first side gets `<side> PORT` and listens, the second gets `<side> IP PORT` and connects;
both send or sink at full throttle until SIGTERM.  Two kinds stand behind that contract:

* built-ins, run by `calibrate-scheme` (emulators/schemes): kernel TCP per congestion control,
  QUIC, ports of the programs Pantheon ran (`*-2017`) and our own Vegas/Copa/LEDBAT/saturator
  over UDP.  Which exist, and what each is (labels,
  aliases, character, notes, which side runs first), is the registry file that calibrate-scheme
  builds in too (calibrate/data/schemes.json, `calibrate.scheme_registry`); which are available
  is what `calibrate-scheme list --json` says about this host;
* a Pantheon checkout's own wrappers (`<checkout>/src/wrappers/<key>.py`), named
  `pantheon-<key>`, run with a configurable interpreter (they are Python 2 scripts).

The runner (calibrate.scripted) sees only `Scheme`; adding a scheme never touches it.

A label (a Pantheon scheme key, a target's scheme name, or ours) resolves to the scheme whose
name it is, else to Pantheon's own wrapper for it (the implementation Pantheon ran), else to the
port of what Pantheon ran under the label in the target's era (`port_of` in the registry file),
else to a built-in that lists it as an alias, a stand-in — so `vegas` is the kernel's Vegas where
the kernel offers it, else the port of tcp_vegas.c, and `copa` of 2017 is the port of genericCC's
Copa of that year. A calibration scores only faithful implementations unless a scheme is named
(`resolve(..., substitutes=False)`), and a faithful one is always preferred: each carries its
measured fidelity (`Scheme.fidelity`). Where the registry file says no faithful port of a label's
program is possible in the era (`impossible`), that reason, with its evidence, is why it is not run.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from calibrate import binaries
from calibrate.errors import EnvironmentProblem, InputError
from calibrate.scheme_registry import (
    ERAS,
    Fidelity,
    PortOf,
    canonical_scheme,
    implemented,
    impossibility,
    judge,
)

Side = Literal["sender", "receiver"]
SIDES: tuple[Side, Side] = ("receiver", "sender")
SCHEME_PROGRAM = "calibrate-scheme"
PANTHEON_PREFIX = "pantheon-"
# Modules in src/wrappers/ that are helpers, not schemes.
PANTHEON_HELPERS = frozenset({"arg_parser", "context", "__init__"})
PEER = '"$EMU_PEER"'  # the engine gives each endpoint the other side's address in $EMU_PEER
# `run_first` of every wrapper is asked once per registry load; a wrapper that hangs is broken.
RUN_FIRST_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class Scheme:
    """One congestion-control scheme behind Pantheon's wrapper command line."""

    name: str
    run_first: Side
    program: tuple[str, ...]  # argv before the sub-command, e.g. (".../calibrate-scheme", "cubic")
    aliases: tuple[str, ...] = ()
    description: str = ""
    note: str | None = None  # where this is not the implementation Pantheon ran
    kind: str = ""  # kernel-tcp, quic, udp, pantheon-wrapper
    available: bool = True
    unavailable_reason: str | None = None
    port_of: PortOf | None = None  # the program Pantheon ran that this ports
    fidelity: Fidelity | None = None  # measured against that program (or by construction)
    busy_wait: bool = False  # its sender spins on a core between sends (UDT's send queue did)

    @property
    def faithful(self) -> bool:
        """Whether this is, or measurably behaves as, the program Pantheon ran: Pantheon's own
        wrapper, kernel TCP, or a port whose measured fidelity passed."""
        return judge(self.fidelity, self.kind == "pantheon-wrapper")[0]

    def difference(self) -> str:
        """Its measured difference from what Pantheon ran, in a few words."""
        return judge(self.fidelity, self.kind == "pantheon-wrapper")[1]

    @property
    def run_second(self) -> Side:
        return "sender" if self.run_first == "receiver" else "receiver"

    def argv(self, side: Side, port: int, address: str | None = None) -> list[str]:
        """Pantheon's contract: the first side listens (`SIDE PORT`), the second connects
        (`SIDE IP PORT`)."""
        if side == self.run_first:
            return [*self.program, side, str(port)]
        if address is None:
            raise InputError(f"the {side} of {self.name} runs second and needs the address to connect to")
        return [*self.program, side, address, str(port)]

    def command(self, side: Side, port: int, address: str = PEER) -> str:
        """A shell command for the engine.  `exec` makes the exit status the scheme's own (an
        `sh -c` parent would die of the SIGTERM with 143); the address defaults to $EMU_PEER,
        left for the shell to expand."""
        words = [shlex.quote(w) for w in self.argv(side, port, "ADDRESS")]
        if side != self.run_first:
            words[len(self.program) + 1] = address
        return "exec " + " ".join(words)

    def receiver_command(self, port: int, address: str = PEER) -> str:
        return self.command("receiver", port, address)

    def sender_command(self, address: str, port: int) -> str:
        return self.command("sender", port, address)

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "run_first": self.run_first, "aliases": list(self.aliases),
                "kind": self.kind, "description": self.description, "note": self.note,
                "available": self.available, "unavailable_reason": self.unavailable_reason,
                "port_of": None if self.port_of is None else {
                    "label": self.port_of.label, "eras": list(self.port_of.eras),
                    "upstream": self.port_of.upstream},
                "faithful": self.faithful,
                "fidelity": None if self.fidelity is None else self.fidelity.to_json(),
                "first_command": self.command(self.run_first, 50001),
                "second_command": self.command(self.run_second, 50001)}


@dataclass(frozen=True)
class Registry:
    """Every scheme known here, available or not, in preference order."""

    schemes: tuple[Scheme, ...]

    def available(self) -> tuple[Scheme, ...]:
        return tuple(s for s in self.schemes if s.available)

    def get(self, name: str) -> Scheme | None:
        return next((s for s in self.schemes if s.name == name), None)

    def candidates(self, label: str, era: str | None = None) -> list[Scheme]:
        """Schemes that may stand for `label` in `era` (None: ports are not considered), best
        first (see the module docstring)."""
        keys = list(dict.fromkeys([label, canonical_scheme(label)]))
        found: list[Scheme] = []

        def add(schemes: list[Scheme]) -> None:
            found.extend(s for s in schemes if s not in found)

        for key in keys:
            exact = self.get(key)
            add([] if exact is None else [exact])
        add([s for s in self.schemes if s.kind == "pantheon-wrapper" and set(keys) & set(s.aliases)])
        if era is not None:
            add([s for s in self.schemes
                 if s.port_of is not None and s.port_of.label in keys and era in s.port_of.eras])
        add([s for s in self.schemes if set(keys) & set(s.aliases)])
        return found

    def resolve(self, label: str, era: str | None = None, substitutes: bool = True) -> Scheme:
        """The available scheme that runs for `label` in `era`, or an InputError saying why none
        can. A scheme named exactly `label` is the program that was measured; otherwise, without
        `substitutes`, only a faithful implementation will do."""
        exact = self.get(label)
        if exact is not None and exact.available:
            return exact  # the very program the label names (a data dir this project made)
        candidates = self.candidates(label, era)
        available = [s for s in candidates if s.available]
        # faithful first; among the rest a port of what Pantheon ran before a stand-in
        unfaithful = sorted((s for s in available if not s.faithful), key=lambda s: s.port_of is None)
        usable = [s for s in available if s.faithful] + (unfaithful if substitutes else [])
        if usable:
            return usable[0]
        in_era = "" if era is None else f" ({ERAS[era]} era)"
        # nothing available is faithful here: the first unfaithful one runs when the label is named
        instead = "" if not unfaithful else (
            f"{unfaithful[0].name} stands in ({unfaithful[0].difference()}); name {label} in "
            "--schemes to score it anyway")
        impossible = impossibility(label, era)
        if impossible is not None:
            # the registry file's reason, with its evidence; a stand-in, if any, only when named
            raise InputError(impossible.message() + (f"; {instead}" if instead else ""))
        if instead:
            raise InputError(f"no faithful implementation of {label!r}{in_era} here; {instead}")
        if candidates:
            why = "; ".join(f"{s.name}: {s.unavailable_reason}" for s in candidates)
            raise InputError(f"scheme {label!r}{in_era} is not available on this host ({why})")
        raise InputError(f"unknown scheme {label!r}; available here: {', '.join(self.labels())} "
                         "(see `calibrate schemes`)")

    def labels(self) -> list[str]:
        return [s.name for s in self.available()]

    def select(self, spec: str) -> list[tuple[str, Scheme]]:
        """`a,b,c` or `all` (every available scheme) as (label, scheme) pairs in the given order.
        The label names the scheme's files in a data dir, as Pantheon's `--schemes` does."""
        if spec.strip() == "all":
            return [(s.name, s) for s in self.available()]
        labels = [part.strip() for part in spec.replace(" ", ",").split(",") if part.strip()]
        if not labels:
            raise InputError("no scheme given: use --schemes a,b,c or --schemes all")
        duplicates = sorted({label for label in labels if labels.count(label) > 1})
        if duplicates:
            raise InputError(f"scheme {duplicates[0]!r} is listed twice in --schemes")
        return [(label, self.resolve(label)) for label in labels]


# ----------------------------------------------------------------------------------------------
# Built-in schemes (calibrate-scheme)


def builtin_schemes() -> list[Scheme]:
    """The registry file's implemented schemes, with availability (and this host's description)
    from `calibrate-scheme list --json`.  A scheme calibrate-scheme offers but the file lacks
    (another kernel congestion control) is added without aliases, so a new kernel module needs
    no change here."""
    try:
        program = str(binaries.find(SCHEME_PROGRAM))
        listed = {item["name"]: item for item in _list_builtins(program)}
        missing_reason = f"{SCHEME_PROGRAM} does not know it; reinstall the package (pip install -e .)"
    except EnvironmentProblem as problem:
        program, listed, missing_reason = SCHEME_PROGRAM, {}, str(problem)
    schemes = []
    for entry in implemented():
        assert entry.implementation is not None
        item = listed.pop(entry.name, None) or {}
        schemes.append(Scheme(
            name=entry.name,
            run_first=item.get("run_first", entry.implementation.run_first),
            program=(program, entry.name),
            aliases=entry.labels,
            description=item.get("description", entry.implementation.description),
            note=entry.note,
            kind=item.get("kind", entry.implementation.kind),
            available=bool(item.get("available")),
            unavailable_reason=item.get("unavailable_reason") if item else missing_reason,
            port_of=entry.port_of, fidelity=entry.fidelity, busy_wait=bool(item.get("busy_wait"))))
    for name, item in listed.items():
        schemes.append(Scheme(name, item["run_first"], (program, name), (), item.get("description", ""),
                              "not one of Pantheon's schemes", item.get("kind", ""),
                              bool(item.get("available")), item.get("unavailable_reason")))
    return schemes


def _list_builtins(program: str) -> list[dict]:
    try:
        out = subprocess.run([program, "list", "--json"], capture_output=True, text=True, timeout=30, check=True)
        return json.loads(out.stdout)
    except (subprocess.SubprocessError, OSError, json.JSONDecodeError) as error:
        raise EnvironmentProblem(f"`{program} list --json` failed ({_last_line(error)}); "
                                 "reinstall the package (pip install -e .)") from None


# ----------------------------------------------------------------------------------------------
# Pantheon wrappers


def default_interpreter() -> str:
    """Pantheon's wrappers are Python 2.7 scripts: `python2` where one actually runs (a pyenv
    shim may exist without a Python 2 behind it), else `python3` (enough for wrappers that do
    not use Python 2 syntax)."""
    for name in ("python2", "python3"):
        path = shutil.which(name)
        if path and _runs(path):
            return path
    return sys.executable


def _runs(interpreter: str) -> bool:
    try:
        return subprocess.run([interpreter, "-c", "pass"], capture_output=True, timeout=10).returncode == 0
    except (subprocess.SubprocessError, OSError):
        return False


def wrappers_dir(pantheon_dir: Path | str) -> Path:
    directory = Path(pantheon_dir).expanduser()
    wrappers = directory / "src" / "wrappers"
    if not wrappers.is_dir():
        raise InputError(f"{directory} is not a Pantheon checkout (no src/wrappers/ in it); give the "
                         "directory you cloned StanfordSNR/pantheon into")
    return wrappers


def pantheon_schemes(pantheon_dir: Path | str, interpreter: str | None = None) -> list[Scheme]:
    """One scheme per `src/wrappers/<key>.py`, with its order from the wrapper's `run_first`.
    A wrapper that cannot answer `run_first` (missing module, interpreter, setup) is listed as
    unavailable with its error."""
    wrappers = wrappers_dir(pantheon_dir)
    python = interpreter or default_interpreter()
    if not (shutil.which(python) or Path(python).is_file()):
        raise InputError(f"interpreter {python!r} for Pantheon's wrappers not found; give one with "
                         "--pantheon-python (Pantheon's wrappers are Python 2.7 scripts)")
    scripts = sorted(p for p in wrappers.glob("*.py") if p.stem not in PANTHEON_HELPERS)
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda p: _ask_run_first(python, p), scripts))
    return [Scheme(name=PANTHEON_PREFIX + script.stem, run_first=run_first or "receiver",
                   program=(python, str(script.resolve())), aliases=(script.stem,),
                   description=f"Pantheon's wrapper {script}, run with {python}",
                   note=None, kind="pantheon-wrapper", available=run_first is not None,
                   unavailable_reason=reason)
            for script, (run_first, reason) in zip(scripts, answers, strict=True)]


def _ask_run_first(python: str, script: Path) -> tuple[Side | None, str | None]:
    try:
        out = subprocess.run([python, str(script), "run_first"], capture_output=True, text=True,
                             timeout=RUN_FIRST_TIMEOUT_S, cwd=script.parent)
    except subprocess.TimeoutExpired:
        return None, f"`{script.name} run_first` did not answer in {RUN_FIRST_TIMEOUT_S:g} s"
    except OSError as error:
        return None, f"cannot run {python}: {error.strerror or error}"
    answer = out.stdout.strip()
    if out.returncode == 0 and answer in SIDES:
        return answer, None
    detail = _last_line(out.stderr) or f"printed {answer!r}"
    return None, f"`{script.name} run_first` failed ({detail}); run Pantheon's setup for it"


def _last_line(text: object) -> str:
    lines = str(text).strip().splitlines()
    return lines[-1].strip() if lines else ""


# ----------------------------------------------------------------------------------------------


def load_registry(pantheon_dir: Path | str | None = None, interpreter: str | None = None) -> Registry:
    """The built-in schemes, plus a Pantheon checkout's wrappers when `pantheon_dir` is given.
    A wrapper runs the upstream program itself, so where the registry says that program keeps a
    core busy (`PortOf.busy_wait`: UDT's send queue in pcc, vivace and pcc_experimental, whose
    ports spin as well; verus's sending thread, whose port sleeps) it asks for a whole core."""
    schemes = builtin_schemes()
    if pantheon_dir is not None:
        spinning = {s.port_of.label for s in schemes if s.port_of is not None and s.port_of.busy_wait}
        schemes += [replace(w, busy_wait=True) if spinning & set(w.aliases) else w
                    for w in pantheon_schemes(pantheon_dir, interpreter)]
    return Registry(tuple(schemes))


__all__ = ["Scheme", "Registry", "load_registry", "builtin_schemes", "pantheon_schemes",
           "default_interpreter", "PEER", "Side"]
