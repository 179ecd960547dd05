//! Property test of the server's decode/dispatch against arbitrary shared
//! memory: the test plays a misbehaving device that writes any header (opcode,
//! lane mask), frame words, argument blocks, stream lengths and packet
//! contents into a real region, and follows the packet counts its frame
//! announces, like the client stubs do (streams inline in packet 0 when the
//! frame word says so, whether or not they fit). For every case the server
//!
//! * never panics and never hangs (both sides wait with deadlines);
//! * never makes an allocation larger than `max_stream_bytes` (a counting
//!   global allocator watches the server thread);
//! * answers every lane with either an error status that names what was
//!   wrong (and records it) or the correct result of a valid call, checked
//!   against an oracle of the test service;
//! * leaves the port idle (handed back, unlocked).
//!
//! Deterministic: a fixed-seed ChaCha RNG; 256 cases unless `PROPTEST_CASES`
//! says otherwise.
//!
//! One file on purpose: every file under `tests/` links a test binary of its
//! own, and the project keeps those few (CI builds them on two cores).

use std::alloc::{GlobalAlloc, Layout as AllocLayout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use rpc_runtime::call::{self, CallDesc, FrameWord, FRAME_VERSION, NOOP_DESC};
use rpc_runtime::cpu::{CpuRegion, RawDevice};
use rpc_runtime::protocol::{opcodes, Buffer, Layout, BUFFER_BYTES};
use rpc_runtime::server::{Dispatcher, LaneError, MethodInfo, ServerCall, ServerConfig, ServerError, Service};
use rpc_runtime::Status;

// ---------------------------------------------------------------------------
// Allocation tracking, per thread (only the server thread turns it on).

struct Counting;

thread_local! {
    static TRACK: Cell<bool> = const { Cell::new(false) };
    static MAX_ONE: Cell<usize> = const { Cell::new(0) };
    static TOTAL: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    // `try_with`: the allocator also runs while thread-locals are torn down.
    let _ = TRACK.try_with(|t| {
        if t.get() {
            let _ = MAX_ONE.try_with(|m| m.set(m.get().max(size)));
            let _ = TOTAL.try_with(|m| m.set(m.get() + size));
        }
    });
}

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged; `note` only touches const-initialized `Cell`s (no allocation,
// no destructor registration).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: AllocLayout) -> *mut u8 {
        note(layout.size());
        // SAFETY: forwarded as is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: AllocLayout) -> *mut u8 {
        note(layout.size());
        // SAFETY: forwarded as is.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: AllocLayout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: forwarded as is.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: AllocLayout) {
        // SAFETY: forwarded as is.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Run `f` with allocation tracking on this thread: returns its result, the
/// largest single allocation and the bytes allocated in total.
fn tracked<T>(f: impl FnOnce() -> T) -> (T, usize, usize) {
    MAX_ONE.with(|m| m.set(0));
    TOTAL.with(|m| m.set(0));
    TRACK.with(|t| t.set(true));
    let r = f();
    TRACK.with(|t| t.set(false));
    (r, MAX_ONE.with(Cell::get), TOTAL.with(Cell::get))
}

// ---------------------------------------------------------------------------
// The test service: hand-written, one method per decode path.

const LIMIT: u64 = 2048;
const BASE: u32 = opcodes::FIRST_USER + 0x4200;

const fn desc(
    method: &'static str,
    k: u32,
    reply: bool,
    in_streams: u8,
    outs: &'static [u32],
    arg_bytes: u32,
    ret_bytes: u32,
) -> CallDesc {
    CallDesc {
        service: "Fuzz",
        method,
        opcode: BASE + k,
        signature: 0x5eed_0000 + k * 0x101,
        reply,
        in_streams,
        out_elem_sizes: outs,
        arg_bytes,
        ret_bytes,
    }
}

static ECHO: CallDesc = desc("echo", 0, true, 0, &[], 8, 8);
static TEXT: CallDesc = desc("text", 1, true, 1, &[], 0, 4);
static FILL: CallDesc = desc("fill", 2, true, 1, &[1], 1, 8);
static FLAGS: CallDesc = desc("flags", 3, true, 0, &[], 5, 4);
static LOG: CallDesc = desc("log", 4, false, 1, &[], 8, 0);
static BIG: CallDesc = desc("big", 5, true, 0, &[], 100, 80);
static WIDE: CallDesc = desc("wide", 6, true, 2, &[12], 0, 8);

static METHODS: [MethodInfo; 7] = [
    MethodInfo {
        desc: &ECHO,
        path: "Fuzz::echo",
        module: module_path!(),
    },
    MethodInfo {
        desc: &TEXT,
        path: "Fuzz::text",
        module: module_path!(),
    },
    MethodInfo {
        desc: &FILL,
        path: "Fuzz::fill",
        module: module_path!(),
    },
    MethodInfo {
        desc: &FLAGS,
        path: "Fuzz::flags",
        module: module_path!(),
    },
    MethodInfo {
        desc: &LOG,
        path: "Fuzz::log",
        module: module_path!(),
    },
    MethodInfo {
        desc: &BIG,
        path: "Fuzz::big",
        module: module_path!(),
    },
    MethodInfo {
        desc: &WIDE,
        path: "Fuzz::wide",
        module: module_path!(),
    },
];

const ECHO_PANICS_ON: u64 = 0xdead;

struct FuzzService;

impl Service for FuzzService {
    fn name(&self) -> &'static str {
        "Fuzz"
    }
    fn methods(&self) -> &'static [MethodInfo] {
        &METHODS
    }
    fn dispatch(&self, index: usize, call: &mut ServerCall<'_>) {
        match index {
            0 => call.run(|c, lane| {
                let x = c.arg_at::<u64>(lane, 0, 0)?;
                if x == ECHO_PANICS_ON {
                    panic!("echo refuses {x:#x}");
                }
                c.set_return(lane, &(x ^ 0x5555));
                Ok(())
            }),
            1 => call.run(|c, lane| {
                let n = c.str(lane, 0, 0)?.chars().count() as u32;
                c.set_return(lane, &n);
                Ok(())
            }),
            2 => call.run(|c, lane| {
                let seed = c.arg_at::<u8>(lane, 0, 1)?;
                let sum: u64 = c.bytes(lane, 0, 0)?.iter().map(|&b| b as u64).sum();
                let mut out = c.out_buffer::<u8>(lane, 0)?;
                for (i, o) in out.iter_mut().enumerate() {
                    *o = seed.wrapping_add(i as u8);
                }
                c.set_out(lane, 0, &out);
                c.set_return(lane, &sum);
                Ok(())
            }),
            3 => call.run(|c, lane| {
                let b = c.arg_at::<bool>(lane, 0, 0)?;
                let ch = c.arg_at::<char>(lane, 1, 1)?;
                c.set_return(lane, &(ch as u32 + b as u32));
                Ok(())
            }),
            4 => call.run(|c, lane| {
                c.arg_at::<u64>(lane, 0, 0)?;
                c.bytes(lane, 0, 1)?;
                Ok(())
            }),
            5 => call.run(|c, lane| {
                let a = c.arg_at::<[u8; 100]>(lane, 0, 0)?;
                let r: [u64; 10] = core::array::from_fn(|i| a[i * 10..i * 10 + 10].iter().map(|&b| b as u64).sum());
                c.set_return(lane, &r);
                Ok(())
            }),
            6 => call.run(|c, lane| {
                let a = c.bytes(lane, 0, 0)?.len() as u32;
                let b = c.bytes(lane, 1, 1)?.len() as u32;
                let mut out = c.out_buffer::<[u32; 3]>(lane, 0)?;
                for (i, o) in out.iter_mut().enumerate() {
                    *o = [i as u32, a, b];
                }
                c.set_out(lane, 0, &out);
                c.set_return(lane, &(a as u64 + b as u64));
                Ok(())
            }),
            _ => {
                let lanes: Vec<u32> = call.lanes().collect();
                for lane in lanes {
                    call.fail(
                        lane,
                        LaneError {
                            status: Status::UnknownOpcode,
                            detail: 0,
                            message: "no such method".into(),
                        },
                    );
                }
            }
        }
    }
}

fn dispatcher() -> Dispatcher {
    let mut d = Dispatcher::new(ServerConfig {
        max_stream_bytes: LIMIT,
        log_errors: false,
        keep_errors: 16,
        ..ServerConfig::default()
    });
    d.add_arc(Arc::new(FuzzService)).unwrap();
    d
}

// ---------------------------------------------------------------------------
// The misbehaving device: raw access to the region.

/// The shared raw device, plus the flag that says the server has returned
/// (so a wait for a packet that can no longer come fails instead of hanging).
struct Device<'r> {
    raw: RawDevice<'r>,
    /// Set once the server has returned: no packet will come any more.
    server_done: &'r AtomicBool,
}

impl<'r> std::ops::Deref for Device<'r> {
    type Target = RawDevice<'r>;
    fn deref(&self) -> &RawDevice<'r> {
        &self.raw
    }
}

impl<'r> Device<'r> {
    fn new(region: &'r CpuRegion, server_done: &'r AtomicBool) -> Self {
        Device {
            // SAFETY: the test plays the only client of this region; the
            // server validates what it reads.
            raw: unsafe { RawDevice::new(region) },
            server_done,
        }
    }

    /// Wait (with a deadline) until the server hands the port back.
    fn wait_owned(&self, port: u32, what: &str) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut spins = 0u32;
        while !self.owned(port) {
            spins += 1;
            if spins.is_multiple_of(256) {
                // Acquire: pairs with the server thread's release store, so
                // its last flip is visible to the check below.
                if self.server_done.load(Ordering::Acquire) && !self.owned(port) {
                    return Err(format!(
                        "the server returned; the device still expected a packet ({what})"
                    ));
                }
                if Instant::now() > deadline {
                    return Err(format!("device waited 20 s for the server ({what})"));
                }
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        // `owned` fenced (acquire): the server's packet writes are visible.
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Cases.

#[derive(Clone, Debug)]
struct LaneInput {
    /// Lengths / counts of the argument block's first 14 words.
    lens: [u64; 14],
    /// Argument bytes (after the lengths).
    args: Vec<u8>,
}

#[derive(Clone, Debug)]
struct Case {
    lane_size: u32,
    opcode_sel: u8,
    random_opcode: u32,
    mask_sel: u8,
    mask_bits: u64,
    frame_sel: u8,
    frame_bits: u64,
    flip_bit: u8,
    other_method: u8,
    disagree: Option<(u8, u64)>,
    lanes: Vec<LaneInput>,
    echo_special: bool,
    flag_byte: u8,
    flag_char: u32,
    ascii: bool,
    seed: u64,
}

fn len_strategy() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0u64..=LIMIT,
        1 => Just(0u64),
        1 => LIMIT + 1..=4 * LIMIT,
        // "By address" (the direct path), which this server, without device
        // memory, refuses.
        1 => (0u64..=2 * LIMIT).prop_map(|l| l | call::DIRECT),
    ]
}

fn lane_strategy() -> impl Strategy<Value = LaneInput> {
    (
        prop::array::uniform14(len_strategy()),
        prop::collection::vec(any::<u8>(), 0..=160),
    )
        .prop_map(|(lens, args)| LaneInput { lens, args })
}

fn case_strategy() -> impl Strategy<Value = Case> {
    (
        (1u32..=4, 0u8..9, any::<u32>(), 0u8..8, any::<u64>()),
        (0u8..18, any::<u64>(), 0u8..64, 0u8..7),
        prop::option::weighted(0.1, (0u8..4, 1u64..)),
        prop::collection::vec(lane_strategy(), 4),
        (
            any::<bool>(),
            prop_oneof![0u8..=1, any::<u8>()],
            prop_oneof![Just('a' as u32), Just('🦀' as u32), any::<u32>()],
            any::<bool>(),
            any::<u64>(),
        ),
    )
        .prop_map(
            |(
                (lane_size, opcode_sel, random_opcode, mask_sel, mask_bits),
                (frame_sel, frame_bits, flip_bit, other_method),
                disagree,
                lanes,
                (echo_special, flag_byte, flag_char, ascii, seed),
            )| Case {
                lane_size,
                opcode_sel,
                random_opcode,
                mask_sel,
                mask_bits,
                frame_sel,
                frame_bits,
                flip_bit,
                other_method,
                disagree,
                lanes,
                echo_special,
                flag_byte,
                flag_char,
                ascii,
                seed,
            },
        )
}

fn served_desc(opcode: u32) -> Option<&'static CallDesc> {
    if opcode == opcodes::NOOP {
        return Some(&NOOP_DESC);
    }
    METHODS.iter().find(|m| m.desc.opcode == opcode).map(|m| m.desc)
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Byte `k` of lane `lane`'s stream `i`.
fn stream_byte(case: &Case, lane: u32, i: usize, k: u64) -> u8 {
    let h = splitmix(case.seed ^ (lane as u64) << 56 ^ (i as u64) << 48 ^ k);
    if case.ascii {
        b'a' + (h % 26) as u8
    } else {
        h as u8
    }
}

/// What the case's device writes, derived from the case.
struct Plan {
    opcode: u32,
    raw_mask: u64,
    lanes: u64,
    words: Vec<u64>,
    blocks: Vec<Vec<u8>>,
}

fn plan(case: &Case) -> Plan {
    let layout = Layout::new(1, case.lane_size).unwrap();
    let full = layout.full_lane_mask();
    let all: [&CallDesc; 8] = [&ECHO, &TEXT, &FILL, &FLAGS, &LOG, &BIG, &WIDE, &NOOP_DESC];
    let (opcode, base_desc) = match case.opcode_sel {
        k @ 0..=7 => (all[k as usize].opcode, all[k as usize]),
        _ => (case.random_opcode, &ECHO),
    };
    let raw_mask = match case.mask_sel {
        0..=4 => full,
        5 => (case.mask_bits & full).max(1),
        6 => 0,
        _ => case.mask_bits,
    };
    let lanes = raw_mask & full;
    let word = match case.frame_sel {
        0..=5 => base_desc.frame_word().pack(),
        6 | 7 => base_desc.frame_word().pack() ^ (1u64 << case.flip_bit),
        8 | 9 => FrameWord {
            version: FRAME_VERSION,
            inline_streams: (case.frame_bits >> 7) & 1 == 1,
            reply: case.frame_bits & 1 == 1,
            in_streams: (case.frame_bits >> 1) as u8 & 7,
            out_streams: (case.frame_bits >> 4) as u8 & 7,
            arg_bytes: (case.frame_bits >> 8) as u16 % 1500,
            signature: (case.frame_bits >> 32) as u32,
        }
        .pack(),
        10 => case.frame_bits,
        // What a client sends when its streams fit in packet 0 (their
        // lengths are cut short below so that most do).
        12..=17 => FrameWord {
            inline_streams: true,
            ..base_desc.frame_word()
        }
        .pack(),
        _ => all[case.other_method as usize].frame_word().pack(),
    };
    let mut words = vec![word; case.lane_size as usize];
    if let Some((l, x)) = case.disagree {
        let l = l as usize % words.len();
        words[l] ^= x;
    }
    let blocks = (0..case.lane_size as usize)
        .map(|l| {
            // Each lane's block follows its own frame word.
            let frame = FrameWord::unpack(words[l]);
            let n_len = frame.in_streams as usize + frame.out_streams as usize;
            let input = &case.lanes[l];
            let mut args = input.args.clone();
            if opcode == FLAGS.opcode {
                args.resize(args.len().max(5), 0);
                args[0] = case.flag_byte;
                args[1..5].copy_from_slice(&case.flag_char.to_le_bytes());
            }
            if opcode == ECHO.opcode && case.echo_special {
                args.resize(args.len().max(8), 0);
                args[..8].copy_from_slice(&ECHO_PANICS_ON.to_le_bytes());
            }
            let mut blk = Vec::with_capacity(frame.block_len());
            for k in 0..n_len {
                let len = if case.frame_sel >= 12 {
                    input.lens[k] % 16
                } else {
                    input.lens[k]
                };
                blk.extend_from_slice(&len.to_le_bytes());
            }
            for k in 0..frame.arg_bytes as usize {
                blk.push(args.get(k).copied().unwrap_or(k as u8));
            }
            blk
        })
        .collect();
    Plan {
        opcode,
        raw_mask,
        lanes,
        words,
        blocks,
    }
}

fn iter_lanes(mask: u64) -> impl Iterator<Item = u32> {
    rpc_runtime::server::iter_lanes(mask)
}

/// What a lane of an accepted call must get back.
#[derive(Debug, PartialEq)]
enum Expect {
    Ok { ret: Vec<u8>, out: Vec<u8> },
    Err(Status, Option<u32>),
}

fn lane_stream(case: &Case, lane: u32, i: usize, len: u64) -> Vec<u8> {
    (0..len).map(|k| stream_byte(case, lane, i, k)).collect()
}

/// The oracle: what the test service answers lane `lane` of an accepted call
/// (`inline`: its streams came in packet 0).
fn expect(case: &Case, d: &CallDesc, lane: u32, block: &[u8], inline: bool) -> Expect {
    let n_in = d.in_streams as usize;
    let word = |k: usize| u64::from_le_bytes(block[8 * k..8 * k + 8].try_into().unwrap());
    let len = |k: usize| call::split_len_word(word(k)).0;
    let direct = |k: usize| call::split_len_word(word(k)).1;
    if (0..n_in).any(|k| len(k) > LIMIT) {
        return Expect::Err(Status::TooLarge, None);
    }
    if d.out_elem_sizes
        .iter()
        .enumerate()
        .any(|(j, &es)| len(n_in + j).saturating_mul(es as u64) > LIMIT)
    {
        return Expect::Err(Status::TooLarge, None);
    }
    if inline {
        let mut at = call::inline_start(d.block_len());
        for k in 0..n_in {
            if direct(k) || at as u64 + len(k) > call::FIRST_PAYLOAD as u64 {
                return Expect::Err(Status::InvalidArgument, Some(k as u32));
            }
            at = call::inline_next(at, len(k) as usize);
        }
    }
    // A direct slice, which a server without device memory refuses before
    // the call runs, naming the first.
    if let Some(k) = (0..n_in + d.out_elem_sizes.len()).find(|&k| direct(k)) {
        return Expect::Err(Status::InvalidArgument, Some(k as u32));
    }
    let args = &block[8 * (n_in + d.out_elem_sizes.len())..];
    let ok = |ret: Vec<u8>, out: Vec<u8>| Expect::Ok { ret, out };
    if std::ptr::eq(d, &NOOP_DESC) {
        let x = u64::from_le_bytes(args[..8].try_into().unwrap());
        return ok(x.wrapping_add(1).to_le_bytes().to_vec(), vec![]);
    }
    match d.method {
        "echo" => {
            let x = u64::from_le_bytes(args[..8].try_into().unwrap());
            if x == ECHO_PANICS_ON {
                Expect::Err(Status::HandlerPanicked, Some(0))
            } else {
                ok((x ^ 0x5555).to_le_bytes().to_vec(), vec![])
            }
        }
        "text" => match String::from_utf8(lane_stream(case, lane, 0, len(0))) {
            Ok(s) => ok((s.chars().count() as u32).to_le_bytes().to_vec(), vec![]),
            Err(_) => Expect::Err(Status::InvalidArgument, Some(0)),
        },
        "fill" => {
            let sum: u64 = lane_stream(case, lane, 0, len(0)).iter().map(|&b| b as u64).sum();
            let out = (0..len(1)).map(|i| args[0].wrapping_add(i as u8)).collect();
            ok(sum.to_le_bytes().to_vec(), out)
        }
        "flags" => {
            if args[0] > 1 {
                return Expect::Err(Status::InvalidArgument, Some(0));
            }
            let c = u32::from_le_bytes(args[1..5].try_into().unwrap());
            match char::from_u32(c) {
                Some(ch) => ok((ch as u32 + args[0] as u32).to_le_bytes().to_vec(), vec![]),
                None => Expect::Err(Status::InvalidArgument, Some(1)),
            }
        }
        "big" => {
            let r: Vec<u8> = (0..10)
                .flat_map(|i| {
                    args[i * 10..i * 10 + 10]
                        .iter()
                        .map(|&b| b as u64)
                        .sum::<u64>()
                        .to_le_bytes()
                })
                .collect();
            ok(r, vec![])
        }
        "log" => ok(vec![], vec![]),
        "wide" => {
            let (a, b) = (len(0) as u32, len(1) as u32);
            let out = (0..len(2) as u32)
                .flat_map(|i| [i, a, b].into_iter().flat_map(u32::to_le_bytes))
                .collect();
            ok((a as u64 + b as u64).to_le_bytes().to_vec(), out)
        }
        m => panic!("no oracle for {m}"),
    }
}

/// Run one case: the device in this thread, the server on another.
fn run_case(case: &Case) -> Result<(), String> {
    let layout = Layout::new(1, case.lane_size).unwrap();
    let region = CpuRegion::new(layout);
    let d = dispatcher();
    let p = plan(case);
    let abort = AtomicBool::new(false);
    let server_done = AtomicBool::new(false);
    let dev = Device::new(&region, &server_done);

    std::thread::scope(|s| {
        let server = s.spawn(|| {
            let server = region.server().with_abort(&abort);
            let r = tracked(|| loop {
                if let Some(port) = server.try_open(0..1) {
                    break d
                        .serve_port(port, None)
                        .map_err(|a| format!("server abandoned the call: {a}"));
                }
                // Relaxed: only ends the wait.
                if abort.load(Ordering::Relaxed) {
                    break Err("the server never saw the call".to_string());
                }
                std::thread::yield_now();
            });
            // Release: the server's last outbox flip happens before the
            // device sees this flag.
            server_done.store(true, Ordering::Release);
            r
        });
        let device = drive(case, &p, &dev);
        let deadline = Instant::now() + Duration::from_secs(20);
        while !server.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        // Relaxed: only ends the server's waits (if it is still waiting, the
        // test fails below).
        abort.store(true, Ordering::Relaxed);
        let (served, max_one, total) = server.join().map_err(|_| "the server thread panicked".to_string())?;
        let log = || format!("; server log: {:?}", d.errors());
        let expected = device.map_err(|e| e + &log())?;
        served.map_err(|e| e + &log())?;
        if max_one as u64 > LIMIT {
            return Err(format!("server made a {max_one}-byte allocation (limit {LIMIT})"));
        }
        let bound = 64 * 1024 + 3 * LIMIT as usize * 14 * case.lane_size as usize;
        if total > bound {
            return Err(format!("server allocated {total} bytes in total (bound {bound})"));
        }
        if !region.is_quiescent() {
            return Err("the port was not left idle".to_string());
        }
        check_log(&p, &d, &expected)
    })
}

/// Every whole-call refusal is one logged error (lane `None`) naming the lane
/// mask; every lane-level error names its lane; nothing else is logged.
fn check_log(p: &Plan, d: &Dispatcher, expected: &Expected) -> Result<(), String> {
    let errors: Vec<ServerError> = d.errors();
    let mut logged: Expected = errors.iter().map(|e| (e.status, e.lane)).collect();
    let mut want = expected.clone();
    logged.sort_by_key(|&(s, l)| (s as u32, l));
    want.sort_by_key(|&(s, l)| (s as u32, l));
    if logged != want {
        return Err(format!("logged {logged:?}, expected {want:?}"));
    }
    for e in &errors {
        if e.opcode != p.opcode || e.port != 0 {
            return Err(format!("error names the wrong call: {e}"));
        }
        let text = e.to_string();
        if !text.contains(&format!("{:#010x}", p.opcode)) || !text.contains("port 0") {
            return Err(format!("error text lacks opcode or port: {text}"));
        }
        match e.lane {
            None => {
                if !e.message.contains(&format!("lanes {:#x}", p.lanes)) {
                    return Err(format!("whole-call error does not name lanes {:#x}: {text}", p.lanes));
                }
            }
            Some(l) => {
                if p.lanes & (1 << l) == 0 || !text.contains(&format!("lane {l}")) {
                    return Err(format!("lane error for a lane not in the call: {text}"));
                }
            }
        }
    }
    Ok(())
}

fn whole_status(p: &Plan) -> Option<Status> {
    if p.raw_mask == 0 || p.raw_mask != p.lanes {
        return Some(Status::InvalidLaneMask);
    }
    let first = p.lanes.trailing_zeros() as usize;
    let word = p.words[first];
    let f = FrameWord::unpack(word);
    let bad_inline = f.inline_streams && (f.in_streams == 0 || f.block_len() > call::FIRST_PAYLOAD);
    if f.version != FRAME_VERSION || bad_inline || iter_lanes(p.lanes).any(|l| p.words[l as usize] != word) {
        return Some(Status::BadFrame);
    }
    None
}

/// The device's side of one call; checks every answer.
type Expected = Vec<(Status, Option<u32>)>;

fn drive(case: &Case, p: &Plan, dev: &Device<'_>) -> Result<Expected, String> {
    let lane_size = case.lane_size;
    dev.set_header(0, p.opcode, p.raw_mask);
    for lane in 0..lane_size {
        let mut b = Buffer::default();
        b.data[0] = p.words[lane as usize];
        call::fill_block(0, &p.blocks[lane as usize], &mut b);
        // A lane whose frame word says its streams are inline writes them
        // after its block, as much as packet 0 holds.
        let f = FrameWord::unpack(b.data[0]);
        let block = &p.blocks[lane as usize];
        if f.inline_streams && block.len() <= call::FIRST_PAYLOAD {
            let mut at = call::inline_start(block.len());
            for i in 0..(f.in_streams as usize).min(block.len() / 8) {
                let n = u64::from_le_bytes(block[8 * i..8 * i + 8].try_into().unwrap());
                for k in 0..n.min(call::FIRST_PAYLOAD as u64) {
                    if let Some(byte) = b.bytes_mut().get_mut(8 + at + k as usize) {
                        *byte = stream_byte(case, lane, i, k);
                    }
                }
                at = call::inline_next(at, n.min(call::FIRST_PAYLOAD as u64) as usize);
            }
        }
        dev.write(0, lane, &b);
    }
    dev.flip(0);

    if let Some(s) = whole_status(p) {
        // One answer, whatever the frame said.
        dev.wait_owned(0, "answer to a bad frame")?;
        for lane in iter_lanes(p.lanes) {
            let got = dev.read(0, lane).data[0] as u32;
            if got != s as u32 {
                return Err(format!("lane {lane}: status {got}, expected {s:?}"));
            }
        }
        return Ok(vec![(s, None)]);
    }

    let word = p.words[p.lanes.trailing_zeros() as usize];
    let frame = FrameWord::unpack(word);
    let n_in = frame.in_streams as usize;
    let word = |lane: u32, k: usize| u64::from_le_bytes(p.blocks[lane as usize][8 * k..8 * k + 8].try_into().unwrap());
    let len = |lane: u32, k: usize| call::split_len_word(word(lane, k)).0;
    let direct = |lane: u32, k: usize| call::split_len_word(word(lane, k)).1;
    // A direct slice is one packet (its address).
    let packets = |lane: u32, k: usize| match call::split_len_word(word(lane, k)) {
        (_, true) => 1,
        (len, false) => call::stream_packets(len),
    };

    // Rest of the block, then the streams, as a client would send them.
    let spill = call::spill_packets(frame.block_len());
    for i in 0..spill {
        dev.wait_owned(0, "block packet")?;
        for lane in 0..lane_size {
            let mut b = Buffer::default();
            call::fill_block(i + 1, &p.blocks[lane as usize], &mut b);
            dev.write(0, lane, &b);
        }
        dev.flip(0);
    }
    for i in (0..n_in).filter(|_| !frame.inline_streams) {
        let packets = iter_lanes(p.lanes).map(|l| packets(l, i)).max().unwrap_or(0);
        for k in 0..packets {
            dev.wait_owned(0, "stream packet")?;
            for lane in 0..lane_size {
                let mut b = Buffer::default();
                for (j, byte) in b.bytes_mut().iter_mut().enumerate() {
                    *byte = stream_byte(case, lane, i, k * BUFFER_BYTES as u64 + j as u64);
                }
                dev.write(0, lane, &b);
            }
            dev.flip(0);
        }
    }
    // The out-buffers' addresses: a packet for each out-buffer that a lane
    // sends by address.
    let n_out = frame.out_streams as usize;
    for j in 0..n_out {
        if iter_lanes(p.lanes).any(|l| direct(l, n_in + j)) {
            dev.wait_owned(0, "out-buffer address")?;
            for lane in 0..lane_size {
                let mut b = Buffer::default();
                b.data[0] = 0x1000 + lane as u64;
                dev.write(0, lane, &b);
            }
            dev.flip(0);
        }
    }

    let served = served_desc(p.opcode);
    let accepted = served.filter(|d| {
        d.frame_word()
            == FrameWord {
                inline_streams: false,
                ..frame
            }
    });
    let refusal = match (served, accepted) {
        (None, _) => Some(Status::UnknownOpcode),
        (Some(_), None) => Some(Status::SignatureMismatch),
        _ => None,
    };
    if !frame.reply {
        return Ok(match (refusal, accepted) {
            (Some(s), _) => vec![(s, None)],
            (None, Some(d)) => iter_lanes(p.lanes)
                .filter_map(
                    |l| match expect(case, d, l, &p.blocks[l as usize], frame.inline_streams) {
                        Expect::Err(s, _) => Some((s, Some(l))),
                        Expect::Ok { .. } => None,
                    },
                )
                .collect(),
            (None, None) => unreachable!(),
        });
    }

    // The reply.
    dev.wait_owned(0, "reply")?;
    let first: Vec<Buffer> = (0..lane_size).map(|l| dev.reply(0, l)).collect();
    let Some(d) = accepted else {
        let s = refusal.unwrap();
        for lane in iter_lanes(p.lanes) {
            let got = first[lane as usize].data[0] as u32;
            if got != s as u32 {
                return Err(format!("lane {lane}: status {got}, expected {s:?}"));
            }
        }
        return Ok(vec![(s, None)]);
    };

    let ret_len = d.ret_bytes as usize;
    let mut rets: Vec<Vec<u8>> = (0..lane_size).map(|_| vec![0u8; ret_len]).collect();
    for lane in 0..lane_size as usize {
        call::read_block(0, &first[lane], &mut rets[lane]);
    }
    for i in 0..call::spill_packets(ret_len) {
        dev.flip(0);
        dev.wait_owned(0, "return value packet")?;
        for lane in 0..lane_size {
            call::read_block(i + 1, &dev.read(0, lane), &mut rets[lane as usize]);
        }
    }
    let status = |lane: u32| Status::from_u32(first[lane as usize].data[0] as u32);
    let detail = |lane: u32| (first[lane as usize].data[0] >> 32) as u32;
    // The reply came inline exactly when the call frame's rule says so:
    // every lane `Ok` with the same small return value.
    let all_ok = iter_lanes(p.lanes).all(|l| status(l) == Status::Ok && detail(l) == 0);
    // Each lane's return value as the little-endian word the rule takes
    // (from what the client decoded, not from words past the value).
    let ret_word = |l: u32| {
        let r = &rets[l as usize];
        let mut w = [0u8; 8];
        w[..r.len().min(8)].copy_from_slice(&r[..r.len().min(8)]);
        u64::from_le_bytes(w)
    };
    let same_small_ok = call::inline_reply(all_ok, ret_len, iter_lanes(p.lanes).map(ret_word)).is_some();
    if dev.inline_reply(0).is_some() != same_small_ok {
        return Err(format!(
            "inline reply {:?}, but every lane Ok with one small value is {same_small_ok}",
            dev.inline_reply(0)
        ));
    }

    // Out-buffers for the lanes that succeeded.
    let n_in = d.in_streams as usize;
    let mut outs: Vec<Vec<u8>> = vec![Vec::new(); lane_size as usize];
    for (j, &es) in d.out_elem_sizes.iter().enumerate() {
        let per = BUFFER_BYTES / es as usize;
        let packets = iter_lanes(p.lanes)
            .filter(|&l| status(l) == Status::Ok)
            .map(|l| call::out_packets(len(l, n_in + j), es))
            .max()
            .unwrap_or(0);
        for i in 0..packets {
            dev.flip(0);
            dev.wait_owned(0, "out-buffer packet")?;
            for lane in iter_lanes(p.lanes).filter(|&l| status(l) == Status::Ok) {
                let count = len(lane, n_in + j) as usize;
                let first_elem = i as usize * per;
                let n = count.saturating_sub(first_elem).min(per);
                let b = dev.read(0, lane);
                outs[lane as usize].extend_from_slice(&b.bytes()[..n * es as usize]);
            }
        }
    }

    let mut expected = Vec::new();
    for lane in iter_lanes(p.lanes) {
        let want = expect(case, d, lane, &p.blocks[lane as usize], frame.inline_streams);
        let got = match status(lane) {
            Status::Ok => Expect::Ok {
                ret: rets[lane as usize].clone(),
                out: std::mem::take(&mut outs[lane as usize]),
            },
            s => Expect::Err(
                s,
                match want {
                    Expect::Err(_, Some(_)) => Some(detail(lane)),
                    _ => None,
                },
            ),
        };
        if got != want {
            return Err(format!("lane {lane} of {}: got {got:?}, expected {want:?}", d.method));
        }
        if let Expect::Err(s, _) = want {
            expected.push((s, Some(lane)));
        }
    }
    Ok(expected)
}

fn config() -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 128,
        max_shrink_time: 30_000,
        ..Config::default()
    }
}

/// Keep the expected handler panics of the test service out of the output
/// (with `RUST_BACKTRACE=1` each would print a backtrace).
fn quiet_expected_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if !msg.starts_with("echo refuses") {
            default(info)
        }
    }));
}

#[test]
fn arbitrary_shared_memory_is_refused_or_served() {
    quiet_expected_panics();
    let mut runner = TestRunner::new_with_rng(config(), TestRng::deterministic_rng(RngAlgorithm::ChaCha));
    runner
        .run(&case_strategy(), |case| run_case(&case).map_err(TestCaseError::fail))
        .unwrap();
}

/// A declared stream length no client could send (`2^63 - 1`, the largest a
/// length word holds; its top bit is [`call::DIRECT`]): nothing is
/// allocated for it, the lane's error is recorded at once, and the server's
/// wait for the packets that never come ends with the abort flag (the
/// kernel's end), recorded as an abandoned call naming port and opcode.
#[test]
fn absurd_stream_length_allocates_nothing_and_ends_with_abort() {
    let region = CpuRegion::new(Layout::new(1, 1).unwrap());
    let d = dispatcher();
    let abort = AtomicBool::new(false);
    let server_done = AtomicBool::new(false);
    let dev = Device::new(&region, &server_done);
    dev.set_header(0, TEXT.opcode, 1);
    let mut b = Buffer::default();
    b.data[0] = TEXT.frame_word().pack();
    b.data[1] = !call::DIRECT;
    dev.write(0, 0, &b);
    dev.flip(0);
    std::thread::scope(|s| {
        let server = s.spawn(|| {
            let server = region.server().with_abort(&abort);
            let r = tracked(|| {
                let port = loop {
                    if let Some(p) = server.try_open(0..1) {
                        break p;
                    }
                    std::thread::yield_now();
                };
                d.serve_port(port, None)
            });
            // Release: the server's last flip is visible once this is.
            server_done.store(true, Ordering::Release);
            r
        });
        // Three stream packets, then the "device" stops.
        for _ in 0..3 {
            dev.wait_owned(0, "stream packet").unwrap();
            dev.write(0, 0, &Buffer::default());
            dev.flip(0);
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while d.error_count() == 0 && Instant::now() < deadline {
            std::thread::yield_now();
        }
        std::thread::sleep(Duration::from_millis(20));
        assert!(!server.is_finished(), "the server stopped waiting on its own");
        // Relaxed: only ends the server's wait.
        abort.store(true, Ordering::Relaxed);
        let (r, max_one, _) = server.join().unwrap();
        let a = r.unwrap_err();
        assert_eq!((a.port, a.opcode), (0, TEXT.opcode));
        assert!(max_one as u64 <= LIMIT, "{max_one}-byte allocation");
    });
    let errors = d.errors();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert_eq!((errors[0].status, errors[0].lane), (Status::TooLarge, Some(0)));
    assert!(
        errors[0].to_string().contains(&format!(
            "streamed argument 0 is {} bytes, over the limit of {LIMIT}",
            !call::DIRECT
        )),
        "{}",
        errors[0]
    );
    assert_eq!((errors[1].status, errors[1].lane), (Status::Unknown, None));
    let text = errors[1].to_string();
    assert!(
        text.contains("call abandoned on port 0")
            && text.contains(&format!("{:#x}", TEXT.opcode))
            && text.contains("lanes 0x1")
            && text.contains("Fuzz::text"),
        "{text}"
    );
}
