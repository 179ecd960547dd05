//! The current client of the standard services on the device: [`init`] stores
//! the kernel's descriptor, [`with_client`] binds a CPU-backend client, and
//! [`with_std`] / [`try_with_std`] run a [`StdClient`] over whichever is bound.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::StdClient;
use crate::protocol::{Client, ClientDesc};

/// The descriptor stored by [`init`]; `SHARED == 0` means "none".
static SHARED: AtomicU64 = AtomicU64::new(0);
static LOCKS: AtomicU64 = AtomicU64::new(0);
static PORT_COUNT: AtomicU32 = AtomicU32::new(0);
static LANE_SIZE: AtomicU32 = AtomicU32::new(0);

/// Store the kernel's client descriptor so that the print macros and the
/// functions of this module can reach the host.
///
/// Every thread of a kernel calls it first, with the same value (the kernel
/// parameter): it is cheap (four atomic loads when the value is already
/// stored) and safe to call concurrently. One descriptor per program: a later
/// `init` with another descriptor replaces it for every thread.
///
/// ```no_run
/// use gpu_rpc::protocol::ClientDesc;
///
/// // In a kernel crate: `#[no_mangle] pub unsafe extern "ptx-kernel" fn my_kernel(..)`.
/// pub unsafe fn my_kernel(desc: ClientDesc) {
///     // SAFETY: the descriptor the host passed to this kernel.
///     unsafe { gpu_rpc::services::init(&desc) };
///     gpu_rpc::gpu_println!("hello");
/// }
/// ```
///
/// # Safety
/// `desc` must describe a live region and lock array for as long as the
/// kernel runs (the descriptor the host passed to the kernel does), and every
/// thread calling `init` concurrently must pass the same value.
pub unsafe fn init(desc: &ClientDesc) {
    // Relaxed everywhere: the descriptor's four words are plain values, each
    // thread reads what it (or, under the "same value" contract, another
    // thread) stored; no other memory is published through them. A thread
    // that finds any word different stores all of them, so after `init`
    // returns its own view is complete.
    let same = SHARED.load(Ordering::Relaxed) == desc.shared
        && LOCKS.load(Ordering::Relaxed) == desc.locks
        && PORT_COUNT.load(Ordering::Relaxed) == desc.port_count
        && LANE_SIZE.load(Ordering::Relaxed) == desc.lane_size;
    if !same {
        LOCKS.store(desc.locks, Ordering::Relaxed);
        PORT_COUNT.store(desc.port_count, Ordering::Relaxed);
        LANE_SIZE.store(desc.lane_size, Ordering::Relaxed);
        SHARED.store(desc.shared, Ordering::Relaxed);
    }
}

/// The descriptor stored by [`init`], if any.
///
/// ```
/// // Nothing stored yet in this doctest process.
/// assert_eq!(gpu_rpc::services::stored_desc(), None);
/// ```
pub fn stored_desc() -> Option<ClientDesc> {
    // Relaxed: see `init`.
    let shared = SHARED.load(Ordering::Relaxed);
    (shared != 0).then(|| ClientDesc {
        shared,
        locks: LOCKS.load(Ordering::Relaxed),
        port_count: PORT_COUNT.load(Ordering::Relaxed),
        lane_size: LANE_SIZE.load(Ordering::Relaxed),
    })
}

#[cfg(feature = "std")]
std::thread_local! {
    /// The client bound by `with_client` on this host thread (null: none).
    static BOUND: core::cell::Cell<*const Client<'static>> = const { core::cell::Cell::new(core::ptr::null()) };
}

/// Run `f` with `client` as this host thread's client for the print macros
/// and the functions of this module: what a CPU-backend "kernel" does instead
/// of [`init`] (whose descriptor cannot describe a CPU region). Nests; the
/// previous binding is restored when `f` returns or unwinds.
///
/// ```
/// use gpu_rpc::cpu::{self, Launch};
/// use gpu_rpc::server::{Dispatcher, ServerConfig};
/// use gpu_rpc::services::{self, StdHost, StdHostConfig, StdServer};
///
/// let (config, out, _) = StdHostConfig::default().capture();
/// let mut d = Dispatcher::new(ServerConfig::default());
/// d.add(StdServer(StdHost::new(config))).unwrap();
/// cpu::launch(&Launch { threads: 1, ..Launch::default() }, &d, |client, _| {
///     services::with_client(client, || gpu_rpc::gpu_print!("{}+{}={}", 1, 2, 1 + 2));
/// })
/// .unwrap();
/// assert_eq!(out.text(), "1+2=3");
/// ```
#[cfg(feature = "std")]
pub fn with_client<R>(client: &Client<'_>, f: impl FnOnce() -> R) -> R {
    struct Restore(*const Client<'static>);
    impl Drop for Restore {
        fn drop(&mut self) {
            BOUND.with(|b| b.set(self.0));
        }
    }
    let erased = (client as *const Client<'_>).cast::<Client<'static>>();
    let _restore = Restore(BOUND.with(|b| b.replace(erased)));
    f()
}

/// Run `f` with the current client: the one bound by [`with_client`] on this
/// host thread, else the one [`init`] stored. `None` if there is neither.
fn with_current<R>(f: impl FnOnce(&Client<'_>) -> R) -> Option<R> {
    #[cfg(feature = "std")]
    {
        let bound = BOUND.with(|b| b.get());
        if !bound.is_null() {
            // SAFETY: `with_client` bound this pointer to a client that lives
            // until its guard unbinds it, which happens after this call (we
            // are inside `f` of `with_client` on the same thread). The
            // lifetime was erased; `f` cannot keep the reference (it is
            // higher-ranked over both lifetimes).
            return Some(f(unsafe { &*bound }));
        }
    }
    let desc = stored_desc()?;
    // SAFETY: `init`'s contract: the stored descriptor describes a live region
    // and lock array for as long as the kernel runs. `try_from_desc`, not
    // `from_desc`: this path must not panic (the panic handler takes it).
    let client = unsafe { Client::try_from_desc(&desc) }?;
    Some(f(&client))
}

/// Run `f` with a [`StdClient`] over the current client, or return `None` if
/// no client is bound ([`init`], [`with_client`]).
///
/// ```
/// assert!(gpu_rpc::services::try_with_std(|s| s.time_ns()).is_none());
/// ```
pub fn try_with_std<R>(f: impl FnOnce(StdClient<'_, '_>) -> R) -> Option<R> {
    with_current(|c| f(StdClient::new(c)))
}

/// Run `f` with a [`StdClient`] over the current client; panics if none is
/// bound ([`init`], [`with_client`]).
///
/// ```should_panic
/// gpu_rpc::services::with_std(|s| s.time_ns()); // no client bound here
/// ```
pub fn with_std<R>(f: impl FnOnce(StdClient<'_, '_>) -> R) -> R {
    match try_with_std(f) {
        Some(r) => r,
        None => no_client(),
    }
}

#[cold]
#[inline(never)]
pub(super) fn no_client() -> ! {
    panic!("gpu_rpc::services: no client (call gpu_rpc::services::init(&desc) in the kernel, or with_client on the CPU backend)")
}
