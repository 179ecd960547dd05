//! The CUDA backend (feature `cuda`): kernels on an NVIDIA GPU are the
//! clients, host threads serve them.
//!
//! * [`CudaDevice`] — a context on one GPU (the device's primary context).
//! * [`CudaRegion`] — the shared region in pinned, mapped host memory, the
//!   client lock words in device memory and the server lock words in host
//!   memory; [`CudaRegion::client_desc`] is what a kernel receives.
//! * [`Module`] / [`Kernel`] — a kernel image ([`Image`]: PTX text, a cubin
//!   or a fatbin) loaded with `cuModuleLoadDataEx`, and one of its entry
//!   points.
//! * [`launch`] / [`launch_with_region`] / [`launch_many`] — launch a kernel
//!   (or several, on one GPU or several) whose first parameter is a
//!   [`ClientDesc`](crate::protocol::ClientDesc) on a non-blocking stream and serve its calls on host
//!   threads until it has finished: the launch-and-serve path every backend
//!   shares.
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
//! until the process exits). [`CudaError::KernelFault`] says so in `context_lost`;
//! the only recovery is a new process.
//!
//! # Example
//!
//! ```no_run
//! # use rpc_runtime as gpu_rpc;
//! use gpu_rpc::cuda::{launch, CudaDevice, KernelArg, Launch, Module, PinnedBuffer};
//! use gpu_rpc::server::{Dispatcher, ServerConfig};
//!
//! # fn main() -> Result<(), gpu_rpc::cuda::CudaError> {
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

pub use crate::launch::{KernelArg, MappedBuffer, Report};

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

mod arena;
mod cleaner;
mod copy;
mod device;
mod error;
mod image;
mod memory;
mod module;
mod run;
mod serve;

pub use copy::{CopyStats, CudaCopies, DEFAULT_STAGING_BYTES, MERGE_GAP_BYTES, MERGE_MAX_BYTES, STAGE_HALF_BYTES};
pub use device::*;
pub use error::*;
pub use image::Image;
pub use memory::*;
pub use module::*;
pub use run::*;
pub use serve::*;
