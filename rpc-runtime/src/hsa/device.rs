//! A GPU agent with its queue: [`HsaDevice`].

use std::fmt;
use std::sync::Arc;

use super::ffi::{Agent, Api, MemoryPool};
use super::*;

pub(super) struct DeviceInner {
    pub(super) api: &'static Api,
    pub(super) index: usize,
    pub(super) gpu: Agent,
    pub(super) name: String,
    pub(super) wavefront_size: u32,
    pub(super) compute_units: u32,
    pub(super) profile: u32,
    pub(super) queue_size: u32,
    pub(super) shared_pool: MemoryPool,
    pub(super) kernarg_pool: MemoryPool,
    pub(super) device_pool: MemoryPool,
}

/// One GPU agent of the ROCm runtime and the memory pools the backend uses
/// on it. Cheap to clone.
///
/// ```no_run
/// # use rpc_runtime as gpu_rpc;
/// let dev = gpu_rpc::hsa::HsaDevice::new(0)?;
/// println!("{} ({} CUs, wave{})", dev.name(), dev.compute_units(), dev.wavefront_size());
/// # Ok::<(), gpu_rpc::hsa::HsaError>(())
/// ```
#[derive(Clone)]
pub struct HsaDevice {
    pub(super) inner: Arc<DeviceInner>,
}

impl fmt::Debug for HsaDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HsaDevice")
            .field("index", &self.inner.index)
            .field("name", &self.inner.name)
            .finish()
    }
}

/// The GPU agents that can run kernels, in the runtime's order, and a CPU
/// agent.
pub(super) fn gpu_agents(api: &Api) -> Result<(Vec<Agent>, Option<Agent>), HsaError> {
    let mut gpus = Vec::new();
    let mut cpu = None;
    for agent in all_agents(api)? {
        let kind: u32 = agent_info(api, agent, ffi::AGENT_INFO_DEVICE, "querying an agent's device type")?;
        if kind == ffi::DEVICE_TYPE_CPU && cpu.is_none() {
            cpu = Some(agent);
        } else if kind == ffi::DEVICE_TYPE_GPU {
            let features: u32 = agent_info(api, agent, ffi::AGENT_INFO_FEATURE, "querying an agent's features")?;
            if features & ffi::AGENT_FEATURE_KERNEL_DISPATCH != 0 {
                gpus.push(agent);
            }
        }
    }
    Ok((gpus, cpu))
}

impl HsaDevice {
    /// GPU agent `index` (counting only GPU agents that accept kernel
    /// dispatches). Fails cleanly, never panicking, when the runtime library
    /// cannot be loaded ([`HsaError::LibraryNotFound`]), when there is no
    /// such GPU ([`HsaError::NoGpuAgent`]), or when the system lacks a
    /// fine-grained memory pool the GPU can access ([`HsaError::Unsupported`]).
    ///
    /// ```
    /// # use rpc_runtime as gpu_rpc;
    /// // On a machine without ROCm this is an error that says what to install.
    /// if !gpu_rpc::hsa::runtime_available() {
    ///     let e = gpu_rpc::hsa::HsaDevice::new(0).unwrap_err();
    ///     assert!(e.to_string().contains("libhsa-runtime64"));
    /// }
    /// ```
    pub fn new(index: usize) -> Result<HsaDevice, HsaError> {
        let api = api()?;
        let (gpus, cpu) = gpu_agents(api)?;
        let gpu = *gpus.get(index).ok_or(HsaError::NoGpuAgent {
            index,
            found: gpus.len(),
        })?;
        let unsupported = |reason: &str| HsaError::Unsupported {
            index,
            reason: reason.to_string(),
        };
        let cpu =
            cpu.ok_or_else(|| unsupported("the runtime reports no CPU agent (for fine-grained system memory)"))?;
        let name = agent_name(api, gpu)?;
        let wavefront_size: u32 = agent_info(api, gpu, ffi::AGENT_INFO_WAVEFRONT_SIZE, "querying the wavefront size")?;
        if wavefront_size != 64 && wavefront_size != 32 {
            return Err(unsupported(&format!(
                "wavefront size {wavefront_size}; the backend needs 64 (or 32)"
            )));
        }
        let compute_units: u32 = agent_info(
            api,
            gpu,
            ffi::AMD_AGENT_INFO_COMPUTE_UNIT_COUNT,
            "querying the compute unit count",
        )
        .unwrap_or(0);
        let profile: u32 = agent_info(api, gpu, ffi::AGENT_INFO_PROFILE, "querying the agent's profile")?;
        let qmin: u32 = agent_info(api, gpu, ffi::AGENT_INFO_QUEUE_MIN_SIZE, "querying the queue size")?;
        let qmax: u32 = agent_info(api, gpu, ffi::AGENT_INFO_QUEUE_MAX_SIZE, "querying the queue size")?;
        let queue_size = 64u32.clamp(qmin.max(1), qmax.max(1)).next_power_of_two();

        let cpu_pools = pool_infos(api, cpu, gpu)?;
        let gpu_pools = pool_infos(api, gpu, gpu)?;
        let shared = select_shared_pool(&cpu_pools).ok_or_else(|| {
            unsupported("no fine-grained global memory pool of the CPU agent that the GPU may access (coarse-grained memory cannot carry the protocol)")
        })?;
        let kernarg = select_kernarg_pool(&cpu_pools).unwrap_or(shared);
        let device = select_device_pool(&gpu_pools)
            .ok_or_else(|| unsupported("no global memory pool of the GPU agent allows allocation"))?;
        Ok(HsaDevice {
            inner: Arc::new(DeviceInner {
                api,
                index,
                gpu,
                name,
                wavefront_size,
                compute_units,
                profile,
                queue_size,
                shared_pool: shared.pool,
                kernarg_pool: kernarg.pool,
                device_pool: device.pool,
            }),
        })
    }

    /// Number of GPU agents that accept kernel dispatches (an error when the
    /// runtime cannot be loaded).
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// println!("{} AMD GPUs", gpu_rpc::hsa::HsaDevice::count()?);
    /// # Ok::<(), gpu_rpc::hsa::HsaError>(())
    /// ```
    pub fn count() -> Result<usize, HsaError> {
        Ok(gpu_agents(api()?)?.0.len())
    }

    /// The ordinal this device was opened with (its index among the GPU
    /// agents; named as the CUDA backend's `CudaDevice::ordinal` is).
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// assert_eq!(gpu_rpc::hsa::HsaDevice::new(0)?.ordinal(), 0);
    /// # Ok::<(), gpu_rpc::hsa::HsaError>(())
    /// ```
    pub fn ordinal(&self) -> usize {
        self.inner.index
    }

    /// The agent's name: its processor, e.g. `gfx90a` or `gfx942`.
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// assert!(gpu_rpc::hsa::HsaDevice::new(0)?.name().starts_with("gfx"));
    /// # Ok::<(), gpu_rpc::hsa::HsaError>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Work-items per wavefront (64 on CDNA, 32 on RDNA by default).
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// assert_eq!(gpu_rpc::hsa::HsaDevice::new(0)?.wavefront_size(), 64);
    /// # Ok::<(), gpu_rpc::hsa::HsaError>(())
    /// ```
    pub fn wavefront_size(&self) -> u32 {
        self.inner.wavefront_size
    }

    /// Compute units (0 when the runtime does not say).
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// println!("{}", gpu_rpc::hsa::HsaDevice::new(0)?.compute_units());
    /// # Ok::<(), gpu_rpc::hsa::HsaError>(())
    /// ```
    pub fn compute_units(&self) -> u32 {
        self.inner.compute_units
    }

    pub(super) fn api(&self) -> &'static Api {
        self.inner.api
    }

    pub(super) fn same_agent(&self, other: &HsaDevice) -> bool {
        self.inner.gpu == other.inner.gpu
    }
}
