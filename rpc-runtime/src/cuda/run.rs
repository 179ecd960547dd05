//! Launching: the launch configuration, streams and events, one kernel
//! run, and [`launch_many`], which launches kernels and serves them from
//! one pool of server threads.

use std::ffi::c_void;
use std::time::{Duration, Instant};

use cudarc::driver::{result, sys, DriverError};

use crate::host::{launch_and_serve, HostJob, RunKernel};
use crate::protocol::{ClientDesc, MAX_PORTS};
use crate::server::{Dispatcher, IdleBackoff, IdlePolicy, Wait};

use super::*;

/// How to launch a kernel and serve it.
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::cuda::Launch;
/// let l = Launch { grid: (2, 1, 1), block: (96, 1, 1), ..Launch::default() };
/// assert_eq!(l.warps(), 2 * 3);
/// assert_eq!(l.server_threads, 2);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// Blocks in the grid `(x, y, z)`.
    pub grid: (u32, u32, u32),
    /// Threads per block `(x, y, z)`; warps are formed from consecutive
    /// threads, a partial last warp is fine.
    pub block: (u32, u32, u32),
    /// Dynamic shared memory per block, in bytes.
    pub shared_mem_bytes: u32,
    /// Ports of the region [`launch`] creates (it uses
    /// `min(port_count, warps())`); ignored by [`launch_with_region`]. Default
    /// [`DEFAULT_PORT_COUNT`].
    pub port_count: u32,
    /// Host server threads; each scans its own share of the ports (dealt in
    /// chunks, see the README's "Protocol"), and the rest when its share is
    /// idle or every few passes. Default 2: a server
    /// thread serves one port's call to its end (a slow handler, or a client
    /// slow to send its next packet, holds it), so with one thread nothing
    /// else is served meanwhile.
    pub server_threads: usize,
}

impl Default for Launch {
    fn default() -> Self {
        Launch {
            grid: (1, 1, 1),
            block: (32, 1, 1),
            shared_mem_bytes: 0,
            port_count: DEFAULT_PORT_COUNT,
            server_threads: 2,
        }
    }
}

impl Launch {
    /// Warps in the grid (`blocks × ceil(threads per block / 32)`).
    ///
    /// ```
    /// # use rpc_runtime as gpu_rpc;
    /// let l = gpu_rpc::cuda::Launch { grid: (4, 2, 1), block: (33, 1, 1), ..Default::default() };
    /// assert_eq!(l.warps(), 8 * 2);
    /// ```
    pub fn warps(&self) -> u64 {
        let blocks = self.grid.0 as u64 * self.grid.1 as u64 * self.grid.2 as u64;
        let threads = self.block.0 as u64 * self.block.1 as u64 * self.block.2 as u64;
        blocks * threads.div_ceil(LANE_SIZE as u64)
    }

    pub(super) fn validate(&self) -> Result<(), CudaError> {
        let (g, b) = (self.grid, self.block);
        if g.0 == 0 || g.1 == 0 || g.2 == 0 || b.0 == 0 || b.1 == 0 || b.2 == 0 {
            return Err(CudaError::config(format!(
                "grid {g:?} and block {b:?} must not have a zero dimension"
            )));
        }
        Ok(())
    }
}

/// Error codes after which the context is unusable (CUDA docs: "the process
/// is left in an inconsistent state and any further CUDA work will return the
/// same error").
pub(super) fn is_sticky(code: sys::CUresult) -> bool {
    use sys::CUresult::*;
    matches!(
        code,
        CUDA_ERROR_ILLEGAL_ADDRESS
            | CUDA_ERROR_LAUNCH_FAILED
            | CUDA_ERROR_ILLEGAL_INSTRUCTION
            | CUDA_ERROR_ASSERT
            | CUDA_ERROR_MISALIGNED_ADDRESS
            | CUDA_ERROR_INVALID_ADDRESS_SPACE
            | CUDA_ERROR_INVALID_PC
            | CUDA_ERROR_HARDWARE_STACK_ERROR
            | CUDA_ERROR_LAUNCH_TIMEOUT
            | CUDA_ERROR_ECC_UNCORRECTABLE
            | CUDA_ERROR_CONTAINED
    )
}

pub(super) fn kernel_error(kernel: &str, e: DriverError) -> CudaError {
    use sys::CUresult::*;
    let (code, name, mut message) = describe(e);
    let hint = match e.0 {
        CUDA_ERROR_LAUNCH_FAILED => " (usually a `trap`: a device-side panic or abort)",
        CUDA_ERROR_ASSERT => " (a device-side assertion failed)",
        CUDA_ERROR_ILLEGAL_ADDRESS => {
            " (an access to memory the kernel may not touch: check pointer arguments and the ClientDesc)"
        }
        CUDA_ERROR_MISALIGNED_ADDRESS => " (a misaligned load or store)",
        CUDA_ERROR_ILLEGAL_INSTRUCTION => {
            " (an instruction the device cannot execute, e.g. code built for another architecture)"
        }
        CUDA_ERROR_LAUNCH_TIMEOUT => " (the kernel ran into the display watchdog)",
        _ => "",
    };
    message.push_str(hint);
    CudaError::KernelFault {
        kernel: kernel.to_string(),
        code,
        name,
        message,
        context_lost: is_sticky(e.0),
    }
}

/// Launch `kernel` on the stream and wait until it is over. Returns the
/// kernel's GPU time, or how it failed. When this returns, the kernel is not
/// running (finished, faulted or never launched).
pub(super) fn run_kernel(
    device: &CudaDevice,
    kernel: &Kernel<'_>,
    launch: &Launch,
    params: &mut [*mut c_void],
) -> Result<Option<Duration>, CudaError> {
    kernel.check_block(launch)?;
    // cudarc's safe layer for the stream and the timing events; the launch
    // itself goes through the raw layer, as `Kernel` holds a raw function
    // (see `Module`).
    let ctx = device.context();
    device.bind()?;
    let stream = guard("creating a stream", || ctx.new_stream())?;
    let timed = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
    let start = guard("recording an event", || stream.record_event(timed))?;
    let func = kernel.func;
    let s = stream.cu_stream();
    // SAFETY: `func` is a live function of a loaded module; `params` holds one
    // pointer per kernel parameter (checked against the driver's parameter
    // info when available), each to a value of the parameter's size that
    // outlives the kernel (the caller keeps them until this returns, and this
    // returns only after the kernel is over); every address inside them is
    // memory that outlives the launch; the context is current.
    let launched = raw_guard("launching a kernel", || unsafe {
        result::launch_kernel(func, launch.grid, launch.block, launch.shared_mem_bytes, s, params)
    })?;
    if let Err(e) = launched {
        let (code, name, message) = describe(e);
        return Err(CudaError::LaunchFailed {
            kernel: kernel.name.clone(),
            code,
            name,
            message,
        });
    }
    let stop = guard("recording an event", || stream.record_event(timed));
    // The watcher waits as an idle server thread does under the default
    // policy: it yields through the first millisecond (short kernels), then
    // sleeps 50 µs doubling to 1 ms, so it does not compete with the server
    // threads, a long kernel costs it about a thousand wake-ups a second and
    // the kernel's end is noticed within a millisecond (its time comes from
    // CUDA events).
    let mut backoff = IdleBackoff::new(IdlePolicy::default(), 0, Instant::now());
    loop {
        let state = raw_guard("waiting for a kernel", || {
            // SAFETY: `s` is a live stream of the current context.
            unsafe { sys::cuStreamQuery(s) }.result()
        })?;
        match state {
            Ok(()) => break,
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NOT_READY => match backoff.after_empty_pass(Instant::now()) {
                Wait::Spin => std::thread::yield_now(),
                Wait::Sleep(d) => std::thread::sleep(d),
            },
            Err(e) => return Err(kernel_error(&kernel.name, e)),
        }
    }
    let Ok(stop) = stop else {
        return Ok(None);
    };
    let ms = guard("reading the kernel time", || start.elapsed_ms(&stop));
    Ok(match ms {
        Ok(ms) if ms >= 0.0 => Some(Duration::from_secs_f64(ms as f64 / 1e3)),
        _ => None,
    })
}

/// Launch `kernel(desc, extra...)` on a fresh region of
/// `min(launch.port_count, launch.warps())` ports and serve its calls with
/// `dispatcher` on `launch.server_threads` host threads until the kernel has
/// finished and every call has been served.
///
/// The kernel's first parameter must be the [`ClientDesc`] by value (24
/// bytes, `#[repr(C)]`, align 8); `extra` follows it. When the driver reports
/// parameter sizes (CUDA 12.4+), they are checked before launching.
///
/// On a fault the server threads are stopped and [`CudaError::KernelFault`] is
/// returned; see [the module docs](crate::cuda) on sticky errors. A kernel that
/// never finishes (e.g. waiting for a reply that never comes) blocks this
/// call: there is no timeout, as memory a running kernel uses cannot be freed.
///
/// ```no_run
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::cuda::{launch, CudaDevice, KernelArg, Launch, Module, PinnedBuffer};
/// use gpu_rpc::server::{Dispatcher, ServerConfig};
/// let dev = CudaDevice::new(0)?;
/// let module = Module::from_ptx_file(&dev, "kernels.ptx")?;
/// let kernel = module.kernel("rpc_noop_kernel")?;
/// let out = PinnedBuffer::new(&dev, 32 * 8)?;
/// let d = Dispatcher::new(ServerConfig::default());
/// let report = launch(&kernel, &Launch::default(), &d, &[KernelArg::U32(10), KernelArg::Ptr(out.device_ptr())])?;
/// assert_eq!(report.errors, 0);
/// # Ok::<(), gpu_rpc::cuda::CudaError>(())
/// ```
pub fn launch(
    kernel: &Kernel<'_>,
    launch: &Launch,
    dispatcher: &Dispatcher,
    extra: &[KernelArg],
) -> Result<Report, CudaError> {
    launch.validate()?;
    kernel.check_args(extra)?;
    let ports = launch.warps().min(launch.port_count as u64).clamp(1, MAX_PORTS as u64) as u32;
    let region = CudaRegion::new(kernel.module.device(), ports)?;
    launch_with_region(&region, kernel, launch, dispatcher, extra)
}

/// [`launch`] on an existing region (its port count wins over
/// `launch.port_count`), so a test can check
/// [`is_quiescent`](CudaRegion::is_quiescent) afterwards. A region can serve
/// one launch after another as long as every kernel left its ports idle.
///
/// ```no_run
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::cuda::{launch_with_region, CudaDevice, CudaRegion, KernelArg, Launch, Module, PinnedBuffer};
/// use gpu_rpc::server::{Dispatcher, ServerConfig};
/// let dev = CudaDevice::new(0)?;
/// let module = Module::from_ptx_file(&dev, "kernels.ptx")?;
/// let kernel = module.kernel("rpc_noop_kernel")?;
/// let region = CudaRegion::new(&dev, 16)?;
/// let out = PinnedBuffer::new(&dev, 256 * 8)?;
/// let d = Dispatcher::new(ServerConfig::default());
/// let cfg = Launch { grid: (4, 1, 1), block: (64, 1, 1), server_threads: 2, ..Launch::default() };
/// launch_with_region(&region, &kernel, &cfg, &d, &[KernelArg::U32(10), KernelArg::Ptr(out.device_ptr())])?;
/// assert!(region.is_quiescent()?);
/// # Ok::<(), gpu_rpc::cuda::CudaError>(())
/// ```
pub fn launch_with_region(
    region: &CudaRegion,
    kernel: &Kernel<'_>,
    launch: &Launch,
    dispatcher: &Dispatcher,
    extra: &[KernelArg],
) -> Result<Report, CudaError> {
    let job = Job {
        region,
        kernel,
        launch,
        dispatcher,
        extra,
    };
    launch_many(std::slice::from_ref(&job)).pop().expect("one job")
}

/// One kernel launch of [`launch_many`] (see [`LaunchJob`](crate::launch::LaunchJob)).
pub type Job<'a, 'm> = crate::launch::LaunchJob<'a, CudaRegion, Kernel<'m>, Launch>;

/// A job's kernel parameters: the values and the array of pointers to them
/// the driver reads. Boxed so the pointers stay valid while it moves.
pub(super) struct Params {
    _desc: Box<ClientDesc>,
    _slots: Vec<u64>,
    ptrs: Vec<*mut c_void>,
}

// SAFETY: the pointers point into the boxed values owned by the same struct;
// they are only handed to the driver by the one thread that owns the struct.
unsafe impl Send for Params {}

impl Params {
    fn new(desc: ClientDesc, extra: &[KernelArg]) -> Params {
        let mut desc = Box::new(desc);
        let mut slots: Vec<u64> = extra.iter().map(KernelArg::bits).collect();
        let mut ptrs: Vec<*mut c_void> = Vec::with_capacity(1 + slots.len());
        ptrs.push((&mut *desc as *mut ClientDesc).cast());
        ptrs.extend(slots.iter_mut().map(|s| (s as *mut u64).cast::<c_void>()));
        Params {
            _desc: desc,
            _slots: slots,
            ptrs,
        }
    }
}

/// Launch several kernels at once — on one GPU (each on its own stream and
/// region) or on several — and serve all of them from one pool of server
/// threads (the largest `server_threads` of the jobs), until every kernel is
/// over. Each job ends on its own: one that fails to launch, faults or
/// abandons a call reports its error, and the others are still served (a
/// fault that makes a device's context unusable ends every job on that
/// device, as CUDA's sticky errors do). Returns one result per job, in order.
///
/// ```no_run
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::cuda::{launch_many, CudaDevice, CudaRegion, Job, KernelArg, Launch, Module, PinnedBuffer};
/// use gpu_rpc::server::{Dispatcher, ServerConfig};
/// let dev = CudaDevice::new(0)?;
/// let module = Module::from_ptx_file(&dev, "kernels.ptx")?;
/// let kernel = module.kernel("rpc_noop_kernel")?;
/// let (ra, rb) = (CudaRegion::new(&dev, 64)?, CudaRegion::new(&dev, 64)?);
/// let (oa, ob) = (PinnedBuffer::new(&dev, 1024 * 8)?, PinnedBuffer::new(&dev, 1024 * 8)?);
/// let (da, db) = (Dispatcher::new(ServerConfig::default()), Dispatcher::new(ServerConfig::default()));
/// let cfg = Launch { grid: (8, 1, 1), block: (128, 1, 1), server_threads: 2, ..Launch::default() };
/// let (xa, xb) = ([KernelArg::U32(10), KernelArg::Ptr(oa.device_ptr())], [KernelArg::U32(10), KernelArg::Ptr(ob.device_ptr())]);
/// let jobs = [
///     Job { region: &ra, kernel: &kernel, launch: &cfg, dispatcher: &da, extra: &xa },
///     Job { region: &rb, kernel: &kernel, launch: &cfg, dispatcher: &db, extra: &xb },
/// ];
/// for r in launch_many(&jobs) {
///     assert_eq!(r?.calls, 32 * 10);
/// }
/// # Ok::<(), gpu_rpc::cuda::CudaError>(())
/// ```
pub fn launch_many(jobs: &[Job<'_, '_>]) -> Vec<Result<Report, CudaError>> {
    let threads = crate::launch::pool_threads(jobs.iter().map(|j| j.launch.server_threads));
    // Check every job before anything runs.
    let host_jobs = jobs
        .iter()
        .map(|job| {
            let run = check_job(job).map(|()| {
                let mut params = Params::new(job.region.client_desc(), job.extra);
                let device = job.region.device();
                Box::new(move || {
                    // The whole of `params` moves to the thread (it is `Send`,
                    // its pointer array alone is not).
                    let params = &mut params;
                    device.bind()?;
                    run_kernel(device, job.kernel, job.launch, &mut params.ptrs)
                }) as RunKernel<'_, CudaError>
            });
            HostJob {
                server: job.region.server(),
                dispatcher: job.dispatcher,
                run,
            }
        })
        .collect();
    let outcomes = launch_and_serve(host_jobs, threads, false, |what, e| {
        CudaError::config(format!("{what}: {e}"))
    });
    jobs.iter()
        .zip(outcomes)
        .map(|(job, o)| {
            Report::from_outcome(o, job.region.layout.port_count(), |abandoned| CudaError::Abandoned {
                kernel: job.kernel.name.clone(),
                abandoned,
            })
        })
        .collect()
}

/// What must hold before a job's kernel may run: a valid configuration,
/// arguments matching the kernel, region and kernel on one context, and a
/// region at rest.
fn check_job(job: &Job<'_, '_>) -> Result<(), CudaError> {
    job.launch.validate()?;
    job.kernel.check_args(job.extra)?;
    let device = job.region.device();
    if !device.same_context(job.kernel.module.device()) {
        return Err(CudaError::config(format!(
            "the region is on CUDA device {} but kernel `{}` is loaded on device {}",
            device.ordinal(),
            job.kernel.name,
            job.kernel.module.device().ordinal()
        )));
    }
    device.bind()?;
    device.ensure_stack_size(MIN_STACK_BYTES)?;
    // A call an earlier launch abandoned keeps its port: this launch's
    // clients would wait for it forever.
    if job.region.is_quiescent()? {
        return Ok(());
    }
    let port = job
        .region
        .busy_ports()?
        .first()
        .map_or("a port is held".to_string(), |p| p.to_string());
    Err(CudaError::config(format!(
        "the region is not at rest ({port}): an earlier launch abandoned a call on it; use a fresh region"
    )))
}
