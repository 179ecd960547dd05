//! Serving kernels the caller launches: [`Serve`] runs server threads in the
//! background over a region on the caller's `cudarc` context, so a program
//! that already launches its kernels with `cudarc` keeps its launch code and
//! passes [`Serve::desc`] as the kernel's first argument.

use std::fmt;
use std::panic::resume_unwind;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use cudarc::driver::{result, CudaContext};

use crate::protocol::{Abandoned, ClientDesc};
use crate::server::{serve_pool, Dispatcher, Idle, Served};

use super::*;

/// How [`Serve`] serves: the region's size and the server threads.
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// let cfg = gpu_rpc::cuda::ServeConfig::default();
/// assert_eq!((cfg.port_count, cfg.server_threads), (gpu_rpc::cuda::DEFAULT_PORT_COUNT, 2));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServeConfig {
    /// Ports of the region (1 ..= [`MAX_PORTS`](crate::protocol::MAX_PORTS)); a warp needs one while it
    /// makes a call, so more ports than warps in flight only cost scan time.
    /// Default [`DEFAULT_PORT_COUNT`].
    pub port_count: u32,
    /// Host server threads. Default 2, as [`Launch::server_threads`].
    pub server_threads: usize,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            port_count: DEFAULT_PORT_COUNT,
            server_threads: 2,
        }
    }
}

/// What [`Serve`]'s server threads share with it.
struct Shared {
    region: CudaRegion,
    dispatcher: Arc<Dispatcher>,
    /// Set (release) by [`Serve::finish`] or on drop: the servers drain what
    /// is pending and stop.
    stop: AtomicBool,
}

/// Serves the calls of kernels launched by the caller (with `cudarc`'s
/// `launch_builder`, or any other way) on a context the caller owns, until
/// [`finish`](Serve::finish). Several launches, on several streams, may share
/// one `Serve`: every kernel that receives [`desc`](Serve::desc) calls
/// through its region.
///
/// ```no_run
/// # use rpc_runtime as gpu_rpc;
/// use cudarc::driver::{CudaContext, LaunchConfig, PushKernelArg};
/// use cudarc::nvrtc::Ptx;
/// use gpu_rpc::cuda::{Serve, ServeConfig};
/// use gpu_rpc::server::{Dispatcher, ServerConfig};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let ctx = CudaContext::new(0)?;
/// let stream = ctx.default_stream();
/// let module = ctx.load_module(Ptx::from_file("kernels.ptx"))?;
/// let f = module.load_function("rpc_noop_kernel")?; // (desc, iters: u32, out: *mut u64)
/// let mut out = stream.alloc_zeros::<u64>(32)?;
///
/// let rpc = Serve::start(&ctx, Dispatcher::new(ServerConfig::default()), &ServeConfig::default())?;
/// let iters = 10u32;
/// let mut launch = stream.launch_builder(&f);
/// launch.arg(rpc.desc()).arg(&iters).arg(&mut out);
/// // SAFETY: the arguments match the kernel's parameters.
/// unsafe { launch.launch(LaunchConfig::for_num_elems(32)) }?;
/// stream.synchronize()?;
/// let report = rpc.finish()?;
/// assert_eq!(report.calls, 10);
/// # Ok(())
/// # }
/// ```
pub struct Serve {
    shared: Arc<Shared>,
    desc: ClientDesc,
    threads: Vec<JoinHandle<Vec<Result<u64, Abandoned>>>>,
    errors_before: u64,
    started: Instant,
}

impl fmt::Debug for Serve {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Serve")
            .field("desc", &self.desc)
            .field("server_threads", &self.threads.len())
            .finish()
    }
}

// SAFETY: `ClientDesc` is `#[repr(C)]` plain data (two device addresses and
// two `u32`s, 24 bytes, align 8) that the kernel receives by value, exactly
// the bytes `cudarc` copies into the parameter buffer.
unsafe impl cudarc::driver::DeviceRepr for ClientDesc {}

impl Serve {
    /// Create a region of `config.port_count` ports on `ctx` and start
    /// `config.server_threads` threads that serve it with `dispatcher`
    /// (pass an `Arc<Dispatcher>` to read its metrics and errors while or
    /// after serving). Also raises the context's per-thread stack to
    /// [`MIN_STACK_BYTES`], which device-side formatting needs.
    ///
    /// Fails without starting anything when the context's device cannot
    /// serve (see [`CudaDevice::from_context`]), the port count is out of
    /// range, or no thread can be started.
    pub fn start(
        ctx: &Arc<CudaContext>,
        dispatcher: impl Into<Arc<Dispatcher>>,
        config: &ServeConfig,
    ) -> Result<Serve, CudaError> {
        let device = CudaDevice::from_context(ctx)?;
        device.bind()?;
        device.ensure_stack_size(MIN_STACK_BYTES)?;
        let region = CudaRegion::new(&device, config.port_count)?;
        let desc = region.client_desc();
        let dispatcher = dispatcher.into();
        let errors_before = dispatcher.error_count();
        let shared = Arc::new(Shared {
            region,
            dispatcher,
            stop: AtomicBool::new(false),
        });
        let n = config.server_threads.clamp(1, u32::MAX as usize) as u32;
        let idle = Arc::new(Idle::new(shared.dispatcher.config().idle));
        // As for every backend: a thread the OS refuses is left out (the others
        // look at its share too); none at all is an error.
        let threads = crate::spawn::owned_servers(n, |t| {
            let (shared, idle) = (Arc::clone(&shared), Arc::clone(&idle));
            move || {
                let server = shared.region.server().with_abort(&shared.stop);
                let pool = [Served {
                    server: &server,
                    dispatcher: &shared.dispatcher,
                    done: &shared.stop,
                }];
                serve_pool(&pool, t, n, &idle)
            }
        })
        .map_err(|e| CudaError::config(format!("no server thread could be started: {e}")))?;
        Ok(Serve {
            shared,
            desc,
            threads,
            errors_before,
            started: Instant::now(),
        })
    }

    /// The descriptor a kernel receives as its first parameter (by value).
    /// It implements `cudarc`'s `DeviceRepr`, so `builder.arg(rpc.desc())`
    /// passes it.
    pub fn desc(&self) -> &ClientDesc {
        &self.desc
    }

    /// The region being served (to check [`CudaRegion::busy_ports`] while
    /// kernels run, for example).
    pub fn region(&self) -> &CudaRegion {
        &self.shared.region
    }

    /// The dispatcher serving the calls.
    pub fn dispatcher(&self) -> &Arc<Dispatcher> {
        &self.shared.dispatcher
    }

    /// Wait until every kernel on the context is over (serving their calls
    /// meanwhile: a kernel waiting for a reply still gets it), then stop the
    /// server threads and report. A kernel that faulted is
    /// [`CudaError::KernelFault`] (after a sticky fault the context is lost, as
    /// [the module docs](crate::cuda) say); a call a kernel left unfinished
    /// is [`CudaError::Abandoned`].
    pub fn finish(mut self) -> Result<Report, CudaError> {
        let waited = self.wait_for_kernels();
        let outcomes = self.stop_and_join();
        waited?;
        let mut calls = 0;
        for outcome in outcomes {
            match outcome {
                Ok(n) => calls += n,
                Err(abandoned) => {
                    return Err(CudaError::Abandoned {
                        kernel: SERVED_KERNELS.to_string(),
                        abandoned,
                    })
                }
            }
        }
        Ok(Report {
            calls,
            errors: self.shared.dispatcher.error_count() - self.errors_before,
            elapsed: self.started.elapsed(),
            kernel_time: None,
            port_count: self.shared.region.layout.port_count(),
        })
    }

    /// `cuCtxSynchronize` on the region's context, a fault as
    /// [`CudaError::KernelFault`].
    fn wait_for_kernels(&self) -> Result<(), CudaError> {
        self.shared.region.device().bind()?;
        match raw_guard("waiting for the context's kernels", result::ctx::synchronize)? {
            Ok(()) => Ok(()),
            Err(e) => Err(kernel_error(SERVED_KERNELS, e)),
        }
    }

    /// Tell the servers to stop and wait for them; each thread's outcome.
    fn stop_and_join(&mut self) -> Vec<Result<u64, Abandoned>> {
        // Release: pairs with the servers' acquire load in `serve_pool`.
        self.shared.stop.store(true, Ordering::Release);
        let mut outcomes = Vec::new();
        for h in self.threads.drain(..) {
            outcomes.extend(h.join().unwrap_or_else(|p| resume_unwind(p)));
        }
        outcomes
    }
}

/// What errors call the kernels of a [`Serve`] (it does not know their names).
const SERVED_KERNELS: &str = "(launched by the caller)";

impl Drop for Serve {
    /// Without [`finish`](Serve::finish): still waits for the context's
    /// kernels (the region must outlive every kernel that may touch it), then
    /// stops the servers; errors are dropped.
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            let _ = self.wait_for_kernels();
            let _ = self.stop_and_join();
        }
    }
}
