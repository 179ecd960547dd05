//! `gpu_println!` and friends: checks a format string at compile time and
//! normalizes it for the host, which formats the values the device sends
//! (no `core::fmt` on the device).
//!
//! Input (from the `macro_rules!` wrappers in `gpu_rpc::services`):
//! `fd_expr, newline_bool ; "format", args...`. Output: a call to
//! `::gpu_rpc::__private::print_host(fd, newline, "normalized", &[args])`, where
//! the normalized string has only `{N}` / `{N:spec}` placeholders (`N` = the
//! index in the argument array) and every value is wrapped in
//! `PrintArg::new(&value)`. The spec grammar is `rpc_runtime::format_spec`'s.

use proc_macro2::{Span, TokenStream};
use quote::quote;
use rpc_runtime::format_spec::parse_spec;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Expr, Ident, LitStr, Token};

/// Most values one print may send (the host refuses more).
pub const MAX_PRINT_ARGS: usize = 32;

struct Input {
    fd: Expr,
    newline: Expr,
    fmt: Option<LitStr>,
    args: Vec<Expr>,
    named: Vec<(Ident, Expr)>,
}

impl Parse for Input {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let fd: Expr = input.parse()?;
        input.parse::<Token![,]>()?;
        let newline: Expr = input.parse()?;
        input.parse::<Token![;]>()?;
        if input.is_empty() {
            return Ok(Input {
                fd,
                newline,
                fmt: None,
                args: Vec::new(),
                named: Vec::new(),
            });
        }
        let fmt: LitStr = input.parse().map_err(|e| {
            syn::Error::new(
                e.span(),
                "gpu_println!: the first argument must be a format string literal",
            )
        })?;
        let mut args = Vec::new();
        let mut named = Vec::new();
        if input.is_empty() {
            return Ok(Input {
                fd,
                newline,
                fmt: Some(fmt),
                args,
                named,
            });
        }
        input.parse::<Token![,]>()?;
        let rest: Punctuated<Expr, Token![,]> = Punctuated::parse_terminated(input)?;
        for e in rest {
            match e {
                Expr::Assign(a) => {
                    let name = match &*a.left {
                        Expr::Path(p) if p.path.get_ident().is_some() => p.path.get_ident().cloned().unwrap(),
                        other => return Err(syn::Error::new_spanned(other, "expected `name = value`")),
                    };
                    named.push((name, *a.right));
                }
                e if !named.is_empty() => {
                    return Err(syn::Error::new_spanned(
                        e,
                        "positional arguments cannot follow named arguments",
                    ))
                }
                e => args.push(e),
            }
        }
        Ok(Input {
            fd,
            newline,
            fmt: Some(fmt),
            args,
            named,
        })
    }
}

/// Expand `__print!(fd, newline; "fmt", args...)`.
pub fn expand(input: TokenStream) -> syn::Result<TokenStream> {
    let Input {
        fd,
        newline,
        fmt,
        args,
        named,
    } = syn::parse2(input)?;
    let (fmt_str, span) = match &fmt {
        Some(f) => (f.value(), f.span()),
        None => (String::new(), Span::call_site()),
    };
    let err = |msg: String| syn::Error::new(span, format!("gpu_println!: {msg}"));

    // Values in the order the device sends them: positional, named, then
    // variables captured by name in the string.
    let mut values: Vec<TokenStream> = args.iter().map(|e| quote!(#e)).collect();
    let n_pos = args.len();
    let mut names: Vec<String> = Vec::new();
    for (name, e) in &named {
        names.push(name.to_string());
        values.push(quote!(#e));
    }
    let mut used = vec![false; values.len()];
    let mut next_pos = 0usize;
    let mut out = String::new();
    let mut chars = fmt_str.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '{' if matches!(chars.peek(), Some((_, '{'))) => {
                chars.next();
                out.push_str("{{");
            }
            '}' if matches!(chars.peek(), Some((_, '}'))) => {
                chars.next();
                out.push_str("}}");
            }
            '}' => return Err(err(format!("unmatched `}}` at byte {i} of the format string"))),
            '{' => {
                let rest = &fmt_str[i + 1..];
                let close = rest
                    .find('}')
                    .ok_or_else(|| err(format!("unmatched `{{` at byte {i} of the format string")))?;
                let inner = &rest[..close];
                for _ in 0..inner.chars().count() + 1 {
                    chars.next();
                }
                let (arg, spec) = match inner.find(':') {
                    Some(c) => (inner[..c].trim(), &inner[c + 1..]),
                    None => (inner.trim(), ""),
                };
                parse_spec(spec).map_err(|e| err(format!("`{{{inner}}}`: {e}")))?;
                let index = if arg.is_empty() {
                    let k = next_pos;
                    next_pos += 1;
                    if k >= n_pos {
                        return Err(err(format!(
                            "{} positional placeholders but {} arguments",
                            next_pos, n_pos
                        )));
                    }
                    k
                } else if let Ok(k) = arg.parse::<usize>() {
                    if k >= n_pos {
                        return Err(err(format!("invalid reference to positional argument {k}")));
                    }
                    k
                } else {
                    let valid = arg.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_')
                        && arg.chars().all(|c| c.is_alphanumeric() || c == '_');
                    if !valid {
                        return Err(err(format!("invalid argument name `{arg}`")));
                    }
                    match names.iter().position(|n| n == arg) {
                        Some(k) => n_pos + k,
                        None => {
                            // Captured from the enclosing scope, like `format!`.
                            let id = Ident::new(arg, span);
                            names.push(arg.to_string());
                            values.push(quote!(#id));
                            used.push(false);
                            values.len() - 1
                        }
                    }
                };
                used[index] = true;
                out.push('{');
                out.push_str(&index.to_string());
                if !spec.is_empty() {
                    out.push(':');
                    out.push_str(spec);
                }
                out.push('}');
            }
            c => out.push(c),
        }
    }
    if let Some(k) = used.iter().position(|u| !u) {
        let what = if k < n_pos {
            format!("argument {k} is never used")
        } else {
            format!("named argument `{}` is never used", names[k - n_pos])
        };
        return Err(err(what));
    }
    if values.len() > MAX_PRINT_ARGS {
        return Err(err(format!(
            "{} values; at most {MAX_PRINT_ARGS} can be sent in one print",
            values.len()
        )));
    }
    let normalized = LitStr::new(&out, span);
    Ok(quote! {
        ::gpu_rpc::__private::print_host(
            #fd,
            #newline,
            #normalized,
            &[#(::gpu_rpc::__private::PrintArg::new(&(#values))),*],
        )
    })
}
