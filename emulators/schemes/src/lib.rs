//! Built-in scheme endpoints (placeholder until the schemes land).

/// Entry point of the `calibrate-scheme` binary; returns the process exit status.
pub fn main(args: Vec<String>) -> i32 {
    eprintln!("calibrate-scheme: no schemes built yet (args: {args:?})");
    2
}
