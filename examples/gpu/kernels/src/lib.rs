//! Kernels for the GPU examples, benchmarks and checks (`no_std`, NVPTX).
//!
//! Every RPC kernel takes the [`ClientDesc`] the host passes as its first
//! parameter and builds its [`Client`] from it.
#![no_std]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx, stdarch_nvptx, asm_experimental_arch))]
#![cfg_attr(target_arch = "amdgpu", feature(abi_gpu_kernel, stdarch_amdgpu, core_intrinsics, gpu_intrinsics), allow(internal_features))]

// Device panics are reported to the host (message, file:line:column, block and
// thread) before the kernel traps; see gpu_rpc::services.
#[cfg(any(target_arch = "nvptx64", target_arch = "amdgpu"))]
gpu_rpc::gpu_panic_handler!();

#[cfg(target_arch = "amdgpu")]
mod amdgpu;

mod line;
mod saxpy;
mod services_demo;

#[cfg(target_arch = "nvptx64")] mod bulk;
#[cfg(target_arch = "nvptx64")] mod conformance;

#[cfg(target_arch = "nvptx64")]
mod nvptx {
    use core::arch::nvptx::*;
    use crate::line::Line;
    use core::sync::atomic::{AtomicU32, Ordering};
    use gpu_example_services::{BenchClient, HostServicesClient};
    use gpu_rpc::protocol::{Client, ClientDesc};

    /// Global 1-D thread index and thread count (x dimension).
    #[inline(always)]
    pub(crate) fn gid() -> (usize, usize) {
        // SAFETY: reading special registers.
        unsafe {
            (
                (_block_idx_x() * _block_dim_x() + _thread_idx_x()) as usize,
                (_grid_dim_x() * _block_dim_x()) as usize,
            )
        }
    }

    /// Each thread makes `iters` runtime no-op calls (`x -> x + 1`) starting
    /// from its global index and writes the result to `out[gid]`.
    ///
    /// # Safety
    /// `desc` describes a live region; `out` has one `u64` per thread.
    #[no_mangle]
    pub unsafe extern "ptx-kernel" fn rpc_noop_kernel(desc: ClientDesc, iters: u32, out: *mut u64) {
        let (g, _) = gid();
        // SAFETY: the host passed a live descriptor.
        let client = unsafe { Client::from_desc(&desc) };
        let mut x = g as u64;
        for _ in 0..iters {
            x = match client.noop(x) {
                Ok(y) => y,
                Err(_) => u64::MAX / 2,
            };
        }
        // SAFETY: one slot per thread.
        unsafe { *out.add(g) = x };
    }

    /// Like `rpc_noop_kernel` through the generated `Bench::incr` stub.
    ///
    /// # Safety
    /// As `rpc_noop_kernel`.
    #[no_mangle]
    pub unsafe extern "ptx-kernel" fn rpc_incr_kernel(desc: ClientDesc, iters: u32, out: *mut u64) {
        let (g, _) = gid();
        // SAFETY: the host passed a live descriptor.
        let client = unsafe { Client::from_desc(&desc) };
        let bench = BenchClient::new(&client);
        let mut x = g as u64 * 1_000_000;
        for _ in 0..iters {
            x = bench.incr(x);
        }
        // SAFETY: one slot per thread.
        unsafe { *out.add(g) = x };
    }

    /// `rpc_incr_kernel` with thread `g` starting at `base + g * stride`:
    /// `stride` 0 gives every lane of a warp the same value, so each reply
    /// is the same on every lane (inline in the server's outbox word while it
    /// fits in 30 bits); a `base` of 2^40 gives one-lane replies that never
    /// fit (in the packet).
    ///
    /// # Safety
    /// As `rpc_noop_kernel`.
    #[no_mangle]
    pub unsafe extern "ptx-kernel" fn rpc_incr_from_kernel(desc: ClientDesc, iters: u32, out: *mut u64, base: u64, stride: u64) {
        let (g, _) = gid();
        // SAFETY: the host passed a live descriptor.
        let client = unsafe { Client::from_desc(&desc) };
        let bench = BenchClient::new(&client);
        let mut x = base.wrapping_add((g as u64).wrapping_mul(stride));
        for _ in 0..iters {
            x = bench.incr(x);
        }
        // SAFETY: one slot per thread.
        unsafe { *out.add(g) = x };
    }

    /// Streams `bytes` bytes of `data` to the host `iters` times (bandwidth).
    ///
    /// # Safety
    /// `data` points to `bytes` readable device bytes; `out` one `u64` per thread.
    #[no_mangle]
    pub unsafe extern "ptx-kernel" fn rpc_sink_kernel(desc: ClientDesc, data: *const u8, bytes: u64, iters: u32, out: *mut u64) {
        let (g, _) = gid();
        // SAFETY: the host passed a live descriptor and buffer.
        let (client, data) = unsafe { (Client::from_desc(&desc), core::slice::from_raw_parts(data, bytes as usize)) };
        let bench = BenchClient::new(&client);
        let mut total = 0;
        for _ in 0..iters {
            total += bench.sink(data);
        }
        // SAFETY: one slot per thread.
        unsafe { *out.add(g) = total };
    }

    /// Each thread prints one short line through `HostServices::print_stderr`
    /// (`sync`) or `Bench::log` (`async_ != 0`).
    ///
    /// # Safety
    /// `desc` describes a live region.
    #[no_mangle]
    pub unsafe extern "ptx-kernel" fn rpc_print_kernel(desc: ClientDesc, async_: u32) {
        let (g, _) = gid();
        // SAFETY: the host passed a live descriptor.
        let client = unsafe { Client::from_desc(&desc) };
        let mut line = Line::new();
        line.str("thread ").num(g as u64).str(" says hello\n");
        if async_ != 0 {
            BenchClient::new(&client).log(line.as_str());
        } else {
            HostServicesClient::new(&client).print_stderr(line.as_str());
        }
    }

    static FINISHED: AtomicU32 = AtomicU32::new(0);

    /// The hello example: every thread prints a greeting, adds, reads a block
    /// from the host; the last thread to finish asks the host to exit with 3.
    ///
    /// # Safety
    /// `desc` describes a live region.
    #[no_mangle]
    pub unsafe extern "ptx-kernel" fn hello_kernel(desc: ClientDesc) {
        let (g, n) = gid();
        // SAFETY: the host passed a live descriptor.
        let client = unsafe { Client::from_desc(&desc) };
        let host = HostServicesClient::new(&client);
        let sum = host.add(g as u64, 1000);
        let mut block = [0u8; 24];
        let got = host.read_block(g as u64 % 8, &mut block);
        let text = core::str::from_utf8(&block[..got.min(block.len())]).unwrap_or("<invalid>");
        let mut line = Line::new();
        // SAFETY: reading special registers.
        let (b, t) = unsafe { (_block_idx_x(), _thread_idx_x()) };
        line.str("hello from block ").num(b as u64).str(" thread ").num(t as u64).str(": ");
        line.num(g as u64).str(" + 1000 = ").num(sum).str(", block says \"").str(text).str("\"");
        host.print_stderr(line.as_str());
        // Relaxed RMW: only "who is last" matters; every print above was a
        // synchronous call the host already completed.
        if FINISHED.fetch_add(1, Ordering::Relaxed) as usize == n - 1 {
            host.exit(3);
        }
    }

    /// The floor of the benchmarks: one GPU thread and one host thread
    /// The GPU's global nanosecond timer (`%globaltimer`).
    #[inline(always)]
    fn globaltimer() -> u64 {
        let t: u64;
        // SAFETY: reads a special register; no memory is touched.
        unsafe { core::arch::asm!("mov.u64 {t}, %globaltimer;", t = out(reg64) t, options(nomem, nostack)) };
        t
    }

    /// The idle benchmark: `reps` times, stay silent for `silence_ns` (no
    /// call, spinning on the timer), then make one `Bench::incr` call and
    /// write its latency in ns to `out[rep]` (`u64::MAX` for a wrong
    /// result). Launched as one thread.
    ///
    /// # Safety
    /// `desc` describes a live region; `out` has `reps` slots.
    #[no_mangle]
    pub unsafe extern "ptx-kernel" fn rpc_idle_kernel(desc: ClientDesc, silence_ns: u64, reps: u32, out: *mut u64) {
        // SAFETY: the host passed a live descriptor.
        let client = unsafe { Client::from_desc(&desc) };
        let bench = BenchClient::new(&client);
        for r in 0..reps as u64 {
            let quiet = globaltimer();
            while globaltimer().wrapping_sub(quiet) < silence_ns {}
            let t0 = globaltimer();
            let y = bench.incr(r);
            let t1 = globaltimer();
            // SAFETY: `reps` slots.
            unsafe { *out.add(r as usize) = if y == r + 1 { t1 - t0 } else { u64::MAX } };
        }
    }

    /// ping-pong a counter over pinned mapped memory, with no protocol.
    /// The GPU writes `words[GPU_FLAG]`, the host `words[HOST_FLAG]` (another
    /// cache line; `gpu_example_services::pingpong`). The descriptor is
    /// unused (the launcher passes one to every kernel).
    ///
    /// # Safety
    /// `words` points to `pingpong::WORDS` mapped `u32`s.
    #[no_mangle]
    pub unsafe extern "ptx-kernel" fn pingpong_kernel(_desc: ClientDesc, words: *const AtomicU32, iters: u32) {
        use gpu_example_services::pingpong::{GPU_FLAG, HOST_FLAG};
        // SAFETY: `WORDS` live words.
        let (mine, theirs) = unsafe { (&*words.add(GPU_FLAG), &*words.add(HOST_FLAG)) };
        for i in 1..=iters {
            // Release: the host's acquire load of this word sees it after any
            // earlier writes (none here; kept for a like-for-like protocol).
            mine.store(i, Ordering::Release);
            // Acquire: as the protocol's wait does.
            while theirs.load(Ordering::Acquire) != i {}
        }
    }

    /// [`pingpong_kernel`] with the steps of a protocol call added one at a
    /// time (`steps`, the `STEP_*` bits of `gpu_example_services::pingpong`,
    /// which also lays out `words`), to see what each costs on the GPU's
    /// side. The GPU counts wrong replies in `words[WRONG]`.
    ///
    /// # Safety
    /// `words` points to `pingpong::WORDS` mapped `u32`s, 8-byte aligned.
    #[no_mangle]
    pub unsafe extern "ptx-kernel" fn pingpong_steps_kernel(
        _desc: ClientDesc,
        words: *const AtomicU32,
        iters: u32,
        steps: u32,
    ) {
        use core::sync::atomic::AtomicU64;
        use gpu_example_services::pingpong::*;
        static LOCK: AtomicU32 = AtomicU32::new(0);
        // SAFETY: `WORDS` live words, 8-byte aligned; `PAYLOAD`, `REPLY`,
        // `SPREAD_SECOND` and `SPREAD_THIRD` are even indices (8-byte aligned
        // `u64`s) with room for 2, 1, 1 and 1.
        let (mine, theirs, payload, reply, wrong, second, third) = unsafe {
            (
                &*words.add(GPU_FLAG),
                &*words.add(HOST_FLAG),
                &*(words.add(PAYLOAD) as *const [AtomicU64; 2]),
                &*(words.add(REPLY) as *const AtomicU64),
                &*words.add(WRONG),
                &*(words.add(SPREAD_SECOND) as *const AtomicU64),
                &*(words.add(SPREAD_THIRD) as *const AtomicU64),
            )
        };
        let mut bad = 0;
        for i in 1..=iters {
            if steps & STEP_LOCK != 0 {
                // Relaxed: a stale value only costs the RMW below.
                if steps & STEP_LOCK_TEST != 0 && LOCK.load(Ordering::Relaxed) & 1 != 0 {
                    bad += 1 << 16;
                }
                if steps & STEP_LOCK_ORDERED_RMW != 0 {
                    let before: u32;
                    // SAFETY: an acquiring atomic OR on the static lock word.
                    unsafe {
                        core::arch::asm!(
                            "atom.acquire.gpu.or.b32 {b}, [{p}], 1;",
                            b = out(reg32) before,
                            p = in(reg64) LOCK.as_ptr(),
                            options(nostack, preserves_flags)
                        )
                    };
                    bad += (before & 1) << 16;
                } else {
                    // Relaxed RMW (NVPTX drops orderings on RMWs): the
                    // fence below orders, as the protocol's `try_lock` did
                    // before `6213476`.
                    while LOCK.fetch_or(1, Ordering::Relaxed) & 1 != 0 {}
                    if steps & STEP_LOCK_NO_FENCE == 0 {
                        // SAFETY: a fence instruction.
                        unsafe { core::arch::asm!("fence.acq_rel.gpu;", options(nostack, preserves_flags)) };
                    }
                }
            }
            if steps & STEP_PAYLOAD != 0 {
                // Relaxed: published by the release store of the flag.
                payload[0].store(i as u64, Ordering::Relaxed);
                if steps & STEP_SPREAD != 0 {
                    second.store(!(i as u64), Ordering::Relaxed);
                    third.store(i as u64 ^ 0x5555, Ordering::Relaxed);
                } else {
                    payload[1].store(!(i as u64), Ordering::Relaxed);
                }
            }
            // Release: the payload is visible before the flag.
            mine.store(i, Ordering::Release);
            if steps & STEP_ACQUIRE_LOAD != 0 {
                // Acquire: each poll orders what follows it.
                while theirs.load(Ordering::Acquire) != i {}
            } else {
                // Relaxed polls, then an acquire fence: as the protocol's
                // wait did before `44ac377`.
                while theirs.load(Ordering::Relaxed) != i {}
                core::sync::atomic::fence(Ordering::Acquire);
            }
            if steps & STEP_REPLY != 0 && reply.load(Ordering::Relaxed) != i as u64 + 1 {
                bad += 1;
            }
            if steps & STEP_LOCK != 0 {
                if steps & STEP_LOCK_ORDERED_RMW != 0 {
                    // SAFETY: a releasing atomic AND on the static lock word.
                    unsafe {
                        core::arch::asm!(
                            "red.release.gpu.and.b32 [{p}], -2;",
                            p = in(reg64) LOCK.as_ptr(),
                            options(nostack, preserves_flags)
                        )
                    };
                } else {
                    if steps & STEP_LOCK_NO_FENCE == 0 {
                        // SAFETY: a fence instruction (the protocol's
                        // `unlock` before `6213476`).
                        unsafe { core::arch::asm!("fence.acq_rel.gpu;", options(nostack, preserves_flags)) };
                    }
                    LOCK.fetch_and(!1, Ordering::Relaxed);
                }
            }
        }
        // Relaxed: read after the kernel ends.
        wrong.store(bad, Ordering::Relaxed);
    }
}
