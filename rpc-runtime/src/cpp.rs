//! CUDA C++ kernels calling a `#[gpu_rpc]` trait.
//!
//! For every trait, `#[gpu_rpc]` generates `<Trait>Rpc::cuda_header()` (host
//! only): a self-contained CUDA C++ header that declares `<Trait>Client`, one
//! `__device__` method per trait method, with the same opcodes, signature
//! hashes, call frame and wire encoding as the Rust client stubs, over a C++
//! client of the same port protocol ([`CLIENT_HEADER`]). The host server
//! cannot tell a C++ kernel from a Rust one.
//!
//! How a wire type is spelled in C++ is part of the type: [`Wire::CPP`]
//! (a [`CppType`], `no_std`; `#[derive(Wire)]` fills it in for structs). A
//! method whose types have no C++ form (tuples, `u128`, generic structs) is
//! left out of the header, with a comment naming the type.
//!
//! | Rust | CUDA C++ |
//! |------|----------|
//! | `u8`..`u64`, `i8`..`i64`, `usize`, `isize` | `unsigned char` .. `long long` (`usize`/`isize`: 8 bytes) |
//! | `f32`, `f64`, `bool`, `char` | `float`, `double`, `bool`, `char32_t` |
//! | `()` | `gpu_rpc::Unit` |
//! | `[T; N]` | `gpu_rpc::Array<T, N>` |
//! | `Option<T>`, `Result<T, E>` | `gpu_rpc::Option<T>` (`some`, `value`), `gpu_rpc::Result<T, E>` (`is_err`, `ok`, `err`) |
//! | `#[derive(Wire)]` struct | a struct of the same name and layout (checked by `static_assert`s) |
//! | `&str`, `&[T]`, `&mut [T]` | `gpu_rpc::Str` (from `const char*`, or pointer and length), `gpu_rpc::Slice<T>`, `gpu_rpc::MutSlice<T>` |
//!
//! A method `fn m(&self, ..) -> R` becomes `R m(..)`, which traps the thread
//! if the call fails (`GPU_RPC_ON_FAILURE` overrides that), and
//! `gpu_rpc::CallResult try_m(.., R* result)`, which returns the status;
//! `-> !` methods are `[[noreturn]]`, `#[gpu_rpc(async)]` ones return at once.
//!
//! ```
//! # use rpc_runtime as gpu_rpc;
//! use gpu_rpc::cpp::CppType;
//! use gpu_rpc::Wire;
//! let mut name = String::new();
//! (<[u32; 3] as Wire>::CPP.unwrap().name)(&mut name).unwrap();
//! assert_eq!(name, "gpu_rpc::Array<unsigned int, 3>");
//! assert!(<u128 as Wire>::CPP.is_none());
//! # let _: Option<CppType> = None;
//! ```

use core::fmt;

#[cfg(feature = "std")]
mod header;
#[cfg(feature = "std")]
pub use header::{header, Arg, ArgKind, Method, Ret, CLIENT_HEADER};

use crate::wire::Wire;

/// How the CUDA C++ client spells a wire type ([`Wire::CPP`]).
#[derive(Clone, Copy, Debug)]
pub struct CppType {
    /// Writes the type's C++ spelling.
    pub name: fn(&mut dyn fmt::Write) -> fmt::Result,
    /// Writes the declarations the type needs (a derived struct, after the
    /// types of its fields), once per header ([`CppDecls::first`]).
    pub declare: fn(&mut dyn CppDecls) -> fmt::Result,
    /// The C++ type has the Rust type's in-memory layout, so it may be a
    /// field of a derived struct (not `Option`, `Result`, `()`).
    pub c_layout: bool,
}

/// Where [`CppType::declare`] writes: the header being generated.
pub trait CppDecls {
    /// `true` the first time the type `name` with schema hash `schema` is
    /// asked for: declare it now.
    fn first(&mut self, name: &str, schema: u32) -> bool;
    /// The header text.
    fn out(&mut self) -> &mut dyn fmt::Write;
}

fn no_decls(_: &mut dyn CppDecls) -> fmt::Result {
    Ok(())
}

/// A C++ scalar spelled `name`, with the Rust type's layout.
pub const fn scalar(name: fn(&mut dyn fmt::Write) -> fmt::Result) -> Option<CppType> {
    Some(CppType {
        name,
        declare: no_decls,
        c_layout: true,
    })
}

/// `[T; N]` as `gpu_rpc::Array<T, N>` (none for `N == 0`: C++ has no empty
/// arrays).
pub const fn array<T: Wire, const N: usize>() -> Option<CppType> {
    match T::CPP {
        Some(t) if N > 0 => Some(CppType {
            name: array_name::<T, N>,
            declare: declare_of::<T>,
            c_layout: t.c_layout,
        }),
        _ => None,
    }
}

fn array_name<T: Wire, const N: usize>(w: &mut dyn fmt::Write) -> fmt::Result {
    w.write_str("gpu_rpc::Array<")?;
    name_of::<T>(w)?;
    write!(w, ", {N}>")
}

/// `Option<T>` as `gpu_rpc::Option<T>`.
pub const fn option<T: Wire>() -> Option<CppType> {
    match T::CPP {
        Some(_) => Some(CppType {
            name: option_name::<T>,
            declare: declare_of::<T>,
            c_layout: false,
        }),
        None => None,
    }
}

fn option_name<T: Wire>(w: &mut dyn fmt::Write) -> fmt::Result {
    w.write_str("gpu_rpc::Option<")?;
    name_of::<T>(w)?;
    w.write_str(">")
}

/// `Result<T, E>` as `gpu_rpc::Result<T, E>`.
pub const fn result<T: Wire, E: Wire>() -> Option<CppType> {
    match (T::CPP, E::CPP) {
        (Some(_), Some(_)) => Some(CppType {
            name: result_name::<T, E>,
            declare: declare_result::<T, E>,
            c_layout: false,
        }),
        _ => None,
    }
}

fn result_name<T: Wire, E: Wire>(w: &mut dyn fmt::Write) -> fmt::Result {
    w.write_str("gpu_rpc::Result<")?;
    name_of::<T>(w)?;
    w.write_str(", ")?;
    name_of::<E>(w)?;
    w.write_str(">")
}

fn declare_result<T: Wire, E: Wire>(d: &mut dyn CppDecls) -> fmt::Result {
    declare_of::<T>(d)?;
    declare_of::<E>(d)
}

/// Whether `t` is a C++ form with the Rust type's in-memory layout (a
/// derived struct's fields must all be).
pub const fn has_c_layout(t: Option<CppType>) -> bool {
    match t {
        Some(t) => t.c_layout,
        None => false,
    }
}

/// Write `T`'s C++ name (nothing for a type without one; callers check
/// [`Wire::CPP`] first).
pub fn name_of<T: Wire>(w: &mut dyn fmt::Write) -> fmt::Result {
    write_name(T::CPP, w)
}

/// Declare what `T` needs.
pub fn declare_of<T: Wire>(d: &mut dyn CppDecls) -> fmt::Result {
    declare(T::CPP, d)
}

fn write_name(t: Option<CppType>, w: &mut dyn fmt::Write) -> fmt::Result {
    match t {
        Some(t) => (t.name)(w),
        None => Ok(()),
    }
}

fn declare(t: Option<CppType>, d: &mut dyn CppDecls) -> fmt::Result {
    match t {
        Some(t) => (t.declare)(d),
        None => Ok(()),
    }
}

/// One field of a derived struct, for [`declare_struct`].
#[derive(Clone, Copy, Debug)]
pub struct CppField {
    /// The field's name (`_0`, `_1`.. for a tuple struct).
    pub name: &'static str,
    /// Its type's C++ form.
    pub ty: Option<CppType>,
    /// Its encoded size.
    pub wire_size: usize,
    /// Its offset in the Rust struct (`core::mem::offset_of!`).
    pub offset: usize,
    /// Its size in memory (`core::mem::size_of`).
    pub mem_size: usize,
    /// Its alignment (`core::mem::align_of`).
    pub align: usize,
}

/// A derived struct as C++: the struct (same name, same field order and
/// types), `static_assert`s that its size and field offsets are the Rust
/// struct's, and its `gpu_rpc::Wire` specialisation (fields encoded back to
/// back, as `#[derive(Wire)]` does). Guarded by the struct's name and schema
/// hash, so headers of several traits that share it can be included together.
pub fn declare_struct(d: &mut dyn CppDecls, name: &str, schema: u32, size: usize, fields: &[CppField]) -> fmt::Result {
    for f in fields {
        declare(f.ty, d)?;
    }
    if !d.first(name, schema) {
        return Ok(());
    }
    let w = d.out();
    writeln!(w, "#ifndef GPU_RPC_TYPE_{name}_{schema:08x}")?;
    writeln!(w, "#define GPU_RPC_TYPE_{name}_{schema:08x}")?;
    writeln!(w, "struct {name} {{")?;
    for f in fields {
        w.write_str("  ")?;
        write_name(f.ty, w)?;
        writeln!(w, " {};", f.name)?;
    }
    writeln!(w, "}};")?;
    writeln!(
        w,
        "static_assert(sizeof({name}) == {size}, \"gpu_rpc: {name} has the Rust struct's size\");"
    )?;
    // Same field order, sizes and alignments give the same C layout; where
    // the compiler has `__builtin_offsetof` (not nvrtc) the offsets are
    // checked as well.
    for f in fields {
        writeln!(
            w,
            "static_assert(sizeof(decltype({name}::{0})) == {1} && alignof(decltype({name}::{0})) == {2}, \"gpu_rpc: {name}::{0} has the Rust field's size and alignment\");",
            f.name, f.mem_size, f.align
        )?;
    }
    writeln!(w, "#ifndef __CUDACC_RTC__")?;
    for f in fields {
        writeln!(
            w,
            "static_assert(__builtin_offsetof({name}, {0}) == {1}, \"gpu_rpc: {name}::{0} at the Rust field's offset\");",
            f.name, f.offset
        )?;
    }
    writeln!(w, "#endif")?;
    writeln!(w, "namespace gpu_rpc {{")?;
    writeln!(w, "template <>")?;
    writeln!(w, "struct Wire<::{name}> {{")?;
    let wire: usize = fields.iter().map(|f| f.wire_size).sum();
    writeln!(w, "  static constexpr u32 SIZE = {wire};")?;
    writeln!(w, "  static constexpr bool RAW = false;")?;
    writeln!(w, "  __device__ static void encode(const ::{name}& v, u8* o) {{")?;
    let mut at = 0;
    for f in fields {
        w.write_str("    Wire<")?;
        write_name(f.ty, w)?;
        writeln!(w, ">::encode(v.{}, o + {at});", f.name)?;
        at += f.wire_size;
    }
    writeln!(w, "  }}")?;
    writeln!(w, "  __device__ static ::{name} decode(const u8* i) {{")?;
    writeln!(w, "    ::{name} v;")?;
    let mut at = 0;
    for f in fields {
        write!(w, "    v.{} = Wire<", f.name)?;
        write_name(f.ty, w)?;
        writeln!(w, ">::decode(i + {at});")?;
        at += f.wire_size;
    }
    writeln!(w, "    return v;")?;
    writeln!(w, "  }}")?;
    writeln!(w, "}};")?;
    writeln!(w, "}}  // namespace gpu_rpc")?;
    writeln!(w, "#endif")
}
