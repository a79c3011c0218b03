//! Command line: Pantheon's wrapper contract (its `src/wrappers/arg_parser.py`) plus `list`.
//!
//! ```text
//! calibrate-scheme list [--json]
//! calibrate-scheme SCHEME run_first                  prints receiver or sender
//! calibrate-scheme SCHEME deps|setup|setup_after_reboot   nothing to do (contract no-ops)
//! receiver-first:  SCHEME receiver PORT   |  SCHEME sender IP PORT
//! sender-first:    SCHEME sender PORT     |  SCHEME receiver IP PORT
//! ```
//! Exit status: 0 on SIGTERM/SIGINT (the normal end of a run), 2 for a bad command line,
//! 1 for anything that goes wrong while running; errors are one line on stderr.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::net;
use crate::registry::{self, Implementation, RunFirst, Scheme, UdpCc};
use crate::stats::Stats;
use crate::{quic, scream, sprout, tcp, transport};

pub const USAGE: &str = "usage: calibrate-scheme list [--json] | SCHEME run_first | \
SCHEME receiver PORT | SCHEME sender IP PORT (receiver-first) | SCHEME sender PORT | \
SCHEME receiver IP PORT (sender-first)";

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Command {
    Help,
    List {
        json: bool,
    },
    RunFirst(String),
    /// deps / setup / setup_after_reboot: nothing to install for built-in schemes.
    NoOp(String),
    Receiver {
        scheme: String,
        listen: Option<u16>,
        peer: Option<SocketAddr>,
    },
    Sender {
        scheme: String,
        listen: Option<u16>,
        peer: Option<SocketAddr>,
    },
}

/// A usage error: message for one line on stderr.
#[derive(Debug, PartialEq, Eq)]
pub struct UsageError(pub String);

fn endpoint_args(rest: &[String]) -> Result<(Option<u16>, Option<SocketAddr>), UsageError> {
    match rest {
        [port] => Ok((Some(net::parse_port(port).map_err(UsageError)?), None)),
        [ip, port] => {
            let ip = net::parse_ip(ip).map_err(UsageError)?;
            let port = net::parse_port(port).map_err(UsageError)?;
            Ok((None, Some(SocketAddr::new(ip, port))))
        }
        _ => Err(UsageError(format!("expected PORT or IP PORT, got {} argument(s)", rest.len()))),
    }
}

/// Parses the arguments after the program name.
pub fn parse(args: &[String]) -> Result<Command, UsageError> {
    let strs: Vec<&str> = args.iter().map(String::as_str).collect();
    match strs.as_slice() {
        [] => Err(UsageError("no command given".into())),
        ["-h" | "--help" | "help"] => Ok(Command::Help),
        ["list"] => Ok(Command::List { json: false }),
        ["list", "--json"] => Ok(Command::List { json: true }),
        ["list", other, ..] => Err(UsageError(format!("list takes only --json, got {other:?}"))),
        [_scheme] => Err(UsageError("missing sub-command after the scheme name".into())),
        [scheme, "run_first"] => Ok(Command::RunFirst(scheme.to_string())),
        [scheme, "deps" | "setup" | "setup_after_reboot"] => Ok(Command::NoOp(scheme.to_string())),
        [scheme, "receiver", rest @ ..] => {
            let (listen, peer) = endpoint_args(&args[2..2 + rest.len()])?;
            Ok(Command::Receiver { scheme: scheme.to_string(), listen, peer })
        }
        [scheme, "sender", rest @ ..] => {
            let (listen, peer) = endpoint_args(&args[2..2 + rest.len()])?;
            Ok(Command::Sender { scheme: scheme.to_string(), listen, peer })
        }
        [_, other, ..] => {
            Err(UsageError(format!("unknown sub-command {other:?} (expected run_first, receiver or sender)")))
        }
    }
}

fn usable(name: &str) -> Result<Scheme, String> {
    let scheme = registry::find(name)?;
    if let Some(why) = &scheme.unavailable {
        return Err(format!("scheme {name} is unavailable on this host: {why}"));
    }
    Ok(scheme)
}

/// Checks that the endpoint form matches the scheme's order: the side that runs first
/// listens on a port, the other connects to IP PORT.
fn check_form(scheme: &Scheme, role: RunFirst, listen: Option<u16>) -> Result<(), UsageError> {
    let listens = scheme.run_first == role;
    if listens != listen.is_some() {
        let (first, second) = match scheme.run_first {
            RunFirst::Receiver => ("receiver", "sender"),
            RunFirst::Sender => ("sender", "receiver"),
        };
        return Err(UsageError(format!(
            "{} runs {first} first: use `{} {first} PORT` and `{} {second} IP PORT`",
            scheme.name, scheme.name, scheme.name
        )));
    }
    Ok(())
}

fn run_endpoint(scheme: &Scheme, role: RunFirst, listen: Option<u16>, peer: Option<SocketAddr>) -> Result<(), String> {
    let role_name = role.as_str();
    let unit = if matches!(scheme.implementation, Implementation::Udp(_)) { "packets" } else { "chunks" };
    let stats = Arc::new(Stats::new(&scheme.name, role_name, unit));
    {
        let stats = Arc::clone(&stats);
        crate::signals::exit_on_termination(move || eprintln!("{}", stats.summary()))?;
    }
    let timeout = net::connect_timeout();
    match (&scheme.implementation, role) {
        (Implementation::KernelTcp(cc), RunFirst::Receiver) => tcp::run_receiver(cc, listen.expect("checked"), stats),
        (Implementation::KernelTcp(cc), RunFirst::Sender) => {
            tcp::run_sender(cc, peer.expect("checked"), stats, timeout)
        }
        (Implementation::Quic(cc), RunFirst::Sender) => quic::run_sender(*cc, listen.expect("checked"), stats),
        (Implementation::Quic(cc), RunFirst::Receiver) => {
            quic::run_receiver(*cc, peer.expect("checked"), stats, timeout)
        }
        (Implementation::Udp(UdpCc::Sprout2017), RunFirst::Receiver) => {
            sprout::run_receiver(listen.expect("checked"), stats)
        }
        (Implementation::Udp(UdpCc::Sprout2017), RunFirst::Sender) => sprout::run_sender(peer.expect("checked"), stats),
        (Implementation::Udp(cc @ (UdpCc::Scream2017 | UdpCc::Scream2018)), RunFirst::Receiver) => {
            scream::run_receiver(listen.expect("checked"), stats, scream::era_of(*cc))
        }
        (Implementation::Udp(cc @ (UdpCc::Scream2017 | UdpCc::Scream2018)), RunFirst::Sender) => {
            scream::run_sender(peer.expect("checked"), stats, scream::era_of(*cc))
        }
        // A sender-first UDP scheme (verus-2017): the sender listens, the receiver connects.
        (Implementation::Udp(_), RunFirst::Receiver) => match listen {
            Some(port) => transport::run_receiver(port, stats),
            None => transport::run_receiver_connecting(peer.expect("checked"), stats, timeout),
        },
        (Implementation::Udp(cc), RunFirst::Sender) => {
            // A listening sender learns its peer later; its mss is the IPv4 one (the ports that
            // listen have their own packet size).
            let mss = transport::wire::data_payload_bytes(&peer.unwrap_or(SocketAddr::from(([0u8; 4], 0)))) as u64;
            let controller = cc.controller(mss).ok_or_else(|| format!("{} has no transport controller", cc.name()))?;
            match listen {
                Some(port) => transport::run_sender_listening(port, controller, stats),
                None => transport::run_sender(peer.expect("checked"), controller, stats, timeout),
            }
        }
    }
}

/// Runs the command line (`args[0]` is the program name) and returns the exit status.
pub fn run(args: Vec<String>) -> i32 {
    let command = match parse(args.get(1..).unwrap_or(&[])) {
        Ok(c) => c,
        Err(UsageError(msg)) => {
            eprintln!("calibrate-scheme: error: {msg}; {USAGE}");
            return 2;
        }
    };
    let result = match command {
        Command::Help => {
            println!("{USAGE}");
            Ok(())
        }
        Command::List { json } => {
            let schemes = registry::all();
            if json {
                let v: Vec<_> = schemes.iter().map(Scheme::to_json).collect();
                println!("{}", serde_json::to_string_pretty(&v).expect("JSON of plain values"));
            } else {
                print!("{}", registry::render_table(&schemes));
            }
            Ok(())
        }
        Command::RunFirst(name) => registry::find(&name).map(|s| println!("{}", s.run_first.as_str())),
        Command::NoOp(name) => registry::find(&name).map(|_| ()),
        Command::Receiver { scheme, listen, peer } | Command::Sender { scheme, listen, peer } => {
            let role =
                if args.get(2).map(String::as_str) == Some("receiver") { RunFirst::Receiver } else { RunFirst::Sender };
            match usable(&scheme) {
                Err(e) => Err(e),
                Ok(s) => match check_form(&s, role, listen) {
                    Err(UsageError(msg)) => {
                        eprintln!("calibrate-scheme: error: {msg}");
                        return 2;
                    }
                    Ok(()) => run_endpoint(&s, role, listen, peer),
                },
            }
        }
    };
    match result {
        Ok(()) => 0,
        Err(msg) => {
            eprintln!("calibrate-scheme: error: {msg}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn parses_the_contract() {
        assert_eq!(parse(&args("list")), Ok(Command::List { json: false }));
        assert_eq!(parse(&args("list --json")), Ok(Command::List { json: true }));
        assert_eq!(parse(&args("cubic run_first")), Ok(Command::RunFirst("cubic".into())));
        assert_eq!(
            parse(&args("cubic receiver 5000")),
            Ok(Command::Receiver { scheme: "cubic".into(), listen: Some(5000), peer: None })
        );
        assert_eq!(
            parse(&args("cubic sender 10.0.0.2 5000")),
            Ok(Command::Sender { scheme: "cubic".into(), listen: None, peer: Some("10.0.0.2:5000".parse().unwrap()) })
        );
        assert_eq!(
            parse(&args("quic-cubic receiver fd00::1 443")),
            Ok(Command::Receiver {
                scheme: "quic-cubic".into(),
                listen: None,
                peer: Some("[fd00::1]:443".parse().unwrap())
            })
        );
    }

    #[test]
    fn rejects_bad_arguments() {
        for bad in [
            "",
            "cubic",
            "cubic dance",
            "cubic sender",
            "cubic sender a b c",
            "cubic receiver 0",
            "cubic sender host 5000",
            "list --yaml",
        ] {
            assert!(parse(&args(bad)).is_err(), "{bad:?} should fail");
        }
    }

    #[test]
    fn endpoint_form_must_match_run_first() {
        let cubic = registry::find("udp-copa").unwrap();
        assert!(check_form(&cubic, RunFirst::Receiver, Some(5000)).is_ok());
        assert!(check_form(&cubic, RunFirst::Sender, None).is_ok());
        assert!(check_form(&cubic, RunFirst::Sender, Some(5000)).is_err());
        let quic = registry::find("quic-cubic").unwrap();
        assert!(check_form(&quic, RunFirst::Sender, Some(5000)).is_ok());
        assert!(check_form(&quic, RunFirst::Receiver, None).is_ok());
        assert!(check_form(&quic, RunFirst::Receiver, Some(5000)).is_err());
    }
}
