//! The HSA backend (feature `hsa`): kernels on an AMD GPU are the clients,
//! host threads serve them. The counterpart of [`cuda`](crate::cuda) for
//! ROCm.
//!
//! * [`HsaDevice`] — one GPU agent of the ROCm runtime, with the memory pools
//!   the backend needs.
//! * [`HsaRegion`] — the shared region in fine-grained system memory that the
//!   GPU may access, the client lock words in the GPU's own memory, the
//!   server lock words in host memory, and the [`ClientDesc`] the kernels
//!   receive (by pointer, see below).
//! * [`CodeObject`] / [`Module`] / [`Kernel`] — an AMDGPU code object (ELF,
//!   as `rpc-build` links it), loaded into an HSA executable, and one of its
//!   kernels (`<name>.kd`).
//! * [`launch`] / [`launch_with_region`] — dispatch a kernel with an AQL
//!   packet on a fresh queue and serve its calls on host threads until the
//!   packet's completion signal fires.
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
//! An AMD kernel's first parameter is a **pointer** to the [`ClientDesc`]
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
//! use rpc_runtime::hsa::{launch, CodeObject, HsaBuffer, HsaDevice, KernelArg, Launch, Module};
//! use rpc_runtime::server::{Dispatcher, ServerConfig};
//!
//! # fn main() -> Result<(), rpc_runtime::hsa::HsaError> {
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

use std::ffi::{c_char, c_void, CStr, CString};
use std::fmt;
use std::panic::resume_unwind;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

pub use crate::launch::{KernelArg, MappedBuffer, Report};
use crate::launch::{StopOnDrop, SERVER_IDLE_SPINS};
use crate::protocol::{
    client_local_words, client_locks_released, lock_words, Abandoned, ClientDesc, Layout, Parts, Server, MAX_PORTS,
};
use crate::server::Dispatcher;

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
/// std::env::set_var(rpc_runtime::hsa::ENV_LIBRARY, "/opt/rocm-6.2.0/lib/libhsa-runtime64.so.1");
/// ```
pub const ENV_LIBRARY: &str = "GPU_RPC_HSA_LIBRARY";

/// The names tried, in order, when [`ENV_LIBRARY`] is not set.
///
/// ```
/// assert_eq!(rpc_runtime::hsa::LIBRARY_NAMES[0], "libhsa-runtime64.so.1");
/// ```
pub const LIBRARY_NAMES: [&str; 4] = [
    "libhsa-runtime64.so.1",
    "libhsa-runtime64.so",
    "/opt/rocm/lib/libhsa-runtime64.so.1",
    "/opt/rocm/lib/libhsa-runtime64.so",
];

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

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
    Kernel {
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

fn kernel_list(kernels: &[String]) -> String {
    if kernels.is_empty() {
        "none".to_string()
    } else {
        kernels.join(", ")
    }
}

impl HsaError {
    fn config(message: impl Into<String>) -> HsaError {
        HsaError::InvalidConfig {
            message: message.into(),
        }
    }
}

// ---------------------------------------------------------------------------
// FFI: the parts of hsa.h / hsa_ext_amd.h this backend uses
// ---------------------------------------------------------------------------

mod ffi {
    use std::ffi::{c_char, c_void};

    pub type Status = u32;
    pub const STATUS_SUCCESS: Status = 0;

    macro_rules! handle {
        ($($name:ident),*) => {$(
            #[repr(C)]
            #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
            pub struct $name {
                pub handle: u64,
            }
        )*};
    }
    handle!(
        Agent,
        Signal,
        MemoryPool,
        Executable,
        ExecutableSymbol,
        CodeObjectReader
    );

    /// `hsa_queue_t` (`HSA_LARGE_MODEL`).
    #[repr(C)]
    pub struct Queue {
        pub type_: u32,
        pub features: u32,
        pub base_address: *mut c_void,
        pub doorbell_signal: Signal,
        pub size: u32,
        pub reserved1: u32,
        pub id: u64,
    }
    const _: () = assert!(std::mem::size_of::<Queue>() == 40);
    const _: () = assert!(std::mem::offset_of!(Queue, base_address) == 8);
    const _: () = assert!(std::mem::offset_of!(Queue, doorbell_signal) == 16);
    const _: () = assert!(std::mem::offset_of!(Queue, size) == 24);
    const _: () = assert!(std::mem::offset_of!(Queue, id) == 32);

    // hsa_agent_info_t
    pub const AGENT_INFO_NAME: u32 = 0;
    pub const AGENT_INFO_FEATURE: u32 = 2;
    pub const AGENT_INFO_PROFILE: u32 = 4;
    pub const AGENT_INFO_WAVEFRONT_SIZE: u32 = 6;
    pub const AGENT_INFO_QUEUE_MIN_SIZE: u32 = 13;
    pub const AGENT_INFO_QUEUE_MAX_SIZE: u32 = 14;
    pub const AGENT_INFO_DEVICE: u32 = 17;
    pub const AMD_AGENT_INFO_COMPUTE_UNIT_COUNT: u32 = 0xA002;
    pub const AGENT_FEATURE_KERNEL_DISPATCH: u32 = 1;
    pub const DEVICE_TYPE_CPU: u32 = 0;
    pub const DEVICE_TYPE_GPU: u32 = 1;

    // hsa_amd_memory_pool_info_t, hsa_amd_agent_memory_pool_info_t
    pub const POOL_INFO_SEGMENT: u32 = 0;
    pub const POOL_INFO_GLOBAL_FLAGS: u32 = 1;
    pub const POOL_INFO_RUNTIME_ALLOC_ALLOWED: u32 = 5;
    pub const AGENT_POOL_INFO_ACCESS: u32 = 0;
    pub const SEGMENT_GLOBAL: u32 = 0;
    pub const FLAG_KERNARG_INIT: u32 = 1;
    pub const FLAG_FINE_GRAINED: u32 = 2;
    pub const FLAG_COARSE_GRAINED: u32 = 4;
    pub const ACCESS_NEVER_ALLOWED: u32 = 0;

    // hsa_executable_symbol_info_t
    pub const SYMBOL_INFO_KERNEL_OBJECT: u32 = 22;
    pub const SYMBOL_INFO_KERNARG_SEGMENT_SIZE: u32 = 11;
    pub const SYMBOL_INFO_KERNARG_SEGMENT_ALIGNMENT: u32 = 12;
    pub const SYMBOL_INFO_GROUP_SEGMENT_SIZE: u32 = 13;
    pub const SYMBOL_INFO_PRIVATE_SEGMENT_SIZE: u32 = 14;

    pub const QUEUE_TYPE_SINGLE: u32 = 1;
    pub const SIGNAL_CONDITION_LT: u32 = 2;
    pub const WAIT_STATE_BLOCKED: u32 = 0;
    pub const ROUNDING_MODE_DEFAULT: u32 = 0;

    pub type AgentCallback = extern "C" fn(Agent, *mut c_void) -> Status;
    pub type PoolCallback = extern "C" fn(MemoryPool, *mut c_void) -> Status;
    pub type QueueCallback = extern "C" fn(Status, *mut Queue, *mut c_void);

    /// The entry points, resolved once from the library (which stays loaded
    /// for the rest of the process).
    pub struct Api {
        pub _lib: libloading::Library,
        pub init: unsafe extern "C" fn() -> Status,
        pub status_string: unsafe extern "C" fn(Status, *mut *const c_char) -> Status,
        pub iterate_agents: unsafe extern "C" fn(AgentCallback, *mut c_void) -> Status,
        pub agent_get_info: unsafe extern "C" fn(Agent, u32, *mut c_void) -> Status,
        pub iterate_pools: unsafe extern "C" fn(Agent, PoolCallback, *mut c_void) -> Status,
        pub pool_get_info: unsafe extern "C" fn(MemoryPool, u32, *mut c_void) -> Status,
        pub agent_pool_get_info: unsafe extern "C" fn(Agent, MemoryPool, u32, *mut c_void) -> Status,
        pub pool_allocate: unsafe extern "C" fn(MemoryPool, usize, u32, *mut *mut c_void) -> Status,
        pub pool_free: unsafe extern "C" fn(*mut c_void) -> Status,
        pub allow_access: unsafe extern "C" fn(u32, *const Agent, *const u32, *const c_void) -> Status,
        pub memory_fill: unsafe extern "C" fn(*mut c_void, u32, usize) -> Status,
        pub memory_copy: unsafe extern "C" fn(*mut c_void, *const c_void, usize) -> Status,
        #[allow(clippy::type_complexity)]
        pub queue_create: unsafe extern "C" fn(
            Agent,
            u32,
            u32,
            Option<QueueCallback>,
            *mut c_void,
            u32,
            u32,
            *mut *mut Queue,
        ) -> Status,
        pub queue_destroy: unsafe extern "C" fn(*mut Queue) -> Status,
        pub queue_add_write_index: unsafe extern "C" fn(*const Queue, u64) -> u64,
        pub queue_load_read_index: unsafe extern "C" fn(*const Queue) -> u64,
        pub signal_create: unsafe extern "C" fn(i64, u32, *const Agent, *mut Signal) -> Status,
        pub signal_destroy: unsafe extern "C" fn(Signal) -> Status,
        pub signal_store: unsafe extern "C" fn(Signal, i64),
        pub signal_wait: unsafe extern "C" fn(Signal, u32, i64, u64, u32) -> i64,
        pub reader_create: unsafe extern "C" fn(*const c_void, usize, *mut CodeObjectReader) -> Status,
        pub reader_destroy: unsafe extern "C" fn(CodeObjectReader) -> Status,
        pub executable_create: unsafe extern "C" fn(u32, u32, *const c_char, *mut Executable) -> Status,
        pub executable_load:
            unsafe extern "C" fn(Executable, Agent, CodeObjectReader, *const c_char, *mut u64) -> Status,
        pub executable_freeze: unsafe extern "C" fn(Executable, *const c_char) -> Status,
        pub executable_destroy: unsafe extern "C" fn(Executable) -> Status,
        pub get_symbol: unsafe extern "C" fn(Executable, *const c_char, *const Agent, *mut ExecutableSymbol) -> Status,
        pub symbol_get_info: unsafe extern "C" fn(ExecutableSymbol, u32, *mut c_void) -> Status,
    }
}

use ffi::{Agent, Api, MemoryPool, Signal, Status};

/// Names of the `hsa_status_t` values (from `hsa.h`).
fn status_name(code: Status) -> &'static str {
    match code {
        0x0 => "HSA_STATUS_SUCCESS",
        0x1 => "HSA_STATUS_INFO_BREAK",
        0x1000 => "HSA_STATUS_ERROR",
        0x1001 => "HSA_STATUS_ERROR_INVALID_ARGUMENT",
        0x1002 => "HSA_STATUS_ERROR_INVALID_QUEUE_CREATION",
        0x1003 => "HSA_STATUS_ERROR_INVALID_ALLOCATION",
        0x1004 => "HSA_STATUS_ERROR_INVALID_AGENT",
        0x1005 => "HSA_STATUS_ERROR_INVALID_REGION",
        0x1006 => "HSA_STATUS_ERROR_INVALID_SIGNAL",
        0x1007 => "HSA_STATUS_ERROR_INVALID_QUEUE",
        0x1008 => "HSA_STATUS_ERROR_OUT_OF_RESOURCES",
        0x1009 => "HSA_STATUS_ERROR_INVALID_PACKET_FORMAT",
        0x100A => "HSA_STATUS_ERROR_RESOURCE_FREE",
        0x100B => "HSA_STATUS_ERROR_NOT_INITIALIZED",
        0x100C => "HSA_STATUS_ERROR_REFCOUNT_OVERFLOW",
        0x100D => "HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS",
        0x100E => "HSA_STATUS_ERROR_INVALID_INDEX",
        0x100F => "HSA_STATUS_ERROR_INVALID_ISA",
        0x1010 => "HSA_STATUS_ERROR_INVALID_CODE_OBJECT",
        0x1011 => "HSA_STATUS_ERROR_INVALID_EXECUTABLE",
        0x1012 => "HSA_STATUS_ERROR_FROZEN_EXECUTABLE",
        0x1013 => "HSA_STATUS_ERROR_INVALID_SYMBOL_NAME",
        0x1014 => "HSA_STATUS_ERROR_VARIABLE_ALREADY_DEFINED",
        0x1015 => "HSA_STATUS_ERROR_VARIABLE_UNDEFINED",
        0x1016 => "HSA_STATUS_ERROR_EXCEPTION",
        0x1017 => "HSA_STATUS_ERROR_INVALID_ISA_NAME",
        0x1018 => "HSA_STATUS_ERROR_INVALID_CODE_SYMBOL",
        0x1019 => "HSA_STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL",
        0x1020 => "HSA_STATUS_ERROR_INVALID_FILE",
        0x1021 => "HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER",
        0x1022 => "HSA_STATUS_ERROR_INVALID_CACHE",
        0x1023 => "HSA_STATUS_ERROR_INVALID_WAVEFRONT",
        0x1024 => "HSA_STATUS_ERROR_INVALID_SIGNAL_GROUP",
        0x1025 => "HSA_STATUS_ERROR_INVALID_RUNTIME_STATE",
        0x1026 => "HSA_STATUS_ERROR_FATAL",
        _ => "HSA_STATUS_UNKNOWN",
    }
}

fn status_message(api: &Api, code: Status) -> String {
    let mut s: *const c_char = std::ptr::null();
    // SAFETY: `s` is a valid place for the runtime to store a pointer to a
    // static, NUL-terminated string.
    let r = unsafe { (api.status_string)(code, &mut s) };
    if r != ffi::STATUS_SUCCESS || s.is_null() {
        return String::new();
    }
    // SAFETY: on success `s` points to a NUL-terminated string owned by the
    // runtime for the life of the process.
    unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
}

fn check(api: &Api, what: &str, code: Status) -> Result<(), HsaError> {
    if code == ffi::STATUS_SUCCESS {
        return Ok(());
    }
    Err(HsaError::Runtime {
        what: what.to_string(),
        code,
        name: status_name(code).to_string(),
        message: status_message(api, code),
    })
}

fn load_api() -> Result<Api, HsaError> {
    let names: Vec<String> = match std::env::var(ENV_LIBRARY) {
        Ok(path) if !path.is_empty() => vec![path],
        _ => LIBRARY_NAMES.iter().map(|s| s.to_string()).collect(),
    };
    let mut detail = String::new();
    let mut lib = None;
    for name in &names {
        // SAFETY: loading the ROCm runtime runs its initializers, which any
        // use of it does anyway; it is never unloaded (the `Api` lives in a
        // process-wide `OnceLock`).
        match unsafe { libloading::Library::new(name) } {
            Ok(l) => {
                lib = Some(l);
                break;
            }
            Err(e) => detail = e.to_string(),
        }
    }
    let Some(lib) = lib else {
        return Err(HsaError::LibraryNotFound {
            searched: names.join(", "),
            detail,
        });
    };
    macro_rules! sym {
        ($name:literal) => {{
            // SAFETY: the declared type is the C prototype of this entry point
            // in ROCm's hsa.h / hsa_ext_amd.h (checked by hand); the pointer
            // stays valid while `_lib` is loaded, i.e. for the process.
            match unsafe { lib.get(concat!($name, "\0").as_bytes()) } {
                Ok(s) => *s,
                Err(e) => {
                    return Err(HsaError::LibrarySymbol {
                        symbol: $name.to_string(),
                        detail: e.to_string(),
                    })
                }
            }
        }};
    }
    let api = Api {
        init: sym!("hsa_init"),
        status_string: sym!("hsa_status_string"),
        iterate_agents: sym!("hsa_iterate_agents"),
        agent_get_info: sym!("hsa_agent_get_info"),
        iterate_pools: sym!("hsa_amd_agent_iterate_memory_pools"),
        pool_get_info: sym!("hsa_amd_memory_pool_get_info"),
        agent_pool_get_info: sym!("hsa_amd_agent_memory_pool_get_info"),
        pool_allocate: sym!("hsa_amd_memory_pool_allocate"),
        pool_free: sym!("hsa_amd_memory_pool_free"),
        allow_access: sym!("hsa_amd_agents_allow_access"),
        memory_fill: sym!("hsa_amd_memory_fill"),
        memory_copy: sym!("hsa_memory_copy"),
        queue_create: sym!("hsa_queue_create"),
        queue_destroy: sym!("hsa_queue_destroy"),
        queue_add_write_index: sym!("hsa_queue_add_write_index_scacq_screl"),
        queue_load_read_index: sym!("hsa_queue_load_read_index_scacquire"),
        signal_create: sym!("hsa_signal_create"),
        signal_destroy: sym!("hsa_signal_destroy"),
        signal_store: sym!("hsa_signal_store_screlease"),
        signal_wait: sym!("hsa_signal_wait_scacquire"),
        reader_create: sym!("hsa_code_object_reader_create_from_memory"),
        reader_destroy: sym!("hsa_code_object_reader_destroy"),
        executable_create: sym!("hsa_executable_create_alt"),
        executable_load: sym!("hsa_executable_load_agent_code_object"),
        executable_freeze: sym!("hsa_executable_freeze"),
        executable_destroy: sym!("hsa_executable_destroy"),
        get_symbol: sym!("hsa_executable_get_symbol_by_name"),
        symbol_get_info: sym!("hsa_executable_symbol_get_info"),
        _lib: lib,
    };
    // SAFETY: `hsa_init` has no preconditions; it is reference counted and
    // never matched by `hsa_shut_down` here (the runtime stays up for the
    // process, as the library stays loaded).
    let status = unsafe { (api.init)() };
    check(&api, "initializing the HSA runtime (hsa_init)", status)?;
    Ok(api)
}

fn api() -> Result<&'static Api, HsaError> {
    static API: OnceLock<Result<Api, HsaError>> = OnceLock::new();
    API.get_or_init(load_api).as_ref().map_err(Clone::clone)
}

/// Whether the ROCm runtime library can be loaded and initialized on this
/// machine (probed once, never panics).
///
/// ```
/// // With or without ROCm, this only answers.
/// let _ = rpc_runtime::hsa::runtime_available();
/// ```
pub fn runtime_available() -> bool {
    api().is_ok()
}

// ---------------------------------------------------------------------------
// Agents and pools
// ---------------------------------------------------------------------------

extern "C" fn push_agent(agent: Agent, data: *mut c_void) -> Status {
    // SAFETY: `data` is the `&mut Vec<Agent>` passed by `all_agents`, alive
    // for the whole (synchronous) iteration.
    unsafe { (*data.cast::<Vec<Agent>>()).push(agent) };
    ffi::STATUS_SUCCESS
}

extern "C" fn push_pool(pool: MemoryPool, data: *mut c_void) -> Status {
    // SAFETY: as in `push_agent`, with `&mut Vec<MemoryPool>`.
    unsafe { (*data.cast::<Vec<MemoryPool>>()).push(pool) };
    ffi::STATUS_SUCCESS
}

fn all_agents(api: &Api) -> Result<Vec<Agent>, HsaError> {
    let mut agents: Vec<Agent> = Vec::new();
    // SAFETY: the callback only pushes into `agents`, which outlives the call.
    let r = unsafe { (api.iterate_agents)(push_agent, (&mut agents as *mut Vec<Agent>).cast()) };
    check(api, "listing HSA agents", r)?;
    Ok(agents)
}

/// `hsa_agent_get_info` for a plain value.
fn agent_info<T: Copy + Default>(api: &Api, agent: Agent, attr: u32, what: &str) -> Result<T, HsaError> {
    let mut v = T::default();
    // SAFETY: `attr` is an attribute whose value type is `T` (each caller
    // passes the type hsa.h documents for it); `v` is a valid place for it.
    let r = unsafe { (api.agent_get_info)(agent, attr, (&mut v as *mut T).cast()) };
    check(api, what, r)?;
    Ok(v)
}

fn agent_name(api: &Api, agent: Agent) -> Result<String, HsaError> {
    let mut name = [0u8; 64];
    // SAFETY: HSA_AGENT_INFO_NAME writes a NUL-terminated `char[64]`.
    let r = unsafe { (api.agent_get_info)(agent, ffi::AGENT_INFO_NAME, name.as_mut_ptr().cast()) };
    check(api, "querying an agent's name", r)?;
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Ok(String::from_utf8_lossy(&name[..end]).into_owned())
}

/// What the backend needs to know about a memory pool to choose one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PoolInfo {
    pool: MemoryPool,
    /// `hsa_amd_segment_t`.
    segment: u32,
    /// `hsa_amd_memory_pool_global_flag_t` bits.
    flags: u32,
    /// `HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED`.
    alloc_allowed: bool,
    /// `hsa_amd_memory_pool_access_t` of the GPU agent to this pool.
    gpu_access: u32,
}

impl PoolInfo {
    fn usable(&self) -> bool {
        self.segment == ffi::SEGMENT_GLOBAL && self.alloc_allowed && self.gpu_access != ffi::ACCESS_NEVER_ALLOWED
    }
}

/// The pool for the shared region: a fine-grained (never coarse-grained)
/// global pool the GPU may access; one without the kernarg flag when there
/// is a choice (the kernarg pool is usually small).
fn select_shared_pool(pools: &[PoolInfo]) -> Option<PoolInfo> {
    let fine =
        |p: &&PoolInfo| p.usable() && p.flags & ffi::FLAG_FINE_GRAINED != 0 && p.flags & ffi::FLAG_COARSE_GRAINED == 0;
    pools
        .iter()
        .filter(fine)
        .find(|p| p.flags & ffi::FLAG_KERNARG_INIT == 0)
        .or_else(|| pools.iter().find(fine))
        .copied()
}

/// The pool for kernel arguments: one with the kernarg flag.
fn select_kernarg_pool(pools: &[PoolInfo]) -> Option<PoolInfo> {
    pools
        .iter()
        .find(|p| p.usable() && p.flags & ffi::FLAG_KERNARG_INIT != 0)
        .copied()
}

/// The pool for the device-local lock words: the GPU's own global pool,
/// coarse-grained preferred (only the GPU touches the words while a kernel
/// runs).
fn select_device_pool(pools: &[PoolInfo]) -> Option<PoolInfo> {
    pools
        .iter()
        .filter(|p| p.usable())
        .find(|p| p.flags & ffi::FLAG_COARSE_GRAINED != 0)
        .or_else(|| pools.iter().find(|p| p.usable()))
        .copied()
}

fn pool_infos(api: &Api, owner: Agent, gpu: Agent) -> Result<Vec<PoolInfo>, HsaError> {
    let mut pools: Vec<MemoryPool> = Vec::new();
    // SAFETY: the callback only pushes into `pools`, which outlives the call.
    let r = unsafe { (api.iterate_pools)(owner, push_pool, (&mut pools as *mut Vec<MemoryPool>).cast()) };
    check(api, "listing memory pools", r)?;
    let mut infos = Vec::with_capacity(pools.len());
    for pool in pools {
        let (mut segment, mut flags, mut alloc, mut access) = (u32::MAX, 0u32, false, ffi::ACCESS_NEVER_ALLOWED);
        // SAFETY: each attribute's value type is the one hsa_ext_amd.h gives
        // it (segment: u32 enum, flags: u32, alloc allowed: bool, access: u32
        // enum); each pointer is a valid place for it.
        unsafe {
            check(
                api,
                "querying a pool's segment",
                (api.pool_get_info)(pool, ffi::POOL_INFO_SEGMENT, (&mut segment as *mut u32).cast()),
            )?;
            if segment == ffi::SEGMENT_GLOBAL {
                check(
                    api,
                    "querying a pool's flags",
                    (api.pool_get_info)(pool, ffi::POOL_INFO_GLOBAL_FLAGS, (&mut flags as *mut u32).cast()),
                )?;
            }
            check(
                api,
                "querying whether a pool allows allocation",
                (api.pool_get_info)(
                    pool,
                    ffi::POOL_INFO_RUNTIME_ALLOC_ALLOWED,
                    (&mut alloc as *mut bool).cast(),
                ),
            )?;
            check(
                api,
                "querying the GPU's access to a pool",
                (api.agent_pool_get_info)(gpu, pool, ffi::AGENT_POOL_INFO_ACCESS, (&mut access as *mut u32).cast()),
            )?;
        }
        infos.push(PoolInfo {
            pool,
            segment,
            flags,
            alloc_allowed: alloc,
            gpu_access: access,
        });
    }
    Ok(infos)
}

// ---------------------------------------------------------------------------
// Device
// ---------------------------------------------------------------------------

struct DeviceInner {
    api: &'static Api,
    index: usize,
    gpu: Agent,
    name: String,
    wavefront_size: u32,
    compute_units: u32,
    profile: u32,
    queue_size: u32,
    shared_pool: MemoryPool,
    kernarg_pool: MemoryPool,
    device_pool: MemoryPool,
}

/// One GPU agent of the ROCm runtime and the memory pools the backend uses
/// on it. Cheap to clone.
///
/// ```no_run
/// let dev = rpc_runtime::hsa::HsaDevice::new(0)?;
/// println!("{} ({} CUs, wave{})", dev.name(), dev.compute_units(), dev.wavefront_size());
/// # Ok::<(), rpc_runtime::hsa::HsaError>(())
/// ```
#[derive(Clone)]
pub struct HsaDevice {
    inner: Arc<DeviceInner>,
}

impl fmt::Debug for HsaDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HsaDevice")
            .field("index", &self.inner.index)
            .field("name", &self.inner.name)
            .finish()
    }
}

/// The GPU agents that can run kernels, in the runtime's order, and a CPU
/// agent.
fn gpu_agents(api: &Api) -> Result<(Vec<Agent>, Option<Agent>), HsaError> {
    let mut gpus = Vec::new();
    let mut cpu = None;
    for agent in all_agents(api)? {
        let kind: u32 = agent_info(api, agent, ffi::AGENT_INFO_DEVICE, "querying an agent's device type")?;
        if kind == ffi::DEVICE_TYPE_CPU && cpu.is_none() {
            cpu = Some(agent);
        } else if kind == ffi::DEVICE_TYPE_GPU {
            let features: u32 = agent_info(api, agent, ffi::AGENT_INFO_FEATURE, "querying an agent's features")?;
            if features & ffi::AGENT_FEATURE_KERNEL_DISPATCH != 0 {
                gpus.push(agent);
            }
        }
    }
    Ok((gpus, cpu))
}

impl HsaDevice {
    /// GPU agent `index` (counting only GPU agents that accept kernel
    /// dispatches). Fails cleanly, never panicking, when the runtime library
    /// cannot be loaded ([`HsaError::LibraryNotFound`]), when there is no
    /// such GPU ([`HsaError::NoGpuAgent`]), or when the system lacks a
    /// fine-grained memory pool the GPU can access ([`HsaError::Unsupported`]).
    ///
    /// ```
    /// // On a machine without ROCm this is an error that says what to install.
    /// if !rpc_runtime::hsa::runtime_available() {
    ///     let e = rpc_runtime::hsa::HsaDevice::new(0).unwrap_err();
    ///     assert!(e.to_string().contains("libhsa-runtime64"));
    /// }
    /// ```
    pub fn new(index: usize) -> Result<HsaDevice, HsaError> {
        let api = api()?;
        let (gpus, cpu) = gpu_agents(api)?;
        let gpu = *gpus.get(index).ok_or(HsaError::NoGpuAgent {
            index,
            found: gpus.len(),
        })?;
        let unsupported = |reason: &str| HsaError::Unsupported {
            index,
            reason: reason.to_string(),
        };
        let cpu =
            cpu.ok_or_else(|| unsupported("the runtime reports no CPU agent (for fine-grained system memory)"))?;
        let name = agent_name(api, gpu)?;
        let wavefront_size: u32 = agent_info(api, gpu, ffi::AGENT_INFO_WAVEFRONT_SIZE, "querying the wavefront size")?;
        if wavefront_size != 64 && wavefront_size != 32 {
            return Err(unsupported(&format!(
                "wavefront size {wavefront_size}; the backend needs 64 (or 32)"
            )));
        }
        let compute_units: u32 = agent_info(
            api,
            gpu,
            ffi::AMD_AGENT_INFO_COMPUTE_UNIT_COUNT,
            "querying the compute unit count",
        )
        .unwrap_or(0);
        let profile: u32 = agent_info(api, gpu, ffi::AGENT_INFO_PROFILE, "querying the agent's profile")?;
        let qmin: u32 = agent_info(api, gpu, ffi::AGENT_INFO_QUEUE_MIN_SIZE, "querying the queue size")?;
        let qmax: u32 = agent_info(api, gpu, ffi::AGENT_INFO_QUEUE_MAX_SIZE, "querying the queue size")?;
        let queue_size = 64u32.clamp(qmin.max(1), qmax.max(1)).next_power_of_two();

        let cpu_pools = pool_infos(api, cpu, gpu)?;
        let gpu_pools = pool_infos(api, gpu, gpu)?;
        let shared = select_shared_pool(&cpu_pools).ok_or_else(|| {
            unsupported("no fine-grained global memory pool of the CPU agent that the GPU may access (coarse-grained memory cannot carry the protocol)")
        })?;
        let kernarg = select_kernarg_pool(&cpu_pools).unwrap_or(shared);
        let device = select_device_pool(&gpu_pools)
            .ok_or_else(|| unsupported("no global memory pool of the GPU agent allows allocation"))?;
        Ok(HsaDevice {
            inner: Arc::new(DeviceInner {
                api,
                index,
                gpu,
                name,
                wavefront_size,
                compute_units,
                profile,
                queue_size,
                shared_pool: shared.pool,
                kernarg_pool: kernarg.pool,
                device_pool: device.pool,
            }),
        })
    }

    /// Number of GPU agents that accept kernel dispatches (an error when the
    /// runtime cannot be loaded).
    ///
    /// ```no_run
    /// println!("{} AMD GPUs", rpc_runtime::hsa::HsaDevice::count()?);
    /// # Ok::<(), rpc_runtime::hsa::HsaError>(())
    /// ```
    pub fn count() -> Result<usize, HsaError> {
        Ok(gpu_agents(api()?)?.0.len())
    }

    /// The index this device was opened with.
    ///
    /// ```no_run
    /// assert_eq!(rpc_runtime::hsa::HsaDevice::new(0)?.index(), 0);
    /// # Ok::<(), rpc_runtime::hsa::HsaError>(())
    /// ```
    pub fn index(&self) -> usize {
        self.inner.index
    }

    /// The agent's name: its processor, e.g. `gfx90a` or `gfx942`.
    ///
    /// ```no_run
    /// assert!(rpc_runtime::hsa::HsaDevice::new(0)?.name().starts_with("gfx"));
    /// # Ok::<(), rpc_runtime::hsa::HsaError>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Work-items per wavefront (64 on CDNA, 32 on RDNA by default).
    ///
    /// ```no_run
    /// assert_eq!(rpc_runtime::hsa::HsaDevice::new(0)?.wavefront_size(), 64);
    /// # Ok::<(), rpc_runtime::hsa::HsaError>(())
    /// ```
    pub fn wavefront_size(&self) -> u32 {
        self.inner.wavefront_size
    }

    /// Compute units (0 when the runtime does not say).
    ///
    /// ```no_run
    /// println!("{}", rpc_runtime::hsa::HsaDevice::new(0)?.compute_units());
    /// # Ok::<(), rpc_runtime::hsa::HsaError>(())
    /// ```
    pub fn compute_units(&self) -> u32 {
        self.inner.compute_units
    }

    fn api(&self) -> &'static Api {
        self.inner.api
    }

    fn same_agent(&self, other: &HsaDevice) -> bool {
        self.inner.gpu == other.inner.gpu
    }
}

// ---------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------

/// `len` bytes from `pool`, made accessible to `device`'s GPU.
fn pool_alloc(device: &HsaDevice, pool: MemoryPool, len: usize, what: &str) -> Result<NonNull<u8>, HsaError> {
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
/// use rpc_runtime::hsa::{HsaBuffer, HsaDevice, MappedBuffer};
/// let dev = HsaDevice::new(0)?;
/// let out = HsaBuffer::new(&dev, 1024)?;
/// // Pass `out.device_ptr()` as `KernelArg::Ptr`; after the launch returned:
/// // SAFETY: no kernel is running.
/// assert_eq!(unsafe { out.as_slice() }[0], 0);
/// # Ok::<(), rpc_runtime::hsa::HsaError>(())
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
    /// let dev = rpc_runtime::hsa::HsaDevice::new(0)?;
    /// let buf = rpc_runtime::hsa::HsaBuffer::new(&dev, 4096)?;
    /// assert_ne!(buf.device_ptr(), 0);
    /// # Ok::<(), rpc_runtime::hsa::HsaError>(())
    /// ```
    pub fn new(device: &HsaDevice, len: usize) -> Result<HsaBuffer, HsaError> {
        Self::from_pool(device, device.inner.shared_pool, len)
    }

    fn from_pool(device: &HsaDevice, pool: MemoryPool, len: usize) -> Result<HsaBuffer, HsaError> {
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
    /// # let dev = rpc_runtime::hsa::HsaDevice::new(0)?;
    /// let buf = rpc_runtime::hsa::HsaBuffer::new(&dev, 64)?;
    /// assert_eq!(buf.host_ptr() as u64, buf.device_ptr());
    /// # Ok::<(), rpc_runtime::hsa::HsaError>(())
    /// ```
    pub fn host_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The address kernels use.
    ///
    /// ```no_run
    /// # let dev = rpc_runtime::hsa::HsaDevice::new(0)?;
    /// let buf = rpc_runtime::hsa::HsaBuffer::new(&dev, 64)?;
    /// let arg = rpc_runtime::hsa::KernelArg::Ptr(buf.device_ptr());
    /// # Ok::<(), rpc_runtime::hsa::HsaError>(())
    /// ```
    pub fn device_ptr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    /// Size in bytes.
    ///
    /// ```no_run
    /// # let dev = rpc_runtime::hsa::HsaDevice::new(0)?;
    /// assert_eq!(rpc_runtime::hsa::HsaBuffer::new(&dev, 8)?.len(), 8);
    /// # Ok::<(), rpc_runtime::hsa::HsaError>(())
    /// ```
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false (a buffer has at least one byte).
    ///
    /// ```no_run
    /// # let dev = rpc_runtime::hsa::HsaDevice::new(0)?;
    /// assert!(!rpc_runtime::hsa::HsaBuffer::new(&dev, 8)?.is_empty());
    /// # Ok::<(), rpc_runtime::hsa::HsaError>(())
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
struct DeviceWords {
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
/// use rpc_runtime::hsa::{HsaDevice, HsaRegion};
/// let dev = HsaDevice::new(0)?;
/// let region = HsaRegion::new(&dev, 64)?;
/// let desc = region.client_desc();
/// assert_eq!((desc.port_count, desc.lane_size), (64, 64));
/// assert!(region.is_quiescent()?);
/// # Ok::<(), rpc_runtime::hsa::HsaError>(())
/// ```
pub struct HsaRegion {
    device: HsaDevice,
    layout: Layout,
    shared: HsaBuffer,
    desc: HsaBuffer,
    client_locks: DeviceWords,
    server_locks: Box<[AtomicU32]>,
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
    /// let dev = rpc_runtime::hsa::HsaDevice::new(0)?;
    /// let region = rpc_runtime::hsa::HsaRegion::new(&dev, 4096)?;
    /// # Ok::<(), rpc_runtime::hsa::HsaError>(())
    /// ```
    pub fn new(device: &HsaDevice, port_count: u32) -> Result<HsaRegion, HsaError> {
        let layout = Layout::new(port_count, LANE_SIZE)
            .ok_or_else(|| HsaError::config(format!("port count {port_count} is not in 1..={MAX_PORTS}")))?;
        let shared = HsaBuffer::new(device, layout.allocation_size())?;
        if shared.device_ptr() % 64 != 0 {
            return Err(HsaError::config(
                "the runtime returned a shared region that is not 64-byte aligned",
            ));
        }
        let words = lock_words(port_count);
        let client_locks = DeviceWords::zeroed(device, client_local_words(port_count))?;
        let desc = HsaBuffer::new(device, std::mem::size_of::<ClientDesc>())?;
        let region = HsaRegion {
            device: device.clone(),
            layout,
            shared,
            desc,
            client_locks,
            server_locks: (0..words).map(|_| AtomicU32::new(0)).collect(),
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
    /// # let dev = rpc_runtime::hsa::HsaDevice::new(0)?;
    /// let region = rpc_runtime::hsa::HsaRegion::new(&dev, 8)?;
    /// assert_eq!(region.layout().lane_size(), 64);
    /// # Ok::<(), rpc_runtime::hsa::HsaError>(())
    /// ```
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The device the region belongs to.
    ///
    /// ```no_run
    /// # let dev = rpc_runtime::hsa::HsaDevice::new(0)?;
    /// let region = rpc_runtime::hsa::HsaRegion::new(&dev, 8)?;
    /// assert_eq!(region.device().index(), 0);
    /// # Ok::<(), rpc_runtime::hsa::HsaError>(())
    /// ```
    pub fn device(&self) -> &HsaDevice {
        &self.device
    }

    /// The descriptor: GPU addresses of the region and the client lock words.
    ///
    /// ```no_run
    /// # let dev = rpc_runtime::hsa::HsaDevice::new(0)?;
    /// let region = rpc_runtime::hsa::HsaRegion::new(&dev, 8)?;
    /// assert_eq!(region.client_desc().shared, region.device_ptr());
    /// # Ok::<(), rpc_runtime::hsa::HsaError>(())
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
    /// # let dev = rpc_runtime::hsa::HsaDevice::new(0)?;
    /// let region = rpc_runtime::hsa::HsaRegion::new(&dev, 8)?;
    /// assert_eq!(region.desc_ptr() % 8, 0);
    /// # Ok::<(), rpc_runtime::hsa::HsaError>(())
    /// ```
    pub fn desc_ptr(&self) -> u64 {
        self.desc.device_ptr()
    }

    /// The server side, over the region.
    ///
    /// ```no_run
    /// # let dev = rpc_runtime::hsa::HsaDevice::new(0)?;
    /// let region = rpc_runtime::hsa::HsaRegion::new(&dev, 8)?;
    /// assert!(!region.server().pending(0));
    /// # Ok::<(), rpc_runtime::hsa::HsaError>(())
    /// ```
    pub fn server(&self) -> Server<'_> {
        // SAFETY: the region is laid out by `layout`, 64-byte aligned, zeroed
        // at allocation and lives as long as the returned server borrows
        // `self`; the GPU touches it only through the protocol's atomics. The
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
    /// word is zero (read back with `hsa_memory_copy`). Meaningful only when
    /// no kernel is running.
    ///
    /// ```no_run
    /// # let dev = rpc_runtime::hsa::HsaDevice::new(0)?;
    /// let region = rpc_runtime::hsa::HsaRegion::new(&dev, 8)?;
    /// assert!(region.is_quiescent()?);
    /// # Ok::<(), rpc_runtime::hsa::HsaError>(())
    /// ```
    pub fn is_quiescent(&self) -> Result<bool, HsaError> {
        let clients_clear = client_locks_released(&self.client_locks.read()?);
        Ok(clients_clear && self.server().all_idle())
    }

    /// Host address of the shared region (writing it while a protocol side
    /// runs breaks the protocol's invariants).
    ///
    /// ```no_run
    /// # let dev = rpc_runtime::hsa::HsaDevice::new(0)?;
    /// let region = rpc_runtime::hsa::HsaRegion::new(&dev, 8)?;
    /// assert!(!region.host_ptr().is_null());
    /// # Ok::<(), rpc_runtime::hsa::HsaError>(())
    /// ```
    pub fn host_ptr(&self) -> *mut u8 {
        self.shared.host_ptr()
    }

    /// GPU address of the shared region (equal to the host address).
    ///
    /// ```no_run
    /// # let dev = rpc_runtime::hsa::HsaDevice::new(0)?;
    /// let region = rpc_runtime::hsa::HsaRegion::new(&dev, 8)?;
    /// assert_eq!(region.device_ptr(), region.host_ptr() as u64);
    /// # Ok::<(), rpc_runtime::hsa::HsaError>(())
    /// ```
    pub fn device_ptr(&self) -> u64 {
        self.shared.device_ptr()
    }
}

// ---------------------------------------------------------------------------
// Code objects
// ---------------------------------------------------------------------------

/// ELF `e_machine` of AMDGPU.
pub const EM_AMDGPU: u16 = 224;
/// ELF `EI_OSABI` of an HSA code object (`ELFOSABI_AMDGPU_HSA`).
pub const ELFOSABI_AMDGPU_HSA: u8 = 64;

/// Whether `bytes` start like an AMDGPU HSA code object: a 64-bit
/// little-endian ELF with `EI_OSABI` 64 (`ELFOSABI_AMDGPU_HSA`) and
/// `e_machine` 224 (`EM_AMDGPU`). Only the header is looked at; for a loader
/// that must tell code objects from PTX text.
///
/// ```
/// use rpc_runtime::hsa::is_code_object;
/// assert!(!is_code_object(b"//\n// Generated by LLVM NVPTX Back-End\n.version 8.0"));
/// let mut h = [0u8; 64];
/// h[..4].copy_from_slice(b"\x7fELF");
/// (h[4], h[5], h[7]) = (2, 1, 64);
/// h[18..20].copy_from_slice(&224u16.to_le_bytes());
/// assert!(is_code_object(&h));
/// ```
pub fn is_code_object(bytes: &[u8]) -> bool {
    check_header(bytes).is_ok()
}

fn check_header(b: &[u8]) -> Result<(), String> {
    if b.len() < 64 {
        return Err(format!("{} bytes, shorter than an ELF64 header (64)", b.len()));
    }
    if &b[..4] != b"\x7fELF" {
        return Err("no ELF magic (\\x7fELF)".to_string());
    }
    if b[4] != 2 {
        return Err(format!("ELF class {}, not ELFCLASS64 (2)", b[4]));
    }
    if b[5] != 1 {
        return Err(format!("ELF data encoding {}, not little-endian (1)", b[5]));
    }
    let machine = u16::from_le_bytes([b[18], b[19]]);
    if machine != EM_AMDGPU {
        return Err(format!("ELF for machine {machine}, not EM_AMDGPU ({EM_AMDGPU})"));
    }
    if b[7] != ELFOSABI_AMDGPU_HSA {
        return Err(format!(
            "ELF OS ABI {}, not ELFOSABI_AMDGPU_HSA ({ELFOSABI_AMDGPU_HSA}): not built for amdgcn-amd-amdhsa",
            b[7]
        ));
    }
    Ok(())
}

/// The processor of `EF_AMDGPU_MACH` (the low byte of `e_flags`), for the
/// values this project builds or is likely to meet.
fn mach_name(mach: u32) -> Option<&'static str> {
    Some(match mach {
        0x2c => "gfx900",
        0x2f => "gfx906",
        0x30 => "gfx908",
        0x3f => "gfx90a",
        0x4c => "gfx942",
        0x4f => "gfx950",
        0x41 => "gfx1100",
        _ => return None,
    })
}

fn rd<const N: usize>(b: &[u8], at: usize) -> Option<[u8; N]> {
    b.get(at..at.checked_add(N)?)?.try_into().ok()
}
fn rd16(b: &[u8], at: usize) -> Option<u16> {
    rd(b, at).map(u16::from_le_bytes)
}
fn rd32(b: &[u8], at: usize) -> Option<u32> {
    rd(b, at).map(u32::from_le_bytes)
}
fn rd64(b: &[u8], at: usize) -> Option<u64> {
    rd(b, at).map(u64::from_le_bytes)
}

/// The kernels of an ELF64 code object: names of `STT_OBJECT` symbols that
/// end in `.kd` (kernel descriptors), from `.dynsym` (else `.symtab`).
fn elf_kernels(b: &[u8]) -> Result<Vec<String>, String> {
    const SHT_SYMTAB: u32 = 2;
    const SHT_DYNSYM: u32 = 11;
    const STT_OBJECT: u8 = 1;
    let bad = |what: &str| format!("malformed ELF: {what}");
    let shoff = rd64(b, 0x28).ok_or_else(|| bad("header"))? as usize;
    let shentsize = rd16(b, 0x3a).ok_or_else(|| bad("header"))? as usize;
    let shnum = rd16(b, 0x3c).ok_or_else(|| bad("header"))? as usize;
    if shnum == 0 {
        return Err(bad("no section headers"));
    }
    if shentsize != 64 {
        return Err(bad(&format!("section header size {shentsize}, not 64")));
    }
    let section = |i: usize| -> Option<(u32, usize, usize, usize, usize)> {
        let h = shoff.checked_add(i.checked_mul(64)?)?;
        Some((
            rd32(b, h + 4)?,
            rd64(b, h + 24)? as usize,
            rd64(b, h + 32)? as usize,
            rd32(b, h + 40)? as usize,
            rd64(b, h + 56)? as usize,
        ))
    };
    let mut tables = Vec::new();
    for i in 0..shnum {
        let s = section(i).ok_or_else(|| bad("section header out of range"))?;
        if s.0 == SHT_DYNSYM || s.0 == SHT_SYMTAB {
            tables.push(s);
        }
    }
    tables.sort_by_key(|s| s.0 != SHT_DYNSYM);
    let Some(&(_, off, size, link, entsize)) = tables.first() else {
        return Err(bad("no symbol table"));
    };
    if entsize != 24 {
        return Err(bad(&format!("symbol size {entsize}, not 24")));
    }
    let (_, stroff, strsize, _, _) = section(link).ok_or_else(|| bad("string table out of range"))?;
    let strtab = b
        .get(stroff..stroff.checked_add(strsize).ok_or_else(|| bad("string table"))?)
        .ok_or_else(|| bad("string table out of range"))?;
    let syms = b
        .get(off..off.checked_add(size).ok_or_else(|| bad("symbol table"))?)
        .ok_or_else(|| bad("symbol table out of range"))?;
    let mut kernels = Vec::new();
    for sym in syms.chunks_exact(24) {
        let name_at = u32::from_le_bytes([sym[0], sym[1], sym[2], sym[3]]) as usize;
        if sym[4] & 0xf != STT_OBJECT {
            continue;
        }
        let Some(rest) = strtab.get(name_at..) else {
            return Err(bad("symbol name out of range"));
        };
        let end = rest.iter().position(|&c| c == 0).unwrap_or(rest.len());
        let name = String::from_utf8_lossy(&rest[..end]);
        if let Some(kernel) = name.strip_suffix(".kd") {
            if !kernel.is_empty() && !kernels.iter().any(|k| k == kernel) {
                kernels.push(kernel.to_string());
            }
        }
    }
    Ok(kernels)
}

/// An AMDGPU code object (an ELF shared object for `amdgcn-amd-amdhsa`, as
/// `rpc-build` links it), checked and indexed before it reaches the runtime.
///
/// ```no_run
/// let code = rpc_runtime::hsa::CodeObject::from_file("kernels.hsaco")?;
/// println!("{:?}: {:?}", code.processor(), code.kernels());
/// # Ok::<(), rpc_runtime::hsa::HsaError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeObject {
    bytes: Vec<u8>,
    e_flags: u32,
    kernels: Vec<String>,
}

impl CodeObject {
    /// Check and index `bytes`: ELF64, little-endian, OS ABI HSA (64),
    /// `e_machine` `EM_AMDGPU` (224), a shared object (`ET_DYN`), and a
    /// symbol table listing the kernels (`<name>.kd`). Anything else is
    /// [`HsaError::NotCodeObject`]. Needs no GPU and no ROCm.
    ///
    /// ```
    /// let e = rpc_runtime::hsa::CodeObject::from_bytes(b".version 8.0\n.target sm_90".to_vec()).unwrap_err();
    /// assert!(e.to_string().contains("not an AMDGPU code object"));
    /// ```
    pub fn from_bytes(bytes: impl Into<Vec<u8>>) -> Result<CodeObject, HsaError> {
        let bytes = bytes.into();
        let not = |reason: String| HsaError::NotCodeObject { reason };
        check_header(&bytes).map_err(not)?;
        let e_type = rd16(&bytes, 16).unwrap_or(0);
        if e_type != 3 {
            return Err(not(format!(
                "ELF type {e_type}, not a shared object (ET_DYN, 3): link it (rpc-build does) before loading"
            )));
        }
        let e_flags = rd32(&bytes, 48).unwrap_or(0);
        let kernels = elf_kernels(&bytes).map_err(not)?;
        Ok(CodeObject {
            bytes,
            e_flags,
            kernels,
        })
    }

    /// [`from_bytes`](Self::from_bytes) on a file.
    ///
    /// ```
    /// let e = rpc_runtime::hsa::CodeObject::from_file("/nonexistent.hsaco").unwrap_err();
    /// assert!(e.to_string().starts_with("gpu_rpc hsa: cannot read /nonexistent.hsaco"));
    /// ```
    pub fn from_file(path: impl AsRef<Path>) -> Result<CodeObject, HsaError> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|e| HsaError::Io {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        CodeObject::from_bytes(bytes)
    }

    /// The kernels, in symbol-table order (names without `.kd`).
    ///
    /// ```no_run
    /// let code = rpc_runtime::hsa::CodeObject::from_file("kernels.hsaco")?;
    /// assert!(code.kernels().iter().any(|k| k == "rpc_noop_kernel"));
    /// # Ok::<(), rpc_runtime::hsa::HsaError>(())
    /// ```
    pub fn kernels(&self) -> &[String] {
        &self.kernels
    }

    /// `e_flags` (`EF_AMDGPU_MACH` in the low byte, xnack/sramecc above).
    ///
    /// ```no_run
    /// let code = rpc_runtime::hsa::CodeObject::from_file("kernels.hsaco")?;
    /// assert_eq!(code.e_flags() & 0xff, 0x3f); // gfx90a
    /// # Ok::<(), rpc_runtime::hsa::HsaError>(())
    /// ```
    pub fn e_flags(&self) -> u32 {
        self.e_flags
    }

    /// The processor it was built for, when its `EF_AMDGPU_MACH` is one this
    /// crate knows (gfx900, gfx906, gfx908, gfx90a, gfx942, gfx950, gfx1100).
    ///
    /// ```no_run
    /// let code = rpc_runtime::hsa::CodeObject::from_file("kernels.hsaco")?;
    /// assert_eq!(code.processor(), Some("gfx942"));
    /// # Ok::<(), rpc_runtime::hsa::HsaError>(())
    /// ```
    pub fn processor(&self) -> Option<&'static str> {
        mach_name(self.e_flags & 0xff)
    }

    /// The ELF bytes.
    ///
    /// ```no_run
    /// let code = rpc_runtime::hsa::CodeObject::from_file("kernels.hsaco")?;
    /// assert_eq!(&code.bytes()[..4], b"\x7fELF");
    /// # Ok::<(), rpc_runtime::hsa::HsaError>(())
    /// ```
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// A code object loaded into an HSA executable for one GPU (frozen, ready to
/// dispatch); destroyed on drop.
///
/// ```no_run
/// use rpc_runtime::hsa::{CodeObject, HsaDevice, Module};
/// let dev = HsaDevice::new(0)?;
/// let module = Module::load(&dev, &CodeObject::from_file("kernels.hsaco")?)?;
/// println!("{:?}", module.kernels());
/// # Ok::<(), rpc_runtime::hsa::HsaError>(())
/// ```
pub struct Module {
    device: HsaDevice,
    executable: ffi::Executable,
    kernels: Vec<String>,
}

impl fmt::Debug for Module {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Module")
            .field("device", &self.device)
            .field("kernels", &self.kernels)
            .finish()
    }
}

impl Module {
    /// Load `code` for `device`: `hsa_code_object_reader_create_from_memory`,
    /// `hsa_executable_create_alt` (the agent's profile),
    /// `hsa_executable_load_agent_code_object`, `hsa_executable_freeze`. A
    /// code object for another processor is refused first
    /// ([`HsaError::WrongGpu`]).
    ///
    /// ```no_run
    /// # use rpc_runtime::hsa::{CodeObject, HsaDevice, Module};
    /// let dev = HsaDevice::new(0)?;
    /// let module = Module::load(&dev, &CodeObject::from_file("kernels.hsaco")?)?;
    /// # Ok::<(), rpc_runtime::hsa::HsaError>(())
    /// ```
    pub fn load(device: &HsaDevice, code: &CodeObject) -> Result<Module, HsaError> {
        let api = device.api();
        let agent_cpu = device.name().split(':').next().unwrap_or_default();
        if let Some(cpu) = code.processor() {
            if !agent_cpu.is_empty() && cpu != agent_cpu {
                return Err(HsaError::WrongGpu {
                    index: device.index(),
                    code_object: cpu.to_string(),
                    device: agent_cpu.to_string(),
                });
            }
        }
        let mut reader = ffi::CodeObjectReader::default();
        let bytes = code.bytes();
        // SAFETY: `bytes` is a valid slice that outlives the reader (the
        // reader is destroyed before this function returns and `code` is
        // borrowed for all of it).
        let r = unsafe { (api.reader_create)(bytes.as_ptr().cast(), bytes.len(), &mut reader) };
        check(api, "reading the code object", r)?;
        let mut executable = ffi::Executable::default();
        // SAFETY: `executable` is a valid place for the handle; no options.
        let r = unsafe {
            (api.executable_create)(
                device.inner.profile,
                ffi::ROUNDING_MODE_DEFAULT,
                std::ptr::null(),
                &mut executable,
            )
        };
        if let Err(e) = check(api, "creating an executable", r) {
            // SAFETY: created above, destroyed once.
            unsafe { (api.reader_destroy)(reader) };
            return Err(e);
        }
        let module = Module {
            device: device.clone(),
            executable,
            kernels: code.kernels().to_vec(),
        };
        let gpu = device.inner.gpu;
        // SAFETY: live executable and reader; null options and a null
        // loaded-code-object out pointer are allowed.
        let loaded = unsafe { (api.executable_load)(executable, gpu, reader, std::ptr::null(), std::ptr::null_mut()) };
        let loaded = check(api, "loading the code object onto the GPU", loaded).and_then(|()| {
            // SAFETY: live executable; null options.
            let r = unsafe { (api.executable_freeze)(executable, std::ptr::null()) };
            check(api, "freezing the executable", r)
        });
        // SAFETY: the reader is not needed once loading is done; destroyed once.
        unsafe { (api.reader_destroy)(reader) };
        loaded?;
        Ok(module)
    }

    /// [`CodeObject::from_file`] and [`load`](Self::load).
    ///
    /// ```no_run
    /// # let dev = rpc_runtime::hsa::HsaDevice::new(0)?;
    /// let module = rpc_runtime::hsa::Module::from_file(&dev, "kernels.hsaco")?;
    /// # Ok::<(), rpc_runtime::hsa::HsaError>(())
    /// ```
    pub fn from_file(device: &HsaDevice, path: impl AsRef<Path>) -> Result<Module, HsaError> {
        Module::load(device, &CodeObject::from_file(path)?)
    }

    /// The kernels of the code object.
    ///
    /// ```no_run
    /// # let dev = rpc_runtime::hsa::HsaDevice::new(0)?;
    /// # let module = rpc_runtime::hsa::Module::from_file(&dev, "kernels.hsaco")?;
    /// for name in module.kernels() {
    ///     println!("{name}");
    /// }
    /// # Ok::<(), rpc_runtime::hsa::HsaError>(())
    /// ```
    pub fn kernels(&self) -> &[String] {
        &self.kernels
    }

    /// The device it is loaded on.
    ///
    /// ```no_run
    /// # let dev = rpc_runtime::hsa::HsaDevice::new(0)?;
    /// # let module = rpc_runtime::hsa::Module::from_file(&dev, "kernels.hsaco")?;
    /// assert_eq!(module.device().index(), 0);
    /// # Ok::<(), rpc_runtime::hsa::HsaError>(())
    /// ```
    pub fn device(&self) -> &HsaDevice {
        &self.device
    }

    /// The kernel `name` (looked up as `<name>.kd`); [`HsaError::KernelNotFound`]
    /// lists the code object's kernels when there is none of that name.
    ///
    /// ```no_run
    /// # let dev = rpc_runtime::hsa::HsaDevice::new(0)?;
    /// # let module = rpc_runtime::hsa::Module::from_file(&dev, "kernels.hsaco")?;
    /// let err = module.kernel("no_such_kernel").unwrap_err();
    /// assert!(err.to_string().contains("kernel `no_such_kernel` not found"));
    /// # Ok::<(), rpc_runtime::hsa::HsaError>(())
    /// ```
    pub fn kernel(&self, name: &str) -> Result<Kernel<'_>, HsaError> {
        let not_found = || HsaError::KernelNotFound {
            kernel: name.to_string(),
            kernels: self.kernels.clone(),
        };
        if !self.kernels.iter().any(|k| k == name) {
            return Err(not_found());
        }
        let symbol = CString::new(format!("{name}.kd")).map_err(|_| not_found())?;
        let api = self.device.api();
        let gpu = self.device.inner.gpu;
        let mut sym = ffi::ExecutableSymbol::default();
        // SAFETY: live, frozen executable; NUL-terminated name; `sym` is a
        // valid place for the handle.
        let r = unsafe { (api.get_symbol)(self.executable, symbol.as_ptr(), &gpu, &mut sym) };
        if r != ffi::STATUS_SUCCESS {
            return Err(not_found());
        }
        let info = |attr: u32, what: &str| -> Result<u64, HsaError> {
            let mut v = 0u64;
            // SAFETY: the kernel-object attribute is a u64 and the segment
            // attributes are u32s: writing either into a zeroed u64 is in
            // bounds and, little-endian, yields the value.
            let r = unsafe { (api.symbol_get_info)(sym, attr, (&mut v as *mut u64).cast()) };
            check(api, what, r)?;
            Ok(v)
        };
        Ok(Kernel {
            module: self,
            name: name.to_string(),
            object: info(ffi::SYMBOL_INFO_KERNEL_OBJECT, "querying the kernel object")?,
            kernarg_size: info(
                ffi::SYMBOL_INFO_KERNARG_SEGMENT_SIZE,
                "querying the kernarg segment size",
            )? as u32,
            kernarg_align: info(
                ffi::SYMBOL_INFO_KERNARG_SEGMENT_ALIGNMENT,
                "querying the kernarg alignment",
            )? as u32,
            group_size: info(ffi::SYMBOL_INFO_GROUP_SEGMENT_SIZE, "querying the group segment size")? as u32,
            private_size: info(
                ffi::SYMBOL_INFO_PRIVATE_SEGMENT_SIZE,
                "querying the private segment size",
            )? as u32,
        })
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        // SAFETY: created in `load`, destroyed once; every `Kernel` borrows
        // the module and launches wait for their kernels.
        let _ = unsafe { (self.device.api().executable_destroy)(self.executable) };
    }
}

/// One kernel of a [`Module`]: its kernel object and segment sizes.
///
/// ```no_run
/// # let dev = rpc_runtime::hsa::HsaDevice::new(0)?;
/// # let module = rpc_runtime::hsa::Module::from_file(&dev, "kernels.hsaco")?;
/// let k = module.kernel("rpc_noop_kernel")?;
/// assert!(k.kernarg_segment_size() >= 24);
/// # Ok::<(), rpc_runtime::hsa::HsaError>(())
/// ```
#[derive(Debug)]
pub struct Kernel<'m> {
    module: &'m Module,
    name: String,
    object: u64,
    kernarg_size: u32,
    kernarg_align: u32,
    group_size: u32,
    private_size: u32,
}

impl Kernel<'_> {
    /// The kernel's name.
    ///
    /// ```no_run
    /// # let dev = rpc_runtime::hsa::HsaDevice::new(0)?;
    /// # let module = rpc_runtime::hsa::Module::from_file(&dev, "kernels.hsaco")?;
    /// assert_eq!(module.kernel("rpc_noop_kernel")?.name(), "rpc_noop_kernel");
    /// # Ok::<(), rpc_runtime::hsa::HsaError>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The module it belongs to.
    ///
    /// ```no_run
    /// # let dev = rpc_runtime::hsa::HsaDevice::new(0)?;
    /// # let module = rpc_runtime::hsa::Module::from_file(&dev, "kernels.hsaco")?;
    /// assert_eq!(module.kernel("rpc_noop_kernel")?.module().kernels(), module.kernels());
    /// # Ok::<(), rpc_runtime::hsa::HsaError>(())
    /// ```
    pub fn module(&self) -> &Module {
        self.module
    }

    /// Bytes of its kernel argument segment (explicit plus hidden arguments).
    ///
    /// ```no_run
    /// # let dev = rpc_runtime::hsa::HsaDevice::new(0)?;
    /// # let module = rpc_runtime::hsa::Module::from_file(&dev, "kernels.hsaco")?;
    /// println!("{}", module.kernel("hello_kernel")?.kernarg_segment_size());
    /// # Ok::<(), rpc_runtime::hsa::HsaError>(())
    /// ```
    pub fn kernarg_segment_size(&self) -> u32 {
        self.kernarg_size
    }
}

// ---------------------------------------------------------------------------
// AQL packets and kernel arguments
// ---------------------------------------------------------------------------

pub mod aql {
    //! The AQL kernel dispatch packet (`hsa_kernel_dispatch_packet_t`) and
    //! the header bits this backend writes, as in `hsa.h`.
    //!
    //! ```
    //! use rpc_runtime::hsa::aql;
    //! assert_eq!(aql::kernel_dispatch_header(), 0x1502);
    //! assert_eq!(std::mem::size_of::<aql::KernelDispatchPacket>(), 64);
    //! ```

    /// `hsa_packet_type_t::HSA_PACKET_TYPE_INVALID`.
    pub const PACKET_TYPE_INVALID: u16 = 1;
    /// `hsa_packet_type_t::HSA_PACKET_TYPE_KERNEL_DISPATCH`.
    pub const PACKET_TYPE_KERNEL_DISPATCH: u16 = 2;
    /// Bit offset of the packet type in the header (`HSA_PACKET_HEADER_TYPE`).
    pub const HEADER_TYPE: u16 = 0;
    /// Bit offset of the barrier bit (`HSA_PACKET_HEADER_BARRIER`).
    pub const HEADER_BARRIER: u16 = 8;
    /// Bit offset of the acquire fence scope (`HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE`).
    pub const HEADER_ACQUIRE_FENCE_SCOPE: u16 = 9;
    /// Bit offset of the release fence scope (`HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE`).
    pub const HEADER_RELEASE_FENCE_SCOPE: u16 = 11;
    /// `hsa_fence_scope_t::HSA_FENCE_SCOPE_SYSTEM`.
    pub const FENCE_SCOPE_SYSTEM: u16 = 2;
    /// Bit offset of the dimension count in `setup`
    /// (`HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS`).
    pub const SETUP_DIMENSIONS: u16 = 0;

    /// `hsa_kernel_dispatch_packet_t` (64 bytes, 64-byte aligned in a queue).
    #[repr(C, align(64))]
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct KernelDispatchPacket {
        /// Packet type, barrier bit, fence scopes (written last, atomically).
        pub header: u16,
        /// Dimensions (1..=3) in bits 0..2.
        pub setup: u16,
        /// Work-items per workgroup, x.
        pub workgroup_size_x: u16,
        /// Work-items per workgroup, y.
        pub workgroup_size_y: u16,
        /// Work-items per workgroup, z.
        pub workgroup_size_z: u16,
        /// Must be 0.
        pub reserved0: u16,
        /// Work-items in the grid, x.
        pub grid_size_x: u32,
        /// Work-items in the grid, y.
        pub grid_size_y: u32,
        /// Work-items in the grid, z.
        pub grid_size_z: u32,
        /// Private (scratch) bytes per work-item.
        pub private_segment_size: u32,
        /// Group (LDS) bytes per workgroup.
        pub group_segment_size: u32,
        /// The kernel object (code descriptor address).
        pub kernel_object: u64,
        /// Address of the kernel argument segment.
        pub kernarg_address: u64,
        /// Must be 0.
        pub reserved2: u64,
        /// Signal decremented when the kernel completes (`hsa_signal_t`).
        pub completion_signal: u64,
    }

    const _: () = {
        use std::mem::{align_of, offset_of, size_of};
        assert!(size_of::<KernelDispatchPacket>() == 64 && align_of::<KernelDispatchPacket>() == 64);
        assert!(offset_of!(KernelDispatchPacket, setup) == 2);
        assert!(offset_of!(KernelDispatchPacket, workgroup_size_x) == 4);
        assert!(offset_of!(KernelDispatchPacket, workgroup_size_z) == 8);
        assert!(offset_of!(KernelDispatchPacket, reserved0) == 10);
        assert!(offset_of!(KernelDispatchPacket, grid_size_x) == 12);
        assert!(offset_of!(KernelDispatchPacket, grid_size_z) == 20);
        assert!(offset_of!(KernelDispatchPacket, private_segment_size) == 24);
        assert!(offset_of!(KernelDispatchPacket, group_segment_size) == 28);
        assert!(offset_of!(KernelDispatchPacket, kernel_object) == 32);
        assert!(offset_of!(KernelDispatchPacket, kernarg_address) == 40);
        assert!(offset_of!(KernelDispatchPacket, reserved2) == 48);
        assert!(offset_of!(KernelDispatchPacket, completion_signal) == 56);
    };

    /// The header of this backend's dispatches: type `KERNEL_DISPATCH`,
    /// barrier bit set (the packet starts after earlier ones completed), and
    /// system-scope acquire and release fences (the kernel sees host writes
    /// made before the doorbell; the host sees the kernel's writes once the
    /// completion signal fires).
    ///
    /// ```
    /// use rpc_runtime::hsa::aql::*;
    /// let h = kernel_dispatch_header();
    /// assert_eq!(h & 0xff, PACKET_TYPE_KERNEL_DISPATCH);
    /// assert_eq!((h >> HEADER_ACQUIRE_FENCE_SCOPE) & 3, FENCE_SCOPE_SYSTEM);
    /// ```
    pub const fn kernel_dispatch_header() -> u16 {
        (PACKET_TYPE_KERNEL_DISPATCH << HEADER_TYPE)
            | (1 << HEADER_BARRIER)
            | (FENCE_SCOPE_SYSTEM << HEADER_ACQUIRE_FENCE_SCOPE)
            | (FENCE_SCOPE_SYSTEM << HEADER_RELEASE_FENCE_SCOPE)
    }

    /// The first 32 bits of a packet as the producer publishes them: header in
    /// the low half, setup in the high half (little-endian).
    ///
    /// ```
    /// use rpc_runtime::hsa::aql::*;
    /// assert_eq!(header_word(kernel_dispatch_header(), 3), 0x0003_1502);
    /// ```
    pub const fn header_word(header: u16, setup: u16) -> u32 {
        header as u32 | (setup as u32) << 16
    }
}

/// Byte offsets of the code object v5 hidden arguments, relative to their
/// start (the explicit arguments' end rounded up to 8), from LLVM's AMDGPU
/// usage guide and the metadata of code objects built here.
mod hidden {
    pub const BLOCK_COUNT: usize = 0; // 3 × u32
    pub const GROUP_SIZE: usize = 12; // 3 × u16
    pub const REMAINDER: usize = 18; // 3 × u16
    pub const GRID_DIMS: usize = 64; // u16
    pub const QUEUE_PTR: usize = 200; // u64
}

/// The kernel argument segment for a dispatch: the descriptor pointer at 0,
/// then `extra` at their natural alignment, zero-padded to `segment_size`
/// (the kernel's `HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE`).
///
/// When the segment is larger than the explicit arguments, the code object
/// declared the v5 hidden arguments right after them (at the next multiple
/// of 8): the workgroup counts, workgroup sizes, remainders (0: the grid is
/// whole workgroups), the dimension count and, when it fits, `queue_ptr` are
/// filled in; the others (global offsets, hostcall, heap, ...) stay 0.
///
/// ```
/// use rpc_runtime::hsa::{kernarg_segment, KernelArg, Launch};
/// // rpc_noop_kernel(desc: *const ClientDesc, iters: u32, out: *mut u64): 24 bytes.
/// let k = kernarg_segment(0x1000, &[KernelArg::U32(7), KernelArg::Ptr(0x2000)], 24, &Launch::default(), 0).unwrap();
/// assert_eq!(k.len(), 24);
/// assert_eq!(k[0..8], 0x1000u64.to_le_bytes());
/// assert_eq!(k[8..12], 7u32.to_le_bytes());
/// assert_eq!(k[16..24], 0x2000u64.to_le_bytes());
/// ```
pub fn kernarg_segment(
    desc_ptr: u64,
    extra: &[KernelArg],
    segment_size: usize,
    launch: &Launch,
    queue_ptr: u64,
) -> Result<Vec<u8>, HsaError> {
    let mut explicit: Vec<(usize, u64, usize)> = Vec::with_capacity(1 + extra.len());
    explicit.push((0, desc_ptr, 8));
    let mut end = 8usize;
    for arg in extra {
        let size = arg.size();
        let at = end.next_multiple_of(size);
        explicit.push((at, arg.bits(), size));
        end = at + size;
    }
    if segment_size < end {
        return Err(HsaError::config(format!(
            "the kernel's argument segment is {segment_size} bytes, the launch passes {end} (a descriptor pointer and {} extra argument(s))",
            extra.len()
        )));
    }
    let mut out = vec![0u8; segment_size];
    for (at, bits, size) in explicit {
        out[at..at + size].copy_from_slice(&bits.to_le_bytes()[..size]);
    }
    let base = end.next_multiple_of(8);
    let put = |out: &mut Vec<u8>, at: usize, bytes: &[u8]| {
        if base + at + bytes.len() <= out.len() {
            out[base + at..base + at + bytes.len()].copy_from_slice(bytes);
        }
    };
    if segment_size >= base + hidden::GRID_DIMS + 2 {
        let (g, b) = (launch.grid, launch.block);
        for (i, v) in [g.0, g.1, g.2].into_iter().enumerate() {
            put(&mut out, hidden::BLOCK_COUNT + 4 * i, &v.to_le_bytes());
        }
        for (i, v) in [b.0, b.1, b.2].into_iter().enumerate() {
            put(&mut out, hidden::GROUP_SIZE + 2 * i, &(v as u16).to_le_bytes());
            put(&mut out, hidden::REMAINDER + 2 * i, &0u16.to_le_bytes());
        }
        put(&mut out, hidden::GRID_DIMS, &launch.dimensions().to_le_bytes());
        put(&mut out, hidden::QUEUE_PTR, &queue_ptr.to_le_bytes());
    }
    Ok(out)
}

/// The dispatch packet for `launch` (header left out: see
/// [`aql::kernel_dispatch_header`], published last).
///
/// ```
/// use rpc_runtime::hsa::{dispatch_packet, Launch};
/// let l = Launch { grid: (4, 2, 1), block: (64, 1, 1), ..Launch::default() };
/// let p = dispatch_packet(&l, 0xdead, 0x2000, 0x3000, 16, 0).unwrap();
/// assert_eq!((p.grid_size_x, p.grid_size_y, p.grid_size_z), (256, 2, 1));
/// assert_eq!(p.setup, 2);
/// assert_eq!(p.header, 0);
/// ```
pub fn dispatch_packet(
    launch: &Launch,
    kernel_object: u64,
    kernarg_address: u64,
    completion_signal: u64,
    private_segment_size: u32,
    group_segment_size: u32,
) -> Result<aql::KernelDispatchPacket, HsaError> {
    launch.validate()?;
    let (g, b) = (launch.grid, launch.block);
    let items = |blocks: u32, threads: u32, axis: &str| {
        blocks.checked_mul(threads).ok_or_else(|| {
            HsaError::config(format!(
                "{blocks} workgroups of {threads} work-items overflow the {axis} grid size (u32 work-items)"
            ))
        })
    };
    let group = group_segment_size
        .checked_add(launch.shared_mem_bytes)
        .ok_or_else(|| HsaError::config("group segment size overflows"))?;
    Ok(aql::KernelDispatchPacket {
        header: 0,
        setup: launch.dimensions() << aql::SETUP_DIMENSIONS,
        workgroup_size_x: b.0 as u16,
        workgroup_size_y: b.1 as u16,
        workgroup_size_z: b.2 as u16,
        reserved0: 0,
        grid_size_x: items(g.0, b.0, "x")?,
        grid_size_y: items(g.1, b.1, "y")?,
        grid_size_z: items(g.2, b.2, "z")?,
        private_segment_size,
        group_segment_size: group,
        kernel_object,
        kernarg_address,
        reserved2: 0,
        completion_signal,
    })
}

// ---------------------------------------------------------------------------
// Launching
// ---------------------------------------------------------------------------

/// How to launch a kernel and serve it (the same fields as
/// [`cuda::Launch`](crate::cuda)); `grid` counts workgroups, `block`
/// work-items per workgroup.
///
/// ```
/// use rpc_runtime::hsa::Launch;
/// let l = Launch { grid: (2, 1, 1), block: (96, 1, 1), ..Launch::default() };
/// assert_eq!(l.wavefronts(64), 2 * 2);
/// assert_eq!(l.server_threads, 2);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// Workgroups in the grid `(x, y, z)`.
    pub grid: (u32, u32, u32),
    /// Work-items per workgroup `(x, y, z)`; each at most 65535 (AQL packs
    /// them in 16 bits), 1024 in total on current GPUs.
    pub block: (u32, u32, u32),
    /// Dynamic group (LDS) memory per workgroup, in bytes.
    pub shared_mem_bytes: u32,
    /// Ports of the region [`launch`] creates (it uses
    /// `min(port_count, wavefronts)`); ignored by [`launch_with_region`].
    pub port_count: u32,
    /// Host server threads. Default 2, as on CUDA (one slow call does not
    /// stall the other ports).
    pub server_threads: usize,
}

impl Default for Launch {
    fn default() -> Self {
        Launch {
            grid: (1, 1, 1),
            block: (64, 1, 1),
            shared_mem_bytes: 0,
            port_count: DEFAULT_PORT_COUNT,
            server_threads: 2,
        }
    }
}

impl Launch {
    /// Wavefronts in the grid for a wavefront size.
    ///
    /// ```
    /// let l = rpc_runtime::hsa::Launch { grid: (4, 2, 1), block: (65, 1, 1), ..Default::default() };
    /// assert_eq!(l.wavefronts(64), 8 * 2);
    /// assert_eq!(l.wavefronts(32), 8 * 3);
    /// ```
    pub fn wavefronts(&self, wave: u32) -> u64 {
        let blocks = self.grid.0 as u64 * self.grid.1 as u64 * self.grid.2 as u64;
        let items = self.block.0 as u64 * self.block.1 as u64 * self.block.2 as u64;
        blocks * items.div_ceil(wave.max(1) as u64)
    }

    /// The dispatch's dimension count: 3 if anything spans z, else 2 if
    /// anything spans y, else 1.
    ///
    /// ```
    /// use rpc_runtime::hsa::Launch;
    /// assert_eq!(Launch::default().dimensions(), 1);
    /// assert_eq!(Launch { grid: (1, 2, 1), ..Launch::default() }.dimensions(), 2);
    /// assert_eq!(Launch { block: (8, 8, 2), ..Launch::default() }.dimensions(), 3);
    /// ```
    pub fn dimensions(&self) -> u16 {
        let (g, b) = (self.grid, self.block);
        if g.2 > 1 || b.2 > 1 {
            3
        } else if g.1 > 1 || b.1 > 1 {
            2
        } else {
            1
        }
    }

    fn validate(&self) -> Result<(), HsaError> {
        let (g, b) = (self.grid, self.block);
        if g.0 == 0 || g.1 == 0 || g.2 == 0 || b.0 == 0 || b.1 == 0 || b.2 == 0 {
            return Err(HsaError::config(format!(
                "grid {g:?} and block {b:?} must not have a zero dimension"
            )));
        }
        if b.0 > u16::MAX as u32 || b.1 > u16::MAX as u32 || b.2 > u16::MAX as u32 {
            return Err(HsaError::config(format!(
                "block {b:?}: an AQL packet holds at most 65535 work-items per dimension"
            )));
        }
        Ok(())
    }
}

/// An HSA signal, destroyed on drop.
struct SignalGuard {
    api: &'static Api,
    raw: Signal,
}

impl SignalGuard {
    fn new(api: &'static Api, initial: i64) -> Result<Self, HsaError> {
        let mut raw = Signal::default();
        // SAFETY: no consumer list (any agent may wait); `raw` is a valid place.
        let r = unsafe { (api.signal_create)(initial, 0, std::ptr::null(), &mut raw) };
        check(api, "creating the completion signal", r)?;
        Ok(SignalGuard { api, raw })
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once, after the kernel using it
        // completed (or was never dispatched).
        let _ = unsafe { (self.api.signal_destroy)(self.raw) };
    }
}

/// A queue and its error slot, destroyed on drop.
struct QueueGuard {
    api: &'static Api,
    raw: *mut ffi::Queue,
    /// The first error the runtime reported for the queue (0: none). Boxed so
    /// its address, handed to the runtime's callback, stays put.
    error: Box<AtomicU32>,
}

extern "C" fn queue_error(status: Status, _queue: *mut ffi::Queue, data: *mut c_void) {
    // SAFETY: `data` is the `AtomicU32` boxed in the `QueueGuard`, which
    // outlives the queue (destroyed in its `Drop` before the box is freed).
    let slot = unsafe { &*data.cast::<AtomicU32>() };
    // Release: pairs with the launcher's acquire load; no other data is
    // published, but it keeps the first error. The CAS keeps the first one.
    let _ = slot.compare_exchange(0, status.max(1), Ordering::Release, Ordering::Relaxed);
}

impl QueueGuard {
    fn new(device: &HsaDevice) -> Result<Self, HsaError> {
        let api = device.api();
        let error = Box::new(AtomicU32::new(0));
        let mut raw: *mut ffi::Queue = std::ptr::null_mut();
        // SAFETY: the callback's data is the boxed atomic, alive until after
        // `hsa_queue_destroy`; u32::MAX segment sizes let the runtime choose;
        // `raw` is a valid place for the result.
        let r = unsafe {
            (api.queue_create)(
                device.inner.gpu,
                device.inner.queue_size,
                ffi::QUEUE_TYPE_SINGLE,
                Some(queue_error),
                (&*error as *const AtomicU32).cast_mut().cast(),
                u32::MAX,
                u32::MAX,
                &mut raw,
            )
        };
        check(api, "creating a queue", r)?;
        if raw.is_null() {
            return Err(HsaError::config("the runtime returned a null queue"));
        }
        Ok(QueueGuard { api, raw, error })
    }

    fn error(&self) -> Status {
        // Acquire: pairs with the callback's release CAS.
        self.error.load(Ordering::Acquire)
    }

    /// Write `packet` into the next slot, publish its header, ring the
    /// doorbell.
    fn dispatch(&self, packet: &aql::KernelDispatchPacket, setup_header: u32) {
        let api = self.api;
        // SAFETY: `raw` is a live queue created by the runtime; its fields are
        // read-only for us.
        let (base, size, doorbell) = unsafe {
            let q = &*self.raw;
            (
                q.base_address.cast::<aql::KernelDispatchPacket>(),
                q.size as u64,
                q.doorbell_signal,
            )
        };
        // SAFETY: a live queue; reserving one slot.
        let index = unsafe { (api.queue_add_write_index)(self.raw, 1) };
        // Wait until the slot is free (the packet processor has read the
        // packet that used it `size` dispatches ago).
        // SAFETY: a live queue.
        while index - unsafe { (api.queue_load_read_index)(self.raw) } >= size {
            std::thread::yield_now();
        }
        // SAFETY: `index % size` is a slot of the ring buffer (`size` packets
        // of 64 bytes at `base`), reserved for us above and free; its header
        // still says INVALID, so the packet processor ignores it while the
        // body is written.
        let slot = unsafe { base.add((index % size) as usize) };
        // SAFETY: as above; the body (bytes 4..64) is written first.
        unsafe {
            let mut body = *packet;
            body.header = aql::PACKET_TYPE_INVALID << aql::HEADER_TYPE;
            body.setup = 0;
            std::ptr::copy_nonoverlapping(
                (&body as *const aql::KernelDispatchPacket).cast::<u8>().add(4),
                slot.cast::<u8>().add(4),
                60,
            );
        }
        // SAFETY: the slot's first 4 bytes are 4-aligned (the ring is
        // 64-byte aligned) and only accessed atomically by us and the
        // packet processor from now on.
        let word = unsafe { AtomicU32::from_ptr(slot.cast::<u32>()) };
        // Release: the body written above is visible to the packet processor
        // before the header that makes the packet valid (the AQL protocol).
        word.store(setup_header, Ordering::Release);
        // SAFETY: the queue's doorbell signal; storing the packet index rings it.
        unsafe { (api.signal_store)(doorbell, index as i64) };
    }
}

impl Drop for QueueGuard {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once, after its kernel
        // completed; the callback data (`error`) is freed only after this.
        let _ = unsafe { (self.api.queue_destroy)(self.raw) };
    }
}

/// One server thread: as in the CUDA backend.
fn serve(
    region: &HsaRegion,
    dispatcher: &Dispatcher,
    done: &AtomicBool,
    t: u32,
    threads: u32,
) -> Result<u64, Abandoned> {
    let server = region.server().with_abort(done);
    dispatcher.serve_until(&server, t, threads, done, SERVER_IDLE_SPINS)
}

/// Dispatch and wait until the completion signal fires or the queue reports
/// an error. When this returns, the kernel is not running (or never started).
fn run_kernel(kernel: &Kernel<'_>, launch: &Launch, desc_ptr: u64, extra: &[KernelArg]) -> Result<(), HsaError> {
    let device = kernel.module.device();
    let api = device.api();
    let queue = QueueGuard::new(device)?;
    let signal = SignalGuard::new(api, 1)?;
    let args = kernarg_segment(desc_ptr, extra, kernel.kernarg_size as usize, launch, queue.raw as u64).map_err(
        |e| match e {
            HsaError::InvalidConfig { message } => HsaError::KernelSignature {
                kernel: kernel.name.clone(),
                message,
            },
            e => e,
        },
    )?;
    let kernarg = HsaBuffer::from_pool(device, device.inner.kernarg_pool, args.len().max(16))?;
    if kernarg.device_ptr() % (kernel.kernarg_align.max(16) as u64) != 0 {
        return Err(HsaError::config(
            "the kernarg allocation is not aligned as the kernel needs",
        ));
    }
    // SAFETY: `kernarg` holds at least `args.len()` bytes and nothing else
    // uses it yet.
    unsafe { std::ptr::copy_nonoverlapping(args.as_ptr(), kernarg.host_ptr(), args.len()) };
    let packet = dispatch_packet(
        launch,
        kernel.object,
        kernarg.device_ptr(),
        signal.raw.handle,
        kernel.private_size,
        kernel.group_size,
    )?;
    queue.dispatch(&packet, aql::header_word(aql::kernel_dispatch_header(), packet.setup));
    loop {
        // SAFETY: a live signal; wait (blocked, about a millisecond at a
        // time) until its value drops below 1: the packet completed.
        let v = unsafe {
            (api.signal_wait)(
                signal.raw,
                ffi::SIGNAL_CONDITION_LT,
                1,
                1_000_000,
                ffi::WAIT_STATE_BLOCKED,
            )
        };
        if v < 1 {
            return Ok(());
        }
        let err = queue.error();
        if err != 0 {
            return Err(HsaError::Kernel {
                kernel: kernel.name.clone(),
                code: err,
                name: status_name(err).to_string(),
                message: format!(
                    "{} (the queue is in an error state: a memory fault, a trap such as a device-side panic, or an invalid packet)",
                    status_message(api, err)
                ),
            });
        }
    }
}

/// Launch `kernel(desc, extra...)` on a fresh region of
/// `min(launch.port_count, wavefronts)` ports and serve its calls with
/// `dispatcher` on `launch.server_threads` host threads until the kernel has
/// finished and every call has been served. The API mirrors
/// [`cuda::launch`](crate::cuda); the kernel's first parameter is a
/// `*const ClientDesc` (see the [module docs](self)).
///
/// A kernel that never finishes blocks this call (no timeout: memory a
/// running kernel uses cannot be freed). A queue error (memory fault, trap)
/// ends it with [`HsaError::Kernel`], although ROCm usually aborts the
/// process itself on a GPU memory fault.
///
/// ```no_run
/// use rpc_runtime::hsa::{launch, HsaBuffer, HsaDevice, KernelArg, Launch, Module};
/// use rpc_runtime::server::{Dispatcher, ServerConfig};
/// let dev = HsaDevice::new(0)?;
/// let module = Module::from_file(&dev, "kernels.hsaco")?;
/// let kernel = module.kernel("rpc_noop_kernel")?;
/// let out = HsaBuffer::new(&dev, 64 * 8)?;
/// let d = Dispatcher::new(ServerConfig::default());
/// let report = launch(&kernel, &Launch::default(), &d, &[KernelArg::U32(10), KernelArg::Ptr(out.device_ptr())])?;
/// assert_eq!(report.errors, 0);
/// # Ok::<(), rpc_runtime::hsa::HsaError>(())
/// ```
pub fn launch(
    kernel: &Kernel<'_>,
    launch: &Launch,
    dispatcher: &Dispatcher,
    extra: &[KernelArg],
) -> Result<Report, HsaError> {
    launch.validate()?;
    let device = kernel.module.device();
    let waves = launch.wavefronts(device.wavefront_size());
    let ports = waves.min(launch.port_count as u64).clamp(1, MAX_PORTS as u64) as u32;
    let region = HsaRegion::new(device, ports)?;
    launch_with_region(&region, kernel, launch, dispatcher, extra)
}

/// [`launch`] on an existing region (its port count wins over
/// `launch.port_count`), so a test can check
/// [`is_quiescent`](HsaRegion::is_quiescent) afterwards.
///
/// ```no_run
/// use rpc_runtime::hsa::{launch_with_region, HsaBuffer, HsaDevice, HsaRegion, KernelArg, Launch, Module};
/// use rpc_runtime::server::{Dispatcher, ServerConfig};
/// let dev = HsaDevice::new(0)?;
/// let module = Module::from_file(&dev, "kernels.hsaco")?;
/// let kernel = module.kernel("rpc_noop_kernel")?;
/// let region = HsaRegion::new(&dev, 16)?;
/// let out = HsaBuffer::new(&dev, 256 * 8)?;
/// let d = Dispatcher::new(ServerConfig::default());
/// let cfg = Launch { grid: (4, 1, 1), block: (64, 1, 1), server_threads: 2, ..Launch::default() };
/// launch_with_region(&region, &kernel, &cfg, &d, &[KernelArg::U32(10), KernelArg::Ptr(out.device_ptr())])?;
/// assert!(region.is_quiescent()?);
/// # Ok::<(), rpc_runtime::hsa::HsaError>(())
/// ```
pub fn launch_with_region(
    region: &HsaRegion,
    kernel: &Kernel<'_>,
    launch: &Launch,
    dispatcher: &Dispatcher,
    extra: &[KernelArg],
) -> Result<Report, HsaError> {
    launch.validate()?;
    if !region.device().same_agent(kernel.module.device()) {
        return Err(HsaError::config(format!(
            "the region is on GPU agent {} but kernel `{}` is loaded on agent {}",
            region.device().index(),
            kernel.name,
            kernel.module.device().index()
        )));
    }
    let start = Instant::now();
    let errors_before = dispatcher.error_count();
    let done = AtomicBool::new(false);
    let threads = launch.server_threads.clamp(1, u32::MAX as usize) as u32;
    let desc_ptr = region.desc_ptr();

    let (ran, abandoned, calls) = std::thread::scope(|s| {
        let stop = StopOnDrop(&done);
        let mut refused = None;
        let servers: Vec<_> = (0..threads)
            .filter_map(|t| {
                let done = &done;
                // A missing server thread's ports are served by the others.
                crate::spawn::scoped(s, format!("gpu_rpc server {t}"), move || {
                    serve(region, dispatcher, done, t, threads)
                })
                .map_err(|e| refused = Some(e))
                .ok()
            })
            .collect();
        let ran = match (servers.is_empty(), refused) {
            (true, Some(e)) => Err(HsaError::config(format!("no server thread could be started: {e}"))),
            _ => run_kernel(kernel, launch, desc_ptr, extra),
        };
        drop(stop);
        let mut abandoned = None;
        let mut calls = 0;
        for h in servers {
            match h.join() {
                Ok(Ok(n)) => calls += n,
                Ok(Err(a)) => abandoned = Some(a),
                Err(p) => resume_unwind(p),
            }
        }
        (ran, abandoned, calls)
    });
    ran?;
    if let Some(a) = abandoned {
        return Err(HsaError::Abandoned {
            kernel: kernel.name.clone(),
            abandoned: a,
        });
    }
    Ok(Report {
        calls,
        errors: dispatcher.error_count() - errors_before,
        elapsed: start.elapsed(),
        kernel_time: None,
        port_count: region.layout.port_count(),
    })
}

#[cfg(test)]
mod tests {
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
