//! Memory the backend allocates: fine-grained host buffers, device words,
//! and the shared region ([`HsaRegion`]).

use std::ffi::c_void;
use std::fmt;
use std::ptr::NonNull;

use crate::protocol::{
    client_local_words, client_locks_released, ClientDesc, Layout, Parts, Server, ServerLocks, MAX_PORTS,
};

use super::ffi::MemoryPool;
use super::*;

/// `len` bytes from `pool`, made accessible to `device`'s GPU.
pub(super) fn pool_alloc(
    device: &HsaDevice,
    pool: MemoryPool,
    len: usize,
    what: &str,
) -> Result<NonNull<u8>, HsaError> {
    let api = device.api();
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: `p` is a valid place for the result; the pool handle came from
    // the runtime.
    let r = unsafe { (api.pool_allocate)(pool, len, 0, &mut p) };
    check(api, what, r)?;
    let p = NonNull::new(p.cast::<u8>())
        .ok_or_else(|| HsaError::config(format!("{what}: the runtime returned a null pointer")))?;
    let gpu = device.inner.gpu;
    // SAFETY: `p` is a live allocation from the runtime; one agent, default
    // flags (null).
    let r = unsafe { (api.allow_access)(1, &gpu, std::ptr::null(), p.as_ptr().cast()) };
    if let Err(e) = check(api, "making memory accessible to the GPU", r) {
        // SAFETY: allocated above, not yet shared with anything.
        unsafe { (api.pool_free)(p.as_ptr().cast()) };
        return Err(e);
    }
    Ok(p)
}

/// Fine-grained host memory the GPU may access (from a CPU agent's
/// fine-grained pool, `hsa_amd_agents_allow_access`'d to the GPU), zeroed.
/// Host and GPU use the same address; freed on drop.
///
/// ```no_run
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::hsa::{HsaBuffer, HsaDevice, MappedBuffer};
/// let dev = HsaDevice::new(0)?;
/// let out = HsaBuffer::new(&dev, 1024)?;
/// // Pass `out.device_ptr()` as `KernelArg::Ptr`; after the launch returned:
/// // SAFETY: no kernel is running.
/// assert_eq!(unsafe { out.as_slice() }[0], 0);
/// # Ok::<(), gpu_rpc::hsa::HsaError>(())
/// ```
pub struct HsaBuffer {
    device: HsaDevice,
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the buffer owns its allocation; the pointer is a handle to memory
// valid on every thread. Concurrent access through the raw pointers is the
// user's to synchronize (the protocol uses atomics only).
unsafe impl Send for HsaBuffer {}
// SAFETY: as above; `&HsaBuffer` hands out only raw pointers and `unsafe`
// views.
unsafe impl Sync for HsaBuffer {}

impl fmt::Debug for HsaBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HsaBuffer")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

impl HsaBuffer {
    /// `len` zeroed bytes.
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// let dev = gpu_rpc::hsa::HsaDevice::new(0)?;
    /// let buf = gpu_rpc::hsa::HsaBuffer::new(&dev, 4096)?;
    /// assert_ne!(buf.device_ptr(), 0);
    /// # Ok::<(), gpu_rpc::hsa::HsaError>(())
    /// ```
    pub fn new(device: &HsaDevice, len: usize) -> Result<HsaBuffer, HsaError> {
        Self::from_pool(device, device.inner.shared_pool, len)
    }

    pub(super) fn from_pool(device: &HsaDevice, pool: MemoryPool, len: usize) -> Result<HsaBuffer, HsaError> {
        if len == 0 {
            return Err(HsaError::config("a buffer needs at least one byte"));
        }
        let what = format!("allocating {len} bytes of fine-grained memory");
        let ptr = pool_alloc(device, pool, len, &what)?;
        // SAFETY: `ptr` points to `len` writable host bytes nothing else
        // references yet.
        unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, len) };
        Ok(HsaBuffer {
            device: device.clone(),
            ptr,
            len,
        })
    }

    /// The host address (the same as [`device_ptr`](Self::device_ptr)).
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// # let dev = gpu_rpc::hsa::HsaDevice::new(0)?;
    /// let buf = gpu_rpc::hsa::HsaBuffer::new(&dev, 64)?;
    /// assert_eq!(buf.host_ptr() as u64, buf.device_ptr());
    /// # Ok::<(), gpu_rpc::hsa::HsaError>(())
    /// ```
    pub fn host_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The address kernels use.
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// # let dev = gpu_rpc::hsa::HsaDevice::new(0)?;
    /// let buf = gpu_rpc::hsa::HsaBuffer::new(&dev, 64)?;
    /// let arg = gpu_rpc::hsa::KernelArg::Ptr(buf.device_ptr());
    /// # Ok::<(), gpu_rpc::hsa::HsaError>(())
    /// ```
    pub fn device_ptr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    /// Size in bytes.
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// # let dev = gpu_rpc::hsa::HsaDevice::new(0)?;
    /// assert_eq!(gpu_rpc::hsa::HsaBuffer::new(&dev, 8)?.len(), 8);
    /// # Ok::<(), gpu_rpc::hsa::HsaError>(())
    /// ```
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false (a buffer has at least one byte).
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// # let dev = gpu_rpc::hsa::HsaDevice::new(0)?;
    /// assert!(!gpu_rpc::hsa::HsaBuffer::new(&dev, 8)?.is_empty());
    /// # Ok::<(), gpu_rpc::hsa::HsaError>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl MappedBuffer for HsaBuffer {
    fn mapped_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    fn mapped_len(&self) -> usize {
        self.len
    }
}

impl Drop for HsaBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated from a pool, freed once; launches wait for their
        // kernels, so no kernel uses it any more.
        let _ = unsafe { (self.device.api().pool_free)(self.ptr.as_ptr().cast()) };
    }
}

/// Zeroed words in the GPU's own memory, freed on drop.
pub(super) struct DeviceWords {
    device: HsaDevice,
    ptr: NonNull<u8>,
    words: usize,
}

// SAFETY: a handle to device memory, valid on any thread; only read back
// with the runtime's copy.
unsafe impl Send for DeviceWords {}
// SAFETY: as above.
unsafe impl Sync for DeviceWords {}

impl DeviceWords {
    fn zeroed(device: &HsaDevice, words: usize) -> Result<DeviceWords, HsaError> {
        let api = device.api();
        let ptr = pool_alloc(
            device,
            device.inner.device_pool,
            words * 4,
            "allocating the device lock words",
        )?;
        let dw = DeviceWords {
            device: device.clone(),
            ptr,
            words,
        };
        // SAFETY: `ptr` holds `words` u32s; `hsa_amd_memory_fill` counts
        // 32-bit words and returns when the fill is done.
        let r = unsafe { (api.memory_fill)(ptr.as_ptr().cast(), 0, words) };
        check(api, "zeroing the device lock words", r)?;
        Ok(dw)
    }

    fn read(&self) -> Result<Vec<u32>, HsaError> {
        let api = self.device.api();
        let mut out = vec![0u32; self.words];
        // SAFETY: both ranges hold `words * 4` bytes; the copy is synchronous.
        let r = unsafe { (api.memory_copy)(out.as_mut_ptr().cast(), self.ptr.as_ptr().cast(), self.words * 4) };
        check(api, "reading the device lock words", r)?;
        Ok(out)
    }
}

impl Drop for DeviceWords {
    fn drop(&mut self) {
        // SAFETY: allocated from a pool, freed once; no kernel uses it any more.
        let _ = unsafe { (self.device.api().pool_free)(self.ptr.as_ptr().cast()) };
    }
}

/// A shared region on one GPU: the protocol's memory in fine-grained system
/// memory (zeroed), the client lock words in the GPU's memory (zeroed), the
/// server lock words in host memory, and the [`ClientDesc`] that kernels
/// receive a pointer to. Lanes per packet: [`LANE_SIZE`] (64).
///
/// ```no_run
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::hsa::{HsaDevice, HsaRegion};
/// let dev = HsaDevice::new(0)?;
/// let region = HsaRegion::new(&dev, 64)?;
/// let desc = region.client_desc();
/// assert_eq!((desc.port_count, desc.lane_size), (64, 64));
/// assert!(region.is_quiescent()?);
/// # Ok::<(), gpu_rpc::hsa::HsaError>(())
/// ```
pub struct HsaRegion {
    pub(super) device: HsaDevice,
    pub(super) layout: Layout,
    pub(super) shared: HsaBuffer,
    pub(super) desc: HsaBuffer,
    pub(super) client_locks: DeviceWords,
    pub(super) server_locks: ServerLocks,
}

impl fmt::Debug for HsaRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HsaRegion")
            .field("layout", &self.layout)
            .field("desc", &self.client_desc())
            .finish()
    }
}

impl HsaRegion {
    /// A region of `port_count` ports (1 ..= [`MAX_PORTS`]) of 64 lanes.
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// let dev = gpu_rpc::hsa::HsaDevice::new(0)?;
    /// let region = gpu_rpc::hsa::HsaRegion::new(&dev, 4096)?;
    /// # Ok::<(), gpu_rpc::hsa::HsaError>(())
    /// ```
    pub fn new(device: &HsaDevice, port_count: u32) -> Result<HsaRegion, HsaError> {
        let layout = Layout::new(port_count, LANE_SIZE)
            .ok_or_else(|| HsaError::config(format!("port count {port_count} is not in 1..={MAX_PORTS}")))?;
        let shared = HsaBuffer::new(device, layout.allocation_size())?;
        if !shared.device_ptr().is_multiple_of(64) {
            return Err(HsaError::config(
                "the runtime returned a shared region that is not 64-byte aligned",
            ));
        }
        let client_locks = DeviceWords::zeroed(device, client_local_words(port_count))?;
        let desc = HsaBuffer::new(device, std::mem::size_of::<ClientDesc>())?;
        let region = HsaRegion {
            device: device.clone(),
            layout,
            shared,
            desc,
            client_locks,
            server_locks: ServerLocks::new(port_count),
        };
        let value = region.client_desc();
        // SAFETY: `desc` holds `size_of::<ClientDesc>()` bytes from a pool
        // whose allocations are at least page aligned; no kernel runs yet.
        unsafe { region.desc.host_ptr().cast::<ClientDesc>().write(value) };
        Ok(region)
    }

    /// The layout (`port_count` ports, 64 lanes).
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// # let dev = gpu_rpc::hsa::HsaDevice::new(0)?;
    /// let region = gpu_rpc::hsa::HsaRegion::new(&dev, 8)?;
    /// assert_eq!(region.layout().lane_size(), 64);
    /// # Ok::<(), gpu_rpc::hsa::HsaError>(())
    /// ```
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The device the region belongs to.
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// # let dev = gpu_rpc::hsa::HsaDevice::new(0)?;
    /// let region = gpu_rpc::hsa::HsaRegion::new(&dev, 8)?;
    /// assert_eq!(region.device().ordinal(), 0);
    /// # Ok::<(), gpu_rpc::hsa::HsaError>(())
    /// ```
    pub fn device(&self) -> &HsaDevice {
        &self.device
    }

    /// The descriptor: GPU addresses of the region and the client lock words.
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// # let dev = gpu_rpc::hsa::HsaDevice::new(0)?;
    /// let region = gpu_rpc::hsa::HsaRegion::new(&dev, 8)?;
    /// assert_eq!(region.client_desc().shared, region.device_ptr());
    /// # Ok::<(), gpu_rpc::hsa::HsaError>(())
    /// ```
    pub fn client_desc(&self) -> ClientDesc {
        ClientDesc {
            shared: self.shared.device_ptr(),
            locks: self.client_locks.ptr.as_ptr() as u64,
            port_count: self.layout.port_count(),
            lane_size: self.layout.lane_size(),
        }
    }

    /// GPU address of the region's copy of [`client_desc`](Self::client_desc):
    /// what [`launch_with_region`] passes as a kernel's first argument.
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// # let dev = gpu_rpc::hsa::HsaDevice::new(0)?;
    /// let region = gpu_rpc::hsa::HsaRegion::new(&dev, 8)?;
    /// assert_eq!(region.desc_ptr() % 8, 0);
    /// # Ok::<(), gpu_rpc::hsa::HsaError>(())
    /// ```
    pub fn desc_ptr(&self) -> u64 {
        self.desc.device_ptr()
    }

    /// The server side, over the region.
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// # let dev = gpu_rpc::hsa::HsaDevice::new(0)?;
    /// let region = gpu_rpc::hsa::HsaRegion::new(&dev, 8)?;
    /// assert!(!region.server().pending(0));
    /// # Ok::<(), gpu_rpc::hsa::HsaError>(())
    /// ```
    pub fn server(&self) -> Server<'_> {
        // SAFETY: the region is laid out by `layout`, 64-byte aligned, zeroed
        // at allocation and lives as long as the returned server borrows
        // `self`; the GPU touches it only through the protocol's atomics. The
        // server lock array has a `ServerLock` per port, used by server
        // threads only.
        unsafe {
            Server::from_parts(
                self.layout,
                Parts::from_region(self.shared.host_ptr(), self.layout),
                self.server_locks.as_ptr(),
            )
        }
    }

    /// Whether every port is idle on the server side and every client lock
    /// word is zero (read back with `hsa_memory_copy`). Meaningful only when
    /// no kernel is running.
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// # let dev = gpu_rpc::hsa::HsaDevice::new(0)?;
    /// let region = gpu_rpc::hsa::HsaRegion::new(&dev, 8)?;
    /// assert!(region.is_quiescent()?);
    /// # Ok::<(), gpu_rpc::hsa::HsaError>(())
    /// ```
    pub fn is_quiescent(&self) -> Result<bool, HsaError> {
        let clients_clear = client_locks_released(&self.client_locks.read()?);
        Ok(clients_clear && self.server().all_idle())
    }

    /// Host address of the shared region (writing it while a protocol side
    /// runs breaks the protocol's invariants).
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// # let dev = gpu_rpc::hsa::HsaDevice::new(0)?;
    /// let region = gpu_rpc::hsa::HsaRegion::new(&dev, 8)?;
    /// assert!(!region.host_ptr().is_null());
    /// # Ok::<(), gpu_rpc::hsa::HsaError>(())
    /// ```
    pub fn host_ptr(&self) -> *mut u8 {
        self.shared.host_ptr()
    }

    /// GPU address of the shared region (equal to the host address).
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// # let dev = gpu_rpc::hsa::HsaDevice::new(0)?;
    /// let region = gpu_rpc::hsa::HsaRegion::new(&dev, 8)?;
    /// assert_eq!(region.device_ptr(), region.host_ptr() as u64);
    /// # Ok::<(), gpu_rpc::hsa::HsaError>(())
    /// ```
    pub fn device_ptr(&self) -> u64 {
        self.shared.device_ptr()
    }
}
