//! The server's copies for [the direct path](crate::call#the-direct-path):
//! a call's direct inputs fetched from the device before it runs, its direct
//! out-buffers stored on the device before the reply. The frame's packets
//! around them are `serve_call.rs`'s; the copies themselves the backend's
//! [`DeviceMemory`].
//!
//! Where the backend lends memory for the call ([`DeviceMemory::lend`]:
//! page-locked, on a GPU), the inputs land in it and the host method reads
//! them there, and out-buffers are stored there for the copy back: one
//! transfer each way and no host copy. Otherwise inputs land in the
//! thread's scratch buffers and out-buffers leave from the call's.

use super::lane_records::LaneRecords;
use super::serve_call::{direct_of, lens_of};
use super::spare::{Spare, SPARE_MIN_BYTES};
use super::zeroing;
use super::*;
use crate::device_memory::{CopyError, EarlyWrites, Lent};

/// Out-buffers that lie side by side in a call's loan and on the device are
/// sent together, while the call runs, once they hold this many bytes
/// ([`Loan::lane_done`]): one transfer that keeps the bus busy for a while
/// (tens of microseconds), not one per small lane. Shorter runs are stored
/// with the rest after the call.
pub(super) const EARLY_BYTES: usize = 256 << 10;

/// Device addresses of a call's direct streams and out-buffers: per lane, a
/// row of `MAX_IN_STREAMS + MAX_OUT_STREAMS` words, made when the lane's
/// first address arrives (small allocations, kept by the thread's scratch).
pub(super) type Addresses = [Vec<u64>];

/// The address of stream or out-buffer `index` of `lane` (0 if none came).
fn address(addrs: &Addresses, lane: u32, index: usize) -> u64 {
    addrs[lane as usize].get(index).copied().unwrap_or(0)
}

/// Record `at` as the address of stream or out-buffer `index` of `lane`.
pub(super) fn set_address(addrs: &mut Addresses, lane: u32, index: usize, at: u64) {
    let row = &mut addrs[lane as usize];
    if row.len() < MAX_IN_STREAMS + MAX_OUT_STREAMS {
        row.resize(MAX_IN_STREAMS + MAX_OUT_STREAMS, 0);
    }
    row[index] = at;
}

/// Bytes of the direct slice `index` of a lane whose argument block is
/// `block`: a stream's length, or an out-buffer's (`index - n_in`) count
/// times its element size.
fn slice_bytes(block: &[u8], n_in: usize, out_sizes: &[u32], index: usize) -> usize {
    let n = lens_of(block, index) as usize;
    match index.checked_sub(n_in) {
        Some(j) => n * out_sizes[j] as usize,
        None => n,
    }
}

/// The message of a lane whose out-buffer `j`, `bytes` long, could not be
/// stored at device address `at`.
fn copy_failed(j: usize, bytes: usize, at: u64, e: CopyError) -> String {
    format!("out-buffer {j}: the direct copy of {bytes} bytes to {at:#x} failed: {e}")
}

/// Refuse one lane: `(lane, status, argument index, message)`.
pub(super) type Refuse<'r> = dyn FnMut(u32, Status, u32, String) + 'r;

/// The memory a call borrowed for its direct slices, and where each lies.
/// After the inputs are copied in, the memory is reached only through raw
/// pointers to one slot at a time: a host method may hold an out-buffer's
/// slot ([`OutBuffer`]) while other slots are read.
///
/// Out-buffers whose lanes are done are sent to the device while the call
/// runs ([`lane_done`](Self::lane_done)), so the bus carries lane `i`'s
/// while lane `i + 1`'s host method writes its own.
pub(super) struct Loan<'m> {
    /// The out-buffers sent while the call runs. Declared before `lent`:
    /// dropped first, so every copy reading the loan is complete (a
    /// queue waits for its copies when dropped) before the memory goes back.
    early: core::cell::RefCell<Early<'m>>,
    /// Keeps the memory until the call is over (and says which of its bytes
    /// came zeroed).
    lent: Lent<'m>,
    base: core::ptr::NonNull<u8>,
    slots: Vec<Slot>,
    /// Where the out-buffers' slots begin in `slots` (inputs come first).
    first_out: usize,
    memory: &'m dyn DeviceMemory,
}

/// The out-buffers of a [`Loan`] sent while the call runs.
#[derive(Default)]
struct Early<'m> {
    /// The backend's queue, made at the first send.
    queue: Option<Box<dyn EarlyWrites + 'm>>,
    /// The backend was asked for a queue (and may have none).
    asked: bool,
    /// Out-buffer slots `first..=last` (indices in `slots`), filled, side by
    /// side in the loan and on the device, waiting to be sent together.
    run: Option<(usize, usize)>,
}

impl Drop for Loan<'_> {
    /// Tell the lender which bytes host methods wrote (the out-buffers
    /// handed out or stored), so it can zero them off the calls' way; the
    /// fields drop after this, the early copies first.
    fn drop(&mut self) {
        for s in &self.slots[self.first_out..] {
            if s.taken.get() || s.filled.get() {
                self.lent.written(s.at..s.at + s.len);
            }
        }
    }
}

/// One direct slice's place in a [`Loan`].
struct Slot {
    lane: u32,
    /// The stream's index, or `n_in + j` for out-buffer `j`.
    index: usize,
    at: usize,
    len: usize,
    /// An out-buffer's place was handed to the host method.
    taken: core::cell::Cell<bool>,
    /// The [`OutBuffer`] handed this place is alive: nothing may read the
    /// bytes yet (`lane_done` leaves it to `copy_out`).
    held: core::cell::Cell<bool>,
    /// An out-buffer's bytes are in place (stored by `set_out`).
    filled: core::cell::Cell<bool>,
    /// The slice's device address.
    dev: u64,
    /// An out-buffer was queued for the device while the call ran
    /// (`Loan::lane_done`); its bytes are never written again.
    sent: core::cell::Cell<bool>,
}

impl<'m> Loan<'m> {
    fn slot(&self, lane: u32, index: usize) -> Option<&Slot> {
        self.slots.iter().find(|s| s.lane == lane && s.index == index)
    }

    fn ptr(&self, s: &Slot) -> *mut u8 {
        // SAFETY: pointer arithmetic only; `at + len` is within the loan.
        unsafe { self.base.as_ptr().add(s.at) }
    }

    /// Direct input `index` of `lane`, if it lies in the loan.
    pub(super) fn input(&self, lane: u32, index: usize) -> Option<&[u8]> {
        let s = self.slot(lane, index)?;
        // SAFETY: an input slot, written only by the copy in before the call
        // ran; no out-buffer place overlaps it.
        Some(unsafe { core::slice::from_raw_parts(self.ptr(s), s.len) })
    }

    /// `f` of each byte range of slot `s` (from its start) that does not
    /// hold zeros: all of it after a store copied bytes there (none of the
    /// lender's zeros are left), else what the lender did not lend as zeros.
    fn unzeroed(&self, s: &Slot, mut f: impl FnMut(core::ops::Range<usize>)) {
        let (at, len) = (s.at, s.len);
        if s.filled.get() {
            f(0..len);
            return;
        }
        let end = at + len;
        let mut from = at;
        for z in self.lent.zeroed() {
            if z.end <= from {
                continue;
            }
            if end <= z.start {
                break;
            }
            if from < z.start {
                f(from - at..z.start - at);
            }
            from = z.end;
            if end <= from {
                return;
            }
        }
        f(from - at..len);
    }

    /// The place of out-buffer `index` of `lane`, zeroed, for a host method
    /// to write `count` elements of `T` into (the caller checked
    /// [`bytes_are_values`](crate::wire::bytes_are_values)`::<T>()`), and
    /// the flag its holder clears when done with it ([`Slot::held`]);
    /// `None` if it has none, it was handed out already, or it is not
    /// aligned for `T`.
    // `&mut` from `&self`: the slot is raw memory of the loan, handed out
    // once (`taken`), like a cell's contents.
    #[allow(clippy::mut_from_ref)]
    pub(super) fn take_out<T>(
        &self,
        lane: u32,
        index: usize,
        count: usize,
    ) -> Option<(&mut [T], &core::cell::Cell<bool>)> {
        let (place, slot) = self.take_place::<T>(lane, index, count)?;
        let p = place.as_mut_ptr().cast::<u8>();
        self.unzeroed(slot, |r| {
            // SAFETY: `r` lies within the slot (`unzeroed`), which is the
            // place, borrowed mutably here; every byte pattern of `T` is a
            // value (the caller's check).
            unsafe { zeroing::zero(p.add(r.start), r.len()) }
        });
        Some((place, &slot.held))
    }

    /// [`take_out`](Self::take_out) without the zeroing: the place, its
    /// flag, and the byte ranges of it (from its start) that do not hold
    /// zeros yet, for the thread that runs the lane's host method to zero
    /// ([`zeroing::zero_ranges`]) before the method sees it.
    #[allow(clippy::mut_from_ref, clippy::type_complexity)]
    pub(super) fn take_out_unzeroed<T>(
        &self,
        lane: u32,
        index: usize,
        count: usize,
    ) -> Option<(&mut [T], &core::cell::Cell<bool>, Vec<core::ops::Range<usize>>)> {
        let (place, slot) = self.take_place::<T>(lane, index, count)?;
        let mut left = Vec::new();
        self.unzeroed(slot, |r| left.push(r));
        Some((place, &slot.held, left))
    }

    /// Hand out the place of out-buffer `index` of `lane` (see
    /// [`take_out`](Self::take_out)), not zeroed, with its slot.
    #[allow(clippy::mut_from_ref)]
    fn take_place<T>(&self, lane: u32, index: usize, count: usize) -> Option<(&mut [T], &Slot)> {
        let s = self.slot(lane, index)?;
        let p = self.ptr(s);
        // (Not once sent: a copy to the device may still be reading it.)
        if s.taken.get()
            || s.sent.get()
            || s.len != count * core::mem::size_of::<T>()
            || !(p as usize).is_multiple_of(core::mem::align_of::<T>())
        {
            return None;
        }
        s.taken.set(true);
        s.held.set(true);
        // SAFETY: the slot's `len` bytes are in the loan, which outlives the
        // borrow of the call the place is tied to; it is handed out once
        // (`taken`), and nothing else touches it while it is held (`held`:
        // `lane_done` skips it, `set_out` compares addresses only); aligned
        // for `T`, and `T`'s every byte pattern is a value (the caller's
        // check), so the bytes are `count` valid elements (zeros once the
        // caller zeroed what the lender did not lend as zeros, as the method
        // expects).
        let place = unsafe { core::slice::from_raw_parts_mut(p.cast::<T>(), count) };
        Some((place, s))
    }

    /// Out-buffer `index` of `lane` is `bytes`: mark it in place if `bytes`
    /// is its place, or copy it there if the place has that length and was
    /// never handed out; `false` if it has none (the caller keeps it).
    pub(super) fn store_out(&self, lane: u32, index: usize, bytes: &[u8]) -> bool {
        let Some(s) = self.slot(lane, index) else { return false };
        let p = self.ptr(s);
        if core::ptr::eq(bytes.as_ptr(), p) && bytes.len() == s.len {
            s.filled.set(true);
            return true;
        }
        if s.taken.get() || s.sent.get() || bytes.len() != s.len {
            return false;
        }
        // SAFETY: the slot's bytes, never handed out, so nothing else
        // borrows them; `bytes` is the caller's, elsewhere.
        unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), p, s.len) };
        s.filled.set(true);
        true
    }

    /// Out-buffer `index` of `lane` was stored elsewhere after an earlier
    /// store here: the loan's bytes are not the last store any more (unless
    /// they were sent already; then `copy_out` sends the later bytes after
    /// them).
    pub(super) fn forget(&self, lane: u32, index: usize) {
        if let Some(s) = self.slot(lane, index).filter(|s| !s.sent.get()) {
            s.filled.set(false);
        }
    }

    /// Lane `lane`'s host method is done: its out-buffers are final and
    /// nothing borrows them (an [`OutBuffer`] lives inside
    /// one lane's run of the dispatch). Its out-buffers stored in the loan
    /// join the run waiting to be sent, and a run of [`EARLY_BYTES`] or
    /// more is queued for the device now. A run that breaks off shorter (the
    /// next out-buffer lies elsewhere on the device) is left for
    /// [`Dispatcher::copy_out`], which merges what it can.
    pub(super) fn lane_done(&self, lane: u32) {
        let mut early = self.early.borrow_mut();
        for i in self.first_out..self.slots.len() {
            let s = &self.slots[i];
            // (A place still held by its out-buffer is left for `copy_out`.)
            if s.lane != lane || !s.filled.get() || s.held.get() {
                continue;
            }
            let (first, last) = match early.run {
                Some((first, last)) if self.adjacent(last, i) => (first, i),
                _ => (i, i),
            };
            let (a, b) = (&self.slots[first], &self.slots[last]);
            if b.at + b.len - a.at >= EARLY_BYTES {
                self.send(&mut early, first, last);
                early.run = None;
            } else {
                early.run = Some((first, last));
            }
        }
    }

    /// Whether slot `b` continues slot `a` both in the loan and on the device.
    fn adjacent(&self, a: usize, b: usize) -> bool {
        let (a, b) = (&self.slots[a], &self.slots[b]);
        b.at == a.at + a.len && Some(b.dev) == a.dev.checked_add(a.len as u64)
    }

    /// Queue slots `first..=last` (side by side, filled) for the device in
    /// one copy; they stay for `copy_out` if the backend has no queue or
    /// refuses it.
    fn send(&self, early: &mut Early<'m>, first: usize, last: usize) {
        if !early.asked {
            early.asked = true;
            early.queue = self.memory.early_writes();
        }
        let Some(queue) = early.queue.as_mut() else { return };
        let (a, b) = (&self.slots[first], &self.slots[last]);
        // SAFETY: slots `first..=last` tile `[a.at, b.at + b.len)` of the
        // loan (`adjacent`); their lanes' methods are done, so nothing
        // borrows them, and once `sent` no store writes them again
        // (`store_out` refuses). The loan outlives the queue (`early` is
        // dropped first, and a queue waits for its copies when dropped).
        let bytes = unsafe { core::slice::from_raw_parts(self.ptr(a), b.at + b.len - a.at) };
        // SAFETY: as above, the bytes stay valid and unchanged until the
        // queue is finished or dropped.
        if unsafe { queue.send(a.dev, bytes) }.is_ok() {
            self.slots[first..=last].iter().for_each(|s| s.sent.set(true));
        }
    }

    /// Send nothing while the call runs: a call without a reply stores no
    /// out-buffer (`copy_out` runs only before a reply).
    pub(super) fn send_none_early(&self) {
        self.early.borrow_mut().asked = true;
    }

    /// Wait for the out-buffers sent while the call ran; the error if any
    /// copy failed (each sent slot is then failed).
    fn finish_early(&self) -> Result<(), CopyError> {
        match self.early.borrow_mut().queue.as_mut() {
            Some(q) => q.finish(),
            None => Ok(()),
        }
    }

    /// Whether out-buffer `index` of `lane` was sent while the call ran.
    fn was_sent(&self, lane: u32, index: usize) -> bool {
        self.slot(lane, index).is_some_and(|s| s.sent.get())
    }

    /// Bytes of `lane`'s out-buffers stored in the loan.
    pub(super) fn out_bytes(&self, lane: u32) -> usize {
        self.slots
            .iter()
            .filter(|s| s.lane == lane && s.filled.get())
            .map(|s| s.len)
            .sum()
    }

    /// Out-buffer `index` of `lane`, if it was stored in the loan (read
    /// after the host method is done with it).
    fn stored_out(&self, lane: u32, index: usize) -> Option<&[u8]> {
        let s = self.slot(lane, index)?;
        // SAFETY: the call is over (its `OutBuffer`s, which borrowed it, are
        // gone): nothing writes the slot any more.
        s.filled
            .get()
            .then(|| unsafe { core::slice::from_raw_parts(self.ptr(s), s.len) })
    }
}

impl Dispatcher {
    /// Fetch the direct inputs of the lanes `ok` (those still `Ok`), with
    /// one [`DeviceMemory::read`] for the whole call: into memory the
    /// backend lends for the call (returned, with room for the direct
    /// out-buffers of `out_sizes`' elements too), or else into `streams`
    /// (large ones in buffers kept from earlier calls: `spare`).
    /// The lengths were checked against the limits already; a lane whose
    /// buffer cannot be allocated, or whose copy fails, or that this server
    /// cannot copy for (no `memory`: each lane with a direct input or
    /// out-buffer), is refused naming the argument.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn copy_in<'m>(
        &self,
        ok: u64,
        n_in: usize,
        out_sizes: &[u32],
        blocks: &LaneRecords,
        addrs: &Addresses,
        memory: Option<&'m dyn DeviceMemory>,
        streams: &mut [Vec<Vec<u8>>],
        spare: &core::cell::RefCell<Spare>,
        refuse: &mut Refuse<'_>,
    ) -> Option<Loan<'m>> {
        let mut wanted: Vec<(u32, usize)> = Vec::new();
        let mut outs: Vec<(u32, usize)> = Vec::new();
        for lane in iter_lanes(ok) {
            let block = blocks.get(lane);
            wanted.extend((0..n_in).filter(|&i| direct_of(block, i)).map(|i| (lane, i)));
            outs.extend(
                (0..out_sizes.len())
                    .filter(|&j| direct_of(block, n_in + j))
                    .map(|j| (lane, n_in + j)),
            );
        }
        if wanted.is_empty() && outs.is_empty() {
            return None;
        }
        let Some(memory) = memory else {
            // Refused before the call runs, each lane once, naming its first
            // direct argument.
            let mut refused = 0u64;
            for (lane, index) in wanted.into_iter().chain(outs) {
                if refused & 1 << lane != 0 {
                    continue;
                }
                refused |= 1 << lane;
                let at = address(addrs, lane, index);
                let what = match index.checked_sub(n_in) {
                    Some(j) => format!("out-buffer {j} asks for a direct copy to {at:#x}"),
                    None => format!("streamed argument {index} asks for a direct copy from {at:#x}"),
                };
                let message =
                    format!("{what}, but this server has no device memory to copy with (Server::with_memory)");
                refuse(lane, Status::InvalidArgument, index as u32, message);
            }
            return None;
        };
        let len_of = |lane: u32, index: usize| slice_bytes(blocks.get(lane), n_in, out_sizes, index);
        // Every direct slice of the call in one loan, packed in lane order
        // (inputs are read as bytes: no alignment needed), so a warp's
        // adjacent slices are adjacent in the loan too and move in one
        // transfer; `len <= max_stream_bytes`.
        let mut slots = Vec::with_capacity(wanted.len() + outs.len());
        let mut at = 0usize;
        for &(lane, index) in wanted.iter().chain(&outs) {
            let len = len_of(lane, index);
            if let Some(j) = index.checked_sub(n_in) {
                // Out-buffers at their elements' alignment, so the host
                // method can write them in place (numbers: 1..=16).
                at = at.next_multiple_of((out_sizes[j] as usize).next_power_of_two().min(16));
            }
            slots.push(Slot {
                lane,
                index,
                at,
                len,
                taken: core::cell::Cell::new(false),
                held: core::cell::Cell::new(false),
                filled: core::cell::Cell::new(false),
                dev: address(addrs, lane, index),
                sent: core::cell::Cell::new(false),
            });
            at += len;
        }
        let mut failed = Vec::new();
        let loan = match memory.lend(at) {
            Some(mut lent) => {
                let mut copies: Vec<(u64, &mut [u8])> = Vec::with_capacity(wanted.len());
                let mut rest: &mut [u8] = &mut lent;
                let mut offset = 0;
                for s in slots.iter().take(wanted.len()) {
                    let (_, tail) = std::mem::take(&mut rest).split_at_mut(s.at - offset);
                    let (mine, tail) = tail.split_at_mut(s.len);
                    copies.push((address(addrs, s.lane, s.index), mine));
                    rest = tail;
                    offset = s.at + s.len;
                }
                // (A call with out-buffers only has nothing to read.)
                if !copies.is_empty() {
                    memory.read(&mut copies, &mut |k, e| failed.push((k, e)));
                }
                drop(copies);
                let base = core::ptr::NonNull::new(lent.as_mut_ptr()).expect("a slice's pointer is not null");
                Some(Loan {
                    early: Default::default(),
                    lent,
                    base,
                    slots,
                    first_out: wanted.len(),
                    memory,
                })
            }
            None => {
                // Size each buffer in the thread's scratch: a kept one (its
                // bytes, all overwritten by the copy, need no zeroing), else
                // a new one.
                let mut copyable = Vec::with_capacity(wanted.len());
                let mut spare = spare.borrow_mut();
                for &(lane, i) in &wanted {
                    let len = len_of(lane, i);
                    let s = &mut streams[lane as usize][i];
                    let sized = if len < SPARE_MIN_BYTES {
                        s.clear();
                        s.try_reserve_exact(len).map(|()| s.resize(len, 0)).is_ok()
                    } else if let Some(buf) = spare.take(len, 1) {
                        spare.give(std::mem::replace(s, buf));
                        true
                    } else {
                        false
                    };
                    if !sized {
                        let message = format!("streamed argument {i} of {len} bytes: the host could not allocate it");
                        refuse(lane, Status::TooLarge, i as u32, message);
                        continue;
                    }
                    copyable.push((lane, i));
                }
                drop(spare);
                // `copyable` is in lane order, then stream order.
                let mut copies: Vec<(u64, &mut [u8])> = Vec::with_capacity(copyable.len());
                let mut who = Vec::with_capacity(copyable.len());
                let mut want = copyable.iter().peekable();
                for (lane, lane_streams) in streams.iter_mut().enumerate() {
                    for (i, s) in lane_streams.iter_mut().enumerate() {
                        if let Some(&(l, i)) = want.next_if(|&&(l, k)| l as usize == lane && k == i) {
                            copies.push((address(addrs, lane as u32, i), s.as_mut_slice()));
                            who.push((l, i));
                        }
                    }
                }
                memory.read(&mut copies, &mut |k, e| failed.push((k, e)));
                wanted = who;
                None
            }
        };
        let mut refused = 0u64;
        for (k, e) in failed {
            if let Some(&(lane, i)) = wanted.get(k).filter(|&&(lane, _)| refused & 1 << lane == 0) {
                refused |= 1 << lane;
                let at = address(addrs, lane, i);
                let len = lens_of(blocks.get(lane), i);
                let message = format!("streamed argument {i}: the direct copy of {len} bytes from {at:#x} failed: {e}");
                refuse(lane, Status::InvalidArgument, i as u32, message);
            }
        }
        loan
    }

    /// Store the direct out-buffers of `call`'s lanes still `Ok` on the
    /// device: wait for those sent while the call ran
    /// ([`Loan::lane_done`]), then the others with one
    /// [`DeviceMemory::write`]: from the call's loan where `set_out` put
    /// them there, else from the call's buffers (also where a hand-written
    /// dispatch stored an out-buffer again after it was sent: the last
    /// store is what the device gets). A lane whose copy fails fails naming
    /// the out-buffer. (Without device memory there is nothing to store:
    /// `copy_in` refused every lane with a direct out-buffer before the call
    /// ran.)
    pub(super) fn copy_out(
        &self,
        call: &mut ServerCall<'_>,
        desc: &CallDesc,
        addrs: &Addresses,
        memory: &dyn DeviceMemory,
    ) {
        let n_in = call.n_in;
        let mut wanted: Vec<(u32, usize)> = Vec::new();
        for lane in iter_lanes(call.ok) {
            for j in (0..desc.out_elem_sizes.len()).filter(|&j| call.out_direct(lane, j)) {
                wanted.push((lane, j));
            }
        }
        // Complete before the reply, and before a later store of the same
        // bytes below.
        let early = call.loan.as_ref().map_or(Ok(()), Loan::finish_early);
        if wanted.is_empty() {
            return;
        }
        let mut failed: Vec<(usize, String)> = Vec::new();
        // The host method is done: nothing borrows the out-buffers now.
        let outs = call.outs.borrow();
        // Each out-buffer as the host method stored it: in the loan, else in
        // the call's buffers. One it did not store whole (a hand-written
        // dispatch) fails its lane and is not copied, rather than leave
        // device bytes unwritten under `Ok`.
        let mut copies = Vec::with_capacity(wanted.len());
        let mut which = Vec::with_capacity(wanted.len());
        for (k, &(lane, j)) in wanted.iter().enumerate() {
            let at = address(addrs, lane, n_in + j);
            let later = outs[lane as usize].get(j).map(Vec::as_slice).unwrap_or_default();
            let sent = call.loan.as_ref().is_some_and(|loan| loan.was_sent(lane, n_in + j));
            let want = slice_bytes(call.blocks.get(lane), n_in, desc.out_elem_sizes, n_in + j);
            if sent && later.is_empty() {
                if let Err(e) = early {
                    failed.push((k, copy_failed(j, want, at, e)));
                }
                continue;
            }
            let data = match call.loan.as_ref().and_then(|loan| loan.stored_out(lane, n_in + j)) {
                Some(b) if !sent => b,
                _ => later,
            };
            if data.len() == want {
                copies.push((at, data));
                which.push(k);
            } else {
                let message = format!(
                    "out-buffer {j}: the host method stored {} of its {want} bytes",
                    data.len()
                );
                failed.push((k, message));
            }
        }
        // (Nothing left when every out-buffer went while the call ran.)
        if !copies.is_empty() {
            memory.write(&copies, &mut |c, e| {
                let k = which[c];
                failed.push((k, copy_failed(wanted[k].1, copies[c].1.len(), copies[c].0, e)));
            });
        }
        for (k, message) in failed {
            let (lane, j) = wanted[k];
            call.fail(
                lane,
                LaneError {
                    status: Status::InvalidArgument,
                    detail: (n_in + j) as u32,
                    message,
                },
            );
        }
    }
}
