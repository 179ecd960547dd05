use gpu_rpc::gpu_rpc;

#[gpu_rpc]
pub trait Svc {
    fn put(&self, rows: &[[u8; 100]]);
    fn units(&self, out: &mut [()]);
}

fn main() {}
