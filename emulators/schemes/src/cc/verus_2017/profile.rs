//! Verus's delay profile: a penalised regression spline through the (window, delay) points.
//!
//! Upstream (verus_server.cpp, delayProfile_thread) calls ALGLIB's `spline1dfitpenalized(x, y,
//! M, 2.0)`; the ALGLIB source bundled with verus (lib/alglib, 3.9.0, interpolation.cpp:
//! spline1dfitpenalizedw and lsfitscalexy) defines it as follows, and [`fit`] computes exactly
//! that, with nalgebra's matrix products, LU and Cholesky for the numerics:
//!
//! * x is mapped onto [-1, 1] (`t = 2 (x - (xa + xb) / 2) / (xb - xa)`, xa, xb its extremes;
//!   equal extremes are pulled apart as lsfitscalexy does), y onto `z = (y - sa) / (sb - sa)`
//!   with sa the mean and sb - sa the population standard deviation (0 replaced as there);
//! * the basis is the M natural cubic splines (second derivative 0 at both ends) that are 1 at
//!   one of M equidistant nodes `2j / (M - 1) - 1` and 0 at the others; F[i][b] is basis b at
//!   point i;
//! * the penalty matrix is `A[i][j] = ∫ B_i'' B_j''` over [-1, 1] (exact: the second
//!   derivatives are piecewise linear), scaled by `pdecay = 10^rho · max_b Σ_i F[i][b]² /
//!   max_i A[i][i]`, plus a Tikhonov term `tdecay = fdmax · (1 + pdecay) · 10 · 5e-16`;
//! * the node values c solve `(FᵀF + pdecay A + tdecay I) c = Fᵀ z` (Cholesky);
//! * the fitted curve is the natural cubic spline through (node, c) inside [-1, 1] and its
//!   tangent line outside (ALGLIB adds a node on each side to force linearity there), mapped
//!   back to x and y.

use nalgebra::{DMatrix, DVector};

/// ALGLIB's `ae_machineepsilon`.
const ALGLIB_EPSILON: f64 = 5e-16;

/// A fitted profile: delay (ms) as a function of the window (packets).
#[derive(Clone, Debug)]
pub struct Profile {
    /// Node abscissas in [-1, 1].
    nodes: Vec<f64>,
    /// Spline values at the nodes (scaled y).
    values: Vec<f64>,
    /// Second derivatives at the nodes (0 at both ends).
    second: Vec<f64>,
    /// x -> t: t = x_scale · x + x_shift.
    x_scale: f64,
    x_shift: f64,
    /// z -> y: y = sa + (sb - sa) · z.
    sa: f64,
    sb: f64,
}

/// The fit could not be made (upstream: an ALGLIB exception or a failed Cholesky).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FitError(pub &'static str);

/// Value and slope of the natural cubic spline on segment `j` at `t`.
fn segment_eval(nodes: &[f64], values: &[f64], second: &[f64], j: usize, t: f64) -> (f64, f64) {
    let h = nodes[j + 1] - nodes[j];
    let a = (nodes[j + 1] - t) / h;
    let b = 1.0 - a;
    let v = a * values[j]
        + b * values[j + 1]
        + ((a * a * a - a) * second[j] + (b * b * b - b) * second[j + 1]) * h * h / 6.0;
    let d = (values[j + 1] - values[j]) / h - (3.0 * a * a - 1.0) / 6.0 * h * second[j]
        + (3.0 * b * b - 1.0) / 6.0 * h * second[j + 1];
    (v, d)
}

/// The segment of `nodes` (equidistant) that holds `t`, clamped to the first and last.
fn segment_of(nodes: &[f64], t: f64) -> usize {
    let m = nodes.len();
    let h = (nodes[m - 1] - nodes[0]) / (m - 1) as f64;
    let mut j = (((t - nodes[0]) / h).floor().max(0.0) as usize).min(m - 2);
    // Guard against rounding at a node.
    while j > 0 && t < nodes[j] {
        j -= 1;
    }
    while j < m - 2 && t >= nodes[j + 1] {
        j += 1;
    }
    j
}

/// The linear map from node values to the natural spline's second derivatives at the nodes.
fn natural_second_derivatives(nodes: &[f64]) -> DMatrix<f64> {
    let m = nodes.len();
    let mut lhs = DMatrix::<f64>::zeros(m, m);
    let mut rhs = DMatrix::<f64>::zeros(m, m);
    lhs[(0, 0)] = 1.0;
    lhs[(m - 1, m - 1)] = 1.0;
    for j in 1..m - 1 {
        let h0 = nodes[j] - nodes[j - 1];
        let h1 = nodes[j + 1] - nodes[j];
        lhs[(j, j - 1)] = h0 / 6.0;
        lhs[(j, j)] = (h0 + h1) / 3.0;
        lhs[(j, j + 1)] = h1 / 6.0;
        rhs[(j, j - 1)] = 1.0 / h0;
        rhs[(j, j)] = -1.0 / h0 - 1.0 / h1;
        rhs[(j, j + 1)] = 1.0 / h1;
    }
    lhs.lu().solve(&rhs).expect("the natural-spline system is diagonally dominant")
}

/// ALGLIB's `spline1dfitpenalized(x, y, m, rho)` (unit weights). `x` need not be sorted.
pub fn fit(x: &[f64], y: &[f64], m: usize, rho: f64) -> Result<Profile, FitError> {
    let n = x.len();
    if n < 1 || y.len() != n {
        return Err(FitError("no points"));
    }
    if m < 4 {
        return Err(FitError("M < 4"));
    }
    if x.iter().chain(y).any(|v| !v.is_finite()) || !rho.is_finite() {
        return Err(FitError("non-finite input"));
    }
    let bound = -ALGLIB_EPSILON.log10();
    let lambda = 10f64.powf(rho.clamp(-bound, bound));

    // Scaling (lsfitscalexy).
    let (mut xa, mut xb) = x.iter().fold((x[0], x[0]), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    if xa == xb {
        if xa == 0.0 {
            (xa, xb) = (-1.0, 1.0);
        } else if xa > 0.0 {
            xa *= 0.5;
        } else {
            xb *= 0.5;
        }
    }
    let sa = y.iter().sum::<f64>() / n as f64;
    let mut sb = (y.iter().map(|v| (v - sa) * (v - sa)).sum::<f64>() / n as f64).sqrt() + sa;
    if sb == sa {
        sb = 2.0 * sa;
    }
    if sb == sa {
        sb = sa + 1.0;
    }
    let t: Vec<f64> = x.iter().map(|&v| 2.0 * (v - 0.5 * (xa + xb)) / (xb - xa)).collect();
    let z = DVector::from_iterator(n, y.iter().map(|&v| (v - sa) / (sb - sa)));

    // Basis: natural cubic splines on M equidistant nodes.
    let nodes: Vec<f64> = (0..m).map(|j| (2 * j) as f64 / (m - 1) as f64 - 1.0).collect();
    let d2 = natural_second_derivatives(&nodes);
    let mut f = DMatrix::<f64>::zeros(n, m);
    for (i, &ti) in t.iter().enumerate() {
        let j = segment_of(&nodes, ti);
        let h = nodes[j + 1] - nodes[j];
        let a = (nodes[j + 1] - ti) / h;
        let b = 1.0 - a;
        let ca = (a * a * a - a) * h * h / 6.0;
        let cb = (b * b * b - b) * h * h / 6.0;
        for col in 0..m {
            f[(i, col)] = ca * d2[(j, col)] + cb * d2[(j + 1, col)];
        }
        f[(i, j)] += a;
        f[(i, j + 1)] += b;
    }
    let fdmax = f.column_iter().map(|c| c.norm_squared()).fold(0.0, f64::max);

    // Penalty: the Gram matrix of piecewise-linear second derivatives.
    let mut gram = DMatrix::<f64>::zeros(m, m);
    for j in 0..m - 1 {
        let h = nodes[j + 1] - nodes[j];
        gram[(j, j)] += h / 3.0;
        gram[(j + 1, j + 1)] += h / 3.0;
        gram[(j, j + 1)] += h / 6.0;
        gram[(j + 1, j)] += h / 6.0;
    }
    let penalty = d2.transpose() * &gram * &d2;
    let admax = penalty.diagonal().iter().fold(0.0f64, |acc, v| acc.max(v.abs()));
    let pdecay = lambda * fdmax / admax;
    let tdecay = fdmax * (1.0 + pdecay) * 10.0 * ALGLIB_EPSILON;

    let normal = f.transpose() * &f + penalty * pdecay + DMatrix::<f64>::identity(m, m) * tdecay;
    let rhs = f.transpose() * z;
    let chol = normal.cholesky().ok_or(FitError("Cholesky failed (info -4)"))?;
    let c = chol.solve(&rhs);
    let second = (&d2 * &c).iter().copied().collect();
    Ok(Profile {
        nodes,
        values: c.iter().copied().collect(),
        second,
        x_scale: 2.0 / (xb - xa),
        x_shift: -(xa + xb) / (xb - xa),
        sa,
        sb,
    })
}

impl Profile {
    /// The fitted delay (ms) at window `w` (ALGLIB's spline1dcalc of the fit).
    pub fn delay_at(&self, w: f64) -> f64 {
        let t = self.x_scale * w + self.x_shift;
        let last = self.nodes.len() - 1;
        let z = if t < self.nodes[0] {
            let (v, d) = segment_eval(&self.nodes, &self.values, &self.second, 0, self.nodes[0]);
            v + d * (t - self.nodes[0])
        } else if t > self.nodes[last] {
            let (v, d) = segment_eval(&self.nodes, &self.values, &self.second, last - 1, self.nodes[last]);
            v + d * (t - self.nodes[last])
        } else {
            segment_eval(&self.nodes, &self.values, &self.second, segment_of(&self.nodes, t), t).0
        };
        self.sa + (self.sb - self.sa) * z
    }
}
