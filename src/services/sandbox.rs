//! Where the standard services' [`Std::open`](super::Std::open) may reach
//! on the host: the **trust model** of `StdHost` and `gpu-run`, and the
//! checks that hold it.
//!
//! A kernel is code the user chose to run, but it is also code that writes
//! paths from device memory, where a bug (or a hostile image) can put
//! anything. So file access is confined, not trusted:
//!
//! * Opens are allowed only **beneath directories the host names**: reads
//!   beneath a read or a write directory, writes (including create, truncate
//!   and append) beneath a write directory, and only when the
//!   [`FileAccess`](super::FileAccess) mode allows that direction at all.
//!   The default is read-only beneath the working directory.
//! * A path is resolved by the kernel **beneath** the directory
//!   (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`): `..`,
//!   absolute symlinks and symlinks that leave the directory are refused, as
//!   is a symlink as the last component (`O_NOFOLLOW`), so a link planted in
//!   an allowed directory cannot redirect a write.
//! * Only **regular files** open (`fstat` after an `O_NONBLOCK` open, so a
//!   FIFO cannot block a server thread), and none on `/proc`, `/sys` or the
//!   other kernel file systems (`fstatfs`): `/proc/self/environ` would
//!   bypass the `getenv` allow-list, `/proc/self/mem` the whole model.
//!
//! Every refusal is `EACCES` to the device. Relative device paths are taken
//! from the host's working directory when the `StdHost` was made. On Linux
//! older than 5.6 (no `openat2`) every open is refused.

use std::fs::File;
use std::path::{Component, Path, PathBuf};

use super::IoError;

/// One directory opens may reach.
#[derive(Debug)]
struct Root {
    /// Its canonical path.
    path: PathBuf,
    /// An `O_PATH` descriptor of it: paths resolve beneath this inode even
    /// if the directory is renamed or replaced afterwards.
    #[cfg(target_os = "linux")]
    fd: rustix::fd::OwnedFd,
    /// Writes are allowed beneath it.
    writable: bool,
}

/// What an open asks for (already checked for consistency).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Access {
    pub read: bool,
    pub write: bool,
    pub append: bool,
    pub create: bool,
    pub create_new: bool,
    pub truncate: bool,
}

/// A file the sandbox opened, with the type of the file system it lies on
/// (`fstatfs`'s `f_type`, which the sandbox reads anyway), so that callers
/// need not ask again.
#[derive(Debug)]
pub(crate) struct Opened {
    pub file: File,
    pub fs_type: u64,
}

/// The directories a `StdHost` serves files from; see the module notes.
#[derive(Debug)]
pub(crate) struct Sandbox {
    roots: Vec<Root>,
    /// The base of relative device paths.
    cwd: PathBuf,
}

/// File systems whose files are views of the kernel or of processes, never
/// data a kernel should read or write: procfs, sysfs, debugfs, tracefs,
/// securityfs, cgroup v1/v2, bpf, efivarfs, configfs, devpts.
#[cfg(target_os = "linux")]
const KERNEL_FILE_SYSTEMS: [u64; 11] = [
    0x9fa0,      // PROC_SUPER_MAGIC
    0x6265_6572, // SYSFS_MAGIC
    0x6462_6720, // DEBUGFS_MAGIC
    0x7472_6163, // TRACEFS_MAGIC
    0x7363_6673, // SECURITYFS_MAGIC
    0x0027_e0eb, // CGROUP_SUPER_MAGIC
    0x6367_7270, // CGROUP2_SUPER_MAGIC
    0xcafe_4a11, // BPF_FS_MAGIC
    0xde5e_81e4, // EFIVARFS_MAGIC
    0x6265_6570, // CONFIGFS_MAGIC
    0x1cd1,      // DEVPTS_SUPER_MAGIC
];

impl Sandbox {
    /// Open the directories (`read` for reading, `write` for both). Returns
    /// the sandbox and a description of each directory that could not be
    /// used (missing, not a directory), which is left out.
    pub(crate) fn new(read: &[PathBuf], write: &[PathBuf]) -> (Sandbox, Vec<String>) {
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        let mut problems = Vec::new();
        let mut roots = Vec::new();
        let dirs = write.iter().map(|d| (d, true)).chain(read.iter().map(|d| (d, false)));
        for (dir, writable) in dirs {
            match Root::new(&cwd.join(dir), writable) {
                Ok(root) => roots.push(root),
                Err(e) => problems.push(format!("{}: {e}", dir.display())),
            }
        }
        (Sandbox { roots, cwd }, problems)
    }

    /// The directories, with whether each is writable.
    pub(crate) fn dirs(&self) -> impl Iterator<Item = (&Path, bool)> {
        self.roots.iter().map(|r| (r.path.as_path(), r.writable))
    }

    /// Open the device's `path` beneath the first directory that contains it
    /// and allows `access`.
    pub(crate) fn open(&self, path: &str, access: Access) -> Result<Opened, IoError> {
        if path.is_empty() || path.contains('\0') {
            return Err(IoError::EINVAL);
        }
        let wants_write = access.write || access.append || access.create || access.create_new || access.truncate;
        let full = self.cwd.join(path);
        for root in self.roots.iter().filter(|r| r.writable || !wants_write) {
            let Ok(rel) = full.strip_prefix(&root.path) else {
                continue;
            };
            // `strip_prefix` is lexical: `rel` may still climb out with
            // `..`, which the kernel refuses below. An empty `rel` is the
            // directory itself: not a file.
            if rel.as_os_str().is_empty() || rel.components().all(|c| c == Component::CurDir) {
                return Err(IoError::EISDIR);
            }
            return root.open(rel, access);
        }
        Err(IoError::EACCES)
    }
}

#[cfg(target_os = "linux")]
impl Root {
    fn new(dir: &Path, writable: bool) -> std::io::Result<Root> {
        use rustix::fs::{Mode, OFlags};
        let path = dir.canonicalize()?;
        let fd = rustix::fs::open(&path, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
        Ok(Root { path, fd, writable })
    }

    fn open(&self, rel: &Path, a: Access) -> Result<Opened, IoError> {
        use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
        let mut flags = OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
        flags |= match (a.read, a.write || a.append) {
            (true, true) => OFlags::RDWR,
            (false, true) => OFlags::WRONLY,
            _ => OFlags::RDONLY,
        };
        for (on, f) in [
            (a.append, OFlags::APPEND),
            (a.create || a.create_new, OFlags::CREATE),
            (a.create_new, OFlags::EXCL),
            (a.truncate, OFlags::TRUNC),
        ] {
            if on {
                flags |= f;
            }
        }
        let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
        // openat2 refuses a mode without O_CREAT.
        let mode = if flags.contains(OFlags::CREATE) {
            Mode::from_bits_truncate(0o666)
        } else {
            Mode::empty()
        };
        let fd = match rustix::fs::openat2(&self.fd, rel, flags, mode, resolve) {
            Ok(fd) => fd,
            // Outside the directory (EXDEV), a symlink where none may be
            // (ELOOP), a FIFO without a reader (ENXIO), or no openat2 here
            // (ENOSYS): refused, not "missing".
            Err(e)
                if [
                    rustix::io::Errno::XDEV,
                    rustix::io::Errno::LOOP,
                    rustix::io::Errno::NXIO,
                    rustix::io::Errno::NOSYS,
                ]
                .contains(&e) =>
            {
                return Err(IoError::EACCES)
            }
            Err(e) => return Err(IoError::new(e.raw_os_error())),
        };
        let stat = rustix::fs::fstat(&fd).map_err(|e| IoError::new(e.raw_os_error()))?;
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile => {}
            FileType::Directory => return Err(IoError::EISDIR),
            // FIFOs, sockets, character and block devices.
            _ => return Err(IoError::EACCES),
        }
        let fs = rustix::fs::fstatfs(&fd).map_err(|e| IoError::new(e.raw_os_error()))?;
        let fs_type = fs.f_type as u64;
        if KERNEL_FILE_SYSTEMS.contains(&fs_type) {
            return Err(IoError::EACCES);
        }
        Ok(Opened {
            file: File::from(fd),
            fs_type,
        })
    }
}

#[cfg(not(target_os = "linux"))]
impl Root {
    fn new(dir: &Path, writable: bool) -> std::io::Result<Root> {
        Ok(Root {
            path: dir.canonicalize()?,
            writable,
        })
    }

    fn open(&self, _rel: &Path, _a: Access) -> Result<Opened, IoError> {
        // No `openat2`: opens cannot be confined, so none is allowed.
        Err(IoError::EACCES)
    }
}
