//! Host services for a program that already launches its kernels with
//! `cudarc`: its own context, module, streams, device memory and
//! `launch_builder`; gpu_rpc only serves the calls, in the background.
//!
//! ```text
//! cargo build --release -p gpu-examples && target/release/cudarc_interop
//! ```
//!
//! Two launches of `rpc_incr_kernel` (each thread calls `Bench::incr` 100
//! times, starting from `1_000_000 × its id`) on two streams share one
//! server; the program checks every thread's result in `cudarc` device
//! memory and the number of calls served, and exits non-zero if one is wrong.

use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use cudarc::driver::{CudaContext, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use gpu_example_services::BenchServer;
use gpu_examples::{kernels_ptx, Counters};
use gpu_rpc::cuda::{Serve, ServeConfig};
use gpu_rpc::server::{Dispatcher, ServerConfig};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cudarc_interop: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    if !gpu_rpc::cuda::driver_available() {
        return Err("no CUDA driver on this machine (libcuda could not be loaded)".into());
    }
    // The program's own cudarc setup.
    let ctx = CudaContext::new(0)?;
    let module = ctx.load_module(Ptx::from_src(kernels_ptx()?))?;
    let incr = module.load_function("rpc_incr_kernel")?; // (desc, iters: u32, out: *mut u64)

    // gpu_rpc: the host side of `Bench`, served on the program's context.
    let counters = Arc::new(Counters::default());
    let mut dispatcher = Dispatcher::new(ServerConfig::default());
    dispatcher.add(BenchServer(counters.clone()))?;
    let rpc = Serve::start(&ctx, dispatcher, &ServeConfig::default())?;

    // Two launches on two streams, as the program would make them, with the
    // descriptor as the first argument.
    let iters = 100u32;
    let shapes = [(132u32, 256u32), (7, 100)];
    let mut runs = Vec::new();
    for &(blocks, threads) in &shapes {
        let stream = ctx.new_stream()?;
        let mut out = stream.alloc_zeros::<u64>((blocks * threads) as usize)?;
        let mut launch = stream.launch_builder(&incr);
        launch.arg(rpc.desc()).arg(&iters).arg(&mut out);
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the arguments are the kernel's parameters: the descriptor by
        // value, a u32, and a pointer to one u64 per thread.
        unsafe { launch.launch(cfg) }?;
        runs.push((stream, out, blocks, threads));
    }

    let mut wrong = 0usize;
    for (stream, out, blocks, threads) in &runs {
        stream.synchronize()?;
        let got = stream.clone_dtoh(out)?;
        for (i, &x) in got.iter().enumerate() {
            let want = i as u64 * 1_000_000 + iters as u64;
            if x != want {
                if wrong < 5 {
                    eprintln!("{blocks}x{threads}: thread {i}: {x}, expected {want}");
                }
                wrong += 1;
            }
        }
    }
    let report = rpc.finish()?;

    let threads: u64 = shapes.iter().map(|&(b, t)| (b * t) as u64).sum();
    let warps: u64 = shapes.iter().map(|&(b, t)| (b * t.div_ceil(32)) as u64).sum();
    // Relaxed: read after every kernel is over and the servers have stopped.
    let lane_calls = counters.incr.load(Ordering::Relaxed);
    println!(
        "{} launches on 2 streams, {threads} threads: {} warp-calls ({lane_calls} lane-calls) in {:.1?}, {} errors, {wrong} wrong results",
        shapes.len(),
        report.calls,
        report.elapsed,
        report.errors
    );
    if wrong > 0 || report.errors > 0 {
        return Err(format!("{wrong} wrong results, {} server errors", report.errors).into());
    }
    if report.calls != warps * iters as u64 || lane_calls != threads * iters as u64 {
        return Err(format!(
            "{} warp-calls and {lane_calls} lane-calls served, expected {} and {}",
            report.calls,
            warps * iters as u64,
            threads * iters as u64
        )
        .into());
    }
    println!("ok: every thread's result and every call");
    Ok(())
}
