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

/// The loop of one thread of a server pool over several regions (several
/// devices, or several launches on one): each pass serves every region still
/// running, this thread's slice of its ports first. A region leaves the pool
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
    while outcome.iter().any(Option::is_none) {
        let mut served = 0;
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
                if threads > 1 {
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
