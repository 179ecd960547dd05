//! Pieces the GPU backends share: kernel arguments, the report of a launch,
//! and the flag that stops server threads (features `cuda` and `hsa`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// An extra kernel argument, after the descriptor.
///
/// ```
/// use rpc_runtime::launch::KernelArg;
/// assert_eq!(KernelArg::U32(7).size(), 4);
/// assert_eq!(KernelArg::Ptr(0x1000).size(), 8);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KernelArg {
    /// A `u32` (`.param .u32` on NVPTX).
    U32(u32),
    /// An `i32`.
    I32(i32),
    /// An `f32`.
    F32(f32),
    /// A `u64`.
    U64(u64),
    /// An `i64`.
    I64(i64),
    /// An `f64`.
    F64(f64),
    /// A device address (a pinned buffer's `device_ptr()`).
    Ptr(u64),
}

impl KernelArg {
    /// Size (and alignment) of the parameter in bytes.
    ///
    /// ```
    /// assert_eq!(rpc_runtime::launch::KernelArg::F64(1.0).size(), 8);
    /// ```
    pub fn size(&self) -> usize {
        match self {
            KernelArg::U32(_) | KernelArg::I32(_) | KernelArg::F32(_) => 4,
            KernelArg::U64(_) | KernelArg::I64(_) | KernelArg::F64(_) | KernelArg::Ptr(_) => 8,
        }
    }

    /// The value's bits in the low bytes of a `u64` (little-endian, so a
    /// pointer to the `u64` is a pointer to a 4-byte value too).
    pub(crate) fn bits(&self) -> u64 {
        match *self {
            KernelArg::U32(v) => v as u64,
            KernelArg::I32(v) => v as u32 as u64,
            KernelArg::F32(v) => v.to_bits() as u64,
            KernelArg::U64(v) | KernelArg::Ptr(v) => v,
            KernelArg::I64(v) => v as u64,
            KernelArg::F64(v) => v.to_bits(),
        }
    }
}

/// What a launch did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// Calls served (each warp- or wavefront-call counts once).
    pub calls: u64,
    /// Errors the server recorded.
    pub errors: u64,
    /// Wall time from before the launch until the last call was served.
    pub elapsed: Duration,
    /// GPU time of the kernel, when the backend measured it (CUDA: events
    /// around the launch; HSA: not yet).
    pub kernel_time: Option<Duration>,
    /// Ports of the region.
    pub port_count: u32,
}

/// Sets the flag when dropped, so server threads stop even if the launching
/// thread unwinds.
pub(crate) struct StopOnDrop<'a>(pub(crate) &'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        // Release: pairs with the servers' acquire load in
        // `Dispatcher::serve_until`.
        self.0.store(true, Ordering::Release);
    }
}
