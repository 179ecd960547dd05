//! The standard services (`gpu_rpc::services`) on the CPU backend, with
//! captured output sinks: printing, exit/abort, panic reports, files, time,
//! environment, and serving `Std` beside a user trait. The examples' kernels
//! (`examples/{print,panic,file_read}.rs`) are compiled in and run here too.
//!
//! One file on purpose: every file under `tests/` links a test binary of its
//! own, and the project keeps those few (CI builds them on two cores).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use gpu_rpc::assert_disjoint_opcodes;
use gpu_rpc::cpu::{self, Launch, Report};
use gpu_rpc::server::{Dispatcher, ServerConfig};
use gpu_rpc::services::{
    self, flags, Capture, DevicePanic, ExitMode, Fd, FileAccess, FmtBuf, IoError, PanicReportError, StdClient, StdHost,
    StdHostConfig, StdRpc, StdServer, LINE_MAX, OPCODE_BLOCK, PANIC_MESSAGE_MAX, TRUNCATION_MARKER,
};
use gpu_rpc::{gpu_eprint, gpu_eprintln, gpu_print, gpu_println, gpu_rpc, Status};

#[allow(dead_code)]
#[path = "../examples/print.rs"]
mod print_example;

#[allow(dead_code)]
#[path = "../examples/panic.rs"]
mod panic_example;

#[allow(dead_code)]
#[path = "../examples/file_read.rs"]
mod file_read_example;

/// A host with `config` in `ExitMode::Record`, served alone.
fn served(config: StdHostConfig) -> (Dispatcher, StdHost) {
    let host = StdHost::new(config.exit_mode(ExitMode::Record));
    let mut d = Dispatcher::new(ServerConfig {
        log_errors: false,
        ..ServerConfig::default()
    });
    d.add(StdServer(host.clone())).unwrap();
    (d, host)
}

/// A host in `ExitMode::Record` with captured sinks, served alone.
fn setup(config: StdHostConfig) -> (Dispatcher, StdHost, Capture, Capture) {
    let (config, out, err) = config.capture();
    let (d, host) = served(config);
    (d, host, out, err)
}

/// Run `kernel` on `threads` threads, each bound with `with_client`.
fn run_std(d: &Dispatcher, threads: usize, kernel: impl Fn(usize) + Sync) -> Report {
    let launch = Launch {
        threads,
        server_threads: 2,
        port_count: 16,
        lane_size: 1,
    };
    cpu::launch(&launch, d, |client, t| services::with_client(client, || kernel(t.id))).unwrap()
}

/// A unique path in the temp directory, removed on drop.
struct TempPath(PathBuf);

impl TempPath {
    fn new(tag: &str) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "gpu_rpc_std_services_{}_{}_{tag}",
            std::process::id(),
            // Relaxed: only each caller's own value matters (the RMW gives it).
            N.fetch_add(1, Ordering::Relaxed)
        );
        TempPath(std::env::temp_dir().join(name))
    }

    fn as_str(&self) -> &str {
        self.0.to_str().expect("UTF-8 temp path")
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

// ---------------------------------------------------------------------------
// Printing.

#[test]
fn println_from_many_threads_keeps_every_line_intact() {
    let (d, _host, out, err) = setup(StdHostConfig::default());
    const THREADS: usize = 24;
    const LINES: usize = 20;
    run_std(&d, THREADS, |id| {
        for i in 0..LINES {
            gpu_println!("thread {id:02} line {i:02} {id}");
            // ~150 bytes: several packets per line, so an interleaving would show.
            gpu_println!("T{id:02}-L{i:02}:{}", "abcdefghij".repeat(14));
        }
    });
    let lines = out.lines();
    assert_eq!(lines.len(), THREADS * LINES * 2);
    let got: BTreeSet<String> = lines.into_iter().collect();
    let mut want = BTreeSet::new();
    for id in 0..THREADS {
        for i in 0..LINES {
            want.insert(format!("thread {id:02} line {i:02} {id}"));
            want.insert(format!("T{id:02}-L{i:02}:{}", "abcdefghij".repeat(14)));
        }
    }
    assert_eq!(got, want);
    assert!(err.bytes().is_empty());
}

#[test]
fn one_threads_lines_arrive_in_program_order() {
    let (d, _host, out, _) = setup(StdHostConfig::default());
    run_std(&d, 8, |id| {
        for i in 0..50 {
            gpu_println!("{id} {i}");
        }
    });
    for id in 0..8 {
        let seq: Vec<u32> = out
            .lines()
            .iter()
            .filter_map(|l| l.split_once(' '))
            .filter(|(t, _)| *t == id.to_string())
            .map(|(_, i)| i.parse().unwrap())
            .collect();
        assert_eq!(seq, (0..50).collect::<Vec<_>>());
    }
}

#[test]
fn long_lines_are_truncated_with_a_marker() {
    let (d, _host, out, _) = setup(StdHostConfig::default());
    run_std(&d, 1, |_| {
        gpu_println!("{}", "x".repeat(LINE_MAX - 1)); // fits exactly with its newline
        gpu_println!("{}", "y".repeat(LINE_MAX)); // one byte too many
        gpu_println!("{}", "z".repeat(5000));
        gpu_println!("{}", "é".repeat(1000)); // two-byte characters
        gpu_print!("{}", "w".repeat(LINE_MAX + 1));
        gpu_println!();
    });
    let text = out.text();
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    assert_eq!(lines.len(), 5);
    assert_eq!(lines[0], format!("{}\n", "x".repeat(LINE_MAX - 1)));
    assert_eq!(lines[0].len(), LINE_MAX);
    for (l, c) in [(lines[1], "y"), (lines[2], "z")] {
        assert_eq!(l.len(), LINE_MAX);
        let keep = LINE_MAX - TRUNCATION_MARKER.len() - 1;
        assert_eq!(l, format!("{}{TRUNCATION_MARKER}\n", c.repeat(keep)));
    }
    assert!(lines[3].len() <= LINE_MAX && lines[3].ends_with("é…[truncated]\n"));
    assert!(lines[3].trim_end_matches("…[truncated]\n").chars().all(|c| c == 'é'));
    // `gpu_print!` (no newline) is cut too, then `gpu_println!()` ends the line.
    assert_eq!(lines[4].len(), LINE_MAX + 1);
    assert!(lines[4].ends_with("w…[truncated]\n"));
    assert_eq!(TRUNCATION_MARKER, "…[truncated]");
}

#[test]
fn eprint_goes_to_the_stderr_sink() {
    let (d, _host, out, err) = setup(StdHostConfig::default());
    run_std(&d, 1, |_| {
        gpu_eprintln!("error {}", 1);
        gpu_eprint!("partial ");
        gpu_eprintln!("line");
        gpu_println!("to stdout");
        assert_eq!(services::write(Fd::STDERR, b"raw\n"), Ok(()));
        assert_eq!(services::write_fd(Fd::STDOUT, b"fd1\n"), Ok(4));
        assert_eq!(services::flush(Fd::STDOUT), Ok(()));
        assert_eq!(services::write(Fd(0), b"x"), Err(IoError::EBADF));
        assert_eq!(services::write(Fd(3), b"x"), Err(IoError::EBADF));
        assert_eq!(services::flush(Fd(9)), Err(IoError::EBADF));
    });
    assert_eq!(err.text(), "error 1\npartial line\nraw\n");
    assert_eq!(out.text(), "to stdout\nfd1\n");
}

#[test]
fn a_failing_sink_gives_an_io_error_value() {
    struct Broken;
    impl std::io::Write for Broken {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let host = StdHost::new(StdHostConfig::default().exit_mode(ExitMode::Record).stdout(Broken));
    let mut d = Dispatcher::new(ServerConfig::default());
    d.add(StdServer(host)).unwrap();
    run_std(&d, 1, |_| {
        assert_eq!(services::write(Fd::STDOUT, b"x"), Err(IoError::EPIPE));
        gpu_println!("ignored: the macros drop the host's IoError");
    });
}

// ---------------------------------------------------------------------------
// The lines of one warp's call reach a sink together.

/// A sink that counts its `write` calls and keeps the bytes; `fail_first`
/// makes its first write fail. It also counts the writes made after the
/// device of the call being served (`warp_call`) already had its reply.
#[derive(Clone, Default)]
struct Counted {
    seen: Arc<Mutex<(usize, Vec<u8>)>>,
    fail_first: bool,
    late: Arc<AtomicUsize>,
}

std::thread_local! {
    /// The device `warp_call` plays on this thread (the server's `poll`
    /// runs on it too).
    static DEVICE: std::cell::Cell<Option<&'static gpu_rpc::cpu::RawDevice<'static>>> = const { std::cell::Cell::new(None) };
}

impl std::io::Write for Counted {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if DEVICE.with(|d| d.get().is_some_and(|d| d.owned(0))) {
            // Relaxed: a count read after the call.
            self.late.fetch_add(1, Ordering::Relaxed);
        }
        let mut seen = self.seen.lock().unwrap();
        seen.0 += 1;
        if self.fail_first && seen.0 == 1 {
            return Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        }
        seen.1.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// One call of `desc` on port 0 of a 32-lane region, as a device makes it:
/// lane `l` sends `block(l)` and then `text(l)` inline in packet 0. Each
/// lane's status.
fn warp_call(
    d: &Dispatcher,
    desc: &gpu_rpc::CallDesc,
    lanes: u32,
    block: impl Fn(u32) -> Vec<u8>,
    text: impl Fn(u32) -> Vec<u8>,
) -> Vec<Status> {
    use gpu_rpc::call::{inline_start, FrameWord};
    use gpu_rpc::cpu::{CpuRegion, RawDevice};
    use gpu_rpc::protocol::{Buffer, Layout};
    // Leaked (a few KiB a test) so that the sink can look at the device.
    let region: &'static CpuRegion = Box::leak(Box::new(CpuRegion::new(Layout::new(1, 32).unwrap())));
    // SAFETY: no client uses the region; the server validates what it reads.
    let dev: &'static RawDevice<'static> = Box::leak(Box::new(unsafe { RawDevice::new(region) }));
    DEVICE.with(|d| d.set(Some(dev)));
    let word = FrameWord {
        inline_streams: true,
        ..desc.frame_word()
    }
    .pack();
    let packets: Vec<(u32, Buffer)> = (0..lanes)
        .map(|l| {
            let (block, text) = (block(l), text(l));
            let mut b = Buffer::default();
            b.data[0] = word;
            b.bytes_mut()[8..8 + block.len()].copy_from_slice(&block);
            let at = 8 + inline_start(desc.block_len());
            b.bytes_mut()[at..at + text.len()].copy_from_slice(&text);
            (l, b)
        })
        .collect();
    dev.inject(0, desc.opcode, (1u64 << lanes) - 1, &packets);
    assert_eq!(d.poll(&region.server(), 0..1), Ok(1));
    (0..lanes).map(|l| dev.status(0, l)).collect()
}

/// The return word lane `l` of `warp_call`'s last call got.
fn returned(l: u32) -> u64 {
    DEVICE.with(|d| d.get().expect("a warp_call ran").reply_word(0, l, 1))
}

/// `Std::write(fd, text)`'s argument block: the text's length, the fd.
fn write_block_to(fd: Fd, len: usize) -> Vec<u8> {
    let mut b = (len as u64).to_le_bytes().to_vec();
    b.extend(fd.0.to_le_bytes());
    b
}

/// `Std::write(STDOUT, text)`'s argument block.
fn write_block(len: usize) -> Vec<u8> {
    write_block_to(Fd::STDOUT, len)
}

/// `Std::print(STDOUT, PRINT_NEWLINE, format, [], [])`'s argument block.
fn print_block(format_len: usize) -> Vec<u8> {
    let mut b = (format_len as u64).to_le_bytes().to_vec();
    b.extend(0u64.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    b.extend(Fd::STDOUT.0.to_le_bytes());
    b.extend(services::PRINT_NEWLINE.to_le_bytes());
    b
}

fn std_dispatcher(sink: &Counted) -> Dispatcher {
    served(StdHostConfig::default().stdout(sink.clone())).0
}

/// 32 lanes write a line each in one call: the sink gets them in lane
/// order in one write (one lock and one system call per warp-call, not per
/// line).
#[test]
fn a_warps_lines_reach_the_sink_in_one_write() {
    let sink = Counted::default();
    let d = std_dispatcher(&sink);
    let line = |l: u32| format!("lane {l:02}\n").into_bytes();
    let statuses = warp_call(&d, StdRpc::WRITE, 32, |l| write_block(line(l).len()), line);
    assert_eq!(statuses, [Status::Ok; 32]);
    let seen = sink.seen.lock().unwrap();
    let want: String = (0..32).map(|l| format!("lane {l:02}\n")).collect();
    assert_eq!(String::from_utf8_lossy(&seen.1), want);
    assert_eq!(seen.0, 1, "writes the sink saw");
    assert_eq!(sink.late.load(Ordering::Relaxed), 0, "writes after the reply");
}

/// Lanes alternate stdout and stderr, both shown in one place (a
/// terminal, `2>&1`): the lines arrive in lane order, each stream's run
/// handed on when the other's begins.
#[test]
fn a_warp_writing_both_streams_keeps_lane_order() {
    let sink = Counted::default();
    let (d, _) = served(StdHostConfig::default().stdout(sink.clone()).stderr(sink.clone()));
    let fd = |l: u32| if l.is_multiple_of(2) { Fd::STDOUT } else { Fd::STDERR };
    let line = |l: u32| format!("lane {l}\n").into_bytes();
    let statuses = warp_call(&d, StdRpc::WRITE, 6, |l| write_block_to(fd(l), line(l).len()), line);
    assert_eq!(statuses, [Status::Ok; 6]);
    let want: String = (0..6).map(|l| format!("lane {l}\n")).collect();
    assert_eq!(String::from_utf8_lossy(&sink.seen.lock().unwrap().1), want);
    assert_eq!(sink.late.load(Ordering::Relaxed), 0, "writes after the reply");
}

/// A sink that fails while a call's lines are handed on: the error goes to
/// the call's last lane, which handed them on; the lanes before it get `Ok`.
#[test]
fn a_failing_sink_answers_the_lane_that_handed_the_lines_on() {
    let sink = Counted {
        fail_first: true,
        ..Counted::default()
    };
    let d = std_dispatcher(&sink);
    let line = |l: u32| format!("lane {l}\n").into_bytes();
    let statuses = warp_call(&d, StdRpc::WRITE, 3, |l| write_block(line(l).len()), line);
    assert_eq!(statuses, [Status::Ok; 3]);
    let (ok, failed) = (returned(0), returned(2));
    assert_eq!(returned(1), ok, "lanes 0 and 1 got Ok");
    assert_ne!(failed, ok, "the last lane got the sink's error");
}

/// The last lane's format is not UTF-8, so it fails after the others
/// printed: their lines are handed on at the call's end, together.
#[test]
fn lines_before_a_failing_last_lane_are_written_at_the_calls_end() {
    let sink = Counted::default();
    let d = std_dispatcher(&sink);
    let format = |l: u32| {
        if l == 2 {
            vec![0xff, 0xfe]
        } else {
            format!("lane {l}").into_bytes()
        }
    };
    let statuses = warp_call(&d, StdRpc::PRINT, 3, |l| print_block(format(l).len()), format);
    assert_eq!(statuses, [Status::Ok, Status::Ok, Status::InvalidArgument]);
    let seen = sink.seen.lock().unwrap();
    assert_eq!(String::from_utf8_lossy(&seen.1), "lane 0\nlane 1\n");
    assert_eq!(seen.0, 1, "writes the sink saw");
    assert_eq!(sink.late.load(Ordering::Relaxed), 0, "writes after the reply");
}

/// A sink that fails while lines are handed on at a call's end: the error
/// comes back from the sink's next flush, once.
#[test]
fn an_error_at_the_calls_end_comes_back_from_the_next_flush() {
    let sink = Counted {
        fail_first: true,
        ..Counted::default()
    };
    let d = std_dispatcher(&sink);
    let format = |l: u32| if l == 1 { vec![0xff] } else { b"kept".to_vec() };
    let statuses = warp_call(&d, StdRpc::PRINT, 2, |l| print_block(format(l).len()), format);
    assert_eq!(statuses, [Status::Ok, Status::InvalidArgument]);
    run_std(&d, 1, |_| {
        assert_eq!(services::flush(Fd::STDOUT), Err(IoError::EPIPE));
        assert_eq!(services::flush(Fd::STDOUT), Ok(()));
    });
}

/// A user's service whose one method runs `body(lane)` for each lane of a
/// call: host code that uses a `StdHost` from inside a served call.
struct InCall(Box<dyn Fn(u32) + Send + Sync>);

static IN_CALL: gpu_rpc::CallDesc = gpu_rpc::CallDesc {
    service: "InCall",
    method: "run",
    opcode: 0x7_0001,
    ..gpu_rpc::call::NOOP_DESC
};

impl gpu_rpc::server::Service for InCall {
    fn name(&self) -> &'static str {
        "InCall"
    }
    fn methods(&self) -> &'static [gpu_rpc::server::MethodInfo] {
        static METHODS: [gpu_rpc::server::MethodInfo; 1] = [gpu_rpc::server::MethodInfo {
            desc: &IN_CALL,
            path: "InCall::run",
            module: "std_services",
        }];
        &METHODS
    }
    fn dispatch(&self, _: usize, call: &mut gpu_rpc::server::ServerCall<'_>) {
        call.run(|_, lane| {
            (self.0)(lane);
            Ok(())
        });
    }
}

/// One call of `InCall::run` with `lanes` lanes, served on this thread.
fn in_call(lanes: u32, body: impl Fn(u32) + Send + Sync + 'static) {
    use gpu_rpc::cpu::{CpuRegion, RawDevice};
    use gpu_rpc::protocol::{Buffer, Layout};
    let mut d = Dispatcher::new(ServerConfig::default());
    d.add(InCall(Box::new(body))).unwrap();
    let region = CpuRegion::new(Layout::new(1, 32).unwrap());
    // SAFETY: no client uses the region; the server validates what it reads.
    let dev = unsafe { RawDevice::new(&region) };
    let packets: Vec<(u32, Buffer)> = (0..lanes)
        .map(|l| {
            let mut b = Buffer::default();
            b.data[0] = IN_CALL.frame_word().pack();
            (l, b)
        })
        .collect();
    dev.inject(0, IN_CALL.opcode, (1u64 << lanes) - 1, &packets);
    assert_eq!(d.poll(&region.server(), 0..1), Ok(1));
    assert_eq!(
        (0..lanes).map(|l| dev.status(0, l)).collect::<Vec<_>>(),
        vec![Status::Ok; lanes as usize]
    );
}

/// A host method that writes through a `StdHost` and flushes it, in each
/// lane: the flush hands on the lines its thread gathered first.
#[test]
fn a_flush_in_a_lane_writes_the_lines_gathered_before_it() {
    use gpu_rpc::services::Std;
    let sink = Counted::default();
    let host = StdHost::new(StdHostConfig::default().stdout(sink.clone()));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (s, log) = (sink.clone(), Arc::clone(&seen));
    in_call(3, move |lane| {
        host.write(Fd::STDOUT, format!("u {lane}\n").as_bytes()).unwrap();
        Std::flush(&host, Fd::STDOUT).unwrap();
        log.lock().unwrap().push(s.seen.lock().unwrap().1.len());
    });
    assert_eq!(
        *seen.lock().unwrap(),
        [4, 8, 12],
        "bytes in the sink after each lane's flush"
    );
}

/// A host method serves a call of the standard services itself (a nested
/// dispatcher on the same thread) after an earlier lane wrote: the outer
/// lane's line goes first, and the inner call's line, left gathered when
/// its last lane failed, is in the sink before the inner call's reply.
#[test]
fn a_call_served_inside_a_host_method_writes_its_lines_before_its_reply() {
    let sink = Counted::default();
    let (inner, host) = served(StdHostConfig::default().stdout(sink.clone()));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (s, log) = (sink.clone(), Arc::clone(&seen));
    in_call(2, move |lane| {
        if lane == 0 {
            gpu_rpc::services::Std::write(&host, Fd::STDOUT, b"outer 0\n").unwrap();
            return;
        }
        let format = |l: u32| if l == 1 { vec![0xff] } else { b"inner 0".to_vec() };
        let statuses = warp_call(&inner, StdRpc::PRINT, 2, |l| print_block(format(l).len()), format);
        let text = String::from_utf8_lossy(&s.seen.lock().unwrap().1).into_owned();
        log.lock().unwrap().push((statuses, text));
    });
    let seen = seen.lock().unwrap();
    assert_eq!(
        *seen,
        [(
            vec![Status::Ok, Status::InvalidArgument],
            "outer 0\ninner 0\n".to_string()
        )]
    );
    assert_eq!(
        sink.late.load(Ordering::Relaxed),
        0,
        "writes after the inner call's reply"
    );
}

#[test]
fn fmt_buf_cuts_at_char_boundaries() {
    use core::fmt::Write;
    let mut b = FmtBuf::<20>::new();
    assert!(b.is_empty());
    // 3-byte characters: 20 bytes hold 6 of them (18 bytes).
    let _ = write!(b, "{}", "€".repeat(10));
    assert!(b.is_truncated());
    assert_eq!(b.as_str(), "€".repeat(6));
    let s = b.finish(true);
    assert!(s.len() <= 20);
    assert_eq!(s, "€…[truncated]\n");
    // Without truncation, the newline is simply appended.
    let mut b = FmtBuf::<20>::new();
    let _ = write!(b, "{:>5}|", 42);
    assert_eq!(b.finish(true), "   42|\n");
    // A newline that does not fit turns into truncation.
    let mut b = FmtBuf::<20>::new();
    let _ = write!(b, "{}", "a".repeat(20));
    assert!(!b.is_truncated());
    assert_eq!(b.finish(true), "aaaaa…[truncated]\n");
    assert_eq!(b.len(), 20);
}

// ---------------------------------------------------------------------------
// exit, abort, panics.

#[test]
fn exit_in_record_mode_records_the_code_and_halts_the_lane() {
    let (d, host, out, _) = setup(StdHostConfig::default());
    let after_exit = AtomicBool::new(false);
    let report = run_std(&d, 4, |id| {
        gpu_println!("thread {id}");
        if id == 2 {
            services::exit(3);
            #[allow(unreachable_code)]
            // Relaxed: a flag read by this thread after the server has stopped.
            after_exit.store(true, Ordering::Relaxed);
        }
    });
    assert_eq!(host.exit_code(), Some(3));
    assert!(!host.aborted());
    assert_eq!(report.halted, 1);
    assert_eq!(report.errors, 0);
    // Relaxed: a flag read by this thread after the server has stopped.
    assert!(!after_exit.load(Ordering::Relaxed));
    assert_eq!(out.lines().len(), 4);
}

#[test]
fn the_first_exit_code_wins() {
    let (d, host, _, _) = setup(StdHostConfig::default());
    let report = run_std(&d, 1, |_| {
        let _ = std::panic::catch_unwind(|| services::exit(7));
        services::exit(8);
    });
    assert_eq!(host.exit_code(), Some(7));
    assert_eq!(report.halted, 1);
}

#[test]
fn abort_in_record_mode() {
    let (d, host, _, _) = setup(StdHostConfig::default());
    let report = run_std(&d, 2, |id| {
        if id == 1 {
            services::abort();
        }
    });
    assert!(host.aborted());
    assert_eq!(host.exit_code(), Some(134));
    assert_eq!(report.halted, 1);
}

#[test]
fn report_panic_is_recorded_and_printed() {
    let (d, host, _, err) = setup(StdHostConfig::default());
    run_std(&d, 3, |id| {
        let len = 4;
        let r = services::report_panic(
            format_args!("index out of bounds: the len is {len} but the index is {}", 4 + id),
            "src/lib.rs",
            10,
            5,
            [1, 0, 0],
            [id as u32, 0, 0],
        );
        assert_eq!(r, Ok(()));
    });
    let mut panics = host.panics();
    panics.sort_by_key(|p| p.thread);
    assert_eq!(panics.len(), 3);
    assert_eq!(host.panic_count(), 3);
    assert_eq!(
        panics[2],
        DevicePanic {
            message: "index out of bounds: the len is 4 but the index is 6".into(),
            file: "src/lib.rs".into(),
            line: 10,
            column: 5,
            block: [1, 0, 0],
            thread: [2, 0, 0],
        }
    );
    assert!(err.lines().contains(
        &"kernel panicked at src/lib.rs:10:5 (block (1,0,0), thread (0,0,0)): index out of bounds: the len is 4 but the index is 4"
            .to_string()
    ));
}

#[test]
fn report_panic_through_the_client_stub() {
    let host = StdHost::new(StdHostConfig {
        print_panics: false,
        ..StdHostConfig::default().exit_mode(ExitMode::Record)
    });
    let mut d = Dispatcher::new(ServerConfig::default());
    d.add(StdServer(host.clone())).unwrap();
    cpu::launch(&Launch::default(), &d, |client, t| {
        // No `with_client` needed: the generated stub takes the client.
        StdClient::new(client).report_panic("boom", "kernel.rs", 1, 2, [0, 1, 2], [t.id as u32, 4, 5]);
    })
    .unwrap();
    assert_eq!(host.panics().len(), Launch::default().threads);
    assert!(host
        .panics()
        .iter()
        .all(|p| p.message == "boom" && p.block == [0, 1, 2]));
}

#[test]
fn panic_messages_are_bounded() {
    let mut buf = FmtBuf::new();
    let long = "0123456789".repeat(100);
    let msg = services::format_panic_message(&mut buf, format_args!("called `Option::unwrap()`: {long}"));
    assert_eq!(msg.len(), PANIC_MESSAGE_MAX);
    assert!(msg.starts_with("called `Option::unwrap()`: 0123"));
    assert!(msg.ends_with(TRUNCATION_MARKER));

    let (d, host, _, _) = setup(StdHostConfig::default());
    run_std(&d, 1, |_| {
        services::report_panic(&long, "f.rs", 1, 1, [0; 3], [0; 3]).unwrap();
    });
    let p = &host.panics()[0];
    assert_eq!(p.message.len(), PANIC_MESSAGE_MAX);
    assert!(p.message.ends_with(TRUNCATION_MARKER));

    // A device that skips its own clipping (the raw stub, 100 KiB message
    // and file name): the host keeps at most `MAX_MESSAGE_BYTES` of each.
    let host = StdHost::new(StdHostConfig {
        print_panics: false,
        ..StdHostConfig::default().exit_mode(ExitMode::Record)
    });
    let mut d = Dispatcher::new(ServerConfig::default());
    d.add(StdServer(host.clone())).unwrap();
    let huge = "x".repeat(100 << 10);
    cpu::launch(&Launch::default(), &d, |client, _| {
        StdClient::new(client).report_panic(&huge, &huge, 1, 2, [0; 3], [0; 3]);
    })
    .unwrap();
    let p = &host.panics()[0];
    let max = gpu_rpc::server::MAX_MESSAGE_BYTES;
    assert!(p.message.len() <= max && p.message.ends_with(TRUNCATION_MARKER));
    assert!(p.file.len() <= max && p.file.ends_with(TRUNCATION_MARKER));
}

#[test]
fn report_panic_without_a_client_or_service_fails_softly() {
    // No client bound on this thread: an error value, not a panic.
    assert_eq!(
        services::report_panic("x", "f.rs", 1, 1, [0; 3], [0; 3]),
        Err(PanicReportError::NoClient)
    );
    // A host without `Std`: the call fails (unknown opcode), nothing hangs.
    let d = Dispatcher::new(ServerConfig {
        log_errors: false,
        ..ServerConfig::default()
    });
    cpu::launch(&Launch::default(), &d, |client, _| {
        services::with_client(client, || {
            match services::report_panic("x", "f.rs", 1, 1, [0; 3], [0; 3]) {
                Err(PanicReportError::Call(e)) => assert_eq!(e.status, Status::UnknownOpcode),
                other => panic!("{other:?}"),
            }
        })
    })
    .unwrap();
}

#[test]
fn print_without_std_on_the_host_fails_the_lane() {
    let d = Dispatcher::new(ServerConfig {
        log_errors: false,
        ..ServerConfig::default()
    });
    let err = cpu::launch(&Launch::default(), &d, |client, _| {
        services::with_client(client, || gpu_println!("nobody serves this"))
    })
    .unwrap_err();
    assert!(err.message.contains("unknown opcode"), "{}", err.message);
}

#[test]
fn no_client_bound() {
    assert!(services::try_with_std(|s| s.time_ns()).is_none());
    let r = std::panic::catch_unwind(|| gpu_println!("nowhere"));
    let msg = *r.unwrap_err().downcast::<&str>().unwrap();
    assert!(msg.contains("no client"), "{msg}");
}

// ---------------------------------------------------------------------------
// Files.

#[test]
fn file_round_trip() {
    let (d, host, _, _) = setup(StdHostConfig::default().allow_write(std::env::temp_dir()));
    let tmp = TempPath::new("roundtrip");
    let path = tmp.as_str();
    // 1000 bytes: several reads through a 64-byte out-buffer.
    let content: Vec<u8> = (0..1000u32)
        .map(|i| b"abcdefghijklmnopqrstuvwxyz\n"[i as usize % 27])
        .collect();
    run_std(&d, 1, |_| {
        let fd = services::open(path, flags::WRITE | flags::CREATE | flags::TRUNCATE).unwrap();
        assert_eq!(fd, Fd(3));
        assert_eq!(services::write_fd(fd, &content[..600]), Ok(600));
        assert_eq!(services::write_fd(fd, &content[600..]), Ok(400));
        assert_eq!(services::read(fd, &mut [0; 8]), Err(IoError::EBADF), "write-only");
        assert_eq!(services::close(fd), Ok(()));

        let fd = services::open(path, flags::READ).unwrap();
        assert_eq!(services::write_fd(fd, b"x"), Err(IoError::EBADF), "read-only");
        let mut got = Vec::new();
        let mut block = [0u8; 64];
        loop {
            let n = services::read(fd, &mut block).unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&block[..n]);
        }
        assert_eq!(got, content);
        // A buffer larger than the rest of the file: filled up to the end.
        let fd2 = services::open(path, flags::READ).unwrap();
        assert_eq!(fd2, Fd(4));
        let mut big = [0u8; 4096];
        assert_eq!(services::read(fd2, &mut big), Ok(1000));
        assert_eq!(&big[..1000], &content[..]);
        assert_eq!(services::close(fd2), Ok(()));
        assert_eq!(services::close(fd), Ok(()));
        assert_eq!(services::close(fd), Err(IoError::EBADF), "closed twice");

        // Append.
        let fd = services::open(path, flags::APPEND).unwrap();
        assert_eq!(services::write_fd(fd, b"END"), Ok(3));
        services::close(fd).unwrap();
    });
    let on_disk = std::fs::read(&tmp.0).unwrap();
    assert_eq!(&on_disk[..1000], &content[..]);
    assert_eq!(&on_disk[1000..], b"END");
    assert_eq!(host.open_files(), 0);
}

/// Writes of at least `preallocate_min` bytes (here 4 KiB, so the test
/// stays small) reserve the file's blocks first: every byte arrives, the
/// size is exactly what was written (the reservation keeps it), and an
/// append-only file is written as before.
#[test]
fn large_writes_reserve_blocks_and_keep_every_byte() {
    let (d, host, _, _) = setup(
        StdHostConfig::default()
            .allow_write(std::env::temp_dir())
            .preallocate_min(4096),
    );
    let tmp = TempPath::new("reserved");
    let path = tmp.as_str();
    let content: Vec<u8> = (0..3 * 65536 + 17u32).map(|i| (i * 7 % 253) as u8).collect();
    run_std(&d, 1, |_| {
        let fd = services::open(path, flags::WRITE | flags::CREATE | flags::TRUNCATE).unwrap();
        // Odd sizes above and below the minimum, in order.
        for part in [&content[..70001], &content[70001..70100], &content[70100..]] {
            assert_eq!(services::write_fd(fd, part), Ok(part.len()));
        }
        services::close(fd).unwrap();
        let fd = services::open(path, flags::APPEND).unwrap();
        assert_eq!(services::write_fd(fd, &[9u8; 5000]), Ok(5000));
        services::close(fd).unwrap();
    });
    let on_disk = std::fs::read(&tmp.0).unwrap();
    assert_eq!(on_disk.len(), content.len() + 5000, "the size is what was written");
    assert_eq!(&on_disk[..content.len()], &content[..]);
    assert!(on_disk[content.len()..].iter().all(|&b| b == 9));
    assert_eq!(host.open_files(), 0);
}

#[test]
fn files_from_many_threads() {
    let (d, host, _, _) = setup(StdHostConfig::default().allow_write(std::env::temp_dir()));
    let paths: Vec<TempPath> = (0..8).map(|i| TempPath::new(&format!("t{i}"))).collect();
    run_std(&d, 8, |id| {
        let path = paths[id].as_str();
        let fd = services::open(path, flags::WRITE | flags::CREATE_NEW).unwrap();
        let text = format!("thread {id}\n").repeat(id + 1);
        assert_eq!(services::write_fd(fd, text.as_bytes()), Ok(text.len()));
        services::close(fd).unwrap();
        assert_eq!(
            services::open(path, flags::WRITE | flags::CREATE_NEW),
            Err(IoError::EEXIST)
        );
        let fd = services::open(path, flags::READ).unwrap();
        let mut buf = [0u8; 256];
        let n = services::read(fd, &mut buf).unwrap();
        assert_eq!(&buf[..n], text.as_bytes());
        services::close(fd).unwrap();
    });
    assert_eq!(host.open_files(), 0);
}

#[test]
fn file_errors_are_values() {
    let (d, _, _, _) = setup(StdHostConfig::default().allow_write(std::env::temp_dir()));
    let missing = TempPath::new("missing");
    let dir = std::env::temp_dir();
    run_std(&d, 1, |_| {
        assert_eq!(services::open(missing.as_str(), flags::READ), Err(IoError::ENOENT));
        assert!(services::open(missing.as_str(), flags::READ)
            .unwrap_err()
            .is_not_found());
        assert_eq!(services::read(Fd(99), &mut [0; 4]), Err(IoError::EBADF));
        assert_eq!(services::read(Fd(0), &mut [0; 4]), Err(IoError::EBADF));
        assert_eq!(services::read(Fd::STDOUT, &mut [0; 4]), Err(IoError::EBADF));
        assert_eq!(services::write_fd(Fd(42), b"x"), Err(IoError::EBADF));
        assert_eq!(services::close(Fd(3)), Err(IoError::EBADF));
        assert_eq!(services::close(Fd::STDERR), Err(IoError::EBADF));
        assert_eq!(services::close(Fd(u32::MAX)), Err(IoError::EBADF));
        // Flags.
        assert_eq!(services::open(missing.as_str(), 0), Err(IoError::EINVAL));
        assert_eq!(services::open(missing.as_str(), 1 << 20), Err(IoError::EINVAL));
        assert_eq!(
            services::open(missing.as_str(), flags::READ | flags::CREATE),
            Err(IoError::EINVAL)
        );
        assert_eq!(
            services::open(missing.as_str(), flags::APPEND | flags::TRUNCATE),
            Err(IoError::EINVAL)
        );
        // A directory.
        let e = services::open(dir.to_str().unwrap(), flags::READ).unwrap_err();
        assert_eq!(e, IoError::EISDIR);
    });
    assert!(!missing.0.exists());
}

#[test]
fn file_access_policies_and_the_open_file_limit() {
    let tmp = TempPath::new("policy");
    std::fs::write(&tmp.0, b"hello").unwrap();
    let path = tmp.as_str();

    let (d, _, _, _) = setup(
        StdHostConfig::default()
            .allow_write(std::env::temp_dir())
            .files(FileAccess::Off),
    );
    run_std(&d, 1, |_| {
        assert_eq!(services::open(path, flags::READ), Err(IoError::EACCES));
        assert!(services::open(path, flags::READ).unwrap_err().is_permission_denied());
    });

    let (d, _, _, _) = setup(StdHostConfig::default().allow_read(std::env::temp_dir()));
    run_std(&d, 1, |_| {
        assert_eq!(services::open(path, flags::WRITE), Err(IoError::EACCES));
        assert_eq!(services::open(path, flags::APPEND), Err(IoError::EACCES));
        let fd = services::open(path, flags::READ).unwrap();
        let mut b = [0u8; 5];
        assert_eq!(services::read(fd, &mut b), Ok(5));
        assert_eq!(&b, b"hello");
        services::close(fd).unwrap();
    });

    let (d, host, _, _) = setup(StdHostConfig {
        max_open_files: 2,
        ..StdHostConfig::default().allow_write(std::env::temp_dir())
    });
    run_std(&d, 1, |_| {
        let a = services::open(path, flags::READ).unwrap();
        let b = services::open(path, flags::READ).unwrap();
        assert_eq!(services::open(path, flags::READ), Err(IoError::EMFILE));
        services::close(a).unwrap();
        // The lowest free fd is reused.
        assert_eq!(services::open(path, flags::READ), Ok(a));
        services::close(a).unwrap();
        services::close(b).unwrap();
    });
    assert_eq!(host.open_files(), 0);
    assert_eq!(std::fs::read(&tmp.0).unwrap(), b"hello");
}

/// A directory in the temp directory, removed (with what it holds) on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let p = TempPath::new(tag);
        let dir = p.0.clone();
        std::fs::create_dir(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The escapes an adversarial kernel tried against the old default
/// (issue 16), each refused with `EACCES` by the sandbox; what is allowed
/// still works.
#[test]
fn the_file_sandbox_refuses_every_escape() {
    let jail = TempDir::new("jail");
    let outside = TempDir::new("outside");
    let victim = outside.0.join("victim.txt");
    std::fs::write(&victim, b"precious").unwrap();
    std::fs::write(jail.0.join("ok.txt"), b"inside").unwrap();
    std::os::unix::fs::symlink(&victim, jail.0.join("link")).unwrap();
    std::os::unix::fs::symlink("/etc", jail.0.join("etc")).unwrap();
    std::os::unix::fs::symlink("ok.txt", jail.0.join("alias")).unwrap();
    let fifo = jail.0.join("fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let at = |p: &std::path::Path| p.to_str().unwrap().to_string();
    let (jail_s, victim_s, fifo_s) = (at(&jail.0), at(&victim), at(&fifo));
    let ssh = at(&outside.0.join(".ssh"));
    std::fs::create_dir(&ssh).unwrap();

    let (d, host, _, _) = setup(StdHostConfig {
        files: FileAccess::ReadWrite,
        read_dirs: vec![jail.0.clone()],
        write_dirs: vec![jail.0.clone()],
        ..StdHostConfig::default()
    });
    let started = std::time::Instant::now();
    run_std(&d, 1, |_| {
        let denied = |path: &str, f: u32| {
            assert_eq!(services::open(path, f), Err(IoError::EACCES), "{path} (flags {f:#x})");
        };
        // Outside every allowed directory.
        denied("/etc/shadow", flags::READ);
        denied("/etc/passwd", flags::READ);
        denied("/proc/self/maps", flags::READ);
        denied("/proc/self/environ", flags::READ);
        denied("/dev/zero", flags::READ);
        denied(&victim_s, flags::APPEND);
        denied(&format!("{ssh}/authorized_keys"), flags::WRITE | flags::CREATE);
        // Climbing out, lexically and through links planted inside.
        denied(
            &format!("{jail_s}/../{}", victim.file_name().unwrap().to_str().unwrap()),
            flags::READ,
        );
        denied(&format!("{jail_s}/link"), flags::WRITE | flags::TRUNCATE);
        denied(&format!("{jail_s}/link"), flags::READ);
        denied(&format!("{jail_s}/etc/passwd"), flags::READ);
        // A symlink as the last component, even to a file inside.
        denied(&format!("{jail_s}/alias"), flags::READ);
        // A FIFO: refused at once, without blocking the server thread.
        denied(&fifo_s, flags::READ);
        denied(&fifo_s, flags::WRITE);
        // What is allowed works.
        let fd = services::open(&format!("{jail_s}/ok.txt"), flags::READ).unwrap();
        let mut b = [0u8; 6];
        assert_eq!(services::read(fd, &mut b), Ok(6));
        assert_eq!(&b, b"inside");
        services::close(fd).unwrap();
        let fd = services::open(&format!("{jail_s}/new.txt"), flags::WRITE | flags::CREATE_NEW).unwrap();
        assert_eq!(services::write_fd(fd, b"made"), Ok(4));
        services::close(fd).unwrap();
    });
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "an open blocked");
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert!(!std::path::Path::new(&ssh).join("authorized_keys").exists());
    assert_eq!(std::fs::read(jail.0.join("new.txt")).unwrap(), b"made");
    assert_eq!(host.open_files(), 0);

    // Allowing kernel file systems and devices by name still opens only
    // regular files on ordinary file systems.
    let (d, _, _, _) = setup(StdHostConfig {
        read_dirs: vec!["/proc".into(), "/dev".into(), "/sys".into()],
        write_dirs: Vec::new(),
        ..StdHostConfig::default()
    });
    run_std(&d, 1, |_| {
        for path in [
            "/proc/self/environ",
            "/proc/self/maps",
            "/proc/version",
            "/dev/zero",
            "/dev/null",
        ] {
            assert_eq!(services::open(path, flags::READ), Err(IoError::EACCES), "{path}");
        }
        if std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists() {
            assert_eq!(
                services::open("/sys/kernel/mm/transparent_hugepage/enabled", flags::READ),
                Err(IoError::EACCES)
            );
        }
    });

    // The default: read-only beneath the working directory (the package
    // root, for tests), relative paths from there.
    let (d, _, _, _) = setup(StdHostConfig::default());
    run_std(&d, 1, |_| {
        let fd = services::open("Cargo.toml", flags::READ).unwrap();
        services::close(fd).unwrap();
        assert_eq!(services::open("Cargo.toml", flags::APPEND), Err(IoError::EACCES));
        assert_eq!(services::open("/etc/hostname", flags::READ), Err(IoError::EACCES));
    });
}

// ---------------------------------------------------------------------------
// Time, environment, arguments.

#[test]
fn time_ns_is_the_host_wall_clock() {
    let (d, _, _, _) = setup(StdHostConfig::default());
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    };
    let before = now();
    run_std(&d, 4, |_| {
        let t = services::time_ns();
        assert!(t >= before, "{t} < {before}");
        assert!(t - before < 5_000_000_000, "more than 5 s off");
    });
    assert!(now() >= before);
}

#[test]
fn getenv_reads_only_allowlisted_variables() {
    // Set before the run, read only by the host's server thread.
    std::env::set_var("GPU_RPC_STD_TEST_ALLOWED", "value-1234");
    std::env::set_var("GPU_RPC_STD_TEST_SECRET", "hunter2");
    let (d, _, _, _) = setup(
        StdHostConfig::default()
            .allow_env("GPU_RPC_STD_TEST_ALLOWED")
            .allow_env("GPU_RPC_STD_TEST_UNSET"),
    );
    run_std(&d, 2, |_| {
        let mut buf = [0u8; 64];
        let n = services::getenv("GPU_RPC_STD_TEST_ALLOWED", &mut buf).unwrap();
        assert_eq!(&buf[..n], b"value-1234");
        // A short buffer: the full length, the first bytes.
        let mut short = [0u8; 5];
        assert_eq!(services::getenv("GPU_RPC_STD_TEST_ALLOWED", &mut short), Some(10));
        assert_eq!(&short, b"value");
        // Not on the allowlist: looks unset.
        assert_eq!(services::getenv("GPU_RPC_STD_TEST_SECRET", &mut buf), None);
        assert_eq!(services::getenv("PATH", &mut buf), None);
        // Allowed but unset.
        assert_eq!(services::getenv("GPU_RPC_STD_TEST_UNSET", &mut buf), None);
    });
    // The default allowlist is empty.
    let (d, _, _, _) = setup(StdHostConfig::default());
    run_std(&d, 1, |_| {
        assert_eq!(services::getenv("GPU_RPC_STD_TEST_ALLOWED", &mut [0; 16]), None);
    });
}

#[test]
fn args_from_device_pointers() {
    use std::ffi::{c_char, CString};
    let owned: Vec<CString> = ["gpu-run", "kernel.ptx", "--n=3", ""]
        .iter()
        .map(|s| CString::new(*s).unwrap())
        .collect();
    let mut ptrs: Vec<*const c_char> = owned.iter().map(|s| s.as_ptr()).collect();
    let bad = b"ok\xffrest\0";
    ptrs.push(bad.as_ptr() as *const c_char);
    // SAFETY: 5 pointers to NUL-terminated strings, alive for the test.
    let args = unsafe { services::args(5, ptrs.as_ptr() as u64) };
    assert_eq!(args.len(), 5);
    assert_eq!(format!("{args:?}"), r#"["gpu-run", "kernel.ptx", "--n=3", "", "ok"]"#);
    assert_eq!(args.clone().nth(2), Some("--n=3"));
    // SAFETY: a null argv means no arguments.
    assert_eq!(unsafe { services::args(3, 0) }.count(), 0);
    // SAFETY: null is allowed.
    assert_eq!(unsafe { services::str_from_ptr(0) }, "");
}

// ---------------------------------------------------------------------------
// Beside a user trait.

#[gpu_rpc]
pub trait Calc {
    fn mul(&self, a: u32, b: u32) -> u32;
    fn shout(&self, s: &str, out: &mut [u8]) -> usize;
}

struct CalcHost;

impl Calc for CalcHost {
    fn mul(&self, a: u32, b: u32) -> u32 {
        a.wrapping_mul(b)
    }
    fn shout(&self, s: &str, out: &mut [u8]) -> usize {
        let up = s.to_uppercase();
        let n = up.len().min(out.len());
        out[..n].copy_from_slice(&up.as_bytes()[..n]);
        n
    }
}

const _: () = assert_disjoint_opcodes(&[StdRpc::OPCODES, CalcRpc::OPCODES]);

#[test]
fn std_beside_a_user_trait_on_one_dispatcher() {
    let (config, out, _) = StdHostConfig::default().exit_mode(ExitMode::Record).capture();
    let host = StdHost::new(config);
    let mut d = Dispatcher::new(ServerConfig::default());
    d.add(CalcServer(CalcHost))
        .unwrap()
        .add(StdServer(host.clone()))
        .unwrap();
    // Adding Std twice is refused (same opcodes).
    assert!(d.add(StdServer(host.clone())).is_err());

    let report = cpu::launch(
        &Launch {
            threads: 6,
            server_threads: 3,
            ..Launch::default()
        },
        &d,
        |client, t| {
            let calc = CalcClient::new(client);
            services::with_client(client, || {
                let p = calc.mul(t.id as u32, 7);
                let mut buf = [0u8; 16];
                let n = calc.shout("gpu", &mut buf);
                gpu_println!("{} * 7 = {p}, {}", t.id, core::str::from_utf8(&buf[..n]).unwrap());
            });
        },
    )
    .unwrap();
    assert_eq!(report.errors, 0);
    assert_eq!(report.calls, 18);
    let mut lines = out.lines();
    lines.sort();
    let want: Vec<String> = (0..6).map(|i| format!("{i} * 7 = {}, GPU", i * 7)).collect();
    assert_eq!(lines, want);
}

#[test]
fn opcodes_are_stable_and_in_the_reserved_block() {
    assert_eq!(
        StdRpc::OPCODES,
        &[
            // In declaration order: `print` (host-formatted) follows `write`.
            0x1_0000, 0x1_0005, 0x1_0001, 0x1_0002, 0x1_0003, 0x1_0004, 0x1_0010, 0x1_0011, 0x1_0012, 0x1_0013,
            0x1_0020, 0x1_0030
        ]
    );
    assert!(StdRpc::OPCODES.iter().all(|op| OPCODE_BLOCK.contains(op)));
    assert_eq!(StdRpc::SERVICE, "Std");
    assert_eq!(StdRpc::WRITE.opcode, 0x1_0000);
    assert_eq!(StdRpc::REPORT_PANIC.opcode, 0x1_0004);
}

#[test]
fn io_error_helpers() {
    assert_eq!(IoError::EBADF.errno, 9);
    assert_eq!(IoError::ENOENT.to_string(), "ENOENT: no such file or directory");
    assert_eq!(IoError::new(-3).name(), None);
    let from_io: IoError = std::io::Error::from(std::io::ErrorKind::NotFound).into();
    assert_eq!(from_io, IoError::ENOENT);
    let back: std::io::Error = IoError::ENOENT.into();
    assert_eq!(back.kind(), std::io::ErrorKind::NotFound);
}

// ---------------------------------------------------------------------------
// The examples' kernels.

#[test]
fn example_print() {
    let (config, out, _) = StdHostConfig::default().exit_mode(ExitMode::Record).capture();
    let host = StdHost::new(config);
    let report = print_example::print_kernel(&host, 8, 0).unwrap();
    assert_eq!(host.exit_code(), Some(0));
    assert_eq!(report.halted, 1);
    let mut lines = out.lines();
    lines.sort();
    let mut want: Vec<String> = (0..8)
        .flat_map(|t| (0..print_example::LINES_PER_THREAD).map(move |l| format!("thread {t:>3} of 8: line {l}")))
        .collect();
    want.sort();
    assert_eq!(lines, want);
}

#[test]
fn example_panic() {
    let (config, _, err) = StdHostConfig::default().exit_mode(ExitMode::Record).capture();
    let host = StdHost::new(config);
    let e = panic_example::panic_kernel(&host, 3).unwrap_err();
    assert!(e
        .message
        .starts_with("index out of bounds: the len is 4 but the index is"));
    let mut panics = host.panics();
    panics.sort_by_key(|p| p.thread);
    assert_eq!(panics.len(), 3);
    for (i, p) in panics.iter().enumerate() {
        assert_eq!(
            p.message,
            format!("index out of bounds: the len is 4 but the index is {}", 4 + i)
        );
        assert!(p.file.ends_with("examples/panic.rs"), "{}", p.file);
        assert_eq!(p.thread, [i as u32, 0, 0]);
        assert!(p.line > 0 && p.column > 0);
    }
    assert_eq!(err.lines().len(), 3);
    assert!(err.text().starts_with("kernel panicked at "));
    assert!(err.text().contains("examples/panic.rs:"));
}

#[test]
fn example_file_read() {
    let tmp = TempPath::new("first_line");
    std::fs::write(&tmp.0, format!("{}\nsecond line\n", "first line ".repeat(10))).unwrap();
    let (config, out, err) = StdHostConfig::default()
        .allow_read(std::env::temp_dir())
        .exit_mode(ExitMode::Record)
        .capture();
    let host = StdHost::new(config);
    file_read_example::file_read_kernel(&host, tmp.as_str()).unwrap();
    assert_eq!(
        out.text(),
        format!("first line of {}: {}\n", tmp.as_str(), "first line ".repeat(10))
    );
    assert!(err.bytes().is_empty());

    let missing = TempPath::new("missing");
    file_read_example::file_read_kernel(&host, missing.as_str()).unwrap();
    assert_eq!(
        err.text(),
        format!("cannot read {}: ENOENT: no such file or directory\n", missing.as_str())
    );
    assert_eq!(host.open_files(), 0);
}
