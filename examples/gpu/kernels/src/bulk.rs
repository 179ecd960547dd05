//! Bulk-data kernels (NVPTX): the every-byte check of large slices both
//! ways, and the bandwidth benchmark's kernel.

use core::slice;

use gpu_example_services::bulk::{self, BulkClient};
use gpu_example_services::BenchClient;
use gpu_rpc::protocol::{Client, ClientDesc};

use crate::nvptx::gid;

/// Bytes per slice the check walks; lane `g` starts at entry `g`, so every
/// call mixes lanes that go direct (2048 bytes and more, in global memory)
/// with lanes that send packets.
const SIZES: [usize; 8] = [0, 1, 63, 2047, 2048, 2049, 4096 + 5, 65_536 + 7];

/// Bytes of the stack slice the check sends (local memory: always packets,
/// however long).
const LOCAL: usize = 2560;

/// Every byte of large slices, both ways: for each size (every size of
/// [`SIZES`], or only `one_size` when it is not `u64::MAX`) each thread
/// writes the pattern into its own `stride` bytes of `data` at an odd
/// offset and has the host check it (`check_bytes`), reads it back (so the
/// old bytes sit in its cache) and has the host overwrite it
/// (`give_bytes`), then checks every byte; then has the host write half of
/// it (`give_half`: the out-buffer must come zeroed, and the other half
/// arrive as zeros); the same with `u32` elements in and `u64` elements out. Writes the thread's count of wrong bytes and
/// results to `out[gid]`.
///
/// # Safety
/// `data` has `stride` bytes per thread (a multiple of 8, at least the
/// largest size + 16); `out` one `u64` per thread.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn rpc_bulk_check_kernel(
    desc: ClientDesc,
    data: *mut u8,
    stride: u64,
    one_size: u64,
    out: *mut u64,
) {
    let (g, _) = gid();
    // SAFETY: the host passed a live descriptor.
    let client = unsafe { Client::from_desc(&desc) };
    let host = BulkClient::new(&client);
    // SAFETY: `stride` bytes per thread.
    let mine = unsafe { data.add(g * stride as usize) };
    let mut bad = 0u64;
    let steps = if one_size == u64::MAX { SIZES.len() } else { 1 };
    for k in 0..steps {
        let n = if one_size == u64::MAX {
            SIZES[(k + g) % SIZES.len()]
        } else {
            one_size as usize
        };
        let seed = (g as u64) << 32 | k as u64;
        // SAFETY: `k % 8 + n <= stride`: this thread's bytes, no one else's.
        let bytes = unsafe { slice::from_raw_parts_mut(mine.add(k % 8 + 1), n) };
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = bulk::byte(seed, i as u64);
        }
        bad += host.check_bytes(seed, bytes);
        let old: u64 = bytes.iter().map(|&b| b as u64).sum();
        core::hint::black_box(old);
        bad += (host.give_bytes(!seed, bytes) != n as u64) as u64;
        bad += bytes
            .iter()
            .enumerate()
            .filter(|&(i, &b)| b != bulk::byte(!seed, i as u64))
            .count() as u64;
        // Half of it written by the host: the out-buffer came zeroed (the
        // host memory lent for it held the bytes of earlier calls), and the
        // half left unwritten arrives as zeros.
        bad += host.give_half(seed ^ 5, bytes);
        bad += bytes
            .iter()
            .enumerate()
            .filter(|&(i, &b)| b != if i < n / 2 { bulk::byte(seed ^ 5, i as u64) } else { 0 })
            .count() as u64;
        // `u32`s in, `u64`s out, at 8-aligned addresses.
        // SAFETY: `8 + 4 * (n / 4 + 1) <= stride`, 4-aligned.
        let halves = unsafe { slice::from_raw_parts_mut(mine.add(8).cast::<u32>(), n / 4 + 1) };
        for (i, w) in halves.iter_mut().enumerate() {
            *w = bulk::word(seed, i as u64) as u32;
        }
        bad += host.check_halves(seed, halves);
        // SAFETY: `8 * (n / 8 + 1) <= stride`, 8-aligned.
        let words = unsafe { slice::from_raw_parts_mut(mine.cast::<u64>(), n / 8 + 1) };
        bad += (host.give_words(seed + 1, words) != words.len() as u64) as u64;
        bad += words
            .iter()
            .enumerate()
            .filter(|&(i, &w)| w != bulk::word(seed + 1, i as u64))
            .count() as u64;
    }
    // SAFETY: one slot per thread.
    unsafe { *out.add(g) = bad };
}

/// A slice on the stack, longer than the direct threshold, both ways: local
/// memory, which only the lane can address, so it always goes in packets.
/// Writes the thread's count of wrong bytes and results to `out[gid]`. Its
/// [`LOCAL`]-byte array takes the kernel past the stack budget of the other
/// kernels; the host raises the stack limit before launching it.
///
/// # Safety
/// `desc` describes a live region; `out` has one `u64` per thread.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn rpc_bulk_local_kernel(desc: ClientDesc, out: *mut u64) {
    let (g, _) = gid();
    // SAFETY: the host passed a live descriptor.
    let client = unsafe { Client::from_desc(&desc) };
    let host = BulkClient::new(&client);
    let mut local = [0u8; LOCAL];
    let seed = 7 << 56 | g as u64;
    for (i, b) in local.iter_mut().enumerate() {
        *b = bulk::byte(seed, i as u64);
    }
    let mut bad = host.check_bytes(seed, &local);
    bad += (host.give_bytes(!seed, &mut local) != LOCAL as u64) as u64;
    bad += local
        .iter()
        .enumerate()
        .filter(|&(i, &b)| b != bulk::byte(!seed, i as u64))
        .count() as u64;
    // SAFETY: one slot per thread.
    unsafe { *out.add(g) = bad };
}

/// The bandwidth benchmark: each thread moves its own `bytes` of `data`
/// (`data + gid * bytes`) `iters` times, to the host (`dir & 1 == 0`,
/// `Bench::sink`) or from it (`dir & 1 == 1`, `Bulk::source`), by address
/// or, with `dir & 2`, in packets (the direct path turned off, for the
/// comparison), and writes the bytes the host reported to `out[gid]`.
///
/// # Safety
/// `data` has `bytes` bytes per thread; `out` one `u64` per thread.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn rpc_bulk_kernel(desc: ClientDesc, data: *mut u8, bytes: u64, iters: u32, dir: u32, out: *mut u64) {
    let (g, _) = gid();
    // SAFETY: the host passed a live descriptor and `bytes` per thread.
    let (client, mine) = unsafe {
        (
            Client::from_desc(&desc),
            slice::from_raw_parts_mut(data.add(g * bytes as usize), bytes as usize),
        )
    };
    gpu_rpc::call::set_direct(dir & 2 == 0);
    let mut total = 0;
    for _ in 0..iters {
        total += if dir & 1 == 0 {
            BenchClient::new(&client).sink(mine)
        } else {
            BulkClient::new(&client).source(mine)
        };
    }
    // SAFETY: one slot per thread.
    unsafe { *out.add(g) = total };
}
