// A deprecated method: generated code does not warn (this file denies
// warnings), a caller of the stub is warned as a caller of the trait is.
#![deny(warnings)]

use gpu_rpc::gpu_rpc;

#[gpu_rpc]
pub trait Svc {
    #[deprecated(note = "use `new_way`")]
    fn old_way(&self, x: u32) -> u32;
    fn new_way(&self, x: u32) -> u32;
}

pub struct Host;
impl Svc for Host {
    fn old_way(&self, x: u32) -> u32 {
        x
    }
    fn new_way(&self, x: u32) -> u32 {
        x
    }
}

#[allow(deprecated)]
pub fn caller_that_opts_in(c: &SvcClient<'_, '_>) -> u32 {
    c.old_way(1) + c.try_old_way(2).unwrap_or(0)
}

pub fn host() -> SvcServer<Host> {
    SvcServer(Host)
}

fn main() {}
