"""The emulator's parameters x = <rate, delay, queue, loss>, declared once.

The Pantheon paper (USENIX ATC 2018, §5) calibrates four numbers per link kind: the bottleneck
link rate, the one-way propagation delay, the DropTail threshold of the sender's queue and the
i.i.d. uplink loss rate.  Everything a module needs to know about one of them is a field of its
`ParameterSpec` row in `PARAMETER_TABLE`:

- how it is stored and what an emulator accepts at all (`unit`, `integer`, `limits`);
- how it is searched (`scale`: the unit cube's map, `calibrate.space`);
- what a target says about its bounds (`bounds_rule`, in one line; `calibrate.physics`
  `bounds_from_target` computes it);
- how a person reads it (`label`, `display_unit`, `display_factor`: loss is stored as a
  fraction and shown in %);
- its key in emulator.json and in the studies' tables (`key`);
- the final refinement's steps around the incumbent (`refinement_steps`, `calibrate.refinement`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

Scale = Literal["linear", "log", "log1p"]


@dataclass(frozen=True)
class ParameterSpec:
    """One emulator parameter, as every module reads it."""

    name: str  # the paper's name, the key of a point of the space
    unit: str  # of the stored value
    integer: bool  # stored and searched in whole units
    limits: tuple[float, float]  # what an emulator can be configured with at all
    scale: Scale  # the coordinate in which it is searched linearly (`calibrate.space`)
    bounds_rule: str  # what a target's measurements say about its bounds (`calibrate.physics`)
    key: str  # its name in emulator.json and the studies' tables
    label: str  # its name for a person
    display_unit: str
    display_factor: float  # display value = stored value × display_factor
    #: the refinement's steps, smallest first: in `unit` on a linear scale, relative (× or ÷
    #: 1 + s) on a log scale (`calibrate.refinement`)
    refinement_steps: tuple[float, float]

    def shown(self, value: float) -> float:
        """The value as a person reads it (in `display_unit`)."""
        return value * self.display_factor


PARAMETER_TABLE: Mapping[str, ParameterSpec] = MappingProxyType({p.name: p for p in (
    ParameterSpec("rate", "Mbit/s", False, (1e-3, 1e5), "log",
              "the link logs' delivery capacity ± its counting noise; else from the highest "
              "throughput a scheme reached up to what a rate-probing scheme's busy link allows",
              "rate_mbps", "rate", "Mbit/s", 1.0, (0.02, 0.05)),
    ParameterSpec("delay", "ms", True, (0.0, 1e4), "linear",
              "0 up to the smallest delay any packet saw (the smallest p95, tightened by the logs)",
              "delay_ms", "delay", "ms", 1.0, (1.0, 2.0)),
    ParameterSpec("queue", "packets", True, (1.0, 1e7), "log",
              "1 up to 4 s of the rate's upper bound (at least 10 000); link logs pin both ends",
              "queue_packets", "queue", "packets", 1.0, (0.1, 0.25)),
    ParameterSpec("loss", "fraction", False, (0.0, 0.99), "log1p",
              "0 up to the least lossy scheme's loss plus its counting noise and scatter",
              "uplink_loss", "loss", "%", 100.0, (0.1, 0.25)),
)})

#: All parameters in canonical order (the order of `SearchSpace.decode`'s columns).
PARAMETERS: tuple[str, ...] = tuple(PARAMETER_TABLE)


def spec_of(name: str) -> ParameterSpec:
    """The row of `name`; a KeyError names the parameters."""
    try:
        return PARAMETER_TABLE[name]
    except KeyError:
        raise KeyError(f"unknown parameter {name!r}; the parameters are {', '.join(PARAMETERS)}") from None


def by_key(values: Mapping[str, Any]) -> dict[str, Any]:
    """A point {rate: …, delay: …} as emulator.json's and the tables' columns {rate_mbps: …}
    (a parameter absent from `values` is None)."""
    return {p.key: values.get(p.name) for p in PARAMETER_TABLE.values()}
