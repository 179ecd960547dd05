use gpu_rpc::gpu_rpc;

#[gpu_rpc]
pub trait Svc {
    #[allow(clippy::too_many_arguments)]
    fn many(&self, a: &str, b: &[u8], c: &str, d: &[u16], e: &str, f: &[u32], g: &str, h: &[u8]);
}

fn main() {}
