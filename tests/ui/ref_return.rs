use gpu_rpc::gpu_rpc;

#[gpu_rpc]
pub trait Svc {
    fn name(&self) -> &'static str;
    fn data(&self) -> Vec<u8>;
    fn text(&self) -> String;
}

fn main() {}
