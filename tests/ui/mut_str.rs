use gpu_rpc::gpu_rpc;

#[gpu_rpc]
pub trait Svc {
    fn upper(&self, s: &mut str);
}

fn main() {}
