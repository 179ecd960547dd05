//! The example kernels for AMD GPUs (`amdgcn-amd-amdhsa`, wave64: `gfx90a`,
//! `gfx942`), with the same names and parameters as the NVPTX ones, so one
//! host program (or `gpu-run`) can launch either.
//!
//! Thread ids come from `core::arch::amdgpu`; the workgroup and grid sizes
//! from the HSA kernel dispatch packet (`core::intrinsics::gpu::amdgpu_dispatch_ptr`):
//! `workgroup_size_x: u16` at byte 4, `grid_size_x: u32` at byte 12 (in
//! work-items, as HSA counts them). Built and disassembled here; nothing of it
//! has run on AMD hardware yet.
//!
//! # The descriptor is passed by pointer
//!
//! The NVPTX kernels take the 24-byte `ClientDesc` by value. rustc's
//! `gpu-kernel` ABI on amdgcn passes such a struct *indirectly* (the code
//! object metadata lists the parameter as an 8-byte `global_buffer`, not a
//! 24-byte `by_value`), so these kernels say so: their first parameter is
//! `*const ClientDesc`, and `rpc_runtime::hsa` passes the address of a
//! descriptor it keeps in GPU-visible memory. A pointer's kernarg layout does
//! not depend on how rustc lowers aggregates.

use core::arch::amdgpu::{workgroup_id_x, workitem_id_x};
use crate::line::Line;
use core::sync::atomic::{AtomicU32, Ordering};
use gpu_example_services::{BenchClient, HostServicesClient};
use gpu_rpc::protocol::{Client, ClientDesc};

/// Workgroup size (x) and grid size (x, work-items) from the dispatch packet.
#[inline(always)]
fn dims() -> (u32, u32) {
    let p = core::intrinsics::gpu::amdgpu_dispatch_ptr() as *const u8;
    // SAFETY: a `gpu-kernel` is always launched by an AQL kernel dispatch
    // packet that stays valid while the kernel runs (HSA system architecture
    // spec); `workgroup_size_x` is a `u16` at byte 4 and `grid_size_x` a `u32`
    // at byte 12, both naturally aligned (the packet is 64-byte aligned).
    unsafe { ((p.add(4) as *const u16).read() as u32, (p.add(12) as *const u32).read()) }
}

/// Global 1-D work-item index and work-item count (x dimension).
#[inline(always)]
fn gid() -> (usize, usize) {
    let (wg, grid) = dims();
    ((workgroup_id_x() * wg + workitem_id_x()) as usize, grid as usize)
}

/// Each work-item makes `iters` runtime no-op calls (`x -> x + 1`) starting
/// from its global index and writes the result to `out[gid]`.
///
/// # Safety
/// `desc` points to a descriptor of a live region; `out` has one `u64` per
/// work-item.
#[no_mangle]
pub unsafe extern "gpu-kernel" fn rpc_noop_kernel(desc: *const ClientDesc, iters: u32, out: *mut u64) {
    let (g, _) = gid();
    // SAFETY: the host passed a live descriptor.
    let client = unsafe { Client::from_desc(&*desc) };
    let mut x = g as u64;
    for _ in 0..iters {
        x = match client.noop(x) {
            Ok(y) => y,
            Err(_) => u64::MAX / 2,
        };
    }
    // SAFETY: one slot per work-item.
    unsafe { *out.add(g) = x };
}

/// Like `rpc_noop_kernel` through the generated `Bench::incr` stub.
///
/// # Safety
/// As `rpc_noop_kernel`.
#[no_mangle]
pub unsafe extern "gpu-kernel" fn rpc_incr_kernel(desc: *const ClientDesc, iters: u32, out: *mut u64) {
    let (g, _) = gid();
    // SAFETY: the host passed a live descriptor.
    let client = unsafe { Client::from_desc(&*desc) };
    let bench = BenchClient::new(&client);
    let mut x = g as u64 * 1_000_000;
    for _ in 0..iters {
        x = bench.incr(x);
    }
    // SAFETY: one slot per work-item.
    unsafe { *out.add(g) = x };
}

/// Each work-item prints one short line through `HostServices::print_stderr`
/// (`async_ == 0`) or `Bench::log` (`async_ != 0`).
///
/// # Safety
/// `desc` describes a live region.
#[no_mangle]
pub unsafe extern "gpu-kernel" fn rpc_print_kernel(desc: *const ClientDesc, async_: u32) {
    let (g, _) = gid();
    // SAFETY: the host passed a live descriptor.
    let client = unsafe { Client::from_desc(&*desc) };
    let mut line = Line::new();
    line.str("work-item ").num(g as u64).str(" says hello\n");
    if async_ != 0 {
        BenchClient::new(&client).log(line.as_str());
    } else {
        HostServicesClient::new(&client).print_stderr(line.as_str());
    }
}

static FINISHED: AtomicU32 = AtomicU32::new(0);

/// The hello example: every work-item prints a greeting, adds, reads a block
/// from the host; the last one to finish asks the host to exit with 3.
///
/// # Safety
/// `desc` describes a live region.
#[no_mangle]
pub unsafe extern "gpu-kernel" fn hello_kernel(desc: *const ClientDesc) {
    let (g, n) = gid();
    // SAFETY: the host passed a live descriptor.
    let client = unsafe { Client::from_desc(&*desc) };
    let host = HostServicesClient::new(&client);
    let sum = host.add(g as u64, 1000);
    let mut block = [0u8; 24];
    let got = host.read_block(g as u64 % 8, &mut block);
    let text = core::str::from_utf8(&block[..got.min(block.len())]).unwrap_or("<invalid>");
    let mut line = Line::new();
    let (b, t) = (workgroup_id_x(), workitem_id_x());
    line.str("hello from workgroup ").num(b as u64).str(" work-item ").num(t as u64).str(": ");
    line.num(g as u64).str(" + 1000 = ").num(sum).str(", block says \"").str(text).str("\"");
    host.print_stderr(line.as_str());
    // Relaxed RMW: only "who is last" matters; every print above was a
    // synchronous call the host already completed.
    if FINISHED.fetch_add(1, Ordering::Relaxed) as usize == n - 1 {
        host.exit(3);
    }
}
