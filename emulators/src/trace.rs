//! Mahimahi trace files: one delivery opportunity per line, at an integer millisecond.
//!
//! The rules are Mahimahi's: the whole line must be the number (leading blanks are
//! tolerated, trailing ones are not), no empty lines (a final newline is fine), values never
//! decrease, the last one is > 0. The schedule repeats with period = the last value.

use crate::error::{Error, Result};
use crate::packet::{Ms, OPPORTUNITY_BYTES, TUN_HEADER};
use std::path::Path;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    /// Opportunity times within one period, non-decreasing; the last one is the period.
    pub times: Vec<Ms>,
}

impl Trace {
    /// Parse trace text; `name` is used in error messages (a file name).
    pub fn parse(text: &str, name: &str) -> Result<Trace> {
        if text.is_empty() {
            return Err(Error::input(format!("{name}: empty trace file (a trace needs at least one line)")));
        }
        let body = text.strip_suffix('\n').unwrap_or(text);
        let mut times = Vec::with_capacity(body.len() / 4 + 1);
        for (index, line) in body.split('\n').enumerate() {
            let number = index + 1;
            if line.is_empty() {
                return Err(Error::input(format!("{name}:{number}: invalid empty line")));
            }
            let value = parse_integer(line).ok_or_else(|| {
                Error::input(format!(
                    "{name}:{number}: invalid integer {line:?} (each line must be exactly one non-negative number of milliseconds, with no trailing characters)"
                ))
            })?;
            if let Some(&previous) = times.last() {
                if value < previous {
                    return Err(Error::input(format!(
                        "{name}:{number}: timestamps must be monotonically nondecreasing ({value} after {previous})"
                    )));
                }
            }
            times.push(value);
        }
        if times.last() == Some(&0) {
            return Err(Error::input(format!(
                "{name}: trace must last for a nonzero amount of time (its last timestamp is 0)"
            )));
        }
        Ok(Trace { times })
    }

    pub fn read(path: &Path) -> Result<Trace> {
        let bytes =
            std::fs::read(path).map_err(|e| Error::input(format!("cannot read trace file {}: {e}", path.display())))?;
        let text =
            String::from_utf8(bytes).map_err(|_| Error::input(format!("{}: not a text file", path.display())))?;
        Trace::parse(&text, &path.display().to_string())
    }

    /// The schedule repeats after this many milliseconds.
    pub fn period(&self) -> Ms {
        *self.times.last().expect("a parsed trace is never empty")
    }

    /// Capacity in Mbit/s of IP packets (1500 bytes per opportunity), as Pantheon quotes rates.
    pub fn rate_mbps(&self) -> f64 {
        let ip_bits = ((OPPORTUNITY_BYTES - TUN_HEADER) * 8) as f64;
        self.times.len() as f64 * ip_bits / (self.period() as f64 * 1000.0)
    }
}

/// strtol-like: optional leading blanks, optional '+', digits, nothing after.
fn parse_integer(line: &str) -> Option<Ms> {
    let trimmed = line.trim_start_matches([' ', '\t']);
    let digits = trimmed.strip_prefix('+').unwrap_or(trimmed);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(text: &str) -> String {
        Trace::parse(text, "t").unwrap_err().message
    }

    #[test]
    fn parses_mahimahi_traces() {
        assert_eq!(Trace::parse("1\n", "t").unwrap().times, vec![1]);
        assert_eq!(Trace::parse("0\n10", "t").unwrap().times, vec![0, 10]);
        assert_eq!(Trace::parse("  5\n5\n+10\n", "t").unwrap().times, vec![5, 5, 10]);
    }

    #[test]
    fn rejects_what_mahimahi_rejects() {
        assert!(error("").contains("empty trace file"));
        assert!(error("1 \n").contains("invalid integer \"1 \""));
        assert!(error("1\r\n").contains("invalid integer"));
        assert!(error("1\n\n2\n").contains("t:2: invalid empty line"));
        assert!(error("1\n2\n\n").contains("t:3: invalid empty line"));
        assert!(error("5\n3\n").contains("t:2: timestamps must be monotonically nondecreasing"));
        assert!(error("0\n0\n").contains("nonzero amount of time"));
        assert!(error("abc\n").contains("t:1: invalid integer"));
        assert!(error("-3\n").contains("invalid integer"));
        assert!(error("1.5\n").contains("invalid integer"));
    }

    #[test]
    fn reports_pantheon_rates() {
        assert!((Trace::parse("1\n", "t").unwrap().rate_mbps() - 12.0).abs() < 1e-9);
        assert!((Trace::parse("1\n1\n1\n1\n1\n", "t").unwrap().rate_mbps() - 60.0).abs() < 1e-9);
        assert!((Trace::parse("100\n", "t").unwrap().rate_mbps() - 0.12).abs() < 1e-9);
    }
}
