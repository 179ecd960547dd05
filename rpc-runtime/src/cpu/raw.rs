//! A device that writes a region directly, without the client's protocol:
//! what fault-injection tests play (a kernel with a bug, hostile device
//! memory). It writes headers and packets and flips the client outbox; the
//! server must answer or refuse whatever it finds, and stay usable.

use std::marker::PhantomData;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use super::CpuRegion;
use crate::call::Status;
use crate::protocol::{Buffer, Layout, BUFFER_BYTES, BUFFER_WORDS, INLINE_BIT, INLINE_SHIFT, OWNER_BIT};

/// Raw access to a [`CpuRegion`]'s shared memory, as a misbehaving device has
/// it (the client lock words are not used).
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::cpu::{RawDevice, CpuRegion};
/// use gpu_rpc::protocol::{opcodes, Buffer, Layout};
/// use gpu_rpc::server::{Dispatcher, ServerConfig};
/// use gpu_rpc::Status;
/// let region = CpuRegion::new(Layout::new(1, 1).unwrap());
/// // SAFETY: nothing else uses the region while the test writes it.
/// let dev = unsafe { RawDevice::new(&region) };
/// // A frame word of version 0: refused as a whole, answered BadFrame.
/// dev.inject(0, opcodes::NOOP, 1, &[(0, Buffer::default())]);
/// let d = Dispatcher::new(ServerConfig { log_errors: false, ..ServerConfig::default() });
/// d.poll(&region.server(), 0..1).unwrap();
/// assert_eq!(dev.status(0, 0), Status::BadFrame);
/// ```
pub struct RawDevice<'r> {
    base: *mut u8,
    layout: Layout,
    _region: PhantomData<&'r CpuRegion>,
}

impl<'r> RawDevice<'r> {
    /// The device side of `region`.
    ///
    /// # Safety
    /// No client may use the region while this device writes it (the
    /// server may: it validates what it reads).
    pub unsafe fn new(region: &'r CpuRegion) -> Self {
        RawDevice {
            // SAFETY: the caller's contract; the pointer is used only for
            // in-bounds atomic accesses below.
            base: unsafe { region.raw() },
            layout: region.layout(),
            _region: PhantomData,
        }
    }

    fn u32_at(&self, off: usize) -> &AtomicU32 {
        assert!(off + 4 <= self.layout.allocation_size() && off.is_multiple_of(4));
        // SAFETY: in bounds and aligned (checked above); the region lives for
        // 'r and its words are only accessed atomically.
        unsafe { &*(self.base.add(off) as *const AtomicU32) }
    }

    fn u64_at(&self, off: usize) -> &AtomicU64 {
        assert!(off + 8 <= self.layout.allocation_size() && off.is_multiple_of(8));
        // SAFETY: as in `u32_at`.
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }

    fn client_outbox(&self, port: u32) -> &AtomicU32 {
        self.u32_at(self.layout.client_outbox_offset() + 4 * port as usize)
    }

    fn server_outbox(&self, port: u32) -> &AtomicU32 {
        self.u32_at(self.layout.server_outbox_offset() + 4 * port as usize)
    }

    /// Offset of word `w` of lane `lane`'s buffer of `port`: a port's packet
    /// is `lane_size` × 64 bytes, word-major (`[word][lane]`).
    fn word_offset(&self, port: u32, lane: u32, w: usize) -> usize {
        let lanes = self.layout.lane_size() as usize;
        self.layout.packet_offset() + port as usize * lanes * BUFFER_BYTES + 8 * (w * lanes + lane as usize)
    }

    /// Write `port`'s header (published by the next [`flip`](Self::flip)).
    pub fn set_header(&self, port: u32, opcode: u32, mask: u64) {
        let h = self.layout.header_offset() + 64 * port as usize;
        // Relaxed: published by the release fence in `flip`.
        self.u32_at(h).store(opcode, Ordering::Relaxed);
        self.u64_at(h + 8).store(mask, Ordering::Relaxed);
    }

    /// Write lane `lane`'s buffer of `port` (published by the next flip).
    pub fn write(&self, port: u32, lane: u32, b: &Buffer) {
        for (w, &v) in b.data.iter().enumerate() {
            self.write_word(port, lane, w, v);
        }
    }

    /// Write word `w` of lane `lane`'s buffer of `port` (published by the
    /// next flip): a device that writes only the words a call uses, as the
    /// client does, e.g. to drive a server at the speed of a GPU's warps.
    pub fn write_word(&self, port: u32, lane: u32, w: usize, v: u64) {
        assert!(w < BUFFER_WORDS, "word {w} of a {BUFFER_BYTES}-byte buffer");
        // Relaxed: published by the release fence in `flip`.
        self.u64_at(self.word_offset(port, lane, w)).store(v, Ordering::Relaxed);
    }

    /// Read word `w` of lane `lane`'s buffer of `port` (after
    /// [`owned`](Self::owned)).
    pub fn read_word(&self, port: u32, lane: u32, w: usize) -> u64 {
        assert!(w < BUFFER_WORDS, "word {w} of a {BUFFER_BYTES}-byte buffer");
        // Relaxed: ordered after the server's writes by the acquire fence
        // in `owned`.
        self.u64_at(self.word_offset(port, lane, w)).load(Ordering::Relaxed)
    }

    /// Read lane `lane`'s buffer of `port` (after [`owned`](Self::owned)
    /// said the server handed it back).
    pub fn read(&self, port: u32, lane: u32) -> Buffer {
        let mut b = Buffer::default();
        for (w, v) in b.data.iter_mut().enumerate() {
            *v = self.read_word(port, lane, w);
        }
        b
    }

    /// Hand `port` to the server: what was written becomes visible, then the
    /// client outbox flips.
    pub fn flip(&self, port: u32) {
        // Relaxed load: this device is the only writer of the client outbox.
        let c = self.client_outbox(port).load(Ordering::Relaxed);
        // Release: the header and packet writes become visible before the
        // flip, as in the protocol's `invert_outbox`.
        fence(Ordering::Release);
        // Relaxed: ordered by the fence above.
        self.client_outbox(port).store(c ^ 1, Ordering::Relaxed);
    }

    /// Set the bits of `port`'s client outbox above the ownership bit to
    /// those of `high` (bit 0 kept): what a device with a bug might store.
    /// The protocol compares ownership bits only, so nothing changes.
    pub fn scribble_outbox(&self, port: u32, high: u32) {
        // Relaxed: this device is the only writer of the client outbox; the
        // word carries no data for the server.
        let c = self.client_outbox(port).load(Ordering::Relaxed);
        self.client_outbox(port)
            .store((c & OWNER_BIT) | (high & !OWNER_BIT), Ordering::Relaxed);
    }

    /// Whether the server has handed `port` back (then its packet writes are
    /// visible to [`read`](Self::read)).
    pub fn owned(&self, port: u32) -> bool {
        // Relaxed: the acquire fence below orders the packet reads.
        // Only the ownership bits count (the server's word may carry an
        // inline reply).
        let owned = (self.client_outbox(port).load(Ordering::Relaxed)
            ^ self.server_outbox(port).load(Ordering::Relaxed))
            & OWNER_BIT
            == 0;
        if owned {
            // Acquire: the server's packet writes, released before its flip,
            // are visible to the reads that follow.
            fence(Ordering::Acquire);
        }
        owned
    }

    /// Write a header and lane buffers and hand the port to the server in
    /// one step (one packet; a call that needs more waits for them).
    pub fn inject(&self, port: u32, opcode: u32, mask: u64, packets: &[(u32, Buffer)]) {
        self.set_header(port, opcode, mask);
        for (lane, b) in packets {
            self.write(port, *lane, b);
        }
        self.flip(port);
    }

    /// The inline reply the server's last hand-back of `port` carried in its
    /// outbox word (every lane `Ok` with this value: the call frame's
    /// `inline_reply`), or `None` if the reply is in the packet.
    pub fn inline_reply(&self, port: u32) -> Option<u32> {
        // Relaxed: a value read with the flip it came with (after `owned`).
        let word = self.server_outbox(port).load(Ordering::Relaxed);
        (word & INLINE_BIT != 0).then_some(word >> INLINE_SHIFT)
    }

    /// The status of lane `lane`'s reply on `port` (`Ok` for an inline
    /// reply); panics if the server has not handed the port back.
    pub fn status(&self, port: u32, lane: u32) -> Status {
        assert!(self.owned(port), "the server did not hand port {port} back");
        Status::from_u32(self.reply_word(port, lane, 0) as u32)
    }

    /// Packet 0 of lane `lane`'s reply on `port` as the client's stub sees it
    /// (after [`owned`](Self::owned)): an inline reply as the packet it
    /// stands for, word 0 the status (`Ok`, 0) and word 1 the value.
    pub fn reply(&self, port: u32, lane: u32) -> Buffer {
        let mut b = Buffer::default();
        for (w, v) in b.data.iter_mut().enumerate() {
            *v = self.reply_word(port, lane, w);
        }
        b
    }

    /// Word `w` of [`reply`](Self::reply) (reading that word alone).
    pub fn reply_word(&self, port: u32, lane: u32, w: usize) -> u64 {
        match self.inline_reply(port) {
            Some(v) if w == 1 => v as u64,
            Some(_) => 0,
            None => self.read_word(port, lane, w),
        }
    }
}
