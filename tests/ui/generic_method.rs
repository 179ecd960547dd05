use gpu_rpc::gpu_rpc;

#[gpu_rpc]
pub trait Svc {
    fn get<T: Copy>(&self, x: T) -> u32;
}

fn main() {}
