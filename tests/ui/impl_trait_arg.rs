use gpu_rpc::gpu_rpc;

#[gpu_rpc]
pub trait Svc {
    fn each(&self, f: impl Fn(u32) -> u32);
}

fn main() {}
