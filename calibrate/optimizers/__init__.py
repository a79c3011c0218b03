"""Optimizers behind one ask/tell interface (contract: `calibrate.optimizers.base`).

- ``gpytorch``: GPyTorch GP through BoTorch, batch qLogNEI (`gp_botorch.BoTorchGP`), the default;
- ``skopt``: scikit-optimize GP + EI, the Spearmint-like baseline (`gp_skopt.SkoptGP`);
- ``random``: Sobol or uniform random search (`random_search.RandomSearch`).

The statistical rules a model-based search applies (stop, range, relevance) are
`calibrate.optimizers.rules`; the seeded random streams every optimizer draws from,
`calibrate.optimizers.streams`.  The heavy libraries (torch, scikit-learn) are imported only when
that optimizer is made.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from calibrate.errors import InputError
from calibrate.optimizers.base import Best, Optimizer

#: CLI name -> (module, class)
OPTIMIZERS: dict[str, tuple[str, str]] = {
    "gpytorch": ("calibrate.optimizers.gp_botorch", "BoTorchGP"),
    "skopt": ("calibrate.optimizers.gp_skopt", "SkoptGP"),
    "random": ("calibrate.optimizers.random_search", "RandomSearch"),
}

__all__ = ["OPTIMIZERS", "Best", "Optimizer", "make_optimizer"]


def optimizer_class(name: str) -> type[Optimizer]:
    if name not in OPTIMIZERS:
        raise InputError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")
    module, cls = OPTIMIZERS[name]
    try:
        return getattr(importlib.import_module(module), cls)
    except ImportError as e:
        raise InputError(f"optimizer {name!r} needs a package that is not installed ({e.name}); "
                         f"install it, or choose another optimizer") from e


def make_optimizer(
    name: str,
    dim: int,
    *,
    seed: int = 0,
    warm_start: Sequence[np.ndarray] = (),
    **options: Any,
) -> Optimizer:
    """An optimizer by CLI name over [0, 1]^dim; options go to its constructor."""
    return optimizer_class(name)(dim, seed=seed, warm_start=warm_start, **options)
