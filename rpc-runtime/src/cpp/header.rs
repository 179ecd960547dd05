//! The header `<Trait>Rpc::cuda_header()` returns: [`CLIENT_HEADER`], the
//! declarations of the trait's types and a `<Trait>Client` struct whose
//! methods build the same argument block, frame word and streams as the Rust
//! stubs (the numbers come from the trait's `CallDesc`s, so they cannot
//! drift), each checked against the Rust side by `static_assert`s.

use std::collections::HashSet;
use std::fmt::{self, Write};

use super::{CppDecls, CppType};
use crate::call::{lengths_bytes, CallDesc};

/// The C++ client of the port protocol and call frame that every generated
/// header starts with (`rpc-runtime/src/cpp/gpu_rpc_client.cuh`).
pub const CLIENT_HEADER: &str = include_str!("gpu_rpc_client.cuh");

/// How an argument crosses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgKind {
    /// A value (`ty` is its type).
    Value,
    /// `&str`.
    Str,
    /// `&[T]` (`ty` is `T`).
    Slice,
    /// `&mut [T]` (`ty` is `T`).
    Out,
}

/// One argument of a method, as `#[gpu_rpc]` describes it to [`header`].
#[derive(Clone, Copy, Debug)]
pub struct Arg {
    /// The parameter's name.
    pub name: &'static str,
    /// How it crosses.
    pub kind: ArgKind,
    /// The value's or element's C++ form (`None`: it has none; unused for
    /// `&str`).
    pub ty: Option<CppType>,
    /// The value's or element's encoded size.
    pub size: usize,
    /// The Rust type, for the comment on a method left out.
    pub rust: &'static str,
}

/// What a method returns.
#[derive(Clone, Copy, Debug)]
pub enum Ret {
    /// Nothing (or the method is `#[gpu_rpc(async)]`).
    Unit,
    /// `!`: the lane ends after the host ran the method.
    Never,
    /// A value: its C++ form, encoded size and Rust spelling.
    Value(Option<CppType>, usize, &'static str),
}

/// One method of a trait.
#[derive(Clone, Copy, Debug)]
pub struct Method<'a> {
    /// The method's name.
    pub name: &'static str,
    /// Its call description (opcode, signature, sizes).
    pub desc: &'static CallDesc,
    /// Its arguments after `&self`.
    pub args: &'a [Arg],
    /// Its result.
    pub ret: Ret,
}

struct Decls {
    seen: HashSet<String>,
    text: String,
}

impl CppDecls for Decls {
    fn first(&mut self, name: &str, schema: u32) -> bool {
        self.seen.insert(format!("{name}#{schema:08x}"))
    }
    fn out(&mut self) -> &mut dyn fmt::Write {
        &mut self.text
    }
}

/// C++ keywords and names a parameter or method must not take: a trailing
/// `_` is added.
const RESERVED: &[&str] = &[
    "alignas",
    "alignof",
    "and",
    "asm",
    "auto",
    "bool",
    "break",
    "case",
    "catch",
    "char",
    "class",
    "const",
    "constexpr",
    "continue",
    "default",
    "delete",
    "do",
    "double",
    "else",
    "enum",
    "explicit",
    "export",
    "extern",
    "false",
    "float",
    "for",
    "friend",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "mutable",
    "namespace",
    "new",
    "noexcept",
    "not",
    "nullptr",
    "operator",
    "or",
    "private",
    "protected",
    "public",
    "register",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "struct",
    "switch",
    "template",
    "this",
    "throw",
    "true",
    "try",
    "typedef",
    "typename",
    "union",
    "unsigned",
    "using",
    "virtual",
    "void",
    "volatile",
    "while",
    "xor",
    // Names the generated methods use.
    "gpu_rpc",
    "gpu_rpc_client",
    "result",
    "block",
    "call",
    "info",
    "ret",
    "r",
    "v",
];

fn cpp_ident(name: &str) -> String {
    let name = name.trim_start_matches("r#");
    if RESERVED.contains(&name) {
        format!("{name}_")
    } else {
        name.to_string()
    }
}

fn name(t: CppType) -> String {
    let mut s = String::new();
    // Writing to a String cannot fail.
    let _ = (t.name)(&mut s);
    s
}

/// Why `m` cannot be offered in C++, if it cannot.
fn unsupported(m: &Method<'_>) -> Option<String> {
    for a in m.args {
        if a.kind != ArgKind::Str && a.ty.is_none() {
            return Some(format!("argument `{}: {}` has no C++ form", a.name, a.rust));
        }
    }
    match m.ret {
        Ret::Value(None, _, rust) => Some(format!("the return type `{rust}` has no C++ form")),
        _ => None,
    }
}

/// The self-contained CUDA C++ header for the trait `service` (declared in
/// `module`) with `methods`; `#[gpu_rpc]` generates the call as
/// `<Trait>Rpc::cuda_header()`.
pub fn header(service: &str, module: &str, methods: &[Method<'_>]) -> String {
    let mut decls = Decls {
        seen: HashSet::new(),
        text: String::new(),
    };
    let mut body = String::new();
    let mut checks = String::new();
    let mut checked = HashSet::new();
    let mut check = |t: CppType, size: usize| {
        let n = name(t);
        if checked.insert(n.clone()) {
            checks.push_str(&format!(
                "static_assert(gpu_rpc::Wire<{n}>::SIZE == {size}, \"gpu_rpc: {n} encodes to the Rust type's size\");\n"
            ));
        }
    };
    let mut guard = crate::wire::SCHEMA_SEED;
    for m in methods {
        guard = crate::wire::mix(guard, m.desc.signature);
        if let Some(why) = unsupported(m) {
            let _ = writeln!(body, "  // `{}` is not offered in C++: {why}.\n", m.name);
            continue;
        }
        for a in m.args {
            if let Some(t) = a.ty {
                let _ = (t.declare)(&mut decls);
                check(t, a.size);
            }
        }
        if let Ret::Value(Some(t), size, _) = m.ret {
            let _ = (t.declare)(&mut decls);
            check(t, size);
        }
        method(&mut body, service, m);
    }

    let mut h = String::new();
    let _ = writeln!(
        h,
        "// CUDA C++ client of the gpu_rpc trait `{module}::{service}`, generated by\n\
         // `{service}Rpc::cuda_header()`; do not edit. A kernel receives a\n\
         // `gpu_rpc::ClientDesc` by value from the host and makes calls through\n\
         // `{service}Client rpc(desc);`. Same opcodes, signatures, frame and wire\n\
         // encoding as the Rust stubs: one host server serves both."
    );
    let g = format!("GPU_RPC_SERVICE_{service}_{guard:08x}");
    let _ = writeln!(h, "#ifndef {g}\n#define {g}\n");
    h.push_str(CLIENT_HEADER);
    h.push('\n');
    h.push_str(&decls.text);
    h.push_str(&checks);
    let _ = writeln!(h, "\nstruct {service}Client {{");
    let _ = writeln!(h, "  gpu_rpc::Client gpu_rpc_client;");
    let _ = writeln!(
        h,
        "  __device__ explicit {service}Client(const gpu_rpc::ClientDesc& desc) : gpu_rpc_client(desc) {{}}\n"
    );
    h.push_str(&body);
    let _ = writeln!(h, "}};\n\n#endif  // {g}");
    h
}

/// The C++ methods of `m`: the panicking form and `try_` (or the one form of
/// an async or `-> !` method).
fn method(out: &mut String, service: &str, m: &Method<'_>) {
    let d = m.desc;
    let n_in = m
        .args
        .iter()
        .filter(|a| matches!(a.kind, ArgKind::Str | ArgKind::Slice))
        .count();
    let n_out = m.args.iter().filter(|a| a.kind == ArgKind::Out).count();
    let mut params = Vec::new();
    let mut names = Vec::new();
    let mut fill = String::new();
    let mut streams = String::new();
    let mut outs = String::new();
    let (mut i_in, mut i_out) = (0, n_in);
    let mut off = lengths_bytes(n_in, n_out);
    for a in m.args {
        let p = cpp_ident(a.name);
        let ty = a.ty.map(name).unwrap_or_default();
        match a.kind {
            ArgKind::Str => {
                params.push(format!("gpu_rpc::Str {p}"));
                let _ = writeln!(fill, "    gpu_rpc::put_len(block, {i_in}, {p}.len);");
                let _ = writeln!(streams, "    call.stream_str({p});");
                i_in += 1;
            }
            ArgKind::Slice => {
                params.push(format!("gpu_rpc::Slice<{ty}> {p}"));
                let _ = writeln!(fill, "    gpu_rpc::put_len(block, {i_in}, {p}.len * {});", a.size);
                let _ = writeln!(streams, "    call.stream({p}.ptr, {p}.len);");
                i_in += 1;
            }
            ArgKind::Out => {
                params.push(format!("gpu_rpc::MutSlice<{ty}> {p}"));
                let _ = writeln!(fill, "    gpu_rpc::put_len(block, {i_out}, {p}.len);");
                let _ = writeln!(outs, "    call.out({p}.ptr, {p}.len);");
                i_out += 1;
            }
            ArgKind::Value => {
                params.push(format!("{ty} {p}"));
                let _ = writeln!(fill, "    gpu_rpc::Wire<{ty}>::encode({p}, block + {off});");
                off += a.size;
            }
        }
        names.push(p);
    }
    debug_assert_eq!(off, d.block_len());
    let ident = cpp_ident(m.name);
    let qualified = format!("{service}::{}", m.name);
    let info = format!(
        "    constexpr gpu_rpc::CallInfo info = {{{:#x}u, {:#010x}u, {:#018x}ull, {}u, {}u}};\n",
        d.opcode,
        d.signature,
        d.frame_word().pack(),
        d.block_len(),
        d.ret_bytes
    );
    let send = format!(
        "{info}    alignas(8) gpu_rpc::u8 block[{}] = {{}};\n{fill}    gpu_rpc::Call call = gpu_rpc::Call::begin(gpu_rpc_client, info, block);\n{streams}",
        d.block_len().max(1)
    );
    let wait = format!(
        "    alignas(8) gpu_rpc::u8 ret[{}] = {{}};\n    call.reply(ret, {});\n{outs}    call.close();\n",
        (d.ret_bytes as usize).max(1),
        d.ret_bytes
    );
    let doc = format!(
        "  // `{qualified}`: opcode {:#x}, signature {:#010x}.\n",
        d.opcode, d.signature
    );
    let params_s = params.join(", ");
    let args_s = names.join(", ");
    out.push_str(&doc);
    if !d.reply {
        let _ = writeln!(
            out,
            "  // Fire-and-forget: returns once the arguments are sent.\n  __device__ void {ident}({params_s}) {{\n{send}    call.finish_async();\n  }}\n"
        );
        return;
    }
    match m.ret {
        Ret::Never => {
            let _ = writeln!(
                out,
                "  // Ends the thread once the host ran the method.\n  [[noreturn]] __device__ void {ident}({params_s}) {{\n{send}{wait}    if (!call.result.ok()) gpu_rpc::fail(\"{qualified}\", call.result);\n    gpu_rpc::lanes::halt();\n  }}\n"
            );
        }
        Ret::Unit => {
            let _ = writeln!(
                out,
                "  __device__ gpu_rpc::CallResult try_{}({params_s}) {{\n{send}{wait}    return call.result;\n  }}\n  __device__ void {ident}({params_s}) {{\n    gpu_rpc::CallResult r = try_{}({args_s});\n    if (!r.ok()) gpu_rpc::fail(\"{qualified}\", r);\n  }}\n",
                m.name, m.name
            );
        }
        Ret::Value(t, _, _) => {
            let ty = t.map(name).unwrap_or_default();
            let sep = if params.is_empty() { "" } else { ", " };
            let args_sep = if names.is_empty() { "" } else { ", " };
            let _ = writeln!(
                out,
                "  __device__ gpu_rpc::CallResult try_{}({params_s}{sep}{ty}* result) {{\n{send}{wait}    if (call.result.ok() && result) *result = gpu_rpc::Wire<{ty}>::decode(ret);\n    return call.result;\n  }}\n  __device__ {ty} {ident}({params_s}) {{\n    {ty} v{{}};\n    gpu_rpc::CallResult r = try_{}({args_s}{args_sep}&v);\n    if (!r.ok()) gpu_rpc::fail(\"{qualified}\", r);\n    return v;\n  }}\n",
                m.name, m.name
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::protocol::{
        BUFFER_BYTES, BUFFER_WORDS, CLIENT_PORTS_PER_WORD, INLINE_BIT, INLINE_SHIFT, KNOWN_IDLE, LOCK_BIT, OWNER_BIT,
        SHADOW_OUTBOX,
    };

    /// The C++ client spells the protocol's numbers out: they must be the
    /// Rust ones.
    #[test]
    fn client_header_constants_are_the_protocols() {
        for (name, v) in [
            ("BUFFER_BYTES", BUFFER_BYTES as u32),
            ("BUFFER_WORDS", BUFFER_WORDS as u32),
            ("OWNER_BIT", OWNER_BIT),
            ("INLINE_BIT", INLINE_BIT),
            ("INLINE_SHIFT", INLINE_SHIFT),
            ("LOCK_BIT", LOCK_BIT),
            ("SHADOW_OUTBOX", SHADOW_OUTBOX),
            ("KNOWN_IDLE", KNOWN_IDLE),
            ("CLIENT_PORTS_PER_WORD", CLIENT_PORTS_PER_WORD),
        ] {
            let line = format!("constexpr u32 {name} = {v};");
            assert!(super::CLIENT_HEADER.contains(&line), "the C++ client lacks `{line}`");
        }
    }
}
