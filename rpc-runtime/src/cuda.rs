//! The CUDA backend (feature `cuda`): kernels on an NVIDIA GPU are the
//! clients, host threads serve them.
//!
//! * [`CudaDevice`] — a context on one GPU (the device's primary context).
//! * [`CudaRegion`] — the shared region in pinned, mapped host memory, the
//!   client lock words in device memory and the server lock words in host
//!   memory; [`CudaRegion::client_desc`] is what a kernel receives.
//! * [`Module`] / [`Kernel`] — PTX text loaded with `cuModuleLoadDataEx`, and
//!   one of its entry points.
//! * [`launch`] / [`launch_with_region`] — launch a kernel whose first
//!   parameter is a [`ClientDesc`] on a non-blocking stream and serve its calls
//!   on host threads until it has finished.
//! * [`PinnedBuffer`] — extra pinned, mapped host memory (kernel outputs, raw
//!   baselines).
//!
//! The driver library (`libcuda`) is loaded at run time through `cudarc`'s
//! dynamic loading, so this module builds and its error paths run on a
//! machine without CUDA: [`CudaDevice::new`] then returns
//! [`CudaError::DriverNotFound`] instead of panicking.
//!
//! # Sticky errors
//!
//! A kernel that faults (illegal address, `trap`, failed assertion, …) leaves
//! its CUDA context unusable: every later CUDA call in the process fails with
//! the same error, and memory cannot even be freed (the backend then leaks it
//! until the process exits). [`CudaError::Kernel`] says so in `context_lost`;
//! the only recovery is a new process.
//!
//! # Example
//!
//! ```no_run
//! use rpc_runtime::cuda::{launch, CudaDevice, KernelArg, Launch, Module, PinnedBuffer};
//! use rpc_runtime::server::{Dispatcher, ServerConfig};
//!
//! # fn main() -> Result<(), rpc_runtime::cuda::CudaError> {
//! let device = CudaDevice::new(0)?;
//! let module = Module::from_ptx_file(&device, "target/ptx/kernels.ptx")?;
//! // extern "ptx-kernel" fn rpc_noop_kernel(desc: ClientDesc, iters: u32, out: *mut u64)
//! let kernel = module.kernel("rpc_noop_kernel")?;
//! let out = PinnedBuffer::new(&device, 256 * 8)?;
//! let dispatcher = Dispatcher::new(ServerConfig::default());
//! let cfg = Launch { grid: (4, 1, 1), block: (64, 1, 1), ..Launch::default() };
//! let report = launch(&kernel, &cfg, &dispatcher, &[KernelArg::U32(100), KernelArg::Ptr(out.device_ptr())])?;
//! println!("{} calls in {:?}", report.calls, report.elapsed);
//! # Ok(())
//! # }
//! ```

use std::ffi::{c_void, CString};
use std::fmt;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU32};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use cudarc::driver::{result, sys, CudaContext, DriverError};

pub use crate::launch::{KernelArg, MappedBuffer, Report};
use crate::launch::{StopOnDrop, SERVER_IDLE_SPINS};
use crate::protocol::{client_local_words, lock_words, Abandoned, ClientDesc, Layout, Parts, Server, MAX_PORTS};
use crate::server::{serve_pool, Dispatcher, Served};

/// Lanes per packet on NVIDIA GPUs: the warp size.
pub const LANE_SIZE: u32 = 32;

/// Default [`Launch::port_count`]: 4096, LLVM libc's `MAX_PORT_COUNT`.
///
/// A port costs 2 KiB of pinned memory (32 lanes × 64 B) plus a 64-byte
/// header, and one mailbox check per server scan, so 4096 ports are about
/// 8.3 MiB and a full scan stays in the host's cache. More ports than warps
/// that can hold one at a time only cost scan time, so [`launch`] creates
/// `min(port_count, warps in the grid)` ports; an H200 (132 SMs × 64 resident
/// warps = 8448 warps) with more than 4096 warps in flight makes the excess
/// wait for a free port, which is also what bounds the server's work.
pub const DEFAULT_PORT_COUNT: u32 = 4096;

/// Bytes of the JIT error log kept when the driver rejects a module.
const JIT_LOG_BYTES: usize = 16 * 1024;

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// What went wrong in the CUDA backend. Every variant's message starts with
/// `gpu_rpc cuda:` and names what was being done.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CudaError {
    /// The driver library could not be loaded (no NVIDIA driver installed, or
    /// it is not on the loader path).
    #[error(
        "gpu_rpc cuda: libcuda could not be loaded (searched {searched}); is the NVIDIA driver installed and its library on the loader path (LD_LIBRARY_PATH)?"
    )]
    DriverNotFound {
        /// The library names that were tried.
        searched: String,
    },
    /// The driver library was loaded but lacks an entry point (a driver older
    /// than the CUDA 13.0 bindings this crate uses).
    #[error("gpu_rpc cuda: {what}: the CUDA driver library is missing an entry point ({detail}); a driver for CUDA 13.0 or newer (580+) is needed")]
    DriverSymbol {
        /// What was being done.
        what: String,
        /// The loader's message.
        detail: String,
    },
    /// A driver call failed.
    #[error("gpu_rpc cuda: {what} failed: {name} ({code}): {message}")]
    Driver {
        /// What was being done.
        what: String,
        /// The `CUresult` value.
        code: u32,
        /// The `CUresult` name, e.g. `CUDA_ERROR_OUT_OF_MEMORY`.
        name: String,
        /// The driver's description.
        message: String,
    },
    /// The device cannot run this backend.
    #[error("gpu_rpc cuda: CUDA device {ordinal} cannot serve gpu_rpc: {reason}")]
    Unsupported {
        /// The device ordinal.
        ordinal: usize,
        /// Why.
        reason: String,
    },
    /// The text handed to [`Module::from_ptx`] is not PTX (checked before it
    /// reaches the driver).
    #[error("gpu_rpc cuda: not PTX text: {reason}")]
    NotPtx {
        /// What was found instead.
        reason: String,
    },
    /// The driver rejected the PTX module (`CUDA_ERROR_INVALID_PTX`,
    /// `CUDA_ERROR_INVALID_IMAGE`, `CUDA_ERROR_UNSUPPORTED_PTX_VERSION`, …).
    #[error("gpu_rpc cuda: the driver rejected the PTX module: {name} ({code}): {message}{}", log_suffix(.log))]
    InvalidPtx {
        /// The `CUresult` value.
        code: u32,
        /// The `CUresult` name.
        name: String,
        /// The driver's description.
        message: String,
        /// The JIT compiler's error log (may be empty).
        log: String,
    },
    /// The module has no entry point of that name (`CUDA_ERROR_NOT_FOUND`).
    #[error("gpu_rpc cuda: kernel `{kernel}` not found in module (its entry points: {})", entries_list(.entries))]
    KernelNotFound {
        /// The name asked for.
        kernel: String,
        /// The `.entry` names found in the PTX text.
        entries: Vec<String>,
    },
    /// The kernel's parameters (as the driver reports them) do not match a
    /// [`ClientDesc`] followed by the given extra arguments.
    #[error("gpu_rpc cuda: kernel `{kernel}` does not take the arguments of this launch: {message}")]
    KernelSignature {
        /// The kernel.
        kernel: String,
        /// The mismatch.
        message: String,
    },
    /// A launch parameter is invalid (checked before anything is launched).
    #[error("gpu_rpc cuda: invalid launch: {message}")]
    InvalidConfig {
        /// What is wrong.
        message: String,
    },
    /// The block is larger than this kernel can launch with: its registers
    /// (or local memory) per thread leave room for fewer threads per block
    /// than asked. Checked before launching (`cuFuncGetAttribute`); nothing
    /// ran. Build the kernel with a register limit (rpc-build's
    /// `DeviceBuild::max_registers`) or launch smaller blocks.
    ///
    /// ```
    /// let e = rpc_runtime::cuda::CudaError::BlockTooLarge {
    ///     kernel: "my_kernel".into(), threads: 1024, max_threads: 384, registers: 168,
    /// };
    /// assert_eq!(
    ///     e.to_string(),
    ///     "gpu_rpc cuda: kernel `my_kernel` cannot launch blocks of 1024 threads: \
    ///      at 168 registers per thread it allows at most 384 (build it with a register \
    ///      limit, e.g. rpc-build's max_registers, or launch smaller blocks)"
    /// );
    /// ```
    #[error(
        "gpu_rpc cuda: kernel `{kernel}` cannot launch blocks of {threads} threads: at {registers} registers \
         per thread it allows at most {max_threads} (build it with a register limit, e.g. rpc-build's \
         max_registers, or launch smaller blocks)"
    )]
    BlockTooLarge {
        /// The kernel.
        kernel: String,
        /// Threads per block asked for.
        threads: u64,
        /// The most the kernel allows (`CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`).
        max_threads: u32,
        /// Its registers per thread (`CU_FUNC_ATTRIBUTE_NUM_REGS`).
        registers: u32,
    },
    /// `cuLaunchKernel` refused the launch (too many threads per block, too
    /// many resources, …). Nothing ran; the context is still usable unless
    /// the code is a sticky one left by an earlier fault.
    #[error("gpu_rpc cuda: launching kernel `{kernel}` failed: {name} ({code}): {message}")]
    Launch {
        /// The kernel.
        kernel: String,
        /// The `CUresult` value.
        code: u32,
        /// The `CUresult` name.
        name: String,
        /// The driver's description.
        message: String,
    },
    /// The kernel faulted while running (`CUDA_ERROR_ILLEGAL_ADDRESS`,
    /// `CUDA_ERROR_LAUNCH_FAILED` for a `trap`, `CUDA_ERROR_ASSERT`,
    /// `CUDA_ERROR_ILLEGAL_INSTRUCTION`, …). The server threads were stopped.
    #[error("gpu_rpc cuda: kernel `{kernel}` faulted: {name} ({code}): {message}{}", lost_suffix(.context_lost))]
    Kernel {
        /// The kernel.
        kernel: String,
        /// The `CUresult` value.
        code: u32,
        /// The `CUresult` name.
        name: String,
        /// The driver's description, with a hint at the usual cause.
        message: String,
        /// The error is sticky: this CUDA context (and so this process's use
        /// of the device) is unusable from now on.
        context_lost: bool,
    },
    /// The kernel finished while a server thread was still in the middle of a
    /// call: a client left a call unfinished (a protocol misuse by hand-written
    /// device code; generated stubs cannot do this).
    #[error("gpu_rpc cuda: kernel `{kernel}` finished with a call still in flight: {abandoned}")]
    Abandoned {
        /// The kernel.
        kernel: String,
        /// The call that was left.
        abandoned: Abandoned,
    },
    /// A PTX file could not be read.
    #[error("gpu_rpc cuda: cannot read {path}: {message}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        message: String,
    },
}

fn log_suffix(log: &str) -> String {
    let log = log.trim();
    if log.is_empty() {
        String::new()
    } else {
        format!("\nJIT log:\n{log}")
    }
}

fn entries_list(entries: &[String]) -> String {
    if entries.is_empty() {
        "none".to_string()
    } else {
        entries.join(", ")
    }
}

fn lost_suffix(lost: &bool) -> &'static str {
    if *lost {
        "; the CUDA context is now unusable (sticky error): every later CUDA call in this process fails, restart the process"
    } else {
        ""
    }
}

/// `(code, name, message)` of a driver error. The name comes from the
/// binding's enum (no driver call), the message from `cuGetErrorString`.
fn describe(e: DriverError) -> (u32, String, String) {
    let name = format!("{:?}", e.0);
    let message = catch_unwind(|| e.error_string().map(|s| s.to_string_lossy().into_owned()))
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    (e.0 as u32, name, message)
}

impl CudaError {
    fn driver(what: &str, e: DriverError) -> CudaError {
        let (code, name, message) = describe(e);
        CudaError::Driver {
            what: what.to_string(),
            code,
            name,
            message,
        }
    }

    fn config(message: impl Into<String>) -> CudaError {
        CudaError::InvalidConfig {
            message: message.into(),
        }
    }

    /// Whether this error left the CUDA context unusable.
    ///
    /// ```
    /// use rpc_runtime::cuda::CudaError;
    /// let e = CudaError::NotPtx { reason: "empty".into() };
    /// assert!(!e.is_context_lost());
    /// ```
    pub fn is_context_lost(&self) -> bool {
        matches!(self, CudaError::Kernel { context_lost: true, .. })
    }
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_string())
}

/// Run a driver call, turning `cudarc`'s panic for a missing driver symbol
/// into an error. The outer `Result` is that failure, the inner one the
/// call's own.
fn raw_guard<T>(what: &str, f: impl FnOnce() -> Result<T, DriverError>) -> Result<Result<T, DriverError>, CudaError> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| CudaError::DriverSymbol {
        what: what.to_string(),
        detail: panic_message(&*p),
    })
}

/// [`raw_guard`] with the call's error mapped to [`CudaError::Driver`].
fn guard<T>(what: &str, f: impl FnOnce() -> Result<T, DriverError>) -> Result<T, CudaError> {
    raw_guard(what, f)?.map_err(|e| CudaError::driver(what, e))
}

// ---------------------------------------------------------------------------
// Device
// ---------------------------------------------------------------------------

/// Whether a CUDA driver library can be loaded on this machine (probed once,
/// without panicking).
///
/// ```
/// // Never panics, with or without a GPU.
/// let _ = rpc_runtime::cuda::driver_available();
/// ```
pub fn driver_available() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    *PRESENT.get_or_init(|| {
        // SAFETY: this only `dlopen`s the driver library under its usual names
        // (and closes it again); loading it runs its initializers, which any
        // use of the driver does anyway.
        catch_unwind(|| unsafe { sys::is_culib_present() }).unwrap_or(false)
    })
}

fn ensure_driver() -> Result<(), CudaError> {
    if driver_available() {
        Ok(())
    } else {
        Err(CudaError::DriverNotFound {
            searched: cudarc::get_lib_name_candidates("cuda").join(", "),
        })
    }
}

/// A CUDA context on one GPU: the device's primary context, shared with any
/// other user of that device in the process. Cheap to clone.
///
/// ```no_run
/// let dev = rpc_runtime::cuda::CudaDevice::new(0)?;
/// println!("{} (sm_{}{}, {} SMs)", dev.name()?, dev.compute_capability()?.0, dev.compute_capability()?.1, dev.sm_count()?);
/// # Ok::<(), rpc_runtime::cuda::CudaError>(())
/// ```
#[derive(Clone)]
pub struct CudaDevice {
    ctx: Arc<CudaContext>,
    ordinal: usize,
}

impl fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaDevice").field("ordinal", &self.ordinal).finish()
    }
}

impl CudaDevice {
    /// A context on device `ordinal`. Fails cleanly (never panics) when the
    /// driver library cannot be loaded ([`CudaError::DriverNotFound`]), when
    /// there is no such device, or when the device cannot map host memory or
    /// has a warp size other than 32.
    ///
    /// ```
    /// // On a machine without the NVIDIA driver this is an error, not a panic.
    /// if !rpc_runtime::cuda::driver_available() {
    ///     let e = rpc_runtime::cuda::CudaDevice::new(0).unwrap_err();
    ///     assert!(e.to_string().contains("libcuda could not be loaded"));
    /// }
    /// ```
    pub fn new(ordinal: usize) -> Result<CudaDevice, CudaError> {
        ensure_driver()?;
        let what = format!("creating a context on CUDA device {ordinal}");
        let ctx = guard(&what, || CudaContext::new(ordinal))?;
        let device = CudaDevice { ctx, ordinal };
        let warp = device.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_WARP_SIZE)?;
        if warp != LANE_SIZE as i32 {
            return Err(CudaError::Unsupported {
                ordinal,
                reason: format!("warp size {warp}, the backend needs {LANE_SIZE}"),
            });
        }
        if device.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY)? == 0 {
            return Err(CudaError::Unsupported {
                ordinal,
                reason: "it cannot map pinned host memory".to_string(),
            });
        }
        Ok(device)
    }

    /// Number of CUDA devices (an error when the driver cannot be loaded).
    ///
    /// ```no_run
    /// println!("{} GPUs", rpc_runtime::cuda::CudaDevice::count()?);
    /// # Ok::<(), rpc_runtime::cuda::CudaError>(())
    /// ```
    pub fn count() -> Result<usize, CudaError> {
        ensure_driver()?;
        guard("counting CUDA devices", || {
            CudaContext::device_count().map(|n| n.max(0) as usize)
        })
    }

    /// The CUDA version the driver supports, as `(major, minor)`.
    ///
    /// ```no_run
    /// let (major, minor) = rpc_runtime::cuda::CudaDevice::driver_version()?;
    /// assert!(major >= 12, "CUDA {major}.{minor}");
    /// # Ok::<(), rpc_runtime::cuda::CudaError>(())
    /// ```
    pub fn driver_version() -> Result<(u32, u32), CudaError> {
        ensure_driver()?;
        let mut v: std::ffi::c_int = 0;
        guard("querying the driver version", || {
            // SAFETY: `v` is a valid place for the driver to write an int.
            unsafe { sys::cuDriverGetVersion(&mut v) }.result()
        })?;
        let v = v.max(0) as u32;
        Ok((v / 1000, (v % 1000) / 10))
    }

    /// The device ordinal.
    ///
    /// ```no_run
    /// assert_eq!(rpc_runtime::cuda::CudaDevice::new(0)?.ordinal(), 0);
    /// # Ok::<(), rpc_runtime::cuda::CudaError>(())
    /// ```
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// The device's name, e.g. `NVIDIA H200`.
    ///
    /// ```no_run
    /// println!("{}", rpc_runtime::cuda::CudaDevice::new(0)?.name()?);
    /// # Ok::<(), rpc_runtime::cuda::CudaError>(())
    /// ```
    pub fn name(&self) -> Result<String, CudaError> {
        let dev = self.ctx.cu_device();
        guard("querying the device name", || result::device::get_name(dev))
    }

    /// Number of streaming multiprocessors.
    ///
    /// ```no_run
    /// assert!(rpc_runtime::cuda::CudaDevice::new(0)?.sm_count()? > 0);
    /// # Ok::<(), rpc_runtime::cuda::CudaError>(())
    /// ```
    pub fn sm_count(&self) -> Result<u32, CudaError> {
        Ok(self
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?
            .max(0) as u32)
    }

    /// Compute capability `(major, minor)`, e.g. `(9, 0)` for an H100/H200.
    ///
    /// ```no_run
    /// let (major, minor) = rpc_runtime::cuda::CudaDevice::new(0)?.compute_capability()?;
    /// println!("sm_{major}{minor}");
    /// # Ok::<(), rpc_runtime::cuda::CudaError>(())
    /// ```
    pub fn compute_capability(&self) -> Result<(u32, u32), CudaError> {
        let major = self.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = self.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        Ok((major.max(0) as u32, minor.max(0) as u32))
    }

    /// The `cudarc` context, for work outside this backend. Its raw handles
    /// must not be released.
    ///
    /// ```no_run
    /// let ctx = rpc_runtime::cuda::CudaDevice::new(0)?.context().clone();
    /// # Ok::<(), rpc_runtime::cuda::CudaError>(())
    /// ```
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    fn attribute(&self, attr: sys::CUdevice_attribute) -> Result<i32, CudaError> {
        let dev = self.ctx.cu_device();
        // SAFETY: `dev` was returned by `cuDeviceGet` when the context was made.
        guard("querying a device attribute", || unsafe {
            result::device::get_attribute(dev, attr)
        })
    }

    /// Make this context current on the calling thread (driver calls act on
    /// the current context). Does not go through `CudaContext::bind_to_thread`,
    /// whose recorded-error check would refuse to bind after an unrelated
    /// failure.
    fn bind(&self) -> Result<(), CudaError> {
        let ctx = self.ctx.cu_ctx();
        // SAFETY: `ctx` is the retained primary context, alive while `self.ctx`
        // is.
        guard("making the CUDA context current", || unsafe {
            result::ctx::set_current(ctx)
        })
    }

    fn same_context(&self, other: &CudaDevice) -> bool {
        self.ctx.cu_ctx() == other.ctx.cu_ctx()
    }
}

// ---------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------

/// Pinned host memory mapped into the device's address space
/// (`cuMemHostAlloc(PORTABLE | DEVICEMAP)`), zeroed. The host reaches it
/// through [`host_ptr`](Self::host_ptr) and [`MappedBuffer`], kernels through
/// [`device_ptr`](Self::device_ptr); freed on drop.
///
/// ```no_run
/// use rpc_runtime::cuda::{CudaDevice, MappedBuffer, PinnedBuffer};
/// let dev = CudaDevice::new(0)?;
/// let out = PinnedBuffer::new(&dev, 1024)?;
/// assert_eq!(out.len(), 1024);
/// // Pass `out.device_ptr()` to a kernel as `KernelArg::Ptr`; after the launch
/// // has returned, read it on the host:
/// // SAFETY: no kernel is running, so nothing writes the buffer.
/// let bytes = unsafe { out.as_slice() };
/// assert_eq!(bytes[0], 0);
/// # Ok::<(), rpc_runtime::cuda::CudaError>(())
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
    /// let dev = rpc_runtime::cuda::CudaDevice::new(0)?;
    /// let buf = rpc_runtime::cuda::PinnedBuffer::new(&dev, 4096)?;
    /// assert_ne!(buf.device_ptr(), 0);
    /// # Ok::<(), rpc_runtime::cuda::CudaError>(())
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
    /// # let dev = rpc_runtime::cuda::CudaDevice::new(0)?;
    /// let buf = rpc_runtime::cuda::PinnedBuffer::new(&dev, 64)?;
    /// assert_eq!(buf.host_ptr() as usize % 64, 0);
    /// # Ok::<(), rpc_runtime::cuda::CudaError>(())
    /// ```
    pub fn host_ptr(&self) -> *mut u8 {
        self.host.as_ptr()
    }

    /// The address kernels use for this memory.
    ///
    /// ```no_run
    /// # let dev = rpc_runtime::cuda::CudaDevice::new(0)?;
    /// let buf = rpc_runtime::cuda::PinnedBuffer::new(&dev, 64)?;
    /// let arg = rpc_runtime::cuda::KernelArg::Ptr(buf.device_ptr());
    /// # Ok::<(), rpc_runtime::cuda::CudaError>(())
    /// ```
    pub fn device_ptr(&self) -> u64 {
        self.dptr
    }

    /// Size in bytes.
    ///
    /// ```no_run
    /// # let dev = rpc_runtime::cuda::CudaDevice::new(0)?;
    /// assert_eq!(rpc_runtime::cuda::PinnedBuffer::new(&dev, 8)?.len(), 8);
    /// # Ok::<(), rpc_runtime::cuda::CudaError>(())
    /// ```
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false (a buffer has at least one byte).
    ///
    /// ```no_run
    /// # let dev = rpc_runtime::cuda::CudaDevice::new(0)?;
    /// assert!(!rpc_runtime::cuda::PinnedBuffer::new(&dev, 8)?.is_empty());
    /// # Ok::<(), rpc_runtime::cuda::CudaError>(())
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
struct DeviceWords {
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
/// and the `cuMemcpyDtoH` baseline of the benchmarks.
///
/// ```no_run
/// use rpc_runtime::cuda::{CudaDevice, DeviceBuffer, PinnedBuffer};
/// let dev = CudaDevice::new(0)?;
/// let src = DeviceBuffer::new(&dev, 4096)?;
/// let dst = PinnedBuffer::new(&dev, 4096)?;
/// let took = src.copy_to(&dst)?; // a synchronous cuMemcpyDtoH
/// assert!(took.as_nanos() > 0);
/// # Ok::<(), rpc_runtime::cuda::CudaError>(())
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
/// use rpc_runtime::cuda::{CudaDevice, CudaRegion};
/// let dev = CudaDevice::new(0)?;
/// let region = CudaRegion::new(&dev, 64)?;
/// let desc = region.client_desc(); // pass to the kernel
/// assert_eq!((desc.port_count, desc.lane_size), (64, 32));
/// assert!(region.is_quiescent()?);
/// # Ok::<(), rpc_runtime::cuda::CudaError>(())
/// ```
pub struct CudaRegion {
    device: CudaDevice,
    layout: Layout,
    shared: PinnedBuffer,
    client_locks: DeviceWords,
    server_locks: Box<[AtomicU32]>,
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
    /// let dev = rpc_runtime::cuda::CudaDevice::new(0)?;
    /// let region = rpc_runtime::cuda::CudaRegion::new(&dev, 4096)?;
    /// # Ok::<(), rpc_runtime::cuda::CudaError>(())
    /// ```
    pub fn new(device: &CudaDevice, port_count: u32) -> Result<CudaRegion, CudaError> {
        let layout = Layout::new(port_count, LANE_SIZE)
            .ok_or_else(|| CudaError::config(format!("port count {port_count} is not in 1..={MAX_PORTS}")))?;
        let shared = PinnedBuffer::new(device, layout.allocation_size())?;
        if shared.host_ptr() as usize % 64 != 0 || shared.device_ptr() % 64 != 0 {
            return Err(CudaError::config(
                "the driver returned a shared region that is not 64-byte aligned",
            ));
        }
        let words = lock_words(port_count);
        let client_locks = DeviceWords::zeroed(device, client_local_words(port_count) * 4)?;
        Ok(CudaRegion {
            device: device.clone(),
            layout,
            shared,
            client_locks,
            server_locks: (0..words).map(|_| AtomicU32::new(0)).collect(),
        })
    }

    /// The layout (`port_count` ports, 32 lanes).
    ///
    /// ```no_run
    /// # let dev = rpc_runtime::cuda::CudaDevice::new(0)?;
    /// let region = rpc_runtime::cuda::CudaRegion::new(&dev, 8)?;
    /// assert_eq!(region.layout().lane_size(), 32);
    /// # Ok::<(), rpc_runtime::cuda::CudaError>(())
    /// ```
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The device the region belongs to.
    ///
    /// ```no_run
    /// # let dev = rpc_runtime::cuda::CudaDevice::new(0)?;
    /// let region = rpc_runtime::cuda::CudaRegion::new(&dev, 8)?;
    /// assert_eq!(region.device().ordinal(), 0);
    /// # Ok::<(), rpc_runtime::cuda::CudaError>(())
    /// ```
    pub fn device(&self) -> &CudaDevice {
        &self.device
    }

    /// What a kernel needs to build its `Client`: device addresses of the
    /// region and of the client lock words.
    ///
    /// ```no_run
    /// # let dev = rpc_runtime::cuda::CudaDevice::new(0)?;
    /// let region = rpc_runtime::cuda::CudaRegion::new(&dev, 8)?;
    /// assert_eq!(region.client_desc().shared, region.device_ptr());
    /// # Ok::<(), rpc_runtime::cuda::CudaError>(())
    /// ```
    pub fn client_desc(&self) -> ClientDesc {
        ClientDesc {
            shared: self.shared.device_ptr(),
            locks: self.client_locks.dptr,
            port_count: self.layout.port_count(),
            lane_size: self.layout.lane_size(),
        }
    }

    /// The server side, over the host address of the region.
    ///
    /// ```no_run
    /// # let dev = rpc_runtime::cuda::CudaDevice::new(0)?;
    /// let region = rpc_runtime::cuda::CudaRegion::new(&dev, 8)?;
    /// assert!(!region.server().pending(0));
    /// # Ok::<(), rpc_runtime::cuda::CudaError>(())
    /// ```
    pub fn server(&self) -> Server<'_> {
        // SAFETY: the region is laid out by `layout`, page-aligned, zeroed at
        // allocation and lives as long as the returned server borrows `self`;
        // the device only touches it through the protocol's atomics. The
        // server lock array has `lock_words(port_count)` words used by server
        // threads only.
        unsafe {
            Server::from_parts(
                self.layout,
                Parts::from_region(self.shared.host_ptr(), self.layout),
                self.server_locks.as_ptr() as *const _,
            )
        }
    }

    /// Whether every port is idle on the server side and every client lock
    /// word in device memory is zero (read back with a device-to-host copy).
    /// Meaningful only when no kernel is running.
    ///
    /// ```no_run
    /// # let dev = rpc_runtime::cuda::CudaDevice::new(0)?;
    /// let region = rpc_runtime::cuda::CudaRegion::new(&dev, 8)?;
    /// assert!(region.is_quiescent()?);
    /// # Ok::<(), rpc_runtime::cuda::CudaError>(())
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
    /// # let dev = rpc_runtime::cuda::CudaDevice::new(0)?;
    /// let region = rpc_runtime::cuda::CudaRegion::new(&dev, 8)?;
    /// assert!(region.busy_ports()?.is_empty());
    /// # Ok::<(), rpc_runtime::cuda::CudaError>(())
    /// ```
    pub fn busy_ports(&self) -> Result<Vec<crate::protocol::PortSnapshot>, CudaError> {
        let words = self.client_locks.read()?;
        let server = self.server();
        Ok((0..self.layout.port_count())
            .map(|i| crate::protocol::PortSnapshot {
                client: crate::protocol::client_port_state(&words, i),
                ..server.snapshot(i)
            })
            .filter(|s| !s.is_idle())
            .collect())
    }

    /// Host address of the shared region (for raw baselines and
    /// fault-injection tests; writing it while a protocol side runs breaks
    /// the protocol's invariants).
    ///
    /// ```no_run
    /// # let dev = rpc_runtime::cuda::CudaDevice::new(0)?;
    /// let region = rpc_runtime::cuda::CudaRegion::new(&dev, 8)?;
    /// assert!(!region.host_ptr().is_null());
    /// # Ok::<(), rpc_runtime::cuda::CudaError>(())
    /// ```
    pub fn host_ptr(&self) -> *mut u8 {
        self.shared.host_ptr()
    }

    /// Device address of the shared region.
    ///
    /// ```no_run
    /// # let dev = rpc_runtime::cuda::CudaDevice::new(0)?;
    /// let region = rpc_runtime::cuda::CudaRegion::new(&dev, 8)?;
    /// assert_ne!(region.device_ptr(), 0);
    /// # Ok::<(), rpc_runtime::cuda::CudaError>(())
    /// ```
    pub fn device_ptr(&self) -> u64 {
        self.shared.device_ptr()
    }
}

// ---------------------------------------------------------------------------
// Modules and kernels
// ---------------------------------------------------------------------------

/// Check that `text` looks like PTX: after whitespace and comments, the first
/// directive must be `.version`.
fn check_ptx(text: &str) -> Result<(), CudaError> {
    let not_ptx = |reason: String| Err(CudaError::NotPtx { reason });
    if text.contains('\0') {
        return not_ptx("the text contains a NUL byte".to_string());
    }
    let mut rest = text;
    loop {
        rest = rest.trim_start();
        if let Some(r) = rest.strip_prefix("//") {
            rest = r.split_once('\n').map_or("", |(_, after)| after);
        } else if let Some(r) = rest.strip_prefix("/*") {
            rest = r.split_once("*/").map_or("", |(_, after)| after);
        } else {
            break;
        }
    }
    if rest.is_empty() {
        return not_ptx("the text is empty (or only comments)".to_string());
    }
    if !rest.starts_with(".version") {
        let head: String = rest.chars().take(40).collect();
        return not_ptx(format!(
            "expected the `.version` directive that starts a PTX module, found {head:?}"
        ));
    }
    Ok(())
}

/// The `.entry` names declared in PTX text (for error messages).
fn ptx_entries(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in text.lines() {
        let mut tokens = line.split_whitespace();
        while let Some(t) = tokens.next() {
            if t == ".entry" {
                if let Some(name) = tokens.next() {
                    let name = name.split('(').next().unwrap_or(name);
                    if !name.is_empty() {
                        names.push(name.to_string());
                    }
                }
                break;
            }
        }
    }
    names
}

/// A PTX module loaded into a device's context; unloaded on drop.
///
/// ```no_run
/// use rpc_runtime::cuda::{CudaDevice, Module};
/// let dev = CudaDevice::new(0)?;
/// let module = Module::from_ptx(&dev, ".version 7.8\n.target sm_90\n.address_size 64\n.visible .entry k() { ret; }\n")?;
/// assert_eq!(module.entries(), ["k"]);
/// # Ok::<(), rpc_runtime::cuda::CudaError>(())
/// ```
pub struct Module {
    device: CudaDevice,
    raw: sys::CUmodule,
    entries: Vec<String>,
}

// SAFETY: a `CUmodule` is a driver handle usable from any thread on which its
// context is current (every use binds it first); the driver API is
// thread-safe.
unsafe impl Send for Module {}
// SAFETY: as above; `&Module` only looks functions up.
unsafe impl Sync for Module {}

impl fmt::Debug for Module {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Module")
            .field("device", &self.device)
            .field("entries", &self.entries)
            .finish()
    }
}

impl Module {
    /// Load PTX text (JIT-compiled by the driver for the device). Text that
    /// is not PTX is refused before it reaches the driver
    /// ([`CudaError::NotPtx`]); PTX the driver rejects gives
    /// [`CudaError::InvalidPtx`] with the JIT compiler's log.
    ///
    /// ```no_run
    /// # let dev = rpc_runtime::cuda::CudaDevice::new(0)?;
    /// let err = rpc_runtime::cuda::Module::from_ptx(&dev, "hello").unwrap_err();
    /// assert!(err.to_string().contains("not PTX"));
    /// # Ok::<(), rpc_runtime::cuda::CudaError>(())
    /// ```
    pub fn from_ptx(device: &CudaDevice, ptx: &str) -> Result<Module, CudaError> {
        check_ptx(ptx)?;
        let entries = ptx_entries(ptx);
        let src = CString::new(ptx).map_err(|_| CudaError::NotPtx {
            reason: "the text contains a NUL byte".to_string(),
        })?;
        device.bind()?;
        let mut log = vec![0u8; JIT_LOG_BYTES];
        let mut options = [
            sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
            sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        ];
        // The size option is an integer passed in the pointer-sized slot.
        let mut values = [
            log.as_mut_ptr().cast::<c_void>(),
            std::ptr::without_provenance_mut::<c_void>(JIT_LOG_BYTES),
        ];
        let mut raw: sys::CUmodule = std::ptr::null_mut();
        // SAFETY: `src` is NUL-terminated PTX text; `options`/`values` hold two
        // matching entries; `log` has `JIT_LOG_BYTES` writable bytes and
        // outlives the call; the context is current.
        let r = raw_guard("loading a PTX module", || unsafe {
            sys::cuModuleLoadDataEx(
                &mut raw,
                src.as_ptr().cast(),
                options.len() as u32,
                options.as_mut_ptr(),
                values.as_mut_ptr(),
            )
            .result()
        })?;
        match r {
            Ok(()) => Ok(Module {
                device: device.clone(),
                raw,
                entries,
            }),
            Err(e) => {
                use sys::CUresult::*;
                let (code, name, message) = describe(e);
                match e.0 {
                    CUDA_ERROR_INVALID_PTX
                    | CUDA_ERROR_INVALID_IMAGE
                    | CUDA_ERROR_NO_BINARY_FOR_GPU
                    | CUDA_ERROR_UNSUPPORTED_PTX_VERSION
                    | CUDA_ERROR_INVALID_SOURCE
                    | CUDA_ERROR_JIT_COMPILER_NOT_FOUND
                    | CUDA_ERROR_JIT_COMPILATION_DISABLED => {
                        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                        let log = String::from_utf8_lossy(&log[..end]).into_owned();
                        Err(CudaError::InvalidPtx {
                            code,
                            name,
                            message,
                            log,
                        })
                    }
                    _ => Err(CudaError::Driver {
                        what: "loading a PTX module".to_string(),
                        code,
                        name,
                        message,
                    }),
                }
            }
        }
    }

    /// [`from_ptx`](Self::from_ptx) on the contents of a file.
    ///
    /// ```no_run
    /// # let dev = rpc_runtime::cuda::CudaDevice::new(0)?;
    /// let module = rpc_runtime::cuda::Module::from_ptx_file(&dev, "kernels.ptx")?;
    /// # Ok::<(), rpc_runtime::cuda::CudaError>(())
    /// ```
    pub fn from_ptx_file(device: &CudaDevice, path: impl AsRef<Path>) -> Result<Module, CudaError> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|e| CudaError::Io {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        let text = String::from_utf8(bytes).map_err(|_| CudaError::NotPtx {
            reason: format!(
                "{} is not UTF-8 text (a cubin or fatbin? this backend loads PTX text)",
                path.display()
            ),
        })?;
        Module::from_ptx(device, &text)
    }

    /// The `.entry` names declared in the PTX text.
    ///
    /// ```no_run
    /// # let dev = rpc_runtime::cuda::CudaDevice::new(0)?;
    /// # let module = rpc_runtime::cuda::Module::from_ptx_file(&dev, "kernels.ptx")?;
    /// for name in module.entries() {
    ///     println!("{name}");
    /// }
    /// # Ok::<(), rpc_runtime::cuda::CudaError>(())
    /// ```
    pub fn entries(&self) -> &[String] {
        &self.entries
    }

    /// The device the module is loaded on.
    ///
    /// ```no_run
    /// # let dev = rpc_runtime::cuda::CudaDevice::new(0)?;
    /// # let module = rpc_runtime::cuda::Module::from_ptx_file(&dev, "kernels.ptx")?;
    /// assert_eq!(module.device().ordinal(), 0);
    /// # Ok::<(), rpc_runtime::cuda::CudaError>(())
    /// ```
    pub fn device(&self) -> &CudaDevice {
        &self.device
    }

    /// The entry point `name` ([`CudaError::KernelNotFound`] when the module
    /// has none of that name).
    ///
    /// ```no_run
    /// # let dev = rpc_runtime::cuda::CudaDevice::new(0)?;
    /// # let module = rpc_runtime::cuda::Module::from_ptx_file(&dev, "kernels.ptx")?;
    /// let err = module.kernel("no_such_kernel").unwrap_err();
    /// assert!(err.to_string().contains("kernel `no_such_kernel` not found in module"));
    /// # Ok::<(), rpc_runtime::cuda::CudaError>(())
    /// ```
    pub fn kernel(&self, name: &str) -> Result<Kernel<'_>, CudaError> {
        let not_found = || CudaError::KernelNotFound {
            kernel: name.to_string(),
            entries: self.entries.clone(),
        };
        let cname = CString::new(name).map_err(|_| not_found())?;
        self.device.bind()?;
        let raw = self.raw;
        let what = format!("looking up kernel `{name}`");
        // SAFETY: `raw` is a loaded module (unloaded only on drop); the context
        // is current.
        let func = match raw_guard(&what, || unsafe { result::module::get_function(raw, cname) })? {
            Ok(f) => f,
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NOT_FOUND => return Err(not_found()),
            Err(e) => return Err(CudaError::driver(&what, e)),
        };
        Ok(Kernel {
            module: self,
            func,
            name: name.to_string(),
            params: param_sizes(func),
        })
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        let _ = self.device.bind();
        let raw = self.raw;
        // SAFETY: loaded in `from_ptx`, unloaded once; every `Kernel` borrows
        // the module, so none outlives it. Errors (sticky context) are ignored.
        let _ = raw_guard("unloading a module", || unsafe { result::module::unload(raw) });
    }
}

/// Parameter sizes as the driver reports them (`cuFuncGetParamInfo`, CUDA
/// 12.4+), or `None` when it cannot tell.
fn param_sizes(func: sys::CUfunction) -> Option<Vec<usize>> {
    let mut sizes = Vec::new();
    for index in 0..4096usize {
        let (mut offset, mut size) = (0usize, 0usize);
        // SAFETY: `func` is a live function handle; `offset` and `size` are
        // valid places for the results.
        let r = raw_guard("querying kernel parameters", || unsafe {
            sys::cuFuncGetParamInfo(func, index, &mut offset, &mut size).result()
        })
        .ok()?;
        match r {
            Ok(()) => sizes.push(size),
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_INVALID_VALUE && index > 0 => return Some(sizes),
            // Index 0 invalid: no parameters at all, or a driver that cannot
            // say; either way nothing to validate against.
            Err(_) => return None,
        }
    }
    None
}

/// One entry point of a [`Module`].
///
/// ```no_run
/// # let dev = rpc_runtime::cuda::CudaDevice::new(0)?;
/// # let module = rpc_runtime::cuda::Module::from_ptx_file(&dev, "kernels.ptx")?;
/// let kernel = module.kernel("rpc_noop_kernel")?;
/// assert_eq!(kernel.param_sizes(), Some(&[24, 4, 8][..]));
/// # Ok::<(), rpc_runtime::cuda::CudaError>(())
/// ```
pub struct Kernel<'m> {
    module: &'m Module,
    func: sys::CUfunction,
    name: String,
    params: Option<Vec<usize>>,
}

// SAFETY: a `CUfunction` is a driver handle valid on any thread on which its
// context is current (launches bind it first).
unsafe impl Send for Kernel<'_> {}
// SAFETY: as above; `&Kernel` is only read.
unsafe impl Sync for Kernel<'_> {}

impl fmt::Debug for Kernel<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kernel")
            .field("name", &self.name)
            .field("params", &self.params)
            .finish()
    }
}

/// A kernel's resources as the driver reports them after loading it
/// (`cuFuncGetAttribute`); see [`Kernel::resources`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelResources {
    /// Registers per thread.
    pub registers: u32,
    /// Local memory (stack and spills) per thread, in bytes.
    pub local_bytes: u32,
    /// The largest block it can launch with on this device.
    pub max_threads_per_block: u32,
}

impl Kernel<'_> {
    /// Its registers, local memory and largest block on this device.
    ///
    /// ```no_run
    /// # let dev = rpc_runtime::cuda::CudaDevice::new(0)?;
    /// # let module = rpc_runtime::cuda::Module::from_ptx_file(&dev, "kernels.ptx")?;
    /// let r = module.kernel("rpc_noop_kernel")?.resources()?;
    /// assert!(r.registers <= 64 && r.max_threads_per_block == 1024);
    /// # Ok::<(), rpc_runtime::cuda::CudaError>(())
    /// ```
    pub fn resources(&self) -> Result<KernelResources, CudaError> {
        use sys::CUfunction_attribute_enum as A;
        self.module.device.bind()?;
        let func = self.func;
        let get = |attribute: A| -> Result<u32, CudaError> {
            let what = format!("querying kernel `{}` ({attribute:?})", self.name);
            // SAFETY: `func` is a live function of a loaded module (the
            // kernel borrows it); the context is current.
            raw_guard(&what, || unsafe {
                result::function::get_function_attribute(func, attribute)
            })?
            .map(|v| v.max(0) as u32)
            .map_err(|e| CudaError::driver(&what, e))
        };
        Ok(KernelResources {
            registers: get(A::CU_FUNC_ATTRIBUTE_NUM_REGS)?,
            local_bytes: get(A::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)?,
            max_threads_per_block: get(A::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
        })
    }

    /// [`CudaError::BlockTooLarge`] when `launch`'s blocks are larger than
    /// this kernel allows.
    fn check_block(&self, launch: &Launch) -> Result<(), CudaError> {
        let b = launch.block;
        let threads = b.0 as u64 * b.1 as u64 * b.2 as u64;
        let r = self.resources()?;
        if threads > r.max_threads_per_block as u64 {
            return Err(CudaError::BlockTooLarge {
                kernel: self.name.clone(),
                threads,
                max_threads: r.max_threads_per_block,
                registers: r.registers,
            });
        }
        Ok(())
    }

    /// The kernel's name.
    ///
    /// ```no_run
    /// # let dev = rpc_runtime::cuda::CudaDevice::new(0)?;
    /// # let module = rpc_runtime::cuda::Module::from_ptx_file(&dev, "kernels.ptx")?;
    /// assert_eq!(module.kernel("rpc_noop_kernel")?.name(), "rpc_noop_kernel");
    /// # Ok::<(), rpc_runtime::cuda::CudaError>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The module it belongs to.
    ///
    /// ```no_run
    /// # let dev = rpc_runtime::cuda::CudaDevice::new(0)?;
    /// # let module = rpc_runtime::cuda::Module::from_ptx_file(&dev, "kernels.ptx")?;
    /// let k = module.kernel("rpc_noop_kernel")?;
    /// assert!(k.module().entries().contains(&"rpc_noop_kernel".to_string()));
    /// # Ok::<(), rpc_runtime::cuda::CudaError>(())
    /// ```
    pub fn module(&self) -> &Module {
        self.module
    }

    /// The size in bytes of each parameter, as the driver reports them;
    /// `None` when the driver cannot tell (then launches are not checked).
    ///
    /// ```no_run
    /// # let dev = rpc_runtime::cuda::CudaDevice::new(0)?;
    /// # let module = rpc_runtime::cuda::Module::from_ptx_file(&dev, "kernels.ptx")?;
    /// if let Some(sizes) = module.kernel("rpc_noop_kernel")?.param_sizes() {
    ///     assert_eq!(sizes[0], 24); // the ClientDesc
    /// }
    /// # Ok::<(), rpc_runtime::cuda::CudaError>(())
    /// ```
    pub fn param_sizes(&self) -> Option<&[usize]> {
        self.params.as_deref()
    }

    /// Check the parameters against `ClientDesc` + `extra`.
    fn check_args(&self, extra: &[KernelArg]) -> Result<(), CudaError> {
        let Some(sizes) = &self.params else {
            return Ok(());
        };
        let bad = |message: String| {
            Err(CudaError::KernelSignature {
                kernel: self.name.clone(),
                message,
            })
        };
        let want = 1 + extra.len();
        if sizes.len() != want {
            return bad(format!(
                "it has {} parameters (sizes {sizes:?}), the launch passes {want} (the ClientDesc and {} extra)",
                sizes.len(),
                extra.len()
            ));
        }
        let desc = std::mem::size_of::<ClientDesc>();
        if sizes[0] != desc {
            return bad(format!(
                "its first parameter is {} bytes; it must be the {desc}-byte ClientDesc passed by value (`.param .align 8 .b8 name[{desc}]` in PTX)",
                sizes[0]
            ));
        }
        for (i, (arg, &size)) in extra.iter().zip(&sizes[1..]).enumerate() {
            if arg.size() != size {
                return bad(format!(
                    "parameter {} is {size} bytes, the launch passes {arg:?} ({} bytes)",
                    i + 1,
                    arg.size()
                ));
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Launching
// ---------------------------------------------------------------------------

/// How to launch a kernel and serve it.
///
/// ```
/// use rpc_runtime::cuda::Launch;
/// let l = Launch { grid: (2, 1, 1), block: (96, 1, 1), ..Launch::default() };
/// assert_eq!(l.warps(), 2 * 3);
/// assert_eq!(l.server_threads, 2);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// Blocks in the grid `(x, y, z)`.
    pub grid: (u32, u32, u32),
    /// Threads per block `(x, y, z)`; warps are formed from consecutive
    /// threads, a partial last warp is fine.
    pub block: (u32, u32, u32),
    /// Dynamic shared memory per block, in bytes.
    pub shared_mem_bytes: u32,
    /// Ports of the region [`launch`] creates (it uses
    /// `min(port_count, warps())`); ignored by [`launch_with_region`]. Default
    /// [`DEFAULT_PORT_COUNT`].
    pub port_count: u32,
    /// Host server threads; each scans its own slice of the ports first, then
    /// the rest. Default 2: a server thread serves one port's call to its end
    /// (a slow handler, or a client slow to send its next packet, holds it),
    /// so with one thread nothing else is served meanwhile.
    pub server_threads: usize,
}

impl Default for Launch {
    fn default() -> Self {
        Launch {
            grid: (1, 1, 1),
            block: (32, 1, 1),
            shared_mem_bytes: 0,
            port_count: DEFAULT_PORT_COUNT,
            server_threads: 2,
        }
    }
}

impl Launch {
    /// Warps in the grid (`blocks × ceil(threads per block / 32)`).
    ///
    /// ```
    /// let l = rpc_runtime::cuda::Launch { grid: (4, 2, 1), block: (33, 1, 1), ..Default::default() };
    /// assert_eq!(l.warps(), 8 * 2);
    /// ```
    pub fn warps(&self) -> u64 {
        let blocks = self.grid.0 as u64 * self.grid.1 as u64 * self.grid.2 as u64;
        let threads = self.block.0 as u64 * self.block.1 as u64 * self.block.2 as u64;
        blocks * threads.div_ceil(LANE_SIZE as u64)
    }

    fn validate(&self) -> Result<(), CudaError> {
        let (g, b) = (self.grid, self.block);
        if g.0 == 0 || g.1 == 0 || g.2 == 0 || b.0 == 0 || b.1 == 0 || b.2 == 0 {
            return Err(CudaError::config(format!(
                "grid {g:?} and block {b:?} must not have a zero dimension"
            )));
        }
        Ok(())
    }
}

/// A non-blocking stream, destroyed on drop.
struct Stream<'d> {
    device: &'d CudaDevice,
    raw: sys::CUstream,
}

impl<'d> Stream<'d> {
    fn new(device: &'d CudaDevice) -> Result<Self, CudaError> {
        device.bind()?;
        let raw = guard("creating a stream", || {
            result::stream::create(result::stream::StreamKind::NonBlocking)
        })?;
        Ok(Stream { device, raw })
    }
}

impl Drop for Stream<'_> {
    fn drop(&mut self) {
        let _ = self.device.bind();
        let raw = self.raw;
        // SAFETY: created in `new`, destroyed once; its work has completed or
        // died (launches wait for it).
        let _ = raw_guard("destroying a stream", || unsafe { result::stream::destroy(raw) });
    }
}

/// A timing event, destroyed on drop.
struct Event<'d> {
    device: &'d CudaDevice,
    raw: sys::CUevent,
}

impl<'d> Event<'d> {
    fn new(device: &'d CudaDevice) -> Result<Self, CudaError> {
        device.bind()?;
        let raw = guard("creating an event", || {
            result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
        })?;
        Ok(Event { device, raw })
    }

    fn record(&self, stream: &Stream<'_>) -> Result<(), CudaError> {
        let (e, s) = (self.raw, stream.raw);
        // SAFETY: both handles are live and belong to the current context.
        guard("recording an event", || unsafe { result::event::record(e, s) })
    }
}

impl Drop for Event<'_> {
    fn drop(&mut self) {
        let _ = self.device.bind();
        let raw = self.raw;
        // SAFETY: created in `new`, destroyed once.
        let _ = raw_guard("destroying an event", || unsafe { result::event::destroy(raw) });
    }
}

/// Error codes after which the context is unusable (CUDA docs: "the process
/// is left in an inconsistent state and any further CUDA work will return the
/// same error").
fn is_sticky(code: sys::CUresult) -> bool {
    use sys::CUresult::*;
    matches!(
        code,
        CUDA_ERROR_ILLEGAL_ADDRESS
            | CUDA_ERROR_LAUNCH_FAILED
            | CUDA_ERROR_ILLEGAL_INSTRUCTION
            | CUDA_ERROR_ASSERT
            | CUDA_ERROR_MISALIGNED_ADDRESS
            | CUDA_ERROR_INVALID_ADDRESS_SPACE
            | CUDA_ERROR_INVALID_PC
            | CUDA_ERROR_HARDWARE_STACK_ERROR
            | CUDA_ERROR_LAUNCH_TIMEOUT
            | CUDA_ERROR_ECC_UNCORRECTABLE
            | CUDA_ERROR_CONTAINED
    )
}

fn kernel_error(kernel: &str, e: DriverError) -> CudaError {
    use sys::CUresult::*;
    let (code, name, mut message) = describe(e);
    let hint = match e.0 {
        CUDA_ERROR_LAUNCH_FAILED => " (usually a `trap`: a device-side panic or abort)",
        CUDA_ERROR_ASSERT => " (a device-side assertion failed)",
        CUDA_ERROR_ILLEGAL_ADDRESS => {
            " (an access to memory the kernel may not touch: check pointer arguments and the ClientDesc)"
        }
        CUDA_ERROR_MISALIGNED_ADDRESS => " (a misaligned load or store)",
        CUDA_ERROR_ILLEGAL_INSTRUCTION => {
            " (an instruction the device cannot execute, e.g. code built for another architecture)"
        }
        CUDA_ERROR_LAUNCH_TIMEOUT => " (the kernel ran into the display watchdog)",
        _ => "",
    };
    message.push_str(hint);
    CudaError::Kernel {
        kernel: kernel.to_string(),
        code,
        name,
        message,
        context_lost: is_sticky(e.0),
    }
}

/// Launch `kernel` on the stream and wait until it is over. Returns the
/// kernel's GPU time, or how it failed. When this returns, the kernel is not
/// running (finished, faulted or never launched).
fn run_kernel(
    device: &CudaDevice,
    kernel: &Kernel<'_>,
    launch: &Launch,
    params: &mut [*mut c_void],
) -> Result<Option<Duration>, CudaError> {
    kernel.check_block(launch)?;
    let stream = Stream::new(device)?;
    let start = Event::new(device)?;
    let stop = Event::new(device)?;
    start.record(&stream)?;
    let func = kernel.func;
    let s = stream.raw;
    // SAFETY: `func` is a live function of a loaded module; `params` holds one
    // pointer per kernel parameter (checked against the driver's parameter
    // info when available), each to a value of the parameter's size that
    // outlives the kernel (the caller keeps them until this returns, and this
    // returns only after the kernel is over); every address inside them is
    // memory that outlives the launch; the context is current.
    let launched = raw_guard("launching a kernel", || unsafe {
        result::launch_kernel(func, launch.grid, launch.block, launch.shared_mem_bytes, s, params)
    })?;
    if let Err(e) = launched {
        let (code, name, message) = describe(e);
        return Err(CudaError::Launch {
            kernel: kernel.name.clone(),
            code,
            name,
            message,
        });
    }
    let timing = stop.record(&stream);
    let waiting = Instant::now();
    loop {
        let state = raw_guard("waiting for a kernel", || {
            // SAFETY: `s` is a live stream of the current context.
            unsafe { sys::cuStreamQuery(s) }.result()
        })?;
        match state {
            Ok(()) => break,
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NOT_READY => {
                // Yield for the first millisecond (short kernels), then sleep
                // so the watcher does not compete with the server threads.
                if waiting.elapsed() < Duration::from_millis(1) {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
            Err(e) => return Err(kernel_error(&kernel.name, e)),
        }
    }
    if timing.is_err() {
        return Ok(None);
    }
    let (a, b) = (start.raw, stop.raw);
    // SAFETY: both events were recorded on the finished stream.
    let ms = raw_guard("reading the kernel time", || unsafe { result::event::elapsed(a, b) });
    Ok(match ms {
        Ok(Ok(ms)) if ms >= 0.0 => Some(Duration::from_secs_f64(ms as f64 / 1e3)),
        _ => None,
    })
}

/// Launch `kernel(desc, extra...)` on a fresh region of
/// `min(launch.port_count, launch.warps())` ports and serve its calls with
/// `dispatcher` on `launch.server_threads` host threads until the kernel has
/// finished and every call has been served.
///
/// The kernel's first parameter must be the [`ClientDesc`] by value (24
/// bytes, `#[repr(C)]`, align 8); `extra` follows it. When the driver reports
/// parameter sizes (CUDA 12.4+), they are checked before launching.
///
/// On a fault the server threads are stopped and [`CudaError::Kernel`] is
/// returned; see [the module docs](self) on sticky errors. A kernel that
/// never finishes (e.g. waiting for a reply that never comes) blocks this
/// call: there is no timeout, as memory a running kernel uses cannot be freed.
///
/// ```no_run
/// use rpc_runtime::cuda::{launch, CudaDevice, KernelArg, Launch, Module, PinnedBuffer};
/// use rpc_runtime::server::{Dispatcher, ServerConfig};
/// let dev = CudaDevice::new(0)?;
/// let module = Module::from_ptx_file(&dev, "kernels.ptx")?;
/// let kernel = module.kernel("rpc_noop_kernel")?;
/// let out = PinnedBuffer::new(&dev, 32 * 8)?;
/// let d = Dispatcher::new(ServerConfig::default());
/// let report = launch(&kernel, &Launch::default(), &d, &[KernelArg::U32(10), KernelArg::Ptr(out.device_ptr())])?;
/// assert_eq!(report.errors, 0);
/// # Ok::<(), rpc_runtime::cuda::CudaError>(())
/// ```
pub fn launch(
    kernel: &Kernel<'_>,
    launch: &Launch,
    dispatcher: &Dispatcher,
    extra: &[KernelArg],
) -> Result<Report, CudaError> {
    launch.validate()?;
    kernel.check_args(extra)?;
    let ports = launch.warps().min(launch.port_count as u64).clamp(1, MAX_PORTS as u64) as u32;
    let region = CudaRegion::new(kernel.module.device(), ports)?;
    launch_with_region(&region, kernel, launch, dispatcher, extra)
}

/// [`launch`] on an existing region (its port count wins over
/// `launch.port_count`), so a test can check
/// [`is_quiescent`](CudaRegion::is_quiescent) afterwards. A region can serve
/// one launch after another as long as every kernel left its ports idle.
///
/// ```no_run
/// use rpc_runtime::cuda::{launch_with_region, CudaDevice, CudaRegion, KernelArg, Launch, Module, PinnedBuffer};
/// use rpc_runtime::server::{Dispatcher, ServerConfig};
/// let dev = CudaDevice::new(0)?;
/// let module = Module::from_ptx_file(&dev, "kernels.ptx")?;
/// let kernel = module.kernel("rpc_noop_kernel")?;
/// let region = CudaRegion::new(&dev, 16)?;
/// let out = PinnedBuffer::new(&dev, 256 * 8)?;
/// let d = Dispatcher::new(ServerConfig::default());
/// let cfg = Launch { grid: (4, 1, 1), block: (64, 1, 1), server_threads: 2, ..Launch::default() };
/// launch_with_region(&region, &kernel, &cfg, &d, &[KernelArg::U32(10), KernelArg::Ptr(out.device_ptr())])?;
/// assert!(region.is_quiescent()?);
/// # Ok::<(), rpc_runtime::cuda::CudaError>(())
/// ```
pub fn launch_with_region(
    region: &CudaRegion,
    kernel: &Kernel<'_>,
    launch: &Launch,
    dispatcher: &Dispatcher,
    extra: &[KernelArg],
) -> Result<Report, CudaError> {
    let job = Job {
        region,
        kernel,
        launch,
        dispatcher,
        extra,
    };
    launch_many(std::slice::from_ref(&job)).pop().expect("one job")
}

/// One kernel launch of [`launch_many`]: the region it calls through, the
/// kernel and its configuration, who serves it, its extra arguments.
pub struct Job<'a, 'm> {
    /// The region the kernel's client uses (its port count wins over
    /// `launch.port_count`).
    pub region: &'a CudaRegion,
    /// The kernel.
    pub kernel: &'a Kernel<'m>,
    /// Grid, block and server threads.
    pub launch: &'a Launch,
    /// Serves this launch's calls and keeps its error log (give each job its
    /// own dispatcher to keep their counts and errors apart).
    pub dispatcher: &'a Dispatcher,
    /// Arguments after the descriptor.
    pub extra: &'a [KernelArg],
}

/// A job's kernel parameters: the values and the array of pointers to them
/// the driver reads. Boxed so the pointers stay valid while it moves.
struct Params {
    _desc: Box<ClientDesc>,
    _slots: Vec<u64>,
    ptrs: Vec<*mut c_void>,
}

// SAFETY: the pointers point into the boxed values owned by the same struct;
// they are only handed to the driver by the one thread that owns the struct.
unsafe impl Send for Params {}

impl Params {
    fn new(desc: ClientDesc, extra: &[KernelArg]) -> Params {
        let mut desc = Box::new(desc);
        let mut slots: Vec<u64> = extra.iter().map(KernelArg::bits).collect();
        let mut ptrs: Vec<*mut c_void> = Vec::with_capacity(1 + slots.len());
        ptrs.push((&mut *desc as *mut ClientDesc).cast());
        ptrs.extend(slots.iter_mut().map(|s| (s as *mut u64).cast::<c_void>()));
        Params {
            _desc: desc,
            _slots: slots,
            ptrs,
        }
    }
}

/// Launch several kernels at once — on one GPU (each on its own stream and
/// region) or on several — and serve all of them from one pool of server
/// threads (the largest `server_threads` of the jobs), until every kernel is
/// over. Each job ends on its own: one that fails to launch, faults or
/// abandons a call reports its error, and the others are still served (a
/// fault that makes a device's context unusable ends every job on that
/// device, as CUDA's sticky errors do). Returns one result per job, in order.
///
/// ```no_run
/// use rpc_runtime::cuda::{launch_many, CudaDevice, CudaRegion, Job, KernelArg, Launch, Module, PinnedBuffer};
/// use rpc_runtime::server::{Dispatcher, ServerConfig};
/// let dev = CudaDevice::new(0)?;
/// let module = Module::from_ptx_file(&dev, "kernels.ptx")?;
/// let kernel = module.kernel("rpc_noop_kernel")?;
/// let (ra, rb) = (CudaRegion::new(&dev, 64)?, CudaRegion::new(&dev, 64)?);
/// let (oa, ob) = (PinnedBuffer::new(&dev, 1024 * 8)?, PinnedBuffer::new(&dev, 1024 * 8)?);
/// let (da, db) = (Dispatcher::new(ServerConfig::default()), Dispatcher::new(ServerConfig::default()));
/// let cfg = Launch { grid: (8, 1, 1), block: (128, 1, 1), server_threads: 2, ..Launch::default() };
/// let (xa, xb) = ([KernelArg::U32(10), KernelArg::Ptr(oa.device_ptr())], [KernelArg::U32(10), KernelArg::Ptr(ob.device_ptr())]);
/// let jobs = [
///     Job { region: &ra, kernel: &kernel, launch: &cfg, dispatcher: &da, extra: &xa },
///     Job { region: &rb, kernel: &kernel, launch: &cfg, dispatcher: &db, extra: &xb },
/// ];
/// for r in launch_many(&jobs) {
///     assert_eq!(r?.calls, 32 * 10);
/// }
/// # Ok::<(), rpc_runtime::cuda::CudaError>(())
/// ```
pub fn launch_many(jobs: &[Job<'_, '_>]) -> Vec<Result<Report, CudaError>> {
    let start = Instant::now();
    let mut results: Vec<Option<Result<Report, CudaError>>> = jobs.iter().map(|_| None).collect();
    // Check every job before anything runs.
    for (job, result) in jobs.iter().zip(results.iter_mut()) {
        let checked = job
            .launch
            .validate()
            .and_then(|()| job.kernel.check_args(job.extra))
            .and_then(|()| {
                let device = job.region.device();
                if !device.same_context(job.kernel.module.device()) {
                    return Err(CudaError::config(format!(
                        "the region is on CUDA device {} but kernel `{}` is loaded on device {}",
                        device.ordinal(),
                        job.kernel.name,
                        job.kernel.module.device().ordinal()
                    )));
                }
                device.bind()?;
                device.ensure_stack_size(MIN_STACK_BYTES)?;
                // A call an earlier launch abandoned keeps its port: this
                // launch's clients would wait for it forever.
                if job.region.is_quiescent()? {
                    return Ok(());
                }
                let port = job
                    .region
                    .busy_ports()?
                    .first()
                    .map_or("a port is held".to_string(), |p| p.to_string());
                Err(CudaError::config(format!(
                    "the region is not at rest ({port}): an earlier launch abandoned a call on it; use a fresh region"
                )))
            });
        if let Err(e) = checked {
            *result = Some(Err(e));
        }
    }
    let before: Vec<u64> = jobs.iter().map(|j| j.dispatcher.error_count()).collect();
    // A job that was refused counts as over from the start.
    let done: Vec<AtomicBool> = results.iter().map(|r| AtomicBool::new(r.is_some())).collect();
    let threads = jobs
        .iter()
        .map(|j| j.launch.server_threads)
        .max()
        .unwrap_or(1)
        .clamp(1, u32::MAX as usize) as u32;

    let (ran, abandoned, served) =
        std::thread::scope(|s| {
            let done = &done;
            let mut refused_thread = None;
            let servers: Vec<_> = (0..threads)
                .filter_map(|t| {
                    // A missing server thread's ports are served by the others.
                    crate::spawn::scoped(s, format!("gpu_rpc server {t}"), move || {
                        let servers: Vec<Server<'_>> = jobs
                            .iter()
                            .zip(done)
                            .map(|(j, f)| j.region.server().with_abort(f))
                            .collect();
                        let pool: Vec<Served<'_, '_>> = servers
                            .iter()
                            .zip(jobs)
                            .zip(done)
                            .map(|((server, j), done)| Served {
                                server,
                                dispatcher: j.dispatcher,
                                done,
                            })
                            .collect();
                        serve_pool(&pool, t, threads, SERVER_IDLE_SPINS)
                    })
                    .map_err(|e| refused_thread = Some(e))
                    .ok()
                })
                .collect();
            let no_servers = servers
                .is_empty()
                .then(|| refused_thread.map_or("none asked for".to_string(), |e| e.to_string()));
            // One thread per kernel launches it on its own stream and waits for it.
            let watchers: Vec<_> =
                jobs.iter()
                    .zip(done)
                    .zip(&results)
                    .enumerate()
                    .map(|(i, ((job, flag), refused))| {
                        let params = refused
                            .is_none()
                            .then(|| Params::new(job.region.client_desc(), job.extra));
                        // Release (both stores): as `StopOnDrop`, for servers
                        // that would wait on this job.
                        if let (Some(why), Some(_)) = (&no_servers, &params) {
                            flag.store(true, std::sync::atomic::Ordering::Release);
                            return Err(CudaError::config(format!("no server thread could be started: {why}")));
                        }
                        crate::spawn::scoped(s, format!("gpu_rpc launch {i}"), move || {
                            let mut params = params?;
                            // The kernel is over (or never started) when this returns
                            // or unwinds: let the servers drain its region and stop.
                            let _stop = StopOnDrop(flag);
                            Some(job.region.device().bind().and_then(|()| {
                                run_kernel(job.region.device(), job.kernel, job.launch, &mut params.ptrs)
                            }))
                        })
                        .map_err(|e| {
                            flag.store(true, std::sync::atomic::Ordering::Release);
                            CudaError::config(format!("the thread that launches the kernel could not be started: {e}"))
                        })
                    })
                    .collect();
            let ran: Vec<Option<Result<Option<Duration>, CudaError>>> = watchers
                .into_iter()
                .map(|w| match w {
                    Ok(h) => h.join().unwrap_or_else(|p| resume_unwind(p)),
                    Err(e) => Some(Err(e)),
                })
                .collect();
            let mut abandoned: Vec<Option<Abandoned>> = jobs.iter().map(|_| None).collect();
            let mut served: Vec<u64> = jobs.iter().map(|_| 0).collect();
            for h in servers {
                let outcomes = h.join().unwrap_or_else(|p| resume_unwind(p));
                for ((slot, n), outcome) in abandoned.iter_mut().zip(served.iter_mut()).zip(outcomes) {
                    match outcome {
                        Ok(calls) => *n += calls,
                        Err(a) => {
                            slot.get_or_insert(a);
                        }
                    }
                }
            }
            (ran, abandoned, served)
        });
    let elapsed = start.elapsed();
    jobs.iter()
        .zip(results)
        .zip(ran)
        .zip(abandoned)
        .zip(before)
        .zip(served)
        .map(|(((((job, refused), ran), abandoned), errors), calls)| {
            if let Some(r) = refused {
                return r;
            }
            let kernel_time = ran.expect("a launched job has a result")?;
            if let Some(a) = abandoned {
                return Err(CudaError::Abandoned {
                    kernel: job.kernel.name.clone(),
                    abandoned: a,
                });
            }
            Ok(Report {
                calls,
                errors: job.dispatcher.error_count() - errors,
                elapsed,
                kernel_time,
                port_count: job.region.layout.port_count(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptx_header_check() {
        assert!(check_ptx("//\n// Generated by LLVM NVPTX Back-End\n//\n\n.version 7.8\n.target sm_90\n").is_ok());
        assert!(check_ptx("/* c */ .version 8.0").is_ok());
        assert!(check_ptx("  \n.version 8.0").is_ok());
        for bad in [
            "",
            "// only a comment",
            "hello world",
            "\u{7f}ELF",
            ".target sm_90\n.version 8.0",
            ".version\0",
        ] {
            let e = check_ptx(bad).unwrap_err();
            assert!(e.to_string().starts_with("gpu_rpc cuda: not PTX text"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn entry_names() {
        let ptx = ".version 7.8\n.visible .entry rpc_noop_kernel(\n.param .align 8 .b8 p[24]\n)\n{ ret; }\n.entry other ( ) { ret; }\n.func helper() { ret; }\n";
        assert_eq!(ptx_entries(ptx), ["rpc_noop_kernel", "other"]);
    }

    #[test]
    fn arg_bits_are_little_endian_low_bytes() {
        assert_eq!(
            KernelArg::U32(0xdead_beef).bits().to_le_bytes()[..4],
            0xdead_beefu32.to_le_bytes()
        );
        assert_eq!(KernelArg::I32(-1).bits(), 0xffff_ffff);
        assert_eq!(KernelArg::F32(1.5).bits() as u32, 1.5f32.to_bits());
        assert_eq!(KernelArg::F64(2.5).bits(), 2.5f64.to_bits());
    }

    #[test]
    fn error_messages() {
        let e = CudaError::KernelNotFound {
            kernel: "foo".into(),
            entries: vec!["a".into(), "b".into()],
        };
        assert_eq!(
            e.to_string(),
            "gpu_rpc cuda: kernel `foo` not found in module (its entry points: a, b)"
        );
        let e = CudaError::Kernel {
            kernel: "k".into(),
            code: 719,
            name: "CUDA_ERROR_LAUNCH_FAILED".into(),
            message: "unspecified launch failure".into(),
            context_lost: true,
        };
        assert!(e.is_context_lost());
        assert!(e.to_string().contains("unusable"), "{e}");
        let e = CudaError::InvalidPtx {
            code: 218,
            name: "CUDA_ERROR_INVALID_PTX".into(),
            message: "bad".into(),
            log: "line 3: syntax error".into(),
        };
        assert!(e.to_string().ends_with("JIT log:\nline 3: syntax error"), "{e}");
    }

    #[test]
    fn default_ports_are_clamped_to_warps() {
        let l = Launch {
            grid: (2, 1, 1),
            block: (64, 1, 1),
            ..Launch::default()
        };
        assert_eq!(l.warps().min(l.port_count as u64), 4);
        assert!(Launch {
            grid: (0, 1, 1),
            ..Launch::default()
        }
        .validate()
        .is_err());
    }
}
