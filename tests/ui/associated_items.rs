use gpu_rpc::gpu_rpc;

#[gpu_rpc]
pub trait Svc {
    type Item;
    const LIMIT: u32;
    fn get(&self) -> u32;
}

fn main() {}
