//! Reserving a file's blocks before a large write from the device.
//!
//! A kernel that writes a big file (`write_fd` of megabytes a call) is bound
//! by one host thread's buffered `write()`. On ext4 such a write into a hole
//! pays the delayed allocation's bookkeeping page by page; the same write
//! into blocks reserved first with `fallocate` does not. So before a write
//! of at least [`StdHostConfig::preallocate_min`](super::StdHostConfig::preallocate_min)
//! bytes the host reserves the range it is about to write, keeping the
//! file's size (`FALLOC_FL_KEEP_SIZE`: a write that then fails leaves the
//! size it would have left anyway). Measured in BENCHMARKS.md section 3
//! ("Large file writes").
//!
//! Off for files opened to append (their offset is the end at each write),
//! for files on tmpfs (which fills reserved pages with zeros, so the write
//! would touch each page twice), off for good for a file whose file system
//! refuses `fallocate`, and off everywhere but Linux. A reservation that
//! fails for any other reason (no space) is skipped: the write reports it.

use std::fs::File;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether writes to one open file reserve their blocks first.
pub(super) struct Preallocate {
    on: AtomicBool,
}

impl Preallocate {
    /// The policy for a file opened for writing (`writable`) and maybe to
    /// append, on the file system of type `fs_type` (`fstatfs`'s `f_type`,
    /// as the sandbox read it when it opened the file).
    pub(super) fn for_file(fs_type: u64, writable: bool, append: bool) -> Self {
        /// `TMPFS_MAGIC` (`linux/magic.h`).
        const TMPFS: u64 = 0x0102_1994;
        Preallocate {
            on: AtomicBool::new(cfg!(target_os = "linux") && writable && !append && fs_type != TMPFS),
        }
    }

    /// Reserve the `len` bytes `file`'s next write will store at its
    /// current offset, if this file reserves and `len >= min`. The caller
    /// holds the file's lock, so the offset is the write's.
    pub(super) fn before_write(&self, file: &File, len: usize, min: u64) {
        // Relaxed: a per-file hint; a stale value costs one more try or
        // one reservation fewer, nothing else depends on it.
        if (len as u64) < min || !self.on.load(Ordering::Relaxed) {
            return;
        }
        if !reserve(file, len as u64) {
            // Relaxed: as above.
            self.on.store(false, Ordering::Relaxed);
        }
    }
}

/// Reserve `len` bytes at `file`'s offset, keeping its size. `false` when
/// the file system does not reserve at all (the file should stop trying).
#[cfg(target_os = "linux")]
fn reserve(file: &File, len: u64) -> bool {
    use rustix::fs::{fallocate, FallocateFlags};
    use rustix::io::Errno;
    use std::io::Seek;
    let Ok(offset) = (&*file).stream_position() else {
        return true;
    };
    match fallocate(file, FallocateFlags::KEEP_SIZE, offset, len) {
        Err(Errno::OPNOTSUPP | Errno::NOSYS | Errno::NODEV) => false,
        // Reserved, or refused for this range only (no space, too large):
        // the write itself reports what matters.
        _ => true,
    }
}

#[cfg(not(target_os = "linux"))]
fn reserve(_file: &File, _len: u64) -> bool {
    false
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// The type of `file`'s file system, as the sandbox reads it.
    fn fs_type(file: &File) -> u64 {
        rustix::fs::fstatfs(file).unwrap().f_type as u64
    }

    /// A reservation keeps the size and allocates the blocks, where the
    /// temp directory's file system reserves (ext4, xfs, btrfs do; CI's
    /// is ext4). A write then fills the file to exactly what was written.
    #[test]
    fn a_reservation_allocates_blocks_and_keeps_the_size() {
        let path = std::env::temp_dir().join(format!("gpu-rpc-prealloc-{}", std::process::id()));
        let file = File::options()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let p = Preallocate::for_file(fs_type(&file), true, false);
        // Relaxed: read by this thread only.
        if !p.on.load(Ordering::Relaxed) {
            eprintln!("skipped: the temp directory's file system (tmpfs or not Linux) is not reserved on");
            std::fs::remove_file(&path).unwrap();
            return;
        }
        p.before_write(&file, 1 << 20, 1 << 20);
        let m = file.metadata().unwrap();
        // Relaxed: as above.
        if !p.on.load(Ordering::Relaxed) {
            eprintln!("skipped: the temp directory's file system refuses fallocate");
        } else {
            assert_eq!(m.len(), 0, "the size is kept");
            assert!(
                m.blocks() * 512 >= 1 << 20,
                "{} blocks of 512 bytes reserved",
                m.blocks()
            );
        }
        // Below the minimum: nothing more is reserved.
        p.before_write(&file, 4096, 1 << 20);
        assert_eq!(file.metadata().unwrap().blocks(), m.blocks());
        std::io::Write::write_all(&mut &file, &[7u8; 1000]).unwrap();
        assert_eq!(file.metadata().unwrap().len(), 1000);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn append_and_read_only_files_never_reserve() {
        let path = std::env::temp_dir().join(format!("gpu-rpc-prealloc-ro-{}", std::process::id()));
        let file = File::create(&path).unwrap();
        // Relaxed: read by this thread only.
        let fs = fs_type(&file);
        assert!(!Preallocate::for_file(fs, true, true).on.load(Ordering::Relaxed));
        assert!(!Preallocate::for_file(fs, false, false).on.load(Ordering::Relaxed));
        std::fs::remove_file(&path).unwrap();
    }
}
