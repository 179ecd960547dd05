//! The two GPU backends gpu-run drives (CUDA for PTX, HSA for AMD code
//! objects) behind one small interface, so that one run path
//! ([`run_on`](crate::run_on)) opens the devices, loads the image, fills
//! each device's argv buffer and launches and serves every device's kernel,
//! whichever backend it is.

use gpu_rpc::launch::{KernelArg, LaunchJob, MappedBuffer};
use gpu_rpc::server::Dispatcher;

/// What one run needs from a backend. `Self` is the loaded image's source
/// (the PTX text, or the parsed code object).
pub(crate) trait Backend {
    /// The backend's error.
    type Error: std::fmt::Display;
    /// A device.
    type Device;
    /// The image loaded on a device.
    type Module;
    /// A kernel of a module.
    type Kernel<'m>
    where
        Self: 'm;
    /// The RPC region of one device.
    type Region;
    /// Host memory the device reads (the argv block).
    type Buffer: MappedBuffer;
    /// Grid, block, ports and server threads.
    type Launch;

    /// Visible devices.
    fn count() -> Result<usize, Self::Error>;
    /// Device `ordinal`.
    fn open(ordinal: usize) -> Result<Self::Device, Self::Error>;
    /// This image, loaded on `device`.
    fn load(&self, device: &Self::Device) -> Result<Self::Module, Self::Error>;
    /// The kernel `name` of `module`.
    fn kernel<'m>(module: &'m Self::Module, name: &str) -> Result<Self::Kernel<'m>, Self::Error>
    where
        Self: 'm;
    /// The launch configuration.
    fn launch(grid: (u32, u32, u32), block: (u32, u32, u32), server_threads: usize, ports: Option<u32>)
        -> Self::Launch;
    /// A region for `launch` on `device`: a port per warp (wavefront), at
    /// most the configuration's port count.
    fn region(device: &Self::Device, launch: &Self::Launch) -> Result<Self::Region, Self::Error>;
    /// `len` bytes of host memory `device` reads.
    fn buffer(device: &Self::Device, len: usize) -> Result<Self::Buffer, Self::Error>;
    /// The address at which the device sees `buffer`.
    fn device_ptr(buffer: &Self::Buffer) -> u64;
    /// Launch every job's kernel at once and serve them all until each ends.
    fn launch_many<'m>(
        jobs: &[LaunchJob<'_, Self::Region, Self::Kernel<'m>, Self::Launch>],
    ) -> Vec<Result<(), Self::Error>>
    where
        Self: 'm;
}

/// Ports for `warps` warps and a configured `port_count`.
fn ports(warps: u64, port_count: u32) -> u32 {
    warps.min(port_count as u64).clamp(1, 65536) as u32
}

/// CUDA: the image is PTX text, a cubin or a fatbin.
pub(crate) struct Cuda<'a>(pub(crate) &'a [u8]);

impl Backend for Cuda<'_> {
    type Error = gpu_rpc::cuda::CudaError;
    type Device = gpu_rpc::cuda::CudaDevice;
    type Module = gpu_rpc::cuda::Module;
    type Kernel<'m>
        = gpu_rpc::cuda::Kernel<'m>
    where
        Self: 'm;
    type Region = gpu_rpc::cuda::CudaRegion;
    type Buffer = gpu_rpc::cuda::PinnedBuffer;
    type Launch = gpu_rpc::cuda::Launch;

    fn count() -> Result<usize, Self::Error> {
        gpu_rpc::cuda::CudaDevice::count()
    }
    fn open(ordinal: usize) -> Result<Self::Device, Self::Error> {
        gpu_rpc::cuda::CudaDevice::new(ordinal)
    }
    fn load(&self, device: &Self::Device) -> Result<Self::Module, Self::Error> {
        gpu_rpc::cuda::Module::from_image(device, self.0)
    }
    fn kernel<'m>(module: &'m Self::Module, name: &str) -> Result<Self::Kernel<'m>, Self::Error>
    where
        Self: 'm,
    {
        module.kernel(name)
    }
    fn launch(
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        server_threads: usize,
        ports: Option<u32>,
    ) -> Self::Launch {
        let d = gpu_rpc::cuda::Launch::default();
        gpu_rpc::cuda::Launch {
            grid,
            block,
            server_threads,
            port_count: ports.unwrap_or(d.port_count),
            ..d
        }
    }
    fn region(device: &Self::Device, launch: &Self::Launch) -> Result<Self::Region, Self::Error> {
        gpu_rpc::cuda::CudaRegion::new(device, ports(launch.warps(), launch.port_count))
    }
    fn buffer(device: &Self::Device, len: usize) -> Result<Self::Buffer, Self::Error> {
        gpu_rpc::cuda::PinnedBuffer::new(device, len)
    }
    fn device_ptr(buffer: &Self::Buffer) -> u64 {
        buffer.device_ptr()
    }
    fn launch_many<'m>(
        jobs: &[LaunchJob<'_, Self::Region, Self::Kernel<'m>, Self::Launch>],
    ) -> Vec<Result<(), Self::Error>>
    where
        Self: 'm,
    {
        gpu_rpc::cuda::launch_many(jobs)
            .into_iter()
            .map(|r| r.map(drop))
            .collect()
    }
}

/// HSA: the image is an AMD GPU code object.
pub(crate) struct CodeObject(pub(crate) gpu_rpc::hsa::CodeObject);

impl Backend for CodeObject {
    type Error = gpu_rpc::hsa::HsaError;
    type Device = gpu_rpc::hsa::HsaDevice;
    type Module = gpu_rpc::hsa::Module;
    type Kernel<'m>
        = gpu_rpc::hsa::Kernel<'m>
    where
        Self: 'm;
    type Region = gpu_rpc::hsa::HsaRegion;
    type Buffer = gpu_rpc::hsa::HsaBuffer;
    type Launch = gpu_rpc::hsa::Launch;

    fn count() -> Result<usize, Self::Error> {
        gpu_rpc::hsa::HsaDevice::count()
    }
    fn open(ordinal: usize) -> Result<Self::Device, Self::Error> {
        gpu_rpc::hsa::HsaDevice::new(ordinal)
    }
    fn load(&self, device: &Self::Device) -> Result<Self::Module, Self::Error> {
        gpu_rpc::hsa::Module::load(device, &self.0)
    }
    fn kernel<'m>(module: &'m Self::Module, name: &str) -> Result<Self::Kernel<'m>, Self::Error>
    where
        Self: 'm,
    {
        module.kernel(name)
    }
    fn launch(
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        server_threads: usize,
        ports: Option<u32>,
    ) -> Self::Launch {
        let d = gpu_rpc::hsa::Launch::default();
        gpu_rpc::hsa::Launch {
            grid,
            block,
            server_threads,
            port_count: ports.unwrap_or(d.port_count),
            ..d
        }
    }
    fn region(device: &Self::Device, launch: &Self::Launch) -> Result<Self::Region, Self::Error> {
        let waves = launch.wavefronts(device.wavefront_size());
        gpu_rpc::hsa::HsaRegion::new(device, ports(waves, launch.port_count))
    }
    fn buffer(device: &Self::Device, len: usize) -> Result<Self::Buffer, Self::Error> {
        gpu_rpc::hsa::HsaBuffer::new(device, len)
    }
    fn device_ptr(buffer: &Self::Buffer) -> u64 {
        buffer.device_ptr()
    }
    fn launch_many<'m>(
        jobs: &[LaunchJob<'_, Self::Region, Self::Kernel<'m>, Self::Launch>],
    ) -> Vec<Result<(), Self::Error>>
    where
        Self: 'm,
    {
        gpu_rpc::hsa::launch_many(jobs)
            .into_iter()
            .map(|r| r.map(drop))
            .collect()
    }
}

/// The jobs of one run: device `i`'s region, kernel, the shared launch
/// configuration, its dispatcher and its argv arguments.
pub(crate) fn jobs<'a, R, K, L>(
    regions: &'a [R],
    kernels: &'a [K],
    launch: &'a L,
    dispatchers: &'a [std::sync::Arc<Dispatcher>],
    args: &'a [[KernelArg; 2]],
) -> Vec<LaunchJob<'a, R, K, L>> {
    (0..regions.len())
        .map(|i| LaunchJob {
            region: &regions[i],
            kernel: &kernels[i],
            launch,
            dispatcher: &dispatchers[i],
            extra: &args[i],
        })
        .collect()
}
