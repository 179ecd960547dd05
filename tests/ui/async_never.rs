use gpu_rpc::gpu_rpc;

#[gpu_rpc]
pub trait Svc {
    #[gpu_rpc(async)]
    fn quit(&self, code: i32) -> !;
}

fn main() {}
