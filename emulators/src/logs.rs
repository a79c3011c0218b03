//! The two log formats the engine writes for each direction:
//! Mahimahi's link log (integer ms since the init timestamp; sizes with the 4-byte TUN
//! header; `+ - # d` lines) and Pantheon's merged tunnel log (`%.3f` ms; IP sizes; the
//! one-way delay over the whole emulated path; a flow number per connection).

use crate::error::{Error, Result};
use crate::packet::{Ms, OPPORTUNITY_BYTES, TUN_HEADER};
use crate::stage::LinkObserver;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

const BUFFER: usize = 1 << 18;

fn create(path: &Path) -> Result<BufWriter<File>> {
    File::create(path)
        .map(|f| BufWriter::with_capacity(BUFFER, f))
        .map_err(|e| Error::input(format!("cannot create log file {}: {e}", path.display())))
}

/// Keeps the first write error so the hot path stays branch-light; checked by `finish`.
struct Sink {
    path: PathBuf,
    out: BufWriter<File>,
    failed: Option<std::io::Error>,
}

impl Sink {
    fn new(path: &Path) -> Result<Sink> {
        Ok(Sink { path: path.to_path_buf(), out: create(path)?, failed: None })
    }

    fn line(&mut self, args: std::fmt::Arguments) {
        if self.failed.is_none() {
            if let Err(e) = self.out.write_fmt(args) {
                self.failed = Some(e);
            }
        }
    }

    fn finish(&mut self) -> Result<()> {
        if self.failed.is_none() {
            if let Err(e) = self.out.flush() {
                self.failed = Some(e);
            }
        }
        match self.failed.take() {
            None => Ok(()),
            Some(e) => Err(Error::runtime(format!("writing {} failed: {e}", self.path.display()))),
        }
    }
}

/// What Mahimahi's log header says about the link.
pub struct LinkDescription<'a> {
    pub direction: &'a str,
    pub trace: &'a Path,
    pub command_line: &'a [String],
    pub queue: &'a str,
    pub init_timestamp_ms: u64,
    pub base: Ms,
}

pub struct MahimahiLog {
    sink: Sink,
}

impl MahimahiLog {
    pub fn create(path: &Path, link: &LinkDescription) -> Result<MahimahiLog> {
        let mut sink = Sink::new(path)?;
        let quoted: Vec<String> = link.command_line.iter().map(|a| format!("'{}'", a.replace('\'', "'\\''"))).collect();
        sink.line(format_args!(
            "# calibrate-link ({}) [{}] > {}\n# command line: {}\n# queue: {}\n# init timestamp: {}\n# base timestamp: {}\n",
            link.direction,
            link.trace.display(),
            path.display(),
            quoted.join(" "),
            link.queue,
            link.init_timestamp_ms,
            link.base
        ));
        Ok(MahimahiLog { sink })
    }

    pub fn finish(&mut self) -> Result<()> {
        self.sink.finish()
    }
}

impl LinkObserver for MahimahiLog {
    fn opportunity(&mut self, t: Ms) {
        self.sink.line(format_args!("{t} # {OPPORTUNITY_BYTES}\n"));
    }
    fn arrival(&mut self, t: Ms, size: usize) {
        self.sink.line(format_args!("{t} + {size}\n"));
    }
    fn departure(&mut self, t: Ms, size: usize, delay: Ms) {
        self.sink.line(format_args!("{t} - {size} {delay}\n"));
    }
    fn drop(&mut self, t: Ms, packets: usize, bytes: usize) {
        self.sink.line(format_args!("{t} d {packets} {bytes}\n"));
    }
}

#[derive(Debug, Clone, Copy)]
enum Event {
    Opportunity,
    Arrival { size: usize, flow: u32 },
    Departure { size: usize, delay_us: u64, flow: u32 },
}

/// Pantheon's merged log. Events come from two clocks (opportunities at whole ms of the
/// link schedule, packets at the real times they were read and written), so they are held
/// briefly and written in time order once nothing earlier can still come.
pub struct PantheonLog {
    sink: Sink,
    pending: Vec<(u64, u8, Event)>,
}

/// Microseconds as Pantheon's `%.3f` milliseconds.
struct Millis(u64);
impl std::fmt::Display for Millis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{:03}", self.0 / 1000, self.0 % 1000)
    }
}

impl PantheonLog {
    pub fn create(path: &Path, init_timestamp_ms: u64) -> Result<PantheonLog> {
        let mut sink = Sink::new(path)?;
        sink.line(format_args!("# init timestamp: {init_timestamp_ms}.000\n"));
        Ok(PantheonLog { sink, pending: Vec::with_capacity(1024) })
    }

    /// A packet of `ip_size` bytes entered the path at `at_us`.
    pub fn arrival(&mut self, at_us: u64, ip_size: usize, flow: u32) {
        self.pending.push((at_us, 1, Event::Arrival { size: ip_size, flow }));
    }

    /// A packet left the path at `at_us`, `delay_us` after it entered.
    pub fn departure(&mut self, at_us: u64, ip_size: usize, delay_us: u64, flow: u32) {
        self.pending.push((at_us, 2, Event::Departure { size: ip_size, delay_us, flow }));
    }

    /// Write every held event at or before `until_us` (all of them with `u64::MAX`).
    pub fn flush_until(&mut self, until_us: u64) {
        if self.pending.is_empty() {
            return;
        }
        // Ties: opportunities, then arrivals, then departures.
        self.pending.sort_by_key(|&(t, order, _)| (t, order));
        let ready = self.pending.partition_point(|&(t, _, _)| t <= until_us);
        for (t, _, event) in self.pending.drain(..ready) {
            match event {
                Event::Opportunity => {
                    self.sink.line(format_args!("{} # {}\n", Millis(t), OPPORTUNITY_BYTES - TUN_HEADER))
                }
                Event::Arrival { size, flow } => self.sink.line(format_args!("{} + {size} {flow}\n", Millis(t))),
                Event::Departure { size, delay_us, flow } => {
                    self.sink.line(format_args!("{} - {size} {} {flow}\n", Millis(t), Millis(delay_us)))
                }
            }
        }
    }

    pub fn finish(&mut self) -> Result<()> {
        self.flush_until(u64::MAX);
        self.sink.finish()
    }
}

impl LinkObserver for PantheonLog {
    fn opportunity(&mut self, t: Ms) {
        self.pending.push((t * 1000, 0, Event::Opportunity));
    }
}

/// The logs of one direction: both, either or none.
#[derive(Default)]
pub struct DirectionLogs {
    pub mahimahi: Option<MahimahiLog>,
    pub pantheon: Option<PantheonLog>,
    /// Packets the link's queue dropped (for the run summary).
    pub queue_drops: u64,
}

impl DirectionLogs {
    pub fn finish(&mut self) -> Result<()> {
        let a = self.mahimahi.as_mut().map_or(Ok(()), MahimahiLog::finish);
        let b = self.pantheon.as_mut().map_or(Ok(()), PantheonLog::finish);
        a.and(b)
    }
}

impl LinkObserver for DirectionLogs {
    fn opportunity(&mut self, t: Ms) {
        if let Some(log) = &mut self.mahimahi {
            log.opportunity(t);
        }
        if let Some(log) = &mut self.pantheon {
            log.opportunity(t);
        }
    }
    fn arrival(&mut self, t: Ms, size: usize) {
        if let Some(log) = &mut self.mahimahi {
            log.arrival(t, size);
        }
    }
    fn departure(&mut self, t: Ms, size: usize, delay: Ms) {
        if let Some(log) = &mut self.mahimahi {
            log.departure(t, size, delay);
        }
    }
    fn drop(&mut self, t: Ms, packets: usize, bytes: usize) {
        self.queue_drops += packets as u64;
        if let Some(log) = &mut self.mahimahi {
            log.drop(t, packets, bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pantheon_log_is_time_ordered_with_three_decimals() {
        let dir = std::env::temp_dir().join(format!("calibrate-logs-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("datalink.log");
        let mut log = PantheonLog::create(&path, 1_500_000_000_000).unwrap();
        log.arrival(500, 1500, 1);
        log.departure(20_500, 1500, 20_000, 1);
        log.opportunity(1); // arrives late, belongs between the two
        log.flush_until(1_000);
        log.arrival(1_500, 100, 2);
        log.finish().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            "# init timestamp: 1500000000000.000\n0.500 + 1500 1\n1.000 # 1500\n1.500 + 100 2\n20.500 - 1500 20.000 1\n"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
