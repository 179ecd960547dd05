//! The hello example on an NVIDIA GPU: `hello_kernel` runs `--blocks` ×
//! `--threads` threads; each adds through the host, reads a block of host
//! text into a device buffer (`&mut [u8]` out-buffer), prints a greeting with
//! `print_stderr`, and the last thread to finish calls `exit(3)`, which ends
//! this process with code 3.
//!
//! ```text
//! cargo build --release -p gpu-examples && target/release/hello_gpu --blocks 2 --threads 64 [--device N]
//! ```

use std::process::ExitCode;

use gpu_example_services::HostServicesServer;
use gpu_examples::{kernels_ptx, Hello};
use gpu_rpc::cuda::{launch, CudaDevice, Launch, Module};
use gpu_rpc::server::{Dispatcher, ServerConfig};

fn arg(name: &str, default: u32) -> u32 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().unwrap_or_else(|_| panic!("{name} needs a number, got {v}")))
        .unwrap_or(default)
}

fn main() -> ExitCode {
    let blocks = arg("--blocks", 2);
    let threads = arg("--threads", 64);
    let device = arg("--device", 0) as usize;
    let run = || -> Result<(), String> {
        let dev = CudaDevice::new(device).map_err(|e| e.to_string())?;
        eprintln!(
            "[host] {} ({} SMs)",
            dev.name().map_err(|e| e.to_string())?,
            dev.sm_count().map_err(|e| e.to_string())?
        );
        let module = Module::from_ptx(&dev, kernels_ptx()?).map_err(|e| e.to_string())?;
        let kernel = module.kernel("hello_kernel").map_err(|e| e.to_string())?;
        let mut d = Dispatcher::new(ServerConfig::default());
        d.add(HostServicesServer(Hello::default())).map_err(|e| e.to_string())?;
        let cfg = Launch {
            grid: (blocks, 1, 1),
            block: (threads, 1, 1),
            ..Launch::default()
        };
        launch(&kernel, &cfg, &d, &[]).map_err(|e| e.to_string())?;
        Err("the kernel finished without calling exit".into())
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hello_gpu: {e}");
            ExitCode::from(1)
        }
    }
}
