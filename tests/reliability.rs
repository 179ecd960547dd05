//! Reliability on the CPU backend: bad input, faults and kernels that die,
//! with every failure visible (an error status for the lanes, a `ServerError`
//! naming opcode, port and lane(s)) and bounded (nothing hangs, nothing is
//! allocated beyond the limit, the server goes on serving).
//!
//! One file on purpose: every file under `tests/` links a test binary of its
//! own, and the project keeps those few (CI builds them on two cores).
//!
//! Malformed calls are made three ways: through generated stubs of services
//! the server lacks, through the runtime's raw call API with crafted argument
//! blocks, frame words and streams, and by writing the shared region directly
//! (`CpuRegion::raw`) as a misbehaving device would.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use gpu_rpc::call::{FrameWord, FRAME_VERSION};
use gpu_rpc::cpu::{self, CpuRegion, Launch, RawDevice};
use gpu_rpc::device_memory::{CopyError, DeviceMemory, EarlyWrites, Lent};
use gpu_rpc::protocol::{Buffer, Layout};
use gpu_rpc::server::{Dispatcher, ServerConfig, ServerError};
use gpu_rpc::{gpu_rpc, Status};

/// The service the server has.
#[gpu_rpc]
pub trait Rel {
    fn add(&self, a: u64, b: u64) -> u64;
    /// Byte length of the text.
    fn print(&self, s: &str) -> u64;
    fn flag(&self, b: bool, c: char) -> u32;
    fn sum(&self, data: &[u8]) -> u64;
    fn fill(&self, seed: u8, out: &mut [u8]) -> u64;
    /// Fills the first half of `out` only; returns how many bytes of `out`
    /// were not zero when the method got it.
    fn fill_half(&self, seed: u8, out: &mut [u8]) -> u64;
    fn boom(&self, msg: &str) -> u32;
    /// `fill_half` with the lanes of one call on several host threads;
    /// panics for seed 0xee (`ok` and `touchy` are there to fail the
    /// reads).
    #[gpu_rpc(parallel)]
    fn fill_parallel(&self, seed: u8, ok: bool, touchy: Touchy, out: &mut [u8]) -> u64;
}

/// A byte whose decoding panics for 0xdd (a user's `Wire` impl with a bug).
pub struct Touchy(pub u8);

impl gpu_rpc::Wire for Touchy {
    const SIZE: usize = 1;
    const SCHEMA: u32 = 0x7007_c4e1;
    fn encode(&self, out: &mut [u8]) {
        out[0] = self.0;
    }
    fn decode(bytes: &[u8]) -> Result<Self, gpu_rpc::wire::WireError> {
        assert_ne!(bytes[0], 0xdd, "touchy byte");
        Ok(Touchy(bytes[0]))
    }
    fn zeroed() -> Self {
        Touchy(0)
    }
}

/// A service the server does not have.
#[gpu_rpc]
pub trait Other {
    fn ping(&self, x: u32) -> u32;
    fn upload(&self, data: &[u8], out: &mut [u16]) -> u8;
    #[gpu_rpc(async)]
    fn shout(&self, s: &str);
}

#[derive(Default)]
struct Host {
    adds: AtomicUsize,
    /// `fill` calls run so far.
    fills: AtomicUsize,
    printed: Mutex<Vec<String>>,
    /// The threads `fill_parallel` ran on.
    threads: Mutex<Vec<std::thread::ThreadId>>,
    /// `fill_parallel`'s lanes wait (up to 5 s) until two of them have
    /// started: a call that may run on several threads does, so the test
    /// does not depend on which thread wins the race for a run of lanes.
    rendezvous: AtomicBool,
    /// `fill_parallel` lanes started so far.
    started: AtomicUsize,
    /// `fill_parallel` lanes running now, and the most that ever ran at
    /// once.
    running: AtomicUsize,
    most: AtomicUsize,
}

impl Rel for Arc<Host> {
    fn add(&self, a: u64, b: u64) -> u64 {
        // Relaxed: a tally; it is read after the threads that add to it are joined.
        self.adds.fetch_add(1, Ordering::Relaxed);
        a.checked_add(b).expect("add overflowed")
    }
    fn print(&self, s: &str) -> u64 {
        self.printed.lock().unwrap().push(s.to_string());
        s.len() as u64
    }
    fn flag(&self, b: bool, c: char) -> u32 {
        c as u32 + b as u32
    }
    fn sum(&self, data: &[u8]) -> u64 {
        data.iter().map(|&x| x as u64).sum()
    }
    fn fill(&self, seed: u8, out: &mut [u8]) -> u64 {
        // Relaxed: a count read by the tests' own memory on this thread.
        self.fills.fetch_add(1, Ordering::Relaxed);
        for (i, o) in out.iter_mut().enumerate() {
            *o = seed.wrapping_add(i as u8);
        }
        out.len() as u64
    }
    fn fill_half(&self, seed: u8, out: &mut [u8]) -> u64 {
        let dirty = out.iter().filter(|&&b| b != 0).count() as u64;
        let half = out.len() / 2;
        self.fill(seed, &mut out[..half]);
        dirty
    }
    fn boom(&self, msg: &str) -> u32 {
        panic!("boom: {msg}")
    }
    fn fill_parallel(&self, seed: u8, _ok: bool, _touchy: Touchy, out: &mut [u8]) -> u64 {
        let me = std::thread::current().id();
        let mut threads = self.threads.lock().unwrap();
        if !threads.contains(&me) {
            threads.push(me);
        }
        drop(threads);
        /// Counts this lane out of `running` however it ends.
        struct Running<'a>(&'a AtomicUsize);
        impl Drop for Running<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::Relaxed);
            }
        }
        // Relaxed, here and below: counts with no other data behind them.
        let now = self.running.fetch_add(1, Ordering::Relaxed) + 1;
        let _running = Running(&self.running);
        self.most.fetch_max(now, Ordering::Relaxed);
        // Relaxed: set before the call was served; `started` is this
        // count's only word.
        if self.rendezvous.load(Ordering::Relaxed) {
            self.started.fetch_add(1, Ordering::Relaxed);
            let t = Instant::now();
            while self.started.load(Ordering::Relaxed) < 2 && t.elapsed() < Duration::from_secs(5) {
                std::thread::yield_now();
            }
        }
        assert_ne!(seed, 0xee, "seed 0xee");
        self.fill_half(seed, out)
    }
}

const LIMIT: u64 = 1024;

fn dispatcher() -> (Arc<Dispatcher>, Arc<Host>) {
    let host = Arc::new(Host::default());
    let mut d = Dispatcher::new(ServerConfig {
        max_stream_bytes: LIMIT,
        log_errors: false,
        ..ServerConfig::default()
    });
    d.add(RelServer(host.clone())).unwrap();
    (Arc::new(d), host)
}

fn one_thread(ports: u32) -> Launch {
    Launch {
        threads: 1,
        server_threads: 1,
        port_count: ports,
        lane_size: 1,
    }
}

/// Run `f` on its own thread and fail (instead of hanging) if it takes
/// longer than `secs`.
fn watchdog<T: Send + 'static>(what: &str, secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let _ = tx.send(r);
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(Ok(v)) => v,
        Ok(Err(p)) => std::panic::resume_unwind(p),
        Err(_) => panic!("{what}: still running after {secs} s (hung)"),
    }
}

fn assert_has(text: &str, parts: &[&str]) {
    for p in parts {
        assert!(text.contains(p), "{text:?} lacks {p:?}");
    }
}

fn hex(opcode: u32) -> String {
    format!("{opcode:#010x}")
}

/// A whole-call error: one record, no lane, the lane mask in the message.
fn assert_whole_call(e: &ServerError, status: Status, opcode: u32, lanes: u64) {
    assert_eq!(e.status, status, "{e}");
    assert_eq!(e.opcode, opcode, "{e}");
    assert_eq!(e.lane, None, "{e}");
    assert_has(&e.to_string(), &[&hex(opcode), "port ", &format!("lanes {lanes:#x}")]);
}

// ---------------------------------------------------------------------------
// Unknown opcodes.

/// Calls of a trait the server does not serve: the `try_` form returns
/// `UnknownOpcode`, the streams and out-buffer are consumed (the buffer left
/// as it was), a fire-and-forget call is dropped with a logged error; each is
/// one error naming opcode, port and lanes, and the next call works.
#[test]
fn unknown_opcode_is_answered_and_logged() {
    let (d, host) = dispatcher();
    let d2 = d.clone();
    let report = watchdog("unknown opcode", 60, move || {
        cpu::launch(&one_thread(3), &d2, |client, _| {
            let other = OtherClient::new(client);
            let rel = RelClient::new(client);
            let e = other.try_ping(7).unwrap_err();
            assert_eq!(e.status, Status::UnknownOpcode);
            assert_eq!(e.desc, OtherRpc::PING);
            let mut out = [9u16; 300];
            let e = other.try_upload(&[1u8; 3000], &mut out).unwrap_err();
            assert_eq!(e.status, Status::UnknownOpcode);
            assert!(out.iter().all(|&x| x == 9), "out-buffer of a refused call was written");
            other.shout("nobody listens");
            assert_eq!(rel.add(2, 3), 5);
        })
        .unwrap()
    });
    assert_eq!(report.calls, 4);
    assert_eq!(report.errors, 3);
    // Relaxed: read after the work that counts is over (joined threads or an ended launch).
    assert_eq!(host.adds.load(Ordering::Relaxed), 1);
    let errors = d.errors();
    let opcodes = [OtherRpc::PING.opcode, OtherRpc::UPLOAD.opcode, OtherRpc::SHOUT.opcode];
    for (e, op) in errors.iter().zip(opcodes) {
        assert_whole_call(e, Status::UnknownOpcode, op, 0x1);
        assert_has(&e.message, &["unknown opcode"]);
        assert_eq!(e.method, None);
    }
}

/// The panicking form of a stub fails the lane with a message naming the
/// method, the opcode and the status.
#[test]
fn unknown_opcode_panicking_form_names_the_call() {
    let (d, _) = dispatcher();
    let err = watchdog("unknown opcode (panicking)", 60, move || {
        cpu::launch(&one_thread(1), &d, |client, _| {
            OtherClient::new(client).ping(1);
        })
        .unwrap_err()
    });
    assert_eq!(err.thread, 0);
    assert_eq!(
        err.message,
        format!(
            "gpu_rpc: call to Other::ping (opcode {}) failed: unknown opcode: no service on the host handles it",
            hex(OtherRpc::PING.opcode)
        )
    );
}

// ---------------------------------------------------------------------------
// Size limits.

/// A stream over `max_stream_bytes`: `TooLarge` for that call, its packets
/// consumed, the next call (at exactly the limit) works.
#[test]
fn stream_over_limit_is_too_large_and_consumed() {
    let (d, _) = dispatcher();
    let d2 = d.clone();
    watchdog("stream over limit", 60, move || {
        cpu::launch(&one_thread(1), &d2, |client, _| {
            let rel = RelClient::new(client);
            let e = rel.try_sum(&[1u8; 4 * LIMIT as usize + 3]).unwrap_err();
            assert_eq!((e.status, e.detail), (Status::TooLarge, 0));
            let text = "é".repeat(LIMIT as usize);
            assert_eq!(rel.try_print(&text).unwrap_err().status, Status::TooLarge);
            assert_eq!(rel.sum(&[2u8; LIMIT as usize]), 2 * LIMIT);
            assert_eq!(rel.add(1, 1), 2);
        })
        .unwrap()
    });
    let errors = d.errors();
    assert_eq!(errors.len(), 2, "{errors:?}");
    for (e, (method, len)) in errors
        .iter()
        .zip([("Rel::sum", 4 * LIMIT + 3), ("Rel::print", 2 * LIMIT)])
    {
        assert_eq!((e.status, e.lane, e.method), (Status::TooLarge, Some(0), Some(method)));
        assert_has(
            &e.to_string(),
            &[
                &format!("streamed argument 0 is {len} bytes, over the limit of {LIMIT}"),
                method,
                "port 0",
                "lane 0",
            ],
        );
    }
}

/// An out-buffer over the limit: `TooLarge`, the client's buffer untouched,
/// the next call works.
#[test]
fn out_buffer_over_limit_is_too_large() {
    let (d, _) = dispatcher();
    let d2 = d.clone();
    watchdog("out-buffer over limit", 60, move || {
        cpu::launch(&one_thread(2), &d2, |client, _| {
            let rel = RelClient::new(client);
            let mut big = vec![7u8; LIMIT as usize + 1];
            let e = rel.try_fill(3, &mut big).unwrap_err();
            assert_eq!((e.status, e.detail), (Status::TooLarge, 0));
            assert!(big.iter().all(|&b| b == 7));
            let mut ok = vec![0u8; LIMIT as usize];
            assert_eq!(rel.fill(3, &mut ok), LIMIT);
            assert!(ok.iter().enumerate().all(|(i, &b)| b == 3u8.wrapping_add(i as u8)));
        })
        .unwrap()
    });
    let errors = d.errors();
    assert_eq!(errors.len(), 1);
    assert_eq!((errors[0].status, errors[0].lane), (Status::TooLarge, Some(0)));
    assert_has(
        &errors[0].to_string(),
        &[
            &format!(
                "out-buffer 0 of {} elements is {} bytes, over the limit of {LIMIT}",
                LIMIT + 1,
                LIMIT + 1
            ),
            "Rel::fill",
        ],
    );
}

// ---------------------------------------------------------------------------
// Invalid values, sent through the raw call API.

/// A `&str` argument that is not UTF-8, and a `bool`/`char` that are not
/// valid values: `InvalidArgument` naming the argument, the next call works.
#[test]
fn invalid_values_are_refused() {
    let (d, host) = dispatcher();
    let d2 = d.clone();
    watchdog("invalid values", 60, move || {
        cpu::launch(&one_thread(1), &d2, |client, _| {
            let bad_utf8: &[u8] = &[b'o', b'k', 0xff, 0xfe];
            let mut block = [0u8; 8];
            block.copy_from_slice(&(bad_utf8.len() as u64).to_le_bytes());
            let call = client.begin(RelRpc::PRINT, &block).stream(bad_utf8);
            let mut ret = [0u8; 8];
            let reply = call.reply(&mut ret);
            let e = reply.result().unwrap_err();
            reply.close();
            assert_eq!((e.status, e.detail), (Status::InvalidArgument, 0));
            assert_has(&e.to_string(), &["Rel::print", "invalid argument (argument 0)"]);

            for (args, index) in [([2u8, b'a', 0, 0, 0], 0), ([1, 0x00, 0xd8, 0, 0], 1)] {
                let call = client.begin(RelRpc::FLAG, &args);
                let mut ret = [0u8; 4];
                let reply = call.reply(&mut ret);
                let e = reply.result().unwrap_err();
                reply.close();
                assert_eq!((e.status, e.detail), (Status::InvalidArgument, index));
            }
            let rel = RelClient::new(client);
            assert_eq!(rel.flag(true, 'a'), 'b' as u32);
            assert_eq!(rel.print("fine"), 4);
        })
        .unwrap()
    });
    assert_eq!(*host.printed.lock().unwrap(), ["fine"]);
    let errors = d.errors();
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert!(errors
        .iter()
        .all(|e| e.status == Status::InvalidArgument && e.lane == Some(0)));
    assert_has(
        &errors[0].to_string(),
        &["argument 0 is not valid UTF-8", "Rel::print", "lane 0"],
    );
    assert_has(
        &errors[1].to_string(),
        &["argument 0: invalid bool byte 0x02", "Rel::flag"],
    );
    assert_has(
        &errors[2].to_string(),
        &["argument 1: invalid char 0xd800", "Rel::flag"],
    );
}

/// Frame words a correct stub never sends, through a raw client port: a
/// wrong version or inline streams on a method without streams are
/// `BadFrame`; a known opcode with
/// another shape (the no-op too) is `SignatureMismatch`. Each is one error
/// naming the lanes; the next call works.
#[test]
fn malformed_frame_words_are_refused() {
    let (d, _) = dispatcher();
    let d2 = d.clone();
    let add = RelRpc::ADD.frame_word();
    let mut v2 = add;
    v2.version = FRAME_VERSION + 1;
    let newer: &'static str = format!("frame version {} (expected {FRAME_VERSION})", FRAME_VERSION + 1).leak();
    // A client of the version before, which would read an inline reply
    // from the packet, is refused too.
    let mut v1 = add;
    v1.version = FRAME_VERSION - 1;
    let older: &'static str = format!("frame version {} (expected {FRAME_VERSION})", FRAME_VERSION - 1).leak();
    let inline = FrameWord {
        inline_streams: true,
        ..add
    }
    .pack();
    let mut shape = add;
    shape.arg_bytes = 8;
    let mut noop = gpu_rpc::call::NOOP_DESC.frame_word();
    noop.arg_bytes = 0;
    let cases = [
        (RelRpc::ADD.opcode, v2.pack(), Status::BadFrame, newer),
        (RelRpc::ADD.opcode, v1.pack(), Status::BadFrame, older),
        (RelRpc::ADD.opcode, inline, Status::BadFrame, "announces inline streams"),
        (RelRpc::ADD.opcode, shape.pack(), Status::SignatureMismatch, "Rel::add"),
        (
            gpu_rpc::protocol::opcodes::NOOP,
            noop.pack(),
            Status::SignatureMismatch,
            "gpu_rpc::noop",
        ),
    ];
    watchdog("malformed frames", 60, move || {
        cpu::launch(&one_thread(1), &d2, |client, _| {
            for (opcode, word, status, _) in cases {
                let mut got = 0u64;
                let port = client.open(opcode).send(|b| b.data[0] = word).recv(|b| got = b.data[0]);
                port.close();
                assert_eq!(Status::from_u32(got as u32), status, "{word:#x}");
            }
            assert_eq!(client.noop(41).unwrap(), 42);
            assert_eq!(RelClient::new(client).add(40, 2), 42);
        })
        .unwrap()
    });
    let errors = d.errors();
    assert_eq!(errors.len(), cases.len(), "{errors:?}");
    for (e, (opcode, _, status, text)) in errors.iter().zip(cases) {
        assert_whole_call(e, status, opcode, 0x1);
        assert_has(&e.message, &[text]);
    }
}

// ---------------------------------------------------------------------------
// A misbehaving device, writing the region directly.

/// The device side of a region no client uses: what a device with a bug
/// could write.
fn raw_device(region: &CpuRegion) -> RawDevice<'_> {
    // SAFETY: the tests that call this run no client on the region while
    // the device writes it; the server validates what it reads.
    unsafe { RawDevice::new(region) }
}

/// Play one lane's call with one slice by address on port 0: the frame
/// (`word`, `block`), then the packet with the address, then wait for the
/// reply; its status and first return word.
fn direct_call(dev: &RawDevice<'_>, opcode: u32, word: u64, block: &[u8], addr: u64) -> (Status, u64) {
    dev.inject(0, opcode, 0b1, &[(0, frame(word, block))]);
    while !dev.owned(0) {
        std::hint::spin_loop();
    }
    let mut b = Buffer::default();
    b.data[0] = addr;
    dev.write(0, 0, &b);
    dev.flip(0);
    while !dev.owned(0) {
        std::hint::spin_loop();
    }
    (dev.status(0, 0), dev.reply_word(0, 0, 1))
}

fn frame(word: u64, block: &[u8]) -> Buffer {
    let mut b = Buffer::default();
    b.data[0] = word;
    b.bytes_mut()[8..8 + block.len()].copy_from_slice(block);
    b
}

/// Serve whatever is pending once, with an abort flag already raised so that
/// a call waiting for more packets gives up at once instead of hanging.
fn serve_once(d: &Dispatcher, region: &CpuRegion) -> Result<usize, gpu_rpc::protocol::Abandoned> {
    let abort = AtomicBool::new(true);
    let server = region.server().with_abort(&abort);
    d.poll(&server, 0..region.layout().port_count())
}

/// One warp-call of `Rel::fill` made as a device would make it, lane `l`
/// asking for an out-buffer of `counts[l]` bytes, served once under the
/// given limits: each lane's status and the `TooLarge` errors logged. (The
/// server answers, then waits for the device to take the out-buffer
/// packets; this device never does, so the raised abort flag ends that
/// wait, with one more error of its own.)
fn fill_call(max_stream_bytes: u64, max_call_bytes: u64, counts: &[u64]) -> (Vec<Status>, Vec<ServerError>) {
    let mut d = Dispatcher::new(ServerConfig {
        max_stream_bytes,
        max_call_bytes,
        log_errors: false,
        ..ServerConfig::default()
    });
    d.add(RelServer(Arc::new(Host::default()))).unwrap();
    let lanes = counts.len() as u32;
    let region = CpuRegion::new(Layout::new(2, lanes).unwrap());
    let dev = raw_device(&region);
    let word = RelRpc::FILL.frame_word().pack();
    let packets: Vec<_> = (0..lanes)
        .zip(counts)
        .map(|(l, count)| {
            let mut block = vec![0u8; RelRpc::FILL.block_len()];
            block[..8].copy_from_slice(&count.to_le_bytes());
            (l, frame(word, &block))
        })
        .collect();
    dev.inject(0, RelRpc::FILL.opcode, (1u64 << lanes) - 1, &packets);
    let _ = serve_once(&d, &region);
    let statuses = (0..lanes).map(|l| dev.status(0, l)).collect();
    let errors = d
        .errors()
        .into_iter()
        .filter(|e| e.status == Status::TooLarge)
        .collect();
    (statuses, errors)
}

/// A device that announces inline streams it cannot have: a call without
/// streams that says so is refused whole (`BadFrame`); a lane whose inline
/// stream would run past packet 0 is answered `InvalidArgument`, naming the
/// argument, while the other lane is served from the same packet; then the
/// server serves a well-formed call on the same port.
#[test]
fn lying_inline_streams_are_refused() {
    let (d, host) = dispatcher();
    let region = CpuRegion::new(Layout::new(2, 2).unwrap());
    let dev = raw_device(&region);
    let inline = |desc: &gpu_rpc::CallDesc| {
        FrameWord {
            inline_streams: true,
            ..desc.frame_word()
        }
        .pack()
    };
    // `add(a, b)` has no streams.
    dev.inject(0, RelRpc::ADD.opcode, 0b1, &[(0, frame(inline(RelRpc::ADD), &[0; 16]))]);
    // `print(s)`: lane 0 sends "hello" inline (after its 8-byte block), lane
    // 1 claims 60 bytes, which packet 0 cannot hold.
    let mut hello = frame(inline(RelRpc::PRINT), &5u64.to_le_bytes());
    hello.bytes_mut()[16..21].copy_from_slice(b"hello");
    let liar = frame(inline(RelRpc::PRINT), &60u64.to_le_bytes());
    dev.inject(1, RelRpc::PRINT.opcode, 0b11, &[(0, hello), (1, liar)]);
    assert_eq!(serve_once(&d, &region), Ok(2));
    assert_eq!(dev.status(0, 0), Status::BadFrame);
    assert_eq!(
        (dev.status(1, 0), dev.status(1, 1)),
        (Status::Ok, Status::InvalidArgument)
    );
    assert_eq!(dev.reply_word(1, 0, 1), 5, "print returns the byte length");
    assert_eq!(*host.printed.lock().unwrap(), ["hello"]);
    let errors = d.errors();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert_whole_call(&errors[0], Status::BadFrame, RelRpc::ADD.opcode, 0b1);
    assert_has(&errors[0].message, &["announces inline streams", "0 streamed inputs"]);
    assert_eq!((errors[1].lane, errors[1].status), (Some(1), Status::InvalidArgument));
    assert_has(
        &errors[1].to_string(),
        &[
            "inline streamed argument 0 ends at byte 68",
            "holds 56",
            "Rel::print",
            "port 1",
        ],
    );
    // The port serves a good call next.
    dev.inject(
        0,
        RelRpc::ADD.opcode,
        0b1,
        &[(
            0,
            frame(
                RelRpc::ADD.frame_word().pack(),
                &[2, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0],
            ),
        )],
    );
    assert_eq!(serve_once(&d, &region), Ok(1));
    assert_eq!((dev.status(0, 0), dev.reply_word(0, 0, 1)), (Status::Ok, 5));
}

/// A device that sets the bits of its outbox word above the ownership bit
/// (only bit 0 is the protocol's): a port at rest stays at rest, and calls
/// flipped with those bits set are served as any other, their small replies
/// inline.
#[test]
fn bits_beside_the_ownership_bit_change_nothing() {
    let (d, _) = dispatcher();
    let region = CpuRegion::new(Layout::new(1, 1).unwrap());
    let dev = raw_device(&region);
    dev.scribble_outbox(0, 0xdead_bee0);
    assert_eq!(serve_once(&d, &region), Ok(0), "nothing pending");
    assert!(region.server().all_idle());
    let add = |a: u64, b: u64| {
        let mut block = [0u8; 16];
        block[..8].copy_from_slice(&a.to_le_bytes());
        block[8..].copy_from_slice(&b.to_le_bytes());
        frame(RelRpc::ADD.frame_word().pack(), &block)
    };
    for (k, high) in [0xdead_bee0u32, 0xffff_fffe, 0x2].into_iter().enumerate() {
        dev.set_header(0, RelRpc::ADD.opcode, 0b1);
        dev.write(0, 0, &add(k as u64, 40));
        dev.flip(0);
        dev.scribble_outbox(0, high);
        assert_eq!(serve_once(&d, &region), Ok(1), "call {k}");
        assert!(dev.owned(0));
        assert_eq!(dev.inline_reply(0), Some(k as u32 + 40), "call {k}");
        assert_eq!((dev.status(0, 0), dev.reply_word(0, 0, 1)), (Status::Ok, k as u64 + 40));
    }
    assert!(region.server().all_idle());
    assert!(d.errors().is_empty(), "{:?}", d.errors());
}

/// A warp-call whose host method panics on one lane: that lane alone is
/// answered `HandlerPanicked` (one error naming the method, the panic and the
/// lane), the lanes before and after it get their results, and the port
/// serves the next call.
#[test]
fn a_panic_on_one_lane_leaves_the_other_lanes_answered() {
    let (d, host) = dispatcher();
    let region = CpuRegion::new(Layout::new(1, 4).unwrap());
    let dev = raw_device(&region);
    let args = |a: u64, b: u64| {
        let mut block = [0u8; 16];
        block[..8].copy_from_slice(&a.to_le_bytes());
        block[8..].copy_from_slice(&b.to_le_bytes());
        frame(RelRpc::ADD.frame_word().pack(), &block)
    };
    let lanes = [
        (0, args(1, 2)),
        (1, args(u64::MAX, 1)),
        (2, args(3, 4)),
        (3, args(5, 6)),
    ];
    for round in 0..2 {
        dev.inject(0, RelRpc::ADD.opcode, 0b1111, &lanes);
        assert_eq!(serve_once(&d, &region), Ok(1));
        let got: Vec<(Status, u64)> = (0..4).map(|l| (dev.status(0, l), dev.reply_word(0, l, 1))).collect();
        assert_eq!(got[0], (Status::Ok, 3));
        assert_eq!(got[1].0, Status::HandlerPanicked);
        assert_eq!(got[2], (Status::Ok, 7));
        assert_eq!(got[3], (Status::Ok, 11));
        let errors = d.errors();
        assert_eq!(errors.len(), round + 1);
        assert_eq!(
            (errors[round].lane, errors[round].status),
            (Some(1), Status::HandlerPanicked)
        );
        assert_has(&errors[round].message, &["Rel::add panicked", "add overflowed"]);
    }
    // Relaxed: read after the work that counts is over (joined threads or an ended launch).
    assert_eq!(host.adds.load(Ordering::Relaxed), 8);
}

/// Lanes that say their slice goes by address ([the direct path]) are
/// checked like any other: a `sum(&[u8])` lane whose address the process has
/// not mapped and a `fill(&mut [u8])` lane whose out-buffer address is
/// unmapped are refused (`InvalidArgument`, naming the argument, the address,
/// the port and the lane) while the honest lane beside each is served; a
/// server without device memory refuses direct lanes instead of copying;
/// nothing hangs and the port serves the next call.
///
/// [the direct path]: gpu_rpc::call#the-direct-path
#[test]
fn lying_direct_addresses_are_refused() {
    use gpu_rpc::call::len_word;
    use gpu_rpc::cpu::ProcessMemory;
    use gpu_rpc::device_memory::DeviceMemory;
    let dispatcher = || {
        let mut d = Dispatcher::new(ServerConfig {
            log_errors: false,
            ..ServerConfig::default()
        });
        d.add(RelServer(Arc::new(Host::default()))).unwrap();
        d
    };
    // The same with memory the server may borrow for the call (the
    // process's `lend`), and with none (its own buffers).
    for memory in [&ProcessMemory as &dyn DeviceMemory, &NoLoans] {
        let d = dispatcher();
        let region = CpuRegion::new(Layout::new(1, 2).unwrap());
        let dev = raw_device(&region);
        let data: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
        let mut out = vec![0u8; 3000];
        // Play one call: the frame, then one packet per lane (an address), then
        // wait for the reply.
        let call = |opcode: u32, word: u64, blocks: [Vec<u8>; 2], addrs: [u64; 2]| {
            dev.inject(
                0,
                opcode,
                0b11,
                &[(0, frame(word, &blocks[0])), (1, frame(word, &blocks[1]))],
            );
            while !dev.owned(0) {
                std::hint::spin_loop();
            }
            let packet = |a: u64| {
                let mut b = Buffer::default();
                b.data[0] = a;
                b
            };
            dev.write(0, 0, &packet(addrs[0]));
            dev.write(0, 1, &packet(addrs[1]));
            dev.flip(0);
            while !dev.owned(0) {
                std::hint::spin_loop();
            }
            [dev.status(0, 0), dev.status(0, 1)]
        };
        let stop = AtomicBool::new(false);
        let server = region.server().with_memory(memory);
        std::thread::scope(|s| {
            let (d, stop, server) = (&d, &stop, &server);
            let served = s.spawn(move || d.serve_until(server, 0, 1, stop));
            // `sum`: lane 0 honest, lane 1 at page 0.
            let len = len_word(data.len() as u64, true).to_le_bytes().to_vec();
            let word = RelRpc::SUM.frame_word().pack();
            let st = call(RelRpc::SUM.opcode, word, [len.clone(), len], [data.as_ptr() as u64, 16]);
            assert_eq!(st, [Status::Ok, Status::InvalidArgument]);
            assert_eq!(dev.reply_word(0, 0, 1), data.iter().map(|&b| b as u64).sum::<u64>());
            // `fill(seed, out)`: lane 1's out-buffer at page 0. The block is the
            // out-buffer's length word, then the seed.
            let mut block = len_word(out.len() as u64, true).to_le_bytes().to_vec();
            block.push(9);
            let word = RelRpc::FILL.frame_word().pack();
            let st = call(
                RelRpc::FILL.opcode,
                word,
                [block.clone(), block],
                [out.as_mut_ptr() as u64, 64],
            );
            assert_eq!(st, [Status::Ok, Status::InvalidArgument]);
            // Release: pairs with the server loop's acquire load of its stop flag.
            stop.store(true, Ordering::Release);
            served.join().unwrap().unwrap();
        });
        // The honest lane's out-buffer was stored at its address.
        assert!(
            out.iter().enumerate().all(|(i, &b)| b == 9u8.wrapping_add(i as u8)),
            "{:?}",
            &out[..8]
        );
        let errors = d.errors();
        assert_eq!(errors.len(), 2, "{errors:?}");
        for e in &errors {
            assert_eq!((e.port, e.lane, e.status), (0, Some(1), Status::InvalidArgument));
        }
        assert_has(
            &errors[0].to_string(),
            &[
                "streamed argument 0",
                "direct copy of 4096 bytes from 0x10",
                "process_vm_readv",
                "Rel::sum",
                "port 0, lane 1",
            ],
        );
        assert_has(
            &errors[1].to_string(),
            &[
                "out-buffer 0",
                "direct copy of 3000 bytes to 0x40",
                "process_vm_writev",
                "Rel::fill",
            ],
        );
    }

    // A server without device memory refuses direct lanes and goes on.
    let data = vec![1u8; 4096];
    let d = dispatcher();
    let region = CpuRegion::new(Layout::new(1, 1).unwrap());
    let dev = raw_device(&region);
    let stop = AtomicBool::new(false);
    let server = region.server();
    std::thread::scope(|s| {
        let (d, stop, server) = (&d, &stop, &server);
        let served = s.spawn(move || d.serve_until(server, 0, 1, stop));
        let len = len_word(data.len() as u64, true).to_le_bytes();
        let word = RelRpc::SUM.frame_word().pack();
        let (st, _) = direct_call(&dev, RelRpc::SUM.opcode, word, &len, data.as_ptr() as u64);
        assert_eq!(st, Status::InvalidArgument);
        // Release: pairs with the server loop's acquire load of its stop flag.
        stop.store(true, Ordering::Release);
        served.join().unwrap().unwrap();
    });
    let errors = d.errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_has(&errors[0].message, &["asks for a direct copy", "no device memory"]);
}

/// One warp-call of 4 lanes asking for out-buffers of 600, 600, 600 and 100
/// bytes under a call budget of 1024: the lanes that fit, in lane order,
/// are served, the others answered `TooLarge` (each logged, naming the
/// budget), before anything is allocated for them.
#[test]
fn a_calls_buffers_are_held_to_its_memory_budget() {
    let (statuses, errors) = fill_call(LIMIT, 1024, &[600, 600, 600, 100]);
    assert_eq!(statuses, [Status::Ok, Status::TooLarge, Status::TooLarge, Status::Ok]);
    assert_eq!(errors.iter().map(|e| e.lane).collect::<Vec<_>>(), [Some(1), Some(2)]);
    assert_has(
        &errors[0].to_string(),
        &[
            "(600 bytes) would take the call past its budget of 1024 bytes",
            "600 taken by earlier lanes",
            "Rel::fill",
        ],
    );
}

/// Limits set beyond any host's memory (`u64::MAX` both) and a device that
/// declares a 2^50-byte out-buffer: the lane is answered `TooLarge` (the
/// allocation is tried and fails) instead of the process aborting, and the
/// other lane is served.
#[test]
fn an_out_buffer_the_host_cannot_allocate_is_too_large_not_an_abort() {
    let (statuses, errors) = fill_call(u64::MAX, u64::MAX, &[1 << 50, 10]);
    assert_eq!(statuses, [Status::TooLarge, Status::Ok]);
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].lane, Some(0));
    assert_has(&errors[0].to_string(), &["the host could not allocate it", "Rel::fill"]);
}

/// Garbage in the shared region of a GPU-shaped layout (4 lanes): empty and
/// out-of-layout lane masks, lanes that disagree on the frame word, garbage
/// frames and unknown opcodes written for ports no client holds. Each is one
/// logged error naming opcode, port and lanes; the lanes that exist get the
/// error status; the port ends idle; then real clients use the same region.
#[test]
fn garbage_in_the_region_is_refused_and_the_region_stays_usable() {
    let (d, host) = dispatcher();
    let layout = Layout::new(8, 4).unwrap();
    let region = CpuRegion::new(layout);
    let dev = raw_device(&region);
    let add = RelRpc::ADD.frame_word().pack();
    let sum = RelRpc::SUM.frame_word().pack();
    let args = [1u64.to_le_bytes(), 2u64.to_le_bytes()].concat();
    let mut wrong_version = RelRpc::ADD.frame_word();
    wrong_version.version = 0x7f;
    let unknown_async = FrameWord {
        version: FRAME_VERSION,
        inline_streams: false,
        reply: false,
        in_streams: 0,
        out_streams: 0,
        arg_bytes: 4,
        signature: 0x1234,
    }
    .pack();
    let unknown_reply = FrameWord {
        reply: true,
        ..FrameWord::unpack(unknown_async)
    }
    .pack();
    // (port, opcode, mask, packets, status, lanes answered, message)
    type Injection = (u32, u32, u64, Vec<(u32, Buffer)>, Status, u64, String);
    let cases: Vec<Injection> = vec![
        (
            1,
            RelRpc::ADD.opcode,
            0,
            vec![(0, frame(add, &args))],
            Status::InvalidLaneMask,
            0,
            "empty lane mask".to_string(),
        ),
        (
            2,
            RelRpc::ADD.opcode,
            0b1_0001,
            vec![(0, frame(add, &args))],
            Status::InvalidLaneMask,
            0b1,
            "names lanes the layout lacks (0x10)".to_string(),
        ),
        (
            3,
            RelRpc::ADD.opcode,
            u64::MAX,
            vec![],
            Status::InvalidLaneMask,
            0b1111,
            "lane mask 0xffffffffffffffff".to_string(),
        ),
        (
            4,
            RelRpc::ADD.opcode,
            0b1110,
            vec![
                (1, frame(add, &args)),
                (2, frame(sum, &[0; 8])),
                (3, frame(wrong_version.pack(), &args)),
            ],
            Status::BadFrame,
            0b1110,
            // The first lane of the call, and the first of the two that
            // disagree with it.
            format!("lanes disagree on the frame word (lane 1: {add:#018x}, lane 2: {sum:#018x})"),
        ),
        (
            5,
            RelRpc::ADD.opcode,
            0b1,
            vec![(0, frame(wrong_version.pack(), &args))],
            Status::BadFrame,
            0b1,
            "frame version 127".to_string(),
        ),
        (
            6,
            0xdead_beef,
            0b101,
            vec![(0, frame(unknown_reply, &[1; 4])), (2, frame(unknown_reply, &[2; 4]))],
            Status::UnknownOpcode,
            0b101,
            "unknown opcode".to_string(),
        ),
        (
            7,
            0xdead_beef,
            0b1,
            vec![(0, frame(unknown_async, &[]))],
            Status::UnknownOpcode,
            0,
            "unknown opcode".to_string(),
        ),
    ];
    for (port, opcode, mask, packets, status, answered, text) in &cases {
        dev.inject(*port, *opcode, *mask, packets);
        assert_eq!(serve_once(&d, &region), Ok(1), "port {port}");
        for lane in gpu_rpc::server::iter_lanes(*answered) {
            assert_eq!(dev.status(*port, lane), *status, "port {port} lane {lane}");
        }
        assert!(region.is_quiescent(), "port {port} was not left idle");
        let errors = d.errors();
        let e = errors.last().unwrap();
        assert_eq!(
            (e.opcode, e.port, e.status, e.lane),
            (*opcode, *port, *status, None),
            "{e}"
        );
        assert_has(
            &e.to_string(),
            &[
                text,
                &hex(*opcode),
                &format!("port {port}"),
                &format!("lanes {:#x}", mask & 0b1111),
            ],
        );
    }
    assert_eq!(d.error_count(), cases.len() as u64);

    // Real clients on the same region.
    let launch = Launch {
        threads: 4,
        server_threads: 2,
        port_count: 8,
        lane_size: 4,
    };
    let report = watchdog("clients after garbage", 60, move || {
        cpu::launch_with_region(&region, &launch, &d, |client, t| {
            let rel = RelClient::new(client);
            for i in 0..20 {
                assert_eq!(rel.add(t.id as u64, i), t.id as u64 + i);
            }
        })
        .map(|r| (r, region.is_quiescent()))
        .unwrap()
    });
    assert_eq!(report.0.calls, 80);
    assert_eq!(report.0.errors, 0);
    assert!(report.1, "a port was left locked or pending");
    // Relaxed: read after the work that counts is over (joined threads or an ended launch).
    assert_eq!(host.adds.load(Ordering::Relaxed), 80);
}

// ---------------------------------------------------------------------------
// Faults in host code and in kernels.

/// A host method that panics: caught, reported with the method name and
/// panic message, the lane gets `HandlerPanicked`, the server goes on (with
/// several server threads, from several client threads).
#[test]
fn handler_panic_is_caught_and_reported() {
    let (d, _) = dispatcher();
    let d2 = d.clone();
    let report = watchdog("handler panic", 60, move || {
        cpu::launch(
            &Launch {
                threads: 3,
                server_threads: 2,
                port_count: 2,
                lane_size: 1,
            },
            &d2,
            |client, t| {
                let rel = RelClient::new(client);
                let e = rel.try_boom(&format!("thread {}", t.id)).unwrap_err();
                assert_eq!(e.status, Status::HandlerPanicked);
                assert_eq!(
                    e.to_string(),
                    format!(
                        "gpu_rpc: call to Rel::boom (opcode {}) failed: the host implementation panicked",
                        hex(RelRpc::BOOM.opcode)
                    )
                );
                assert_eq!(rel.add(1, 2), 3);
            },
        )
        .unwrap()
    });
    assert_eq!((report.calls, report.errors), (6, 3));
    let mut messages: Vec<String> = d.errors().iter().map(|e| e.to_string()).collect();
    messages.sort();
    for (t, m) in messages.iter().enumerate() {
        assert_has(
            m,
            &[&format!("Rel::boom panicked: boom: thread {t}"), "lane 0", "port "],
        );
    }
    // The panicking form ends the client thread with the call's error.
    let err = watchdog("handler panic (panicking form)", 60, move || {
        cpu::launch(&one_thread(1), &d, |client, _| {
            RelClient::new(client).boom("again");
        })
        .unwrap_err()
    });
    assert_has(&err.message, &["Rel::boom", "the host implementation panicked"]);
}

/// A kernel thread that dies in the middle of a call (after its frame, before
/// its stream): the server's wait ends with the kernel (the abort flag), the
/// run returns the kernel's panic promptly, and the abandoned call is logged
/// naming port, opcode and method.
#[test]
fn kernel_dying_mid_call_does_not_hang_the_server() {
    let (d, _) = dispatcher();
    let d2 = d.clone();
    let start = Instant::now();
    let err = watchdog("kernel dying mid-call", 30, move || {
        cpu::launch(&one_thread(1), &d2, |client, _| {
            let block = 500u64.to_le_bytes();
            // The port is never finished: `ClientCall` has no destructor, so
            // unwinding leaves it held, as a trapping GPU thread would.
            let _held = client.begin(RelRpc::SUM, &block);
            panic!("kernel died mid-call");
        })
        .unwrap_err()
    });
    assert!(start.elapsed() < Duration::from_secs(20));
    assert_eq!(err.message, "kernel died mid-call");
    let errors = d.errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    let e = &errors[0];
    assert_eq!(
        (e.status, e.lane, e.method, e.port),
        (Status::Unknown, None, Some("Rel::sum"), 0)
    );
    assert_has(
        &e.to_string(),
        &[
            "call abandoned on port 0",
            &format!("{:#x}", RelRpc::SUM.opcode),
            "lanes 0x1",
        ],
    );
}

/// A kernel thread that returns while holding a port (its call half sent):
/// `cpu::launch_with_region` returns an error naming the abandoned port and
/// opcode.
#[test]
fn kernel_returning_mid_call_is_reported_as_abandoned() {
    let (d, _) = dispatcher();
    let region = Arc::new(CpuRegion::new(Layout::new(4, 1).unwrap()));
    let (d2, r2) = (d.clone(), region.clone());
    let err = watchdog("kernel returning mid-call", 30, move || {
        cpu::launch_with_region(&r2, &one_thread(4), &d2, |client, _| {
            let block = 100u64.to_le_bytes();
            // Returns with the port held (the stream never sent).
            let _held = client.begin(RelRpc::PRINT, &block);
        })
        .unwrap_err()
    });
    assert_eq!(err.thread, usize::MAX);
    assert_has(
        &err.message,
        &["call abandoned on port", &format!("opcode {:#x}", RelRpc::PRINT.opcode)],
    );
    // The next run on that region is refused up front (it would hang on
    // the port the abandoned call holds), naming the port.
    let busy = region.busy_ports();
    assert_eq!(busy.len(), 1);
    let err = watchdog("a run on a region with an abandoned call", 30, move || {
        cpu::launch_with_region(&region, &one_thread(4), &d, |client, _| {
            RelClient::new(client).add(1, 2);
        })
        .unwrap_err()
    });
    assert_eq!(err.thread, usize::MAX);
    assert_has(
        &err.message,
        &[
            "the region is not at rest",
            &format!("port {}", busy[0].index),
            "an earlier run abandoned a call on it",
        ],
    );
}

/// Two runs at once on one dispatcher: each report counts its own calls
/// (they once counted the other run's too).
#[test]
fn concurrent_runs_on_one_dispatcher_count_their_own_calls() {
    let (d, _) = dispatcher();
    let launch = |threads| Launch {
        threads,
        server_threads: 1,
        port_count: 4,
        lane_size: 1,
    };
    let (da, db) = (d.clone(), d.clone());
    let a = std::thread::spawn(move || {
        cpu::launch(&launch(1), &da, |client, _| {
            let rel = RelClient::new(client);
            for i in 0..2000 {
                assert_eq!(rel.add(i, 1), i + 1);
            }
        })
        .unwrap()
    });
    let b = std::thread::spawn(move || {
        cpu::launch(&launch(2), &db, |client, _| {
            let rel = RelClient::new(client);
            for i in 0..1500 {
                assert_eq!(rel.add(i, 2), i + 2);
            }
        })
        .unwrap()
    });
    let (ra, rb) = (a.join().unwrap(), b.join().unwrap());
    assert_eq!((ra.calls, rb.calls), (2000, 3000));
    assert_eq!(d.calls(), 5000);
}

/// Per-method metrics: calls, lanes, lanes by status, bytes each way and a
/// latency histogram per method (of a sample of the calls), the failed
/// calls counted where they failed.
#[test]
fn metrics_count_each_method_separately() {
    let (d, _) = dispatcher();
    let d2 = d.clone();
    watchdog("metrics", 60, move || {
        cpu::launch(&one_thread(2), &d2, |client, _| {
            let rel = RelClient::new(client);
            for i in 0..3 {
                assert_eq!(rel.add(i, 1), i + 1);
            }
            assert_eq!(rel.sum(&[1u8; 100]), 100);
            let mut out = [0u8; 50];
            assert_eq!(rel.fill(1, &mut out), 50);
            assert!(rel.try_boom("x").is_err());
        })
        .unwrap()
    });
    let m = d.metrics();
    let get = |path: &str| {
        m.iter()
            .find(|x| x.path == path)
            .unwrap_or_else(|| panic!("no {path} in {m:?}"))
    };
    let add = get("Rel::add");
    assert_eq!((add.calls, add.lanes, add.errors()), (3, 3, 0));
    assert_eq!(add.by_status, [(Status::Ok, 3)]);
    assert_eq!(add.bytes_in, 3 * (8 + RelRpc::ADD.block_len() as u64));
    assert_eq!(add.bytes_out, 3 * 8);
    // The histogram samples the calls (`metrics::LATENCY_SAMPLE`); each
    // server thread times its first.
    let timed: u64 = m.iter().map(|x| x.latency.iter().sum::<u64>()).sum();
    let calls: u64 = m.iter().map(|x| x.calls).sum();
    assert!((1..=calls).contains(&timed), "{timed} timed of {calls} calls");
    assert!(add.latency.iter().sum::<u64>() <= 3);
    let sum = get("Rel::sum");
    assert_eq!((sum.calls, sum.bytes_in), (1, 8 + RelRpc::SUM.block_len() as u64 + 100));
    let fill = get("Rel::fill");
    assert_eq!(fill.calls, 1);
    assert!(fill.bytes_out >= 8 + 50, "{fill:?}");
    let boom = get("Rel::boom");
    assert_eq!(boom.by_status, [(Status::HandlerPanicked, 1)]);
    assert_eq!(boom.errors(), 1);
    assert_eq!(boom.bytes_out, 0);
    assert_eq!(get("gpu_rpc::noop").calls, 0);
    let json = gpu_rpc::metrics::to_json_line(&m);
    assert!(json.contains("\"method\":\"Rel::boom\""), "{json}");
    assert!(json.contains("\"lanes_by_status\":{\"HandlerPanicked\":1}"), "{json}");
    assert_eq!(json.lines().count(), 1);
    assert!(add.to_string().starts_with("Rel::add"), "{add}");
}

/// A gate one call waits at until another call opens it.
#[gpu_rpc]
pub trait Gate {
    /// Waits until the gate is open (at most 10 s); 1 if it opened.
    fn pass(&self) -> u32;
    /// Opens the gate; returns 7.
    fn open(&self) -> u32;
}

#[derive(Default)]
struct GateHost {
    open: Mutex<bool>,
    cv: std::sync::Condvar,
}

impl Gate for Arc<GateHost> {
    fn pass(&self) -> u32 {
        let g = self.open.lock().unwrap();
        let (g, _) = self.cv.wait_timeout_while(g, Duration::from_secs(10), |o| !*o).unwrap();
        *g as u32
    }
    fn open(&self) -> u32 {
        *self.open.lock().unwrap() = true;
        self.cv.notify_all();
        7
    }
}

/// With the default of two server threads (gpu-run's and the GPU backends'),
/// a call whose handler blocks does not stop the other ports being served:
/// here the blocked call can only end because another port's call ran.
#[test]
fn a_call_blocked_in_its_handler_does_not_stall_the_other_ports() {
    let host = Arc::new(GateHost::default());
    let mut d = Dispatcher::new(ServerConfig::default());
    d.add(GateServer(host)).unwrap();
    let d = Arc::new(d);
    let launch = Launch {
        threads: 2,
        // The GPU backends' and gpu-run's default.
        server_threads: 2,
        port_count: 2,
        lane_size: 1,
    };
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    let t0 = Instant::now();
    watchdog("a blocked call and an opener", 30, move || {
        cpu::launch(&launch, &d, |client, lane| {
            let gate = GateClient::new(client);
            let r = if lane.id == 0 {
                ("pass", gate.pass())
            } else {
                // Let the first call reach its handler and block there.
                std::thread::sleep(Duration::from_millis(50));
                ("open", gate.open())
            };
            g.lock().unwrap().push(r);
        })
        .unwrap()
    });
    let mut got = got.lock().unwrap().clone();
    got.sort();
    assert_eq!(got, [("open", 7), ("pass", 1)]);
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "the gate opened only by its timeout"
    );
}

/// The process's memory, copied like the CPU backend's but never lent: the
/// server keeps a call's direct slices in its own buffers, as a GPU server
/// does for a slice its pinned budget cannot hold.
struct NoLoans;

impl gpu_rpc::device_memory::DeviceMemory for NoLoans {
    fn read(&self, copies: &mut [(u64, &mut [u8])], failed: &mut dyn FnMut(usize, gpu_rpc::device_memory::CopyError)) {
        gpu_rpc::cpu::ProcessMemory.read(copies, failed)
    }
    fn write(&self, copies: &[(u64, &[u8])], failed: &mut dyn FnMut(usize, gpu_rpc::device_memory::CopyError)) {
        gpu_rpc::cpu::ProcessMemory.write(copies, failed)
    }
}

/// Raises a server's stop flag when dropped, so that a failed assertion in
/// a test's device loop does not leave its scope waiting for the server.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// Large direct slices on a server that is lent no memory go through
/// buffers its thread keeps between calls: every byte arrives each way, a
/// kept buffer never shows a host method an earlier call's bytes (an
/// out-buffer is all zeros when the method gets it, and the part it leaves
/// unwritten reaches the device as zeros), and the thread reuses them
/// (the kept bytes stay under `keep_bytes`: checked in the scratch's unit
/// tests).
#[test]
fn large_direct_slices_without_lent_memory_are_exact_across_calls() {
    use gpu_rpc::call::len_word;
    let host = Arc::new(Host::default());
    let mut d = Dispatcher::new(ServerConfig {
        log_errors: false,
        ..ServerConfig::default()
    });
    d.add(RelServer(Arc::clone(&host))).unwrap();
    let region = CpuRegion::new(Layout::new(1, 1).unwrap());
    let dev = raw_device(&region);
    let call = |opcode: u32, word: u64, block: &[u8], addr: u64| direct_call(&dev, opcode, word, block, addr);
    let stop = AtomicBool::new(false);
    let server = region.server().with_memory(&NoLoans);
    std::thread::scope(|s| {
        let (d, stop, server) = (&d, &stop, &server);
        let served = s.spawn(move || d.serve_until(server, 0, 1, stop));
        let _stop = StopOnDrop(stop);
        // Sizes around the kept buffers' smallest and odd lengths, each
        // size twice (the second call of a size reuses what the first left).
        for (round, len) in [(1 << 20) + 3, 100_001, (3 << 20) - 1, (1 << 20) + 3, 65_536, 3 << 20]
            .into_iter()
            .enumerate()
        {
            let seed = round as u8 * 31 + 5;
            // In: the server's sum of the bytes it received.
            let data: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(seed) ^ 0x5a).collect();
            let block = len_word(len as u64, true).to_le_bytes();
            let (st, sum) = call(
                RelRpc::SUM.opcode,
                RelRpc::SUM.frame_word().pack(),
                &block,
                data.as_ptr() as u64,
            );
            assert_eq!(
                (st, sum),
                (Status::Ok, data.iter().map(|&b| b as u64).sum()),
                "sum of {len} bytes"
            );
            // Out, whole: every byte the method wrote.
            let mut out = vec![0xeeu8; len];
            let mut block = len_word(len as u64, true).to_le_bytes().to_vec();
            block.push(seed);
            let word = RelRpc::FILL.frame_word().pack();
            let (st, n) = call(RelRpc::FILL.opcode, word, &block, out.as_mut_ptr() as u64);
            assert_eq!((st, n), (Status::Ok, len as u64));
            assert!(
                out.iter().enumerate().all(|(i, &b)| b == seed.wrapping_add(i as u8)),
                "fill of {len} bytes"
            );
            // Out, half: the method saw zeros only, and the half it left
            // unwritten arrives as zeros (not the last call's pattern).
            let mut out = vec![0xeeu8; len];
            let word = RelRpc::FILL_HALF.frame_word().pack();
            let (st, dirty) = call(RelRpc::FILL_HALF.opcode, word, &block, out.as_mut_ptr() as u64);
            assert_eq!(
                (st, dirty),
                (Status::Ok, 0),
                "fill_half of {len} bytes saw earlier bytes"
            );
            let half = len / 2;
            assert!(out[..half]
                .iter()
                .enumerate()
                .all(|(i, &b)| b == seed.wrapping_add(i as u8)));
            assert!(
                out[half..].iter().all(|&b| b == 0),
                "the unwritten half of {len} bytes is not zeros"
            );
        }
        drop(_stop);
        served.join().unwrap().unwrap();
    });
    assert_eq!(d.errors(), []);
}

/// Memory a server borrows for a call is given back before the call's
/// reply: the device's next call, which another server thread may serve the
/// moment the reply is out, must find it free (a memory that holds one
/// call's worth, as a GPU's pinned budget may, otherwise sends that call
/// through slower buffers). Counted by a memory that lends heap buffers and
/// counts the loans out; the device checks the count as soon as it sees each
/// reply, both directions, several calls.
#[test]
fn lent_memory_is_given_back_before_the_reply() {
    use gpu_rpc::call::len_word;
    use gpu_rpc::device_memory::{CopyError, DeviceMemory, Lent};
    use std::sync::atomic::AtomicI64;

    struct CountedLoans {
        out: AtomicI64,
    }
    impl DeviceMemory for CountedLoans {
        fn read(&self, copies: &mut [(u64, &mut [u8])], failed: &mut dyn FnMut(usize, CopyError)) {
            gpu_rpc::cpu::ProcessMemory.read(copies, failed)
        }
        fn write(&self, copies: &[(u64, &[u8])], failed: &mut dyn FnMut(usize, CopyError)) {
            gpu_rpc::cpu::ProcessMemory.write(copies, failed)
        }
        fn lend(&self, bytes: usize) -> Option<Lent<'_>> {
            let raw = Box::into_raw(vec![0u8; bytes].into_boxed_slice());
            // SAFETY: `raw` came from `Box::into_raw` just above.
            let ptr = std::ptr::NonNull::new(unsafe { (*raw).as_mut_ptr() })?;
            // Relaxed: the count is read by the device thread only after
            // the reply's flip, which the server's release fence orders
            // after the decrement when the loan goes back first.
            self.out.fetch_add(1, Ordering::Relaxed);
            let back = Box::new(move || {
                // SAFETY: the box is rebuilt once, when the loan ends.
                drop(unsafe { Box::from_raw(raw) });
                self.out.fetch_sub(1, Ordering::Relaxed);
            });
            // SAFETY: the `bytes` bytes are the loan's alone until `back`
            // frees them.
            Some(unsafe { Lent::new(ptr, bytes, back) })
        }
    }

    let memory = CountedLoans { out: AtomicI64::new(0) };
    let mut d = Dispatcher::new(ServerConfig {
        log_errors: false,
        ..ServerConfig::default()
    });
    d.add(RelServer(Arc::new(Host::default()))).unwrap();
    let region = CpuRegion::new(Layout::new(1, 1).unwrap());
    let dev = raw_device(&region);
    let stop = AtomicBool::new(false);
    let server = region.server().with_memory(&memory);
    let data = vec![3u8; 100_000];
    let mut out = vec![0u8; 100_000];
    std::thread::scope(|s| {
        let (d, stop, server) = (&d, &stop, &server);
        let served = s.spawn(move || d.serve_until(server, 0, 1, stop));
        let _stop = StopOnDrop(stop);
        for round in 0..20u8 {
            // `sum(&[u8])` and `fill(seed, &mut [u8])` in turn.
            let (desc, len, addr) = if round % 2 == 0 {
                (RelRpc::SUM, data.len(), data.as_ptr() as u64)
            } else {
                (RelRpc::FILL, out.len(), out.as_mut_ptr() as u64)
            };
            let mut block = len_word(len as u64, true).to_le_bytes().to_vec();
            if round % 2 == 1 {
                block.push(round); // `fill`'s seed
            }
            let (st, _) = direct_call(&dev, desc.opcode, desc.frame_word().pack(), &block, addr);
            assert_eq!(st, Status::Ok);
            assert_eq!(
                memory.out.load(Ordering::Relaxed),
                0,
                "a loan was still out when call {round}'s reply came"
            );
        }
        assert!(out.iter().enumerate().all(|(i, &b)| b == 19u8.wrapping_add(i as u8)));
        drop(_stop);
        served.join().unwrap().unwrap();
    });
    assert_eq!(d.errors(), []);
}

/// Play one warp-call of `method` (`Rel::fill(seed, out)` or a method of
/// its signature) on port 0 as a device would: `lanes` lanes, each an
/// out-buffer of `each` bytes by address (`addr(lane)`), then its other
/// arguments encoded (`args(lane)`); each lane's status.
fn direct_fill_of(
    method: &gpu_rpc::call::CallDesc,
    dev: &RawDevice<'_>,
    lanes: u32,
    each: usize,
    addr: impl Fn(u32) -> u64,
    args: impl Fn(u32) -> Vec<u8>,
) -> Vec<Status> {
    use gpu_rpc::call::len_word;
    let word = method.frame_word().pack();
    let frames: Vec<_> = (0..lanes)
        .map(|l| {
            let mut block = len_word(each as u64, true).to_le_bytes().to_vec();
            block.extend(args(l));
            (l, frame(word, &block))
        })
        .collect();
    dev.inject(0, method.opcode, (1 << lanes) - 1, &frames);
    while !dev.owned(0) {
        std::hint::spin_loop();
    }
    for l in 0..lanes {
        let mut b = Buffer::default();
        b.data[0] = addr(l);
        dev.write(0, l, &b);
    }
    dev.flip(0);
    while !dev.owned(0) {
        std::hint::spin_loop();
    }
    (0..lanes).map(|l| dev.status(0, l)).collect()
}

/// `Rel::fill` by [`direct_fill_of`], lane `l` passing `l` as its seed, on
/// port 0 of a fresh one-port region of `lanes` lanes whose server, `d`
/// with `memory`, runs on a thread of its own for the call; each lane's
/// status.
fn served_direct_fill(
    d: &Dispatcher,
    memory: &dyn gpu_rpc::device_memory::DeviceMemory,
    lanes: u32,
    each: usize,
    addr: impl Fn(u32) -> u64,
) -> Vec<Status> {
    served_fill_of(RelRpc::FILL, d, memory, lanes, each, addr, |l| vec![l as u8])
}

/// [`served_direct_fill`] of `method`, lane `l` passing the encoded
/// arguments `args(l)` after the out-buffer's length.
fn served_fill_of(
    method: &gpu_rpc::call::CallDesc,
    d: &Dispatcher,
    memory: &dyn gpu_rpc::device_memory::DeviceMemory,
    lanes: u32,
    each: usize,
    addr: impl Fn(u32) -> u64,
    args: impl Fn(u32) -> Vec<u8>,
) -> Vec<Status> {
    let region = CpuRegion::new(Layout::new(1, lanes).unwrap());
    let dev = raw_device(&region);
    let stop = AtomicBool::new(false);
    let server = region.server().with_memory(memory);
    std::thread::scope(|s| {
        let (stop, server) = (&stop, &server);
        let served = s.spawn(move || d.serve_until(server, 0, 1, stop));
        let _stop = StopOnDrop(stop);
        let statuses = direct_fill_of(method, &dev, lanes, each, addr, args);
        drop(_stop);
        served.join().unwrap().unwrap();
        statuses
    })
}

/// The process's memory, lent and written at once like the CPU
/// backend's, with an early queue that notes, for each copy it is
/// sent, its address, its length and how many `fill` methods had run.
struct Watched {
    host: Arc<Host>,
    sent: Mutex<Vec<(u64, usize, usize)>>,
    fail_finish: bool,
}

/// [`Watched`]'s early queue.
struct Queue<'a>(&'a Watched);

impl EarlyWrites for Queue<'_> {
    unsafe fn send(&mut self, at: u64, bytes: &[u8]) -> Result<(), CopyError> {
        let mut failed = None;
        cpu::ProcessMemory.write(&[(at, bytes)], &mut |_, e| failed = Some(e));
        if let Some(e) = failed {
            return Err(e);
        }
        // Relaxed: a count of the `fill` methods that have run, noted as
        // it stands (the test compares it with the lanes it expects early).
        let fills = self.0.host.fills.load(Ordering::Relaxed);
        self.0.sent.lock().unwrap().push((at, bytes.len(), fills));
        Ok(())
    }
    fn finish(&mut self) -> Result<(), CopyError> {
        match self.0.fail_finish {
            true => Err(CopyError {
                what: "the test's queue",
                code: 7,
            }),
            false => Ok(()),
        }
    }
}

impl DeviceMemory for Watched {
    fn read(&self, copies: &mut [(u64, &mut [u8])], failed: &mut dyn FnMut(usize, CopyError)) {
        cpu::ProcessMemory.read(copies, failed)
    }
    fn write(&self, copies: &[(u64, &[u8])], failed: &mut dyn FnMut(usize, CopyError)) {
        cpu::ProcessMemory.write(copies, failed)
    }
    fn lend(&self, bytes: usize) -> Option<Lent<'_>> {
        cpu::ProcessMemory.lend(bytes)
    }
    fn early_writes(&self) -> Option<Box<dyn EarlyWrites + '_>> {
        Some(Box::new(Queue(self)))
    }
}

/// The process's memory with the CPU backend's early writes, lending heap
/// buffers that its function makes for the size asked: the bytes, and the
/// sorted byte ranges of them that hold zeros, lent as zeros
/// ([`Lent::with_zeros`]). A buffer is freed when its loan ends.
struct HeapLoans(MakeLoan);

/// [`HeapLoans`]' function: a loan's bytes and its ranges of zeros.
type MakeLoan = fn(usize) -> (Vec<u8>, Vec<std::ops::Range<usize>>);

impl DeviceMemory for HeapLoans {
    fn read(&self, copies: &mut [(u64, &mut [u8])], failed: &mut dyn FnMut(usize, CopyError)) {
        cpu::ProcessMemory.read(copies, failed)
    }
    fn write(&self, copies: &[(u64, &[u8])], failed: &mut dyn FnMut(usize, CopyError)) {
        cpu::ProcessMemory.write(copies, failed)
    }
    fn lend(&self, bytes: usize) -> Option<Lent<'_>> {
        let (v, zeros) = (self.0)(bytes);
        assert_eq!(v.len(), bytes);
        assert!(zeros.iter().all(|z| v[z.clone()].iter().all(|&b| b == 0)));
        let raw = Box::into_raw(v.into_boxed_slice());
        // SAFETY: `raw` came from `Box::into_raw` just above.
        let ptr = std::ptr::NonNull::new(unsafe { (*raw).as_mut_ptr() })?;
        // SAFETY: the box is rebuilt once, when the loan ends.
        let back = Box::new(move |_: &[std::ops::Range<usize>]| drop(unsafe { Box::from_raw(raw) }));
        // SAFETY: the bytes are the loan's alone until `back` frees them,
        // and `zeros` hold zeros (asserted above).
        Some(unsafe { Lent::with_zeros(ptr, bytes, zeros, back) })
    }
    fn early_writes(&self) -> Option<Box<dyn EarlyWrites + '_>> {
        cpu::ProcessMemory.early_writes()
    }
}

/// Out-buffers go to the device while the call's later lanes still run:
/// side-by-side out-buffers of lanes whose methods are done are sent in one
/// copy once they hold 256 KiB (`EARLY_BYTES`), before the next lane's
/// method runs; a lane whose early copy is refused (an address the process
/// has not mapped) fails alone, naming its out-buffer, and its neighbours
/// are stored with the rest after the call; a queue whose copies fail as a
/// whole fails every lane it carried. Eight lanes each fill 64 KiB of one
/// buffer, as a warp passing slices of one device array does.
#[test]
fn out_buffers_go_to_the_device_while_later_lanes_run() {
    const LANES: u32 = 8;
    const EACH: usize = 64 << 10;
    for (bad_lane, fail_finish) in [(None, false), (Some(5), false), (None, true)] {
        let host = Arc::new(Host::default());
        let memory = Watched {
            host: Arc::clone(&host),
            sent: Mutex::new(Vec::new()),
            fail_finish,
        };
        let mut d = Dispatcher::new(ServerConfig {
            log_errors: false,
            ..ServerConfig::default()
        });
        d.add(RelServer(Arc::clone(&host))).unwrap();
        let mut out = vec![0u8; LANES as usize * EACH];
        let base = out.as_mut_ptr() as u64;
        let addr = |l: u32| match bad_lane {
            Some(b) if b == l => 64, // page 0: never mapped
            _ => base + (l as usize * EACH) as u64,
        };
        let statuses = served_direct_fill(&d, &memory, LANES, EACH, addr);
        let sent = memory.sent.into_inner().unwrap();
        let errors = d.errors();
        let what = format!("bad lane {bad_lane:?}, failing queue {fail_finish}");
        match (bad_lane, fail_finish) {
            (None, false) => {
                // Lanes 0..4 in one copy after 4 methods, 4..8 after 8.
                assert_eq!(sent, [(addr(0), 4 * EACH, 4), (addr(4), 4 * EACH, 8)], "{what}");
                assert_eq!(statuses, [Status::Ok; LANES as usize], "{what}");
                assert_eq!(errors, [], "{what}");
            }
            (Some(bad), false) => {
                // Lanes 0..4 early; lane 5 refused by the queue, and then by
                // the copy after the call; 4, 6, 7 after the call.
                assert_eq!(sent, [(addr(0), 4 * EACH, 4)], "{what}");
                for l in 0..LANES {
                    let want = if l == bad { Status::InvalidArgument } else { Status::Ok };
                    assert_eq!(statuses[l as usize], want, "{what}: lane {l}");
                }
                assert_eq!(errors.len(), 1, "{what}: {errors:?}");
                assert_eq!((errors[0].port, errors[0].lane), (0, Some(bad)), "{what}");
                assert_has(
                    &errors[0].to_string(),
                    &["out-buffer 0", "direct copy of 65536 bytes to 0x40", "Rel::fill"],
                );
            }
            (_, true) => {
                // Every lane was sent early, and the queue failed as a whole.
                assert_eq!(sent.len(), 2, "{what}");
                assert_eq!(statuses, [Status::InvalidArgument; LANES as usize], "{what}");
                assert_eq!(errors.len(), LANES as usize, "{what}: {errors:?}");
                assert_has(
                    &errors[0].to_string(),
                    &["out-buffer 0", "the test's queue failed (error 7)"],
                );
            }
        }
        // Every byte of every lane that was answered `Ok` is the host's.
        for l in (0..LANES).filter(|&l| statuses[l as usize] == Status::Ok) {
            let lane = &out[l as usize * EACH..][..EACH];
            assert!(
                lane.iter()
                    .enumerate()
                    .all(|(i, &b)| b == (l as u8).wrapping_add(i as u8)),
                "{what}: lane {l}"
            );
        }
    }
}

/// A `#[gpu_rpc(parallel)]` call's out-buffers go to the device while its
/// later lanes run, as the plain arm's do: its lanes run in waves
/// (`ServerCall::parallel_wave`, here 8 lanes of 64 KiB on 4 threads), and
/// a wave's out-buffers are sent once stored, before the next wave's
/// methods run; every byte arrives, once.
#[test]
fn parallel_waves_send_out_buffers_while_later_waves_run() {
    const LANES: u32 = 32;
    const EACH: usize = 64 << 10;
    let host = Arc::new(Host::default());
    let memory = Watched {
        host: Arc::clone(&host),
        sent: Mutex::new(Vec::new()),
        fail_finish: false,
    };
    let mut d = Dispatcher::new(ServerConfig {
        log_errors: false,
        lane_threads: 4,
        parallel_min_bytes: 256 << 10,
        ..ServerConfig::default()
    });
    d.add(RelServer(Arc::clone(&host))).unwrap();
    let mut out = vec![0u8; LANES as usize * EACH];
    let base = out.as_mut_ptr() as u64;
    let statuses = served_fill_of(
        RelRpc::FILL_PARALLEL,
        &d,
        &memory,
        LANES,
        EACH,
        |l| base + (l as usize * EACH) as u64,
        |l| vec![l as u8, 1, 0],
    );
    assert_eq!(statuses, [Status::Ok; LANES as usize]);
    assert_eq!(d.errors(), []);
    // Sent in order, each byte once, each copy 256 KiB (two a wave).
    let sent = memory.sent.into_inner().unwrap();
    let at: Vec<_> = sent.iter().map(|&(at, len, _)| (at - base, len)).collect();
    let want: Vec<_> = (0..8u64).map(|k| (k * (256 << 10), 256 << 10)).collect();
    assert_eq!(at, want);
    // Each wave's copies went before the next wave's methods ran: after 8,
    // 16, 24 and 32 methods.
    let fills: Vec<_> = sent.iter().map(|&(_, _, fills)| fills).collect();
    assert_eq!(fills, [8, 8, 16, 16, 24, 24, 32, 32]);
    for l in 0..LANES {
        assert_half_filled(&out, EACH, l, "");
    }
}

/// Lane `l`'s `each` bytes of `out` are what `Rel::fill_half` with seed `l`
/// leaves: `l + i` in the first half, then zeros (never what the memory
/// held before).
fn assert_half_filled(out: &[u8], each: usize, l: u32, what: &str) {
    let lane = &out[l as usize * each..][..each];
    let bad = lane.iter().enumerate().position(|(i, &b)| {
        b != if i < each / 2 {
            (l as u8).wrapping_add(i as u8)
        } else {
            0
        }
    });
    assert_eq!(bad, None, "{what}: lane {l}");
}

/// A `#[gpu_rpc(parallel)]` method's lanes run on several host threads when
/// the call moves at least `parallel_min_bytes` (here 256 KiB; one thread
/// per that many bytes, up to `lane_threads`), on the serving thread alone
/// below it or with `lane_threads: 1`; every lane's bytes arrive whole
/// wherever its out-buffer was kept (memory the backend lends, zeroed or
/// holding earlier bytes, or the server's own buffers when it lends none),
/// and the half its method leaves unwritten arrives as zeros, whichever
/// thread zeroed it; a lane whose method panics, whose argument
/// is invalid or panics while decoded, or whose out-buffer cannot be
/// stored, fails alone, and the errors are logged in lane order.
#[test]
fn parallel_lanes_run_on_several_threads() {
    use gpu_rpc::cpu::ProcessMemory;

    // The process's memory, lent as an earlier call's leftovers: every byte
    // 0xab but two spans that are zeros and lent as zeros, whose ends fall
    // in the halves the lanes' methods leave unwritten (for 16 lanes side
    // by side: lanes 5.75, 8.625 and 10.875); the server zeroes the rest of
    // each out-buffer before its method gets it.
    let dirty = HeapLoans(|bytes| {
        let zeros = vec![0..bytes / 128 * 46, bytes / 128 * 69..bytes / 128 * 87];
        let mut v = vec![0xabu8; bytes];
        for z in &zeros {
            v[z.clone()].fill(0);
        }
        (v, zeros)
    });

    const LANES: u32 = 16;
    const PANICS: u32 = 3;
    const NOT_BOOL: u32 = 5;
    const DECODE_PANICS: u32 = 7;
    const UNMAPPED: u32 = 9;
    // (the memory: lent zeroed, lent dirty or not lent; bytes per lane,
    // lane_threads, the most threads the lanes run on)
    for (lend, each, lane_threads, want_threads) in [
        ("zeroed", 64 << 10, 4, 4),
        ("dirty", 64 << 10, 4, 4),
        ("none", 64 << 10, 4, 4),
        ("zeroed", 64 << 10, 1, 1),
        ("dirty", 64 << 10, 1, 1),
        // 16 × 32 KiB, 512 KiB: two threads of 256 KiB each.
        ("dirty", 32 << 10, 4, 2),
        // 16 × 4 KiB is under 256 KiB: in lane order.
        ("dirty", 4 << 10, 4, 1),
    ] {
        for faults in [false, true] {
            let what = format!("lent {lend}, {each} bytes a lane, lane_threads {lane_threads}, faults {faults}");
            let host = Arc::new(Host::default());
            // Relaxed: read by the server's threads, which start later.
            host.rendezvous.store(want_threads > 1, Ordering::Relaxed);
            let mut d = Dispatcher::new(ServerConfig {
                log_errors: false,
                lane_threads,
                parallel_min_bytes: 256 << 10,
                ..ServerConfig::default()
            });
            d.add(RelServer(Arc::clone(&host))).unwrap();
            let mut out = vec![0u8; LANES as usize * each];
            let base = out.as_mut_ptr() as u64;
            let addr = |l: u32| match l {
                UNMAPPED if faults => 64, // page 0: never mapped
                _ => base + (l as usize * each) as u64,
            };
            let args = |l: u32| match l {
                PANICS if faults => vec![0xee, 1, 0],
                NOT_BOOL if faults => vec![l as u8, 2, 0],
                DECODE_PANICS if faults => vec![l as u8, 1, 0xdd],
                _ => vec![l as u8, 1, 0],
            };
            // The process's memory, lent as the CPU backend lends it, lent
            // dirty, or not lent.
            let memory: &dyn DeviceMemory = match lend {
                "zeroed" => &ProcessMemory,
                "dirty" => &dirty,
                _ => &NoLoans,
            };
            let statuses = served_fill_of(RelRpc::FILL_PARALLEL, &d, memory, LANES, each, addr, args);
            // (Which helper takes which run of lanes is the helpers' race,
            // and the serving thread takes back runs no helper started;
            // the rendezvous makes at least two lanes run at once. Waves
            // may run on different helpers: what is bounded is how many
            // lanes run at once.)
            let threads = host.threads.lock().unwrap().len();
            let most = host.most.load(Ordering::Relaxed);
            match want_threads {
                1 => assert_eq!((threads, most), (1, 1), "{what}"),
                n => assert!((2..=n).contains(&most), "{what}: {most} lanes at once"),
            }
            let errors = d.errors();
            for l in 0..LANES {
                let want = match l {
                    PANICS | DECODE_PANICS if faults => Status::HandlerPanicked,
                    NOT_BOOL | UNMAPPED if faults => Status::InvalidArgument,
                    _ => Status::Ok,
                };
                assert_eq!(statuses[l as usize], want, "{what}: lane {l}");
                if want != Status::Ok {
                    let e = errors.iter().find(|e| e.lane == Some(l));
                    let e = e.unwrap_or_else(|| panic!("{what}: no error for lane {l}: {errors:?}"));
                    assert_eq!((e.port, e.status), (0, want), "{what}");
                    assert_has(&e.to_string(), &["Rel::fill_parallel"]);
                }
            }
            let lanes: Vec<_> = errors.iter().map(|e| e.lane).collect();
            let want: &[u32] = if faults {
                &[PANICS, NOT_BOOL, DECODE_PANICS, UNMAPPED]
            } else {
                &[]
            };
            assert_eq!(
                lanes,
                want.iter().map(|&l| Some(l)).collect::<Vec<_>>(),
                "{what}: {errors:?}"
            );
            // Every byte of every lane answered `Ok` is the host's: the half
            // its method wrote, then zeros (what the lent memory held
            // before is never seen).
            for l in (0..LANES).filter(|&l| statuses[l as usize] == Status::Ok) {
                assert_half_filled(&out, each, l, &what);
            }
        }
    }
}

/// A service of one method, `Rel::fill`'s opcode, whose dispatch is written
/// by hand: the closure.
struct FillByHand<F>(F);

impl<F: Fn(&mut gpu_rpc::server::ServerCall<'_>) + Send + Sync> gpu_rpc::server::Service for FillByHand<F> {
    fn name(&self) -> &'static str {
        "FillByHand"
    }
    fn methods(&self) -> &'static [gpu_rpc::server::MethodInfo] {
        static METHODS: [gpu_rpc::server::MethodInfo; 1] = [gpu_rpc::server::MethodInfo {
            desc: RelRpc::FILL,
            path: "FillByHand::fill",
            module: "tests",
        }];
        &METHODS
    }
    fn dispatch(&self, _: usize, call: &mut gpu_rpc::server::ServerCall<'_>) {
        (self.0)(call)
    }
}

/// `Rel::fill` served by `service` alone with `memory` ([`served_direct_fill`]:
/// lane `l` of `lanes` passes the `each` bytes at `l * each` of one buffer
/// as its out-buffer): that buffer, once every lane was answered `Ok` and
/// the server logged no error.
fn filled_by_hand(
    service: impl gpu_rpc::server::Service + 'static,
    memory: &dyn DeviceMemory,
    lanes: u32,
    each: usize,
) -> Vec<u8> {
    let mut d = Dispatcher::new(ServerConfig {
        log_errors: false,
        ..ServerConfig::default()
    });
    d.add(service).unwrap();
    let mut out = vec![0u8; lanes as usize * each];
    let base = out.as_mut_ptr() as u64;
    let statuses = served_direct_fill(&d, memory, lanes, each, |l| base + (l as usize * each) as u64);
    assert_eq!(d.errors(), []);
    assert_eq!(statuses, vec![Status::Ok; lanes as usize]);
    out
}

/// A hand-written dispatch that hands a lane on (`ServerCall::lane_stored`)
/// while the lane's out-buffer is still alive, and writes it after: the
/// early copy leaves that out-buffer, and the device gets the bytes written
/// last, after the call (no copy reads memory a live `&mut` writes).
#[test]
fn an_out_buffer_still_alive_is_not_sent_early() {
    use gpu_rpc::server::ServerCall;

    const LANES: u32 = 4;
    const EACH: usize = 64 << 10;
    // `fill` by hand: stores each lane, hands it on, then writes it again.
    let late = FillByHand(|call: &mut ServerCall<'_>| {
        {
            let call = &*call;
            let mut alive = Vec::new();
            for lane in call.lanes() {
                let mut b = call.out_buffer::<u8>(lane, 0).unwrap();
                b.fill(lane as u8 + 1);
                call.set_out(lane, 0, &b);
                call.lane_stored(lane);
                b.fill(lane as u8 + 101);
                alive.push(b);
            }
        }
        call.end_parallel(Vec::new());
    });

    let memory = Watched {
        host: Arc::new(Host::default()),
        sent: Mutex::new(Vec::new()),
        fail_finish: false,
    };
    let out = filled_by_hand(late, &memory, LANES, EACH);
    assert_eq!(*memory.sent.lock().unwrap(), [], "sent early while alive");
    for l in 0..LANES as usize {
        let lane = &out[l * EACH..][..EACH];
        assert!(lane.iter().all(|&b| b == l as u8 + 101), "lane {l}: {:?}", &lane[..4]);
    }
}

/// A hand-written dispatch that stores an out-buffer more than once gets
/// the last store to the device, whether the earlier one went early or
/// not, and an out-buffer handed out after a store comes zeroed, even in
/// memory lent as zeros (the store's bytes are no longer the lender's
/// zeros). Six lanes of 64 KiB: lanes 0..4 go early (256 KiB), 4 and 5
/// after the call.
#[test]
fn the_last_store_of_an_out_buffer_is_what_the_device_gets() {
    use gpu_rpc::server::ServerCall;

    // The process's memory, lending zeroed heap memory that it says is
    // zeros.
    let zeroed = HeapLoans(|bytes| (vec![0u8; bytes], std::iter::once(0..bytes).collect()));

    const LANES: u32 = 6;
    const EACH: usize = 64 << 10;
    // `fill` by hand, noting what the out-buffers it was handed held.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let noted = Arc::clone(&seen);
    let hand = FillByHand(move |call: &mut ServerCall<'_>| {
        call.run(|call, lane| {
            // A store of the wrong length (kept by the call), then one of
            // the right length (in the loan): the second wins.
            call.set_out::<u8>(lane, 0, &[9u8; 10]);
            call.set_out::<u8>(lane, 0, &vec![lane as u8 + 1; EACH]);
            Ok(())
        });
        let zeros = |b: &[u8]| b.iter().all(|&x| x == 0);
        // Lane 0 went early: a later store goes after it.
        call.set_out::<u8>(0, 0, &vec![0xee; EACH]);
        // Lane 1 went early: its out-buffer comes zeroed, elsewhere.
        let mut b = call.out_buffer::<u8>(1, 0).unwrap();
        noted.lock().unwrap().push((1, zeros(&b)));
        b.fill(0xdd);
        call.set_out::<u8>(1, 0, &b);
        drop(b);
        // Lane 5 did not: its place comes zeroed although the loan said
        // zeros there and the store wrote sixes.
        let mut b = call.out_buffer::<u8>(5, 0).unwrap();
        noted.lock().unwrap().push((5, zeros(&b)));
        b.fill(0xcc);
        call.set_out::<u8>(5, 0, &b);
    });

    let out = filled_by_hand(hand, &zeroed, LANES, EACH);
    assert_eq!(*seen.lock().unwrap(), [(1, true), (5, true)], "handed out zeroed");
    for (l, want) in [0xee, 0xdd, 3, 4, 5, 0xcc].into_iter().enumerate() {
        let lane = &out[l * EACH..][..EACH];
        assert!(
            lane.iter().all(|&b| b == want),
            "lane {l}: {:?}, want {want}",
            &lane[..4]
        );
    }
}
