//! The client's half of the call frame (the server's is
//! `server/serve_call.rs`): open a port for a call, send the frame (with a
//! short stream inline when it fits), stream the inputs, wait for the reply,
//! take the out-buffers, close; and what a failed call does on the device.

use super::*;
use crate::lanes;
use crate::protocol::{Client, ClientSide, Fresh, Port, Received, Sent};

/// A call in progress on the client, after its frame was sent. Generated
/// stubs drive it: [`stream`](Self::stream) each input, then
/// [`reply`](Self::reply) (or [`finish_async`](Self::finish_async)),
/// [`ClientReply::out`] each out-buffer and [`ClientReply::close`].
#[must_use = "a call must be finished with `close()` or `finish_async()`"]
pub struct ClientCall<'p, 'a> {
    port: Port<'p, 'a, ClientSide, Sent>,
    desc: &'static CallDesc,
    /// The streams went inline with the frame.
    inlined: bool,
}

/// A call after its reply arrived.
#[must_use = "a call must be finished with `close()`"]
pub struct ClientReply<'p, 'a> {
    port: Port<'p, 'a, ClientSide, Received>,
    status: Status,
    detail: u32,
    desc: &'static CallDesc,
}

impl<'a> Client<'a> {
    /// Run `f`, which makes the call `desc` (from [`begin`](Self::begin) to
    /// `close`), such that the lanes running it together all make this call
    /// on this client: [`lanes::split_by`] keyed by [`CallDesc::group_key`]
    /// and by [`Client::id`]. Generated stubs wrap every call in it; needed
    /// on AMDGCN, free elsewhere.
    #[inline(always)]
    pub fn call<R>(&self, desc: &'static CallDesc, mut f: impl FnMut() -> R) -> R {
        let id = self.id();
        lanes::split_by(desc.group_key(), || lanes::split_by(id, &mut f))
    }

    /// Start the call `desc`: open a port for its opcode (grouping this lane
    /// with the active lanes making the same call) and send the frame with
    /// `block` (this lane's argument block, `desc.block_len()` bytes).
    #[inline]
    pub fn begin<'p>(&'p self, desc: &'static CallDesc, block: &[u8]) -> ClientCall<'p, 'a> {
        debug_assert_eq!(block.len(), desc.block_len());
        let port = self.open_keyed(desc.opcode, desc.group_key(), lanes::warp_hint());
        send_frame::<u8>(port, desc, block, &[], false)
    }

    /// [`begin`](Self::begin) for a method with one streamed input, given
    /// this lane's `items`: when every lane of the group has items that fit
    /// in packet 0 after the block (a ballot decides, so the group agrees),
    /// they go inline with the frame, one packet in all, and the
    /// [`stream`](ClientCall::stream) call that follows sends nothing.
    /// Otherwise the same as `begin`. (Methods with several streams use
    /// `begin`: every inlined copy of this costs the kernel stack.)
    #[inline]
    pub fn begin_inline<'p, T: Wire>(
        &'p self,
        desc: &'static CallDesc,
        block: &[u8],
        items: &[T],
    ) -> ClientCall<'p, 'a> {
        debug_assert_eq!(block.len(), desc.block_len());
        let port = self.open_keyed(desc.opcode, desc.group_key(), lanes::warp_hint());
        let len = items.len() * T::SIZE;
        let end = inline_next(inline_start(block.len()), len.min(FIRST_PAYLOAD));
        let fits = len <= FIRST_PAYLOAD && end <= FIRST_PAYLOAD;
        // Every lane of the group must agree: if one does not fit, all send
        // their streams in packets. (One send either way: each inlined copy
        // of a send costs the kernel a packet buffer of stack.)
        let inline = lanes::ballot(port.lane_mask(), !fits) == 0;
        send_frame(port, desc, block, items, inline)
    }

    /// Make the runtime's no-op call (opcode [`NOOP`](crate::protocol::opcodes::NOOP))
    /// with one `u64` in and out: the host answers `x + 1`. The null round
    /// trip of the benchmarks.
    #[inline]
    pub fn noop(&self, x: u64) -> Result<u64, CallError> {
        self.call(&NOOP_DESC, || {
            let call = self.begin(&NOOP_DESC, &Block(x.to_le_bytes()));
            let mut ret = Block([0u8; 8]);
            let reply = call.reply(&mut ret);
            let r = reply.result().map(|()| u64::from_le_bytes(ret.0));
            reply.close();
            r
        })
    }
}

/// Send the frame of the call `desc` on a port just opened: the frame word
/// and `block` in packet 0 (and in spill packets past it), or, if `inline`
/// (the group agreed that every lane's `items` fit), the word saying so, the
/// block and the items, all in packet 0. The one place the client lays out
/// a frame; [`Client::begin`] is this without items.
#[inline(always)]
fn send_frame<'p, 'a, T: Wire>(
    port: Port<'p, 'a, ClientSide, Fresh>,
    desc: &'static CallDesc,
    block: &[u8],
    items: &[T],
    inline: bool,
) -> ClientCall<'p, 'a> {
    let word = FrameWord {
        inline_streams: inline,
        ..desc.frame_word()
    }
    .pack();
    // (The items fit when `inline`; the `min` says so to the compiler, which
    // otherwise keeps 96-144 more bytes of stack in kernels that inline.)
    let words = if inline {
        1 + inline_next(inline_start(block.len()), (items.len() * T::SIZE).min(FIRST_PAYLOAD)).div_ceil(8)
    } else {
        1 + block.len().min(FIRST_PAYLOAD).div_ceil(8)
    };
    let port = port.send_words(words, |b| {
        b.data[0] = word;
        fill_block(0, block, b);
        if inline {
            put_inline(items, inline_start(block.len()), b);
        }
    });
    let spill = if inline { 0 } else { spill_packets(block.len()) };
    let port = port.send_packets(spill, |i, b| fill_block(i + 1, block, b));
    ClientCall {
        port,
        desc,
        inlined: inline,
    }
}

/// Whether this lane's `items` take [the direct path](super#the-direct-path):
/// only elements whose bytes are their encoding and every byte pattern a
/// value ([`bytes_are_values`](crate::wire::bytes_are_values)), since the
/// host writes an out-buffer's encoded bytes straight into them.
#[inline(always)]
pub fn direct_items<T: Wire>(items: &[T]) -> bool {
    direct(
        items.as_ptr().cast(),
        items.len() * T::SIZE,
        crate::wire::bytes_are_values::<T>(),
    )
}

/// The length word of a streamed input: its bytes, and whether it goes by
/// address (`direct`, from [`direct_items`], decided once per call).
/// Generated stubs write it into the argument block.
#[inline(always)]
pub fn stream_len_word<T: Wire>(items: &[T], direct: bool) -> u64 {
    len_word((items.len() * T::SIZE) as u64, direct)
}

/// The length word of an out-buffer: its elements, and whether it goes by
/// address.
#[inline(always)]
pub fn out_len_word<T: Wire>(out: &[T], direct: bool) -> u64 {
    len_word(out.len() as u64, direct)
}

impl<'p, 'a> ClientCall<'p, 'a> {
    /// Stream this lane's `items` (after the frame, in argument order) in
    /// packets, for a length word written without [`DIRECT`].
    #[inline]
    pub fn stream<T: Wire>(self, items: &[T]) -> Self {
        self.stream_with(items, false)
    }

    /// Stream this lane's `items`: their address if `by_address` (the
    /// decision the length word carries), else the elements.
    #[inline]
    pub fn stream_with<T: Wire>(self, items: &[T], by_address: bool) -> Self {
        if self.inlined {
            return self;
        }
        let bytes = (items.len() * T::SIZE) as u64;
        let raw = T::slice_as_bytes(items);
        let packets = if by_address { 1 } else { stream_packets(bytes) };
        let port = self.port.send_packets(packets, |i, b| {
            if by_address {
                b.data[0] = items.as_ptr() as u64;
                return;
            }
            let start = i as usize * BUFFER_BYTES;
            let end = (start + BUFFER_BYTES).min(bytes as usize);
            // `get`: `start < end <= bytes` whenever `fill` runs, but the
            // compiler cannot see it, and a panic branch here would put a
            // cycle (panic handler -> report -> stream -> panic) in the call
            // graph of every kernel, which costs ptxas's worst-case registers.
            match raw {
                Some(r) => {
                    if let Some(src) = r.get(start..end) {
                        copy_into_words(src, &mut b.data)
                    }
                }
                None => {
                    if let Some(dst) = b.bytes_mut().get_mut(..end - start) {
                        encode_range(items, start, dst)
                    }
                }
            }
        });
        ClientCall {
            port,
            desc: self.desc,
            inlined: false,
        }
    }

    /// Send the address of this lane's out-buffer `out` if `by_address`
    /// (the decision its length word carries; nothing otherwise), after the
    /// streams, for each out-buffer in argument order: the host stores the
    /// results there before it replies.
    #[inline]
    pub fn out_address<T: Wire>(self, out: &mut [T], by_address: bool) -> Self {
        let at = out.as_mut_ptr() as u64;
        let port = self.port.send_packets(by_address as u64, |_, b| b.data[0] = at);
        ClientCall {
            port,
            desc: self.desc,
            inlined: self.inlined,
        }
    }

    /// Finish a fire-and-forget call without waiting for the host.
    #[inline]
    pub fn finish_async(self) {
        self.port.close()
    }

    /// Wait for the reply: this lane's status, and the encoded return value in
    /// `ret` (`desc.ret_bytes` bytes).
    #[inline]
    pub fn reply(self, ret: &mut [u8]) -> ClientReply<'p, 'a> {
        let mut word = 0u64;
        let words = 1 + ret.len().min(FIRST_PAYLOAD).div_ceil(8);
        let (port, inline) = self.port.recv_reply_words(words, |b| {
            word = b.data[0];
            read_block(0, b, ret);
        });
        if let Some(value) = inline {
            // Every lane `Ok` (status word 0) with this value as the return
            // value's bytes (`call::inline_reply`).
            for (i, r) in ret.iter_mut().enumerate() {
                *r = (value as u64).checked_shr(8 * i as u32).unwrap_or(0) as u8;
            }
        }
        // A call the server refused as a whole (it could not trust or did not
        // know the frame) is answered with packet 0 only.
        let refused = matches!(
            Status::from_u32(word as u32),
            Status::UnknownOpcode | Status::SignatureMismatch | Status::BadFrame | Status::InvalidLaneMask
        );
        // An inline reply has no spill packets, whatever this side's
        // `ret.len()` (a server sending one for a longer value would
        // otherwise leave the client waiting for packets that never come).
        let spill = if refused || inline.is_some() {
            0
        } else {
            spill_packets(ret.len())
        };
        let port = port.recv_packets(spill, |i, b| read_block(i + 1, b, ret));
        ClientReply {
            port,
            status: Status::from_u32(word as u32),
            detail: (word >> 32) as u32,
            desc: self.desc,
        }
    }
}

/// Write `items`, encoded, at byte `at` of packet 0's payload (`at` a
/// multiple of 8, from [`inline_start`]/[`inline_next`]).
#[inline(always)]
fn put_inline<T: Wire>(items: &[T], at: usize, b: &mut Buffer) {
    match T::slice_as_bytes(items) {
        Some(raw) => {
            if let Some(dst) = b.data.get_mut(1 + at / 8..) {
                copy_into_words(raw, dst)
            }
        }
        None => {
            let len = items.len() * T::SIZE;
            if let Some(dst) = b.bytes_mut().get_mut(8 + at..8 + at + len) {
                encode_range(items, 0, dst)
            }
        }
    }
}

/// Encode the bytes `[start, start + dst.len())` of the dense encoding of
/// `items` into `dst` (elements may straddle packets).
#[inline(always)]
fn encode_range<T: Wire>(items: &[T], start: usize, dst: &mut [u8]) {
    let size = T::SIZE;
    let end = start + dst.len();
    let mut e = start / size;
    let mut tmp = [0u8; 256];
    while e * size < end && e < items.len() {
        let es = e * size;
        if size <= tmp.len() {
            items[e].encode(&mut tmp[..size]);
            let from = start.max(es);
            let to = end.min(es + size);
            dst[from - start..to - start].copy_from_slice(&tmp[from - es..to - es]);
        }
        e += 1;
    }
}

impl<'p, 'a> ClientReply<'p, 'a> {
    /// This lane's status.
    pub fn status(&self) -> Status {
        self.status
    }

    /// `Ok(())` or this lane's error.
    pub fn result(&self) -> Result<(), CallError> {
        match self.status {
            Status::Ok => Ok(()),
            status => Err(CallError {
                status,
                detail: self.detail,
                desc: self.desc,
            }),
        }
    }

    /// Receive the next out-buffer into `out` (only lanes whose call succeeded
    /// receive; the others keep their buffer unchanged), for a call that
    /// sent it in packets.
    #[inline]
    pub fn out<T: Wire>(self, out: &mut [T]) -> Self {
        self.out_with(out, false)
    }

    /// [`out`](Self::out), for an out-buffer that went direct if
    /// `by_address`: the host stored the results before the reply, and
    /// nothing is received.
    #[inline]
    pub fn out_with<T: Wire>(self, out: &mut [T], by_address: bool) -> Self {
        let ok = self.status == Status::Ok && !by_address;
        let size = T::SIZE;
        let per = BUFFER_BYTES / size;
        let packets = if ok {
            out_packets(out.len() as u64, size as u32)
        } else {
            0
        };
        let ClientReply {
            port,
            status,
            detail,
            desc,
        } = self;
        let port = match T::slice_as_bytes_mut(out) {
            Some(raw) => port.recv_packets(packets, |i, b| {
                let start = i as usize * BUFFER_BYTES;
                let n = (raw.len() - start).min(BUFFER_BYTES);
                if let Some(dst) = raw.get_mut(start..start + n) {
                    copy_from_words(&b.data, dst);
                }
            }),
            None => port.recv_packets(packets, |i, b| {
                let first = i as usize * per;
                for (k, slot) in out.iter_mut().skip(first).take(per).enumerate() {
                    if let Ok(v) = T::decode(&b.bytes()[k * size..(k + 1) * size]) {
                        *slot = v;
                    }
                }
            }),
        };
        ClientReply {
            port,
            status,
            detail,
            desc,
        }
    }

    /// Close the port.
    #[inline]
    pub fn close(self) {
        self.port.close()
    }
}

/// Called by generated stubs when a call fails and the caller used the
/// panicking form: panics at the caller's location (the stubs are
/// `#[track_caller]`). On the host the message is the error's `Display`
/// (service, method, opcode, status). On a GPU it is a literal naming the
/// status, so that a panic handler without `core::fmt` (the standard one)
/// reports it whole; the caller's file and line name the call.
#[cold]
#[inline(never)]
#[track_caller]
pub fn fail(err: CallError) -> ! {
    #[cfg(not(any(target_arch = "nvptx64", target_arch = "amdgpu")))]
    panic!("{}", err);
    #[cfg(any(target_arch = "nvptx64", target_arch = "amdgpu"))]
    match err.status {
        Status::Ok => panic!("gpu_rpc: call failed with status ok"),
        Status::UnknownOpcode => panic!("gpu_rpc: call failed: unknown opcode: no service on the host handles it"),
        Status::SignatureMismatch => {
            panic!("gpu_rpc: call failed: signature mismatch: host and kernel were built from different definitions")
        }
        Status::HandlerPanicked => panic!("gpu_rpc: call failed: the host implementation panicked"),
        Status::InvalidArgument => panic!("gpu_rpc: call failed: invalid argument"),
        Status::TooLarge => panic!("gpu_rpc: call failed: argument over the server's size limit"),
        Status::BadFrame => panic!("gpu_rpc: call failed: malformed call frame"),
        Status::InvalidLaneMask => panic!("gpu_rpc: call failed: invalid lane mask"),
        Status::Unknown => panic!("gpu_rpc: call failed: unknown status"),
    }
}

/// End this lane after a `-> !` method returned from the host.
#[inline(always)]
pub fn halt() -> ! {
    lanes::halt()
}
