//! The host's cost of serving one warp-call, measured without a GPU (workload
//! 7 of BENCHMARKS.md): a synthetic device plays 32-lane warps on a CPU
//! [`CpuRegion`], writing frames the way a kernel's client does
//! ([`RawDevice`]), and a server thread serves them.
//!
//! `cargo bench --bench host` (a plain bench binary: it prints Markdown
//! tables; `-- --quick` runs fewer calls, `-- --only TEXT` only the rows
//! whose workload names `TEXT`, e.g. for `perf record`, `-- --lanes N` only
//! the batch rows of N lanes, `-- --file-writes` only the large file
//! writes, `-- --round-trip` only the round trips, `-- --batch` only the batch rows, e.g. to count instructions
//! under `valgrind --tool=callgrind`, where the threaded rows' spinning
//! threads would take hours). Two modes:
//!
//! * **batch**: the device fills every port with a call, then one
//!   `Dispatcher::poll` over the ports serves them all; the time of the poll
//!   divided by the calls is the server's own cost per warp-call (decode,
//!   dispatch, reply, lock, scan), with the memory hot in its cache. The same
//!   poll over ports with nothing pending is the scan cost alone.
//! * **threaded**: a device thread keeps every port busy (the next call as
//!   soon as a reply is in, calls of several packets too) while one server
//!   thread serves; warp-calls per second end to end, with the cache-line
//!   traffic of two cores. The device writes and reads only the words a
//!   call uses, as a client does, so that the server, not the device
//!   thread, is what limits the rate.
//! * **round trip**: one port, a device thread and one server thread
//!   taking turns, one call at a time, as a kernel's single waiting call
//!   meets its server: ns per call, beside a floor of the same two threads
//!   where the server only opens the port and hands it back (no frame
//!   read, no reply words). What the server adds to a call's latency, the
//!   lines the device wrote crossing to its core included.
//! * **large slices without lent memory**: one lane passes a 64 MiB slice
//!   by address (in, or an out-buffer back) to a server whose memory lends
//!   nothing, as a GPU server's is for a slice its pinned budget cannot hold;
//!   GB/s with the thread keeping buffers between calls
//!   (`ServerConfig::keep_bytes`) and with it keeping none. (64 MiB: glibc's
//!   allocator itself reuses freed blocks below its mmap threshold, which
//!   adapts up to 32 MiB; larger ones are fresh pages on every call.)
//! * **a warp of out-buffers on several threads**: 32 lanes each ask for
//!   an out-buffer by address from a `#[gpu_rpc(parallel)]` method that
//!   fills it, in memory the server is lent (as on a GPU); GB/s per call
//!   with the lanes on 1, 2 and 4 threads (`ServerConfig::lane_threads`).
//! * **large file writes**: the standard services' host writes 32 MiB
//!   `write_fd`s into a new file in the temp directory, with blocks
//!   reserved first (`StdHostConfig::preallocate_min`) and without; the
//!   host's side of a kernel writing a big file through `gpu-run`.
//!
//! Every reply is checked (status and value); a wrong one aborts the bench.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use gpu_rpc::call::{inline_start, CallDesc, FrameWord, NOOP_DESC};
use gpu_rpc::cpu::{CpuRegion, RawDevice};
use gpu_rpc::protocol::{Buffer, Layout};
use gpu_rpc::server::{Dispatcher, ServerConfig};
use gpu_rpc::services::{Fd, StdHost, StdHostConfig, StdRpc, StdServer};
use gpu_rpc::{gpu_rpc, Status};

/// The service the synthetic device calls.
#[gpu_rpc]
pub trait Synth {
    /// x + 1 (the GPU bench's `Bench::incr`).
    fn incr(&self, x: u64) -> u64;
    /// A line of text, acknowledged (the shape of `print_stderr`).
    fn line(&self, msg: &str);
    /// Bytes in; returns their count.
    fn take(&self, data: &[u8]) -> u64;
    /// Fills `out` with ones; returns its length.
    fn give(&self, out: &mut [u8]) -> u64;
    /// `give`, the lanes of a call on several threads.
    #[gpu_rpc(parallel)]
    fn give_parallel(&self, out: &mut [u8]) -> u64;
}

struct Host;

impl Synth for Host {
    fn incr(&self, x: u64) -> u64 {
        x.wrapping_add(1)
    }
    fn line(&self, msg: &str) {
        std::hint::black_box(msg);
    }
    fn take(&self, data: &[u8]) -> u64 {
        std::hint::black_box(data).len() as u64
    }
    fn give(&self, out: &mut [u8]) -> u64 {
        out.fill(1);
        out.len() as u64
    }
    fn give_parallel(&self, out: &mut [u8]) -> u64 {
        self.give(out)
    }
}

/// The text every lane of a `line` call sends (40 bytes, a typical log line).
const LINE: &[u8; 40] = b"thread 123 of block 45: value 0.1234567\n";

/// What one warp-call looks like from the device.
#[derive(Clone, Copy, PartialEq)]
enum Workload {
    /// The runtime's no-op (x + 1, no generated code).
    Noop,
    /// Generated `Synth::incr`.
    Incr,
    /// Generated `Synth::line` (a frame packet, then a stream packet).
    Line,
    /// The same with the text inline in the frame packet (what the stub
    /// sends when every lane's text fits).
    LineInline,
    /// The standard services' `Std::write` of a 40-byte line to stdout,
    /// inline, into an unbuffered `/dev/null` (a `write` system call per
    /// hand-on, as a line-buffered stdout makes one per line).
    StdLine,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::Noop => "runtime no-op",
            Workload::Incr => "generated `incr`",
            Workload::Line => "generated `line(&str)`, 40 bytes, in a stream packet",
            Workload::LineInline => "generated `line(&str)`, 40 bytes, inline",
            Workload::StdLine => "`Std::write` of a 40-byte line to an unbuffered stdout, inline",
        }
    }

    fn desc(self) -> &'static CallDesc {
        match self {
            Workload::Noop => &NOOP_DESC,
            Workload::Incr => SynthRpc::INCR,
            Workload::Line | Workload::LineInline => SynthRpc::LINE,
            Workload::StdLine => StdRpc::WRITE,
        }
    }

    /// Packets the device sends per call.
    fn packets(self) -> u32 {
        if self == Workload::Line {
            2
        } else {
            1
        }
    }

    /// Lane `lane`'s packet `step` of call number `n`.
    fn packet(self, step: u32, lane: u32, n: u64) -> Buffer {
        let mut b = Buffer::default();
        match (self, step) {
            (Workload::Line, 1) => b.bytes_mut()[..LINE.len()].copy_from_slice(LINE),
            (Workload::Line, _) => {
                b.data[0] = self.desc().frame_word().pack();
                b.data[1] = LINE.len() as u64;
            }
            (Workload::LineInline, _) => {
                b.data[0] = FrameWord {
                    inline_streams: true,
                    ..self.desc().frame_word()
                }
                .pack();
                b.data[1] = LINE.len() as u64;
                // The text where the frame puts it: after the 8-byte block
                // (packet 0's payload starts after the frame word).
                let at = 8 + inline_start(8);
                b.bytes_mut()[at..at + LINE.len()].copy_from_slice(LINE);
            }
            (Workload::StdLine, _) => {
                b.data[0] = FrameWord {
                    inline_streams: true,
                    ..self.desc().frame_word()
                }
                .pack();
                // The block: the text's length, then the fd.
                b.data[1] = LINE.len() as u64;
                b.bytes_mut()[16..20].copy_from_slice(&Fd::STDOUT.0.to_le_bytes());
                let at = 8 + inline_start(self.desc().block_len());
                b.bytes_mut()[at..at + LINE.len()].copy_from_slice(LINE);
            }
            _ => {
                b.data[0] = self.desc().frame_word().pack();
                b.data[1] = n + lane as u64;
            }
        }
        b
    }

    /// Check lane `lane`'s reply to call number `n` on `port` (its status
    /// word and return value, the words a client reads).
    fn check(self, dev: &RawDevice<'_>, port: u32, lane: u32, n: u64) {
        assert_eq!(
            Status::from_u32(dev.reply_word(port, lane, 0) as u32),
            Status::Ok,
            "{}: lane {lane}",
            self.name()
        );
        if !matches!(self, Workload::Line | Workload::LineInline | Workload::StdLine) {
            assert_eq!(
                dev.reply_word(port, lane, 1),
                n + lane as u64 + 1,
                "{}: lane {lane}",
                self.name()
            );
        }
    }

    /// Write lane `lane`'s packet `step` of call number `n` on `port`: only
    /// its words up to the last that is not zero, as a client writes only
    /// what the call uses (the server reads no further than the frame
    /// announces). A device this cheap leaves the time to the server.
    fn write(self, dev: &RawDevice<'_>, port: u32, step: u32, lane: u32, n: u64) {
        let b = self.packet(step, lane, n);
        let used = b.data.iter().rposition(|&v| v != 0).map_or(0, |i| i + 1);
        for (w, &v) in b.data[..used].iter().enumerate() {
            dev.write_word(port, lane, w, v);
        }
    }
}

fn dispatcher(metrics: bool) -> Dispatcher {
    let mut d = Dispatcher::new(ServerConfig {
        metrics,
        ..ServerConfig::default()
    });
    d.add(SynthServer(Host)).expect("one service");
    let null = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .expect("/dev/null");
    d.add(StdServer(StdHost::new(StdHostConfig::default().stdout(null))))
        .expect("the standard services' opcodes are their own");
    d
}

/// Batch mode: ns per warp-call of one poll over `ports` ports each holding
/// a call of `lanes` lanes (median, min, max of `reps` polls).
fn batch(w: Workload, lanes: u32, ports: u32, reps: u32, metrics: bool) -> (f64, f64, f64) {
    assert_eq!(w.packets(), 1, "batch mode serves one-packet calls");
    let d = dispatcher(metrics);
    let region = CpuRegion::new(Layout::new(ports, lanes).unwrap());
    // SAFETY: no client uses the region; this thread plays the device.
    let dev = unsafe { RawDevice::new(&region) };
    let server = region.server();
    let mask = region.layout().full_lane_mask();
    let mut times = Vec::new();
    for rep in 0..reps as u64 {
        for p in 0..ports {
            let packets: Vec<_> = (0..lanes).map(|l| (l, w.packet(0, l, rep + p as u64))).collect();
            dev.inject(p, w.desc().opcode, mask, &packets);
        }
        let t = Instant::now();
        let served = d.poll(&server, 0..ports).expect("no abort");
        times.push(t.elapsed().as_secs_f64() * 1e9 / ports as f64);
        assert_eq!(served, ports as usize);
        for p in 0..ports {
            assert!(dev.owned(p));
            for l in 0..lanes {
                w.check(&dev, p, l, rep + p as u64);
            }
        }
    }
    stats(&mut times)
}

/// ns per port of a poll over `ports` ports with nothing pending.
fn scan(ports: u32, reps: u32) -> (f64, f64, f64) {
    let d = dispatcher(true);
    let region = CpuRegion::new(Layout::new(ports, 32).unwrap());
    let server = region.server();
    let mut times = Vec::new();
    for _ in 0..reps {
        let t = Instant::now();
        assert_eq!(d.poll(&server, 0..ports).expect("no abort"), 0);
        times.push(t.elapsed().as_secs_f64() * 1e9 / ports as f64);
    }
    stats(&mut times)
}

/// Ends the server thread of a bench: sets its `done` flag when dropped,
/// at the end of the device thread's loop, and also when a wrong reply
/// panics there (the server then stops and the panic reaches the bench
/// instead of leaving it waiting for the server).
struct Finish<'a>(&'a AtomicBool);

impl Drop for Finish<'_> {
    fn drop(&mut self) {
        // Release: the server's last pass sees every flip before this.
        self.0.store(true, Ordering::Release);
    }
}

/// Threaded mode: a device thread keeps `ports` ports busy with `calls`
/// warp-calls in all while one server thread serves; warp-calls per second.
fn threaded(w: Workload, ports: u32, calls: u64) -> f64 {
    let d = Arc::new(dispatcher(true));
    let region = CpuRegion::new(Layout::new(ports, 32).unwrap());
    let done = AtomicBool::new(false);
    let t = Instant::now();
    std::thread::scope(|s| {
        let server = s.spawn(|| d.serve_until(&region.server(), 0, 1, &done));
        let finish = Finish(&done);
        // SAFETY: no client uses the region; this thread plays the device.
        let dev = unsafe { RawDevice::new(&region) };
        // Per port: the call number and the next packet to send.
        let mut state: Vec<(u64, u32)> = (0..ports).map(|p| (p as u64, 0)).collect();
        let mut started = 0u64;
        let mut finished = 0u64;
        while finished < calls {
            for p in 0..ports {
                let (n, step) = &mut state[p as usize];
                if !dev.owned(p) {
                    continue;
                }
                if *step == w.packets() {
                    for l in 0..32 {
                        w.check(&dev, p, l, *n);
                    }
                    finished += 1;
                    *n += ports as u64;
                    *step = 0;
                }
                if *step == 0 {
                    if started == calls {
                        continue;
                    }
                    started += 1;
                }
                dev.set_header(p, w.desc().opcode, u32::MAX as u64);
                for l in 0..32 {
                    w.write(&dev, p, *step, l, *n);
                }
                dev.flip(p);
                *step += 1;
            }
        }
        drop(finish);
        assert_eq!(server.join().unwrap().expect("no abort"), calls);
    });
    calls as f64 / t.elapsed().as_secs_f64()
}

/// One port, calls one at a time: the device thread writes a call of
/// `lanes` lanes (`None`: a bare flip, the floor), hands the port over and
/// waits for the reply, `calls` times, while one server thread serves
/// (`None`: only opens the port and hands it back with an inline 0). ns per
/// call.
fn round_trip(w: Option<Workload>, lanes: u32, calls: u64) -> f64 {
    assert!((1..=32).contains(&lanes), "a call of 1 to 32 lanes");
    let d = dispatcher(true);
    let region = CpuRegion::new(Layout::new(1, 32).unwrap());
    let done = AtomicBool::new(false);
    let mask = (1u64 << lanes) - 1;
    let mut took = 0.0;
    std::thread::scope(|s| {
        let server = s.spawn(|| match w {
            Some(_) => d.serve_until(&region.server(), 0, 1, &done).expect("no abort"),
            None => {
                let server = region.server();
                let mut served = 0;
                // Acquire: the device's last flip is seen before `done`.
                while !done.load(Ordering::Acquire) || server.pending(0) {
                    if let Some(port) = server.try_open(0..1) {
                        let port = port.recv_each_word(0..0, |_, _, _| ()).expect("no abort");
                        port.send_inline(0).expect("no abort").close();
                        served += 1;
                    }
                }
                served
            }
        });
        let finish = Finish(&done);
        // SAFETY: no client uses the region; this thread plays the device.
        let dev = unsafe { RawDevice::new(&region) };
        let t = Instant::now();
        for n in 0..calls {
            if let Some(w) = w {
                dev.set_header(0, w.desc().opcode, mask);
                for l in 0..lanes {
                    w.write(&dev, 0, 0, l, n);
                }
            }
            dev.flip(0);
            while !dev.owned(0) {
                // A server thread that panicked hands nothing back: fail
                // instead of waiting for ever (CI runs this).
                assert!(
                    !server.is_finished(),
                    "the server thread ended before call {n} was answered"
                );
                std::hint::spin_loop();
            }
            if let Some(w) = w {
                for l in 0..lanes {
                    w.check(&dev, 0, l, n);
                }
            }
        }
        took = t.elapsed().as_secs_f64();
        drop(finish);
        assert_eq!(server.join().unwrap(), calls);
    });
    took * 1e9 / calls as f64
}

/// This process's memory, copied as the CPU backend copies it but never
/// lent: the server keeps direct slices in its own buffers.
struct NoLoans;

impl gpu_rpc::device_memory::DeviceMemory for NoLoans {
    fn read(&self, copies: &mut [(u64, &mut [u8])], failed: &mut dyn FnMut(usize, gpu_rpc::device_memory::CopyError)) {
        gpu_rpc::cpu::ProcessMemory.read(copies, failed)
    }
    fn write(&self, copies: &[(u64, &[u8])], failed: &mut dyn FnMut(usize, gpu_rpc::device_memory::CopyError)) {
        gpu_rpc::cpu::ProcessMemory.write(copies, failed)
    }
}

/// One lane passes `len` bytes by address `calls` times (`input`: a slice
/// in, else an out-buffer back) to a server thread keeping `keep` bytes
/// between calls; GB/s per call (median, min, max). Every byte is checked.
fn large(input: bool, len: usize, keep: usize, calls: u32) -> (f64, f64, f64) {
    let mut d = Dispatcher::new(ServerConfig {
        keep_bytes: keep,
        ..ServerConfig::default()
    });
    d.add(SynthServer(Host)).expect("one service");
    let region = CpuRegion::new(Layout::new(1, 1).unwrap());
    let done = AtomicBool::new(false);
    let desc = if input { SynthRpc::TAKE } else { SynthRpc::GIVE };
    let word = desc.frame_word().pack();
    let mut data = vec![if input { 7u8 } else { 0 }; len];
    let mut rates = Vec::new();
    std::thread::scope(|s| {
        let server = s.spawn(|| d.serve_until(&region.server().with_memory(&NoLoans), 0, 1, &done));
        let finish = Finish(&done);
        // SAFETY: no client uses the region; this thread plays the device.
        let dev = unsafe { RawDevice::new(&region) };
        for _ in 0..calls {
            data.fill(if input { 7 } else { 0 });
            let t = Instant::now();
            let mut frame = Buffer::default();
            frame.data[0] = word;
            frame.data[1] = gpu_rpc::call::len_word(len as u64, true);
            dev.inject(0, desc.opcode, 1, &[(0, frame)]);
            while !dev.owned(0) {
                std::hint::spin_loop();
            }
            let mut at = Buffer::default();
            at.data[0] = data.as_mut_ptr() as u64;
            dev.write(0, 0, &at);
            dev.flip(0);
            while !dev.owned(0) {
                std::hint::spin_loop();
            }
            rates.push(len as f64 / t.elapsed().as_secs_f64() / 1e9);
            let reply = dev.reply(0, 0);
            assert_eq!((dev.status(0, 0), reply.data[1]), (Status::Ok, len as u64));
            assert!(input || data.iter().all(|&b| b == 1), "an out-buffer arrived wrong");
        }
        drop(finish);
        assert_eq!(server.join().unwrap().expect("no abort"), calls as u64);
    });
    stats(&mut rates)
}

/// A warp of `lanes` lanes asks `calls` times for an out-buffer of `len`
/// bytes each by address (one device array, lane after lane) from
/// `Synth::give_parallel`, served with lent memory (the CPU backend's) and
/// the lanes on up to `lane_threads` threads; GB/s per call (median, min,
/// max). Every byte is checked.
fn warp_out(lanes: u32, len: usize, lane_threads: usize, calls: u32) -> (f64, f64, f64) {
    let mut d = Dispatcher::new(ServerConfig {
        lane_threads,
        ..ServerConfig::default()
    });
    d.add(SynthServer(Host)).expect("one service");
    let region = CpuRegion::new(Layout::new(1, lanes).unwrap());
    let done = AtomicBool::new(false);
    let desc = SynthRpc::GIVE_PARALLEL;
    let word = desc.frame_word().pack();
    let mask = u64::MAX >> (64 - lanes);
    let mut data = vec![0u8; lanes as usize * len];
    let mut rates = Vec::new();
    let memory = gpu_rpc::cpu::ProcessMemory;
    std::thread::scope(|s| {
        let server = s.spawn(|| d.serve_until(&region.server().with_memory(&memory), 0, 1, &done));
        let finish = Finish(&done);
        // SAFETY: no client uses the region; this thread plays the device.
        let dev = unsafe { RawDevice::new(&region) };
        for _ in 0..calls {
            data.fill(0);
            let t = Instant::now();
            let mut frame = Buffer::default();
            frame.data[0] = word;
            frame.data[1] = gpu_rpc::call::len_word(len as u64, true);
            let frames: Vec<_> = (0..lanes).map(|l| (l, frame)).collect();
            dev.inject(0, desc.opcode, mask, &frames);
            while !dev.owned(0) {
                std::hint::spin_loop();
            }
            for l in 0..lanes {
                let mut at = Buffer::default();
                at.data[0] = data.as_mut_ptr() as u64 + (l as usize * len) as u64;
                dev.write(0, l, &at);
            }
            dev.flip(0);
            while !dev.owned(0) {
                std::hint::spin_loop();
            }
            rates.push((lanes as usize * len) as f64 / t.elapsed().as_secs_f64() / 1e9);
            for l in 0..lanes {
                assert_eq!((dev.status(0, l), dev.reply(0, l).data[1]), (Status::Ok, len as u64));
            }
            assert!(data.iter().all(|&b| b == 1), "an out-buffer arrived wrong");
        }
        drop(finish);
        assert_eq!(server.join().unwrap().expect("no abort"), calls as u64);
    });
    stats(&mut rates)
}

/// The cost of one `Instant::now()`: a few ns where the OS reads the CPU's
/// time-stamp counter in user space, hundreds where it cannot.
fn clock_read_ns() -> f64 {
    let n = 1_000_000;
    let t = Instant::now();
    for _ in 0..n {
        std::hint::black_box(Instant::now());
    }
    t.elapsed().as_nanos() as f64 / n as f64
}

fn stats(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    // `--only TEXT`: only the rows whose workload names it (for profiling
    // one path with perf).
    // The value after flag `name`, if given.
    let value_of = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1));
    let only = value_of("--only").cloned();
    let wanted = |w: Workload| only.as_deref().is_none_or(|o| w.name().contains(o));
    // `--lanes N`: only the batch rows of N lanes (e.g. to count one row's
    // instructions under callgrind).
    let lanes_only: Option<u32> = value_of("--lanes").and_then(|n| n.parse().ok());
    // `--file-writes`: only the large file writes (the file system's side of
    // `gpu-run`'s 1 GiB step).
    if args.iter().any(|a| a == "--file-writes") {
        large_file_writes(quick);
        return;
    }
    // `--round-trip`: only the round trips (e.g. to alternate two builds).
    if args.iter().any(|a| a == "--round-trip") {
        round_trips(quick, wanted);
        return;
    }
    let reps = if quick { 20 } else { 400 };
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    println!("Host cost per warp-call, synthetic device, {cores} cores, {reps} polls per row\n");
    println!(
        "A clock read (`Instant::now`; the metrics read it about twice per `LATENCY_SAMPLE` calls, the idle loop on one empty pass in 8): {:.1} ns; the OS's clock source: {}\n",
        clock_read_ns(),
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .map_or("unknown".to_string(), |s| s.trim().to_string())
    );
    println!("| workload | lanes | ports | metrics | ns per warp-call, median [min, max] | ns per lane |");
    println!("|---|---:|---:|---|---:|---:|");
    for (w, lanes, ports, metrics) in [
        (Workload::Noop, 32, 512, true),
        (Workload::Incr, 32, 512, true),
        (Workload::Incr, 32, 512, false),
        (Workload::Noop, 1, 512, true),
        (Workload::Incr, 1, 512, true),
        (Workload::Incr, 64, 512, true),
        (Workload::LineInline, 32, 512, true),
        (Workload::StdLine, 32, 512, true),
    ] {
        if !wanted(w) || lanes_only.is_some_and(|n| n != lanes) {
            continue;
        }
        let (m, lo, hi) = batch(w, lanes, ports, reps, metrics);
        println!(
            "| {} | {lanes} | {ports} | {} | {m:.0} [{lo:.0}, {hi:.0}] | {:.1} |",
            w.name(),
            if metrics { "on" } else { "off" },
            m / lanes as f64
        );
    }
    for ports in [512, 4096] {
        if only.is_some() {
            break;
        }
        let (m, lo, hi) = scan(ports, reps);
        println!("| nothing pending (scan) | 32 | {ports} | on | {m:.1} [{lo:.1}, {hi:.1}] per port | |");
    }

    if args.iter().any(|a| a == "--batch") {
        return;
    }
    if only.is_none() {
        let calls = if quick { 4 } else { 12 };
        println!(
            "\nLarge slices without lent memory: 1 lane, 64 MiB by address, {calls} calls (the first pays for \
             any buffer it keeps)\n"
        );
        println!("| direction | kept between calls | GB/s per call, median [min, max] |");
        println!("|---|---|---:|");
        for input in [true, false] {
            for keep in [64 << 20, 0] {
                let (m, lo, hi) = large(input, 64 << 20, keep, calls);
                println!(
                    "| {} | {} | {m:.2} [{lo:.2}, {hi:.2}] |",
                    if input { "in (`&[u8]`)" } else { "out (`&mut [u8]`)" },
                    if keep > 0 { "up to 64 MiB (default)" } else { "nothing" }
                );
            }
        }
    }
    if only.is_none() {
        let calls = if quick { 4 } else { 20 };
        println!(
            "\nA warp of out-buffers by address in lent memory, filled by a `#[gpu_rpc(parallel)]` method, \
             {calls} calls, GB/s per call, median [min, max]\n"
        );
        println!("| lanes × bytes | lanes on 1 thread | 2 threads | 4 threads | 4 / 1 |");
        println!("|---|---:|---:|---:|---:|");
        for len in [64 << 10, 1 << 20] {
            let r: Vec<_> = [1, 2, 4].iter().map(|&t| warp_out(32, len, t, calls)).collect();
            let cell = |(m, lo, hi): (f64, f64, f64)| format!("{m:.2} [{lo:.2}, {hi:.2}]");
            println!(
                "| 32 × {} KiB | {} | {} | {} | {:.2} |",
                len >> 10,
                cell(r[0]),
                cell(r[1]),
                cell(r[2]),
                r[2].0 / r[0].0
            );
        }
    }
    if only.is_none() {
        large_file_writes(quick);
    }
    round_trips(quick, wanted);
    let calls = if quick { 20_000 } else { 400_000 };
    println!("\nThreaded: a device thread keeps the ports busy, one server thread, {calls} warp-calls of 32 lanes\n");
    println!("| workload | ports | M warp-calls/s | ns per warp-call |");
    println!("|---|---:|---:|---:|");
    for (w, ports) in [
        (Workload::Incr, 64),
        (Workload::Incr, 512),
        (Workload::Line, 512),
        (Workload::LineInline, 512),
    ] {
        if !wanted(w) {
            continue;
        }
        let mut r: Vec<f64> = (0..3).map(|_| threaded(w, ports, calls)).collect();
        let (m, lo, hi) = stats(&mut r);
        println!(
            "| {} | {ports} | {:.3} [{:.3}, {:.3}] | {:.0} |",
            w.name(),
            m / 1e6,
            lo / 1e6,
            hi / 1e6,
            1e9 / m
        );
    }
}

/// The "Round trip" table: the floor, then 1- and 32-lane calls, 5 runs
/// of `calls` each.
fn round_trips(quick: bool, wanted: impl Fn(Workload) -> bool) {
    let calls = if quick { 2_000 } else { 50_000 };
    println!(
        "\nRound trip: one port, a device thread and one server thread taking turns, {calls} calls a run, 5 runs, \
         ns per call\n"
    );
    println!("| workload | lanes | ns per call, median [min, max] | / floor |");
    println!("|---|---:|---:|---:|");
    let run = |w: Option<Workload>, lanes: u32| {
        let mut r: Vec<f64> = (0..5).map(|_| round_trip(w, lanes, calls)).collect();
        stats(&mut r)
    };
    let floor = run(None, 1);
    println!(
        "| floor: the server opens the port and hands it back | 1 | {:.0} [{:.0}, {:.0}] | 1 |",
        floor.0, floor.1, floor.2
    );
    for (w, lanes) in [(Workload::Noop, 1), (Workload::Incr, 1), (Workload::Incr, 32)] {
        if !wanted(w) {
            continue;
        }
        let (m, lo, hi) = run(Some(w), lanes);
        println!(
            "| {} | {lanes} | {m:.0} [{lo:.0}, {hi:.0}] | {:.2} |",
            w.name(),
            m / floor.0
        );
    }
}

/// The "Large file writes" table: 1 GiB (128 MiB with `quick`) through a
/// `StdHost`'s `write_fd`, in calls of 32 MiB and 1 MiB, blocks reserved
/// first or not.
fn large_file_writes(quick: bool) {
    let bytes: usize = if quick { 128 << 20 } else { 1 << 30 };
    let dir = std::env::temp_dir();
    println!(
        "\nLarge file writes: the standard services' host writing {} MiB with `write_fd` into one new file in \
         {} (what `gpu-run`'s host does for a kernel's big writes), in calls of 32 MiB and of 1 MiB (`gpu-run`'s \
         1 GiB step: a warp of 1 MiB slices), reserving blocks first (`preallocate_min`, default 1 MiB) or not, \
         alternated over 3 rounds, GB/s\n",
        bytes >> 20,
        dir.display()
    );
    println!("| bytes per call | blocks reserved first | GB/s, median [min, max] |");
    println!("|---:|---|---:|");
    let shapes = [(32 << 20, true), (32 << 20, false), (1 << 20, true), (1 << 20, false)];
    let mut rates = [(); 4].map(|()| Vec::new());
    for _ in 0..3 {
        for (&(chunk, reserve), r) in shapes.iter().zip(&mut rates) {
            r.push(file_writes(&dir, reserve, chunk, bytes / chunk));
        }
    }
    for (&(chunk, reserve), r) in shapes.iter().zip(&mut rates) {
        let (m, lo, hi) = stats(r);
        let how = if reserve {
            "yes (the default)"
        } else {
            "no (`preallocate_min(u64::MAX)`)"
        };
        println!("| {} MiB | {how} | {m:.2} [{lo:.2}, {hi:.2}] |", chunk >> 20);
    }
}

/// GB/s of `calls` writes of `chunk` bytes through a `StdHost`'s `write_fd`
/// into a new file in `dir`, with blocks reserved first (`reserve`) or not.
/// The file's size and bytes are checked, then it is removed.
fn file_writes(dir: &std::path::Path, reserve: bool, chunk: usize, calls: usize) -> f64 {
    use gpu_rpc::services::{flags, ExitMode, Std, StdHost, StdHostConfig};
    let config = StdHostConfig::default()
        .exit_mode(ExitMode::Record)
        .allow_write(dir)
        .preallocate_min(if reserve { 1 << 20 } else { u64::MAX });
    let host = StdHost::new(config);
    let path = dir.join(format!("gpu-rpc-bench-writes-{}.bin", std::process::id()));
    let name = path.to_str().expect("a UTF-8 temp path");
    let data: Vec<u8> = (0..chunk).map(|i| (i % 251) as u8).collect();
    let fd = host
        .open(name, flags::WRITE | flags::CREATE | flags::TRUNCATE)
        .expect("open the bench file");
    let t = Instant::now();
    for _ in 0..calls {
        assert_eq!(host.write_fd(fd, &data), Ok(chunk as u64), "write_fd");
    }
    let secs = t.elapsed().as_secs_f64();
    host.close(fd).expect("close");
    let written = std::fs::read(&path).expect("read the bench file back");
    assert_eq!(written.len(), calls * chunk, "the file's size");
    assert!(written.chunks(chunk).all(|c| c[..] == data[..]), "the file's bytes");
    std::fs::remove_file(&path).expect("remove the bench file");
    (calls * chunk) as f64 / secs / 1e9
}
