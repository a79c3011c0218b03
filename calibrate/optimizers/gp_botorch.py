"""GP Bayesian optimization with GPyTorch through BoTorch: the service's default optimizer.

Model: `SingleTaskGP` on the unit cube (the space's map already normalizes the inputs), outcome
standardized (`Standardize`), BoTorch's default dimension-scaled priors, fitted by maximum
marginal likelihood (`fit_gpytorch_mll`).  Noise: by default a homoskedastic observation noise
*fitted* with the other hyperparameters — the delta-method standard error from 3 replicates is
itself rough and misses the target's own noise; ``noise_model="fixed"`` uses the reported noise
per point instead (heteroskedastic, falls back to fitted when any is missing).

Acquisition: batch `qLogNoisyExpectedImprovement` (the log form is numerically well behaved when
improvements are tiny) over all free slots at once, with the still-running points as
`X_pending`, so asynchronous batches do not re-propose what is being evaluated.  BoTorch
maximizes, so the model is fit to −f.

Outcome warping (``outcome="log"``, the default): the GP models −log(f + c), c = `LOG_OFFSET`.
f spans two orders of magnitude over a search space (70 % at a wrong corner, 0.2 % at the true
emulator of a synthetic target, whose runs are nearly deterministic); on raw f a stationary GP
spends its variance on the bad corners and sees the basin as flat.  On the log scale the basin
keeps its contrast.  The argmin is the same; posterior means are mapped back (exp, the median of
the log-normal), and the stop and range rules (`calibrate.optimizers.rules`) make their Gaussian
statements on the log scale (`OutcomeScale`).
``outcome="raw"`` models f itself.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np

with warnings.catch_warnings():
    # GPyTorch's linear_operator applies `torch.jit.script` to a few functions as it is
    # imported, and torch (2.10+) deprecates that with a FutureWarning on every import: nothing a
    # user of calibrate can act on.  Only that warning, only while these libraries load.
    warnings.filterwarnings("ignore", message=r"`torch\.jit\.script` is deprecated",
                            category=FutureWarning, module=r"torch\.jit\._script")
    import torch
    from botorch.acquisition.analytic import LogExpectedImprovement
    from botorch.acquisition.logei import qLogNoisyExpectedImprovement
    from botorch.fit import fit_gpytorch_mll
    from botorch.models import SingleTaskGP
    from botorch.models.transforms.outcome import Standardize
    from botorch.optim import optimize_acqf
    from botorch.posteriors import GPyTorchPosterior
    from botorch.sampling.normal import SobolQMCNormalSampler
    from gpytorch.mlls import ExactMarginalLogLikelihood

from calibrate.optimizers.base import Optimizer, OutcomeScale, choice
from calibrate.optimizers.streams import stream_seed

_DTYPE = torch.float64  # GP linear algebra in single precision is fragile at these sizes

#: smallest variance given to a reported noise, relative to f's units squared
_MIN_YVAR = 1e-6

#: c in the log warping −log(f + c), percentage points: keeps noise-level differences near
#: f = 0 from being blown up
LOG_OFFSET = 0.5


class BoTorchGP(Optimizer):
    """GP + batch qLogNEI (see module docstring).  `num_restarts`/`raw_samples`/`mc_samples`
    trade proposal quality for time: the defaults suit 4 dimensions and evaluations of minutes."""

    name = "gpytorch"

    def __init__(
        self,
        dim: int,
        *,
        seed: int = 0,
        warm_start: Sequence[np.ndarray] = (),
        n_initial: int | None = None,
        noise_model: str = "fitted",
        outcome: str = "log",
        num_restarts: int = 8,
        raw_samples: int = 256,
        mc_samples: int = 128,
    ) -> None:
        super().__init__(dim, seed=seed, warm_start=warm_start, n_initial=n_initial)
        self.noise_model = choice("noise_model", noise_model, ("fitted", "fixed"))
        self.outcome = choice("outcome", outcome, ("log", "raw"))
        self.scale = OutcomeScale(LOG_OFFSET if self.outcome == "log" else None)
        self.num_restarts = int(num_restarts)
        self.raw_samples = int(raw_samples)
        self.mc_samples = int(mc_samples)
        self._model: SingleTaskGP | None = None

    # -- model

    def _invalidate(self) -> None:
        self._model = None

    @contextmanager
    def _seeded(self, purpose: int) -> Iterator[None]:
        """A private torch RNG stream for this history size; the global stream is untouched."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(stream_seed(self.seed, purpose, len(self._y), len(self._pending)))
            yield

    def _fit(self) -> SingleTaskGP:
        if self._model is None:
            self._model = self._fit_on(tuple(range(self.dim)))
        return self._model

    def _fit_on(self, inputs: tuple[int, ...]) -> SingleTaskGP:
        """The model fitted on the unit cube's coordinates `inputs` of the evaluations."""
        xs = np.array(self._x)
        train_x = torch.tensor(xs if len(inputs) == self.dim else xs[:, list(inputs)], dtype=_DTYPE)
        f = np.array(self._y, dtype=float)
        y, noise = self.scale.g(f), self.scale.se(f, np.array(self._noise, dtype=float))
        train_y = -torch.tensor(y, dtype=_DTYPE).unsqueeze(-1)
        train_yvar = None
        if self.noise_model == "fixed" and np.all(np.isfinite(noise)):
            train_yvar = torch.tensor(np.maximum(noise**2, _MIN_YVAR), dtype=_DTYPE).unsqueeze(-1)
        with self._seeded(2):  # fit_gpytorch_mll retries from random prior draws when it fails
            model = SingleTaskGP(train_x, train_y, train_yvar, outcome_transform=Standardize(m=1))
            fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
        return model

    def _log_evidence(self, inputs: tuple[int, ...]) -> float:
        # the fitted objective, priors included, summed over the evaluations; every subset's
        # model sees the same standardized outcomes, so the values compare
        model = self._fit() if len(inputs) == self.dim else self._fit_on(inputs)
        mll = ExactMarginalLogLikelihood(model.likelihood, model)
        model.train()
        try:
            with torch.no_grad():
                value = mll(model(*model.train_inputs), model.train_targets)
        finally:
            model.eval()
        return float(value) * len(self._y)

    def _unit_bounds(self) -> torch.Tensor:
        return torch.stack([torch.zeros(self.dim, dtype=_DTYPE), torch.ones(self.dim, dtype=_DTYPE)])

    # -- the hooks

    def _propose(self, n: int, pending: np.ndarray) -> list[np.ndarray]:
        model = self._fit()
        with self._seeded(3):
            acq = qLogNoisyExpectedImprovement(
                model,
                X_baseline=torch.tensor(np.array(self._x), dtype=_DTYPE),
                X_pending=torch.tensor(pending, dtype=_DTYPE) if len(pending) else None,
                sampler=SobolQMCNormalSampler(torch.Size([self.mc_samples]),
                                              seed=stream_seed(self.seed, 4, len(self._y))),
                prune_baseline=True,
            )
            candidates, _ = optimize_acqf(acq, bounds=self._unit_bounds(), q=n,
                                          num_restarts=self.num_restarts,
                                          raw_samples=self.raw_samples)
        return list(candidates.detach().numpy())

    def _latent(self, xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        model = self._fit()
        with torch.no_grad():  # each point its own one-point posterior: no n × n covariance
            posterior = model.posterior(torch.tensor(xs, dtype=_DTYPE).unsqueeze(-2))
            mean = -posterior.mean.reshape(-1).numpy()  # the model is fit to −g
            sd = posterior.variance.clamp_min(0.0).sqrt().reshape(-1).numpy()
        return mean, sd

    def _latent_difference(self, xs: np.ndarray, x0: np.ndarray) -> np.ndarray:
        model = self._fit()
        points = torch.tensor(xs, dtype=_DTYPE)
        pairs = torch.stack([torch.tensor(x0, dtype=_DTYPE).expand_as(points), points], dim=1)
        with torch.no_grad():  # one 2-point joint posterior per x: (n, 2, 2) covariances
            posterior = model.posterior(pairs)
            assert isinstance(posterior, GPyTorchPosterior)  # Standardize untransforms to one
            cov = posterior.mvn.covariance_matrix
        variance = cov[:, 0, 0] + cov[:, 1, 1] - 2.0 * cov[:, 0, 1]
        return variance.clamp_min(0.0).sqrt().numpy()

    def _max_expected_improvement(self) -> float:
        """Analytic EI of one point against the incumbent's estimate (`estimates`: the plug-in
        incumbent for noisy observations), maximized over the cube."""
        model = self._fit()
        best = float(self.scale.g(np.min(self.estimates())))
        with self._seeded(5):
            _, value = optimize_acqf(LogExpectedImprovement(model, best_f=-best),
                                     bounds=self._unit_bounds(), q=1,
                                     num_restarts=self.num_restarts, raw_samples=self.raw_samples)
        assert value is not None  # None only with return_acq_values=False
        # an improvement of the model's outcome, expressed in f's units at the incumbent
        return float(self.scale.f(best) - self.scale.f(best - math.exp(float(value))))
