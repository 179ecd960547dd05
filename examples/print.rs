//! Device `println!` on the CPU backend: many "device" threads print with
//! [`gpu_println!`], then thread 0 ends the program with `exit(0)`.
//!
//! ```text
//! cargo run --example print -- --threads 8
//! ```
//!
//! Each line is formatted on its thread (into a 512-byte stack buffer, as on
//! a GPU) and sent to the host in one `Std::write` call, so lines are never
//! interleaved. When every other thread has printed, thread 0 calls
//! `services::exit(0)`: with the default `ExitMode::Process` the host flushes
//! its sinks and the process exits with that code, as a program run by
//! LLVM's GPU loader does.

use std::sync::atomic::{AtomicUsize, Ordering};

use gpu_rpc::cpu::{self, LanePanic, Launch, Report};
use gpu_rpc::gpu_println;
use gpu_rpc::server::{Dispatcher, ServerConfig};
use gpu_rpc::services::{self, StdHost, StdHostConfig, StdServer};

/// The lines thread `id` prints.
pub const LINES_PER_THREAD: usize = 3;

/// Run the printing kernel on `threads` threads against a fresh dispatcher
/// serving `host`: each thread prints [`LINES_PER_THREAD`] lines, then thread
/// 0 waits for the others and calls `exit(code)`.
pub fn print_kernel(host: &StdHost, threads: usize, code: i32) -> Result<Report, LanePanic> {
    let mut dispatcher = Dispatcher::new(ServerConfig::default());
    dispatcher.add(StdServer(host.clone())).expect("no opcode collision");
    let finished = AtomicUsize::new(0);
    let launch = Launch {
        threads,
        server_threads: 2,
        port_count: 16,
        lane_size: 1,
    };
    cpu::launch(&launch, &dispatcher, |client, t| {
        services::with_client(client, || {
            // From here on, only what a GPU thread could do: no allocation.
            for line in 0..LINES_PER_THREAD {
                gpu_println!("thread {:>3} of {}: line {line}", t.id, t.count);
            }
            if t.id == 0 {
                // Acquire: pairs with the other threads' release increments;
                // their prints were synchronous calls the host completed.
                while finished.load(Ordering::Acquire) < t.count - 1 {
                    std::thread::yield_now();
                }
                services::exit(code);
            }
            finished.fetch_add(1, Ordering::Release);
        })
    })
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut threads = 8;
    while let Some(a) = args.next() {
        match (a.as_str(), args.next().map(|v| v.parse())) {
            ("--threads", Some(Ok(n))) if n > 0 => threads = n,
            _ => {
                eprintln!("usage: print [--threads N]");
                std::process::exit(2);
            }
        }
    }
    // ExitMode::Process (the default): `exit(0)` ends this process with code 0.
    let host = StdHost::new(StdHostConfig::default());
    let result = print_kernel(&host, threads, 0);
    // Not reached: `exit` ends the process.
    eprintln!("the kernel ended without calling exit: {result:?}");
    std::process::exit(1);
}
