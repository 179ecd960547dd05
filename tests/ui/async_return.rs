use gpu_rpc::gpu_rpc;

#[gpu_rpc]
pub trait Svc {
    #[gpu_rpc(async)]
    fn count(&self) -> u32;
    #[gpu_rpc(async)]
    fn fill(&self, out: &mut [u8]);
}

fn main() {}
