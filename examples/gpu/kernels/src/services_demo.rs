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
}
