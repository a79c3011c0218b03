//! The schemes this binary can run, and which of them this host supports.
//!
//! What a scheme is — its name, which side runs first, its implementation and description, and
//! (for the Python side) its Pantheon labels, aliases and character — is the registry file
//! calibrate/data/schemes.json, built into this binary (`REGISTRY_JSON`); the Python package
//! reads the same file. Its entries with an `implementation` are ours: kernel TCP (`kernel-tcp`,
//! the congestion control by name), QUIC (`quic`) or our UDP transport (`udp`), each with a
//! `controller` that names the code (`QuicCc::from_name`, `UdpCc::from_name`).
//!
//! Kernel TCP schemes are named after the congestion control (`cubic`, `reno`, `bbr`, ...)
//! and exist when the kernel lists it in `net.ipv4.tcp_available_congestion_control`
//! (read per network namespace from /proc); those in the registry file are listed even when
//! missing, with the reason, and any other one the kernel offers is listed too. The QUIC and
//! UDP schemes are built in and available, but for one that reads upstream data this project
//! does not ship (taova-2018's rule tree: `UdpCc::unavailable`). Names of our own
//! implementations carry the transport as a prefix (`quic-cubic`, `udp-vegas`) so they can
//! never collide with a kernel congestion control of the same algorithm.

use std::sync::OnceLock;

use serde_json::{json, Value};

use crate::cc::{self, Controller};
use crate::quic::QuicCc;

/// The registry file, shared with the Python package.
pub const REGISTRY_JSON: &str = include_str!("../../../calibrate/data/schemes.json");

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunFirst {
    Receiver,
    Sender,
}

impl RunFirst {
    pub fn as_str(self) -> &'static str {
        match self {
            RunFirst::Receiver => "receiver",
            RunFirst::Sender => "sender",
        }
    }
}

/// Our controllers over the UDP transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UdpCc {
    Vegas,
    Copa,
    Ledbat,
    Saturator,
    Saturator2017,
    GregSaturator2017,
    KohoCc2017,
    Copa2017,
    Copa2018,
    Ledbat2017,
    Vegas2017,
    Pcc2017,
    PccExperimental2018,
    /// Verus's sender listens (sender-first, as upstream's verus_server).
    Verus2017,
    /// Reads its rule tree from a file the user supplies (`cc::taova_2018::DNA_ENV`).
    Taova2018,
    Indigo2018,
    Vivace2018,
    /// Sprout keeps its own datagrams and loop (`crate::sprout`), not a [`Controller`].
    Sprout2017,
    /// Scream keeps its own datagrams and loop (`crate::scream`), not a [`Controller`].
    Scream2017,
    /// Pantheon's 2018-2020 scream (the same module, `scream::law::Era::Y2018`).
    Scream2018,
}

impl UdpCc {
    /// Every variant (the registry's tests check each has an entry).
    pub const ALL: [UdpCc; 20] = [
        UdpCc::Vegas,
        UdpCc::Copa,
        UdpCc::Ledbat,
        UdpCc::Saturator,
        UdpCc::Saturator2017,
        UdpCc::GregSaturator2017,
        UdpCc::KohoCc2017,
        UdpCc::Copa2017,
        UdpCc::Copa2018,
        UdpCc::Ledbat2017,
        UdpCc::Vegas2017,
        UdpCc::Sprout2017,
        UdpCc::Pcc2017,
        UdpCc::PccExperimental2018,
        UdpCc::Verus2017,
        UdpCc::Taova2018,
        UdpCc::Indigo2018,
        UdpCc::Vivace2018,
        UdpCc::Scream2017,
        UdpCc::Scream2018,
    ];

    /// The `controller` that names it in the registry file.
    pub fn name(self) -> &'static str {
        match self {
            UdpCc::Vegas => "vegas",
            UdpCc::Copa => "copa",
            UdpCc::Ledbat => "ledbat",
            UdpCc::Saturator => "saturator",
            UdpCc::Saturator2017 => "saturator-2017",
            UdpCc::GregSaturator2017 => "greg_saturator-2017",
            UdpCc::KohoCc2017 => "koho_cc-2017",
            UdpCc::Copa2017 => "copa-2017",
            UdpCc::Copa2018 => "copa-2018",
            UdpCc::Ledbat2017 => "ledbat-2017",
            UdpCc::Vegas2017 => "vegas-2017",
            UdpCc::Sprout2017 => "sprout-2017",
            UdpCc::Pcc2017 => "pcc-2017",
            UdpCc::PccExperimental2018 => "pcc_experimental-2018",
            UdpCc::Verus2017 => "verus-2017",
            UdpCc::Taova2018 => "taova-2018",
            UdpCc::Indigo2018 => "indigo-2018",
            UdpCc::Vivace2018 => "vivace-2018",
            UdpCc::Scream2017 => "scream-2017",
            UdpCc::Scream2018 => "scream-2018",
        }
    }

    pub fn from_name(name: &str) -> Option<UdpCc> {
        UdpCc::ALL.into_iter().find(|cc| cc.name() == name)
    }

    /// Why this host cannot run it: only a controller that reads data it does not ship.
    pub fn unavailable(self) -> Option<String> {
        match self {
            UdpCc::Taova2018 => cc::taova_2018::dna_from_env().err(),
            UdpCc::Pcc2017 | UdpCc::PccExperimental2018 | UdpCc::Vivace2018 => cc::pcc_2017::srand_from_env().err(),
            _ => None,
        }
    }

    /// The controller over our transport; None for a scheme with its own endpoints (sprout, scream).
    pub fn controller(self, mss: u64) -> Option<Box<dyn Controller>> {
        Some(match self {
            UdpCc::Vegas => Box::new(cc::Vegas::new(mss)),
            UdpCc::Copa => Box::new(cc::Copa::new(mss)),
            UdpCc::Ledbat => Box::new(cc::Ledbat::new(mss)),
            UdpCc::Saturator => Box::new(cc::Saturator::new(mss)),
            UdpCc::Saturator2017 => Box::new(cc::Saturator2017::new(mss)),
            UdpCc::GregSaturator2017 => Box::new(cc::GregSaturator2017::new(mss)),
            UdpCc::KohoCc2017 => Box::new(cc::KohoCc2017::new(mss)),
            UdpCc::Copa2017 => Box::new(cc::Copa2017::new(mss)),
            UdpCc::Copa2018 => Box::new(cc::Copa2018::new(mss)),
            UdpCc::Ledbat2017 => Box::new(cc::Ledbat2017::new(mss)),
            UdpCc::Vegas2017 => Box::new(cc::Vegas2017::new(mss)),
            // Upstream seeds glibc's rand() with the clock: each run draws differently.
            UdpCc::Pcc2017 => Box::new(cc::Pcc2017::with_seed(run_seed())),
            // Likewise (PCC-Uspace's UDT seeds rand() with the clock in CUDT::connect).
            UdpCc::PccExperimental2018 => Box::new(cc::PccExperimental2018::with_seed(run_seed())),
            UdpCc::Verus2017 => Box::new(cc::Verus2017::new(mss)),
            // `usable` refused the scheme already where the tree cannot be read.
            UdpCc::Taova2018 => Box::new(cc::Taova2018::from_env().ok()?),
            UdpCc::Indigo2018 => Box::new(cc::Indigo2018::new(mss)),
            UdpCc::Vivace2018 => Box::new(cc::Vivace2018::with_seed(run_seed())),
            UdpCc::Sprout2017 | UdpCc::Scream2017 | UdpCc::Scream2018 => return None,
        })
    }
}

/// The seed for a PCC port's `rand()`: [`cc::pcc_2017::SRAND_ENV`]'s where set (`unavailable`
/// refused a malformed one), else one that differs from run to run (the clock and the process id),
/// as upstream's `srand` of the clock.
fn run_seed() -> u64 {
    if let Ok(Some(seed)) = cc::pcc_2017::srand_from_env() {
        return u64::from(seed);
    }
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    nanos ^ u64::from(std::process::id())
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Implementation {
    KernelTcp(String),
    Quic(QuicCc),
    Udp(UdpCc),
}

impl Implementation {
    pub fn kind(&self) -> &'static str {
        match self {
            Implementation::KernelTcp(_) => "kernel-tcp",
            Implementation::Quic(_) => "quic",
            Implementation::Udp(_) => "udp",
        }
    }

    /// The side that starts first and listens, fixed by the code: our QUIC sender is the
    /// server; the TCP and UDP receivers listen, except verus-2017's sender (as upstream's).
    pub fn run_first(&self) -> RunFirst {
        match self {
            Implementation::Quic(_) | Implementation::Udp(UdpCc::Verus2017) => RunFirst::Sender,
            Implementation::KernelTcp(_) | Implementation::Udp(_) => RunFirst::Receiver,
        }
    }

    /// Whether its sender spins on a core between sends, as a busy-waiting upstream did (UDT's
    /// send queue): such a run needs a whole core to itself, so the scheduler is told
    /// (`list --json`). The controller's own pacer says so; a controller this host cannot build
    /// (taova without its tree) does not run at all.
    pub fn busy_wait(&self) -> bool {
        match self {
            Implementation::Udp(cc) => cc.controller(1500).is_some_and(|c| c.pacer().busy_wait),
            Implementation::KernelTcp(_) | Implementation::Quic(_) => false,
        }
    }

    /// The implementation a registry entry names (`kind`, `controller`).
    fn of(kind: &str, controller: &str) -> Result<Implementation, String> {
        match kind {
            "kernel-tcp" => Ok(Implementation::KernelTcp(controller.to_string())),
            "quic" => QuicCc::from_name(controller)
                .map(Implementation::Quic)
                .ok_or_else(|| format!("no QUIC controller {controller:?} (quic.rs: QuicCc)")),
            "udp" => UdpCc::from_name(controller)
                .map(Implementation::Udp)
                .ok_or_else(|| format!("no UDP controller {controller:?} (registry.rs: UdpCc)")),
            other => Err(format!("unknown kind {other:?} (kernel-tcp, quic or udp)")),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Scheme {
    pub name: String,
    pub run_first: RunFirst,
    pub implementation: Implementation,
    pub description: String,
    /// Why this host cannot run it, if it cannot.
    pub unavailable: Option<String>,
}

impl Scheme {
    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "name": self.name,
            "run_first": self.run_first.as_str(),
            "kind": self.implementation.kind(),
            "description": self.description,
            "busy_wait": self.implementation.busy_wait(),
            "available": self.unavailable.is_none(),
            "unavailable_reason": self.unavailable,
        })
    }
}

/// One implemented entry of the registry file.
#[derive(Clone, Debug)]
struct Entry {
    name: String,
    implementation: Implementation,
    description: String,
}

/// The registry file's implemented entries, in its order; the file is part of the binary, so a
/// malformed or inconsistent one is a build defect (the tests below catch it).
fn entries() -> &'static [Entry] {
    static ENTRIES: OnceLock<Vec<Entry>> = OnceLock::new();
    ENTRIES.get_or_init(|| parse_registry(REGISTRY_JSON).unwrap_or_else(|e| panic!("calibrate/data/schemes.json: {e}")))
}

fn parse_registry(text: &str) -> Result<Vec<Entry>, String> {
    let root: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let list = root["schemes"].as_array().ok_or("no \"schemes\" list")?;
    let mut out = Vec::new();
    for item in list {
        let name = item["name"].as_str().ok_or("an entry without a name")?;
        let imp = &item["implementation"];
        if imp.is_null() {
            continue; // Pantheon's scheme, not implemented here
        }
        let field = |key: &str| imp[key].as_str().ok_or_else(|| format!("{name}: implementation.{key} missing"));
        let implementation =
            Implementation::of(field("kind")?, field("controller")?).map_err(|e| format!("{name}: {e}"))?;
        if matches!(&implementation, Implementation::KernelTcp(cc) if cc != name) {
            return Err(format!("{name}: a kernel-tcp scheme is named after its congestion control"));
        }
        let run_first = field("run_first")?;
        if run_first != implementation.run_first().as_str() {
            return Err(format!(
                "{name}: run_first {run_first:?}, but a {} endpoint's {} runs first",
                implementation.kind(),
                implementation.run_first().as_str()
            ));
        }
        if out.iter().any(|e: &Entry| e.name == name) {
            return Err(format!("{name} is listed twice"));
        }
        out.push(Entry { name: name.to_string(), implementation, description: field("description")?.to_string() });
    }
    Ok(out)
}

const AVAILABLE_CC: &str = "/proc/sys/net/ipv4/tcp_available_congestion_control";
const ALLOWED_CC: &str = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";

/// The registry file's kernel congestion controls; listed even when missing, with the reason.
fn registered_kernel_ccs() -> impl Iterator<Item = &'static Entry> {
    entries().iter().filter(|e| matches!(e.implementation, Implementation::KernelTcp(_)))
}

/// The registry file's description, or for a congestion control it lacks the generic one.
fn kernel_description(cc: &str) -> String {
    match registered_kernel_ccs().find(|e| e.name == cc) {
        Some(e) => e.description.clone(),
        None => format!(
            "Linux kernel TCP with congestion control {cc} (TCP_CONGESTION per socket), \
             full-throttle sender, discarding receiver, the kernel's socket buffers (as iperf 2)"
        ),
    }
}

fn read_words(path: &str) -> Result<Vec<String>, String> {
    std::fs::read_to_string(path)
        .map(|s| s.split_whitespace().map(str::to_string).collect())
        .map_err(|e| format!("cannot read {path}: {e}"))
}

fn kernel_schemes() -> Vec<Scheme> {
    let available = read_words(AVAILABLE_CC);
    // Only root may use a congestion control outside the allowed list.
    // SAFETY: geteuid cannot fail and has no preconditions.
    let is_root = unsafe { libc::geteuid() } == 0;
    let allowed = if is_root { Ok(Vec::new()) } else { read_words(ALLOWED_CC) };
    let mut names: Vec<String> = available.clone().unwrap_or_default();
    for e in registered_kernel_ccs() {
        if !names.contains(&e.name) {
            names.push(e.name.clone());
        }
    }
    names
        .into_iter()
        .map(|cc| {
            let unavailable = match (&available, &allowed) {
                (Err(e), _) => Some(e.clone()),
                (Ok(av), _) if !av.contains(&cc) => Some(format!(
                    "the kernel does not offer {cc} (not in net.ipv4.tcp_available_congestion_control; \
                     try `modprobe tcp_{cc}`)"
                )),
                (_, Err(e)) if !is_root => Some(e.clone()),
                (_, Ok(al)) if !is_root && !al.contains(&cc) => {
                    Some(format!("{cc} is not in net.ipv4.tcp_allowed_congestion_control and this user is not root"))
                }
                _ => None,
            };
            Scheme {
                name: cc.clone(),
                run_first: RunFirst::Receiver,
                description: kernel_description(&cc),
                implementation: Implementation::KernelTcp(cc),
                unavailable,
            }
        })
        .collect()
}

/// The QUIC and UDP schemes of the registry file, in its order.
fn builtin_schemes() -> Vec<Scheme> {
    entries()
        .iter()
        .filter(|e| !matches!(e.implementation, Implementation::KernelTcp(_)))
        .map(|e| Scheme {
            name: e.name.clone(),
            run_first: e.implementation.run_first(),
            implementation: e.implementation.clone(),
            description: e.description.clone(),
            unavailable: match e.implementation {
                Implementation::Udp(cc) => cc.unavailable(),
                _ => None,
            },
        })
        .collect()
}

/// Every scheme this binary knows, available or not, kernel TCP first.
pub fn all() -> Vec<Scheme> {
    let mut schemes = kernel_schemes();
    schemes.extend(builtin_schemes());
    schemes
}

/// Looks a scheme up by name; errors name the available schemes.
pub fn find(name: &str) -> Result<Scheme, String> {
    let schemes = all();
    if let Some(s) = schemes.iter().find(|s| s.name == name) {
        return Ok(s.clone());
    }
    let names: Vec<&str> = schemes.iter().filter(|s| s.unavailable.is_none()).map(|s| s.name.as_str()).collect();
    Err(format!("unknown scheme {name:?}; available here: {}", names.join(", ")))
}

/// The `list` table, one scheme per line.
pub fn render_table(schemes: &[Scheme]) -> String {
    let width = schemes.iter().map(|s| s.name.len()).max().unwrap_or(4).max(4);
    let mut out = format!("{:<width$}  {:<9}  {:<10}  {}\n", "name", "run_first", "kind", "description");
    for s in schemes {
        let desc = match &s.unavailable {
            None => s.description.clone(),
            Some(why) => format!("UNAVAILABLE: {why}"),
        };
        out.push_str(&format!(
            "{:<width$}  {:<9}  {:<10}  {}\n",
            s.name,
            s.run_first.as_str(),
            s.implementation.kind(),
            desc
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_are_always_available_with_unique_names() {
        let schemes = all();
        for name in ["quic-cubic", "quic-newreno", "quic-bbr", "udp-vegas", "udp-copa", "udp-ledbat", "udp-saturator"] {
            let s = schemes.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("{name} missing"));
            assert!(s.unavailable.is_none());
        }
        let mut names: Vec<_> = schemes.iter().map(|s| s.name.clone()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), schemes.len(), "duplicate scheme names");
    }

    #[test]
    fn the_udt_family_tells_the_scheduler_its_sender_spins() {
        // UDT's send queue busy-waits (pcc-2017, vivace-2018, pcc_experimental-2018); every
        // other sender sleeps between sends. `list --json` carries it to the task's CPU request.
        for s in all() {
            let spins = ["pcc-2017", "vivace-2018", "pcc_experimental-2018"].contains(&s.name.as_str());
            assert_eq!(s.to_json()["busy_wait"], json!(spins), "{}", s.name);
        }
    }

    #[test]
    fn kernel_schemes_follow_proc() {
        let available = read_words(AVAILABLE_CC).unwrap_or_default();
        for s in all().iter().filter(|s| s.implementation.kind() == "kernel-tcp") {
            assert_eq!(s.unavailable.is_none(), available.contains(&s.name), "{}", s.name);
        }
        // The registry's kernel schemes always appear, available or with a reason.
        for e in registered_kernel_ccs() {
            assert!(all().iter().any(|s| s.name == e.name));
        }
    }

    #[test]
    fn every_registry_entry_has_an_implementation_and_every_implementation_an_entry() {
        // Parses the built-in file: every implemented entry names code that exists, with the
        // side that code runs first (a failure here names the entry).
        let entries = parse_registry(REGISTRY_JSON).unwrap();
        assert!(entries.len() >= 11, "{} entries", entries.len());
        for cc in QuicCc::ALL {
            let n = entries.iter().filter(|e| e.implementation == Implementation::Quic(cc)).count();
            assert_eq!(n, 1, "QUIC controller {} has {n} registry entries (calibrate/data/schemes.json)", cc.name());
        }
        for cc in UdpCc::ALL {
            let n = entries.iter().filter(|e| e.implementation == Implementation::Udp(cc)).count();
            assert_eq!(n, 1, "UDP controller {} has {n} registry entries (calibrate/data/schemes.json)", cc.name());
        }
        for e in &entries {
            assert!(all().iter().any(|s| s.name == e.name && s.implementation == e.implementation), "{}", e.name);
        }
    }

    #[test]
    fn inconsistent_registry_entries_are_refused() {
        let entry = |imp: &str| format!(r#"{{"schemes": [{{"name": "x", "implementation": {imp}}}]}}"#);
        let quic_receiver =
            entry(r#"{"kind": "quic", "controller": "cubic", "run_first": "receiver", "description": ""}"#);
        assert!(parse_registry(&quic_receiver).unwrap_err().contains("sender runs first"));
        let unknown = entry(r#"{"kind": "udp", "controller": "nope", "run_first": "receiver", "description": ""}"#);
        assert!(parse_registry(&unknown).unwrap_err().contains("no UDP controller"));
        let pantheon_only = r#"{"schemes": [{"name": "sprout", "implementation": null}]}"#;
        assert!(parse_registry(pantheon_only).unwrap().is_empty());
    }

    #[test]
    fn unknown_scheme_error_lists_alternatives() {
        let err = find("nope").unwrap_err();
        assert!(err.contains("udp-copa"), "{err}");
    }

    #[test]
    fn json_has_the_contract_fields() {
        let v = find("quic-bbr").unwrap().to_json();
        assert_eq!(v["run_first"], "sender");
        assert_eq!(v["kind"], "quic");
        assert_eq!(v["available"], true);
        assert!(v["unavailable_reason"].is_null());
    }
}
