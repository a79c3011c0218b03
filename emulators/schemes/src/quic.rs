//! QUIC bulk transfer over quinn with its Cubic, NewReno or BBR congestion controller.
//!
//! Sender-first, like Pantheon's `quic` wrapper (whose server sends a large file): the
//! sender listens on PORT with a certificate made at start (rcgen, self-signed), and for
//! every connection opens one unidirectional stream and writes to it until killed. The
//! receiver connects to IP:PORT, skips certificate verification (there is no authority to
//! check a per-run self-signed certificate against, and the payload is junk), and
//! discards everything that arrives.
//!
//! Transport settings that matter for a probe:
//! * flow-control windows of 64 MiB, so QUIC flow control never limits the flow before
//!   the congestion controller does (quinn's defaults assume 100 Mbit/s × 100 ms);
//! * path MTU discovery up to 1472-byte UDP payloads, i.e. 1500-byte IPv4 packets on the
//!   emulated link (quinn starts at 1200 and probes upwards);
//! * segmentation offload off, so every datagram is paced on its own rather than
//!   leaving as a GSO burst.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quinn::congestion::{BbrConfig, CubicConfig, NewRenoConfig};
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{EndpointConfig, MtuDiscoveryConfig, TransportConfig, VarInt};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};

use crate::net;
use crate::stats::Stats;

const ALPN: &[u8] = b"calibrate-bulk";
const SERVER_NAME: &str = "calibrate-scheme";
const FLOW_CONTROL_WINDOW: u32 = 64 << 20;
const MAX_UDP_PAYLOAD: u16 = 1472;
const IO_CHUNK: usize = 256 << 10;
const SOCKET_BUFFER: usize = 16 << 20;
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// quinn's congestion controllers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuicCc {
    Cubic,
    NewReno,
    Bbr,
    /// PORT IN PROGRESS: proto-quic 54 (Pantheon 2017) as it behaved, with its per-round-trip cap.
    Cubic2017,
}

impl QuicCc {
    /// Every variant (the registry's tests check each has an entry).
    pub const ALL: [QuicCc; 4] = [QuicCc::Cubic, QuicCc::NewReno, QuicCc::Bbr, QuicCc::Cubic2017];

    /// The `controller` that names it in the registry file (calibrate/data/schemes.json).
    pub fn name(self) -> &'static str {
        match self {
            QuicCc::Cubic => "cubic",
            QuicCc::NewReno => "newreno",
            QuicCc::Bbr => "bbr",
            QuicCc::Cubic2017 => "cubic-2017",
        }
    }

    pub fn from_name(name: &str) -> Option<QuicCc> {
        QuicCc::ALL.into_iter().find(|cc| cc.name() == name)
    }
}

fn transport_config(cc: QuicCc) -> Result<Arc<TransportConfig>, String> {
    let mut t = TransportConfig::default();
    match cc {
        QuicCc::Cubic | QuicCc::Cubic2017 => t.congestion_controller_factory(Arc::new(CubicConfig::default())),
        QuicCc::NewReno => t.congestion_controller_factory(Arc::new(NewRenoConfig::default())),
        QuicCc::Bbr => t.congestion_controller_factory(Arc::new(BbrConfig::default())),
    };
    t.stream_receive_window(VarInt::from_u32(FLOW_CONTROL_WINDOW));
    t.receive_window(VarInt::from_u32(FLOW_CONTROL_WINDOW));
    t.send_window(FLOW_CONTROL_WINDOW as u64);
    let mut mtu = MtuDiscoveryConfig::default();
    mtu.upper_bound(MAX_UDP_PAYLOAD);
    t.mtu_discovery_config(Some(mtu));
    t.enable_segmentation_offload(false);
    t.max_idle_timeout(Some(IDLE_TIMEOUT.try_into().map_err(|e| format!("idle timeout: {e}"))?));
    Ok(Arc::new(t))
}

fn crypto_provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn server_config(cc: QuicCc) -> Result<quinn::ServerConfig, String> {
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
    config.transport_config(transport_config(cc)?);
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
    config.transport_config(transport_config(cc)?);
    Ok(config)
}

fn sized_socket(sock: UdpSocket) -> UdpSocket {
    let fd = sock.as_raw_fd();
    let _ = net::set_buffer(fd, net::Buffer::Send, SOCKET_BUFFER);
    let _ = net::set_buffer(fd, net::Buffer::Receive, SOCKET_BUFFER);
    sock
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))
}

/// Sender (runs first): listens on `port`, sends one endless stream per connection.
pub fn run_sender(cc: QuicCc, port: u16, stats: Arc<Stats>) -> Result<(), String> {
    let config = server_config(cc)?;
    let sock = net::bind_udp(port).map_err(|e| format!("cannot listen on UDP port {port}: {e}"))?;
    runtime()?.block_on(async move {
        let endpoint = quinn::Endpoint::new(
            EndpointConfig::default(),
            Some(config),
            sized_socket(sock),
            Arc::new(quinn::TokioRuntime),
        )
        .map_err(|e| format!("cannot start the QUIC endpoint: {e}"))?;
        while let Some(incoming) = endpoint.accept().await {
            let stats = Arc::clone(&stats);
            tokio::spawn(async move {
                if let Err(e) = send_forever(incoming, &stats).await {
                    eprintln!("calibrate-scheme: QUIC connection ended: {e}");
                }
            });
        }
        Err("the QUIC endpoint closed".to_string())
    })
}

async fn send_forever(incoming: quinn::Incoming, stats: &Stats) -> Result<(), String> {
    let conn = incoming.await.map_err(|e| format!("handshake failed: {e}"))?;
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
        let endpoint = quinn::Endpoint::new(EndpointConfig::default(), None, sized_socket(sock), Arc::new(quinn::TokioRuntime))
            .map_err(|e| format!("cannot start the QUIC endpoint: {e}"))?;
        let conn = connect_with_retry(&endpoint, config, peer, connect_timeout).await?;
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
