use gpu_rpc::gpu_rpc;

#[gpu_rpc]
pub trait Svc {
    #[gpu_rpc(opcode = 0x1)]
    fn runtime_range(&self);
    #[gpu_rpc(opcode = 0x8000_0001)]
    fn hashed_range(&self);
}

fn main() {}
