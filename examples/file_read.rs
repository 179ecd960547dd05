//! Read a host file from a "device" thread with the standard services'
//! `open`/`read`/`close`, on the CPU backend, and print its first line.
//!
//! ```text
//! cargo run --example file_read -- Cargo.toml
//! ```
//!
//! The host passes the path (on a GPU: a device pointer to a NUL-terminated
//! string, see `services::str_from_ptr`); the kernel reads the file in
//! 64-byte blocks through an out-buffer until it has the first line, then
//! prints it with `gpu_println!`. Errors come back as `IoError` values
//! (`ENOENT` for a missing file, ...) and are printed to stderr.

use gpu_rpc::cpu::{self, LanePanic, Launch, Report};
use gpu_rpc::server::{Dispatcher, ServerConfig};
use gpu_rpc::services::{self, flags, IoError, StdHost, StdHostConfig, StdServer};
use gpu_rpc::{gpu_eprintln, gpu_println};

/// The longest first line the kernel keeps (longer ones are cut).
pub const MAX_LINE: usize = 256;

/// Device code: read up to the first newline of `path` into `line`; returns
/// its length.
pub fn first_line(path: &str, line: &mut [u8; MAX_LINE]) -> Result<usize, IoError> {
    let fd = services::open(path, flags::READ)?;
    let mut len = 0;
    let result = loop {
        let mut block = [0u8; 64];
        let n = match services::read(fd, &mut block) {
            Ok(n) => n,
            Err(e) => break Err(e),
        };
        let end = block[..n].iter().position(|&b| b == b'\n');
        let take = end.unwrap_or(n).min(MAX_LINE - len);
        line[len..len + take].copy_from_slice(&block[..take]);
        len += take;
        if n == 0 || end.is_some() || len == MAX_LINE {
            break Ok(len);
        }
    };
    services::close(fd)?;
    result
}

/// Run a one-thread kernel that prints the first line of `path`.
pub fn file_read_kernel(host: &StdHost, path: &str) -> Result<Report, LanePanic> {
    let mut dispatcher = Dispatcher::new(ServerConfig::default());
    dispatcher.add(StdServer(host.clone())).expect("no opcode collision");
    let launch = Launch {
        threads: 1,
        ..Launch::default()
    };
    cpu::launch(&launch, &dispatcher, |client, _| {
        services::with_client(client, || {
            let mut line = [0u8; MAX_LINE];
            match first_line(path, &mut line) {
                Ok(n) => {
                    let text = core::str::from_utf8(&line[..n]).unwrap_or("<not UTF-8>");
                    gpu_println!("first line of {path}: {text}");
                }
                Err(e) => gpu_eprintln!("cannot read {path}: {e}"),
            }
        })
    })
}

fn main() {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml").to_string());
    let host = StdHost::new(StdHostConfig::default());
    if let Err(e) = file_read_kernel(&host, &path) {
        eprintln!("{e}");
        std::process::exit(1);
    }
}
