//! The device functions of the standard services: stdout/stderr writes,
//! [`exit`] and [`abort`], host files, time and environment variables.

use super::client::no_client;
#[cfg(doc)]
use super::{flags, Std};
use super::{try_with_std, with_std, Fd, IoError};

/// Write `bytes` to stdout or stderr on the host in one call ([`Std::write`]).
/// Panics if the call fails.
///
/// ```
/// # use gpu_rpc::cpu::{self, Launch};
/// # use gpu_rpc::server::{Dispatcher, ServerConfig};
/// # use gpu_rpc::services::{self, flags, ExitMode, Fd, IoError, StdHost, StdHostConfig, StdServer};
/// # let (config, out, err) = StdHostConfig::default().exit_mode(ExitMode::Record).allow_env("HOME").capture();
/// # let host = StdHost::new(config);
/// # let mut d = Dispatcher::new(ServerConfig::default());
/// # d.add(StdServer(host.clone())).unwrap();
/// # let report = cpu::launch(&Launch { threads: 1, ..Launch::default() }, &d, |client, _| services::with_client(client, || {
/// assert_eq!(services::write(Fd::STDOUT, b"raw bytes\n"), Ok(()));
/// assert_eq!(services::write(Fd(7), b"x"), Err(IoError::EBADF));
/// assert_eq!(services::flush(Fd::STDOUT), Ok(()));
/// # })).unwrap();
/// # assert_eq!(out.text(), "raw bytes\n");
/// ```
pub fn write(stream: Fd, bytes: &[u8]) -> Result<(), IoError> {
    with_std(|s| s.write(stream, bytes))
}

/// Flush the host's stdout or stderr sink ([`Std::flush`]).
pub fn flush(stream: Fd) -> Result<(), IoError> {
    with_std(|s| s.flush(stream))
}

/// End the program with `code` ([`Std::exit`]): the host exits (or records
/// the code) and this lane halts. Panics (traps on a GPU) if no client is
/// bound or the call fails.
///
/// ```
/// # use gpu_rpc::cpu::{self, Launch};
/// # use gpu_rpc::server::{Dispatcher, ServerConfig};
/// # use gpu_rpc::services::{self, flags, ExitMode, Fd, IoError, StdHost, StdHostConfig, StdServer};
/// # let (config, out, err) = StdHostConfig::default().exit_mode(ExitMode::Record).allow_env("HOME").capture();
/// # let host = StdHost::new(config);
/// # let mut d = Dispatcher::new(ServerConfig::default());
/// # d.add(StdServer(host.clone())).unwrap();
/// # let report = cpu::launch(&Launch { threads: 1, ..Launch::default() }, &d, |client, _| services::with_client(client, || {
/// services::exit(3); // ExitMode::Record here: the host records 3, the lane halts
/// # })).unwrap();
/// # assert_eq!((host.exit_code(), report.halted), (Some(3), 1));
/// ```
pub fn exit(code: i32) -> ! {
    let _: Option<()> = try_with_std(|s| s.exit(code));
    no_client()
}

/// Abort the program ([`Std::abort`]); this lane halts.
///
/// ```
/// # use gpu_rpc::cpu::{self, Launch};
/// # use gpu_rpc::server::{Dispatcher, ServerConfig};
/// # use gpu_rpc::services::{self, flags, ExitMode, Fd, IoError, StdHost, StdHostConfig, StdServer};
/// # let (config, out, err) = StdHostConfig::default().exit_mode(ExitMode::Record).allow_env("HOME").capture();
/// # let host = StdHost::new(config);
/// # let mut d = Dispatcher::new(ServerConfig::default());
/// # d.add(StdServer(host.clone())).unwrap();
/// # let report = cpu::launch(&Launch { threads: 1, ..Launch::default() }, &d, |client, _| services::with_client(client, || {
/// services::abort();
/// # })).unwrap();
/// # assert!(host.aborted());
/// ```
pub fn abort() -> ! {
    let _: Option<()> = try_with_std(|s| s.abort());
    no_client()
}

/// Open a host file ([`Std::open`]) with [`flags`]: only a regular file
/// beneath the directories the host allows (by default the host's working
/// directory, read-only; relative paths start there), else `EACCES`.
///
/// ```
/// # use gpu_rpc::cpu::{self, Launch};
/// # use gpu_rpc::server::{Dispatcher, ServerConfig};
/// # use gpu_rpc::services::{self, flags, IoError, StdHost, StdHostConfig, StdServer};
/// # let mut d = Dispatcher::new(ServerConfig::default());
/// # d.add(StdServer(StdHost::new(StdHostConfig::default()))).unwrap();
/// # cpu::launch(&Launch { threads: 1, ..Launch::default() }, &d, |client, _| services::with_client(client, || {
/// assert_eq!(services::open("no/such/file", flags::READ), Err(IoError::ENOENT));
/// assert_eq!(services::open("/etc/passwd", flags::READ), Err(IoError::EACCES)); // outside
/// # })).unwrap();
/// ```
pub fn open(path: &str, flags: u32) -> Result<Fd, IoError> {
    with_std(|s| s.open(path, flags))
}

/// Read from `fd` into `buf` until it is full or the file ends
/// ([`Std::read`]); returns the bytes read (0 at the end).
///
/// ```
/// # use gpu_rpc::cpu::{self, Launch};
/// # use gpu_rpc::server::{Dispatcher, ServerConfig};
/// # use gpu_rpc::services::{self, flags, ExitMode, Fd, IoError, StdHost, StdHostConfig, StdServer};
/// # let (config, out, err) = StdHostConfig::default().exit_mode(ExitMode::Record).allow_write(std::env::temp_dir()).capture();
/// # let host = StdHost::new(config);
/// # let mut d = Dispatcher::new(ServerConfig::default());
/// # d.add(StdServer(host.clone())).unwrap();
/// # let report = cpu::launch(&Launch { threads: 1, ..Launch::default() }, &d, |client, _| services::with_client(client, || {
/// # let tmp = std::env::temp_dir().join(format!("gpu_rpc_doc_read_{}", std::process::id()));
/// # let path = tmp.to_str().unwrap();
/// let fd = services::open(path, flags::WRITE | flags::CREATE | flags::TRUNCATE).unwrap();
/// assert_eq!(services::write_fd(fd, b"first\nsecond\n"), Ok(13));
/// services::close(fd).unwrap();
///
/// let fd = services::open(path, flags::READ).unwrap();
/// let mut buf = [0u8; 8];
/// assert_eq!(services::read(fd, &mut buf), Ok(8));
/// assert_eq!(&buf, b"first\nse");
/// assert_eq!(services::read(fd, &mut buf), Ok(5));
/// assert_eq!(services::read(fd, &mut buf), Ok(0)); // end of file
/// services::close(fd).unwrap();
/// assert_eq!(services::close(fd), Err(IoError::EBADF));
/// # std::fs::remove_file(&tmp).unwrap();
/// # })).unwrap();
/// ```
pub fn read(fd: Fd, buf: &mut [u8]) -> Result<usize, IoError> {
    with_std(|s| s.read(fd, buf)).map(|n| n as usize)
}

/// Write all of `bytes` to `fd` ([`Std::write_fd`]); returns the bytes
/// written.
pub fn write_fd(fd: Fd, bytes: &[u8]) -> Result<usize, IoError> {
    with_std(|s| s.write_fd(fd, bytes)).map(|n| n as usize)
}

/// Close `fd` ([`Std::close`]).
pub fn close(fd: Fd) -> Result<(), IoError> {
    with_std(|s| s.close(fd))
}

/// The host's wall-clock time in nanoseconds since the UNIX epoch
/// ([`Std::time_ns`]).
///
/// ```
/// # use gpu_rpc::cpu::{self, Launch};
/// # use gpu_rpc::server::{Dispatcher, ServerConfig};
/// # use gpu_rpc::services::{self, flags, ExitMode, Fd, IoError, StdHost, StdHostConfig, StdServer};
/// # let (config, out, err) = StdHostConfig::default().exit_mode(ExitMode::Record).allow_env("HOME").capture();
/// # let host = StdHost::new(config);
/// # let mut d = Dispatcher::new(ServerConfig::default());
/// # d.add(StdServer(host.clone())).unwrap();
/// # let report = cpu::launch(&Launch { threads: 1, ..Launch::default() }, &d, |client, _| services::with_client(client, || {
/// let t = services::time_ns();
/// assert!(t > 1_600_000_000 * 1_000_000_000); // after 2020
/// # })).unwrap();
/// ```
pub fn time_ns() -> u64 {
    with_std(|s| s.time_ns())
}

/// The host environment variable `name`, if the host's allowlist has it and
/// it is set ([`Std::getenv`]): its first `buf.len()` bytes are copied to
/// `buf` and its full length returned (longer than `buf` means it was cut).
///
/// ```
/// # use gpu_rpc::cpu::{self, Launch};
/// # use gpu_rpc::server::{Dispatcher, ServerConfig};
/// # use gpu_rpc::services::{self, flags, ExitMode, Fd, IoError, StdHost, StdHostConfig, StdServer};
/// # let (config, out, err) = StdHostConfig::default().exit_mode(ExitMode::Record).allow_env("HOME").capture();
/// # let host = StdHost::new(config);
/// # let mut d = Dispatcher::new(ServerConfig::default());
/// # d.add(StdServer(host.clone())).unwrap();
/// # let report = cpu::launch(&Launch { threads: 1, ..Launch::default() }, &d, |client, _| services::with_client(client, || {
/// let mut buf = [0u8; 256];
/// // The host allows HOME here; everything else looks unset.
/// if let Some(n) = services::getenv("HOME", &mut buf) {
///     let home = core::str::from_utf8(&buf[..n.min(buf.len())]).unwrap_or("?");
///     gpu_rpc::gpu_println!("HOME={home}");
/// }
/// assert_eq!(services::getenv("PATH", &mut buf), None);
/// # })).unwrap();
/// ```
pub fn getenv(name: &str, buf: &mut [u8]) -> Option<usize> {
    with_std(|s| s.getenv(name, buf)).map(|n| n as usize)
}
