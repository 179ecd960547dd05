//! Direct copies between the device's memory and the host: the interface a
//! backend implements so that a server can fetch a lane's `&[T]` argument,
//! and store its `&mut [T]` out-buffer, by address instead of through the
//! port's 64-byte packets (see [the direct path](crate::call#the-direct-path)).
//!
//! A [`Server`](crate::protocol::Server) is given one with
//! [`Server::with_memory`](crate::protocol::Server::with_memory). The CUDA
//! backend's copies run on the copy engine while the kernel runs; the CPU
//! backend's read its own process's memory. A server without one refuses
//! direct lanes (each with an error naming the lane). On NVPTX the direct
//! path is on unless the kernel turns it off
//! ([`call::set_direct`](crate::call::set_direct)): serve CUDA kernels with
//! a server that has device memory (`CudaRegion::server` gives its own).
//!
//! Addresses come from the device and are not trusted: an implementation
//! checks each copy (the driver refuses an address it did not map, the
//! kernel one the process did not), reports it through `failed`, and goes on
//! with the others.

/// Why one direct copy failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyError {
    /// What failed (`"cuMemcpyDtoHAsync"`, `"process_vm_readv"`, ...).
    pub what: &'static str,
    /// The driver's or the OS's error code (0 if none).
    pub code: i64,
}

impl core::fmt::Display for CopyError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} failed (error {})", self.what, self.code)
    }
}

/// Device memory a server can copy to and from directly.
///
/// Both methods take a whole call's copies at once, so an implementation can
/// merge neighbours (a warp's lanes often pass adjacent slices of one
/// buffer) and wait once for all of them. Each copy that fails is reported
/// as `failed(k, why)` (`k` its index); every other copy is complete when the
/// method returns.
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::device_memory::{CopyError, DeviceMemory};
/// /// A device whose memory is one host array at address 0x1000.
/// struct Array(std::sync::Mutex<Vec<u8>>);
/// impl Array {
///     fn range(&self, at: u64, len: usize) -> Option<std::ops::Range<usize>> {
///         let start = at.checked_sub(0x1000)? as usize;
///         (start + len <= self.0.lock().unwrap().len()).then(|| start..start + len)
///     }
/// }
/// const OUT: CopyError = CopyError { what: "array bounds", code: 0 };
/// impl DeviceMemory for Array {
///     fn read(&self, copies: &mut [(u64, &mut [u8])], failed: &mut dyn FnMut(usize, CopyError)) {
///         for (k, (at, dst)) in copies.iter_mut().enumerate() {
///             match self.range(*at, dst.len()) {
///                 Some(r) => dst.copy_from_slice(&self.0.lock().unwrap()[r]),
///                 None => failed(k, OUT),
///             }
///         }
///     }
///     fn write(&self, copies: &[(u64, &[u8])], failed: &mut dyn FnMut(usize, CopyError)) {
///         for (k, (at, src)) in copies.iter().enumerate() {
///             match self.range(*at, src.len()) {
///                 Some(r) => self.0.lock().unwrap()[r].copy_from_slice(src),
///                 None => failed(k, OUT),
///             }
///         }
///     }
/// }
/// let mem = Array(std::sync::Mutex::new((0..64).collect()));
/// let mut buf = [0u8; 4];
/// let mut bad = Vec::new();
/// mem.read(&mut [(0x1002, &mut buf[..])], &mut |k, e| bad.push((k, e)));
/// assert_eq!((buf, bad.len()), ([2, 3, 4, 5], 0));
/// mem.write(&[(0x2000, &[1u8][..])], &mut |k, e| bad.push((k, e)));
/// assert_eq!(bad, [(0, OUT)]);
/// ```
pub trait DeviceMemory: Sync {
    /// Fill each `copies[k].1` from the device bytes at address `copies[k].0`.
    fn read(&self, copies: &mut [(u64, &mut [u8])], failed: &mut dyn FnMut(usize, CopyError));
    /// Store each `copies[k].1` at device address `copies[k].0`.
    fn write(&self, copies: &[(u64, &[u8])], failed: &mut dyn FnMut(usize, CopyError));
    /// Lend `bytes` of host memory for one call's direct slices, memory
    /// that [`read`](Self::read) and [`write`](Self::write) move at the
    /// bus's full speed (on a GPU: page-locked, so a slice goes to or from
    /// it with no staging copy). `None` (the default) when the backend has
    /// none to lend: the server then uses its own buffers. A loan may say
    /// which of its bytes hold zeros ([`Lent::with_zeros`]), and hears
    /// which bytes the server wrote when it ends.
    #[cfg(feature = "std")]
    fn lend(&self, bytes: usize) -> Option<Lent<'_>> {
        let _ = bytes;
        None
    }

    /// A queue for one call's out-buffers that are stored while the call is
    /// still running: the server sends a lane's out-buffers as soon as its
    /// host method is done, so the bus carries them while the next lanes'
    /// methods run, instead of all of them after the last. `None` (the
    /// default) when the backend cannot copy in the background: the server
    /// then stores every out-buffer with [`write`](Self::write) at the end.
    #[cfg(feature = "std")]
    fn early_writes(&self) -> Option<std::boxed::Box<dyn EarlyWrites + '_>> {
        None
    }
}

/// Copies to the device queued while a call runs ([`DeviceMemory::early_writes`]),
/// each complete when [`finish`](Self::finish) returns or the queue is dropped.
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::device_memory::{CopyError, EarlyWrites};
/// /// A queue that copies at once into a host array standing for the device.
/// struct Now<'a>(&'a mut Vec<u8>);
/// impl EarlyWrites for Now<'_> {
///     unsafe fn send(&mut self, at: u64, bytes: &[u8]) -> Result<(), CopyError> {
///         let at = at as usize;
///         match self.0.get_mut(at..at + bytes.len()) {
///             Some(dst) => {
///                 dst.copy_from_slice(bytes);
///                 Ok(())
///             }
///             None => Err(CopyError { what: "array bounds", code: 0 }),
///         }
///     }
///     fn finish(&mut self) -> Result<(), CopyError> { Ok(()) }
/// }
/// let mut device = vec![0u8; 8];
/// let mut q = Now(&mut device);
/// // SAFETY: the bytes are a constant, valid for the whole program.
/// unsafe { q.send(2, &[7, 7]).unwrap() };
/// assert!(unsafe { q.send(7, &[1, 2]) }.is_err(), "refused, not queued");
/// q.finish().unwrap();
/// assert_eq!(device, [0, 0, 7, 7, 0, 0, 0, 0]);
/// ```
#[cfg(feature = "std")]
pub trait EarlyWrites {
    /// Queue the copy of `bytes` to device address `at`. `Err` when it was
    /// not queued (an address the device does not map, bytes the backend
    /// cannot copy in the background): the caller stores those bytes
    /// another way.
    ///
    /// # Safety
    /// `bytes` must stay valid and unchanged until [`finish`](Self::finish)
    /// returns or the queue is dropped: the copy may still be reading them.
    unsafe fn send(&mut self, at: u64, bytes: &[u8]) -> Result<(), CopyError>;

    /// Wait until every queued copy is complete; `Err` if any failed (then
    /// which did is not known: the caller counts every queued one as
    /// failed).
    fn finish(&mut self) -> Result<(), CopyError>;
}

/// What a lender runs when its loan ends, given the byte ranges of the loan
/// the server wrote ([`Lent::written`]).
#[cfg(feature = "std")]
pub type GiveBack<'m> = std::boxed::Box<dyn FnOnce(&[core::ops::Range<usize>]) + 'm>;

/// Host memory a [`DeviceMemory`] lent for one call ([`DeviceMemory::lend`]):
/// bytes to read and write as a slice, given back when dropped.
///
/// A lender may say which bytes hold zeros already ([`with_zeros`](Self::with_zeros)):
/// the server then skips zeroing those for the call's out-buffers. The
/// server in turn tells the lender which bytes its host methods wrote
/// ([`written`](Self::written)), so a lender can zero them after the loan,
/// away from the calls (the CUDA backend's cleaner does).
#[cfg(feature = "std")]
pub struct Lent<'m> {
    ptr: core::ptr::NonNull<u8>,
    len: usize,
    back: Option<GiveBack<'m>>,
    zeroed: std::vec::Vec<core::ops::Range<usize>>,
    written: std::vec::Vec<core::ops::Range<usize>>,
}

#[cfg(feature = "std")]
impl<'m> Lent<'m> {
    /// `len` bytes at `ptr`, lent until dropped, when `back` runs.
    ///
    /// ```
    /// # use rpc_runtime as gpu_rpc;
    /// use gpu_rpc::device_memory::Lent;
    /// let mut store = vec![0u8; 16];
    /// let ptr = std::ptr::NonNull::new(store.as_mut_ptr()).unwrap();
    /// let returned = std::cell::Cell::new(false);
    /// // SAFETY: `store` outlives the loan and nothing else touches it.
    /// let mut lent = unsafe { Lent::new(ptr, 16, Box::new(|| returned.set(true))) };
    /// lent[3] = 7;
    /// drop(lent);
    /// assert!(returned.get());
    /// assert_eq!(store[3], 7);
    /// ```
    ///
    /// # Safety
    /// `ptr` must be valid for reads and writes of `len` bytes, and used by
    /// nothing else, until `back` has run.
    pub unsafe fn new(ptr: core::ptr::NonNull<u8>, len: usize, back: std::boxed::Box<dyn FnOnce() + 'm>) -> Lent<'m> {
        // SAFETY: the caller's promise, passed on; no bytes are said to be
        // zero.
        unsafe { Lent::with_zeros(ptr, len, std::vec::Vec::new(), std::boxed::Box::new(move |_| back())) }
    }

    /// [`new`](Self::new) for a lender that knows the byte ranges `zeroed`
    /// (sorted, within `len`) hold zeros, and whose `back` is told which
    /// ranges the server wrote.
    ///
    /// ```
    /// # use rpc_runtime as gpu_rpc;
    /// use gpu_rpc::device_memory::Lent;
    /// let mut store = vec![0u8; 16];
    /// let ptr = std::ptr::NonNull::new(store.as_mut_ptr()).unwrap();
    /// let dirty = std::cell::RefCell::new(Vec::new());
    /// // SAFETY: `store` outlives the loan and nothing else touches it; it
    /// // is all zeros.
    /// let mut lent = unsafe { Lent::with_zeros(ptr, 16, vec![0..16], Box::new(|w| dirty.borrow_mut().extend_from_slice(w))) };
    /// assert_eq!(lent.zeroed(), [0..16]);
    /// lent[4..8].fill(1);
    /// lent.written(4..8);
    /// drop(lent);
    /// assert_eq!(*dirty.borrow(), [4..8]);
    /// ```
    ///
    /// # Safety
    /// As for [`new`](Self::new); and every byte in `zeroed` is zero.
    pub unsafe fn with_zeros(
        ptr: core::ptr::NonNull<u8>,
        len: usize,
        zeroed: std::vec::Vec<core::ops::Range<usize>>,
        back: GiveBack<'m>,
    ) -> Lent<'m> {
        Lent {
            ptr,
            len,
            back: Some(back),
            zeroed,
            written: std::vec::Vec::new(),
        }
    }

    /// The byte ranges of the loan that held zeros when it was lent,
    /// sorted.
    pub fn zeroed(&self) -> &[core::ops::Range<usize>] {
        &self.zeroed
    }

    /// Note that the server wrote `range` (out-buffers a host method
    /// filled): the lender hears of it when the loan ends. A range that
    /// continues the last one noted joins it.
    pub fn written(&mut self, range: core::ops::Range<usize>) {
        match self.written.last_mut() {
            Some(last) if last.end == range.start => last.end = range.end,
            _ => self.written.push(range),
        }
    }
}

#[cfg(feature = "std")]
impl core::ops::Deref for Lent<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `new`'s contract: `len` bytes, ours until dropped.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

#[cfg(feature = "std")]
impl core::ops::DerefMut for Lent<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, borrowed uniquely through `self`.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

#[cfg(feature = "std")]
impl Drop for Lent<'_> {
    fn drop(&mut self) {
        if let Some(back) = self.back.take() {
            back(&self.written);
        }
    }
}
