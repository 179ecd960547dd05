//! Loading the HSA runtime library at run time and checking its status
//! codes.

use std::ffi::{c_char, CStr};
use std::sync::OnceLock;

use super::ffi::{Api, Status};
use super::*;

/// Names of the `hsa_status_t` values (from `hsa.h`).
pub(super) fn status_name(code: Status) -> &'static str {
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

pub(super) fn status_message(api: &Api, code: Status) -> String {
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

pub(super) fn check(api: &Api, what: &str, code: Status) -> Result<(), HsaError> {
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

pub(super) fn load_api() -> Result<Api, HsaError> {
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

pub(super) fn api() -> Result<&'static Api, HsaError> {
    static API: OnceLock<Result<Api, HsaError>> = OnceLock::new();
    API.get_or_init(load_api).as_ref().map_err(Clone::clone)
}

/// Whether the ROCm runtime library can be loaded and initialized on this
/// machine (probed once, never panics).
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// // With or without ROCm, this only answers.
/// let _ = gpu_rpc::hsa::runtime_available();
/// ```
pub fn runtime_available() -> bool {
    api().is_ok()
}
