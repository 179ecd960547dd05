//! Shared pieces of the GPU example programs.

/// The example kernels as PTX for sm_90 (empty when no device toolchain was
/// found at build time).
pub const KERNELS_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/kernels.ptx"));

/// The PTX, or a message saying why there is none.
pub fn kernels_ptx() -> Result<&'static str, String> {
    if KERNELS_PTX.trim().is_empty() {
        Err("the example kernels were not built (no nvptx64 toolchain at build time; see README)".into())
    } else {
        Ok(KERNELS_PTX)
    }
}
