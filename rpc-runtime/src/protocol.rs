//! The shared-memory RPC protocol (`no_std`, no allocation).
//!
//! One file on purpose, as LLVM libc's `shared/rpc.h`: the invariant, the
//! state machine and both sides' steps are checked against each other when
//! read, so they are kept together (a third of the file is this
//! documentation and its examples). Whatever is not the protocol itself
//! lives elsewhere: warp operations in `lanes.rs`, atomics in `sync.rs`, the
//! call frame in `call/`.
//!
//! # Memory
//!
//! One region of memory both sides can read and write (pinned, mapped host
//! memory for a GPU) holds, for `port_count` ports and `lane_size` lanes:
//!
//! | part            | size                                  | written by |
//! |-----------------|---------------------------------------|------------|
//! | client outboxes | `port_count` × `u32` (64-byte rounded) | client     |
//! | server outboxes | `port_count` × `u32` (64-byte rounded) | server     |
//! | headers         | `port_count` × 64 B (opcode, lane mask) | client   |
//! | packets         | `port_count` × `lane_size` × 64 B, word-major (`[port][word][lane]`) | owner of the port |
//!
//! [`Layout`] computes the offsets; [`allocation_size`] the total. The port
//! count is chosen at run time by the host (1 ..= [`MAX_PORTS`]).
//!
//! Besides that shared region, each side has **local** per-port state: the
//! server a lock word per port, each on its own cache line ([`ServerLock`]),
//! the client a nibble per port ([`client_local_words`]: lock, copy of its
//! outbox, "known idle"). On a GPU the client's lives in device memory, so a
//! read-modify-write never crosses the bus.
//!
//! # The invariant
//!
//! *Each mailbox word is written by exactly one side.* The client writes the
//! client outbox (the server's inbox), the server writes the server outbox
//! (the client's inbox). With `C` bit 0 of the client outbox and `S` bit 0
//! of the server outbox of a port (the ownership bits, below):
//!
//! * the **client owns** the port's header and packet when `S == C`;
//! * the **server owns** them when `C != S` (it reads its inbox inverted).
//!
//! The owner is the only side that touches the packet. It gives ownership
//! away by flipping its own outbox after a release fence; the other side sees
//! the flip, acquires (a fence after the poll, or on NVPTX the poll itself
//! being an acquiring load) and only then reads the packet. Shared words
//! move with atomic loads and stores (relaxed, the polls on NVPTX
//! acquiring) plus explicit fences — never a read-modify-write, which
//! NVPTX's back end would silently weaken and which host memory reached
//! over PCIe need not support.
//!
//! Only bit 0 of a mailbox word is the ownership bit, and only it is compared
//! (a flip rewrites the whole word). The client's outbox has no other bit
//! set (the server ignores them if a device sets them). The server's outbox
//! may carry an **inline reply** in the same store as the flip: bit 1 set, a
//! value of at most 30 bits in bits `2..32` ([`INLINE_MAX`]). The client
//! reads it from the word it polled, so a small answer costs no read of the
//! packet after the flip: for a GPU that is one bus round trip fewer. A
//! server sends one only where the client receives with
//! [`recv_reply_words`](Port::recv_reply_words); what the value means is the
//! caller's (the call frame's reply, `call/`).
//!
//! Within one side, several warps (or server threads) compete for a port; the
//! side-local lock bit decides which one uses it. One lane takes the lock for
//! the whole group of lanes making the call.
//!
//! # Lanes
//!
//! On a GPU the client is a *group* of lanes of one warp: the lanes that
//! reach a call together with the same opcode. How a group is formed and
//! what its lanes must agree on is stated once, in the
//! [lane rules](crate::lanes#the-lane-rules); every step below names the
//! group's mask and follows them.
//!
//! # The state machine
//!
//! ```text
//!  client                                     server
//!  open(opcode)  lock, S == C, write header
//!  send(fill)    write packet, C := !C  ───►  try_open: C != S, lock
//!                                              recv(use)   read packet
//!  recv(use)     wait S == C, read    ◄───     send(fill)  write packet, S := !S
//!                (an inline reply: in      ◄───     send_inline(v)  S := !S with v
//!                 the word, no read)
//!  ...           (every call mirrored on the other side)
//!  close         unlock                        close  (if owning: S := !S), unlock
//! ```
//!
//! A side that has just received still owns the port, so a `send` right after
//! a `recv` writes in place; a `recv` after a `recv` first hands the port back.
//!
//! # Typestate
//!
//! A [`Port`] carries its state in its type: [`Fresh`] (just opened), [`Sent`]
//! and [`Received`]. `send`, `recv` and `close` consume the port, so a port
//! cannot be used after closing, a client must send first and a server must
//! receive first (anything else does not compile). A port that is dropped
//! without `close` is a **`#[must_use]` warning** (an error under
//! `-D warnings`, as this project's CI builds) — Rust cannot make it a hard
//! error without linear types. Matching every `send` on one side with a `recv`
//! on the other is guaranteed for calls made through `#[gpu_rpc]`, whose client
//! stub and server dispatch are generated from one description.
//!
//! ```compile_fail
//! # use rpc_runtime as gpu_rpc;
//! # use gpu_rpc::protocol::*;
//! fn client_must_send_first(client: &Client<'_>) {
//!     let port = client.open(0x20);
//!     let port = port.recv(|_| {}); // error: no `recv` on a fresh client port
//!     port.close();
//! }
//! ```
//!
//! # Opcodes
//!
//! Opcodes are `u32`. `0x0000_0000 ..= 0x0000_FFFF` is reserved for the runtime
//! ([`opcodes`]); `#[gpu_rpc]` assigns user opcodes from
//! `0x0001_0000 ..= 0xFFFF_FFFF` (explicit overrides below `0x8000_0000`, hashed
//! ones at or above it).

use core::marker::PhantomData;

use crate::lanes;
use crate::sync::{fence, AtomicU32, AtomicU64, Backoff, Ordering};

/// Bytes of one lane's buffer in a packet.
pub const BUFFER_BYTES: usize = 64;
/// `u64` words of one lane's buffer.
pub const BUFFER_WORDS: usize = BUFFER_BYTES / 8;
/// Most ports a layout may have.
pub const MAX_PORTS: u32 = 1 << 16;
/// Most lanes a layout may have (a 64-bit lane mask).
pub const MAX_LANES: u32 = 64;
/// The largest value an inline reply carries in the server's outbox word
/// (30 bits; see [the invariant](self#the-invariant)).
pub const INLINE_MAX: u32 = (1 << 30) - 1;
/// The ownership bit of a mailbox word.
pub(crate) const OWNER_BIT: u32 = 1;
/// Set in the server's outbox word when it carries an inline reply.
pub(crate) const INLINE_BIT: u32 = 2;
/// Where an inline reply's value starts in the server's outbox word.
pub(crate) const INLINE_SHIFT: u32 = 2;

/// Opcodes reserved for the runtime (`0x0000 ..= 0xFFFF`).
pub mod opcodes {
    /// A call that does nothing and answers `Ok`; used by tests and benchmarks.
    pub const NOOP: u32 = 0x0001;
    /// First opcode available to user services.
    pub const FIRST_USER: u32 = 0x0001_0000;
    /// First opcode of the hashed range used by `#[gpu_rpc]`.
    pub const FIRST_HASHED: u32 = 0x8000_0000;
}

const _: () = assert!(
    cfg!(target_endian = "little"),
    "gpu_rpc's wire format assumes little-endian targets"
);

/// One lane's 64-byte slot of a packet, as the `send`/`recv` closures see it.
///
/// Closures work on a private copy: the port copies it to or from shared
/// memory word by word with atomic accesses, so no reference into memory the
/// other side can write ever exists.
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::protocol::Buffer;
/// let mut b = Buffer::default();
/// b.bytes_mut()[..5].copy_from_slice(b"hello");
/// assert_eq!(b.data[0] & 0xff, b'h' as u64);
/// ```
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
#[repr(C, align(8))]
pub struct Buffer {
    /// The words; byte order is little-endian.
    pub data: [u64; BUFFER_WORDS],
}

impl Buffer {
    /// The buffer as bytes.
    #[inline(always)]
    pub fn bytes(&self) -> &[u8; BUFFER_BYTES] {
        // SAFETY: `[u64; 8]` and `[u8; 64]` have the same size, `u8` has no
        // alignment requirement and every bit pattern is a valid `u8`.
        unsafe { &*(self.data.as_ptr() as *const [u8; BUFFER_BYTES]) }
    }

    /// The buffer as mutable bytes.
    #[inline(always)]
    pub fn bytes_mut(&mut self) -> &mut [u8; BUFFER_BYTES] {
        // SAFETY: as in `bytes`; any byte pattern is a valid `[u64; 8]`.
        unsafe { &mut *(self.data.as_mut_ptr() as *mut [u8; BUFFER_BYTES]) }
    }
}

/// A port's header in shared memory: the opcode and the lane mask of the
/// client warp that opened it. Written by the client only, while it owns the
/// port.
#[repr(C, align(64))]
pub struct SharedHeader {
    opcode: AtomicU32,
    _reserved: AtomicU32,
    mask: AtomicU64,
}

/// 64 bytes of a port's packet area in shared memory: in normal builds the
/// packet is word-major (word `w` of lane `l` at `w * lane_size + l`), under
/// loom one lane's buffer.
///
/// Its words are relaxed atomics (plain `ld/st.relaxed.sys` on a GPU), so
/// the host never reads memory a misbehaving device writes concurrently as
/// non-atomic data. Under loom they are a tracked `UnsafeCell` instead, so the
/// model checker reports any access not ordered by the mailbox handoff as a
/// data race (and explores far fewer states than eight atomics would give).
#[repr(C, align(64))]
pub struct SharedBuffer {
    #[cfg(not(loom))]
    data: [AtomicU64; BUFFER_WORDS],
    #[cfg(loom)]
    data: loom::cell::UnsafeCell<[u64; BUFFER_WORDS]>,
}

impl SharedHeader {
    /// A zeroed header, for regions built from separate arrays (see
    /// [`Parts`]); a region laid out by [`Layout`] is zeroed memory instead.
    pub fn new() -> Self {
        SharedHeader {
            opcode: AtomicU32::new(0),
            _reserved: AtomicU32::new(0),
            mask: AtomicU64::new(0),
        }
    }
}

impl Default for SharedHeader {
    fn default() -> Self {
        Self::new()
    }
}

impl SharedBuffer {
    /// A zeroed lane buffer, for regions built from separate arrays.
    pub fn new() -> Self {
        SharedBuffer {
            #[cfg(not(loom))]
            data: core::array::from_fn(|_| AtomicU64::new(0)),
            #[cfg(loom)]
            data: loom::cell::UnsafeCell::new([0; BUFFER_WORDS]),
        }
    }
}

impl Default for SharedBuffer {
    fn default() -> Self {
        Self::new()
    }
}

/// The layout of the shared region for a port count and lane size.
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::protocol::{allocation_size, Layout};
/// let l = Layout::new(64, 32).unwrap();
/// assert_eq!(l.allocation_size(), allocation_size(64, 32));
/// assert_eq!(l.packet_offset(), 2 * 256 + 64 * 64);
/// assert!(Layout::new(0, 32).is_none());
/// assert!(Layout::new(64, 65).is_none());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    port_count: u32,
    lane_size: u32,
}

const fn round_up(x: usize, to: usize) -> usize {
    x.div_ceil(to) * to
}

impl Layout {
    /// A layout, or `None` when `port_count` is not in `1..=MAX_PORTS` or
    /// `lane_size` not in `1..=MAX_LANES`.
    pub const fn new(port_count: u32, lane_size: u32) -> Option<Layout> {
        if port_count == 0 || port_count > MAX_PORTS || lane_size == 0 || lane_size > MAX_LANES {
            return None;
        }
        Some(Layout { port_count, lane_size })
    }

    /// Number of ports.
    pub const fn port_count(&self) -> u32 {
        self.port_count
    }

    /// Lanes per packet.
    pub const fn lane_size(&self) -> u32 {
        self.lane_size
    }

    /// Bytes of one mailbox array (rounded up to a cache line so the two sides
    /// never write the same line).
    pub const fn mailbox_bytes(&self) -> usize {
        round_up(self.port_count as usize * 4, 64)
    }

    /// Offset of the client outboxes (the server's inboxes).
    pub const fn client_outbox_offset(&self) -> usize {
        0
    }

    /// Offset of the server outboxes (the client's inboxes).
    pub const fn server_outbox_offset(&self) -> usize {
        self.mailbox_bytes()
    }

    /// Offset of the per-port headers.
    pub const fn header_offset(&self) -> usize {
        2 * self.mailbox_bytes()
    }

    /// Offset of the packets.
    pub const fn packet_offset(&self) -> usize {
        self.header_offset() + self.port_count as usize * 64
    }

    /// Total bytes of the shared region (64-byte aligned).
    pub const fn allocation_size(&self) -> usize {
        self.packet_offset() + self.port_count as usize * self.lane_size as usize * BUFFER_BYTES
    }

    /// A mask with one bit per lane of this layout.
    pub const fn full_lane_mask(&self) -> u64 {
        if self.lane_size == 64 {
            u64::MAX
        } else {
            (1u64 << self.lane_size) - 1
        }
    }
}

/// Bytes of the shared region for `port_count` ports of `lane_size` lanes;
/// panics (at compile time in a const context) on an invalid layout.
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// assert_eq!(gpu_rpc::protocol::allocation_size(1, 1), 64 + 64 + 64 + 64);
/// ```
pub const fn allocation_size(port_count: u32, lane_size: u32) -> usize {
    match Layout::new(port_count, lane_size) {
        Some(l) => l.allocation_size(),
        None => panic!("invalid layout"),
    }
}

/// The client's device-local state is one nibble per port, eight ports to a
/// `u32`: the lock bit, the copy of the client outbox, and "known idle" (the
/// port was last closed after a receive, so the client owns it without
/// reading the inbox). Keeping them in the lock's word means the lock's
/// read-modify-write returns them too: opening a port is one device atomic.
/// Only the lock's holder changes the other two bits, and only when it
/// unlocks, in the same read-modify-write that clears the lock bit: closing
/// a port is one device atomic as well. While a port is locked its copy of
/// the outbox is the one it had when opened; no other group acts on it
/// then (a diagnostic [`PortSnapshot`] of a held port says so).
pub(crate) const LOCK_BIT: u32 = 1;
/// See [`LOCK_BIT`].
pub(crate) const SHADOW_OUTBOX: u32 = 2;
/// See [`LOCK_BIT`].
pub(crate) const KNOWN_IDLE: u32 = 4;
/// Ports per client-local word.
pub(crate) const CLIENT_PORTS_PER_WORD: u32 = 8;

/// `u32` words of zeroed device-local state the client side needs for
/// `port_count` ports (lock, outbox copy and idle flag per port).
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// assert_eq!(gpu_rpc::protocol::client_local_words(33), 5);
/// ```
pub const fn client_local_words(port_count: u32) -> usize {
    port_count.div_ceil(CLIENT_PORTS_PER_WORD) as usize
}

/// Whether no port is locked in a copy of the client-local words (the other
/// per-port state may be set): what a backend checks after a run.
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::protocol::client_locks_released;
/// assert!(client_locks_released(&[0x6666_6666]));
/// assert!(!client_locks_released(&[0x0000_0010]));
/// ```
pub fn client_locks_released(words: &[u32]) -> bool {
    words.iter().all(|&w| w & 0x1111_1111 == 0)
}

/// The client-local state of port `index` in a copy of the client-local
/// words: `(locked, outbox copy, known idle)`; `None` when `words` is too
/// short.
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::protocol::client_port_state;
/// assert_eq!(client_port_state(&[0x0000_0030], 1), Some((true, true, false)));
/// assert_eq!(client_port_state(&[0], 8), None);
/// ```
pub fn client_port_state(words: &[u32], index: u32) -> Option<(bool, bool, bool)> {
    let w = *words.get((index / CLIENT_PORTS_PER_WORD) as usize)?;
    let nib = w >> (4 * (index % CLIENT_PORTS_PER_WORD));
    Some((nib & LOCK_BIT != 0, nib & SHADOW_OUTBOX != 0, nib & KNOWN_IDLE != 0))
}

/// One port as seen from the host at one instant ([`Server::snapshot`]): what
/// a backend prints when a run stops making progress, to tell a call the
/// server owes from one the client never published.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortSnapshot {
    /// The port's index.
    pub index: u32,
    /// The client's ownership bit (0 or 1).
    pub client_outbox: u32,
    /// The server's ownership bit (0 or 1; an inline reply's bits are not shown).
    pub server_outbox: u32,
    /// The opcode in the header (the last call's).
    pub opcode: u32,
    /// The lane mask in the header (the last call's).
    pub mask: u64,
    /// Whether a server thread holds the port.
    pub server_locked: bool,
    /// The client-local state `(locked, outbox copy, known idle)`, where the
    /// backend could read it ([`client_port_state`]).
    pub client: Option<(bool, bool, bool)>,
}

impl PortSnapshot {
    /// Whether the port is at rest: the client owns it, nobody holds it and
    /// the client's copy of its outbox (if known) is right.
    pub fn is_idle(&self) -> bool {
        self.client_outbox == self.server_outbox
            && !self.server_locked
            && self
                .client
                .is_none_or(|(locked, shadow, _)| !locked && shadow as u32 == self.client_outbox)
    }
}

impl core::fmt::Display for PortSnapshot {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let owner = if self.client_outbox == self.server_outbox {
            "client owns"
        } else {
            "server owns"
        };
        write!(
            f,
            "port {}: {owner} (client out {}, server out {}), opcode {:#x}, lanes {:#x}, server lock {}",
            self.index,
            self.client_outbox,
            self.server_outbox,
            self.opcode,
            self.mask,
            if self.server_locked { "held" } else { "free" }
        )?;
        match self.client {
            Some((locked, shadow, idle)) => write!(
                f,
                ", client lock {}, outbox copy {}{}, known idle {idle}",
                if locked { "held" } else { "free" },
                shadow as u32,
                // The holder updates the copy when it unlocks.
                if locked { " (as opened)" } else { "" }
            ),
            None => Ok(()),
        }
    }
}

/// One port's server-side lock word, alone on its cache line. Server
/// threads lock and unlock ports on every call; with the bits of 32 ports
/// packed into one word (as the client packs its own, where one device
/// atomic must return a port's whole state), the read-modify-writes of every
/// server thread met on the same line, which moved from core to core twice
/// per call.
#[repr(C, align(64))]
pub struct ServerLock {
    word: AtomicU32,
}

// Each lock fills its line exactly (the atomic is 4 bytes outside loom).
#[cfg(not(loom))]
const _: () = assert!(core::mem::size_of::<ServerLock>() == 64 && core::mem::align_of::<ServerLock>() == 64);

/// The server side's lock array: one [`ServerLock`] (64 bytes) per port,
/// zeroed (4 MiB for [`MAX_PORTS`] ports, 32 KiB for 512).
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::protocol::ServerLocks;
/// let locks = ServerLocks::new(33);
/// assert_eq!(locks.len(), 33);
/// assert!(locks.as_ptr() as usize % 64 == 0);
/// ```
#[cfg(feature = "std")]
pub struct ServerLocks(Box<[ServerLock]>);

#[cfg(feature = "std")]
impl ServerLocks {
    /// Unlocked locks for `port_count` ports.
    pub fn new(port_count: u32) -> ServerLocks {
        ServerLocks(
            (0..port_count)
                .map(|_| ServerLock {
                    word: AtomicU32::new(0),
                })
                .collect(),
        )
    }

    /// How many ports the array has locks for.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the array has no locks (a region has at least one port).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The first lock, for [`Server::from_parts`].
    pub fn as_ptr(&self) -> *const ServerLock {
        self.0.as_ptr()
    }
}

#[cfg(feature = "std")]
impl core::fmt::Debug for ServerLocks {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ServerLocks").field("ports", &self.len()).finish()
    }
}

mod private {
    pub trait Sealed {}
}

/// Which side of the protocol a process is.
pub trait Side: private::Sealed {
    /// True for the server, which reads its inbox inverted.
    const INVERT: bool;
}

/// The client (device) side.
#[derive(Debug)]
pub enum ClientSide {}
/// The server (host) side.
#[derive(Debug)]
pub enum ServerSide {}
impl private::Sealed for ClientSide {}
impl private::Sealed for ServerSide {}
impl Side for ClientSide {
    const INVERT: bool = false;
}
impl Side for ServerSide {
    const INVERT: bool = true;
}

/// A port state.
pub trait State: private::Sealed {
    /// The side holding the port owns its buffer in this state.
    const OWNS: bool;
    /// The last operation was a receive (the buffer is still held for reading).
    const RECEIVED: bool;
}

/// Just opened: the opener owns the buffer. A client must `send` next, a server
/// must `recv` next.
#[derive(Debug)]
pub enum Fresh {}
/// After a send: the other side owns the buffer.
#[derive(Debug)]
pub enum Sent {}
/// After a receive: this side still owns the buffer.
#[derive(Debug)]
pub enum Received {}
impl private::Sealed for Fresh {}
impl private::Sealed for Sent {}
impl private::Sealed for Received {}
impl State for Fresh {
    const OWNS: bool = true;
    const RECEIVED: bool = false;
}
impl State for Sent {
    const OWNS: bool = false;
    const RECEIVED: bool = false;
}
impl State for Received {
    const OWNS: bool = true;
    const RECEIVED: bool = true;
}

/// The server gave up waiting on a port because its abort flag was raised
/// (the kernel finished or faulted while a call was in flight).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Abandoned {
    /// The port that was being served.
    pub port: u32,
    /// Its opcode.
    pub opcode: u32,
}

impl core::fmt::Display for Abandoned {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "call abandoned on port {} (opcode {:#x}): the client stopped before the call finished",
            self.port, self.opcode
        )
    }
}

/// What one side needs to reach the shared region and its local locks.
struct Process<'a, S: Side> {
    layout: Layout,
    inbox: *const AtomicU32,
    outbox: *const AtomicU32,
    header: *const SharedHeader,
    packet: *const SharedBuffer,
    locks: *const AtomicU32,
    abort: Option<&'a core::sync::atomic::AtomicBool>,
    _side: PhantomData<(S, &'a ())>,
}

/// Raw pointers to the parts of a shared region, for building a [`Client`] or
/// a [`Server`] over memory laid out some other way (the loom model tests).
#[derive(Clone, Copy, Debug)]
pub struct Parts {
    /// `port_count` client outbox words.
    pub client_outbox: *const AtomicU32,
    /// `port_count` server outbox words.
    pub server_outbox: *const AtomicU32,
    /// `port_count` headers.
    pub headers: *const SharedHeader,
    /// `port_count * lane_size` lane buffers.
    pub packets: *const SharedBuffer,
}

impl Parts {
    /// The parts of a region laid out by `layout` at `base`.
    ///
    /// # Safety
    /// `base` must be 64-byte aligned and point to `layout.allocation_size()`
    /// bytes that stay valid (and are only accessed through this protocol)
    /// for as long as the parts are used.
    pub unsafe fn from_region(base: *mut u8, layout: Layout) -> Parts {
        // SAFETY: the four offsets lie inside the region by construction of
        // `Layout` and are 64-byte aligned.
        unsafe {
            Parts {
                client_outbox: base.add(layout.client_outbox_offset()) as *const AtomicU32,
                server_outbox: base.add(layout.server_outbox_offset()) as *const AtomicU32,
                headers: base.add(layout.header_offset()) as *const SharedHeader,
                packets: base.add(layout.packet_offset()) as *const SharedBuffer,
            }
        }
    }
}

// SAFETY: a `Process` only holds pointers to atomics (shared memory and
// locks); every access through them is atomic, so sharing it between threads
// is sound.
unsafe impl<S: Side> Send for Process<'_, S> {}
// SAFETY: as above.
unsafe impl<S: Side> Sync for Process<'_, S> {}

impl<'a, S: Side> Process<'a, S> {
    #[inline(always)]
    fn inbox(&self, index: u32) -> &AtomicU32 {
        // SAFETY: `index < port_count` (checked by callers); the array has
        // `port_count` words valid for `'a`.
        unsafe { &*self.inbox.add(index as usize) }
    }

    #[inline(always)]
    fn outbox(&self, index: u32) -> &AtomicU32 {
        // SAFETY: as for `inbox`.
        unsafe { &*self.outbox.add(index as usize) }
    }

    #[inline(always)]
    fn header(&self, index: u32) -> &SharedHeader {
        // SAFETY: as for `inbox`.
        unsafe { &*self.header.add(index as usize) }
    }

    #[cfg(loom)]
    #[inline(always)]
    fn lane_buffer(&self, index: u32, lane: u32) -> &SharedBuffer {
        debug_assert!(lane < self.layout.lane_size);
        // SAFETY: `index < port_count` and `lane < lane_size`; the packet
        // array holds `port_count * lane_size` buffers.
        unsafe {
            &*self
                .packet
                .add(index as usize * self.layout.lane_size as usize + lane as usize)
        }
    }

    /// The side-local word holding port `index`'s lock (and, on the client,
    /// its other state), and the shift of the port's bits in it.
    #[inline(always)]
    fn local_slot(&self, index: u32) -> (&AtomicU32, u32) {
        if S::INVERT {
            // SAFETY: the server's `locks` points to `port_count`
            // `ServerLock`s (`Server::from_parts`); `index < port_count`.
            return (
                unsafe { &(*self.locks.cast::<ServerLock>().add(index as usize)).word },
                0,
            );
        }
        let (word, shift) = (index / CLIENT_PORTS_PER_WORD, 4 * (index % CLIENT_PORTS_PER_WORD));
        // SAFETY: the client's array has `client_local_words(port_count)`
        // words (one nibble per port); `word` is below that for
        // `index < port_count`.
        (unsafe { &*self.locks.add(word as usize) }, shift)
    }

    /// The other side's mailbox word (with an inline reply, if any), the
    /// same value on every lane of `mask`.
    #[inline(always)]
    fn load_inbox(&self, mask: u64, index: u32) -> u32 {
        // Relaxed: the value only decides whether to wait (and an inline
        // reply travels in this one single-copy-atomic load); the acquire
        // fence in `try_open` orders the packet reads
        // after it.
        lanes::broadcast(mask, self.inbox(index).load(Ordering::Relaxed))
    }

    /// [`load_inbox`](Self::load_inbox) for a wait: on NVPTX an acquiring
    /// load (`ld.acquire.sys`, in SASS the load and an L1 invalidation),
    /// so the poll that sees the flip needs no fence after it
    /// ([`acquire_after_poll`](Self::acquire_after_poll)); `fence.acq_rel.sys`
    /// would add a `MEMBAR.SYS`.
    #[inline(always)]
    fn poll_inbox(&self, mask: u64, index: u32) -> u32 {
        // Acquire on NVPTX: see above. Relaxed elsewhere: the fence in
        // `acquire_after_poll` orders.
        #[cfg(target_arch = "nvptx64")]
        let order = Ordering::Acquire;
        #[cfg(not(target_arch = "nvptx64"))]
        let order = Ordering::Relaxed;
        lanes::broadcast(mask, self.inbox(index).load(order))
    }

    /// Acquire (system scope) after [`poll_inbox`](Self::poll_inbox) saw
    /// this side own the port: the other side's packet writes, published by
    /// its release fence before its outbox flip, are visible to the reads
    /// that follow. A fence, except on NVPTX, where the poll itself acquired.
    /// Either way the group's first lane's view is what counts (its load was
    /// broadcast); the caller's warp barrier after this extends it to every
    /// lane of the group before any touches its slot (lane rule 3).
    #[inline(always)]
    fn acquire_after_poll() {
        #[cfg(not(target_arch = "nvptx64"))]
        fence(Ordering::Acquire);
    }

    /// This side's ownership bit (0 or 1; an inline reply's bits dropped).
    #[inline(always)]
    fn load_outbox(&self, mask: u64, index: u32) -> u32 {
        // Relaxed: this side is the only writer of its outbox and the port lock
        // (acquired) orders this read after the last holder's
        // write.
        lanes::broadcast(mask, self.outbox(index).load(Ordering::Relaxed)) & OWNER_BIT
    }

    /// `true` when this side does not own the port's buffer (`inbox` a
    /// mailbox word, `outbox` an ownership bit).
    #[inline(always)]
    fn buffer_unavailable(inbox: u32, outbox: u32) -> bool {
        let want = if S::INVERT { outbox ^ 1 } else { outbox };
        inbox & OWNER_BIT != want
    }

    /// Hand the buffer to the other side (lane rule 3: the whole group has
    /// written its slots before one lane flips), with `inline` (an inline
    /// reply's bits, or 0) in the same store. Returns the new ownership bit.
    #[inline(always)]
    fn invert_outbox(&self, mask: u64, index: u32, out: u32, inline: u32) -> u32 {
        let flipped = out ^ 1;
        // Every lane of the group has written its slot: `bar.warp.sync` waits
        // for them and orders their writes before what follows on any of them.
        lanes::sync(mask);
        // Release (system scope on GPUs): the group's packet and header writes,
        // ordered before this point by the barrier, become visible before the
        // flipped outbox is (the fence is cumulative).
        fence(Ordering::Release);
        if lanes::is_first_lane(mask) {
            // Relaxed store: ordered by the fence above; a plain store keeps the
            // single-writer rule (no read-modify-write on shared memory). One
            // lane stores, so no lane can publish before the group is done.
            // An inline reply goes in the same store: the client sees the
            // value exactly when it sees the flip.
            self.outbox(index).store(flipped | inline, Ordering::Relaxed);
        }
        // The client's device-local copy of its outbox catches up when the
        // port is unlocked (`Port::close_impl`).
        flipped
    }

    /// Wait until this side owns the buffer; returns the inbox word that
    /// showed it (the same on every lane of `mask`).
    #[inline(always)]
    fn wait_for_ownership(&self, mask: u64, index: u32, out: u32) -> Result<u32, ()> {
        let mut backoff = Backoff::new();
        let mut polls: u32 = 0;
        let mut inbox;
        while {
            inbox = self.poll_inbox(mask, index);
            Self::buffer_unavailable(inbox, out)
        } {
            if let Some(abort) = self.abort {
                polls = polls.wrapping_add(1);
                // Relaxed: the flag carries no data; it only ends the wait.
                if polls.is_multiple_of(64) && abort.load(core::sync::atomic::Ordering::Relaxed) {
                    return Err(());
                }
            }
            backoff.snooze();
        }
        Self::acquire_after_poll();
        lanes::sync(mask);
        Ok(inbox)
    }

    /// Try to take the side-local lock of `index` for the warp `mask`; on
    /// success returns the port's side-local state bits (on the client:
    /// `SHADOW_OUTBOX`, `KNOWN_IDLE`) as they were when the lock was taken.
    /// `test`: look at the lock before trying to take it (for a sweep; a
    /// group's first try goes straight to the read-modify-write).
    #[inline(always)]
    fn try_lock(&self, mask: u64, index: u32, test: bool) -> Option<u32> {
        let (word, shift) = self.local_slot(index);
        let mut before = 0;
        if lanes::is_first_lane(mask) {
            // Test before test-and-set while sweeping: a port seen locked
            // costs a load, not a read-modify-write. Thousands of groups
            // sweeping a few ports otherwise queue their RMWs on the same few
            // lock words, and the holders' unlocks wait behind them (what
            // made 1024-thread blocks on every SM crawl). A group's first
            // try, at the port it was pointed to, skips the test: that port
            // is usually free, and the load would add a device-memory round
            // trip to every call. Relaxed: a stale "locked" only skips the
            // port this sweep; a stale "free" is settled by the RMW.
            if test {
                before = word.load(Ordering::Relaxed);
            }
            if before & (LOCK_BIT << shift) == 0 {
                // The lock is side-local, so this RMW never touches shared
                // memory.
                before = lock_rmw(word, LOCK_BIT << shift);
            }
        }
        let state = lanes::broadcast(mask, before) >> shift;
        if state & LOCK_BIT != 0 {
            return None;
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            // Acquire: synchronizes with the release in `unlock`, so the
            // previous holder's mailbox and packet accesses (and its writes
            // of the state bits read above, which only lock holders make)
            // happen before ours. (On NVPTX the RMW itself acquired, and the
            // warp barrier every path takes before the group's other lanes
            // touch the port's header or packet extends that to them; their
            // only access before it is the open's poll of the inbox, whose
            // value they take from the first lane.)
            fence(Ordering::Acquire);
        }
        Some(state)
    }

    /// Release the side-local lock of `index`, on the client toggling the
    /// state bits `change` (`SHADOW_OUTBOX`, `KNOWN_IDLE`) in the same
    /// read-modify-write (the server has none: `change` is 0 there).
    #[inline(always)]
    fn unlock(&self, mask: u64, index: u32, change: u32) {
        lanes::sync(mask);
        if lanes::is_first_lane(mask) {
            let (word, shift) = self.local_slot(index);
            if S::INVERT {
                // The server's word holds this port's lock bit alone, and
                // only the holder clears it (a contender's `fetch_or` of a
                // set bit changes nothing), so a plain store unlocks: on the
                // host it costs a store, where a locked RMW waited for every
                // store before it (the reply's) to drain. Release: every
                // access this thread made to the port happens before the
                // next holder's acquire in `try_lock`.
                word.store(0, Ordering::Release);
            } else {
                // An RMW so that the other ports' nibbles in the word
                // survive. An XOR: the holder knows the nibble (it read it
                // when locking and is its only writer since), so one RMW
                // clears the lock bit and sets the state bits; a contender's
                // `fetch_or` of the set lock bit changed nothing in between.
                // Releasing: every access the group made to the port (the
                // barrier above orders its lanes' before this lane's)
                // happens before the next holder's acquire in `try_lock`.
                unlock_rmw(word, (LOCK_BIT | change) << shift);
            }
        }
    }

    /// Word `w` of lane `lane`'s buffer of port `index` (this side owns it).
    #[cfg(loom)]
    #[inline(always)]
    fn read_word(&self, index: u32, lane: u32, w: usize) -> u64 {
        // SAFETY: this side owns the buffer (loom checks that claim).
        self.lane_buffer(index, lane).data.with(|p| unsafe { (*p)[w] })
    }

    /// Store `v` as word `w` of lane `lane`'s buffer of port `index` (this
    /// side owns it).
    #[cfg(loom)]
    #[inline(always)]
    fn write_word(&self, index: u32, lane: u32, w: usize, v: u64) {
        // SAFETY: this side owns the buffer (loom checks that claim).
        self.lane_buffer(index, lane).data.with_mut(|p| unsafe { (*p)[w] = v });
    }

    #[inline(always)]
    fn write_buffer(&self, index: u32, lane: u32, b: &Buffer, words: usize) {
        #[cfg(not(loom))]
        for (w, v) in b.data.iter().enumerate().take(words) {
            // Relaxed: this side owns the buffer; the release fence in
            // `invert_outbox` publishes these stores.
            self.word(index, lane, w).store(*v, Ordering::Relaxed);
        }
        // SAFETY: this side owns the buffer (loom checks that claim).
        #[cfg(loom)]
        self.lane_buffer(index, lane)
            .data
            .with_mut(|p| unsafe { (&mut *p)[..words].copy_from_slice(&b.data[..words]) });
    }

    /// Word `w` of every lane's buffer of port `index` (this side owns
    /// the port): where each lane's word lies is found once per row.
    #[inline(always)]
    fn word_row(&self, index: u32, w: usize) -> WordRow<'_, 'a, S> {
        debug_assert!(w < BUFFER_WORDS);
        #[cfg(not(loom))]
        return WordRow {
            first: self.word(index, 0, w),
            lanes: self.layout.lane_size,
            _p: PhantomData,
        };
        #[cfg(loom)]
        return WordRow { p: self, index, w };
    }

    /// Word `word` of lane `lane`'s buffer of port `index`. Packets are laid
    /// out word-major (`[word][lane]`), so when a warp stores or loads word
    /// `w` of its lanes' buffers the accesses are contiguous and coalesce
    /// (32 lanes × 8 bytes = two 128-byte transactions instead of 32).
    #[cfg(not(loom))]
    #[inline(always)]
    fn word(&self, index: u32, lane: u32, word: usize) -> &AtomicU64 {
        debug_assert!(lane < self.layout.lane_size && word < BUFFER_WORDS);
        let lanes = self.layout.lane_size as usize;
        // SAFETY: the packet area of port `index` is `lane_size` buffers of
        // `BUFFER_WORDS` words (`lane_size * BUFFER_WORDS` atomics starting at
        // buffer `index * lane_size`); `word * lanes + lane` is below that.
        unsafe {
            let base = self.packet.add(index as usize * lanes) as *const AtomicU64;
            &*base.add(word * lanes + lane as usize)
        }
    }

    #[inline(always)]
    fn read_buffer(&self, index: u32, lane: u32, words: usize) -> Buffer {
        let mut b = Buffer::default();
        #[cfg(not(loom))]
        for (w, v) in b.data.iter_mut().enumerate().take(words) {
            // Relaxed: the acquire after the ownership check
            // (`acquire_after_poll`) orders these loads after the other
            // side's stores.
            *v = self.word(index, lane, w).load(Ordering::Relaxed);
        }
        // SAFETY: this side owns the buffer (loom checks that claim).
        #[cfg(loom)]
        self.lane_buffer(index, lane)
            .data
            .with(|p| b.data[..words].copy_from_slice(unsafe { &(&*p)[..words] }));
        b
    }
}

/// The client lock's taking RMW: OR `bits` into `word` and return what it
/// held, ordered as an acquire where a GPU can (device scope, the lock
/// words being device-local).
#[inline(always)]
fn lock_rmw(word: &AtomicU32, bits: u32) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let before: u32;
        // SAFETY: an atomic OR on a live, aligned `u32` (the `AtomicU32`
        // borrowed here). `atom.acquire`: LLVM drops the ordering of an
        // ordered RMW on NVPTX (README, "Shared words"), so it is spelled
        // out; one acquiring RMW costs less than a relaxed one plus a fence.
        unsafe {
            core::arch::asm!(
                "atom.acquire.gpu.or.b32 {b}, [{p}], {v};",
                b = out(reg32) before,
                p = in(reg64) word.as_ptr(),
                v = in(reg32) bits,
                options(nostack, preserves_flags)
            )
        };
        before
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        // Relaxed: only its atomicity matters here (one winner); `try_lock`
        // fences after a win.
        word.fetch_or(bits, Ordering::Relaxed)
    }
}

/// The client lock's releasing RMW: XOR `bits` into `word`, ordered as a
/// release (device scope on a GPU).
#[inline(always)]
fn unlock_rmw(word: &AtomicU32, bits: u32) {
    #[cfg(target_arch = "nvptx64")]
    {
        // SAFETY: an atomic XOR on a live, aligned `u32`; `red.release`
        // spelled out as in `lock_rmw`.
        unsafe {
            core::arch::asm!(
                "red.release.gpu.xor.b32 [{p}], {v};",
                p = in(reg64) word.as_ptr(),
                v = in(reg32) bits,
                options(nostack, preserves_flags)
            )
        };
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        // Release: a fence then a relaxed RMW, one release sequence for the
        // next holder's acquire fence.
        fence(Ordering::Release);
        word.fetch_xor(bits, Ordering::Relaxed);
    }
}

/// The client (device) side of the protocol: warps open ports and make calls.
///
/// On a GPU it is built from a [`ClientDesc`] passed by the host; on the host
/// the CPU backend builds one per region.
pub struct Client<'a> {
    p: Process<'a, ClientSide>,
}

/// The server (host) side of the protocol: finds ports with pending calls.
pub struct Server<'a> {
    p: Process<'a, ServerSide>,
    memory: Option<&'a dyn crate::device_memory::DeviceMemory>,
}

/// What the host passes to a kernel so the device can build its [`Client`]:
/// addresses as the device sees them. `#[repr(C)]`, identical on every target.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientDesc {
    /// Device address of the shared region (64-byte aligned).
    pub shared: u64,
    /// Device address of [`client_local_words`]`(port_count)` zeroed `u32`
    /// words in device-local memory (lock bits, outbox copies, idle flags).
    pub locks: u64,
    /// Ports in the region.
    pub port_count: u32,
    /// Lanes per packet; must equal the device's warp size.
    pub lane_size: u32,
}

const _: () = assert!(core::mem::size_of::<ClientDesc>() == 24 && core::mem::align_of::<ClientDesc>() == 8);

impl<'a> Client<'a> {
    /// A client over `parts`.
    ///
    /// # Safety
    /// The parts must describe a region laid out by `layout`, valid for `'a`;
    /// `locks` must point to [`client_local_words`]`(port_count)` zeroed words
    /// used by this client side only (all clients of one region share them);
    /// `layout.lane_size()` must be this target's [`lanes::LANE_SIZE`] or
    /// larger (each lane of a warp writes its own buffer).
    pub unsafe fn from_parts(layout: Layout, parts: Parts, locks: *const AtomicU32) -> Self {
        Client {
            p: Process {
                layout,
                inbox: parts.server_outbox,
                outbox: parts.client_outbox,
                header: parts.headers,
                packet: parts.packets,
                locks,
                abort: None,
                _side: PhantomData,
            },
        }
    }

    /// A client from the descriptor the host passed to a kernel.
    ///
    /// # Safety
    /// `desc` must describe a live region and lock array (see [`ClientDesc`]);
    /// `desc.lane_size` must be this target's [`lanes::LANE_SIZE`] or larger.
    pub unsafe fn from_desc(desc: &ClientDesc) -> Client<'static> {
        // SAFETY: the caller's contract.
        match unsafe { Self::try_from_desc(desc) } {
            Some(c) => c,
            None => panic!("gpu_rpc: invalid client descriptor"),
        }
    }

    /// [`from_desc`](Self::from_desc), or `None` (instead of a panic) when
    /// the port count or lane size is out of range.
    ///
    /// # Safety
    /// As [`from_desc`](Self::from_desc).
    pub unsafe fn try_from_desc(desc: &ClientDesc) -> Option<Client<'static>> {
        let layout = Layout::new(desc.port_count, desc.lane_size)?;
        // SAFETY: the caller guarantees the region and locks are live.
        unsafe {
            let parts = Parts::from_region(desc.shared as usize as *mut u8, layout);
            Some(Client::from_parts(
                layout,
                parts,
                desc.locks as usize as *const AtomicU32,
            ))
        }
    }

    /// The layout this client was built with.
    pub fn layout(&self) -> Layout {
        self.p.layout
    }

    /// This client's identity among the clients a kernel may hold: the
    /// address of its region's mailboxes. Lanes group only with lanes of the
    /// same client ([`open_keyed`](Self::open_keyed), [`call`](Self::call)).
    ///
    /// ```
    /// # use rpc_runtime as gpu_rpc;
    /// use gpu_rpc::protocol::Layout;
    /// use gpu_rpc::cpu::CpuRegion;
    /// let (a, b) = (CpuRegion::new(Layout::new(4, 1).unwrap()), CpuRegion::new(Layout::new(4, 1).unwrap()));
    /// assert_ne!(a.client().id(), b.client().id());
    /// assert_eq!(a.client().id(), a.client().id());
    /// ```
    #[inline(always)]
    pub fn id(&self) -> u64 {
        self.p.outbox(0) as *const AtomicU32 as usize as u64
    }

    /// Open a port for `opcode`, starting the scan at this warp's hint so warps
    /// spread over ports. Spins until a port is free.
    ///
    /// The lanes that take part are this lane's *group*: the lanes executing
    /// this call together that open the same `opcode` ([`lanes::group_mask`]);
    /// they must then make the same sequence of port calls (see the
    /// [lane rules](crate::lanes#the-lane-rules)). On AMDGCN, whose lanes run
    /// in lock step, lanes active together must open the same opcode: wrap the
    /// call in [`lanes::split_by`] when they may not (generated stubs do).
    #[inline]
    pub fn open(&self, opcode: u32) -> Port<'_, 'a, ClientSide, Fresh> {
        self.open_from(opcode, lanes::warp_hint())
    }

    /// [`open`](Self::open), starting the scan at port `start % port_count`
    /// (the group's first lane's `start`).
    #[inline]
    pub fn open_from(&self, opcode: u32, start: u32) -> Port<'_, 'a, ClientSide, Fresh> {
        self.open_keyed(opcode, opcode as u64, start)
    }

    /// [`open_from`](Self::open_from), grouping lanes by `key` instead of the
    /// opcode (a call's stub keys by opcode and signature).
    #[inline]
    pub fn open_keyed(&self, opcode: u32, key: u64, start: u32) -> Port<'_, 'a, ClientSide, Fresh> {
        let n = self.p.layout.port_count;
        // Lane rule 1: the group is the active lanes with this key on this
        // client (two clients are two sets of ports), fixed for the whole
        // call. Two matches, not one of a hash of both: a hash can collide.
        // Rule 2: they scan from one agreed index.
        let mask = lanes::group_mask(key) & lanes::group_mask(self.id());
        let first = lanes::broadcast(mask, start) % n;
        let mut index = first;
        let mut backoff = Backoff::new();
        let mut sweeps = 0u32;
        loop {
            // Every branch below depends only on values broadcast from the
            // group's first lane, so the group's lanes stay on one index.
            if let Some(state) = self.p.try_lock(mask, index, index != first || sweeps != 0) {
                // The outbox from its device-local copy; the inbox only when
                // the last holder did not leave the port known idle (a
                // synchronous call ends with the client owning the port).
                let outbox = (state & SHADOW_OUTBOX != 0) as u32;
                let idle = state & KNOWN_IDLE != 0;
                let inbox = if idle { outbox } else { self.p.poll_inbox(mask, index) };
                if !Process::<ClientSide>::buffer_unavailable(inbox, outbox) {
                    if !idle {
                        // Acquire (system scope): the server's last reads of
                        // this port's header and packet (ordered before its
                        // outbox flip by its release fence) happen before the
                        // writes below. Without it the next call's writes could
                        // race with the server's reads of a fire-and-forget
                        // call (found by loom). A known-idle port was last
                        // closed after a receive whose wait already acquired.
                        // The barrier below extends it to the group's lanes.
                        Process::<ClientSide>::acquire_after_poll();
                    }
                    if lanes::is_first_lane(mask) {
                        let h = self.p.header(index);
                        // Relaxed: published with the packet by the release
                        // fence before the first outbox flip.
                        h.opcode.store(opcode, Ordering::Relaxed);
                        h.mask.store(mask, Ordering::Relaxed);
                    }
                    lanes::sync(mask);
                    let opened = state & (SHADOW_OUTBOX | KNOWN_IDLE);
                    return Port::new(&self.p, index, outbox, mask, mask, opcode, opened);
                }
                self.p.unlock(mask, index, 0);
            }
            index += 1;
            if index == n {
                index = 0;
            }
            if cfg!(loom) {
                backoff.snooze();
            } else if index == first {
                // A whole sweep found every port busy: pause longer after
                // each one (1, 2, 4 .. 16 snoozes), so that groups waiting for
                // a port leave the issue slots and the lock words to the
                // groups that hold ports — often lanes of the same warp.
                for _ in 0..1u32 << sweeps {
                    backoff.snooze();
                }
                sweeps = (sweeps + 1).min(4);
            }
        }
    }
}

/// Packet rows a server prefetches when it finds a call
/// ([`Server::try_open`]): the frame words and the first argument words,
/// which decoding reads first.
const PREFETCH_WORDS: usize = 2;
const _: () = assert!(PREFETCH_WORDS <= BUFFER_WORDS);

impl<'a> Server<'a> {
    /// A server over `parts`.
    ///
    /// # Safety
    /// As [`Client::from_parts`], with `locks` pointing to `port_count`
    /// zeroed [`ServerLock`]s (a [`ServerLocks`]) used by this region's
    /// server threads only.
    pub unsafe fn from_parts(layout: Layout, parts: Parts, locks: *const ServerLock) -> Self {
        Server {
            p: Process {
                layout,
                inbox: parts.client_outbox,
                outbox: parts.server_outbox,
                header: parts.headers,
                packet: parts.packets,
                locks: locks.cast(),
                abort: None,
                _side: PhantomData,
            },
            memory: None,
        }
    }

    /// Let this server copy large slices straight from and to the device's
    /// memory (see [the direct path](crate::call#the-direct-path)); without
    /// it, lanes that ask for a direct copy are refused.
    pub fn with_memory(mut self, memory: &'a dyn crate::device_memory::DeviceMemory) -> Self {
        self.memory = Some(memory);
        self
    }

    /// The device memory this server copies direct slices with, if any.
    pub fn memory(&self) -> Option<&'a dyn crate::device_memory::DeviceMemory> {
        self.memory
    }

    /// Make every wait of this server's ports give up (with [`Abandoned`]) once
    /// `flag` is set, e.g. when the kernel has finished.
    pub fn with_abort(mut self, flag: &'a core::sync::atomic::AtomicBool) -> Self {
        self.p.abort = Some(flag);
        self
    }

    /// The layout this server was built with.
    pub fn layout(&self) -> Layout {
        self.p.layout
    }

    /// Whether port `index` has a call waiting for the server (one pair of
    /// relaxed loads; no lock).
    ///
    /// # Panics
    /// If `index` is not a port of the layout.
    #[inline]
    pub fn pending(&self, index: u32) -> bool {
        self.check_port(index);
        self.pending_unchecked(index)
    }

    /// [`pending`](Self::pending) for an `index` the caller has checked
    /// against the layout (the scan's hot path).
    #[inline(always)]
    fn pending_unchecked(&self, index: u32) -> bool {
        debug_assert!(index < self.p.layout.port_count);
        !Process::<ServerSide>::buffer_unavailable(self.p.load_inbox(1, index), self.p.load_outbox(1, index))
    }

    /// Panic, naming the port, if `index` is not a port of the layout: the
    /// public accessors that take a port number reach the shared arrays
    /// without further checks.
    #[inline(always)]
    fn check_port(&self, index: u32) {
        let ports = self.p.layout.port_count;
        assert!(index < ports, "port {index} is outside the layout's {ports} ports");
    }

    /// Ask the CPU to start loading port `index`'s header and, of each of
    /// the first [`PREFETCH_WORDS`] rows of its packet (word `w` of every
    /// lane), the line that holds the low lanes': the lines a call of one lane is read
    /// from, which would otherwise each be a miss of its own, one after
    /// another (the rest of a wide call's rows follow in order, which the
    /// CPU's own prefetcher streams). A hint only: it reads nothing as the
    /// program sees it, changes nothing and is nothing on targets without
    /// a prefetch instruction.
    #[inline(always)]
    fn prefetch(&self, index: u32) {
        debug_assert!(index < self.p.layout.port_count);
        #[cfg(all(target_arch = "x86_64", not(loom)))]
        {
            use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let header = self.p.header(index) as *const SharedHeader as *const i8;
            // SAFETY: `_mm_prefetch` needs SSE, which every x86_64 CPU
            // has; a prefetch neither reads nor writes memory as the
            // program sees it and never faults. The addresses are the
            // port's header and the first line of each of its packet's
            // first `PREFETCH_WORDS` rows (fewer than its `BUFFER_WORDS`).
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(header);
                for w in 0..PREFETCH_WORDS {
                    _mm_prefetch::<_MM_HINT_T0>(self.p.word(index, 0, w) as *const AtomicU64 as *const i8);
                }
            }
        }
        #[cfg(not(all(target_arch = "x86_64", not(loom))))]
        let _ = index;
    }

    /// Find a port in `range` with a call waiting for the server and open it.
    /// Server threads may scan overlapping ranges: a host-side lock
    /// ([`ServerLock`]) keeps each port with one thread.
    pub fn try_open(&self, range: core::ops::Range<u32>) -> Option<Port<'_, 'a, ServerSide, Fresh>> {
        let end = range.end.min(self.p.layout.port_count);
        for index in range.start..end {
            if !self.pending_unchecked(index) {
                continue;
            }
            // The lines the call is read from, asked for at once, before
            // the lock and the header's read.
            self.prefetch(index);
            if self.p.try_lock(1, index, true).is_none() {
                continue;
            }
            let outbox = self.p.load_outbox(1, index);
            if Process::<ServerSide>::buffer_unavailable(self.p.load_inbox(1, index), outbox) {
                self.p.unlock(1, index, 0);
                continue;
            }
            // Acquire: the client's header and packet writes, released before
            // its outbox flip, are visible to the reads below and in `recv`.
            fence(Ordering::Acquire);
            let h = self.p.header(index);
            // Relaxed: ordered by the acquire fence above.
            let opcode = h.opcode.load(Ordering::Relaxed);
            let peer = h.mask.load(Ordering::Relaxed);
            return Some(Port::new(&self.p, index, outbox, 1, peer, opcode, 0));
        }
        None
    }

    /// What port `index` looks like from the host right now: both mailboxes,
    /// the header the client last wrote and this side's lock (relaxed
    /// loads, no lock: a diagnostic for a run that stopped making progress;
    /// see [`PortSnapshot`]). The client-local state is not in host memory;
    /// a backend that can read it fills [`PortSnapshot::client`].
    ///
    /// ```
    /// # use rpc_runtime as gpu_rpc;
    /// use gpu_rpc::cpu::CpuRegion;
    /// use gpu_rpc::protocol::Layout;
    /// let region = CpuRegion::new(Layout::new(2, 1).unwrap());
    /// let s = region.server().snapshot(1);
    /// assert!(s.is_idle());
    /// assert_eq!((s.index, s.client_outbox, s.server_outbox), (1, 0, 0));
    /// ```
    pub fn snapshot(&self, index: u32) -> PortSnapshot {
        self.check_port(index);
        let (word, shift) = self.p.local_slot(index);
        let h = self.p.header(index);
        // Relaxed: a diagnostic of a possibly running port; no decision in
        // the protocol depends on these values.
        PortSnapshot {
            index,
            client_outbox: self.p.inbox(index).load(Ordering::Relaxed) & OWNER_BIT,
            server_outbox: self.p.outbox(index).load(Ordering::Relaxed) & OWNER_BIT,
            opcode: h.opcode.load(Ordering::Relaxed),
            mask: h.mask.load(Ordering::Relaxed),
            server_locked: word.load(Ordering::Relaxed) & (LOCK_BIT << shift) != 0,
            client: None,
        }
    }

    /// Every port that is not at rest ([`PortSnapshot::is_idle`]), each with
    /// its client-local state taken from `client_words`, a copy of the client
    /// side's words (each backend reads them from wherever they live).
    ///
    /// ```
    /// # use rpc_runtime as gpu_rpc;
    /// use gpu_rpc::cpu::CpuRegion;
    /// use gpu_rpc::protocol::Layout;
    /// let region = CpuRegion::new(Layout::new(8, 1).unwrap());
    /// // Port 1 locked by a client, in a copy of the client's words.
    /// let busy: Vec<_> = region.server().busy_ports(&[0x10]).collect();
    /// assert_eq!(busy.len(), 1);
    /// assert_eq!((busy[0].index, busy[0].client), (1, Some((true, false, false))));
    /// ```
    pub fn busy_ports<'s>(&'s self, client_words: &'s [u32]) -> impl Iterator<Item = PortSnapshot> + 's {
        (0..self.p.layout.port_count)
            .map(move |i| PortSnapshot {
                client: client_port_state(client_words, i),
                ..self.snapshot(i)
            })
            .filter(|s| !s.is_idle())
    }

    /// Test support: whether every port is back in its idle state (client owns
    /// it, not locked on this side).
    pub fn all_idle(&self) -> bool {
        (0..self.p.layout.port_count).all(|i| {
            // Relaxed: a quiescent check after all threads joined.
            let (word, shift) = self.p.local_slot(i);
            let locked = word.load(Ordering::Relaxed) & (1 << shift) != 0;
            !locked && !self.pending_unchecked(i)
        })
    }
}

/// Test support: whether no port is locked in the client-local words at
/// `locks` (see [`client_locks_released`]).
///
/// # Safety
/// `locks` must point to `client_local_words(port_count)` live words.
pub unsafe fn client_locks_clear(locks: *const AtomicU32, port_count: u32) -> bool {
    (0..client_local_words(port_count)).all(|w| {
        // SAFETY: `w < client_local_words(port_count)`.
        // Relaxed: a quiescent check after all threads joined.
        let v = unsafe { (*locks.add(w)).load(Ordering::Relaxed) };
        client_locks_released(&[v])
    })
}

/// An open port, on side `S`, in state `St`. See the [module docs](self).
#[must_use = "a port must be finished with `close()`: dropping it keeps its lock and hangs every later call on it"]
pub struct Port<'p, 'a, S: Side, St: State> {
    p: &'p Process<'a, S>,
    index: u32,
    out: u32,
    lane_mask: u64,
    peer_mask: u64,
    opcode: u32,
    /// The client's state bits (`SHADOW_OUTBOX`, `KNOWN_IDLE`) when it
    /// locked the port, for the unlock's toggle (0 on the server).
    opened: u32,
    _state: PhantomData<St>,
}

impl<'p, 'a, S: Side, St: State> Port<'p, 'a, S, St> {
    #[inline(always)]
    fn new(
        p: &'p Process<'a, S>,
        index: u32,
        out: u32,
        lane_mask: u64,
        peer_mask: u64,
        opcode: u32,
        opened: u32,
    ) -> Self {
        Port {
            p,
            index,
            out,
            lane_mask,
            peer_mask,
            opcode,
            opened,
            _state: PhantomData,
        }
    }

    #[inline(always)]
    fn into_state<T: State>(self, out: u32) -> Port<'p, 'a, S, T> {
        Port::new(
            self.p,
            self.index,
            out,
            self.lane_mask,
            self.peer_mask,
            self.opcode,
            self.opened,
        )
    }

    /// The port's index.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The opcode the client opened the port with.
    pub fn opcode(&self) -> u32 {
        self.opcode
    }

    /// The client warp's lane mask, exactly as the client wrote it in the
    /// header (on the server this is untrusted; see [`Port::lanes`]).
    pub fn peer_mask(&self) -> u64 {
        self.peer_mask
    }

    /// The lanes this side's group holds the port with: on the client, the
    /// lanes making the call (every lane of them takes part in the port's
    /// warp steps, e.g. a [`lanes::ballot`] over this mask).
    pub fn lane_mask(&self) -> u64 {
        self.lane_mask
    }

    /// The lanes of the client warp that take part, limited to the layout's
    /// lanes.
    pub fn lanes(&self) -> u64 {
        self.peer_mask & self.p.layout.full_lane_mask()
    }

    /// Wait until this side owns the buffer, then hand it to `fill` for every
    /// lane this side writes, and give the buffer to the other side.
    ///
    /// Only the first `words` words of each lane's buffer cross (a GPU reading
    /// host memory pays a bus round trip per load, so calls move only what
    /// they use).
    #[inline(always)]
    fn send_impl(&mut self, words: usize, mut fill: impl FnMut(u32, &mut Buffer)) -> Result<(), Abandoned> {
        if !St::OWNS {
            self.wait()?;
        }
        self.for_each_lane(|p, index, lane| {
            let mut b = Buffer::default();
            fill(lane, &mut b);
            p.write_buffer(index, lane, &b, words);
        });
        self.out = self.p.invert_outbox(self.lane_mask, self.index, self.out, 0);
        Ok(())
    }

    /// Wait for the buffer (handing it back first after a receive), then read
    /// the first `words` words of each lane's buffer.
    #[inline(always)]
    fn recv_impl(&mut self, words: usize, mut use_: impl FnMut(u32, &Buffer)) -> Result<(), Abandoned> {
        self.take_next()?;
        self.for_each_lane(|p, index, lane| use_(lane, &p.read_buffer(index, lane, words)));
        Ok(())
    }

    /// The first half of a receive: hand the buffer back after a receive,
    /// then wait until the next packet is this side's. Returns the inbox
    /// word that showed it (0 if this side owned the buffer already).
    #[inline(always)]
    fn take_next(&mut self) -> Result<u32, Abandoned> {
        if St::RECEIVED {
            self.out = self.p.invert_outbox(self.lane_mask, self.index, self.out, 0);
        }
        if St::RECEIVED || !St::OWNS {
            return self.wait();
        }
        Ok(0)
    }

    #[inline(always)]
    fn wait(&self) -> Result<u32, Abandoned> {
        self.p
            .wait_for_ownership(self.lane_mask, self.index, self.out)
            .map_err(|()| Abandoned {
                port: self.index,
                opcode: self.opcode,
            })
    }

    #[inline(always)]
    fn for_each_lane(&self, mut f: impl FnMut(&Process<'a, S>, u32, u32)) {
        if S::INVERT {
            let mut m = self.lanes();
            while m != 0 {
                let lane = m.trailing_zeros();
                m &= m - 1;
                f(self.p, self.index, lane);
            }
        } else {
            f(self.p, self.index, lanes::lane_id());
        }
    }

    #[inline(always)]
    fn close_impl(self) {
        lanes::sync(self.lane_mask);
        // The server is passive: if it still owns the buffer it hands it back
        // to the client, so that the port is free for the next call.
        if S::INVERT && St::OWNS {
            self.p.invert_outbox(self.lane_mask, self.index, self.out, 0);
        }
        let mut change = 0;
        if !S::INVERT {
            // After a receive the client owns the port and it is idle; after a
            // send (fire-and-forget) the server still has to answer. A port
            // closed fresh keeps what its opener found. The outbox copy
            // takes the outbox's bit as it is now.
            let idle = match (St::RECEIVED, St::OWNS) {
                (true, _) => KNOWN_IDLE,
                (false, false) => 0,
                (false, true) => self.opened & KNOWN_IDLE,
            };
            let shadow = if self.out == 1 { SHADOW_OUTBOX } else { 0 };
            change = self.opened ^ (idle | shadow);
        }
        self.p.unlock(self.lane_mask, self.index, change);
    }
}

/// States a client may send from.
pub trait ClientCanSend: State {}
impl ClientCanSend for Fresh {}
impl ClientCanSend for Sent {}
impl ClientCanSend for Received {}

/// States that may receive next (after a send, or after a receive).
pub trait CanRecv: State {}
impl CanRecv for Sent {}
impl CanRecv for Received {}

/// States a server may send from (after it received at least once).
pub trait ServerCanSend: State {}
impl ServerCanSend for Sent {}
impl ServerCanSend for Received {}

/// States a server may receive from.
pub trait ServerCanRecv: State {}
impl ServerCanRecv for Fresh {}
impl ServerCanRecv for Sent {}
impl ServerCanRecv for Received {}

impl<'p, 'a, St: ClientCanSend> Port<'p, 'a, ClientSide, St> {
    /// Fill this lane's buffer and hand the packet to the server. Every lane
    /// of the warp that opened the port must call this together.
    #[inline]
    pub fn send(self, fill: impl FnOnce(&mut Buffer)) -> Port<'p, 'a, ClientSide, Sent> {
        self.send_words(BUFFER_WORDS, fill)
    }

    /// [`send`](Self::send) writing only the first `words` words of the
    /// buffer to shared memory (the rest reads as stale data on the other
    /// side).
    #[inline]
    pub fn send_words(mut self, words: usize, fill: impl FnOnce(&mut Buffer)) -> Port<'p, 'a, ClientSide, Sent> {
        let mut fill = Some(fill);
        let _ = self.send_impl(words.min(BUFFER_WORDS), |_, b| {
            if let Some(f) = fill.take() {
                f(b)
            }
        });
        let out = self.out;
        self.into_state(out)
    }

    /// Stream `data` (this lane's bytes; lanes may pass different lengths) to
    /// the server: the first packet carries the length and 56 bytes, the rest
    /// 64 bytes each.
    #[inline]
    pub fn send_n(self, data: &[u8]) -> Port<'p, 'a, ClientSide, Sent> {
        let len = data.len() as u64;
        let port = self.send(|b| {
            b.data[0] = len;
            let n = data.len().min(BUFFER_BYTES - 8);
            b.bytes_mut()[8..8 + n].copy_from_slice(&data[..n]);
        });
        let rest = &data[data.len().min(BUFFER_BYTES - 8)..];
        let packets = rest.len().div_ceil(BUFFER_BYTES) as u64;
        port.send_packets(packets, |i, b| {
            let start = i as usize * BUFFER_BYTES;
            let chunk = &rest[start..(start + BUFFER_BYTES).min(rest.len())];
            b.bytes_mut()[..chunk.len()].copy_from_slice(chunk);
        })
    }

    /// Close the port (the client keeps nothing to hand back).
    #[inline]
    pub fn close(self) {
        self.close_impl()
    }
}

impl<'p, 'a> Port<'p, 'a, ClientSide, Sent> {
    /// Send further packets: `fill(i, buffer)` for `i` in `0..packets`. Each
    /// lane passes its own count; the warp loops until every lane is done
    /// (lanes that are done send an unused buffer).
    #[inline]
    pub fn send_packets(self, packets: u64, mut fill: impl FnMut(u64, &mut Buffer)) -> Self {
        let mask = self.lane_mask;
        let mut port = self;
        let mut i = 0u64;
        while lanes::ballot(mask, i < packets) != 0 {
            let active = i < packets;
            port = port.send(|b| {
                if active {
                    fill(i, b)
                }
            });
            i += 1;
        }
        port
    }
}

impl<'p, 'a, St: CanRecv> Port<'p, 'a, ClientSide, St> {
    /// Wait for the server's packet and read this lane's buffer.
    #[inline]
    pub fn recv(self, use_: impl FnOnce(&Buffer)) -> Port<'p, 'a, ClientSide, Received> {
        self.recv_words(BUFFER_WORDS, use_)
    }

    /// [`recv`](Self::recv) reading only the first `words` words of the
    /// buffer (the rest of the `Buffer` is zero).
    #[inline]
    pub fn recv_words(mut self, words: usize, use_: impl FnOnce(&Buffer)) -> Port<'p, 'a, ClientSide, Received> {
        let mut use_ = Some(use_);
        let _ = self.recv_impl(words.min(BUFFER_WORDS), |_, b| {
            if let Some(f) = use_.take() {
                f(b)
            }
        });
        let out = self.out;
        self.into_state(out)
    }

    /// [`recv_words`](Self::recv_words) for a reply the server may have sent
    /// inline ([`send_inline`](Port::send_inline)): returns `Some(value)` if
    /// the server's outbox word carried one (then no lane reads the packet
    /// and `use_` is not called), `None` after `use_(buffer)` otherwise.
    /// Every lane of the group gets the same: the word is the group's first
    /// lane's load, broadcast.
    #[inline]
    pub fn recv_reply_words(
        mut self,
        words: usize,
        use_: impl FnOnce(&Buffer),
    ) -> (Port<'p, 'a, ClientSide, Received>, Option<u32>) {
        let mut inline = None;
        if let Ok(word) = self.take_next() {
            if word & INLINE_BIT != 0 {
                inline = Some(word >> INLINE_SHIFT);
            } else {
                let mut use_ = Some(use_);
                let words = words.min(BUFFER_WORDS);
                self.for_each_lane(|p, index, lane| {
                    if let Some(f) = use_.take() {
                        f(&p.read_buffer(index, lane, words))
                    }
                });
            }
        }
        let out = self.out;
        (self.into_state(out), inline)
    }

    /// Receive a stream sent with the server's `send_n` into `dst`: returns the
    /// length the server sent; bytes beyond `dst.len()` are received and
    /// dropped so both sides stay in step.
    #[inline]
    pub fn recv_n(self, dst: &mut [u8]) -> (Port<'p, 'a, ClientSide, Received>, u64) {
        let mut len = 0u64;
        let port = self.recv(|b| {
            len = b.data[0];
            let n = (len as usize).min(BUFFER_BYTES - 8).min(dst.len());
            dst[..n].copy_from_slice(&b.bytes()[8..8 + n]);
        });
        let first = (len as usize).min(BUFFER_BYTES - 8);
        let packets = (len as usize - first).div_ceil(BUFFER_BYTES) as u64;
        let mask = port.lane_mask;
        let mut port = port;
        let mut i = 0u64;
        while lanes::ballot(mask, i < packets) != 0 {
            let active = i < packets;
            port = port.recv(|b| {
                if active {
                    let start = first + i as usize * BUFFER_BYTES;
                    if start < dst.len() {
                        let n = (dst.len() - start).min(BUFFER_BYTES);
                        dst[start..start + n].copy_from_slice(&b.bytes()[..n]);
                    }
                }
            });
            i += 1;
        }
        (port, len)
    }
}

impl<'p, 'a> Port<'p, 'a, ClientSide, Received> {
    /// Receive further packets: `use_(i, buffer)` for `i` in `0..packets`
    /// (this lane's count; lanes may differ, the warp loops until all are
    /// done).
    #[inline]
    pub fn recv_packets(self, packets: u64, mut use_: impl FnMut(u64, &Buffer)) -> Self {
        let mask = self.lane_mask;
        let mut port = self;
        let mut i = 0u64;
        while lanes::ballot(mask, i < packets) != 0 {
            let active = i < packets;
            port = port.recv(|b| {
                if active {
                    use_(i, b)
                }
            });
            i += 1;
        }
        port
    }
}

impl<'p, 'a, St: ServerCanRecv> Port<'p, 'a, ServerSide, St> {
    /// Read the packet: `use_(lane, buffer)` runs once per active lane, in lane
    /// order. Fails only when the server's abort flag was raised.
    #[inline]
    pub fn recv(self, use_: impl FnMut(u32, &Buffer)) -> Result<Port<'p, 'a, ServerSide, Received>, Abandoned> {
        self.recv_words(BUFFER_WORDS, use_)
    }

    /// [`recv`](Self::recv) reading only the first `words` words of each
    /// lane's buffer (the rest of the `Buffer` is zero); see
    /// [`reread`](Port::reread) to read more of the same packet.
    #[inline]
    pub fn recv_words(
        mut self,
        words: usize,
        mut use_: impl FnMut(u32, &Buffer),
    ) -> Result<Port<'p, 'a, ServerSide, Received>, Abandoned> {
        self.recv_impl(words.min(BUFFER_WORDS), &mut use_)?;
        let out = self.out;
        Ok(self.into_state(out))
    }

    /// Receive a stream sent with the client's `send_n`. `alloc(lane, len)`
    /// returns where the lane's bytes go, or `None` to drop them (for example
    /// when `len` is over a limit: the packets are still consumed, nothing is
    /// allocated). Returns the lengths the lanes declared.
    pub fn recv_n<'d>(
        self,
        mut alloc: impl FnMut(u32, u64) -> Option<&'d mut [u8]>,
    ) -> Result<(Port<'p, 'a, ServerSide, Received>, [u64; MAX_LANES as usize]), Abandoned> {
        let mut lens = [0u64; MAX_LANES as usize];
        let mut dsts: [Option<&'d mut [u8]>; MAX_LANES as usize] = [const { None }; MAX_LANES as usize];
        let mut port = self.recv(|lane, b| {
            let len = b.data[0];
            lens[lane as usize] = len;
            dsts[lane as usize] = alloc(lane, len);
            if let Some(d) = dsts[lane as usize].as_deref_mut() {
                let n = (len as usize).min(BUFFER_BYTES - 8).min(d.len());
                d[..n].copy_from_slice(&b.bytes()[8..8 + n]);
            }
        })?;
        let mut packets = 0u64;
        let mut m = port.lanes();
        while m != 0 {
            let lane = m.trailing_zeros() as usize;
            m &= m - 1;
            let rest = lens[lane].saturating_sub((BUFFER_BYTES - 8) as u64);
            packets = packets.max(rest.div_ceil(BUFFER_BYTES as u64));
        }
        for i in 0..packets {
            port = port.recv(|lane, b| {
                if let Some(d) = dsts[lane as usize].as_deref_mut() {
                    let start = (BUFFER_BYTES - 8) + i as usize * BUFFER_BYTES;
                    if start < d.len() {
                        let n = (d.len() - start).min(BUFFER_BYTES);
                        d[start..start + n].copy_from_slice(&b.bytes()[..n]);
                    }
                }
            })?;
        }
        Ok((port, lens))
    }

    /// [`recv_n`](Self::recv_n) into host allocations: each lane's bytes in a
    /// `Vec`, or `None` for lanes whose declared length is over `limit` (their
    /// packets are consumed, nothing is allocated for them).
    #[cfg(feature = "std")]
    pub fn recv_n_vec(self, limit: u64) -> Result<(Port<'p, 'a, ServerSide, Received>, LaneBytes), Abandoned> {
        let mut out: std::vec::Vec<Option<std::vec::Vec<u8>>> = (0..MAX_LANES).map(|_| None).collect();
        let mut lens = [0u64; MAX_LANES as usize];
        let port = self.recv(|lane, b| {
            let len = b.data[0];
            lens[lane as usize] = len;
            if len <= limit {
                let n = (len as usize).min(BUFFER_BYTES - 8);
                let mut v = std::vec::Vec::with_capacity(len as usize);
                v.extend_from_slice(&b.bytes()[8..8 + n]);
                out[lane as usize] = Some(v);
            }
        })?;
        let mut packets = 0u64;
        let mut m = port.lanes();
        while m != 0 {
            let lane = m.trailing_zeros() as usize;
            m &= m - 1;
            packets = packets.max(
                lens[lane]
                    .saturating_sub((BUFFER_BYTES - 8) as u64)
                    .div_ceil(BUFFER_BYTES as u64),
            );
        }
        let port = port.recv_packets(packets, |lane, _, b| {
            if let Some(v) = out[lane as usize].as_mut() {
                let want = lens[lane as usize] as usize;
                let n = (want - v.len()).min(BUFFER_BYTES);
                v.extend_from_slice(&b.bytes()[..n]);
            }
        })?;
        Ok((port, out))
    }

    /// Close the port; a server that still owns the buffer hands it back.
    #[inline]
    pub fn close(self) {
        self.close_impl()
    }
}

/// Word `w` of every lane's buffer of one port, for the side that owns the
/// port ([`Process::word_row`]): the lanes' words lie in a row
/// (word-major packets), so the row's start is computed once.
struct WordRow<'r, 'a, S: Side> {
    #[cfg(not(loom))]
    first: &'r AtomicU64,
    #[cfg(not(loom))]
    lanes: u32,
    #[cfg(not(loom))]
    _p: PhantomData<&'r Process<'a, S>>,
    #[cfg(loom)]
    p: &'r Process<'a, S>,
    #[cfg(loom)]
    index: u32,
    #[cfg(loom)]
    w: usize,
}

impl<S: Side> WordRow<'_, '_, S> {
    /// Lane `lane`'s word.
    ///
    /// # Safety
    /// `lane` is a lane of the layout (below `lane_size`).
    #[inline(always)]
    unsafe fn read(&self, lane: u32) -> u64 {
        #[cfg(not(loom))]
        {
            debug_assert!(lane < self.lanes);
            // SAFETY: the row holds `lane_size` consecutive words starting
            // at `first` (`Process::word`), and `lane < lane_size` (the
            // caller's promise).
            let word = unsafe { &*(self.first as *const AtomicU64).add(lane as usize) };
            // Relaxed: the acquire after the ownership check
            // (`acquire_after_poll`) orders this load after the other side's
            // stores.
            word.load(Ordering::Relaxed)
        }
        #[cfg(loom)]
        self.p.read_word(self.index, lane, self.w)
    }

    /// Store `v` as lane `lane`'s word.
    ///
    /// # Safety
    /// As for [`read`](Self::read).
    #[inline(always)]
    unsafe fn write(&self, lane: u32, v: u64) {
        #[cfg(not(loom))]
        {
            debug_assert!(lane < self.lanes);
            // SAFETY: as in `read`.
            let word = unsafe { &*(self.first as *const AtomicU64).add(lane as usize) };
            // Relaxed: the release fence in `invert_outbox` publishes it.
            word.store(v, Ordering::Relaxed);
        }
        #[cfg(loom)]
        self.p.write_word(self.index, lane, self.w, v)
    }
}

/// One lane's word of a [`WordRow`], the lane checked to be the layout's
/// (only `each_word` makes one).
struct LaneWord<'w, 'r, 'a> {
    row: &'w WordRow<'r, 'a, ServerSide>,
    lane: u32,
}

impl LaneWord<'_, '_, '_> {
    #[inline(always)]
    fn read(&self) -> u64 {
        // SAFETY: `each_word` made this for a lane of the layout.
        unsafe { self.row.read(self.lane) }
    }

    #[inline(always)]
    fn write(&self, v: u64) {
        // SAFETY: as in `read`.
        unsafe { self.row.write(self.lane, v) }
    }
}

/// Per-lane byte streams received by [`Port::recv_n_vec`] (index = lane).
#[cfg(feature = "std")]
pub type LaneBytes = std::vec::Vec<Option<std::vec::Vec<u8>>>;

impl<'p, 'a, St: State> Port<'p, 'a, ServerSide, St> {
    /// `use_(lane, w, value)` for each word `w` in `words` of each active
    /// lane's buffer, in the packet area's own order: word by word, the
    /// lanes in order within each word (the server's hot path reads and
    /// writes single words; no `Buffer` is built per lane).
    /// Each word's row of lanes is found once (a per-lane address
    /// computation the closure's stores kept the compiler from hoisting).
    #[inline(always)]
    fn each_word(&self, words: core::ops::Range<usize>, mut use_: impl FnMut(u32, usize, &LaneWord<'_, '_, 'a>)) {
        for w in words.start..words.end.min(BUFFER_WORDS) {
            let row = self.p.word_row(self.index, w);
            // `for_each_lane` yields the lanes of `lanes()`, which masks
            // the peer's lanes to the layout's: each is below `lane_size`.
            self.for_each_lane(|_, _, lane| use_(lane, w, &LaneWord { row: &row, lane }));
        }
    }
}

impl<'p, 'a, St: ServerCanRecv> Port<'p, 'a, ServerSide, St> {
    /// [`recv`](Self::recv) word by word: `use_(lane, w, value)` for the
    /// words `words` of each lane's buffer, word by word and the lanes in
    /// order within each word.
    #[inline]
    pub fn recv_each_word(
        mut self,
        words: core::ops::Range<usize>,
        mut use_: impl FnMut(u32, usize, u64),
    ) -> Result<Port<'p, 'a, ServerSide, Received>, Abandoned> {
        self.take_next()?;
        self.each_word(words, |lane, w, word| use_(lane, w, word.read()));
        let out = self.out;
        Ok(self.into_state(out))
    }
}

impl<'p, 'a> Port<'p, 'a, ServerSide, Received> {
    /// Read the first `words` words of the packet just received again (this
    /// side still owns it; nothing crosses): lets the server read the frame
    /// word first and then only as much of the packet as the frame announces.
    pub fn reread(&self, words: usize, mut use_: impl FnMut(u32, &Buffer)) {
        let words = words.min(BUFFER_WORDS);
        self.for_each_lane(|p, index, lane| use_(lane, &p.read_buffer(index, lane, words)));
    }

    /// [`reread`](Self::reread) word by word: `use_(lane, w, value)` for the
    /// words `words` of each lane's buffer, as [`recv_each_word`](Self::recv_each_word).
    #[inline]
    pub fn reread_each_word(&self, words: core::ops::Range<usize>, mut use_: impl FnMut(u32, usize, u64)) {
        self.each_word(words, |lane, w, word| use_(lane, w, word.read()));
    }

    /// Receive further packets (the same count for every lane; the server
    /// computes it from what the client declared) into `use_(lane, i, buffer)`.
    #[inline]
    pub fn recv_packets(self, packets: u64, use_: impl FnMut(u32, u64, &Buffer)) -> Result<Self, Abandoned> {
        // Most calls have none: that case costs a comparison, here; the
        // loop, whose waits want the room of a function of their own (a
        // two-packet call served 20% slower with it inlined into the
        // caller, `docs/runs/host-bench-inline-packets.log`), stays out of line.
        if packets == 0 {
            return Ok(self);
        }
        self.recv_more(packets, use_)
    }

    #[inline(never)]
    fn recv_more(self, packets: u64, mut use_: impl FnMut(u32, u64, &Buffer)) -> Result<Self, Abandoned> {
        let mut port = self;
        for i in 0..packets {
            port = port.recv(|lane, b| use_(lane, i, b))?;
        }
        Ok(port)
    }
}

impl<'p, 'a, St: ServerCanSend> Port<'p, 'a, ServerSide, St> {
    /// Fill each active lane's buffer (`fill(lane, buffer)`, lane order) and
    /// hand the packet to the client.
    #[inline]
    pub fn send(self, fill: impl FnMut(u32, &mut Buffer)) -> Result<Port<'p, 'a, ServerSide, Sent>, Abandoned> {
        self.send_words(BUFFER_WORDS, fill)
    }

    /// [`send`](Self::send) writing only the first `words` words of each
    /// lane's buffer: the fewer cache lines the server writes, the fewer the
    /// GPU's reads of them have to fetch from the host's caches.
    #[inline]
    pub fn send_words(
        mut self,
        words: usize,
        mut fill: impl FnMut(u32, &mut Buffer),
    ) -> Result<Port<'p, 'a, ServerSide, Sent>, Abandoned> {
        self.send_impl(words.min(BUFFER_WORDS), &mut fill)?;
        let out = self.out;
        Ok(self.into_state(out))
    }

    /// [`send_words`](Self::send_words) word by word: word `w` of each
    /// lane's buffer, for `w < words`, becomes `value(lane, w)` (asked for
    /// word by word, the lanes in order within each word); the rest of the
    /// buffer is left as it is.
    #[inline]
    pub fn send_each_word(
        mut self,
        words: usize,
        mut value: impl FnMut(u32, usize) -> u64,
    ) -> Result<Port<'p, 'a, ServerSide, Sent>, Abandoned> {
        if !St::OWNS {
            self.wait()?;
        }
        self.each_word(0..words, |lane, w, word| word.write(value(lane, w)));
        self.out = self.p.invert_outbox(self.lane_mask, self.index, self.out, 0);
        let out = self.out;
        Ok(self.into_state(out))
    }

    /// Hand the port to the client with `value` (at most [`INLINE_MAX`]) in
    /// the server's outbox word instead of a packet: the client's
    /// [`recv_reply_words`](Port::recv_reply_words) gets it without reading
    /// the packet. The packet is left as it is. Every lane of the call gets
    /// the same value.
    ///
    /// # Panics
    /// If `value > INLINE_MAX` (a bug of the caller, which must send a
    /// packet instead).
    #[inline]
    pub fn send_inline(mut self, value: u32) -> Result<Port<'p, 'a, ServerSide, Sent>, Abandoned> {
        assert!(value <= INLINE_MAX, "inline reply {value:#x} exceeds INLINE_MAX");
        if !St::OWNS {
            self.wait()?;
        }
        self.out = self
            .p
            .invert_outbox(self.lane_mask, self.index, self.out, INLINE_BIT | value << INLINE_SHIFT);
        let out = self.out;
        Ok(self.into_state(out))
    }

    /// Stream each lane's `data(lane)` to the client's `recv_n`.
    pub fn send_n<'d>(
        self,
        mut data: impl FnMut(u32) -> &'d [u8],
    ) -> Result<Port<'p, 'a, ServerSide, Sent>, Abandoned> {
        let mut srcs: [&'d [u8]; MAX_LANES as usize] = [&[]; MAX_LANES as usize];
        let mut m = self.lanes();
        let mut packets = 0u64;
        while m != 0 {
            let lane = m.trailing_zeros();
            m &= m - 1;
            let d = data(lane);
            srcs[lane as usize] = d;
            let rest = d.len().saturating_sub(BUFFER_BYTES - 8);
            packets = packets.max(rest.div_ceil(BUFFER_BYTES) as u64);
        }
        let mut port = self.send(|lane, b| {
            let d = srcs[lane as usize];
            b.data[0] = d.len() as u64;
            let n = d.len().min(BUFFER_BYTES - 8);
            b.bytes_mut()[8..8 + n].copy_from_slice(&d[..n]);
        })?;
        for i in 0..packets {
            port = port.send(|lane, b| {
                let d = srcs[lane as usize];
                let start = (BUFFER_BYTES - 8) + i as usize * BUFFER_BYTES;
                if start < d.len() {
                    let n = (d.len() - start).min(BUFFER_BYTES);
                    b.bytes_mut()[..n].copy_from_slice(&d[start..start + n]);
                }
            })?;
        }
        Ok(port)
    }
}

impl<'p, 'a> Port<'p, 'a, ServerSide, Sent> {
    /// Send further packets (same count for all lanes) filled by
    /// `fill(lane, i, buffer)`.
    #[inline]
    pub fn send_packets(self, packets: u64, fill: impl FnMut(u32, u64, &mut Buffer)) -> Result<Self, Abandoned> {
        // As in `recv_packets`: no packets, a comparison; else a loop of
        // its own.
        if packets == 0 {
            return Ok(self);
        }
        self.send_more(packets, fill)
    }

    #[inline(never)]
    fn send_more(self, packets: u64, mut fill: impl FnMut(u32, u64, &mut Buffer)) -> Result<Self, Abandoned> {
        let mut port = self;
        for i in 0..packets {
            port = port.send(|lane, b| fill(lane, i, b))?;
        }
        Ok(port)
    }
}
