//! The server's half of the call frame (the client's is `call/client.rs`): decode
//! a frame and its streams from every lane of a port, run the call, send the
//! statuses, return values and out-buffers; and the per-thread scratch
//! buffers that keep this allocation-free in the steady state.

use std::cell::{Cell, RefCell};

use super::direct::set_address;
use super::lane_records::LaneRecords;
use super::server_call::panic_message;
use super::spare::{Spare, SPARE_MIN_BYTES};
use super::*;

impl Dispatcher {
    pub(super) fn serve_decoded(
        &self,
        port: Port<'_, '_, ServerSide, Fresh>,
        memory: Option<&dyn DeviceMemory>,
        method: Option<(usize, usize, &'static MethodInfo)>,
        record: &mut CallRecord,
        scratch: &mut Scratch,
    ) -> Result<(), Abandoned> {
        let Scratch {
            blocks,
            streams,
            rets,
            outs,
            addrs,
            spare,
            status,
            detail,
            grown: grown_lanes,
            // `trim`'s own bookkeeping.
            lane_bytes: _,
        } = scratch;
        let index = port.index();
        let opcode = port.opcode();
        let raw_mask = port.peer_mask();
        // Only lanes the layout has are ever read or written.
        let lanes = port.lanes();
        let method_name = method.map(|(_, _, info)| info.path);

        // Frame packet: the frame word first (the first lane's, and the
        // first lane that disagrees with it, if one does; the lanes come in
        // order); the rest of packet 0 is read once the frame is known to be
        // good, straight into the argument blocks.
        let first_lane = lanes.trailing_zeros();
        let mut word = 0;
        let mut disagrees = None;
        let port = port.recv_each_word(0..1, |lane, _, v| {
            if lane == first_lane {
                word = v;
            } else if v != word && disagrees.is_none() {
                debug_assert!(lane > first_lane, "the row's lanes come in order");
                disagrees = Some((lane, v));
            }
        })?;
        let frame = FrameWord::unpack(word);
        let bad = if raw_mask == 0 {
            Some((Status::InvalidLaneMask, "empty lane mask".to_string()))
        } else if raw_mask != lanes {
            Some((
                Status::InvalidLaneMask,
                format!(
                    "lane mask {raw_mask:#x} names lanes the layout lacks ({:#x})",
                    raw_mask & !lanes
                ),
            ))
        } else if frame.version != FRAME_VERSION {
            Some((
                Status::BadFrame,
                format!(
                    "frame version {} (expected {FRAME_VERSION}) in frame word {word:#018x}",
                    frame.version
                ),
            ))
        } else if frame.inline_streams && (frame.in_streams == 0 || frame.block_len() > call::FIRST_PAYLOAD) {
            Some((
                Status::BadFrame,
                format!(
                    "frame word {word:#018x} announces inline streams, but the call has {} streamed inputs and a \
                     {}-byte argument block (packet 0 holds {})",
                    frame.in_streams,
                    frame.block_len(),
                    call::FIRST_PAYLOAD
                ),
            ))
        } else {
            disagrees.map(|(l, v)| {
                (
                    Status::BadFrame,
                    format!("lanes disagree on the frame word (lane {first_lane}: {word:#018x}, lane {l}: {v:#018x})"),
                )
            })
        };
        if let Some((status, message)) = bad {
            // The frame cannot be trusted, not even its reply bit or the
            // packet counts it announces: answer every lane with the error
            // (one packet) and hand the port back. A client that was still
            // sending overwrites the answer with its next packet, which
            // arrives as a new (equally bad) frame; the client reads the error
            // when it finally waits for a reply.
            self.whole_call_error(
                opcode,
                method_name,
                index,
                status,
                format!("{message}; lanes {lanes:#x} answered {status:?}"),
            );
            let port = port.send_words(1, |_, b| b.data[0] = status as u32 as u64)?;
            port.close();
            for _ in iter_lanes(lanes) {
                record.lane(status);
            }
            record.bytes_in = 8 * lanes.count_ones() as u64;
            return Ok(());
        }

        // Which method, and does the device's frame match it exactly?
        let desc: Option<&'static CallDesc> = match method {
            Some((_, _, info)) => Some(info.desc),
            None if opcode == opcodes::NOOP => Some(&call::NOOP_DESC),
            None => None,
        };
        let call_status = match desc {
            None => Some((
                Status::UnknownOpcode,
                format!(
                    "unknown opcode: no service on this server handles it; lanes {lanes:#x} answered UnknownOpcode"
                ),
            )),
            // Inline streams are the client's choice per call, not part of
            // the method's signature.
            Some(d)
                if d.frame_word()
                    != FrameWord {
                        inline_streams: false,
                        ..frame
                    } =>
            {
                Some((
                    Status::SignatureMismatch,
                    format!(
                        "frame word {word:#018x} from the device, {:#018x} here (signature {:#010x} vs {:#010x}): host and \
                         kernel were built from different definitions of {}; lanes {lanes:#x} answered SignatureMismatch",
                        d.frame_word().pack(),
                        frame.signature,
                        d.signature,
                        method_name.unwrap_or("gpu_rpc::noop"),
                    ),
                    ))
            }
            Some(_) => None,
        };
        // From here on the frame word is well formed and the same on every
        // lane, so the packet counts it announces are what the client sends:
        // they are consumed whatever happens, which keeps both sides in step.
        let accepted = call_status.is_none();
        status.fill(Status::Ok);
        detail.fill(0);
        if let Some((s, message)) = call_status {
            for lane in iter_lanes(lanes) {
                status[lane as usize] = s;
            }
            self.whole_call_error(opcode, method_name, index, s, message);
        }

        // Rest of the argument block. A refused call keeps only the stream
        // lengths (at most 112 bytes a lane); its arguments are consumed
        // unread.
        let n_in = frame.in_streams as usize;
        let n_out = frame.out_streams as usize;
        let block_len = frame.block_len();
        let keep = if accepted {
            block_len
        } else {
            call::lengths_bytes(n_in, n_out)
        };
        blocks.reset(keep, lanes);
        // Only as much of packet 0 as the frame announces (never more than
        // the packet).
        let packet0_words = 1 + block_len.min(call::FIRST_PAYLOAD).div_ceil(8);
        port.reread_each_word(1..packet0_words, |lane, w, v| blocks.set_word(lane, w - 1, v));
        let port = port.recv_packets(call::spill_packets(block_len), |lane, i, b| {
            call::read_block(i + 1, b, blocks.get_mut(lane))
        })?;
        let lens = |lane: u32, i: usize| lens_of(blocks.get(lane), i);
        let direct = |lane: u32, i: usize| direct_of(blocks.get(lane), i);

        // Size limits on streamed inputs and out-buffers (checked before
        // anything is allocated for them): each buffer against the per-lane
        // limit, then the call's lanes, in order, against its budget.
        let limit = self.config.max_stream_bytes;
        let budget = self.config.max_call_bytes;
        // Answer `lane` with `refusal` (about argument `what`) and log why.
        let refuse =
            |lane: u32, refusal: Status, what: u32, message: String, status: &mut [Status], detail: &mut [u32]| {
                status[lane as usize] = refusal;
                detail[lane as usize] = what;
                self.record(ServerError {
                    opcode,
                    method: method_name,
                    port: index,
                    lane: Some(lane),
                    status: refusal,
                    message,
                });
            };
        // A call without streams or out-buffers has nothing to check (and
        // nothing to store below): its lanes are skipped.
        let streamed = n_in + n_out > 0;
        let with_streams = if streamed { lanes } else { 0 };
        *grown_lanes = with_streams;
        let mut committed = 0u64;
        for lane in iter_lanes(with_streams) {
            let l = lane as usize;
            let mut wants = 0u64;
            for i in 0..n_in {
                let len = lens(lane, i);
                wants = wants.saturating_add(len);
                if len > limit && status[l] == Status::Ok {
                    let message = format!("streamed argument {i} is {len} bytes, over the limit of {limit}");
                    refuse(lane, Status::TooLarge, i as u32, message, status, detail);
                }
            }
            if let (true, Some(d)) = (accepted, desc) {
                for (j, &es) in d.out_elem_sizes.iter().enumerate() {
                    let count = lens(lane, n_in + j);
                    let bytes = count.saturating_mul(es as u64);
                    wants = wants.saturating_add(bytes);
                    if bytes > limit && status[l] == Status::Ok {
                        let message =
                            format!("out-buffer {j} of {count} elements is {bytes} bytes, over the limit of {limit}");
                        refuse(lane, Status::TooLarge, (n_in + j) as u32, message, status, detail);
                    }
                }
            }
            if status[l] == Status::Ok {
                if committed.saturating_add(wants) > budget {
                    let message = format!(
                        "the lane's streams and out-buffers ({wants} bytes) would take the call past \
                         its budget of {budget} bytes (max_call_bytes; {committed} taken by earlier lanes)"
                    );
                    refuse(lane, Status::TooLarge, u32::MAX, message, status, detail);
                } else {
                    committed += wants;
                }
            }
        }

        // Streams: consumed for every lane (the client loops over all of
        // them), stored only for lanes still Ok. Storage grows with the data
        // that actually arrives and never beyond the declared length.
        let mut port = port;
        if accepted {
            for lane in iter_lanes(with_streams) {
                let s = &mut streams[lane as usize];
                if s.len() < n_in {
                    s.resize_with(n_in, Vec::new);
                }
            }
        }
        if frame.inline_streams {
            // Packet 0 is still the port's packet (the frame check above
            // rules out spill packets): each lane's streams follow its block,
            // and a lane whose lengths run past the packet is refused.
            port.reread(BUFFER_BYTES / 8, |lane, b| {
                let l = lane as usize;
                if status[l] != Status::Ok {
                    return;
                }
                let mut at = call::inline_start(block_len);
                for i in 0..n_in {
                    let len = lens(lane, i);
                    let end = (at as u64).saturating_add(len);
                    let wrong = if direct(lane, i) {
                        Some("is marked direct (sent by address)".to_string())
                    } else if end > call::FIRST_PAYLOAD as u64 {
                        Some(format!(
                            "ends at byte {end} of packet 0's payload, which holds {}",
                            call::FIRST_PAYLOAD
                        ))
                    } else {
                        None
                    };
                    if let Some(why) = wrong {
                        let message = format!("inline streamed argument {i} {why}");
                        refuse(lane, Status::InvalidArgument, i as u32, message, status, detail);
                        return;
                    }
                    if let Some(s) = streams[l].get_mut(i) {
                        s.extend_from_slice(&b.bytes()[8 + at..8 + end as usize]);
                    }
                    at = call::inline_next(at, len as usize);
                }
            });
        } else {
            // `i` indexes the lanes' lengths, addresses and buffers alike.
            #[allow(clippy::needless_range_loop)]
            for i in 0..n_in {
                // A direct lane sends one packet: its slice's address.
                let packets_of = |lane: u32| {
                    if direct(lane, i) {
                        1
                    } else {
                        call::stream_packets(lens(lane, i))
                    }
                };
                let packets = iter_lanes(lanes).map(packets_of).max().unwrap_or(0);
                port = port.recv_packets(packets, |lane, k, b| {
                    let l = lane as usize;
                    if status[l] != Status::Ok || k >= packets_of(lane) {
                        return;
                    }
                    if direct(lane, i) {
                        set_address(addrs, lane, i, b.data[0]);
                        return;
                    }
                    // `len <= limit` here, and `limit` is a host allocation size.
                    let want = lens(lane, i) as usize;
                    let Some(s) = streams[l].get_mut(i) else { return };
                    let n = want.saturating_sub(s.len()).min(BUFFER_BYTES);
                    if n == 0 {
                        return;
                    }
                    if s.capacity() - s.len() < n {
                        let grow = (want - s.len()).min(s.capacity().max(4096));
                        s.reserve_exact(grow);
                    }
                    s.extend_from_slice(&b.bytes()[..n]);
                })?;
            }
        }

        // The out-buffers' addresses: one packet from each lane whose
        // out-buffer goes direct, consumed whatever the call's fate.
        for j in 0..n_out {
            let packets = iter_lanes(lanes).any(|lane| direct(lane, n_in + j)) as u64;
            port = port.recv_packets(packets, |lane, _, b| {
                if direct(lane, n_in + j) {
                    set_address(addrs, lane, n_in + j, b.data[0]);
                }
            })?;
        }

        // Direct inputs: copied from the device, all lanes' at once (into
        // memory the backend lends for the call, with room for the direct
        // out-buffers, where it can).
        let mut loan = None;
        if let (true, Some(d), true) = (accepted, desc, streamed) {
            loan = self.copy_in(
                ok_mask(lanes, status),
                n_in,
                d.out_elem_sizes,
                blocks,
                addrs,
                memory,
                streams,
                spare,
                &mut |lane, refusal, what, message| refuse(lane, refusal, what, message, status, detail),
            );
        }

        if let (Some(l), false) = (&loan, frame.reply) {
            l.send_none_early();
        }

        // Run the call. A refused call (unknown opcode, signature mismatch)
        // has no return value the client could expect: the reply is packet
        // 0 only.
        let (ret_len, spill) = match desc {
            Some(d) if accepted => (d.ret_bytes as usize, call::spill_packets(d.ret_bytes as usize)),
            _ => (0, 0),
        };
        rets.get_mut().reset(ret_len, lanes);
        // Before dispatch a lane is refused only by the frame checks (then
        // the call is not accepted) or by its streams' and out-buffers'
        // checks and copies: a call without either has every lane still Ok.
        let ok = if accepted && !streamed {
            lanes
        } else {
            ok_mask(lanes, status)
        };
        let mut call = ServerCall {
            lanes,
            ok,
            port: index,
            opcode,
            method: method_name,
            arg_offset: call::lengths_bytes(n_in, n_out),
            blocks,
            streams,
            status,
            detail,
            rets,
            outs,
            spare,
            kept: RefCell::default(),
            touched: Cell::new(0),
            errors: Vec::new(),
            n_in,
            // One thread for each `parallel_min_bytes` the call moves.
            lane_threads: match committed.checked_div(self.config.parallel_min_bytes) {
                Some(n) => self.config.lane_threads.min(n.try_into().unwrap_or(usize::MAX)),
                None => self.config.lane_threads,
            },
            lane_pool: &self.lane_pool,
            stored: Cell::new(0),
            loan,
        };
        if accepted {
            match method {
                Some((s, m, info)) => {
                    let service = &self.services[s];
                    // `ServerCall::run` catches a panicking host method; this
                    // catches a hand-written `dispatch` that panics outside it,
                    // and `call_end` work that the methods left and that panics.
                    let (dispatched, deferred) =
                        call_end::serve(|| catch_unwind(AssertUnwindSafe(|| service.dispatch(m, &mut call))));
                    let panicked = match (dispatched, deferred) {
                        (Err(payload), _) => Some(format!("{} panicked: {}", info.path, panic_message(&*payload))),
                        (Ok(()), Some(msg)) => Some(format!("{} panicked at the call's end: {msg}", info.path)),
                        (Ok(()), None) => None,
                    };
                    if let Some(message) = panicked {
                        let still_ok: Vec<u32> = call.lanes().collect();
                        for lane in still_ok {
                            call.fail(
                                lane,
                                LaneError {
                                    status: Status::HandlerPanicked,
                                    detail: 0,
                                    message: message.clone(),
                                },
                            );
                        }
                    }
                }
                None => {
                    // The runtime's no-op: x + 1.
                    for lane in iter_lanes(call.ok) {
                        match call.arg::<u64>(lane, 0) {
                            Ok(x) => call.set_return(lane, &x.wrapping_add(1)),
                            Err(e) => call.fail(lane, e),
                        }
                    }
                }
            }
        }
        // Direct out-buffers: stored on the device before the reply says so.
        if let (true, true, Some(d), Some(m)) = (accepted, frame.reply, desc, memory) {
            self.copy_out(&mut call, d, addrs, m);
        }
        *grown_lanes |= call.touched.get();
        for e in std::mem::take(&mut call.errors) {
            self.record(e);
        }
        // The lanes still `Ok` are counted at once (`call.ok`: every lane
        // whose status changed since the checks went through `fail`).
        let ok_lanes = call.ok.count_ones() as u64;
        record.lanes(Status::Ok, ok_lanes as u32);
        for lane in iter_lanes(lanes & !call.ok) {
            record.lane(call.status[lane as usize]);
        }
        for lane in iter_lanes(with_streams) {
            let ins: u64 = (0..n_in).map(|i| lens_of(call.blocks.get(lane), i)).sum();
            record.bytes_in += ins;
            if frame.reply && call.ok & 1 << lane != 0 {
                let outs: usize = call.outs.borrow()[lane as usize].iter().map(Vec::len).sum::<usize>()
                    + call.loan.as_ref().map_or(0, |x| x.out_bytes(lane));
                record.bytes_out += outs as u64;
            }
        }
        record.bytes_in += lanes.count_ones() as u64 * (8 + block_len as u64);
        if frame.reply {
            record.bytes_out += ok_lanes * ret_len as u64;
        }
        // The lent memory goes back before the reply: the reply needs none
        // of it (the out-buffers are on the device already), and the
        // device's next call, which another server thread may serve as
        // soon as the reply is out, finds it free.
        drop(call.loan.take());

        if !frame.reply {
            port.close();
            return Ok(());
        }

        // Reply: status + return value (zeros where the method stored none),
        // inline in the outbox word when every lane has the same small one.
        let rets = &*call.rets.borrow();
        // The first word of the return values (most return one word or
        // less), with its per-lane checks made once.
        let first = rets.column(0);
        let words = iter_lanes(call.lanes).map(|lane| first.get(lane));
        let port = match call::inline_reply(call.ok == call.lanes, ret_len, words) {
            Some(value) => port.send_inline(value)?,
            None => {
                let reply_words = 1 + ret_len.min(call::FIRST_PAYLOAD).div_ceil(8);
                port.send_each_word(reply_words, |lane, w| match w {
                    0 => call.status[lane as usize] as u32 as u64 | (call.detail[lane as usize] as u64) << 32,
                    1 => first.get(lane),
                    _ => rets.word(lane, w - 1),
                })?
            }
        };
        let mut port = port.send_packets(spill, |lane, i, b| call::fill_block(i + 1, rets.get(lane), b))?;

        // Out-buffers, for the lanes that succeeded.
        if let (true, Some(d)) = (accepted, desc) {
            for (j, &es) in d.out_elem_sizes.iter().enumerate() {
                let per = BUFFER_BYTES / es as usize;
                let mut packets = 0u64;
                // Lanes that failed, or whose out-buffer went direct, get none.
                let sends = |call: &ServerCall<'_>, lane: u32| {
                    call.status[lane as usize] == Status::Ok && !call.out_direct(lane, j)
                };
                for lane in iter_lanes(lanes) {
                    if sends(&call, lane) {
                        packets = packets.max(call::out_packets(lens_of(call.blocks.get(lane), n_in + j), es));
                    }
                }
                port = port.send_packets(packets, |lane, i, b| {
                    let l = lane as usize;
                    if !sends(&call, lane) {
                        return;
                    }
                    if let Some(data) = call.outs.borrow()[l].get(j) {
                        let start = i as usize * per * es as usize;
                        if start < data.len() {
                            let n = (data.len() - start).min(per * es as usize);
                            b.bytes_mut()[..n].copy_from_slice(&data[start..start + n]);
                        }
                    }
                })?;
            }
        }
        port.close();
        Ok(())
    }
}

/// Per-thread buffers a call's decoding reuses, so serving a call allocates
/// nothing in the steady state (only a stream or out-buffer larger than any
/// before it grows one). What a thread keeps between calls is capped by
/// [`ServerConfig::keep_bytes`] (see [`trim`](Self::trim)).
pub(super) struct Scratch {
    pub(super) blocks: LaneRecords,
    pub(super) streams: Vec<Vec<Vec<u8>>>,
    pub(super) rets: RefCell<LaneRecords>,
    pub(super) outs: RefCell<Vec<Vec<Vec<u8>>>>,
    /// Device addresses of a call's direct streams and out-buffers, per
    /// lane (only those the call's length words mark direct are read, each
    /// after the call wrote it): kept, so no call clears or allocates them.
    pub(super) addrs: Vec<Vec<u64>>,
    /// Large buffers for direct slices without lent memory (`spare.rs`).
    pub(super) spare: RefCell<Spare>,
    /// Each lane's status and detail word, as the reply will carry them.
    pub(super) status: [Status; MAX_LANES as usize],
    pub(super) detail: [u32; MAX_LANES as usize],
    /// The lanes whose stream or out-buffers the last call may have grown
    /// (its lanes if it had streams or out-buffers, and any lane a
    /// hand-written dispatch stored an out-buffer for): what
    /// [`trim`](Self::trim) walks.
    pub(super) grown: u64,
    /// Each lane's stream and out-buffer capacity as the last `trim` left
    /// it: a `trim` after a call of a few lanes walks those lanes only, and
    /// still knows what the thread keeps in all (the sum).
    lane_bytes: [usize; MAX_LANES as usize],
}

impl Scratch {
    pub(super) fn new() -> Scratch {
        let lanes = MAX_LANES as usize;
        Scratch {
            blocks: LaneRecords::default(),
            streams: (0..lanes).map(|_| Vec::new()).collect(),
            rets: RefCell::default(),
            outs: RefCell::new((0..lanes).map(|_| Vec::new()).collect()),
            addrs: (0..lanes).map(|_| Vec::new()).collect(),
            spare: RefCell::default(),
            status: [Status::Ok; MAX_LANES as usize],
            detail: [0; MAX_LANES as usize],
            grown: 0,
            lane_bytes: [0; MAX_LANES as usize],
        }
    }

    /// Run `f` with this thread's scratch, in place (a fresh one if a call
    /// on this thread is already using it: a host method that serves calls
    /// itself).
    pub(super) fn with<R>(f: impl FnOnce(&mut Scratch) -> R) -> R {
        SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut s) => f(&mut s),
            Err(_) => f(&mut Scratch::new()),
        })
    }

    /// Make the buffers ready for the next call on this thread, keeping at
    /// most `keep` bytes of stream, out-buffer and spare capacity (past it,
    /// the largest are freed first, so small ones keep their reuse). Only
    /// the lanes the last call may have grown are walked (`grown`: none
    /// for a call without streams or out-buffers; the other lanes' capacity
    /// is known from earlier trims); large buffers move to the spare buffers
    /// with their bytes; the argument blocks and return values,
    /// held to `MAX_ARG_BYTES` and `MAX_RET_BYTES` (plus the length words)
    /// by the frame, are always kept, and the next call resets them.
    pub(super) fn trim(&mut self, keep: usize) {
        let lanes = std::mem::take(&mut self.grown);
        if lanes == 0 {
            return;
        }
        let spare = self.spare.get_mut();
        let outs = self.outs.get_mut();
        for lane in iter_lanes(lanes) {
            let l = lane as usize;
            let mut bytes = 0;
            for v in self.streams[l].iter_mut().chain(outs[l].iter_mut()) {
                if v.capacity() >= SPARE_MIN_BYTES {
                    spare.give(std::mem::take(v));
                }
                v.clear();
                bytes += v.capacity();
            }
            self.lane_bytes[l] = bytes;
        }
        let mut total: usize = self.lane_bytes.iter().sum();
        if total > keep {
            let mut kept: Vec<&mut Vec<u8>> = self
                .streams
                .iter_mut()
                .chain(outs.iter_mut())
                .flatten()
                .filter(|v| v.capacity() > 0)
                .collect();
            kept.sort_unstable_by_key(|v| std::cmp::Reverse(v.capacity()));
            for v in kept {
                if total <= keep {
                    break;
                }
                total -= v.capacity();
                *v = Vec::new();
            }
            for (l, bytes) in self.lane_bytes.iter_mut().enumerate() {
                *bytes = self.streams[l].iter().chain(&outs[l]).map(Vec::capacity).sum();
            }
        }
        spare.trim(keep.saturating_sub(total));
    }
}

std::thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::new());
}

/// The lanes of `lanes` whose status is still `Ok`.
fn ok_mask(lanes: u64, status: &[Status; MAX_LANES as usize]) -> u64 {
    iter_lanes(lanes)
        .filter(|&l| status[l as usize] == Status::Ok)
        .fold(0, |m, l| m | 1 << l)
}

/// The length word at index `i` of an argument block, or 0 if the block is
/// shorter.
fn len_word_of(block: &[u8], i: usize) -> u64 {
    block
        .get(8 * i..8 * i + 8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_le_bytes)
        .unwrap_or(0)
}

/// The length (bytes of a stream, elements of an out-buffer) at index `i`
/// of an argument block, without its [`DIRECT`](call::DIRECT) bit.
pub(super) fn lens_of(block: &[u8], i: usize) -> u64 {
    call::split_len_word(len_word_of(block, i)).0
}

/// Whether the stream or out-buffer at index `i` of an argument block goes
/// by address.
pub(super) fn direct_of(block: &[u8], i: usize) -> bool {
    call::split_len_word(len_word_of(block, i)).1
}

#[cfg(test)]
mod tests {
    use super::*;

    /// After a call with 64 lanes × 7 out-buffers of 1 MiB and a large
    /// stream, the thread keeps at most `keep` bytes of stream, out-buffer
    /// and spare capacity in all, the large stream among the spares with its
    /// bytes; and the argument blocks (bounded by the frame) stay.
    #[test]
    fn scratch_kept_between_calls_is_capped_in_total() {
        let keep = 8 << 20;
        let mut s = Scratch::new();
        for outs in s.outs.get_mut().iter_mut() {
            *outs = (0..7).map(|_| Vec::with_capacity(1 << 20)).collect();
        }
        s.streams[5] = vec![vec![3; 2 << 20]];
        s.blocks.reset(64, u64::MAX);
        s.blocks.get_mut(63).fill(1);
        s.grown = u64::MAX;
        s.trim(keep);
        let kept: usize = s
            .streams
            .iter()
            .chain(s.outs.get_mut().iter())
            .flatten()
            .map(Vec::capacity)
            .sum::<usize>()
            + s.spare.get_mut().bytes();
        assert!(kept <= keep, "kept {kept} bytes");
        assert!(kept > 0, "the buffers under the cap are kept");
        assert_eq!(s.streams[5][0].capacity(), 0, "the large stream left the lane");
        // The blocks survive, and the next call's reset zeroes them.
        assert_eq!(s.blocks.get(63), [1; 64]);
        s.blocks.reset(64, u64::MAX);
        assert_eq!(s.blocks.get(63), [0; 64]);
        // Nothing kept at all when the cap is 0.
        s.grown = u64::MAX;
        s.trim(0);
        let kept: usize = s.outs.get_mut().iter().flatten().map(Vec::capacity).sum();
        assert_eq!(kept + s.spare.get_mut().bytes(), 0);
    }

    /// A large stream keeps its bytes among the spares, and the next call's
    /// direct copy of that size reuses the memory.
    #[test]
    fn a_large_stream_is_kept_for_the_next_call() {
        let mut s = Scratch::new();
        s.streams[0] = vec![vec![9; 1 << 20]];
        let at = s.streams[0][0].as_ptr();
        s.grown = 1;
        s.trim(64 << 20);
        let b = s.spare.get_mut().take(1 << 20, 1).unwrap();
        assert_eq!(b.as_ptr(), at);
        assert!(b.iter().all(|&x| x == 9));
    }

    /// A trim after a call of one lane walks that lane only, and the cap
    /// still counts what the other lanes kept from earlier calls.
    #[test]
    fn trims_of_single_lanes_keep_the_total_under_the_cap() {
        let keep = 60 << 10;
        let mut s = Scratch::new();
        let total = |s: &mut Scratch| -> usize {
            let outs: usize = s.outs.get_mut().iter().flatten().map(Vec::capacity).sum();
            outs + s.streams.iter().flatten().map(Vec::capacity).sum::<usize>()
        };
        s.streams[3] = vec![Vec::with_capacity(40 << 10)];
        s.grown = 1 << 3;
        s.trim(keep);
        assert_eq!((total(&mut s), s.lane_bytes.iter().sum()), (40 << 10, 40 << 10));
        s.outs.get_mut()[5] = vec![Vec::with_capacity(30 << 10)];
        s.grown = 1 << 5;
        s.trim(keep);
        assert_eq!(total(&mut s), 30 << 10, "the larger, older buffer of lane 3 went");
        assert_eq!(s.lane_bytes.iter().sum::<usize>(), 30 << 10);
        assert_eq!(s.streams[3][0].capacity(), 0);
        // A lane a hand-written dispatch stored for, outside the call's.
        s.outs.get_mut()[9] = vec![Vec::with_capacity(20 << 10)];
        s.grown = 1 << 9;
        s.trim(keep);
        assert_eq!((total(&mut s), s.lane_bytes.iter().sum()), (50 << 10, 50 << 10));
    }

    /// A call without streams leaves the stream buffers alone.
    #[test]
    fn a_call_without_streams_keeps_the_stream_buffers() {
        let mut s = Scratch::new();
        s.streams[3] = vec![vec![7; 10]];
        s.trim(64 << 20);
        assert_eq!(s.streams[3], [vec![7; 10]]);
    }

    /// A call served while this thread's scratch is in use (a host method
    /// that serves calls itself) gets a scratch of its own.
    #[test]
    fn nested_calls_get_their_own_scratch() {
        Scratch::with(|outer| {
            outer.blocks.reset(8, 1);
            outer.blocks.get_mut(0).fill(9);
            Scratch::with(|inner| {
                inner.blocks.reset(8, 1);
                inner.blocks.get_mut(0).fill(1);
            });
            assert_eq!(outer.blocks.get(0), [9; 8]);
        });
    }
}
