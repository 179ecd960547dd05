//! `gpu-run`: load a GPU kernel image, launch its entry kernel, serve the
//! standard services (`gpu_rpc::services::Std`: printing, exit, abort, files,
//! time) while it runs, and exit with the kernel's exit code.
//!
//! ```text
//! gpu-run [--threads X[,Y,Z]] [--blocks X[,Y,Z]] [--kernel gpu_main] [--device N] IMAGE [ARGS...]
//! ```
//!
//! `IMAGE` is PTX text, a cubin or a fatbin (NVIDIA) or an AMDGPU code
//! object (AMD). The entry kernel has the signature
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
//!
//! **What a kernel may touch on the host.** Files: by default only regular
//! files beneath the working directory, read-only (`--files off|ro|rw`,
//! `--allow-read DIR`, `--allow-write DIR`; paths resolve beneath those
//! directories, never through a symlink leaving them, never on `/proc` or
//! `/sys`, never a FIFO or a device). Environment variables: none unless
//! `--allow-env NAME`. Output: the process's stdout and stderr. Nothing else.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use clap::Parser;
use gpu_rpc::launch::{KernelArg, MappedBuffer};
use gpu_rpc::server::{Dispatcher, ServerConfig};
use gpu_rpc::services::{FileAccess, StdHost, StdHostConfig, StdServer};

mod backend;
use backend::Backend;

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
    /// Run the kernel on every visible GPU at once (CUDA devices for PTX, HSA
    /// agents for an AMD code object), all served by one pool of server
    /// threads; the run fails if any device's launch fails.
    #[arg(long)]
    all_devices: bool,
    /// RPC ports (default: one per warp, at most 4096).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=65536))]
    ports: Option<u32>,
    /// Host server threads. A thread serves one call at a time to its end,
    /// so with two a slow call (a blocking read, say) does not stall the rest.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    server_threads: u32,
    /// Largest streamed argument or out-buffer one lane may pass, in bytes
    /// (larger ones are refused with `TooLarge`).
    #[arg(long, default_value_t = ServerConfig::default().max_stream_bytes,
          value_parser = clap::value_parser!(u64).range(1..=1 << 40))]
    max_stream_bytes: u64,
    /// Memory one warp's call may take on the host, summed over its lanes'
    /// argument blocks, streams and out-buffers, in bytes.
    #[arg(long, default_value_t = ServerConfig::default().max_call_bytes,
          value_parser = clap::value_parser!(u64).range(1..=1 << 40))]
    max_call_bytes: u64,
    /// Which file opens the kernel may make: `off`, `ro` (read) or `rw`
    /// (read and write); where is `--allow-read` / `--allow-write`.
    #[arg(long, value_enum, default_value_t = Files::Ro)]
    files: Files,
    /// A directory whose files the kernel may read (repeatable; default: the
    /// working directory, unless any --allow-read or --allow-write is given).
    #[arg(long, value_name = "DIR")]
    allow_read: Vec<PathBuf>,
    /// A directory whose files the kernel may read and write (repeatable;
    /// implies `--files rw`; default with `--files rw`: the working
    /// directory, unless any --allow-read or --allow-write is given).
    #[arg(long, value_name = "DIR")]
    allow_write: Vec<PathBuf>,
    /// An environment variable the kernel may read with `getenv`
    /// (repeatable; default none).
    #[arg(long, value_name = "NAME")]
    allow_env: Vec<String>,
    /// At exit, print per-method metrics of the host services to stderr:
    /// `table` (the default with a bare `--stats`) or one `json` line.
    #[arg(long, value_enum, num_args = 0..=1, default_missing_value = "table", value_name = "FORMAT")]
    stats: Option<Stats>,
    /// The kernel image: PTX text, a cubin or a fatbin (NVIDIA; a cubin for
    /// the GPU's architecture loads without the driver's JIT compile) or an
    /// AMDGPU code object (AMD, via ROCm's HSA runtime).
    image: PathBuf,
    /// Arguments passed to the kernel after the image path.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

/// `--stats`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Stats {
    /// One row per method.
    Table,
    /// One JSON line: `{"methods":[...]}`.
    Json,
}

/// The dispatchers whose metrics `--stats` prints, and how; printed once,
/// at the end of the run or just before a kernel's `exit` ends the process.
static STATS: Mutex<Option<(Stats, Vec<Arc<Dispatcher>>)>> = Mutex::new(None);

fn print_stats() {
    let Some((format, dispatchers)) = STATS.lock().unwrap_or_else(|e| e.into_inner()).take() else {
        return;
    };
    let mut err = std::io::stderr().lock();
    for (i, d) in dispatchers.iter().enumerate() {
        let metrics = d.metrics();
        // A closed stderr only loses the statistics.
        let _ = match format {
            Stats::Table => {
                let _ = writeln!(err, "gpu-run: host services, device {i}:");
                metrics.iter().try_for_each(|m| writeln!(err, "  {m}"))
            }
            Stats::Json => writeln!(err, "{}", gpu_rpc::metrics::to_json_line(&metrics)),
        };
    }
}

/// `--files`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Files {
    /// No file opens.
    Off,
    /// Reads only.
    Ro,
    /// Reads and writes.
    Rw,
}

impl Cli {
    /// The standard services' configuration the flags ask for; an allowed
    /// directory that does not exist is an error here, not a silent refusal
    /// later.
    fn std_config(&self) -> Result<StdHostConfig, String> {
        for dir in self.allow_read.iter().chain(&self.allow_write) {
            if !dir.is_dir() {
                return Err(format!(
                    "`{}` (--allow-read/--allow-write) is not a directory",
                    dir.display()
                ));
            }
        }
        let files = match (self.files, self.allow_write.is_empty()) {
            (Files::Off, _) => FileAccess::Off,
            (Files::Ro, true) => FileAccess::ReadOnly,
            (Files::Rw, _) | (Files::Ro, false) => FileAccess::ReadWrite,
        };
        let mut config = StdHostConfig {
            files,
            ..StdHostConfig::default()
        };
        if !self.allow_read.is_empty() || !self.allow_write.is_empty() {
            config.read_dirs = self.allow_read.clone();
            config.write_dirs = self.allow_write.clone();
        }
        config.env_allowlist = self.allow_env.clone();
        if self.stats.is_some() {
            config.before_exit = Some(Arc::new(|_| print_stats()));
        }
        Ok(config)
    }
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
    /// PTX text, a cubin or a fatbin (NVIDIA, the CUDA backend).
    Cuda,
    AmdgpuCodeObject,
}

/// Recognise the image from its first bytes: an ELF file by its machine
/// (`EM_AMDGPU` for AMD, `EM_CUDA` a cubin), a fatbin by its magic word,
/// else PTX text.
fn image_kind(bytes: &[u8]) -> Result<ImageKind, String> {
    // e_machine at offset 18: 224 is EM_AMDGPU.
    if bytes.starts_with(b"\x7fELF") && bytes.len() > 19 && u16::from_le_bytes([bytes[18], bytes[19]]) == 224 {
        return Ok(ImageKind::AmdgpuCodeObject);
    }
    use gpu_rpc::cuda::CudaError;
    match gpu_rpc::cuda::Image::recognize(bytes) {
        Ok(_) => Ok(ImageKind::Cuda),
        Err(CudaError::BadImage { kind, reason }) => Err(format!("a damaged {kind}: {reason}")),
        Err(_) if bytes.starts_with(b"\x7fELF") => {
            Err("an ELF file that is neither an AMDGPU code object (EM_AMDGPU) nor a cubin (EM_CUDA)".into())
        }
        Err(_) if std::str::from_utf8(bytes).is_err() => {
            Err("neither PTX text, a cubin, a fatbin nor an AMDGPU code object".into())
        }
        Err(e) => Err(format!(
            "not PTX and not a cubin, fatbin or ELF code object ({})",
            match e {
                CudaError::NotPtx { reason } => reason,
                e => e.to_string(),
            }
        )),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = match cli.std_config() {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("gpu-run: {msg}");
            return ExitCode::from(2);
        }
    };
    match run(&cli, config) {
        Ok(code) => ExitCode::from(code),
        Err(msg) => {
            eprintln!("gpu-run: {msg}");
            ExitCode::from(1)
        }
    }
}

fn run(cli: &Cli, config: StdHostConfig) -> Result<u8, String> {
    let bytes = std::fs::read(&cli.image).map_err(|e| format!("cannot read `{}`: {e}", cli.image.display()))?;
    let kind = image_kind(&bytes).map_err(|e| format!("`{}` is {e}", cli.image.display()))?;
    match kind {
        ImageKind::Cuda => run_on(&backend::Cuda(&bytes), cli, config),
        ImageKind::AmdgpuCodeObject => {
            let code = gpu_rpc::hsa::CodeObject::from_bytes(bytes).map_err(|e| e.to_string())?;
            run_on(&backend::CodeObject(code), cli, config)
        }
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

/// The standard services (configured by `config`), shared with one
/// dispatcher per device so their state can be read after the launch.
fn std_services(
    cli: &Cli,
    config: StdHostConfig,
    devices: usize,
) -> Result<(Arc<StdHost>, Vec<Arc<Dispatcher>>), String> {
    let host = Arc::new(StdHost::new(config));
    let mut dispatchers = Vec::new();
    for _ in 0..devices.max(1) {
        let mut d = Dispatcher::new(ServerConfig {
            max_stream_bytes: cli.max_stream_bytes,
            max_call_bytes: cli.max_call_bytes,
            ..ServerConfig::default()
        });
        d.add(StdServer(Arc::clone(&host))).map_err(|e| e.to_string())?;
        dispatchers.push(Arc::new(d));
    }
    if let Some(format) = cli.stats {
        *STATS.lock().unwrap_or_else(|e| e.into_inner()) = Some((format, dispatchers.clone()));
    }
    Ok((host, dispatchers))
}

/// The exit code after the launch: a device panic is 101, `exit(code)` ends
/// the process from the service itself, a kernel that returned is 0; a
/// failed launch is an error.
fn exit_code<E: std::fmt::Display>(host: &StdHost, result: Result<(), E>) -> Result<u8, String> {
    let _ = host.flush();
    print_stats();
    // Each panic was printed when it arrived; say how many there were.
    let panics = host.panics();
    if !panics.is_empty() {
        eprintln!("gpu-run: {} device panic(s) (printed above)", panics.len());
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

/// The devices to run on: `--device`, or every one with `--all-devices`.
fn ordinals<E: std::fmt::Display>(cli: &Cli, count: impl FnOnce() -> Result<usize, E>) -> Result<Vec<usize>, String> {
    if cli.all_devices {
        Ok((0..count().map_err(|e| e.to_string())?).collect())
    } else {
        Ok(vec![cli.device])
    }
}

/// The exit code after the launches on `ordinals`: each device's error is
/// printed (when there are several), the first one decides.
fn finish<R, E: std::fmt::Display>(
    host: &StdHost,
    ordinals: &[usize],
    results: Vec<Result<R, E>>,
) -> Result<u8, String> {
    let mut failure = None;
    for (ordinal, r) in ordinals.iter().zip(results) {
        if let Err(err) = r {
            if ordinals.len() > 1 {
                eprintln!("gpu-run: device {ordinal}: {err}");
            }
            failure.get_or_insert(err);
        }
    }
    exit_code(host, failure.map_or(Ok(()), Err))
}

/// Run the image on the devices `cli` names, through backend `B`: open them,
/// load the image and fill an argv buffer on each, then launch and serve
/// every device's kernel at once.
fn run_on<B: Backend>(image: &B, cli: &Cli, config: StdHostConfig) -> Result<u8, String> {
    let e = |e: B::Error| e.to_string();
    let ordinals = ordinals(cli, B::count)?;
    let devices = ordinals
        .iter()
        .map(|&o| B::open(o))
        .collect::<Result<Vec<_>, _>>()
        .map_err(e)?;
    let modules = devices
        .iter()
        .map(|d| image.load(d))
        .collect::<Result<Vec<_>, _>>()
        .map_err(e)?;
    let kernels = modules
        .iter()
        .map(|m| B::kernel(m, &cli.kernel))
        .collect::<Result<Vec<_>, _>>()
        .map_err(e)?;
    let cfg = B::launch(cli.blocks, cli.threads, cli.server_threads as usize, cli.ports);
    let argv = argv(cli);
    let mut regions = Vec::new();
    let mut buffers = Vec::new();
    for dev in &devices {
        regions.push(B::region(dev, &cfg).map_err(e)?);
        // argv in host memory this device reads.
        let mut buf = B::buffer(dev, argv_bytes(&argv)).map_err(e)?;
        let base = B::device_ptr(&buf);
        // SAFETY: the buffer is ours and no kernel runs yet.
        write_argv(&argv, unsafe { buf.as_mut_slice() }, base);
        buffers.push(buf);
    }
    // One standard-services host (exit codes, panics, files) for all devices,
    // one dispatcher (and error log) per device.
    let (host, dispatchers) = std_services(cli, config, devices.len())?;
    let args: Vec<[KernelArg; 2]> = buffers
        .iter()
        .map(|b| [KernelArg::U32(argv.len() as u32), KernelArg::Ptr(B::device_ptr(b))])
        .collect();
    let jobs = backend::jobs(&regions, &kernels, &cfg, &dispatchers, &args);
    finish(&host, &ordinals, B::launch_many(&jobs))
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
        assert_eq!(image_kind(b"//\n.version 8.0\n.target sm_90\n"), Ok(ImageKind::Cuda));
        let mut elf = vec![0u8; 64];
        elf[..4].copy_from_slice(b"\x7fELF");
        elf[18] = 224;
        assert_eq!(image_kind(&elf), Ok(ImageKind::AmdgpuCodeObject));
        elf[18] = 190; // EM_CUDA: a cubin (ELF64, little-endian, no tables)
        (elf[4], elf[5]) = (2, 1);
        assert_eq!(image_kind(&elf), Ok(ImageKind::Cuda));
        elf[0x28] = 0xff; // a section table past the end
        assert!(image_kind(&elf).unwrap_err().starts_with("a damaged cubin: "));
        elf[18] = 62;
        assert!(image_kind(&elf).unwrap_err().contains("neither an AMDGPU code object"));
        let mut fatbin = vec![0x50, 0xED, 0x55, 0xBA, 1, 0, 0x10, 0];
        fatbin.extend_from_slice(&0u64.to_le_bytes()); // an empty body
        assert_eq!(image_kind(&fatbin), Ok(ImageKind::Cuda));
        fatbin[8] = 1; // a body past the end
        assert!(image_kind(&fatbin).unwrap_err().starts_with("a damaged fatbin: "));
        assert!(image_kind(b"hello").unwrap_err().contains("not PTX"));
        assert!(image_kind(&[0xff, 0xfe]).unwrap_err().contains("neither PTX text"));
    }
}
