//! `gpu-run`: load a GPU kernel image, launch its entry kernel, serve the
//! standard services (`gpu_rpc::services::Std`: printing, exit, abort, files,
//! time) while it runs, and exit with the kernel's exit code.
//!
//! ```text
//! gpu-run [--threads X[,Y,Z]] [--blocks X[,Y,Z]] [--kernel gpu_main] [--device N] image.ptx [ARGS...]
//! ```
//!
//! The entry kernel has the signature
//! `extern "ptx-kernel" fn gpu_main(desc: ClientDesc, argc: u32, argv: u64)`:
//! `argv` is a device pointer to `argc` device pointers to NUL-terminated
//! strings (the image path first, then `ARGS`), readable with
//! `gpu_rpc::services::args`. The kernel ends the run with
//! `gpu_rpc::services::exit(code)`; a kernel that returns without calling it
//! exits with 0. A device panic (with `gpu_rpc::gpu_panic_handler!()`) is
//! reported with its location and exits with 101; a CUDA fault exits with 1.
//!
//! Exit codes of gpu-run itself: 2 for a bad command line (clap), 1 for an
//! image that cannot be loaded or launched.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use gpu_rpc::server::{Dispatcher, ServerConfig};
use gpu_rpc::services::{StdHost, StdHostConfig, StdServer};

/// Run a GPU kernel image that calls gpu_rpc's standard services.
#[derive(Parser, Debug)]
#[command(name = "gpu-run", version, about)]
struct Cli {
    /// Threads per block: `X` or `X,Y,Z`.
    #[arg(long, default_value = "1", value_parser = parse_dims)]
    threads: (u32, u32, u32),
    /// Blocks in the grid: `X` or `X,Y,Z`.
    #[arg(long, default_value = "1", value_parser = parse_dims)]
    blocks: (u32, u32, u32),
    /// Entry kernel name.
    #[arg(long, default_value = "gpu_main")]
    kernel: String,
    /// GPU to run on (CUDA ordinal or HSA agent index).
    #[arg(long, default_value_t = 0, conflicts_with = "all_devices")]
    device: usize,
    /// Run the kernel on every visible CUDA GPU at once, all served by one
    /// pool of server threads; the run fails if any device's launch fails.
    #[arg(long)]
    all_devices: bool,
    /// RPC ports (default: one per warp, at most 4096).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=65536))]
    ports: Option<u32>,
    /// Host server threads.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    server_threads: u32,
    /// The kernel image: PTX text (NVIDIA) or an AMDGPU code object (AMD, via
    /// ROCm's HSA runtime).
    image: PathBuf,
    /// Arguments passed to the kernel after the image path.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

/// Parse `X` or `X,Y,Z` (each at least 1).
fn parse_dims(s: &str) -> Result<(u32, u32, u32), String> {
    let parts: Vec<&str> = s.split(',').map(str::trim).collect();
    if parts.is_empty() || parts.len() > 3 {
        return Err(format!("`{s}`: expected X or X,Y,Z"));
    }
    let mut v = [1u32; 3];
    for (slot, p) in v.iter_mut().zip(&parts) {
        *slot = p
            .parse::<u32>()
            .map_err(|e| format!("`{p}` is not a positive number: {e}"))?;
        if *slot == 0 {
            return Err(format!("`{s}`: dimensions must be at least 1"));
        }
    }
    Ok((v[0], v[1], v[2]))
}

/// What kind of image a file holds.
#[derive(Debug, PartialEq, Eq)]
enum ImageKind {
    Ptx,
    AmdgpuCodeObject,
}

/// Recognise the image from its first bytes.
fn image_kind(bytes: &[u8]) -> Result<ImageKind, String> {
    if bytes.starts_with(b"\x7fELF") {
        // e_machine at offset 18: 224 is EM_AMDGPU.
        if bytes.len() > 19 && u16::from_le_bytes([bytes[18], bytes[19]]) == 224 {
            return Ok(ImageKind::AmdgpuCodeObject);
        }
        return Err("an ELF file that is not an AMDGPU code object (e_machine is not EM_AMDGPU)".into());
    }
    let text = std::str::from_utf8(bytes).map_err(|_| "neither PTX text nor an ELF code object".to_string())?;
    if text.lines().map(str::trim).any(|l| l.starts_with(".version")) && text.contains(".target") {
        Ok(ImageKind::Ptx)
    } else {
        Err("not PTX (no `.version`/`.target` directives) and not an ELF code object".into())
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(code) => ExitCode::from(code),
        Err(msg) => {
            eprintln!("gpu-run: {msg}");
            ExitCode::from(1)
        }
    }
}

fn run(cli: &Cli) -> Result<u8, String> {
    let bytes = std::fs::read(&cli.image).map_err(|e| format!("cannot read `{}`: {e}", cli.image.display()))?;
    let kind = image_kind(&bytes).map_err(|e| format!("`{}` is {e}", cli.image.display()))?;
    match kind {
        ImageKind::Ptx => run_cuda(cli, &String::from_utf8_lossy(&bytes)),
        ImageKind::AmdgpuCodeObject => run_hsa(cli, bytes),
    }
}

/// The kernel's argv: `[image, args...]`.
fn argv(cli: &Cli) -> Vec<String> {
    std::iter::once(cli.image.display().to_string())
        .chain(cli.args.iter().cloned())
        .collect()
}

/// Bytes of the argv block: the table of device addresses, then the strings.
fn argv_bytes(argv: &[String]) -> usize {
    (8 * argv.len() + argv.iter().map(|a| a.len() + 1).sum::<usize>()).max(8)
}

/// Write `argv` into `host` (a buffer the device sees at `base`): the table of
/// the strings' device addresses, then the NUL-terminated strings.
fn write_argv(argv: &[String], host: &mut [u8], base: u64) {
    let mut off = 8 * argv.len();
    for (i, a) in argv.iter().enumerate() {
        let addr = base + off as u64;
        host[8 * i..8 * i + 8].copy_from_slice(&addr.to_le_bytes());
        host[off..off + a.len()].copy_from_slice(a.as_bytes());
        host[off + a.len()] = 0;
        off += a.len() + 1;
    }
}

/// The standard services, shared with the dispatcher so their state can be
/// read after the launch.
fn std_services() -> Result<(Arc<StdHost>, Dispatcher), String> {
    let host = Arc::new(StdHost::new(StdHostConfig::default()));
    let mut dispatcher = Dispatcher::new(ServerConfig::default());
    dispatcher
        .add(StdServer(Arc::clone(&host)))
        .map_err(|e| e.to_string())?;
    Ok((host, dispatcher))
}

/// The exit code after the launch: a device panic is 101, `exit(code)` ends
/// the process from the service itself, a kernel that returned is 0; a
/// failed launch is an error.
fn exit_code<E: std::fmt::Display>(host: &StdHost, result: Result<(), E>) -> Result<u8, String> {
    let _ = host.flush();
    let panics = host.panics();
    for p in &panics {
        eprintln!("gpu-run: {p}");
    }
    match result {
        Ok(()) if !panics.is_empty() => Ok(101),
        Ok(()) => Ok(host.exit_code().map(|c| c as u8).unwrap_or(0)),
        Err(e) if !panics.is_empty() => {
            eprintln!("gpu-run: the kernel ended after a device panic: {e}");
            Ok(101)
        }
        Err(e) => Err(e.to_string()),
    }
}

fn run_cuda(cli: &Cli, ptx: &str) -> Result<u8, String> {
    use gpu_rpc::cuda::{
        launch_many, CudaDevice, CudaRegion, Job, KernelArg, Launch, MappedBuffer, Module, PinnedBuffer,
    };

    let e = |e: gpu_rpc::cuda::CudaError| e.to_string();
    let ordinals: Vec<usize> = if cli.all_devices {
        (0..CudaDevice::count().map_err(e)?).collect()
    } else {
        vec![cli.device]
    };
    let devices = ordinals
        .iter()
        .map(|&o| CudaDevice::new(o))
        .collect::<Result<Vec<_>, _>>()
        .map_err(e)?;
    let modules = devices
        .iter()
        .map(|d| Module::from_ptx(d, ptx))
        .collect::<Result<Vec<_>, _>>()
        .map_err(e)?;
    let kernels = modules
        .iter()
        .map(|m| m.kernel(&cli.kernel))
        .collect::<Result<Vec<_>, _>>()
        .map_err(e)?;
    let mut cfg = Launch {
        grid: cli.blocks,
        block: cli.threads,
        server_threads: cli.server_threads as usize,
        ..Launch::default()
    };
    if let Some(p) = cli.ports {
        cfg.port_count = p;
    }
    let ports = cfg.warps().min(cfg.port_count as u64).clamp(1, 65536) as u32;
    let argv = argv(cli);
    let mut regions = Vec::new();
    let mut buffers = Vec::new();
    for dev in &devices {
        regions.push(CudaRegion::new(dev, ports).map_err(e)?);
        // argv in pinned memory mapped into this device.
        let mut buf = PinnedBuffer::new(dev, argv_bytes(&argv)).map_err(e)?;
        let base = buf.device_ptr();
        // SAFETY: the buffer is ours and no kernel runs yet.
        write_argv(&argv, unsafe { buf.as_mut_slice() }, base);
        buffers.push(buf);
    }
    // One standard-services host (exit codes, panics, files) for all devices,
    // one dispatcher (and error log) per device.
    let (host, first) = std_services()?;
    let mut dispatchers = vec![first];
    for _ in 1..devices.len() {
        let mut d = Dispatcher::new(ServerConfig::default());
        d.add(StdServer(Arc::clone(&host))).map_err(|e| e.to_string())?;
        dispatchers.push(d);
    }
    let args: Vec<[KernelArg; 2]> = buffers
        .iter()
        .map(|b| [KernelArg::U32(argv.len() as u32), KernelArg::Ptr(b.device_ptr())])
        .collect();
    let jobs: Vec<Job<'_, '_>> = (0..devices.len())
        .map(|i| Job {
            region: &regions[i],
            kernel: &kernels[i],
            launch: &cfg,
            dispatcher: &dispatchers[i],
            extra: &args[i],
        })
        .collect();
    let mut failure = None;
    for (ordinal, r) in ordinals.iter().zip(launch_many(&jobs)) {
        if let Err(err) = r {
            if devices.len() > 1 {
                eprintln!("gpu-run: device {ordinal}: {err}");
            }
            failure.get_or_insert(err);
        }
    }
    exit_code(&host, failure.map_or(Ok(()), Err))
}

fn run_hsa(cli: &Cli, bytes: Vec<u8>) -> Result<u8, String> {
    use gpu_rpc::hsa::{launch, CodeObject, HsaBuffer, HsaDevice, KernelArg, Launch, MappedBuffer, Module};

    let code = CodeObject::from_bytes(bytes).map_err(|e| e.to_string())?;
    let dev = HsaDevice::new(cli.device).map_err(|e| e.to_string())?;
    let module = Module::load(&dev, &code).map_err(|e| e.to_string())?;
    let kernel = module.kernel(&cli.kernel).map_err(|e| e.to_string())?;
    let argv = argv(cli);
    let mut buf = HsaBuffer::new(&dev, argv_bytes(&argv)).map_err(|e| e.to_string())?;
    let base = buf.device_ptr();
    // SAFETY: the buffer is ours and no kernel runs yet.
    write_argv(&argv, unsafe { buf.as_mut_slice() }, base);
    let (host, dispatcher) = std_services()?;
    let mut cfg = Launch {
        grid: cli.blocks,
        block: cli.threads,
        server_threads: cli.server_threads as usize,
        ..Launch::default()
    };
    if let Some(p) = cli.ports {
        cfg.port_count = p;
    }
    let args = [KernelArg::U32(argv.len() as u32), KernelArg::Ptr(base)];
    exit_code(&host, launch(&kernel, &cfg, &dispatcher, &args).map(|_| ()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dims_parse() {
        assert_eq!(parse_dims("4"), Ok((4, 1, 1)));
        assert_eq!(parse_dims("4,2,3"), Ok((4, 2, 3)));
        assert!(parse_dims("0").unwrap_err().contains("at least 1"));
        assert!(parse_dims("x").unwrap_err().contains("not a positive number"));
        assert!(parse_dims("1,2,3,4").is_err());
    }

    #[test]
    fn images_are_recognised() {
        assert_eq!(image_kind(b"//\n.version 8.0\n.target sm_90\n"), Ok(ImageKind::Ptx));
        let mut elf = vec![0u8; 64];
        elf[..4].copy_from_slice(b"\x7fELF");
        elf[18] = 224;
        assert_eq!(image_kind(&elf), Ok(ImageKind::AmdgpuCodeObject));
        elf[18] = 62;
        assert!(image_kind(&elf).unwrap_err().contains("not an AMDGPU"));
        assert!(image_kind(b"hello").unwrap_err().contains("not PTX"));
        assert!(image_kind(&[0xff, 0xfe]).is_err());
    }
}
