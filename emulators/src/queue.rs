//! The queue in front of a link (Mahimahi's `--uplink-queue` / `--downlink-queue`).
//!
//! Limits count only packets waiting in the queue: the packet in transit on the link has
//! already left it. Sizes include the 4-byte TUN header, as in Mahimahi.

use crate::error::{Error, Result};
use crate::packet::Packet;
use std::collections::VecDeque;

/// Packets and bytes a queue discarded in one enqueue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dropped {
    pub packets: usize,
    pub bytes: usize,
}

pub trait PacketQueue {
    /// Offer a packet; report what was dropped (the packet itself or others).
    fn enqueue(&mut self, packet: Packet) -> Dropped;
    fn dequeue(&mut self) -> Option<Packet>;
    fn is_empty(&self) -> bool;
    fn len(&self) -> usize;
}

/// Which queue, with its limits; parsed from Mahimahi's TYPE and ARGS strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueSpec {
    Infinite,
    /// Accept a packet only if the queue, with it, stays within both limits (0 = no limit).
    DropTail {
        packets: usize,
        bytes: usize,
    },
    /// Accept every packet, then drop from the head until the limits hold.
    DropHead {
        packets: usize,
        bytes: usize,
    },
}

impl QueueSpec {
    /// Parse a queue type and its arguments (`"packets=100, bytes=30000"`; separators are free).
    pub fn parse(kind: &str, args: &str) -> Result<QueueSpec> {
        let args = args.trim();
        match kind {
            "infinite" => {
                if !args.is_empty() {
                    return Err(Error::input(format!(
                        "the infinite queue does not take arguments (got {args:?}); use --*-queue=droptail to set packets= or bytes="
                    )));
                }
                Ok(QueueSpec::Infinite)
            }
            "droptail" | "drophead" => {
                let (packets, bytes) = parse_limits(kind, args)?;
                Ok(if kind == "droptail" {
                    QueueSpec::DropTail { packets, bytes }
                } else {
                    QueueSpec::DropHead { packets, bytes }
                })
            }
            "codel" | "pie" => Err(Error::input(format!(
                "queue type {kind:?} is not implemented yet; available: infinite, droptail, drophead"
            ))),
            other => {
                Err(Error::input(format!("unknown queue type {other:?}; available: infinite, droptail, drophead")))
            }
        }
    }

    pub fn build(self) -> Box<dyn PacketQueue + Send> {
        match self {
            QueueSpec::Infinite => Box::new(Bounded::new(0, 0, Policy::Tail)),
            QueueSpec::DropTail { packets, bytes } => Box::new(Bounded::new(packets, bytes, Policy::Tail)),
            QueueSpec::DropHead { packets, bytes } => Box::new(Bounded::new(packets, bytes, Policy::Head)),
        }
    }

    /// How Mahimahi's log header names it: `droptail [packets=100]`, bytes before packets.
    pub fn describe(self) -> String {
        match self.mahimahi_arguments() {
            (name, limits) if limits.is_empty() => name.to_string(),
            (name, limits) => format!("{name} [{}]", limits.replace(',', ", ")),
        }
    }

    /// `mm-link`'s `--*-queue` type and `--*-queue-args` (bytes before packets), e.g.
    /// `("droptail", "packets=100")`; `("infinite", "")` takes no arguments.
    pub fn mahimahi_arguments(self) -> (&'static str, String) {
        let (name, packets, bytes) = match self {
            QueueSpec::Infinite => return ("infinite", String::new()),
            QueueSpec::DropTail { packets, bytes } => ("droptail", packets, bytes),
            QueueSpec::DropHead { packets, bytes } => ("drophead", packets, bytes),
        };
        let mut limits = Vec::new();
        if bytes > 0 {
            limits.push(format!("bytes={bytes}"));
        }
        if packets > 0 {
            limits.push(format!("packets={packets}"));
        }
        (name, limits.join(","))
    }
}

fn parse_limits(kind: &str, args: &str) -> Result<(usize, usize)> {
    let (mut packets, mut bytes) = (0usize, 0usize);
    for item in args.split([',', ' ', '\t']).filter(|s| !s.is_empty()) {
        let (name, value) = item.split_once('=').ok_or_else(|| {
            Error::input(format!("bad {kind} queue argument {item:?}: expected NAME=NUMBER (packets= or bytes=)"))
        })?;
        let number: usize = value.parse().map_err(|_| {
            Error::input(format!("bad {kind} queue argument {item:?}: {value:?} is not a non-negative integer"))
        })?;
        match name {
            "packets" => packets = number,
            "bytes" => bytes = number,
            _ => {
                return Err(Error::input(format!(
                    "unknown {kind} queue argument {name:?}: it takes packets= and bytes="
                )))
            }
        }
    }
    if packets == 0 && bytes == 0 {
        return Err(Error::input(format!(
            "the {kind} queue needs a non-zero limit: give --*-queue-args=packets=N or bytes=N"
        )));
    }
    Ok((packets, bytes))
}

#[derive(Debug, Clone, Copy)]
enum Policy {
    Tail,
    Head,
}

/// A FIFO with optional packet and byte limits; no limits makes it Mahimahi's infinite queue.
struct Bounded {
    packets: VecDeque<Packet>,
    bytes: usize,
    max_packets: usize,
    max_bytes: usize,
    policy: Policy,
}

impl Bounded {
    fn new(max_packets: usize, max_bytes: usize, policy: Policy) -> Self {
        Bounded { packets: VecDeque::new(), bytes: 0, max_packets, max_bytes, policy }
    }

    fn fits(&self, extra_packets: usize, extra_bytes: usize) -> bool {
        (self.max_packets == 0 || self.packets.len() + extra_packets <= self.max_packets)
            && (self.max_bytes == 0 || self.bytes + extra_bytes <= self.max_bytes)
    }
}

impl PacketQueue for Bounded {
    fn enqueue(&mut self, packet: Packet) -> Dropped {
        let size = packet.size();
        match self.policy {
            Policy::Tail => {
                if !self.fits(1, size) {
                    return Dropped { packets: 1, bytes: size };
                }
                self.bytes += size;
                self.packets.push_back(packet);
                Dropped::default()
            }
            Policy::Head => {
                self.bytes += size;
                self.packets.push_back(packet);
                let mut dropped = Dropped::default();
                while !self.fits(0, 0) {
                    let head = self.packets.pop_front().expect("over a limit means not empty");
                    self.bytes -= head.size();
                    dropped.packets += 1;
                    dropped.bytes += head.size();
                }
                dropped
            }
        }
    }

    fn dequeue(&mut self) -> Option<Packet> {
        let packet = self.packets.pop_front()?;
        self.bytes -= packet.size();
        Some(packet)
    }

    fn is_empty(&self) -> bool {
        self.packets.is_empty()
    }

    fn len(&self) -> usize {
        self.packets.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(ip_len: usize) -> Packet {
        Packet::new(vec![0; ip_len], 0)
    }

    #[test]
    fn parses_mahimahi_queue_arguments() {
        assert_eq!(QueueSpec::parse("infinite", "").unwrap(), QueueSpec::Infinite);
        assert_eq!(
            QueueSpec::parse("droptail", "packets=100, bytes=30000").unwrap(),
            QueueSpec::DropTail { packets: 100, bytes: 30000 }
        );
        assert_eq!(
            QueueSpec::parse("droptail", "packets=100 bytes=30000").unwrap(),
            QueueSpec::DropTail { packets: 100, bytes: 30000 }
        );
        assert_eq!(
            QueueSpec::parse("drophead", "bytes=9000").unwrap(),
            QueueSpec::DropHead { packets: 0, bytes: 9000 }
        );
        assert_eq!(
            QueueSpec::DropTail { packets: 100, bytes: 30000 }.describe(),
            "droptail [bytes=30000, packets=100]"
        );
        assert_eq!(QueueSpec::DropTail { packets: 14, bytes: 0 }.describe(), "droptail [packets=14]");
    }

    #[test]
    fn rejects_bad_queue_arguments() {
        let message = |k: &str, a: &str| QueueSpec::parse(k, a).unwrap_err().message;
        assert!(message("infinite", "packets=5").contains("does not take arguments"));
        assert!(message("droptail", "").contains("needs a non-zero limit"));
        assert!(message("droptail", "packets=0").contains("needs a non-zero limit"));
        assert!(message("droptail", "packets=x").contains("not a non-negative integer"));
        assert!(message("droptail", "pkts=5").contains("unknown droptail queue argument"));
        assert!(message("droptail", "100").contains("expected NAME=NUMBER"));
        assert!(message("fifo", "").contains("unknown queue type"));
        assert!(message("codel", "target=5").contains("not implemented"));
    }

    #[test]
    fn droptail_rejects_the_packet_that_would_exceed_a_limit() {
        let mut queue = QueueSpec::DropTail { packets: 2, bytes: 0 }.build();
        assert_eq!(queue.enqueue(packet(1500)), Dropped::default());
        assert_eq!(queue.enqueue(packet(1500)), Dropped::default());
        assert_eq!(queue.enqueue(packet(100)), Dropped { packets: 1, bytes: 104 });
        assert_eq!(queue.len(), 2);

        // bytes= counts IP length + 4: 2 × 1504 fits in 3008, one more byte does not.
        let mut queue = QueueSpec::DropTail { packets: 0, bytes: 3008 }.build();
        assert_eq!(queue.enqueue(packet(1500)), Dropped::default());
        assert_eq!(queue.enqueue(packet(1500)), Dropped::default());
        assert_eq!(queue.enqueue(packet(1)), Dropped { packets: 1, bytes: 5 });
        queue.dequeue();
        assert_eq!(queue.enqueue(packet(1500)), Dropped::default());
    }

    #[test]
    fn drophead_drops_the_oldest() {
        let mut queue = QueueSpec::DropHead { packets: 2, bytes: 0 }.build();
        for len in [100, 200, 300] {
            let dropped = queue.enqueue(packet(len));
            if len == 300 {
                assert_eq!(dropped, Dropped { packets: 1, bytes: 104 });
            }
        }
        assert_eq!(queue.dequeue().unwrap().data.len(), 200);
    }
}
