//! The device footprint of NVPTX kernels: the registers ptxas gives them,
//! limited at build time ([`cap_registers`], applied by
//! [`DeviceBuild`](crate::DeviceBuild)) and measured with ptxas
//! ([`measure`], [`parse_ptxas_verbose`]).
//!
//! Why it matters: an SM has 65 536 registers, so a kernel of `r` registers
//! per thread can launch at most `65536 / r` threads per block (rounded down
//! to whole warps) and runs fewer warps at once than a lighter kernel. ptxas
//! gives a kernel the registers of the hungriest function it may call, cold
//! paths included (a panic report, a formatted print), so a limit keeps
//! those paths from setting the price of the hot ones.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::BuildError;

/// The register limit [`DeviceBuild`](crate::DeviceBuild) gives every NVPTX kernel by default:
/// 64, the most a thread may use for a block of 1024 threads to fit an SM's
/// 65 536 registers. See [`DeviceBuild::max_registers`](crate::DeviceBuild::max_registers).
pub const DEFAULT_MAX_REGISTERS: u32 = 64;

/// Give each `.entry` of `ptx` a `.maxnreg` directive: `per_kernel`'s limit
/// for kernels it names, else `default` (none when `None`). Entries that
/// already carry a `.maxnreg` keep it.
///
/// ```
/// let ptx = ".visible .entry k(\n\t.param .u64 p\n)\n{\n\tret;\n}\n.visible .entry saxpy()\n{\n\tret;\n}\n";
/// let out = rpc_build::cap_registers(ptx, Some(64), &[("saxpy".into(), 24)]);
/// assert!(out.contains(".entry k(\n\t.param .u64 p\n)\n.maxnreg 64\n{"));
/// assert!(out.contains(".entry saxpy()\n.maxnreg 24\n{"));
/// assert_eq!(rpc_build::cap_registers(&out, Some(32), &[]), out);
/// ```
pub fn cap_registers(ptx: &str, default: Option<u32>, per_kernel: &[(String, u32)]) -> String {
    let mut out = String::with_capacity(ptx.len() + 64);
    let mut rest = ptx;
    while let Some(at) = rest.find(".entry ") {
        let (head, tail) = rest.split_at(at);
        out.push_str(head);
        let name_end = tail[7..]
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$'))
            .map_or(tail.len(), |e| e + 7);
        let name = &tail[7..name_end];
        // The directives go between the parameter list and the body.
        let Some(open) = tail.find('{') else {
            out.push_str(tail);
            return out;
        };
        let header = &tail[..open];
        out.push_str(header.trim_end());
        let limit = per_kernel
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, n)| *n)
            .or(default);
        match limit {
            Some(n) if !header.contains(".maxnreg") => out.push_str(&format!("\n.maxnreg {n}\n")),
            _ => out.push_str(&header[header.trim_end().len()..]),
        }
        rest = &tail[open..];
    }
    out.push_str(rest);
    out
}

/// What ptxas reports for one kernel (`ptxas -v`): its registers per thread
/// and its own stack frame and local-memory spills (those of the functions it
/// calls are reported separately and not included).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelFootprint {
    /// The `.entry` name.
    pub name: String,
    /// Registers per thread.
    pub registers: u32,
    /// Bytes of the kernel's own stack frame (local memory).
    pub stack_frame: u32,
    /// Bytes the kernel itself spills to local memory (stores).
    pub spill_stores: u32,
    /// Bytes the kernel itself reloads from spills.
    pub spill_loads: u32,
    /// Bytes of stack the kernel and every function it may call need at
    /// most (ptxas's "cumulative stack size"; 0 when it cannot tell, e.g.
    /// recursion): the per-thread stack a launch must provide.
    pub cumulative_stack: u32,
}

impl KernelFootprint {
    /// The largest block (threads, whole warps) an SM's registers can hold
    /// at this kernel's register count (sm_70 to sm_90), capped at CUDA's 1024.
    ///
    /// ```
    /// # use rpc_build::footprint::KernelFootprint;
    /// let k = |registers| KernelFootprint { name: "k".into(), registers, stack_frame: 0, spill_stores: 0, spill_loads: 0, cumulative_stack: 0 };
    /// assert_eq!(k(64).max_block(), 1024);
    /// assert_eq!(k(168).max_block(), 384);
    /// assert_eq!(k(178).max_block(), 256);
    /// ```
    pub fn max_block(&self) -> u32 {
        // A warp's registers are allocated in units of 256 and live in one of
        // the SM's four partitions of 16 384 registers.
        let per_warp = (self.registers.max(1) * 32).div_ceil(256) * 256;
        ((16_384 / per_warp) * 4 * 32).min(1024)
    }
}

impl fmt::Display for KernelFootprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:<24} {:>4} regs  {:>5} B frame  {:>5} B stack in all  {:>5} B spill stores  {:>5} B spill loads  max block {}",
            self.name,
            self.registers,
            self.stack_frame,
            self.cumulative_stack,
            self.spill_stores,
            self.spill_loads,
            self.max_block()
        )
    }
}

/// Parse the output of `ptxas -v` into one [`KernelFootprint`] per entry, in
/// the order ptxas compiled them.
///
/// ```
/// let out = "ptxas info    : Compiling entry function 'saxpy' for 'sm_90'
/// ptxas info    : Function properties for saxpy
///     16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
/// ptxas info    : Function properties for helper
///     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
/// ptxas info    : Used 24 registers, used 0 barriers, 16 bytes cumulative stack size
/// ";
/// let k = &rpc_build::footprint::parse_ptxas_verbose(out)[0];
/// assert_eq!((k.name.as_str(), k.registers, k.stack_frame, k.spill_stores, k.spill_loads), ("saxpy", 24, 16, 8, 4));
/// assert_eq!(k.cumulative_stack, 16);
/// ```
pub fn parse_ptxas_verbose(out: &str) -> Vec<KernelFootprint> {
    let mut kernels = Vec::new();
    let mut current: Option<KernelFootprint> = None;
    // The properties line that follows "Function properties for <name>".
    let mut props_of: Option<String> = None;
    let number_before = |line: &str, what: &str| -> Option<u32> {
        let at = line.find(what)?;
        line[..at].split_whitespace().last()?.parse().ok()
    };
    for line in out.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            kernels.extend(current.take());
            let name = rest.split('\'').next().unwrap_or_default().to_string();
            current = Some(KernelFootprint {
                name,
                registers: 0,
                stack_frame: 0,
                spill_stores: 0,
                spill_loads: 0,
                cumulative_stack: 0,
            });
        } else if let Some(rest) = line.split("Function properties for ").nth(1) {
            props_of = Some(rest.trim().to_string());
        } else if line.contains("bytes stack frame") {
            if let (Some(k), Some(of)) = (current.as_mut(), props_of.take()) {
                if of == k.name {
                    k.stack_frame = number_before(line, "bytes stack frame").unwrap_or(0);
                    k.spill_stores = number_before(line, "bytes spill stores").unwrap_or(0);
                    k.spill_loads = number_before(line, "bytes spill loads").unwrap_or(0);
                }
            }
        } else if line.contains("Used ") && line.contains(" registers") {
            if let Some(k) = current.as_mut() {
                k.registers = number_before(line, "registers").unwrap_or(0);
                k.cumulative_stack = number_before(line, "bytes cumulative stack size").unwrap_or(0);
            }
        }
    }
    kernels.extend(current);
    kernels
}

/// Find ptxas: `$PTXAS`, then `ptxas` on `PATH`, then `$CUDA_HOME/bin`, then
/// the `nvidia-cuda-nvcc` Python package (`pip install nvidia-cuda-nvcc`
/// puts it at `<site-packages>/nvidia/cu13/bin/ptxas`; found through
/// `python3`).
pub fn find_ptxas() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PTXAS").map(PathBuf::from) {
        return p.is_file().then_some(p);
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain(std::env::var_os("CUDA_HOME").map(|h| PathBuf::from(h).join("bin")))
        .map(|d| d.join("ptxas"))
        .find(|p| p.is_file());
    if on_path.is_some() {
        return on_path;
    }
    let out = Command::new("python3")
        .args([
            "-c",
            "import nvidia, os; print('\\n'.join(os.path.join(p, 'cu13', 'bin', 'ptxas') for p in nvidia.__path__))",
        ])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

/// Assemble `ptx` for `sm_<sm>` with `ptxas -v` and report every kernel's
/// footprint.
///
/// ```no_run
/// let ptxas = rpc_build::footprint::find_ptxas().expect("pip install nvidia-cuda-nvcc");
/// for k in rpc_build::footprint::measure(&ptxas, std::path::Path::new("kernels.ptx"), 90).unwrap() {
///     println!("{k}");
/// }
/// ```
pub fn measure(ptxas: &Path, ptx: &Path, sm: u32) -> Result<Vec<KernelFootprint>, BuildError> {
    let cubin = std::env::temp_dir().join(format!("rpc-build-footprint-{}.cubin", std::process::id()));
    let measured = measure_into(ptxas, ptx, sm, &cubin);
    let _ = std::fs::remove_file(&cubin);
    measured
}

/// [`measure`], keeping the cubin ptxas assembled at `cubin` (a kernel
/// image that loads without the driver's JIT compile, e.g. for `gpu-run`).
///
/// ```no_run
/// let ptxas = rpc_build::footprint::find_ptxas().expect("pip install nvidia-cuda-nvcc");
/// let (ptx, cubin) = (std::path::Path::new("kernels.ptx"), std::path::Path::new("kernels.cubin"));
/// let kernels = rpc_build::footprint::measure_into(&ptxas, ptx, 90, cubin).unwrap();
/// println!("{} kernels in {}", kernels.len(), cubin.display());
/// ```
pub fn measure_into(ptxas: &Path, ptx: &Path, sm: u32, cubin: &Path) -> Result<Vec<KernelFootprint>, BuildError> {
    let out = Command::new(ptxas)
        .arg(format!("-arch=sm_{sm}"))
        .arg("-v")
        .arg(ptx)
        .arg("-o")
        .arg(cubin)
        .output()
        .map_err(|e| BuildError::io(format!("running {}", ptxas.display()), e))?;
    let text = String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(BuildError::io(
            format!("{} -arch=sm_{sm} {} failed: {text}", ptxas.display(), ptx.display()),
            std::io::Error::other("ptxas failed"),
        ));
    }
    Ok(parse_ptxas_verbose(&text))
}
