//! The CPU backend: a shared region in host memory, client lanes run by host
//! threads (each thread a one-lane warp), served by one or more host server
//! threads. It runs the same protocol, frames and generated code as a GPU,
//! so everything can be tested on a machine without one.
//!
//! ```
//! # use rpc_runtime as gpu_rpc;
//! use gpu_rpc::cpu::{self, Launch};
//! use gpu_rpc::server::{Dispatcher, ServerConfig};
//! let d = Dispatcher::new(ServerConfig::default());
//! let report = cpu::launch(&Launch { threads: 4, port_count: 2, ..Launch::default() }, &d, |client, _t| {
//!     assert_eq!(client.noop(41).unwrap(), 42);
//! })
//! .unwrap();
//! assert_eq!(report.calls, 4);
//! ```

use std::alloc::{alloc_zeroed, dealloc, Layout as AllocLayout};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

mod process_memory;
mod raw;
pub use process_memory::ProcessMemory;
pub use raw::RawDevice;

use crate::host::{launch_and_serve, HostJob, RunKernel};
use crate::lanes::Halt;
use crate::protocol::{self, client_local_words, Client, Layout, Parts, Server, ServerLocks};
use crate::server::Dispatcher;

/// A shared region and the two sides' lock arrays, in host memory.
pub struct CpuRegion {
    layout: Layout,
    base: *mut u8,
    client_locks: Box<[AtomicU32]>,
    server_locks: ServerLocks,
}

// SAFETY: the region is plain memory accessed only through atomics by the
// protocol; the raw pointer is owned by this struct.
unsafe impl Send for CpuRegion {}
// SAFETY: as above.
unsafe impl Sync for CpuRegion {}

impl CpuRegion {
    /// A zeroed region for `layout`.
    pub fn new(layout: Layout) -> CpuRegion {
        let al = Self::alloc_layout(layout);
        // SAFETY: the size is non-zero (every layout has at least one port).
        let base = unsafe { alloc_zeroed(al) };
        assert!(!base.is_null(), "gpu_rpc: out of memory for the shared region");
        CpuRegion {
            layout,
            base,
            client_locks: (0..client_local_words(layout.port_count()))
                .map(|_| AtomicU32::new(0))
                .collect(),
            server_locks: ServerLocks::new(layout.port_count()),
        }
    }

    fn alloc_layout(layout: Layout) -> AllocLayout {
        AllocLayout::from_size_align(layout.allocation_size(), 64).expect("region layout")
    }

    /// The layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The client side of the region.
    ///
    /// # Panics
    /// If the layout has fewer lanes than a client's warp
    /// ([`lanes::LANE_SIZE`](crate::lanes::LANE_SIZE): 1 for host threads,
    /// 32 under the simulated warp of `--cfg gpu_rpc_simt`), whose lanes
    /// would write past the packets.
    pub fn client(&self) -> Client<'_> {
        let warp = crate::lanes::LANE_SIZE;
        assert!(
            self.layout.lane_size() >= warp,
            "a layout of {} lanes cannot serve a client warp of {warp}",
            self.layout.lane_size()
        );
        // SAFETY: the region is laid out by `layout`, 64-byte aligned, zeroed
        // and lives as long as the returned client borrows `self`; the client
        // lock array is used by clients only; the layout has a lane for
        // every lane of the client's warp (checked above).
        unsafe {
            Client::from_parts(
                self.layout,
                Parts::from_region(self.base, self.layout),
                self.client_locks.as_ptr() as *const _,
            )
        }
    }

    /// The server side of the region.
    pub fn server(&self) -> Server<'_> {
        // SAFETY: as in `client`, with the server lock array.
        unsafe {
            Server::from_parts(
                self.layout,
                Parts::from_region(self.base, self.layout),
                self.server_locks.as_ptr(),
            )
        }
    }

    /// Whether every port is idle and unlocked on both sides (after a run).
    pub fn is_quiescent(&self) -> bool {
        // SAFETY: the client lock array has `client_local_words(port_count)` words.
        let clients =
            unsafe { protocol::client_locks_clear(self.client_locks.as_ptr() as *const _, self.layout.port_count()) };
        clients && self.server().all_idle()
    }

    /// Every port that is not at rest (both sides' state; see
    /// [`PortSnapshot`](protocol::PortSnapshot)): empty between runs unless
    /// a run abandoned a call. Meaningful only while no run uses the region.
    ///
    /// ```
    /// # use rpc_runtime as gpu_rpc;
    /// use gpu_rpc::cpu::CpuRegion;
    /// use gpu_rpc::protocol::Layout;
    /// assert!(CpuRegion::new(Layout::new(4, 1).unwrap()).busy_ports().is_empty());
    /// ```
    pub fn busy_ports(&self) -> Vec<protocol::PortSnapshot> {
        // Relaxed: no run uses the region (the caller's contract).
        let words: Vec<u32> = self.client_locks.iter().map(|w| w.load(Ordering::Relaxed)).collect();
        self.server().busy_ports(&words).collect()
    }

    /// Raw access to the shared region, for fault-injection tests that play a
    /// misbehaving device.
    ///
    /// # Safety
    /// Writing the region while a protocol side runs breaks its invariants;
    /// the server stays memory-safe (it validates what it reads), the clients
    /// may hang.
    pub unsafe fn raw(&self) -> *mut u8 {
        self.base
    }
}

impl Drop for CpuRegion {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with the same layout.
        unsafe { dealloc(self.base, Self::alloc_layout(self.layout)) }
    }
}

/// How to run a CPU "kernel".
#[derive(Clone, Debug)]
pub struct Launch {
    /// Client threads (each a one-lane warp).
    pub threads: usize,
    /// Server threads; each scans its own share of the ports (dealt in
    /// chunks), and the rest when its share is idle or every few passes.
    pub server_threads: usize,
    /// Ports in the region.
    pub port_count: u32,
    /// Lanes per packet in the layout (clients use lane 0; a larger value
    /// gives the GPU's memory layout).
    pub lane_size: u32,
}

impl Default for Launch {
    fn default() -> Self {
        Launch {
            threads: 4,
            server_threads: 1,
            port_count: 64,
            lane_size: 1,
        }
    }
}

/// What a run did.
#[derive(Clone, Debug)]
pub struct Report {
    /// Calls served.
    pub calls: u64,
    /// Errors the server recorded.
    pub errors: u64,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// Lanes that ended by a `-> !` method (`halt`).
    pub halted: usize,
}

/// A client thread panicked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct LanePanic {
    /// The thread's index; `usize::MAX` when the run failed as a whole (an
    /// abandoned call, a region not at rest, a thread that could not start).
    pub thread: usize,
    /// The panic message, or what failed.
    pub message: String,
}

impl LanePanic {
    fn describe(&self) -> String {
        match self.thread {
            usize::MAX => format!("gpu_rpc cpu backend: {}", self.message),
            t => format!("gpu_rpc cpu backend: client thread {t} panicked: {}", self.message),
        }
    }

    fn whole_run(message: String) -> LanePanic {
        LanePanic {
            thread: usize::MAX,
            message,
        }
    }
}

/// The kernel's view of its thread.
#[derive(Clone, Copy, Debug)]
pub struct ThreadIdx {
    /// This thread's index.
    pub id: usize,
    /// Threads in the launch.
    pub count: usize,
}

/// Run `kernel` on `launch.threads` client threads against a fresh region,
/// served by `dispatcher` on `launch.server_threads` threads, until every
/// client thread has finished and every call has been served.
///
/// An invalid `launch` is an error naming the values, not a panic:
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::cpu::{self, Launch};
/// use gpu_rpc::server::{Dispatcher, ServerConfig};
/// let d = Dispatcher::new(ServerConfig::default());
/// let bad = Launch { port_count: 0, lane_size: 65, ..Launch::default() };
/// let e = cpu::launch(&bad, &d, |_, _| {}).unwrap_err();
/// assert!(e.to_string().contains("port_count 0 (must be 1..=65536) and lane_size 65 (must be 1..=64)"), "{e}");
/// ```
pub fn launch<F>(launch: &Launch, dispatcher: &Dispatcher, kernel: F) -> Result<Report, LanePanic>
where
    F: Fn(&Client<'_>, ThreadIdx) + Sync,
{
    let Some(layout) = Layout::new(launch.port_count, launch.lane_size) else {
        return Err(LanePanic::whole_run(format!(
            "invalid Launch: port_count {} (must be 1..={}) and lane_size {} (must be 1..={})",
            launch.port_count,
            crate::protocol::MAX_PORTS,
            launch.lane_size,
            crate::protocol::MAX_LANES
        )));
    };
    let region = CpuRegion::new(layout);
    launch_with_region(&region, launch, dispatcher, kernel)
}

/// [`launch`] on an existing region (so a test can inspect it afterwards).
pub fn launch_with_region<F>(
    region: &CpuRegion,
    launch: &Launch,
    dispatcher: &Dispatcher,
    kernel: F,
) -> Result<Report, LanePanic>
where
    F: Fn(&Client<'_>, ThreadIdx) + Sync,
{
    let job = Job {
        region,
        threads: launch.threads,
        dispatcher,
    };
    launch_many(std::slice::from_ref(&job), launch.server_threads, |_, client, t| {
        kernel(client, t)
    })
    .pop()
    .expect("one job")
}

/// One job of [`launch_many`] (a simulated device): its region, its client
/// threads and the dispatcher that serves it (give each job its own
/// dispatcher to keep its calls, errors and services apart). The CUDA and
/// HSA backends' `Job`s are the same idea with a kernel image and a grid.
pub struct Job<'r> {
    /// The job's shared region.
    pub region: &'r CpuRegion,
    /// Client threads (one-lane warps) running the kernel in this job.
    pub threads: usize,
    /// Serves this job's calls and keeps its error log.
    pub dispatcher: &'r Dispatcher,
}

/// Run `kernel(job, client, thread)` (`job`: the index in `jobs`) for
/// several jobs at once, all served by one pool of `server_threads` host
/// threads (as one host process serves several GPUs). Each job ends on its
/// own: a job whose client panics or abandons a call reports that error,
/// the others keep being served. Returns one result per job, in order;
/// `elapsed` is the whole run's.
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::cpu::{launch_many, Job, CpuRegion};
/// use gpu_rpc::protocol::Layout;
/// use gpu_rpc::server::{Dispatcher, ServerConfig};
/// let regions = [CpuRegion::new(Layout::new(4, 1).unwrap()), CpuRegion::new(Layout::new(2, 32).unwrap())];
/// let ds = [Dispatcher::new(ServerConfig::default()), Dispatcher::new(ServerConfig::default())];
/// let jobs: Vec<Job> = regions.iter().zip(&ds).map(|(region, dispatcher)| Job { region, threads: 3, dispatcher }).collect();
/// let results = launch_many(&jobs, 2, |job, client, _t| {
///     assert_eq!(client.noop(job as u64).unwrap(), job as u64 + 1);
/// });
/// assert!(results.iter().all(|r| r.as_ref().unwrap().calls == 3));
/// ```
pub fn launch_many<F>(jobs: &[Job<'_>], server_threads: usize, kernel: F) -> Vec<Result<Report, LanePanic>>
where
    F: Fn(usize, &Client<'_>, ThreadIdx) + Sync,
{
    let halted: Vec<AtomicUsize> = jobs.iter().map(|_| AtomicUsize::new(0)).collect();
    let server_threads = server_threads.max(1) as u32;
    // Spin between polls only when every thread can have a core; on an
    // oversubscribed machine a spinning server steals the clients' time.
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let threads: usize = jobs.iter().map(|j| j.threads).sum();
    let yielding = threads + server_threads as usize > cores;
    let kernel = &kernel;
    let host_jobs = jobs
        .iter()
        .zip(&halted)
        .enumerate()
        .map(|(i, (job, halted))| HostJob {
            // The lanes are this process's threads: large slices go direct.
            server: job.region.server().with_memory(&ProcessMemory),
            dispatcher: job.dispatcher,
            run: at_rest(job.region).map(|()| {
                Box::new(move || run_lanes(i, job, kernel, halted).map(|()| None)) as RunKernel<'_, LanePanic>
            }),
        })
        .collect();
    let outcomes = launch_and_serve(host_jobs, server_threads, yielding, |what, e| {
        LanePanic::whole_run(format!("{what}: {e}"))
    });
    outcomes
        .into_iter()
        .zip(&halted)
        .map(|(o, halted)| {
            o.ran?;
            if let Some(a) = o.abandoned {
                return Err(LanePanic::whole_run(a.to_string()));
            }
            Ok(Report {
                calls: o.calls,
                errors: o.errors,
                elapsed: o.elapsed,
                // Relaxed: all threads joined.
                halted: halted.load(Ordering::Relaxed),
            })
        })
        .collect()
}

/// A region an earlier run left a call abandoned on would hang this run's
/// clients (that port never comes back): refused before anything runs.
fn at_rest(region: &CpuRegion) -> Result<(), LanePanic> {
    if region.is_quiescent() {
        return Ok(());
    }
    Err(LanePanic::whole_run(format!(
        "the region is not at rest ({}): an earlier run abandoned a call on it; use a fresh region",
        region
            .busy_ports()
            .first()
            .map_or("a port is held".to_string(), |p| p.to_string())
    )))
}

/// Run job `i`'s client lanes, one host thread each, until all are
/// over; the first lane's panic (or a lane the OS would not start) is the
/// job's error. A lane that halted (`-> !` methods) ended normally.
fn run_lanes<F>(i: usize, job: &Job<'_>, kernel: &F, halted: &AtomicUsize) -> Result<(), LanePanic>
where
    F: Fn(usize, &Client<'_>, ThreadIdx) + Sync,
{
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..job.threads)
            .map(|id| {
                let (count, region) = (job.threads, job.region);
                crate::spawn::scoped(s, format!("gpu_rpc client {i}.{id}"), move || {
                    // Its server copies with `ProcessMemory` (Linux only).
                    crate::call::set_direct(cfg!(target_os = "linux"));
                    let client = region.client();
                    match catch_unwind(AssertUnwindSafe(|| kernel(i, &client, ThreadIdx { id, count }))) {
                        Ok(()) => Ok(()),
                        Err(p) if p.is::<Halt>() => {
                            // Relaxed: a statistic read after join.
                            halted.fetch_add(1, Ordering::Relaxed);
                            Ok(())
                        }
                        Err(p) => Err(LanePanic {
                            thread: id,
                            message: crate::server::panic_message(&*p),
                        }),
                    }
                })
            })
            .collect();
        let mut first = None;
        for (id, c) in handles.into_iter().enumerate() {
            let outcome = match c {
                Ok(handle) => handle.join().expect("client thread"),
                // The other threads still run; the job's run fails.
                Err(e) => Err(LanePanic::whole_run(format!(
                    "client thread {id} could not be started: {e}"
                ))),
            };
            if let Err(p) = outcome {
                first.get_or_insert(p);
            }
        }
        first.map_or(Ok(()), Err)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::ServerConfig;

    fn shape(threads: usize, server_threads: usize) -> Launch {
        Launch {
            threads,
            server_threads,
            port_count: 4,
            lane_size: 1,
        }
    }

    /// Calls that come after silences longer than the idle policy's spin
    /// meet sleeping server threads (the first one's sleeps grow to the
    /// cap, the other's longer): each is still served, with the right
    /// result, and the run ends.
    #[test]
    fn calls_after_silences_wake_the_sleeping_servers() {
        let d = Dispatcher::new(ServerConfig {
            idle: crate::server::IdlePolicy {
                spin: std::time::Duration::from_micros(100),
                first_sleep: std::time::Duration::from_micros(50),
                max_sleep: std::time::Duration::from_millis(2),
            },
            ..ServerConfig::default()
        });
        let report = launch(&shape(3, 2), &d, |c, t| {
            let mut x = t.id as u64 * 100;
            for i in 0..4u64 {
                // Past the spin and several sleeps of both server threads.
                std::thread::sleep(std::time::Duration::from_millis(15 + 5 * i));
                x = c.noop(x).expect("served after a silence");
            }
            assert_eq!(x, t.id as u64 * 100 + 4);
        })
        .expect("run");
        assert_eq!((report.calls, report.errors), (12, 0));
    }

    #[test]
    fn server_threads_that_cannot_start_are_an_error_not_a_hang() {
        let d = Dispatcher::new(ServerConfig::default());
        // Neither server thread starts: the run fails before any client.
        crate::spawn::failures::plan(0, 2);
        let ran = AtomicUsize::new(0);
        let e = launch(&shape(2, 2), &d, |_, _| {
            // Relaxed: a count read after the run.
            ran.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap_err();
        assert_eq!(e.thread, usize::MAX);
        assert_eq!(
            e.to_string(),
            "gpu_rpc cpu backend: no server thread could be started: refused by the test"
        );
        // Relaxed: the run is over.
        assert_eq!(ran.load(Ordering::Relaxed), 0);
        // One of two missing: the other serves every port.
        crate::spawn::failures::plan(0, 1);
        let r = launch(&shape(4, 2), &d, |c, _| {
            for i in 0..10 {
                assert_eq!(c.noop(i).unwrap(), i + 1);
            }
        })
        .unwrap();
        assert_eq!(r.calls, 40);
    }

    #[test]
    fn a_client_thread_that_cannot_start_fails_the_run_and_the_others_finish() {
        let d = Dispatcher::new(ServerConfig::default());
        // Both server threads, the thread that runs the job's lanes and
        // client 0 start; client 1 does not.
        crate::spawn::failures::plan(4, 1);
        let finished = AtomicUsize::new(0);
        let e = launch(&shape(3, 2), &d, |c, _| {
            c.noop(1).unwrap();
            // Relaxed: a count read after the run.
            finished.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "gpu_rpc cpu backend: client thread 1 could not be started: refused by the test"
        );
        // Relaxed: the run is over.
        assert_eq!(finished.load(Ordering::Relaxed), 2);
    }
}
