//! QUIC bulk transfer over quinn with its Cubic, NewReno or BBR congestion controller,
//! `quic-2017`: Pantheon's 2017 `quic` (google/proto-quic 9c52057, Chromium 54) as it behaved,
//! and `quic-2018`: Pantheon's 2018–2020 `quic` (proto-quic 77961f1, Chromium 60).
//!
//! Sender-first, like Pantheon's `quic` wrapper (whose server sends a large file): the
//! sender listens on PORT with a certificate made at start (rcgen, self-signed), and for
//! every connection opens one stream and writes to it until killed. The receiver connects
//! to IP:PORT, skips certificate verification (there is no authority to check a per-run
//! self-signed certificate against, and the payload is junk), and discards everything
//! that arrives.
//!
//! Transport settings that matter for a probe (quinn's own controllers):
//! * flow-control windows of 64 MiB, so QUIC flow control never limits the flow before
//!   the congestion controller does (quinn's defaults assume 100 Mbit/s × 100 ms);
//! * path MTU discovery up to 1472-byte UDP payloads, i.e. 1500-byte IPv4 packets on the
//!   emulated link (quinn starts at 1200 and probes upwards);
//! * segmentation offload off, so every datagram is paced on its own rather than
//!   leaving as a GSO burst.
//!
//! # `quic-2017` (`QuicCc::Cubic2017`)
//! Pantheon's 2017 wrapper ran `quic_server` (a 50 MB page from memory) and `quic_client`.
//! In proto-quic's `net/net.gyp` at 9c52057 the `quic_client` target is
//! `tools/quic/quic_simple_client_bin.cc`, i.e. `QuicSimpleClient`, which (unlike the epoll
//! `QuicClient::Initialize`, which raises them to 6 MB / 15 MB) keeps `QuicConfig`'s
//! default receive windows: `kMinimumFlowControlSendWindow` = 16 KB for the stream and for
//! the session (`QuicConfig::SetDefaults`). The client never auto-tunes them: in
//! `QuicSession`'s constructor auto-tuning is on by default for the server perspective
//! only (`FLAGS_quic_enable_autotune_by_default`), and streams inherit the session's
//! setting (`ReliableQuicStream`). `QuicFlowController::MaybeSendWindowUpdate` sends a
//! WINDOW_UPDATE once the available window (offset − consumed) falls below half the
//! window, moving the offset to consumed + 16 KB; `QuicSpdyClientStream::OnDataAvailable`
//! consumes in-order data as it arrives. A receiver-side window of 16 KB refreshed at
//! half-consumption lets the sender deliver one burst of about (16 KB + one packet) / 2
//! per round trip, at base delay, whatever the path's rate or loss: Pantheon's ~8–15 KB
//! per round trip (see calibrate/data/schemes.json's quic-2017 note for the measurement).
//!
//! Reproduced here by an application-level credit carried on the same bidirectional
//! stream (quinn's own flow control stays at 64 MiB and never binds, because quinn
//! refreshes its window at 1/8 of it, not 1/2): the receiver runs `ReceiveWindow`
//! on the bytes it reads in order and writes every new limit as 8 big-endian bytes; the
//! sender starts with 16 KB of credit and never writes past the latest limit. Also as
//! Chromium 54 ran it:
//! * 1350-byte UDP payloads from the start (`kDefaultMaxPacketSize`; the server adopts the
//!   client's padded CHLO size), no MTU discovery;
//! * quinn's Cubic with an initial window of 32 × 1460 bytes (`kInitialCongestionWindow`
//!   × `kDefaultTCPMSS`, `TcpCubicSenderPackets::GetCongestionWindow`); the flow is limited
//!   by the credit, so the window only matters after heavy loss;
//! * Chromium's `PacingSender` (`pacing`) on the stream writes: 10 unpaced packets
//!   (`kInitialUnpacedBurst`), then one packet per 1350 B / (2 × cwnd / srtt) (the
//!   slow-start rate of `TcpCubicSenderBase::PacingRate` at the initial window, which an
//!   application-limited flow keeps, `interval_2017`), with a 1 ms alarm granularity inside
//!   which a packet leaves at once. quinn's own pacer lets 10-packet bursts through, so it
//!   cannot space a 7-packet burst itself.
//!
//! Not reproduced: the refill of burst tokens when the sender leaves quiescence, the
//! slower pacing (1.25 × a reduced cwnd) after a loss, and TcpCubicSender's two emulated
//! connections (quinn's Cubic backs off by 0.7, not 0.85); the 50 MB page is endless here.
//!
//! # `quic-2018` (`QuicCc::Cubic2018`)
//! Pantheon's wrapper from 2018 on (StanfordSNR/pantheon `src/wrappers/quic.py`, submodule
//! proto-quic 77961f1) runs the same two programs with the same arguments (`quic_server
//! --port --quic_response_cache_dir --certificate_file --key_file`, `quic_client --host
//! --port https://www.example.org/`, retried up to 5 times), no patch, a 500 MB page. In
//! proto-quic 77961f1 (`src/net/BUILD.gn`, targets `quic_client` and `quic_server`) the
//! client is still `QuicSimpleClient`, but it now derives its `Initialize` from
//! `QuicClientBase::Initialize` (`net/tools/quic/quic_client_base.cc`), which raises a
//! receive window left at `kMinimumFlowControlSendWindow` to 6 MB for the stream and 15 MB
//! for the session ("the same values that Chrome uses"). The client still does not
//! auto-tune (`QuicSession`'s flow controller: server perspective only; streams inherit it)
//! and `QuicFlowController::MaybeSendWindowUpdate` still refreshes at half. So:
//! * the receiver's credit is the 2017 loop with a 6 MB window (`WINDOW_2018`); the 15 MB
//!   session window never binds before it (a stream limit is at most consumed + 6 MB, a
//!   session refresh comes below consumed + 7.5 MB). It lets at least 3 MB be in flight,
//!   more than the largest congestion window, so the congestion controller sets the rate:
//!   no cap per round trip;
//! * the server's controller is `kCubicBytes` (`QuicConnection`'s constructor; BBR only
//!   when the client asks with TBBR, PCC never: the toy client sends no connection
//!   options), i.e. `TcpCubicSenderBytes`, reproduced in `cubic_2018` (initial window
//!   32 × 1460, at most 2000 × 1460, hybrid slow start, Cubic with 2 emulated
//!   connections);
//! * 1350-byte packets as in 2017 (`quic_simple_client_bin.cc` sets
//!   `kDefaultMaxPacketSize`; the server adopts the CHLO's size), no MTU discovery;
//! * sending: the flow is window limited, so the decision whether a packet may leave is
//!   taken where quinn hands datagrams to the socket, not on the writes: `send_gate` is
//!   Chromium's `CanSend` (the window) and `PacingSender` (`pacing`: 2 × window / srtt in
//!   slow start, 1.25 × after, no burst beyond the 1 ms granularity once the first 10 are
//!   spent, 10 more after quiescence), in place of quinn's pacer, whose token bucket of at
//!   least 10 packets answers a bunch of ACKs with a burst where Chromium's cannot;
//! * the order of work: each side handles one datagram and sends what it may before it
//!   reads the next (`per_packet`), as Chromium's `QuicConnection` does, where quinn reads
//!   every waiting datagram first. The receiver thus acknowledges every second packet;
//! * the page's pauses (`page`): the server copies its unsent page into its send queue after
//!   the first 10 packets, and the pacer then makes up for the lost time with a burst; the
//!   toy client keeps the page it receives in a `std::string` that doubles when full, a pause
//!   of its only thread at every doubling (14 ms at 22 MB), after which its ACKs arrive
//!   together and the sender's window is found unused.
//!
//! Not reproduced in 2018: proportional rate reduction in recovery.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quinn::congestion::{BbrConfig, CubicConfig, NewRenoConfig};
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{EndpointConfig, MtuDiscoveryConfig, Runtime, TransportConfig, VarInt};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};

use crate::net;
use crate::stats::Stats;

mod cubic_2018;
mod pacing;
mod page;
mod per_packet;
mod send_gate;

const ALPN: &[u8] = b"calibrate-bulk";
const SERVER_NAME: &str = "calibrate-scheme";
const FLOW_CONTROL_WINDOW: u32 = 64 << 20;
const MAX_UDP_PAYLOAD: u16 = 1472;
const IO_CHUNK: usize = 256 << 10;
const SOCKET_BUFFER: usize = 16 << 20;
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// proto-quic 54's stream and session receive window on the toy client
/// (`kMinimumFlowControlSendWindow`), and the sender's credit before any update.
const WINDOW_2017: u64 = 16 * 1024;
/// proto-quic 60's stream receive window on the toy client (`QuicClientBase::Initialize`).
const WINDOW_2018: u64 = 6 * 1024 * 1024;
/// proto-quic's packet size in both eras (`kDefaultMaxPacketSize`), a UDP payload.
const PACKET_2017: u16 = 1350;
/// Stream bytes released per paced packet: what fits a 1350-byte quinn packet with its
/// short header (8-byte connection id), AEAD tag, STREAM frame header and an ACK frame.
const CHUNK_2017: usize = 1290;
/// Chromium's initial congestion window, 32 packets of `kDefaultTCPMSS` (1460) bytes.
const INITIAL_CWND_2017: u64 = 32 * 1460;

/// quinn's congestion controllers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuicCc {
    Cubic,
    NewReno,
    Bbr,
    /// proto-quic 54 (Pantheon 2017) as it behaved: quinn Cubic under the toy client's 16 KB
    /// receive window refreshed at half-consumption (about 9 KB per round trip).
    Cubic2017,
    /// proto-quic 60 (Pantheon 2018–2020): Chromium's TcpCubicSenderBytes (`cubic_2018`)
    /// under the toy client's 6 MB stream window, which never binds.
    Cubic2018,
}

impl QuicCc {
    /// Every variant (the registry's tests check each has an entry).
    pub const ALL: [QuicCc; 5] = [QuicCc::Cubic, QuicCc::NewReno, QuicCc::Bbr, QuicCc::Cubic2017, QuicCc::Cubic2018];

    /// The `controller` that names it in the registry file (calibrate/data/schemes.json).
    pub fn name(self) -> &'static str {
        match self {
            QuicCc::Cubic => "cubic",
            QuicCc::NewReno => "newreno",
            QuicCc::Bbr => "bbr",
            QuicCc::Cubic2017 => "cubic-2017",
            QuicCc::Cubic2018 => "cubic-2018",
        }
    }

    /// The proto-quic toy client's stream receive window of the era, carried as credit on
    /// the data stream (`None`: quinn's own flow control only). Also marks proto-quic's
    /// 1350-byte packets.
    fn receive_window(self) -> Option<u64> {
        match self {
            QuicCc::Cubic2017 => Some(WINDOW_2017),
            QuicCc::Cubic2018 => Some(WINDOW_2018),
            QuicCc::Cubic | QuicCc::NewReno | QuicCc::Bbr => None,
        }
    }

    /// Whether each side handles one datagram and sends before reading the next, as
    /// Chromium's `QuicConnection` does (`per_packet`), rather than quinn's batches.
    fn per_packet(self) -> bool {
        self == QuicCc::Cubic2018
    }

    pub fn from_name(name: &str) -> Option<QuicCc> {
        QuicCc::ALL.into_iter().find(|cc| cc.name() == name)
    }
}

fn transport_config(cc: QuicCc, gate: Option<Arc<send_gate::SendGate>>) -> Result<Arc<TransportConfig>, String> {
    let mut t = TransportConfig::default();
    match cc {
        QuicCc::Cubic => t.congestion_controller_factory(Arc::new(CubicConfig::default())),
        QuicCc::Cubic2017 => {
            let mut cubic = CubicConfig::default();
            cubic.initial_window(INITIAL_CWND_2017);
            t.congestion_controller_factory(Arc::new(cubic))
        }
        QuicCc::Cubic2018 => t.congestion_controller_factory(Arc::new(cubic_2018::ChromiumCubicConfig { gate })),
        QuicCc::NewReno => t.congestion_controller_factory(Arc::new(NewRenoConfig::default())),
        QuicCc::Bbr => t.congestion_controller_factory(Arc::new(BbrConfig::default())),
    };
    t.stream_receive_window(VarInt::from_u32(FLOW_CONTROL_WINDOW));
    t.receive_window(VarInt::from_u32(FLOW_CONTROL_WINDOW));
    t.send_window(FLOW_CONTROL_WINDOW as u64);
    if cc.receive_window().is_some() {
        t.initial_mtu(PACKET_2017);
        t.mtu_discovery_config(None);
    } else {
        let mut mtu = MtuDiscoveryConfig::default();
        mtu.upper_bound(MAX_UDP_PAYLOAD);
        t.mtu_discovery_config(Some(mtu));
    }
    t.enable_segmentation_offload(false);
    t.max_idle_timeout(Some(IDLE_TIMEOUT.try_into().map_err(|e| format!("idle timeout: {e}"))?));
    Ok(Arc::new(t))
}

fn crypto_provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn server_config(cc: QuicCc, gate: Option<Arc<send_gate::SendGate>>) -> Result<quinn::ServerConfig, String> {
    let certified = rcgen::generate_simple_self_signed(vec![SERVER_NAME.to_string()])
        .map_err(|e| format!("cannot generate a self-signed certificate: {e}"))?;
    let cert: CertificateDer<'static> = certified.cert.der().clone();
    let key: PrivateKeyDer<'static> = certified.signing_key.into();
    let mut tls = rustls::ServerConfig::builder_with_provider(crypto_provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| format!("TLS 1.3 unavailable: {e}"))?
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .map_err(|e| format!("bad self-signed certificate: {e}"))?;
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let quic = QuicServerConfig::try_from(tls).map_err(|e| format!("TLS config unusable for QUIC: {e}"))?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(quic));
    config.transport_config(transport_config(cc, gate)?);
    Ok(config)
}

/// Accepts the sender's self-signed certificate without checking it, but still verifies
/// the handshake signatures so the TLS machinery runs as it would in deployment.
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn client_config(cc: QuicCc) -> Result<quinn::ClientConfig, String> {
    let provider = crypto_provider();
    let mut tls = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| format!("TLS 1.3 unavailable: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider)))
        .with_no_client_auth();
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let quic = QuicClientConfig::try_from(tls).map_err(|e| format!("TLS config unusable for QUIC: {e}"))?;
    let mut config = quinn::ClientConfig::new(Arc::new(quic));
    config.transport_config(transport_config(cc, None)?);
    Ok(config)
}

fn sized_socket(sock: UdpSocket) -> UdpSocket {
    let fd = sock.as_raw_fd();
    net::set_buffers(fd, SOCKET_BUFFER);
    sock
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))
}

/// A QUIC endpoint on `sock`, a sender's (listening) or a receiver's. quic-2018's reads one
/// datagram at a time (`per_packet`), and its sender sends through Chromium's gate
/// (`send_gate`). Must be called inside the runtime.
fn endpoint(cc: QuicCc, sock: UdpSocket, sender: bool) -> Result<quinn::Endpoint, String> {
    let runtime = Arc::new(quinn::TokioRuntime);
    let sock = sized_socket(sock);
    let gate = (sender && cc.per_packet()).then(|| Arc::new(send_gate::SendGate::new()));
    let server = if sender { Some(server_config(cc, gate.clone())?) } else { None };
    let socket = if cc.per_packet() {
        per_packet::PerPacketSocket::wrap(sock, runtime.as_ref(), gate)
    } else {
        runtime.wrap_udp_socket(sock)
    };
    socket
        .and_then(|socket| {
            quinn::Endpoint::new_with_abstract_socket(EndpointConfig::default(), server, socket, runtime)
        })
        .map_err(|e| format!("cannot start the QUIC endpoint: {e}"))
}

/// Sender (runs first): listens on `port`, sends one endless stream per connection.
pub fn run_sender(cc: QuicCc, port: u16, stats: Arc<Stats>) -> Result<(), String> {
    // quic-2018's server has its page in memory before it listens (its first connection
    // copies it: `page`).
    let mut page = (cc == QuicCc::Cubic2018).then(|| page::ServerPage::load(page::PAGE));
    let sock = net::bind_udp(port).map_err(|e| format!("cannot listen on UDP port {port}: {e}"))?;
    runtime()?.block_on(async move {
        let endpoint = endpoint(cc, sock, true)?;
        while let Some(incoming) = endpoint.accept().await {
            let stats = Arc::clone(&stats);
            let page = page.take();
            tokio::spawn(async move {
                if let Err(e) = send_forever(cc, incoming, &stats, page).await {
                    eprintln!("calibrate-scheme: QUIC connection ended: {e}");
                }
            });
        }
        Err("the QUIC endpoint closed".to_string())
    })
}

async fn send_forever(
    cc: QuicCc,
    incoming: quinn::Incoming,
    stats: &Stats,
    page: Option<page::ServerPage>,
) -> Result<(), String> {
    let conn = incoming.await.map_err(|e| format!("handshake failed: {e}"))?;
    if let Some(window) = cc.receive_window() {
        let pacer = (cc == QuicCc::Cubic2017).then(pacing::PacingSender::new);
        return send_with_credit(&conn, stats, window, pacer, page).await;
    }
    let mut stream = conn.open_uni().await.map_err(|e| format!("cannot open a stream: {e}"))?;
    let buf: Vec<u8> = (0..IO_CHUNK).map(|i| (i as u8).wrapping_mul(151).wrapping_add(7)).collect();
    loop {
        stream.write_all(&buf).await.map_err(|e| format!("write failed: {e}"))?;
        stats.add_bytes(buf.len() as u64);
    }
}

/// Receiver: connects to `peer` (retrying while the sender is not up yet) and discards.
pub fn run_receiver(cc: QuicCc, peer: SocketAddr, stats: Arc<Stats>, connect_timeout: Duration) -> Result<(), String> {
    let config = client_config(cc)?;
    let sock = UdpSocket::bind(net::unspecified_for(&peer)).map_err(|e| format!("cannot open a UDP socket: {e}"))?;
    runtime()?.block_on(async move {
        let endpoint = endpoint(cc, sock, false)?;
        let conn = connect_with_retry(&endpoint, config, peer, connect_timeout).await?;
        if let Some(window) = cc.receive_window() {
            let body = (cc == QuicCc::Cubic2018).then(|| page::ResponseBody::new(page::PAGE));
            return receive_with_credit(&conn, &stats, window, body).await;
        }
        let mut stream = conn.accept_uni().await.map_err(|e| format!("no stream from {peer}: {e}"))?;
        loop {
            match stream.read_chunk(IO_CHUNK, false).await {
                Ok(Some(chunk)) => stats.add_bytes(chunk.bytes.len() as u64),
                Ok(None) => return Err(format!("{peer} finished the stream; a sender never should")),
                Err(e) => return Err(format!("connection to {peer} lost: {e}")),
            }
        }
    })
}

/// A QUIC client whose first Initial meets a closed port hears nothing back (ICMP is not
/// reported), so instead of one long handshake it makes attempts of 1 s, 2 s, 3 s...
/// until the connect timeout: a late sender is found within about a second, and a long
/// emulated RTT still gets long attempts.
async fn connect_with_retry(
    endpoint: &quinn::Endpoint,
    config: quinn::ClientConfig,
    peer: SocketAddr,
    connect_timeout: Duration,
) -> Result<quinn::Connection, String> {
    let deadline = Instant::now() + connect_timeout;
    let mut attempt_len = Duration::from_secs(1);
    let mut last_error = String::from("no answer");
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "cannot connect to a QUIC sender at {peer} within {:.1} s ({last_error}); \
                 is the sender running and reachable?",
                connect_timeout.as_secs_f64()
            ));
        }
        let connecting = endpoint
            .connect_with(config.clone(), peer, SERVER_NAME)
            .map_err(|e| format!("cannot connect to {peer}: {e}"))?;
        match tokio::time::timeout(attempt_len.min(left), connecting).await {
            Ok(Ok(conn)) => return Ok(conn),
            Ok(Err(e)) => {
                last_error = e.to_string();
                tokio::time::sleep(Duration::from_millis(100).min(left)).await;
            }
            Err(_) => last_error = "handshake timed out".to_string(),
        }
        attempt_len += Duration::from_secs(1);
    }
}

/// The toy client's receive window, as `QuicFlowController` kept it for the stream and the
/// session alike (no auto-tuning on the client, in either era): the peer may send up to `limit`; once
/// what is left of the window (limit − consumed) falls below half of it, the limit moves
/// to consumed + window and is announced (`MaybeSendWindowUpdate`).
#[derive(Clone, Debug)]
struct ReceiveWindow {
    window: u64,
    consumed: u64,
    limit: u64,
}

impl ReceiveWindow {
    fn new(window: u64) -> Self {
        Self { window, consumed: 0, limit: window }
    }

    /// Records `bytes` consumed in order; returns the new limit when one is to be announced.
    /// Data beyond the announced limit is a flow-control violation (Chromium closes the
    /// connection: `FlowControlViolation`).
    fn on_consumed(&mut self, bytes: u64) -> Result<Option<u64>, String> {
        self.consumed += bytes;
        if self.consumed > self.limit {
            return Err(format!(
                "flow-control violation: {} bytes received where {} were allowed",
                self.consumed, self.limit
            ));
        }
        if self.limit - self.consumed >= self.window / 2 {
            return Ok(None);
        }
        self.limit = self.consumed + self.window;
        Ok(Some(self.limit))
    }
}

/// Chromium 54's pacing interval for one 1350-byte packet at the slow-start rate of the
/// initial window, 2 × (32 × 1460 B) / srtt, which a credit-limited flow keeps (its window
/// never grows past the initial one).
fn interval_2017(srtt: Duration) -> Duration {
    srtt.mul_f64(f64::from(PACKET_2017) / (2.0 * INITIAL_CWND_2017 as f64))
}

/// quic-2017 and quic-2018 sender: one bidirectional stream; data goes out on it within the
/// receiver's credit (`window` at first, then each limit the receiver writes back on the
/// same stream). With `pacer` (2017) one paced packet's worth per write; without (2018)
/// writes of up to `IO_CHUNK`, paced by the socket's gate. With `page` (2018), the server's
/// copy of its unsent page after the first write.
async fn send_with_credit(
    conn: &quinn::Connection,
    stats: &Stats,
    window: u64,
    mut pacer: Option<pacing::PacingSender>,
    mut page: Option<page::ServerPage>,
) -> Result<(), String> {
    // Copied once; the buffers live as long as this function (see `page`).
    let mut unsent = page.as_mut();
    let (mut stream, mut credits) = conn.open_bi().await.map_err(|e| format!("cannot open a stream: {e}"))?;
    let (limit_tx, mut limit_rx) = tokio::sync::watch::channel(window);
    tokio::spawn(async move {
        let mut msg = [0u8; 8];
        while credits.read_exact(&mut msg).await.is_ok() {
            let limit = u64::from_be_bytes(msg);
            limit_tx.send_if_modified(|current| {
                let raised = limit > *current;
                if raised {
                    *current = limit;
                }
                raised
            });
        }
    });
    let chunk = if pacer.is_some() { CHUNK_2017 } else { IO_CHUNK };
    let buf: Vec<u8> = (0..chunk).map(|i| (i as u8).wrapping_mul(151).wrapping_add(7)).collect();
    let mut written = 0u64;
    loop {
        if written >= *limit_rx.borrow_and_update() {
            limit_rx.changed().await.map_err(|_| "the receiver's credit stream ended".to_string())?;
            continue;
        }
        if let Some(at) = pacer.as_mut().and_then(|p| p.release_at(Instant::now(), false)) {
            tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
        }
        let room = *limit_rx.borrow() - written;
        let n = room.min(chunk as u64) as usize;
        stream.write_all(&buf[..n]).await.map_err(|e| format!("write failed: {e}"))?;
        written += n as u64;
        stats.add_bytes(n as u64);
        if let Some(p) = pacer.as_mut() {
            p.on_sent(Instant::now(), interval_2017(conn.rtt()), None);
        }
        if let Some(page) = unsent.take() {
            // The first flight leaves (the connection task runs), then the page is queued.
            tokio::task::yield_now().await;
            page.queue_unsent(conn.stats().udp_tx.bytes as usize);
        }
    }
}

/// quic-2017 and quic-2018 receiver: reads the sender's stream in order and writes back each
/// new limit of its `window` (8 bytes, big-endian) on the same stream.
/// With `body` (quic-2018), the data is also kept as the toy client keeps its page.
async fn receive_with_credit(
    conn: &quinn::Connection,
    stats: &Stats,
    window: u64,
    mut body: Option<page::ResponseBody>,
) -> Result<(), String> {
    let (mut credits, mut stream) = conn.accept_bi().await.map_err(|e| format!("no stream from the sender: {e}"))?;
    let mut window = ReceiveWindow::new(window);
    loop {
        match stream.read_chunk(IO_CHUNK, true).await {
            Ok(Some(chunk)) => {
                let n = chunk.bytes.len() as u64;
                if let Some(body) = body.as_mut() {
                    body.append(&chunk.bytes);
                }
                stats.add_bytes(n);
                if let Some(limit) = window.on_consumed(n)? {
                    credits
                        .write_all(&limit.to_be_bytes())
                        .await
                        .map_err(|e| format!("cannot send a window update: {e}"))?;
                }
            }
            Ok(None) => return Err("the sender finished the stream; a sender never should".to_string()),
            Err(e) => return Err(format!("connection to the sender lost: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    #[test]
    fn the_2017_pacing_interval_is_a_packet_at_twice_the_initial_window_per_srtt() {
        // 2 × 46 720 B per 57 ms: a 1350-byte packet every ~0.82 ms.
        let interval = interval_2017(Duration::from_millis(57));
        assert!((interval.as_secs_f64() * 1e3 - 0.8236).abs() < 0.001, "{interval:?}");
    }

    #[test]
    fn window_is_refreshed_once_less_than_half_is_left() {
        let mut w = ReceiveWindow::new(WINDOW_2017);
        assert_eq!(w.on_consumed(4096), Ok(None));
        // Exactly half left: no update yet.
        assert_eq!(w.on_consumed(4096), Ok(None));
        // Below half: the limit moves to consumed + window.
        assert_eq!(w.on_consumed(1), Ok(Some(8193 + WINDOW_2017)));
        // The next update needs the window to drain below half again.
        assert_eq!(w.on_consumed(WINDOW_2017 / 2), Ok(None));
        assert_eq!(w.on_consumed(1), Ok(Some(8193 + WINDOW_2017 / 2 + 1 + WINDOW_2017)));
    }

    #[test]
    fn data_beyond_the_limit_is_a_violation() {
        let mut w = ReceiveWindow::new(WINDOW_2017);
        assert!(w.on_consumed(WINDOW_2017 + 1).is_err());
    }

    /// Stream bytes the credit loop of a `window` delivers per round trip over a loss-free
    /// FIFO path of `owd` each way and `rate` bytes/s, with `CHUNK_2017`-byte packets of 1378
    /// bytes on the wire sent as soon as credit arrives, measured from 5 s to 20 s.
    fn delivered_per_round_trip(window: u64, owd: f64, rate: f64) -> f64 {
        let wire = f64::from(PACKET_2017) + 28.0;
        let mut credits: VecDeque<(f64, u64)> = VecDeque::from([(0.0, window)]);
        let mut window = ReceiveWindow::new(window);
        let mut packets: VecDeque<(f64, u64)> = VecDeque::new();
        let (mut sent, mut link_free, mut counted) = (0u64, 0.0f64, 0u64);
        let (start, end) = (5.0, 20.0);
        loop {
            let next_packet = packets.front().map_or(f64::INFINITY, |p| p.0);
            let next_credit = credits.front().map_or(f64::INFINITY, |c| c.0);
            let now = next_packet.min(next_credit);
            assert!(now.is_finite(), "the credit loop stalled");
            if now > end {
                break;
            }
            if next_packet <= next_credit {
                let (_, bytes) = packets.pop_front().unwrap();
                if now >= start {
                    counted += bytes;
                }
                if let Some(limit) = window.on_consumed(bytes).unwrap() {
                    credits.push_back((now + owd, limit));
                }
            } else {
                let (_, limit) = credits.pop_front().unwrap();
                while sent < limit {
                    let bytes = (limit - sent).min(CHUNK_2017 as u64);
                    sent += bytes;
                    link_free = link_free.max(now) + wire / rate;
                    packets.push_back((link_free + owd, bytes));
                }
            }
        }
        counted as f64 / ((end - start) / (2.0 * owd))
    }

    #[test]
    fn about_half_the_window_plus_a_packet_per_round_trip_whatever_the_delay_or_rate() {
        let wire = f64::from(PACKET_2017) + 28.0;
        let cases = [(5.0, 10.0), (5.0, 100.0), (28.0, 2.0), (28.0, 10.0), (28.0, 100.0), (50.0, 10.0)];
        let more = [(100.0, 2.0), (100.0, 10.0), (200.0, 10.0), (200.0, 100.0)];
        for (owd_ms, mbps) in cases.into_iter().chain(more) {
            let (owd, rate) = (owd_ms / 1e3, mbps * 1e6 / 8.0);
            // One update per loop; the loop is the propagation round trip plus the first
            // packet's serialization.
            let per_loop = (WINDOW_2017 + CHUNK_2017 as u64) as f64 / 2.0;
            let expected = per_loop * 2.0 * owd / (2.0 * owd + wire / rate);
            let per_rtt = delivered_per_round_trip(WINDOW_2017, owd, rate);
            assert!(
                (per_rtt / expected - 1.0).abs() < 0.05,
                "{owd_ms} ms, {mbps} Mbit/s: {per_rtt:.0} bytes per round trip, expected ~{expected:.0}"
            );
            let measured_per_loop = per_rtt * (2.0 * owd + wire / rate) / (2.0 * owd);
            assert!(measured_per_loop > WINDOW_2017 as f64 / 2.0 && measured_per_loop < WINDOW_2017 as f64);
        }
        // Where the window exceeds the path's capacity the link is the limit.
        let per_rtt = delivered_per_round_trip(WINDOW_2017, 0.005, 2e6 / 8.0);
        let capacity = 2e6 / 8.0 * 0.010 * CHUNK_2017 as f64 / wire;
        assert!((per_rtt / capacity - 1.0).abs() < 0.05, "{per_rtt:.0} vs {capacity:.0}");
    }

    #[test]
    fn the_2018_window_leaves_the_link_the_limit_where_2017_capped_at_9_kb() {
        // Wherever the path holds no more than Chromium's largest congestion window
        // (2000 × 1460 bytes), the 6 MB window refreshed at half never starves the link.
        let wire = f64::from(PACKET_2017) + 28.0;
        for (owd_ms, mbps) in [(5.0, 10.0), (28.0, 10.0), (28.0, 100.0), (100.0, 100.0), (150.0, 6.0)] {
            let (owd, rate) = (owd_ms / 1e3, mbps * 1e6 / 8.0);
            assert!(rate * 2.0 * owd <= cubic_2018::MAX_WINDOW as f64);
            let capacity = rate * 2.0 * owd * CHUNK_2017 as f64 / wire;
            let per_rtt = delivered_per_round_trip(WINDOW_2018, owd, rate);
            assert!(
                per_rtt > 0.97 * capacity,
                "{owd_ms} ms, {mbps} Mbit/s: {per_rtt:.0} of {capacity:.0} per round trip"
            );
            let capped = delivered_per_round_trip(WINDOW_2017, owd, rate);
            assert!(capped < 10_000.0 || capped > 0.97 * capacity, "{capped:.0}");
        }
        // The window binds only beyond 3 MB per round trip.
        let per_rtt = delivered_per_round_trip(WINDOW_2018, 0.2, 1e9 / 8.0);
        assert!(per_rtt > 0.45 * WINDOW_2018 as f64 && per_rtt < 0.55 * WINDOW_2018 as f64, "{per_rtt:.0}");
    }

    /// The endpoints `run_sender` and `run_receiver` make, over the loopback interface.
    fn loopback_endpoints(cc: QuicCc) -> (quinn::Endpoint, quinn::Endpoint, std::net::SocketAddr) {
        let server_sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = server_sock.local_addr().unwrap();
        let server = endpoint(cc, server_sock, true).unwrap();
        let client = endpoint(cc, UdpSocket::bind("127.0.0.1:0").unwrap(), false).unwrap();
        (server, client, addr)
    }

    /// The real endpoints over the loopback interface: data flows, the sender never
    /// exceeds the receiver's credit (the receiver stops with an error if it does), and
    /// packets are 1350-byte UDP payloads.
    #[test]
    fn loopback_transfer_stays_within_the_credit_with_1350_byte_packets() {
        let rt = runtime().unwrap();
        rt.block_on(async {
            let (server, client, addr) = loopback_endpoints(QuicCc::Cubic2017);
            let sender_stats = Arc::new(Stats::new("quic-2017", "sender", "chunks"));
            let s = Arc::clone(&sender_stats);
            tokio::spawn(async move {
                let incoming = server.accept().await.unwrap();
                let _ = send_forever(QuicCc::Cubic2017, incoming, &s, None).await;
            });
            let config = client_config(QuicCc::Cubic2017).unwrap();
            let conn = connect_with_retry(&client, config, addr, Duration::from_secs(10)).await.unwrap();
            let stats = Stats::new("quic-2017", "receiver", "chunks");
            let ended = tokio::time::timeout(
                Duration::from_millis(1500),
                receive_with_credit(&conn, &stats, WINDOW_2017, None),
            )
            .await;
            assert!(ended.is_err(), "the receiver stopped: {ended:?}");
            assert!(stats.bytes() > 100_000, "only {} bytes arrived", stats.bytes());
            assert!(sender_stats.bytes() <= stats.bytes() + WINDOW_2017);
            let path = conn.stats();
            assert_eq!(path.path.current_mtu, PACKET_2017);
            // A paced write leaves as one packet: no short tails split off full writes
            // (writes are short only at the credit's edge).
            let per_frame = stats.bytes() as f64 / path.frame_rx.stream as f64;
            assert!(per_frame > 1000.0 && per_frame <= CHUNK_2017 as f64, "{per_frame:.0} bytes per STREAM frame");
        });
    }

    /// quic-2018's endpoints over the loopback interface: 1350-byte packets, Chromium's
    /// controller on the sender (its window between the initial 32 and the cap of 2000
    /// packets of 1460 bytes), data within the 6 MB credit, far more than 16 KB per round trip.
    #[test]
    fn loopback_2018_transfer_runs_chromiums_controller_within_the_6_mb_credit() {
        let rt = runtime().unwrap();
        rt.block_on(async {
            let (server, client, addr) = loopback_endpoints(QuicCc::Cubic2018);
            let sender_stats = Arc::new(Stats::new("quic-2018", "sender", "chunks"));
            let s = Arc::clone(&sender_stats);
            let (conn_tx, conn_rx) = tokio::sync::oneshot::channel();
            tokio::spawn(async move {
                let conn = server.accept().await.unwrap().await.unwrap();
                conn_tx.send(conn.clone()).unwrap();
                let _ = send_with_credit(&conn, &s, WINDOW_2018, None, Some(page::ServerPage::load(8 << 20))).await;
            });
            let config = client_config(QuicCc::Cubic2018).unwrap();
            let conn = connect_with_retry(&client, config, addr, Duration::from_secs(10)).await.unwrap();
            let stats = Stats::new("quic-2018", "receiver", "chunks");
            let ended = tokio::time::timeout(
                Duration::from_millis(1500),
                receive_with_credit(&conn, &stats, WINDOW_2018, Some(page::ResponseBody::new(page::PAGE))),
            )
            .await;
            assert!(ended.is_err(), "the receiver stopped: {ended:?}");
            assert!(stats.bytes() > 2_000_000, "only {} bytes arrived", stats.bytes());
            assert!(sender_stats.bytes() <= stats.bytes() + WINDOW_2018);
            assert_eq!(conn.stats().path.current_mtu, PACKET_2017);
            let sender = conn_rx.await.unwrap();
            assert_eq!(sender.stats().path.current_mtu, PACKET_2017);
            // quinn sees the gate's window (above 4 GiB); Chromium's is the controller's.
            let controller = sender.congestion_state().into_any().downcast::<cubic_2018::ChromiumCubic>().unwrap();
            let window = quinn::congestion::Controller::metrics(controller.as_ref()).congestion_window;
            assert!((2 * cubic_2018::MSS..=cubic_2018::MAX_WINDOW).contains(&window), "sender window {window} bytes");
        });
    }
}
