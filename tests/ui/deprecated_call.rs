// Calling a deprecated method through its client stub warns (denied here).
#![deny(deprecated)]

use gpu_rpc::gpu_rpc;

#[gpu_rpc]
pub trait Svc {
    #[deprecated(note = "use `new_way`")]
    fn old_way(&self, x: u32) -> u32;
}

pub fn caller(c: &SvcClient<'_, '_>) -> u32 {
    c.old_way(1)
}

fn main() {}
