//! The schemes this binary can run, and which of them this host supports.
//!
//! Kernel TCP schemes are named after the congestion control (`cubic`, `reno`, `bbr`, ...)
//! and exist when the kernel lists it in `net.ipv4.tcp_available_congestion_control`
//! (read per network namespace from /proc). The QUIC and UDP schemes are built in and
//! always available. Names of our own implementations carry the transport as a prefix
//! (`quic-cubic`, `udp-vegas`) so they can never collide with a kernel congestion control
//! of the same algorithm.

use serde_json::json;

use crate::cc::{self, Controller};
use crate::quic::QuicCc;

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
}

impl UdpCc {
    pub fn controller(self, mss: u64) -> Box<dyn Controller> {
        match self {
            UdpCc::Vegas => Box::new(cc::Vegas::new(mss)),
            UdpCc::Copa => Box::new(cc::Copa::new(mss)),
            UdpCc::Ledbat => Box::new(cc::Ledbat::new(mss)),
            UdpCc::Saturator => Box::new(cc::Saturator::new(mss)),
        }
    }
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
            "available": self.unavailable.is_none(),
            "unavailable_reason": self.unavailable,
        })
    }
}

const AVAILABLE_CC: &str = "/proc/sys/net/ipv4/tcp_available_congestion_control";
const ALLOWED_CC: &str = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";
/// Kernel congestion controls Pantheon ran; listed even when missing, with the reason.
const PANTHEON_KERNEL_CCS: [&str; 4] = ["cubic", "reno", "bbr", "vegas"];

fn kernel_description(cc: &str) -> String {
    let note = match cc {
        "cubic" => "; Pantheon's cubic (formerly default_tcp)",
        "bbr" => "; Pantheon's bbr (which also required the fq qdisc on its hosts)",
        "vegas" => "; Pantheon's vegas",
        _ => "",
    };
    format!(
        "Linux kernel TCP with congestion control {cc} (TCP_CONGESTION per socket), \
         full-throttle sender, discarding receiver, 64 MiB socket buffers{note}"
    )
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
    for cc in PANTHEON_KERNEL_CCS {
        if !names.iter().any(|n| n == cc) {
            names.push(cc.to_string());
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
                (_, Ok(al)) if !is_root && !al.contains(&cc) => Some(format!(
                    "{cc} is not in net.ipv4.tcp_allowed_congestion_control and this user is not root"
                )),
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

fn builtin_schemes() -> Vec<Scheme> {
    let quic = |name: &str, cc: QuicCc, pantheon: &str| Scheme {
        name: name.to_string(),
        run_first: RunFirst::Sender,
        implementation: Implementation::Quic(cc),
        description: format!(
            "QUIC bulk transfer (quinn 0.11, {} controller), one endless stream, self-signed \
             certificate made at start, sender listens{pantheon}",
            cc.label()
        ),
        unavailable: None,
    };
    let udp = |name: &str, cc: UdpCc, description: &str| Scheme {
        name: name.to_string(),
        run_first: RunFirst::Receiver,
        implementation: Implementation::Udp(cc),
        description: description.to_string(),
        unavailable: None,
    };
    vec![
        quic(
            "quic-cubic",
            QuicCc::Cubic,
            "; stands in for Pantheon's quic (proto-quic Cubic), a different implementation",
        ),
        quic("quic-newreno", QuicCc::NewReno, ""),
        quic("quic-bbr", QuicCc::Bbr, ""),
        udp(
            "udp-vegas",
            UdpCc::Vegas,
            "TCP Vegas (Brakmo & Peterson 1994) over our UDP transport: alpha=2, beta=4, gamma=1 \
             packets, modified slow start, Reno halving on loss; our implementation, Pantheon's \
             vegas was the Linux kernel module",
        ),
        udp(
            "udp-copa",
            UdpCc::Copa,
            "Copa (Arun & Balakrishnan, NSDI 2018) default mode over our UDP transport: delta=0.5, \
             target rate 1/(delta*dq), velocity, pacing 2*cwnd/RTTstanding, no competitive-mode \
             switching; our implementation, Pantheon's copa was genericCC",
        ),
        udp(
            "udp-ledbat",
            UdpCc::Ledbat,
            "LEDBAT (RFC 6817) over our UDP transport: 100 ms target, GAIN 1, 10-minute base delay \
             history, min-of-4 current delay, slow start until half the target; our \
             implementation, Pantheon's ledbat was libutp",
        ),
        udp(
            "udp-saturator",
            UdpCc::Saturator,
            "Saturator: paces at 1.25x the highest delivery rate of the last 10 RTTs (2x during \
             start-up), so the bottleneck queue stays full (about 20% loss at a DropTail queue); \
             Pantheon's 2017 saturator was a different program",
        ),
    ]
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
    fn kernel_schemes_follow_proc() {
        let available = read_words(AVAILABLE_CC).unwrap_or_default();
        for s in all().iter().filter(|s| s.implementation.kind() == "kernel-tcp") {
            assert_eq!(s.unavailable.is_none(), available.contains(&s.name), "{}", s.name);
        }
        // Pantheon's kernel schemes always appear, available or with a reason.
        for cc in PANTHEON_KERNEL_CCS {
            assert!(all().iter().any(|s| s.name == cc));
        }
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
