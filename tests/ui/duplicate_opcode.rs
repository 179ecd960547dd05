use gpu_rpc::gpu_rpc;

#[gpu_rpc]
pub trait Svc {
    #[gpu_rpc(opcode = 0x20000)]
    fn first(&self);
    #[gpu_rpc(opcode = 0x2_0000)]
    fn second(&self);
}

fn main() {}
