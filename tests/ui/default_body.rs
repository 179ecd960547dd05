use gpu_rpc::gpu_rpc;

#[gpu_rpc]
pub trait Svc {
    fn get(&self) -> u32 {
        42
    }
}

fn main() {}
