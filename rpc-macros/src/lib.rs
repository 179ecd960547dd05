//! The procedural macros of `gpu_rpc`: [`#[gpu_rpc]`](macro@gpu_rpc) and
//! [`#[derive(Wire)]`](derive@Wire).
//!
//! Use them through the `gpu_rpc` facade crate (`use gpu_rpc::{gpu_rpc,
//! Wire};`): the code they generate names `::gpu_rpc::__private::...` paths only.
//!
//! The attribute macro works in three passes (private modules): `parse` turns
//! the trait into a model, rejecting what cannot cross between device and host
//! with errors at the offending tokens; `check` assigns opcodes and checks the
//! service as a whole (ranges, collisions, limits, name clashes); `expand`
//! generates the code. `derive_wire` implements `#[derive(Wire)]`.
#![deny(missing_docs)]

use proc_macro::TokenStream;

mod check;
mod derive_wire;
mod expand;
mod parse;
mod print;

/// Turns a trait into a typed RPC service that GPU kernels call on the host.
///
/// ```
/// use gpu_rpc::gpu_rpc;
///
/// #[gpu_rpc]
/// pub trait HostServices {
///     /// Print a message on the host's stderr.
///     fn print_stderr(&self, msg: &str);
///     /// End the program with `code`.
///     fn exit(&self, code: i32) -> !;
///     fn add(&self, a: u64, b: u64) -> u64;
///     /// Fill `out` from byte `offset` of a host file; returns bytes filled.
///     fn read_block(&self, offset: u64, out: &mut [u8]) -> usize;
///     #[gpu_rpc(async)]
///     fn log(&self, level: u8, msg: &str);
///     #[gpu_rpc(opcode = 0x12345)]
///     fn ping(&self) -> u32;
///     /// A checksum of each lane's slice, lanes on several host threads.
///     #[gpu_rpc(parallel)]
///     fn checksum(&self, data: &[u8]) -> u64;
/// }
///
/// assert_eq!(HostServicesRpc::PING.opcode, 0x12345);
/// assert!(HostServicesRpc::ADD.opcode >= 0x8000_0000);
/// assert_eq!(HostServicesRpc::OPCODES.len(), 7);
/// ```
///
/// # What it generates
///
/// For a trait `Foo` with visibility `vis`:
///
/// * **The trait**, unchanged except that the `#[gpu_rpc(...)]` method
///   attributes are removed. Host implementations implement it; the server
///   adapter requires `T: Foo + Send + Sync` (server threads share it).
/// * **`vis struct FooRpc;`** — the service description, usable in constants:
///   `FooRpc::SERVICE` (`"Foo"`), one `&'static CallDesc` per method named
///   after it in upper case (`FooRpc::READ_BLOCK`), `FooRpc::OPCODES` (all
///   opcodes, in declaration order) and, with the `std` feature,
///   `FooRpc::METHODS` (the server's `MethodInfo` table).
/// * **`vis struct FooClient<'c, 'a>`** — the device client stub, `no_std`
///   and allocation-free: `FooClient::new(&client)`, then for each method
///   `m` a `try_m(..) -> Result<R, CallError>` and an `m(..) -> R` that calls
///   `gpu_rpc::call::fail` on error (a panic; a trap on a GPU). Fire-and-forget
///   methods get only `m(..)` (nothing can be reported back), `-> !` methods
///   only `m(..) -> !`, which waits for the host, then halts the lane.
/// * **`vis struct FooServer<T>(pub T);`** (with `gpu_rpc`'s `std` feature)
///   — implements `gpu_rpc::server::Service` for `T: Foo + Send + Sync`;
///   register it with `Dispatcher::add(FooServer(host_impl))`.
/// * Compile-time checks: `CallDesc::check` of every method, element sizes of
///   slices and out-buffers, and that every value type is `Wire`.
///
/// # Methods
///
/// Every method takes `&self` (host implementations are shared by server
/// threads: use interior mutability for state) and no generics. Arguments:
///
/// | argument       | crosses as                                          |
/// |----------------|-----------------------------------------------------|
/// | `T: Wire`      | its encoding, in the argument block (≤ 4096 bytes)  |
/// | `&str`         | a stream of UTF-8 bytes (validated on the host)     |
/// | `&[T]`         | a stream of encoded elements (1..=64 bytes each)    |
/// | `&mut [T]`     | an out-buffer the host fills (same length)          |
///
/// At most 7 streams and 7 out-buffers per method. The return type is
/// nothing, a `T: Wire` (≤ 4096 bytes) or `!`.
///
/// * `#[gpu_rpc(async)]`: fire-and-forget; the device does not wait for the
///   host. No return value and no out-buffers.
/// * `#[gpu_rpc(parallel)]`: the host may run the lanes of one call on
///   several threads at once, in no order (one thread per
///   `ServerConfig::parallel_min_bytes` of the lanes' slices, up to
///   `ServerConfig::lane_threads`); for methods with real work on each
///   lane's slice. Argument and return types must be `Send`. Host-side
///   only: the opcode and the signature are the same. Not with `-> !`.
/// * `-> !`: the device waits for the host to run the method, then halts the
///   lane. A host implementation may exit the process, or end with
///   `gpu_rpc::lanes::halt()`, which the generated server treats as normal
///   completion ("this lane is done") instead of a panic.
///
/// # Opcodes
///
/// By default a method's opcode is `fnv1a("Trait::method") | 0x8000_0000`
/// (32-bit FNV-1a, computed by the macro, so it is a literal: stable across
/// builds, crates and targets). `#[gpu_rpc(namespace = "x")]` on the trait
/// hashes `"x::Trait::method"` instead, for same-named traits in different
/// crates served together. `#[gpu_rpc(opcode = N)]` on a method sets an
/// explicit opcode in `0x1_0100..0x8000_0000` (lower ones are the runtime's
/// and the standard services').
/// Two methods of one trait with the same opcode are a compile error; for
/// different traits, `Dispatcher::add` refuses a collision at run time and
/// `gpu_rpc::assert_disjoint_opcodes(&[A::OPCODES, B::OPCODES])` in a
/// `const` checks it at compile time.
///
/// # Signatures
///
/// Each call carries a 32-bit signature: a hash of the method name, the kind
/// (value, `&str`, `&[T]`, `&mut [T]`) and `Wire::SCHEMA` of every argument,
/// and the return type. A host built from a different definition answers
/// `Status::SignatureMismatch` instead of misreading the call.
#[proc_macro_attribute]
pub fn gpu_rpc(attr: TokenStream, item: TokenStream) -> TokenStream {
    let item2: proc_macro2::TokenStream = item.into();
    match parse::parse_service(attr.into(), item2.clone()) {
        Ok(mut svc) => match check::check(&mut svc) {
            Ok(()) => expand::expand(&svc).into(),
            Err(e) => with_errors(svc.emit_trait(), e),
        },
        Err((fallback, e)) => with_errors(fallback.unwrap_or(item2), e),
    }
}

/// Implements `gpu_rpc::Wire` for a `#[repr(C)]` struct whose fields are all
/// `Wire`.
///
/// Fields are encoded in declaration order, back to back, without padding:
/// `SIZE` is the sum of the fields' sizes; `SCHEMA` mixes the struct's name
/// with the fields' schemas. Named, tuple and unit structs are supported, and
/// generic ones (each field type must be `Wire`).
///
/// ```
/// use gpu_rpc::wire::{decode, encode};
/// use gpu_rpc::Wire; // the trait and the derive
///
/// #[derive(Wire, Debug, PartialEq)]
/// #[repr(C)]
/// struct Sample {
///     id: u32,
///     ok: bool,
///     pos: [f32; 2],
/// }
///
/// assert_eq!(Sample::SIZE, 4 + 1 + 8);
/// let s = Sample { id: 7, ok: true, pos: [1.0, -2.0] };
/// let mut buf = [0u8; Sample::SIZE];
/// encode(&s, &mut buf);
/// assert_eq!(decode::<Sample>(&buf), Ok(s));
/// ```
#[proc_macro_derive(Wire)]
pub fn derive_wire(input: TokenStream) -> TokenStream {
    derive_wire::derive(input.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// The engine of `gpu_rpc`'s print macros (`gpu_println!` and friends, which
/// call it): checks the format string and expands to a host-formatted print.
/// Input: `fd, newline; "format", args...`.
#[doc(hidden)]
#[proc_macro]
pub fn __print(input: TokenStream) -> TokenStream {
    print::expand(input.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// The item (so that later errors in the user's code do not cascade from a
/// missing trait) followed by the errors.
fn with_errors(item: proc_macro2::TokenStream, e: syn::Error) -> TokenStream {
    let errors = e.into_compile_error();
    quote::quote!(#item #errors).into()
}

/// 32-bit FNV-1a, as `gpu_rpc::wire::fnv1a(SCHEMA_SEED, ..)`.
pub(crate) fn fnv1a(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for &b in bytes {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}
