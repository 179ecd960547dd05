//! The host side of the standard services (feature `std`).

use std::fmt;
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use super::preallocate::Preallocate;
use super::sandbox::{Access, Sandbox};
use super::sink::Sink;
use super::{flags, Fd, IoError, Std};

/// How many [`DevicePanic`]s a [`StdHost`] keeps (later ones are counted in
/// [`StdHost::panic_count`] and still printed, not stored).
pub const MAX_RECORDED_PANICS: usize = 1024;

/// What [`Std::exit`] and [`Std::abort`] do on the host.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExitMode {
    /// Flush the sinks, then `std::process::exit(code)` (`abort`:
    /// `std::process::abort()`), as LLVM libc's GPU loader does. The default:
    /// what a loader such as `gpu-run` wants.
    #[default]
    Process,
    /// Record the code ([`StdHost::exit_code`]; the first call wins) or the
    /// abort ([`StdHost::aborted`]), flush the sinks and end the calling lane
    /// with `gpu_rpc::lanes::halt()` (which the generated dispatch treats as
    /// success): for tests, and hosts that outlive their kernels.
    Record,
}

/// Which directions of [`Std::open`] the host allows at all; *where* is
/// [`StdHostConfig::read_dirs`] and [`StdHostConfig::write_dirs`] (the trust
/// model: `services/sandbox.rs`, README "Standard services").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FileAccess {
    /// Every `open` fails with `EACCES`.
    Off,
    /// Only `flags::READ` opens, beneath the read or write directories
    /// (the default); anything that could write fails with `EACCES`.
    #[default]
    ReadOnly,
    /// Reads as `ReadOnly`, and writes (create, truncate, append) beneath
    /// the write directories.
    ReadWrite,
}

/// The configuration of a [`StdHost`].
///
/// ```
/// use gpu_rpc::services::{ExitMode, FileAccess, StdHostConfig};
/// let (config, stdout, stderr) = StdHostConfig::default()
///     .exit_mode(ExitMode::Record)
///     .files(FileAccess::ReadOnly)
///     .allow_env("HOME")
///     .capture();
/// assert_eq!(config.env_allowlist, ["HOME"]);
/// # let _ = (stdout, stderr);
/// ```
pub struct StdHostConfig {
    /// Where [`Fd::STDOUT`] goes (default: the process's stdout).
    pub stdout: Box<dyn Write + Send>,
    /// Where [`Fd::STDERR`] and panic reports go (default: the process's
    /// stderr).
    pub stderr: Box<dyn Write + Send>,
    /// What `exit`/`abort` do (default [`ExitMode::Process`]).
    pub exit: ExitMode,
    /// Which directions opens may take (default [`FileAccess::ReadOnly`]).
    pub files: FileAccess,
    /// Directories whose files kernels may read (default: the working
    /// directory). Paths resolve beneath them; see [`FileAccess`].
    pub read_dirs: Vec<PathBuf>,
    /// Directories whose files kernels may also write, create, truncate and
    /// append to, with [`FileAccess::ReadWrite`] (default: the working
    /// directory).
    pub write_dirs: Vec<PathBuf>,
    /// Most files open at once (default 64); more opens fail with `EMFILE`.
    pub max_open_files: usize,
    /// Environment variables [`Std::getenv`] may read (default: none).
    pub env_allowlist: Vec<String>,
    /// Print each reported panic to the stderr sink (default true).
    pub print_panics: bool,
    /// Run just before [`ExitMode::Process`] ends the process, with the exit
    /// code (`None` for an abort): e.g. a loader printing its statistics.
    pub before_exit: Option<ExitHook>,
    /// A write to a file of at least this many bytes first reserves the
    /// file's blocks for it (Linux `fallocate`, keeping the size; not for
    /// files opened to append or on tmpfs): on ext4 a large write then
    /// goes faster (BENCHMARKS.md, "Large file writes"). Default 1 MiB;
    /// `u64::MAX` turns it off.
    pub preallocate_min: u64,
}

/// A [`StdHostConfig::before_exit`] hook.
pub type ExitHook = Arc<dyn Fn(Option<i32>) + Send + Sync>;

impl Default for StdHostConfig {
    fn default() -> Self {
        StdHostConfig {
            stdout: Box::new(io::stdout()),
            stderr: Box::new(io::stderr()),
            exit: ExitMode::Process,
            files: FileAccess::ReadOnly,
            read_dirs: vec![PathBuf::from(".")],
            write_dirs: vec![PathBuf::from(".")],
            max_open_files: 64,
            env_allowlist: Vec::new(),
            print_panics: true,
            before_exit: None,
            preallocate_min: 1 << 20,
        }
    }
}

impl fmt::Debug for StdHostConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StdHostConfig")
            .field("exit", &self.exit)
            .field("files", &self.files)
            .field("read_dirs", &self.read_dirs)
            .field("write_dirs", &self.write_dirs)
            .field("max_open_files", &self.max_open_files)
            .field("env_allowlist", &self.env_allowlist)
            .field("print_panics", &self.print_panics)
            .field("preallocate_min", &self.preallocate_min)
            .finish_non_exhaustive()
    }
}

impl StdHostConfig {
    /// Send [`Fd::STDOUT`] to `w`.
    pub fn stdout(mut self, w: impl Write + Send + 'static) -> Self {
        self.stdout = Box::new(w);
        self
    }

    /// Send [`Fd::STDERR`] (and panic reports) to `w`.
    pub fn stderr(mut self, w: impl Write + Send + 'static) -> Self {
        self.stderr = Box::new(w);
        self
    }

    /// Set the [`ExitMode`].
    pub fn exit_mode(mut self, mode: ExitMode) -> Self {
        self.exit = mode;
        self
    }

    /// Set the [`FileAccess`] policy.
    pub fn files(mut self, access: FileAccess) -> Self {
        self.files = access;
        self
    }

    /// Let kernels read files beneath `dir` too (besides
    /// [`read_dirs`](Self::read_dirs)' defaults; assign the field to replace
    /// them).
    ///
    /// ```
    /// use gpu_rpc::services::StdHostConfig;
    /// let c = StdHostConfig::default().allow_read("/data/in");
    /// assert_eq!(c.read_dirs.last().unwrap().to_str(), Some("/data/in"));
    /// ```
    pub fn allow_read(mut self, dir: impl Into<PathBuf>) -> Self {
        self.read_dirs.push(dir.into());
        self
    }

    /// Let kernels read and write files beneath `dir` too, and allow writes
    /// ([`FileAccess::ReadWrite`]).
    ///
    /// ```
    /// use gpu_rpc::services::{FileAccess, StdHostConfig};
    /// let c = StdHostConfig::default().allow_write("/data/out");
    /// assert_eq!(c.files, FileAccess::ReadWrite);
    /// ```
    pub fn allow_write(mut self, dir: impl Into<PathBuf>) -> Self {
        self.write_dirs.push(dir.into());
        if self.files == FileAccess::ReadOnly {
            self.files = FileAccess::ReadWrite;
        }
        self
    }

    /// Set [`preallocate_min`](Self::preallocate_min): writes to a file of
    /// at least `bytes` reserve its blocks first (`u64::MAX`: never).
    ///
    /// ```
    /// use gpu_rpc::services::StdHostConfig;
    /// let c = StdHostConfig::default().preallocate_min(u64::MAX);
    /// assert_eq!(c.preallocate_min, u64::MAX);
    /// ```
    pub fn preallocate_min(mut self, bytes: u64) -> Self {
        self.preallocate_min = bytes;
        self
    }

    /// Allow [`Std::getenv`] to read `name`.
    pub fn allow_env(mut self, name: impl Into<String>) -> Self {
        self.env_allowlist.push(name.into());
        self
    }

    /// Capture both sinks: returns the configuration with its stdout and
    /// stderr replaced by two [`Capture`]s, and the captures.
    pub fn capture(self) -> (Self, Capture, Capture) {
        let (out, err) = (Capture::new(), Capture::new());
        (self.stdout(out.clone()).stderr(err.clone()), out, err)
    }
}

/// An in-memory sink shared by its clones: give one to
/// [`StdHostConfig::stdout`] and read what the device printed from another.
///
/// ```
/// use std::io::Write;
/// use gpu_rpc::services::Capture;
/// let c = Capture::new();
/// let mut w = c.clone();
/// w.write_all(b"a\nb\n").unwrap();
/// assert_eq!(c.lines(), ["a", "b"]);
/// ```
#[derive(Clone, Debug, Default)]
pub struct Capture(Arc<Mutex<Vec<u8>>>);

impl Capture {
    /// An empty capture.
    pub fn new() -> Self {
        Self::default()
    }

    /// The bytes written so far.
    pub fn bytes(&self) -> Vec<u8> {
        lock(&self.0).clone()
    }

    /// The bytes written so far, as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&lock(&self.0)).into_owned()
    }

    /// The text's lines, without their newlines.
    pub fn lines(&self) -> Vec<String> {
        self.text().lines().map(str::to_owned).collect()
    }

    /// Forget what was written.
    pub fn clear(&self) {
        lock(&self.0).clear();
    }
}

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        lock(&self.0).extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A panic a device thread reported ([`Std::report_panic`]).
///
/// ```
/// use gpu_rpc::services::DevicePanic;
/// let p = DevicePanic {
///     message: "index out of bounds: the len is 4 but the index is 7".into(),
///     file: "src/lib.rs".into(),
///     line: 10,
///     column: 5,
///     block: [0, 0, 0],
///     thread: [3, 0, 0],
/// };
/// assert_eq!(
///     p.to_string(),
///     "kernel panicked at src/lib.rs:10:5 (block (0,0,0), thread (3,0,0)): index out of bounds: the len is 4 but the index is 7"
/// );
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DevicePanic {
    /// The panic message, formatted on the device (at most
    /// [`PANIC_MESSAGE_MAX`](super::PANIC_MESSAGE_MAX) bytes from the panic
    /// handler).
    pub message: String,
    /// The source file of the panic.
    pub file: String,
    /// Its line.
    pub line: u32,
    /// Its column.
    pub column: u32,
    /// The panicking thread's block index (x, y, z).
    pub block: [u32; 3],
    /// The panicking thread's index in its block (x, y, z).
    pub thread: [u32; 3],
}

impl fmt::Display for DevicePanic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [bx, by, bz] = self.block;
        let [tx, ty, tz] = self.thread;
        write!(
            f,
            "kernel panicked at {}:{}:{} (block ({bx},{by},{bz}), thread ({tx},{ty},{tz})): {}",
            self.file, self.line, self.column, self.message
        )
    }
}

/// One open host file.
struct OpenFile {
    file: Mutex<File>,
    readable: bool,
    writable: bool,
    preallocate: Preallocate,
}

struct Inner {
    stdout: Arc<Sink>,
    stderr: Arc<Sink>,
    exit_mode: ExitMode,
    files: FileAccess,
    sandbox: Sandbox,
    max_open_files: usize,
    preallocate_min: u64,
    env_allowlist: Vec<String>,
    print_panics: bool,
    before_exit: Option<ExitHook>,
    exit_code: OnceLock<i32>,
    aborted: AtomicBool,
    panics: Mutex<Vec<DevicePanic>>,
    panic_count: AtomicU64,
    /// Slot `i` is fd `i + FIRST_FILE_FD`.
    table: Mutex<Vec<Option<Arc<OpenFile>>>>,
}

/// The first fd a file gets (0, 1, 2 are stdin, stdout, stderr).
const FIRST_FILE_FD: u32 = 3;

/// The host implementation of [`Std`]: serve it with
/// `Dispatcher::add(StdServer(host.clone()))`.
///
/// A cheap handle (`Clone` shares the state): keep one to ask, after or
/// during the run, for the [`exit_code`](Self::exit_code), the
/// [`panics`](Self::panics), and so on.
///
/// ```
/// use gpu_rpc::server::{Dispatcher, ServerConfig};
/// use gpu_rpc::services::{StdHost, StdHostConfig, StdServer};
///
/// let host = StdHost::new(StdHostConfig::default());
/// let mut d = Dispatcher::new(ServerConfig::default());
/// d.add(StdServer(host.clone())).unwrap();
/// assert_eq!(host.exit_code(), None);
/// assert!(host.panics().is_empty());
/// ```
#[derive(Clone)]
pub struct StdHost {
    inner: Arc<Inner>,
}

impl fmt::Debug for StdHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StdHost")
            .field("exit_mode", &self.inner.exit_mode)
            .field("files", &self.inner.files)
            .field("dirs", &self.inner.sandbox.dirs().collect::<Vec<_>>())
            .field("exit_code", &self.exit_code())
            .field("aborted", &self.aborted())
            .field("panic_count", &self.panic_count())
            .field("open_files", &self.open_files())
            .finish_non_exhaustive()
    }
}

impl Default for StdHost {
    /// `StdHost::new(StdHostConfig::default())`.
    fn default() -> Self {
        Self::new(StdHostConfig::default())
    }
}

/// Lock `m`, taking over a lock poisoned by a panicking holder.
pub(super) fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking writer must not take the other lanes' output down with it.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl StdHost {
    /// A host with this configuration.
    pub fn new(config: StdHostConfig) -> Self {
        let (sandbox, problems) = Sandbox::new(&config.read_dirs, &config.write_dirs);
        let mut stderr = config.stderr;
        for p in problems {
            // The host's own diagnostic; a failing sink only loses it.
            let _ = writeln!(stderr, "gpu_rpc services: not serving files from {p}");
        }
        StdHost {
            inner: Arc::new(Inner {
                stdout: Sink::new(config.stdout),
                stderr: Sink::new(stderr),
                exit_mode: config.exit,
                files: config.files,
                sandbox,
                max_open_files: config.max_open_files,
                preallocate_min: config.preallocate_min,
                env_allowlist: config.env_allowlist,
                print_panics: config.print_panics,
                before_exit: config.before_exit,
                exit_code: OnceLock::new(),
                aborted: AtomicBool::new(false),
                panics: Mutex::new(Vec::new()),
                panic_count: AtomicU64::new(0),
                table: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The code of the first `exit` ([`ExitMode::Record`]); `Some(134)` (as
    /// a shell reports `SIGABRT`) after an `abort` without an earlier exit.
    pub fn exit_code(&self) -> Option<i32> {
        self.inner.exit_code.get().copied()
    }

    /// Whether a lane called `abort` ([`ExitMode::Record`]).
    pub fn aborted(&self) -> bool {
        // Relaxed: a flag read after the run (or as a hint during it).
        self.inner.aborted.load(Ordering::Relaxed)
    }

    /// The panics reported so far (the first [`MAX_RECORDED_PANICS`]).
    pub fn panics(&self) -> Vec<DevicePanic> {
        lock(&self.inner.panics).clone()
    }

    /// How many panics were reported, including those not kept.
    pub fn panic_count(&self) -> u64 {
        // Relaxed: a statistic.
        self.inner.panic_count.load(Ordering::Relaxed)
    }

    /// Files open now.
    pub fn open_files(&self) -> usize {
        lock(&self.inner.table).iter().filter(|s| s.is_some()).count()
    }

    /// Flush both sinks.
    pub fn flush(&self) -> io::Result<()> {
        let a = self.inner.stdout.flush();
        let b = self.inner.stderr.flush();
        a.and(b).map_err(io::Error::from)
    }

    fn sink(&self, stream: Fd) -> Result<&Arc<Sink>, IoError> {
        match stream {
            Fd::STDOUT => Ok(&self.inner.stdout),
            Fd::STDERR => Ok(&self.inner.stderr),
            _ => Err(IoError::EBADF),
        }
    }

    fn file(&self, fd: Fd) -> Result<Arc<OpenFile>, IoError> {
        let slot = fd.0.checked_sub(FIRST_FILE_FD).ok_or(IoError::EBADF)? as usize;
        lock(&self.inner.table)
            .get(slot)
            .and_then(Option::clone)
            .ok_or(IoError::EBADF)
    }

    fn end_lane(&self) -> ! {
        match self.inner.exit_mode {
            ExitMode::Process => unreachable!("ExitMode::Process exits before"),
            ExitMode::Record => crate::lanes::halt(),
        }
    }
}

impl From<io::Error> for IoError {
    /// The OS error number on Linux; elsewhere (where numbers differ) a
    /// Linux `errno` chosen from the error's kind (`EIO` if none fits).
    fn from(e: io::Error) -> Self {
        #[cfg(target_os = "linux")]
        if let Some(code) = e.raw_os_error() {
            return IoError::new(code);
        }
        use io::ErrorKind as K;
        match e.kind() {
            K::NotFound => IoError::ENOENT,
            K::PermissionDenied => IoError::EACCES,
            K::AlreadyExists => IoError::EEXIST,
            K::InvalidInput | K::InvalidData => IoError::EINVAL,
            K::BrokenPipe => IoError::EPIPE,
            K::WouldBlock => IoError::EAGAIN,
            K::OutOfMemory => IoError::ENOMEM,
            K::Unsupported => IoError::ENOSYS,
            K::IsADirectory => IoError::EISDIR,
            K::NotADirectory => IoError::ENOTDIR,
            K::StorageFull => IoError::ENOSPC,
            K::ReadOnlyFilesystem => IoError::EROFS,
            K::NotSeekable => IoError::ESPIPE,
            K::FileTooLarge => IoError::EFBIG,
            _ => IoError::EIO,
        }
    }
}

impl From<IoError> for io::Error {
    /// An OS error with this number on Linux; elsewhere an error of kind
    /// `Other` whose message names the errno.
    fn from(e: IoError) -> Self {
        #[cfg(target_os = "linux")]
        {
            io::Error::from_raw_os_error(e.errno)
        }
        #[cfg(not(target_os = "linux"))]
        {
            io::Error::other(e.to_string())
        }
    }
}

impl std::error::Error for IoError {}

impl Std for StdHost {
    fn write(&self, stream: Fd, bytes: &[u8]) -> Result<(), IoError> {
        self.sink(stream)?.write(bytes)
    }

    fn print(&self, stream: Fd, flags: u32, format: &str, args: &[u64], text: &[u8]) -> Result<(), IoError> {
        let sink = self.sink(stream)?;
        let mut line = super::FmtBuf::<{ super::LINE_MAX }>::new();
        super::format::format_print(format, args, text, &mut line)?;
        if flags & super::PRINT_TEXT_CUT != 0 {
            line.mark_truncated();
        }
        let line = line.finish(flags & super::PRINT_NEWLINE != 0);
        sink.write(line.as_bytes())
    }

    fn flush(&self, stream: Fd) -> Result<(), IoError> {
        self.sink(stream)?.flush()
    }

    fn exit(&self, code: i32) -> ! {
        let _ = self.flush();
        if self.inner.exit_mode == ExitMode::Process {
            if let Some(hook) = &self.inner.before_exit {
                hook(Some(code));
            }
            std::process::exit(code);
        }
        let _ = self.inner.exit_code.set(code);
        self.end_lane()
    }

    fn abort(&self) -> ! {
        let _ = self.flush();
        if self.inner.exit_mode == ExitMode::Process {
            if let Some(hook) = &self.inner.before_exit {
                hook(None);
            }
            std::process::abort();
        }
        // Relaxed: a flag (see `aborted`).
        self.inner.aborted.store(true, Ordering::Relaxed);
        let _ = self.inner.exit_code.set(134);
        self.end_lane()
    }

    fn report_panic(&self, msg: &str, file: &str, line: u32, column: u32, block: [u32; 3], thread: [u32; 3]) {
        // Clipped: the device chooses these lengths (up to the stream limit
        // each), and up to `MAX_RECORDED_PANICS` records are kept.
        let p = DevicePanic {
            message: crate::server::clip_message(msg),
            file: crate::server::clip_message(file),
            line,
            column,
            block,
            thread,
        };
        if self.inner.print_panics {
            self.inner.stderr.with_writer(|err| {
                let _ = writeln!(err, "{p}");
                let _ = err.flush();
            });
        }
        // Relaxed: a statistic.
        self.inner.panic_count.fetch_add(1, Ordering::Relaxed);
        let mut panics = lock(&self.inner.panics);
        if panics.len() < MAX_RECORDED_PANICS {
            panics.push(p);
        }
    }

    fn open(&self, path: &str, f: u32) -> Result<Fd, IoError> {
        if f & !flags::ALL != 0 {
            return Err(IoError::EINVAL);
        }
        let read = f & flags::READ != 0;
        let append = f & flags::APPEND != 0;
        let write = f & flags::WRITE != 0 || append;
        let (create, create_new, truncate) = (
            f & flags::CREATE != 0,
            f & flags::CREATE_NEW != 0,
            f & flags::TRUNCATE != 0,
        );
        // Neither direction, creating or truncating without writing, or
        // truncating an append-only file.
        if !write && (!read || create || create_new || truncate) || truncate && append {
            return Err(IoError::EINVAL);
        }
        match self.inner.files {
            FileAccess::Off => return Err(IoError::EACCES),
            FileAccess::ReadOnly if write => return Err(IoError::EACCES),
            _ => {}
        }
        let opened = self.inner.sandbox.open(
            path,
            Access {
                read,
                write,
                append,
                create,
                create_new,
                truncate,
            },
        )?;
        let open = Arc::new(OpenFile {
            preallocate: Preallocate::for_file(opened.fs_type, write, append),
            file: Mutex::new(opened.file),
            readable: read,
            writable: write,
        });
        let mut table = lock(&self.inner.table);
        let slot = match table.iter().position(Option::is_none) {
            Some(i) => i,
            None if table.len() < self.inner.max_open_files => {
                table.push(None);
                table.len() - 1
            }
            None => return Err(IoError::EMFILE),
        };
        table[slot] = Some(open);
        Ok(Fd(slot as u32 + FIRST_FILE_FD))
    }

    fn read(&self, fd: Fd, buf: &mut [u8]) -> Result<u64, IoError> {
        let f = self.file(fd)?;
        if !f.readable {
            return Err(IoError::EBADF);
        }
        let mut file = lock(&f.file);
        let mut n = 0;
        while n < buf.len() {
            match file.read(&mut buf[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if n == 0 => return Err(e.into()),
                // Report what was read; the error comes back on the next call.
                Err(_) => break,
            }
        }
        Ok(n as u64)
    }

    fn write_fd(&self, fd: Fd, bytes: &[u8]) -> Result<u64, IoError> {
        if fd == Fd::STDOUT || fd == Fd::STDERR {
            Std::write(self, fd, bytes)?;
            return Ok(bytes.len() as u64);
        }
        let f = self.file(fd)?;
        if !f.writable {
            return Err(IoError::EBADF);
        }
        let mut file = lock(&f.file);
        f.preallocate
            .before_write(&file, bytes.len(), self.inner.preallocate_min);
        file.write_all(bytes)?;
        Ok(bytes.len() as u64)
    }

    fn close(&self, fd: Fd) -> Result<(), IoError> {
        let slot = fd.0.checked_sub(FIRST_FILE_FD).ok_or(IoError::EBADF)? as usize;
        let f = lock(&self.inner.table)
            .get_mut(slot)
            .and_then(Option::take)
            .ok_or(IoError::EBADF)?;
        // Another lane may still be using it; it is closed when the last
        // handle drops.
        let r = lock(&f.file).flush();
        r.map_err(IoError::from)
    }

    fn time_ns(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    }

    fn getenv(&self, name: &str, out: &mut [u8]) -> Option<u64> {
        if !self.inner.env_allowlist.iter().any(|a| a == name) {
            return None;
        }
        let value = std::env::var_os(name)?;
        #[cfg(unix)]
        let bytes = std::os::unix::ffi::OsStrExt::as_bytes(value.as_os_str()).to_vec();
        #[cfg(not(unix))]
        let bytes = value.to_string_lossy().into_owned().into_bytes();
        let n = bytes.len().min(out.len());
        out[..n].copy_from_slice(&bytes[..n]);
        Some(bytes.len() as u64)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = self.stdout.flush();
        let _ = self.stderr.flush();
    }
}
