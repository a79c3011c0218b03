//! `calibrate-link`: one emulated network path between two network namespaces.
//! See `calibrate-link --help` and the crate documentation.

use emulators::config::{self, Parsed};
use emulators::error::Error;
use emulators::{endpoint, realtime, trace::Trace};

fn trace_info(paths: &[String]) -> Result<i32, Error> {
    if paths.is_empty() {
        return Err(Error::input("usage: calibrate-link trace-info TRACE..."));
    }
    let mut lines = Vec::new();
    for path in paths {
        let trace = Trace::read(std::path::Path::new(path))?;
        lines.push(serde_json::json!({
            "path": path,
            "opportunities": trace.times.len(),
            "period_ms": trace.period(),
            "rate_mbps": trace.rate_mbps(),
        }));
    }
    println!("{}", serde_json::to_string(&lines).expect("json"));
    Ok(0)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("__init") => std::process::exit(endpoint::run_init(&args[1..])),
        Some("trace-info") => trace_info(&args[1..]),
        _ => match config::parse(&args) {
            Ok(Parsed::Help) => {
                print!("{}", config::USAGE);
                Ok(0)
            }
            Ok(Parsed::Run(config)) => realtime::run(*config),
            Err(e) => Err(e),
        },
    };
    match result {
        Ok(status) => std::process::exit(status),
        Err(e) => {
            eprintln!("calibrate-link: error: {e}");
            std::process::exit(e.exit_status());
        }
    }
}
