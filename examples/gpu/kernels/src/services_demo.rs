//! Kernels using the standard services (`gpu_rpc::services`): device
//! `println!`, `exit`, panics reported on the host, files.
//!
//! * `gpu_main(desc, argc, argv)` — the entry point the `gpu-run` loader
//!   launches: a few threads print a greeting with their arguments, then
//!   thread 0 of block 0 exits with code 3 once every other thread has
//!   printed.
//! * `panic_demo_kernel(desc)` — indexes out of bounds on purpose: the panic
//!   handler (`gpu_rpc::gpu_panic_handler!()` at the crate root) reports
//!   `kernel panicked at .../services_demo.rs:L:C (block (0,0,0), thread
//!   (t,0,0)): index out of bounds: ...` to the host, then traps.
//! * `file_demo_kernel(desc, path)` — thread 0 opens the host file at `path`
//!   (a device pointer to a NUL-terminated string), reads it and prints its
//!   first line.
//! * `file_bulk_kernel(desc, path)` — one warp writes 1 GiB to the host file
//!   at `path` in 1 MiB slices of a global buffer (direct copies), reads it
//!   back and checks every byte; prints both rates and exits with the number
//!   of wrong slices (0 when every byte is right).
//!
//! Serve them with `Dispatcher::add(StdServer(StdHost::new(config)))`, and
//! raise the per-thread stack to 4 KiB or more first
//! (`cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 4096)`): the formatting in these
//! kernels and the panic handler need 1.5 to 2 KiB, over CUDA's default of
//! 1 KiB (see `gpu_rpc::services`, "Stack").

#[cfg(target_arch = "nvptx64")]
mod nvptx {
    use core::arch::nvptx::*;
    use core::sync::atomic::{AtomicU32, Ordering};

    use gpu_rpc::protocol::ClientDesc;
    use gpu_rpc::services::{self, flags, Fd};
    use gpu_rpc::{gpu_eprintln, gpu_println};

    /// Global 1-D thread index and thread count (x dimension).
    #[inline(always)]
    fn gid() -> (u32, u32) {
        // SAFETY: reading special registers has no preconditions.
        unsafe {
            (
                (_block_idx_x() * _block_dim_x() + _thread_idx_x()) as u32,
                (_grid_dim_x() * _block_dim_x()) as u32,
            )
        }
    }

    /// Threads of `gpu_main` done printing.
    static PRINTED: AtomicU32 = AtomicU32::new(0);

    /// How many threads of `gpu_main` print a greeting.
    const GREETERS: u32 = 4;

    /// The `gpu-run` entry point: threads `0..4` print
    /// `hello from gpu-run: thread {g} of {n}, args [...]`; thread 0 of block
    /// 0 waits until every other thread is done, then calls `exit(3)`.
    ///
    /// Deadlock-free for any grid whose threads all become resident
    /// eventually while thread 0 waits (it only waits for threads that need
    /// nothing from it): one block, as `gpu-run` launches by default, or any
    /// grid on sm_70+ (independent thread scheduling lets the other lanes of
    /// thread 0's warp progress).
    ///
    /// # Safety
    /// `desc` describes a live region; `argv` points to `argc` device
    /// pointers to NUL-terminated strings (or is null).
    #[no_mangle]
    pub unsafe extern "ptx-kernel" fn gpu_main(desc: ClientDesc, argc: u32, argv: u64) {
        // SAFETY: the descriptor the host passed to this kernel.
        unsafe { services::init(&desc) };
        let (g, n) = gid();
        // SAFETY: the loader's argv: `argc` pointers to NUL-terminated
        // strings, alive for the whole kernel.
        let args = unsafe { services::args(argc, argv) };
        if g < GREETERS {
            gpu_println!("hello from gpu-run: thread {g} of {n}, {} args", args.len());
        }
        if g == 0 {
            for (i, a) in args.enumerate() {
                gpu_println!("  arg {i}: {a:?}");
            }
        }
        if g == 0 {
            // Acquire: pairs with the other threads' release increments (their
            // prints completed before them: print calls are synchronous).
            while PRINTED.load(Ordering::Acquire) < n - 1 {
                gpu_rpc::lanes::sleep_briefly();
            }
            gpu_println!("thread 0: all {n} threads done, exiting with 3");
            services::exit(3);
        }
        // Release: see the acquire load above.
        PRINTED.fetch_add(1, Ordering::Release);
    }

    /// Indexes out of bounds on purpose (the index is hidden from the
    /// optimizer): every thread panics, the panic handler reports it to the
    /// host and traps. Takes `gpu-run`'s parameters (and ignores argv):
    /// `gpu-run --kernel panic_demo_kernel kernels.ptx`.
    ///
    /// # Safety
    /// `desc` describes a live region.
    #[no_mangle]
    pub unsafe extern "ptx-kernel" fn panic_demo_kernel(desc: ClientDesc, _argc: u32, _argv: u64) {
        // SAFETY: the descriptor the host passed to this kernel.
        unsafe { services::init(&desc) };
        let (g, _) = gid();
        let table = [10u32, 20, 30, 40];
        let i = core::hint::black_box(table.len() + g as usize);
        let v = table[i]; // panics: index out of bounds
        gpu_println!("unreachable: {v}");
    }

    /// Thread 0 opens the host file named by the first argument after the
    /// image (`gpu-run --kernel file_demo_kernel kernels.ptx PATH`), reads its
    /// first 256 bytes and prints the first line; errors are printed to
    /// stderr as `IoError`s.
    ///
    /// # Safety
    /// `desc` describes a live region; `argv` points to `argc` device
    /// pointers to NUL-terminated strings.
    #[no_mangle]
    pub unsafe extern "ptx-kernel" fn file_demo_kernel(desc: ClientDesc, argc: u32, argv: u64) {
        // SAFETY: the descriptor the host passed to this kernel.
        unsafe { services::init(&desc) };
        if gid().0 != 0 {
            return;
        }
        // SAFETY: the host passed `argc` NUL-terminated device strings, alive
        // for the whole kernel.
        let Some(path) = (unsafe { services::args(argc, argv) }).nth(1) else {
            gpu_eprintln!("usage: file_demo_kernel PATH");
            return;
        };
        let fd: Fd = match services::open(path, flags::READ) {
            Ok(fd) => fd,
            Err(e) => {
                gpu_eprintln!("open {path:?}: {e}");
                return;
            }
        };
        let mut buf = [0u8; 256];
        match services::read(fd, &mut buf) {
            Ok(n) => {
                let text = &buf[..n];
                let end = text.iter().position(|&b| b == b'\n').unwrap_or(n);
                let line = core::str::from_utf8(&text[..end]).unwrap_or("<not UTF-8>");
                gpu_println!("first line of {path}: {line}");
            }
            Err(e) => gpu_eprintln!("read {path:?}: {e}"),
        }
        let _ = services::close(fd);
    }

    /// Bytes each lane writes per call of `file_bulk_kernel`.
    const SLICE: usize = 1 << 20;
    /// Lanes of `file_bulk_kernel` (one warp).
    const LANES: usize = 32;
    /// Rounds of 32 slices: 1 GiB in all.
    const ROUNDS: usize = (1 << 30) / (SLICE * LANES);

    /// `file_bulk_kernel`'s buffer: each lane's 1 MiB slice, in global
    /// memory (so the slices go direct, on the copy engine).
    static mut BULK: [u64; LANES * SLICE / 8] = [0; LANES * SLICE / 8];
    /// The file descriptor thread 0 opened, for the whole block.
    static FD: AtomicU32 = AtomicU32::new(0);

    /// The word at `i` of slice `c` of the file: the slice's number in its
    /// first word, a pattern of the position elsewhere.
    #[inline(always)]
    fn bulk_word(c: usize, i: usize) -> u64 {
        if i == 0 {
            c as u64
        } else {
            (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5555
        }
    }

    /// One warp (`gpu-run --threads 32 --kernel file_bulk_kernel kernels.ptx
    /// PATH`, with PATH under `--allow-write`) writes 1 GiB to PATH with
    /// `write_fd`, 32 slices of 1 MiB per call (slice `c` is round `c / 32`,
    /// lane `c % 32`: the host serves a call's lanes in order, so the file
    /// holds them in order), reads it back with `read` into the same slices
    /// and checks every word; thread 0 prints the rates (of the write calls,
    /// and of the read calls without the checks between them) and exits with
    /// the number of wrong slices.
    ///
    /// # Safety
    /// As `file_demo_kernel`; launched as one block of 32 threads.
    #[no_mangle]
    pub unsafe extern "ptx-kernel" fn file_bulk_kernel(desc: ClientDesc, argc: u32, argv: u64) {
        // SAFETY: the descriptor the host passed to this kernel.
        unsafe { services::init(&desc) };
        let (g, n) = gid();
        let lane = g as usize;
        if n as usize != LANES {
            if g == 0 {
                gpu_eprintln!("file_bulk_kernel: launch it with --threads 32 --blocks 1");
                services::exit(2);
            }
            return;
        }
        // SAFETY: as in `file_demo_kernel`.
        let Some(path) = (unsafe { services::args(argc, argv) }).nth(1) else {
            if g == 0 {
                gpu_eprintln!("usage: file_bulk_kernel PATH");
                services::exit(2);
            }
            return;
        };
        // SAFETY: each lane uses its own slice of `BULK` only.
        let mine: &mut [u64] = unsafe {
            let all = &raw mut BULK;
            core::slice::from_raw_parts_mut((all as *mut u64).add(lane * SLICE / 8), SLICE / 8)
        };
        for (i, w) in mine.iter_mut().enumerate() {
            *w = bulk_word(0, i);
        }
        let open = |f| {
            if g == 0 {
                match services::open(path, f) {
                    // Relaxed: published by the block barrier below.
                    Ok(fd) => FD.store(fd.0, Ordering::Relaxed),
                    Err(e) => {
                        gpu_eprintln!("open {path:?}: {e}");
                        services::exit(2);
                    }
                }
            }
            // SAFETY: every thread of the block reaches it.
            unsafe { _syncthreads() };
            // Relaxed: ordered by the barrier.
            Fd(FD.load(Ordering::Relaxed))
        };
        let as_bytes = |w: &mut [u64]| {
            // SAFETY: the words' bytes, borrowed as uniquely as the words.
            unsafe { core::slice::from_raw_parts_mut(w.as_mut_ptr().cast::<u8>(), SLICE) }
        };
        let fd = open(flags::WRITE | flags::CREATE | flags::TRUNCATE);
        let t0 = services::time_ns();
        for r in 0..ROUNDS {
            mine[0] = bulk_word(r * LANES + lane, 0);
            if let Err(e) = services::write_fd(fd, as_bytes(mine)) {
                gpu_eprintln!("write {path:?}: {e}");
            }
        }
        let t1 = services::time_ns();
        // SAFETY: every thread of the block reaches it.
        unsafe { _syncthreads() };
        if g == 0 {
            let _ = services::close(fd);
        }
        let fd = open(flags::READ);
        let mut wrong = 0u32;
        // The reads' own time (the lanes read together, one call per round);
        // the warp's fill and check of each slice in between is not counted.
        let mut reading = 0;
        for r in 0..ROUNDS {
            mine.fill(!0);
            let c = r * LANES + lane;
            let t = services::time_ns();
            let read = services::read(fd, as_bytes(mine));
            reading += services::time_ns() - t;
            let ok = matches!(read, Ok(n) if n == SLICE) && mine.iter().enumerate().all(|(i, &w)| w == bulk_word(c, i));
            wrong += !ok as u32;
        }
        let (t2, t3) = (0, reading);
        static WRONG: AtomicU32 = AtomicU32::new(0);
        // Relaxed: read after the block barrier.
        WRONG.fetch_add(wrong, Ordering::Relaxed);
        // SAFETY: every thread of the block reaches it.
        unsafe { _syncthreads() };
        if g == 0 {
            let _ = services::close(fd);
            let gb = (1u64 << 30) as f64 / 1e9;
            let wrong = WRONG.load(Ordering::Relaxed);
            gpu_println!(
                "file_bulk_kernel: wrote 1 GiB in {} ms ({} MB/s), read it back in {} ms ({} MB/s), {wrong} wrong slices of {}",
                (t1 - t0) / 1_000_000,
                (gb * 1e12 / (t1 - t0) as f64) as u64,
                (t3 - t2) / 1_000_000,
                (gb * 1e12 / (t3 - t2) as f64) as u64,
                ROUNDS * LANES
            );
            services::exit(wrong as i32);
        }
    }
}
