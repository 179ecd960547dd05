//! Pass 2: checks of the service as a whole, and opcode assignment.
//!
//! * Opcodes: hashed `fnv1a("[namespace::]Trait::method") | 0x8000_0000`, or
//!   explicit in `0x1_0100..0x8000_0000` (`0x1_0000..0x1_0100` is the
//!   standard services'); no two methods may share one.
//! * Limits the macro can see syntactically: at most 7 streamed inputs and 7
//!   out-buffers. (Byte sizes depend on `Wire::SIZE` and are checked by the
//!   generated `const` assertions.)
//! * Generated names must not clash: the client's `new`, `m`/`try_m`, and the
//!   description's upper-case constants.

use std::collections::HashMap;

use crate::parse::{ArgKind, Errors, Service};

/// First opcode available to user services (`rpc_runtime::protocol::opcodes::FIRST_USER`).
pub const FIRST_USER: u32 = 0x0001_0000;
/// The block of explicit opcodes reserved for the standard services
/// (`gpu_rpc::services::OPCODE_BLOCK`).
pub const STANDARD_BLOCK: std::ops::Range<u32> = 0x1_0000..0x1_0100;
/// First opcode of the hashed range (`rpc_runtime::protocol::opcodes::FIRST_HASHED`).
pub const FIRST_HASHED: u32 = 0x8000_0000;
/// Most streamed inputs / out-buffers per method (`rpc_runtime::call::MAX_IN_STREAMS`).
pub const MAX_STREAMS: usize = 7;
/// Constants of `FooRpc` that are not per-method.
pub const RESERVED_CONSTS: &[&str] = &["SERVICE", "OPCODES", "METHODS"];

/// The hashed opcode of `method` in `service`.
pub fn hashed_opcode(namespace: Option<&str>, service: &str, method: &str) -> u32 {
    let input = match namespace {
        Some(ns) => format!("{ns}::{service}::{method}"),
        None => format!("{service}::{method}"),
    };
    crate::fnv1a(input.as_bytes()) | FIRST_HASHED
}

/// Check `svc` and assign its opcodes.
pub fn check(svc: &mut Service) -> syn::Result<()> {
    let mut errors = Errors::default();
    let service = svc.ident().to_string();
    let namespace = svc.namespace.as_ref().map(|n| n.value());
    let standard_services = svc.standard_services;

    // Opcodes.
    let mut seen: HashMap<u32, String> = HashMap::new();
    for m in &mut svc.methods {
        m.opcode = match &m.explicit_opcode {
            Some((v, lit)) => {
                if !(FIRST_USER..FIRST_HASHED).contains(v) {
                    errors.at(
                        lit,
                        format!(
                            "gpu_rpc: explicit opcode {v:#x} is out of range: explicit opcodes lie in 0x1_0000..0x8000_0000 (lower ones are reserved for the runtime, higher ones for hashed opcodes)"
                        ),
                    );
                } else if STANDARD_BLOCK.contains(v) && !standard_services {
                    errors.at(
                        lit,
                        format!(
                            "gpu_rpc: explicit opcode {v:#x} is in 0x1_0000..0x1_0100, the block reserved for gpu_rpc's standard services (`gpu_rpc::services::Std`); use 0x1_0100..0x8000_0000"
                        ),
                    );
                }
                *v
            }
            None => hashed_opcode(namespace.as_deref(), &service, &m.name),
        };
        if let Some(other) = seen.get(&m.opcode) {
            let msg = format!(
                "gpu_rpc: opcode {:#010x} of `{}` is already used by `{}` in this trait",
                m.opcode, m.name, other
            );
            match &m.explicit_opcode {
                Some((_, lit)) => errors.at(lit, msg),
                None => errors.at(
                    &m.ident,
                    format!("{msg} (a hash collision: give one of them an explicit #[gpu_rpc(opcode = N)])"),
                ),
            }
        } else {
            seen.insert(m.opcode, m.name.clone());
        }
    }

    // Stream counts.
    for m in &svc.methods {
        let mut ins = 0;
        let mut outs = 0;
        for a in &m.args {
            match a.kind {
                ArgKind::Str | ArgKind::Slice(_) => {
                    ins += 1;
                    if ins == MAX_STREAMS + 1 {
                        errors.at(
                            &a.ty,
                            "gpu_rpc: too many `&str`/`&[T]` arguments: a method takes at most 7 streamed inputs",
                        );
                    }
                }
                ArgKind::Out(_) => {
                    outs += 1;
                    if outs == MAX_STREAMS + 1 {
                        errors.at(
                            &a.ty,
                            "gpu_rpc: too many `&mut [T]` arguments: a method takes at most 7 out-buffers",
                        );
                    }
                }
                ArgKind::Value => {}
            }
        }
    }

    // Generated names.
    let mut consts: HashMap<String, String> = HashMap::new();
    let mut fns: HashMap<String, String> = HashMap::new();
    fns.insert("new".into(), "the constructor `new`".into());
    for m in &svc.methods {
        let c = m.name.to_uppercase();
        if RESERVED_CONSTS.contains(&c.as_str()) {
            errors.at(
                &m.ident,
                format!(
                    "gpu_rpc: a method named `{}` would clash with the generated constant `{}Rpc::{c}`; rename it",
                    m.name, service
                ),
            );
        } else if let Some(other) = consts.insert(c.clone(), m.name.clone()) {
            errors.at(
                &m.ident,
                format!(
                    "gpu_rpc: methods `{other}` and `{}` would both generate the constant `{}Rpc::{c}`; rename one",
                    m.name, service
                ),
            );
        }
    }
    for m in &svc.methods {
        let mut names = vec![m.name.clone()];
        let has_try = !m.is_async && !matches!(m.ret, crate::parse::Ret::Never);
        if has_try {
            names.push(format!("try_{}", m.name));
        }
        for n in names {
            if let Some(other) = fns.insert(n.clone(), format!("the client method of `{}`", m.name)) {
                errors.at(
                    &m.ident,
                    format!(
                        "gpu_rpc: the client stub method `{}Client::{n}` would clash with {other}; rename the method",
                        service
                    ),
                );
            }
        }
    }

    errors.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashed_opcodes_are_stable_and_in_range() {
        let a = hashed_opcode(None, "HostServices", "add");
        assert!(a >= FIRST_HASHED);
        assert_eq!(a, crate::fnv1a(b"HostServices::add") | FIRST_HASHED);
        assert_ne!(hashed_opcode(Some("x"), "HostServices", "add"), a);
        // FNV-1a test vector.
        assert_eq!(crate::fnv1a(b"a"), 0xe40c_292c);
    }
}
