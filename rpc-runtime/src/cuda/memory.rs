//! Memory the backend allocates: pinned mapped host buffers, device words,
//! device buffers, the per-thread stack limit, and the shared region
//! ([`CudaRegion`]).

use std::ffi::c_void;
use std::fmt;
use std::ptr::NonNull;
use std::time::{Duration, Instant};

use cudarc::driver::{result, sys};

use crate::protocol::{client_local_words, ClientDesc, Layout, Parts, Server, ServerLocks, MAX_PORTS};

use super::*;

/// Pinned host memory mapped into the device's address space
/// (`cuMemHostAlloc(PORTABLE | DEVICEMAP)`), zeroed. The host reaches it
/// through [`host_ptr`](Self::host_ptr) and [`MappedBuffer`], kernels through
/// [`device_ptr`](Self::device_ptr); freed on drop.
///
/// ```no_run
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::cuda::{CudaDevice, MappedBuffer, PinnedBuffer};
/// let dev = CudaDevice::new(0)?;
/// let out = PinnedBuffer::new(&dev, 1024)?;
/// assert_eq!(out.len(), 1024);
/// // Pass `out.device_ptr()` to a kernel as `KernelArg::Ptr`; after the launch
/// // has returned, read it on the host:
/// // SAFETY: no kernel is running, so nothing writes the buffer.
/// let bytes = unsafe { out.as_slice() };
/// assert_eq!(bytes[0], 0);
/// # Ok::<(), gpu_rpc::cuda::CudaError>(())
/// ```
pub struct PinnedBuffer {
    device: CudaDevice,
    host: NonNull<u8>,
    dptr: u64,
    len: usize,
}

// SAFETY: the buffer owns its allocation; the raw pointer is only a handle to
// it (page-locked host memory, valid on every thread). Concurrent access
// through `host_ptr` is the user's to synchronize (the RPC protocol uses
// atomics only).
unsafe impl Send for PinnedBuffer {}
// SAFETY: as above; `&PinnedBuffer` hands out only raw pointers and the
// `unsafe` slice views.
unsafe impl Sync for PinnedBuffer {}

impl fmt::Debug for PinnedBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PinnedBuffer")
            .field("host", &self.host)
            .field("device", &format_args!("{:#x}", self.dptr))
            .field("len", &self.len)
            .finish()
    }
}

impl PinnedBuffer {
    /// `len` zeroed bytes (page-aligned) of pinned, mapped host memory.
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// let dev = gpu_rpc::cuda::CudaDevice::new(0)?;
    /// let buf = gpu_rpc::cuda::PinnedBuffer::new(&dev, 4096)?;
    /// assert_ne!(buf.device_ptr(), 0);
    /// # Ok::<(), gpu_rpc::cuda::CudaError>(())
    /// ```
    pub fn new(device: &CudaDevice, len: usize) -> Result<PinnedBuffer, CudaError> {
        if len == 0 {
            return Err(CudaError::config("a pinned buffer needs at least one byte"));
        }
        device.bind()?;
        let what = format!("allocating {len} bytes of pinned, mapped host memory");
        let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
        // SAFETY: the context is current; the memory is initialized below
        // before anything reads it.
        let host = guard(&what, || unsafe { result::malloc_host(len, flags) })?;
        let host = NonNull::new(host as *mut u8)
            .ok_or_else(|| CudaError::config(format!("{what}: the driver returned a null pointer")))?;
        // From here on, `Drop` frees the allocation on every path.
        let mut buf = PinnedBuffer {
            device: device.clone(),
            host,
            dptr: 0,
            len,
        };
        // SAFETY: `host` points to `len` writable bytes that nothing else
        // references yet.
        unsafe { std::ptr::write_bytes(host.as_ptr(), 0, len) };
        let mut dptr: sys::CUdeviceptr = 0;
        // SAFETY: `host` was allocated with DEVICEMAP in the current context;
        // `dptr` is a valid place for the result.
        guard("mapping pinned host memory into the device", || unsafe {
            sys::cuMemHostGetDevicePointer_v2(&mut dptr, host.as_ptr().cast(), 0).result()
        })?;
        buf.dptr = dptr;
        Ok(buf)
    }

    /// The host address (page-aligned).
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// # let dev = gpu_rpc::cuda::CudaDevice::new(0)?;
    /// let buf = gpu_rpc::cuda::PinnedBuffer::new(&dev, 64)?;
    /// assert_eq!(buf.host_ptr() as usize % 64, 0);
    /// # Ok::<(), gpu_rpc::cuda::CudaError>(())
    /// ```
    pub fn host_ptr(&self) -> *mut u8 {
        self.host.as_ptr()
    }

    /// The address kernels use for this memory.
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// # let dev = gpu_rpc::cuda::CudaDevice::new(0)?;
    /// let buf = gpu_rpc::cuda::PinnedBuffer::new(&dev, 64)?;
    /// let arg = gpu_rpc::cuda::KernelArg::Ptr(buf.device_ptr());
    /// # Ok::<(), gpu_rpc::cuda::CudaError>(())
    /// ```
    pub fn device_ptr(&self) -> u64 {
        self.dptr
    }

    /// Size in bytes.
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// # let dev = gpu_rpc::cuda::CudaDevice::new(0)?;
    /// assert_eq!(gpu_rpc::cuda::PinnedBuffer::new(&dev, 8)?.len(), 8);
    /// # Ok::<(), gpu_rpc::cuda::CudaError>(())
    /// ```
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false (a buffer has at least one byte).
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// # let dev = gpu_rpc::cuda::CudaDevice::new(0)?;
    /// assert!(!gpu_rpc::cuda::PinnedBuffer::new(&dev, 8)?.is_empty());
    /// # Ok::<(), gpu_rpc::cuda::CudaError>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl MappedBuffer for PinnedBuffer {
    fn mapped_ptr(&self) -> *mut u8 {
        self.host.as_ptr()
    }

    fn mapped_len(&self) -> usize {
        self.len
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        // Errors are ignored: after a sticky error nothing can be freed, and
        // the memory goes with the process.
        let _ = self.device.bind();
        let host = self.host.as_ptr().cast::<c_void>();
        // SAFETY: `host` came from `cuMemHostAlloc` and is freed once; no
        // kernel uses it any more (launches wait for their kernels).
        let _ = raw_guard("freeing pinned host memory", || unsafe { result::free_host(host) });
    }
}

/// Zeroed device memory (`cuMemAlloc`), freed on drop.
pub(super) struct DeviceWords {
    device: CudaDevice,
    dptr: sys::CUdeviceptr,
    bytes: usize,
}

impl DeviceWords {
    fn zeroed(device: &CudaDevice, bytes: usize) -> Result<DeviceWords, CudaError> {
        device.bind()?;
        // SAFETY: the context is current; the memory is zeroed below before any
        // kernel can read it.
        let dptr = guard("allocating the device lock words", || unsafe {
            result::malloc_sync(bytes)
        })?;
        let words = DeviceWords {
            device: device.clone(),
            dptr,
            bytes,
        };
        // SAFETY: `dptr` is a live allocation of `bytes` bytes.
        guard("zeroing the device lock words", || unsafe {
            result::memset_d8_sync(dptr, 0, bytes)
        })?;
        // `cuMemsetD8` may run asynchronously on the legacy stream, which a
        // non-blocking stream does not wait for: finish it now.
        guard("waiting for the lock words to be zeroed", result::ctx::synchronize)?;
        Ok(words)
    }

    fn read(&self) -> Result<Vec<u32>, CudaError> {
        self.device.bind()?;
        let mut words = vec![0u32; self.bytes / 4];
        let src = self.dptr;
        // SAFETY: `src` holds `bytes` bytes = `words.len()` u32s; the copy is
        // synchronous.
        guard("reading the device lock words", || unsafe {
            result::memcpy_dtoh_sync(&mut words, src)
        })?;
        Ok(words)
    }
}

impl Drop for DeviceWords {
    fn drop(&mut self) {
        let _ = self.device.bind();
        let dptr = self.dptr;
        // SAFETY: allocated with `cuMemAlloc`, freed once, no kernel uses it any
        // more. Errors (a sticky context) are ignored: the process owns it.
        let _ = raw_guard("freeing the device lock words", || unsafe { result::free_sync(dptr) });
    }
}

/// Plain device memory (`cuMemAlloc`), zeroed, freed on drop: kernel inputs
/// and outputs, and the copy baselines of the benchmarks.
///
/// ```no_run
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::cuda::{CudaDevice, DeviceBuffer, PinnedBuffer};
/// let dev = CudaDevice::new(0)?;
/// let buf = DeviceBuffer::new(&dev, 4096)?;
/// buf.copy_from(&[7u8; 4096])?; // a synchronous cuMemcpyHtoD
/// let dst = PinnedBuffer::new(&dev, 4096)?;
/// let took = buf.copy_to(&dst)?; // a synchronous cuMemcpyDtoH
/// assert!(took.as_nanos() > 0);
/// assert_eq!(buf.to_vec()?, vec![7u8; 4096]);
/// # Ok::<(), gpu_rpc::cuda::CudaError>(())
/// ```
pub struct DeviceBuffer {
    words: DeviceWords,
}

impl fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("device_ptr", &self.words.dptr)
            .field("len", &self.words.bytes)
            .finish()
    }
}

impl DeviceBuffer {
    /// `len` zeroed bytes of device memory (at least one byte is allocated).
    pub fn new(device: &CudaDevice, len: usize) -> Result<DeviceBuffer, CudaError> {
        Ok(DeviceBuffer {
            words: DeviceWords::zeroed(device, len.max(1))?,
        })
    }

    /// The device address, for a [`KernelArg::Ptr`].
    pub fn device_ptr(&self) -> u64 {
        self.words.dptr
    }

    /// Bytes allocated.
    pub fn len(&self) -> usize {
        self.words.bytes
    }

    /// Whether the buffer is empty (never: at least one byte is allocated).
    pub fn is_empty(&self) -> bool {
        self.words.bytes == 0
    }

    /// Copy `src` into the first `src.len()` bytes with a synchronous
    /// `cuMemcpyHtoD` (e.g. a kernel's input); returns how long the copy took.
    /// A `src` longer than the buffer is an error, and nothing is copied.
    pub fn copy_from(&self, src: &[u8]) -> Result<Duration, CudaError> {
        if src.len() > self.words.bytes {
            return Err(CudaError::config(format!(
                "copy of {} bytes into a {}-byte device buffer",
                src.len(),
                self.words.bytes
            )));
        }
        self.words.device.bind()?;
        let dst = self.words.dptr;
        let t0 = Instant::now();
        // SAFETY: `dst` holds at least `src.len()` bytes of this context's
        // device memory; the copy is synchronous, so `src` outlives it.
        guard("copying host memory to the device", || unsafe {
            result::memcpy_htod_sync(dst, src)
        })?;
        Ok(t0.elapsed())
    }

    /// The whole buffer, copied to the host (a synchronous `cuMemcpyDtoH`).
    pub fn to_vec(&self) -> Result<Vec<u8>, CudaError> {
        self.words.device.bind()?;
        let mut out = vec![0u8; self.words.bytes];
        let src = self.words.dptr;
        // SAFETY: `src` holds `out.len()` bytes of this context's device
        // memory; `out` is ours and the copy is synchronous.
        guard("copying device memory to the host", || unsafe {
            result::memcpy_dtoh_sync(&mut out, src)
        })?;
        Ok(out)
    }

    /// Copy the first `dst.len()` bytes to `dst` with a synchronous
    /// `cuMemcpyDtoH`; returns how long the copy took.
    pub fn copy_to(&self, dst: &PinnedBuffer) -> Result<Duration, CudaError> {
        if dst.len() > self.words.bytes {
            return Err(CudaError::config(format!(
                "copy of {} bytes from a {}-byte device buffer",
                dst.len(),
                self.words.bytes
            )));
        }
        self.words.device.bind()?;
        let n = dst.len();
        let src = self.words.dptr;
        let host = dst.host_ptr();
        let t0 = Instant::now();
        // SAFETY: `host` is a live pinned allocation of `n` bytes that no kernel
        // writes during this synchronous copy; `src` holds at least `n` bytes.
        guard("copying device memory to the host", || unsafe {
            result::memcpy_dtoh_sync(std::slice::from_raw_parts_mut(host, n), src)
        })?;
        Ok(t0.elapsed())
    }
}

/// Per-thread stack every launch gets at least (`CU_LIMIT_STACK_SIZE`). CUDA's
/// default, 1 KiB, is too small for device-side `core::fmt` formatting
/// (`gpu_println!` with `{:?}` needs about 1.5 KiB, the panic handler about
/// 2 KiB); past it a kernel dies with an illegal address and reports nothing.
///
/// Larger stacks cost local memory for every resident thread and can make
/// large blocks fail to launch (`CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES`, seen
/// with 512-thread blocks at 4 KiB); raise it with
/// [`CudaDevice::ensure_stack_size`] when a kernel needs more.
pub const MIN_STACK_BYTES: usize = 2048;

impl CudaDevice {
    /// Raise the per-thread stack size to at least `bytes` (never lowers it).
    pub fn ensure_stack_size(&self, bytes: usize) -> Result<(), CudaError> {
        self.bind()?;
        let mut current = 0usize;
        // SAFETY: the context is current; reading a limit has no side effects.
        guard("reading the stack size limit", || unsafe {
            sys::cuCtxGetLimit(&mut current, sys::CUlimit::CU_LIMIT_STACK_SIZE).result()
        })?;
        if current < bytes {
            // SAFETY: the context is current; no kernel of ours is running
            // (launches wait for their kernels).
            guard("raising the stack size limit", || unsafe {
                sys::cuCtxSetLimit(sys::CUlimit::CU_LIMIT_STACK_SIZE, bytes).result()
            })?;
        }
        Ok(())
    }

    /// Set the size of the buffer CUDA's device `printf` writes into
    /// (`CU_LIMIT_PRINTF_FIFO_SIZE`); lines beyond it are dropped by CUDA.
    /// Must be called before the module using `printf` is loaded.
    pub fn set_printf_fifo_size(&self, bytes: usize) -> Result<(), CudaError> {
        self.bind()?;
        // SAFETY: the context is current; the limit is a plain setting.
        guard("setting the printf FIFO size", || unsafe {
            sys::cuCtxSetLimit(sys::CUlimit::CU_LIMIT_PRINTF_FIFO_SIZE, bytes).result()
        })
    }
}

/// A shared region for one GPU: the protocol's memory in pinned, mapped host
/// memory (zeroed), the client lock words in device memory (zeroed, so the
/// device's lock read-modify-writes never cross the bus) and the server lock
/// words in host memory. Lanes per packet: [`LANE_SIZE`] (32).
///
/// ```no_run
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::cuda::{CudaDevice, CudaRegion};
/// let dev = CudaDevice::new(0)?;
/// let region = CudaRegion::new(&dev, 64)?;
/// let desc = region.client_desc(); // pass to the kernel
/// assert_eq!((desc.port_count, desc.lane_size), (64, 32));
/// assert!(region.is_quiescent()?);
/// # Ok::<(), gpu_rpc::cuda::CudaError>(())
/// ```
pub struct CudaRegion {
    device: CudaDevice,
    pub(super) layout: Layout,
    shared: PinnedBuffer,
    client_locks: DeviceWords,
    server_locks: ServerLocks,
    copies: CudaCopies,
}

impl fmt::Debug for CudaRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaRegion")
            .field("layout", &self.layout)
            .field("desc", &self.client_desc())
            .finish()
    }
}

impl CudaRegion {
    /// A region of `port_count` ports (1 ..= [`MAX_PORTS`]) of 32 lanes.
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// let dev = gpu_rpc::cuda::CudaDevice::new(0)?;
    /// let region = gpu_rpc::cuda::CudaRegion::new(&dev, 4096)?;
    /// # Ok::<(), gpu_rpc::cuda::CudaError>(())
    /// ```
    pub fn new(device: &CudaDevice, port_count: u32) -> Result<CudaRegion, CudaError> {
        let layout = Layout::new(port_count, LANE_SIZE)
            .ok_or_else(|| CudaError::config(format!("port count {port_count} is not in 1..={MAX_PORTS}")))?;
        let shared = PinnedBuffer::new(device, layout.allocation_size())?;
        if !(shared.host_ptr() as usize).is_multiple_of(64) || !shared.device_ptr().is_multiple_of(64) {
            return Err(CudaError::config(
                "the driver returned a shared region that is not 64-byte aligned",
            ));
        }
        let client_locks = DeviceWords::zeroed(device, client_local_words(port_count) * 4)?;
        Ok(CudaRegion {
            device: device.clone(),
            layout,
            shared,
            client_locks,
            server_locks: ServerLocks::new(port_count),
            copies: CudaCopies::new(device, DEFAULT_STAGING_BYTES),
        })
    }

    /// Limit the pinned staging memory of the region's direct copies (see
    /// [`CudaCopies`]) to `bytes` (default [`DEFAULT_STAGING_BYTES`], 64 MiB;
    /// at least one stage of 2 × [`STAGE_HALF_BYTES`] is always allowed).
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// # let dev = gpu_rpc::cuda::CudaDevice::new(0)?;
    /// let region = gpu_rpc::cuda::CudaRegion::new(&dev, 8)?.with_staging_limit(16 << 20);
    /// assert_eq!(region.copies().limit(), 16 << 20);
    /// # Ok::<(), gpu_rpc::cuda::CudaError>(())
    /// ```
    pub fn with_staging_limit(mut self, bytes: usize) -> CudaRegion {
        self.copies = CudaCopies::new(&self.device, bytes);
        self
    }

    /// The region's direct copies (the server's [`DeviceMemory`](crate::device_memory::DeviceMemory)).
    pub fn copies(&self) -> &CudaCopies {
        &self.copies
    }

    /// The layout (`port_count` ports, 32 lanes).
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// # let dev = gpu_rpc::cuda::CudaDevice::new(0)?;
    /// let region = gpu_rpc::cuda::CudaRegion::new(&dev, 8)?;
    /// assert_eq!(region.layout().lane_size(), 32);
    /// # Ok::<(), gpu_rpc::cuda::CudaError>(())
    /// ```
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The device the region belongs to.
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// # let dev = gpu_rpc::cuda::CudaDevice::new(0)?;
    /// let region = gpu_rpc::cuda::CudaRegion::new(&dev, 8)?;
    /// assert_eq!(region.device().ordinal(), 0);
    /// # Ok::<(), gpu_rpc::cuda::CudaError>(())
    /// ```
    pub fn device(&self) -> &CudaDevice {
        &self.device
    }

    /// What a kernel needs to build its `Client`: device addresses of the
    /// region and of the client lock words.
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// # let dev = gpu_rpc::cuda::CudaDevice::new(0)?;
    /// let region = gpu_rpc::cuda::CudaRegion::new(&dev, 8)?;
    /// assert_eq!(region.client_desc().shared, region.device_ptr());
    /// # Ok::<(), gpu_rpc::cuda::CudaError>(())
    /// ```
    pub fn client_desc(&self) -> ClientDesc {
        ClientDesc {
            shared: self.shared.device_ptr(),
            locks: self.client_locks.dptr,
            port_count: self.layout.port_count(),
            lane_size: self.layout.lane_size(),
        }
    }

    /// The server side, over the host address of the region, copying the
    /// slices that go direct with the region's [`copies`](Self::copies).
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// # let dev = gpu_rpc::cuda::CudaDevice::new(0)?;
    /// let region = gpu_rpc::cuda::CudaRegion::new(&dev, 8)?;
    /// assert!(!region.server().pending(0));
    /// # Ok::<(), gpu_rpc::cuda::CudaError>(())
    /// ```
    pub fn server(&self) -> Server<'_> {
        // SAFETY: the region is laid out by `layout`, page-aligned, zeroed at
        // allocation and lives as long as the returned server borrows `self`;
        // the device only touches it through the protocol's atomics. The
        // server lock array has a `ServerLock` per port, used by server
        // threads only.
        unsafe {
            Server::from_parts(
                self.layout,
                Parts::from_region(self.shared.host_ptr(), self.layout),
                self.server_locks.as_ptr(),
            )
        }
        .with_memory(&self.copies)
    }

    /// Whether every port is idle on the server side and every client lock
    /// word in device memory is zero (read back with a device-to-host copy).
    /// Meaningful only when no kernel is running.
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// # let dev = gpu_rpc::cuda::CudaDevice::new(0)?;
    /// let region = gpu_rpc::cuda::CudaRegion::new(&dev, 8)?;
    /// assert!(region.is_quiescent()?);
    /// # Ok::<(), gpu_rpc::cuda::CudaError>(())
    /// ```
    pub fn is_quiescent(&self) -> Result<bool, CudaError> {
        let clients_clear = crate::protocol::client_locks_released(&self.client_locks.read()?);
        Ok(clients_clear && self.server().all_idle())
    }

    /// Every port that is not at rest, as the host sees it now, with the
    /// client-local state read back from device memory (a synchronous copy
    /// on the legacy stream, which does not wait for kernels on the
    /// non-blocking streams launches use): what to print when a run stops
    /// making progress.
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// # let dev = gpu_rpc::cuda::CudaDevice::new(0)?;
    /// let region = gpu_rpc::cuda::CudaRegion::new(&dev, 8)?;
    /// assert!(region.busy_ports()?.is_empty());
    /// # Ok::<(), gpu_rpc::cuda::CudaError>(())
    /// ```
    pub fn busy_ports(&self) -> Result<Vec<crate::protocol::PortSnapshot>, CudaError> {
        let words = self.client_locks.read()?;
        Ok(self.server().busy_ports(&words).collect())
    }

    /// Host address of the shared region (for raw baselines and
    /// fault-injection tests; writing it while a protocol side runs breaks
    /// the protocol's invariants).
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// # let dev = gpu_rpc::cuda::CudaDevice::new(0)?;
    /// let region = gpu_rpc::cuda::CudaRegion::new(&dev, 8)?;
    /// assert!(!region.host_ptr().is_null());
    /// # Ok::<(), gpu_rpc::cuda::CudaError>(())
    /// ```
    pub fn host_ptr(&self) -> *mut u8 {
        self.shared.host_ptr()
    }

    /// Device address of the shared region.
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// # let dev = gpu_rpc::cuda::CudaDevice::new(0)?;
    /// let region = gpu_rpc::cuda::CudaRegion::new(&dev, 8)?;
    /// assert_ne!(region.device_ptr(), 0);
    /// # Ok::<(), gpu_rpc::cuda::CudaError>(())
    /// ```
    pub fn device_ptr(&self) -> u64 {
        self.shared.device_ptr()
    }
}
