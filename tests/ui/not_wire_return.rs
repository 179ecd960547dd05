use gpu_rpc::gpu_rpc;

pub struct NotWire;

#[gpu_rpc]
pub trait Svc {
    fn get(&self) -> NotWire;
}

fn main() {}
