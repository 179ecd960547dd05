//! The parts of `hsa.h` / `hsa_ext_amd.h` this backend uses: types,
//! constants and the function table loaded at run time.

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
    pub queue_create:
        unsafe extern "C" fn(Agent, u32, u32, Option<QueueCallback>, *mut c_void, u32, u32, *mut *mut Queue) -> Status,
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
    pub executable_load: unsafe extern "C" fn(Executable, Agent, CodeObjectReader, *const c_char, *mut u64) -> Status,
    pub executable_freeze: unsafe extern "C" fn(Executable, *const c_char) -> Status,
    pub executable_destroy: unsafe extern "C" fn(Executable) -> Status,
    pub get_symbol: unsafe extern "C" fn(Executable, *const c_char, *const Agent, *mut ExecutableSymbol) -> Status,
    pub symbol_get_info: unsafe extern "C" fn(ExecutableSymbol, u32, *mut c_void) -> Status,
}
