//! Flow numbers for the Pantheon-format log: one per connection (5-tuple, either
//! direction), numbered from 1 in order of first appearance; or, given flow ports, Pantheon's
//! own numbering: flow N is everything of its N-th tunnel, which in a scripted run is every
//! connection to the N-th flow's port (a scheme that connects again, such as Pantheon's quic
//! wrapper retrying its client, stays one flow, as it did in Pantheon's tunnel).

use std::collections::{BTreeSet, HashMap};

/// Protocol plus the two (address, port) ends, ordered so both directions give one key.
type Key = [u8; 37];

pub struct Flows {
    ids: HashMap<Key, u32>,
    /// `ports[N - 1]`: the port of flow N (a connection with either end on it is flow N).
    ports: Vec<u16>,
    /// The numbers some connection already has, and the lowest number none has (numbers are
    /// never given back, so it only rises).
    used: BTreeSet<u32>,
    lowest_free: u32,
}

impl Default for Flows {
    fn default() -> Self {
        Flows::with_ports(Vec::new())
    }
}

impl Flows {
    /// Numbering by flow ports: a connection with either end on `ports[N - 1]` is flow N; any
    /// other connection takes the lowest number no connection has yet (so a 1-flow run whose
    /// program picked a port of its own is still flow 1). Without ports: in order of appearance.
    pub fn with_ports(ports: Vec<u16>) -> Self {
        Flows { ids: HashMap::new(), ports, used: BTreeSet::new(), lowest_free: 1 }
    }

    /// The flow number of an IP packet (IPv4 or IPv6); unparseable packets share flow 0.
    pub fn id(&mut self, packet: &[u8]) -> u32 {
        let Some((key, ends)) = connection_key(packet) else { return 0 };
        if let Some(&id) = self.ids.get(&key) {
            return id;
        }
        let by_port = self.ports.iter().position(|p| ends.contains(p)).map(|i| i as u32 + 1);
        let id = by_port.unwrap_or(self.lowest_free);
        self.ids.insert(key, id);
        self.mark_used(id);
        id
    }

    /// The flow number of a packet's connection if it is known already.
    pub fn get(&self, packet: &[u8]) -> Option<u32> {
        self.ids.get(&connection_key(packet)?.0).copied()
    }

    /// Give a packet's connection an existing flow number (the same connection seen elsewhere,
    /// e.g. behind a NAT that rewrote its addresses).
    pub fn assign(&mut self, packet: &[u8], id: u32) {
        if let Some((key, _)) = connection_key(packet) {
            self.ids.entry(key).or_insert(id);
            self.mark_used(id);
        }
    }

    /// How many connections were seen.
    pub fn count(&self) -> usize {
        self.ids.len()
    }

    fn mark_used(&mut self, id: u32) {
        self.used.insert(id);
        while self.used.contains(&self.lowest_free) {
            self.lowest_free += 1;
        }
    }
}

/// A packet's connection and the ports of its two ends (0 where the protocol has none).
fn connection_key(packet: &[u8]) -> Option<(Key, [u16; 2])> {
    let version = packet.first()? >> 4;
    let (protocol, src, dst, transport): (u8, &[u8], &[u8], Option<&[u8]>) = match version {
        4 => {
            let header = usize::from(packet.first()? & 0x0f) * 4;
            if packet.len() < 20 || header < 20 {
                return None;
            }
            let fragment_offset = u16::from_be_bytes([packet[6], packet[7]]) & 0x1fff;
            let transport = (fragment_offset == 0).then(|| packet.get(header..)).flatten();
            (packet[9], &packet[12..16], &packet[16..20], transport)
        }
        6 => {
            if packet.len() < 40 {
                return None;
            }
            (packet[6], &packet[8..24], &packet[24..40], packet.get(40..))
        }
        _ => return None,
    };
    let ports = |t: Option<&[u8]>, at: usize| -> ([u8; 2], [u8; 2]) {
        match t.and_then(|t| t.get(at..at + 4)) {
            Some(p) => ([p[0], p[1]], [p[2], p[3]]),
            None => ([0; 2], [0; 2]),
        }
    };
    let (src_port, dst_port) = match protocol {
        6 | 17 | 132 | 136 => ports(transport, 0),
        // ICMP echo: the identifier plays the role of a port, on both ends.
        1 | 58 => {
            let (_, id) = ports(transport, 2);
            (id, id)
        }
        _ => ([0; 2], [0; 2]),
    };
    let mut a = [0u8; 18];
    let mut b = [0u8; 18];
    a[16 - src.len()..16].copy_from_slice(src);
    a[16..].copy_from_slice(&src_port);
    b[16 - dst.len()..16].copy_from_slice(dst);
    b[16..].copy_from_slice(&dst_port);
    let (low, high) = if a <= b { (a, b) } else { (b, a) };
    let mut key = [0u8; 37];
    key[0] = protocol;
    key[1..19].copy_from_slice(&low);
    key[19..].copy_from_slice(&high);
    // An ICMP identifier is not a port: it never names a flow.
    let ends = match protocol {
        1 | 58 => [0, 0],
        _ => [u16::from_be_bytes(src_port), u16::from_be_bytes(dst_port)],
    };
    Some((key, ends))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipv4(protocol: u8, src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
        let mut p = vec![0u8; 40];
        p[0] = 0x45;
        p[9] = protocol;
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        p[20..22].copy_from_slice(&sport.to_be_bytes());
        p[22..24].copy_from_slice(&dport.to_be_bytes());
        p
    }

    #[test]
    fn numbers_connections_in_order_and_matches_both_directions() {
        let mut flows = Flows::default();
        let s = [100, 64, 0, 2];
        let r = [100, 64, 0, 1];
        assert_eq!(flows.id(&ipv4(6, s, r, 40000, 5000)), 1);
        assert_eq!(flows.id(&ipv4(6, s, r, 40001, 5001)), 2);
        assert_eq!(flows.id(&ipv4(6, r, s, 5000, 40000)), 1); // the ACKs of flow 1
        assert_eq!(flows.id(&ipv4(17, s, r, 40000, 5000)), 3); // UDP is another connection
        assert_eq!(flows.id(&[0x45, 0]), 0);
        assert_eq!(flows.count(), 3);
    }

    #[test]
    fn flow_ports_number_connections_by_their_tunnel() {
        let mut flows = Flows::with_ports(vec![50001, 50002, 50003]);
        let s = [100, 64, 0, 2];
        let r = [100, 64, 0, 1];
        // Flow 2 starts first; its number is its port's, not its order.
        assert_eq!(flows.id(&ipv4(17, r, s, 41000, 50002)), 2);
        assert_eq!(flows.id(&ipv4(17, r, s, 41001, 50001)), 1);
        // A second connection to flow 1's port (a client that tried again) is flow 1, both ways.
        assert_eq!(flows.id(&ipv4(17, r, s, 41002, 50001)), 1);
        assert_eq!(flows.id(&ipv4(17, s, r, 50001, 41002)), 1);
        // A connection on no flow port takes the lowest number nothing has yet.
        assert_eq!(flows.id(&ipv4(17, s, r, 60001, 42000)), 3);
        assert_eq!(flows.id(&ipv4(17, s, r, 60002, 42001)), 4);
        assert_eq!(flows.id(&ipv4(6, r, s, 43000, 50003)), 3);
        assert_eq!(flows.count(), 6);
        // One flow whose program listens on a port of its own (the 2017 sprout) is flow 1.
        let mut one = Flows::with_ports(vec![50001]);
        assert_eq!(one.id(&ipv4(17, r, s, 41000, 60001)), 1);
    }
}
