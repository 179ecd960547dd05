//! A "kernel" that indexes out of bounds on purpose, and how the panic is
//! reported on the host, on the CPU backend.
//!
//! ```text
//! cargo run --example panic -- --threads 4
//! ```
//!
//! On a GPU, `gpu_rpc::gpu_panic_handler!()` defines the kernel crate's
//! `#[panic_handler]`: it formats the message and location on the device,
//! sends them with `Std::report_panic`, then traps. On the CPU backend a
//! thread's panic is an ordinary Rust panic handled by std (a crate cannot
//! replace std's `#[panic_handler]`), so this example installs a std *panic
//! hook* that does what the GPU handler does, through the same
//! [`services::report_panic`]; the CPU backend then catches the unwind and
//! `cpu::launch` returns a `LanePanic`, where a GPU launch would fail with a trap.
//!
//! The host prints each report as it arrives (to its stderr sink), e.g.
//!
//! ```text
//! kernel panicked at examples/panic.rs:78:21 (block (0,0,0), thread (1,0,0)): index out of bounds: the len is 4 but the index is 5
//! ```
//!
//! and afterwards `StdHost::panics()` lists them.

use std::cell::Cell;
use std::sync::Once;

use gpu_rpc::cpu::{self, LanePanic, Launch, Report};
use gpu_rpc::server::{Dispatcher, ServerConfig};
use gpu_rpc::services::{self, StdHost, StdHostConfig, StdServer};

thread_local! {
    /// The "device" thread index of this host thread, while it runs the kernel.
    static THREAD: Cell<Option<u32>> = const { Cell::new(None) };
}

/// Install (once per process) a std panic hook that reports panics of kernel
/// threads to the host like `gpu_panic_handler!` does on a GPU, and leaves
/// other panics to the previous hook.
pub fn install_report_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let Some(thread) = THREAD.with(Cell::get) else {
                return previous(info);
            };
            let message = info
                .payload()
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| info.payload().downcast_ref::<String>().map(String::as_str))
                .unwrap_or("Box<dyn Any>");
            let (file, line, column) = info
                .location()
                .map_or(("<unknown>", 0, 0), |l| (l.file(), l.line(), l.column()));
            if services::report_panic(message, file, line, column, [0; 3], [thread, 0, 0]).is_err() {
                previous(info);
            }
        }));
    });
}

/// The kernel: every thread reads `table[4 + id]` of a 4-element table.
pub fn panic_kernel(host: &StdHost, threads: usize) -> Result<Report, LanePanic> {
    install_report_hook();
    let mut dispatcher = Dispatcher::new(ServerConfig::default());
    dispatcher.add(StdServer(host.clone())).expect("no opcode collision");
    let launch = Launch {
        threads,
        ..Launch::default()
    };
    cpu::launch(&launch, &dispatcher, |client, t| {
        services::with_client(client, || {
            THREAD.with(|c| c.set(Some(t.id as u32)));
            let table = [10u32, 20, 30, 40];
            let i = std::hint::black_box(table.len() + t.id);
            let v = table[i]; // panics: index out of bounds
            gpu_rpc::gpu_println!("unreachable: {v}");
        })
    })
}

fn main() {
    let threads = match std::env::args().skip(1).collect::<Vec<_>>().as_slice() {
        [] => 2,
        [flag, n] if flag == "--threads" => n.parse().unwrap_or(2),
        _ => {
            eprintln!("usage: panic [--threads N]");
            std::process::exit(2);
        }
    };
    let host = StdHost::new(StdHostConfig::default());
    let result = panic_kernel(&host, threads);
    println!(
        "run: {}",
        match &result {
            Ok(_) => "completed".to_string(),
            Err(e) => format!("failed: {e}"),
        }
    );
    println!("the host recorded {} panic(s):", host.panic_count());
    for p in host.panics() {
        println!("  {p}");
    }
    // Like a Rust program that panicked.
    std::process::exit(if result.is_err() { 101 } else { 0 });
}
