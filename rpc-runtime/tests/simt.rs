//! The protocol on simulated 32-lane SIMT warps (`lanes::sim`): lanes that
//! reach `open` from different call sites, loop iterations and opcodes are
//! put into one `activemask` group, as under NVIDIA's independent thread
//! scheduling (issue 12). Run with
//!
//! ```text
//! RUSTFLAGS="--cfg gpu_rpc_simt" CARGO_TARGET_DIR=target/simt \
//!     cargo test -q -p rpc-runtime --test simt --release
//! ```
//!
//! One file on purpose: every file under `tests/` links a test binary of its
//! own, and the project keeps those few (CI builds them on two cores).
//!
//! Every lane runs a random program drawn from (seed, warp, lane): raw port
//! calls of six shapes (one opcode each: one packet each way, from the
//! warp's first port or from a per-lane one (`open_from`), per-lane
//! multi-packet sends, `send_n`/`recv_n` streams, two round trips, two
//! replies, fire-and-forget), calls through the call-frame path the
//! `#[gpu_rpc]` stubs use (`Client::call` + `begin_inline`/`stream`/`reply`/`out`,
//! the runtime's `noop`, a fire-and-forget method), branches whose sides
//! call different methods, loops with per-lane trip counts, early returns
//! and `halt`. Every packet carries a tag naming its call (opcode, warp,
//! lane, sequence number); the hand-written server checks every lane's tag
//! against the port's opcode and lane, every lane checks every reply, and
//! the test checks the fire-and-forget sums, an empty server error log and
//! idle ports at the end. The simulator reports deadlocks and runs past the
//! watchdog as failures.
//!
//! What this can and cannot catch is written at the top of
//! `rpc-runtime/src/lanes_sim.rs`. In short: how lanes are grouped and what
//! the lanes of a group agree on, yes; GPU memory-model effects and the
//! hardware's actual grouping policy, no. The stub path here is written by
//! hand the way `#[gpu_rpc]` expands it (the macro lives in the facade crate,
//! which this crate's tests cannot depend on).
#![cfg(gpu_rpc_simt)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rpc_runtime::call::{CallDesc, CallError};
use rpc_runtime::cpu::CpuRegion;
use rpc_runtime::lanes::{self, sim};
use rpc_runtime::protocol::{Abandoned, Client, Fresh, Layout, Port, ServerSide};
use rpc_runtime::server::{Dispatcher, MethodInfo, ServerCall, ServerConfig, Service};

// ---------------------------------------------------------------- programs

/// Raw opcodes, one call shape each (lanes that share an opcode make the
/// same sequence of port calls, as the lane rules require).
const ECHO: u32 = 0x0010_0001;
const MULTI: u32 = 0x0010_0002;
const STREAM: u32 = 0x0010_0003;
const TWO_ROUND: u32 = 0x0010_0004;
const DOUBLE_REPLY: u32 = 0x0010_0005;
const ASYNC: u32 = 0x0010_0006;
/// Most extra packets a lane sends in a MULTI call.
const MAX_MULTI: u64 = 6;
/// Longest STREAM payload.
const MAX_STREAM: u64 = 300;

const WARPS: u32 = 3;
const LANES: usize = 32;

struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut x = self.0;
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A packet tag: which call (opcode, warp, lane, sequence number) it belongs to.
fn tag(op: u32, warp: u32, lane: u32, seq: u32) -> u64 {
    (op as u64) << 32 | (warp as u64) << 24 | (lane as u64) << 16 | (seq & 0xffff) as u64
}

fn stream_data(t: u64, len: usize) -> Vec<u8> {
    let mut r = Rng::new(t);
    let mut v: Vec<u8> = (0..len).map(|_| r.next() as u8).collect();
    let n = len.min(8);
    v[..n].copy_from_slice(&t.to_le_bytes()[..n]);
    v
}

/// The fire-and-forget totals: what the lanes sent, what the servers got.
struct Ledger {
    raw_sent: Vec<AtomicU64>,
    raw_got: Vec<AtomicU64>,
    stub_sent: AtomicU64,
    lane_calls: AtomicU64,
}

impl Ledger {
    fn new() -> Ledger {
        let n = WARPS as usize * LANES;
        Ledger {
            raw_sent: (0..n).map(|_| AtomicU64::new(0)).collect(),
            raw_got: (0..n).map(|_| AtomicU64::new(0)).collect(),
            stub_sent: AtomicU64::new(0),
            lane_calls: AtomicU64::new(0),
        }
    }
}

/// One lane's view of the kernel.
struct LaneCtx<'k, 'a> {
    raw: &'k Client<'a>,
    stub: &'k Client<'a>,
    ledger: &'k Ledger,
    seed: u64,
    warp: u32,
    lane: u32,
    seq: u32,
    rng: Rng,
}

impl LaneCtx<'_, '_> {
    fn next_tag(&mut self, op: u32) -> u64 {
        self.seq += 1;
        // Relaxed: a statistic.
        self.ledger.lane_calls.fetch_add(1, Ordering::Relaxed);
        tag(op, self.warp, self.lane, self.seq)
    }

    #[track_caller]
    fn expect(&self, what: &str, got: u64, want: u64) {
        assert_eq!(
            got, want,
            "seed {:#x} warp {} lane {} call #{}: {what}: got {got:#x}, expected {want:#x}",
            self.seed, self.warp, self.lane, self.seq
        );
    }

    fn echo(&mut self) {
        let t = self.next_tag(ECHO);
        let x = self.rng.next() >> 8;
        let (mut rt, mut r) = (0, 0);
        // Half the time each lane proposes its own first port (`open_from`):
        // the group must scan from one agreed index.
        let port = if self.rng.below(2) == 0 {
            self.raw.open(ECHO)
        } else {
            self.raw.open_from(ECHO, self.rng.next() as u32)
        };
        let port = port.send(|b| b.data[..2].copy_from_slice(&[t, x]));
        port.recv(|b| (rt, r) = (b.data[0], b.data[1])).close();
        self.expect("ECHO reply tag", rt, t);
        self.expect("ECHO reply", r, x + ECHO as u64);
    }

    fn multi(&mut self) {
        let t = self.next_tag(MULTI);
        let n = self.rng.below(MAX_MULTI + 1);
        let x = self.rng.next() >> 16;
        let (mut rt, mut r) = (0, 0);
        let port = self.raw.open(MULTI).send(|b| b.data[..3].copy_from_slice(&[t, n, x]));
        let port = port.send_packets(n, |i, b| b.data[..3].copy_from_slice(&[t, i, x.wrapping_mul(i + 1)]));
        port.recv(|b| (rt, r) = (b.data[0], b.data[1])).close();
        let sum = (0..n).fold(0u64, |s, i| s.wrapping_add(x.wrapping_mul(i + 1)));
        self.expect("MULTI reply tag", rt, t);
        self.expect("MULTI reply", r, sum.wrapping_add(MULTI as u64));
    }

    fn stream(&mut self) {
        let t = self.next_tag(STREAM);
        let len = self.rng.below(MAX_STREAM + 1) as usize;
        let data = stream_data(t, len);
        let mut back = vec![0u8; len];
        let (port, got) = self.raw.open(STREAM).send_n(&data).recv_n(&mut back);
        port.close();
        self.expect("STREAM reply length", got, len as u64);
        let want: Vec<u8> = data.iter().rev().map(|b| b ^ 0x5a).collect();
        assert!(
            back == want,
            "seed {:#x} warp {} lane {} call #{}: STREAM reply differs",
            self.seed,
            self.warp,
            self.lane,
            self.seq
        );
    }

    fn two_round(&mut self) {
        let t = self.next_tag(TWO_ROUND);
        let x = self.rng.next() >> 8;
        let (mut rt, mut r) = (0, 0);
        let port = self.raw.open(TWO_ROUND).send(|b| b.data[..2].copy_from_slice(&[t, x]));
        let port = port.recv(|b| (rt, r) = (b.data[0], b.data[1]));
        self.expect("TWO_ROUND first reply tag", rt, t);
        self.expect("TWO_ROUND first reply", r, x + TWO_ROUND as u64);
        let y = r.wrapping_mul(3);
        let port = port.send(|b| b.data[..2].copy_from_slice(&[t, y]));
        port.recv(|b| (rt, r) = (b.data[0], b.data[1])).close();
        self.expect("TWO_ROUND second reply tag", rt, t);
        self.expect("TWO_ROUND second reply", r, y.wrapping_add(TWO_ROUND as u64));
    }

    fn double_reply(&mut self) {
        let t = self.next_tag(DOUBLE_REPLY);
        let x = self.rng.next() >> 8;
        let (mut rt, mut r, mut rt2, mut r2) = (0, 0, 0, 0);
        let port = self
            .raw
            .open(DOUBLE_REPLY)
            .send(|b| b.data[..2].copy_from_slice(&[t, x]));
        let port = port.recv(|b| (rt, r) = (b.data[0], b.data[1]));
        port.recv(|b| (rt2, r2) = (b.data[0], b.data[1])).close();
        self.expect("DOUBLE_REPLY first tag", rt, t);
        self.expect("DOUBLE_REPLY first", r, x + DOUBLE_REPLY as u64);
        self.expect("DOUBLE_REPLY second tag", rt2, t);
        self.expect("DOUBLE_REPLY second", r2, x + 2 * DOUBLE_REPLY as u64);
    }

    fn fire_and_forget(&mut self) {
        let t = self.next_tag(ASYNC);
        let x = self.rng.next() >> 24;
        // Relaxed: read after every thread joined.
        self.ledger.raw_sent[self.warp as usize * LANES + self.lane as usize].fetch_add(x, Ordering::Relaxed);
        self.raw
            .open(ASYNC)
            .send(|b| b.data[..2].copy_from_slice(&[t, x]))
            .close();
    }

    /// A value for a call whose reply is `x + something`: a third of the
    /// time the same small value on every lane of the warp (the reply goes
    /// inline in the server's outbox word when the whole group has it), a
    /// third a small one of this lane's, a third a large one (both in the
    /// packet).
    fn reply_seed(&mut self) -> u64 {
        match self.rng.below(3) {
            0 => (self.warp as u64) << 8 | 0x5,
            1 => self.rng.next() >> 40,
            _ => self.rng.next() >> 8,
        }
    }

    fn noop(&mut self) {
        self.next_tag(0);
        let x = self.reply_seed();
        let r = self.stub.noop(x);
        assert_eq!(
            r,
            Ok(x + 1),
            "seed {:#x} warp {} lane {} call #{}: noop",
            self.seed,
            self.warp,
            self.lane,
            self.seq
        );
    }

    fn mix(&mut self) {
        self.next_tag(0);
        let x = self.reply_seed();
        // Zeros a third of the time, so a warp's lanes may agree on the
        // reply (inline) and still each have out-buffer packets after it.
        let zeros = self.rng.below(3) == 0;
        // Half the time short enough to go inline with the frame (8
        // elements fit after MIX's 24-byte block), so groups mix lanes that
        // fit with lanes that do not.
        let n = if self.rng.below(2) == 0 {
            self.rng.below(9)
        } else {
            self.rng.below(40)
        };
        let s: Vec<u32> = (0..n).map(|_| if zeros { 0 } else { self.rng.next() as u32 }).collect();
        let mut out = vec![0xeeeeu16; self.rng.below(70) as usize];
        let r = mix_stub(self.stub, x, &s, &mut out);
        let want = x.wrapping_add(s.iter().map(|&v| v as u64).sum::<u64>());
        assert_eq!(
            r,
            Ok(want),
            "seed {:#x} warp {} lane {} call #{}: mix",
            self.seed,
            self.warp,
            self.lane,
            self.seq
        );
        for (i, &o) in out.iter().enumerate() {
            self.expect("mix out-buffer", o as u64, mix_out(x, s.len(), i) as u64);
        }
    }

    fn log(&mut self) {
        self.next_tag(0);
        let x = self.rng.next() >> 24;
        // Relaxed: read after every thread joined.
        self.ledger.stub_sent.fetch_add(x, Ordering::Relaxed);
        log_stub(self.stub, x);
    }

    fn random_call(&mut self) {
        match self.rng.below(9) {
            0 => self.echo(),
            1 => self.multi(),
            2 => self.stream(),
            3 => self.two_round(),
            4 => self.double_reply(),
            5 => self.fire_and_forget(),
            6 => self.noop(),
            7 => self.mix(),
            _ => self.log(),
        }
    }
}

/// One lane's program: branches whose sides call different methods, loops
/// with per-lane trip counts, early returns and `halt`, then one call site
/// every remaining lane reaches.
fn lane_program(ctx: &mut LaneCtx<'_, '_>) {
    if ctx.rng.below(16) == 0 {
        return; // never calls: a partial warp
    }
    let outer = 1 + ctx.rng.below(4);
    for i in 0..outer {
        // Both sides of a branch call, different methods.
        match (ctx.lane as u64 + i) % 3 {
            0 => ctx.echo(),
            1 => ctx.multi(),
            _ => {
                if ctx.rng.below(2) == 0 {
                    ctx.stream()
                } else {
                    ctx.noop()
                }
            }
        }
        // A loop with a per-lane trip count.
        for _ in 0..ctx.rng.below(4) {
            ctx.random_call();
        }
        match ctx.rng.below(24) {
            0 => return,
            1 => lanes::halt(),
            _ => {}
        }
    }
    ctx.echo();
}

// ------------------------------------------------------ the stub path

/// `fn mix(x: u64, s: &[u32], out: &mut [u16]) -> u64`, as `#[gpu_rpc]`
/// would describe it.
static MIX: CallDesc = CallDesc {
    service: "Simt",
    method: "mix",
    opcode: 0x0020_0001,
    signature: 0x51a7_0001,
    reply: true,
    in_streams: 1,
    out_elem_sizes: &[2],
    arg_bytes: 8,
    ret_bytes: 8,
};

/// `#[gpu_rpc(async)] fn log(x: u64)`: fire-and-forget.
static LOG: CallDesc = CallDesc {
    service: "Simt",
    method: "log",
    opcode: 0x0020_0002,
    signature: 0x51a7_0002,
    reply: false,
    in_streams: 0,
    out_elem_sizes: &[],
    arg_bytes: 8,
    ret_bytes: 0,
};

static METHODS: [MethodInfo; 2] = [
    MethodInfo {
        desc: &MIX,
        path: "Simt::mix",
        module: module_path!(),
    },
    MethodInfo {
        desc: &LOG,
        path: "Simt::log",
        module: module_path!(),
    },
];

fn mix_out(x: u64, n: usize, i: usize) -> u16 {
    (x as u16) ^ (i as u16).wrapping_mul(7) ^ n as u16
}

/// The client stub, written the way `#[gpu_rpc]` expands one.
fn mix_stub(client: &Client<'_>, x: u64, s: &[u32], out: &mut [u16]) -> Result<u64, CallError> {
    client.call(&MIX, || {
        let mut block = [0u8; 24];
        block[0..8].copy_from_slice(&(s.len() as u64 * 4).to_le_bytes());
        block[8..16].copy_from_slice(&(out.len() as u64).to_le_bytes());
        block[16..24].copy_from_slice(&x.to_le_bytes());
        let call = client.begin_inline(&MIX, &block, s);
        let call = call.stream(s);
        let mut ret = [0u8; 8];
        let reply = call.reply(&mut ret);
        let reply = reply.out(&mut *out);
        let result = reply.result();
        reply.close();
        result.map(|()| u64::from_le_bytes(ret))
    })
}

fn log_stub(client: &Client<'_>, x: u64) {
    client.call(&LOG, || client.begin(&LOG, &x.to_le_bytes()).finish_async())
}

/// The server adapter, written the way `#[gpu_rpc]` generates one.
struct SimtService<'l>(&'l AtomicU64);

impl Service for SimtService<'static> {
    fn name(&self) -> &'static str {
        "Simt"
    }
    fn methods(&self) -> &'static [MethodInfo] {
        &METHODS
    }
    fn dispatch(&self, index: usize, call: &mut ServerCall<'_>) {
        match index {
            0 => call.run(|call, lane| {
                let x = call.arg_at::<u64>(lane, 0, 0)?;
                let s = call.slice::<u32>(lane, 0, 1)?;
                let mut out = call.out_buffer::<u16>(lane, 0)?;
                for (i, o) in out.iter_mut().enumerate() {
                    *o = mix_out(x, s.len(), i);
                }
                let r = x.wrapping_add(s.iter().map(|&v| v as u64).sum::<u64>());
                call.set_return::<u64>(lane, &r);
                call.set_out::<u16>(lane, 0, &out);
                Ok(())
            }),
            1 => call.run(|call, lane| {
                let x = call.arg_at::<u64>(lane, 0, 0)?;
                // Relaxed: read after the server threads joined.
                self.0.fetch_add(x, Ordering::Relaxed);
                Ok(())
            }),
            _ => {}
        }
    }
}

// ------------------------------------------------ the raw-port server

struct RawServer<'l> {
    ledger: &'l Ledger,
    errors: Mutex<Vec<String>>,
}

impl RawServer<'_> {
    fn error(&self, msg: String) {
        let mut e = self.errors.lock().unwrap();
        if e.len() < 20 {
            e.push(msg);
        }
    }

    /// Check lane `lane`'s packet tag against the port's opcode.
    fn check_tag(&self, index: u32, op: u32, lane: u32, t: u64, what: &str) -> bool {
        let ok = (t >> 32) as u32 == op && (t >> 16) as u8 as u32 == lane && ((t >> 24) as u8 as u32) < WARPS;
        if !ok {
            self.error(format!(
                "port {index} (opcode {op:#x}): lane {lane}'s {what} is tagged {t:#018x} (opcode {:#x}, lane {}): \
                 lanes of different calls share the port",
                t >> 32,
                (t >> 16) as u8
            ));
        }
        ok
    }

    fn serve(&self, port: Port<'_, '_, ServerSide, Fresh>) -> Result<(), Abandoned> {
        let op = port.opcode();
        let index = port.index();
        let lanes = port.lanes();
        let mut tags = [0u64; LANES];
        let mut xs = [0u64; LANES];
        let each = |f: &mut dyn FnMut(usize)| {
            let mut m = lanes;
            while m != 0 {
                let l = m.trailing_zeros() as usize;
                m &= m - 1;
                f(l)
            }
        };
        if lanes == 0 || lanes >> LANES != 0 {
            self.error(format!(
                "port {index} (opcode {op:#x}): lane mask {:#x}",
                port.peer_mask()
            ));
        }
        match op {
            ECHO => {
                let p = port.recv(|l, b| (tags[l as usize], xs[l as usize]) = (b.data[0], b.data[1]))?;
                each(&mut |l| {
                    self.check_tag(index, op, l as u32, tags[l], "packet");
                });
                p.send(|l, b| {
                    let l = l as usize;
                    b.data[..2].copy_from_slice(&[tags[l], xs[l].wrapping_add(op as u64)])
                })?
                .close();
            }
            MULTI => {
                let mut ns = [0u64; LANES];
                let p = port.recv(|l, b| {
                    let l = l as usize;
                    (tags[l], ns[l], xs[l]) = (b.data[0], b.data[1], b.data[2])
                })?;
                let mut most = 0;
                each(&mut |l| {
                    self.check_tag(index, op, l as u32, tags[l], "first packet");
                    if ns[l] > MAX_MULTI {
                        self.error(format!("port {index} (MULTI): lane {l} announces {} packets", ns[l]));
                        ns[l] = MAX_MULTI;
                    }
                    most = most.max(ns[l]);
                });
                let mut sums = [0u64; LANES];
                let mut bad = Vec::new();
                let p = p.recv_packets(most, |l, i, b| {
                    let l = l as usize;
                    if i < ns[l] {
                        if b.data[0] != tags[l] || b.data[1] != i {
                            bad.push(format!(
                                "port {index} (MULTI): lane {l}'s packet {i} is [{:#x}, {}], expected [{:#x}, {i}]",
                                b.data[0], b.data[1], tags[l]
                            ));
                        }
                        sums[l] = sums[l].wrapping_add(b.data[2]);
                    }
                })?;
                for e in bad {
                    self.error(e);
                }
                p.send(|l, b| {
                    let l = l as usize;
                    b.data[..2].copy_from_slice(&[tags[l], sums[l].wrapping_add(op as u64)])
                })?
                .close();
            }
            STREAM => {
                let (p, data) = port.recv_n_vec(MAX_STREAM)?;
                let outs: Vec<Vec<u8>> = data
                    .iter()
                    .map(|d| d.as_deref().unwrap_or(&[]).iter().rev().map(|b| b ^ 0x5a).collect())
                    .collect();
                p.send_n(|l| &outs[l as usize])?.close();
            }
            TWO_ROUND => {
                let p = port.recv(|l, b| (tags[l as usize], xs[l as usize]) = (b.data[0], b.data[1]))?;
                each(&mut |l| {
                    self.check_tag(index, op, l as u32, tags[l], "first packet");
                });
                let p = p.send(|l, b| {
                    let l = l as usize;
                    b.data[..2].copy_from_slice(&[tags[l], xs[l].wrapping_add(op as u64)])
                })?;
                let mut tags2 = [0u64; LANES];
                let p = p.recv(|l, b| (tags2[l as usize], xs[l as usize]) = (b.data[0], b.data[1]))?;
                each(&mut |l| {
                    if tags2[l] != tags[l] {
                        self.error(format!(
                            "port {index} (TWO_ROUND): lane {l}'s second packet is tagged {:#x}, its first {:#x}",
                            tags2[l], tags[l]
                        ));
                    }
                });
                p.send(|l, b| {
                    let l = l as usize;
                    b.data[..2].copy_from_slice(&[tags[l], xs[l].wrapping_add(op as u64)])
                })?
                .close();
            }
            DOUBLE_REPLY => {
                let p = port.recv(|l, b| (tags[l as usize], xs[l as usize]) = (b.data[0], b.data[1]))?;
                each(&mut |l| {
                    self.check_tag(index, op, l as u32, tags[l], "packet");
                });
                let p = p.send(|l, b| {
                    let l = l as usize;
                    b.data[..2].copy_from_slice(&[tags[l], xs[l].wrapping_add(op as u64)])
                })?;
                p.send(|l, b| {
                    let l = l as usize;
                    b.data[..2].copy_from_slice(&[tags[l], xs[l].wrapping_add(2 * op as u64)])
                })?
                .close();
            }
            ASYNC => {
                let p = port.recv(|l, b| (tags[l as usize], xs[l as usize]) = (b.data[0], b.data[1]))?;
                each(&mut |l| {
                    if self.check_tag(index, op, l as u32, tags[l], "packet") {
                        let warp = (tags[l] >> 24) as u8 as usize;
                        // Relaxed: read after the server threads joined.
                        self.ledger.raw_got[warp * LANES + l].fetch_add(xs[l], Ordering::Relaxed);
                    }
                });
                p.close();
            }
            _ => {
                self.error(format!("port {index}: unknown opcode {op:#x}"));
                port.recv(|_, _| {})?.close();
            }
        }
        Ok(())
    }

    /// Serve until `done` is set and a last pass finds nothing pending.
    fn run(&self, region: &CpuRegion, done: &AtomicBool, abort: &AtomicBool) {
        let server = region.server().with_abort(abort);
        let n = region.layout().port_count();
        loop {
            // Acquire: pairs with the release store after the kernel joined,
            // so the last pass sees every flip the lanes made.
            let finished = done.load(Ordering::Acquire);
            let mut served = false;
            while let Some(port) = server.try_open(0..n) {
                served = true;
                if let Err(a) = self.serve(port) {
                    self.error(format!("{a}"));
                    return;
                }
            }
            if !served {
                if finished {
                    return;
                }
                std::thread::yield_now();
            }
        }
    }
}

// ------------------------------------------------------------ the tests

struct Outcome {
    stats: sim::Stats,
    lane_calls: u64,
}

/// Server threads on the stub region.
const STUB_SERVERS: u32 = 3;

/// One simulated kernel of `WARPS` warps running the random programs of
/// `seed` against a raw region (4 ports) and a stub region (3 ports): fewer
/// ports than groups, so ports are contended and reused.
fn run_seed(seed: u64) -> Result<Outcome, String> {
    let raw_region = CpuRegion::new(Layout::new(4, 32).unwrap());
    let stub_region = CpuRegion::new(Layout::new(3, 32).unwrap());
    let ledger = Ledger::new();
    static STUB_GOT: AtomicU64 = AtomicU64::new(0);
    STUB_GOT.store(0, Ordering::Relaxed);
    let mut dispatcher = Dispatcher::new(ServerConfig {
        log_errors: false,
        ..ServerConfig::default()
    });
    dispatcher.add(SimtService(&STUB_GOT)).unwrap();
    let raw_server = RawServer {
        ledger: &ledger,
        errors: Mutex::new(Vec::new()),
    };
    let done = AtomicBool::new(false);
    let abort = AtomicBool::new(false);
    let result = std::thread::scope(|s| {
        s.spawn(|| raw_server.run(&raw_region, &done, &abort));
        // Several server threads on the stub region, as the GPU runs use
        // (each port with one thread at a time; any thread serves any port).
        for t in 0..STUB_SERVERS {
            let (dispatcher, stub_region, abort, done) = (&dispatcher, &stub_region, &abort, &done);
            s.spawn(move || {
                let server = stub_region.server().with_abort(abort);
                let _ = dispatcher.serve_until(&server, t, STUB_SERVERS, done);
            });
        }
        let raw = raw_region.client();
        let stub = stub_region.client();
        let config = sim::Config {
            seed,
            warps: WARPS,
            timeout: Duration::from_secs(20),
            // `GPU_RPC_SIMT_LAX_OPS=1`: let lanes that meet at different warp
            // operations go on (see `sim::Config::lax_ops`).
            lax_ops: std::env::var_os("GPU_RPC_SIMT_LAX_OPS").is_some_and(|v| v == "1"),
        };
        let r = sim::run_kernel(&config, |warp, lane| {
            let mut ctx = LaneCtx {
                raw: &raw,
                stub: &stub,
                ledger: &ledger,
                seed,
                warp,
                lane,
                seq: 0,
                rng: Rng::new(seed ^ (warp as u64 + 1) << 40 ^ (lane as u64 + 1) << 32),
            };
            lane_program(&mut ctx);
        });
        if r.is_err() {
            // Relaxed: the flag carries no data; it only ends the servers' waits.
            abort.store(true, Ordering::Relaxed);
        }
        // Release: pairs with the servers' acquire loads (see `RawServer::run`).
        done.store(true, Ordering::Release);
        r
    });
    let mut problems = Vec::new();
    if let Err(e) = &result {
        problems.push(e.clone());
    }
    problems.extend(
        raw_server
            .errors
            .into_inner()
            .unwrap()
            .into_iter()
            .map(|e| format!("raw server: {e}")),
    );
    for e in dispatcher.errors() {
        problems.push(format!("dispatcher: {e}"));
    }
    let Ok(stats) = result else {
        return Err(problems.join("\n"));
    };
    for (i, (sent, got)) in ledger.raw_sent.iter().zip(&ledger.raw_got).enumerate() {
        // Relaxed: read after the work that counts is over (joined threads or an ended launch).
        let (sent, got) = (sent.load(Ordering::Relaxed), got.load(Ordering::Relaxed));
        if sent != got {
            problems.push(format!(
                "warp {} lane {}: fire-and-forget values sent {sent:#x}, received {got:#x}",
                i / LANES,
                i % LANES
            ));
        }
    }
    let (sent, got) = (
        // Relaxed: read after the work that counts is over (joined threads or an ended launch).
        ledger.stub_sent.load(Ordering::Relaxed),
        STUB_GOT.load(Ordering::Relaxed),
    );
    if sent != got {
        problems.push(format!("stub fire-and-forget total sent {sent:#x}, received {got:#x}"));
    }
    if !raw_region.is_quiescent() {
        problems.push("raw region: a port was left locked or pending".into());
    }
    if !stub_region.is_quiescent() {
        problems.push("stub region: a port was left locked or pending".into());
    }
    if problems.is_empty() {
        Ok(Outcome {
            stats,
            // Relaxed: read after the work that counts is over (joined threads or an ended launch).
            lane_calls: ledger.lane_calls.load(Ordering::Relaxed),
        })
    } else {
        Err(problems.join("\n"))
    }
}

/// Seeds to run: `GPU_RPC_SIMT_SEEDS=a..b` or `=a,b,c` overrides the default.
fn seeds() -> Vec<u64> {
    match std::env::var("GPU_RPC_SIMT_SEEDS") {
        Ok(s) if s.contains("..") => {
            let (a, b) = s.split_once("..").unwrap();
            (a.parse().unwrap()..b.parse().unwrap()).collect()
        }
        Ok(s) => s.split(',').map(|x| x.trim().parse().unwrap()).collect(),
        Err(_) => (1..=12).collect(),
    }
}

/// The random programs on simulated warps: every reply right, nothing left
/// pending, no deadlock, and the simulator really put different calls into
/// one `activemask` group (split by `group_mask`).
#[test]
fn divergent_warps_make_correct_calls() {
    let t0 = Instant::now();
    let mut total = sim::Stats::default();
    let mut calls = 0;
    let mut failures = Vec::new();
    for seed in seeds() {
        match run_seed(seed) {
            Ok(o) => {
                total.mask_rounds += o.stats.mask_rounds;
                total.groups += o.stats.groups;
                total.multi_lane_groups += o.stats.multi_lane_groups;
                total.rendezvous += o.stats.rendezvous;
                total.split_matches += o.stats.split_matches;
                calls += o.lane_calls;
            }
            Err(e) => failures.push(format!("seed {seed} (rerun with GPU_RPC_SIMT_SEEDS={seed}):\n{e}")),
        }
    }
    eprintln!("simt: {calls} lane-calls in {:.1?}; simulator: {total:?}", t0.elapsed());
    assert!(
        failures.is_empty(),
        "{} seed(s) failed:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    assert!(
        total.split_matches > 0 && total.multi_lane_groups > 0,
        "the simulator never grouped lanes of different calls: {total:?}"
    );
}

// ------------------------------------------- the simulator's own checks

#[test]
fn sim_rendezvous_exchange_values() {
    sim::run_warp(7, |lane| {
        let all = 0xffff_ffff;
        assert_eq!(lanes::LANE_SIZE, 32);
        assert_eq!(lanes::lane_id(), lane);
        assert_eq!(lanes::ballot(all, lane.is_multiple_of(2)), 0x5555_5555);
        assert_eq!(lanes::broadcast(all, 100 + lane), 100);
        // Two halves, each its own rendezvous (different masks).
        let half = if lane < 16 { 0xffff } else { 0xffff_0000 };
        assert_eq!(lanes::broadcast(half, lane), if lane < 16 { 0 } else { 16 });
        lanes::sync(all);
        let hint = lanes::broadcast(all, lanes::warp_hint());
        assert_eq!(hint, lanes::warp_hint());
        // group_mask: whatever `lane_mask` gave, only equal keys share it.
        let g = lanes::group_mask(lane as u64 % 3);
        assert!(g & (1 << lane) != 0);
        for o in 0..32 {
            if g & (1 << o) != 0 {
                assert_eq!(o % 3, lane % 3);
            }
        }
    });
}

#[test]
fn sim_groups_lanes_from_different_call_sites() {
    // Lanes call `lane_mask` from two different places; over many rounds the
    // simulator puts lanes of both into one mask.
    let mixed = AtomicU64::new(0);
    let stats = sim::run_warp(3, |lane| {
        for i in 0..20 {
            let (m, site) = if (lane + i).is_multiple_of(2) {
                (lanes::lane_mask(), 0)
            } else {
                (lanes::lane_mask(), 1)
            };
            let sites = lanes::ballot(m, site == 1);
            if sites != 0 && sites != m {
                // Relaxed: read after the warp joined.
                mixed.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    assert!(mixed.load(Ordering::Relaxed) > 0, "{stats:?}");
    assert!(stats.groups > stats.mask_rounds, "never more than one group: {stats:?}");
}

#[test]
fn sim_does_not_wait_for_exited_lanes() {
    sim::run_warp(1, |lane| {
        if lane >= 8 {
            return;
        }
        // Lanes 8.. have exited: a full-warp barrier waits for 0..8 only.
        lanes::sync(0xffff_ffff);
        assert_eq!(lanes::ballot(0xffff_ffff, true), 0xff);
        if lane == 3 {
            lanes::halt();
        }
        assert_eq!(lanes::ballot(0xff, true), 0xf7);
    });
}

#[test]
fn sim_reports_deadlock() {
    let config = sim::Config {
        seed: 1,
        warps: 1,
        timeout: Duration::from_secs(20),
        ..sim::Config::default()
    };
    let t0 = Instant::now();
    let err = sim::run_kernel(&config, |_, lane| match lane {
        0 => lanes::sync(0b011),
        1 => lanes::sync(0b111),
        _ => {}
    })
    .unwrap_err();
    assert!(err.contains("deadlock"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(10), "found only by the watchdog");
}

#[test]
fn sim_reports_mixed_operations_and_bad_masks() {
    let config = sim::Config {
        seed: 1,
        warps: 1,
        timeout: Duration::from_secs(20),
        ..sim::Config::default()
    };
    let err = sim::run_kernel(&config, |_, lane| {
        if lane == 0 {
            lanes::ballot(0b11, true);
        } else if lane == 1 {
            lanes::broadcast(0b11, 5);
        }
    })
    .unwrap_err();
    assert!(err.contains("different warp operations"), "{err}");

    let err = sim::run_kernel(&config, |_, lane| {
        if lane == 2 {
            lanes::sync(0b11);
        }
    })
    .unwrap_err();
    assert!(err.contains("does not name the calling lane"), "{err}");

    let err = sim::run_kernel(&config, |_, lane| {
        if lane == 1 {
            lanes::broadcast(0b11, 5);
        }
    })
    .unwrap_err();
    assert!(err.contains("has exited"), "{err}");
}

#[test]
fn sim_watchdog_ends_a_livelock() {
    let config = sim::Config {
        seed: 1,
        warps: 1,
        timeout: Duration::from_millis(500),
        ..sim::Config::default()
    };
    let err = sim::run_kernel(&config, |_, lane| {
        if lane == 0 {
            loop {
                lanes::sleep_briefly(); // waiting for something that never comes
            }
        }
    })
    .unwrap_err();
    assert!(err.contains("watchdog"), "{err}");
}

#[test]
fn sim_reports_a_lane_panic_and_stops_the_others() {
    let config = sim::Config {
        seed: 1,
        warps: 2,
        timeout: Duration::from_secs(20),
        ..sim::Config::default()
    };
    let err = sim::run_kernel(&config, |warp, lane| {
        if warp == 1 && lane == 5 {
            panic!("lane five failed");
        }
        // Everyone else waits for each other forever (lane 5 of warp 1 never
        // arrives): the failure must end them.
        loop {
            lanes::sync(0xffff_ffff);
        }
    })
    .unwrap_err();
    assert!(err.contains("lane five failed"), "{err}");
}

/// A region whose layout has fewer lanes than the simulated warp has no
/// buffer for the upper lanes: handing it to a warp's client is refused
/// before any lane can write past the packets.
#[test]
fn a_layout_narrower_than_the_warp_has_no_client() {
    let region = CpuRegion::new(Layout::new(2, 4).unwrap());
    let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        region.client();
    }))
    .expect_err("a 4-lane layout under a 32-lane warp");
    let message = refused.downcast_ref::<String>().cloned().unwrap_or_default();
    assert_eq!(message, "a layout of 4 lanes cannot serve a client warp of 32");
    assert_eq!(lanes::LANE_SIZE, 32);
    // A layout as wide as the warp has one.
    CpuRegion::new(Layout::new(2, 32).unwrap()).client();
}
