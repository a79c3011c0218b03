//! Pantheon's 2018 page (500 MB) as proto-quic 77961f1's toy server and client hold it. Each
//! takes its only thread away from the connection for tens of milliseconds at moments the
//! page's size sets, and the upstream's runs show both (experiments/README, "quic-2018: one
//! datagram at a time, Chromium's pacer and the client's page").
//!
//! # The server: the unsent page copied once (`ServerPage`)
//! `QuicSimpleServerStream::SendHeadersAndBodyAndTrailers` hands the whole cached page to
//! `QuicStream::WriteOrBufferData`, which sends what may leave at once (the pacer's 10-packet
//! burst) and queues the rest as a copy (`remainder.as_string()`). The server links tcmalloc
//! (Chromium 60's allocator on Linux), which keeps the memory it frees, such as the buffers of
//! reading the page at start, mapped for the next allocation: the copy is a memcpy of 500 MB into
//! memory already there. On the upstream build at 10/28/inf that is the 55–75 ms pause after the
//! first 10 packets; the pacer's next packet is then late and it makes up for lost time, so a
//! window's worth (36 packets) leaves at once, slow start meets a queue early and ends at about
//! 85 packets. Reproduced by the same copy between two buffers the sender fills when it starts
//! (before it listens, as the upstream reads its page), held until the connection ends: 1 GB
//! per quic-2018 sender (the upstream's holds the page twice and its queue, 1.5 GB).
//!
//! # The client: the page kept as it arrives (`ResponseBody`)
//! The toy client's stream: `QuicSpdyClientStream::OnDataAvailable`
//! appends every readable region to a `std::string` (`data_`) before marking it consumed, and
//! `quic_simple_client_bin` stores the response (`set_store_response(true)`). A `std::string`
//! that outgrows its capacity allocates twice that, copies itself over and frees the old
//! buffer; on the client's only thread, so nothing is read or acknowledged meanwhile. At 22 MB
//! (18 s into a 10 Mbit/s run) that is a 14 ms pause, and the ACKs that then arrive together
//! find the sender's window unused (measured on the upstream build: experiments/README,
//! "quic-2018: one datagram at a time, Chromium's pacer and the client's page").
//!
//! Reproduced by the same growth: the first append sets the capacity, each overflow doubles it
//! (at least to what is needed) into a fresh allocation that the old contents are copied into
//! (`Vec`'s own growth would `realloc`, which for large blocks remaps pages without copying).
//! Bounded by Pantheon's page: the upstream client is done after 5 × 100 MiB and exits; here
//! the buffer is dropped and starts over, so memory never exceeds about twice the page.

/// Pantheon's 2018 page (`quic.py`'s `generate_html`): 5 lines of 100 MiB, with its header.
pub(crate) const PAGE: usize = 5 * (100 << 20);

/// The server's page and the memory its unsent part is copied into (see the module doc).
#[derive(Debug)]
pub(crate) struct ServerPage {
    page: Vec<u8>,
    queue: Vec<u8>,
}

impl ServerPage {
    /// Both buffers of `size` bytes, written so that their memory is mapped.
    pub(crate) fn load(size: usize) -> Self {
        Self { page: vec![b'x'; size], queue: vec![0xa5; size] }
    }

    /// Queues the page after its first `sent` bytes (`WriteOrBufferData`'s copy) and returns
    /// the bytes queued. The buffers stay until the connection ends, as the upstream's page and
    /// queue do: freeing them would unmap 1 GB, which holds the process's memory map for as
    /// long as the copy took (34 ms here, on any thread) and stalls the sender again.
    pub(crate) fn queue_unsent(&mut self, sent: usize) -> usize {
        let rest = self.page.len().saturating_sub(sent);
        self.queue[..rest].copy_from_slice(&self.page[self.page.len() - rest..]);
        std::hint::black_box(&self.queue);
        rest
    }
}

#[derive(Debug)]
pub(crate) struct ResponseBody {
    data: Vec<u8>,
    page: usize,
}

impl ResponseBody {
    pub(crate) fn new(page: usize) -> Self {
        Self { data: Vec::new(), page }
    }

    /// Appends `bytes` as `std::string::append` does (see the module doc).
    pub(crate) fn append(&mut self, bytes: &[u8]) {
        if self.data.len() + bytes.len() > self.page {
            self.data = Vec::new();
        }
        let needed = self.data.len() + bytes.len();
        if needed > self.data.capacity() {
            let mut grown = Vec::with_capacity(needed.max(2 * self.data.capacity()));
            grown.extend_from_slice(&self.data);
            self.data = grown;
        }
        self.data.extend_from_slice(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_by_doubling_from_the_first_append_and_keeps_the_bytes() {
        let mut body = ResponseBody::new(PAGE);
        let mut capacities = Vec::new();
        for i in 0..100u32 {
            body.append(&[i as u8; 1300]);
            if capacities.last() != Some(&body.data.capacity()) {
                capacities.push(body.data.capacity());
            }
        }
        assert_eq!(body.data.len(), 130_000);
        assert_eq!(capacities, [1300, 2600, 5200, 10_400, 20_800, 41_600, 83_200, 166_400]);
        assert_eq!(body.data[1299], 0);
        assert_eq!(body.data[129_999], 99);
    }

    #[test]
    fn the_server_copies_what_is_left_of_its_page() {
        let mut page = ServerPage::load(10_000);
        assert_eq!(page.queue_unsent(1_000), 9_000);
        assert_eq!(page.queue[..9_000], page.page[1_000..]);
        assert_eq!(ServerPage::load(100).queue_unsent(1_000), 0, "all of it sent at once");
    }

    #[test]
    fn starts_over_after_a_page_so_memory_stays_bounded() {
        let mut body = ResponseBody::new(10_000);
        for _ in 0..25 {
            body.append(&[7; 1000]);
        }
        assert_eq!(body.data.len(), 5000, "two pages done, half of the third");
        assert!(body.data.capacity() <= 2 * 10_000);
    }
}
