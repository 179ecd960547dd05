//! [`ServerCall`]: one call being served, as the dispatch code `#[gpu_rpc]`
//! generates sees it (per-lane arguments in, per-lane results out).

use super::direct::Loan;
use super::lane_records::LaneRecords;
use super::serve_call::{direct_of, lens_of};
use super::spare::{Spare, SPARE_MIN_BYTES};
use super::*;

/// The text of a panic payload, clipped ([`clip_message`]): the one place a
/// payload becomes a message (a host method's panic, a CPU lane's, a driver
/// binding's).
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| clip_message(s))
        .or_else(|| payload.downcast_ref::<String>().map(|s| clip_message(s)))
        .unwrap_or_else(|| "non-string panic payload".to_string())
}

/// The most bytes of a message the host keeps from a panic (a handler's,
/// or a device panic the standard services record).
pub const MAX_MESSAGE_BYTES: usize = 4096;

/// `s` as the host keeps it: whole if it has at most [`MAX_MESSAGE_BYTES`]
/// bytes, else cut at a character boundary below that and ended with
/// `"…[truncated]"`.
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::server::{clip_message, MAX_MESSAGE_BYTES};
/// assert_eq!(clip_message("short"), "short");
/// let long = "é".repeat(MAX_MESSAGE_BYTES);
/// let kept = clip_message(&long);
/// assert!(kept.len() <= MAX_MESSAGE_BYTES && kept.ends_with("…[truncated]"));
/// ```
pub fn clip_message(s: &str) -> String {
    const MARKER: &str = "…[truncated]";
    if s.len() <= MAX_MESSAGE_BYTES {
        return s.to_string();
    }
    let mut end = MAX_MESSAGE_BYTES - MARKER.len();
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{MARKER}", &s[..end])
}

/// The error of an argument the lane's block cannot give (kept out of the
/// per-lane path: only a lying or mismatched client gets here).
#[cold]
fn bad_argument(index: u32, message: core::fmt::Arguments<'_>) -> LaneError {
    LaneError {
        status: Status::InvalidArgument,
        detail: index,
        message: message.to_string(),
    }
}

/// Store `v` in a return slot of another size, cut or zero-padded (only a
/// hand-written dispatch stores a value of the wrong size).
#[cold]
fn set_return_resized<T: Wire>(slot: &mut [u8], v: &T) {
    let mut buf = vec![0; T::SIZE];
    v.encode(&mut buf);
    let n = slot.len().min(T::SIZE);
    slot[..n].copy_from_slice(&buf[..n]);
    slot[n..].fill(0);
}

/// The lanes of `mask`, lowest first.
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// assert_eq!(gpu_rpc::server::iter_lanes(0b1010).collect::<Vec<_>>(), [1, 3]);
/// ```
#[inline]
pub fn iter_lanes(mut mask: u64) -> impl Iterator<Item = u32> {
    core::iter::from_fn(move || {
        if mask == 0 {
            return None;
        }
        let l = mask.trailing_zeros();
        mask &= mask - 1;
        Some(l)
    })
}

/// `f()`, or the lane error a panic in it makes: [`Status::HandlerPanicked`],
/// naming `method` (the one place a host method's panic becomes a lane's
/// answer; [`ServerCall::catch_lane`]).
pub(super) fn catch_lane<T>(method: Option<&str>, f: impl FnOnce() -> Result<T, LaneError>) -> Result<T, LaneError> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|payload| {
        Err(LaneError {
            status: Status::HandlerPanicked,
            detail: 0,
            message: format!("{} panicked: {}", method.unwrap_or("?"), panic_message(&*payload)),
        })
    })
}

/// One call being served: per-lane arguments in, per-lane results out. The
/// dispatch code `#[gpu_rpc]` generates reads arguments with
/// [`arg`](Self::arg), [`str`](Self::str), [`slice`](Self::slice) and
/// [`out_buffer`](Self::out_buffer), calls the user's method through
/// [`run`](Self::run), and stores results with
/// [`set_return`](Self::set_return) and [`set_out`](Self::set_out).
pub struct ServerCall<'d> {
    pub(super) lanes: u64,
    /// The lanes whose status is still `Ok`.
    pub(super) ok: u64,
    pub(super) port: u32,
    pub(super) opcode: u32,
    pub(super) method: Option<&'static str>,
    pub(super) arg_offset: usize,
    /// Each lane's argument block (length words, then the encoded
    /// arguments).
    pub(super) blocks: &'d LaneRecords,
    pub(super) streams: &'d [Vec<Vec<u8>>],
    pub(super) status: &'d mut [Status; MAX_LANES as usize],
    pub(super) detail: &'d mut [u32; MAX_LANES as usize],
    /// Return values stored by `set_return` (`&self`, like `set_out`),
    /// each as long as the method's (zeros until stored).
    pub(super) rets: &'d std::cell::RefCell<LaneRecords>,
    /// Out-buffers stored by `set_out` (a `RefCell`: `set_out` takes `&self`,
    /// as the [`OutBuffer`]s it stores borrow the call).
    pub(super) outs: &'d std::cell::RefCell<Vec<Vec<Vec<u8>>>>,
    /// The thread's kept buffers, for large out-buffers outside a loan.
    pub(super) spare: &'d std::cell::RefCell<Spare>,
    /// The out-buffers handed out in kept buffers and not yet dropped.
    pub(super) kept: std::cell::RefCell<Vec<KeptPlace>>,
    /// The lanes whose out-buffers `set_out` or `out_buffer` may have grown
    /// (a hand-written dispatch may name any lane): the thread's scratch
    /// trims these after the call.
    pub(super) touched: core::cell::Cell<u64>,
    pub(super) errors: Vec<ServerError>,
    pub(super) n_in: usize,
    /// How many threads a `#[gpu_rpc(parallel)]` method's lanes may run on
    /// in this call ([`run_parallel`](Self::run_parallel)): the config's
    /// `lane_threads`, or 1 for a call that moves too few bytes.
    pub(super) lane_threads: usize,
    /// Where the dispatcher keeps the helpers of parallel calls.
    pub(super) lane_pool: &'d super::lane_pool::LanePool,
    /// The lanes of a parallel arm whose out-buffers were handed to the
    /// copy to the device before its end ([`lane_stored`](Self::lane_stored)).
    pub(super) stored: core::cell::Cell<u64>,
    /// Memory the backend lent for the call's direct slices.
    pub(super) loan: Option<Loan<'d>>,
}

/// An out-buffer handed out in a kept buffer ([`ServerCall::out_buffer`]):
/// whose it is, where it lies, and whether `set_out` stored it as it lies
/// (then, when the out-buffer is dropped, the buffer itself becomes the
/// call's copy of it: no second pass over its bytes).
pub(super) struct KeptPlace {
    lane: u32,
    j: usize,
    at: usize,
    len: usize,
    in_place: bool,
}

/// Why one lane's call cannot run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaneError {
    /// The status to answer.
    pub status: Status,
    /// Detail word (argument index).
    pub detail: u32,
    /// What happened.
    pub message: String,
}

impl ServerCall<'_> {
    /// Lanes of the call whose status is still `Ok`, lowest first.
    pub fn lanes(&self) -> impl Iterator<Item = u32> + '_ {
        iter_lanes(self.ok)
    }

    /// Every lane of the call.
    pub fn lane_mask(&self) -> u64 {
        self.lanes
    }

    /// The port being served.
    pub fn port(&self) -> u32 {
        self.port
    }

    /// The status lane `lane` will receive.
    pub fn status(&self, lane: u32) -> Status {
        self.status[lane as usize]
    }

    /// Decode the scalar argument at byte `offset` of the encoded arguments.
    /// `index` names the argument in errors.
    #[inline]
    pub fn arg_at<T: Wire>(&self, lane: u32, offset: usize, index: u32) -> Result<T, LaneError> {
        let b = self.blocks.get(lane);
        let start = self.arg_offset + offset;
        let Some(bytes) = b.get(start..start + T::SIZE) else {
            return Err(bad_argument(
                index,
                format_args!("argument {index} lies outside the argument block"),
            ));
        };
        T::decode(bytes).map_err(|e| bad_argument(index, format_args!("argument {index}: {e}")))
    }

    /// [`arg_at`](Self::arg_at) for argument 0 at offset `offset`.
    #[inline]
    pub fn arg<T: Wire>(&self, lane: u32, offset: usize) -> Result<T, LaneError> {
        self.arg_at(lane, offset, 0)
    }

    /// Streamed input `i` as UTF-8 text; `index` names the argument in errors.
    pub fn str(&self, lane: u32, i: usize, index: u32) -> Result<&str, LaneError> {
        let bytes = self.bytes(lane, i, index)?;
        std::str::from_utf8(bytes).map_err(|e| LaneError {
            status: Status::InvalidArgument,
            detail: index,
            message: format!("argument {index} is not valid UTF-8: {e}"),
        })
    }

    /// Streamed input `i` as raw bytes.
    pub fn bytes(&self, lane: u32, i: usize, index: u32) -> Result<&[u8], LaneError> {
        if let Some(b) = self.loan.as_ref().and_then(|loan| loan.input(lane, i)) {
            return Ok(b);
        }
        self.streams
            .get(lane as usize)
            .and_then(|s| s.get(i))
            .map(|v| v.as_slice())
            .ok_or_else(|| LaneError {
                status: Status::InvalidArgument,
                detail: index,
                message: format!("streamed argument {i} missing"),
            })
    }

    /// Streamed input `i` decoded as `T`s.
    pub fn slice<T: Wire>(&self, lane: u32, i: usize, index: u32) -> Result<Vec<T>, LaneError> {
        let bytes = self.bytes(lane, i, index)?;
        if T::SIZE == 0 || bytes.len() % T::SIZE != 0 {
            return Err(LaneError {
                status: Status::InvalidArgument,
                detail: index,
                message: format!(
                    "argument {index}: {} bytes is not a whole number of {}-byte elements",
                    bytes.len(),
                    T::SIZE
                ),
            });
        }
        bytes
            .chunks_exact(T::SIZE)
            .map(T::decode)
            .collect::<Result<Vec<T>, _>>()
            .map_err(|e| LaneError {
                status: Status::InvalidArgument,
                detail: index,
                message: format!("argument {index}: {e}"),
            })
    }

    /// A zeroed host buffer for out-buffer `j`, as long as the device's
    /// (its length was checked against the size limits before dispatch; a
    /// lane or buffer the call does not have gives an empty buffer): in the
    /// memory the call borrowed for direct slices when this one goes direct
    /// (the host method then writes where the copy to the device leaves
    /// from), else a buffer the thread kept from an earlier call (a large
    /// one of numbers: no page faults), else a vector. Fails with
    /// [`Status::TooLarge`] instead of aborting the process when the host
    /// cannot allocate it (limits configured beyond the host's memory).
    pub fn out_buffer<T: Wire>(&self, lane: u32, j: usize) -> Result<OutBuffer<'_, T>, LaneError> {
        self.out_buffer_zeroed(lane, j, true)
    }

    /// [`out_buffer`](Self::out_buffer) for a lane whose host method runs
    /// on another thread (a `#[gpu_rpc(parallel)]` method's arm): an
    /// out-buffer in the call's borrowed memory is zeroed there, by
    /// [`LaneSlice::zeroed`], not here, so that the lanes' zeroing is
    /// spread over their threads as their methods' writes are. Hand its
    /// [`lane_slice`](OutBuffer::lane_slice) to that thread, and read the
    /// buffer here only after the slice was zeroed.
    pub fn lane_out_buffer<T: Wire>(&self, lane: u32, j: usize) -> Result<OutBuffer<'_, T>, LaneError> {
        self.out_buffer_zeroed(lane, j, false)
    }

    /// [`out_buffer`](Self::out_buffer), an out-buffer lent by the call's
    /// memory zeroed now or (`zero_now` false) by its [`LaneSlice`].
    fn out_buffer_zeroed<T: Wire>(&self, lane: u32, j: usize, zero_now: bool) -> Result<OutBuffer<'_, T>, LaneError> {
        self.touch(lane);
        let block = self.blocks.get(lane);
        let count = lens_of(block, self.n_in + j);
        let numbers = crate::wire::bytes_are_values::<T>();
        if let (true, Some(loan)) = (numbers, self.loan.as_ref()) {
            let index = self.n_in + j;
            if zero_now {
                if let Some((place, held)) = loan.take_out::<T>(lane, index, count as usize) {
                    return Ok(OutBuffer::new(Out::Lent(place, held)));
                }
            } else if let Some((place, held, unzeroed)) = loan.take_out_unzeroed::<T>(lane, index, count as usize) {
                return Ok(OutBuffer {
                    out: Out::Lent(place, held),
                    unzeroed,
                });
            }
        }
        let bytes = (count as usize).saturating_mul(T::SIZE);
        if numbers && bytes >= SPARE_MIN_BYTES {
            if let Some(mut buf) = self
                .spare
                .try_borrow_mut()
                .ok()
                .and_then(|mut s| s.take(bytes, align_of::<T>()))
            {
                buf.fill(0);
                self.kept.borrow_mut().push(KeptPlace {
                    lane,
                    j,
                    at: buf.as_ptr() as usize,
                    len: bytes,
                    in_place: false,
                });
                return Ok(OutBuffer::new(Out::Kept {
                    buf,
                    count: count as usize,
                    call: KeptHome {
                        spare: self.spare,
                        outs: self.outs,
                        kept: &self.kept,
                    },
                    _t: core::marker::PhantomData,
                }));
            }
        }
        let mut v = Vec::new();
        usize::try_from(count)
            .ok()
            .and_then(|n| v.try_reserve_exact(n).ok())
            .ok_or_else(|| LaneError {
                status: Status::TooLarge,
                detail: (self.n_in + j) as u32,
                message: format!(
                    "out-buffer {j} of {count} elements of {} bytes: the host could not allocate it",
                    T::SIZE
                ),
            })?;
        if numbers {
            // Numbers: all-zero bytes are `zeroed()`, written in one pass
            // (megabytes of out-buffer are common on the direct path).
            // SAFETY: the capacity was reserved above; for `T` every byte
            // pattern is a value (`bytes_are_values`, which only an
            // `unsafe` impl passes), so the zeroed elements are initialized.
            unsafe {
                core::ptr::write_bytes(v.as_mut_ptr(), 0, count as usize);
                v.set_len(count as usize);
            }
        } else {
            v.extend((0..count).map(|_| T::zeroed()));
        }
        Ok(OutBuffer::new(Out::Owned(v)))
    }

    /// Store lane `lane`'s return value.
    ///
    /// The reply carries as many bytes as the method returns: a value of
    /// another size (only a hand-written dispatch can store one) is cut or
    /// zero-padded to that.
    #[inline]
    pub fn set_return<T: Wire>(&self, lane: u32, v: &T) {
        let mut rets = self.rets.borrow_mut();
        let slot = rets.get_mut(lane);
        if slot.len() == T::SIZE {
            // The generated dispatch's case: a few instructions per lane.
            v.encode(slot);
        } else {
            set_return_resized(slot, v);
        }
    }

    /// Note that lane `lane`'s out-buffers may grow in this call.
    fn touch(&self, lane: u32) {
        self.touched
            .set(self.touched.get() | 1u64.checked_shl(lane).unwrap_or(0));
    }

    /// Whether lane `lane`'s out-buffer `j` goes direct (stored at its
    /// device address, densely, instead of in packets).
    pub(super) fn out_direct(&self, lane: u32, j: usize) -> bool {
        direct_of(self.blocks.get(lane), self.n_in + j)
    }

    /// Store lane `lane`'s out-buffer `j` (elements packed whole per packet,
    /// or densely when it goes direct).
    pub fn set_out<T: Wire>(&self, lane: u32, j: usize, data: &[T]) {
        self.touch(lane);
        // A direct out-buffer with a place in the call's loan goes there
        // (or is there already: the host method wrote its `OutBuffer`).
        // The last store is what the device gets: one in the loan undoes
        // any earlier one elsewhere, and the other way round.
        if let Some(loan) = self.loan.as_ref() {
            if T::slice_as_bytes(data).is_some_and(|raw| loan.store_out(lane, self.n_in + j, raw)) {
                if let Some(v) = self.outs.borrow_mut()[lane as usize].get_mut(j) {
                    v.clear();
                }
                for k in self.kept.borrow_mut().iter_mut().filter(|k| k.lane == lane && k.j == j) {
                    k.in_place = false;
                }
                return;
            }
            loan.forget(lane, self.n_in + j);
        }
        let direct = self.out_direct(lane, j);
        // A direct out-buffer the method wrote in a kept buffer is stored
        // where it lies (it moves to the call's out-buffers when dropped);
        // any other store of this out-buffer undoes that.
        {
            let raw = T::slice_as_bytes(data).filter(|_| direct);
            for k in self.kept.borrow_mut().iter_mut().filter(|k| k.lane == lane && k.j == j) {
                k.in_place = raw.is_some_and(|r| r.as_ptr() as usize == k.at && r.len() == k.len);
                if k.in_place {
                    return;
                }
            }
        }
        let per = if direct {
            // One "packet" as long as the buffer: dense.
            data.len().max(1)
        } else {
            BUFFER_BYTES / T::SIZE
        };
        let padded = data.len().div_ceil(per) * per * T::SIZE;
        let mut all = self.outs.borrow_mut();
        let outs = &mut all[lane as usize];
        if outs.len() <= j {
            outs.resize_with(j + 1, Vec::new);
        }
        let bytes = &mut outs[j];
        if bytes.capacity() < padded && padded >= SPARE_MIN_BYTES {
            // A large one in a kept buffer, if the thread has one.
            if let Some(b) = self.spare.try_borrow_mut().ok().and_then(|mut s| s.take(padded, 1)) {
                let old = std::mem::replace(bytes, b);
                if let Ok(mut spare) = self.spare.try_borrow_mut() {
                    spare.give(old);
                }
            }
        }
        bytes.clear();
        match T::slice_as_bytes(data) {
            // Numbers (sizes that divide a packet): the layout is the slice,
            // padded to whole packets (one pass over the bytes, which may be
            // megabytes).
            Some(raw) => {
                // (Exact: the padding must not double the allocation.)
                bytes.reserve_exact(padded);
                bytes.extend_from_slice(raw);
                bytes.resize(padded, 0);
            }
            None => {
                bytes.resize(padded, 0);
                for (k, v) in data.iter().enumerate() {
                    let off = (k / per) * per * T::SIZE + (k % per) * T::SIZE;
                    v.encode(&mut bytes[off..off + T::SIZE]);
                }
            }
        }
    }

    /// Answer lane `lane` with an error.
    pub fn fail(&mut self, lane: u32, e: LaneError) {
        self.ok &= !(1 << lane);
        self.status[lane as usize] = e.status;
        self.detail[lane as usize] = e.detail;
        self.errors.push(ServerError {
            opcode: self.opcode,
            method: self.method,
            port: self.port,
            lane: Some(lane),
            status: e.status,
            message: e.message,
        });
    }

    /// Run `f` for every lane still `Ok`, in lane order, catching panics and
    /// recording errors: the body of a generated dispatch arm.
    pub fn run(&mut self, mut f: impl FnMut(&mut Self, u32) -> Result<(), LaneError>) {
        let method = self.method;
        for lane in iter_lanes(self.ok) {
            // The lanes still to run after this one (`is_last_lane`).
            super::call_end::set_lanes_after(self.ok & !(2u64 << lane).wrapping_sub(1));
            match catch_lane(method, || f(self, lane)) {
                // The lane's out-buffers are final: on their way to the
                // device while the next lanes run.
                Ok(()) => {
                    if let Some(loan) = &self.loan {
                        loan.lane_done(lane);
                    }
                }
                Err(e) => self.fail(lane, e),
            }
        }
        super::call_end::set_lanes_after(0);
    }
}

/// A host method's out-buffer ([`ServerCall::out_buffer`]): a slice of the
/// memory the call borrowed for direct slices, or a vector. Derefs to
/// `[T]`; hand it back with [`ServerCall::set_out`].
pub struct OutBuffer<'c, T> {
    out: Out<'c, T>,
    /// Byte ranges of the buffer not zeroed yet
    /// ([`ServerCall::lane_out_buffer`]), for its [`LaneSlice`] to zero.
    unzeroed: Vec<core::ops::Range<usize>>,
}

impl<'c, T> OutBuffer<'c, T> {
    fn new(out: Out<'c, T>) -> Self {
        OutBuffer {
            out,
            unzeroed: Vec::new(),
        }
    }

    /// The buffer's elements, for the thread that runs the lane's host
    /// method: [`LaneSlice::zeroed`] zeroes what
    /// [`ServerCall::lane_out_buffer`] left to zero, there, and gives the
    /// slice to write.
    pub fn lane_slice(&mut self) -> LaneSlice<'_, T> {
        let unzeroed = core::mem::take(&mut self.unzeroed);
        LaneSlice { slice: self, unzeroed }
    }
}

/// An out-buffer's elements on their way to the thread that runs a lane's
/// host method ([`OutBuffer::lane_slice`]); `Send` where `T` is.
pub struct LaneSlice<'b, T> {
    slice: &'b mut [T],
    unzeroed: Vec<core::ops::Range<usize>>,
}

impl<'b, T> LaneSlice<'b, T> {
    /// The out-buffer's elements, every one zero (as a host method is
    /// handed an out-buffer), zeroed on this thread where they were not yet.
    pub fn zeroed(mut self) -> &'b mut [T] {
        self.zero();
        core::mem::take(&mut self.slice)
    }

    fn zero(&mut self) {
        // SAFETY: `unzeroed` is non-empty only for a buffer lent by the
        // call's memory (`take_out_unzeroed`), which is made only for `T`
        // whose every byte pattern is a value (`bytes_are_values`); its
        // ranges lie in the slot the slice is.
        unsafe { super::zeroing::zero_ranges(&mut *self.slice, &self.unzeroed) };
        self.unzeroed.clear();
    }
}

impl<T> Drop for LaneSlice<'_, T> {
    /// A slice dropped before [`zeroed`](LaneSlice::zeroed) is zeroed now:
    /// its out-buffer never reaches the device with an earlier call's
    /// bytes.
    fn drop(&mut self) {
        self.zero();
    }
}

enum Out<'c, T> {
    Owned(Vec<T>),
    /// A place in the call's loan, and its flag that says it is held (no
    /// early copy reads it until this out-buffer is dropped).
    Lent(&'c mut [T], &'c core::cell::Cell<bool>),
    /// A buffer the thread kept (`spare.rs`), `count` elements of `T` (a
    /// number, `bytes_are_values`) at an address aligned for `T`; it goes
    /// back to `home` when the out-buffer is dropped.
    Kept {
        buf: Vec<u8>,
        count: usize,
        call: KeptHome<'c>,
        _t: core::marker::PhantomData<T>,
    },
}

/// Where a kept out-buffer goes when dropped: the call's out-buffers if
/// `set_out` stored it in place, else back to the thread's spares.
struct KeptHome<'c> {
    spare: &'c std::cell::RefCell<Spare>,
    outs: &'c std::cell::RefCell<Vec<Vec<Vec<u8>>>>,
    kept: &'c std::cell::RefCell<Vec<KeptPlace>>,
}

impl<T> core::ops::Deref for OutBuffer<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // (One from `lane_out_buffer` is read once its `LaneSlice` zeroed
        // it.)
        debug_assert!(self.unzeroed.is_empty(), "an out-buffer read before it was zeroed");
        match &self.out {
            Out::Owned(v) => v,
            Out::Lent(s, _) => s,
            // SAFETY: `buf` holds `count * size_of::<T>()` initialized bytes
            // at an address aligned for `T` (`Spare::take` checked it), and
            // every byte pattern is a `T` (`out_buffer` made a `Kept` only
            // for such `T`); the view borrows `self`, which owns `buf`.
            Out::Kept { buf, count, .. } => unsafe { core::slice::from_raw_parts(buf.as_ptr().cast::<T>(), *count) },
        }
    }
}

impl<T> core::ops::DerefMut for OutBuffer<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        if !self.unzeroed.is_empty() {
            // Zeroed here, if not by a `LaneSlice`.
            self.lane_slice().zeroed();
        }
        match &mut self.out {
            Out::Owned(v) => v,
            Out::Lent(s, _) => s,
            // SAFETY: as in `deref`, borrowed mutably through `self`.
            Out::Kept { buf, count, .. } => unsafe {
                core::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<T>(), *count)
            },
        }
    }
}

impl<T> Drop for OutBuffer<'_, T> {
    fn drop(&mut self) {
        let Out::Kept { buf, call, .. } = &mut self.out else {
            if let Out::Lent(_, held) = &self.out {
                // The place may be read now (an early copy).
                held.set(false);
            }
            return;
        };
        let buf = std::mem::take(buf);
        let at = buf.as_ptr() as usize;
        let place = {
            let mut kept = call.kept.borrow_mut();
            let k = kept.iter().position(|k| k.at == at);
            k.map(|k| kept.swap_remove(k))
        };
        // (`try_borrow_mut`: nothing else holds these while an out-buffer
        // is dropped, but a drop must not panic if something does.)
        let spare = match place {
            Some(KeptPlace {
                lane,
                j,
                in_place: true,
                ..
            }) => match call.outs.try_borrow_mut() {
                Ok(mut all) => {
                    let outs = &mut all[lane as usize];
                    if outs.len() <= j {
                        outs.resize_with(j + 1, Vec::new);
                    }
                    std::mem::replace(&mut outs[j], buf)
                }
                Err(_) => buf,
            },
            _ => buf,
        };
        // Back for the next call.
        if let Ok(mut s) = call.spare.try_borrow_mut() {
            s.give(spare);
        }
    }
}
