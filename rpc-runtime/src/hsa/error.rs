//! The HSA backend's errors: [`HsaError`] and what the runtime's status
//! codes mean for a user.

use crate::protocol::Abandoned;

/// What went wrong in the HSA backend. Every variant's message starts with
/// `gpu_rpc hsa:` and names what was being done.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HsaError {
    /// `libhsa-runtime64` could not be loaded (ROCm not installed, or not on
    /// the loader path).
    #[error(
        "gpu_rpc hsa: the ROCm runtime library libhsa-runtime64 could not be loaded (tried {searched}: {detail}); install ROCm (e.g. `apt install hsa-rocr` from repo.radeon.com, or the `rocm` meta-package), put its lib directory (usually /opt/rocm/lib) on LD_LIBRARY_PATH, or point GPU_RPC_HSA_LIBRARY at libhsa-runtime64.so.1"
    )]
    LibraryNotFound {
        /// The files that were tried.
        searched: String,
        /// The loader's message for the last one.
        detail: String,
    },
    /// The library was loaded but lacks an entry point this backend needs.
    #[error("gpu_rpc hsa: libhsa-runtime64 has no `{symbol}` ({detail}); ROCm 5.0 or newer is needed")]
    LibrarySymbol {
        /// The missing function.
        symbol: String,
        /// The loader's message.
        detail: String,
    },
    /// A runtime call failed.
    #[error("gpu_rpc hsa: {what} failed: {name} ({code:#x}): {message}")]
    Runtime {
        /// What was being done.
        what: String,
        /// The `hsa_status_t` value.
        code: u32,
        /// Its name, e.g. `HSA_STATUS_ERROR_OUT_OF_RESOURCES`.
        name: String,
        /// `hsa_status_string`'s description.
        message: String,
    },
    /// There is no GPU agent of that index.
    #[error("gpu_rpc hsa: no GPU agent {index}: the HSA runtime reports {found} GPU agent(s) that can run kernels")]
    NoGpuAgent {
        /// The index asked for.
        index: usize,
        /// GPU agents found.
        found: usize,
    },
    /// The agent cannot serve this backend (no fine-grained pool, ...).
    #[error("gpu_rpc hsa: GPU agent {index} cannot serve gpu_rpc: {reason}")]
    Unsupported {
        /// The GPU index.
        index: usize,
        /// Why.
        reason: String,
    },
    /// The bytes are not an AMDGPU HSA code object.
    #[error("gpu_rpc hsa: not an AMDGPU code object: {reason}")]
    NotCodeObject {
        /// What was found instead.
        reason: String,
    },
    /// The code object was built for another GPU.
    #[error("gpu_rpc hsa: the code object is for {code_object}, but GPU agent {index} is {device}; rebuild it with Target::Amdgcn {{ gfx: \"{device}\" }}")]
    WrongGpu {
        /// The GPU index.
        index: usize,
        /// The code object's processor.
        code_object: String,
        /// The agent's processor.
        device: String,
    },
    /// The code object has no kernel of that name.
    #[error("gpu_rpc hsa: kernel `{kernel}` not found in the code object (its kernels: {})", kernel_list(.kernels))]
    KernelNotFound {
        /// The name asked for.
        kernel: String,
        /// The kernels the code object has (`<name>.kd` descriptors).
        kernels: Vec<String>,
    },
    /// The kernel's argument segment does not fit the launch's arguments.
    #[error("gpu_rpc hsa: kernel `{kernel}` does not take the arguments of this launch: {message}")]
    KernelSignature {
        /// The kernel.
        kernel: String,
        /// The mismatch.
        message: String,
    },
    /// A launch parameter is invalid (checked before anything is dispatched).
    #[error("gpu_rpc hsa: invalid launch: {message}")]
    InvalidConfig {
        /// What is wrong.
        message: String,
    },
    /// The queue reported an error while the kernel ran (a memory fault, a
    /// trap such as a device-side panic, an invalid packet). The server
    /// threads were stopped.
    #[error("gpu_rpc hsa: kernel `{kernel}` failed: {name} ({code:#x}): {message}")]
    KernelFault {
        /// The kernel.
        kernel: String,
        /// The `hsa_status_t` the queue reported.
        code: u32,
        /// Its name.
        name: String,
        /// Its description.
        message: String,
    },
    /// The kernel finished while a server thread was still in the middle of
    /// a call (hand-written device code left a call unfinished).
    #[error("gpu_rpc hsa: kernel `{kernel}` finished with a call still in flight: {abandoned}")]
    Abandoned {
        /// The kernel.
        kernel: String,
        /// The call that was left.
        abandoned: Abandoned,
    },
    /// A file could not be read.
    #[error("gpu_rpc hsa: cannot read {path}: {message}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        message: String,
    },
}

pub(super) fn kernel_list(kernels: &[String]) -> String {
    if kernels.is_empty() {
        "none".to_string()
    } else {
        kernels.join(", ")
    }
}

impl HsaError {
    pub(super) fn config(message: impl Into<String>) -> HsaError {
        HsaError::InvalidConfig {
            message: message.into(),
        }
    }
}
