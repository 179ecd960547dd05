//! The kernel's command-line arguments and other NUL-terminated strings
//! passed from the host: [`args`], [`str_from_ptr`].

use core::fmt;

/// The kernel's command-line arguments, as `gpu-run` passes them: `argv` is a
/// device pointer to `argc` device pointers to NUL-terminated strings.
///
/// Each argument is yielded as `&str`; one that is not valid UTF-8 is
/// yielded as its longest valid prefix.
///
/// ```
/// use std::ffi::CString;
/// let owned: Vec<CString> = ["prog", "-v", "héllo"].iter().map(|s| CString::new(*s).unwrap()).collect();
/// let ptrs: Vec<*const core::ffi::c_char> = owned.iter().map(|s| s.as_ptr()).collect();
/// // SAFETY: `ptrs` holds 3 pointers to NUL-terminated strings, all alive
/// // while the iterator is used.
/// let args = unsafe { gpu_rpc::services::args(3, ptrs.as_ptr() as u64) };
/// assert_eq!(args.len(), 3);
/// assert_eq!(args.collect::<Vec<_>>(), ["prog", "-v", "héllo"]);
/// ```
///
/// # Safety
/// `argv` must be null (with any `argc`: no arguments) or point to `argc`
/// readable pointers, each to a readable NUL-terminated string, all of them
/// alive and unchanged for as long as the yielded `&str`s are used (for the
/// arguments `gpu-run` passes: the whole kernel).
pub unsafe fn args(argc: u32, argv: u64) -> Args {
    Args {
        argv: argv as usize as *const *const core::ffi::c_char,
        next: 0,
        argc: if argv == 0 { 0 } else { argc },
    }
}

/// The NUL-terminated string at device address `ptr` (a kernel argument such
/// as a path), as `&str`: its longest valid UTF-8 prefix; `""` for a null
/// pointer.
///
/// ```
/// let s = c"data/input.txt";
/// // SAFETY: a NUL-terminated string that outlives the result's use.
/// assert_eq!(unsafe { gpu_rpc::services::str_from_ptr(s.as_ptr() as u64) }, "data/input.txt");
/// ```
///
/// # Safety
/// `ptr` must be null or point to a readable NUL-terminated string that stays
/// alive and unchanged for as long as the result is used.
pub unsafe fn str_from_ptr(ptr: u64) -> &'static str {
    if ptr == 0 {
        return "";
    }
    // SAFETY: the caller's contract.
    let bytes = unsafe { core::ffi::CStr::from_ptr(ptr as usize as *const core::ffi::c_char) }.to_bytes();
    match core::str::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => core::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or(""),
    }
}

/// Iterator over the kernel's arguments; see [`args`]. Its `Debug` prints
/// them as a list: `["prog", "-v"]`.
#[derive(Clone)]
pub struct Args {
    argv: *const *const core::ffi::c_char,
    next: u32,
    argc: u32,
}

impl Iterator for Args {
    type Item = &'static str;

    fn next(&mut self) -> Option<&'static str> {
        if self.next >= self.argc {
            return None;
        }
        // SAFETY: `args`' contract: `argv` points to `argc` readable
        // pointers to NUL-terminated strings that stay alive and unchanged
        // while the `&str`s are used.
        let s = unsafe { str_from_ptr(*self.argv.add(self.next as usize) as usize as u64) };
        self.next += 1;
        Some(s)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = (self.argc - self.next) as usize;
        (n, Some(n))
    }
}

impl ExactSizeIterator for Args {}

impl fmt::Debug for Args {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.clone()).finish()
    }
}
