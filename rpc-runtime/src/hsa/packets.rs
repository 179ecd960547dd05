//! AQL dispatch packets and kernel arguments (explicit and hidden).

use super::*;

pub mod aql {
    //! The AQL kernel dispatch packet (`hsa_kernel_dispatch_packet_t`) and
    //! the header bits this backend writes, as in `hsa.h`.
    //!
    //! ```
    //! # use rpc_runtime as gpu_rpc;
    //! use gpu_rpc::hsa::aql;
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
    /// # use rpc_runtime as gpu_rpc;
    /// use gpu_rpc::hsa::aql::*;
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
    /// # use rpc_runtime as gpu_rpc;
    /// use gpu_rpc::hsa::aql::*;
    /// assert_eq!(header_word(kernel_dispatch_header(), 3), 0x0003_1502);
    /// ```
    pub const fn header_word(header: u16, setup: u16) -> u32 {
        header as u32 | (setup as u32) << 16
    }
}

/// Byte offsets of the code object v5 hidden arguments, relative to their
/// start (the explicit arguments' end rounded up to 8), from LLVM's AMDGPU
/// usage guide and the metadata of code objects built here.
pub(super) mod hidden {
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
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::hsa::{kernarg_segment, KernelArg, Launch};
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
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::hsa::{dispatch_packet, Launch};
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
