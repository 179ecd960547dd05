//! Pass 1: the trait and its `#[gpu_rpc(...)]` options into a [`Service`]
//! model. Everything that cannot cross between device and host is rejected
//! here, with an error spanning the offending tokens; errors are collected so
//! that one compilation reports all of them.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, ToTokens};
use syn::{
    Attribute, FnArg, Ident, ItemTrait, LitInt, LitStr, Pat, ReturnType, TraitItem, TraitItemFn, Type, TypeParamBound,
    Visibility,
};

/// A `#[gpu_rpc]` trait.
pub struct Service {
    /// The trait as it will be emitted (helper attributes removed).
    pub item: ItemTrait,
    /// `#[gpu_rpc(namespace = "...")]`.
    pub namespace: Option<LitStr>,
    /// `#[gpu_rpc(__standard_services)]`: only `gpu_rpc::services::Std` may
    /// use explicit opcodes in the standard services' block.
    pub standard_services: bool,
    /// The methods, in declaration order.
    pub methods: Vec<Method>,
}

impl Service {
    /// The trait's name.
    pub fn ident(&self) -> &Ident {
        &self.item.ident
    }

    /// The trait's visibility (also that of the generated items).
    pub fn vis(&self) -> &Visibility {
        &self.item.vis
    }

    /// The trait, as emitted.
    pub fn emit_trait(&self) -> TokenStream {
        self.item.to_token_stream()
    }
}

/// One method.
pub struct Method {
    /// The method's name as written.
    pub ident: Ident,
    /// The name without `r#`.
    pub name: String,
    /// Its doc attributes (copied onto the client stub).
    pub docs: Vec<Attribute>,
    /// Its `#[deprecated]` attribute, if any (copied onto both client stubs,
    /// so a kernel calling the method is warned as a host caller is).
    pub deprecated: Vec<Attribute>,
    /// The arguments after `&self`.
    pub args: Vec<Arg>,
    /// The return type.
    pub ret: Ret,
    /// `#[gpu_rpc(async)]`.
    pub is_async: bool,
    /// `#[gpu_rpc(parallel)]`: the host may run the lanes of one call on
    /// several threads at once (a host-side choice: no part of the opcode or
    /// the signature).
    pub parallel: bool,
    /// `#[gpu_rpc(opcode = N)]`.
    pub explicit_opcode: Option<(u32, LitInt)>,
    /// Assigned by [`check`](crate::check).
    pub opcode: u32,
}

/// One argument.
pub struct Arg {
    /// The name used in the client stub (the user's, or a generated one).
    pub ident: Ident,
    /// The type as written.
    pub ty: Type,
    /// How it crosses.
    pub kind: ArgKind,
}

/// How an argument crosses.
pub enum ArgKind {
    /// A `Wire` value in the argument block.
    Value,
    /// `&str`: a stream of UTF-8 bytes.
    Str,
    /// `&[T]`: a stream of elements.
    Slice(Type),
    /// `&mut [T]`: an out-buffer.
    Out(Type),
}

/// A method's return type.
pub enum Ret {
    /// Nothing or `()`.
    Unit,
    /// `!`.
    Never,
    /// A `Wire` value.
    Value(Box<Type>),
}

/// Collects errors.
#[derive(Default)]
pub struct Errors {
    all: Option<syn::Error>,
    /// How many were added.
    pub count: usize,
}

impl Errors {
    /// Add an error at `tokens`.
    pub fn at(&mut self, tokens: impl ToTokens, msg: impl std::fmt::Display) {
        self.push(syn::Error::new_spanned(tokens, msg));
    }

    /// Add an error.
    pub fn push(&mut self, e: syn::Error) {
        self.count += 1;
        match &mut self.all {
            Some(all) => all.combine(e),
            None => self.all = Some(e),
        }
    }

    /// `Err` if any error was added.
    pub fn finish(self) -> Result<(), syn::Error> {
        match self.all {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// Parse `#[gpu_rpc(attr)] item`. On error, also returns what to emit in place
/// of the item (the trait without helper attributes, when there is one).
pub fn parse_service(attr: TokenStream, item: TokenStream) -> Result<Service, (Option<TokenStream>, syn::Error)> {
    let mut errors = Errors::default();

    let mut namespace = None;
    let mut standard_services = false;
    let attr_parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("__standard_services") {
            standard_services = true;
            Ok(())
        } else if meta.path.is_ident("namespace") {
            let lit: LitStr = meta.value()?.parse()?;
            if lit.value().is_empty() {
                return Err(syn::Error::new_spanned(
                    &lit,
                    "gpu_rpc: the namespace must not be empty",
                ));
            }
            namespace = Some(lit);
            Ok(())
        } else {
            Err(meta.error(
                "gpu_rpc: unknown option on the trait; expected `namespace = \"...\"` (method options `async`, `parallel` and `opcode = N` go on methods)",
            ))
        }
    });
    if let Err(e) = syn::parse::Parser::parse2(attr_parser, attr) {
        errors.push(e);
    }

    let mut item: ItemTrait = match syn::parse2(item.clone()) {
        Ok(t) => t,
        Err(_) => {
            let e = syn::Error::new_spanned(
                first_tokens(&item),
                "gpu_rpc: #[gpu_rpc] goes on a trait (`#[gpu_rpc] pub trait HostServices { ... }`)",
            );
            return Err((Some(item), e));
        }
    };

    check_trait_header(&item, &mut errors);

    let mut methods = Vec::new();
    for ti in &mut item.items {
        match ti {
            TraitItem::Fn(f) => {
                if let Some(m) = parse_method(f, &mut errors) {
                    methods.push(m);
                }
            }
            TraitItem::Type(t) => errors.at(
                t,
                "gpu_rpc: associated types are not supported: every argument and result needs a concrete wire type",
            ),
            TraitItem::Const(c) => errors.at(c, "gpu_rpc: associated constants are not supported in a #[gpu_rpc] trait"),
            TraitItem::Macro(m) => errors.at(
                m,
                "gpu_rpc: macro invocations are not supported in a #[gpu_rpc] trait (the attribute cannot see their expansion)",
            ),
            other => errors.at(other, "gpu_rpc: unsupported item in a #[gpu_rpc] trait"),
        }
    }

    let svc = Service {
        item,
        namespace,
        standard_services,
        methods,
    };
    match errors.finish() {
        Ok(()) => Ok(svc),
        Err(e) => Err((Some(svc.emit_trait()), e)),
    }
}

/// The first few tokens of an item (for an error span that is not the whole
/// item).
fn first_tokens(item: &TokenStream) -> TokenStream {
    // Up to the item's name: `pub struct X`, `fn f`, `impl Foo`.
    let mut out = TokenStream::new();
    let mut words = 0;
    for tt in item.clone() {
        if matches!(&tt, proc_macro2::TokenTree::Ident(i) if i != "pub" && i != "crate" && i != "unsafe") {
            words += 1;
        }
        out.extend([tt]);
        if words == 2 {
            break;
        }
    }
    out
}

fn check_trait_header(item: &ItemTrait, errors: &mut Errors) {
    if !item.generics.params.is_empty() {
        errors.at(
            &item.generics,
            "gpu_rpc: a #[gpu_rpc] trait cannot be generic: the device and the host must agree on concrete wire types",
        );
    }
    if let Some(w) = &item.generics.where_clause {
        errors.at(w, "gpu_rpc: where clauses are not supported on a #[gpu_rpc] trait");
    }
    if let Some(u) = &item.unsafety {
        errors.at(u, "gpu_rpc: a #[gpu_rpc] trait cannot be `unsafe`");
    }
    if let Some(a) = &item.auto_token {
        errors.at(a, "gpu_rpc: a #[gpu_rpc] trait cannot be an auto trait");
    }
    for bound in &item.supertraits {
        let ok = match bound {
            TypeParamBound::Trait(t) => {
                t.lifetimes.is_none()
                    && matches!(t.modifier, syn::TraitBoundModifier::None)
                    && t.path.segments.last().is_some_and(|s| {
                        (s.ident == "Send" || s.ident == "Sync") && matches!(s.arguments, syn::PathArguments::None)
                    })
            }
            TypeParamBound::Lifetime(l) => l.ident == "static",
            _ => false,
        };
        if !ok {
            errors.at(
                bound,
                "gpu_rpc: supertraits other than `Send`, `Sync` and `'static` are not supported: the client stub and server adapter cover only this trait's own methods",
            );
        }
    }
}

/// Take the `#[gpu_rpc(...)]` attributes off a method and parse it.
fn parse_method(f: &mut TraitItemFn, errors: &mut Errors) -> Option<Method> {
    let mut opts = MethodOptions::default();
    let mut docs = Vec::new();
    let mut deprecated = Vec::new();
    let mut keep = Vec::new();
    for attr in std::mem::take(&mut f.attrs) {
        if attr.path().is_ident("gpu_rpc") {
            parse_method_attr(&attr, &mut opts, errors);
            continue;
        }
        if attr.path().is_ident("doc") {
            docs.push(attr.clone());
        } else if attr.path().is_ident("deprecated") {
            deprecated.push(attr.clone());
        } else if attr.path().is_ident("cfg") || attr.path().is_ident("cfg_attr") {
            errors.at(
                &attr,
                "gpu_rpc: #[cfg] on a method is not supported: the device and the host must see the same methods",
            );
        }
        keep.push(attr);
    }
    f.attrs = keep;

    let MethodOptions {
        is_async,
        parallel,
        opcode: explicit_opcode,
    } = opts;
    let sig = &f.sig;
    let errors_before = errors.count;
    let bad = |errors: &mut Errors, tokens: &dyn ToTokens, msg: &str| errors.at(tokens, msg);
    if let Some(t) = &sig.constness {
        bad(errors, t, "gpu_rpc: a remote method cannot be `const`");
    }
    if let Some(t) = &sig.asyncness {
        bad(
            errors,
            t,
            "gpu_rpc: `async fn` is not supported; for a fire-and-forget call write a plain `fn` with #[gpu_rpc(async)]",
        );
    }
    if let Some(t) = &sig.unsafety {
        bad(errors, t, "gpu_rpc: a remote method cannot be `unsafe`");
    }
    if let Some(t) = &sig.abi {
        bad(errors, t, "gpu_rpc: a remote method cannot have an ABI");
    }
    if let Some(t) = &sig.variadic {
        bad(errors, t, "gpu_rpc: variadic methods are not supported");
    }
    if !sig.generics.params.is_empty() {
        bad(
            errors,
            &sig.generics,
            "gpu_rpc: a remote method cannot be generic: the device and the host must agree on concrete wire types",
        );
    }
    if let Some(w) = &sig.generics.where_clause {
        bad(errors, w, "gpu_rpc: where clauses are not supported on remote methods");
    }
    if let Some(b) = &f.default {
        bad(
            errors,
            b,
            "gpu_rpc: remote methods cannot have default bodies: the host implementation provides the body (remove it and end the declaration with `;`)",
        );
    }

    // Receiver.
    let mut inputs = sig.inputs.iter();
    match sig.inputs.first() {
        Some(FnArg::Receiver(r)) => {
            inputs.next();
            if r.colon_token.is_some() {
                bad(
                    errors,
                    r,
                    "gpu_rpc: remote methods take `&self` (typed receivers are not supported)",
                );
            } else if r.reference.is_none() {
                bad(
                    errors,
                    r,
                    "gpu_rpc: remote methods take `&self`, not `self` by value: the host implementation is shared by the server threads",
                );
            } else if r.mutability.is_some() {
                bad(
                    errors,
                    r,
                    "gpu_rpc: remote methods take `&self`, not `&mut self`: the host implementation is shared by the server threads; keep state behind a Mutex or atomics",
                );
            } else if let Some((_, Some(lt))) = &r.reference {
                bad(errors, lt, "gpu_rpc: remove the lifetime from `&self`");
            }
        }
        _ => {
            let at: &dyn ToTokens = match sig.inputs.first() {
                Some(first) => first,
                None => &sig.ident,
            };
            bad(
                errors,
                at,
                "gpu_rpc: remote methods must take `&self` as their first parameter (associated functions cannot be called remotely)",
            );
        }
    }

    // Arguments.
    let mut args = Vec::new();
    for (i, input) in inputs.enumerate() {
        let FnArg::Typed(pt) = input else { continue };
        let ident = match &*pt.pat {
            Pat::Ident(pi) if pi.by_ref.is_none() && pi.mutability.is_none() && pi.subpat.is_none() => pi.ident.clone(),
            _ => format_ident!("arg{}", i, span = Span::mixed_site()),
        };
        match classify_arg(&pt.ty) {
            Ok(kind) => args.push(Arg {
                ident,
                ty: (*pt.ty).clone(),
                kind,
            }),
            Err(e) => errors.push(e),
        }
    }

    // Return type.
    let ret = match &sig.output {
        ReturnType::Default => Ret::Unit,
        ReturnType::Type(_, ty) => match classify_ret(ty) {
            Ok(r) => r,
            Err(e) => {
                errors.push(e);
                Ret::Unit
            }
        },
    };

    // Fire-and-forget constraints.
    if is_async {
        match (&ret, &sig.output) {
            (Ret::Never, ReturnType::Type(_, ty)) => bad(
                errors,
                ty,
                "gpu_rpc: a #[gpu_rpc(async)] method cannot return `!`: the device does not wait for the host to run it (remove `async` to make the call synchronous)",
            ),
            (Ret::Value(_), ReturnType::Type(_, ty)) => bad(
                errors,
                ty,
                "gpu_rpc: a #[gpu_rpc(async)] method cannot return a value: the device does not wait for a reply",
            ),
            _ => {}
        }
        for a in &args {
            if let ArgKind::Out(_) = a.kind {
                bad(
                    errors,
                    &a.ty,
                    "gpu_rpc: a #[gpu_rpc(async)] method cannot have `&mut [T]` out-buffers: the device does not wait for a reply",
                );
            }
        }
    }

    // Lanes run in parallel only by a method that returns.
    if let (true, Ret::Never, ReturnType::Type(_, ty)) = (parallel, &ret, &sig.output) {
        bad(
            errors,
            ty,
            "gpu_rpc: a #[gpu_rpc(parallel)] method cannot return `!`: a lane that never returns would hold a host thread the other lanes wait for",
        );
    }

    (errors.count == errors_before).then(|| Method {
        name: sig.ident.unraw_string(),
        ident: sig.ident.clone(),
        docs,
        deprecated,
        args,
        ret,
        is_async,
        parallel,
        explicit_opcode,
        opcode: 0,
    })
}

trait Unraw {
    fn unraw_string(&self) -> String;
}

impl Unraw for Ident {
    fn unraw_string(&self) -> String {
        let s = self.to_string();
        s.strip_prefix("r#").map(str::to_string).unwrap_or(s)
    }
}

/// The options of one method's `#[gpu_rpc(...)]` attributes.
#[derive(Default)]
struct MethodOptions {
    /// `async`.
    is_async: bool,
    /// `parallel`.
    parallel: bool,
    /// `opcode = N`.
    opcode: Option<(u32, LitInt)>,
}

fn parse_method_attr(attr: &Attribute, opts: &mut MethodOptions, errors: &mut Errors) {
    let syn::Meta::List(list) = &attr.meta else {
        errors.at(
            attr,
            "gpu_rpc: expected `#[gpu_rpc(async)]`, `#[gpu_rpc(parallel)]` or `#[gpu_rpc(opcode = N)]` on a method",
        );
        return;
    };
    let r = list.parse_nested_meta(|meta| {
        if meta.path.is_ident("async") {
            if opts.is_async {
                return Err(meta.error("gpu_rpc: duplicate `async`"));
            }
            opts.is_async = true;
            Ok(())
        } else if meta.path.is_ident("parallel") {
            if opts.parallel {
                return Err(meta.error("gpu_rpc: duplicate `parallel`"));
            }
            opts.parallel = true;
            Ok(())
        } else if meta.path.is_ident("opcode") {
            let lit: LitInt = meta.value()?.parse()?;
            let v: u32 = lit.base10_parse().map_err(|_| {
                syn::Error::new_spanned(&lit, "gpu_rpc: the opcode must be a u32 in 0x1_0000..0x8000_0000")
            })?;
            if opts.opcode.is_some() {
                return Err(syn::Error::new_spanned(&lit, "gpu_rpc: duplicate `opcode`"));
            }
            opts.opcode = Some((v, lit));
            Ok(())
        } else {
            Err(meta.error("gpu_rpc: unknown method option; expected `async`, `parallel` or `opcode = N`"))
        }
    });
    if let Err(e) = r {
        errors.push(e);
    }
}

/// Strip invisible groups (types from `macro_rules!` fragments) and parens.
pub fn strip(ty: &Type) -> &Type {
    match ty {
        Type::Group(g) => strip(&g.elem),
        Type::Paren(p) => strip(&p.elem),
        t => t,
    }
}

fn check_lifetime(lt: Option<&syn::Lifetime>) -> syn::Result<()> {
    match lt {
        Some(l) if l.ident != "static" && l.ident != "_" => Err(syn::Error::new_spanned(
            l,
            "gpu_rpc: named lifetimes are not supported in remote methods; leave the lifetime out",
        )),
        _ => Ok(()),
    }
}

fn classify_arg(ty: &Type) -> syn::Result<ArgKind> {
    match strip(ty) {
        Type::Reference(r) => {
            check_lifetime(r.lifetime.as_ref())?;
            match strip(&r.elem) {
                Type::Path(p) if p.qself.is_none() && p.path.is_ident("str") => {
                    if r.mutability.is_some() {
                        Err(syn::Error::new_spanned(
                            ty,
                            "gpu_rpc: `&mut str` cannot be an out-buffer (the host could break UTF-8); use `&mut [u8]`",
                        ))
                    } else {
                        Ok(ArgKind::Str)
                    }
                }
                Type::Slice(s) => {
                    check_value(&s.elem, false)?;
                    Ok(if r.mutability.is_some() {
                        ArgKind::Out((*s.elem).clone())
                    } else {
                        ArgKind::Slice((*s.elem).clone())
                    })
                }
                _ => Err(syn::Error::new_spanned(
                    ty,
                    "gpu_rpc: references cannot cross between device and host, except `&str`, `&[T]` (streamed inputs) and `&mut [T]` (out-buffers); pass the value itself",
                )),
            }
        }
        _ => {
            check_value(ty, false)?;
            Ok(ArgKind::Value)
        }
    }
}

fn classify_ret(ty: &Type) -> syn::Result<Ret> {
    match strip(ty) {
        Type::Never(_) => Ok(Ret::Never),
        Type::Tuple(t) if t.elems.is_empty() => Ok(Ret::Unit),
        _ => {
            check_value(ty, true)?;
            Ok(Ret::Value(Box::new(ty.clone())))
        }
    }
}

/// Reject what can never be a `Wire` value, with a hint; anything else is left
/// to the `Wire` bound.
fn check_value(ty: &Type, is_ret: bool) -> syn::Result<()> {
    let err = |msg: &str| Err(syn::Error::new_spanned(ty, msg));
    match strip(ty) {
        Type::Reference(_) if is_ret => err(
            "gpu_rpc: a remote method cannot return a reference: return a value, or fill a `&mut [T]` out-buffer argument",
        ),
        Type::Reference(_) => err(
            "gpu_rpc: references cannot be nested inside values; only top-level `&str`, `&[T]` and `&mut [T]` arguments are supported",
        ),
        Type::Ptr(_) => err("gpu_rpc: raw pointers cannot cross between device and host (the address spaces differ)"),
        Type::ImplTrait(_) => err("gpu_rpc: `impl Trait` is not supported in remote methods; use a concrete `Wire` type"),
        Type::TraitObject(_) => err("gpu_rpc: trait objects cannot cross between device and host"),
        Type::BareFn(_) => err("gpu_rpc: function pointers cannot cross between device and host"),
        Type::Slice(_) => err("gpu_rpc: unsized slices cannot cross by value; use `&[T]` or `&mut [T]`"),
        Type::Never(_) => err("gpu_rpc: `!` is only allowed as the whole return type"),
        Type::Infer(_) => err("gpu_rpc: write the type out"),
        Type::Array(a) => check_value(&a.elem, is_ret),
        Type::Tuple(t) => t.elems.iter().try_for_each(|e| check_value(e, is_ret)),
        Type::Path(p) => {
            if let Some(q) = &p.qself {
                return check_value(&q.ty, is_ret);
            }
            if p.path.is_ident("Self") {
                return err("gpu_rpc: `Self` cannot cross between device and host; use a concrete `Wire` type");
            }
            if p.path.is_ident("str") {
                return err("gpu_rpc: `str` cannot cross by value; use `&str`");
            }
            let Some(last) = p.path.segments.last() else { return Ok(()) };
            let name = last.ident.to_string();
            match name.as_str() {
                "String" if !is_ret => return err("gpu_rpc: `String` cannot cross (it allocates); use `&str`"),
                "String" => {
                    return err("gpu_rpc: `String` cannot be returned (it allocates); fill a `&mut [u8]` out-buffer argument and return the length")
                }
                "Vec" if !is_ret => {
                    return err("gpu_rpc: `Vec<T>` cannot cross (it allocates); use `&[T]` for input or `&mut [T]` for an out-buffer")
                }
                "Vec" => return err("gpu_rpc: `Vec<T>` cannot be returned (it allocates); fill a `&mut [T]` out-buffer argument"),
                "Box" if !is_ret => return err("gpu_rpc: `Box<T>` cannot cross (it allocates); pass the value itself"),
                "Box" => return err("gpu_rpc: `Box<T>` cannot be returned (it allocates); return the value itself"),
                _ => {}
            }
            for seg in &p.path.segments {
                if let syn::PathArguments::AngleBracketed(ab) = &seg.arguments {
                    for ga in &ab.args {
                        if let syn::GenericArgument::Type(t) = ga {
                            check_value(t, is_ret)?;
                        }
                    }
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

impl Method {
    /// Upper-case name for the method's constants.
    pub fn const_ident(&self) -> Ident {
        format_ident!("{}", self.name.to_uppercase(), span = self.ident.span())
    }
}
