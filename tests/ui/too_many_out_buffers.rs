use gpu_rpc::gpu_rpc;

#[gpu_rpc]
pub trait Svc {
    #[allow(clippy::too_many_arguments)]
    fn many(
        &self,
        a: &mut [u8],
        b: &mut [u8],
        c: &mut [u8],
        d: &mut [u8],
        e: &mut [u8],
        f: &mut [u8],
        g: &mut [u8],
        h: &mut [u8],
    );
}

fn main() {}
