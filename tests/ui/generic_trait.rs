use gpu_rpc::gpu_rpc;

#[gpu_rpc]
pub trait Svc<T> {
    fn get(&self, x: u32) -> u32;
}

fn main() {}
