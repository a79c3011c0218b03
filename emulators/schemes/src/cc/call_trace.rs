//! A port's record of its law's calls, for comparing them line for line with a reference
//! build's (experiments/README: the traces of pcc_experimental-2018 and pcc-2017).
//!
//! An environment variable names a directory; at the first call the port creates
//! `trace-port-PID-µs.txt` there (µs since the epoch: each run's endpoint is process 2 of its
//! namespace, so the pid alone repeats) and writes one line per call. Lines go out in blocks of
//! whole lines of the size the port chooses (the harness stops a run with SIGTERM, which ends
//! the process without flushing: a port with a call per packet takes 64 KiB and loses up to that
//! much of its last calls, one with a call per monitor interval writes each line at once). Unset
//! or empty, nothing is written and the line is never formatted.

use std::fs::File;
use std::io::{BufWriter, Write};

#[derive(Debug, Default)]
enum State {
    #[default]
    Unopened,
    Off,
    On(BufWriter<File>),
}

/// The trace one environment variable asks for, opened at the first call.
#[derive(Debug)]
pub struct CallTrace {
    env: &'static str,
    block_bytes: usize,
    state: State,
}

impl CallTrace {
    /// A trace asked for by `env`, written in blocks of up to `block_bytes` (0: line by line).
    pub fn new(env: &'static str, block_bytes: usize) -> Self {
        Self { env, block_bytes, state: State::Unopened }
    }

    /// Writes the line `line` makes (without its newline), if the trace is on.
    pub fn write_line(&mut self, line: impl FnOnce() -> String) {
        if let State::Unopened = self.state {
            self.state = match std::env::var_os(self.env).filter(|d| !d.is_empty()) {
                None => State::Off,
                Some(dir) => {
                    let started =
                        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros());
                    let path =
                        std::path::Path::new(&dir).join(format!("trace-port-{}-{started}.txt", std::process::id()));
                    match File::create(&path) {
                        Ok(f) => State::On(BufWriter::with_capacity(self.block_bytes, f)),
                        Err(e) => {
                            eprintln!("{}: cannot create {} ({e}); running untraced", self.env, path.display());
                            State::Off
                        }
                    }
                }
            };
        }
        if let State::On(out) = &mut self.state {
            // One write per line: the buffer flushes whole lines only.
            let mut text = line();
            text.push('\n');
            if out.write_all(text.as_bytes()).is_err() {
                self.state = State::Off;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_whole_lines_into_the_named_directory_and_nothing_when_unset() {
        let dir = std::env::temp_dir().join(format!("call-trace-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // A variable name no other test sets: the process environment is shared.
        let env = "CALL_TRACE_TEST_DIR";
        std::env::set_var(env, &dir);
        let mut trace = CallTrace::new(env, 0);
        trace.write_line(|| "first 1".into());
        trace.write_line(|| "second 2".into());
        std::env::remove_var(env);
        let mut off = CallTrace::new(env, 0);
        off.write_line(|| panic!("formatted while off"));
        let files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
        assert_eq!(files.len(), 1, "{files:?}");
        let name = files[0].file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with(&format!("trace-port-{}-", std::process::id())) && name.ends_with(".txt"), "{name}");
        // Line by line: on disk before the trace is dropped, as a killed run leaves it.
        assert_eq!(std::fs::read_to_string(&files[0]).unwrap(), "first 1\nsecond 2\n");
        drop(trace);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
