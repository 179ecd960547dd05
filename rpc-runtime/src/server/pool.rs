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

/// How often a server thread whose own share of a region's ports keeps it
/// busy still looks at another thread's share: every this many passes, one
/// other share at a time, in turn (a thread whose share had nothing pending
/// looks at the next other share every pass, and at all of them right
/// after a sleep and once the kernel is over). Threads that scanned each other's
/// ports on every pass met on the same ports and passed the mailbox lines
/// back and forth, while the owner would have served them a moment later;
/// and a busy thread that scanned all the others' shares on its 8th pass
/// spent that pass missing on every mailbox line the GPU had written (with
/// 4096 ports and 8 threads, 3584 ports: eight threads served fewer calls
/// than four). Looking now and then still bounds how long the ports of a
/// thread held up in a slow host method wait for another thread: every
/// `STEAL_EVERY_PASSES × (threads − 1)` of each other thread's passes.
pub(crate) const STEAL_EVERY_PASSES: u32 = 8;

/// The loop of one thread of a server pool over several regions (several
/// devices, or several launches on one): each pass serves every region still
/// running, this thread's share of its ports first (dealt in chunks of
/// consecutive ports, round-robin: `Deal`), then one other thread's share,
/// each in turn, when its own had nothing pending or every
/// `STEAL_EVERY_PASSES` (8) passes (every other share, when its own had
/// nothing, right after a sleep and once the kernel is over). A
/// region leaves the pool
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
    // Whose share an `Others::Next` look goes to: each other thread's in turn.
    let mut turn: u32 = 0;
    while outcome.iter().any(Option::is_none) {
        let mut served = 0;
        passes = passes.wrapping_add(1);
        for ((r, out), count) in regions.iter().zip(outcome.iter_mut()).zip(counts.iter_mut()) {
            if out.is_some() {
                continue;
            }
            let deal = Deal::new(r.server.layout().port_count(), threads);
            // Acquire: pairs with the backend's release store of `done` after
            // the kernel finished, so the final pass sees every mailbox flip
            // the kernel made (fire-and-forget calls nobody waits for too).
            let finished = r.done.load(Ordering::Acquire);
            let pass = (|| {
                let mut n = r.dispatcher.poll_ranges(r.server, deal.own(thread))?;
                // The pass that may be the last (`finished`) looks at every
                // port: a thread that never started, or left the region,
                // has no pass of its own to drain its share.
                match looks_at_others(threads, n, passes, backoff.slept() || finished) {
                    Others::None => {}
                    Others::All => n += r.dispatcher.poll_ranges(r.server, deal.others(thread))?,
                    Others::Next => {
                        let d = 1 + turn % (threads - 1);
                        turn = turn.wrapping_add(1);
                        n += r.dispatcher.poll_ranges(r.server, deal.own((thread + d) % threads))?;
                    }
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

/// Ports whose mailbox words share one 64-byte line (each side's mailbox is
/// an array of `u32` starting on a line, see `Layout`): the most ports one
/// chunk of a [`Deal`] holds, so that two threads' chunks never share a
/// mailbox line.
const CHUNK_PORTS: u32 = 64 / core::mem::size_of::<u32>() as u32;

/// How a pool's threads share a region's ports: dealt out in chunks of
/// consecutive ports (at most [`CHUNK_PORTS`], fewer when there are fewer
/// ports per thread), chunk `k` to thread `k % threads`. Clients take ports
/// from the front (a warp starts its scan at its global warp index), so a
/// kernel with fewer warps than ports uses a prefix of them; dealt in
/// chunks, any prefix is shared evenly, where contiguous slices gave every
/// call of 528 warps on 4096 ports to one of eight threads and left the
/// others scanning its slice.
#[derive(Clone, Copy, Debug)]
struct Deal {
    ports: u32,
    threads: u32,
    chunk: u32,
}

impl Deal {
    fn new(ports: u32, threads: u32) -> Deal {
        let threads = threads.max(1);
        Deal {
            ports,
            threads,
            // A lone thread scans all its ports as one range.
            chunk: if threads == 1 {
                ports.max(1)
            } else {
                (ports / threads).clamp(1, CHUNK_PORTS)
            },
        }
    }

    /// Thread `t`'s own ports, as ranges in increasing order.
    fn own(self, t: u32) -> impl Iterator<Item = core::ops::Range<u32>> {
        let chunks = self.ports.div_ceil(self.chunk);
        (t..chunks)
            .step_by(self.threads as usize)
            .map(move |k| k * self.chunk..((k + 1) * self.chunk).min(self.ports))
    }

    /// Every other thread's ports: those of thread `t + 1`, then `t + 2`, ...
    fn others(self, t: u32) -> impl Iterator<Item = core::ops::Range<u32>> {
        (1..self.threads).flat_map(move |d| self.own((t + d) % self.threads))
    }
}

/// Which other threads' shares a pass looks at after its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Others {
    None,
    All,
    /// One other thread's share: each in turn, from look to look (a turn
    /// of its own, not the pass count, which a thread busy on every other
    /// pass would tie to one share).
    Next,
}

/// Which other threads' shares pass `pass` of one of `threads` server
/// threads, which served `own` calls in its own share, goes on to (see
/// `STEAL_EVERY_PASSES`). A thread that has just woken from a sleep, or
/// whose pass may be its last on the region (`wide`), looks at every port:
/// the pool's first thread wakes most often
/// and rings the others awake, so that the first call after a silence
/// waits for one of its sleeps, wherever it is. A spinning thread whose
/// own share was empty looks at one other share per pass, in turn: looking
/// at all of them on every such pass costs a cache miss on every mailbox
/// line the GPU wrote in them, for calls their owners mostly serve a moment
/// later (BENCHMARKS.md, workload 2: with the sampled metrics, 8 threads on
/// 2112 warps and 4096 ports went from 3.8 to 11 M warp-calls/s).
fn looks_at_others(threads: u32, own: usize, pass: u32, wide: bool) -> Others {
    if threads <= 1 {
        Others::None
    } else if own == 0 && wide {
        Others::All
    } else if own == 0 || pass.is_multiple_of(STEAL_EVERY_PASSES) {
        Others::Next
    } else {
        Others::None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread that woke from a sleep (or may be on its last pass) looks
    /// at every port; one whose own share had nothing, at the next other
    /// share; one kept busy by its own share still looks at the next other
    /// share every `STEAL_EVERY_PASSES` passes, so a thread held up in a
    /// slow host method never leaves its ports unserved for long; a lone
    /// thread has no others.
    #[test]
    fn busy_threads_look_at_other_slices_now_and_then() {
        assert!((0..100).all(|pass| looks_at_others(4, 0, pass, true) == Others::All));
        assert!((0..100).all(|pass| looks_at_others(4, 0, pass, false) == Others::Next));
        for wide in [false, true] {
            let looks = (1..=6 * STEAL_EVERY_PASSES)
                .filter(|&pass| looks_at_others(4, 3, pass, wide) == Others::Next)
                .count();
            assert_eq!(looks, 6);
            assert!((0..100).all(|pass| looks_at_others(4, 3, pass, wide) != Others::All));
            assert!((0..100).all(|pass| looks_at_others(1, 0, pass, wide) == Others::None));
            assert!((0..100).all(|pass| looks_at_others(1, 5, pass, wide) == Others::None));
        }
    }

    /// Two of four server threads never started (the OS refused them): the
    /// calls left in one of their shares when the kernel is over are served
    /// by the others' last passes, which look at every port. (A look at
    /// the next share only would leave these: thread 0 looks at thread
    /// 1's, thread 3 at thread 0's.)
    #[test]
    fn the_last_passes_serve_the_share_of_a_thread_that_never_started() {
        use crate::call::NOOP_DESC;
        use crate::cpu::{CpuRegion, RawDevice};
        use crate::protocol::{Buffer, Layout};
        let region = CpuRegion::new(Layout::new(64, 1).unwrap());
        // SAFETY: no client uses the region; this thread plays the device.
        let dev = unsafe { RawDevice::new(&region) };
        let deal = Deal::new(64, 4);
        let missing: Vec<u32> = ports_of(deal.own(2));
        assert_eq!(missing.len(), 16);
        for &p in &missing {
            let mut b = Buffer::default();
            b.data[0] = NOOP_DESC.frame_word().pack();
            b.data[1] = p as u64;
            dev.inject(p, NOOP_DESC.opcode, 1, &[(0, b)]);
        }
        let d = Dispatcher::new(ServerConfig::default());
        let server = region.server();
        // The kernel is over: these are calls nobody waits for.
        let done = AtomicBool::new(true);
        let idle = Idle::new(d.config().idle);
        let pool = [Served {
            server: &server,
            dispatcher: &d,
            done: &done,
        }];
        let served: u64 = [0, 3].iter().map(|&t| serve_pool(&pool, t, 4, &idle)[0].unwrap()).sum();
        assert_eq!(served, 16);
        for &p in &missing {
            assert!(dev.owned(p), "port {p} left unserved");
            assert_eq!(dev.reply_word(p, 0, 1), p as u64 + 1, "port {p}");
        }
    }

    fn ports_of(ranges: impl Iterator<Item = core::ops::Range<u32>>) -> Vec<u32> {
        ranges.flatten().collect()
    }

    /// Every port belongs to exactly one thread, whatever the counts; a
    /// thread's others are every port but its own.
    #[test]
    fn a_deal_gives_every_port_to_one_thread() {
        for ports in [1, 2, 7, 16, 17, 64, 100, 512, 4096, 4099] {
            for threads in [1, 2, 3, 4, 8, 16, 200] {
                let deal = Deal::new(ports, threads);
                let mut owner = vec![None; ports as usize];
                for t in 0..threads {
                    for p in ports_of(deal.own(t)) {
                        assert_eq!(
                            owner[p as usize], None,
                            "port {p} dealt twice ({ports} ports, {threads} threads)"
                        );
                        owner[p as usize] = Some(t);
                    }
                }
                assert!(
                    owner.iter().all(Option::is_some),
                    "{ports} ports, {threads} threads: a port left out"
                );
                for t in 0..threads {
                    let mut all = ports_of(deal.own(t).chain(deal.others(t)));
                    all.sort_unstable();
                    assert_eq!(all, (0..ports).collect::<Vec<_>>());
                }
            }
        }
    }

    /// The ports a kernel with fewer warps than ports uses (a prefix: warps
    /// start at their warp index) are shared evenly, and no two threads'
    /// chunks share a mailbox line.
    #[test]
    fn a_prefix_of_the_ports_is_shared_evenly() {
        for (ports, threads, used) in [
            (4096, 8, 528),
            (4096, 8, 2112),
            (4096, 4, 528),
            (512, 8, 512),
            (64, 8, 64),
        ] {
            let deal = Deal::new(ports, threads);
            let shares: Vec<usize> = (0..threads)
                .map(|t| ports_of(deal.own(t)).iter().filter(|&&p| p < used).count())
                .collect();
            let (lo, hi) = (*shares.iter().min().unwrap(), *shares.iter().max().unwrap());
            assert!(
                hi - lo <= CHUNK_PORTS as usize,
                "{used} of {ports} ports over {threads} threads: {shares:?}"
            );
            if deal.chunk == CHUNK_PORTS {
                for r in (0..threads).flat_map(|t| deal.own(t)) {
                    assert!(
                        r.start % CHUNK_PORTS == 0 && r.len() <= CHUNK_PORTS as usize,
                        "{r:?}: not within one line"
                    );
                }
            }
        }
    }
}
