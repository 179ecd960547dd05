//! Starting the host threads of a run (server threads, client lanes, kernel
//! watchers). The OS may refuse a thread (thread limits, memory); every
//! backend reports that as an error of the run instead of panicking, which
//! `std::thread::Scope::spawn` would do.

use std::io;
use std::thread::{Builder, Scope, ScopedJoinHandle};

/// Start a scoped thread named `name`, or say why the OS refused it.
pub(crate) fn scoped<'s, 'e, T: Send + 's>(
    scope: &'s Scope<'s, 'e>,
    name: String,
    f: impl FnOnce() -> T + Send + 's,
) -> io::Result<ScopedJoinHandle<'s, T>> {
    #[cfg(test)]
    if failures::take() {
        return Err(io::Error::other("refused by the test"));
    }
    // A started thread goes on with what is left of the plan, so that the
    // threads it starts (a kernel's client lanes) are planned too.
    #[cfg(test)]
    let plan = failures::current();
    Builder::new().name(name).spawn_scoped(scope, move || {
        #[cfg(test)]
        failures::set(plan);
        f()
    })
}

/// Start a thread named `name` that outlives the caller (a background
/// server), or say why the OS refused it.
#[cfg(feature = "cuda")]
pub(crate) fn owned<T: Send + 'static>(
    name: String,
    f: impl FnOnce() -> T + Send + 'static,
) -> io::Result<std::thread::JoinHandle<T>> {
    #[cfg(test)]
    if failures::take() {
        return Err(io::Error::other("refused by the test"));
    }
    Builder::new().name(name).spawn(f)
}

/// Start server threads `0..n`, thread `t` running `serve(t)`. A thread the
/// OS refuses is left out (the others look at every thread's share, one in
/// turn while busy, all of them on the last pass: they serve its share); it
/// is an error only when none starts, and then
/// says why.
pub(crate) fn servers<'s, 'e, T: Send + 's>(
    scope: &'s Scope<'s, 'e>,
    n: u32,
    serve: impl Fn(u32) -> T + Send + Copy + 's,
) -> io::Result<Vec<ScopedJoinHandle<'s, T>>> {
    left_out_unless_none((0..n).map(|t| scoped(scope, server_name(t), move || serve(t))))
}

/// [`servers`] for background servers that outlive the caller: thread `t`
/// runs `serve(t)`, by the same rule.
#[cfg(feature = "cuda")]
pub(crate) fn owned_servers<T: Send + 'static, F: FnOnce() -> T + Send + 'static>(
    n: u32,
    mut serve: impl FnMut(u32) -> F,
) -> io::Result<Vec<std::thread::JoinHandle<T>>> {
    left_out_unless_none((0..n).map(|t| owned(server_name(t), serve(t))))
}

/// Server thread `t`'s name (what `/proc` and debuggers show).
fn server_name(t: u32) -> String {
    format!("gpu_rpc server {t}")
}

/// The threads that started; the last refusal when none did.
fn left_out_unless_none<H>(spawns: impl Iterator<Item = io::Result<H>>) -> io::Result<Vec<H>> {
    let mut refused = None;
    let started: Vec<H> = spawns.filter_map(|r| r.map_err(|e| refused = Some(e)).ok()).collect();
    match refused {
        Some(e) if started.is_empty() => Err(e),
        _ => Ok(started),
    }
}

/// Test support: make the next spawns made by this thread fail.
#[cfg(test)]
pub(crate) mod failures {
    use std::cell::Cell;

    thread_local! {
        /// Spawns to let through, then how many to fail.
        static PLAN: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
    }

    /// Let `ok` spawns through, then fail `fail` of them.
    pub(crate) fn plan(ok: usize, fail: usize) {
        PLAN.with(|p| p.set((ok, fail)));
    }

    /// What is left of this thread's plan.
    pub(crate) fn current() -> (usize, usize) {
        PLAN.with(Cell::get)
    }

    /// Continue a plan on this thread.
    pub(crate) fn set(plan: (usize, usize)) {
        PLAN.with(|p| p.set(plan));
    }

    /// Whether this spawn fails.
    pub(crate) fn take() -> bool {
        PLAN.with(|p| match p.get() {
            (0, 0) => false,
            (0, f) => {
                p.set((0, f - 1));
                true
            }
            (ok, f) => {
                p.set((ok - 1, f));
                false
            }
        })
    }
}
