//! The CUDA backend's [`DeviceMemory`] ([`CudaCopies`]): the slices that take
//! [the direct path](crate::call#the-direct-path) move between device memory
//! and the host on the copy engine, on streams of their own, while the
//! kernel that passed them keeps running (it is launched on a non-blocking
//! stream, so nothing waits for it).
//!
//! Copies go through pinned staging memory (the copy engine's full speed
//! needs page-locked host memory), in halves of [`STAGE_HALF_BYTES`] used
//! alternately: one half is on the bus while the other is copied to or from
//! the lanes' host buffers. A server thread holds one stage (two halves) for
//! a call; stages are made on demand up to the limit (default
//! [`DEFAULT_STAGING_BYTES`]) and kept for reuse; a thread that finds them
//! all taken waits for one (a stage is held only for the copies of one call,
//! never while waiting for anything else, so this cannot deadlock).
//!
//! The server can also borrow pinned memory for a whole call
//! ([`DeviceMemory::lend`], from the same budget: a piece of an arena, one
//! pinned allocation lent in pieces (`arena.rs`), so the memory made for
//! one large call serves several smaller ones at once later; none when the
//! budget is taken: the call then uses ordinary buffers and the stages). So
//! that a thread holding such a loan never waits for a stage nobody can
//! make, one stage is always allowed: the pinned memory of a region's copies
//! is at most the limit plus one stage (8 MiB). Slices that lie in lent memory as they lie on the device (the
//! server packs a call's slices in lane order, so a warp's adjacent slices
//! do) move between the device and it in one transfer, with no staging copy
//! at all.
//!
//! Out-buffers that a call's lanes finished while the call still runs are
//! sent from lent memory on a stream of their own ([`DeviceMemory::early_writes`]):
//! the copy engine reads lane `i`'s while lane `i + 1`'s host method writes
//! its own, and the call waits for them before its reply. What host
//! methods wrote into lent memory is zeroed after the loan by the cleaner
//! thread (`cleaner.rs`), so later loans come with zeros the server need
//! not write.
//!
//! A call's copies are sorted by address; neighbours in one allocation
//! (`cuMemGetAddressRange`) are merged into one transfer, reading across gaps
//! of up to [`MERGE_GAP_BYTES`] (a warp's lanes usually pass adjacent slices
//! of one buffer: one transfer instead of 32). Writes merge only slices that
//! touch, so no byte outside a lane's out-buffer is written; slices of
//! [`MERGE_MAX_BYTES`] or more move on their own. A merged
//! transfer that fails is retried slice by slice, so a bad address fails
//! only its own lane.

use std::ffi::c_void;
use std::fmt;
use std::ptr::NonNull;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use cudarc::driver::{result, sys, DriverError};

use super::arena::{Arena, PIECE_BYTES};
use super::cleaner::{self, Cleaning};
use crate::device_memory::{CopyError, DeviceMemory, EarlyWrites};

use super::*;

/// Bytes of one half of a stage (one transfer on the bus at a time).
pub const STAGE_HALF_BYTES: usize = 4 << 20;

/// Default limit on the pinned staging memory of one [`CudaRegion`]'s
/// copies: 64 MiB, eight server threads copying at once.
pub const DEFAULT_STAGING_BYTES: usize = 64 << 20;

/// Largest gap between two slices of one allocation that a merged read
/// transfers too.
pub const MERGE_GAP_BYTES: u64 = 64 << 10;

/// Slices this long or longer are transferred on their own, never merged:
/// alone they already keep the bus busy, and into or out of lent memory
/// they need no staging copy.
pub const MERGE_MAX_BYTES: usize = 256 << 10;

/// Pinned staging memory and two streams: what a server thread holds while
/// it copies one call's slices.
struct Stage {
    host: NonNull<u8>,
    streams: [sys::CUstream; 2],
}

// SAFETY: the stage owns its pinned allocation and streams; the handles are
// valid on every thread of the process, and a stage is used by one thread at
// a time (taken from the pool, given back).
unsafe impl Send for Stage {}

impl Stage {
    fn new() -> Result<Stage, CopyError> {
        let flags = sys::CU_MEMHOSTALLOC_PORTABLE;
        // SAFETY: allocates host memory; no pointer is read.
        let host = call("cuMemHostAlloc", || unsafe {
            result::malloc_host(2 * STAGE_HALF_BYTES, flags)
        })?;
        let host = NonNull::new(host.cast::<u8>()).ok_or(CopyError {
            what: "cuMemHostAlloc returned null",
            code: 0,
        })?;
        let mut streams = [std::ptr::null_mut(); 2];
        for k in 0..2 {
            match call("cuStreamCreate", || {
                result::stream::create(result::stream::StreamKind::NonBlocking)
            }) {
                Ok(s) => streams[k] = s,
                Err(e) => {
                    Stage::free(host, &streams[..k]);
                    return Err(e);
                }
            }
        }
        Ok(Stage { host, streams })
    }

    /// Half `h` (0 or 1) of the staging memory.
    fn half(&mut self, h: usize) -> &mut [u8] {
        // SAFETY: the allocation holds two halves of `STAGE_HALF_BYTES`,
        // owned by this stage and borrowed mutably through `self`.
        unsafe { std::slice::from_raw_parts_mut(self.host.as_ptr().add(h * STAGE_HALF_BYTES), STAGE_HALF_BYTES) }
    }

    fn sync(&self, h: usize) -> Result<(), CopyError> {
        // SAFETY: the stream is this stage's, alive.
        call("cuStreamSynchronize", || unsafe {
            result::stream::synchronize(self.streams[h])
        })
    }

    fn free(host: NonNull<u8>, streams: &[sys::CUstream]) {
        for &s in streams {
            // SAFETY: a stream this stage created; nothing is queued on it
            // (every copy was waited for).
            let _ = call("cuStreamDestroy", || unsafe { result::stream::destroy(s) });
        }
        // SAFETY: the stage's own pinned allocation, no longer used.
        let _ = call("cuMemFreeHost", || unsafe { result::free_host(host.as_ptr().cast()) });
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        Stage::free(self.host, &self.streams);
    }
}

/// A stream this module made, destroyed when dropped.
struct OwnedStream(sys::CUstream);

// SAFETY: a stream handle is valid on every thread of the process; the pool
// hands each to one call at a time.
unsafe impl Send for OwnedStream {}

impl Drop for OwnedStream {
    fn drop(&mut self) {
        // SAFETY: a stream this module created; every copy queued on it was
        // waited for (`EarlyCopies` finishes before it gives it back).
        let _ = call("cuStreamDestroy", || unsafe { result::stream::destroy(self.0) });
    }
}

/// One call's out-buffers sent while it runs ([`DeviceMemory::early_writes`]):
/// each a copy from lent memory on a stream of its own, so the copy engine
/// reads lane `i`'s out-buffer while lane `i + 1`'s host method runs. Only
/// lent (page-locked) memory is copied this way; other bytes are refused
/// and go with the call's other copies.
struct EarlyCopies<'c> {
    copies: &'c CudaCopies,
    stream: Option<OwnedStream>,
    /// Copies were queued since the last wait.
    queued: bool,
    /// A wait failed: the stream is not given back for reuse.
    broken: bool,
}

impl EarlyWrites for EarlyCopies<'_> {
    unsafe fn send(&mut self, at: u64, bytes: &[u8]) -> Result<(), CopyError> {
        let (host, len) = (bytes.as_ptr() as usize, bytes.len());
        if !self.copies.lock().is_lent(host, len) {
            return Err(CopyError {
                what: "an early copy from memory that is not lent",
                code: 0,
            });
        }
        let stream = match &self.stream {
            Some(s) => s.0,
            None => {
                self.copies.bind()?;
                let made = self.copies.lock().early_streams.pop();
                let s = match made {
                    Some(s) => s,
                    None => OwnedStream(call("cuStreamCreate", || {
                        result::stream::create(result::stream::StreamKind::NonBlocking)
                    })?),
                };
                self.stream.insert(s).0
            }
        };
        // SAFETY: `bytes` is lent pinned memory (checked above) that the
        // caller keeps valid and unchanged until `finish` or drop, which
        // wait for the copy; the driver checks the device range.
        call("cuMemcpyHtoDAsync", || unsafe {
            sys::cuMemcpyHtoDAsync_v2(at, host as *const c_void, len, stream).result()
        })?;
        self.queued = true;
        self.copies.lock().stats.straight_bytes += len as u64;
        Ok(())
    }

    fn finish(&mut self) -> Result<(), CopyError> {
        let waited = match (&self.stream, std::mem::take(&mut self.queued)) {
            // SAFETY: the stream is this queue's, alive.
            (Some(s), true) => call("cuStreamSynchronize", || unsafe { result::stream::synchronize(s.0) }),
            _ => Ok(()),
        };
        self.broken |= waited.is_err();
        waited
    }
}

impl Drop for EarlyCopies<'_> {
    fn drop(&mut self) {
        // The lent memory goes back after this: no copy may still read it.
        let waited = self.finish();
        if let (Some(s), Ok(()), false) = (self.stream.take(), waited, self.broken) {
            self.copies.lock().early_streams.push(s);
        }
    }
}

/// A driver call, a panic of the binding (a missing symbol) included, as a
/// [`CopyError`] naming it.
pub(super) fn call<T>(what: &'static str, f: impl FnOnce() -> Result<T, DriverError>) -> Result<T, CopyError> {
    match raw_guard(what, f) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(CopyError { what, code: e.0 as i64 }),
        Err(_) => Err(CopyError { what, code: -1 }),
    }
}

/// The stages and arenas of one region's copies.
pub(super) struct Pool {
    idle: Vec<Stage>,
    made: usize,
    /// Every arena, with which of its pieces are lent now (never removed:
    /// the cleaner names them by index).
    pub(super) arenas: Vec<Arena>,
    /// Bytes of every arena, lent or not.
    arena_bytes: usize,
    /// The address ranges lent now: copies to or from them need no stage.
    lent: Vec<(usize, usize)>,
    /// Streams for out-buffers sent while a call runs ([`EarlyCopies`]),
    /// made on demand (one per server thread sending at once) and kept.
    early_streams: Vec<OwnedStream>,
    /// What the copies did so far.
    pub(super) stats: CopyStats,
    /// What the cleaner has to zero (`cleaner.rs`).
    pub(super) cleaning: Cleaning,
}

/// What a region's direct copies did so far ([`CudaCopies::stats`]): how
/// many calls were lent pinned memory and how many found no room (their
/// slices then went through the stages), and how many bytes moved straight
/// to or from lent memory and how many through the stages. A workload whose
/// large slices show up as `staged_bytes` is one that a larger
/// [`with_staging_limit`](super::CudaRegion::with_staging_limit) would
/// speed up.
///
/// ```no_run
/// # use rpc_runtime as gpu_rpc;
/// # let dev = gpu_rpc::cuda::CudaDevice::new(0)?;
/// let region = gpu_rpc::cuda::CudaRegion::new(&dev, 8)?;
/// // ... launches on `region` ...
/// let s = region.copies().stats();
/// println!("{} of {} calls lent, {} bytes staged", s.loans, s.loans + s.loans_refused, s.staged_bytes);
/// # Ok::<(), gpu_rpc::cuda::CudaError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CopyStats {
    /// Calls lent pinned memory for their direct slices.
    pub loans: u64,
    /// Calls that asked for a loan and got none (the budget was taken, or
    /// pinning more memory failed).
    pub loans_refused: u64,
    /// Bytes moved in one transfer between the device and lent memory.
    pub straight_bytes: u64,
    /// Bytes moved through the stages (a staging copy on the host).
    pub staged_bytes: u64,
    /// Pinned bytes the copies hold now (stages and arenas).
    pub pinned_bytes: u64,
    /// Bytes host methods wrote that the cleaner zeroed after their calls.
    pub cleaned_bytes: u64,
    /// Bytes lent already zeroed (out-buffers in them need no zeroing on
    /// the call's way).
    pub lent_zeroed_bytes: u64,
}

impl Pool {
    fn bytes(&self) -> usize {
        self.made * 2 * STAGE_HALF_BYTES + self.arena_bytes
    }

    /// Whether `[p, p + len)` lies in memory lent now (page-locked).
    fn is_lent(&self, p: usize, len: usize) -> bool {
        self.lent.iter().any(|&(a, b)| a <= p && p + len <= b)
    }
}

/// The pool and its signals, shared with the cleaner thread.
pub(super) struct Shared {
    pool: Mutex<Pool>,
    /// A stage, a piece of an arena or a chunk the cleaner zeroed came back.
    pub(super) freed: Condvar,
    /// The cleaner has something to do (or is to stop).
    pub(super) work: Condvar,
}

impl Shared {
    /// No stages, arenas or streams yet.
    pub(super) fn new() -> Shared {
        Shared {
            pool: Mutex::new(Pool {
                idle: Vec::new(),
                made: 0,
                arenas: Vec::new(),
                arena_bytes: 0,
                lent: Vec::new(),
                early_streams: Vec::new(),
                stats: CopyStats::default(),
                cleaning: Cleaning::default(),
            }),
            freed: Condvar::new(),
            work: Condvar::new(),
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The direct copies of one [`CudaRegion`]'s server (see the module docs);
/// [`CudaRegion::server`] gives its server one.
pub struct CudaCopies {
    device: CudaDevice,
    limit: usize,
    shared: Arc<Shared>,
    /// The cleaner thread, once started.
    cleaner: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Drop for CudaCopies {
    fn drop(&mut self) {
        self.shared.lock().cleaning.stop = true;
        self.shared.work.notify_all();
        let handle = self.cleaner.get_mut().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(h) = handle {
            // It ends at its next look at the pool (after at most one
            // chunk); the arenas it writes are freed only after this.
            let _ = h.join();
        }
    }
}

impl fmt::Debug for CudaCopies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaCopies").field("limit", &self.limit).finish()
    }
}

/// One transfer: the byte span `[start, end)` on the device and the copies
/// (indices, sorted by address) it serves.
struct Span {
    start: u64,
    end: u64,
    members: Vec<usize>,
}

impl CudaCopies {
    /// Copies on `device` with at most `limit` bytes of pinned staging
    /// memory (rounded down to whole stages; at least one stage).
    pub(super) fn new(device: &CudaDevice, limit: usize) -> CudaCopies {
        CudaCopies {
            device: device.clone(),
            limit,
            shared: Arc::new(Shared::new()),
            cleaner: Mutex::new(None),
        }
    }

    /// The most pinned staging memory these copies use.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// What the copies did so far (see [`CopyStats`]).
    pub fn stats(&self) -> CopyStats {
        let pool = self.lock();
        CopyStats {
            pinned_bytes: pool.bytes() as u64,
            ..pool.stats
        }
    }

    fn lock(&self) -> MutexGuard<'_, Pool> {
        self.shared.lock()
    }

    /// Make the device's context current on this thread (server threads
    /// start without one), as a [`CopyError`].
    fn bind(&self) -> Result<(), CopyError> {
        self.device.bind().map_err(|_| CopyError {
            what: "cuCtxSetCurrent",
            code: -1,
        })
    }

    fn take(&self) -> Result<Stage, CopyError> {
        let mut pool = self.lock();
        loop {
            if let Some(s) = pool.idle.pop() {
                return Ok(s);
            }
            // One stage is always allowed, so a thread holding lent memory
            // never waits for a stage nobody can make.
            if pool.made == 0 || pool.bytes() + 2 * STAGE_HALF_BYTES <= self.limit {
                pool.made += 1;
                drop(pool);
                let made = Stage::new();
                if made.is_err() {
                    self.lock().made -= 1;
                    self.shared.freed.notify_all();
                }
                return made;
            }
            pool = self.shared.freed.wait(pool).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn give(&self, stage: Stage) {
        self.lock().idle.push(stage);
        // All: lenders waiting for the cleaner wait on this too.
        self.shared.freed.notify_all();
    }

    /// Start the cleaner thread, once, if a loan came back written.
    fn start_cleaner(&self, pool: &mut Pool) {
        if pool.cleaning.started || cleaner::next_dirty(pool).is_none() {
            return;
        }
        pool.cleaning.started = true;
        let shared = Arc::clone(&self.shared);
        // Without a thread nothing is zeroed ahead: the server zeroes
        // out-buffers itself, as before.
        if let Ok(h) = std::thread::Builder::new()
            .name("gpu_rpc cleaner".into())
            .spawn(move || cleaner::run(shared))
        {
            *self.cleaner.lock().unwrap_or_else(|e| e.into_inner()) = Some(h);
        }
    }

    /// The end of the allocation holding `at`, if the driver knows it.
    fn allocation_end(at: u64) -> Option<u64> {
        let (mut base, mut size) = (0u64, 0usize);
        // SAFETY: the driver only writes the two out-parameters.
        let r = call("cuMemGetAddressRange", || unsafe {
            sys::cuMemGetAddressRange_v2(&mut base, &mut size, at).result()
        });
        r.ok().map(|()| base + size as u64)
    }

    /// Sort the copies `(address, length)` into spans: neighbours in one
    /// allocation at most `gap` bytes apart (`None`: only slices that touch,
    /// never overlapping) share one.
    fn spans(ranges: &[(u64, usize)], gap: Option<u64>) -> Vec<Span> {
        let mut order: Vec<usize> = (0..ranges.len()).filter(|&k| ranges[k].1 > 0).collect();
        order.sort_by_key(|&k| ranges[k].0);
        let mut spans: Vec<Span> = Vec::new();
        // The end of the allocation holding the last span, when that span
        // may take more slices (it started with a small one).
        let mut alloc_end = None;
        for k in order {
            let (at, len) = ranges[k];
            let end = at.saturating_add(len as u64);
            let small = len < MERGE_MAX_BYTES;
            if let (Some(s), true) = (spans.last_mut(), small) {
                let near = match gap {
                    Some(g) => at <= s.end.saturating_add(g),
                    None => at == s.end,
                };
                if near && alloc_end.is_some_and(|e| end <= e) {
                    s.end = s.end.max(end);
                    s.members.push(k);
                    continue;
                }
            }
            alloc_end = if small { Self::allocation_end(at) } else { None };
            spans.push(Span {
                start: at,
                end,
                members: vec![k],
            });
        }
        spans
    }

    /// Split `spans` into those whose members' host buffers (`hosts[k]`,
    /// `ranges[k].1` bytes) lie in lent memory at one offset from their
    /// device addresses (so the span moves in one transfer, with no staging
    /// copy; returned with the span's host address) and the others.
    fn direct_spans<'s>(
        &self,
        spans: &'s [Span],
        ranges: &[(u64, usize)],
        hosts: &[usize],
    ) -> (Vec<(&'s Span, usize)>, Vec<&'s Span>) {
        let mut pool = self.lock();
        let (mut direct, mut staged) = (Vec::new(), Vec::new());
        for sp in spans {
            let k0 = sp.members[0];
            let delta = hosts[k0].wrapping_sub(ranges[k0].0 as usize);
            let uniform = sp
                .members
                .iter()
                .all(|&k| hosts[k].wrapping_sub(ranges[k].0 as usize) == delta);
            // The members must tile the span: a transfer across a gap would
            // write the gap's bytes over whatever the loan holds there.
            let covered: u64 = sp.members.iter().map(|&k| ranges[k].1 as u64).sum();
            let tiled = covered == sp.end - sp.start;
            let host = (sp.start as usize).wrapping_add(delta);
            if uniform && tiled && pool.is_lent(host, (sp.end - sp.start) as usize) {
                pool.stats.straight_bytes += covered;
                direct.push((sp, host));
            } else {
                pool.stats.staged_bytes += covered;
                staged.push(sp);
            }
        }
        (direct, staged)
    }

    /// Read one span through `stage`, scattering it into the members'
    /// buffers; pipelined over the two halves.
    fn read_span(stage: &mut Stage, span: &Span, copies: &mut [(u64, &mut [u8])]) -> Result<(), CopyError> {
        let total = (span.end - span.start) as usize;
        let chunks = total.div_ceil(STAGE_HALF_BYTES);
        let enqueue = |stage: &mut Stage, c: usize| -> Result<(), CopyError> {
            let off = c * STAGE_HALF_BYTES;
            let n = (total - off).min(STAGE_HALF_BYTES);
            let stream = stage.streams[c % 2];
            let dst = &mut stage.half(c % 2)[..n];
            // SAFETY: `dst` is pinned staging memory this thread holds until
            // the stream is synchronized below; the device range was checked
            // by the driver (an address it did not map is refused).
            call("cuMemcpyDtoHAsync", || unsafe {
                result::memcpy_dtoh_async(dst, span.start + off as u64, stream)
            })
        };
        enqueue(stage, 0)?;
        for c in 0..chunks {
            if c + 1 < chunks {
                if let Err(e) = enqueue(stage, c + 1) {
                    let _ = stage.sync(c % 2);
                    return Err(e);
                }
            }
            if let Err(e) = stage.sync(c % 2) {
                let _ = stage.sync((c + 1) % 2);
                return Err(e);
            }
            let lo = span.start + (c * STAGE_HALF_BYTES) as u64;
            let n = (total - c * STAGE_HALF_BYTES).min(STAGE_HALF_BYTES);
            let half = &stage.half(c % 2)[..n];
            for &k in &span.members {
                let (at, dst) = &mut copies[k];
                if let Some((d, s, len)) = overlap(*at, dst.len(), lo, n) {
                    dst[d..d + len].copy_from_slice(&half[s..s + len]);
                }
            }
        }
        Ok(())
    }

    /// Write one span (slices that touch) through `stage`, gathering the
    /// members' bytes; pipelined over the two halves.
    fn write_span(stage: &mut Stage, span: &Span, copies: &[(u64, &[u8])]) -> Result<(), CopyError> {
        let total = (span.end - span.start) as usize;
        let chunks = total.div_ceil(STAGE_HALF_BYTES);
        for c in 0..chunks {
            let h = c % 2;
            if c >= 2 {
                if let Err(e) = stage.sync(h) {
                    // The other half may still be on the bus: let it finish
                    // before the stage is used again.
                    let _ = stage.sync(1 - h);
                    return Err(e);
                }
            }
            let lo = span.start + (c * STAGE_HALF_BYTES) as u64;
            let n = (total - c * STAGE_HALF_BYTES).min(STAGE_HALF_BYTES);
            let half = &mut stage.half(h)[..n];
            for &k in &span.members {
                let (at, src) = copies[k];
                if let Some((s, d, len)) = overlap(at, src.len(), lo, n) {
                    half[d..d + len].copy_from_slice(&src[s..s + len]);
                }
            }
            let stream = stage.streams[h];
            let src = &stage.half(h)[..n];
            // SAFETY: `src` is pinned staging memory this thread holds until
            // the stream is synchronized; the driver checks the device range.
            let sent = call("cuMemcpyHtoDAsync", || unsafe {
                result::memcpy_htod_async(lo, src, stream)
            });
            if let Err(e) = sent {
                let _ = (stage.sync(0), stage.sync(1));
                return Err(e);
            }
        }
        let a = stage.sync(0);
        let b = stage.sync(1);
        a.and(b)
    }
}

/// Where the slice of `len` bytes at device address `at` and the chunk of
/// `n` bytes at `lo` overlap: `(offset in the slice, offset in the chunk,
/// bytes)`, or `None` if they do not.
fn overlap(at: u64, len: usize, lo: u64, n: usize) -> Option<(usize, usize, usize)> {
    let from = at.max(lo);
    let to = (at + len as u64).min(lo + n as u64);
    (from < to).then(|| ((from - at) as usize, (from - lo) as usize, (to - from) as usize))
}

/// Which way a call's copies go, and how each kind of span moves.
enum Way<'c, 'b> {
    /// Device to host, into the buffers.
    In(&'c mut [(u64, &'b mut [u8])]),
    /// Host to device, from the buffers.
    Out(&'c [(u64, &'b [u8])]),
}

impl Way<'_, '_> {
    fn ranges(&self) -> Vec<(u64, usize)> {
        match self {
            Way::In(c) => c.iter().map(|(a, d)| (*a, d.len())).collect(),
            Way::Out(c) => c.iter().map(|(a, s)| (*a, s.len())).collect(),
        }
    }

    fn hosts(&self) -> Vec<usize> {
        match self {
            Way::In(c) => c.iter().map(|(_, d)| d.as_ptr() as usize).collect(),
            Way::Out(c) => c.iter().map(|(_, s)| s.as_ptr() as usize).collect(),
        }
    }

    /// Queue the transfer of `span` between the device and `host`, where its
    /// members lie as on the device, on `stream`.
    fn enqueue(&self, span: &Span, host: usize, stream: sys::CUstream) -> Result<(), CopyError> {
        let len = (span.end - span.start) as usize;
        match self {
            // SAFETY: `[host, host + len)` is lent pinned memory, the members'
            // buffers, borrowed by the copies until `transfer` returns, after
            // the streams are synchronized; the driver checks the device
            // range.
            Way::In(_) => call("cuMemcpyDtoHAsync", || unsafe {
                sys::cuMemcpyDtoHAsync_v2(host as *mut c_void, span.start, len, stream).result()
            }),
            // SAFETY: as above; the memory holds the members' bytes.
            Way::Out(_) => call("cuMemcpyHtoDAsync", || unsafe {
                sys::cuMemcpyHtoDAsync_v2(span.start, host as *const c_void, len, stream).result()
            }),
        }
    }

    /// Move `span` through the stage's halves.
    fn staged(&mut self, stage: &mut Stage, span: &Span) -> Result<(), CopyError> {
        match self {
            Way::In(c) => CudaCopies::read_span(stage, span, c),
            Way::Out(c) => CudaCopies::write_span(stage, span, c),
        }
    }
}

impl CudaCopies {
    /// One call's copies, either way: spans that lie in lent memory as on
    /// the device in one transfer each, straight; the others through the
    /// stage (a merged span that fails is retried slice by slice, so a bad
    /// address fails only its own lane).
    fn transfer(&self, mut way: Way<'_, '_>, failed: &mut dyn FnMut(usize, CopyError)) {
        let ranges = way.ranges();
        let all = |failed: &mut dyn FnMut(usize, CopyError), e| (0..ranges.len()).for_each(|k| failed(k, e));
        if let Err(e) = self.bind() {
            return all(failed, e);
        }
        // Reads may bridge small gaps; writes never touch bytes between
        // slices.
        let gap = matches!(way, Way::In(_)).then_some(MERGE_GAP_BYTES);
        let spans = Self::spans(&ranges, gap);
        let mut stage = match self.take() {
            Ok(s) => s,
            Err(e) => return all(failed, e),
        };
        let (direct, staged) = self.direct_spans(&spans, &ranges, &way.hosts());
        let mut queued = Vec::new();
        for (n, (span, host)) in direct.iter().enumerate() {
            match way.enqueue(span, *host, stage.streams[n % 2]) {
                Ok(()) => queued.push(*span),
                Err(e) => span.members.iter().for_each(|&k| failed(k, e)),
            }
        }
        if let Err(e) = stage.sync(0).and(stage.sync(1)) {
            queued.iter().flat_map(|sp| &sp.members).for_each(|&k| failed(k, e));
        }
        for span in staged {
            if way.staged(&mut stage, span).is_ok() {
                continue;
            }
            for &k in &span.members {
                let one = Span {
                    start: ranges[k].0,
                    end: ranges[k].0 + ranges[k].1 as u64,
                    members: vec![k],
                };
                if let Err(e) = way.staged(&mut stage, &one) {
                    failed(k, e);
                }
            }
        }
        self.give(stage);
    }
}

impl DeviceMemory for CudaCopies {
    fn read(&self, copies: &mut [(u64, &mut [u8])], failed: &mut dyn FnMut(usize, CopyError)) {
        self.transfer(Way::In(copies), failed)
    }

    fn write(&self, copies: &[(u64, &[u8])], failed: &mut dyn FnMut(usize, CopyError)) {
        self.transfer(Way::Out(copies), failed)
    }

    fn early_writes(&self) -> Option<Box<dyn EarlyWrites + '_>> {
        Some(Box::new(EarlyCopies {
            copies: self,
            stream: None,
            queued: false,
            broken: false,
        }))
    }

    fn lend(&self, bytes: usize) -> Option<crate::device_memory::Lent<'_>> {
        // A piece of an arena: of one with room, else of a new one (whole
        // MiBs, so that later calls find room in it), while the arenas and
        // stages stay within the limit. A call may take the whole budget;
        // while it does, other calls use ordinary buffers and the one stage
        // always allowed.
        let need = bytes.max(1).next_multiple_of(PIECE_BYTES);
        let mut pool = self.lock();
        if need > self.limit {
            pool.stats.loans_refused += 1;
            return None;
        }
        let (a, at) = loop {
            // Of the arenas with room, the one whose piece holds the most
            // zeros (the cleaner's work since its last loan).
            let found = (0..pool.arenas.len())
                .filter_map(|a| pool.arenas[a].free.fit(need).map(|at| (a, at)))
                .max_by_key(|&(a, at)| {
                    let clean = &pool.arenas[a].clean;
                    (
                        clean.overlaps(at, need).map(|(s, e)| e - s).sum::<usize>(),
                        usize::MAX - a,
                    )
                });
            if let Some((a, at)) = found {
                pool.arenas[a].free.remove(at, need);
                break (a, at);
            }
            // No room. A new arena if the budget has room for it (the
            // cleaner zeroes the others meanwhile); else the cleaner may
            // hold the bytes that would make room: wait for its chunk (it
            // starts no other while anyone waits); else the call uses
            // ordinary buffers. (Arenas are not freed to make room: freeing
            // pinned memory may wait for the device, which may be waiting
            // for this server.)
            let size = need.next_multiple_of(1 << 20);
            if pool.bytes() + size > self.limit {
                if pool.cleaning.busy {
                    pool.cleaning.waiting += 1;
                    pool = self.shared.freed.wait(pool).unwrap_or_else(|e| e.into_inner());
                    pool.cleaning.waiting -= 1;
                    if pool.cleaning.waiting == 0 {
                        self.shared.work.notify_all();
                    }
                    continue;
                }
                pool.stats.loans_refused += 1;
                return None;
            }
            pool.arena_bytes += size;
            drop(pool);
            // The context must be current on this server thread before it
            // pins memory: a thread's first call reaches here before any
            // copy has bound it, and without it the allocation failed, a
            // stage was made for the copy, and a loan of the whole budget
            // never fitted again (every 64 MiB slice went through the
            // stages: 64 of 64 loans refused on the H200).
            let made = self.bind().and_then(|()| Arena::new(size));
            pool = self.lock();
            match made {
                Ok(mut arena) => {
                    let at = arena.free.take(need).expect("a new arena holds its first piece");
                    pool.arenas.push(arena);
                    break (pool.arenas.len() - 1, at);
                }
                Err(_) => {
                    pool.arena_bytes -= size;
                    pool.stats.loans_refused += 1;
                    return None;
                }
            }
        };
        // The piece's bytes the cleaner zeroed go with it, as zeros; none of
        // it is for the cleaner any more.
        let arena = &mut pool.arenas[a];
        let zeroed: Vec<_> = arena.clean.overlaps(at, need).map(|(s, e)| s - at..e - at).collect();
        arena.clean.remove(at, need);
        arena.dirty.remove(at, need);
        let host = arena.host;
        pool.stats.lent_zeroed_bytes += zeroed.iter().map(|r| r.len() as u64).sum::<u64>();
        // SAFETY: pointer arithmetic only: `at + need` is within the arena.
        let ptr = unsafe { NonNull::new_unchecked(host.as_ptr().add(at)) };
        let start = ptr.as_ptr() as usize;
        pool.lent.push((start, start + need));
        pool.stats.loans += 1;
        drop(pool);
        let back = Box::new(move |written: &[std::ops::Range<usize>]| {
            let mut pool = self.lock();
            pool.lent.retain(|&(a, _)| a != start);
            let arena = &mut pool.arenas[a];
            arena.free.give(at, need);
            // What host methods wrote, for the cleaner to zero.
            for w in written.iter().filter(|w| w.start < w.end.min(need)) {
                arena.dirty.give(at + w.start, w.end.min(need) - w.start);
            }
            self.start_cleaner(&mut pool);
            drop(pool);
            self.shared.freed.notify_all();
            if !written.is_empty() {
                self.shared.work.notify_all();
            }
        });
        // SAFETY: the piece's `need` bytes are this loan's alone: the arena's
        // free ranges no longer hold them, and get them back only when
        // `back` runs; the ranges of `zeroed` were clean (the cleaner zeroed
        // them, and no loan has had them since).
        Some(unsafe { crate::device_memory::Lent::with_zeros(ptr, need, zeroed, back) })
    }
}

#[cfg(test)]
mod tests {
    use super::overlap;

    #[test]
    fn a_slice_and_a_chunk_overlap_where_both_lie() {
        // Slice [100, 150), chunk [120, 220): bytes 20.. of the slice at 0..
        // of the chunk, 30 of them.
        assert_eq!(overlap(100, 50, 120, 100), Some((20, 0, 30)));
        // The slice inside the chunk.
        assert_eq!(overlap(130, 10, 120, 100), Some((0, 10, 10)));
        // Touching is not overlapping; empty slices never do.
        assert_eq!(overlap(220, 5, 120, 100), None);
        assert_eq!(overlap(100, 20, 120, 100), None);
        assert_eq!(overlap(130, 0, 120, 100), None);
    }
}
