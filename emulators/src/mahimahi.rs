//! `--backend mahimahi`: the same run through the user's real Mahimahi shells instead of the
//! engine's own link, so that a calibration can run on — or an exported emulator be checked
//! in — the emulator a researcher already trusts.
//!
//! The shells (`mm-delay D [mm-loss uplink p] [mm-loss downlink q] mm-link UP DOWN ...`, the
//! command line an export prints) are started as an unprivileged user (they are setuid root
//! and refuse to run as root) in a fresh network namespace of their own, which plays the
//! receiver's side: the receiver endpoints run there, on the outermost shell's address
//! (`MAHIMAHI_BASE`). The shells' innermost namespace is the sender's side: a placeholder
//! process holds it, and the sender endpoints are started inside it. Taps on the innermost and
//! outermost TUN devices ([`crate::tap`]) see every packet enter and leave the shells and
//! write the same Pantheon-format logs the engine writes; the shells' own `mm-link` logs are the
//! Mahimahi-format logs. Everything is gone when the run ends: the shells are killed with
//! their PID namespace, and their namespaces, devices and NAT rules with them.

use crate::config::{Config, User};
use crate::error::{Error, Result};
use crate::flows::Flows;
use crate::logs::DirectionLogs;
use crate::netns;
use crate::packet::Ms;
use crate::stage::LinkObserver;
use crate::tap::{identity, Matcher, Seen, Tap};
use serde_json::json;
use std::ffi::CString;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The placeholder process that holds the shells' innermost namespace: `sleep` with an
/// argument no one else uses, so it can be found.
const PLACEHOLDER: &str = "2147483.25";
/// How long the shells may take to come up.
const START_TIMEOUT: Duration = Duration::from_secs(15);

/// The Mahimahi command line for `config`, with `traces` as (uplink, downlink) trace paths and
/// the link logs written to `logs`; each shell only where the path needs it, as the export
/// writes it.
pub fn shell_command(config: &Config, traces: (&Path, &Path), logs: (&Path, &Path)) -> Vec<String> {
    let mut argv = Vec::new();
    if config.delay_ms > 0 {
        argv.extend(["mm-delay".to_string(), config.delay_ms.to_string()]);
    }
    for (direction, p) in [("uplink", config.uplink.loss), ("downlink", config.downlink.loss)] {
        if p > 0.0 {
            argv.extend(["mm-loss".to_string(), direction.to_string(), p.to_string()]);
        }
    }
    argv.extend(["mm-link".to_string(), traces.0.display().to_string(), traces.1.display().to_string()]);
    for (direction, link) in [("uplink", &config.uplink), ("downlink", &config.downlink)] {
        let (kind, args) = link.queue.mahimahi_arguments();
        if kind != "infinite" {
            argv.push(format!("--{direction}-queue={kind}"));
            argv.push(format!("--{direction}-queue-args={args}"));
        }
    }
    argv.push(format!("--uplink-log={}", logs.0.display()));
    argv.push(format!("--downlink-log={}", logs.1.display()));
    argv
}

/// A started Mahimahi path: the shells, the two sides' namespaces and the taps.
pub struct Shells {
    /// The namespace the shells were started in: the receiver's side.
    pub outer: OwnedFd,
    /// The shells' innermost namespace: the sender's side.
    pub inner: OwnedFd,
    pub receiver_address: Ipv4Addr,
    pub sender_address: Ipv4Addr,
    /// Init of the shells' PID namespace (killing it ends every shell).
    pub pid: libc::pid_t,
    /// The command line, as a person would type it.
    pub command: String,
    workdir: PathBuf,
    taps: [Tap; 2],
}

impl Drop for Shells {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.workdir);
    }
}

fn find_program(name: &str) -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file()).ok_or_else(|| {
        Error::environment(format!(
            "--backend mahimahi needs Mahimahi's {name} on PATH; build Mahimahi (./autogen.sh && ./configure && make && sudo make install) or use --backend engine"
        ))
    })?;
    let meta = std::fs::metadata(&found)
        .map_err(|e| Error::environment(format!("cannot inspect {}: {e}", found.display())))?;
    if meta.uid() != 0 || meta.mode() & 0o4000 == 0 {
        return Err(Error::environment(format!(
            "{} is not setuid root, so it cannot create its namespaces: install Mahimahi with `make install` (it sets the bit) or `chown root {0} && chmod u+s {0}`",
            found.display()
        )));
    }
    Ok(found)
}

fn shell_quote(word: &str) -> String {
    if !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || "-_=./:,@%+".contains(c)) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

fn make_workdir(user: &User) -> Result<PathBuf> {
    let template =
        CString::new(std::env::temp_dir().join("calibrate-mahimahi-XXXXXX").display().to_string()).expect("path");
    let mut raw = template.into_bytes_with_nul();
    let made = unsafe { libc::mkdtemp(raw.as_mut_ptr() as *mut libc::c_char) };
    if made.is_null() {
        return Err(Error::environment(format!(
            "cannot create a working directory: {}",
            std::io::Error::last_os_error()
        )));
    }
    raw.pop();
    let dir = PathBuf::from(String::from_utf8(raw).expect("utf-8 path"));
    let c = CString::new(dir.display().to_string()).expect("path");
    if unsafe { libc::chown(c.as_ptr(), user.uid, user.gid) } != 0 {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(Error::environment(format!(
            "cannot hand {} to {}: {}",
            dir.display(),
            user.name,
            std::io::Error::last_os_error()
        )));
    }
    Ok(dir)
}

/// How the shells are scheduled: real-time as the engine's own loop is (`--realtime-priority`),
/// so that the two backends compare like with like, or, with priority 0, under normal
/// scheduling as when Mahimahi is run by hand. They run one priority above the engine, whose
/// only work here is its taps: at the same SCHED_FIFO priority the taps, reading every packet,
/// held the shells back (cubic at 100 Mbit/s, 5 ms, 30 packets: 71.8 Mbit/s over five runs
/// against 78.6 with the shells above them, and 80.5 in the engine). The shell that starts them
/// takes the priority (skipped when not permitted, as for the engine) and every shell process
/// inherits it; the endpoints are started by the engine, not by the shells, and keep normal
/// scheduling.
///
/// It matters: Mahimahi's ferry processes are ordinary tasks, and where they wait for one
/// another's CPU a loss-limited flow sees it: on a small host under normal scheduling a fast,
/// shallow-buffered link goes in on-off bursts of a window, and cubic gets far less of it than
/// through the same shells at SCHED_FIFO, which match the engine (experiments/README.md, "The
/// shallow-buffer gap is how the host schedules Mahimahi's shells").
fn scheduling_prefix(realtime_priority: i32) -> String {
    if realtime_priority > 0 {
        let above_the_taps = (realtime_priority + 1).min(99);
        format!("chrt --fifo --pid {above_the_taps} $$ 2>/dev/null; ")
    } else {
        String::new()
    }
}

/// The pid of the placeholder inside the PID namespace whose init is `init`, if it runs yet.
fn find_placeholder(init: libc::pid_t) -> Option<libc::pid_t> {
    let target = std::fs::read_link(format!("/proc/{init}/ns/pid")).ok()?;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<libc::pid_t>() else { continue };
        if std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok().as_ref() != Some(&target) {
            continue;
        }
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
        let words: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        if words.len() >= 2 && words[0].ends_with(b"sleep") && words[1] == PLACEHOLDER.as_bytes() {
            return Some(pid);
        }
    }
    None
}

fn environment_of(pid: libc::pid_t, key: &str) -> Option<String> {
    let data = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    data.split(|b| *b == 0).find_map(|entry| {
        let text = String::from_utf8_lossy(entry);
        text.strip_prefix(&format!("{key}=")).map(str::to_string)
    })
}

fn last_line(path: &Path) -> String {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| t.lines().rev().find(|l| !l.trim().is_empty()).map(str::to_string))
        .unwrap_or_default()
}

impl Shells {
    /// Start the shells for `config` as `user` and wait until the path is up.
    pub fn start(
        config: &Config,
        user: &User,
        spawn: impl Fn(&[String], RawFd) -> Result<libc::pid_t>,
    ) -> Result<Shells> {
        for program in ["mm-delay", "mm-loss", "mm-link"] {
            let needed = match program {
                "mm-delay" => config.delay_ms > 0,
                "mm-loss" => config.uplink.loss > 0.0 || config.downlink.loss > 0.0,
                _ => true,
            };
            if needed {
                find_program(program)?;
            }
        }
        if std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").map(|v| v.trim() == "0").unwrap_or(false) {
            return Err(Error::environment(
                "Mahimahi's shells need IP forwarding (their nested namespaces take the host's setting): run `sysctl -w net.ipv4.ip_forward=1`",
            ));
        }
        let workdir = make_workdir(user)?;
        let cleanup = |e: Error| {
            let _ = std::fs::remove_dir_all(&workdir);
            e
        };
        let mut traces = Vec::new();
        for (name, link) in [("uplink.trace", &config.uplink), ("downlink.trace", &config.downlink)] {
            let copy = workdir.join(name);
            std::fs::copy(&link.trace_path, &copy)
                .and_then(|_| std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o644)))
                .map_err(|e| {
                    cleanup(Error::environment(format!("cannot copy the trace {}: {e}", link.trace_path.display())))
                })?;
            traces.push(copy);
        }
        let (up_log, down_log) = (workdir.join("uplink.log"), workdir.join("downlink.log"));
        let shells = shell_command(config, (&traces[0], &traces[1]), (&up_log, &down_log));
        let command = shells.iter().map(|w| shell_quote(w)).collect::<Vec<_>>().join(" ");
        let errors = workdir.join("shells.stderr");
        let script = format!(
            "{}exec setpriv --reuid={} --regid={} --clear-groups -- {command} -- sleep {PLACEHOLDER} 2>{}",
            scheduling_prefix(config.realtime_priority),
            user.uid,
            user.gid,
            shell_quote(&errors.display().to_string())
        );
        let outer = netns::create_namespace(true).map_err(cleanup)?;
        let pid = spawn(&["/bin/sh".into(), "-c".into(), script], outer.as_raw_fd()).map_err(cleanup)?;
        let kill = |e: Error| {
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
            cleanup(e)
        };
        let deadline = Instant::now() + START_TIMEOUT;
        let placeholder = loop {
            if let Some(found) = find_placeholder(pid) {
                break found;
            }
            let mut status = 0;
            if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
                let why = last_line(&errors);
                let _ = std::fs::remove_dir_all(&workdir);
                return Err(Error::runtime(format!(
                    "Mahimahi's shells exited before the path was up (status {}): {}",
                    crate::endpoint::exit_code(status),
                    if why.is_empty() { "they printed nothing".to_string() } else { why }
                )));
            }
            if Instant::now() > deadline {
                return Err(kill(Error::runtime(format!(
                    "Mahimahi's shells did not bring the path up within {} s: {}",
                    START_TIMEOUT.as_secs(),
                    last_line(&errors)
                ))));
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let inner = std::fs::File::open(format!("/proc/{placeholder}/ns/net"))
            .map_err(|e| kill(Error::runtime(format!("cannot open the shells' innermost namespace: {e}"))))?;
        let inner: OwnedFd = inner.into();
        let base = environment_of(placeholder, "MAHIMAHI_BASE")
            .and_then(|v| v.parse::<Ipv4Addr>().ok())
            .ok_or_else(|| kill(Error::runtime("the shells did not set MAHIMAHI_BASE")))?;
        let set_up = || -> Result<(Ipv4Addr, [Tap; 2])> {
            netns::tune_namespace(inner.as_raw_fd())?;
            let (_, sender_address) = netns::device_address(inner.as_raw_fd(), Some("ingress"), None)?;
            let (outer_device, _) = netns::device_address(outer.as_raw_fd(), None, Some(base))?;
            let taps = [Tap::open(inner.as_raw_fd(), "ingress")?, Tap::open(outer.as_raw_fd(), &outer_device)?];
            Ok((sender_address, taps))
        };
        let (sender_address, taps) = set_up().map_err(kill)?;
        Ok(Shells { outer, inner, receiver_address: base, sender_address, pid, command, workdir, taps })
    }

    pub fn tap_fds(&self) -> [RawFd; 2] {
        [self.taps[0].fd(), self.taps[1].fd()]
    }

    fn uplink_log(&self) -> PathBuf {
        self.workdir.join("uplink.log")
    }

    fn downlink_log(&self) -> PathBuf {
        self.workdir.join("downlink.log")
    }

    pub fn errors(&self) -> String {
        last_line(&self.workdir.join("shells.stderr"))
    }
}

#[derive(Default, Clone, Copy)]
struct Counters {
    entered: u64,
    left: u64,
    unknown: u64,
}

/// Measuring a running Mahimahi path: the taps' sightings matched into Pantheon-format logs.
pub struct Measurement {
    matchers: [Matcher; 2],
    counters: [Counters; 2],
    /// Flow numbers by the sender side's addresses (as the engine numbers them) and, learned
    /// from the data that comes out, by the receiver side's (after the shells' NAT).
    inner_flows: Flows,
    outer_flows: Flows,
    buffer: Vec<u8>,
}

impl Measurement {
    /// `flow_ports`: as the engine's (`Flows::with_ports`).
    pub fn new(flow_ports: &[u16]) -> Self {
        Measurement {
            matchers: [Matcher::default(), Matcher::default()],
            counters: [Counters::default(); 2],
            inner_flows: Flows::with_ports(flow_ports.to_vec()),
            outer_flows: Flows::default(),
            buffer: vec![0; 65536],
        }
    }

    /// Read what tap `which` (0 inner, 1 outer) has; `init_us` is the zero point's wall-clock
    /// time in microseconds. `logs` are [uplink (data), downlink (ACKs)].
    pub fn read(&mut self, shells: &Shells, which: usize, init_us: u64, logs: &mut [DirectionLogs; 2]) -> Result<()> {
        for _ in 0..256 {
            let Some((n, seen, wall_us)) = shells.taps[which].read(&mut self.buffer)? else { return Ok(()) };
            let packet = &self.buffer[..n];
            let Some(id) = identity(packet) else { continue };
            let at_us = wall_us.saturating_sub(init_us);
            // (inner, Sent): data enters; (outer, Received): data leaves;
            // (outer, Sent): an ACK enters; (inner, Received): an ACK leaves.
            let (direction, entering) = match (which, seen) {
                (0, Seen::Sent) => (0, true),
                (1, Seen::Received) => (0, false),
                (1, Seen::Sent) => (1, true),
                _ => (1, false),
            };
            let size = packet.len();
            if entering {
                let flow = if which == 0 {
                    self.inner_flows.id(packet)
                } else {
                    self.outer_flows.get(packet).unwrap_or_else(|| self.inner_flows.id(packet))
                };
                self.matchers[direction].entered(id, at_us, flow);
                self.counters[direction].entered += 1;
                if let Some(log) = &mut logs[direction].pantheon {
                    log.arrival(at_us, size, flow);
                }
            } else if let Some((entered_us, flow)) = self.matchers[direction].left(id) {
                if which == 1 {
                    self.outer_flows.assign(packet, flow);
                }
                self.counters[direction].left += 1;
                if let Some(log) = &mut logs[direction].pantheon {
                    log.departure(at_us.max(entered_us), size, at_us.saturating_sub(entered_us), flow);
                }
            } else {
                self.counters[direction].unknown += 1;
            }
        }
        Ok(())
    }

    /// After the shells have stopped: the delivery opportunities and queue drops from their
    /// `mm-link` logs go into the Pantheon logs (as the engine's do), the logs are copied where
    /// they were asked for, and the per-direction summary is returned.
    pub fn finish(
        &mut self,
        shells: &Shells,
        config: &Config,
        init_ms: u64,
        logs: &mut [DirectionLogs; 2],
    ) -> Result<[serde_json::Value; 2]> {
        let sources = [shells.uplink_log(), shells.downlink_log()];
        let targets = [&config.uplink_log, &config.downlink_log];
        let mut drops = [0u64; 2];
        for d in 0..2 {
            let text = std::fs::read_to_string(&sources[d]).unwrap_or_default();
            let offset = mahimahi_init(&text).map(|mm| mm as i64 - init_ms as i64).unwrap_or(0);
            for line in text.lines().filter(|l| !l.starts_with('#')) {
                let mut words = line.split_whitespace();
                let (Some(t), Some(kind)) = (words.next().and_then(|t| t.parse::<i64>().ok()), words.next()) else {
                    continue;
                };
                let ours = t + offset;
                if kind == "#" && ours >= 0 {
                    if let Some(log) = &mut logs[d].pantheon {
                        log.opportunity(ours as Ms);
                    }
                } else if kind == "d" {
                    drops[d] += words.next().and_then(|n| n.parse::<u64>().ok()).unwrap_or(1);
                }
            }
            if let Some(target) = targets[d] {
                std::fs::write(target, &text)
                    .map_err(|e| Error::runtime(format!("cannot write {}: {e}", target.display())))?;
            }
        }
        let tap_drops: u64 = shells.taps.iter().map(Tap::drops).sum();
        Ok([0, 1].map(|d| {
            let c = self.counters[d];
            json!({
                "arrived_packets": c.entered,
                "delivered_packets": c.left,
                "queue_dropped_packets": drops[d],
                "unmatched_packets": self.matchers[d].waiting(),
                "unknown_departures": c.unknown,
                "tap_dropped_packets": tap_drops,
            })
        }))
    }
}

/// The `# init timestamp:` of a Mahimahi log.
fn mahimahi_init(text: &str) -> Option<u64> {
    text.lines().take(10).find_map(|l| l.strip_prefix("# init timestamp: ")).and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(args: &[&str]) -> Config {
        let trace = crate::config::tests::trace_file("1\n");
        let t = trace.to_string();
        let mut all: Vec<String> = vec![t.clone(), t];
        all.extend(args.iter().map(|s| s.to_string()));
        let parsed = crate::config::parse(&all);
        match parsed.unwrap() {
            crate::config::Parsed::Run(c) => *c,
            _ => panic!(),
        }
    }

    #[test]
    fn the_command_line_has_each_shell_only_where_the_path_needs_it() {
        let p = Path::new;
        let c = config(&[
            "--delay",
            "20",
            "--uplink-loss",
            "0.01",
            "--uplink-queue=droptail",
            "--uplink-queue-args=packets=100",
        ]);
        assert_eq!(
            shell_command(&c, (p("u"), p("d")), (p("ul"), p("dl"))).join(" "),
            "mm-delay 20 mm-loss uplink 0.01 mm-link u d --uplink-queue=droptail --uplink-queue-args=packets=100 --uplink-log=ul --downlink-log=dl"
        );
        let c = config(&["--downlink-loss", "0.5"]);
        assert_eq!(
            shell_command(&c, (p("u"), p("d")), (p("ul"), p("dl"))).join(" "),
            "mm-loss downlink 0.5 mm-link u d --uplink-log=ul --downlink-log=dl"
        );
    }

    #[test]
    fn quoting_keeps_words_whole() {
        assert_eq!(shell_quote("--uplink-queue-args=packets=100"), "--uplink-queue-args=packets=100");
        assert_eq!(shell_quote("/tmp/a b"), "'/tmp/a b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
    }

    #[test]
    fn the_shells_take_the_engines_priority_or_none() {
        // The start script's first words: the shell takes SCHED_FIFO one above the engine's taps
        // (failure ignored, as for the engine) before it execs the shells, which inherit it;
        // priority 0 adds nothing.
        assert_eq!(scheduling_prefix(10), "chrt --fifo --pid 11 $$ 2>/dev/null; ");
        assert_eq!(scheduling_prefix(99), "chrt --fifo --pid 99 $$ 2>/dev/null; ");
        assert_eq!(scheduling_prefix(0), "");
    }

    #[test]
    fn the_mahimahi_log_init_timestamp_is_read() {
        assert_eq!(
            mahimahi_init("# mahimahi mm-link (Uplink)\n# init timestamp: 1795344073412\n# base timestamp: 35\n"),
            Some(1795344073412)
        );
    }
}
