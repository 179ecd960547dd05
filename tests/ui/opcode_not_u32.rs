use gpu_rpc::gpu_rpc;

#[gpu_rpc]
pub trait Svc {
    #[gpu_rpc(opcode = 0x1_0000_0000)]
    fn too_big(&self);
}

fn main() {}
