//! Hello from "device" threads, on the CPU backend.
//!
//! ```text
//! cargo run --example hello -- --threads 8
//! ```
//!
//! Every client thread formats a greeting into a fixed stack buffer (no
//! allocation, as on a GPU) and prints it on the host with `print_stderr`,
//! adds two numbers and reads a block of host text. When all the others are
//! done, thread 0 calls `exit(3)`: the host prints a summary and ends the
//! process with code 3.

use core::fmt::Write as _;
use std::io::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use gpu_rpc::cpu::{self, Launch};
use gpu_rpc::gpu_rpc;
use gpu_rpc::server::{Dispatcher, ServerConfig};

/// What the device may ask of the host.
#[gpu_rpc]
pub trait HostServices {
    /// Print `msg` on the host's stderr.
    fn print_stderr(&self, msg: &str);
    /// End the program with `code`.
    fn exit(&self, code: i32) -> !;
    /// `a + b`, computed on the host.
    fn add(&self, a: u64, b: u64) -> u64;
    /// Fill `out` from byte `offset` of the host's text; returns the bytes
    /// filled.
    fn read_block(&self, offset: u64, out: &mut [u8]) -> usize;
}

const TEXT: &[u8] = b"Hello from the host! This text lives in host memory; kernels read it block by block. ";

/// The host side, with statistics for the summary.
#[derive(Default)]
struct Host {
    messages: AtomicUsize,
    adds: AtomicUsize,
    bytes_read: AtomicU64,
}

impl HostServices for Host {
    fn print_stderr(&self, msg: &str) {
        // Relaxed: a tally for the summary; nothing else is published through it.
        self.messages.fetch_add(1, Ordering::Relaxed);
        eprintln!("{msg}");
    }

    fn exit(&self, code: i32) -> ! {
        eprintln!(
            "summary: {} messages, {} additions, {} bytes read; exiting with code {code}",
            // Relaxed: a tally for the summary; nothing else is published through it.
            self.messages.load(Ordering::Relaxed),
            self.adds.load(Ordering::Relaxed),
            self.bytes_read.load(Ordering::Relaxed),
        );
        let _ = std::io::stderr().flush();
        let _ = std::io::stdout().flush();
        std::process::exit(code)
    }

    fn add(&self, a: u64, b: u64) -> u64 {
        // Relaxed: a tally for the summary; nothing else is published through it.
        self.adds.fetch_add(1, Ordering::Relaxed);
        a.wrapping_add(b)
    }

    fn read_block(&self, offset: u64, out: &mut [u8]) -> usize {
        let start = (offset as usize).min(TEXT.len());
        let n = out.len().min(TEXT.len() - start);
        out[..n].copy_from_slice(&TEXT[start..start + n]);
        // Relaxed: a tally for the summary; nothing else is published through it.
        self.bytes_read.fetch_add(n as u64, Ordering::Relaxed);
        n
    }
}

/// A fixed-capacity text buffer on the stack (truncates when full).
struct StackBuf<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> StackBuf<N> {
    fn new() -> Self {
        StackBuf { buf: [0; N], len: 0 }
    }

    fn as_str(&self) -> &str {
        // Only whole `&str`s are appended, so the prefix is valid UTF-8.
        core::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }
}

impl<const N: usize> core::fmt::Write for StackBuf<N> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let n = s.len().min(N - self.len);
        if n < s.len() {
            return Err(core::fmt::Error);
        }
        self.buf[self.len..self.len + n].copy_from_slice(s.as_bytes());
        self.len += n;
        Ok(())
    }
}

fn threads_from_args() -> usize {
    let mut args = std::env::args().skip(1);
    let mut threads = 8;
    while let Some(a) = args.next() {
        let value = match a.strip_prefix("--threads=") {
            Some(v) => Some(v.to_string()),
            None if a == "--threads" => args.next(),
            None => {
                eprintln!("usage: hello [--threads N]");
                std::process::exit(2);
            }
        };
        threads = match value.as_deref().map(str::parse) {
            Some(Ok(n)) if n > 0 => n,
            _ => {
                eprintln!("--threads needs a positive number");
                std::process::exit(2);
            }
        };
    }
    threads
}

fn main() {
    let threads = threads_from_args();
    let mut dispatcher = Dispatcher::new(ServerConfig::default());
    dispatcher
        .add(HostServicesServer(Host::default()))
        .expect("no opcode collision");

    let finished = AtomicUsize::new(0);
    let launch = Launch {
        threads,
        server_threads: 2,
        port_count: 16,
        lane_size: 1,
    };
    let result = cpu::launch(&launch, &dispatcher, |client, t| {
        // From here on, only what a GPU thread could do: no allocation.
        let host = HostServicesClient::new(client);

        let mut line = StackBuf::<128>::new();
        let _ = write!(line, "hello from thread {}", t.id);
        host.print_stderr(line.as_str());

        let sum = host.add(t.id as u64, 1000);
        let mut block = [0u8; 24];
        let n = host.read_block(t.id as u64 * 4, &mut block);
        let mut line = StackBuf::<128>::new();
        let text = core::str::from_utf8(&block[..n]).unwrap_or("?");
        let _ = write!(
            line,
            "thread {}: {} + 1000 = {sum}, read {n} bytes: {text:?}",
            t.id, t.id
        );
        host.print_stderr(line.as_str());

        if t.id == 0 {
            // Wait for every other thread, then end the program.
            while finished.load(Ordering::Acquire) < t.count - 1 {
                std::thread::yield_now();
            }
            host.exit(3);
        }
        finished.fetch_add(1, Ordering::Release);
    });
    // Not reached: `exit` ends the process.
    eprintln!("the kernel ended without calling exit: {result:?}");
    std::process::exit(1);
}
