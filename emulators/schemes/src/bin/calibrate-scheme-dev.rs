//! The same entry point as the workspace's `calibrate-scheme`, built with this crate so
//! that its integration tests can run endpoints as real processes (signals, exit codes)
//! without building the engine package. Not installed.

fn main() {
    std::process::exit(schemes::main(std::env::args().collect()));
}
