use gpu_rpc::gpu_rpc;

#[gpu_rpc]
pub trait Svc {
    #[gpu_rpc(parallel)]
    fn quit(&self, code: i32) -> !;
    #[gpu_rpc(parallel, parallel)]
    fn twice(&self, x: u32) -> u32;
}

fn main() {}
