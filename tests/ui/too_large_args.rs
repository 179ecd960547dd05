use gpu_rpc::gpu_rpc;

#[gpu_rpc]
pub trait Svc {
    fn put(&self, small: u32, big: [u8; 5000]);
    fn get(&self) -> [u64; 600];
}

fn main() {}
