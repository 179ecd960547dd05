//! What a device build produces: the [`Artifact`] (the built file, how it was
//! linked, the sources it came from and rustc's warnings) and what
//! [`DeviceBuild::build_to_out_dir`] put into `OUT_DIR` ([`Emitted`]); reading
//! cargo's dep-info, checking the built file's format, and copying it atomically.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

#[cfg(doc)]
use crate::DeviceBuild;
use crate::{BuildError, Linker, Target, Toolchain};

/// A built device image.
///
/// ```no_run
/// # use rpc_build::{DeviceBuild, Target};
/// let artifact = DeviceBuild::new("kernels").target(Target::Nvptx { sm: 90 }).build()?;
/// println!("{} built with {}", artifact.path().display(), artifact.toolchain());
/// # Ok::<(), rpc_build::BuildError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Artifact {
    pub(crate) path: PathBuf,
    pub(crate) target: Target,
    pub(crate) toolchain: Toolchain,
    pub(crate) linker: Linker,
    pub(crate) sources: Vec<PathBuf>,
    pub(crate) warnings: Vec<String>,
}

impl Artifact {
    /// rustc's warnings about the device crate, rendered, with absolute file
    /// names ([`build_to_out_dir`](DeviceBuild::build_to_out_dir) prints them
    /// as `cargo:warning`s).
    ///
    /// ```no_run
    /// # let artifact = rpc_build::DeviceBuild::new("kernels").build()?;
    /// for w in artifact.warnings() {
    ///     eprintln!("{w}");
    /// }
    /// # Ok::<(), rpc_build::BuildError>(())
    /// ```
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The PTX file (nvptx64) or code object (`.hsaco`, amdgcn) in the device target
    /// directory.
    ///
    /// ```no_run
    /// # let artifact = rpc_build::DeviceBuild::new("kernels").build()?;
    /// let ptx = std::fs::read_to_string(artifact.path()).unwrap();
    /// # Ok::<(), rpc_build::BuildError>(())
    /// ```
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The target it was built for.
    ///
    /// ```no_run
    /// # let artifact = rpc_build::DeviceBuild::new("kernels").build()?;
    /// assert_eq!(artifact.target().triple(), "nvptx64-nvidia-cuda");
    /// # Ok::<(), rpc_build::BuildError>(())
    /// ```
    pub fn target(&self) -> Target {
        self.target
    }

    /// The toolchain that built it.
    ///
    /// ```no_run
    /// # let artifact = rpc_build::DeviceBuild::new("kernels").build()?;
    /// println!("{:?}", artifact.toolchain().kind());
    /// # Ok::<(), rpc_build::BuildError>(())
    /// ```
    pub fn toolchain(&self) -> &Toolchain {
        &self.toolchain
    }

    /// The linker that produced it.
    ///
    /// ```no_run
    /// # let artifact = rpc_build::DeviceBuild::new("kernels").build()?;
    /// println!("{}", artifact.linker());
    /// # Ok::<(), rpc_build::BuildError>(())
    /// ```
    pub fn linker(&self) -> Linker {
        self.linker
    }

    /// The source files it was built from (from cargo's dep-info, without the standard
    /// library's sources), plus the device crate's `Cargo.toml` and `Cargo.lock`.
    ///
    /// ```no_run
    /// # let artifact = rpc_build::DeviceBuild::new("kernels").build()?;
    /// for file in artifact.sources() {
    ///     println!("cargo:rerun-if-changed={}", file.display());
    /// }
    /// # Ok::<(), rpc_build::BuildError>(())
    /// ```
    pub fn sources(&self) -> &[PathBuf] {
        &self.sources
    }
}

/// What [`DeviceBuild::build_to_out_dir`] put into `OUT_DIR`.
///
/// ```no_run
/// # use rpc_build::{DeviceBuild, Emitted};
/// match DeviceBuild::new("kernels").optional(true).build_to_out_dir("kernel.ptx")? {
///     Emitted::Built { path, .. } => println!("kernel at {}", path.display()),
///     Emitted::Skipped { reason, .. } => println!("no kernel: {reason}"),
/// }
/// # Ok::<(), rpc_build::BuildError>(())
/// ```
#[derive(Debug, Clone)]
pub enum Emitted {
    /// The device image was built and copied to `path`.
    Built {
        /// `OUT_DIR/<file name>`.
        path: PathBuf,
        /// The build's result.
        artifact: Box<Artifact>,
    },
    /// `path` is an empty placeholder.
    Skipped {
        /// `OUT_DIR/<file name>`.
        path: PathBuf,
        /// Why (also printed as a `cargo:warning`).
        reason: String,
    },
}

impl Emitted {
    /// The file in `OUT_DIR`, built or placeholder.
    ///
    /// ```no_run
    /// # let emitted = rpc_build::DeviceBuild::new("kernels").build_to_out_dir("kernel.ptx")?;
    /// println!("{}", emitted.path().display());
    /// # Ok::<(), rpc_build::BuildError>(())
    /// ```
    pub fn path(&self) -> &Path {
        match self {
            Emitted::Built { path, .. } | Emitted::Skipped { path, .. } => path,
        }
    }

    /// True for the empty placeholder.
    ///
    /// ```no_run
    /// # let emitted = rpc_build::DeviceBuild::new("kernels").build_to_out_dir("kernel.ptx")?;
    /// if emitted.is_skipped() {
    ///     println!("cargo:rustc-cfg=no_device_code");
    /// }
    /// # Ok::<(), rpc_build::BuildError>(())
    /// ```
    pub fn is_skipped(&self) -> bool {
        matches!(self, Emitted::Skipped { .. })
    }
}

/// `<pid>-<n>`: unique among the processes and threads building at the same time.
pub(crate) fn unique_suffix() -> String {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{}-{n}", std::process::id())
}

/// Copies through a temporary file and a rename, so readers never see half a file.
pub(crate) fn copy_atomically(from: &Path, to: &Path) -> Result<(), BuildError> {
    let mut tmp = to.as_os_str().to_owned();
    tmp.push(format!(".tmp-{}", unique_suffix()));
    let tmp = PathBuf::from(tmp);
    fs::copy(from, &tmp).and_then(|_| fs::rename(&tmp, to)).map_err(|e| {
        let _ = fs::remove_file(&tmp);
        BuildError::io(format!("cannot copy {} to {}", from.display(), to.display()), e)
    })
}

/// The prerequisites in a Makefile-style dep-info file (as rustc writes them).
pub(crate) fn parse_dep_info(text: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = Vec::new();
    for line in text.lines() {
        let Some(colon) = line.find(": ").or_else(|| line.strip_suffix(':').map(|l| l.len())) else {
            continue;
        };
        let deps = line[colon + 1..].trim();
        let mut current = String::new();
        let mut chars = deps.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\\' if chars.peek() == Some(&' ') => {
                    current.push(' ');
                    chars.next();
                }
                ' ' | '\t' => {
                    if !current.is_empty() {
                        files.push(PathBuf::from(std::mem::take(&mut current)));
                    }
                }
                c => current.push(c),
            }
        }
        if !current.is_empty() {
            files.push(PathBuf::from(current));
        }
    }
    let mut seen = Vec::new();
    files.retain(|f| {
        if seen.contains(f) {
            false
        } else {
            seen.push(f.clone());
            true
        }
    });
    files
}

/// Checks the built file is a PTX module / an AMDGPU ELF code object.
pub(crate) fn check_artifact(path: &Path, target: &Target) -> Result<(), BuildError> {
    let data = fs::read(path).map_err(|e| BuildError::io(format!("cannot read {}", path.display()), e))?;
    let bad = |reason: String| {
        Err(BuildError::BadArtifact {
            path: path.to_path_buf(),
            reason,
        })
    };
    match target {
        Target::Nvptx { .. } => {
            let text = String::from_utf8_lossy(&data);
            let want = format!(".target {}", target.cpu());
            if !text.contains(&want) {
                return bad(format!("not PTX for {} (no `{want}` line)", target.cpu()));
            }
        }
        Target::Amdgcn { .. } => match elf_machine(&data) {
            Some(EM_AMDGPU) => {}
            Some(m) => return bad(format!("ELF for machine {m}, not EM_AMDGPU ({EM_AMDGPU})")),
            None => return bad("not an ELF file".to_owned()),
        },
    }
    Ok(())
}

const EM_AMDGPU: u16 = 224;

/// `e_machine` of a little-endian ELF file.
fn elf_machine(data: &[u8]) -> Option<u16> {
    if data.len() < 20 || &data[..4] != b"\x7fELF" || data[5] != 1 {
        return None;
    }
    Some(u16::from_le_bytes([data[18], data[19]]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_dep_info() {
        let text = "/t/release/k.ptx: /w/k/src/lib.rs /w/k/src/a\\ b.rs\n\n/w/k/src/lib.rs:\n";
        assert_eq!(
            parse_dep_info(text),
            [PathBuf::from("/w/k/src/lib.rs"), PathBuf::from("/w/k/src/a b.rs")]
        );
    }

    #[test]
    fn elf_machine_reads_e_machine() {
        let mut elf = vec![0u8; 64];
        elf[..4].copy_from_slice(b"\x7fELF");
        elf[5] = 1;
        elf[18..20].copy_from_slice(&224u16.to_le_bytes());
        assert_eq!(elf_machine(&elf), Some(EM_AMDGPU));
        assert_eq!(elf_machine(b"//\n// Generated by LLVM NVPTX"), None);
    }
}
