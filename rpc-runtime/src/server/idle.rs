//! How a server thread waits when a pass over its ports finds no call: the
//! idle policy ([`IdlePolicy`]), what the threads of one pool share while
//! idle ([`Idle`]), and one thread's back-off ([`IdleBackoff`]).
//!
//! A GPU cannot interrupt the host: a server learns of a call only by
//! reading the port's mailbox. So the trade-off is between latency and a
//! core: after its last served call a thread keeps polling without pause
//! for [`IdlePolicy::spin`] (calls that keep arriving never meet a sleeping
//! server), then sleeps between passes, [`IdlePolicy::first_sleep`] first,
//! doubling up to [`IdlePolicy::max_sleep`]. The first call after a silence
//! waits for the next pass: up to about `max_sleep` plus the OS's timer
//! slack. An idle thread costs one pass and one wake-up per sleep.
//!
//! Only the pool's first thread wakes that often: the others sleep up to
//! [`OTHERS_SLEEP_FACTOR`] times longer, and the first thread to serve a call
//! after they fell asleep rings the pool's bell, so they join at once. (A
//! ring can miss a thread that is just falling asleep; that thread wakes at
//! its own timeout, and the call is being served meanwhile.)

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long a server thread polls, then sleeps, when nothing is pending.
/// Part of [`ServerConfig`](super::ServerConfig) (`idle`); a pool serving
/// several dispatchers uses the most eager of their policies
/// ([`most_eager`](Self::most_eager)).
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// use std::time::Duration;
/// use gpu_rpc::server::{IdlePolicy, ServerConfig};
/// // Lower latency after silences, at more wake-ups while idle.
/// let config = ServerConfig {
///     idle: IdlePolicy { max_sleep: Duration::from_micros(250), ..IdlePolicy::default() },
///     ..ServerConfig::default()
/// };
/// assert_eq!(config.idle.spin, IdlePolicy::default().spin);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdlePolicy {
    /// Poll without pause for this long after the last call served (default
    /// 1 ms). Calls spaced closer than this never meet a sleeping server.
    pub spin: Duration,
    /// The first sleep once the spin is over (default 50 µs); each further
    /// empty pass doubles it. Zero never grows: the thread then polls
    /// without pause, as with [`NEVER_SLEEP`](Self::NEVER_SLEEP).
    pub first_sleep: Duration,
    /// The longest sleep of the pool's first thread (default 1 ms): about the
    /// most the first call after a long silence waits for the server.
    pub max_sleep: Duration,
}

impl Default for IdlePolicy {
    /// The defaults, argued from the H200 measurements in BENCHMARKS.md
    /// (workload 8): a spin of 1 ms covers the gaps between the calls of
    /// any kernel that calls often (a round trip is 3–10 µs); sleeps of at
    /// most 1 ms kept an idle pool under 1% of a core with two threads and
    /// under 3% with eight, and add up to about 1 ms to the first call after
    /// a silence.
    fn default() -> Self {
        IdlePolicy {
            spin: Duration::from_millis(1),
            first_sleep: Duration::from_micros(50),
            max_sleep: Duration::from_millis(1),
        }
    }
}

impl IdlePolicy {
    /// Never sleep: poll without pause for as long as the kernel runs (the
    /// lowest latency after any silence, a core per server thread).
    ///
    /// ```
    /// # use rpc_runtime as gpu_rpc;
    /// use gpu_rpc::server::IdlePolicy;
    /// assert_eq!(IdlePolicy::NEVER_SLEEP.spin, std::time::Duration::MAX);
    /// ```
    pub const NEVER_SLEEP: IdlePolicy = IdlePolicy {
        spin: Duration::MAX,
        first_sleep: Duration::ZERO,
        max_sleep: Duration::ZERO,
    };

    /// The policy of a pool serving dispatchers with policies `self` and
    /// `other`: the longer spin, the shorter sleeps.
    ///
    /// ```
    /// # use rpc_runtime as gpu_rpc;
    /// use gpu_rpc::server::IdlePolicy;
    /// let d = IdlePolicy::default();
    /// assert_eq!(d.most_eager(IdlePolicy::NEVER_SLEEP), IdlePolicy::NEVER_SLEEP);
    /// ```
    pub fn most_eager(self, other: IdlePolicy) -> IdlePolicy {
        IdlePolicy {
            spin: self.spin.max(other.spin),
            first_sleep: self.first_sleep.min(other.first_sleep),
            max_sleep: self.max_sleep.min(other.max_sleep),
        }
    }
}

/// The other threads of a pool sleep up to this many times
/// [`IdlePolicy::max_sleep`]: the first thread watches, and rings them awake.
pub const OTHERS_SLEEP_FACTOR: u32 = 8;

/// What the threads of one server pool share while idle: the policy, how
/// many of them sleep, and the bell that wakes them.
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::server::{Idle, IdlePolicy};
/// let idle = Idle::new(IdlePolicy::default());
/// assert_eq!(idle.policy(), IdlePolicy::default());
/// ```
#[derive(Debug)]
pub struct Idle {
    policy: IdlePolicy,
    /// Spin with `yield_now` instead of a spin hint: more threads than cores.
    yielding: bool,
    sleepers: AtomicU32,
    lock: Mutex<()>,
    bell: Condvar,
}

impl Idle {
    /// A pool's shared idle state under `policy`.
    pub fn new(policy: IdlePolicy) -> Idle {
        Idle {
            policy,
            yielding: false,
            sleepers: AtomicU32::new(0),
            lock: Mutex::new(()),
            bell: Condvar::new(),
        }
    }

    /// The same, for a pool whose threads share cores with the clients (the
    /// CPU backend on a busy machine): the spin yields the core on every
    /// empty pass instead of keeping it.
    pub fn yielding(policy: IdlePolicy) -> Idle {
        Idle {
            yielding: true,
            ..Idle::new(policy)
        }
    }

    /// The policy.
    pub fn policy(&self) -> IdlePolicy {
        self.policy
    }

    /// Wake every sleeping thread of the pool (a thread found work).
    fn ring(&self) {
        // Relaxed: a hint; a missed sleeper wakes at its own timeout.
        if self.sleepers.load(Ordering::Relaxed) > 0 {
            let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.bell.notify_all();
        }
    }

    /// Sleep up to `d`, or until the bell rings.
    fn sleep(&self, d: Duration) {
        let g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        // Relaxed: the count is only a hint for `ring` (see the module docs).
        self.sleepers.fetch_add(1, Ordering::Relaxed);
        let (g, _) = self.bell.wait_timeout(g, d).unwrap_or_else(|e| e.into_inner());
        self.sleepers.fetch_sub(1, Ordering::Relaxed);
        drop(g);
    }
}

/// One server thread's idle state under its pool's policy: when it last
/// served a call and how long it sleeps next.
#[derive(Debug)]
pub struct IdleBackoff {
    policy: IdlePolicy,
    /// When the last call was served: `None` right after a pass that
    /// served, whose time is not read (the next empty pass reads it).
    last_work: Option<Instant>,
    /// Empty passes spun since the clock was last read ([`after_pass`]).
    unclocked_spins: u32,
    /// The last empty pass ended in a sleep (cleared by serving).
    slept: bool,
    next_sleep: Duration,
    /// `max_sleep`, or `OTHERS_SLEEP_FACTOR` times it for a thread but the
    /// first.
    longest: Duration,
}

/// What a thread does after an empty pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Poll again at once (a spin hint, or a yield when the pool yields).
    Spin,
    /// Sleep this long (or until the bell rings).
    Sleep(Duration),
}

impl IdleBackoff {
    /// Thread `thread` of a pool under `policy`, starting now.
    ///
    /// ```
    /// # use rpc_runtime as gpu_rpc;
    /// use std::time::{Duration, Instant};
    /// use gpu_rpc::server::{IdleBackoff, IdlePolicy, Wait};
    /// let t0 = Instant::now();
    /// let mut b = IdleBackoff::new(IdlePolicy::default(), 0, t0);
    /// assert_eq!(b.after_empty_pass(t0 + Duration::from_micros(10)), Wait::Spin);
    /// let later = t0 + Duration::from_millis(5);
    /// assert_eq!(b.after_empty_pass(later), Wait::Sleep(Duration::from_micros(50)));
    /// assert_eq!(b.after_empty_pass(later), Wait::Sleep(Duration::from_micros(100)));
    /// ```
    pub fn new(policy: IdlePolicy, thread: u32, now: Instant) -> IdleBackoff {
        let longest = if thread == 0 {
            policy.max_sleep
        } else {
            policy.max_sleep.saturating_mul(OTHERS_SLEEP_FACTOR)
        };
        IdleBackoff {
            policy,
            last_work: Some(now),
            unclocked_spins: 0,
            slept: false,
            next_sleep: policy.first_sleep.min(longest),
            longest,
        }
    }

    /// A pass served calls: spin again, from the first empty pass after
    /// it. (Not reading the clock here keeps a busy thread's passes free of
    /// it: a clock read costs 20–200 ns depending on the host's clock
    /// source.)
    pub fn served(&mut self) {
        self.last_work = None;
        self.unclocked_spins = 0;
        self.slept = false;
        self.next_sleep = self.policy.first_sleep.min(self.longest);
    }

    /// A pass found nothing at `now`: what to do before the next one.
    pub fn after_empty_pass(&mut self, now: Instant) -> Wait {
        let last = *self.last_work.get_or_insert(now);
        if now.saturating_duration_since(last) < self.policy.spin {
            return Wait::Spin;
        }
        let d = self.next_sleep;
        self.next_sleep = d.saturating_mul(2).min(self.longest).max(d);
        self.slept = !d.is_zero();
        Wait::Sleep(d)
    }

    /// Whether the thread slept after its last pass (it has had nothing to
    /// serve for longer than the spin) rather than spun.
    ///
    /// ```
    /// # use rpc_runtime as gpu_rpc;
    /// use std::time::{Duration, Instant};
    /// use gpu_rpc::server::{IdleBackoff, IdlePolicy};
    /// let t0 = Instant::now();
    /// let mut b = IdleBackoff::new(IdlePolicy::default(), 0, t0);
    /// b.after_empty_pass(t0);
    /// assert!(!b.slept());
    /// b.after_empty_pass(t0 + Duration::from_millis(5));
    /// assert!(b.slept());
    /// b.served();
    /// assert!(!b.slept());
    /// ```
    pub fn slept(&self) -> bool {
        self.slept
    }
}

/// The idle step of a server loop: after a pass that served `served` calls,
/// ring the bell or wait as the policy says.
pub(super) fn after_pass(idle: &Idle, backoff: &mut IdleBackoff, served: usize) {
    if idle.policy.spin == Duration::MAX {
        // Never sleeps: no clock reads.
        if served == 0 {
            spin_once(idle);
        }
        return;
    }
    if served > 0 {
        backoff.served();
        idle.ring();
        return;
    }
    // While spinning, the clock is read on one empty pass in
    // `SPINS_PER_CLOCK_READ`: the spin lasts at most that many passes longer.
    if backoff.unclocked_spins > 0 {
        backoff.unclocked_spins -= 1;
        spin_once(idle);
        return;
    }
    match backoff.after_empty_pass(Instant::now()) {
        // (A zero sleep polls on as a spin does: `first_sleep` zero.)
        Wait::Spin | Wait::Sleep(Duration::ZERO) => {
            backoff.unclocked_spins = SPINS_PER_CLOCK_READ - 1;
            spin_once(idle)
        }
        Wait::Sleep(d) => idle.sleep(d),
    }
}

/// While a thread spins, one empty pass in this many reads the clock to see
/// whether the spin is over.
const SPINS_PER_CLOCK_READ: u32 = 8;

fn spin_once(idle: &Idle) {
    if idle.yielding {
        std::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first thread's sleeps double up to `max_sleep`; the others' go
    /// on to `OTHERS_SLEEP_FACTOR` times that; serving starts over.
    #[test]
    fn sleeps_double_to_the_cap_and_serving_restarts_the_spin() {
        let p = IdlePolicy {
            spin: Duration::from_micros(100),
            first_sleep: Duration::from_micros(100),
            max_sleep: Duration::from_micros(400),
        };
        let t0 = Instant::now();
        let late = t0 + Duration::from_millis(1);
        let sleeps = |thread| {
            let mut b = IdleBackoff::new(p, thread, t0);
            (0..6)
                .map(|_| match b.after_empty_pass(late) {
                    Wait::Sleep(d) => d.as_micros(),
                    Wait::Spin => 0,
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(sleeps(0), [100, 200, 400, 400, 400, 400]);
        assert_eq!(sleeps(1), [100, 200, 400, 800, 1600, 3200]);
        let mut b = IdleBackoff::new(p, 0, t0);
        assert!(matches!(b.after_empty_pass(late), Wait::Sleep(_)));
        // Serving restarts the spin from the next empty pass.
        b.served();
        assert_eq!(b.after_empty_pass(late + Duration::from_micros(50)), Wait::Spin);
        assert_eq!(
            b.after_empty_pass(late + Duration::from_micros(150)),
            Wait::Sleep(Duration::from_micros(100))
        );
    }

    /// A spinning thread reads the clock on one empty pass in
    /// `SPINS_PER_CLOCK_READ`, and again on the first empty pass after
    /// serving; a busy pass reads none.
    #[test]
    fn a_spinning_thread_reads_the_clock_on_one_empty_pass_in_eight() {
        // A spin no preemption of the test can outlast.
        let idle = Idle::new(IdlePolicy {
            spin: Duration::from_secs(3600),
            ..IdlePolicy::default()
        });
        let mut b = IdleBackoff::new(idle.policy(), 0, Instant::now());
        let mut skips = Vec::new();
        for _ in 0..10 {
            after_pass(&idle, &mut b, 0);
            skips.push(b.unclocked_spins);
        }
        assert_eq!(skips, [7, 6, 5, 4, 3, 2, 1, 0, 7, 6]);
        after_pass(&idle, &mut b, 3);
        assert_eq!((b.last_work, b.unclocked_spins), (None, 0));
        after_pass(&idle, &mut b, 0);
        assert!(b.last_work.is_some());
        assert_eq!(b.unclocked_spins, 7);
    }

    /// A sleeping thread is woken by the bell long before its timeout.
    #[test]
    fn the_bell_wakes_a_sleeper() {
        let idle = Idle::new(IdlePolicy::default());
        let t = Instant::now();
        std::thread::scope(|s| {
            s.spawn(|| idle.sleep(Duration::from_secs(30)));
            // Ring until the sleeper has gone (a ring can precede its sleep).
            while t.elapsed() < Duration::from_secs(20) {
                // Relaxed: a test poll.
                if idle.sleepers.load(Ordering::Relaxed) > 0 {
                    idle.ring();
                    break;
                }
                std::thread::yield_now();
            }
        });
        assert!(t.elapsed() < Duration::from_secs(20), "the sleeper slept on");
    }

    /// The most eager of two policies.
    #[test]
    fn a_pool_takes_the_most_eager_policy() {
        let a = IdlePolicy {
            spin: Duration::from_micros(10),
            first_sleep: Duration::from_micros(200),
            max_sleep: Duration::from_millis(2),
        };
        let m = a.most_eager(IdlePolicy::default());
        assert_eq!(m.spin, Duration::from_millis(1));
        assert_eq!(m.first_sleep, Duration::from_micros(50));
        assert_eq!(m.max_sleep, Duration::from_millis(1));
    }
}
