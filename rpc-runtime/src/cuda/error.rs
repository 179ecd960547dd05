//! The CUDA backend's errors: [`CudaError`], what the driver's codes mean
//! for a user, and the guards that turn driver calls into them.

use std::panic::{catch_unwind, AssertUnwindSafe};

use cudarc::driver::DriverError;

use crate::protocol::Abandoned;

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
    /// The text handed to [`Module::from_ptx`](super::Module::from_ptx) is
    /// not PTX, or the bytes handed to
    /// [`Module::from_image`](super::Module::from_image) are neither PTX, a
    /// cubin nor a fatbin (checked before they reach the driver).
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
    /// A cubin or fatbin whose tables or sizes reach past its bytes, refused
    /// before it reaches the driver (which trusts them and would read past
    /// the end).
    #[error("gpu_rpc cuda: a damaged {kind}: {reason}")]
    BadImage {
        /// `"cubin"` or `"fatbin"`.
        kind: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The driver rejected a cubin or fatbin
    /// ([`Module::from_image`](super::Module::from_image)): built for
    /// another architecture (`CUDA_ERROR_NO_BINARY_FOR_GPU`), damaged
    /// (`CUDA_ERROR_INVALID_IMAGE`), or a fatbin whose PTX failed to compile.
    #[error("gpu_rpc cuda: the driver rejected the {kind} module: {name} ({code}): {message}{}", log_suffix(.log))]
    InvalidImage {
        /// `"cubin"` or `"fatbin"`.
        kind: &'static str,
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
        /// The module's entry points ([`Module::entries`](super::Module::entries)).
        entries: Vec<String>,
    },
    /// The kernel's parameters (as the driver reports them) do not match a
    /// [`ClientDesc`](crate::protocol::ClientDesc) followed by the given extra arguments.
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
    /// # use rpc_runtime as gpu_rpc;
    /// let e = gpu_rpc::cuda::CudaError::BlockTooLarge {
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
    LaunchFailed {
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
    KernelFault {
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

pub(super) fn log_suffix(log: &str) -> String {
    let log = log.trim();
    if log.is_empty() {
        String::new()
    } else {
        format!("\nJIT log:\n{log}")
    }
}

pub(super) fn entries_list(entries: &[String]) -> String {
    if entries.is_empty() {
        "none".to_string()
    } else {
        entries.join(", ")
    }
}

pub(super) fn lost_suffix(lost: &bool) -> &'static str {
    if *lost {
        "; the CUDA context is now unusable (sticky error): every later CUDA call in this process fails, restart the process"
    } else {
        ""
    }
}

/// `(code, name, message)` of a driver error. The name comes from the
/// binding's enum (no driver call), the message from `cuGetErrorString`.
pub(super) fn describe(e: DriverError) -> (u32, String, String) {
    let name = format!("{:?}", e.0);
    let message = catch_unwind(|| e.error_string().map(|s| s.to_string_lossy().into_owned()))
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    (e.0 as u32, name, message)
}

impl CudaError {
    pub(super) fn driver(what: &str, e: DriverError) -> CudaError {
        let (code, name, message) = describe(e);
        CudaError::Driver {
            what: what.to_string(),
            code,
            name,
            message,
        }
    }

    pub(super) fn config(message: impl Into<String>) -> CudaError {
        CudaError::InvalidConfig {
            message: message.into(),
        }
    }

    /// Whether this error left the CUDA context unusable.
    ///
    /// ```
    /// # use rpc_runtime as gpu_rpc;
    /// use gpu_rpc::cuda::CudaError;
    /// let e = CudaError::NotPtx { reason: "empty".into() };
    /// assert!(!e.is_context_lost());
    /// ```
    pub fn is_context_lost(&self) -> bool {
        matches!(self, CudaError::KernelFault { context_lost: true, .. })
    }
}

use crate::server::panic_message;

/// Run a driver call, turning `cudarc`'s panic for a missing driver symbol
/// into an error. The outer `Result` is that failure, the inner one the
/// call's own.
pub(super) fn raw_guard<T>(
    what: &str,
    f: impl FnOnce() -> Result<T, DriverError>,
) -> Result<Result<T, DriverError>, CudaError> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| CudaError::DriverSymbol {
        what: what.to_string(),
        detail: panic_message(&*p),
    })
}

/// [`raw_guard`] with the call's error mapped to [`CudaError::Driver`].
pub(super) fn guard<T>(what: &str, f: impl FnOnce() -> Result<T, DriverError>) -> Result<T, CudaError> {
    raw_guard(what, f)?.map_err(|e| CudaError::driver(what, e))
}
