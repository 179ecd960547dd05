//! The helper threads a [`Dispatcher`] keeps for the lanes of
//! `#[gpu_rpc(parallel)]` calls (`parallel.rs`): started at the first call
//! that runs its lanes on several threads; after a task a helper spins for
//! the next one as long as an idle server thread does
//! ([`IdlePolicy::spin`](super::IdlePolicy::spin)), then parks on a
//! condition variable; stopped when the dispatcher is dropped. A call hands
//! them tasks that borrow its stack and waits until every one has run, so a
//! task never outlives what it borrows. (On the GPU machine's host, a VM,
//! threads started per call cost about 250 µs a call, and waking parked
//! helpers made a warp-call of 2 MiB twice as slow: waking a thread there
//! is slow, so helpers that are busy keep spinning.)

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a caller spins for its last tasks before it sleeps on them:
/// they are usually a few µs from done when its own task is (the lanes of
/// one call ask for similar work).
const SPIN: Duration = Duration::from_micros(50);

/// Kept helper threads; see the module docs.
pub(super) struct LanePool {
    /// How many helpers to start.
    helpers: usize,
    /// How long they spin for work before they park.
    spin: Duration,
    /// The helpers, once started.
    started: OnceLock<Helpers>,
}

/// The started helpers.
struct Helpers {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

/// What the helpers and the callers share.
struct Shared {
    queue: Mutex<Queue>,
    /// Signalled when a task is queued while a helper is parked, and when
    /// the pool stops.
    work: Condvar,
    /// How many tasks are queued: what a spinning helper watches without
    /// taking the lock (changed under it).
    queued: AtomicUsize,
    /// The pool is stopping (set with `Queue::stop`): a spinning helper
    /// stops spinning.
    stopping: AtomicBool,
}

#[derive(Default)]
struct Queue {
    tasks: VecDeque<Task>,
    /// Helpers waiting on `work`.
    parked: usize,
    stop: bool,
}

impl Queue {
    /// The next task, if any, counted out of `queued`.
    fn pop(&mut self, queued: &AtomicUsize) -> Option<Task> {
        self.take(0, queued)
    }

    /// Task `i` of the queue, if any, counted out of `queued`.
    fn take(&mut self, i: usize, queued: &AtomicUsize) -> Option<Task> {
        let t = self.tasks.remove(i)?;
        // Relaxed: a hint for spinning helpers; the task itself is taken
        // under the lock.
        queued.fetch_sub(1, Ordering::Relaxed);
        Some(t)
    }
}

/// One task of a [`LanePool::scope`]: `(*run)(index)`, then a count down
/// of `done`.
struct Task {
    /// The caller's closure, borrowed from its stack with the lifetime
    /// erased: valid until `done` reaches zero, which the caller waits for.
    run: *const (dyn Fn(usize) + Sync),
    index: usize,
    done: Arc<Latch>,
}

// SAFETY: `run` points to a `Sync` closure (callable from any thread
// through a shared reference), and `LanePool::scope` keeps it alive until
// every task holding it has counted down; the rest is `Send`.
unsafe impl Send for Task {}

impl Task {
    /// Run the task (catching a panic that escapes it) and count its scope
    /// down, even if dropping that panic's payload panics too.
    fn run(self) {
        struct CountDown(Arc<Latch>);
        impl Drop for CountDown {
            fn drop(&mut self) {
                self.0.count_down();
            }
        }
        let _count = CountDown(self.done);
        // SAFETY: the scope that queued this task is waiting for its latch,
        // so the closure `run` points to is alive until `_count` counts
        // down, after this block.
        let run = unsafe { &*self.run };
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(self.index)));
    }
}

/// Counts a scope's tasks down to zero.
struct Latch {
    left: AtomicUsize,
    lock: Mutex<()>,
    zero: Condvar,
}

impl Latch {
    fn count_down(&self) {
        // Release: the task's writes happen before the caller's acquire
        // load that sees zero (the count downs form a release sequence).
        if self.left.fetch_sub(1, Ordering::Release) == 1 {
            // Under the lock: a caller that saw work left while holding it
            // is waiting on `zero` before this notifies.
            let _g = lock(&self.lock);
            self.zero.notify_all();
        }
    }

    fn wait(&self) {
        let start = Instant::now();
        // Acquire: pairs with the count downs' releases (see there).
        while self.left.load(Ordering::Acquire) != 0 {
            if start.elapsed() > SPIN {
                let mut g = lock(&self.lock);
                // Acquire: as above.
                while self.left.load(Ordering::Acquire) != 0 {
                    g = self.zero.wait(g).unwrap_or_else(PoisonError::into_inner);
                }
                return;
            }
            std::hint::spin_loop();
        }
    }
}

/// A lock that a panic elsewhere does not make unusable (nothing these
/// locks guard can be left half-written).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl LanePool {
    /// A pool of `helpers` threads that spin `spin` for work before they
    /// park, started at its first [`scope`](Self::scope) of two tasks or
    /// more (fewer if the OS refuses some).
    pub(super) fn new(helpers: usize, spin: Duration) -> Self {
        LanePool {
            helpers,
            spin,
            started: OnceLock::new(),
        }
    }

    fn start(helpers: usize, spin: Duration) -> Helpers {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            work: Condvar::new(),
            queued: AtomicUsize::new(0),
            stopping: AtomicBool::new(false),
        });
        let threads = (0..helpers)
            .filter_map(|i| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("gpu_rpc lanes {i}"))
                    .spawn(move || helper(&shared, spin))
                    .ok()
            })
            .collect();
        Helpers { shared, threads }
    }

    /// Run `task(i)` for every `i` in `0..n`, task 0 on this thread and the
    /// others on the helpers (all on this thread if there are none), and
    /// return once every one has run. Once its own task is done (or has
    /// unwound), this thread takes back its tasks no helper has started and
    /// runs them: a scope whose helpers are busy (with other calls' tasks,
    /// or inside a scope of their own) still ends. `task` catches its own panics; one
    /// that escapes a helper is caught there and ends only that task.
    pub(super) fn scope(&self, n: usize, task: &(dyn Fn(usize) + Sync)) {
        // (One task, or no helper to give the others to: all here.)
        let Some(h) = (n > 1 && self.helpers > 0)
            .then(|| self.started.get_or_init(|| Self::start(self.helpers, self.spin)))
            .filter(|h| !h.threads.is_empty())
        else {
            (0..n).for_each(task);
            return;
        };
        let done = Arc::new(Latch {
            left: AtomicUsize::new(n - 1),
            lock: Mutex::new(()),
            zero: Condvar::new(),
        });
        // Ends the scope, also when this thread's own task unwinds (so that
        // no task runs after `task`'s borrow ends): takes back this scope's
        // tasks no helper has started and runs them here, then waits for
        // the rest.
        struct EndScope<'a>(&'a Shared, &'a Arc<Latch>);
        impl Drop for EndScope<'_> {
            fn drop(&mut self) {
                let EndScope(shared, done) = *self;
                let take_back = || {
                    let mut q = lock(&shared.queue);
                    let i = q.tasks.iter().position(|t| Arc::ptr_eq(&t.done, done))?;
                    q.take(i, &shared.queued)
                };
                while let Some(t) = take_back() {
                    t.run();
                }
                done.wait();
            }
        }
        let end = EndScope(&h.shared, &done);
        {
            // The closure with its lifetime erased, for the tasks.
            let run: *const (dyn Fn(usize) + Sync) = {
                type Erased = &'static (dyn Fn(usize) + Sync);
                // SAFETY: only the lifetime changes; the tasks queued here use
                // the pointer, and each runs and counts `done` down before
                // `end` lets this function return (or unwind).
                unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync), Erased>(task) }
            };
            let mut q = lock(&h.shared.queue);
            q.tasks.extend((1..n).map(|index| Task {
                run,
                index,
                done: Arc::clone(&done),
            }));
            // Relaxed: a hint (see `queued`).
            h.shared.queued.fetch_add(n - 1, Ordering::Relaxed);
            // (Under the lock: a helper that found no task parks before
            // this looks, and is counted.)
            // One wake-up per task at most.
            for _ in 0..q.parked.min(n - 1) {
                h.shared.work.notify_one();
            }
        }
        task(0);
        drop(end);
    }
}

/// A helper's loop: run queued tasks until the pool stops; between them,
/// spin for `spin`, then park.
fn helper(shared: &Shared, spin: Duration) {
    loop {
        let mut t = None;
        let until = Instant::now() + spin;
        for i in 0u32.. {
            // Relaxed: a hint; the task is taken under the lock.
            if shared.queued.load(Ordering::Relaxed) > 0 {
                t = lock(&shared.queue).pop(&shared.queued);
                if t.is_some() {
                    break;
                }
            }
            // Relaxed: a hint; `stop` is read under the lock below.
            if i % 64 == 0 && (Instant::now() >= until || shared.stopping.load(Ordering::Relaxed)) {
                break;
            }
            std::hint::spin_loop();
        }
        let t = match t {
            Some(t) => t,
            None => {
                let mut q = lock(&shared.queue);
                loop {
                    if let Some(t) = q.pop(&shared.queued) {
                        break t;
                    }
                    if q.stop {
                        return;
                    }
                    q.parked += 1;
                    q = shared.work.wait(q).unwrap_or_else(PoisonError::into_inner);
                    q.parked -= 1;
                }
            }
        };
        t.run();
    }
}

impl Drop for Helpers {
    fn drop(&mut self) {
        lock(&self.shared.queue).stop = true;
        // Relaxed: a hint for spinning helpers (see `stopping`).
        self.shared.stopping.store(true, Ordering::Relaxed);
        self.shared.work.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every task runs once, on more than one thread when there are
    /// helpers, whatever the number of tasks against helpers.
    #[test]
    fn every_task_runs_once() {
        for helpers in [0, 1, 3] {
            let pool = LanePool::new(helpers, Duration::from_micros(200));
            for n in [0, 1, 2, 4, 9] {
                let runs: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
                let threads = Mutex::new(Vec::new());
                let started = AtomicUsize::new(0);
                pool.scope(n, &|i| {
                    // Relaxed: read after the scope, which orders it.
                    runs[i].fetch_add(1, Ordering::Relaxed);
                    let me = std::thread::current().id();
                    let mut t = lock(&threads);
                    if !t.contains(&me) {
                        t.push(me);
                    }
                    drop(t);
                    // With helpers, wait (up to 5 s) until a second task
                    // has started, so that a helper, not the caller taking
                    // its tasks back, runs one. Relaxed: this count's only
                    // word.
                    started.fetch_add(1, Ordering::Relaxed);
                    let t = Instant::now();
                    while helpers > 0
                        && n > 1
                        && started.load(Ordering::Relaxed) < 2
                        && t.elapsed() < Duration::from_secs(5)
                    {
                        std::thread::yield_now();
                    }
                });
                assert!(
                    // Relaxed: read after the scope, which orders the tasks' adds.
                    runs.iter().all(|r| r.load(Ordering::Relaxed) == 1),
                    "{helpers} helpers, {n} tasks"
                );
                let used = threads.into_inner().unwrap().len();
                assert!(
                    used <= helpers + 1 && (n < 2 || helpers == 0 || used > 1),
                    "{helpers}, {n}: {used}"
                );
            }
        }
    }

    /// `f` on a thread of its own, which must end within 20 s.
    fn within_20s(f: impl FnOnce() + Send + 'static) {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            f();
            let _ = tx.send(());
        });
        rx.recv_timeout(Duration::from_secs(20)).expect("the scopes ended");
    }

    /// A task that opens a scope of its own on the same pool, with every
    /// helper taken, ends: each caller runs its own tasks no helper took.
    /// Several callers at once too.
    #[test]
    fn nested_and_concurrent_scopes_end() {
        within_20s(|| {
            let pool = LanePool::new(1, Duration::from_micros(200));
            let inner = AtomicUsize::new(0);
            pool.scope(3, &|_| {
                pool.scope(3, &|_| {
                    // Relaxed: read after the scopes.
                    inner.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(1));
                });
            });
            // Relaxed: the scopes are over.
            assert_eq!(inner.load(Ordering::Relaxed), 9);
            let pool = Arc::new(LanePool::new(2, Duration::from_micros(200)));
            let callers: Vec<_> = (0..4)
                .map(|_| {
                    let pool = Arc::clone(&pool);
                    std::thread::spawn(move || {
                        let runs = AtomicUsize::new(0);
                        for _ in 0..50 {
                            pool.scope(4, &|_| {
                                // Relaxed: read after the scopes.
                                runs.fetch_add(1, Ordering::Relaxed);
                            });
                        }
                        // Relaxed: the scopes are over.
                        runs.load(Ordering::Relaxed)
                    })
                })
                .collect();
            for c in callers {
                assert_eq!(c.join().unwrap(), 200);
            }
        });
    }

    /// A panic in the caller's own task still waits for the others (which
    /// borrow its stack) before it unwinds out of the scope.
    #[test]
    fn a_panicking_caller_waits_for_its_tasks() {
        within_20s(|| {
            let pool = LanePool::new(2, Duration::from_micros(200));
            let others = AtomicUsize::new(0);
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                pool.scope(3, &|i| {
                    if i == 0 {
                        panic!("task 0");
                    }
                    std::thread::sleep(Duration::from_millis(5));
                    // Relaxed: read after the scope.
                    others.fetch_add(1, Ordering::Relaxed);
                })
            }));
            assert!(r.is_err());
            // Relaxed: the scope is over.
            assert_eq!(others.load(Ordering::Relaxed), 2);
        });
    }

    /// A caller whose own task panics while no helper is free (the pool's
    /// one helper is that caller, inside a scope of its own) runs its other
    /// tasks itself as it unwinds, and the scopes end.
    #[test]
    fn a_panicking_caller_with_no_free_helper_ends() {
        within_20s(|| {
            let pool = LanePool::new(1, Duration::from_micros(200));
            let (started, inner) = (AtomicUsize::new(0), AtomicUsize::new(0));
            let panicked = AtomicUsize::new(0);
            pool.scope(2, &|i| {
                // Relaxed: this count's only word.
                started.fetch_add(1, Ordering::Relaxed);
                if i == 0 {
                    // Until the helper has task 1 (up to 5 s), so that this
                    // thread does not take it back.
                    let t = Instant::now();
                    while started.load(Ordering::Relaxed) < 2 && t.elapsed() < Duration::from_secs(5) {
                        std::thread::yield_now();
                    }
                    return;
                }
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    pool.scope(3, &|j| {
                        if j == 0 {
                            panic!("inner task 0");
                        }
                        // Relaxed: read after the scopes.
                        inner.fetch_add(1, Ordering::Relaxed);
                    })
                }));
                if r.is_err() {
                    // Relaxed: read after the scopes.
                    panicked.fetch_add(1, Ordering::Relaxed);
                }
            });
            // Relaxed: the scopes are over.
            assert_eq!(inner.load(Ordering::Relaxed), 2);
            assert_eq!(panicked.load(Ordering::Relaxed), 1);
        });
    }
}
