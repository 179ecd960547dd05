use gpu_rpc::gpu_rpc;

#[gpu_rpc]
pub trait Svc {
    fn new(&self);
    fn get(&self) -> u32;
    fn try_get(&self) -> u32;
    fn opcodes(&self);
}

fn main() {}
