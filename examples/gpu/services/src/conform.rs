//! The randomized conformance suite of issue 12, the parts the device and the
//! host share (`no_std`, no allocation).
//!
//! One file on purpose: the program generator, the interpreter the kernel
//! runs and the model the host checks against must stay in step, and any
//! change to one is reviewed against the other two.
//!
//! Each lane runs a *program* drawn from `(seed, gid)` by [`Program`]: calls
//! of every [`Conform`](crate::Conform) method with generated arguments,
//! loops whose trip count depends on a value the host returned, if/else with
//! a call on each side, early returns and the `-> !` call
//! ([`Conform::finish`](crate::Conform::finish)), from the top level or from
//! inside a loop. [`run_lane`] interprets a program with real control flow
//! (what the GPU kernel `conform_kernel` and the CPU test run), checking every
//! returned value against the value the host is defined to return (the
//! `*_value` functions here, which the host implementation also uses).
//! [`Model`] replays the same program on the host without any RPC and yields
//! the exact sequence of calls the lane must make and the [`LaneResult`] it
//! must publish, so the host can check every lane's calls, in order, and its
//! results exactly.
//!
//! Every call carries the lane's global thread id `gid` and its step number
//! (the index of the call in the lane's program), so the host knows which
//! lane made it and where in its program it was.

use gpu_rpc::{Status, Wire};

use crate::ConformClient;

/// Longest `&str` argument, in bytes.
pub const TEXT_MAX: u32 = 300;
/// Longest `&[u32]` argument, in elements.
pub const SLICE_MAX: u32 = 100;
/// Longest `&mut [u64]` out-buffer, in elements.
pub const FILL_MAX: u32 = 40;
/// Longest tag of the fire-and-forget [`Conform::note`](crate::Conform::note), in bytes.
pub const TAG_MAX: u32 = 24;
/// Most loop iterations: a loop runs `trips_of(probe) <= TRIPS_MAX` times.
pub const TRIPS_MAX: u32 = 8;
/// `u64` words per lane in the kernel's results array ([`LaneResult::to_words`]).
pub const RESULT_WORDS: usize = 6;
/// [`LaneResult::first_bad`] when nothing went wrong.
pub const NO_BAD: u64 = u64::MAX;
/// Low half of [`LaneResult::first_bad`] for a wrong value (an error status
/// is stored as its `Status` number instead).
pub const MISMATCH: u32 = 0xffff_0000;
/// Value an out-buffer holds before the call, so a host that did not fill it
/// is seen.
pub const POISON: u64 = 0xdead_beef_dead_beef;

/// SplitMix64's output function: a bijective mix of 64 bits.
///
/// ```
/// assert_ne!(gpu_example_services::conform::mix64(1), gpu_example_services::conform::mix64(2));
/// ```
#[inline(always)]
pub fn mix64(x: u64) -> u64 {
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A SplitMix64 generator: tiny state, good enough statistics, the same on
/// every target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    #[inline(always)]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix64(self.0)
    }

    /// A number in `0..n` (`n > 0`; the small modulo bias does not matter).
    #[inline(always)]
    pub fn below(&mut self, n: u32) -> u32 {
        ((self.next_u64() >> 32) % n as u64) as u32
    }

    /// A length in `0..=max`: usually short, one time in four anywhere in the
    /// range (so both single-packet and multi-packet streams occur).
    #[inline(always)]
    pub fn len(&mut self, max: u32) -> u32 {
        if self.below(4) == 0 {
            self.below(max + 1)
        } else {
            self.below(max.min(16) + 1)
        }
    }
}

/// The per-call key the host's return values depend on, so that a reply
/// delivered to the wrong lane or for the wrong step is a wrong value.
#[inline(always)]
pub fn key(gid: u32, step: u32) -> u64 {
    mix64(((gid as u64) << 32) | step as u64)
}

/// A struct argument and result: 60 bytes on the wire, so with `gid` and
/// `step` the argument block spills over into a second packet.
#[derive(Wire, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(C)]
pub struct Rec {
    /// An identifier.
    pub id: u64,
    /// Payload.
    pub vals: [u32; 12],
    /// A signed field.
    pub neg: i16,
    /// A flag (a `bool` the host validates).
    pub flag: bool,
    /// A byte.
    pub tag: u8,
}

/// What [`Conform::mix`](crate::Conform::mix) returns.
///
/// The `f64` result is `e * 2.0 + 1.0`: the product is exact, so the result is
/// the same whether or not a compiler fuses it into one `fma`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub fn mix_value(gid: u32, step: u32, a: u64, b: i32, c: u8, d: bool, e: f64) -> (u64, f64) {
    let k = key(gid, step);
    let w = mix64(a ^ k) ^ mix64(((b as u32 as u64) << 9) | ((c as u64) << 1) | d as u64).rotate_left(7);
    (w, e * 2.0 + 1.0)
}

/// What [`Conform::record`](crate::Conform::record) returns.
#[inline(always)]
pub fn record_value(gid: u32, step: u32, r: Rec) -> Rec {
    let k = key(gid, step);
    let mut vals = [0u32; 12];
    for (i, v) in vals.iter_mut().enumerate() {
        *v = r.vals[11 - i].rotate_left(i as u32) ^ (k >> (i * 4)) as u32;
    }
    Rec {
        id: r.id ^ k,
        vals,
        neg: r.neg.wrapping_neg() ^ step as i16,
        flag: !r.flag,
        tag: r.tag.wrapping_add(gid as u8),
    }
}

/// FNV-1a over bytes, 64-bit.
#[inline(always)]
pub fn fnv64(data: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &b in data {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// What [`Conform::text`](crate::Conform::text) returns.
#[inline(always)]
pub fn text_value(gid: u32, step: u32, s: &str) -> u64 {
    fnv64(s.as_bytes()) ^ key(gid, step) ^ ((s.len() as u64) << 52)
}

/// What [`Conform::sum`](crate::Conform::sum) returns: a position-weighted
/// sum, so reordered or shifted elements change it.
#[inline(always)]
pub fn sum_value(gid: u32, step: u32, v: &[u32]) -> u64 {
    let mut s = 0u64;
    for (i, &x) in v.iter().enumerate() {
        s = s.wrapping_add((x as u64).wrapping_mul(i as u64 * 2 + 1));
    }
    s ^ key(gid, step) ^ ((v.len() as u64) << 56)
}

/// Element `i` of the out-buffer [`Conform::fill`](crate::Conform::fill) fills.
#[inline(always)]
pub fn fill_word(gid: u32, step: u32, k: u64, i: usize) -> u64 {
    mix64(key(gid, step) ^ k ^ (i as u64).wrapping_mul(0x9e37_79b9))
}

/// What [`Conform::fill`](crate::Conform::fill) returns for an out-buffer of
/// `len` elements.
#[inline(always)]
pub fn fill_value(gid: u32, step: u32, k: u64, len: usize) -> u32 {
    (mix64(k ^ key(gid, step)) as u32) ^ len as u32
}

/// The summary word of a `fill` reply: its return value and every element.
#[inline(always)]
pub fn fill_digest(ret: u32, out: &[u64]) -> u64 {
    let mut h = ret as u64;
    for &w in out {
        h = mix64(h ^ w);
    }
    h
}

/// What [`Conform::ack`](crate::Conform::ack) returns: a function of `x`
/// alone that keeps a small `x` small.
#[inline(always)]
pub fn ack_value(x: u32) -> u32 {
    x ^ 0x2a
}

/// The summary word of a `mix` reply.
#[inline(always)]
pub fn mix_word(r: (u64, f64)) -> u64 {
    r.0 ^ r.1.to_bits().rotate_left(17)
}

/// The summary word of a `record` reply (every field).
#[inline(always)]
pub fn rec_word(r: &Rec) -> u64 {
    let mut h = r.id;
    for &v in &r.vals {
        h = mix64(h ^ v as u64);
    }
    h ^ ((r.neg as u16 as u64) << 8) ^ ((r.flag as u64) << 24) ^ ((r.tag as u64) << 32)
}

/// The digest of one fire-and-forget note, as the host accumulates them (notes
/// of one lane may be served in any order, so they are compared as a set).
pub fn note_digest(step: u32, v: u64, tag: &str) -> u64 {
    mix64(fnv64(tag.as_bytes()) ^ v.rotate_left(13) ^ ((step as u64) << 40))
}

/// Fold a reply's summary word into a lane's running hash.
#[inline(always)]
pub fn fold(hash: u64, step: u32, word: u64) -> u64 {
    mix64(hash ^ word).wrapping_add(step as u64)
}

/// A lane's running hash before its first call.
pub const HASH_INIT: u64 = 0x243f_6a88_85a3_08d3;

/// Loop trip count from the probe call's reply (data-dependent: a wrong reply
/// changes the control flow, which the host sees in the call log).
#[inline(always)]
pub fn trips_of(word: u64) -> u32 {
    ((word >> 3) % (TRIPS_MAX as u64 + 1)) as u32
}

/// Which side of an if/else a probe reply selects.
#[inline(always)]
pub fn then_side(word: u64) -> bool {
    word & 1 == 0
}

/// One call a program makes: the method and its arguments (`&str` and `&[T]`
/// contents are generated from `seed`, see [`gen_text`] and [`gen_words`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Call {
    /// [`Conform::mix`](crate::Conform::mix)
    Mix {
        /// `u64` argument.
        a: u64,
        /// `i32` argument.
        b: i32,
        /// `u8` argument.
        c: u8,
        /// `bool` argument.
        d: bool,
        /// `f64` argument.
        e: f64,
    },
    /// [`Conform::record`](crate::Conform::record)
    Record(Rec),
    /// [`Conform::text`](crate::Conform::text) with `gen_text(seed, len)`.
    Text {
        /// Length in bytes.
        len: u32,
        /// Content seed.
        seed: u64,
    },
    /// [`Conform::sum`](crate::Conform::sum) with `gen_words(seed, len)`.
    Sum {
        /// Length in elements.
        len: u32,
        /// Content seed.
        seed: u64,
    },
    /// [`Conform::fill`](crate::Conform::fill) with an out-buffer of `len`.
    Fill {
        /// The `key` argument.
        key: u64,
        /// Out-buffer length in elements.
        len: u32,
    },
    /// [`Conform::ack`](crate::Conform::ack) with `x` from the group's draw.
    Ack {
        /// The argument (below 2^20 half the time).
        x: u32,
    },
    /// [`Conform::note`](crate::Conform::note) (fire-and-forget) with the tag
    /// `gen_text(seed, len)`.
    Note {
        /// The value.
        v: u64,
        /// Tag length in bytes.
        len: u32,
        /// Tag content seed.
        seed: u64,
    },
}

/// Method numbers, for logs and coverage counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Method {
    /// `mix`
    Mix = 0,
    /// `record`
    Record = 1,
    /// `text`
    Text = 2,
    /// `sum`
    Sum = 3,
    /// `fill`
    Fill = 4,
    /// `note` (fire-and-forget)
    Note = 5,
    /// `finish` (`-> !`)
    Finish = 6,
    /// `ack`
    Ack = 7,
}

/// Number of [`Method`]s.
pub const METHODS: usize = 8;

impl Method {
    /// The method's name.
    pub fn name(self) -> &'static str {
        ["mix", "record", "text", "sum", "fill", "note", "finish", "ack"][self as usize]
    }
}

impl Call {
    /// Which method this is.
    pub fn method(&self) -> Method {
        match self {
            Call::Mix { .. } => Method::Mix,
            Call::Record(_) => Method::Record,
            Call::Text { .. } => Method::Text,
            Call::Sum { .. } => Method::Sum,
            Call::Fill { .. } => Method::Fill,
            Call::Ack { .. } => Method::Ack,
            Call::Note { .. } => Method::Note,
        }
    }

    /// The summary word of the reply the host must give this call at
    /// `(gid, step)` (0 for the fire-and-forget `note`).
    pub fn expected_word(&self, gid: u32, step: u32, scratch: &mut Scratch) -> u64 {
        match *self {
            Call::Mix { a, b, c, d, e } => mix_word(mix_value(gid, step, a, b, c, d, e)),
            Call::Record(r) => rec_word(&record_value(gid, step, r)),
            Call::Text { len, seed } => text_value(gid, step, gen_text(seed, len, scratch.bytes())),
            Call::Sum { len, seed } => sum_value(gid, step, gen_words(seed, len, scratch.words())),
            Call::Fill { key: k, len } => {
                let out = &mut scratch.longs()[..len as usize];
                for (i, w) in out.iter_mut().enumerate() {
                    *w = fill_word(gid, step, k, i);
                }
                fill_digest(fill_value(gid, step, k, len as usize), out)
            }
            Call::Ack { x } => ack_value(x) as u64,
            Call::Note { .. } => 0,
        }
    }
}

/// Generated string content: `len` bytes of UTF-8 (ASCII with some 2-, 3-
/// and 4-byte characters), written to `buf` (at least `len` bytes).
#[inline(always)]
pub fn gen_text(seed: u64, len: u32, buf: &mut [u8]) -> &str {
    let len = len as usize;
    let mut rng = Rng(seed);
    let mut i = 0;
    while i < len {
        let r = rng.next_u64();
        let wide: &[u8] = match r % 10 {
            0 => "é".as_bytes(),
            1 => "世".as_bytes(),
            2 => "🦀".as_bytes(),
            _ => &[],
        };
        if !wide.is_empty() && i + wide.len() <= len {
            buf[i..i + wide.len()].copy_from_slice(wide);
            i += wide.len();
        } else {
            buf[i] = b' ' + ((r >> 8) % 95) as u8;
            i += 1;
        }
    }
    core::str::from_utf8(&buf[..len]).unwrap_or("")
}

/// Generated slice content: `len` words written to `buf` (at least `len`).
#[inline(always)]
pub fn gen_words(seed: u64, len: u32, buf: &mut [u32]) -> &[u32] {
    let mut rng = Rng(seed);
    let out = &mut buf[..len as usize];
    for w in out.iter_mut() {
        *w = rng.next_u64() as u32;
    }
    out
}

/// One lane's scratch memory for generated arguments and out-buffers: 400
/// bytes viewed as bytes, `u32`s or `u64`s (one call uses one view at a time;
/// one buffer keeps the GPU stack frame small).
#[derive(Clone, Debug)]
pub struct Scratch([u64; 50]);

impl Default for Scratch {
    fn default() -> Self {
        Scratch([0; 50])
    }
}

impl Scratch {
    /// The memory as 400 bytes (at least [`TEXT_MAX`]).
    #[inline(always)]
    pub fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: 50 initialized `u64`s are 400 initialized bytes; `u8` has no
        // alignment requirement and every bit pattern is valid; the slice
        // borrows `self` mutably, so it is the only view.
        unsafe { core::slice::from_raw_parts_mut(self.0.as_mut_ptr().cast::<u8>(), 400) }
    }

    /// The memory as 100 `u32`s (at least [`SLICE_MAX`]).
    #[inline(always)]
    pub fn words(&mut self) -> &mut [u32] {
        // SAFETY: as in `bytes`; a `u64` array is 8-aligned, more than `u32`
        // needs, and 400 bytes are exactly 100 `u32`s.
        unsafe { core::slice::from_raw_parts_mut(self.0.as_mut_ptr().cast::<u32>(), 100) }
    }

    /// The memory as 50 `u64`s (at least [`FILL_MAX`]).
    #[inline(always)]
    pub fn longs(&mut self) -> &mut [u64] {
        &mut self.0
    }
}

/// A step of a program at the top level.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Op {
    /// A straight call.
    Call(Call),
    /// Make the probe call, then loop `trips_of(reply)` times; iteration `j`
    /// is [`Program::iteration`]`(k, j)`.
    Loop {
        /// The call whose reply sets the trip count.
        probe: Call,
    },
    /// Make the probe call; on `then_side(reply)` make the `then` branch's
    /// call, otherwise the `else` branch's ([`Program::branch_call`]).
    Branch {
        /// The call whose reply picks the side.
        probe: Call,
    },
    /// Return early: the program ends.
    Return,
    /// Call `finish` (`-> !`): the program ends by halting the lane.
    Finish,
}

/// One loop iteration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Iter {
    /// A call inside the loop.
    Call(Call),
    /// `continue` without a call.
    Skip,
    /// `break` out of the loop.
    Break,
    /// `return` from inside the loop: the program ends.
    Return,
    /// `finish` from inside the loop.
    Finish,
}

/// Tags of the draws of a program, so each is independent of the others.
#[derive(Clone, Copy)]
#[repr(u32)]
enum Draw {
    Op = 1,
    Probe = 2,
    Iter = 3,
    Then = 4,
    Else = 5,
    Exit = 6,
}

/// A lane's program under a seed: what it does at top-level op `k`, loop
/// iteration `j` and each branch side, each drawn from its own position, so
/// lanes whose control flow differs for a while (other trip counts, other
/// branch sides) meet again at the same op.
///
/// Lanes come in *groups* (a power-of-two run of global thread ids, from 1
/// lane to 32, chosen per run of 32 ids by the seed) that share the *shape*
/// of their programs: which op comes next, which method each call site calls.
/// Arguments (string and slice lengths and contents, values), and so the
/// replies, the trip counts and the branch sides, are per lane; so are early
/// exits. A group of 1 gives lanes of one warp unrelated programs (every call
/// from its own call site); larger groups give calls made by several lanes at
/// once, with streams of different lengths, from lanes that diverged and
/// reconverged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Program {
    key: u64,
    gid: u32,
    group: u32,
    bits: u32,
}

impl Program {
    /// The program of lane `gid` under `seed`.
    pub fn new(seed: u64, gid: u32) -> Program {
        let key = mix64(seed ^ 0x5851_f42d_4c95_7f2d);
        let bits = [0u32, 2, 3, 5][(mix64(key ^ (gid >> 5) as u64) % 4) as usize];
        Program {
            key,
            gid,
            group: gid >> bits,
            bits,
        }
    }

    /// How many lanes share this lane's program shape (1, 4, 8 or 32).
    pub fn group_size(&self) -> u32 {
        1 << self.bits
    }

    /// The generator of draw `what` at position `(k, j)`: shared by the
    /// lane's group, or the lane's own.
    #[inline(always)]
    fn rng(&self, shared: bool, what: Draw, k: u32, j: u32) -> Rng {
        let who = if shared {
            (1u64 << 40) | self.group as u64
        } else {
            self.gid as u64
        };
        Rng(mix64(self.key ^ who.wrapping_mul(0x9e37_79b9_7f4a_7c15))
            ^ mix64(((k as u64) << 32) | ((j as u64) << 8) | what as u32 as u64))
    }

    /// Top-level op `k`.
    #[inline(always)]
    pub fn op(&self, k: u32) -> Op {
        // Early exits are the lane's own: part of a group leaves.
        match self.rng(false, Draw::Exit, k, 0).below(100) {
            0..=1 => return Op::Return,
            2..=3 => return Op::Finish,
            _ => {}
        }
        match self.rng(true, Draw::Op, k, 0).below(100) {
            0..=44 => Op::Call(self.call(Draw::Op, k, 0, true)),
            45..=69 => Op::Loop {
                probe: self.call(Draw::Probe, k, 0, false),
            },
            _ => Op::Branch {
                probe: self.call(Draw::Probe, k, 0, false),
            },
        }
    }

    /// Iteration `j` of the loop at top-level op `k`: whether this lane
    /// continues, breaks or leaves is its own; the method called is the
    /// group's.
    #[inline(always)]
    pub fn iteration(&self, k: u32, j: u32) -> Iter {
        match self.rng(false, Draw::Iter, k, j).below(100) {
            0..=11 => Iter::Skip,
            12..=16 => Iter::Break,
            17 => Iter::Return,
            18 => Iter::Finish,
            _ => Iter::Call(self.call(Draw::Iter, k, j + 1, true)),
        }
    }

    /// The call on the chosen side of the branch at top-level op `k`; the two
    /// sides call different things, so a wrong probe reply changes the calls
    /// that follow.
    #[inline(always)]
    pub fn branch_call(&self, k: u32, then: bool) -> Call {
        self.call(if then { Draw::Then } else { Draw::Else }, k, 0, true)
    }

    /// A call: the method from the group's draw (`any` includes the
    /// fire-and-forget `note`; probes need a reply), the arguments from the
    /// lane's own.
    #[inline(always)]
    fn call(&self, what: Draw, k: u32, j: u32, any: bool) -> Call {
        let method = self.rng(true, what, k, j | 0x80_0000).below(if any { 7 } else { 6 });
        let r = &mut self.rng(false, what, k, j | 0x80_0000);
        match method {
            0 => {
                let a = r.next_u64();
                let bits = r.next_u64();
                let e = match bits % 16 {
                    0 => [0.0, -0.0, f64::MIN_POSITIVE, 1e300, f64::INFINITY, 4.9e-324][(bits >> 8) as usize % 6],
                    // Exact: an integer below 2^53 times a power of two.
                    _ => (bits >> 11) as f64 * (1.0 / 1024.0) - 4.0e12,
                };
                Call::Mix {
                    a,
                    b: (bits >> 7) as i32,
                    c: (bits >> 40) as u8,
                    d: bits & 0x8 != 0,
                    e,
                }
            }
            1 => {
                let id = r.next_u64();
                let mut vals = [0u32; 12];
                for v in vals.iter_mut() {
                    *v = r.next_u64() as u32;
                }
                let bits = r.next_u64();
                Call::Record(Rec {
                    id,
                    vals,
                    neg: bits as i16,
                    flag: bits & 0x1_0000 != 0,
                    tag: (bits >> 24) as u8,
                })
            }
            2 => Call::Text {
                len: r.len(TEXT_MAX),
                seed: r.next_u64(),
            },
            3 => Call::Sum {
                len: r.len(SLICE_MAX),
                seed: r.next_u64(),
            },
            4 => Call::Fill {
                key: r.next_u64(),
                len: r.len(FILL_MAX),
            },
            5 => {
                // The group's draw: lanes at the same point share `x`.
                let s = &mut self.rng(true, what, k, j | 0x40_0000);
                Call::Ack {
                    x: if s.below(2) == 0 {
                        s.below(1 << 20)
                    } else {
                        s.next_u64() as u32
                    },
                }
            }
            _ => Call::Note {
                v: r.next_u64(),
                len: r.len(TAG_MAX),
                seed: r.next_u64(),
            },
        }
    }
}

/// How a lane's program ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum End {
    /// It ran all its top-level steps.
    Completed = 1,
    /// It returned early.
    Returned = 2,
    /// It called `finish` (the lane halted).
    Finished = 3,
}

/// What a lane publishes in the results array before it ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaneResult {
    /// Calls made, `finish` included.
    pub calls: u32,
    /// Replies that differed from the defined value.
    pub mismatches: u32,
    /// Calls that returned an error status.
    pub errors: u32,
    /// The first wrong reply or error: `step << 32 | MISMATCH` or
    /// `step << 32 | status`; [`NO_BAD`] if none.
    pub first_bad: u64,
    /// The lane's running hash of every reply's summary word.
    pub hash: u64,
    /// How the program ended.
    pub end: End,
}

impl LaneResult {
    /// The words the kernel stores, [`RESULT_WORDS`] of them.
    pub fn to_words(&self) -> [u64; RESULT_WORDS] {
        [
            self.calls as u64,
            self.mismatches as u64,
            self.errors as u64,
            self.first_bad,
            self.hash,
            self.end as u64,
        ]
    }
}

/// A lane's state while [`run_lane`] interprets its program.
struct Lane {
    gid: u32,
    step: u32,
    mismatches: u32,
    errors: u32,
    first_bad: u64,
    hash: u64,
    scratch: Scratch,
}

impl Lane {
    fn result(&self, calls: u32, end: End) -> LaneResult {
        LaneResult {
            calls,
            mismatches: self.mismatches,
            errors: self.errors,
            first_bad: self.first_bad,
            hash: self.hash,
            end,
        }
    }

    #[inline(always)]
    fn check(&mut self, step: u32, ok: bool) {
        if !ok {
            self.mismatches += 1;
            if self.first_bad == NO_BAD {
                self.first_bad = ((step as u64) << 32) | MISMATCH as u64;
            }
        }
    }

    #[inline(always)]
    fn error(&mut self, step: u32, status: Status) -> u64 {
        self.errors += 1;
        if self.first_bad == NO_BAD {
            self.first_bad = ((step as u64) << 32) | status as u32 as u64;
        }
        mix64(status as u32 as u64 ^ 0xe7)
    }

    /// Make `call` through `c`, check the reply against the defined value,
    /// fold its summary word into the hash and return the word. Inlined at
    /// every use, so each place in [`run_lane`] that calls it is its own set
    /// of call sites, one per method (lanes of a warp reach them in any
    /// combination).
    #[inline(always)]
    fn call(&mut self, c: &ConformClient<'_, '_>, call: Call) -> u64 {
        let (gid, step) = (self.gid, self.step);
        self.step += 1;
        let word = match call {
            Call::Mix { a, b, c: x, d, e } => match c.try_mix(gid, step, a, b, x, d, e) {
                Ok(got) => {
                    let want = mix_value(gid, step, a, b, x, d, e);
                    self.check(step, got.0 == want.0 && got.1.to_bits() == want.1.to_bits());
                    mix_word(got)
                }
                Err(err) => self.error(step, err.status),
            },
            Call::Record(r) => match c.try_record(gid, step, r) {
                Ok(got) => {
                    self.check(step, got == record_value(gid, step, r));
                    rec_word(&got)
                }
                Err(err) => self.error(step, err.status),
            },
            Call::Text { len, seed } => {
                let s = gen_text(seed, len, self.scratch.bytes());
                let want = text_value(gid, step, s);
                match c.try_text(gid, step, s) {
                    Ok(got) => {
                        self.check(step, got == want);
                        got
                    }
                    Err(err) => self.error(step, err.status),
                }
            }
            Call::Sum { len, seed } => {
                let v = gen_words(seed, len, self.scratch.words());
                let want = sum_value(gid, step, v);
                match c.try_sum(gid, step, v) {
                    Ok(got) => {
                        self.check(step, got == want);
                        got
                    }
                    Err(err) => self.error(step, err.status),
                }
            }
            Call::Fill { key: k, len } => {
                let out = &mut self.scratch.longs()[..len as usize];
                out.fill(POISON);
                match c.try_fill(gid, step, k, out) {
                    Ok(got) => {
                        let mut ok = got == fill_value(gid, step, k, len as usize);
                        for (i, &w) in out.iter().enumerate() {
                            ok &= w == fill_word(gid, step, k, i);
                        }
                        let word = fill_digest(got, out);
                        self.check(step, ok);
                        word
                    }
                    Err(err) => self.error(step, err.status),
                }
            }
            Call::Ack { x } => match c.try_ack(gid, step, x) {
                Ok(got) => {
                    self.check(step, got == ack_value(x));
                    got as u64
                }
                Err(err) => self.error(step, err.status),
            },
            Call::Note { v, len, seed } => {
                c.note(gid, step, v, gen_text(seed, len, self.scratch.bytes()));
                0
            }
        };
        self.hash = fold(self.hash, step, word);
        word
    }
}

/// Run lane `gid`'s program under `seed` for `steps` top-level ops, calling
/// the host through `c`. Before the lane ends (after its last op, at an early
/// return, or just before the `-> !` call `finish`), `publish` receives its
/// [`LaneResult`]; the kernel stores it with [`LaneResult::to_words`].
///
/// Written as a GPU programmer writes a kernel: a `match` on the op with a
/// call in each arm, a loop with a per-lane, data-dependent trip count and
/// `continue` / `break` / `return` inside, an if/else calling on both sides.
#[inline(always)]
pub fn run_lane(c: &ConformClient<'_, '_>, seed: u64, gid: u32, steps: u32, publish: impl FnOnce(&LaneResult)) {
    let prog = Program::new(seed, gid);
    let mut lane = Lane {
        gid,
        step: 0,
        mismatches: 0,
        errors: 0,
        first_bad: NO_BAD,
        hash: HASH_INIT,
        scratch: Scratch::default(),
    };
    for k in 0..steps {
        match prog.op(k) {
            Op::Call(call) => {
                lane.call(c, call);
            }
            Op::Loop { probe } => {
                let trips = trips_of(lane.call(c, probe));
                let mut j = 0;
                while j < trips {
                    let it = prog.iteration(k, j);
                    j += 1;
                    match it {
                        Iter::Skip => continue,
                        Iter::Break => break,
                        Iter::Call(call) => {
                            lane.call(c, call);
                        }
                        Iter::Return => {
                            publish(&lane.result(lane.step, End::Returned));
                            return;
                        }
                        Iter::Finish => {
                            publish(&lane.result(lane.step + 1, End::Finished));
                            c.finish(gid, lane.step);
                        }
                    }
                }
            }
            Op::Branch { probe } => {
                if then_side(lane.call(c, probe)) {
                    let call = prog.branch_call(k, true);
                    lane.call(c, call);
                } else {
                    let call = prog.branch_call(k, false);
                    lane.call(c, call);
                }
            }
            Op::Return => {
                publish(&lane.result(lane.step, End::Returned));
                return;
            }
            Op::Finish => {
                publish(&lane.result(lane.step + 1, End::Finished));
                c.finish(gid, lane.step);
            }
        }
    }
    publish(&lane.result(lane.step, End::Completed));
}

/// One call the [`Model`] expects.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Want {
    /// A call of one of the returning or fire-and-forget methods.
    Call(Call),
    /// `finish` (the lane's last call).
    Finish,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Before top-level op `k`.
    Top {
        k: u32,
    },
    /// Before iteration `j` of `trips` of op `k`'s loop.
    Loop {
        k: u32,
        j: u32,
        trips: u32,
    },
    /// Before the call on one side of op `k`'s branch.
    Side {
        k: u32,
        then: bool,
    },
    Done,
}

/// The host's model of one lane: replays the lane's program with the replies
/// the host must give and yields the calls the lane must make, in order, with
/// their step numbers; once exhausted, [`result`](Model::result) is what the
/// lane must publish. Independent of [`run_lane`] (an explicit state machine,
/// no RPC), so the two cross-check each other.
#[derive(Clone, Debug)]
pub struct Model {
    prog: Program,
    gid: u32,
    steps: u32,
    step: u32,
    hash: u64,
    state: State,
    end: Option<End>,
}

impl Model {
    /// The model of lane `gid`'s program under `seed`, `steps` top-level ops.
    pub fn new(seed: u64, gid: u32, steps: u32) -> Model {
        Model {
            prog: Program::new(seed, gid),
            gid,
            steps,
            step: 0,
            hash: HASH_INIT,
            state: State::Top { k: 0 },
            end: None,
        }
    }

    /// The next expected call and its step, or `None` once the program has
    /// ended. `scratch` is working memory for the expected replies.
    pub fn next_call(&mut self, scratch: &mut Scratch) -> Option<(u32, Want)> {
        loop {
            match self.state {
                State::Done => return None,
                State::Side { k, then } => {
                    self.state = State::Top { k: k + 1 };
                    let call = self.prog.branch_call(k, then);
                    return Some(self.emit(call, scratch).0);
                }
                State::Loop { k, j, trips } => {
                    if j == trips {
                        self.state = State::Top { k: k + 1 };
                        continue;
                    }
                    self.state = State::Loop { k, j: j + 1, trips };
                    match self.prog.iteration(k, j) {
                        Iter::Skip => {}
                        Iter::Break => self.state = State::Top { k: k + 1 },
                        Iter::Call(call) => return Some(self.emit(call, scratch).0),
                        Iter::Return => return self.end_with(End::Returned),
                        Iter::Finish => return self.end_with(End::Finished),
                    }
                }
                State::Top { k } => {
                    if k == self.steps {
                        return self.end_with(End::Completed);
                    }
                    self.state = State::Top { k: k + 1 };
                    match self.prog.op(k) {
                        Op::Call(call) => return Some(self.emit(call, scratch).0),
                        Op::Loop { probe } => {
                            let (next, word) = self.emit(probe, scratch);
                            self.state = State::Loop {
                                k,
                                j: 0,
                                trips: trips_of(word),
                            };
                            return Some(next);
                        }
                        Op::Branch { probe } => {
                            let (next, word) = self.emit(probe, scratch);
                            self.state = State::Side {
                                k,
                                then: then_side(word),
                            };
                            return Some(next);
                        }
                        Op::Return => return self.end_with(End::Returned),
                        Op::Finish => return self.end_with(End::Finished),
                    }
                }
            }
        }
    }

    fn emit(&mut self, call: Call, scratch: &mut Scratch) -> ((u32, Want), u64) {
        let step = self.step;
        self.step += 1;
        let word = call.expected_word(self.gid, step, scratch);
        self.hash = fold(self.hash, step, word);
        ((step, Want::Call(call)), word)
    }

    fn end_with(&mut self, end: End) -> Option<(u32, Want)> {
        self.state = State::Done;
        self.end = Some(end);
        if end == End::Finished {
            let step = self.step;
            self.step += 1;
            Some((step, Want::Finish))
        } else {
            None
        }
    }

    /// What the lane must publish, once [`next_call`](Model::next_call) has
    /// returned `None` (before that, `None`).
    pub fn result(&self) -> Option<LaneResult> {
        if self.state != State::Done {
            return None;
        }
        Some(LaneResult {
            calls: self.step,
            mismatches: 0,
            errors: 0,
            first_bad: NO_BAD,
            hash: self.hash,
            end: self.end?,
        })
    }
}
