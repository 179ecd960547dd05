//! `#[derive(Wire)]` for `#[repr(C)]` structs.
//!
//! Fields are encoded back to back in declaration order (no padding is ever
//! read or written); `SIZE` is the sum of the field sizes and `SCHEMA` mixes
//! the struct's name with the field schemas. Generic structs get a `Wire`
//! bound on every field type.

use proc_macro2::{Literal, TokenStream};
use quote::quote;
use syn::{Data, DeriveInput, Fields, Index, Member};

/// Expand `#[derive(Wire)]`.
pub fn derive(input: TokenStream) -> syn::Result<TokenStream> {
    let input: DeriveInput = syn::parse2(input)?;
    let data = match &input.data {
        Data::Struct(s) => s,
        Data::Enum(e) => {
            return Err(syn::Error::new_spanned(
                e.enum_token,
                "gpu_rpc: #[derive(Wire)] supports structs only; for an enum, pass its discriminant (e.g. a u32) and convert on both sides",
            ))
        }
        Data::Union(u) => {
            return Err(syn::Error::new_spanned(
                u.union_token,
                "gpu_rpc: #[derive(Wire)] supports structs only: a union has no field to encode safely",
            ))
        }
    };
    if !has_repr_c(&input)? {
        return Err(syn::Error::new_spanned(
            &input.ident,
            format!(
                "gpu_rpc: #[derive(Wire)] requires #[repr(C)] on `{0}` (add `#[repr(C)]` above `struct {0}`), so that the type has the same field order on the device and the host",
                input.ident
            ),
        ));
    }

    let ident = &input.ident;
    let name = ident.to_string();
    let name = name.trim_start_matches("r#");

    let mut generics = input.generics.clone();
    let fields: Vec<_> = data.fields.iter().collect();
    if !generics.params.is_empty() {
        let wc = generics.make_where_clause();
        for f in &fields {
            let ty = &f.ty;
            wc.predicates.push(syn::parse_quote!(#ty: ::gpu_rpc::__private::Wire));
        }
    }
    let (impl_g, ty_g, where_c) = generics.split_for_impl();

    let members: Vec<Member> = fields
        .iter()
        .enumerate()
        .map(|(i, f)| match &f.ident {
            Some(id) => Member::Named(id.clone()),
            None => Member::Unnamed(Index::from(i)),
        })
        .collect();
    let sizes: Vec<TokenStream> = fields
        .iter()
        .map(|f| {
            let ty = &f.ty;
            quote!(<#ty as ::gpu_rpc::__private::Wire>::SIZE)
        })
        .collect();
    let schemas = fields.iter().map(|f| {
        let ty = &f.ty;
        quote!(let h = ::gpu_rpc::__private::mix(h, <#ty as ::gpu_rpc::__private::Wire>::SCHEMA);)
    });

    // Byte range of field k: [start_k, end_k), as const expressions without
    // `0 +` terms.
    let mut ranges = Vec::new();
    for k in 0..fields.len() {
        let prev = &sizes[..k];
        let this = &sizes[k];
        let range = if prev.is_empty() {
            quote!(..#this)
        } else {
            quote!(#(#prev)+* .. #(#prev)+* + #this)
        };
        ranges.push(range);
    }
    let size = if sizes.is_empty() {
        quote!(0)
    } else {
        quote!(#(#sizes)+*)
    };
    let field_count = Literal::u32_unsuffixed(fields.len() as u32);

    let tys: Vec<_> = fields.iter().map(|f| &f.ty).collect();
    let encode = members
        .iter()
        .zip(&ranges)
        .zip(&tys)
        .map(|((m, r), ty)| quote!(<#ty as ::gpu_rpc::__private::Wire>::encode(&self.#m, &mut out[#r]);));
    let decode = members
        .iter()
        .zip(&ranges)
        .zip(&tys)
        .map(|((m, r), ty)| quote!(#m: <#ty as ::gpu_rpc::__private::Wire>::decode(&bytes[#r])?));
    let zeroed = members
        .iter()
        .zip(&tys)
        .map(|(m, ty)| quote!(#m: <#ty as ::gpu_rpc::__private::Wire>::zeroed()));

    // `out` / `bytes` unused for a field-less struct.
    let (out, bytes) = if fields.is_empty() {
        (quote!(_out), quote!(_bytes))
    } else {
        (quote!(out), quote!(bytes))
    };
    let ctor = match &data.fields {
        Fields::Unit => quote!(#ident),
        _ => quote!(#ident { #(#decode),* }),
    };
    let zero_ctor = match &data.fields {
        Fields::Unit => quote!(#ident),
        _ => quote!(#ident { #(#zeroed),* }),
    };

    // The C++ form (see `gpu_rpc::cpp`): a struct of the same name and layout,
    // for non-generic structs with fields whose types have a C-layout C++ form.
    let cpp = if input.generics.params.is_empty() && !fields.is_empty() {
        let cpp_fields = members.iter().zip(&tys).map(|(m, ty)| {
            let cpp_name = match m {
                Member::Named(id) => id.to_string().trim_start_matches("r#").to_string(),
                Member::Unnamed(i) => format!("_{}", i.index),
            };
            quote! {
                ::gpu_rpc::__private::cpp::CppField {
                    name: #cpp_name,
                    ty: <#ty as ::gpu_rpc::__private::Wire>::CPP,
                    wire_size: <#ty as ::gpu_rpc::__private::Wire>::SIZE,
                    offset: ::gpu_rpc::__private::core::mem::offset_of!(#ident, #m),
                    mem_size: ::gpu_rpc::__private::core::mem::size_of::<#ty>(),
                    align: ::gpu_rpc::__private::core::mem::align_of::<#ty>(),
                }
            }
        });
        let laid_out = tys
            .iter()
            .map(|ty| quote!(::gpu_rpc::__private::cpp::has_c_layout(<#ty as ::gpu_rpc::__private::Wire>::CPP)));
        quote! {
            const CPP: ::gpu_rpc::__private::core::option::Option<::gpu_rpc::__private::cpp::CppType> =
                if #(#laid_out)&&* {
                    ::gpu_rpc::__private::core::option::Option::Some(::gpu_rpc::__private::cpp::CppType {
                        name: |w| w.write_str(#name),
                        declare: |d| ::gpu_rpc::__private::cpp::declare_struct(
                            d,
                            #name,
                            <#ident as ::gpu_rpc::__private::Wire>::SCHEMA,
                            ::gpu_rpc::__private::core::mem::size_of::<#ident>(),
                            &[#(#cpp_fields),*],
                        ),
                        c_layout: true,
                    })
                } else {
                    ::gpu_rpc::__private::core::option::Option::None
                };
        }
    } else {
        quote!()
    };

    Ok(quote! {
        impl #impl_g ::gpu_rpc::__private::Wire for #ident #ty_g #where_c {
            const SIZE: usize = #size;
            #cpp
            const SCHEMA: u32 = {
                let h = ::gpu_rpc::__private::fnv1a(::gpu_rpc::__private::SCHEMA_SEED, #name.as_bytes());
                let h = ::gpu_rpc::__private::mix(h, #field_count);
                #(#schemas)*
                h
            };
            #[inline(always)]
            fn encode(&self, #out: &mut [u8]) {
                #(#encode)*
            }
            #[inline(always)]
            fn decode(#bytes: &[u8]) -> ::gpu_rpc::__private::core::result::Result<Self, ::gpu_rpc::__private::WireError> {
                ::gpu_rpc::__private::core::result::Result::Ok(#ctor)
            }
            #[inline(always)]
            fn zeroed() -> Self {
                #zero_ctor
            }
        }
    })
}

/// Whether the item has `#[repr(C)]` (possibly with other hints, like
/// `#[repr(C, align(8))]`).
fn has_repr_c(input: &DeriveInput) -> syn::Result<bool> {
    let mut found = false;
    for attr in &input.attrs {
        if attr.path().is_ident("repr") {
            attr.parse_nested_meta(|meta| {
                if meta.path.is_ident("C") {
                    found = true;
                }
                // Skip `align(N)`, `packed(N)` arguments.
                if meta.input.peek(syn::token::Paren) {
                    let content;
                    syn::parenthesized!(content in meta.input);
                    let _: TokenStream = content.parse()?;
                }
                Ok(())
            })?;
        }
    }
    Ok(found)
}
