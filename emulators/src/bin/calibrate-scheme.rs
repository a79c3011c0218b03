//! `calibrate-scheme`: the built-in scheme endpoints (see the `schemes` crate).

fn main() {
    std::process::exit(schemes::main(std::env::args().collect()));
}
