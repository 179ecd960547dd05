//! The end of the call a host method runs in: work a method leaves for it
//! ([`at_call_end`]), whether the lane running now is the call's last
//! ([`is_last_lane`]) and which call it is ([`current_call`]). A service that hands each lane's output to a shared
//! sink (a printer, a log) can gather the lanes' output of one call and
//! hand it on once, under one lock, instead of once per lane: the standard
//! services print this way.
//!
//! Both look at the thread that runs the method. A call's lanes run one
//! after another on the server thread that serves it ([`ServerCall::run`]);
//! its deferred work runs there after the last of them, before the call's
//! reply is sent, so whatever it does is done when the device sees the
//! call return. On any other thread (a lane of a
//! [`run_parallel`](ServerCall::run_parallel) call on a helper, host code
//! calling a service's methods itself) there is no call to wait for:
//! [`at_call_end`] hands the work back and [`is_last_lane`] is true.

use std::cell::{Cell, RefCell};

#[cfg(doc)]
use super::ServerCall;

// The call the thread is serving, in thread-locals kept apart so that
// the per-lane step (`set_lanes_after`, on every lane of every call) is
// one store to a `Cell` that needs no destructor (no lazy set-up, no
// borrow flag), and the list of work left is touched only by calls that
// leave some.
std::thread_local! {
    /// [`current_call`]'s number for the call being served; 0 outside one.
    static CALL: Cell<u64> = const { Cell::new(0) };
    /// While [`ServerCall::run`] runs a lane: the lanes after it still to
    /// run. 0 between lanes and in a dispatch that does not use `run` (the
    /// thread then cannot tell which lane is last, and takes it as last).
    static LANES_AFTER: Cell<u64> = const { Cell::new(0) };
    /// Work left for the call's end, in the order it was left (touched
    /// only by calls that leave some: `LEFT` says whether there is any).
    static DEFERRED: RefCell<Vec<Box<dyn FnOnce()>>> = const { RefCell::new(Vec::new()) };
    /// Whether `DEFERRED` holds work of the call being served.
    static LEFT: Cell<bool> = const { Cell::new(false) };
    /// Calls this thread has served (numbers them for [`current_call`]).
    static SERVED: Cell<u64> = const { Cell::new(0) };
}

/// Leave `f` for the end of the call whose lane this thread is running: it
/// runs after the call's last lane, on this thread, before the reply is
/// sent. Returns `Err(f)` when the thread runs no call's lane: do the work
/// now. Each `f` runs once, in the order they were left, still inside the
/// call ([`current_call`] is the call's; work it leaves runs after it); one
/// that panics fails the call's lanes that were still `Ok`
/// ([`Status::HandlerPanicked`](crate::Status::HandlerPanicked)).
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::server::at_call_end;
/// // Outside a served call the work comes back at once.
/// let f = at_call_end(|| println!("later")).unwrap_err();
/// f();
/// ```
pub fn at_call_end<F: FnOnce() + 'static>(f: F) -> Result<(), F> {
    if current_call().is_none() {
        return Err(f);
    }
    // `try_with`: `current_call` saw the thread-locals alive.
    let mut work = Some(f);
    let _ = DEFERRED.try_with(|d| {
        if let Some(f) = work.take() {
            d.borrow_mut().push(Box::new(f));
            LEFT.set(true);
        }
    });
    match work {
        None => Ok(()),
        Some(f) => Err(f),
    }
}

/// Whether the lane this thread is running is the last of its call to run:
/// false only while [`ServerCall::run`] runs a lane with lanes after it
/// still to run. True on a thread that runs no call's lane (there is
/// nothing to wait for). A lane after this one may still fail before its
/// method runs; work left with [`at_call_end`] runs in any case.
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// assert!(gpu_rpc::server::is_last_lane());
/// ```
pub fn is_last_lane() -> bool {
    // `try_with`: from a thread-local's destructor there is no call.
    LANES_AFTER.try_with(Cell::get).map_or(true, |after| after == 0)
}

/// Which call this thread is running a lane of: a number no other call
/// this thread serves has (a call served inside a host method, on the
/// same thread, has its own), or `None` outside a call. What a service
/// gathers for one call can so be told apart from another's.
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// assert_eq!(gpu_rpc::server::current_call(), None);
/// ```
pub fn current_call() -> Option<u64> {
    CALL.try_with(Cell::get).ok().filter(|&n| n != 0)
}

/// Mark this thread as serving a call while `dispatch` runs (which must
/// not unwind: the caller catches a panicking dispatch inside it), then run
/// the work its methods left. Returns `dispatch`'s result and the message
/// of the first deferred work that panicked (the rest still run).
pub(super) fn serve<R>(dispatch: impl FnOnce() -> R) -> (R, Option<String>) {
    let number = SERVED.with(|n| {
        // 0 means "no call".
        n.set(n.get().wrapping_add(1).max(1));
        n.get()
    });
    // A host method may serve a call itself (a nested dispatcher): the
    // outer call's state is put back after (its work, if it left any, set
    // aside meanwhile).
    let (outer_call, outer_after) = (CALL.replace(number), LANES_AFTER.replace(0));
    let outer_work = LEFT.replace(false).then(|| DEFERRED.take());
    let r = dispatch();
    // The work runs while the call is still this thread's (what it writes
    // is done before the reply; work it leaves in turn runs too), with no
    // lane running.
    LANES_AFTER.set(0);
    let mut failed = None;
    while LEFT.replace(false) {
        for f in DEFERRED.take() {
            if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
                failed.get_or_insert_with(|| super::panic_message(&*payload));
            }
        }
    }
    CALL.set(outer_call);
    LANES_AFTER.set(outer_after);
    if let Some(work) = outer_work {
        DEFERRED.set(work);
        LEFT.set(true);
    }
    (r, failed)
}

/// Note the lanes after the one [`ServerCall::run`] is about to run (0
/// once it is done).
#[inline]
pub(super) fn set_lanes_after(after: u64) {
    LANES_AFTER.set(after);
}
#[cfg(all(test, feature = "cpu"))]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::call::{CallDesc, NOOP_DESC};
    use crate::cpu::{CpuRegion, RawDevice};
    use crate::protocol::{Buffer, Layout};
    use crate::server::{Dispatcher, LaneError, MethodInfo, ServerCall, ServerConfig, Service};
    use crate::Status;

    static NOTE: CallDesc = CallDesc {
        service: "Ends",
        method: "note",
        opcode: 0x7_0001,
        ..NOOP_DESC
    };
    static METHODS: [MethodInfo; 1] = [MethodInfo {
        desc: &NOTE,
        path: "Ends::note",
        module: "call_end",
    }];

    /// `note(x) -> x`: logs whether its lane is the call's last and leaves
    /// a note for the call's end; x = 99 fails the lane before that, x = 98
    /// leaves work that panics.
    struct Ends(Arc<Mutex<Vec<String>>>);

    impl Service for Ends {
        fn name(&self) -> &'static str {
            "Ends"
        }
        fn methods(&self) -> &'static [MethodInfo] {
            &METHODS
        }
        fn dispatch(&self, _: usize, call: &mut ServerCall<'_>) {
            call.run(|call, lane| {
                let x: u64 = call.arg(lane, 0)?;
                assert!(current_call().is_some(), "a lane's method runs inside its call");
                if x == 99 {
                    return Err(LaneError {
                        status: Status::InvalidArgument,
                        detail: 0,
                        message: "x = 99".into(),
                    });
                }
                self.0
                    .lock()
                    .unwrap()
                    .push(format!("lane {lane} last {}", is_last_lane()));
                let log = Arc::clone(&self.0);
                let call_number = current_call();
                let left = at_call_end(move || {
                    if x == 98 {
                        panic!("deferred boom");
                    }
                    assert_eq!(current_call(), call_number, "work left runs in its own call");
                    log.lock().unwrap().push(format!("end {lane}"));
                    if x == 97 {
                        let log = Arc::clone(&log);
                        let again = at_call_end(move || log.lock().unwrap().push("end again".into()));
                        assert!(again.is_ok(), "work left can leave work");
                    }
                });
                assert!(left.is_ok(), "a lane's method runs inside its call");
                call.set_return(lane, &x);
                Ok(())
            });
        }
    }

    /// One call of `note` on port 0, lane `l` passing `xs[l]`; each lane's
    /// status and the log.
    fn note(xs: &[u64]) -> (Vec<Status>, Vec<String>, Vec<crate::server::ServerError>) {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut d = Dispatcher::new(ServerConfig {
            log_errors: false,
            ..ServerConfig::default()
        });
        d.add(Ends(Arc::clone(&log))).unwrap();
        let region = CpuRegion::new(Layout::new(1, 32).unwrap());
        // SAFETY: no client uses the region; the server validates what it
        // reads.
        let dev = unsafe { RawDevice::new(&region) };
        let packets: Vec<(u32, Buffer)> = xs
            .iter()
            .enumerate()
            .map(|(l, &x)| {
                let mut b = Buffer::default();
                b.data[0] = NOTE.frame_word().pack();
                b.data[1] = x;
                (l as u32, b)
            })
            .collect();
        dev.inject(0, NOTE.opcode, (1u64 << xs.len()) - 1, &packets);
        assert_eq!(d.poll(&region.server(), 0..1), Ok(1));
        let statuses = (0..xs.len() as u32).map(|l| dev.status(0, l)).collect();
        let log = log.lock().unwrap().clone();
        (statuses, log, d.errors())
    }

    #[test]
    fn only_the_last_lane_is_last_and_the_work_left_runs_after_every_lane() {
        let (statuses, log, errors) = note(&[1, 2, 3]);
        assert_eq!(statuses, [Status::Ok; 3]);
        assert_eq!(
            log,
            [
                "lane 0 last false",
                "lane 1 last false",
                "lane 2 last true",
                "end 0",
                "end 1",
                "end 2"
            ]
        );
        assert!(errors.is_empty(), "{errors:?}");
    }

    /// A lane after the last writer fails before its method runs: the
    /// lane before it was not last, and its work still runs at the end.
    #[test]
    fn work_left_runs_when_the_lanes_after_it_fail() {
        let (statuses, log, errors) = note(&[1, 99]);
        assert_eq!(statuses, [Status::Ok, Status::InvalidArgument]);
        assert_eq!(log, ["lane 0 last false", "end 0"]);
        assert_eq!(errors.len(), 1, "{errors:?}");
    }

    /// Work that panics fails the lanes still `Ok`, naming the method; the
    /// other lanes' work runs.
    #[test]
    fn work_left_that_panics_fails_the_call() {
        let (statuses, log, errors) = note(&[98, 1]);
        assert_eq!(statuses, [Status::HandlerPanicked; 2]);
        assert_eq!(log, ["lane 0 last false", "lane 1 last true", "end 1"]);
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors[0]
                .message
                .contains("Ends::note panicked at the call's end: deferred boom"),
            "{}",
            errors[0].message
        );
    }

    /// Work left by work left runs too, before the reply.
    #[test]
    fn work_left_by_work_left_runs_too() {
        let (statuses, log, errors) = note(&[97]);
        assert_eq!(statuses, [Status::Ok]);
        assert_eq!(log, ["lane 0 last true", "end 0", "end again"]);
        assert!(errors.is_empty(), "{errors:?}");
    }

    /// After a call, the thread is outside any call again.
    #[test]
    fn outside_a_call_work_comes_back_and_every_lane_is_last() {
        let _ = note(&[1]);
        assert!(is_last_lane());
        assert_eq!(current_call(), None);
        assert!(at_call_end(|| ()).is_err());
    }
}
