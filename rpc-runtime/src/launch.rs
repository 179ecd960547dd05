//! Pieces the GPU backends share: kernel arguments, the report of a launch
//! and host views of mapped buffers (features `cuda` and `hsa`). The
//! launch-and-serve path itself, which the CPU backend shares too, is
//! `host.rs`.

use std::time::Duration;

/// An extra kernel argument, after the descriptor.
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::launch::KernelArg;
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
    /// # use rpc_runtime as gpu_rpc;
    /// assert_eq!(gpu_rpc::launch::KernelArg::F64(1.0).size(), 8);
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

impl Report {
    /// The report of a run of `host::launch_and_serve` on a region of
    /// `port_count` ports, or its error (`abandoned` makes the error of a
    /// call the servers gave up on).
    pub(crate) fn from_outcome<E>(
        o: crate::host::Outcome<E>,
        port_count: u32,
        abandoned: impl FnOnce(crate::protocol::Abandoned) -> E,
    ) -> Result<Report, E> {
        let kernel_time = o.ran?;
        if let Some(a) = o.abandoned {
            return Err(abandoned(a));
        }
        Ok(Report {
            calls: o.calls,
            errors: o.errors,
            elapsed: o.elapsed,
            kernel_time,
            port_count,
        })
    }
}

/// One kernel launch of a GPU backend's `launch_many`: the region it calls
/// through, the kernel and its configuration, who serves it, its extra
/// arguments. Each backend names it `Job` with its own types
/// ([`cuda::Job`](crate::cuda), [`hsa::Job`](crate::hsa)).
pub struct LaunchJob<'a, R, K, L> {
    /// The region the kernel's client uses (its port count wins over the
    /// launch's `port_count`).
    pub region: &'a R,
    /// The kernel.
    pub kernel: &'a K,
    /// Grid, block and server threads.
    pub launch: &'a L,
    /// Serves this launch's calls and keeps its error log (give each job its
    /// own dispatcher to keep their counts and errors apart).
    pub dispatcher: &'a crate::server::Dispatcher,
    /// Arguments after the descriptor.
    pub extra: &'a [KernelArg],
}

/// Server threads of a pool serving several launches: the most any of them
/// asks for (at least one).
pub(crate) fn pool_threads(wanted: impl Iterator<Item = usize>) -> u32 {
    wanted.max().unwrap_or(1).clamp(1, u32::MAX as usize) as u32
}

/// Host memory a GPU also reads and writes (CUDA's pinned mapped buffers,
/// HSA's fine-grained ones): the host-side views both backends' buffers
/// share. Bring it into scope to read kernel outputs or fill kernel inputs.
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::launch::MappedBuffer;
/// struct Words(Vec<u8>);
/// impl MappedBuffer for Words {
///     fn mapped_ptr(&self) -> *mut u8 { self.0.as_ptr() as *mut u8 }
///     fn mapped_len(&self) -> usize { self.0.len() }
/// }
/// let mut w = Words(vec![0; 16]);
/// // SAFETY: nothing else uses the memory.
/// unsafe { w.as_mut_slice()[8..].copy_from_slice(&7u64.to_le_bytes()) };
/// assert_eq!(unsafe { w.read_u64(1) }, 7);
/// ```
pub trait MappedBuffer {
    /// The host address of the memory.
    fn mapped_ptr(&self) -> *mut u8;
    /// Its size in bytes.
    fn mapped_len(&self) -> usize;

    /// The buffer's bytes.
    ///
    /// # Safety
    /// No kernel (and no other thread) may write the buffer while the slice
    /// lives; the backends' `launch` returns only after its kernel finished.
    unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: `mapped_len` initialized bytes at `mapped_ptr`, owned by
        // `self`; the caller rules out concurrent writers.
        unsafe { std::slice::from_raw_parts(self.mapped_ptr(), self.mapped_len()) }
    }

    /// The buffer's bytes, writable (e.g. to fill a kernel's input).
    ///
    /// # Safety
    /// No kernel (and no other thread) may access the buffer while the slice
    /// lives.
    unsafe fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, with `&mut self` excluding other host
        // views through this buffer.
        unsafe { std::slice::from_raw_parts_mut(self.mapped_ptr(), self.mapped_len()) }
    }

    /// The `index`-th little-endian `u64` (convenience for kernel outputs).
    ///
    /// # Safety
    /// As [`as_slice`](Self::as_slice).
    unsafe fn read_u64(&self, index: usize) -> u64 {
        // SAFETY: forwarded to the caller.
        let bytes = unsafe { self.as_slice() };
        u64::from_le_bytes(bytes[index * 8..index * 8 + 8].try_into().expect("8 bytes"))
    }
}
