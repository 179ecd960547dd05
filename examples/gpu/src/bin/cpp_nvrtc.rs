//! A CUDA C++ kernel calling a Rust trait: `cpp/cpp_demo.cu` includes the
//! header `CppDemoRpc::cuda_header()` generates, is compiled **at run time
//! with nvrtc** (loaded dynamically through `cudarc`), launched with
//! `cudarc` and served by `gpu_rpc::cuda::Serve` — the same server serving a
//! Rust kernel at the same time. Then a kernel built against an older header
//! (`v0::CppDemo`, another signature of `scale`) must get `SignatureMismatch`
//! on every thread. A third C++ kernel uses the standard services
//! (`StdRpc::cuda_header()`): a line per thread to stdout, the host clock,
//! `exit(7)`.
//!
//! ```text
//! cargo build --release -p gpu-examples && target/release/cpp_nvrtc
//! ```
//!
//! Checks every thread's results and the calls served; exits non-zero if one
//! is wrong.

use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaModule, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::{CompileOptions, Ptx};
use gpu_example_services::cpp_demo::{v0, CppDemoRpc, CppDemoServer};
use gpu_example_services::BenchServer;
use gpu_examples::cpp_demo::{expected, expected_notes, CppDemoHost, SLOTS};
use gpu_examples::{kernels_ptx, Counters};
use gpu_rpc::cuda::{Serve, ServeConfig};
use gpu_rpc::server::{Dispatcher, ServerConfig};
use gpu_rpc::services::{ExitMode, StdHost, StdHostConfig, StdRpc, StdServer};
use gpu_rpc::Status;

const KERNEL: &str = include_str!("../../cpp/cpp_demo.cu");
const KERNEL_V0: &str = include_str!("../../cpp/cpp_demo_v0.cu");
const KERNEL_STD: &str = include_str!("../../cpp/std_demo.cu");

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cpp_nvrtc: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Compile `src` (which includes `header_name`) with nvrtc for this GPU and
/// load it.
fn compile(
    ctx: &Arc<CudaContext>,
    src: &str,
    header_name: &str,
    header: &str,
) -> Result<Arc<CudaModule>, Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("gpu-rpc-nvrtc-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join(header_name), header)?;
    let (major, minor) = ctx.compute_capability()?;
    // The architecture as a plain option (`CompileOptions::arch` wants a
    // `&'static str`, which a computed name is not).
    let arch = format!("sm_{major}{minor}");
    let opts = CompileOptions {
        include_paths: vec![dir.display().to_string()],
        options: vec![format!("--gpu-architecture={arch}"), "-std=c++17".into()],
        ..Default::default()
    };
    let t = std::time::Instant::now();
    // cudarc loads libnvrtc on first use and panics if it cannot.
    let ptx = std::panic::catch_unwind(|| cudarc::nvrtc::compile_ptx_with_opts(src, opts))
        .map_err(|_| "libnvrtc could not be loaded (is the CUDA toolkit's lib64 on LD_LIBRARY_PATH?)")?
        .map_err(|e| format!("nvrtc: {e}"))?;
    println!(
        "nvrtc compiled {header_name} + kernel for {arch} in {:.1?}",
        t.elapsed()
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(ctx.load_module(ptx)?)
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    if !gpu_rpc::cuda::driver_available() {
        return Err("no CUDA driver on this machine (libcuda could not be loaded)".into());
    }
    let ctx = CudaContext::new(0)?;
    let cpp = compile(&ctx, KERNEL, "cpp_demo.cuh", &CppDemoRpc::cuda_header())?;
    let cpp_kernel = cpp.load_function("cpp_demo_kernel")?;
    let std_module = compile(&ctx, KERNEL_STD, "std.cuh", &StdRpc::cuda_header())?;
    let std_kernel = std_module.load_function("std_demo_kernel")?;
    let rust = ctx.load_module(Ptx::from_src(kernels_ptx()?))?;
    let rust_kernel = rust.load_function("rpc_incr_kernel")?; // (desc, iters: u32, out: *mut u64)

    // One server for the C++ kernel's `CppDemo` and the Rust kernel's `Bench`.
    let host = Arc::new(CppDemoHost::default());
    let counters = Arc::new(Counters::default());
    let mut dispatcher = Dispatcher::new(ServerConfig::default());
    dispatcher.add(CppDemoServer(host.clone()))?;
    dispatcher.add(BenchServer(counters.clone()))?;
    let (std_config, stdout, _stderr) = StdHostConfig::default().exit_mode(ExitMode::Record).capture();
    let std_host = StdHost::new(std_config);
    dispatcher.add(StdServer(std_host.clone()))?;
    let dispatcher = Arc::new(dispatcher);
    let rpc = Serve::start(&ctx, dispatcher.clone(), &ServeConfig::default())?;

    // The C++ kernel in two shapes (full warps; a partial last warp), and the
    // Rust kernel beside them on its own stream.
    let shapes = [(132u32, 128u32), (3, 33)];
    let mut runs = Vec::new();
    for &(blocks, threads) in &shapes {
        let stream = ctx.new_stream()?;
        let n = blocks * threads;
        let mut out = stream.alloc_zeros::<u64>(n as usize * SLOTS)?;
        let mut launch = stream.launch_builder(&cpp_kernel);
        launch.arg(rpc.desc()).arg(&mut out).arg(&n);
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the kernel's parameters: the descriptor by value, a pointer
        // to SLOTS u64 per thread, and the thread count.
        unsafe { launch.launch(cfg) }?;
        runs.push((stream, out, blocks, threads));
    }
    let rust_stream = ctx.new_stream()?;
    let (rust_blocks, rust_threads, iters) = (64u32, 96u32, 20u32);
    let mut rust_out = rust_stream.alloc_zeros::<u64>((rust_blocks * rust_threads) as usize)?;
    let mut launch = rust_stream.launch_builder(&rust_kernel);
    launch.arg(rpc.desc()).arg(&iters).arg(&mut rust_out);
    // SAFETY: the descriptor, a u32 and a pointer to one u64 per thread.
    unsafe {
        launch.launch(LaunchConfig {
            grid_dim: (rust_blocks, 1, 1),
            block_dim: (rust_threads, 1, 1),
            shared_mem_bytes: 0,
        })
    }?;

    let std_stream = ctx.new_stream()?;
    let std_n = 2 * 96u32;
    let mut clocks = std_stream.alloc_zeros::<u64>(std_n as usize)?;
    let mut launch = std_stream.launch_builder(&std_kernel);
    launch.arg(rpc.desc()).arg(&mut clocks).arg(&std_n);
    // SAFETY: the descriptor, a pointer to one u64 per thread, the count.
    unsafe {
        launch.launch(LaunchConfig {
            grid_dim: (2, 1, 1),
            block_dim: (96, 1, 1),
            shared_mem_bytes: 0,
        })
    }?;

    let mut wrong = 0usize;
    let mut threads_total = 0u32;
    for (stream, out, blocks, threads) in &runs {
        stream.synchronize()?;
        let got = stream.clone_dtoh(out)?;
        let n = blocks * threads;
        threads_total += n;
        for tid in 0..n {
            let want = expected(tid, *threads);
            let have = &got[tid as usize * SLOTS..(tid as usize + 1) * SLOTS];
            if have != want {
                if wrong < 5 {
                    eprintln!("{blocks}x{threads}: thread {tid}: {have:?}\n  expected {want:?}");
                }
                wrong += 1;
            }
        }
    }
    rust_stream.synchronize()?;
    let rust_got = rust_stream.clone_dtoh(&rust_out)?;
    let rust_wrong = rust_got
        .iter()
        .enumerate()
        .filter(|&(i, &x)| x != i as u64 * 1_000_000 + iters as u64)
        .count();
    std_stream.synchronize()?;
    let clocks = std_stream.clone_dtoh(&clocks)?;
    let report = rpc.finish()?;

    // The standard services: one line per thread, a clock for every thread
    // (thread 0 reads it before it exits), exit code 7.
    let mut lines = stdout.lines();
    lines.sort();
    let mut want_lines: Vec<String> = (0..std_n).map(|t| format!("c++ thread {t}")).collect();
    want_lines.sort();
    let clocks_ok = clocks.iter().all(|&c| c > 0);
    println!(
        "C++ kernel on the standard services: {} of {std_n} lines, clocks {}, exit code {:?}",
        lines.len(),
        if clocks_ok { "all set" } else { "missing" },
        std_host.exit_code()
    );
    if lines != want_lines || !clocks_ok || std_host.exit_code() != Some(7) {
        return Err("the standard services kernel did not print, read the clock and exit as expected".into());
    }

    // Relaxed: read after the kernels ended and the servers were joined.
    let notes = (
        host.notes.load(Ordering::Relaxed),
        host.note_sum.load(Ordering::Relaxed),
    );
    let want_notes = runs
        .iter()
        .map(|(_, _, b, t)| expected_notes(b * t))
        .fold((0, 0), |a, n| (a.0 + n.0, a.1 + n.1));
    println!(
        "C++ kernel: {} launches, {threads_total} threads, {wrong} wrong; Rust kernel beside it: {} threads, {rust_wrong} wrong; \
         {} warp-calls served in {:.1?}, {} errors; notes {notes:?} (expected {want_notes:?})",
        runs.len(),
        rust_blocks * rust_threads,
        report.calls,
        report.elapsed,
        report.errors
    );
    if wrong > 0 || rust_wrong > 0 || report.errors > 0 || notes != want_notes {
        return Err("wrong results (see above)".into());
    }
    println!("ok: every C++ thread's 11 results, every Rust thread's result, every note");

    // A kernel built from the old definition: refused, never misread.
    let old = compile(&ctx, KERNEL_V0, "cpp_demo_v0.cuh", &v0::CppDemoRpc::cuda_header())?;
    let old_kernel = old.load_function("cpp_demo_v0_kernel")?;
    let rpc = Serve::start(&ctx, dispatcher.clone(), &ServeConfig::default())?;
    let stream = ctx.default_stream();
    let n = 4 * 64u32;
    let mut status = stream.alloc_zeros::<u32>(n as usize)?;
    let mut launch = stream.launch_builder(&old_kernel);
    launch.arg(rpc.desc()).arg(&mut status).arg(&n);
    // SAFETY: the descriptor, a pointer to one u32 per thread, the count.
    unsafe {
        launch.launch(LaunchConfig {
            grid_dim: (4, 1, 1),
            block_dim: (64, 1, 1),
            shared_mem_bytes: 0,
        })
    }?;
    stream.synchronize()?;
    let status = stream.clone_dtoh(&status)?;
    let report = rpc.finish()?;
    let mismatched = status
        .iter()
        .filter(|&&s| s == Status::SignatureMismatch as u32)
        .count();
    let last = dispatcher.errors();
    println!(
        "old header: {mismatched} of {n} threads got SignatureMismatch, {} errors logged; last: {}",
        report.errors,
        last.last().map(|e| e.to_string()).unwrap_or_default()
    );
    if mismatched != n as usize || report.errors == 0 {
        return Err("the old header's calls were not refused with SignatureMismatch".into());
    }
    println!("ok: the old header's calls were refused");
    Ok(())
}
