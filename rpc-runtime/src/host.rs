//! The launch-and-serve path every backend shares: start one pool of server
//! threads over the regions of several runs (devices, or launches on one
//! device), run each kernel to its end on a thread of its own, stop serving a
//! region once its kernel is over and its last calls are answered, and
//! report per run. The CPU backend (`cpu::launch_many`), CUDA
//! (`cuda::launch_many`) and HSA (`hsa::launch_many`) differ only in how a
//! kernel runs, which each passes in as a [`HostJob`].

use std::panic::resume_unwind;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::protocol::{Abandoned, Server};
use crate::server::{serve_pool, Dispatcher, Idle, IdlePolicy, Served};

/// What runs a job's kernel: launches it and returns once it is over (or
/// never started), with the kernel's own time if the backend measured it.
/// Runs on a thread of its own, and may start threads (the CPU backend's
/// client lanes).
pub(crate) type RunKernel<'a, E> = Box<dyn FnOnce() -> Result<Option<Duration>, E> + Send + 'a>;

/// One run of [`launch_and_serve`].
pub(crate) struct HostJob<'a, E> {
    /// The server side of the run's region.
    pub server: Server<'a>,
    /// Serves the run's calls and keeps its error log.
    pub dispatcher: &'a Dispatcher,
    /// How the kernel runs, or why the run was refused before anything ran.
    pub run: Result<RunKernel<'a, E>, E>,
}

/// How one run of [`launch_and_serve`] went.
pub(crate) struct Outcome<E> {
    /// The kernel's result (its time, if measured), or the run's error.
    pub ran: Result<Option<Duration>, E>,
    /// Warp-calls served on the run's region.
    pub calls: u64,
    /// A call the servers gave up on when the kernel ended.
    pub abandoned: Option<Abandoned>,
    /// Errors the run's dispatcher recorded during the run.
    pub errors: u64,
    /// Wall time of the whole `launch_and_serve`.
    pub elapsed: Duration,
}

/// Serve `jobs` from one pool of `threads` server threads (idle as the most
/// eager of the jobs' dispatchers' [`IdlePolicy`]s
/// says; `yielding`: their spin yields the core, as on a machine with more
/// threads than cores) while each job's kernel runs
/// on its own thread; returns one outcome per job, in order. Each job ends
/// on its own: a refused job counts as over from the start, one whose
/// kernel fails or abandons a call reports that, and the others go on being
/// served. `no_thread(what, why)` makes the error of a thread the OS refused.
pub(crate) fn launch_and_serve<'a, E: Send>(
    jobs: Vec<HostJob<'a, E>>,
    threads: u32,
    yielding: bool,
    no_thread: impl Fn(&str, std::io::Error) -> E,
) -> Vec<Outcome<E>> {
    let start = Instant::now();
    let threads = threads.max(1);
    let policy = jobs
        .iter()
        .map(|j| j.dispatcher.config().idle)
        .reduce(IdlePolicy::most_eager)
        .unwrap_or_default();
    let idle = if yielding {
        Idle::yielding(policy)
    } else {
        Idle::new(policy)
    };
    let before: Vec<u64> = jobs.iter().map(|j| j.dispatcher.error_count()).collect();
    // A refused job counts as over from the start.
    let done: Vec<AtomicBool> = jobs.iter().map(|j| AtomicBool::new(j.run.is_err())).collect();
    let mut runs = Vec::with_capacity(jobs.len());
    let mut servers = Vec::with_capacity(jobs.len());
    let mut dispatchers = Vec::with_capacity(jobs.len());
    for (job, flag) in jobs.into_iter().zip(&done) {
        // Every wait on the region gives up once its kernel is over.
        servers.push(job.server.with_abort(flag));
        dispatchers.push(job.dispatcher);
        runs.push(job.run);
    }
    let pool: Vec<Served<'_, '_>> = servers
        .iter()
        .zip(&dispatchers)
        .zip(&done)
        .map(|((server, dispatcher), done)| Served {
            server,
            dispatcher,
            done,
        })
        .collect();

    let (ran, abandoned, served) = std::thread::scope(|s| {
        let (pool, idle) = (&pool, &idle);
        let started = crate::spawn::servers(s, threads, move |t| serve_pool(pool, t, threads, idle));
        let (server_handles, no_servers) = match started {
            Ok(h) => (h, None),
            Err(e) => (Vec::new(), Some(e)),
        };
        // One thread per kernel runs it and waits for it.
        let watchers: Vec<_> = runs
            .into_iter()
            .zip(&done)
            .enumerate()
            .map(|(i, (run, flag))| {
                let run = match (run, &no_servers) {
                    (Err(e), _) => return Err(e),
                    (Ok(_), Some(why)) => {
                        // Release: as `StopOnDrop`.
                        flag.store(true, Ordering::Release);
                        return Err(no_thread(
                            "no server thread could be started",
                            std::io::Error::new(why.kind(), why.to_string()),
                        ));
                    }
                    (Ok(run), None) => run,
                };
                crate::spawn::scoped(s, format!("gpu_rpc launch {i}"), move || {
                    // The kernel is over (or never started) when this returns
                    // or unwinds: the servers drain its region and stop.
                    let _stop = StopOnDrop(flag);
                    run()
                })
                .map_err(|e| {
                    // Release: as `StopOnDrop`.
                    flag.store(true, Ordering::Release);
                    no_thread("the thread that runs the kernel could not be started", e)
                })
            })
            .collect();
        let ran: Vec<Result<Option<Duration>, E>> = watchers
            .into_iter()
            .map(|w| w.and_then(|h| h.join().unwrap_or_else(|p| resume_unwind(p))))
            .collect();
        let mut abandoned: Vec<Option<Abandoned>> = pool.iter().map(|_| None).collect();
        let mut served: Vec<u64> = pool.iter().map(|_| 0).collect();
        for h in server_handles {
            let outcomes = h.join().unwrap_or_else(|p| resume_unwind(p));
            for ((slot, n), outcome) in abandoned.iter_mut().zip(served.iter_mut()).zip(outcomes) {
                match outcome {
                    Ok(calls) => *n += calls,
                    Err(a) => {
                        slot.get_or_insert(a);
                    }
                }
            }
        }
        (ran, abandoned, served)
    });
    let elapsed = start.elapsed();
    ran.into_iter()
        .zip(abandoned)
        .zip(served)
        .zip(dispatchers.iter().zip(before))
        .map(|(((ran, abandoned), calls), (d, before))| Outcome {
            ran,
            calls,
            abandoned,
            errors: d.error_count() - before,
            elapsed,
        })
        .collect()
}

/// Sets the flag when dropped, so server threads stop even if the launching
/// thread unwinds.
pub(crate) struct StopOnDrop<'a>(pub(crate) &'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        // Release: pairs with the servers' acquire load of the flag in
        // `server::serve_pool`.
        self.0.store(true, Ordering::Release);
    }
}
