//! Launching: the launch configuration, one kernel run on the queue, and
//! serving it from host threads until it is over.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::host::{launch_and_serve, HostJob, RunKernel};
use crate::protocol::MAX_PORTS;
use crate::server::Dispatcher;

use super::ffi::{Api, Signal, Status};
use super::*;

/// How to launch a kernel and serve it (the same fields as
/// [`cuda::Launch`](crate::cuda)); `grid` counts workgroups, `block`
/// work-items per workgroup.
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::hsa::Launch;
/// let l = Launch { grid: (2, 1, 1), block: (96, 1, 1), ..Launch::default() };
/// assert_eq!(l.wavefronts(64), 2 * 2);
/// assert_eq!(l.server_threads, 2);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// Workgroups in the grid `(x, y, z)`.
    pub grid: (u32, u32, u32),
    /// Work-items per workgroup `(x, y, z)`; each at most 65535 (AQL packs
    /// them in 16 bits), 1024 in total on current GPUs.
    pub block: (u32, u32, u32),
    /// Dynamic group (LDS) memory per workgroup, in bytes.
    pub shared_mem_bytes: u32,
    /// Ports of the region [`launch`] creates (it uses
    /// `min(port_count, wavefronts)`); ignored by [`launch_with_region`].
    pub port_count: u32,
    /// Host server threads. Default 2, as on CUDA (one slow call does not
    /// stall the other ports).
    pub server_threads: usize,
}

impl Default for Launch {
    fn default() -> Self {
        Launch {
            grid: (1, 1, 1),
            block: (64, 1, 1),
            shared_mem_bytes: 0,
            port_count: DEFAULT_PORT_COUNT,
            server_threads: 2,
        }
    }
}

impl Launch {
    /// Wavefronts in the grid for a wavefront size.
    ///
    /// ```
    /// # use rpc_runtime as gpu_rpc;
    /// let l = gpu_rpc::hsa::Launch { grid: (4, 2, 1), block: (65, 1, 1), ..Default::default() };
    /// assert_eq!(l.wavefronts(64), 8 * 2);
    /// assert_eq!(l.wavefronts(32), 8 * 3);
    /// ```
    pub fn wavefronts(&self, wave: u32) -> u64 {
        let blocks = self.grid.0 as u64 * self.grid.1 as u64 * self.grid.2 as u64;
        let items = self.block.0 as u64 * self.block.1 as u64 * self.block.2 as u64;
        blocks * items.div_ceil(wave.max(1) as u64)
    }

    /// The dispatch's dimension count: 3 if anything spans z, else 2 if
    /// anything spans y, else 1.
    ///
    /// ```
    /// # use rpc_runtime as gpu_rpc;
    /// use gpu_rpc::hsa::Launch;
    /// assert_eq!(Launch::default().dimensions(), 1);
    /// assert_eq!(Launch { grid: (1, 2, 1), ..Launch::default() }.dimensions(), 2);
    /// assert_eq!(Launch { block: (8, 8, 2), ..Launch::default() }.dimensions(), 3);
    /// ```
    pub fn dimensions(&self) -> u16 {
        let (g, b) = (self.grid, self.block);
        if g.2 > 1 || b.2 > 1 {
            3
        } else if g.1 > 1 || b.1 > 1 {
            2
        } else {
            1
        }
    }

    pub(super) fn validate(&self) -> Result<(), HsaError> {
        let (g, b) = (self.grid, self.block);
        if g.0 == 0 || g.1 == 0 || g.2 == 0 || b.0 == 0 || b.1 == 0 || b.2 == 0 {
            return Err(HsaError::config(format!(
                "grid {g:?} and block {b:?} must not have a zero dimension"
            )));
        }
        if b.0 > u16::MAX as u32 || b.1 > u16::MAX as u32 || b.2 > u16::MAX as u32 {
            return Err(HsaError::config(format!(
                "block {b:?}: an AQL packet holds at most 65535 work-items per dimension"
            )));
        }
        Ok(())
    }
}

/// An HSA signal, destroyed on drop.
pub(super) struct SignalGuard {
    api: &'static Api,
    raw: Signal,
}

impl SignalGuard {
    fn new(api: &'static Api, initial: i64) -> Result<Self, HsaError> {
        let mut raw = Signal::default();
        // SAFETY: no consumer list (any agent may wait); `raw` is a valid place.
        let r = unsafe { (api.signal_create)(initial, 0, std::ptr::null(), &mut raw) };
        check(api, "creating the completion signal", r)?;
        Ok(SignalGuard { api, raw })
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once, after the kernel using it
        // completed (or was never dispatched).
        let _ = unsafe { (self.api.signal_destroy)(self.raw) };
    }
}

/// A queue and its error slot, destroyed on drop.
pub(super) struct QueueGuard {
    api: &'static Api,
    raw: *mut ffi::Queue,
    /// The first error the runtime reported for the queue (0: none). Boxed so
    /// its address, handed to the runtime's callback, stays put.
    error: Box<AtomicU32>,
}

extern "C" fn queue_error(status: Status, _queue: *mut ffi::Queue, data: *mut c_void) {
    // SAFETY: `data` is the `AtomicU32` boxed in the `QueueGuard`, which
    // outlives the queue (destroyed in its `Drop` before the box is freed).
    let slot = unsafe { &*data.cast::<AtomicU32>() };
    // Release: pairs with the launcher's acquire load; no other data is
    // published, but it keeps the first error. The CAS keeps the first one.
    let _ = slot.compare_exchange(0, status.max(1), Ordering::Release, Ordering::Relaxed);
}

impl QueueGuard {
    fn new(device: &HsaDevice) -> Result<Self, HsaError> {
        let api = device.api();
        let error = Box::new(AtomicU32::new(0));
        let mut raw: *mut ffi::Queue = std::ptr::null_mut();
        // SAFETY: the callback's data is the boxed atomic, alive until after
        // `hsa_queue_destroy`; u32::MAX segment sizes let the runtime choose;
        // `raw` is a valid place for the result.
        let r = unsafe {
            (api.queue_create)(
                device.inner.gpu,
                device.inner.queue_size,
                ffi::QUEUE_TYPE_SINGLE,
                Some(queue_error),
                (&*error as *const AtomicU32).cast_mut().cast(),
                u32::MAX,
                u32::MAX,
                &mut raw,
            )
        };
        check(api, "creating a queue", r)?;
        if raw.is_null() {
            return Err(HsaError::config("the runtime returned a null queue"));
        }
        Ok(QueueGuard { api, raw, error })
    }

    fn error(&self) -> Status {
        // Acquire: pairs with the callback's release CAS.
        self.error.load(Ordering::Acquire)
    }

    /// Write `packet` into the next slot, publish its header, ring the
    /// doorbell.
    fn dispatch(&self, packet: &aql::KernelDispatchPacket, setup_header: u32) {
        let api = self.api;
        // SAFETY: `raw` is a live queue created by the runtime; its fields are
        // read-only for us.
        let (base, size, doorbell) = unsafe {
            let q = &*self.raw;
            (
                q.base_address.cast::<aql::KernelDispatchPacket>(),
                q.size as u64,
                q.doorbell_signal,
            )
        };
        // SAFETY: a live queue; reserving one slot.
        let index = unsafe { (api.queue_add_write_index)(self.raw, 1) };
        // Wait until the slot is free (the packet processor has read the
        // packet that used it `size` dispatches ago).
        // SAFETY: a live queue.
        while index - unsafe { (api.queue_load_read_index)(self.raw) } >= size {
            std::thread::yield_now();
        }
        // SAFETY: `index % size` is a slot of the ring buffer (`size` packets
        // of 64 bytes at `base`), reserved for us above and free; its header
        // still says INVALID, so the packet processor ignores it while the
        // body is written.
        let slot = unsafe { base.add((index % size) as usize) };
        // SAFETY: as above; the body (bytes 4..64) is written first.
        unsafe {
            let mut body = *packet;
            body.header = aql::PACKET_TYPE_INVALID << aql::HEADER_TYPE;
            body.setup = 0;
            std::ptr::copy_nonoverlapping(
                (&body as *const aql::KernelDispatchPacket).cast::<u8>().add(4),
                slot.cast::<u8>().add(4),
                60,
            );
        }
        // SAFETY: the slot's first 4 bytes are 4-aligned (the ring is
        // 64-byte aligned) and only accessed atomically by us and the
        // packet processor from now on.
        let word = unsafe { AtomicU32::from_ptr(slot.cast::<u32>()) };
        // Release: the body written above is visible to the packet processor
        // before the header that makes the packet valid (the AQL protocol).
        word.store(setup_header, Ordering::Release);
        // SAFETY: the queue's doorbell signal; storing the packet index rings it.
        unsafe { (api.signal_store)(doorbell, index as i64) };
    }
}

impl Drop for QueueGuard {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once, after its kernel
        // completed; the callback data (`error`) is freed only after this.
        let _ = unsafe { (self.api.queue_destroy)(self.raw) };
    }
}

/// Dispatch and wait until the completion signal fires or the queue reports
/// an error. When this returns, the kernel is not running (or never started).
pub(super) fn run_kernel(
    kernel: &Kernel<'_>,
    launch: &Launch,
    desc_ptr: u64,
    extra: &[KernelArg],
) -> Result<(), HsaError> {
    let device = kernel.module.device();
    let api = device.api();
    let queue = QueueGuard::new(device)?;
    let signal = SignalGuard::new(api, 1)?;
    let args = kernarg_segment(desc_ptr, extra, kernel.kernarg_size as usize, launch, queue.raw as u64).map_err(
        |e| match e {
            HsaError::InvalidConfig { message } => HsaError::KernelSignature {
                kernel: kernel.name.clone(),
                message,
            },
            e => e,
        },
    )?;
    let kernarg = HsaBuffer::from_pool(device, device.inner.kernarg_pool, args.len().max(16))?;
    if kernarg.device_ptr() % (kernel.kernarg_align.max(16) as u64) != 0 {
        return Err(HsaError::config(
            "the kernarg allocation is not aligned as the kernel needs",
        ));
    }
    // SAFETY: `kernarg` holds at least `args.len()` bytes and nothing else
    // uses it yet.
    unsafe { std::ptr::copy_nonoverlapping(args.as_ptr(), kernarg.host_ptr(), args.len()) };
    let packet = dispatch_packet(
        launch,
        kernel.object,
        kernarg.device_ptr(),
        signal.raw.handle,
        kernel.private_size,
        kernel.group_size,
    )?;
    queue.dispatch(&packet, aql::header_word(aql::kernel_dispatch_header(), packet.setup));
    loop {
        // SAFETY: a live signal; wait (blocked, about a millisecond at a
        // time) until its value drops below 1: the packet completed.
        let v = unsafe {
            (api.signal_wait)(
                signal.raw,
                ffi::SIGNAL_CONDITION_LT,
                1,
                1_000_000,
                ffi::WAIT_STATE_BLOCKED,
            )
        };
        if v < 1 {
            return Ok(());
        }
        let err = queue.error();
        if err != 0 {
            return Err(HsaError::KernelFault {
                kernel: kernel.name.clone(),
                code: err,
                name: status_name(err).to_string(),
                message: format!(
                    "{} (the queue is in an error state: a memory fault, a trap such as a device-side panic, or an invalid packet)",
                    status_message(api, err)
                ),
            });
        }
    }
}

/// Launch `kernel(desc, extra...)` on a fresh region of
/// `min(launch.port_count, wavefronts)` ports and serve its calls with
/// `dispatcher` on `launch.server_threads` host threads until the kernel has
/// finished and every call has been served. The API mirrors
/// [`cuda::launch`](crate::cuda); the kernel's first parameter is a
/// `*const ClientDesc` (see the [module docs](crate::hsa)).
///
/// A kernel that never finishes blocks this call (no timeout: memory a
/// running kernel uses cannot be freed). A queue error (memory fault, trap)
/// ends it with [`HsaError::KernelFault`], although ROCm usually aborts the
/// process itself on a GPU memory fault.
///
/// ```no_run
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::hsa::{launch, HsaBuffer, HsaDevice, KernelArg, Launch, Module};
/// use gpu_rpc::server::{Dispatcher, ServerConfig};
/// let dev = HsaDevice::new(0)?;
/// let module = Module::from_file(&dev, "kernels.hsaco")?;
/// let kernel = module.kernel("rpc_noop_kernel")?;
/// let out = HsaBuffer::new(&dev, 64 * 8)?;
/// let d = Dispatcher::new(ServerConfig::default());
/// let report = launch(&kernel, &Launch::default(), &d, &[KernelArg::U32(10), KernelArg::Ptr(out.device_ptr())])?;
/// assert_eq!(report.errors, 0);
/// # Ok::<(), gpu_rpc::hsa::HsaError>(())
/// ```
pub fn launch(
    kernel: &Kernel<'_>,
    launch: &Launch,
    dispatcher: &Dispatcher,
    extra: &[KernelArg],
) -> Result<Report, HsaError> {
    launch.validate()?;
    let device = kernel.module.device();
    let waves = launch.wavefronts(device.wavefront_size());
    let ports = waves.min(launch.port_count as u64).clamp(1, MAX_PORTS as u64) as u32;
    let region = HsaRegion::new(device, ports)?;
    launch_with_region(&region, kernel, launch, dispatcher, extra)
}

/// [`launch`] on an existing region (its port count wins over
/// `launch.port_count`), so a test can check
/// [`is_quiescent`](HsaRegion::is_quiescent) afterwards.
///
/// ```no_run
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::hsa::{launch_with_region, HsaBuffer, HsaDevice, HsaRegion, KernelArg, Launch, Module};
/// use gpu_rpc::server::{Dispatcher, ServerConfig};
/// let dev = HsaDevice::new(0)?;
/// let module = Module::from_file(&dev, "kernels.hsaco")?;
/// let kernel = module.kernel("rpc_noop_kernel")?;
/// let region = HsaRegion::new(&dev, 16)?;
/// let out = HsaBuffer::new(&dev, 256 * 8)?;
/// let d = Dispatcher::new(ServerConfig::default());
/// let cfg = Launch { grid: (4, 1, 1), block: (64, 1, 1), server_threads: 2, ..Launch::default() };
/// launch_with_region(&region, &kernel, &cfg, &d, &[KernelArg::U32(10), KernelArg::Ptr(out.device_ptr())])?;
/// assert!(region.is_quiescent()?);
/// # Ok::<(), gpu_rpc::hsa::HsaError>(())
/// ```
pub fn launch_with_region(
    region: &HsaRegion,
    kernel: &Kernel<'_>,
    launch: &Launch,
    dispatcher: &Dispatcher,
    extra: &[KernelArg],
) -> Result<Report, HsaError> {
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
pub type Job<'a, 'm> = crate::launch::LaunchJob<'a, HsaRegion, Kernel<'m>, Launch>;

/// Launch several kernels at once — on one GPU agent (each on its own queue
/// and region) or on several — and serve all of them from one pool of server
/// threads (the largest `server_threads` of the jobs), until every kernel is
/// over: the same path as [`cuda::launch_many`](crate::cuda). Each job ends
/// on its own; returns one result per job, in order.
///
/// ```no_run
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::hsa::{launch_many, HsaBuffer, HsaDevice, HsaRegion, Job, KernelArg, Launch, Module};
/// use gpu_rpc::server::{Dispatcher, ServerConfig};
/// let devs = [HsaDevice::new(0)?, HsaDevice::new(1)?];
/// let modules = [Module::from_file(&devs[0], "kernels.hsaco")?, Module::from_file(&devs[1], "kernels.hsaco")?];
/// let kernels = [modules[0].kernel("rpc_noop_kernel")?, modules[1].kernel("rpc_noop_kernel")?];
/// let regions = [HsaRegion::new(&devs[0], 64)?, HsaRegion::new(&devs[1], 64)?];
/// let outs = [HsaBuffer::new(&devs[0], 512 * 8)?, HsaBuffer::new(&devs[1], 512 * 8)?];
/// let ds = [Dispatcher::new(ServerConfig::default()), Dispatcher::new(ServerConfig::default())];
/// let cfg = Launch { grid: (8, 1, 1), block: (64, 1, 1), ..Launch::default() };
/// let extras = [
///     [KernelArg::U32(10), KernelArg::Ptr(outs[0].device_ptr())],
///     [KernelArg::U32(10), KernelArg::Ptr(outs[1].device_ptr())],
/// ];
/// let jobs: Vec<Job> = (0..2)
///     .map(|i| Job { region: &regions[i], kernel: &kernels[i], launch: &cfg, dispatcher: &ds[i], extra: &extras[i] })
///     .collect();
/// for r in launch_many(&jobs) {
///     assert_eq!(r?.calls, 8 * 10);
/// }
/// # Ok::<(), gpu_rpc::hsa::HsaError>(())
/// ```
pub fn launch_many(jobs: &[Job<'_, '_>]) -> Vec<Result<Report, HsaError>> {
    let threads = crate::launch::pool_threads(jobs.iter().map(|j| j.launch.server_threads));
    let host_jobs = jobs
        .iter()
        .map(|job| HostJob {
            server: job.region.server(),
            dispatcher: job.dispatcher,
            run: check_job(job).map(|()| {
                let desc_ptr = job.region.desc_ptr();
                Box::new(move || run_kernel(job.kernel, job.launch, desc_ptr, job.extra).map(|()| None))
                    as RunKernel<'_, HsaError>
            }),
        })
        .collect();
    let outcomes = launch_and_serve(host_jobs, threads, false, |what, e| {
        HsaError::config(format!("{what}: {e}"))
    });
    jobs.iter()
        .zip(outcomes)
        .map(|(job, o)| {
            Report::from_outcome(o, job.region.layout.port_count(), |abandoned| HsaError::Abandoned {
                kernel: job.kernel.name.clone(),
                abandoned,
            })
        })
        .collect()
}

/// What must hold before a job's kernel may run: a valid configuration,
/// region and kernel on one agent, and a region at rest.
fn check_job(job: &Job<'_, '_>) -> Result<(), HsaError> {
    job.launch.validate()?;
    if !job.region.device().same_agent(job.kernel.module.device()) {
        return Err(HsaError::config(format!(
            "the region is on GPU agent {} but kernel `{}` is loaded on agent {}",
            job.region.device().ordinal(),
            job.kernel.name,
            job.kernel.module.device().ordinal()
        )));
    }
    // A call an earlier launch abandoned keeps its port: this launch's
    // clients would wait for it forever.
    if !job.region.is_quiescent()? {
        return Err(HsaError::config(
            "the region is not at rest: an earlier launch abandoned a call on it; use a fresh region",
        ));
    }
    Ok(())
}
