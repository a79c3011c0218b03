"""An optimizer's reproducible random streams: 32-bit seeds from its seed and state sizes, and
scrambled Sobol designs (`calibrate.optimizers.base` says why proposals must be reproducible)."""

from __future__ import annotations

import warnings

import numpy as np


def stream_seed(*parts: int) -> int:
    """A 32-bit seed from the optimizer's seed and the state sizes (reproducible streams)."""
    return int(np.random.SeedSequence([abs(int(p)) for p in parts]).generate_state(1)[0])


def sobol(dim: int, seed: int, n: int) -> np.ndarray:
    """The first n points of the scrambled Sobol sequence for `seed`."""
    from scipy.stats import qmc

    engine = qmc.Sobol(dim, scramble=True, seed=seed)
    with warnings.catch_warnings():
        # balance is a property of the whole design, which a run does not always use up
        warnings.simplefilter("ignore", UserWarning)
        return engine.random(n)
