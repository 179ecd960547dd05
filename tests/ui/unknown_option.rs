use gpu_rpc::gpu_rpc;

#[gpu_rpc(prefix = "x")]
pub trait Svc {
    #[gpu_rpc(oneway)]
    fn log(&self, msg: &str);
    #[gpu_rpc]
    fn bare(&self);
}

fn main() {}
