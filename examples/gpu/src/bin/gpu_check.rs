//! End-to-end checks on an NVIDIA GPU (run by `scripts/gpu-check.sh`):
//!
//! 1. the seeds' test: every thread of 1 thread, then of 132×4 blocks of 128
//!    threads, makes many round-trip increment calls through the generated
//!    `Bench::incr` stub; every final value and the host's call count exact,
//!    every port idle and unlocked afterwards;
//! 2. the same through the runtime's no-op call, with 1, 7, 64 and 4096 ports
//!    and 1..4 server threads, and partial warps;
//! 3. printing from 4096 threads, synchronous (`print_stderr`) and
//!    fire-and-forget (`Bench::log`): every line arrives exactly once;
//! 4. `sink`: streamed `&[u8]` of several sizes, byte counts exact;
//! 5. bulk data both ways (`Bulk`): every byte of slices of 0 B .. 64 MiB in
//!    global memory (direct above the threshold) and on the stack (packets),
//!    elements of 1, 4 and 8 bytes, while the kernel keeps running; with the
//!    default pinned budget (slices in lent pinned memory, a 64 MiB one
//!    taking all of it) and with a 16 MiB one (most slices through the
//!    stages into the server's kept buffers).
//!
//! Exits with 0 when every check passed, 1 otherwise; prints one line per
//! check with its numbers.

use std::collections::HashSet;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use gpu_example_services::{BenchServer, HostServicesServer};
use gpu_examples::{kernels_ptx, Counters, Recorder};
use gpu_rpc::cuda::{
    launch_many, launch_with_region, CudaDevice, CudaRegion, Job, Kernel, KernelArg, Launch, MappedBuffer, Module,
    PinnedBuffer,
};
use gpu_rpc::server::{Dispatcher, ServerConfig, Service};

struct Ctx {
    dev: CudaDevice,
    failures: usize,
}

impl Ctx {
    fn check(&mut self, name: &str, r: Result<String, String>) {
        match r {
            Ok(msg) => println!("PASS {name}: {msg}"),
            Err(msg) => {
                println!("FAIL {name}: {msg}");
                self.failures += 1;
            }
        }
    }
}

fn dispatcher(services: Vec<Arc<dyn Service>>) -> Dispatcher {
    dispatcher_with(ServerConfig::default(), services)
}

/// [`dispatcher`] with `config`.
fn dispatcher_with(config: ServerConfig, services: Vec<Arc<dyn Service>>) -> Dispatcher {
    let mut d = Dispatcher::new(config);
    for s in services {
        d.add_arc(s).expect("no opcode collisions");
    }
    d
}

/// Run a counting kernel (`incr` or `noop`) and check every value.
#[allow(clippy::too_many_arguments)]
fn counting(
    ctx: &Ctx,
    kernel: &Kernel<'_>,
    grid: u32,
    block: u32,
    ports: u32,
    servers: usize,
    iters: u32,
    base: impl Fn(u64) -> u64,
) -> Result<String, String> {
    let threads = grid as usize * block as usize;
    let out = PinnedBuffer::new(&ctx.dev, threads * 8).map_err(|e| e.to_string())?;
    let region = CudaRegion::new(&ctx.dev, ports).map_err(|e| e.to_string())?;
    let counters = Arc::new(Counters::default());
    let d = dispatcher(vec![Arc::new(BenchServer(Arc::clone(&counters)))]);
    let cfg = Launch {
        grid: (grid, 1, 1),
        block: (block, 1, 1),
        server_threads: servers,
        ..Launch::default()
    };
    let report = launch_with_region(
        &region,
        kernel,
        &cfg,
        &d,
        &[KernelArg::U32(iters), KernelArg::Ptr(out.device_ptr())],
    )
    .map_err(|e| e.to_string())?;
    let mut wrong = 0;
    let mut first_wrong = None;
    for g in 0..threads {
        // SAFETY: the kernel has finished; the buffer holds `threads` u64s.
        let v = unsafe { out.read_u64(g) };
        let want = base(g as u64) + iters as u64;
        if v != want {
            wrong += 1;
            first_wrong.get_or_insert((g, v, want));
        }
    }
    let quiet = region.is_quiescent().map_err(|e| e.to_string())?;
    let warps = grid as u64 * (block as u64).div_ceil(32);
    let calls = warps * iters as u64;
    let secs = report.kernel_time.unwrap_or(report.elapsed).as_secs_f64();
    let msg = format!(
        "{threads} threads × {iters} calls, {ports} ports, {servers} server threads: {} warp-calls in {:.3} s ({:.2} M warp-calls/s, {:.1} M lane-calls/s), host errors {}",
        report.calls,
        secs,
        report.calls as f64 / secs / 1e6,
        (threads as u64 * iters as u64) as f64 / secs / 1e6,
        report.errors
    );
    if let Some((g, v, want)) = first_wrong {
        return Err(format!(
            "{wrong} wrong values (thread {g}: {v}, expected {want}); {msg}"
        ));
    }
    if report.calls != calls {
        return Err(format!(
            "host served {} warp-calls, expected {calls}; {msg}",
            report.calls
        ));
    }
    // Relaxed: read after the work that counts is over (joined threads or an ended launch).
    if kernel.name() == "rpc_incr_kernel" && counters.incr.load(Ordering::Relaxed) != threads as u64 * iters as u64 {
        return Err(format!(
            "host counted {} incr lane-calls; {msg}",
            counters.incr.load(Ordering::Relaxed)
        ));
    }
    if !quiet {
        return Err(format!("a port was left locked or pending; {msg}"));
    }
    Ok(msg)
}

fn main() -> ExitCode {
    let ptx = match kernels_ptx() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("gpu_check: {e}");
            return ExitCode::from(1);
        }
    };
    let dev = match CudaDevice::new(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("gpu_check: {e}");
            return ExitCode::from(1);
        }
    };
    let sms = dev.sm_count().unwrap_or(132);
    println!(
        "device: {} ({} SMs, cc {:?})",
        dev.name().unwrap_or_default(),
        sms,
        dev.compute_capability().ok()
    );
    let module = Module::from_ptx(&dev, ptx).expect("kernels load");
    let incr = module.kernel("rpc_incr_kernel").expect("rpc_incr_kernel");
    let noop = module.kernel("rpc_noop_kernel").expect("rpc_noop_kernel");
    let mut ctx = Ctx { dev, failures: 0 };

    // 1. The seeds' test through the generated stub.
    let r = counting(&ctx, &incr, 1, 1, 1, 1, 2000, |g| g * 1_000_000);
    ctx.check("seeds/1-thread", r);
    let r = counting(&ctx, &incr, sms * 4, 128, 4096, 1, 50, |g| g * 1_000_000);
    ctx.check("seeds/132x4-blocks-x128", r);
    let r = counting(&ctx, &incr, sms * 4, 128, 512, 4, 50, |g| g * 1_000_000);
    ctx.check("seeds/132x4-blocks-x128-512ports-4servers", r);

    // 2. No-op calls over port counts, server threads and partial warps.
    for (ports, servers) in [(1, 1), (7, 2), (64, 3), (4096, 4)] {
        let r = counting(&ctx, &noop, 16, 96, ports, servers, 20, |g| g);
        ctx.check(&format!("noop/{ports}-ports-{servers}-servers"), r);
    }
    let r = counting(&ctx, &noop, 5, 45, 8, 2, 20, |g| g);
    ctx.check("noop/partial-warps-45-threads", r);

    // 2b. Two launches at once on this GPU, each with its own region, stream
    // and dispatcher, served by one pool of server threads (the one-GPU form
    // of serving several GPUs from one process).
    let r = (|| -> Result<String, String> {
        let (grid, block, iters) = (sms * 2, 128u32, 30u32);
        let threads = (grid * block) as usize;
        let e = |e: gpu_rpc::cuda::CudaError| e.to_string();
        let regions = [
            CudaRegion::new(&ctx.dev, 512).map_err(e)?,
            CudaRegion::new(&ctx.dev, 64).map_err(e)?,
        ];
        let outs = [
            PinnedBuffer::new(&ctx.dev, threads * 8).map_err(e)?,
            PinnedBuffer::new(&ctx.dev, threads * 8).map_err(e)?,
        ];
        let counters = [Arc::new(Counters::default()), Arc::new(Counters::default())];
        let ds = [
            dispatcher(vec![Arc::new(BenchServer(Arc::clone(&counters[0])))]),
            dispatcher(vec![Arc::new(BenchServer(Arc::clone(&counters[1])))]),
        ];
        let cfg = Launch {
            grid: (grid, 1, 1),
            block: (block, 1, 1),
            server_threads: 4,
            ..Launch::default()
        };
        let args: Vec<[KernelArg; 2]> = outs
            .iter()
            .map(|o| [KernelArg::U32(iters), KernelArg::Ptr(o.device_ptr())])
            .collect();
        let jobs: Vec<Job> = (0..2)
            .map(|i| Job {
                region: &regions[i],
                kernel: &incr,
                launch: &cfg,
                dispatcher: &ds[i],
                extra: &args[i],
            })
            .collect();
        let t0 = Instant::now();
        let results = launch_many(&jobs);
        let wall = t0.elapsed().as_secs_f64();
        let mut msg = String::new();
        for (i, r) in results.into_iter().enumerate() {
            let r = r.map_err(|e| format!("launch {i}: {e}"))?;
            let want = threads as u64 * iters as u64;
            // Relaxed: read after the work that counts is over (joined threads or an ended launch).
            let got = counters[i].incr.load(Ordering::Relaxed);
            if got != want {
                return Err(format!("launch {i}: host counted {got} incr calls, expected {want}"));
            }
            for g in 0..threads {
                // SAFETY: the kernel has finished.
                let v = unsafe { outs[i].read_u64(g) };
                if v != g as u64 * 1_000_000 + iters as u64 {
                    return Err(format!("launch {i}: thread {g} ended with {v}"));
                }
            }
            if !regions[i].is_quiescent().map_err(e)? {
                return Err(format!("launch {i}: a port was left locked or pending"));
            }
            msg += &format!("launch {i}: {} warp-calls; ", r.calls);
        }
        Ok(format!("{msg}both exact, {:.1} ms together", wall * 1e3))
    })();
    ctx.check("two-launches-one-server-pool", r);

    // 3. Printing: every line exactly once, sync and async.
    for async_ in [0u32, 1] {
        let t0 = Instant::now();
        let rec = Arc::new(Recorder::default());
        let counters = Arc::new(Counters::default());
        let d = dispatcher(vec![
            Arc::new(HostServicesServer(Arc::clone(&rec))),
            Arc::new(BenchServer(Arc::clone(&counters))),
        ]);
        let kernel = module.kernel("rpc_print_kernel").expect("rpc_print_kernel");
        let region = CudaRegion::new(&ctx.dev, 1024).expect("region");
        let cfg = Launch {
            grid: (32, 1, 1),
            block: (128, 1, 1),
            server_threads: 2,
            ..Launch::default()
        };
        let r = launch_with_region(&region, &kernel, &cfg, &d, &[KernelArg::U32(async_)]).map_err(|e| e.to_string());
        let lines = if async_ == 1 {
            counters.logged.lock().unwrap().clone()
        } else {
            rec.lines.lock().unwrap().clone()
        };
        let set: HashSet<&String> = lines.iter().collect();
        let want: HashSet<String> = (0..4096).map(|g| format!("thread {g} says hello\n")).collect();
        let ok = r.is_ok() && lines.len() == 4096 && set.len() == 4096 && want.iter().all(|w| set.contains(w));
        let name = if async_ == 1 {
            "print/async-4096-threads"
        } else {
            "print/sync-4096-threads"
        };
        let msg = format!(
            "{} lines ({} distinct) in {:.1} ms; {:?}",
            lines.len(),
            set.len(),
            t0.elapsed().as_secs_f64() * 1e3,
            r.err()
        );
        ctx.check(name, if ok { Ok(msg) } else { Err(msg) });
    }

    // 4. Streams of several sizes.
    for bytes in [0u64, 1, 63, 64, 4096, 100_000] {
        let data = PinnedBuffer::new(&ctx.dev, (bytes as usize).max(8)).expect("buffer");
        let out = PinnedBuffer::new(&ctx.dev, 256 * 8).expect("buffer");
        let counters = Arc::new(Counters::default());
        let d = dispatcher(vec![Arc::new(BenchServer(Arc::clone(&counters)))]);
        let kernel = module.kernel("rpc_sink_kernel").expect("rpc_sink_kernel");
        let cfg = Launch {
            grid: (4, 1, 1),
            block: (64, 1, 1),
            server_threads: 2,
            ..Launch::default()
        };
        let iters = 3u32;
        let r = gpu_rpc::cuda::launch(
            &kernel,
            &cfg,
            &d,
            &[
                KernelArg::Ptr(data.device_ptr()),
                KernelArg::U64(bytes),
                KernelArg::U32(iters),
                KernelArg::Ptr(out.device_ptr()),
            ],
        );
        // Relaxed: read after the work that counts is over (joined threads or an ended launch).
        let sunk = counters.sunk.load(Ordering::Relaxed);
        let want = 256 * iters as u64 * bytes;
        // SAFETY: the kernel has finished.
        let per_thread_ok = (0..256).all(|g| unsafe { out.read_u64(g) } == iters as u64 * bytes);
        let msg = format!("{sunk} bytes received (expected {want}); {:?}", r.as_ref().err());
        ctx.check(
            &format!("sink/{bytes}-bytes"),
            if r.is_ok() && sunk == want && per_thread_ok {
                Ok(msg)
            } else {
                Err(msg)
            },
        );
    }

    // 5. Bulk data both ways, every byte: slices in global memory at and
    // around the direct threshold (lanes of one call mixing direct and
    // packet slices), `u8`, `u32` and `u64` elements, one lane at the 64 MiB
    // limit, and slices on the stack.
    bulk_checks(&mut ctx, &module);

    println!("{} failure(s)", ctx.failures);
    if ctx.failures == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Section 5: the `Bulk` kernels, each thread's wrong bytes counted on both
/// sides; the host's byte counts exact.
fn bulk_checks(ctx: &mut Ctx, module: &Module) {
    use gpu_example_services::bulk::BulkServer;
    use gpu_examples::BulkHost;
    let check = module.kernel("rpc_bulk_check_kernel").expect("rpc_bulk_check_kernel");
    let local = module.kernel("rpc_bulk_local_kernel").expect("rpc_bulk_local_kernel");
    // (name, kernel, grid, block, stride, one size, pinned staging limit)
    let stride: u64 = 65_536 + 64;
    // Under the 64 MiB per-slice limit with the `u32` slice's extra element.
    let big: u64 = (64 << 20) - 16;
    let default = gpu_rpc::cuda::DEFAULT_STAGING_BYTES;
    let runs: [(&str, &Kernel<'_>, u32, u32, u64, u64, usize); 6] = [
        ("bulk/sizes-0..64KiB-1-warp", &check, 1, 32, stride, u64::MAX, default),
        (
            "bulk/sizes-0..64KiB-8x96-threads",
            &check,
            8,
            96,
            stride,
            u64::MAX,
            default,
        ),
        // A pinned budget of two stages: most calls find no room to borrow
        // and go through the stages into the server's kept buffers, while
        // others hold pieces of the arenas.
        (
            "bulk/sizes-0..64KiB-8x96-threads-16MiB-pinned",
            &check,
            8,
            96,
            stride,
            u64::MAX,
            16 << 20,
        ),
        // The whole default budget lent to one call (a pool with room).
        ("bulk/64MiB-less-16B-1-lane", &check, 1, 1, big + 64, big, default),
        // Too large to lend: through the stages into kept buffers.
        (
            "bulk/64MiB-less-16B-1-lane-16MiB-pinned",
            &check,
            1,
            1,
            big + 64,
            big,
            16 << 20,
        ),
        ("bulk/stack-2560B-2x64-threads", &local, 2, 64, 0, 0, default),
    ];
    for (name, kernel, grid, block, stride, one, pinned) in runs {
        let t0 = Instant::now();
        let threads = (grid * block) as usize;
        let host = Arc::new(BulkHost::default());
        // `Bulk`'s byte-wise methods are `#[gpu_rpc(parallel)]`: a thread
        // per 64 KiB of a call (the default is 256 KiB), so that the warps'
        // calls here run on the kept helpers, two server threads sharing
        // them.
        let config = ServerConfig {
            parallel_min_bytes: 64 << 10,
            ..ServerConfig::default()
        };
        let d = dispatcher_with(config, vec![Arc::new(BulkServer(Arc::clone(&host)))]);
        let out = PinnedBuffer::new(&ctx.dev, threads * 8).expect("buffer");
        let cfg = Launch {
            grid: (grid, 1, 1),
            block: (block, 1, 1),
            server_threads: 2,
            ..Launch::default()
        };
        let r = if stride == 0 {
            ctx.dev
                .ensure_stack_size(8 << 10)
                .map_err(|e| e.to_string())
                .and_then(|()| {
                    gpu_rpc::cuda::launch(kernel, &cfg, &d, &[KernelArg::Ptr(out.device_ptr())])
                        .map_err(|e| e.to_string())
                })
        } else {
            let data = gpu_rpc::cuda::DeviceBuffer::new(&ctx.dev, threads * stride as usize).expect("device buffer");
            let ports = cfg.warps().min(cfg.port_count as u64) as u32;
            gpu_rpc::cuda::CudaRegion::new(&ctx.dev, ports)
                .map(|region| region.with_staging_limit(pinned))
                .and_then(|region| {
                    gpu_rpc::cuda::launch_with_region(
                        &region,
                        kernel,
                        &cfg,
                        &d,
                        &[
                            KernelArg::Ptr(data.device_ptr()),
                            KernelArg::U64(stride),
                            KernelArg::U64(one),
                            KernelArg::Ptr(out.device_ptr()),
                        ],
                    )
                })
                .map_err(|e| e.to_string())
        };
        // SAFETY: the kernel has finished.
        let bad: u64 = (0..threads).map(|g| unsafe { out.read_u64(g) }).sum();
        let (received, sent) = (host.received.load(Ordering::Relaxed), host.sent.load(Ordering::Relaxed));
        let msg = format!(
            "{threads} threads, {received} bytes to the host and {sent} back, {bad} wrong, {} server errors, \
             {:.1} ms; {:?}",
            d.error_count(),
            t0.elapsed().as_secs_f64() * 1e3,
            r.as_ref().err()
        );
        let ok = r.is_ok() && bad == 0 && d.error_count() == 0 && received > 0 && sent > 0;
        ctx.check(name, if ok { Ok(msg) } else { Err(msg) });
    }
}
