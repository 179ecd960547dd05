//! The HSA backend (feature `hsa`): kernels on an AMD GPU are the clients,
//! host threads serve them. The counterpart of [`cuda`](crate::cuda) for
//! ROCm.
//!
//! * [`HsaDevice`] — one GPU agent of the ROCm runtime, with the memory pools
//!   the backend needs.
//! * [`HsaRegion`] — the shared region in fine-grained system memory that the
//!   GPU may access, the client lock words in the GPU's own memory, the
//!   server lock words in host memory, and the [`ClientDesc`](crate::protocol::ClientDesc) the kernels
//!   receive (by pointer, see below).
//! * [`CodeObject`] / [`Module`] / [`Kernel`] — an AMDGPU code object (ELF,
//!   as `rpc-build` links it), loaded into an HSA executable, and one of its
//!   kernels (`<name>.kd`).
//! * [`launch`] / [`launch_with_region`] / [`launch_many`] — dispatch a
//!   kernel (or several, on one agent or several) with an AQL packet on a
//!   fresh queue and serve its calls on host threads until the packet's
//!   completion signal fires: the launch-and-serve path every backend shares.
//! * [`HsaBuffer`] — extra fine-grained, GPU-visible host memory (kernel
//!   outputs).
//! * [`aql`] — the AQL kernel dispatch packet and its header bits;
//!   [`kernarg_segment`] — the kernel argument bytes.
//!
//! # Loading the runtime
//!
//! There is no maintained `hsa-sys` crate in the registry, and linking to
//! `libhsa-runtime64` at build time would make the crate unbuildable (and its
//! tests unrunnable) on machines without ROCm. So the library is opened at
//! run time with `libloading` (`libhsa-runtime64.so.1`, then
//! `libhsa-runtime64.so`, then both under `/opt/rocm/lib`; or only
//! `$GPU_RPC_HSA_LIBRARY` when that is set) and the ~30 entry points this
//! backend calls are declared here by hand from ROCm's `hsa.h` and
//! `hsa_ext_amd.h` (HSA 1.1 names: `hsa_signal_wait_scacquire`, ...). The
//! structures crossing the boundary are `#[repr(C)]` with compile-time checks
//! of their sizes and field offsets. Without the library every entry point
//! returns [`HsaError::LibraryNotFound`], naming the library and how to
//! install ROCm; nothing panics.
//!
//! # What has run where
//!
//! **Nothing in this module has run on AMD hardware.** The machine it was
//! written on has no AMD GPU and no ROCm. What has run: the code-object ELF
//! checks against code objects built by `rpc-build` for gfx90a and gfx942,
//! the AQL packet encoding and the kernel-argument layout (checked against
//! the code objects' own metadata, read with `llvm-readelf --notes`), the
//! memory-pool selection rules, and the error path when the runtime library
//! is missing. The device side (protocol, lanes, generated stubs) was built
//! for gfx90a and gfx942 and its instructions checked in
//! `rpc-build/tests/amdgcn_rpc.rs`. The dispatch, memory and signal calls
//! follow ROCm's documentation and LLVM libc's AMDGPU loader, but are
//! untested until they run on an MI200/MI300.
//!
//! # Memory
//!
//! The shared region, the descriptor and kernel arguments live in a CPU
//! agent's **fine-grained** global pool (system memory the GPU reaches over
//! PCIe/Infinity Fabric, coherent at system scope; the same choice as LLVM
//! libc's RPC server), made accessible to the GPU with
//! `hsa_amd_agents_allow_access`. Coarse-grained memory is refused for it:
//! its writes become visible to the other side only at kernel boundaries,
//! which would deadlock the protocol. The client lock words, only touched by
//! the GPU's read-modify-writes, are in the GPU's own global pool, zeroed
//! with `hsa_amd_memory_fill`. HSA shares one virtual address space between
//! host and GPU, so a buffer's device address is its host address.
//!
//! # Kernel parameters
//!
//! An AMD kernel's first parameter is a **pointer** to the [`ClientDesc`](crate::protocol::ClientDesc)
//! (`desc: *const ClientDesc`), not the descriptor by value as on NVPTX:
//! rustc's `gpu-kernel` ABI passes a 24-byte struct indirectly anyway (the
//! code object metadata shows an 8-byte `global_buffer`), and spelling the
//! pointer out keeps the layout independent of that choice. The extra
//! [`KernelArg`]s follow at their natural alignment. When the code object
//! asks for the code object v5 hidden arguments (its kernarg segment is
//! larger than the explicit arguments), the block counts, group sizes, grid
//! dimensions and queue pointer are filled in and the rest zeroed.
//!
//! # Example
//!
//! ```no_run
//! # use rpc_runtime as gpu_rpc;
//! use gpu_rpc::hsa::{launch, CodeObject, HsaBuffer, HsaDevice, KernelArg, Launch, Module};
//! use gpu_rpc::server::{Dispatcher, ServerConfig};
//!
//! # fn main() -> Result<(), gpu_rpc::hsa::HsaError> {
//! let device = HsaDevice::new(0)?;
//! let code = CodeObject::from_file("target/device/gfx90a/kernels.hsaco")?;
//! let module = Module::load(&device, &code)?;
//! // extern "gpu-kernel" fn rpc_noop_kernel(desc: *const ClientDesc, iters: u32, out: *mut u64)
//! let kernel = module.kernel("rpc_noop_kernel")?;
//! let out = HsaBuffer::new(&device, 256 * 8)?;
//! let dispatcher = Dispatcher::new(ServerConfig::default());
//! let cfg = Launch { grid: (4, 1, 1), block: (64, 1, 1), ..Launch::default() };
//! let report = launch(&kernel, &cfg, &dispatcher, &[KernelArg::U32(100), KernelArg::Ptr(out.device_ptr())])?;
//! println!("{} calls in {:?}", report.calls, report.elapsed);
//! # Ok(())
//! # }
//! ```

pub use crate::launch::{KernelArg, MappedBuffer, Report};

/// Lanes per packet on AMD GPUs: the wavefront size the device code is built
/// for ([`lanes::LANE_SIZE`](crate::lanes) on amdgcn). A wave32 GPU works too,
/// using the lower half of each packet.
pub const LANE_SIZE: u32 = 64;

/// Default [`Launch::port_count`]: 4096, LLVM libc's `MAX_PORT_COUNT`. A port
/// costs 4 KiB of fine-grained memory (64 lanes × 64 B) plus a 64-byte header;
/// [`launch`] creates `min(port_count, wavefronts in the grid)` ports.
pub const DEFAULT_PORT_COUNT: u32 = 4096;

/// When set, the only file tried for the runtime library.
///
/// ```no_run
/// # use rpc_runtime as gpu_rpc;
/// std::env::set_var(gpu_rpc::hsa::ENV_LIBRARY, "/opt/rocm-6.2.0/lib/libhsa-runtime64.so.1");
/// ```
pub const ENV_LIBRARY: &str = "GPU_RPC_HSA_LIBRARY";

/// The names tried, in order, when [`ENV_LIBRARY`] is not set.
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// assert_eq!(gpu_rpc::hsa::LIBRARY_NAMES[0], "libhsa-runtime64.so.1");
/// ```
pub const LIBRARY_NAMES: [&str; 4] = [
    "libhsa-runtime64.so.1",
    "libhsa-runtime64.so",
    "/opt/rocm/lib/libhsa-runtime64.so.1",
    "/opt/rocm/lib/libhsa-runtime64.so",
];

mod agents;
mod api;
mod code_object;
mod device;
mod error;
mod ffi;
mod memory;
mod packets;
mod run;

use agents::*;
pub use api::*;
pub use code_object::*;
pub use device::*;
pub use error::*;
pub use memory::*;
pub use packets::*;
pub use run::*;

#[cfg(test)]
mod tests {
    use super::ffi::MemoryPool;
    use super::*;

    fn pool(handle: u64, flags: u32, access: u32) -> PoolInfo {
        PoolInfo {
            pool: MemoryPool { handle },
            segment: ffi::SEGMENT_GLOBAL,
            flags,
            alloc_allowed: true,
            gpu_access: access,
        }
    }

    #[test]
    fn shared_pool_is_fine_grained_never_coarse() {
        const DISALLOWED_BY_DEFAULT: u32 = 2;
        let coarse = pool(1, ffi::FLAG_COARSE_GRAINED, DISALLOWED_BY_DEFAULT);
        let kernarg = pool(
            2,
            ffi::FLAG_KERNARG_INIT | ffi::FLAG_FINE_GRAINED,
            DISALLOWED_BY_DEFAULT,
        );
        let fine = pool(3, ffi::FLAG_FINE_GRAINED, DISALLOWED_BY_DEFAULT);
        assert_eq!(select_shared_pool(&[coarse, kernarg, fine]).unwrap().pool.handle, 3);
        assert_eq!(select_shared_pool(&[coarse, kernarg]).unwrap().pool.handle, 2);
        assert_eq!(select_shared_pool(&[coarse]), None);
        let unreachable = pool(4, ffi::FLAG_FINE_GRAINED, ffi::ACCESS_NEVER_ALLOWED);
        assert_eq!(select_shared_pool(&[unreachable]), None);
        let no_alloc = PoolInfo {
            alloc_allowed: false,
            ..fine
        };
        assert_eq!(select_shared_pool(&[no_alloc]), None);
        assert_eq!(select_kernarg_pool(&[coarse, fine, kernarg]).unwrap().pool.handle, 2);
        let gpu_fine = pool(5, ffi::FLAG_FINE_GRAINED, 1);
        let gpu_coarse = pool(6, ffi::FLAG_COARSE_GRAINED, 1);
        assert_eq!(select_device_pool(&[gpu_fine, gpu_coarse]).unwrap().pool.handle, 6);
    }

    #[test]
    fn status_names() {
        assert_eq!(status_name(0x1008), "HSA_STATUS_ERROR_OUT_OF_RESOURCES");
        assert_eq!(status_name(0x1016), "HSA_STATUS_ERROR_EXCEPTION");
        assert_eq!(status_name(0x7777), "HSA_STATUS_UNKNOWN");
    }

    #[test]
    fn mach_names() {
        assert_eq!(mach_name(0x3f), Some("gfx90a"));
        assert_eq!(mach_name(0x4c), Some("gfx942"));
        assert_eq!(mach_name(0x01), None);
    }
}
