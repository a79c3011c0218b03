//! The real-time loop around the pure stages: read packets from the two TUN devices, push
//! them through each direction's pipeline, write what is due, and sleep until the next
//! deadline. Deadline-driven: a late wake-up releases everything that became due, at the
//! times it was scheduled, so lateness adds jitter but never shifts the schedule.

use crate::config::Backend;
use crate::config::Config;
use crate::delay::Delay;
use crate::endpoint::{self, EndpointSpec, SideName};
use crate::error::{Error, Result};
use crate::ferry::{Ferries, Timed, Timing, Wakes};
use crate::flows::Flows;
use crate::lateness::Lateness;
use crate::link::Link;
use crate::logs::{DirectionLogs, LinkDescription, MahimahiLog, PantheonLog};
use crate::loss::Loss;
use crate::mahimahi::{Measurement, Shells};
use crate::netns::{self, Side, RECEIVER_ADDRESS, SENDER_ADDRESS};
use crate::packet::{Packet, OPPORTUNITY_BYTES, TUN_HEADER};
use crate::stage::{Pipeline, Stage};
use serde_json::json;
use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Largest IP packet that fits one delivery opportunity.
const MAX_PACKET: usize = OPPORTUNITY_BYTES - TUN_HEADER;
/// Packets read from one device before looking at the clock and the other device again.
const READ_BATCH: usize = 64;

/// Time since the emulation's zero point, whose wall-clock value is a whole millisecond
/// (Mahimahi's and Pantheon's "init timestamp").
pub struct Clock {
    start: Instant,
    pub init_timestamp_ms: u64,
}

impl Clock {
    pub fn start() -> Clock {
        let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let into_ms = Duration::from_nanos(u64::from(wall.subsec_nanos()) % 1_000_000);
        let now = Instant::now();
        Clock { start: now.checked_sub(into_ms).unwrap_or(now), init_timestamp_ms: wall.as_millis() as u64 }
    }

    pub fn now_us(&self) -> u64 {
        self.start.elapsed().as_micros() as u64
    }
}

#[derive(Default, Clone, Copy)]
struct Counters {
    arrived_packets: u64,
    arrived_bytes: u64,
    delivered_packets: u64,
    delivered_bytes: u64,
    write_errors: u64,
}

/// One direction of the path: packets read from `input` cross `pipeline` to `output`.
struct Direction {
    name: &'static str,
    input: RawFd,
    output: RawFd,
    path: Path,
    logs: DirectionLogs,
    counters: Counters,
    released: Vec<(u64, Packet)>,
    scratch: Vec<Packet>,
    lateness: Lateness,
}

impl Direction {
    fn read_batch(&mut self, clock: &Clock, flows: &mut Flows, pool: &mut Vec<Vec<u8>>) -> Result<()> {
        for _ in 0..READ_BATCH {
            let mut buffer = pool.pop().unwrap_or_default();
            buffer.resize(2048, 0);
            let n = unsafe { libc::read(self.input, buffer.as_mut_ptr() as *mut libc::c_void, buffer.len()) };
            if n < 0 {
                pool.push(buffer);
                let e = std::io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EAGAIN) => return Ok(()),
                    Some(libc::EINTR) => continue,
                    _ => return Err(Error::runtime(format!("reading the {} TUN device failed: {e}", self.name))),
                }
            }
            let n = n as usize;
            if n > MAX_PACKET {
                return Err(Error::runtime(format!(
                    "a {n}-byte packet entered the {}, larger than one delivery opportunity ({OPPORTUNITY_BYTES} bytes with the {TUN_HEADER}-byte header): the endpoints must keep to the 1500-byte MTU",
                    self.name
                )));
            }
            buffer.truncate(n);
            let at_us = clock.now_us();
            let flow = flows.id(&buffer);
            self.counters.arrived_packets += 1;
            self.counters.arrived_bytes += n as u64;
            if let Some(log) = &mut self.logs.pantheon {
                log.arrival(at_us, n, flow);
            }
            let packet = Packet { data: buffer, time: at_us / 1000, entered_us: at_us, flow };
            self.path.accept(packet, at_us, &mut self.released, &mut self.logs);
        }
        Ok(())
    }

    /// Emulate up to `now` and write out everything that left the path.
    fn advance(&mut self, now_us: u64, clock: &Clock, pool: &mut Vec<Vec<u8>>) {
        self.path.release(now_us, &mut self.released, &mut self.scratch, &mut self.logs);
        for (due_us, packet) in self.released.drain(..) {
            let n = unsafe { libc::write(self.output, packet.data.as_ptr() as *const libc::c_void, packet.data.len()) };
            if n == packet.data.len() as isize {
                let at_us = clock.now_us();
                self.lateness.record(due_us, at_us);
                self.counters.delivered_packets += 1;
                self.counters.delivered_bytes += packet.data.len() as u64;
                if let Some(log) = &mut self.logs.pantheon {
                    log.departure(at_us, packet.data.len(), at_us.saturating_sub(packet.entered_us), packet.flow);
                }
            } else {
                self.counters.write_errors += 1;
            }
            pool.push(packet.data);
        }
        // Nothing logged from now on can be earlier than `now_us` (see PantheonLog).
        if let Some(log) = &mut self.logs.pantheon {
            log.flush_until(now_us);
        }
    }

    fn summary(&self) -> serde_json::Value {
        let c = self.counters;
        let in_flight = self.path.held() as u64;
        json!({
            "arrived_packets": c.arrived_packets,
            "arrived_bytes": c.arrived_bytes,
            "delivered_packets": c.delivered_packets,
            "delivered_bytes": c.delivered_bytes,
            "queue_dropped_packets": self.logs.queue_drops,
            "loss_dropped_packets": c.arrived_packets.saturating_sub(c.delivered_packets + c.write_errors + in_flight + self.logs.queue_drops),
            "in_flight_packets": in_flight,
            "write_errors": c.write_errors,
            "release_lateness": self.lateness.summary(),
        })
    }
}

/// One direction of the path, with Mahimahi's timing or the idealised one.
#[allow(
    clippy::large_enum_variant,
    reason = "two per run, made once; boxing would add an indirection on the packet path"
)]
enum Path {
    Mahimahi(Ferries),
    Ideal(Pipeline),
}

impl Path {
    /// Data: link queue and trace -> loss -> delay. ACKs: delay -> loss -> link, as in
    /// `mm-delay D mm-loss uplink p mm-loss downlink q mm-link UP DOWN`. With Mahimahi's timing
    /// each shell present in that command line is a process in both directions (a loss shell
    /// passes the other direction through untouched); the idealised pipeline has the three
    /// stages only.
    fn new(config: &Config, data_direction: bool) -> Path {
        let link = if data_direction { &config.uplink } else { &config.downlink };
        let seed = config.seed.wrapping_mul(2).wrapping_add(u64::from(!data_direction));
        let link_stage = Link::new(link.trace.clone(), link.queue, 0);
        match config.timing {
            Timing::Ideal => {
                let stages: Vec<Box<dyn Stage + Send>> = vec![
                    Box::new(link_stage),
                    Box::new(Loss::new(link.loss, seed)),
                    Box::new(Delay::new(config.delay_ms)),
                ];
                Path::Ideal(Pipeline::new(if data_direction { stages } else { stages.into_iter().rev().collect() }))
            }
            Timing::Mahimahi => {
                // From the innermost shell out: mm-link, mm-loss downlink, mm-loss uplink, mm-delay.
                let mut shells: Vec<(Box<dyn Timed + Send>, Wakes)> =
                    vec![(Box::new(link_stage), Wakes::EveryOpportunity)];
                for (shell_direction_is_data, p) in [(false, config.downlink.loss), (true, config.uplink.loss)] {
                    if p > 0.0 {
                        let here = if shell_direction_is_data == data_direction { link.loss } else { 0.0 };
                        shells.push((Box::new(Loss::new(here, seed)), Wakes::WhenHolding));
                    }
                }
                if config.delay_ms > 0 {
                    shells.push((Box::new(Delay::new(config.delay_ms)), Wakes::WhenHolding));
                }
                if !data_direction {
                    shells.reverse();
                }
                Path::Mahimahi(Ferries::new(shells, seed.wrapping_add(0x5eed)))
            }
        }
    }

    fn accept(&mut self, packet: Packet, at_us: u64, out: &mut Vec<(u64, Packet)>, logs: &mut DirectionLogs) {
        match self {
            Path::Mahimahi(ferries) => ferries.accept(packet, at_us, out, logs),
            Path::Ideal(pipeline) => pipeline.accept(packet, logs),
        }
    }

    fn release(
        &mut self,
        now_us: u64,
        out: &mut Vec<(u64, Packet)>,
        scratch: &mut Vec<Packet>,
        logs: &mut DirectionLogs,
    ) {
        match self {
            Path::Mahimahi(ferries) => ferries.release(now_us, out, logs),
            Path::Ideal(pipeline) => {
                pipeline.release(now_us / 1000, scratch, logs);
                out.extend(scratch.drain(..).map(|p| (p.time * 1000, p)));
            }
        }
    }

    fn next_wake_us(&self) -> Option<u64> {
        match self {
            Path::Mahimahi(ferries) => ferries.next_wake_us(),
            Path::Ideal(pipeline) => pipeline.next_wake().map(|ms| ms * 1000),
        }
    }

    fn held(&self) -> usize {
        match self {
            Path::Mahimahi(ferries) => ferries.held(),
            Path::Ideal(pipeline) => pipeline.held(),
        }
    }
}

struct Running {
    spec: EndpointSpec,
    pid: Option<libc::pid_t>,
    exit_code: Option<i32>,
    ended_us: Option<u64>,
    stopped_by_engine: bool,
}

#[derive(Debug, Clone)]
enum StopReason {
    Deadline,
    /// Something failed while running (the error is reported).
    Failure,
    Signal(i32),
    EndpointExited(usize),
}

/// Files this run created, removed again if it fails before starting.
struct CreatedFiles(Vec<PathBuf>);
impl CreatedFiles {
    fn remove_all(&mut self) {
        for path in self.0.drain(..) {
            let _ = std::fs::remove_file(path);
        }
    }
}

fn open_logs(config: &Config, clock: &Clock, created: &mut CreatedFiles) -> Result<[DirectionLogs; 2]> {
    let mut result = [DirectionLogs::default(), DirectionLogs::default()];
    let links = [(&config.uplink, "Uplink"), (&config.downlink, "Downlink")];
    let mahimahi = [&config.uplink_log, &config.downlink_log];
    let pantheon = [&config.datalink_log, &config.acklink_log];
    for d in 0..2 {
        // With Mahimahi's shells, their own mm-link writes these.
        if let Some(path) = mahimahi[d].as_ref().filter(|_| matches!(config.backend, Backend::Engine)) {
            let (link, direction) = links[d];
            let description = LinkDescription {
                direction,
                trace: &link.trace_path,
                command_line: &config.command_line,
                queue: &link.queue.describe(),
                init_timestamp_ms: clock.init_timestamp_ms,
                base: 0,
            };
            result[d].mahimahi = Some(MahimahiLog::create(path, &description)?);
            created.0.push(path.clone());
        }
        if let Some(path) = pantheon[d] {
            result[d].pantheon = Some(PantheonLog::create(path, clock.init_timestamp_ms)?);
            created.0.push(path.clone());
        }
    }
    Ok(result)
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        libc::SIGQUIT => "SIGQUIT",
        _ => "a signal",
    }
}

/// What carries the packets: the engine's own link, or the user's Mahimahi shells.
#[allow(
    clippy::large_enum_variant,
    reason = "one per run, made once; boxing would add an indirection on the packet path"
)]
enum Emulation {
    Engine { sender: Side, receiver: Side, directions: [Direction; 2] },
    Mahimahi { shells: Shells, measurement: Measurement, logs: [DirectionLogs; 2], init_us: u64 },
}

impl Emulation {
    fn start(config: &Config, clock: &Clock, logs: [DirectionLogs; 2]) -> Result<Emulation> {
        match &config.backend {
            Backend::Engine => {
                let sender = netns::create_side(SENDER_ADDRESS, RECEIVER_ADDRESS)?;
                let receiver = netns::create_side(RECEIVER_ADDRESS, SENDER_ADDRESS)?;
                let [uplink_logs, downlink_logs] = logs;
                let directions = [
                    Direction {
                        name: "uplink",
                        input: sender.tun.as_raw_fd(),
                        output: receiver.tun.as_raw_fd(),
                        path: Path::new(config, true),
                        logs: uplink_logs,
                        counters: Counters::default(),
                        released: Vec::new(),
                        scratch: Vec::new(),
                        lateness: Lateness::default(),
                    },
                    Direction {
                        name: "downlink",
                        input: receiver.tun.as_raw_fd(),
                        output: sender.tun.as_raw_fd(),
                        path: Path::new(config, false),
                        logs: downlink_logs,
                        counters: Counters::default(),
                        released: Vec::new(),
                        scratch: Vec::new(),
                        lateness: Lateness::default(),
                    },
                ];
                Ok(Emulation::Engine { sender, receiver, directions })
            }
            Backend::Mahimahi(user) => {
                let spawn = |argv: &[String], netns: RawFd| {
                    let spec =
                        EndpointSpec { side: SideName::Receiver, start: 0.0, argv: argv.to_vec(), interactive: false };
                    endpoint::spawn(&spec, netns, &[])
                };
                let shells = Shells::start(config, user, spawn)?;
                Ok(Emulation::Mahimahi {
                    shells,
                    measurement: Measurement::new(&config.flow_ports),
                    logs,
                    init_us: clock.init_timestamp_ms * 1000,
                })
            }
        }
    }

    fn fds(&self) -> [RawFd; 2] {
        match self {
            Emulation::Engine { directions, .. } => [directions[0].input, directions[1].input],
            Emulation::Mahimahi { shells, .. } => shells.tap_fds(),
        }
    }

    fn read(&mut self, i: usize, clock: &Clock, flows: &mut Flows, pool: &mut Vec<Vec<u8>>) -> Result<()> {
        match self {
            Emulation::Engine { directions, .. } => directions[i].read_batch(clock, flows, pool),
            Emulation::Mahimahi { shells, measurement, logs, init_us } => measurement.read(shells, i, *init_us, logs),
        }
    }

    fn advance(&mut self, now_us: u64, clock: &Clock, pool: &mut Vec<Vec<u8>>) {
        match self {
            Emulation::Engine { directions, .. } => {
                for direction in directions.iter_mut() {
                    direction.advance(now_us, clock, pool);
                }
            }
            Emulation::Mahimahi { logs, .. } => {
                // The taps' times are the kernel's wall clock: leave a margin before writing.
                for log in logs.iter_mut().filter_map(|l| l.pantheon.as_mut()) {
                    log.flush_until(now_us.saturating_sub(TAP_MARGIN_US));
                }
            }
        }
    }

    fn next_wake_us(&self) -> Option<u64> {
        match self {
            Emulation::Engine { directions, .. } => directions.iter().filter_map(|d| d.path.next_wake_us()).min(),
            Emulation::Mahimahi { .. } => None,
        }
    }

    /// The namespace an endpoint of `name` runs in, and its environment.
    fn side(&self, name: SideName) -> (RawFd, Vec<(String, String)>) {
        let (netns, address, peer) = match (self, name) {
            (Emulation::Engine { sender, .. }, SideName::Sender) => {
                (sender.netns.as_raw_fd(), sender.address, sender.peer)
            }
            (Emulation::Engine { receiver, .. }, SideName::Receiver) => {
                (receiver.netns.as_raw_fd(), receiver.address, receiver.peer)
            }
            (Emulation::Mahimahi { shells, .. }, SideName::Sender) => {
                (shells.inner.as_raw_fd(), shells.sender_address, shells.receiver_address)
            }
            (Emulation::Mahimahi { shells, .. }, SideName::Receiver) => {
                (shells.outer.as_raw_fd(), shells.receiver_address, shells.sender_address)
            }
        };
        let mut env = vec![
            ("EMU_SIDE".to_string(), name.as_str().to_string()),
            ("EMU_ADDR".to_string(), address.to_string()),
            ("EMU_PEER".to_string(), peer.to_string()),
        ];
        if name == SideName::Sender {
            env.push(("MAHIMAHI_BASE".to_string(), peer.to_string()));
        }
        (netns, env)
    }

    /// Close the logs; the per-direction summaries.
    fn finish(&mut self, config: &Config, clock: &Clock) -> (Option<Error>, [serde_json::Value; 2]) {
        match self {
            Emulation::Engine { directions, .. } => {
                let mut failure = None;
                for direction in directions.iter_mut() {
                    if let Err(e) = direction.logs.finish() {
                        failure.get_or_insert(e);
                    }
                }
                (failure, [directions[0].summary(), directions[1].summary()])
            }
            Emulation::Mahimahi { shells, measurement, logs, .. } => {
                let summary = measurement.finish(shells, config, clock.init_timestamp_ms, logs);
                let mut failure = None;
                for log in logs.iter_mut() {
                    if let Err(e) = log.finish() {
                        failure.get_or_insert(e);
                    }
                }
                match summary {
                    Ok(summary) => (failure, summary),
                    Err(e) => (Some(e), [json!({}), json!({})]),
                }
            }
        }
    }
}

/// Kernel timestamps of the taps may trail the loop's clock by this much.
const TAP_MARGIN_US: u64 = 20_000;

/// Run the emulation described by `config`; returns the process exit status.
pub fn run(config: Config) -> Result<i32> {
    let signalfd =
        endpoint::block_into_signalfd(&[libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT, libc::SIGCHLD])
            .map_err(|e| Error::runtime(format!("cannot set up signal handling: {e}")))?;
    unsafe {
        libc::fcntl(signalfd, libc::F_SETFL, libc::O_NONBLOCK);
        // Wake-ups as close to the deadline as the kernel allows (the default slack is 50 µs).
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
    }
    if config.realtime_priority > 0 {
        // Deadlines must not wait behind compilers and endpoints: real-time scheduling for the
        // engine only (children go back to normal). The loop sleeps between deadlines, and the
        // kernel's real-time throttling keeps a share of the CPU for everyone else. Without the
        // privilege this is skipped: the emulation is still correct, only noisier under load.
        let param = libc::sched_param { sched_priority: config.realtime_priority };
        unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, &param) };
    }
    let clock = Clock::start();
    let mut created = CreatedFiles(Vec::new());
    let started = open_logs(&config, &clock, &mut created).and_then(|logs| Emulation::start(&config, &clock, logs));
    let mut emulation = match started {
        Ok(emulation) => emulation,
        Err(e) => {
            created.remove_all();
            return Err(e);
        }
    };
    let mut endpoints: Vec<Running> = config
        .endpoints
        .iter()
        .map(|spec| Running {
            spec: spec.clone(),
            pid: None,
            exit_code: None,
            ended_us: None,
            stopped_by_engine: false,
        })
        .collect();
    // Mahimahi's shells are one more process to stop at the end, and to watch: if they die,
    // the path is gone.
    let shells_index = if let Emulation::Mahimahi { shells, .. } = &emulation {
        let spec = EndpointSpec {
            side: SideName::Receiver,
            start: 0.0,
            argv: vec![shells.command.clone()],
            interactive: false,
        };
        endpoints.push(Running {
            spec,
            pid: Some(shells.pid),
            exit_code: None,
            ended_us: None,
            stopped_by_engine: false,
        });
        Some(endpoints.len() - 1)
    } else {
        None
    };
    let interactive = endpoints.iter().any(|e| e.spec.interactive);
    let deadline_us = config.stop_after.map(|s| (s * 1e6) as u64);
    let mut flows = Flows::with_ports(config.flow_ports.clone());
    let mut pool: Vec<Vec<u8>> = Vec::new();
    let mut failure: Option<Error> = None;
    let stop_reason;

    loop {
        let now_us = clock.now_us();
        emulation.advance(now_us, &clock, &mut pool);
        if deadline_us.is_some_and(|d| now_us >= d) {
            stop_reason = StopReason::Deadline;
            break;
        }
        // Start the endpoints that are due.
        let mut next_start: Option<u64> = None;
        for running in endpoints.iter_mut().filter(|r| r.pid.is_none() && r.exit_code.is_none()) {
            let start_us = (running.spec.start * 1e6) as u64;
            if start_us <= now_us {
                let (netns, env) = emulation.side(running.spec.side);
                match endpoint::spawn(&running.spec, netns, &env) {
                    Ok(pid) => running.pid = Some(pid),
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                }
            } else {
                next_start = Some(next_start.map_or(start_us, |n| n.min(start_us)));
            }
        }
        if failure.is_some() {
            stop_reason = StopReason::Failure;
            break;
        }
        let wake_us = [deadline_us, next_start, emulation.next_wake_us()].into_iter().flatten().min();
        let inputs = emulation.fds();
        let mut fds = [
            libc::pollfd { fd: inputs[0], events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: inputs[1], events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: signalfd, events: libc::POLLIN, revents: 0 },
        ];
        let timeout = wake_us.map(|w| {
            let wait = w.saturating_sub(clock.now_us());
            libc::timespec {
                tv_sec: (wait / 1_000_000) as libc::time_t,
                tv_nsec: ((wait % 1_000_000) * 1000) as libc::c_long,
            }
        });
        let timeout_ptr = timeout.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
        let ready = unsafe { libc::ppoll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ptr, std::ptr::null()) };
        if ready < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                failure = Some(Error::runtime(format!("poll failed: {e}")));
                stop_reason = StopReason::Failure;
                break;
            }
            continue;
        }
        if fds[2].revents != 0 {
            if let Some(reason) = handle_signals(signalfd, &mut endpoints, &clock, interactive) {
                if !(config.flows_end_alone && ends_alone(&reason, &endpoints, shells_index)) {
                    stop_reason = reason;
                    break;
                }
            }
        }
        let mut read_failure = None;
        for (i, fd) in fds[..2].iter().enumerate() {
            if fd.revents & libc::POLLIN != 0 {
                if let Err(e) = emulation.read(i, &clock, &mut flows, &mut pool) {
                    read_failure = Some(e);
                }
            }
        }
        if let Some(e) = read_failure {
            failure = Some(e);
            stop_reason = StopReason::Failure;
            break;
        }
    }
    let end_us = clock.now_us();
    stop_endpoints(&mut endpoints, signalfd, &clock, config.grace);
    // What the taps still hold (the last packets before the shells stopped).
    for i in 0..2 {
        let _ = emulation.read(i, &clock, &mut flows, &mut pool);
    }
    let (log_failure, [uplink_summary, downlink_summary]) = emulation.finish(&config, &clock);
    let shells_errors = match &emulation {
        Emulation::Mahimahi { shells, .. } => shells.errors(),
        Emulation::Engine { .. } => String::new(),
    };
    let flow_count = match &emulation {
        Emulation::Engine { .. } => flows.count(),
        Emulation::Mahimahi { .. } => 0,
    };
    drop(emulation);
    unsafe { libc::close(signalfd) };

    let exits: Vec<serde_json::Value> = endpoints
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != shells_index)
        .map(|(_, r)| {
            json!({
                "side": r.spec.side.as_str(),
                "command": r.spec.describe(),
                "start_s": r.spec.start,
                "started": r.pid.is_some() || r.exit_code.is_some(),
                "exit_code": r.exit_code,
                "ended_at_s": r.ended_us.map(|u| u as f64 / 1e6),
                "stopped_by_engine": r.stopped_by_engine,
            })
        })
        .collect();
    let reason_text = match &stop_reason {
        StopReason::Failure => "failure".to_string(),
        StopReason::Deadline => "deadline".to_string(),
        StopReason::Signal(s) => signal_name(*s).to_string(),
        StopReason::EndpointExited(i) if Some(*i) == shells_index => "mahimahi shells exited".to_string(),
        StopReason::EndpointExited(i) => format!("{} endpoint exited", endpoints[*i].spec.side.as_str()),
    };
    if let Some(path) = &config.summary {
        let mut summary = json!({
            "init_timestamp_ms": clock.init_timestamp_ms,
            "duration_s": end_us as f64 / 1e6,
            "stop_reason": reason_text,
            "backend": config.backend.name(),
            "timing": match config.timing { Timing::Mahimahi => "mahimahi", Timing::Ideal => "ideal" },
            "uplink": uplink_summary,
            "downlink": downlink_summary,
            "endpoints": exits,
        });
        if matches!(config.backend, Backend::Engine) {
            summary["flows"] = json!(flow_count);
        }
        write_atomically(path, &serde_json::to_string_pretty(&summary).expect("json"))?;
    }
    if let Some(e) = failure.or(log_failure) {
        return Err(e);
    }
    match stop_reason {
        StopReason::Deadline | StopReason::Failure => Ok(0),
        StopReason::Signal(s) => {
            eprintln!("calibrate-link: stopped by {}; everything was cleaned up", signal_name(s));
            Ok(128 + s)
        }
        StopReason::EndpointExited(i) if Some(i) == shells_index => Err(Error::runtime(format!(
            "Mahimahi's shells exited on their own after {:.2} s ({}); everything was stopped",
            endpoints[i].ended_us.unwrap_or(0) as f64 / 1e6,
            if shells_errors.is_empty() {
                format!("status {}", endpoints[i].exit_code.unwrap_or(255))
            } else {
                shells_errors
            }
        ))),
        StopReason::EndpointExited(i) => {
            let r = &endpoints[i];
            let code = r.exit_code.unwrap_or(255);
            if r.spec.interactive {
                Ok(code)
            } else if code == 0 {
                Ok(0)
            } else {
                Err(Error::runtime(format!(
                    "the {} endpoint `{}` exited with status {code} after {:.2} s; everything was stopped",
                    r.spec.side.as_str(),
                    r.spec.describe(),
                    r.ended_us.unwrap_or(0) as f64 / 1e6
                )))
            }
        }
    }
}

/// Reap exited endpoints; say why to stop, if it is time.
fn handle_signals(signalfd: RawFd, endpoints: &mut [Running], clock: &Clock, interactive: bool) -> Option<StopReason> {
    let mut reason = None;
    while let Some(signal) = endpoint::read_signal(signalfd) {
        if signal == libc::SIGCHLD {
            if let Some(i) = reap(endpoints, clock) {
                reason.get_or_insert(StopReason::EndpointExited(i));
            }
        } else if !(interactive && (signal == libc::SIGINT || signal == libc::SIGQUIT)) {
            // (In shell mode the terminal's Ctrl-C belongs to the program in the shell.)
            reason = Some(StopReason::Signal(signal));
        }
    }
    reason
}

/// With `--flows-end-alone`: whether the endpoint that exited on its own (`reason`) ends only
/// itself, because another endpoint still runs or has yet to start. Mahimahi's shells exiting,
/// or a signal, always ends the emulation.
fn ends_alone(reason: &StopReason, endpoints: &[Running], shells_index: Option<usize>) -> bool {
    match reason {
        StopReason::EndpointExited(i) if Some(*i) != shells_index => {
            endpoints.iter().enumerate().any(|(j, r)| Some(j) != shells_index && r.exit_code.is_none())
        }
        _ => false,
    }
}

/// Collect exit statuses; returns the first endpoint found to have exited on its own.
fn reap(endpoints: &mut [Running], clock: &Clock) -> Option<usize> {
    let mut first = None;
    loop {
        let mut status = 0;
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return first;
        }
        if let Some(i) = endpoints.iter().position(|r| r.pid == Some(pid)) {
            let running = &mut endpoints[i];
            running.exit_code = Some(endpoint::exit_code(status));
            running.ended_us = Some(clock.now_us());
            running.pid = None;
            if !running.stopped_by_engine {
                first.get_or_insert(i);
            }
        }
    }
}

/// SIGTERM every running endpoint, give them `grace` seconds, then SIGKILL their PID
/// namespaces (which ends every process they started).
fn stop_endpoints(endpoints: &mut [Running], signalfd: RawFd, clock: &Clock, grace: f64) {
    for running in endpoints.iter_mut() {
        if let Some(pid) = running.pid {
            running.stopped_by_engine = true;
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
    }
    let give_up = Instant::now() + Duration::from_secs_f64(grace);
    while endpoints.iter().any(|r| r.pid.is_some()) {
        reap(endpoints, clock);
        let left = give_up.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let mut fd = libc::pollfd { fd: signalfd, events: libc::POLLIN, revents: 0 };
        unsafe { libc::poll(&mut fd, 1, left.as_millis().clamp(1, 50) as i32) };
        while endpoint::read_signal(signalfd).is_some() {}
    }
    for running in endpoints.iter_mut() {
        if let Some(pid) = running.pid.take() {
            let mut status = 0;
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            running.exit_code = Some(endpoint::exit_code(status));
            running.ended_us = Some(clock.now_us());
        }
    }
}

fn write_atomically(path: &std::path::Path, text: &str) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)
        .and_then(|_| std::fs::rename(&tmp, path))
        .map_err(|e| Error::runtime(format!("cannot write {}: {e}", path.display())))
}
