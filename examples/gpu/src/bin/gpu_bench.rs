//! The GPU benchmarks (see BENCHMARKS.md). Every workload is reported with a
//! baseline measured in the same run:
//!
//! 1. `null`: one-lane round trip on one port (runtime no-op and the
//!    generated `Bench::incr`), and one full warp, against a raw ping-pong of
//!    two words over the same kind of pinned mapped memory (the floor) and
//!    that ping-pong with a call's steps added one at a time (payload words,
//!    a reply word read back, a device-memory lock): where the GPU's side of
//!    a call goes;
//! 2. `contention`: all SMs × warps making round-trip calls, over port counts
//!    and server threads, against one warp alone;
//! 3. `bandwidth`: `Bench::sink(&[u8])` (device to host) and
//!    `Bulk::source(&mut [u8])` (host to device) of 64 B .. 1 MiB per
//!    lane-call from one warp and 4 and 64 MiB from one lane, against
//!    `cuMemcpyDtoH`/`cuMemcpyHtoD` of the same bytes per warp-call;
//! 4. `print`: 100k threads printing one line each through `print_stderr`
//!    into a file, against CUDA's device `printf` (run with `printf PTX` as
//!    separate invocations so each can redirect its own output);
//! 6. `tax`: what linking gpu_rpc costs kernels that only *may* print — a
//!    SAXPY over 1 GiB and an FMA chain, each with and without one
//!    conditional `gpu_println!` and an `assert!`: registers and run time
//!    against the kernel without gpu_rpc, alternated in one run.
//!
//! 8. `idle`: the idle policy's trade-off — the latency of a call after
//!    0, 1 ms, 100 ms and 1 s of silence, and the CPU time the server
//!    threads use while a kernel runs 2 s without a call, for the default
//!    policy, a never-sleeping server and LLVM libc's (spin 25 µs, then
//!    sleep 250 µs).
//!
//! (Workload 5 is the CPU backend's, `rpc-runtime/benches/cpu.rs`; 7 the
//! host's cost per warp-call without a GPU, `benches/host.rs`.)
//!
//! ```text
//! gpu_bench all                        # 1-3, 6 and 8 (`print` runs on its own)
//! gpu_bench contention [CALLS]        # 2 alone, CALLS per thread (default 20)
//! gpu_bench bandwidth [d2h|h2d]        # 3 alone, both directions or one
//! gpu_bench print-rpc OUT_FILE         # 4, gpu_rpc half (1, 2, 4, 8 server threads)
//! gpu_bench print-cuda printf.ptx      # 4, CUDA printf half (stdout -> file)
//! ```

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gpu_example_services::{pingpong, BenchServer, HostServices, HostServicesServer};
use gpu_examples::{kernels_ptx, Counters};
use gpu_rpc::cuda::{
    launch, launch_with_region, CudaDevice, CudaRegion, DeviceBuffer, Kernel, KernelArg, Launch, MappedBuffer, Module,
    PinnedBuffer,
};
use gpu_rpc::server::{Dispatcher, IdlePolicy, ServerConfig};

/// A dispatcher with `config` serving `Bench` on `counters`.
fn bench_dispatcher(counters: &Arc<Counters>, config: ServerConfig) -> Dispatcher {
    let mut d = Dispatcher::new(config);
    d.add(BenchServer(Arc::clone(counters))).unwrap();
    d
}

/// The host of the round-trip workloads (null and contention): `incr` is
/// `x + 1` and nothing else. (`Counters`, which the checks use, also counts
/// every lane-call in one shared atomic: a cost of the checking, not of
/// gpu_rpc, and a cache line the server threads would fight over.) The
/// results are checked instead, from what each thread wrote.
struct Uncounted;

impl gpu_example_services::Bench for Uncounted {
    fn incr(&self, x: u64) -> u64 {
        x + 1
    }
    fn sink(&self, data: &[u8]) -> u64 {
        data.len() as u64
    }
    fn log(&self, _msg: &str) {}
}

fn round_trip_dispatcher() -> Dispatcher {
    let mut d = Dispatcher::new(ServerConfig::default());
    d.add(BenchServer(Uncounted)).unwrap();
    d
}

/// Where thread `gid` of `rpc_noop_kernel` starts counting.
fn noop_start(gid: u64) -> u64 {
    gid
}

/// Where `rpc_incr_from_kernel` starts for the one-lane row whose replies
/// do not fit inline (2^40).
const LARGE_START: u64 = 1 << 40;

/// Where thread `gid` of `rpc_incr_kernel` starts counting.
fn incr_start(gid: u64) -> u64 {
    gid * 1_000_000
}

/// Every thread of `threads` made `iters` round trips from where `start`
/// says it began: its result is `start(gid) + iters`.
fn check_round_trips(kernel: &Kernel<'_>, start: fn(u64) -> u64, out: &PinnedBuffer, threads: usize, iters: u32) {
    for g in 0..threads {
        // SAFETY: the launch is over; `out` holds one u64 per thread.
        let v = unsafe { out.read_u64(g) };
        assert_eq!(v, start(g as u64) + iters as u64, "thread {g} of {}", kernel.name());
    }
}

fn kernel_secs(r: &gpu_rpc::cuda::Report) -> f64 {
    r.kernel_time.unwrap_or(r.elapsed).as_secs_f64()
}

/// Launch one of the ping-pong kernels as one thread (with a port it does
/// not use: they talk over their own words).
fn launch_one_thread(kernel: &Kernel<'_>, args: &[KernelArg]) -> gpu_rpc::cuda::Report {
    let d = Dispatcher::new(ServerConfig::default());
    let cfg = Launch {
        grid: (1, 1, 1),
        block: (1, 1, 1),
        port_count: 1,
        ..Launch::default()
    };
    launch(kernel, &cfg, &d, args).unwrap()
}

/// Raw ping-pong: the GPU thread writes its flag and waits for the host's
/// (`pingpong::GPU_FLAG`, `HOST_FLAG`); this thread mirrors it. Returns
/// seconds per round trip.
fn pingpong(dev: &CudaDevice, module: &Module, iters: u32) -> f64 {
    let kernel = module.kernel("pingpong_kernel").unwrap();
    let words = PinnedBuffer::new(dev, pingpong::WORDS * 4).unwrap();
    let host = words.host_ptr() as usize;
    let mirror = std::thread::spawn(move || {
        let host = host as *const AtomicU32;
        // SAFETY: the buffer outlives this thread (joined below); the two
        // flags are 4-byte aligned atomics shared with the GPU, inside it.
        let (gpu, mine) = unsafe { (&*host.add(pingpong::GPU_FLAG), &*host.add(pingpong::HOST_FLAG)) };
        for i in 1..=iters {
            // Acquire: pairs with the GPU's release store.
            while gpu.load(Ordering::Acquire) != i {
                std::hint::spin_loop();
            }
            // Release: as the protocol's outbox flip.
            mine.store(i, Ordering::Release);
        }
    });
    let r = launch_one_thread(&kernel, &[KernelArg::Ptr(words.device_ptr()), KernelArg::U32(iters)]);
    mirror.join().unwrap();
    kernel_secs(&r) / iters as f64
}

/// The ping-pong with `steps` of a call added (the `STEP_*` bits of
/// `pingpong`; see `pingpong_steps_kernel`);
/// the host mirror checks the payload and writes the reply, the GPU checks
/// the reply. Returns seconds per round trip.
fn pingpong_steps(dev: &CudaDevice, module: &Module, iters: u32, steps: u32) -> f64 {
    use std::sync::atomic::AtomicU64;
    let kernel = module.kernel("pingpong_steps_kernel").unwrap();
    let words = PinnedBuffer::new(dev, pingpong::WORDS * 4).unwrap();
    let host = words.host_ptr() as usize;
    let mirror = std::thread::spawn(move || {
        let host = host as *const AtomicU32;
        // SAFETY: the buffer (page-aligned) outlives this thread (joined
        // below); the words are the kernel's layout (`pingpong`), atomics
        // shared with the GPU, the `u64`s at even indices.
        let (gpu, mine, payload, reply, second, third) = unsafe {
            (
                &*host.add(pingpong::GPU_FLAG),
                &*host.add(pingpong::HOST_FLAG),
                &*(host.add(pingpong::PAYLOAD) as *const [AtomicU64; 2]),
                &*(host.add(pingpong::REPLY) as *const AtomicU64),
                &*(host.add(pingpong::SPREAD_SECOND) as *const AtomicU64),
                &*(host.add(pingpong::SPREAD_THIRD) as *const AtomicU64),
            )
        };
        let mut bad = 0u32;
        for i in 1..=iters {
            // Acquire: pairs with the GPU's release store.
            while gpu.load(Ordering::Acquire) != i {
                std::hint::spin_loop();
            }
            if steps & pingpong::STEP_PAYLOAD != 0 {
                // Relaxed: ordered by the acquire load above.
                let a = payload[0].load(Ordering::Relaxed);
                if steps & pingpong::STEP_SPREAD != 0 {
                    let (b, c) = (second.load(Ordering::Relaxed), third.load(Ordering::Relaxed));
                    bad += (a != i as u64 || b != !(i as u64) || c != i as u64 ^ 0x5555) as u32;
                } else {
                    let b = payload[1].load(Ordering::Relaxed);
                    bad += (a != i as u64 || b != !(i as u64)) as u32;
                }
            }
            if steps & pingpong::STEP_REPLY != 0 {
                // Relaxed: published by the release store below.
                reply.store(i as u64 + 1, Ordering::Relaxed);
            }
            // Release: as the protocol's outbox flip.
            mine.store(i, Ordering::Release);
        }
        bad
    });
    let r = launch_one_thread(
        &kernel,
        &[
            KernelArg::Ptr(words.device_ptr()),
            KernelArg::U32(iters),
            KernelArg::U32(steps),
        ],
    );
    let host_bad = mirror.join().unwrap();
    // SAFETY: the kernel is over; `WRONG` is the GPU's count of wrong replies.
    let gpu_bad = unsafe { (*(host as *const AtomicU32).add(pingpong::WRONG)).load(Ordering::Relaxed) };
    assert_eq!(
        (host_bad, gpu_bad),
        (0, 0),
        "wrong payloads / replies with steps {steps:#b}"
    );
    kernel_secs(&r) / iters as f64
}

/// Seconds per call of a counting kernel with `threads` threads in one block.
/// Seconds per round trip of `kernel` (whose threads start at `start`).
fn per_call(dev: &CudaDevice, kernel: &Kernel<'_>, start: fn(u64) -> u64, threads: u32, iters: u32) -> f64 {
    per_call_from(dev, kernel, start, threads, iters, &[])
}

/// [`per_call`] with `more` arguments after the kernel's `(iters, out)`.
fn per_call_from(
    dev: &CudaDevice,
    kernel: &Kernel<'_>,
    start: fn(u64) -> u64,
    threads: u32,
    iters: u32,
    more: &[KernelArg],
) -> f64 {
    let out = PinnedBuffer::new(dev, threads as usize * 8).unwrap();
    let d = round_trip_dispatcher();
    let region = CudaRegion::new(dev, 1).unwrap();
    let cfg = Launch {
        grid: (1, 1, 1),
        block: (threads, 1, 1),
        ..Launch::default()
    };
    let r = launch_with_region(
        &region,
        kernel,
        &cfg,
        &d,
        &[&[KernelArg::U32(iters), KernelArg::Ptr(out.device_ptr())], more].concat(),
    )
    .unwrap();
    assert_eq!(r.errors, 0);
    check_round_trips(kernel, start, &out, threads as usize, iters);
    kernel_secs(&r) / iters as f64
}

fn null(dev: &CudaDevice, module: &Module) {
    use pingpong::{
        STEP_ACQUIRE_LOAD, STEP_LOCK, STEP_LOCK_NO_FENCE, STEP_LOCK_ORDERED_RMW, STEP_LOCK_TEST, STEP_PAYLOAD,
        STEP_REPLY, STEP_SPREAD,
    };
    const REPS: usize = 3;
    let iters = 20_000;
    let noop = module.kernel("rpc_noop_kernel").unwrap();
    let incr = module.kernel("rpc_incr_kernel").unwrap();
    let incr_from = module.kernel("rpc_incr_from_kernel").unwrap();
    // Warm up the module, the driver and the page tables.
    per_call(dev, &noop, noop_start, 1, 100);
    pingpong(dev, module, 1000);
    // The workloads alternate within each repetition, so a slow moment of
    // the machine falls on all of them alike.
    let mut runs: [Vec<f64>; 18] = Default::default();
    let all = STEP_PAYLOAD | STEP_REPLY | STEP_LOCK;
    for _ in 0..REPS {
        runs[0].push(pingpong(dev, module, iters));
        runs[1].push(per_call(dev, &noop, noop_start, 1, iters));
        runs[2].push(per_call(dev, &incr, incr_start, 1, iters));
        runs[3].push(per_call(dev, &noop, noop_start, 32, iters / 4));
        runs[4].push(per_call(dev, &incr, incr_start, 32, iters / 4));
        runs[5].push(pingpong_steps(dev, module, iters, STEP_PAYLOAD));
        runs[6].push(pingpong_steps(dev, module, iters, STEP_PAYLOAD | STEP_REPLY));
        runs[7].push(pingpong_steps(dev, module, iters, all));
        // The reply's two forms: a one-lane reply too large to go inline,
        // and a warp whose lanes all get the same small reply (inline).
        let big = [KernelArg::U64(LARGE_START), KernelArg::U64(0)];
        runs[8].push(per_call_from(dev, &incr_from, |_| LARGE_START, 1, iters, &big));
        let same = [KernelArg::U64(0), KernelArg::U64(0)];
        runs[9].push(per_call_from(dev, &incr_from, |_| 0, 32, iters / 4, &same));
        // The lock's parts: how it is ordered, and its test load.
        runs[10].push(pingpong_steps(dev, module, iters, all | STEP_LOCK_ORDERED_RMW));
        runs[11].push(pingpong_steps(dev, module, iters, all | STEP_LOCK_NO_FENCE));
        runs[12].push(pingpong_steps(dev, module, iters, all | STEP_LOCK_TEST));
        // The wait's acquire: on the poll itself instead of a fence after it.
        runs[13].push(pingpong_steps(dev, module, iters, STEP_PAYLOAD | STEP_ACQUIRE_LOAD));
        runs[14].push(pingpong_steps(
            dev,
            module,
            iters,
            all | STEP_LOCK_ORDERED_RMW | STEP_ACQUIRE_LOAD,
        ));
        // The payload on three lines instead of one (a one-lane call's
        // header, frame word and argument), with the protocol's wait.
        runs[15].push(pingpong_steps(
            dev,
            module,
            iters,
            STEP_PAYLOAD | STEP_SPREAD | STEP_ACQUIRE_LOAD,
        ));
        // The protocol's lock and wait, payload, no reply read (an inline
        // reply): on one line, then on three.
        let lock = STEP_LOCK | STEP_LOCK_ORDERED_RMW | STEP_ACQUIRE_LOAD | STEP_PAYLOAD;
        runs[16].push(pingpong_steps(dev, module, iters, lock));
        runs[17].push(pingpong_steps(dev, module, iters, lock | STEP_SPREAD));
    }
    let [floor, one, one_incr, warp, warp_incr, payload, reply, lock, one_big, warp_same, lock_ordered, lock_bare, lock_test, payload_acq, all_acq, spread_acq, lock_acq, spread_lock] =
        runs.map(|mut v| spread(&mut v));
    println!("\n### 1. Null round trip (one port, one host server thread, {iters} calls, {REPS} launches each)\n");
    println!("| workload | µs per call, median [min, max] | × floor (medians) |");
    println!("|---|---:|---:|");
    for (name, (m, lo, hi)) in [
        ("raw ping-pong of two words (floor)", floor),
        ("  + two payload words written before the flag", payload),
        ("  + a reply word read after the host's flag", reply),
        (
            "  + a lock in device memory around it (an RMW and a fence at each end)",
            lock,
        ),
        (
            "    the lock by acquiring/releasing RMWs, no fences (the protocol's lock)",
            lock_ordered,
        ),
        (
            "    the lock's RMWs alone, no fences (not a lock: the fences' cost)",
            lock_bare,
        ),
        (
            "    the lock (RMWs and fences) with a test load before its RMW",
            lock_test,
        ),
        (
            "  payload, polls by acquiring loads instead of a fence after them (the protocol's wait)",
            payload_acq,
        ),
        (
            "  payload, reply, lock by acquiring/releasing RMWs, acquiring polls (the protocol's steps)",
            all_acq,
        ),
        (
            "  payload of three words on three lines (a one-lane call's header, frame, argument), acquiring polls",
            spread_acq,
        ),
        (
            "  payload (one line), the protocol's lock and wait, no reply read (as a call with an inline reply)",
            lock_acq,
        ),
        (
            "    the same with the payload on three lines (a one-lane call's header, frame, argument)",
            spread_lock,
        ),
        ("runtime no-op, 1 lane (reply inline)", one),
        ("generated `Bench::incr`, 1 lane (reply inline)", one_incr),
        (
            "generated `Bench::incr`, 1 lane, reply over 30 bits (in the packet)",
            one_big,
        ),
        ("runtime no-op, 1 warp (32 lanes, 32 replies in the packet)", warp),
        ("generated `Bench::incr`, 1 warp (32 replies in the packet)", warp_incr),
        (
            "generated `Bench::incr`, 1 warp, one reply on every lane (inline)",
            warp_same,
        ),
    ] {
        println!(
            "| {name} | {:.2} [{:.2}, {:.2}] | {:.2} |",
            m * 1e6,
            lo * 1e6,
            hi * 1e6,
            m / floor.0
        );
    }
    println!(
        "\nOne warp: {:.2} M lane-calls/s ({:.2} M with the generated stub).",
        32.0 / warp.0 / 1e6,
        32.0 / warp_incr.0 / 1e6
    );
}

/// Workload 2 with `iters` calls per thread (20 in BENCHMARKS.md).
fn contention(dev: &CudaDevice, module: &Module, iters: u32) {
    const REPS: usize = 3;
    let sms = dev.sm_count().unwrap();
    let incr = module.kernel("rpc_incr_kernel").unwrap();
    let one_warp = 1.0 / per_call(dev, &incr, incr_start, 32, 2000);
    println!(
        "\n### 2. Throughput under contention (`Bench::incr`, {iters} calls per thread, {REPS} launches per row)\n"
    );
    println!("Baseline: one warp alone, {:.3} M warp-calls/s.\n", one_warp / 1e6);
    println!(
        "| blocks × threads | warps | ports | server threads | M warp-calls/s, median [min, max] | M lane-calls/s | × one warp |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    // 132 blocks × 128 threads (528 warps, the reference's configuration),
    // 528 blocks × 128 threads (2112 warps), and the same 4224 warps as
    // 264 × 512 and as 132 × 1024 (every SM full).
    for (grid, block, port_list) in [
        (sms, 128u32, vec![64u32, 512, 4096]),
        (sms * 4, 128, vec![64, 512, 4096]),
        (sms * 2, 512, vec![64, 512, 4096]),
        (sms, 1024, vec![64, 512, 4096]),
    ] {
        for &ports in &port_list {
            'row: for servers in [1usize, 2, 4, 8] {
                let threads = grid as usize * block as usize;
                let warps = grid as u64 * block as u64 / 32;
                let mut rates = Vec::new();
                for _ in 0..REPS {
                    let out = PinnedBuffer::new(dev, threads * 8).unwrap();
                    let d = round_trip_dispatcher();
                    let region = CudaRegion::new(dev, ports).unwrap();
                    let cfg = Launch {
                        grid: (grid, 1, 1),
                        block: (block, 1, 1),
                        server_threads: servers,
                        ..Launch::default()
                    };
                    let r = match launch_with_region(
                        &region,
                        &incr,
                        &cfg,
                        &d,
                        &[KernelArg::U32(iters), KernelArg::Ptr(out.device_ptr())],
                    ) {
                        Ok(r) => r,
                        Err(e) => {
                            println!("| {grid} × {block} | | {ports} | {servers} | launch refused: {e} | | |");
                            continue 'row;
                        }
                    };
                    assert_eq!(r.calls, warps * iters as u64);
                    check_round_trips(&incr, incr_start, &out, threads, iters);
                    rates.push(r.calls as f64 / kernel_secs(&r));
                }
                let (wc, lo, hi) = spread(&mut rates);
                println!(
                    "| {grid} × {block} | {warps} | {ports} | {servers} | {:.3} [{:.3}, {:.3}] | {:.1} | {:.1} |",
                    wc / 1e6,
                    lo / 1e6,
                    hi / 1e6,
                    wc * 32.0 / 1e6,
                    wc / one_warp
                );
            }
        }
    }
}

/// Issue 19's one-server-thread row (528 warps on 512 ports, `Bench::incr`,
/// 20 calls per thread) launch by launch, to tell what its two levels
/// (1.3-1.8 or 2.5-2.9 M warp-calls/s) follow: `regions` fresh regions
/// (fresh pinned memory each), `launches` launches on each. Per launch: the
/// rate, the CPUs the server thread was seen on (sampled from /proc every
/// 200 µs while it ran), and at how many samples another running thread of
/// this process was on its CPU.
fn contention_probe(dev: &CudaDevice, module: &Module, regions: usize, launches: usize) {
    let incr = module.kernel("rpc_incr_kernel").unwrap();
    let sms = dev.sm_count().unwrap();
    let (block, ports, iters) = (128u32, 512u32, 20u32);
    let threads = sms as usize * block as usize;
    println!(
        "\n### Probe: one server thread, {} warps on {ports} ports, launch by launch\n",
        threads / 32
    );
    println!(
        "| region | launch | M warp-calls/s | server thread's CPUs | samples with another running thread on its CPU |"
    );
    println!("|---:|---:|---:|---|---:|");
    for r in 0..regions {
        let region = CudaRegion::new(dev, ports).unwrap();
        for l in 0..launches {
            let out = PinnedBuffer::new(dev, threads * 8).unwrap();
            let d = round_trip_dispatcher();
            let cfg = Launch {
                grid: (sms, 1, 1),
                block: (block, 1, 1),
                server_threads: 1,
                ..Launch::default()
            };
            let stop = AtomicBool::new(false);
            let (res, samples) = std::thread::scope(|s| {
                let sampler = s.spawn(|| sample_server_cpus(&stop));
                let res = launch_with_region(
                    &region,
                    &incr,
                    &cfg,
                    &d,
                    &[KernelArg::U32(iters), KernelArg::Ptr(out.device_ptr())],
                );
                // Release: pairs with the sampler's acquire load.
                stop.store(true, Ordering::Release);
                (res, sampler.join().unwrap())
            });
            let res = res.unwrap();
            check_round_trips(&incr, incr_start, &out, threads, iters);
            let mut cpus: Vec<usize> = samples.iter().map(|&(c, _)| c).collect();
            cpus.sort_unstable();
            cpus.dedup();
            let shared = samples.iter().filter(|&&(_, other)| other).count();
            println!(
                "| {r} | {l} | {:.3} | {cpus:?} | {shared} of {} |",
                res.calls as f64 / kernel_secs(&res) / 1e6,
                samples.len()
            );
        }
    }
}

/// Until `stop`, every 200 µs: the CPU the server thread (the only thread
/// named `gpu_rpc server ...`) last ran on, and whether another running thread of this process (not this
/// one) was on it (/proc/self/task/*/stat, Linux).
fn sample_server_cpus(stop: &AtomicBool) -> Vec<(usize, bool)> {
    // (state, CPU) of a task, from the fields after its `(comm)`.
    let state_cpu = |stat: &str| -> Option<(char, usize)> {
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        Some((f.first()?.chars().next()?, f.get(36)?.parse().ok()?))
    };
    let me = std::fs::read_link("/proc/thread-self").ok();
    let mut samples = Vec::new();
    // Acquire: pairs with the launcher's release store.
    while !stop.load(Ordering::Acquire) {
        let mut server = None;
        let mut running = Vec::new();
        for t in std::fs::read_dir("/proc/self/task").into_iter().flatten().flatten() {
            if me
                .as_ref()
                .is_some_and(|m| m.file_name() == Some(t.file_name().as_os_str()))
            {
                continue;
            }
            let (Ok(comm), Ok(stat)) = (
                std::fs::read_to_string(t.path().join("comm")),
                std::fs::read_to_string(t.path().join("stat")),
            ) else {
                continue;
            };
            let Some((state, cpu)) = state_cpu(&stat) else { continue };
            // (A thread's `comm` is its name cut to 15 bytes.)
            if comm.trim() == "gpu_rpc server" {
                server = Some(cpu);
            } else if state == 'R' {
                running.push(cpu);
            }
        }
        if let Some(c) = server {
            samples.push((c, running.contains(&c)));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    samples
}

/// Workload 3 in the directions `dirs` (0: device to host, 1: host to
/// device).
fn bandwidth(dev: &CudaDevice, module: &Module, dirs: &[u32]) {
    use gpu_example_services::bulk::BulkServer;
    use gpu_examples::BulkHost;
    let kernel = module.kernel("rpc_bulk_kernel").unwrap();
    println!(
        "\n### 3. Bulk data (`Bench::sink(&[u8])` to the host, `Bulk::source(&mut [u8])` back; each lane its own \
         slice of one device buffer)\n"
    );
    println!(
        "| direction | lanes | bytes per lane-call | warp-calls | gpu_rpc GB/s, median [min, max] of 3 | the region's \
         first run (pins its memory) GB/s | cuMemcpy GB/s (same bytes per warp-call), median [min, max] | gpu_rpc / \
         cuMemcpy | in packets (direct path off) GB/s, median [min, max] | direct / packets | calls lent pinned memory / \
         refused; MiB moved straight / staged; MiB lent zeroed / zeroed by the cleaner |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2], v[0], v[v.len() - 1])
    };
    let mut ceilings = Vec::new();
    let mut lanes_apart = Vec::new();
    for &dir in dirs {
        // (lanes, bytes per lane, pinned budget: the default, or one too
        // small to lend the slice, which then goes through the stages into
        // the server's kept buffers)
        let default = gpu_rpc::cuda::DEFAULT_STAGING_BYTES;
        for (lanes, bytes, pinned) in [
            (32usize, 64usize, default),
            (32, 4096, default),
            (32, 65_536, default),
            (32, 1 << 20, default),
            (1, 4 << 20, default),
            (1, 64 << 20, default),
            (1, 64 << 20, 16 << 20),
            (1, 64 << 20, 128 << 20),
        ] {
            // A budget of twice the slice: the cleaner's second arena, for
            // out-buffers (device → host needs no zeroing).
            if dir == 0 && pinned > default {
                continue;
            }
            let per_call = lanes * bytes;
            let data = DeviceBuffer::new(dev, per_call).unwrap();
            let out = PinnedBuffer::new(dev, lanes * 8).unwrap();
            let cfg = Launch {
                grid: (1, 1, 1),
                block: (lanes as u32, 1, 1),
                port_count: 1,
                ..Launch::default()
            };
            // GB/s of 3 runs moving `total` bytes each, by address or not,
            // on one region whose pinned memory a first, untimed run made
            // (a server lives long; its first large call pins memory once,
            // as the baseline's pinned buffer is made before its timing);
            // that first run's GB/s is returned too.
            let run = |packets: bool, total: usize, config: &ServerConfig| {
                let iters = (total / per_call).clamp(4, 2000) as u32;
                let mut rates = Vec::new();
                let region = CudaRegion::new(dev, 1).unwrap().with_staging_limit(pinned);
                for _ in 0..4 {
                    let counters = Arc::new(Counters::default());
                    let bulk = Arc::new(BulkHost::default());
                    let mut d = bench_dispatcher(&counters, config.clone());
                    d.add(BulkServer(Arc::clone(&bulk))).unwrap();
                    let args = [
                        KernelArg::Ptr(data.device_ptr()),
                        KernelArg::U64(bytes as u64),
                        KernelArg::U32(iters),
                        KernelArg::U32(dir | if packets { 2 } else { 0 }),
                        KernelArg::Ptr(out.device_ptr()),
                    ];
                    let r = launch_with_region(&region, &kernel, &cfg, &d, &args).unwrap();
                    // Relaxed: read after the work that counts is over (joined threads or an ended launch).
                    let moved = counters.sunk.load(Ordering::Relaxed) + bulk.sent.load(Ordering::Relaxed);
                    assert_eq!(moved, (per_call * iters as usize) as u64);
                    assert_eq!(d.error_count(), 0);
                    rates.push(moved as f64 / kernel_secs(&r) / 1e9);
                }
                let first = rates.remove(0);
                (iters, median(rates), first, region.copies().stats())
            };
            let config = ServerConfig::default();
            let (iters, (r, rlo, rhi), first, stats) = run(false, 1 << 30, &config);
            // The packets (the path before the direct one) at the sizes
            // where they finish in reasonable time.
            let packets = (bytes <= 65_536).then(|| run(true, 64 << 20, &config).1);
            // `Bulk::source` runs a call's lanes on several threads
            // (`#[gpu_rpc(parallel)]`) where the call moves enough bytes:
            // the same rows with every lane on the serving thread, and with
            // a thread for every 4 MiB of the call (the default until the
            // lanes zeroed their own out-buffers, `425a7db`).
            if dir == 1 && lanes > 1 && bytes >= 65_536 {
                let cell = |(m, lo, hi): (f64, f64, f64)| format!("{m:.3} [{lo:.3}, {hi:.3}]");
                let in_order = ServerConfig {
                    lane_threads: 1,
                    ..config.clone()
                };
                let large = ServerConfig {
                    parallel_min_bytes: 4 << 20,
                    ..config.clone()
                };
                let one = run(false, 1 << 30, &in_order).1;
                let split = run(false, 1 << 30, &large).1;
                lanes_apart.push(format!(
                    "| {lanes} | {bytes} | {} | {} | {} | {:.2} | {:.2} |",
                    cell((r, rlo, rhi)),
                    cell(one),
                    cell(split),
                    r / one.0,
                    split.0 / one.0
                ));
            }
            // Baseline: the same bytes per warp-call, pinned host memory on
            // the other side.
            let host = PinnedBuffer::new(dev, per_call).unwrap();
            let reps = iters.min(100);
            let mut copy = Vec::new();
            for _ in 0..3 {
                let mut t = Duration::ZERO;
                for _ in 0..reps {
                    t += if dir == 0 {
                        data.copy_to(&host).unwrap()
                    } else {
                        // SAFETY: no kernel runs; nothing else writes `host`.
                        data.copy_from(unsafe { host.as_slice() }).unwrap()
                    };
                }
                copy.push(per_call as f64 * reps as f64 / t.as_secs_f64() / 1e9);
            }
            let (c, clo, chi) = median(copy);
            if dir == 1 && lanes == 1 {
                // The host's own fill of the same bytes of pinned memory,
                // as `Bulk::source` does: one lane's method, then its copy,
                // one after the other, can reach at most
                // 1 / (1 + cuMemcpy rate / fill rate) of the copy alone.
                let mut fill = Vec::new();
                for _ in 0..3 {
                    let t = Instant::now();
                    // SAFETY: `host` holds `per_call` bytes; no copy runs.
                    unsafe { std::ptr::write_bytes(host.host_ptr(), 1, per_call) };
                    fill.push(per_call as f64 / t.elapsed().as_secs_f64() / 1e9);
                }
                let (f, flo, fhi) = median(fill);
                ceilings.push(format!(
                    "| {} | {f:.2} [{flo:.2}, {fhi:.2}] | {:.3} |",
                    bytes >> 20,
                    1.0 / (1.0 + c / f)
                ));
            }
            let (p, vs) = match packets {
                Some((p, plo, phi)) => (format!("{p:.3} [{plo:.3}, {phi:.3}]"), format!("{:.1}", r / p)),
                None => ("—".to_string(), "—".to_string()),
            };
            println!(
                "| {}{} | {lanes} | {bytes} | {iters} | {r:.3} [{rlo:.3}, {rhi:.3}] | {first:.3} | {c:.2} [{clo:.2}, {chi:.2}] | {:.3} | {p} | {vs} | {} / {}; {} / {}; {} / {} |",
                if dir == 0 { "device → host" } else { "host → device" },
                if pinned == default { String::new() } else { format!(" ({} MiB pinned)", pinned >> 20) },
                r / c,
                stats.loans,
                stats.loans_refused,
                stats.straight_bytes >> 20,
                stats.staged_bytes >> 20,
                stats.lent_zeroed_bytes >> 20,
                stats.cleaned_bytes >> 20,
            );
        }
    }
    if !lanes_apart.is_empty() {
        println!(
            "\nHost → device, `Bulk::source` (`#[gpu_rpc(parallel)]`): the default configuration (up to {} threads, \
             one per {} KiB of the call), every lane on the serving thread (`lane_threads: 1`), and a thread per \
             4 MiB; GB/s, median [min, max] of 3\n",
            ServerConfig::default().lane_threads,
            ServerConfig::default().parallel_min_bytes >> 10
        );
        println!(
            "| lanes | bytes per lane-call | default | lane_threads 1 | 4 MiB a thread | default / 1 | 4 MiB / 1 |"
        );
        println!("|---:|---:|---:|---:|---:|---:|---:|");
        for row in &lanes_apart {
            println!("{row}");
        }
    }
    if !ceilings.is_empty() {
        println!(
            "\nOne lane, host → device: the host's fill of the same pinned bytes alone, and the most a \
             fill followed by its copy can reach (× cuMemcpy)\n"
        );
        println!("| MiB | host fill GB/s, median [min, max] of 3 | fill then copy, × cuMemcpy |");
        println!("|---:|---:|---:|");
        for row in &ceilings {
            println!("{row}");
        }
    }
}

/// Writes every printed line to a file.
struct FilePrinter(Mutex<std::io::BufWriter<std::fs::File>>);

impl HostServices for FilePrinter {
    fn print_stderr(&self, msg: &str) {
        let _ = self.0.lock().unwrap().write_all(msg.as_bytes());
    }
    fn exit(&self, code: i32) -> ! {
        std::process::exit(code)
    }
    fn add(&self, a: u64, b: u64) -> u64 {
        a + b
    }
    fn read_block(&self, _offset: u64, _out: &mut [u8]) -> usize {
        0
    }
}

const PRINT_BLOCKS: u32 = 782;
const PRINT_THREADS: u32 = 128;

/// A printer that shares no lock between server threads: each thread keeps
/// its lines in its own buffer (what a printer that takes no shared lock
/// per line could reach; nothing is written to a file).
struct ThreadLocalPrinter(Arc<std::sync::atomic::AtomicU64>);

std::thread_local! {
    static LOCAL_LINES: std::cell::RefCell<(Vec<u8>, u64)> = const { std::cell::RefCell::new((Vec::new(), 0)) };
}

impl HostServices for ThreadLocalPrinter {
    fn print_stderr(&self, msg: &str) {
        LOCAL_LINES.with(|l| {
            let mut l = l.borrow_mut();
            if l.0.len() > 1 << 20 {
                l.0.clear();
            }
            l.0.extend_from_slice(msg.as_bytes());
            l.1 += 1;
            // Every 1024 lines the count goes to the shared total (Relaxed:
            // a count read after the launch joined the threads).
            if l.1 == 1024 {
                self.0.fetch_add(1024, Ordering::Relaxed);
                l.1 = 0;
            }
        });
    }
    fn exit(&self, code: i32) -> ! {
        std::process::exit(code)
    }
    fn add(&self, a: u64, b: u64) -> u64 {
        a + b
    }
    fn read_block(&self, _offset: u64, _out: &mut [u8]) -> usize {
        0
    }
}

/// A printer that hands each line to the standard services' host
/// ([`StdHost`](gpu_rpc::services::StdHost)), as `gpu_println!` in
/// `gpu-run` does.
struct StdPrinter(gpu_rpc::services::StdHost);

impl HostServices for StdPrinter {
    fn print_stderr(&self, msg: &str) {
        use gpu_rpc::services::Std;
        let _ = self.0.write(gpu_rpc::services::Fd::STDOUT, msg.as_bytes());
    }
    fn exit(&self, code: i32) -> ! {
        std::process::exit(code)
    }
    fn add(&self, a: u64, b: u64) -> u64 {
        a + b
    }
    fn read_block(&self, _offset: u64, _out: &mut [u8]) -> usize {
        0
    }
}

/// 100 096 threads print one line each, with 1, 2, 4 and 8 server threads:
/// into one file through a printer that takes a shared lock per line (as a
/// user's printer would); through the standard services' host into an
/// unbuffered file (one `write` per line, as `gpu-run`'s line-buffered
/// stdout does); then into each server thread's own memory (no shared
/// lock), the transport's own rate.
fn print_rpc(module: &Module, path: &str) {
    let kernel = module.kernel("rpc_print_kernel").unwrap();
    let file = std::fs::File::create(path).unwrap();
    let printer = Arc::new(FilePrinter(Mutex::new(std::io::BufWriter::new(file))));
    let lines = (PRINT_BLOCKS * PRINT_THREADS) as f64;
    let run = |d: &Dispatcher, servers: usize| {
        let cfg = Launch {
            grid: (PRINT_BLOCKS, 1, 1),
            block: (PRINT_THREADS, 1, 1),
            server_threads: servers,
            ..Launch::default()
        };
        let t0 = Instant::now();
        let r = launch(&kernel, &cfg, d, &[KernelArg::U32(0)]).unwrap();
        (kernel_secs(&r), t0)
    };
    for servers in [1usize, 2, 4, 8] {
        let mut d = Dispatcher::new(ServerConfig::default());
        d.add(HostServicesServer(Arc::clone(&printer))).unwrap();
        let (kernel, t0) = run(&d, servers);
        printer.0.lock().unwrap().flush().unwrap();
        let wall = t0.elapsed().as_secs_f64();
        println!(
            "print-rpc: {lines} lines, {servers} server threads, a lock per line, kernel {:.1} ms, end to end {:.1} ms, {:.2} M lines/s end to end",
            kernel * 1e3,
            wall * 1e3,
            lines / wall / 1e6
        );
    }
    let std_path = format!("{path}.std");
    for servers in [1usize, 2, 4, 8] {
        let file = std::fs::File::create(&std_path).unwrap();
        let host = gpu_rpc::services::StdHost::new(gpu_rpc::services::StdHostConfig::default().stdout(file));
        let mut d = Dispatcher::new(ServerConfig::default());
        d.add(HostServicesServer(StdPrinter(host))).unwrap();
        let (kernel, t0) = run(&d, servers);
        let wall = t0.elapsed().as_secs_f64();
        let written = std::fs::read_to_string(&std_path).map_or(0, |t| t.lines().count());
        println!(
            "print-rpc: {lines} lines, {servers} server threads, the standard services' host into an unbuffered file ({written} lines in it), kernel {:.1} ms, end to end {:.1} ms, {:.2} M lines/s end to end",
            kernel * 1e3,
            wall * 1e3,
            lines / wall / 1e6
        );
    }
    for servers in [1usize, 2, 4, 8] {
        let count = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut d = Dispatcher::new(ServerConfig::default());
        d.add(HostServicesServer(ThreadLocalPrinter(Arc::clone(&count))))
            .unwrap();
        let (kernel, _) = run(&d, servers);
        println!(
            "print-rpc: {lines} lines, {servers} server threads, no shared lock (lines kept per thread, >= {} counted), kernel {:.1} ms, {:.2} M lines/s in the kernel's time",
            count.load(Ordering::Relaxed),
            kernel * 1e3,
            lines / kernel / 1e6
        );
    }
}

fn print_cuda(dev: &CudaDevice, ptx_path: &str) {
    dev.set_printf_fifo_size(256 << 20).unwrap();
    let ptx = std::fs::read_to_string(ptx_path).unwrap();
    let module = Module::from_ptx(dev, &ptx).unwrap();
    let kernel = module.kernel("printf_kernel").unwrap();
    let d = Dispatcher::new(ServerConfig::default());
    let cfg = Launch {
        grid: (PRINT_BLOCKS, 1, 1),
        block: (PRINT_THREADS, 1, 1),
        port_count: 1,
        ..Launch::default()
    };
    let t0 = Instant::now();
    let r = launch(&kernel, &cfg, &d, &[]).unwrap();
    std::io::stdout().flush().unwrap();
    let wall = t0.elapsed().as_secs_f64();
    let lines = (PRINT_BLOCKS * PRINT_THREADS) as f64;
    eprintln!(
        "print-cuda: {} lines, kernel {:.1} ms, end to end {:.1} ms, {:.2} M lines/s end to end",
        lines,
        kernel_secs(&r) * 1e3,
        wall * 1e3,
        lines / wall / 1e6
    );
}

/// Median, min and max of `v`.
fn spread(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

/// The tax (workload 6): each pair — the kernel without gpu_rpc, the same
/// with a conditional print and an assert — alternated `REPS` times in one
/// run.
fn tax(dev: &CudaDevice, module: &Module) {
    const REPS: usize = 9;
    // SAXPY over 1 GiB per array (memory-bound); an FMA chain of 8192 steps
    // on 4 Mi elements (compute-bound). Inputs are zero, so results stay
    // finite and the print branches are never taken.
    let big = 1usize << 28;
    let x = DeviceBuffer::new(dev, big * 4).unwrap();
    let y = DeviceBuffer::new(dev, big * 4).unwrap();
    let small = 1u32 << 22;
    let iters = 8192u32;
    let saxpy_args = [
        KernelArg::U32(big as u32),
        KernelArg::F32(2.0),
        KernelArg::Ptr(x.device_ptr()),
        KernelArg::Ptr(y.device_ptr()),
    ];
    let fma_args = [
        KernelArg::U32(small),
        KernelArg::U32(iters),
        KernelArg::Ptr(x.device_ptr()),
    ];
    println!("\n### 6. The tax of a possible print ({REPS} alternated runs each, kernel time by CUDA events)\n");
    println!("| kernel | registers | ms, median [min, max] | × without gpu_rpc (median) |");
    println!("|---|---:|---:|---:|");
    for (plain, print, n, args) in [
        ("saxpy_kernel", "saxpy_print_kernel", big as u32, &saxpy_args[..]),
        ("fma_kernel", "fma_print_kernel", small, &fma_args[..]),
    ] {
        let kernels = [module.kernel(plain).unwrap(), module.kernel(print).unwrap()];
        let cfg = Launch {
            grid: (n.div_ceil(256), 1, 1),
            block: (256, 1, 1),
            port_count: 1,
            ..Launch::default()
        };
        let d = Dispatcher::new(ServerConfig::default());
        let mut times = [Vec::new(), Vec::new()];
        for rep in 0..=REPS {
            for (k, t) in kernels.iter().zip(times.iter_mut()) {
                let r = launch(k, &cfg, &d, args).unwrap();
                assert_eq!(r.calls, 0, "{}: the print branch ran", k.name());
                // The first round warms up the module and the memory.
                if rep > 0 {
                    t.push(kernel_secs(&r) * 1e3);
                }
            }
        }
        let base = spread(&mut times[0].clone()).0;
        for (k, t) in kernels.iter().zip(times.iter_mut()) {
            let regs = k
                .resources()
                .map(|r| r.registers.to_string())
                .unwrap_or_else(|e| e.to_string());
            let (med, lo, hi) = spread(t);
            println!(
                "| `{}` | {regs} | {med:.3} [{lo:.3}, {hi:.3}] | {:.3} |",
                k.name(),
                med / base
            );
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let what = args.get(1).map(String::as_str).unwrap_or("all");
    let dev = CudaDevice::new(0).unwrap_or_else(|e| {
        eprintln!("gpu_bench: {e}");
        std::process::exit(1)
    });
    if what == "print-cuda" {
        print_cuda(&dev, args.get(2).expect("printf PTX path"));
        return;
    }
    let ptx = kernels_ptx().unwrap_or_else(|e| {
        eprintln!("gpu_bench: {e}");
        std::process::exit(1)
    });
    let module = Module::from_ptx(&dev, ptx).unwrap();
    println!(
        "device: {} ({} SMs), driver {:?}",
        dev.name().unwrap(),
        dev.sm_count().unwrap(),
        CudaDevice::driver_version().ok()
    );
    match what {
        "null" => null(&dev, &module),
        "contention" => contention(
            &dev,
            &module,
            args.get(2).map_or(20, |n| n.parse().expect("calls per thread")),
        ),
        "bandwidth" => bandwidth(
            &dev,
            &module,
            match args.get(2).map(String::as_str) {
                None => &[0, 1],
                Some("d2h") => &[0],
                Some("h2d") => &[1],
                Some(other) => {
                    eprintln!("gpu_bench: unknown direction `{other}` (d2h, h2d)");
                    std::process::exit(2)
                }
            },
        ),
        "tax" => tax(&dev, &module),
        "contention-probe" => contention_probe(
            &dev,
            &module,
            args.get(2).map_or(6, |n| n.parse().expect("regions")),
            args.get(3).map_or(3, |n| n.parse().expect("launches per region")),
        ),
        "idle" => idle(&module),
        "print-rpc" => print_rpc(&module, args.get(2).map(String::as_str).unwrap_or("/tmp/print-rpc.txt")),
        "all" => {
            null(&dev, &module);
            contention(&dev, &module, 20);
            bandwidth(&dev, &module, &[0, 1]);
            tax(&dev, &module);
            idle(&module);
        }
        other => {
            eprintln!(
                "gpu_bench: unknown workload `{other}` (null, contention, contention-probe, bandwidth, tax, idle, print-rpc, print-cuda, all)"
            );
            std::process::exit(2)
        }
    }
}

/// The policies the idle benchmark compares.
fn idle_policies() -> [(&'static str, IdlePolicy); 3] {
    [
        ("default", IdlePolicy::default()),
        ("never sleep", IdlePolicy::NEVER_SLEEP),
        (
            "LLVM libc's (spin 25 µs, sleep 250 µs)",
            IdlePolicy {
                spin: Duration::from_micros(25),
                first_sleep: Duration::from_micros(250),
                max_sleep: Duration::from_micros(250),
            },
        ),
    ]
}

/// CPU time (ns) the threads whose name starts with `prefix` have used so
/// far, from /proc/self/task/*/schedstat (Linux).
fn threads_cpu_ns(prefix: &str) -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .flatten()
        .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.starts_with(prefix)))
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// One launch of `rpc_idle_kernel` (one thread): the latencies in µs of
/// `reps` calls, each after `silence` without a call.
fn idle_latencies(module: &Module, policy: IdlePolicy, servers: usize, silence: Duration, reps: u32) -> Vec<f64> {
    let dev = module.device();
    let kernel = module.kernel("rpc_idle_kernel").unwrap();
    let counters = Arc::new(Counters::default());
    let mut d = Dispatcher::new(ServerConfig {
        idle: policy,
        ..ServerConfig::default()
    });
    d.add(BenchServer(Arc::clone(&counters))).unwrap();
    let out = DeviceBuffer::new(dev, reps as usize * 8).unwrap();
    let cfg = Launch {
        grid: (1, 1, 1),
        block: (1, 1, 1),
        port_count: 64,
        server_threads: servers,
        ..Launch::default()
    };
    let args = [
        KernelArg::U64(silence.as_nanos() as u64),
        KernelArg::U32(reps),
        KernelArg::Ptr(out.device_ptr()),
    ];
    launch(&kernel, &cfg, &d, &args).unwrap();
    let v: Vec<f64> = out
        .to_vec()
        .unwrap()
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .map(|ns| {
            assert_ne!(ns, u64::MAX, "a wrong result");
            ns as f64 / 1e3
        })
        .collect();
    // Relaxed: read after the work that counts is over (joined threads or an ended launch).
    assert_eq!(counters.incr.load(Ordering::Relaxed), reps as u64);
    v
}

/// Workload 8: the idle policy's trade-off.
fn idle(module: &Module) {
    println!("\nidle: latency of one call (one thread, 2 server threads) after a silence, µs, median [min, max]");
    println!("| policy | back to back | after 1 ms | after 100 ms | after 1 s |");
    println!("|---|---:|---:|---:|---:|");
    for (name, policy) in idle_policies() {
        let mut row = format!("| {name} |");
        for (silence, reps) in [
            (Duration::ZERO, 2000),
            (Duration::from_millis(1), 200),
            (Duration::from_millis(100), 10),
            (Duration::from_secs(1), 3),
        ] {
            let mut v = idle_latencies(module, policy, 2, silence, reps);
            let (m, lo, hi) = spread(&mut v);
            row += &format!(" {m:.1} [{lo:.1}, {hi:.1}] |");
        }
        println!("{row}");
    }
    println!(
        "\nidle: CPU time of the server threads while a kernel runs 2 s without a call (sampled from 0.3 s to 1.8 s)"
    );
    println!("| policy | server threads | server CPU, % of one core | kernel watcher, % of one core |");
    println!("|---|---:|---:|---:|");
    for (name, policy) in idle_policies() {
        for servers in [2usize, 8] {
            let measured = std::thread::scope(|s| {
                let run = s.spawn(|| idle_latencies(module, policy, servers, Duration::from_secs(2), 1));
                std::thread::sleep(Duration::from_millis(300));
                let (s0, w0, t0) = (
                    threads_cpu_ns("gpu_rpc server"),
                    threads_cpu_ns("gpu_rpc launch"),
                    Instant::now(),
                );
                std::thread::sleep(Duration::from_millis(1500));
                let (s1, w1) = (threads_cpu_ns("gpu_rpc server"), threads_cpu_ns("gpu_rpc launch"));
                let wall = t0.elapsed().as_nanos() as f64;
                run.join().unwrap();
                ((s1 - s0) as f64 / wall * 100.0, (w1 - w0) as f64 / wall * 100.0)
            });
            println!("| {name} | {servers} | {:.2} | {:.2} |", measured.0, measured.1);
        }
    }
}
