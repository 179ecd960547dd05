//! [`ServerCall`]: one call being served, as the dispatch code `#[gpu_rpc]`
//! generates sees it (per-lane arguments in, per-lane results out).

use super::direct::Loan;
use super::lane_records::LaneRecords;
use super::serve_call::{direct_of, lens_of};
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

/// The lanes of `mask`, lowest first.
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// assert_eq!(gpu_rpc::server::iter_lanes(0b1010).collect::<Vec<_>>(), [1, 3]);
/// ```
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
    pub(super) errors: Vec<ServerError>,
    pub(super) n_in: usize,
    /// Memory the backend lent for the call's direct slices.
    pub(super) loan: Option<Loan<'d>>,
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
    pub fn arg_at<T: Wire>(&self, lane: u32, offset: usize, index: u32) -> Result<T, LaneError> {
        let b = self.blocks.get(lane);
        let start = self.arg_offset + offset;
        let bytes = b.get(start..start + T::SIZE).ok_or_else(|| LaneError {
            status: Status::InvalidArgument,
            detail: index,
            message: format!("argument {index} lies outside the argument block"),
        })?;
        T::decode(bytes).map_err(|e| LaneError {
            status: Status::InvalidArgument,
            detail: index,
            message: format!("argument {index}: {e}"),
        })
    }

    /// [`arg_at`](Self::arg_at) for argument 0 at offset `offset`.
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
    /// from), else a vector. Fails with [`Status::TooLarge`] instead of
    /// aborting the process when the host cannot allocate it (limits
    /// configured beyond the host's memory).
    pub fn out_buffer<T: Wire>(&self, lane: u32, j: usize) -> Result<OutBuffer<'_, T>, LaneError> {
        let block = self.blocks.get(lane);
        let count = lens_of(block, self.n_in + j);
        let numbers = crate::wire::bytes_are_values::<T>();
        if let (true, Some(loan)) = (numbers, self.loan.as_ref()) {
            if let Some(place) = loan.take_out::<T>(lane, self.n_in + j, count as usize) {
                return Ok(OutBuffer(Out::Lent(place)));
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
        Ok(OutBuffer(Out::Owned(v)))
    }

    /// Store lane `lane`'s return value.
    ///
    /// The reply carries as many bytes as the method returns: a value of
    /// another size (only a hand-written dispatch can store one) is cut or
    /// zero-padded to that.
    pub fn set_return<T: Wire>(&self, lane: u32, v: &T) {
        let mut rets = self.rets.borrow_mut();
        let slot = rets.get_mut(lane);
        if slot.len() == T::SIZE {
            v.encode(slot);
            return;
        }
        let mut buf = vec![0; T::SIZE];
        v.encode(&mut buf);
        let n = slot.len().min(T::SIZE);
        slot[..n].copy_from_slice(&buf[..n]);
        slot[n..].fill(0);
    }

    /// Whether lane `lane`'s out-buffer `j` goes direct (stored at its
    /// device address, densely, instead of in packets).
    pub(super) fn out_direct(&self, lane: u32, j: usize) -> bool {
        direct_of(self.blocks.get(lane), self.n_in + j)
    }

    /// Store lane `lane`'s out-buffer `j` (elements packed whole per packet,
    /// or densely when it goes direct).
    pub fn set_out<T: Wire>(&self, lane: u32, j: usize, data: &[T]) {
        // A direct out-buffer with a place in the call's loan goes there
        // (or is there already: the host method wrote its `OutBuffer`).
        if let (Some(loan), Some(raw)) = (self.loan.as_ref(), T::slice_as_bytes(data)) {
            if loan.store_out(lane, self.n_in + j, raw) {
                return;
            }
        }
        let per = if self.out_direct(lane, j) {
            // One "packet" as long as the buffer: dense.
            data.len().max(1)
        } else {
            BUFFER_BYTES / T::SIZE
        };
        let mut all = self.outs.borrow_mut();
        let outs = &mut all[lane as usize];
        if outs.len() <= j {
            outs.resize_with(j + 1, Vec::new);
        }
        let bytes = &mut outs[j];
        bytes.clear();
        bytes.resize(data.len().div_ceil(per) * per * T::SIZE, 0);
        match T::slice_as_bytes(data) {
            // One-byte elements pack 64 to a packet: the layout is the slice.
            Some(raw) => bytes[..raw.len()].copy_from_slice(raw),
            None => {
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
        for lane in iter_lanes(self.ok) {
            let r = catch_unwind(AssertUnwindSafe(|| f(self, lane)));
            match r {
                Ok(Ok(())) => {}
                Ok(Err(e)) => self.fail(lane, e),
                Err(payload) => {
                    let msg = panic_message(&*payload);
                    let method = self.method.unwrap_or("?");
                    self.fail(
                        lane,
                        LaneError {
                            status: Status::HandlerPanicked,
                            detail: 0,
                            message: format!("{method} panicked: {msg}"),
                        },
                    );
                }
            }
        }
    }
}

/// A host method's out-buffer ([`ServerCall::out_buffer`]): a slice of the
/// memory the call borrowed for direct slices, or a vector. Derefs to
/// `[T]`; hand it back with [`ServerCall::set_out`].
pub struct OutBuffer<'c, T>(Out<'c, T>);

enum Out<'c, T> {
    Owned(Vec<T>),
    Lent(&'c mut [T]),
}

impl<T> core::ops::Deref for OutBuffer<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match &self.0 {
            Out::Owned(v) => v,
            Out::Lent(s) => s,
        }
    }
}

impl<T> core::ops::DerefMut for OutBuffer<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match &mut self.0 {
            Out::Owned(v) => v,
            Out::Lent(s) => s,
        }
    }
}
