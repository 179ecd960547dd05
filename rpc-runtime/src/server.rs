//! The host server: finds ports with pending calls, decodes their frames,
//! dispatches them to [`Service`]s and sends the replies.
//!
//! The server trusts nothing that comes from the device: lengths are checked
//! against [`ServerConfig::max_stream_bytes`] before anything is allocated
//! (and storage grows only with the bytes that actually arrive), values are
//! validated by [`Wire::decode`], a frame word must match the method's
//! exactly, a lane mask naming lanes the layout lacks is refused, a handler
//! that panics is caught. Every such event answers the affected lanes with an
//! error [`Status`], is recorded as a [`ServerError`] naming the opcode, port
//! and lane (whole-call errors: `lane: None` and the lane mask in the
//! message), and the server goes on. A call whose client stops half-way is
//! given up when the abort flag is raised (the kernel ended) and recorded too.
//!
//! This file holds the configuration, the errors and the [`Service`] trait;
//! `dispatcher.rs` the routing and error log, `serve_call.rs` the server's
//! half of the call frame, `direct.rs` its copies of slices that go by
//! address, `server_call.rs` the call as generated dispatch code sees it,
//! `parallel.rs` how a `#[gpu_rpc(parallel)]` method's lanes
//! run on several threads, `lane_pool.rs` the helper threads they run on, `lane_records.rs` the flat per-lane storage of its argument blocks and
//! return values, `spare.rs` the large buffers a thread keeps between calls
//! for slices no lent memory holds, `pool.rs` the loop of a server thread, `idle.rs` how that
//! loop waits when nothing is pending.
//!
//! ```
//! # use rpc_runtime as gpu_rpc;
//! use gpu_rpc::server::{Dispatcher, ServerConfig};
//! let d = Dispatcher::new(ServerConfig::default());
//! assert!(d.errors().is_empty());
//! ```

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io::Write as _;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::call::{self, CallDesc, FrameWord, Status, FRAME_VERSION, MAX_IN_STREAMS, MAX_OUT_STREAMS};
use crate::device_memory::DeviceMemory;
use crate::metrics::{time_next_call, CallRecord, Counters, MethodMetrics, Tally};
use crate::protocol::{opcodes, Abandoned, Fresh, Port, Server, ServerSide, BUFFER_BYTES, MAX_LANES};
use crate::wire::Wire;

/// Server limits.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Largest streamed argument or out-buffer, in bytes, one lane may send or
    /// ask for (default 64 MiB). Larger ones are consumed without being stored
    /// and answered with [`Status::TooLarge`].
    pub max_stream_bytes: u64,
    /// The memory budget of one warp-call: the streamed arguments and
    /// out-buffers of all its lanes together, in bytes (default 256 MiB).
    /// Lanes whose buffers would take the call past it are answered with
    /// [`Status::TooLarge`] before anything is allocated for them; the host
    /// then holds at most about twice this per call in flight (the buffers,
    /// and the out-buffers' encoded copies).
    pub max_call_bytes: u64,
    /// The most buffer memory one server thread keeps between calls for
    /// streamed arguments and out-buffers, in bytes (default 64 MiB: one
    /// slice of the largest default size). A slice that goes by address
    /// and finds no pinned memory lent for it (the backend's pinned budget
    /// taken or too small, or a backend that lends none) is copied into a kept
    /// buffer instead of fresh memory, whose first pass costs a page fault
    /// per page (on the build machine, 64 MiB: 90-100 ms fresh, 12-15 ms
    /// kept). Past this, the largest buffers are freed after each call; 0
    /// keeps none. With `n` server threads the host may keep `n` times this.
    pub keep_bytes: usize,
    /// Keep per-method metrics ([`Dispatcher::metrics`]; default true: a
    /// clock read or two and a few relaxed atomic adds per warp-call,
    /// measured in the CPU bench).
    pub metrics: bool,
    /// Print each [`ServerError`] to stderr as it happens (default true).
    pub log_errors: bool,
    /// How many recent errors [`Dispatcher::errors`] keeps (default 1024).
    pub keep_errors: usize,
    /// How the server threads wait when nothing is pending: spin, then
    /// sleep ([`IdlePolicy`]; default a 1 ms spin, then sleeps of 50 µs
    /// doubling to 1 ms).
    pub idle: IdlePolicy,
    /// The most host threads the lanes of one call to a
    /// `#[gpu_rpc(parallel)]` method run on, the serving thread included
    /// (default 4; 0 or 1 runs them in lane order on the serving thread, as
    /// a plain method's). The dispatcher starts `lane_threads - 1` helper
    /// threads at the first call that needs them and keeps them, parked,
    /// until it is dropped; the server threads share them.
    pub lane_threads: usize,
    /// A call to a `#[gpu_rpc(parallel)]` method runs on one thread per
    /// this many bytes of its lanes' streamed arguments and out-buffers, up
    /// to [`lane_threads`](Self::lane_threads) (default 256 KiB: a call of
    /// less than twice that runs in lane order; 0: every call of two lanes
    /// or more on `lane_threads`). The kept helpers spin for work as long
    /// as idle server threads do ([`IdlePolicy::spin`]), then park; waking
    /// a parked one costs as much as a thread start on the GPU machine's
    /// host (about 250 µs). On a memory-bound fill of lent out-buffers
    /// (BENCHMARKS.md, section 3) four threads gave 1.16-1.27× at 2 MiB a
    /// call and 2.0-2.6× at 32 MiB, against every lane on the serving
    /// thread.
    pub parallel_min_bytes: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_stream_bytes: 64 << 20,
            max_call_bytes: 256 << 20,
            keep_bytes: 64 << 20,
            metrics: true,
            log_errors: true,
            keep_errors: 1024,
            idle: IdlePolicy::default(),
            lane_threads: 4,
            parallel_min_bytes: 256 << 10,
        }
    }
}

/// Something the server refused or that failed while serving a call.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("gpu_rpc server: {message} (opcode {opcode:#010x}{method}, port {port}{lane})",
    method = self.method.map(|m| format!(" {m}")).unwrap_or_default(),
    lane = self.lane.map(|l| format!(", lane {l}")).unwrap_or_default())]
pub struct ServerError {
    /// The call's opcode.
    pub opcode: u32,
    /// `Service::method`, when the opcode is known.
    pub method: Option<&'static str>,
    /// The port.
    pub port: u32,
    /// The lane, when the error concerns one lane. Whole-call errors
    /// (invalid lane mask, bad frame, unknown opcode, signature mismatch, an
    /// abandoned call) have `None` and name the lane mask in `message`.
    pub lane: Option<u32>,
    /// The status the lane(s) received; [`Status::Unknown`] for a call
    /// abandoned when the kernel ended (its lanes received nothing).
    pub status: Status,
    /// What happened.
    pub message: String,
}

/// One method as the server sees it; generated by `#[gpu_rpc]`.
#[derive(Debug)]
pub struct MethodInfo {
    /// The call description shared with the client stub.
    pub desc: &'static CallDesc,
    /// `Service::method`, for messages.
    pub path: &'static str,
    /// The module that defines the trait (`module_path!()` where
    /// `#[gpu_rpc]` was used): tells same-named traits apart in
    /// [`OpcodeCollision`].
    pub module: &'static str,
}

impl MethodInfo {
    /// `module::Service::method`.
    ///
    /// ```
    /// # use rpc_runtime as gpu_rpc;
    /// use gpu_rpc::server::MethodInfo;
    /// use gpu_rpc::CallDesc;
    /// static DESC: CallDesc = CallDesc { opcode: 0x1_0100, ..gpu_rpc::call::NOOP_DESC };
    /// let m = MethodInfo { desc: &DESC, path: "Lab::inspect", module: "physics" };
    /// assert_eq!(m.qualified(), "physics::Lab::inspect");
    /// ```
    pub fn qualified(&self) -> String {
        format!("{}::{}", self.module, self.path)
    }
}

/// A set of methods served together: what `#[gpu_rpc]` generates for a trait
/// (`HostServicesServer<T>` wraps a `T: HostServices`).
pub trait Service: Send + Sync {
    /// The service's name (the trait's).
    fn name(&self) -> &'static str;
    /// Its methods.
    fn methods(&self) -> &'static [MethodInfo];
    /// Run method `index` (into [`methods`](Self::methods)) for every lane of
    /// `call`.
    fn dispatch(&self, index: usize, call: &mut ServerCall<'_>);
}

/// Two services claim one opcode.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("gpu_rpc: opcode {opcode:#010x} is claimed by both {first} and {second}")]
pub struct OpcodeCollision {
    /// The opcode.
    pub opcode: u32,
    /// The method registered first (`module::Service::method`).
    pub first: String,
    /// The method that collided (`module::Service::method`).
    pub second: String,
}

/// Why [`Dispatcher::add`] refused a service.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AddError {
    /// Two services claim one opcode.
    #[error(transparent)]
    Collision(#[from] OpcodeCollision),
    /// A method's description breaks the frame's limits
    /// ([`CallDesc::problem`]; only hand-made descriptions can).
    #[error("{problem} (method {path})")]
    InvalidMethod {
        /// The method.
        path: &'static str,
        /// What is wrong.
        problem: &'static str,
    },
}

mod call_end;
mod direct;
mod dispatcher;
mod idle;
mod lane_pool;
mod lane_records;
mod parallel;
mod pool;
mod serve_call;
mod server_call;
mod spare;
mod zeroing;

pub use call_end::{at_call_end, current_call, is_last_lane};
pub use dispatcher::Dispatcher;
pub use idle::{Idle, IdleBackoff, IdlePolicy, Wait, OTHERS_SLEEP_FACTOR};
pub use pool::{serve_pool, Served};
pub(crate) use server_call::panic_message;
pub use server_call::{clip_message, iter_lanes, LaneError, LaneSlice, OutBuffer, ServerCall, MAX_MESSAGE_BYTES};

/// With the `tracing` feature: a span per served call, named by method,
/// opcode, port and lanes, and a warning event per server error.
#[cfg(all(test, feature = "tracing", feature = "cpu"))]
mod tracing_tests {
    use std::fmt::Write as _;
    use std::sync::{Arc, Mutex};

    use tracing::field::{Field, Visit};
    use tracing::{span, Event, Metadata, Subscriber};

    use super::{Dispatcher, ServerConfig};
    use crate::call::{Block, CallDesc, NOOP_DESC};
    use crate::cpu::{self, Launch};

    /// A method nobody serves.
    static UNKNOWN: CallDesc = CallDesc {
        opcode: 0xdead_beef,
        method: "unknown",
        ..NOOP_DESC
    };

    /// Every span and event, as `name field=value ...` lines.
    #[derive(Clone, Default)]
    struct Recorder(Arc<Mutex<Vec<String>>>);

    struct Line<'a>(&'a mut String);

    impl Visit for Line<'_> {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }

    impl Subscriber for Recorder {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, attrs: &span::Attributes<'_>) -> span::Id {
            let mut line = format!("span {}", attrs.metadata().name());
            attrs.record(&mut Line(&mut line));
            let mut lines = self.0.lock().unwrap();
            lines.push(line);
            span::Id::from_u64(lines.len() as u64)
        }
        fn record(&self, _: &span::Id, _: &span::Record<'_>) {}
        fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}
        fn event(&self, event: &Event<'_>) {
            let mut line = format!("event {}", event.metadata().level());
            event.record(&mut Line(&mut line));
            self.0.lock().unwrap().push(line);
        }
        fn enter(&self, _: &span::Id) {}
        fn exit(&self, _: &span::Id) {}
    }

    #[test]
    fn calls_are_spans_and_errors_are_events() {
        let rec = Recorder::default();
        // Global: the calls are served on the run's server threads.
        tracing::subscriber::set_global_default(rec.clone()).unwrap();
        let d = Dispatcher::new(ServerConfig {
            log_errors: false,
            ..ServerConfig::default()
        });
        let launch = Launch {
            threads: 1,
            port_count: 1,
            ..Launch::default()
        };
        cpu::launch(&launch, &d, |client, _| {
            assert_eq!(client.noop(1).unwrap(), 2);
            // Nobody serves this opcode: an error, logged as an event.
            let call = client.begin(&UNKNOWN, &Block(1u64.to_le_bytes()));
            let mut ret = Block([0u8; 8]);
            let reply = call.reply(&mut ret);
            assert!(reply.result().is_err());
            reply.close();
        })
        .unwrap();
        let lines = rec.0.lock().unwrap().clone();
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("span gpu_rpc_call method=\"gpu_rpc::noop\"") && l.contains("port=0")),
            "{lines:#?}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("event WARN") && l.contains("opcode=3735928559")),
            "{lines:#?}"
        );
    }
}
