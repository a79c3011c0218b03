//! `calibrate-link`: one emulated network path between two network namespaces.
//! See `calibrate-link --help` and the crate documentation.

use emulators::config::{self, Parsed};
use emulators::error::Error;
use emulators::{endpoint, netns, realtime, trace::Trace};

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
        _ => {
            let help = args.iter().any(|a| a == "-h" || a == "--help");
            // The host check comes first: without root nothing else matters.
            let host = if help { Ok(()) } else { netns::check_host() };
            host.and_then(|_| config::parse(&args)).and_then(|parsed| match parsed {
                Parsed::Help => {
                    print!("{}", config::USAGE);
                    Ok(0)
                }
                Parsed::Run(config) => realtime::run(*config),
            })
        }
    };
    match result {
        Ok(status) => std::process::exit(status),
        Err(e) => {
            eprintln!("calibrate-link: error: {e}");
            std::process::exit(e.exit_status());
        }
    }
}
