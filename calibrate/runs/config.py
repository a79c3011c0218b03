"""What a run is asked to do (`RunConfig`, recorded in run.json and reused by `resume`), the
link kinds a run searches (`LINK_KINDS`), and the candidate emulator at a point of the space
with its search's seed (`emulator_seed`, `emulator_of`).

The problem derived from these settings and the target is `calibrate.runs.problem`; one
evaluation of a candidate (its runs and their score) is `calibrate.runs.evaluate`.

Seeds: each link kind's emulator seed is derived here from the run's seed, once per search
(`emulator_seed`): it is the candidates' trace seed (`EmulatorConfig.trace_seed`: the Poisson
trace, the same for every candidate of that search, so candidates differ only in their
parameters).  Replicate r of every candidate runs with loss seed emulator_seed·1000 + r
(`EmulatorConfig.for_run`, the one place it is derived: common random numbers across candidates,
independent across replicates).  Both are in every journal record ("seed", "loss_seeds").
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from calibrate.emulator import EmulatorConfig, Queue
from calibrate.engine import Backend
from calibrate.errors import InputError
from calibrate.parameters import PARAMETERS
from calibrate.scripted import MAX_RUNTIME_S

LINK_KINDS: tuple[str, ...] = ("constant", "poisson")


@dataclass(frozen=True)
class RunConfig:
    """What `calibrate run` was asked to do; stored in run.json and reused by `resume`."""

    target: str  # TARGET as given
    schemes: tuple[str, ...] = ()  # target labels or names to score; () = every one this host runs
    budget: int = 30  # evaluations per link kind
    optimizer: str = "gpytorch"
    runtime_s: float = 30.0  # seconds per run (Pantheon's -t)
    replicates: int = 3
    links: tuple[str, ...] = LINK_KINDS
    seed: int = 0
    time_limit_s: float | None = None  # wall-clock seconds for the whole calibration
    aggregate: str = "mean"
    include_loss: bool = False
    n_initial: int | None = None  # Sobol design size (default: `initial_design`)
    fixed: Mapping[str, float] = field(default_factory=dict)
    bounds: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    pantheon_dir: str | None = None  # a Pantheon checkout whose wrappers run the target's schemes
    pantheon_python: str | None = None  # their interpreter
    backend: str = "engine"  # what runs the emulations: our engine or the user's real Mahimahi
    mahimahi_user: str | None = None  # the account Mahimahi's shells run as

    def __post_init__(self) -> None:
        if self.budget < 1:
            raise InputError(f"--budget must be at least 1 evaluation per link kind, got {self.budget}")
        if self.replicates < 1:
            raise InputError(f"--replicates must be at least 1, got {self.replicates}")
        if not 0 < self.runtime_s <= MAX_RUNTIME_S:
            raise InputError(f"--runtime must be in (0, {MAX_RUNTIME_S:g}] seconds as Pantheon's -t, "
                             f"got {self.runtime_s}")
        if self.n_initial is not None and self.n_initial < 1:
            raise InputError(f"--n-initial must be at least 1, got {self.n_initial}")
        bad = [k for k in self.links if k not in LINK_KINDS]
        if bad or not self.links:
            got = f"unknown link kind {bad[0]!r}" if bad else "no link kind given"
            raise InputError(f"{got}: the link kinds are {' and '.join(LINK_KINDS)} (--links "
                             f"{LINK_KINDS[0]}, or --links {','.join(LINK_KINDS)} for both)")
        if self.time_limit_s is not None and not self.time_limit_s > 0:
            raise InputError(f"--time-limit must be positive seconds, got {self.time_limit_s}")
        if self.aggregate not in ("mean", "median"):
            raise InputError(f"--aggregate must be mean or median, got {self.aggregate!r}")
        self.emulation_backend()  # validates the pair
        if set(PARAMETERS) <= set(self.fixed):
            raise InputError(self._nothing_to_search())

    def _nothing_to_search(self) -> str:
        """What to do instead of a search whose every parameter is fixed: score that emulator."""
        text = (f"--fix fixes every parameter ({', '.join(f'{k}={self.fixed[k]:g}' for k in PARAMETERS)}):"
                f" nothing is left to search")
        try:
            emulator = emulator_of(self.fixed, self.links[0] if self.links else LINK_KINDS[0], 0)
        except (InputError, KeyError, TypeError, ValueError):
            return f"{text}; fix fewer parameters, or score an emulator with `calibrate score`"
        return (f"{text}; to measure that emulator, run `calibrate score {shlex.quote(self.target)} "
                f"--emulator {shlex.quote(emulator.mahimahi_command())}`, or fix fewer parameters")

    def emulation_backend(self) -> Backend:
        return Backend(self.backend, self.mahimahi_user)

    def initial_design(self, dim: int) -> int:
        """Sobol points after the warm start: `n_initial`, else 2·dim (the usual design for a GP
        in a few dimensions) but at most a quarter of the budget (at least 2), so a small budget
        still leaves most evaluations to the model — the warm start already places the search."""
        if self.n_initial is not None:
            return self.n_initial
        return min(2 * dim, max(2, self.budget // 4))

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["fixed"] = dict(self.fixed)
        data["bounds"] = {k: list(v) for k, v in self.bounds.items()}
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunConfig:
        d = dict(data)
        d["schemes"] = tuple(d.get("schemes", ()))
        d["links"] = tuple(d.get("links", LINK_KINDS))
        d["bounds"] = {k: (float(v[0]), float(v[1])) for k, v in d.get("bounds", {}).items()}
        return cls(**d)


# ----------------------------------------------------------------------------------------------
# Candidate emulators and their seeds


def emulator_seed(seed: int, link: str) -> int:
    """The emulator seed of one link kind's search (module docstring: Seeds)."""
    return int(np.random.SeedSequence([abs(int(seed)), LINK_KINDS.index(link)]).generate_state(1)[0]) % (1 << 24)


#: packets: a queue this deep is Mahimahi's default, no limit (an ablation's "unlimited queue"
#: step; the deepest queue a search space allows, `calibrate.space`)
UNLIMITED_QUEUE = 10_000_000


def emulator_of(values: Mapping[str, float], link: str, seed: int) -> EmulatorConfig:
    """The candidate emulator at a point of the space, with its search's emulator seed as its
    trace seed (each run then draws its own losses: `EmulatorConfig.for_run`)."""
    queue = Queue() if values["queue"] >= UNLIMITED_QUEUE else Queue.droptail(max(int(values["queue"]), 1))
    # link is one of LINK_KINDS (RunConfig checks them); EmulatorConfig checks it again
    return EmulatorConfig(rate_mbps=float(values["rate"]), delay_ms=int(values["delay"]), queue=queue,
                          uplink_loss=float(values["loss"]), link=link, trace_seed=seed)  # type: ignore[arg-type]
