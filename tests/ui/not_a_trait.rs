use gpu_rpc::gpu_rpc;

#[gpu_rpc]
pub struct X;

fn main() {}
