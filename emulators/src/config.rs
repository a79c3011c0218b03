//! The engine's command line, parsed and validated before anything is created.
//!
//! ```text
//! calibrate-link [UPLINK-TRACE DOWNLINK-TRACE] [OPTIONS] [-- COMMAND [ARGS...]]
//! ```
//! Options take `--name value` or `--name=value` (Mahimahi's spellings work:
//! `--uplink-queue=droptail --uplink-queue-args=packets=14`).

use crate::endpoint::{EndpointSpec, SideName};
use crate::error::{Error, Result};
use crate::ferry::Timing;
use crate::queue::QueueSpec;
use crate::trace::Trace;
use std::ffi::CString;
use std::path::PathBuf;
use std::sync::Arc;

pub const USAGE: &str = "\
usage: calibrate-link [UPLINK-TRACE DOWNLINK-TRACE] [OPTIONS] [-- COMMAND [ARGS...]]
       calibrate-link trace-info TRACE...

Emulates one network path between two network namespaces (sender and receiver) with
Mahimahi's link semantics. Uplink = sender -> receiver (data); downlink = the reverse (ACKs).
Data crosses: link queue and trace -> loss -> delay; ACKs: delay -> loss -> link.

  --uplink-trace FILE, --downlink-trace FILE   Mahimahi traces (one opportunity per line)
  --uplink-queue TYPE, --downlink-queue TYPE   infinite (default) | droptail | drophead
  --uplink-queue-args ARGS, --downlink-queue-args ARGS   e.g. packets=100 or bytes=30000
  --delay MS                   one-way propagation delay, added in each direction (integer ms)
  --uplink-loss P, --downlink-loss P   i.i.d. loss probability in [0, 1]
  --seed N                     seed of the loss generators (default 0): runs are reproducible
  --backend engine|mahimahi    engine (default): this engine's own link; mahimahi: the same run
                               through the user's real mm-delay/mm-loss/mm-link (setuid root, on
                               PATH), started as --mahimahi-user, with the same logs
  --mahimahi-user NAME         the unprivileged account Mahimahi's shells run as (they refuse
                               root; default: $SUDO_USER)
  --timing mahimahi|ideal      mahimahi (default): each shell direction is a process with its own
                               millisecond clock, as in Mahimahi, so packets are re-stamped at
                               every hop and leave at the phase their process wakes at; ideal:
                               one clock, every stage exactly on the millisecond boundary
  --uplink-log FILE, --downlink-log FILE     Mahimahi-format link logs
  --datalink-log FILE, --acklink-log FILE    Pantheon-format logs (one-way delay over the path)
  --receiver CMD, --sender CMD  shell command started at 0 s in that side's namespace
  --run SIDE[@SECONDS]:CMD      shell command started SECONDS after the start (SIDE: sender|receiver)
  --flow-port PORT             the Nth --flow-port is flow N of the Pantheon-format logs: every
                               connection with either end on it (Pantheon's Nth tunnel); other
                               connections take the lowest free number. Without it, connections
                               are numbered in order of first appearance
  --flows-end-alone            an endpoint that exits on its own ends only itself, as a flow of
                               Pantheon's multi-flow runs ends alone in its own tunnel: the rest
                               run on to --stop-after (or until every endpoint has exited)
  --stop-after SECONDS         stop everything after this long
  --grace SECONDS              time endpoints get to exit after SIGTERM (default 2)
  --summary FILE               write a JSON summary (counters, endpoint exits) at the end
  --realtime-priority N        SCHED_FIFO priority of the event loop (and, with --backend
                               mahimahi, of Mahimahi's shells), 0 for normal scheduling
                               (default 10; skipped when not permitted)
  -- COMMAND [ARGS...]         run COMMAND interactively in the sender namespace (shell mode);
                               with no endpoints and no command, runs $SHELL

Endpoints see EMU_SIDE, EMU_ADDR (their own address), EMU_PEER (the other side's address) and,
on the sender side, MAHIMAHI_BASE (the receiver's address).
";

/// The unprivileged account the shells run as.
#[derive(Debug, Clone)]
pub struct User {
    pub name: String,
    pub uid: libc::uid_t,
    pub gid: libc::gid_t,
}

impl User {
    pub fn lookup(name: &str) -> Result<User> {
        let c = CString::new(name).map_err(|_| Error::input("--mahimahi-user contains a NUL byte"))?;
        let entry = unsafe { libc::getpwnam(c.as_ptr()) };
        if entry.is_null() {
            return Err(Error::input(format!(
                "--mahimahi-user {name}: no such user; name an unprivileged account (e.g. create one with `useradd -m mahimahi`)"
            )));
        }
        let (uid, gid) = unsafe { ((*entry).pw_uid, (*entry).pw_gid) };
        if uid == 0 {
            return Err(Error::input(format!(
                "--mahimahi-user {name} is root, and Mahimahi's shells refuse to run as root: name an unprivileged account"
            )));
        }
        Ok(User { name: name.to_string(), uid, gid })
    }
}

/// What carries the packets.
#[derive(Debug, Clone)]
pub enum Backend {
    /// This engine's own link (the default).
    Engine,
    /// The user's real Mahimahi shells, run as this account.
    Mahimahi(User),
}

impl Backend {
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Engine => "engine",
            Backend::Mahimahi(_) => "mahimahi",
        }
    }
}

/// One direction's link.
#[derive(Debug, Clone)]
pub struct LinkConfig {
    pub trace_path: PathBuf,
    pub trace: Arc<Trace>,
    pub queue: QueueSpec,
    pub loss: f64,
}

#[derive(Debug, Clone)]
pub struct Config {
    pub uplink: LinkConfig,
    pub downlink: LinkConfig,
    pub delay_ms: u64,
    pub seed: u64,
    pub timing: Timing,
    pub backend: Backend,
    pub uplink_log: Option<PathBuf>,
    pub downlink_log: Option<PathBuf>,
    pub datalink_log: Option<PathBuf>,
    pub acklink_log: Option<PathBuf>,
    pub endpoints: Vec<EndpointSpec>,
    /// `--flow-port`s in order: flow N's port is `flow_ports[N - 1]`.
    pub flow_ports: Vec<u16>,
    /// `--flows-end-alone`: an endpoint exiting on its own does not stop the others.
    pub flows_end_alone: bool,
    pub stop_after: Option<f64>,
    pub grace: f64,
    pub summary: Option<PathBuf>,
    /// SCHED_FIFO priority of the event loop and of the Mahimahi backend's shells (0: normal scheduling).
    pub realtime_priority: i32,
    /// The full command line, for the Mahimahi log header.
    pub command_line: Vec<String>,
}

#[derive(Default)]
struct Raw {
    traces: [Option<String>; 2],
    queues: [Option<String>; 2],
    queue_args: [Option<String>; 2],
    losses: [Option<String>; 2],
    delay: Option<String>,
    seed: Option<String>,
    timing: Option<String>,
    backend: Option<String>,
    mahimahi_user: Option<String>,
    logs: [Option<String>; 4],
    endpoints: Vec<EndpointSpec>,
    flow_ports: Vec<String>,
    flows_end_alone: bool,
    stop_after: Option<String>,
    grace: Option<String>,
    summary: Option<String>,
    realtime_priority: Option<String>,
    positional: Vec<String>,
    command: Option<Vec<String>>,
}

pub enum Parsed {
    Run(Box<Config>),
    Help,
}

pub fn parse(args: &[String]) -> Result<Parsed> {
    let mut raw = Raw::default();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if arg == "--" {
            raw.command = Some(args[i..].to_vec());
            break;
        }
        if arg == "-h" || arg == "--help" {
            return Ok(Parsed::Help);
        }
        let Some(option) = arg.strip_prefix("--") else {
            raw.positional.push(arg.clone());
            continue;
        };
        let (name, inline) = match option.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (option, None),
        };
        let mut value = || -> Result<String> {
            if let Some(v) = inline.clone() {
                return Ok(v);
            }
            let v = args.get(i).cloned().ok_or_else(|| Error::input(format!("option --{name} needs a value")))?;
            i += 1;
            Ok(v)
        };
        match name {
            "uplink-trace" => raw.traces[0] = Some(value()?),
            "downlink-trace" => raw.traces[1] = Some(value()?),
            "uplink-queue" => raw.queues[0] = Some(value()?),
            "downlink-queue" => raw.queues[1] = Some(value()?),
            "uplink-queue-args" => raw.queue_args[0] = Some(value()?),
            "downlink-queue-args" => raw.queue_args[1] = Some(value()?),
            "uplink-loss" => raw.losses[0] = Some(value()?),
            "downlink-loss" => raw.losses[1] = Some(value()?),
            "delay" => raw.delay = Some(value()?),
            "seed" => raw.seed = Some(value()?),
            "timing" => raw.timing = Some(value()?),
            "backend" => raw.backend = Some(value()?),
            "mahimahi-user" => raw.mahimahi_user = Some(value()?),
            "uplink-log" => raw.logs[0] = Some(value()?),
            "downlink-log" => raw.logs[1] = Some(value()?),
            "datalink-log" => raw.logs[2] = Some(value()?),
            "acklink-log" => raw.logs[3] = Some(value()?),
            "sender" => raw.endpoints.push(EndpointSpec::shell_command(SideName::Sender, 0.0, &value()?)),
            "receiver" => raw.endpoints.push(EndpointSpec::shell_command(SideName::Receiver, 0.0, &value()?)),
            "run" => raw.endpoints.push(parse_run(&value()?)?),
            "flow-port" => raw.flow_ports.push(value()?),
            "flows-end-alone" if inline.is_none() => raw.flows_end_alone = true,
            "flows-end-alone" => return Err(Error::input("--flows-end-alone takes no value")),
            "stop-after" => raw.stop_after = Some(value()?),
            "grace" => raw.grace = Some(value()?),
            "summary" => raw.summary = Some(value()?),
            "realtime-priority" => raw.realtime_priority = Some(value()?),
            _ => return Err(Error::input(format!("unknown option --{name} (see calibrate-link --help)"))),
        }
    }
    build(raw, args).map(|c| Parsed::Run(Box::new(c)))
}

fn parse_run(text: &str) -> Result<EndpointSpec> {
    let bad = || {
        Error::input(format!("bad --run {text:?}: expected SIDE[@SECONDS]:COMMAND, e.g. sender@3:iperf -c $EMU_PEER"))
    };
    let (head, command) = text.split_once(':').ok_or_else(bad)?;
    let (side, start) = match head.split_once('@') {
        Some((side, start)) => (side, parse_seconds("--run start", start)?),
        None => (head, 0.0),
    };
    let side = match side {
        "sender" => SideName::Sender,
        "receiver" => SideName::Receiver,
        _ => return Err(bad()),
    };
    if command.trim().is_empty() {
        return Err(bad());
    }
    Ok(EndpointSpec::shell_command(side, start, command))
}

fn parse_seconds(what: &str, text: &str) -> Result<f64> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(Error::input(format!("{what} must be a non-negative number of seconds, got {text:?}"))),
    }
}

fn build(mut raw: Raw, args: &[String]) -> Result<Config> {
    match raw.positional.len() {
        0 => {}
        2 => {
            for (slot, value) in raw.traces.iter_mut().zip(raw.positional.drain(..)) {
                if slot.is_some() {
                    return Err(Error::input(
                        "give each trace once: either positionally or with --uplink-trace/--downlink-trace",
                    ));
                }
                *slot = Some(value);
            }
        }
        _ => {
            return Err(Error::input(format!(
                "unexpected arguments {:?}: give UPLINK-TRACE DOWNLINK-TRACE, options, then -- COMMAND",
                raw.positional
            )))
        }
    }
    let directions = ["uplink", "downlink"];
    let mut links = Vec::new();
    for (d, name) in directions.into_iter().enumerate() {
        let trace_path = PathBuf::from(raw.traces[d].take().ok_or_else(|| {
            Error::input(format!("missing --{name}-trace FILE (a Mahimahi trace; a file holding `1` is 12 Mbit/s)"))
        })?);
        let trace = Arc::new(Trace::read(&trace_path)?);
        let queue_args = raw.queue_args[d].take().unwrap_or_default();
        let queue = QueueSpec::parse(raw.queues[d].as_deref().unwrap_or("infinite"), &queue_args)
            .map_err(|e| Error::input(format!("--{name}-queue: {e}")))?;
        let loss = match raw.losses[d].as_deref() {
            None => 0.0,
            Some(text) => match text.parse::<f64>() {
                Ok(p) if (0.0..=1.0).contains(&p) => p,
                _ => return Err(Error::input(format!("--{name}-loss must be a probability in [0, 1], got {text:?}"))),
            },
        };
        links.push(LinkConfig { trace_path, trace, queue, loss });
    }
    let delay_ms = match raw.delay.as_deref() {
        None => 0,
        Some(text) => text.parse::<u64>().map_err(|_| {
            Error::input(format!("--delay must be a non-negative integer number of milliseconds, got {text:?}"))
        })?,
    };
    let seed = match raw.seed.as_deref() {
        None => 0,
        Some(text) => text
            .parse::<u64>()
            .map_err(|_| Error::input(format!("--seed must be a non-negative integer, got {text:?}")))?,
    };
    let timing = match raw.timing.as_deref() {
        None => Timing::Mahimahi,
        Some(text) => Timing::parse(text)
            .ok_or_else(|| Error::input(format!("--timing must be mahimahi or ideal, got {text:?}")))?,
    };
    let backend = match raw.backend.as_deref() {
        None | Some("engine") => {
            if raw.mahimahi_user.is_some() {
                return Err(Error::input("--mahimahi-user goes with --backend mahimahi"));
            }
            Backend::Engine
        }
        Some("mahimahi") => {
            let name = raw
                .mahimahi_user
                .clone()
                .or_else(|| std::env::var("SUDO_USER").ok().filter(|u| !u.is_empty() && u != "root"));
            let name = name.ok_or_else(|| {
                Error::input("--backend mahimahi needs --mahimahi-user NAME: Mahimahi's shells refuse to run as root")
            })?;
            Backend::Mahimahi(User::lookup(&name)?)
        }
        Some(other) => return Err(Error::input(format!("--backend must be engine or mahimahi, got {other:?}"))),
    };
    let stop_after = raw.stop_after.as_deref().map(|t| parse_seconds("--stop-after", t)).transpose()?;
    if stop_after == Some(0.0) {
        return Err(Error::input("--stop-after must be more than 0 seconds"));
    }
    let grace = raw.grace.as_deref().map(|t| parse_seconds("--grace", t)).transpose()?.unwrap_or(2.0);
    let mut flow_ports: Vec<u16> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for text in &raw.flow_ports {
        match text.parse::<u16>() {
            Ok(port) if port > 0 && seen.insert(port) => flow_ports.push(port),
            Ok(port) if port > 0 => {
                return Err(Error::input(format!("--flow-port {port} is given twice: give each flow's port once")))
            }
            _ => return Err(Error::input(format!("--flow-port must be a port from 1 to 65535, got {text:?}"))),
        }
    }
    let realtime_priority = match raw.realtime_priority.as_deref() {
        None => 10,
        Some(text) => match text.parse::<i32>() {
            Ok(p) if (0..=99).contains(&p) => p,
            _ => {
                return Err(Error::input(format!("--realtime-priority must be an integer from 0 to 99, got {text:?}")))
            }
        },
    };
    let mut endpoints = raw.endpoints;
    if let Some(command) = raw.command {
        let argv = if command.is_empty() { vec![default_shell()] } else { command };
        endpoints.push(EndpointSpec { side: SideName::Sender, start: 0.0, argv, interactive: true });
    } else if endpoints.is_empty() {
        endpoints.push(EndpointSpec {
            side: SideName::Sender,
            start: 0.0,
            argv: vec![default_shell()],
            interactive: true,
        });
    }
    let [uplink_log, downlink_log, datalink_log, acklink_log] = raw.logs.map(|l| l.map(PathBuf::from));
    let mut links = links.into_iter();
    Ok(Config {
        uplink: links.next().expect("two links"),
        downlink: links.next().expect("two links"),
        delay_ms,
        seed,
        timing,
        backend,
        uplink_log,
        downlink_log,
        datalink_log,
        acklink_log,
        endpoints,
        flow_ports,
        flows_end_alone: raw.flows_end_alone,
        stop_after,
        grace,
        summary: raw.summary.map(PathBuf::from),
        realtime_priority,
        command_line: std::iter::once("calibrate-link".to_string()).chain(args.iter().cloned()).collect(),
    })
}

fn default_shell() -> String {
    std::env::var("SHELL").ok().filter(|s| !s.is_empty()).unwrap_or_else(|| "/bin/sh".into())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A trace file in the system's temporary directory, removed when the test drops it.
    pub(crate) struct TraceFile(String);

    impl Drop for TraceFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    impl std::ops::Deref for TraceFile {
        type Target = str;
        fn deref(&self) -> &str {
            &self.0
        }
    }

    pub(crate) fn trace_file(content: &str) -> TraceFile {
        static COUNT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let path = std::env::temp_dir().join(format!("calibrate-config-test-{}-{n}", std::process::id()));
        std::fs::write(&path, content).unwrap();
        TraceFile(path.display().to_string())
    }

    fn args(text: &[&str]) -> Vec<String> {
        text.iter().map(|s| s.to_string()).collect()
    }

    fn error(a: &[&str]) -> String {
        match parse(&args(a)) {
            Err(e) => e.message,
            Ok(_) => panic!("accepted {a:?}"),
        }
    }

    #[test]
    fn accepts_mahimahi_spellings() {
        let t = trace_file("1\n");
        let Parsed::Run(c) = parse(&args(&[
            &t,
            &t,
            "--uplink-queue=droptail",
            "--uplink-queue-args=packets=14",
            "--delay",
            "28",
            "--uplink-loss=0.0477",
            "--run",
            "sender@3:echo hi",
            "--stop-after",
            "30",
        ]))
        .unwrap() else {
            panic!()
        };
        assert_eq!(c.uplink.queue, QueueSpec::DropTail { packets: 14, bytes: 0 });
        assert_eq!(c.downlink.queue, QueueSpec::Infinite);
        assert_eq!(c.delay_ms, 28);
        assert_eq!(c.uplink.loss, 0.0477);
        assert_eq!(c.endpoints[0].start, 3.0);
        assert_eq!(c.endpoints[0].describe(), "echo hi");
        assert_eq!(c.stop_after, Some(30.0));
        assert!(!c.flows_end_alone);
        let Parsed::Run(c) = parse(&args(&[&t, &t, "--flows-end-alone"])).unwrap() else { panic!() };
        assert!(c.flows_end_alone);
    }

    #[test]
    fn rejects_bad_input_with_a_reason() {
        let t = trace_file("1\n");
        assert!(error(&["--downlink-trace", &t]).contains("missing --uplink-trace"));
        assert!(error(&[&t, &t, "--delay", "-5"]).contains("--delay must be a non-negative integer"));
        assert!(error(&[&t, &t, "--delay", "2.5"]).contains("--delay must be"));
        assert!(error(&[&t, &t, "--uplink-loss", "1.5"]).contains("probability in [0, 1]"));
        assert!(error(&[&t, &t, "--downlink-loss", "-0.1"]).contains("probability in [0, 1]"));
        assert!(error(&[&t, &t, "--uplink-queue", "red"]).contains("unknown queue type"));
        assert!(error(&[&t, &t, "--uplink-queue-args", "packets=5"]).contains("does not take arguments"));
        assert!(error(&[&t, &t, "--bogus"]).contains("unknown option --bogus"));
        assert!(error(&[&t, &t, "--run", "middle:ls"]).contains("expected SIDE[@SECONDS]:COMMAND"));
        assert!(error(&[&t, &t, "--stop-after", "0"]).contains("more than 0"));
        assert!(error(&[&t, &t, "--flow-port", "0"]).contains("a port from 1 to 65535"));
        assert!(error(&[&t, &t, "--flow-port", "70000"]).contains("a port from 1 to 65535"));
        assert!(error(&[&t, &t, "--flow-port", "50001", "--flow-port", "50001"]).contains("given twice"));
        assert!(error(&[&t, &t, "--flows-end-alone=yes"]).contains("takes no value"));
        assert!(error(&[&t, "/nonexistent/trace"]).contains("cannot read trace file /nonexistent/trace"));
        let bad = trace_file("1\n2 \n");
        assert!(error(&[&bad, &t]).contains(":2: invalid integer"));
        assert!(error(&[&t, &t, "--timing", "exact"]).contains("--timing must be mahimahi or ideal"));
        assert!(error(&[&t, &t, "--backend", "ns3"]).contains("--backend must be engine or mahimahi"));
        assert!(error(&[&t, &t, "--mahimahi-user", "nobody"]).contains("goes with --backend mahimahi"));
        assert!(error(&[&t, &t, "--backend", "mahimahi", "--mahimahi-user", "root"]).contains("refuse to run as root"));
    }

    #[test]
    fn mahimahi_timing_and_the_engine_are_the_defaults() {
        let t = trace_file("1\n");
        let Parsed::Run(c) = parse(&args(&[&t, &t])).unwrap() else { panic!() };
        assert_eq!(c.timing, Timing::Mahimahi);
        assert!(matches!(c.backend, Backend::Engine));
        let Parsed::Run(c) = parse(&args(&[&t, &t, "--timing=ideal"])).unwrap() else { panic!() };
        assert_eq!(c.timing, Timing::Ideal);
    }

    #[test]
    fn a_root_user_is_refused_with_the_fix() {
        assert!(User::lookup("root").unwrap_err().message.contains("refuse to run as root"));
        assert!(User::lookup("no-such-user-here").unwrap_err().message.contains("no such user"));
    }
}
