use gpu_rpc::gpu_rpc;

// 0x1_0000..0x1_0100 belongs to gpu_rpc's standard services (`Std`).
#[gpu_rpc]
pub trait Svc {
    #[gpu_rpc(opcode = 0x1_0002)]
    fn looks_like_exit(&self);
    #[gpu_rpc(opcode = 0x1_0100)]
    fn first_free(&self);
}

fn main() {}
