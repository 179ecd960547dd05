//! The loop of a server thread over a pool of regions ([`serve_pool`]).

use super::*;

/// One region in a pool of server threads: its protocol server, the
/// dispatcher (services and error log) that serves it, and the flag its
/// backend sets when the region's kernel is over.
pub struct Served<'r, 'a> {
    /// The region's server side.
    pub server: &'r Server<'a>,
    /// Who serves its calls (and records its errors: each region may have
    /// its own, so one device's errors stay apart from another's).
    pub dispatcher: &'r Dispatcher,
    /// Set (with release) when the region's kernel has finished.
    pub done: &'r AtomicBool,
}

/// How often a server thread whose own slice of a region's ports keeps it
/// busy still looks at the other threads' slices: every this many passes
/// (a thread whose slice had nothing pending looks every pass). Threads that
/// scanned each other's ports on every pass met on the same ports and passed
/// the mailbox lines back and forth, while the owner would have served them
/// a moment later; looking now and then still bounds how long the ports of a
/// thread held up in a slow host method wait for another thread.
pub(crate) const STEAL_EVERY_PASSES: u32 = 8;

/// The loop of one thread of a server pool over several regions (several
/// devices, or several launches on one): each pass serves every region still
/// running, this thread's slice of its ports first, then, when the slice had
/// nothing pending or every `STEAL_EVERY_PASSES` (8) passes, the other
/// threads' slices. A region leaves the pool
/// when its kernel is over and a pass finds nothing pending, or when a wait
/// on it was abandoned; that does not stop the others. Returns each region's
/// outcome, in order: the warp-calls this thread served on it (a run's own
/// count, however many runs share the dispatcher), or the abandoned call.
/// Between empty passes the thread waits as `idle` says (the pool's threads
/// share it: see [`Idle`]).
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// use std::sync::atomic::AtomicBool;
/// use gpu_rpc::cpu::CpuRegion;
/// use gpu_rpc::protocol::Layout;
/// use gpu_rpc::server::{serve_pool, Dispatcher, Idle, Served, ServerConfig};
/// let (a, b) = (CpuRegion::new(Layout::new(4, 1).unwrap()), CpuRegion::new(Layout::new(4, 1).unwrap()));
/// let d = Dispatcher::new(ServerConfig::default());
/// let done = AtomicBool::new(true); // both "kernels" are over already
/// let (sa, sb) = (a.server(), b.server());
/// let pool = [Served { server: &sa, dispatcher: &d, done: &done }, Served { server: &sb, dispatcher: &d, done: &done }];
/// let idle = Idle::new(d.config().idle);
/// assert_eq!(serve_pool(&pool, 0, 1, &idle), [Ok(0), Ok(0)]);
/// ```
pub fn serve_pool(regions: &[Served<'_, '_>], thread: u32, threads: u32, idle: &Idle) -> Vec<Result<u64, Abandoned>> {
    let threads = threads.max(1);
    let mut outcome: Vec<Option<Result<u64, Abandoned>>> = regions.iter().map(|_| None).collect();
    let mut counts: Vec<u64> = regions.iter().map(|_| 0).collect();
    let mut backoff = IdleBackoff::new(idle.policy(), thread, std::time::Instant::now());
    let mut passes: u32 = 0;
    while outcome.iter().any(Option::is_none) {
        let mut served = 0;
        passes = passes.wrapping_add(1);
        for ((r, out), count) in regions.iter().zip(outcome.iter_mut()).zip(counts.iter_mut()) {
            if out.is_some() {
                continue;
            }
            let ports = r.server.layout().port_count();
            let lo = (thread as u64 * ports as u64 / threads as u64) as u32;
            let hi = ((thread as u64 + 1) * ports as u64 / threads as u64) as u32;
            // Acquire: pairs with the backend's release store of `done` after
            // the kernel finished, so the final pass sees every mailbox flip
            // the kernel made (fire-and-forget calls nobody waits for too).
            let finished = r.done.load(Ordering::Acquire);
            let pass = (|| {
                let mut n = r.dispatcher.poll(r.server, lo..hi)?;
                if looks_at_others(threads, n, passes) {
                    n += r.dispatcher.poll(r.server, hi..ports)? + r.dispatcher.poll(r.server, 0..lo)?;
                }
                Ok(n)
            })();
            match pass {
                Err(a) => *out = Some(Err(a)),
                Ok(0) if finished => *out = Some(Ok(*count)),
                Ok(n) => {
                    served += n;
                    *count += n as u64;
                }
            }
        }
        idle::after_pass(idle, &mut backoff, served);
    }
    outcome.into_iter().map(|o| o.expect("every region finished")).collect()
}

/// Whether a pass of one of `threads` server threads, which served `own`
/// calls in its own slice, goes on to the other threads' slices (see
/// `STEAL_EVERY_PASSES`).
fn looks_at_others(threads: u32, own: usize, pass: u32) -> bool {
    threads > 1 && (own == 0 || pass.is_multiple_of(STEAL_EVERY_PASSES))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread whose slice is idle helps the others on every pass; one
    /// kept busy by its own slice still looks at theirs once every
    /// `STEAL_EVERY_PASSES` passes, so a thread held up in a slow host method
    /// never leaves its ports unserved for long; a lone thread has no others.
    #[test]
    fn busy_threads_look_at_other_slices_now_and_then() {
        assert!((0..100).all(|pass| looks_at_others(4, 0, pass)));
        let looks = (1..=8 * STEAL_EVERY_PASSES)
            .filter(|&pass| looks_at_others(4, 3, pass))
            .count();
        assert_eq!(looks, 8);
        assert!(!(0..100).any(|pass| looks_at_others(1, 0, pass)));
    }
}
