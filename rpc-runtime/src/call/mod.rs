//! The call frame: how a typed call travels over a port (`no_std`).
//!
//! A call made through a `#[gpu_rpc]` stub is this exchange (every step on
//! one side mirrored on the other):
//!
//! 1. **Frame** (client → server): packet 0 holds, per lane, the 8-byte
//!    [frame word](FrameWord) and the first 56 bytes of the *argument block*;
//!    further packets carry the rest of the block, 64 bytes each. The block is
//!    `in_streams` × `u64` byte lengths of the streamed inputs, `out_streams` ×
//!    `u64` element counts of the out-buffers, then the encoded arguments.
//! 2. **Streams** (client → server): for each `&str`/`&[T]` argument,
//!    `ceil(bytes / 64)` packets of the encoded elements, packed densely; each
//!    lane streams its own slice and the warp loops until every lane is done.
//!    When every lane's streams fit in packet 0 after its argument block
//!    (each at the next multiple of 8 bytes: [`inline_start`],
//!    [`inline_next`]), the lanes agree by a ballot to send them there
//!    instead: the frame word says so ([`FrameWord::inline_streams`]) and no
//!    stream packet follows. A short line to print is then one packet, not
//!    two round trips.
//! 3. **Reply** (server → client, unless the method is fire-and-forget):
//!    packet 0 holds, per lane, a [`Status`] word and the first 56 bytes of the
//!    encoded return value; further packets the rest. When every lane of the
//!    call is `Ok` with the same encoded return value of at most 8 bytes whose
//!    little-endian value is at most [`INLINE_MAX`](crate::protocol::INLINE_MAX)
//!    (a `()`, a `bool`, a small integer), the server sends it **inline** in
//!    its outbox word instead ([`inline_reply`]) and writes no packet: the
//!    client has the answer when it sees the flip, one bus round trip sooner.
//! 4. **Out-buffers** (server → client, lanes whose status is `Ok`): for each
//!    `&mut [T]`, `ceil(len / (64 / size_of T))` packets of whole elements.
//! 5. Both sides close.
//!
//! # The direct path
//!
//! A streamed input or out-buffer of at least [`DIRECT_MIN_BYTES`] that lies
//! in memory the host can copy by address (global memory on a GPU, tested
//! with `isspacep.global`; any memory of a lane the CPU backend runs), and
//! whose elements are laid out as they are encoded ([`Wire::slice_as_bytes`]),
//! travels by address instead: its length word has the [`DIRECT`] bit set,
//! and in step 2 the lane sends one packet holding the slice's address in
//! place of the slice's packets. After the streams come the out-buffers'
//! addresses, one packet for each out-buffer that is direct (nothing for the
//! others). The server copies the inputs in before it runs the call (the
//! backend's [`DeviceMemory`](crate::device_memory::DeviceMemory), e.g. the
//! copy engine, while the kernel runs), stores the out-buffers' encoded
//! elements densely at their addresses before it sends the reply (those of
//! lanes whose host methods are done may leave while later lanes still run:
//! [`DeviceMemory::early_writes`](crate::device_memory::DeviceMemory::early_writes)), and sends
//! no packet for them in step 4. Each lane decides for itself ([`direct`]),
//! once per call and slice (the length word, the address packet and the
//! out-buffer step follow that one decision): one group may mix direct
//! lanes and packet lanes. A short slice, or one on the stack, keeps the
//! packets, and so does every slice of a fire-and-forget call (the lane may
//! reuse it before the host gets to copy it).
//!
//! Because the frame word states how many packets of arguments and streams
//! follow, a server can consume a call it does not know (an unknown opcode, a
//! signature from another build) and answer it with an error status: nothing
//! hangs and the port returns to its idle state.
//!
//! This file defines the frame (limits, [`Status`], [`CallDesc`],
//! [`FrameWord`], where every byte of it goes); `client.rs` is the client's
//! half of the exchange, `server/serve_call.rs` the server's. The macro's
//! generated code, both halves and the C++ client all take the layout from
//! here.

use crate::protocol::{Buffer, BUFFER_BYTES};
use crate::wire::Wire;
use core::fmt;

mod client;

pub use client::{direct_items, fail, halt, out_len_word, stream_len_word, ClientCall, ClientReply};

/// Frame format version carried in every frame word (2: replies may come
/// inline in the server's outbox word; a client of version 1 would read
/// them from the packet, so the server refuses its frames).
pub const FRAME_VERSION: u8 = 2;

/// Whether a reply goes inline in the server's outbox word (step 3 of the
/// exchange above), and with which value: `all_ok` says every lane of the
/// call is `Ok` (detail 0), `ret_len` is the encoded return value's length
/// and `rets` each lane's first 8 bytes of it as a little-endian word (zero
/// past `ret_len`). `Some` when the value is at most 8 bytes, the same on
/// every lane and at most [`INLINE_MAX`](crate::protocol::INLINE_MAX). The
/// rule, written once: the server decides with it; a client that sees an
/// inline reply takes the status `Ok` and the value as the return value's
/// bytes, and expects no spill packet.
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::call::inline_reply;
/// assert_eq!(inline_reply(true, 0, [0, 0]), Some(0)); // `()` on two lanes
/// assert_eq!(inline_reply(true, 8, [42]), Some(42));
/// assert_eq!(inline_reply(true, 8, [42, 43]), None); // lanes differ
/// assert_eq!(inline_reply(true, 8, [1 << 30]), None); // too large
/// assert_eq!(inline_reply(true, 12, [1]), None); // more than 8 bytes
/// assert_eq!(inline_reply(false, 8, [42]), None); // a lane failed
/// ```
#[inline]
pub fn inline_reply(all_ok: bool, ret_len: usize, rets: impl IntoIterator<Item = u64>) -> Option<u32> {
    if !all_ok || ret_len > 8 {
        return None;
    }
    let mut rets = rets.into_iter();
    let first = rets.next()?;
    (first <= crate::protocol::INLINE_MAX as u64 && rets.all(|r| r == first)).then_some(first as u32)
}
/// Most bytes of encoded arguments a method may take (spilled over packets).
pub const MAX_ARG_BYTES: usize = 4096;
/// Most bytes of encoded return value a method may give.
pub const MAX_RET_BYTES: usize = 4096;
/// Most streamed inputs (`&str`/`&[T]`) per method.
pub const MAX_IN_STREAMS: usize = 7;
/// Most out-buffers (`&mut [T]`) per method.
pub const MAX_OUT_STREAMS: usize = 7;
/// Bytes of packet 0 after the frame or status word.
pub const FIRST_PAYLOAD: usize = BUFFER_BYTES - 8;

/// The outcome of a call for one lane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Status {
    /// The host ran the method.
    Ok = 0,
    /// No service on the server has this opcode.
    UnknownOpcode = 1,
    /// The server has the opcode with another signature (host and kernel were
    /// built from different definitions).
    SignatureMismatch = 2,
    /// The host implementation panicked.
    HandlerPanicked = 3,
    /// An argument was not a valid value (bad UTF-8, `bool`, `char`, ...);
    /// the detail word names the argument.
    InvalidArgument = 4,
    /// A streamed argument or out-buffer is over the server's size limit.
    TooLarge = 5,
    /// The frame could not be parsed (wrong version, lanes disagree).
    BadFrame = 6,
    /// The header's lane mask is empty or names lanes the layout lacks.
    InvalidLaneMask = 7,
    /// A status this build does not know.
    Unknown = 0xffff_ffff,
}

impl Status {
    /// The status for a raw word.
    ///
    /// ```
    /// # use rpc_runtime as gpu_rpc;
    /// use gpu_rpc::Status;
    /// assert_eq!(Status::from_u32(1), Status::UnknownOpcode);
    /// assert_eq!(Status::from_u32(99), Status::Unknown);
    /// ```
    pub const fn from_u32(v: u32) -> Status {
        match v {
            0 => Status::Ok,
            1 => Status::UnknownOpcode,
            2 => Status::SignatureMismatch,
            3 => Status::HandlerPanicked,
            4 => Status::InvalidArgument,
            5 => Status::TooLarge,
            6 => Status::BadFrame,
            7 => Status::InvalidLaneMask,
            _ => Status::Unknown,
        }
    }

    /// A short description.
    pub const fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::UnknownOpcode => "unknown opcode: no service on the host handles it",
            Status::SignatureMismatch => "signature mismatch: host and kernel were built from different definitions",
            Status::HandlerPanicked => "the host implementation panicked",
            Status::InvalidArgument => "invalid argument",
            Status::TooLarge => "argument over the server's size limit",
            Status::BadFrame => "malformed call frame",
            Status::InvalidLaneMask => "invalid lane mask",
            Status::Unknown => "unknown status",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed call, as the device sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallError {
    /// What went wrong.
    pub status: Status,
    /// Status-specific detail (for `InvalidArgument`, the argument's index).
    pub detail: u32,
    /// The call.
    pub desc: &'static CallDesc,
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "gpu_rpc: call to {}::{} (opcode {:#010x}) failed: {}",
            self.desc.service, self.desc.method, self.desc.opcode, self.status
        )?;
        if self.status == Status::InvalidArgument {
            write!(f, " (argument {})", self.detail)?;
        }
        Ok(())
    }
}

/// Everything both sides know statically about one method; generated by
/// `#[gpu_rpc]` as a `const`.
#[derive(Debug, PartialEq, Eq)]
pub struct CallDesc {
    /// The trait's name.
    pub service: &'static str,
    /// The method's name.
    pub method: &'static str,
    /// The opcode.
    pub opcode: u32,
    /// A hash of the method's name and wire types.
    pub signature: u32,
    /// `false` for fire-and-forget methods.
    pub reply: bool,
    /// Streamed inputs.
    pub in_streams: u8,
    /// Out-buffers, with their element sizes.
    pub out_elem_sizes: &'static [u32],
    /// Bytes of encoded scalar arguments.
    pub arg_bytes: u32,
    /// Bytes of encoded return value.
    pub ret_bytes: u32,
}

impl CallDesc {
    /// The key lanes are grouped by for this call (opcode and signature): lanes
    /// with different keys never share a port (see the
    /// [lane rules](crate::lanes#the-lane-rules)).
    ///
    /// ```
    /// # use rpc_runtime as gpu_rpc;
    /// assert_eq!(gpu_rpc::call::NOOP_DESC.group_key() >> 32, 1);
    /// ```
    pub const fn group_key(&self) -> u64 {
        (self.opcode as u64) << 32 | self.signature as u64
    }

    /// Bytes of the argument block (lengths, counts, arguments).
    pub const fn block_len(&self) -> usize {
        lengths_bytes(self.in_streams as usize, self.out_elem_sizes.len()) + self.arg_bytes as usize
    }

    /// The frame word for this method.
    pub const fn frame_word(&self) -> FrameWord {
        FrameWord {
            version: FRAME_VERSION,
            inline_streams: false,
            reply: self.reply,
            in_streams: self.in_streams,
            out_streams: self.out_elem_sizes.len() as u8,
            arg_bytes: self.arg_bytes as u16,
            signature: self.signature,
        }
    }

    /// What is wrong with this description, if anything: the limits every
    /// frame must respect. [`check`](Self::check) turns it into a compile
    /// error for generated descriptions; the server's `Dispatcher::add`
    /// refuses a service with a hand-made description that fails it.
    ///
    /// ```
    /// # use rpc_runtime as gpu_rpc;
    /// use gpu_rpc::call::{CallDesc, NOOP_DESC};
    /// let bad = CallDesc { opcode: 0x1_0000, out_elem_sizes: &[100], ..NOOP_DESC };
    /// assert_eq!(bad.problem(), Some("gpu_rpc: out-buffer elements must be 1..=64 bytes"));
    /// ```
    pub const fn problem(&self) -> Option<&'static str> {
        if self.arg_bytes as usize > MAX_ARG_BYTES {
            return Some("gpu_rpc: the method's arguments exceed MAX_ARG_BYTES (4096 bytes)");
        }
        if self.ret_bytes as usize > MAX_RET_BYTES {
            return Some("gpu_rpc: the method's return value exceeds MAX_RET_BYTES (4096 bytes)");
        }
        if self.in_streams as usize > MAX_IN_STREAMS {
            return Some("gpu_rpc: more than 7 &str/&[T] arguments");
        }
        if self.out_elem_sizes.len() > MAX_OUT_STREAMS {
            return Some("gpu_rpc: more than 7 &mut [T] arguments");
        }
        let mut i = 0;
        while i < self.out_elem_sizes.len() {
            let s = self.out_elem_sizes[i] as usize;
            if s == 0 || s > BUFFER_BYTES {
                return Some("gpu_rpc: out-buffer elements must be 1..=64 bytes");
            }
            i += 1;
        }
        if self.opcode < crate::protocol::opcodes::FIRST_USER {
            return Some("gpu_rpc: opcodes below 0x10000 are reserved for the runtime");
        }
        None
    }

    /// Compile-time checks of a generated description; `#[gpu_rpc]` calls this
    /// in a `const _: () = ...;`, so an impossible layout is a compile error.
    pub const fn check(&self) {
        if let Some(problem) = self.problem() {
            panic!("{}", problem);
        }
    }
}

/// The first word of a call frame.
///
/// Bits: `0..32` signature, `32..48` argument bytes, `48..51` streamed inputs,
/// `51..54` out-buffers, `54` reply expected, `55` streams inline, `56..64`
/// version. Every bit has a meaning (no word has reserved bits set):
/// `unpack` then `pack` gives any word back.
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::call::FrameWord;
/// let w = FrameWord {
///     version: 1,
///     inline_streams: true,
///     reply: true,
///     in_streams: 2,
///     out_streams: 1,
///     arg_bytes: 300,
///     signature: 0xabcd,
/// };
/// assert_eq!(FrameWord::unpack(w.pack()), w);
/// for word in [0, u64::MAX, 0x0140_0008_2814_a582] {
///     assert_eq!(FrameWord::unpack(word).pack(), word);
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameWord {
    /// [`FRAME_VERSION`].
    pub version: u8,
    /// The streamed inputs ride in packet 0 after the argument block (see
    /// [`inline_start`]); no stream packet follows. Set by the client for one
    /// call, never part of a method's [`CallDesc::frame_word`].
    pub inline_streams: bool,
    /// A reply is expected.
    pub reply: bool,
    /// Streamed inputs (0..=7).
    pub in_streams: u8,
    /// Out-buffers (0..=7).
    pub out_streams: u8,
    /// Bytes of encoded arguments.
    pub arg_bytes: u16,
    /// The method signature hash.
    pub signature: u32,
}

impl FrameWord {
    /// Pack into a `u64`.
    pub const fn pack(self) -> u64 {
        self.signature as u64
            | (self.arg_bytes as u64) << 32
            | ((self.in_streams & 7) as u64) << 48
            | ((self.out_streams & 7) as u64) << 51
            | (self.reply as u64) << 54
            | (self.inline_streams as u64) << 55
            | (self.version as u64) << 56
    }

    /// Unpack from a `u64`.
    pub const fn unpack(w: u64) -> FrameWord {
        FrameWord {
            signature: w as u32,
            arg_bytes: (w >> 32) as u16,
            in_streams: ((w >> 48) & 7) as u8,
            out_streams: ((w >> 51) & 7) as u8,
            reply: (w >> 54) & 1 == 1,
            inline_streams: (w >> 55) & 1 == 1,
            version: (w >> 56) as u8,
        }
    }

    /// Bytes of the argument block this frame announces.
    pub const fn block_len(self) -> usize {
        lengths_bytes(self.in_streams as usize, self.out_streams as usize) + self.arg_bytes as usize
    }
}

/// Bytes at the start of an argument block that hold its lengths: one `u64`
/// per streamed input (its byte length), then one per out-buffer (its
/// element count); the encoded arguments follow. The one definition of that
/// layout, used by the client stubs the macro generates, the frame word and
/// the server.
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// assert_eq!(gpu_rpc::call::lengths_bytes(2, 1), 24);
/// ```
pub const fn lengths_bytes(in_streams: usize, out_buffers: usize) -> usize {
    8 * (in_streams + out_buffers)
}

/// The bit of a length word that says the lane's slice goes by address
/// ([the direct path](self#the-direct-path)); the bits below it are the
/// length.
pub const DIRECT: u64 = 1 << 63;

/// The shortest slice, in bytes, that takes [the direct path](self#the-direct-path)
/// (below it, the packets are as fast).
pub const DIRECT_MIN_BYTES: usize = 2048;

/// A length word: `len` (bytes of a streamed input, elements of an
/// out-buffer), with [`DIRECT`] set when the slice goes by address.
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::call::{len_word, split_len_word};
/// assert_eq!(split_len_word(len_word(4096, true)), (4096, true));
/// assert_eq!(split_len_word(len_word(7, false)), (7, false));
/// ```
pub const fn len_word(len: u64, direct: bool) -> u64 {
    len | if direct { DIRECT } else { 0 }
}

/// The length and the direct bit of a length word.
pub const fn split_len_word(word: u64) -> (u64, bool) {
    (word & !DIRECT, word & DIRECT != 0)
}

/// Whether this lane's slice of `bytes` bytes at `ptr` goes by address: long
/// enough, laid out as encoded (`raw`), and in memory this lane's server can
/// copy (see [the direct path](self#the-direct-path)). Generated stubs ask
/// once per call and slice and pass the answer on.
#[inline(always)]
pub fn direct(ptr: *const u8, bytes: usize, raw: bool) -> bool {
    raw && bytes >= DIRECT_MIN_BYTES && server_can_copy(ptr)
}

/// Whether the server can copy memory at `ptr` by address. On NVPTX: global
/// memory (not the stack, shared or constant memory), unless the kernel
/// turned the direct path off ([`set_direct`]).
#[cfg(target_arch = "nvptx64")]
#[inline(always)]
fn server_can_copy(ptr: *const u8) -> bool {
    let global: u32;
    // SAFETY: `isspacep` only classifies the address; nothing is read.
    unsafe {
        core::arch::asm!(
            "{{ .reg .pred p; isspacep.global p, {a}; selp.u32 {r}, 1, 0, p; }}",
            a = in(reg64) ptr as u64,
            r = out(reg32) global,
            options(pure, nomem, nostack, preserves_flags)
        )
    };
    // Relaxed: a switch the kernel sets before its calls; a lane that read
    // the old value still makes a valid call (the server takes both kinds).
    global != 0 && !DIRECT_OFF.load(core::sync::atomic::Ordering::Relaxed)
}

/// The kernel turned the direct path off ([`set_direct`]).
#[cfg(target_arch = "nvptx64")]
static DIRECT_OFF: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// On AMDGCN no backend copies by address yet (the HSA backend's server has
/// no [`DeviceMemory`](crate::device_memory::DeviceMemory)).
#[cfg(target_arch = "amdgpu")]
#[inline(always)]
fn server_can_copy(_ptr: *const u8) -> bool {
    false
}

/// On the host: lanes the CPU backend runs, whose server reads this
/// process's memory ([`set_direct`]); other threads keep the packets.
#[cfg(all(not(any(target_arch = "nvptx64", target_arch = "amdgpu")), feature = "std"))]
#[inline(always)]
fn server_can_copy(_ptr: *const u8) -> bool {
    DIRECT_LANE.with(|d| d.get())
}

#[cfg(all(not(any(target_arch = "nvptx64", target_arch = "amdgpu")), not(feature = "std")))]
#[inline(always)]
fn server_can_copy(_ptr: *const u8) -> bool {
    false
}

#[cfg(all(not(any(target_arch = "nvptx64", target_arch = "amdgpu")), feature = "std"))]
std::thread_local! {
    static DIRECT_LANE: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
}

/// Turn [the direct path](self#the-direct-path) on or off for the calls
/// that follow: off, every slice goes in packets (to compare, or for a
/// server without [`DeviceMemory`](crate::device_memory::DeviceMemory)).
///
/// * On NVPTX it is on by default and the switch is the module's: it holds
///   for every thread of every launch of the kernel image until set again
///   (set it at the start of the kernel; a call decides once, when it
///   starts, so a switch in the middle of one cannot split it).
/// * On the host it is the calling thread's, off by default: the CPU
///   backend turns it on for the lanes it runs (their server copies with
///   the process's memory); tests that serve with a `DeviceMemory` of their
///   own turn it on too.
/// * On AMDGCN it does nothing yet (no backend copies by address).
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// gpu_rpc::call::set_direct(true);
/// let big = vec![0u8; 1 << 16];
/// assert!(gpu_rpc::call::direct(big.as_ptr(), big.len(), true));
/// gpu_rpc::call::set_direct(false);
/// assert!(!gpu_rpc::call::direct(big.as_ptr(), big.len(), true));
/// ```
#[inline]
pub fn set_direct(on: bool) {
    #[cfg(target_arch = "nvptx64")]
    // Relaxed: see `server_can_copy`.
    DIRECT_OFF.store(!on, core::sync::atomic::Ordering::Relaxed);
    #[cfg(all(not(any(target_arch = "nvptx64", target_arch = "amdgpu")), feature = "std"))]
    DIRECT_LANE.with(|d| d.set(on));
    #[cfg(any(target_arch = "amdgpu", all(not(target_arch = "nvptx64"), not(feature = "std"))))]
    let _ = on;
}

/// Where the first inline stream starts in packet 0's payload (after a
/// `block_len`-byte argument block, at the next multiple of 8 bytes). The one
/// definition of the inline layout, with [`inline_next`]: streams fit when
/// the end after the last is at most [`FIRST_PAYLOAD`].
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::call::{inline_next, inline_start, FIRST_PAYLOAD};
/// // `print(&str)`: an 8-byte block (the length), then up to 48 bytes.
/// assert_eq!(inline_start(8), 8);
/// assert_eq!(inline_next(inline_start(8), 48), FIRST_PAYLOAD);
/// assert_eq!(inline_next(inline_start(12), 5), 24);
/// ```
pub const fn inline_start(block_len: usize) -> usize {
    block_len.next_multiple_of(8)
}

/// Where the inline stream after one of `len` bytes at `start` begins.
pub const fn inline_next(start: usize, len: usize) -> usize {
    (start + len).next_multiple_of(8)
}

/// Packets after packet 0 needed for `len` bytes whose first
/// [`FIRST_PAYLOAD`] bytes ride in packet 0.
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::call::spill_packets;
/// assert_eq!(spill_packets(56), 0);
/// assert_eq!(spill_packets(57), 1);
/// assert_eq!(spill_packets(56 + 128), 2);
/// ```
pub const fn spill_packets(len: usize) -> u64 {
    len.saturating_sub(FIRST_PAYLOAD).div_ceil(BUFFER_BYTES) as u64
}

/// Packets of a dense byte stream of `bytes` bytes.
pub const fn stream_packets(bytes: u64) -> u64 {
    bytes.div_ceil(BUFFER_BYTES as u64)
}

/// Packets of an out-buffer of `count` elements of `elem_size` bytes (whole
/// elements per packet).
pub const fn out_packets(count: u64, elem_size: u32) -> u64 {
    let per = (BUFFER_BYTES / elem_size as usize) as u64;
    count.div_ceil(per)
}

/// Copy `block[..]` into the payload of packet `i` of a frame or reply (`i =
/// 0` is packet 0, which starts after the first word). Used by both sides
/// (and by tests that play a device).
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::call::{fill_block, read_block};
/// use gpu_rpc::protocol::Buffer;
/// let block: Vec<u8> = (0..100).collect();
/// let (mut p0, mut p1) = (Buffer::default(), Buffer::default());
/// fill_block(0, &block, &mut p0);
/// fill_block(1, &block, &mut p1);
/// let mut back = vec![0u8; 100];
/// read_block(0, &p0, &mut back);
/// read_block(1, &p1, &mut back);
/// assert_eq!(back, block);
/// ```
#[inline(always)]
pub fn fill_block(i: u64, block: &[u8], b: &mut Buffer) {
    let (start, first_word) = if i == 0 {
        (0, 1)
    } else {
        (FIRST_PAYLOAD + (i as usize - 1) * BUFFER_BYTES, 0)
    };
    // Every packet's share of the block starts at a multiple of 8 bytes, so
    // an aligned block ([`Block`]) moves a word at a time.
    if let (Some(src), Some(dst)) = (block.get(start..), b.data.get_mut(first_word..)) {
        copy_into_words(src, dst);
    }
}

/// Copy the payload of packet `i` into `block` (the inverse of
/// [`fill_block`]).
#[inline(always)]
pub fn read_block(i: u64, b: &Buffer, block: &mut [u8]) {
    let (start, first_word) = if i == 0 {
        (0, 1)
    } else {
        (FIRST_PAYLOAD + (i as usize - 1) * BUFFER_BYTES, 0)
    };
    if let (Some(dst), Some(src)) = (block.get_mut(start..), b.data.get(first_word..)) {
        copy_from_words(src, dst);
    }
}

/// The runtime's no-op call.
pub static NOOP_DESC: CallDesc = CallDesc {
    service: "gpu_rpc",
    method: "noop",
    opcode: crate::protocol::opcodes::NOOP,
    signature: 0x6e6f_6f70,
    reply: true,
    in_streams: 0,
    out_elem_sizes: &[],
    arg_bytes: 8,
    ret_bytes: 8,
};

/// Copy `src` into the little-endian words `dst` (as many bytes as both
/// hold): whole `u64`s when `src` is 8-byte aligned (NVPTX has no unaligned
/// loads, so a byte-wise copy of a packet is 64 loads the scheduler keeps in
/// flight together: registers), else bytes. Panic-free, so the panic
/// handler's report path, which uses it, cannot re-enter the handler.
#[inline(always)]
pub fn copy_into_words(src: &[u8], dst: &mut [u64]) {
    let n = src.len().min(8 * dst.len());
    let p = src.as_ptr();
    let mut k = 0;
    if (p as usize).is_multiple_of(8) {
        for (w, slot) in dst.iter_mut().enumerate().take(n / 8) {
            // SAFETY: `8 * (w + 1) <= n <= src.len()` and `p + 8 * w` is
            // 8-aligned (`p` is): an in-bounds aligned `u64` read.
            *slot = u64::from_le(unsafe { (p.add(8 * w) as *const u64).read() });
        }
        k = n / 8 * 8;
    }
    for (i, s) in src.iter().enumerate().take(n).skip(k) {
        if let Some(w) = dst.get_mut(i / 8) {
            let shift = 8 * (i % 8);
            *w = (*w & !(0xff << shift)) | (*s as u64) << shift;
        }
    }
}

/// Copy the little-endian words `src` into `dst` (as many bytes as both
/// hold): the inverse of [`copy_into_words`], likewise panic-free.
#[inline(always)]
pub fn copy_from_words(src: &[u64], dst: &mut [u8]) {
    let n = dst.len().min(8 * src.len());
    let p = dst.as_mut_ptr();
    let mut k = 0;
    if (p as usize).is_multiple_of(8) {
        for (w, word) in src.iter().enumerate().take(n / 8) {
            // SAFETY: `8 * (w + 1) <= n <= dst.len()` and `p + 8 * w` is
            // 8-aligned: an in-bounds aligned `u64` write to memory `dst`
            // borrows uniquely.
            unsafe { (p.add(8 * w) as *mut u64).write(word.to_le()) };
        }
        k = n / 8 * 8;
    }
    for (i, d) in dst.iter_mut().enumerate().take(n).skip(k) {
        if let Some(w) = src.get(i / 8) {
            *d = (w >> (8 * (i % 8))) as u8;
        }
    }
}

/// A call's argument block or return value buffer: bytes, 8-byte aligned so
/// that they move to and from packets a word at a time (see
/// [`copy_into_words`]). Generated stubs build one per call.
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// let mut b = gpu_rpc::call::Block([0u8; 12]);
/// b[..4].copy_from_slice(&7u32.to_le_bytes());
/// assert_eq!(b.as_ptr() as usize % 8, 0);
/// ```
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block<const N: usize>(pub [u8; N]);

impl<const N: usize> core::ops::Deref for Block<N> {
    type Target = [u8];
    #[inline(always)]
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl<const N: usize> core::ops::DerefMut for Block<N> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

/// Panics (at compile time in a `const`) if two of the opcode lists share an
/// opcode. `no_std`, so the crate that defines the traits (shared by kernels
/// and host) can check that the services it serves together never collide:
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// // In a shared `no_std` crate, next to `#[gpu_rpc] pub trait A` and `B`:
/// // const _: () = gpu_rpc::assert_disjoint_opcodes(&[ARpc::OPCODES, BRpc::OPCODES]);
/// const _: () = gpu_rpc::assert_disjoint_opcodes(&[&[0x10100, 0x10101], &[0x10102]]);
/// ```
///
/// A collision fails the build (`evaluation of constant value failed ...
/// two services share an opcode`).
pub const fn assert_disjoint_opcodes(lists: &[&[u32]]) {
    let mut a = 0;
    while a < lists.len() {
        let mut b = a + 1;
        while b < lists.len() {
            let mut i = 0;
            while i < lists[a].len() {
                let mut j = 0;
                while j < lists[b].len() {
                    assert!(lists[a][i] != lists[b][j], "gpu_rpc: two services share an opcode");
                    j += 1;
                }
                i += 1;
            }
            b += 1;
        }
        a += 1;
    }
}
