//! A simulated 32-lane SIMT warp for host tests: built only with
//! `RUSTFLAGS="--cfg gpu_rpc_simt"` (use a separate target directory, e.g.
//! `CARGO_TARGET_DIR=target/simt`), where it replaces the host's one-lane
//! [`lanes`](super) implementation. `tests/simt.rs` drives the protocol with it.
//!
//! # What it models
//!
//! * **A warp is 32 host threads.** [`run_warp`] (one warp) and
//!   [`run_kernel`] (several) start them, each knowing its lane id through a
//!   thread-local, and join them. A lane whose closure returns, or that calls
//!   [`lanes::halt`](super::halt), has *exited*. [`LANE_SIZE`] is 32.
//! * **Independent thread scheduling, adversarially.** [`lane_mask`](super::lane_mask)
//!   (`activemask`) parks the calling lane. When every live lane of the warp
//!   is parked — in `lane_mask` or blocked in a warp operation — a seeded RNG
//!   partitions the lanes parked in `lane_mask` into random groups (often
//!   one group of all of them) and each lane gets its group's mask; now and
//!   then some groups are held back and regrouped with later arrivals. So
//!   lanes from different call sites, loop iterations and opcodes end up in
//!   one mask, as they may on sm_70+ (where the compiler can share one copy
//!   of the call path between call sites and the scheduler can converge
//!   lanes anywhere).
//! * **`.sync` warp operations are rendezvous** among exactly the lanes of
//!   their `mask`: [`ballot`](super::ballot) (`vote.sync.ballot`),
//!   [`broadcast`](super::broadcast) (`shfl.sync.idx` from the mask's first
//!   lane), [`sync`](super::sync) (`bar.warp.sync`) and the match of
//!   [`group_mask`](super::group_mask) (`match.any.sync` on the key, after a
//!   `lane_mask`). A lane waits until every non-exited lane of the mask has
//!   arrived at a warp operation *with that mask* — not necessarily the same
//!   instruction, as sm_70 allows — then the values are exchanged. Lanes of
//!   the mask that have exited are not waited for.
//! * **Everything undefined on hardware is a test failure** with a message
//!   that names the lanes: a mask that leaves out the calling lane or names
//!   lanes beyond 32; lanes of one mask meeting at different kinds of
//!   operation (a `ballot` with a `broadcast`: PTX requires "the same
//!   qualifiers and the same membermask"; [`Config::lax_ops`] lets them go
//!   on instead, to see what a broken protocol does to the calls); a
//!   `broadcast` whose source lane has exited; a **deadlock** (every live
//!   lane blocked, none in `lane_mask`, no rendezvous complete: reported at
//!   once with every lane's state); and a **watchdog** (the run lasting longer than
//!   [`Config::timeout`], which catches livelocks such as lanes spinning on a
//!   reply that never comes). A failure aborts every lane of the kernel (the
//!   others unwind at their next warp operation or
//!   [`sleep_briefly`](super::sleep_briefly)) and comes back as the `Err` of
//!   [`run_kernel`] (a panic from [`run_warp`]).
//! * [`split_by`](super::split_by) just runs its closure, as on NVPTX: the
//!   groups come from `group_mask`. [`warp_hint`](super::warp_hint) is the
//!   same for the lanes of one warp and differs between warps.
//!   [`sleep_briefly`](super::sleep_briefly) yields.
//!
//! A thread that is not a simulated lane (a server thread, a CPU-backend
//! thread) keeps the host's one-lane behaviour: lane 0, mask 1.
//!
//! # What it can catch
//!
//! Protocol bugs that depend on *which lanes share a call*: lanes of one mask
//! acting on different ports or opcodes, a value only one lane computed used
//! by others, a lane publishing (flipping the outbox) before the others of
//! its group wrote their slots, lanes of one group taking different
//! sequences of warp operations, groups waiting for lanes that exited or
//! that are in another group. They show up as wrong replies, packets the
//! server finds tagged for another call, rendezvous failures, deadlocks or
//! timeouts.
//!
//! # What it cannot catch
//!
//! * **Memory-model effects of real GPUs.** Shared memory here is the host's
//!   (x86 is close to sequentially consistent, and a rendezvous takes a
//!   mutex, which orders everything); a missing system-scope fence, a fence
//!   that NVPTX weakens, PCIe write ordering or stale GPU caches are
//!   invisible. The loom tests (`tests/loom.rs`) check the fences, with
//!   one-lane warps.
//! * **The hardware's grouping policy.** Real warps regroup when the
//!   scheduler and the compiler's reconvergence points say so; this model
//!   regroups only at `lane_mask` and only when every lane is parked, with a
//!   random partition. It is more adversarial than hardware in mixing call
//!   sites, less in timing (a group never starts while another lane of its
//!   warp runs free code). A run is reproducible from its seed only as far
//!   as the host's thread timing allows (for a correct protocol the sequence
//!   of groupings is the seed's; a failure's exact shape may vary).
//! * **AMDGCN.** Wavefronts run in lock step there and `split_by` peels
//!   groups; this models NVPTX's independent thread scheduling only.
//! * **Compiler effects**: what LLVM's NVPTX back end does with convergent
//!   operations, register pressure, code shared between call sites.
//! * Real-GPU runs (`examples/gpu`, `gpu_conform`) remain the check for all
//!   of these.

use std::cell::RefCell;
use std::fmt::Write as _;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Lanes in a simulated warp.
pub const LANE_SIZE: u32 = 32;

const FULL: u64 = (1u64 << LANE_SIZE) - 1;

/// How long a parked lane sleeps before it looks at the kernel's abort flag
/// and the watchdog again (a failure in another warp does not wake it).
const POLL: Duration = Duration::from_millis(20);

/// How a simulated kernel runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// Seeds the grouping RNG of every warp (warp `w` uses `seed` mixed with `w`).
    pub seed: u64,
    /// Warps to run at once (32 host threads each).
    pub warps: u32,
    /// The watchdog: the whole run must finish within this.
    pub timeout: Duration,
    /// Let lanes of one mask that meet at different kinds of warp operation
    /// (a `ballot` with a `broadcast`, ...) go on, each computing its own
    /// operation's result from the values the others passed, instead of
    /// failing. Hardware gives no such guarantee; this only lets a broken
    /// protocol run on far enough to show what it does to the calls.
    pub lax_ops: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            seed: 0,
            warps: 1,
            timeout: Duration::from_secs(20),
            lax_ops: false,
        }
    }
}

/// What the simulator did during a run, summed over its warps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Times the lanes parked in `lane_mask` were grouped.
    pub mask_rounds: u64,
    /// Masks handed out by those rounds.
    pub groups: u64,
    /// Masks with more than one lane.
    pub multi_lane_groups: u64,
    /// Completed rendezvous (warp operations, counted once per group).
    pub rendezvous: u64,
    /// `match.any.sync` rendezvous whose lanes passed more than one key:
    /// lanes making different calls that `lane_mask` put together and
    /// `group_mask` separated.
    pub split_matches: u64,
}

impl Stats {
    fn add(&mut self, o: &Stats) {
        self.mask_rounds += o.mask_rounds;
        self.groups += o.groups;
        self.multi_lane_groups += o.multi_lane_groups;
        self.rendezvous += o.rendezvous;
        self.split_matches += o.split_matches;
    }
}

/// Run `f(lane)` on the 32 lanes of one simulated warp and join them; panics
/// with the simulator's report if the run fails (a lane panicked, a warp
/// operation was misused, deadlock, watchdog).
pub fn run_warp<F: Fn(u32) + Sync>(seed: u64, f: F) -> Stats {
    let config = Config {
        seed,
        ..Config::default()
    };
    match run_kernel(&config, |_, lane| f(lane)) {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    }
}

/// Run `f(warp, lane)` on `config.warps` simulated warps of 32 lanes at once
/// and join them all. `Err` holds the first failure: a lane's panic message
/// or the simulator's report (misused warp operation, deadlock, watchdog),
/// with the state of the warp's lanes.
pub fn run_kernel<F: Fn(u32, u32) + Sync>(config: &Config, f: F) -> Result<Stats, String> {
    let kernel = Arc::new(Kernel {
        aborted: AtomicBool::new(false),
        failure: Mutex::new(None),
        deadline: Instant::now() + config.timeout,
        timeout: config.timeout,
        lax_ops: config.lax_ops,
    });
    let warps: Vec<Arc<Warp>> = (0..config.warps)
        .map(|w| {
            Arc::new(Warp {
                index: w,
                hint: next_hint(),
                kernel: Arc::clone(&kernel),
                state: Mutex::new(State {
                    lanes: [Lane::Running; LANE_SIZE as usize],
                    result: [None; LANE_SIZE as usize],
                    rng: splitmix(config.seed ^ (w as u64 + 1).wrapping_mul(0xa076_1d64_78bd_642f)),
                    stats: Stats::default(),
                }),
                wake: core::array::from_fn(|_| Condvar::new()),
            })
        })
        .collect();
    let f = &f;
    std::thread::scope(|s| {
        for warp in &warps {
            for lane in 0..LANE_SIZE {
                let warp = Arc::clone(warp);
                std::thread::Builder::new()
                    .name(format!("simt-w{}-l{lane}", warp.index))
                    .spawn_scoped(s, move || lane_main(warp, lane, f))
                    .expect("spawn a simulated lane");
            }
        }
    });
    let failure = kernel.failure.lock().unwrap_or_else(PoisonError::into_inner).take();
    match failure {
        Some(e) => Err(e),
        None => {
            let mut stats = Stats::default();
            for w in &warps {
                stats.add(&w.lock().stats);
            }
            Ok(stats)
        }
    }
}

/// The unwind payload of a lane ended because another lane failed.
struct Aborted;

fn lane_main<F: Fn(u32, u32) + Sync>(warp: Arc<Warp>, lane: u32, f: &F) {
    CURRENT.with(|c| *c.borrow_mut() = Some((Arc::clone(&warp), lane)));
    let r = catch_unwind(AssertUnwindSafe(|| f(warp.index, lane)));
    CURRENT.with(|c| *c.borrow_mut() = None);
    let mut st = warp.lock();
    if let Err(payload) = r {
        if payload.is::<crate::lanes::Halt>() || payload.is::<Aborted>() {
            // `halt` is an exit; an aborted lane's failure is recorded already.
        } else {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(non-string panic payload)".to_string());
            let dump = warp.dump(&st);
            warp.fail(
                &mut st,
                format!("warp {} lane {lane} panicked: {msg}\n{dump}", warp.index),
            );
        }
    }
    st.lanes[lane as usize] = Lane::Exited;
    warp.progress(&mut st);
}

thread_local! {
    static CURRENT: RefCell<Option<(Arc<Warp>, u32)>> = const { RefCell::new(None) };
}

fn current() -> Option<(Arc<Warp>, u32)> {
    CURRENT.with(|c| c.borrow().clone())
}

/// The kind of a warp operation; lanes of one mask must meet at the same kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Ballot,
    Broadcast,
    Match,
    Sync,
}

#[derive(Clone, Copy, Debug)]
enum Lane {
    /// Running code of its own (or not started yet).
    Running,
    /// Parked in `lane_mask`.
    InMask,
    /// Blocked in a warp operation over `mask`, contributing `value`.
    InOp { op: Op, mask: u64, value: u64 },
    /// Returned, halted or unwound.
    Exited,
}

struct State {
    lanes: [Lane; LANE_SIZE as usize],
    /// What a parked lane gets when it is released.
    result: [Option<u64>; LANE_SIZE as usize],
    rng: u64,
    stats: Stats,
}

struct Kernel {
    /// Set once a failure is recorded. Relaxed loads suffice: it only makes
    /// lanes stop early, and the message itself is read under `failure`'s lock.
    aborted: AtomicBool,
    failure: Mutex<Option<String>>,
    deadline: Instant,
    timeout: Duration,
    lax_ops: bool,
}

struct Warp {
    index: u32,
    hint: u32,
    kernel: Arc<Kernel>,
    state: Mutex<State>,
    /// One condition variable per lane, so a release wakes only its lanes.
    wake: [Condvar; LANE_SIZE as usize],
}

impl Warp {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A lane never panics while holding the lock (it drops it first), but
        // keep going on a poisoned lock anyway: the state stays consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn aborted(&self) -> bool {
        // Relaxed: see `Kernel::aborted`.
        self.kernel.aborted.load(Ordering::Relaxed)
    }

    /// Record the kernel's first failure and wake this warp's parked lanes
    /// (other warps notice within `POLL`).
    fn fail(&self, _st: &mut State, msg: String) {
        {
            let mut f = self.kernel.failure.lock().unwrap_or_else(PoisonError::into_inner);
            if f.is_none() {
                *f = Some(msg);
            }
        }
        // Relaxed: see `Kernel::aborted`.
        self.kernel.aborted.store(true, Ordering::Relaxed);
        for c in &self.wake {
            c.notify_one();
        }
    }

    /// Fail if the watchdog expired; unwind this lane (dropping the lock
    /// first) if the kernel failed.
    fn check<'w>(&'w self, mut st: MutexGuard<'w, State>) -> MutexGuard<'w, State> {
        if !self.aborted() && Instant::now() >= self.kernel.deadline {
            let dump = self.dump(&st);
            self.fail(
                &mut st,
                format!(
                    "simulated kernel still running after {:?} (watchdog: a livelock, or a lane waiting for a \
                     reply that never comes)\n{dump}",
                    self.kernel.timeout
                ),
            );
        }
        if self.aborted() {
            drop(st);
            resume_unwind(Box::new(Aborted));
        }
        st
    }

    /// Wait until `lane` is released and return its result.
    fn park<'w>(&'w self, lane: u32, mut st: MutexGuard<'w, State>) -> u64 {
        loop {
            if let Some(r) = st.result[lane as usize].take() {
                return r;
            }
            st = self.check(st);
            st = self.wake[lane as usize]
                .wait_timeout(st, POLL)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    fn release(&self, st: &mut State, lane: usize, result: u64) {
        st.lanes[lane] = Lane::Running;
        st.result[lane] = Some(result);
        self.wake[lane].notify_one();
    }

    /// Complete every rendezvous that can complete; when every live lane is
    /// blocked, group the lanes parked in `lane_mask`, or report a deadlock.
    fn progress(&self, st: &mut State) {
        if self.aborted() {
            return;
        }
        loop {
            let mut done = false;
            for l in 0..LANE_SIZE as usize {
                if let Lane::InOp { mask, .. } = st.lanes[l] {
                    match self.try_complete(st, mask) {
                        Ok(true) => done = true,
                        Ok(false) => {}
                        Err(msg) => {
                            let dump = self.dump(st);
                            self.fail(st, format!("warp {}: {msg}\n{dump}", self.index));
                            return;
                        }
                    }
                }
            }
            if !done {
                break;
            }
        }
        let mut in_mask = 0u64;
        let mut live = 0u64;
        for (l, s) in st.lanes.iter().enumerate() {
            match s {
                Lane::Running => return,
                Lane::InMask => in_mask |= 1 << l,
                Lane::InOp { .. } => {}
                Lane::Exited => continue,
            }
            live |= 1 << l;
        }
        if live == 0 {
            return;
        }
        if in_mask == 0 {
            let dump = self.dump(st);
            self.fail(
                st,
                format!(
                    "warp {}: deadlock: every live lane waits in a warp operation for lanes that will never \
                     arrive\n{dump}",
                    self.index
                ),
            );
            return;
        }
        self.group(st, in_mask);
    }

    /// Partition the lanes in `parked` (all parked in `lane_mask`) into random
    /// groups and release them, now and then holding some groups back.
    fn group(&self, st: &mut State, parked: u64) {
        let r = next(&mut st.rng);
        // Half the time one group of every parked lane (the most mixing);
        // otherwise 2..=5 groups by random labels.
        let k = if r & 1 == 0 { 1 } else { 2 + (r >> 1) % 4 };
        let mut masks = [0u64; 5];
        for l in iter(parked) {
            let label = if k == 1 { 0 } else { next(&mut st.rng) % k };
            masks[label as usize] |= 1 << l;
        }
        // A quarter of the time, release only some of the groups (at least
        // one): the others wait and are regrouped with later arrivals.
        let hold = k > 1 && next(&mut st.rng).is_multiple_of(4);
        let mut released = 0;
        st.stats.mask_rounds += 1;
        for (i, &m) in masks.iter().enumerate() {
            if m == 0 || (hold && i > 0 && next(&mut st.rng) & 1 == 0) {
                continue;
            }
            released |= m;
            st.stats.groups += 1;
            if m.count_ones() > 1 {
                st.stats.multi_lane_groups += 1;
            }
            for l in iter(m) {
                self.release(st, l as usize, m);
            }
        }
        if released == 0 {
            // Every non-empty group was held back (possible when group 0 was
            // empty): release the lowest group after all.
            let m = masks.iter().copied().find(|&m| m != 0).unwrap_or(0);
            st.stats.groups += 1;
            if m.count_ones() > 1 {
                st.stats.multi_lane_groups += 1;
            }
            for l in iter(m) {
                self.release(st, l as usize, m);
            }
        }
    }

    /// Complete the rendezvous over `mask` if every live lane of it is
    /// blocked in a warp operation with that mask.
    fn try_complete(&self, st: &mut State, mask: u64) -> Result<bool, String> {
        let mut members = 0u64;
        let mut live = 0u64;
        let mut kind = None;
        for (l, s) in st.lanes.iter().enumerate() {
            if mask & (1 << l) == 0 {
                continue;
            }
            match *s {
                Lane::Exited => continue,
                Lane::InOp { op, mask: m, .. } if m == mask => {
                    members |= 1 << l;
                    match kind {
                        None => kind = Some((op, l)),
                        Some((k, first)) if k != op && !self.kernel.lax_ops => {
                            return Err(format!(
                                "lanes of mask {mask:#010x} met at different warp operations (lane {first}: {k:?}, \
                                 lane {l}: {op:?}); on hardware that is undefined (PTX: the same qualifiers and \
                                 the same membermask), here a failure"
                            ));
                        }
                        Some(_) => {}
                    }
                }
                _ => {}
            }
            live |= 1 << l;
        }
        if members == 0 || members != live {
            return Ok(false);
        }
        let value = |l: u32| match st.lanes[l as usize] {
            Lane::InOp { value, .. } => value,
            _ => 0,
        };
        let op_of = |l: u32| match st.lanes[l as usize] {
            Lane::InOp { op, .. } => op,
            _ => Op::Sync,
        };
        let mut results = [0u64; LANE_SIZE as usize];
        let mut keys = 0;
        for l in iter(members) {
            results[l as usize] = match op_of(l) {
                Op::Ballot => iter(members).filter(|&o| value(o) != 0).fold(0u64, |b, o| b | 1 << o),
                Op::Broadcast => {
                    let src = mask.trailing_zeros();
                    if members & (1 << src) == 0 {
                        return Err(format!(
                            "broadcast over mask {mask:#010x} reads lane {src}, which has exited (undefined on \
                             hardware)"
                        ));
                    }
                    value(src)
                }
                Op::Match => {
                    let same = iter(members)
                        .filter(|&o| value(o) == value(l))
                        .fold(0u64, |m, o| m | 1 << o);
                    if same.trailing_zeros() == l {
                        keys += 1;
                    }
                    same
                }
                Op::Sync => 0,
            };
        }
        if keys > 1 {
            st.stats.split_matches += 1;
        }
        st.stats.rendezvous += 1;
        for l in iter(members) {
            self.release(st, l as usize, results[l as usize]);
        }
        Ok(true)
    }

    fn dump(&self, st: &State) -> String {
        let mut s = format!("warp {} lanes:", self.index);
        for (l, lane) in st.lanes.iter().enumerate() {
            let _ = match lane {
                Lane::Running => write!(s, "\n  lane {l:2}: running"),
                Lane::InMask => write!(s, "\n  lane {l:2}: parked in lane_mask"),
                Lane::InOp { op, mask, value } => {
                    write!(s, "\n  lane {l:2}: {op:?} over mask {mask:#010x} (value {value:#x})")
                }
                Lane::Exited => write!(s, "\n  lane {l:2}: exited"),
            };
        }
        s
    }
}

fn iter(mut m: u64) -> impl Iterator<Item = u32> {
    core::iter::from_fn(move || {
        if m == 0 {
            None
        } else {
            let l = m.trailing_zeros();
            m &= m - 1;
            Some(l)
        }
    })
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn next(state: &mut u64) -> u64 {
    *state = splitmix(*state);
    *state
}

fn next_hint() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    // Relaxed: only the uniqueness of the value matters.
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A warp operation by the calling lane: arrive, wait for the rendezvous,
/// return this lane's result. Outside a simulated warp: the one-lane result.
fn warp_op(op: Op, mask: u64, value: u64) -> u64 {
    let Some((warp, lane)) = current() else {
        return match op {
            Op::Ballot => mask & (value != 0) as u64,
            Op::Broadcast => value,
            Op::Match => 1,
            Op::Sync => 0,
        };
    };
    let mut st = warp.check(warp.lock());
    if mask & (1 << lane) == 0 || mask & !FULL != 0 {
        let dump = warp.dump(&st);
        warp.fail(
            &mut st,
            format!(
                "warp {} lane {lane}: {op:?} over mask {mask:#x}, which does not name the calling lane or names \
                 lanes a 32-lane warp lacks (undefined on hardware)\n{dump}",
                warp.index
            ),
        );
        drop(st);
        resume_unwind(Box::new(Aborted));
    }
    st.lanes[lane as usize] = Lane::InOp { op, mask, value };
    warp.progress(&mut st);
    warp.park(lane, st)
}

pub(super) mod imp {
    //! The `lanes` functions on a simulated warp (see the parent module).
    use super::{current, warp_op, Lane, Op};
    use std::time::Instant;

    pub use super::LANE_SIZE;

    #[inline]
    pub fn lane_id() -> u32 {
        current().map_or(0, |(_, lane)| lane)
    }

    #[inline]
    pub fn lane_mask() -> u64 {
        let Some((warp, lane)) = current() else { return 1 };
        let mut st = warp.check(warp.lock());
        st.lanes[lane as usize] = Lane::InMask;
        warp.progress(&mut st);
        warp.park(lane, st)
    }

    #[inline]
    pub fn ballot(mask: u64, pred: bool) -> u64 {
        warp_op(Op::Ballot, mask, pred as u64)
    }

    #[inline]
    pub fn broadcast(mask: u64, x: u32) -> u32 {
        warp_op(Op::Broadcast, mask, x as u64) as u32
    }

    #[inline]
    pub fn sync(mask: u64) {
        warp_op(Op::Sync, mask, 0);
    }

    #[inline]
    pub fn group_mask(key: u64) -> u64 {
        // `activemask` then `match.any.sync` among exactly those lanes.
        let mask = lane_mask();
        warp_op(Op::Match, mask, key)
    }

    #[inline]
    pub fn split_by<R>(_key: u64, mut f: impl FnMut() -> R) -> R {
        // As on NVPTX: `group_mask` splits lanes at the port.
        f()
    }

    #[inline]
    pub fn sleep_briefly() {
        if let Some((warp, _)) = current() {
            // A spinning lane is where a livelock shows: look at the watchdog
            // and the abort flag without taking the warp's lock unless needed.
            if warp.aborted() || Instant::now() >= warp.kernel.deadline {
                drop(warp.check(warp.lock()));
            }
        }
        std::thread::yield_now();
    }

    #[inline]
    pub fn warp_hint() -> u32 {
        match current() {
            Some((warp, _)) => warp.hint,
            None => {
                std::thread_local!(static HINT: u32 = super::next_hint());
                HINT.with(|h| *h)
            }
        }
    }

    #[inline]
    pub fn halt() -> ! {
        // Unwinds to `run_kernel`'s lane (or the CPU backend's thread), which
        // ends the lane quietly.
        std::panic::resume_unwind(std::boxed::Box::new(crate::lanes::Halt))
    }
}
