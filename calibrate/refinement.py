"""The final local refinement of a search: the incumbent's neighbours, one step along one parameter.

A GP search over the unit cube treats the integer delay and queue as continuous: it may settle a
millisecond or a few packets off the best integers, or on a small-scale dip its smooth model
does not resolve.  When a search's global phase ends (the loop's rule, `calibrate.runs.controller`:
its last `REFINE_SHARE` of the budget, or earlier when its model rules out improvement
elsewhere), its remaining evaluations go to the incumbent's neighbours:

- delay ±1 and ±2 ms (the parameter is searched linearly, in whole ms);
- queue, rate and loss one and two relative steps down and up on their log scales
  (÷ or × (1 + s)); the queue's k-th step moves it at least k whole packets, so a small queue's
  neighbours are the neighbouring integers (the steps: each parameter's `refinement_steps`,
  `calibrate.parameters`);
- clipped to the bounds; a step that does not move the parameter (a bound, loss 0) is dropped,
  and so is a neighbour whose emulator has already been evaluated or is running (compared as
  parameter values: the search's own points are not on the integers' canonical coordinates).

The optimizer picks among them (`Optimizer.ask_among`: the lowest posterior mean first), so a
refinement proposal is, like every proposal, a pure function of the history and the pending
points, and a resumed run proposes the same ones.  The neighbourhood moves with the incumbent.
"""

from __future__ import annotations

import numpy as np

from calibrate.optimizers import Optimizer
from calibrate.parameters import PARAMETER_TABLE
from calibrate.space import Parameter, SearchSpace

#: Significant digits to which two parameter values are the same emulator.
SAME_VALUE_DIGITS = 12


def _step(p: Parameter, value: float, size: float, direction: int, k: int) -> float:
    """`value` moved by the k-th step of `size` (1-based) in `direction` (±1), before clipping."""
    moved = value + direction * size if p.scale == "linear" else value * (1.0 + size) ** direction
    if p.integer:
        moved = max(round(moved), value + k) if direction > 0 else min(round(moved), value - k)
    return float(moved)


def _key(space: SearchSpace, u: np.ndarray) -> tuple[float, ...]:
    return tuple(float(f"{v:.{SAME_VALUE_DIGITS}g}") for v in space.decode(u)[0])


def neighbours(space: SearchSpace, x: np.ndarray) -> list[np.ndarray]:
    """Unit-cube points one step from x along one free parameter (module docstring), the small
    steps first, each parameter down then up."""
    values = space.to_values(x)
    center = _key(space, x)
    out: list[np.ndarray] = []
    seen = {center}
    for k in range(max(len(p.refinement_steps) for p in PARAMETER_TABLE.values())):
        for name in space.free:
            p = space.parameter(name)
            for direction in (-1, 1):
                size = PARAMETER_TABLE[name].refinement_steps[k]
                moved = {**values, name: _step(p, float(values[name]), size, direction, k + 1)}
                u = space.from_values(moved, clip=True)
                key = _key(space, u)
                if key not in seen:
                    seen.add(key)
                    out.append(u)
    return out


def propose(optimizer: Optimizer, space: SearchSpace, n: int = 1) -> list[np.ndarray]:
    """Up to n refinement points around the optimizer's incumbent, pending once returned; none
    when every neighbour has been evaluated or is running."""
    xs, _, _ = optimizer.history
    used = {_key(space, u) for u in [*xs, *optimizer.pending]}
    fresh = [u for u in neighbours(space, optimizer.best().x) if _key(space, u) not in used]
    return optimizer.ask_among(fresh, n) if fresh else []
