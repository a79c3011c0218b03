//! Sprout's statistics (keithw/alfalfa edcb255, src/sprout/): the receiver's belief about the
//! link's delivery rate and the forecast model built from it, written fresh from the upstream
//! math so that the numbers agree with upstream's `sprout.model` to rounding.
//!
//! The rate λ (packets of 1400 bytes per second, 0..1000) is kept as a pmf over upstream's
//! sampled grid: 256 bins of 1000/256 wide plus one more (257 values), bin 0 standing for
//! λ = 0 (an outage) and bin i > 0 for its midpoint. Between ticks the belief diffuses by
//! Brownian motion (σ = 200·√t, the Gaussian cdf read from a 32 768-bin table over
//! −1000..1000 exactly as upstream's cache), an outage is left at rate 1/s, and each tick's
//! arrival count multiplies in its Poisson likelihood (process.cc).

use std::sync::{Arc, OnceLock};

pub const MAX_ARRIVAL_RATE: f64 = 1000.0;
pub const BROWNIAN_MOTION_RATE: f64 = 200.0;
pub const OUTAGE_ESCAPE_RATE: f64 = 1.0;
pub const NUM_BINS: usize = 256;
pub const TICK_MS: u64 = 20;
pub const TICK_S: f64 = 0.001 * TICK_MS as f64;
pub const MAX_ARRIVALS_PER_TICK: usize = 30;
pub const NUM_TICKS: usize = 8;
/// The forecast's quantile: Sprout sends what it is 95 % sure the link will deliver.
pub const FORECAST_QUANTILE: f64 = 0.05;
/// Upstream's stand-in for ±infinity at the grid's ends (sampledfunction.hh `BIG`).
const BIG: f64 = 1.0e6;

/// A uniform grid of `len` samples over [offset, offset + width·(len−1)] with upstream's
/// binning rules (truncation, clamping, open outer bins).
#[derive(Clone, Copy, Debug)]
pub struct Grid {
    offset: f64,
    width: f64,
    len: usize,
}

impl Grid {
    /// Upstream's `SampledFunction(num_samples, maximum, minimum)`: one more sample than asked.
    pub fn new(num_samples: usize, maximum: f64, minimum: f64) -> Self {
        let width = (maximum - minimum) / num_samples as f64;
        let len = ((maximum - minimum) / width) as i64 as usize + 1;
        Self { offset: minimum, width, len }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn bin(&self, x: f64) -> usize {
        // C's int conversion truncates toward zero, so (−1, 0) lands in bin 0 as well.
        let r = ((x - self.offset) / self.width) as i64;
        r.clamp(0, self.len as i64 - 1) as usize
    }

    fn floor_of(&self, bin: usize) -> f64 {
        if bin == 0 {
            -BIG
        } else {
            bin as f64 * self.width + self.offset
        }
    }

    fn ceil_of(&self, bin: usize) -> f64 {
        if bin >= self.len - 1 {
            BIG
        } else {
            (bin + 1) as f64 * self.width + self.offset
        }
    }

    pub fn mid(&self, bin: usize) -> f64 {
        if bin == 0 {
            self.offset
        } else {
            (bin as f64 + 0.5) * self.width + self.offset
        }
    }
}

/// The rate grid of the receiver (`SampledFunction(256, 1000, 0)`: 257 values).
pub fn rate_grid() -> Grid {
    Grid::new(NUM_BINS, MAX_ARRIVAL_RATE, 0.0)
}

/// Poisson probability of `k` arrivals at mean `mean` (upstream's `poissonpdf`: a zero mean
/// gives certainty of zero arrivals).
pub fn poisson_pdf(mean: f64, k: u32) -> f64 {
    if mean == 0.0 {
        return if k == 0 { 1.0 } else { 0.0 };
    }
    if k == 0 {
        return (-mean).exp();
    }
    let k = k as f64;
    (k * mean.ln() - mean - libm::lgamma(k + 1.0)).exp()
}

/// The Gaussian cdf of the Brownian step, sampled as upstream's `GaussianCache`: the value at
/// x is Φ(midpoint of x's bin / σ) on a 32 768-bin grid over −1000..1000.
struct GaussianTable {
    grid: Grid,
    sigma: f64,
    cdf: Vec<f64>,
}

impl GaussianTable {
    fn new(sigma: f64) -> Self {
        let grid = Grid::new(NUM_BINS * 128, MAX_ARRIVAL_RATE, -MAX_ARRIVAL_RATE);
        let cdf =
            (0..grid.len()).map(|i| 0.5 * libm::erfc(-grid.mid(i) / (sigma * std::f64::consts::SQRT_2))).collect();
        Self { grid, sigma, cdf }
    }

    fn at(&self, x: f64) -> f64 {
        self.cdf[self.grid.bin(x)]
    }
}

/// The only step Sprout ever takes is one tick, so one table serves every process.
fn tick_gaussian() -> &'static GaussianTable {
    static TABLE: OnceLock<GaussianTable> = OnceLock::new();
    TABLE.get_or_init(|| GaussianTable::new(BROWNIAN_MOTION_RATE * TICK_S.sqrt()))
}

/// The belief about the delivery rate (upstream's `Process`).
#[derive(Clone, Debug)]
pub struct Process {
    grid: Grid,
    pmf: Vec<f64>,
    normalized: bool,
}

impl Default for Process {
    fn default() -> Self {
        Self::new()
    }
}

impl Process {
    /// Uniform over the 257 rate values.
    pub fn new() -> Self {
        let grid = rate_grid();
        let mut p = Self { grid, pmf: vec![1.0; grid.len()], normalized: false };
        p.normalize();
        p
    }

    pub fn pmf(&self) -> &[f64] {
        &self.pmf
    }

    pub fn grid(&self) -> Grid {
        self.grid
    }

    pub fn is_normalized(&self) -> bool {
        self.normalized
    }

    /// Brownian motion over `time` seconds, plus the escape from an outage (process.cc evolve).
    pub fn evolve(&mut self, time: f64) {
        self.normalized = false;
        let sigma = BROWNIAN_MOTION_RATE * time.sqrt();
        let owned;
        let gauss = if (sigma - tick_gaussian().sigma).abs() == 0.0 {
            tick_gaussian()
        } else {
            owned = GaussianTable::new(sigma);
            &owned
        };
        let zero_escape = 1.0 - poisson_pdf(time * OUTAGE_ESCAPE_RATE, 0);
        let g = self.grid;
        let mut new = vec![0.0; g.len()];
        for (old, &old_prob) in self.pmf.iter().enumerate() {
            let old_rate = g.mid(old);
            // for_range(old − 5σ, old + 5σ): from the floor of the low bin to the ceiling of the high.
            let lo = g.bin(g.floor_of(g.bin(old_rate - 5.0 * sigma)));
            let hi = g.bin(g.ceil_of(g.bin(old_rate + 5.0 * sigma)));
            for (j, slot) in new.iter_mut().enumerate().take(hi + 1).skip(lo) {
                let zfactor = if old == 0 {
                    if j != 0 {
                        zero_escape
                    } else {
                        1.0 - zero_escape
                    }
                } else {
                    1.0
                };
                let nb = g.bin(g.mid(j));
                *slot +=
                    zfactor * old_prob * (gauss.at(g.ceil_of(nb) - old_rate) - gauss.at(g.floor_of(nb) - old_rate));
            }
        }
        self.pmf = new;
    }

    /// Multiplies in the likelihood of `counts` arrivals in `time` seconds.
    pub fn observe(&mut self, time: f64, counts: u32) {
        self.normalized = false;
        let g = self.grid;
        for (i, v) in self.pmf.iter_mut().enumerate() {
            *v *= poisson_pdf(g.mid(i) * time, counts);
        }
    }

    pub fn normalize(&mut self) {
        if self.normalized {
            return;
        }
        let sum: f64 = self.pmf.iter().fold(0.0, |s, v| s + v);
        for v in &mut self.pmf {
            *v /= sum;
        }
        self.normalized = true;
    }

    /// Certainty of `rate`.
    pub fn set_certain(&mut self, rate: f64) {
        let hit = self.grid.bin(rate);
        for (i, v) in self.pmf.iter_mut().enumerate() {
            *v = if i == hit { 1.0 } else { 0.0 };
        }
        self.normalized = false;
        self.normalize();
    }

    /// Probability of `counts` arrivals in `time` seconds without evolution.
    pub fn count_probability(&self, time: f64, counts: u32) -> f64 {
        let g = self.grid;
        self.pmf.iter().enumerate().fold(0.0, |s, (i, p)| s + p * poisson_pdf(g.mid(i) * time, counts))
    }

    /// The rate below which the belief holds mass `x` (upstream's `lower_quantile`).
    pub fn lower_quantile(&self, x: f64) -> f64 {
        let mut sum = 0.0;
        for (i, v) in self.pmf.iter().enumerate() {
            sum += v;
            if sum >= x {
                return if i == 0 { 0.0 } else { self.grid.floor_of(i) };
            }
        }
        self.grid.floor_of(self.pmf.len() - 1)
    }
}

/// Σ_i ensemble[i] · table[i][count] (upstream's `SampledFunction::summation`).
fn summation(ensemble: &[f64], table: &[Vec<f64>], count: usize) -> f64 {
    ensemble.iter().zip(table).fold(0.0, |s, (p, row)| s + p * row[count])
}

/// For each of the next 1..=8 ticks, per certain rate, the distribution of the cumulative
/// number of arrivals (upstream's `ProcessForecastInterval`s, the `sprout.model` file).
#[derive(Clone, Debug)]
pub struct ForecastModel {
    /// intervals[t][component][count]: P(count arrivals in t+1 ticks | rate = component).
    intervals: Vec<Vec<Vec<f64>>>,
}

impl ForecastModel {
    /// The model upstream computes without SPROUT_MODEL_IN: tick 20 ms, ≤ 30 arrivals counted
    /// per tick, intervals of 1..=8 ticks. Interval n is the first n ticks of the 8-tick
    /// computation, which is what upstream repeats from scratch for each n.
    pub fn compute() -> Self {
        let example = Process::new();
        let g = example.grid();
        // The tick forecast: per certain rate, P(k arrivals in one tick), k < 30.
        let tick: Vec<Vec<f64>> = (0..g.len())
            .map(|c| {
                let mut p = example.clone();
                p.set_certain(g.mid(c));
                (0..MAX_ARRIVALS_PER_TICK as u32).map(|k| p.count_probability(TICK_S, k)).collect()
            })
            .collect();
        let mut intervals: Vec<Vec<Vec<f64>>> = (0..NUM_TICKS).map(|_| Vec::with_capacity(g.len())).collect();
        for c in 0..g.len() {
            let mut p = example.clone();
            p.set_certain(g.mid(c));
            let mut acc = vec![1.0];
            for interval in intervals.iter_mut() {
                p.normalize();
                let this_tick: Vec<f64> =
                    (0..MAX_ARRIVALS_PER_TICK).map(|k| clamp_one(summation(p.pmf(), &tick, k))).collect();
                acc = convolve(&acc, &this_tick);
                interval.push(acc.clone());
                p.evolve(TICK_S);
            }
        }
        Self { intervals }
    }

    /// The model computed once per process.
    pub fn shared() -> Arc<ForecastModel> {
        static MODEL: OnceLock<Arc<ForecastModel>> = OnceLock::new();
        Arc::clone(MODEL.get_or_init(|| Arc::new(ForecastModel::compute())))
    }

    pub fn intervals(&self) -> &[Vec<Vec<f64>>] {
        &self.intervals
    }

    /// The smallest cumulative count over `ticks` (1..=8) ticks that the link delivers with
    /// probability ≥ 1 − x under the belief `ensemble` (one past the table if never reached).
    pub fn lower_quantile(&self, ticks: usize, ensemble: &Process, x: f64) -> u32 {
        let table = &self.intervals[ticks - 1];
        let width = table[0].len();
        let mut sum = 0.0;
        for count in 0..width {
            sum += clamp_one(summation(ensemble.pmf(), table, count));
            if sum >= x {
                return count as u32;
            }
        }
        width as u32 + 1
    }

    /// The eight cumulative counts Sprout forecasts.
    pub fn forecast(&self, ensemble: &Process) -> Vec<u32> {
        (1..=NUM_TICKS).map(|t| self.lower_quantile(t, ensemble, FORECAST_QUANTILE)).collect()
    }
}

/// Upstream caps a summed probability at 1 (a NaN stays NaN, as there).
fn clamp_one(p: f64) -> f64 {
    if p > 1.0 {
        1.0
    } else {
        p
    }
}

fn convolve(old: &[f64], tick: &[f64]) -> Vec<f64> {
    let mut out = vec![0.0; old.len() + tick.len() - 1];
    for (i, a) in old.iter().enumerate() {
        for (j, b) in tick.iter().enumerate() {
            out[i + j] += a * b;
        }
    }
    out
}
