//! Modules and their kernels: loading an image (PTX, cubin or fatbin; see
//! [`Image`]), entry points, parameter layouts and resource limits.

use std::ffi::{c_void, CString};
use std::fmt;
use std::path::Path;

use cudarc::driver::{result, sys};

use crate::protocol::ClientDesc;

use super::image::check_ptx;
use super::*;

/// A kernel image (PTX, a cubin or a fatbin) loaded into a device's context; unloaded on drop.
///
/// ```no_run
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::cuda::{CudaDevice, Module};
/// let dev = CudaDevice::new(0)?;
/// let module = Module::from_ptx(&dev, ".version 7.8\n.target sm_90\n.address_size 64\n.visible .entry k() { ret; }\n")?;
/// assert_eq!(module.entries(), ["k"]);
/// # Ok::<(), gpu_rpc::cuda::CudaError>(())
/// ```
pub struct Module {
    device: CudaDevice,
    raw: sys::CUmodule,
    entries: Vec<String>,
}

// SAFETY: a `CUmodule` is a driver handle usable from any thread on which its
// context is current (every use binds it first); the driver API is
// thread-safe.
unsafe impl Send for Module {}
// SAFETY: as above; `&Module` only looks functions up.
unsafe impl Sync for Module {}

impl fmt::Debug for Module {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Module")
            .field("device", &self.device)
            .field("entries", &self.entries)
            .finish()
    }
}

impl Module {
    /// Load PTX text (JIT-compiled by the driver for the device). Text that
    /// is not PTX is refused before it reaches the driver
    /// ([`CudaError::NotPtx`]); PTX the driver rejects gives
    /// [`CudaError::InvalidPtx`] with the JIT compiler's log.
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// # let dev = gpu_rpc::cuda::CudaDevice::new(0)?;
    /// let err = gpu_rpc::cuda::Module::from_ptx(&dev, "hello").unwrap_err();
    /// assert!(err.to_string().contains("not PTX"));
    /// # Ok::<(), gpu_rpc::cuda::CudaError>(())
    /// ```
    pub fn from_ptx(device: &CudaDevice, ptx: &str) -> Result<Module, CudaError> {
        check_ptx(ptx)?;
        Module::load(device, Image::Ptx(ptx))
    }

    /// Load any kernel image: PTX text (JIT-compiled, as
    /// [`from_ptx`](Self::from_ptx)), a cubin (machine code for this GPU's
    /// architecture, e.g. `ptxas -arch=sm_90 -o k.cubin k.ptx`: loaded
    /// without compiling, so a large module starts at once) or a fatbin
    /// (`nvcc -fatbin`; the driver picks the cubin for this GPU, or JIT-
    /// compiles its PTX). Bytes that are none of these give
    /// [`CudaError::NotPtx`]; a cubin or fatbin whose tables reach past its
    /// bytes, [`CudaError::BadImage`] (checked here: the driver trusts them
    /// and crashes on such an image); an image the driver rejects (a cubin
    /// for another architecture: `CUDA_ERROR_NO_BINARY_FOR_GPU`),
    /// [`CudaError::InvalidImage`]. Only the structure is checked: load
    /// cubins and fatbins you trust, as you would a shared library.
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// # let dev = gpu_rpc::cuda::CudaDevice::new(0)?;
    /// let cubin = std::fs::read("kernels.cubin").unwrap();
    /// let module = gpu_rpc::cuda::Module::from_image(&dev, &cubin)?;
    /// assert!(module.entries().iter().any(|e| e == "rpc_noop_kernel"));
    /// # Ok::<(), gpu_rpc::cuda::CudaError>(())
    /// ```
    pub fn from_image(device: &CudaDevice, bytes: &[u8]) -> Result<Module, CudaError> {
        Module::load(device, Image::recognize(bytes)?)
    }

    /// [`from_image`](Self::from_image) on the contents of a file.
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// # let dev = gpu_rpc::cuda::CudaDevice::new(0)?;
    /// let module = gpu_rpc::cuda::Module::from_file(&dev, "kernels.cubin")?;
    /// # Ok::<(), gpu_rpc::cuda::CudaError>(())
    /// ```
    pub fn from_file(device: &CudaDevice, path: impl AsRef<Path>) -> Result<Module, CudaError> {
        let path = path.as_ref();
        let bytes = read_file(path)?;
        Module::from_image(device, &bytes).map_err(|e| match e {
            CudaError::NotPtx { reason } => CudaError::NotPtx {
                reason: format!("{}: {reason}", path.display()),
            },
            CudaError::BadImage { kind, reason } => CudaError::BadImage {
                kind,
                reason: format!("{}: {reason}", path.display()),
            },
            e => e,
        })
    }

    /// Hand `image` to the driver (`cuModuleLoadDataEx`, with a buffer for
    /// the JIT compiler's error log). Private: the driver trusts an image's
    /// sizes, so every image comes from [`Image::recognize`] (or PTX
    /// through `check_ptx`), which checked them.
    fn load(device: &CudaDevice, image: Image<'_>) -> Result<Module, CudaError> {
        // The driver reads PTX up to its NUL; cubins and fatbins carry their
        // own sizes.
        let text;
        let data: *const c_void = match image {
            Image::Ptx(ptx) => {
                text = CString::new(ptx).map_err(|_| CudaError::NotPtx {
                    reason: "the text contains a NUL byte".to_string(),
                })?;
                text.as_ptr().cast()
            }
            Image::Cubin(bytes) | Image::Fatbin(bytes) => bytes.as_ptr().cast(),
        };
        let what = format!("loading a {} module", image.kind());
        device.bind()?;
        let mut log = vec![0u8; JIT_LOG_BYTES];
        let mut options = [
            sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
            sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        ];
        // The size option is an integer passed in the pointer-sized slot.
        let mut values = [
            log.as_mut_ptr().cast::<c_void>(),
            std::ptr::without_provenance_mut::<c_void>(JIT_LOG_BYTES),
        ];
        let mut raw: sys::CUmodule = std::ptr::null_mut();
        // SAFETY: `data` is NUL-terminated PTX text or a whole cubin/fatbin
        // recognised by its header, alive until the call returns (`text` or
        // the caller's bytes); `options`/`values` hold two matching entries;
        // `log` has `JIT_LOG_BYTES` writable bytes and outlives the call; the
        // context is current.
        let r = raw_guard(&what, || unsafe {
            sys::cuModuleLoadDataEx(
                &mut raw,
                data,
                options.len() as u32,
                options.as_mut_ptr(),
                values.as_mut_ptr(),
            )
            .result()
        })?;
        match r {
            Ok(()) => {
                let entries = image.entries().unwrap_or_else(|| module_entries(raw));
                Ok(Module {
                    device: device.clone(),
                    raw,
                    entries,
                })
            }
            Err(e) => {
                use sys::CUresult::*;
                let (code, name, message) = describe(e);
                let log = || {
                    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                    String::from_utf8_lossy(&log[..end]).into_owned()
                };
                // The codes by which the driver refuses the image itself (not
                // the context or the machine).
                let rejected = matches!(
                    e.0,
                    CUDA_ERROR_INVALID_PTX
                        | CUDA_ERROR_INVALID_IMAGE
                        | CUDA_ERROR_NO_BINARY_FOR_GPU
                        | CUDA_ERROR_UNSUPPORTED_PTX_VERSION
                        | CUDA_ERROR_INVALID_SOURCE
                        | CUDA_ERROR_JIT_COMPILER_NOT_FOUND
                        | CUDA_ERROR_JIT_COMPILATION_DISABLED
                );
                match image {
                    Image::Ptx(_) if rejected => Err(CudaError::InvalidPtx {
                        code,
                        name,
                        message,
                        log: log(),
                    }),
                    Image::Cubin(_) | Image::Fatbin(_) if rejected => Err(CudaError::InvalidImage {
                        kind: image.kind(),
                        code,
                        name,
                        message,
                        log: log(),
                    }),
                    _ => Err(CudaError::Driver {
                        what,
                        code,
                        name,
                        message,
                    }),
                }
            }
        }
    }

    /// [`from_ptx`](Self::from_ptx) on the contents of a file.
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// # let dev = gpu_rpc::cuda::CudaDevice::new(0)?;
    /// let module = gpu_rpc::cuda::Module::from_ptx_file(&dev, "kernels.ptx")?;
    /// # Ok::<(), gpu_rpc::cuda::CudaError>(())
    /// ```
    pub fn from_ptx_file(device: &CudaDevice, path: impl AsRef<Path>) -> Result<Module, CudaError> {
        let path = path.as_ref();
        let bytes = read_file(path)?;
        let text = String::from_utf8(bytes).map_err(|_| CudaError::NotPtx {
            reason: format!(
                "{} is not UTF-8 text (a cubin or fatbin? `Module::from_file` loads those)",
                path.display()
            ),
        })?;
        Module::from_ptx(device, &text)
    }

    /// The module's entry points: the `.entry` names of PTX, the entry
    /// symbols of a cubin, what the driver lists for a fatbin
    /// (`cuModuleEnumerateFunctions`, CUDA 12.4+; empty where it cannot).
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// # let dev = gpu_rpc::cuda::CudaDevice::new(0)?;
    /// # let module = gpu_rpc::cuda::Module::from_ptx_file(&dev, "kernels.ptx")?;
    /// for name in module.entries() {
    ///     println!("{name}");
    /// }
    /// # Ok::<(), gpu_rpc::cuda::CudaError>(())
    /// ```
    pub fn entries(&self) -> &[String] {
        &self.entries
    }

    /// The device the module is loaded on.
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// # let dev = gpu_rpc::cuda::CudaDevice::new(0)?;
    /// # let module = gpu_rpc::cuda::Module::from_ptx_file(&dev, "kernels.ptx")?;
    /// assert_eq!(module.device().ordinal(), 0);
    /// # Ok::<(), gpu_rpc::cuda::CudaError>(())
    /// ```
    pub fn device(&self) -> &CudaDevice {
        &self.device
    }

    /// The entry point `name` ([`CudaError::KernelNotFound`] when the module
    /// has none of that name).
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// # let dev = gpu_rpc::cuda::CudaDevice::new(0)?;
    /// # let module = gpu_rpc::cuda::Module::from_ptx_file(&dev, "kernels.ptx")?;
    /// let err = module.kernel("no_such_kernel").unwrap_err();
    /// assert!(err.to_string().contains("kernel `no_such_kernel` not found in module"));
    /// # Ok::<(), gpu_rpc::cuda::CudaError>(())
    /// ```
    pub fn kernel(&self, name: &str) -> Result<Kernel<'_>, CudaError> {
        let not_found = || CudaError::KernelNotFound {
            kernel: name.to_string(),
            entries: self.entries.clone(),
        };
        let cname = CString::new(name).map_err(|_| not_found())?;
        self.device.bind()?;
        let raw = self.raw;
        let what = format!("looking up kernel `{name}`");
        // SAFETY: `raw` is a loaded module (unloaded only on drop); the context
        // is current.
        let func = match raw_guard(&what, || unsafe { result::module::get_function(raw, cname) })? {
            Ok(f) => f,
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NOT_FOUND => return Err(not_found()),
            Err(e) => return Err(CudaError::driver(&what, e)),
        };
        Ok(Kernel {
            module: self,
            func,
            name: name.to_string(),
            params: param_sizes(func),
        })
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        let _ = self.device.bind();
        let raw = self.raw;
        // SAFETY: loaded in `load`, unloaded once; every `Kernel` borrows
        // the module, so none outlives it. Errors (sticky context) are ignored.
        let _ = raw_guard("unloading a module", || unsafe { result::module::unload(raw) });
    }
}

/// The bytes of an image file ([`CudaError::Io`] naming it when it cannot
/// be read).
fn read_file(path: &Path) -> Result<Vec<u8>, CudaError> {
    std::fs::read(path).map_err(|e| CudaError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    })
}

/// The names of a loaded module's kernels as the driver lists them
/// (`cuModuleGetFunctionCount`, `cuModuleEnumerateFunctions`,
/// `cuFuncGetName`; CUDA 12.4+), empty where the driver cannot.
fn module_entries(module: sys::CUmodule) -> Vec<String> {
    let mut count = 0u32;
    // SAFETY: `module` is loaded; `count` is a valid place for the result.
    let counted = raw_guard("counting a module's kernels", || unsafe {
        sys::cuModuleGetFunctionCount(&mut count, module).result()
    });
    if !matches!(counted, Ok(Ok(()))) {
        return Vec::new();
    }
    let mut funcs: Vec<sys::CUfunction> = vec![std::ptr::null_mut(); count as usize];
    // SAFETY: `funcs` has room for `count` handles.
    let listed = raw_guard("listing a module's kernels", || unsafe {
        sys::cuModuleEnumerateFunctions(funcs.as_mut_ptr(), count, module).result()
    });
    if !matches!(listed, Ok(Ok(()))) {
        return Vec::new();
    }
    funcs
        .into_iter()
        .filter_map(|f| {
            let mut name: *const core::ffi::c_char = std::ptr::null();
            // SAFETY: `f` is a handle the driver just listed; `name` is a
            // valid place for the result.
            let got = raw_guard("naming a kernel", || unsafe {
                sys::cuFuncGetName(&mut name, f).result()
            });
            if !matches!(got, Ok(Ok(()))) || name.is_null() {
                return None;
            }
            // SAFETY: the driver returned a NUL-terminated name that lives as
            // long as the module.
            Some(unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy().into_owned())
        })
        .collect()
}

/// Parameter sizes as the driver reports them (`cuFuncGetParamInfo`, CUDA
/// 12.4+), or `None` when it cannot tell.
pub(super) fn param_sizes(func: sys::CUfunction) -> Option<Vec<usize>> {
    let mut sizes = Vec::new();
    for index in 0..4096usize {
        let (mut offset, mut size) = (0usize, 0usize);
        // SAFETY: `func` is a live function handle; `offset` and `size` are
        // valid places for the results.
        let r = raw_guard("querying kernel parameters", || unsafe {
            sys::cuFuncGetParamInfo(func, index, &mut offset, &mut size).result()
        })
        .ok()?;
        match r {
            Ok(()) => sizes.push(size),
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_INVALID_VALUE && index > 0 => return Some(sizes),
            // Index 0 invalid: no parameters at all, or a driver that cannot
            // say; either way nothing to validate against.
            Err(_) => return None,
        }
    }
    None
}

/// One entry point of a [`Module`].
///
/// ```no_run
/// # use rpc_runtime as gpu_rpc;
/// # let dev = gpu_rpc::cuda::CudaDevice::new(0)?;
/// # let module = gpu_rpc::cuda::Module::from_ptx_file(&dev, "kernels.ptx")?;
/// let kernel = module.kernel("rpc_noop_kernel")?;
/// assert_eq!(kernel.param_sizes(), Some(&[24, 4, 8][..]));
/// # Ok::<(), gpu_rpc::cuda::CudaError>(())
/// ```
pub struct Kernel<'m> {
    pub(super) module: &'m Module,
    pub(super) func: sys::CUfunction,
    pub(super) name: String,
    params: Option<Vec<usize>>,
}

// SAFETY: a `CUfunction` is a driver handle valid on any thread on which its
// context is current (launches bind it first).
unsafe impl Send for Kernel<'_> {}
// SAFETY: as above; `&Kernel` is only read.
unsafe impl Sync for Kernel<'_> {}

impl fmt::Debug for Kernel<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kernel")
            .field("name", &self.name)
            .field("params", &self.params)
            .finish()
    }
}

/// A kernel's resources as the driver reports them after loading it
/// (`cuFuncGetAttribute`); see [`Kernel::resources`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelResources {
    /// Registers per thread.
    pub registers: u32,
    /// Local memory (stack and spills) per thread, in bytes.
    pub local_bytes: u32,
    /// The largest block it can launch with on this device.
    pub max_threads_per_block: u32,
}

impl Kernel<'_> {
    /// Its registers, local memory and largest block on this device.
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// # let dev = gpu_rpc::cuda::CudaDevice::new(0)?;
    /// # let module = gpu_rpc::cuda::Module::from_ptx_file(&dev, "kernels.ptx")?;
    /// let r = module.kernel("rpc_noop_kernel")?.resources()?;
    /// assert!(r.registers <= 64 && r.max_threads_per_block == 1024);
    /// # Ok::<(), gpu_rpc::cuda::CudaError>(())
    /// ```
    pub fn resources(&self) -> Result<KernelResources, CudaError> {
        use sys::CUfunction_attribute_enum as A;
        self.module.device.bind()?;
        let func = self.func;
        let get = |attribute: A| -> Result<u32, CudaError> {
            let what = format!("querying kernel `{}` ({attribute:?})", self.name);
            // SAFETY: `func` is a live function of a loaded module (the
            // kernel borrows it); the context is current.
            raw_guard(&what, || unsafe {
                result::function::get_function_attribute(func, attribute)
            })?
            .map(|v| v.max(0) as u32)
            .map_err(|e| CudaError::driver(&what, e))
        };
        Ok(KernelResources {
            registers: get(A::CU_FUNC_ATTRIBUTE_NUM_REGS)?,
            local_bytes: get(A::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)?,
            max_threads_per_block: get(A::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
        })
    }

    /// [`CudaError::BlockTooLarge`] when `launch`'s blocks are larger than
    /// this kernel allows.
    pub(super) fn check_block(&self, launch: &Launch) -> Result<(), CudaError> {
        let b = launch.block;
        let threads = b.0 as u64 * b.1 as u64 * b.2 as u64;
        let r = self.resources()?;
        if threads > r.max_threads_per_block as u64 {
            return Err(CudaError::BlockTooLarge {
                kernel: self.name.clone(),
                threads,
                max_threads: r.max_threads_per_block,
                registers: r.registers,
            });
        }
        Ok(())
    }

    /// The kernel's name.
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// # let dev = gpu_rpc::cuda::CudaDevice::new(0)?;
    /// # let module = gpu_rpc::cuda::Module::from_ptx_file(&dev, "kernels.ptx")?;
    /// assert_eq!(module.kernel("rpc_noop_kernel")?.name(), "rpc_noop_kernel");
    /// # Ok::<(), gpu_rpc::cuda::CudaError>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The module it belongs to.
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// # let dev = gpu_rpc::cuda::CudaDevice::new(0)?;
    /// # let module = gpu_rpc::cuda::Module::from_ptx_file(&dev, "kernels.ptx")?;
    /// let k = module.kernel("rpc_noop_kernel")?;
    /// assert!(k.module().entries().contains(&"rpc_noop_kernel".to_string()));
    /// # Ok::<(), gpu_rpc::cuda::CudaError>(())
    /// ```
    pub fn module(&self) -> &Module {
        self.module
    }

    /// The size in bytes of each parameter, as the driver reports them;
    /// `None` when the driver cannot tell (then launches are not checked).
    ///
    /// ```no_run
    /// # use rpc_runtime as gpu_rpc;
    /// # let dev = gpu_rpc::cuda::CudaDevice::new(0)?;
    /// # let module = gpu_rpc::cuda::Module::from_ptx_file(&dev, "kernels.ptx")?;
    /// if let Some(sizes) = module.kernel("rpc_noop_kernel")?.param_sizes() {
    ///     assert_eq!(sizes[0], 24); // the ClientDesc
    /// }
    /// # Ok::<(), gpu_rpc::cuda::CudaError>(())
    /// ```
    pub fn param_sizes(&self) -> Option<&[usize]> {
        self.params.as_deref()
    }

    /// Check the parameters against `ClientDesc` + `extra`.
    pub(super) fn check_args(&self, extra: &[KernelArg]) -> Result<(), CudaError> {
        let Some(sizes) = &self.params else {
            return Ok(());
        };
        let bad = |message: String| {
            Err(CudaError::KernelSignature {
                kernel: self.name.clone(),
                message,
            })
        };
        let want = 1 + extra.len();
        if sizes.len() != want {
            return bad(format!(
                "it has {} parameters (sizes {sizes:?}), the launch passes {want} (the ClientDesc and {} extra)",
                sizes.len(),
                extra.len()
            ));
        }
        let desc = std::mem::size_of::<ClientDesc>();
        if sizes[0] != desc {
            return bad(format!(
                "its first parameter is {} bytes; it must be the {desc}-byte ClientDesc passed by value (`.param .align 8 .b8 name[{desc}]` in PTX)",
                sizes[0]
            ));
        }
        for (i, (arg, &size)) in extra.iter().zip(&sizes[1..]).enumerate() {
            if arg.size() != size {
                return bad(format!(
                    "parameter {} is {size} bytes, the launch passes {arg:?} ({} bytes)",
                    i + 1,
                    arg.size()
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::run::Launch;

    #[test]
    fn arg_bits_are_little_endian_low_bytes() {
        assert_eq!(
            KernelArg::U32(0xdead_beef).bits().to_le_bytes()[..4],
            0xdead_beefu32.to_le_bytes()
        );
        assert_eq!(KernelArg::I32(-1).bits(), 0xffff_ffff);
        assert_eq!(KernelArg::F32(1.5).bits() as u32, 1.5f32.to_bits());
        assert_eq!(KernelArg::F64(2.5).bits(), 2.5f64.to_bits());
    }

    #[test]
    fn error_messages() {
        let e = CudaError::KernelNotFound {
            kernel: "foo".into(),
            entries: vec!["a".into(), "b".into()],
        };
        assert_eq!(
            e.to_string(),
            "gpu_rpc cuda: kernel `foo` not found in module (its entry points: a, b)"
        );
        let e = CudaError::KernelFault {
            kernel: "k".into(),
            code: 719,
            name: "CUDA_ERROR_LAUNCH_FAILED".into(),
            message: "unspecified launch failure".into(),
            context_lost: true,
        };
        assert!(e.is_context_lost());
        assert!(e.to_string().contains("unusable"), "{e}");
        let e = CudaError::InvalidPtx {
            code: 218,
            name: "CUDA_ERROR_INVALID_PTX".into(),
            message: "bad".into(),
            log: "line 3: syntax error".into(),
        };
        assert!(e.to_string().ends_with("JIT log:\nline 3: syntax error"), "{e}");
    }

    #[test]
    fn default_ports_are_clamped_to_warps() {
        let l = Launch {
            grid: (2, 1, 1),
            block: (64, 1, 1),
            ..Launch::default()
        };
        assert_eq!(l.warps().min(l.port_count as u64), 4);
        assert!(Launch {
            grid: (0, 1, 1),
            ..Launch::default()
        }
        .validate()
        .is_err());
    }
}
