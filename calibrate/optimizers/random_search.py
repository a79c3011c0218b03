"""Random search: the baseline every model-based optimizer must beat.

Points come from one scrambled Sobol sequence per seed (low discrepancy: fewer wasted points than
uniform draws at these budgets) or, with ``sequence="uniform"``, from uniform draws.  There is no
model, so `best()` is the lowest observation, the stop rule never fires (random search uses its
budget) and no range of indistinguishable values is claimed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from calibrate.optimizers.base import Optimizer, choice, find_point
from calibrate.optimizers.streams import stream_seed


class RandomSearch(Optimizer):
    """Sobol (default) or uniform random search behind the ask/tell contract."""

    name = "random"
    min_observations = 0
    model_based = False

    def __init__(
        self,
        dim: int,
        *,
        seed: int = 0,
        warm_start: Sequence[np.ndarray] = (),
        sequence: str = "sobol",
        **_ignored: Any,  # n_initial: meaningless without a model
    ) -> None:
        super().__init__(dim, seed=seed, warm_start=warm_start, n_initial=0)
        self.sequence = choice("sequence", sequence, ("sobol", "uniform"))

    def _propose(self, n: int, pending: np.ndarray) -> list[np.ndarray]:
        if self.sequence == "uniform":
            rng = np.random.default_rng(stream_seed(self.seed, 8, len(self._y), len(pending)))
            return list(rng.random((n, self.dim)))
        used = self._x + list(pending)
        out: list[np.ndarray] = []
        for d in self._design(len(used) + n):
            if len(out) == n:
                break
            if find_point(d, used + out) < 0:
                out.append(d)
        return out
