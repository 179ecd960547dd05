//! A GPU and its context: [`CudaDevice`], and finding the driver.

use std::fmt;
use std::panic::catch_unwind;
use std::sync::{Arc, OnceLock};

use cudarc::driver::{result, sys, CudaContext};

use super::*;

/// Whether a CUDA driver library can be loaded on this machine (probed once,
/// without panicking).
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// // Never panics, with or without a GPU.
/// let _ = gpu_rpc::cuda::driver_available();
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

pub(super) fn ensure_driver() -> Result<(), CudaError> {
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
/// # use rpc_runtime as gpu_rpc;
/// let dev = gpu_rpc::cuda::CudaDevice::new(0)?;
/// println!("{} (sm_{}{}, {} SMs)", dev.name()?, dev.compute_capability()?.0, dev.compute_capability()?.1, dev.sm_count()?);
/// # Ok::<(), gpu_rpc::cuda::CudaError>(())
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
    /// # use rpc_runtime as gpu_rpc;
    /// // On a machine without the NVIDIA driver this is an error, not a panic.
    /// if !gpu_rpc::cuda::driver_available() {
    ///     let e = gpu_rpc::cuda::CudaDevice::new(0).unwrap_err();
    ///     assert!(e.to_string().contains("libcuda could not be loaded"));
    /// }
    /// ```
    pub fn new(ordinal: usize) -> Result<CudaDevice, CudaError> {
        ensure_driver()?;
        let what = format!("creating a context on CUDA device {ordinal}");
        let ctx = guard(&what, || CudaContext::new(ordinal))?;
        CudaDevice::checked(ctx)
    }

    /// The backend on a context the caller already has (a program that
    /// uses `cudarc`): regions, buffers and modules made from it live in that
    /// context, and kernels the caller launches there can use them. Fails
    /// cleanly when the device cannot serve (warp size other than 32, no
    /// mapping of pinned host memory).
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// let ctx = cudarc::driver::CudaContext::new(0)?;
    /// let dev = gpu_rpc::cuda::CudaDevice::from_context(&ctx)?;
    /// assert_eq!(dev.ordinal(), ctx.ordinal());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_context(ctx: &Arc<CudaContext>) -> Result<CudaDevice, CudaError> {
        CudaDevice::checked(Arc::clone(ctx))
    }

    fn checked(ctx: Arc<CudaContext>) -> Result<CudaDevice, CudaError> {
        let ordinal = ctx.ordinal();
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
    /// # use rpc_runtime as gpu_rpc;
    /// println!("{} GPUs", gpu_rpc::cuda::CudaDevice::count()?);
    /// # Ok::<(), gpu_rpc::cuda::CudaError>(())
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
    /// # use rpc_runtime as gpu_rpc;
    /// let (major, minor) = gpu_rpc::cuda::CudaDevice::driver_version()?;
    /// assert!(major >= 12, "CUDA {major}.{minor}");
    /// # Ok::<(), gpu_rpc::cuda::CudaError>(())
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
    /// # use rpc_runtime as gpu_rpc;
    /// assert_eq!(gpu_rpc::cuda::CudaDevice::new(0)?.ordinal(), 0);
    /// # Ok::<(), gpu_rpc::cuda::CudaError>(())
    /// ```
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// The device's name, e.g. `NVIDIA H200`.
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// println!("{}", gpu_rpc::cuda::CudaDevice::new(0)?.name()?);
    /// # Ok::<(), gpu_rpc::cuda::CudaError>(())
    /// ```
    pub fn name(&self) -> Result<String, CudaError> {
        let dev = self.ctx.cu_device();
        guard("querying the device name", || result::device::get_name(dev))
    }

    /// Number of streaming multiprocessors.
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// assert!(gpu_rpc::cuda::CudaDevice::new(0)?.sm_count()? > 0);
    /// # Ok::<(), gpu_rpc::cuda::CudaError>(())
    /// ```
    pub fn sm_count(&self) -> Result<u32, CudaError> {
        Ok(self
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?
            .max(0) as u32)
    }

    /// Compute capability `(major, minor)`, e.g. `(9, 0)` for an H100/H200.
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// let (major, minor) = gpu_rpc::cuda::CudaDevice::new(0)?.compute_capability()?;
    /// println!("sm_{major}{minor}");
    /// # Ok::<(), gpu_rpc::cuda::CudaError>(())
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
    /// # use rpc_runtime as gpu_rpc;
    /// let ctx = gpu_rpc::cuda::CudaDevice::new(0)?.context().clone();
    /// # Ok::<(), gpu_rpc::cuda::CudaError>(())
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
    pub(super) fn bind(&self) -> Result<(), CudaError> {
        let ctx = self.ctx.cu_ctx();
        // SAFETY: `ctx` is the retained primary context, alive while `self.ctx`
        // is.
        guard("making the CUDA context current", || unsafe {
            result::ctx::set_current(ctx)
        })
    }

    pub(super) fn same_context(&self, other: &CudaDevice) -> bool {
        self.ctx.cu_ctx() == other.ctx.cu_ctx()
    }
}
