use gpu_rpc::gpu_rpc;

// fnv1a("Svc::m188904") | 0x8000_0000 == fnv1a("Svc::m558220") | 0x8000_0000
#[gpu_rpc]
pub trait Svc {
    fn m188904(&self);
    fn m558220(&self);
}

fn main() {}
