//! The HSA backend on a machine without ROCm: every entry point must return a
//! clean error that names the library and says how to install it (no panic,
//! no crash). On a machine with ROCm these tests only check that the calls
//! return.
#![cfg(feature = "hsa")]

mod support;

use rpc_runtime::hsa::{runtime_available, HsaDevice, HsaError, LIBRARY_NAMES};

#[test]
fn device_new_without_runtime_is_a_clear_error() {
    if runtime_available() {
        support::skipped("libhsa-runtime64 is installed here; the missing-library path cannot be observed");
        let _ = HsaDevice::new(0);
        return;
    }
    let e = HsaDevice::new(0).unwrap_err();
    assert!(matches!(e, HsaError::LibraryNotFound { .. }), "{e:?}");
    let text = e.to_string();
    for needle in [
        "gpu_rpc hsa:",
        "libhsa-runtime64",
        LIBRARY_NAMES[0],
        "install ROCm",
        "LD_LIBRARY_PATH",
        "GPU_RPC_HSA_LIBRARY",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in: {text}");
    }
    // The failure is cached and repeatable, and every other entry point gives
    // the same error.
    assert_eq!(HsaDevice::new(3).unwrap_err(), e);
    assert_eq!(HsaDevice::count().unwrap_err(), e);
}

#[test]
fn runtime_probe_never_panics() {
    let a = runtime_available();
    assert_eq!(a, runtime_available());
}
