//! `#[export]`: how rmca's MPI C library exports a function under both of the names the
//! standard gives it.
//!
//! MPI's profiling interface lets a program (or a tool such as mpiP or Score-P) define its own
//! `MPI_Send` that calls `PMPI_Send`. In a shared library the program's definition of
//! `MPI_Send` interposes on the library's, so the library's `PMPI_Send` must not reach the
//! implementation through the symbol `MPI_Send` (that would call the program's function back).
//! The attribute therefore keeps the implementation as an ordinary, unexported Rust function
//! and adds two exported entry points, `MPI_X` and `PMPI_X`, that call it directly (a tail
//! jump in practice). The per-message calls (`PER_MESSAGE`: `MPI_Send`, `MPI_Recv`, ...)
//! instead get entry points holding a copy of the body (merged into one function by the
//! compiler), which saves the jump (and, for seven parameters, a call and a return).
//!
//! Each entry point is also where a thread enters MPI: below `MPI_THREAD_SERIALIZED` (one
//! relaxed load) and for the thread that owns the library's state, it jumps to the
//! implementation; any other call goes through `crate::state::entered`, which takes the
//! process lock at `MPI_THREAD_MULTIPLE` (see the crate's `state` module).
//!
//! ```ignore
//! #[export]
//! pub unsafe extern "C" fn MPI_Send(buf: *const c_void, count: c_int, /* ... */) -> c_int {
//!     /* ... */
//! }
//! ```

use proc_macro::TokenStream;
use quote::{format_ident, quote};
use syn::{parse_macro_input, spanned::Spanned, FnArg, ItemFn};

/// Export an `MPI_*` function as `MPI_*` and `PMPI_*`. See the crate documentation.
#[proc_macro_attribute]
pub fn export(attr: TokenStream, item: TokenStream) -> TokenStream {
    if !attr.is_empty() {
        return syn::Error::new(
            proc_macro2::TokenStream::from(attr).span(),
            "#[export] takes no arguments",
        )
        .to_compile_error()
        .into();
    }
    let func = parse_macro_input!(item as ItemFn);
    match expand(func) {
        Ok(t) => t.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

fn expand(func: ItemFn) -> syn::Result<proc_macro2::TokenStream> {
    let name = func.sig.ident.clone();
    let text = name.to_string();
    if !text.starts_with("MPI_") {
        return Err(syn::Error::new(
            name.span(),
            "#[export] is for MPI functions: the name must start with MPI_",
        ));
    }
    let abi_is_c = func
        .sig
        .abi
        .as_ref()
        .and_then(|a| a.name.as_ref())
        .is_some_and(|n| n.value() == "C");
    if !abi_is_c {
        return Err(syn::Error::new(
            func.sig.span(),
            "#[export] functions are `extern \"C\"`",
        ));
    }
    if let Some(a) = func
        .attrs
        .iter()
        .find(|a| a.path().is_ident("no_mangle") || a.path().is_ident("export_name"))
    {
        return Err(syn::Error::new(
            a.span(),
            "#[export] chooses the symbol names: remove #[no_mangle] / #[export_name]",
        ));
    }
    // The entry points take the implementation's parameter types under fresh names (the
    // implementation may use patterns such as `_`).
    let mut params = Vec::new();
    let mut args = Vec::new();
    for (i, input) in func.sig.inputs.iter().enumerate() {
        match input {
            FnArg::Typed(pt) => {
                let arg = format_ident!("a{}", i);
                let ty = &pt.ty;
                params.push(quote! { #arg: #ty });
                args.push(arg);
            }
            FnArg::Receiver(r) => {
                return Err(syn::Error::new(r.span(), "an MPI function has no `self`"))
            }
        }
    }
    if func.sig.variadic.is_some() {
        return Err(syn::Error::new(
            func.sig.span(),
            "declare a variadic MPI function without its `...` (the implementation ignores the variable arguments)",
        ));
    }
    let output = &func.sig.output;
    let unsafety = &func.sig.unsafety;
    let call = if unsafety.is_some() {
        quote! {
            // SAFETY: the caller's contract is the implementation's (the same MPI function).
            unsafe { #name(#(#args),*) }
        }
    } else {
        quote! { #name(#(#args),*) }
    };
    let unsafe_block_entering = if unsafety.is_some() {
        quote! {
            // SAFETY: as above.
            unsafe { entering(#(#args),*) }
        }
    } else {
        quote! { entering(#(#args),*) }
    };
    let mpi = text.clone();
    let pmpi = format!("P{text}");
    let doc_mpi = format!("`{mpi}` (exported entry point).");
    let doc_pmpi = format!("`{pmpi}`: the profiling interface's name of `{mpi}`.");
    if PER_MESSAGE.contains(&text.as_str()) {
        return Ok(expand_inline(
            &func, &params, &args, &mpi, &pmpi, &doc_mpi, &doc_pmpi,
        ));
    }
    // The implementation stays one function (not inlined into both entry points): its code
    // is laid out as it was when it was the exported symbol, and each entry is a check and a
    // tail jump (to it, or to the out-of-line `entering` of the threads that must enter).
    Ok(quote! {
        #func

        const _: () = {
            // `extern "C"` like the entries, so that theirs is a tail jump too; the thread
            // check (a call to pthread_self) stays out of the entries: its saving of the
            // argument registers would cost every call.
            #[cold]
            #[inline(never)]
            #unsafety extern "C" fn entering(#(#params),*) #output {
                if crate::state::owned() {
                    return #call;
                }
                crate::state::entered(|| #call)
            }
            #[doc = #doc_mpi]
            #[export_name = #mpi]
            pub #unsafety extern "C" fn entry(#(#params),*) #output {
                if crate::state::entry_is_direct() {
                    #call
                } else {
                    #unsafe_block_entering
                }
            }
            #[doc = #doc_pmpi]
            #[export_name = #pmpi]
            pub #unsafety extern "C" fn profiling_entry(#(#params),*) #output {
                if crate::state::entry_is_direct() {
                    #call
                } else {
                    #unsafe_block_entering
                }
            }
        };
    })
}

/// The calls of the per-message loops (latency, message rate, windows of requests), whose
/// entry points hold a copy of the implementation ([`expand_inline`]) instead of jumping to
/// it: a jump through the GOT costs two instructions, and for a function with more than six
/// parameters (the seventh is on the stack) the compiler made the entry a call instead of a
/// tail jump, which cost ten per call (bench/instructions.sh, the blocking loop).
const PER_MESSAGE: &[&str] = &[
    "MPI_Send",
    "MPI_Recv",
    "MPI_Isend",
    "MPI_Irecv",
    "MPI_Wait",
    "MPI_Waitall",
    "MPI_Test",
];

/// The [`PER_MESSAGE`] calls that a thread which finds the process lock held may queue for
/// its holder instead of waiting (MPICH's "handoff" model; the crate's `handoff` module): the
/// MPI name and the module's function taking the call's arguments and its locked path.
const HANDOFF: &[(&str, &str)] = &[("MPI_Isend", "isend"), ("MPI_Irecv", "irecv")];

/// The entry points of a [`PER_MESSAGE`] function: each checks the thread (one relaxed load
/// below `MPI_THREAD_SERIALIZED`; above, whether this thread owns the state, an inline read
/// of the thread pointer) and runs a copy of the implementation's body; a thread that must
/// enter goes out of line to `entering`, which enters and calls the implementation. The two
/// entries are identical, so the compiler's function merging makes one an alias of the
/// other (one copy in the library). The implementation stays for the crate's own callers.
fn expand_inline(
    func: &ItemFn,
    params: &[proc_macro2::TokenStream],
    args: &[proc_macro2::Ident],
    mpi: &str,
    pmpi: &str,
    doc_mpi: &str,
    doc_pmpi: &str,
) -> proc_macro2::TokenStream {
    let name = &func.sig.ident;
    let unsafety = &func.sig.unsafety;
    let output = &func.sig.output;
    let block = &func.block;
    // The implementation's own parameter patterns, bound from the entry's arguments.
    let binds = func
        .sig
        .inputs
        .iter()
        .zip(args)
        .map(|(input, arg)| match input {
            FnArg::Typed(pt) => {
                let pat = &pt.pat;
                let ty = &pt.ty;
                quote! { let #pat: #ty = #arg; }
            }
            FnArg::Receiver(_) => unreachable!("refused by expand"),
        });
    let binds: Vec<_> = binds.collect();
    let attrs: Vec<_> = func
        .attrs
        .iter()
        .filter(|a| !a.path().is_ident("doc") && !a.path().is_ident("inline"))
        .collect();
    let call = if unsafety.is_some() {
        quote! {
            // SAFETY: the caller's contract is the implementation's (the same MPI function).
            unsafe { #name(#(#args),*) }
        }
    } else {
        quote! { #name(#(#args),*) }
    };
    let to_entering = if unsafety.is_some() {
        quote! {
            // SAFETY: as above.
            unsafe { entering(#(#args),*) }
        }
    } else {
        quote! { entering(#(#args),*) }
    };
    let entry = |export: &str, doc: &str, ident: proc_macro2::Ident| {
        quote! {
            #[doc = #doc]
            #[export_name = #export]
            #(#attrs)*
            pub #unsafety extern "C" fn #ident(#(#params),*) #output {
                if !crate::state::entry_is_direct() && !crate::state::owned() {
                    return #to_entering;
                }
                #(#binds)*
                #block
            }
        }
    };
    let e1 = entry(mpi, doc_mpi, format_ident!("entry"));
    let e2 = entry(pmpi, doc_pmpi, format_ident!("profiling_entry"));
    // A call of HANDOFF goes through the crate's `handoff` module, which may queue it instead
    // of waiting for the process lock (MPI_THREAD_MULTIPLE only: `entering` is not reached
    // below SERIALIZED, nor by the thread that owns the state).
    let enter = match HANDOFF.iter().find(|(m, _)| *m == mpi) {
        Some((_, h)) => {
            let h = format_ident!("{}", h);
            quote! {
                // SAFETY: the caller's contract is the MPI function's, which `handoff` keeps.
                unsafe { crate::handoff::#h(#(#args,)* move || #call) }
            }
        }
        None => quote! { crate::state::entered(|| #call) },
    };
    quote! {
        #func

        const _: () = {
            #[cold]
            #[inline(never)]
            #unsafety extern "C" fn entering(#(#params),*) #output {
                #enter
            }
            #e1
            #e2
        };
    }
}
