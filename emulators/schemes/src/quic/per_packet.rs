//! A UDP socket that hands quinn one datagram at a time, so that a connection handles each
//! packet and sends what its window and pacer allow before it reads the next: the order of
//! Chromium's `QuicConnection` (`ProcessUdpPacket`, then `MaybeSendInResponseToPacket`, with
//! `defer_send_in_response_to_packets_` false in the toy server and client).
//!
//! quinn's endpoint task reads every waiting datagram (`recvmmsg`, up to 32 at once) and
//! queues them all for the connection task, which handles its whole queue before it sends. A
//! sender then sees several ACK frames at one instant: the bytes in flight drop by every
//! frame's packets before anything is sent, and a controller that asks whether it was
//! window limited before each ACK (Chromium's `IsCwndLimited`) finds it was not. A receiver
//! acknowledges a batch of packets at once instead of every second one.
//!
//! Here `poll_recv` returns at most one datagram, and the call after a datagram returns
//! `Pending` having woken its caller again. The endpoint task thus stops after each datagram;
//! the connection task, woken when the datagram was queued for it and so ahead of the endpoint
//! task in the current-thread runtime's queue, handles it and sends before the endpoint task
//! reads the next one. Receive offload (UDP GRO) is turned off, so one read is one datagram.
//!
//! With a `SendGate` (quic-2018's sender) every datagram also asks the gate before it leaves:
//! one the gate holds is refused with `WouldBlock`, and the socket's poller, which quinn asks
//! before every send, waits until the gate's time (or the next ACK, which wakes the
//! connection task anyway) before quinn offers it again.

use std::fmt;
use std::future::Future;
use std::io::{self, IoSliceMut};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, Runtime, UdpPoller};

use super::send_gate::SendGate;
use crate::net;

/// Linux's `UDP_GRO` socket option (level `SOL_UDP`), which quinn-udp turns on.
const UDP_GRO: i32 = 104;

pub(crate) struct PerPacketSocket {
    inner: Arc<dyn AsyncUdpSocket>,
    /// The last call returned a datagram: the next one yields instead of reading.
    handed_one: AtomicBool,
    gate: Option<Arc<SendGate>>,
}

impl PerPacketSocket {
    /// Wraps `sock` for `runtime` (quinn's own wrapper underneath) with receive offload off,
    /// sending through `gate` if given.
    pub(crate) fn wrap(
        sock: UdpSocket,
        runtime: &dyn Runtime,
        gate: Option<Arc<SendGate>>,
    ) -> io::Result<Arc<dyn AsyncUdpSocket>> {
        let fd = sock.as_raw_fd();
        let inner = runtime.wrap_udp_socket(sock)?;
        // After quinn-udp's setup, which turns it on where the kernel has it.
        net::setsockopt_int(fd, libc::SOL_UDP, UDP_GRO, 0)?;
        Ok(Arc::new(Self { inner, handed_one: AtomicBool::new(false), gate }))
    }
}

impl fmt::Debug for PerPacketSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PerPacketSocket").field("inner", &self.inner).field("gate", &self.gate).finish()
    }
}

impl AsyncUdpSocket for PerPacketSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        Box::pin(GatedPoller {
            gate: self.gate.clone(),
            inner: Arc::clone(&self.inner).create_io_poller(),
            sleep: None,
        })
    }

    fn try_send(&self, transmit: &Transmit) -> io::Result<()> {
        if let Some(gate) = &self.gate {
            // Admitted is recorded as sent; were the kernel's buffer then full (16 MiB here,
            // never seen), the retry would be paced as a second packet.
            if gate.admit(Instant::now(), transmit.contents.len()).is_err() {
                return Err(io::ErrorKind::WouldBlock.into());
            }
        }
        self.inner.try_send(transmit)
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        if self.handed_one.swap(false, Ordering::Relaxed) {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let polled = self.inner.poll_recv(cx, &mut bufs[..1], &mut meta[..1]);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.handed_one.store(true, Ordering::Relaxed);
        }
        polled
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        self.inner.max_transmit_segments()
    }

    fn max_receive_segments(&self) -> usize {
        1
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}

/// The socket's writability for quinn: the gate's wait first, then the kernel's.
struct GatedPoller {
    gate: Option<Arc<SendGate>>,
    inner: Pin<Box<dyn UdpPoller>>,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl fmt::Debug for GatedPoller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GatedPoller").field("gate", &self.gate).finish_non_exhaustive()
    }
}

impl UdpPoller for GatedPoller {
    fn poll_writable(self: Pin<&mut Self>, cx: &mut Context) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(Err(at)) = this.gate.as_ref().map(|gate| gate.ready(Instant::now())) {
            let deadline = tokio::time::Instant::from_std(at);
            let sleep = this.sleep.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
            sleep.as_mut().reset(deadline);
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
        this.inner.as_mut().poll_writable(cx)
    }
}
