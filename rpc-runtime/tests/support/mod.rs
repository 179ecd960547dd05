//! Shared by the GPU tests of this crate: saying that a test is skipped so a
//! person sees it, and finding the CUDA device.

#![allow(dead_code)]

use std::io::Write;

/// Print `skipped: <test>: <why>` straight to the process's stderr: libtest
/// hides `eprintln!` output of passing tests, and a skipped GPU test would
/// otherwise read as a plain `ok`.
pub fn skipped(why: &str) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("test");
    let _ = writeln!(std::io::stderr().lock(), "skipped: {test}: {why}");
}

/// CUDA device 0, or `None` (after saying why the test is skipped) when
/// there is no driver or no device. Any other failure is a test failure.
#[cfg(feature = "cuda")]
pub fn gpu() -> Option<rpc_runtime::cuda::CudaDevice> {
    use rpc_runtime::cuda::{driver_available, CudaDevice, CudaError};
    if !driver_available() {
        skipped("no CUDA driver (libcuda could not be loaded)");
        return None;
    }
    match CudaDevice::new(0) {
        Ok(d) => Some(d),
        Err(CudaError::Driver { name, .. }) if name == "CUDA_ERROR_NO_DEVICE" => {
            skipped("no CUDA device (the driver reports none)");
            None
        }
        Err(e) => panic!("CUDA device 0 unusable: {e}"),
    }
}
